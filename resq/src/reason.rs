//! Reason codes: one name for one thing across code, archive keys, metrics and docs.

use std::fmt;

/// Why a message was archived to S3 instead of being queued again. Serialized as its code
/// (`REDRIVE_CAP`, …), as in archive keys, envelopes and summaries; an unknown code does not
/// deserialize.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(into = "&'static str", try_from = "String")]
pub enum ArchiveReason {
    /// `x-redrive-count` reached `MAX_REDRIVE_ATTEMPTS`.
    RedriveCap,
    /// `x-redrive-count` could not be read as a non-negative number.
    InvalidRedriveCount,
    /// Older than `ARCHIVE_AFTER_SECONDS`, measured from the producer's send.
    TtlExpired,
    /// A copy would carry more than the 10 message attributes SQS allows.
    AttributeLimit,
    /// A permanent failure archived by the redriver (`PERMANENT_ACTION=archive`).
    PermanentFailure,
    /// A copy would exceed SQS's maximum message size (body plus attributes).
    SizeLimit,
}

impl ArchiveReason {
    /// Every reason, in a stable order (for metrics and reports).
    pub const ALL: [ArchiveReason; 6] = [
        ArchiveReason::RedriveCap,
        ArchiveReason::InvalidRedriveCount,
        ArchiveReason::TtlExpired,
        ArchiveReason::AttributeLimit,
        ArchiveReason::PermanentFailure,
        ArchiveReason::SizeLimit,
    ];

    /// The machine code used in archive keys, envelopes, logs and metric dimensions.
    pub fn code(self) -> &'static str {
        match self {
            ArchiveReason::RedriveCap => "REDRIVE_CAP",
            ArchiveReason::InvalidRedriveCount => "INVALID_REDRIVE_COUNT",
            ArchiveReason::TtlExpired => "TTL_EXPIRED",
            ArchiveReason::AttributeLimit => "ATTRIBUTE_LIMIT",
            ArchiveReason::PermanentFailure => "PERMANENT_FAILURE",
            ArchiveReason::SizeLimit => "SIZE_LIMIT",
        }
    }

    /// Parses a code as written by [`ArchiveReason::code`].
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
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

impl fmt::Display for ArchiveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The codes of the failures resq itself reports: the `error_code` field of its log lines and,
/// for a record, the code of its transient failure. (A handler's own codes are its own.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The handler panicked (transient: the record is retried).
    HandlerPanic,
    /// A record that could not be decoded (it fails alone and is retried).
    RecordUnreadable,
    /// FIFO: an earlier record of the same group failed, so this one was not run.
    FifoGroupBlocked,
    /// The deadline margin was reached before the record started.
    DeadlineNotStarted,
    /// A record still ran at the deadline margin and was abandoned (transient).
    RecordTimeout,
    /// A permanent failure's DLQ copy was not confirmed (the record is retried).
    DlqSendFailed,
    /// An archive entry was not written (the message stays in its queue).
    ArchiveFailed,
    /// A DLQ copy or archive entry was not confirmed before the deadline margin.
    SettleDeadline,
    /// A backoff (visibility change) was refused.
    VisibilityChangeFailed,
    /// Backoffs were not confirmed before the deadline margin.
    VisibilityChangeDeadline,
    /// The redriver could not receive from the DLQ.
    ReceiveFailed,
    /// The keep list of earlier runs could not be read.
    KeepListUnreadable,
    /// The keep list was not written (kept messages are released, not hidden).
    KeepListFailed,
    /// Kept messages were not hidden before the deadline margin.
    KeepHideDeadline,
    /// A replay was not confirmed by SQS (the message stays in the DLQ).
    RedriveSendFailed,
    /// A moved message could not be deleted from the DLQ (it is seen again).
    DlqDeleteFailed,
    /// Deletes were not confirmed before the deadline margin.
    DlqDeleteDeadline,
}

