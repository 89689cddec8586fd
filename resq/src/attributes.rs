//! The message attribute contract (docs/design.md, "Attributes"): names, the neutral attribute value, redrive-count
//! parsing and building the attributes of a copy.

use std::collections::BTreeMap;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use serde::{Deserialize, Serialize};

use crate::reason::ArchiveReason;

/// Times this message was replayed from the DLQ (Number; absent = 0).
pub const X_REDRIVE_COUNT: &str = "x-redrive-count";
/// `permanent` when the consumer fast-tracked the message to the DLQ itself (String).
pub const X_FAILURE_CLASS: &str = "x-failure-class";
/// Machine code of the failure, e.g. `MALFORMED_JSON` (String).
pub const X_FAILURE_REASON: &str = "x-failure-reason";
/// Epoch millis of the producer's original send, carried across copies (Number).
pub const X_FIRST_SENT_AT: &str = "x-first-sent-at";
/// The value of `x-failure-class` for permanent failures.
pub const FAILURE_CLASS_PERMANENT: &str = "permanent";
/// `x-failure-class` of a transient failure dead-lettered with its reason.
pub const FAILURE_CLASS_TRANSIENT: &str = "transient";
/// SQS accepts at most this many message attributes per message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;

/// SQS's largest message: body plus attributes, 1 MiB. Also the largest batch.
pub const MAX_MESSAGE_BYTES: usize = 1_048_576;

/// The size SQS counts for a message: the body plus, per attribute, its name, data type and
/// value bytes.
pub fn message_size(body: &str, attrs: &MessageAttributes) -> usize {
    body.len()
        + attrs
            .iter()
            .map(|(name, v)| {
                name.len()
                    + v.data_type.len()
                    + v.string_value.as_ref().map_or(0, String::len)
                    + v.binary_value.as_ref().map_or(0, Vec::len)
            })
            .sum::<usize>()
}

/// One message attribute, independent of the SDK and the Lambda event types.
///
/// Only scalar values: SQS does not support list values, so they are dropped when copying.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttributeValue {
    /// `String`, `Number`, `Binary`, optionally with a custom suffix (`Number.int`).
    pub data_type: String,
    /// The value of `String` and `Number` attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_value: Option<String>,
    /// The value of `Binary` attributes (base64 in JSON).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "base64_opt")]
    pub binary_value: Option<Vec<u8>>,
}

/// Message attributes by name, in a stable order.
pub type MessageAttributes = BTreeMap<String, AttributeValue>;

impl AttributeValue {
    /// A `String` attribute.
    pub fn string(value: impl Into<String>) -> Self {
        Self {
            data_type: "String".into(),
            string_value: Some(value.into()),
            binary_value: None,
        }
    }

    /// A `Number` attribute.
    pub fn number(value: u64) -> Self {
        Self {
            data_type: "Number".into(),
            string_value: Some(value.to_string()),
            binary_value: None,
        }
    }

    /// From the SDK form (as returned by `ReceiveMessage`); `None` when it has no scalar value.
    pub(crate) fn from_sdk(attr: &MessageAttributeValue) -> Option<Self> {
        let string_value = attr.string_value().map(str::to_owned);
        let binary_value = attr.binary_value().map(|b| b.as_ref().to_vec());
        (string_value.is_some() || binary_value.is_some()).then(|| Self {
            data_type: attr.data_type().to_owned(),
            string_value,
            binary_value,
        })
    }

    /// To the SDK form, for `SendMessage` / `SendMessageBatch`.
    pub(crate) fn to_sdk(&self) -> Result<MessageAttributeValue, aws_sdk_sqs::error::BuildError> {
        MessageAttributeValue::builder()
            .data_type(&self.data_type)
            .set_string_value(self.string_value.clone())
            .set_binary_value(self.binary_value.clone().map(Blob::new))
            .build()
    }
}

/// The value of `x-redrive-count` as read from a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedriveCount {
    /// A readable count (absent = 0).
    Count(u32),
    /// Present but not a non-negative number: treated as over the cap.
    Invalid,
}

