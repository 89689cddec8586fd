//! Reason codes: one name for one thing across code, archive keys, metrics and docs.

use std::fmt;

/// Why a message was archived to S3 instead of being queued again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

impl fmt::Display for ArchiveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// `x-failure-reason` for a body that is not JSON.
pub const MALFORMED_JSON: &str = "MALFORMED_JSON";
/// `x-failure-reason` for JSON that is not a valid order.
pub const VALIDATION_FAILED: &str = "VALIDATION_FAILED";
/// `x-failure-reason` for a permanent failure whose handler gave no code.
pub const UNSPECIFIED: &str = "UNSPECIFIED";
/// The longest `x-failure-reason` resq writes, in characters.
pub const MAX_FAILURE_REASON_CHARS: usize = 128;

/// A failure code as it can travel in `x-failure-reason`. SQS rejects an empty attribute value
/// and characters outside its set (control characters other than tab, newline and carriage
/// return; U+FFFE and U+FFFF), so a copy carrying such a code could never be sent and the
/// message would fail every retry. Such characters become `_`, surrounding whitespace goes, the
/// code is cut at [`MAX_FAILURE_REASON_CHARS`], and an empty code becomes [`UNSPECIFIED`].
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
        UNSPECIFIED.to_owned()
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
    }

    #[test]
    fn failure_reasons_are_never_empty_and_always_sendable() {
        assert_eq!(failure_reason("ORDER_REJECTED"), "ORDER_REJECTED");
        assert_eq!(failure_reason(""), UNSPECIFIED);
        assert_eq!(failure_reason("  \t\n "), UNSPECIFIED);
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