impl ErrorCode {
    /// Every code, in a stable order.
    pub const ALL: [ErrorCode; 17] = [
        ErrorCode::HandlerPanic,
        ErrorCode::RecordUnreadable,
        ErrorCode::FifoGroupBlocked,
        ErrorCode::DeadlineNotStarted,
        ErrorCode::RecordTimeout,
        ErrorCode::DlqSendFailed,
        ErrorCode::ArchiveFailed,
        ErrorCode::SettleDeadline,
        ErrorCode::VisibilityChangeFailed,
        ErrorCode::VisibilityChangeDeadline,
        ErrorCode::ReceiveFailed,
        ErrorCode::KeepListUnreadable,
        ErrorCode::KeepListFailed,
        ErrorCode::KeepHideDeadline,
        ErrorCode::RedriveSendFailed,
        ErrorCode::DlqDeleteFailed,
        ErrorCode::DlqDeleteDeadline,
    ];

    /// The machine code written to logs.
    pub fn code(self) -> &'static str {
        match self {
            ErrorCode::HandlerPanic => "HANDLER_PANIC",
            ErrorCode::RecordUnreadable => "RECORD_UNREADABLE",
            ErrorCode::FifoGroupBlocked => "FIFO_GROUP_BLOCKED",
            ErrorCode::DeadlineNotStarted => "DEADLINE_NOT_STARTED",
            ErrorCode::RecordTimeout => "RECORD_TIMEOUT",
            ErrorCode::DlqSendFailed => "DLQ_SEND_FAILED",
            ErrorCode::ArchiveFailed => "ARCHIVE_FAILED",
            ErrorCode::SettleDeadline => "SETTLE_DEADLINE",
            ErrorCode::VisibilityChangeFailed => "VISIBILITY_CHANGE_FAILED",
            ErrorCode::VisibilityChangeDeadline => "VISIBILITY_CHANGE_DEADLINE",
            ErrorCode::ReceiveFailed => "RECEIVE_FAILED",
            ErrorCode::KeepListUnreadable => "KEEP_LIST_UNREADABLE",
            ErrorCode::KeepListFailed => "KEEP_LIST_FAILED",
            ErrorCode::KeepHideDeadline => "KEEP_HIDE_DEADLINE",
            ErrorCode::RedriveSendFailed => "REDRIVE_SEND_FAILED",
            ErrorCode::DlqDeleteFailed => "DLQ_DELETE_FAILED",
            ErrorCode::DlqDeleteDeadline => "DLQ_DELETE_DEADLINE",
        }
    }

    /// Parses a code as written by [`ErrorCode::code`].
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The failure reasons (`x-failure-reason`) resq itself writes. A handler's permanent
/// failures carry codes of its own, made sendable by [`failure_reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// A body that is not JSON, or no body.
    MalformedJson,
    /// JSON that breaks the message's rules.
    ValidationFailed,
    /// A permanent failure whose handler gave no code.
    Unspecified,
}

impl FailureReason {
    /// Every reason, in a stable order.
    pub const ALL: [FailureReason; 3] = [
        FailureReason::MalformedJson,
        FailureReason::ValidationFailed,
        FailureReason::Unspecified,
    ];

    /// The code written to `x-failure-reason`.
    pub fn code(self) -> &'static str {
        match self {
            FailureReason::MalformedJson => "MALFORMED_JSON",
            FailureReason::ValidationFailed => "VALIDATION_FAILED",
            FailureReason::Unspecified => "UNSPECIFIED",
        }
    }

    /// Parses a code as written by [`FailureReason::code`] (`None` for a handler's own code).
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}
/// The longest `x-failure-reason` resq writes, in characters.
pub const MAX_FAILURE_REASON_CHARS: usize = 128;

/// A failure code as it can travel in `x-failure-reason`. SQS rejects an empty attribute value
/// and characters outside its set (control characters other than tab, newline and carriage
/// return; U+FFFE and U+FFFF), so a copy carrying such a code could never be sent and the
/// message would fail every retry. Such characters become `_`, surrounding whitespace goes, the
/// code is cut at [`MAX_FAILURE_REASON_CHARS`], and an empty code becomes [`FailureReason::Unspecified`].
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