/// Reads `x-redrive-count`. Absent ⇒ 0. Surrounding ASCII whitespace is ignored; integers and
/// integral decimals (`3`, `3.0`, `3e0`) count; negative, fractional, non-finite, binary or
/// empty values are [`RedriveCount::Invalid`]. Counts beyond `u32` saturate (still over any cap).
pub fn parse_redrive_count(attrs: &MessageAttributes) -> RedriveCount {
    match attrs.get(X_REDRIVE_COUNT) {
        None => RedriveCount::Count(0),
        Some(v) => match (&v.string_value, &v.binary_value) {
            (Some(s), None) => parse_count_value(s),
            _ => RedriveCount::Invalid,
        },
    }
}

/// Parses one count value; see [`parse_redrive_count`].
pub fn parse_count_value(raw: &str) -> RedriveCount {
    let s = raw.trim_matches(|c: char| c.is_ascii_whitespace());
    if s.is_empty() || s.starts_with('-') {
        return RedriveCount::Invalid;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return RedriveCount::Count(
            s.parse::<u64>()
                .map_or(u32::MAX, |n| n.min(u32::MAX as u64) as u32),
        );
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 && f.fract() == 0.0 => {
            RedriveCount::Count(if f >= u32::MAX as f64 {
                u32::MAX
            } else {
                f as u32
            })
        }
        _ => RedriveCount::Invalid,
    }
}

/// The redrive cap as the consumer applies it (docs/design.md, "No loops"): `Some(reason)` when a delivered
/// copy must be archived without running. A copy carrying exactly `max_redrive_attempts` is the
/// last real replay and runs; only a count *past* the cap (which only a tool other than the
/// redriver can produce) or an unreadable one is archived.
pub fn cap_on_delivery(count: RedriveCount, max_redrive_attempts: u32) -> Option<ArchiveReason> {
    match count {
        RedriveCount::Invalid => Some(ArchiveReason::InvalidRedriveCount),
        RedriveCount::Count(n) if n > max_redrive_attempts => Some(ArchiveReason::RedriveCap),
        RedriveCount::Count(_) => None,
    }
}

/// The redrive cap as the redriver applies it (docs/design.md, "Classification"): `Some(reason)` when a DLQ
/// message must be archived instead of replayed. A count at the cap means the message already
/// had its last replay.
pub fn cap_on_replay(count: RedriveCount, max_redrive_attempts: u32) -> Option<ArchiveReason> {
    match count {
        RedriveCount::Invalid => Some(ArchiveReason::InvalidRedriveCount),
        RedriveCount::Count(n) if n >= max_redrive_attempts => Some(ArchiveReason::RedriveCap),
        RedriveCount::Count(_) => None,
    }
}

/// Epoch millis of the producer's send: the earlier of `x-first-sent-at` (when readable) and
/// the copy's `SentTimestamp` (`sent`, epoch millis). The earlier one, so that a TTL counted
/// from it always ends before the copy's own retention does, whatever a producer wrote into
/// the attribute.
pub fn first_sent_at(attrs: &MessageAttributes, sent: Option<u64>) -> Option<u64> {
    let carried = attrs
        .get(X_FIRST_SENT_AT)
        .and_then(|v| v.string_value.as_deref())
        .and_then(|s| s.trim().parse::<u64>().ok());
    match (carried, sent) {
        (Some(c), Some(s)) => Some(c.min(s)),
        (c, s) => c.or(s),
    }
}

/// A copy would carry more attributes than SQS allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a copy would carry {count} message attributes; SQS allows {MAX_MESSAGE_ATTRIBUTES}")]
pub struct AttributeLimitExceeded {
    /// How many attributes the copy would have had.
    pub count: usize,
}

