//! Reason codes: one name for one thing across code, archive keys, metrics and docs.

use std::fmt;

/// An enum of machine codes: the enum with its variants' codes, `ALL` (a stable order, for
/// metrics and reports), `code()` (what archive keys, envelopes, attributes, logs and metric
/// dimensions carry), `from_code()` (its inverse) and `Display` (the code). One definition
/// for every kind of code resq writes.
macro_rules! codes {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[doc = $doc:literal])* $variant:ident => $code:literal, )+
        }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $( $(#[doc = $doc])* $variant, )+
        }

        impl $name {
            /// Every value, in a stable order (for metrics and reports).
            pub const ALL: [$name; <[$name]>::len(&[$($name::$variant),+])] =
                [$($name::$variant),+];

            /// The machine code.
            pub fn code(self) -> &'static str {
                match self {
                    $($name::$variant => $code,)+
                }
            }

            /// Parses a code as written by `code()` (`None` for any other).
            pub fn from_code(code: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.code() == code)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.code())
            }
        }
    };
}

codes! {
    /// Why a message was archived to S3 instead of being queued again. Serialized as its code
    /// (`REDRIVE_CAP`, …), as in archive keys, envelopes and summaries; an unknown code does not
    /// deserialize.
    #[derive(
        Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
    )]
    #[serde(into = "&'static str", try_from = "String")]
    pub enum ArchiveReason {
        /// `x-redrive-count` reached `MAX_REDRIVE_ATTEMPTS`.
        RedriveCap => "REDRIVE_CAP",
        /// `x-redrive-count` could not be read as a non-negative number.
        InvalidRedriveCount => "INVALID_REDRIVE_COUNT",
        /// Older than `ARCHIVE_AFTER_SECONDS`, measured from the producer's send.
        TtlExpired => "TTL_EXPIRED",
        /// A copy would carry more than the 10 message attributes SQS allows.
        AttributeLimit => "ATTRIBUTE_LIMIT",
        /// A permanent failure archived by the redriver (`PERMANENT_ACTION=archive`, or past
        /// `KEPT_IN_FLIGHT_MAX`), or by the consumer when no DLQ copy can carry it (a record
        /// without a body: SQS takes no empty message).
        PermanentFailure => "PERMANENT_FAILURE",
        /// A copy would exceed SQS's maximum message size (body plus attributes).
        SizeLimit => "SIZE_LIMIT",
        /// First sent longer ago than `IDEMPOTENCY_WINDOW_SECONDS` (the order records'
        /// lifetime): its effect's idempotency key may be gone, so the consumer never runs it.
        IdempotencyWindow => "IDEMPOTENCY_WINDOW",
        /// A record the consumer could not read, with no body a DLQ copy could carry: the entry
        /// keeps the raw record.
        UnreadableRecord => "UNREADABLE_RECORD",
    }
}

impl From<ArchiveReason> for &'static str {
    fn from(r: ArchiveReason) -> Self {
        r.code()
    }
}

impl TryFrom<String> for ArchiveReason {
    type Error = String;

    fn try_from(code: String) -> Result<Self, Self::Error> {
        Self::from_code(&code).ok_or_else(|| {
            format!(
                "\"{code}\" is not an archive reason; one of {}",
                Self::ALL.map(Self::code).join(", ")
            )
        })
    }
}

codes! {
    /// The codes of the failures resq itself reports: the `error_code` field of its log lines
    /// and, for a record, the code of its transient failure. (A handler's own codes are its
    /// own.)
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ErrorCode {
        /// The handler panicked (transient: the record is retried).
        HandlerPanic => "HANDLER_PANIC",
        /// FIFO: an earlier record of the same group failed, so this one was not run.
        FifoGroupBlocked => "FIFO_GROUP_BLOCKED",
        /// The deadline margin was reached before the record started.
        DeadlineNotStarted => "DEADLINE_NOT_STARTED",
        /// A record still ran at the deadline margin and was abandoned (transient).
        RecordTimeout => "RECORD_TIMEOUT",
        /// A permanent failure's DLQ copy was not confirmed (the record is retried).
        DlqSendFailed => "DLQ_SEND_FAILED",
        /// An archive entry was not written (the message stays in its queue).
        ArchiveFailed => "ARCHIVE_FAILED",
        /// A DLQ copy or archive entry was not confirmed before the deadline margin.
        SettleDeadline => "SETTLE_DEADLINE",
        /// A backoff (visibility change) was refused.
        VisibilityChangeFailed => "VISIBILITY_CHANGE_FAILED",
        /// Backoffs were not confirmed before the deadline margin.
        VisibilityChangeDeadline => "VISIBILITY_CHANGE_DEADLINE",
        /// The redriver could not receive from the DLQ.
        ReceiveFailed => "RECEIVE_FAILED",
        /// The keep list of earlier runs could not be read.
        KeepListUnreadable => "KEEP_LIST_UNREADABLE",
        /// The keep list was not written (kept messages are released, not hidden).
        KeepListFailed => "KEEP_LIST_FAILED",
        /// Kept messages were not hidden before the deadline margin.
        KeepHideDeadline => "KEEP_HIDE_DEADLINE",
        /// A replay was not confirmed by SQS (the message stays in the DLQ).
        RedriveSendFailed => "REDRIVE_SEND_FAILED",
        /// A moved message could not be deleted from the DLQ (it is seen again).
        DlqDeleteFailed => "DLQ_DELETE_FAILED",
        /// Deletes were not confirmed before the deadline margin.
        DlqDeleteDeadline => "DLQ_DELETE_DEADLINE",
        /// The breaker could not read an alarm of `PAUSE_ON_ALARMS` (replay pauses).
        BreakerUnreadable => "BREAKER_UNREADABLE",
        /// The consumer's breaker could not pause, probe or resume the consumer's event
        /// source mapping (or record it): the next reading tries again.
        ConsumerBreakerFailed => "CONSUMER_BREAKER_FAILED",
        /// A main-queue redelivery over the consumer's retry budget (`RETRY_BUDGET_PERCENT`):
        /// not run, backed off the longest; on its last allowed receive, the
        /// `x-failure-reason` of its transient DLQ copy.
        RetryBudget => "RETRY_BUDGET",
        /// An extended-client pointer's payload could not be read (transient: retried, then
        /// dead-lettered with this reason).
        PayloadUnreadable => "PAYLOAD_UNREADABLE",
    }
}