/// The attributes of a copy: the original ones with `set` written over them (same name
/// replaces). Fails rather than truncating when the result exceeds 10 attributes.
pub fn copy_attributes(
    original: &MessageAttributes,
    set: impl IntoIterator<Item = (&'static str, AttributeValue)>,
) -> Result<MessageAttributes, AttributeLimitExceeded> {
    let mut out = original.clone();
    for (name, value) in set {
        out.insert(name.to_owned(), value);
    }
    if out.len() > MAX_MESSAGE_ATTRIBUTES {
        return Err(AttributeLimitExceeded { count: out.len() });
    }
    Ok(out)
}

mod base64_opt {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(bytes) => s.serialize_str(&STANDARD.encode(bytes)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| STANDARD.decode(s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_count(v: AttributeValue) -> MessageAttributes {
        MessageAttributes::from([(X_REDRIVE_COUNT.to_owned(), v)])
    }

    fn count_str(s: &str) -> RedriveCount {
        parse_redrive_count(&with_count(AttributeValue {
            data_type: "Number".into(),
            string_value: Some(s.into()),
            binary_value: None,
        }))
    }

    #[test]
    fn absent_count_is_zero() {
        assert_eq!(
            parse_redrive_count(&MessageAttributes::new()),
            RedriveCount::Count(0)
        );
    }

    #[test]
    fn readable_counts() {
        assert_eq!(count_str("0"), RedriveCount::Count(0));
        assert_eq!(count_str("2"), RedriveCount::Count(2));
        assert_eq!(count_str(" 3"), RedriveCount::Count(3));
        assert_eq!(count_str("3.0"), RedriveCount::Count(3));
        assert_eq!(count_str("3e0"), RedriveCount::Count(3));
        assert_eq!(
            count_str("99999999999999999999999"),
            RedriveCount::Count(u32::MAX)
        );
        assert_eq!(count_str("1e30"), RedriveCount::Count(u32::MAX));
    }

    #[test]
    fn unreadable_counts_are_invalid() {
        for s in [
            "-1", "-0", "abc", "", "  ", "1.5", "1e309", "NaN", "inf", "0x3", "3 apples",
        ] {
            assert_eq!(count_str(s), RedriveCount::Invalid, "value {s:?}");
        }
        let binary = AttributeValue {
            data_type: "Binary".into(),
            string_value: None,
            binary_value: Some(vec![3]),
        };
        assert_eq!(
            parse_redrive_count(&with_count(binary)),
            RedriveCount::Invalid
        );
    }

    #[test]
    fn the_consumer_runs_the_last_replay_and_archives_only_past_the_cap() {
        assert_eq!(cap_on_delivery(RedriveCount::Count(0), 3), None);
        assert_eq!(
            cap_on_delivery(RedriveCount::Count(3), 3),
            None,
            "the last replay runs"
        );
        assert_eq!(
            cap_on_delivery(RedriveCount::Count(4), 3),
            Some(ArchiveReason::RedriveCap)
        );
        assert_eq!(cap_on_delivery(RedriveCount::Count(1), 1), None);
        assert_eq!(
            cap_on_delivery(RedriveCount::Count(u32::MAX), 3),
            Some(ArchiveReason::RedriveCap)
        );
        assert_eq!(
            cap_on_delivery(RedriveCount::Invalid, 3),
            Some(ArchiveReason::InvalidRedriveCount)
        );
    }

    #[test]
    fn the_redriver_stops_after_the_last_replay() {
        assert_eq!(cap_on_replay(RedriveCount::Count(0), 3), None);
        assert_eq!(cap_on_replay(RedriveCount::Count(2), 3), None);
        assert_eq!(
            cap_on_replay(RedriveCount::Count(3), 3),
            Some(ArchiveReason::RedriveCap)
        );
        assert_eq!(cap_on_replay(RedriveCount::Count(0), 1), None);
        assert_eq!(
            cap_on_replay(RedriveCount::Count(1), 1),
            Some(ArchiveReason::RedriveCap)
        );
        assert_eq!(
            cap_on_replay(RedriveCount::Invalid, 3),
            Some(ArchiveReason::InvalidRedriveCount)
        );
    }

    #[test]
    fn together_they_give_exactly_the_cap_in_real_replays() {
        // GIVEN a message that fails every time: the redriver replays while cap_on_replay
        // allows, the consumer runs each copy while cap_on_delivery allows
        for cap in 1..=5 {
            let (mut count, mut runs) = (0u32, 0u32);
            loop {
                // the consumer receives the copy carrying `count`
                if cap_on_delivery(RedriveCount::Count(count), cap).is_some() {
                    break;
                }
                runs += 1;
                // it fails; in the DLQ the redriver decides
                if cap_on_replay(RedriveCount::Count(count), cap).is_some() {
                    break;
                }
                count += 1;
            }
            // THEN the first delivery plus exactly `cap` replays ran
            assert_eq!(runs, cap + 1, "cap {cap}");
            assert_eq!(count, cap);
        }
    }

    #[test]
    fn first_sent_at_is_the_earlier_of_the_carried_attribute_and_the_copys_send() {
        let attrs =
            MessageAttributes::from([(X_FIRST_SENT_AT.to_owned(), AttributeValue::number(1000))]);
        assert_eq!(first_sent_at(&attrs, Some(5000)), Some(1000));
        assert_eq!(first_sent_at(&attrs, None), Some(1000));
        assert_eq!(
            first_sent_at(&MessageAttributes::new(), Some(5000)),
            Some(5000)
        );
        // a value in the future cannot postpone the TTL past the copy's own retention
        let future =
            MessageAttributes::from([(X_FIRST_SENT_AT.to_owned(), AttributeValue::number(9000))]);
        assert_eq!(first_sent_at(&future, Some(5000)), Some(5000));
        let junk =
            MessageAttributes::from([(X_FIRST_SENT_AT.to_owned(), AttributeValue::string("soon"))]);
        assert_eq!(first_sent_at(&junk, Some(5000)), Some(5000));
        assert_eq!(first_sent_at(&MessageAttributes::new(), None), None);
    }

    #[test]
    fn copy_replaces_and_enforces_the_limit() {
        let mut original: MessageAttributes = (0..8)
            .map(|i| (format!("a{i}"), AttributeValue::string("v")))
            .collect();
        original.insert(X_FAILURE_REASON.into(), AttributeValue::string("OLD"));
        let copy = copy_attributes(
            &original,
            [(X_FAILURE_REASON, AttributeValue::string("NEW"))],
        )
        .unwrap();
        assert_eq!(copy.len(), 9);
        assert_eq!(copy[X_FAILURE_REASON].string_value.as_deref(), Some("NEW"));
        let copy = copy_attributes(
            &original,
            [(X_FAILURE_CLASS, AttributeValue::string("permanent"))],
        )
        .unwrap();
        assert_eq!(copy.len(), 10);
        let err = copy_attributes(
            &original,
            [
                (X_FAILURE_CLASS, AttributeValue::string("permanent")),
                (X_FIRST_SENT_AT, AttributeValue::number(1)),
            ],
        )
        .unwrap_err();
        assert_eq!(err.count, 11);
    }

    #[test]
    fn size_counts_body_names_types_and_values() {
        let attrs = MessageAttributes::from([
            ("ab".to_owned(), AttributeValue::string("xyz")),
            (
                "n".to_owned(),
                AttributeValue {
                    data_type: "Binary".into(),
                    string_value: None,
                    binary_value: Some(vec![0; 4]),
                },
            ),
        ]);
        assert_eq!(message_size("12345", &attrs), 5 + (2 + 6 + 3) + (1 + 6 + 4));
    }

    #[test]
    fn attribute_json_form() {
        let v = AttributeValue {
            data_type: "Binary".into(),
            string_value: None,
            binary_value: Some(vec![1, 2, 3]),
        };
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"dataType": "Binary", "binaryValue": "AQID"})
        );
        assert_eq!(serde_json::from_value::<AttributeValue>(json).unwrap(), v);
    }
}