codes! {
    /// The failure reasons (`x-failure-reason`) resq itself writes. A handler's permanent
    /// failures carry codes of its own, made sendable by [`failure_reason`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum FailureReason {
        /// A body that is not JSON, or no body.
        MalformedJson => "MALFORMED_JSON",
        /// JSON that breaks the message's rules.
        ValidationFailed => "VALIDATION_FAILED",
        /// A permanent failure whose handler gave no code.
        Unspecified => "UNSPECIFIED",
        /// A dead letter SQS moved without a reason (the invocations that received it crashed,
        /// timed out or were throttled until its receives were used up): the redriver writes
        /// this reason on it the first time it sees it.
        InvocationFailed => "INVOCATION_FAILED",
        /// A record the consumer could not read (an attribute that does not decode, a body that
        /// is not a string, a field of the wrong type): it can never succeed.
        UnreadableRecord => "UNREADABLE_RECORD",
        /// A different order (another `userId` or other `items`) under an `orderId` already
        /// recorded: acknowledging it as done would lose it.
        OrderIdConflict => "ORDER_ID_CONFLICT",
        /// An extended-client pointer that names no object: its payload is gone.
        PayloadNotFound => "PAYLOAD_NOT_FOUND",
        /// An extended-client pointer to a payload larger than resq reads
        /// (`resq::payload::MAX_PAYLOAD_BYTES`).
        PayloadTooLarge => "PAYLOAD_TOO_LARGE",
    }
}

/// The longest `x-failure-reason` resq writes, in characters.
pub(crate) const MAX_FAILURE_REASON_CHARS: usize = 128;

/// A failure code as it can travel in `x-failure-reason`. SQS rejects an empty attribute value
/// and characters outside its set (control characters other than tab, newline and carriage
/// return; U+FFFE and U+FFFF), so a copy carrying such a code could never be sent and the
/// message would fail every retry. Such characters become `_`, surrounding whitespace goes, the
/// code is cut at `MAX_FAILURE_REASON_CHARS`, and an empty code becomes [`FailureReason::Unspecified`].
pub fn failure_reason(code: &str) -> String {
    let cleaned: String = code
        .trim()
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => ' ',
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => '_',
            c => c,
        })
        .take(MAX_FAILURE_REASON_CHARS)
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() {
        FailureReason::Unspecified.code().to_owned()
    } else {
        cleaned.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for r in ArchiveReason::ALL {
            assert_eq!(ArchiveReason::from_code(r.code()), Some(r));
            assert_eq!(r.to_string(), r.code());
        }
        assert_eq!(ArchiveReason::from_code("NOPE"), None);
        for r in ArchiveReason::ALL {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.code()));
            assert_eq!(serde_json::from_str::<ArchiveReason>(&json).unwrap(), r);
        }
        assert!(serde_json::from_str::<ArchiveReason>("\"NOPE\"").is_err());
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c));
            assert_eq!(c.to_string(), c.code());
        }
        assert_eq!(ErrorCode::from_code("NOPE"), None);
        for r in FailureReason::ALL {
            assert_eq!(FailureReason::from_code(r.code()), Some(r));
            assert_eq!(r.to_string(), r.code());
        }
        assert_eq!(FailureReason::from_code("ORDER_REJECTED"), None);
    }

    #[test]
    fn failure_reasons_are_never_empty_and_always_sendable() {
        assert_eq!(failure_reason("ORDER_REJECTED"), "ORDER_REJECTED");
        assert_eq!(failure_reason(""), "UNSPECIFIED");
        assert_eq!(failure_reason("  \t\n "), "UNSPECIFIED");
        assert_eq!(failure_reason("\u{0}"), "_");
        assert_eq!(failure_reason(" BAD\u{7}CODE\u{ffff} "), "BAD_CODE_");
        assert_eq!(failure_reason("a\nb"), "a b");
        assert_eq!(failure_reason("ÜBER_LÄNGE"), "ÜBER_LÄNGE");
        assert_eq!(
            failure_reason(&"x".repeat(1000)).chars().count(),
            MAX_FAILURE_REASON_CHARS
        );
    }
}
