//! Reading the consumer's event (docs/design.md, "Reading the event"): the payload's
//! `Records` read one record at a time into resq's compact [`Record`], each on its own, so one
//! that does not decode fails only itself. No I/O here.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsMessageAttribute;
use resq::attributes::{self, AttributeValue, MessageAttributes, RedriveCount};
use serde::Deserialize;
use serde_json::value::RawValue;

/// One SQS record, read once from the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Never empty (checked when the event is read).
    pub message_id: String,
    /// Empty when the event carried none (then visibility cannot be changed).
    pub receipt_handle: String,
    /// The body as delivered.
    pub body: Option<String>,
    /// System attributes (`ApproximateReceiveCount`, `SentTimestamp`, `MessageGroupId`, …).
    pub attributes: SystemAttributes,
    /// Message attributes with scalar values.
    pub message_attributes: MessageAttributes,
    /// Names of list-only attributes that could not be kept.
    pub dropped_attributes: Vec<String>,
    /// `ApproximateReceiveCount` (1 when absent or unreadable).
    pub receive_count: u32,
    /// `x-redrive-count` as read.
    pub redrive_count: RedriveCount,
    /// The FIFO message group, if any.
    pub group_id: Option<String>,
    /// The queue the record came from (shared by the records of one queue).
    pub source_arn: Option<Arc<str>>,
    /// `SentTimestamp`: when this copy was sent (epoch millis), when readable.
    pub sent_at: Option<u64>,
    /// Why the record could not be read, naming the field (an attribute that does not decode,
    /// a body that is not a string, a field of the wrong type): it never runs; it is
    /// dead-lettered as permanent (`UNREADABLE_RECORD`) with what could be read, and the rest
    /// of the batch goes on.
    pub unreadable: Option<String>,
    /// The record's JSON as delivered, kept only when it could not be read whole (for its
    /// archive entry).
    pub raw: Option<String>,
}

/// The event is not one the consumer can take: the only case where it returns an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// Not an SQS event at all.
    #[error("not an SQS event: {0}; the consumer must be invoked by an SQS event source mapping")]
    NotSqs(String),
    /// A record has no message id, so it could not be reported individually.
    #[error(
        "SQS record {index} has no messageId; a failure could not be reported for it alone, so the whole batch is failed and retried"
    )]
    MissingMessageId {
        /// Position in `Records`.
        index: usize,
    },
    /// The event comes from the DLQ the consumer dead-letters into: each failure would be
    /// copied back into the queue it came from, forever.
    #[error(
        "the event comes from {arn}, the DLQ this consumer dead-letters into (DLQ_URL): its failures would be copied back into that queue forever; point the event source mapping at the main queue (MAIN_QUEUE_URL), and replay the DLQ with the redriver"
    )]
    FromDeadLetterQueue {
        /// The event's `eventSourceARN`.
        arn: String,
    },
}

/// The consumer's invocation payload: `{"Records": [...]}`, its records read one by one as the
/// payload is deserialized. Each record's JSON is held only while that record is read, so no
/// copy of the payload outlives deserialization, and a record that cannot be read fails only
/// itself ([`Record::unreadable`]). A payload that is not an SQS event, or a record that
/// cannot be reported alone, fails deserialization with [`EventError`]'s wording, so the
/// function error says what was wrong and what invokes the consumer.
#[derive(Debug)]
pub struct SqsInvocation(pub Vec<Record>);

impl<'de> Deserialize<'de> for SqsInvocation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Invocation::deserialize(d)?
            .0
            .map_err(serde::de::Error::custom)
    }
}

impl EventError {
    /// The `errorType` Lambda reports for an invocation that fails with this error.
    pub fn error_type(&self) -> &'static str {
        match self {
            EventError::NotSqs(_) => "NotAnSqsEvent",
            EventError::MissingMessageId { .. } => "RecordWithoutMessageId",
            EventError::FromDeadLetterQueue { .. } => "EventFromDeadLetterQueue",
        }
    }
}

/// The consumer's payload as the function reads it from the Lambda runtime: an
/// [`SqsInvocation`], or why the payload is not one. Reading it never fails for JSON: a payload
/// the runtime could not deserialize would be answered before the handler runs, and logged by
/// the runtime in Rust's debug form; this way the handler returns the reason as the
/// invocation's error, one readable sentence in the log and in the function error.
#[derive(Debug)]
pub struct Invocation(pub Result<SqsInvocation, EventError>);

impl<'de> Deserialize<'de> for Invocation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(InvocationVisitor)
    }
}

fn not_sqs(why: impl Into<String>) -> Invocation {
    Invocation(Err(EventError::NotSqs(why.into())))
}

/// What a JSON value is, for a message.
fn json_kind(kind: &str) -> String {
    format!("the payload is {kind}, not an object with `Records`")
}

struct InvocationVisitor;

impl<'de> serde::de::Visitor<'de> for InvocationVisitor {
    type Value = Invocation;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an SQS event")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Invocation, A::Error> {
        let mut records: Option<Result<Vec<Record>, EventError>> = None;
        while let Some(key) = map.next_key::<Text<'de>>()? {
            if key.0 != "Records" {
                map.next_value::<serde::de::IgnoredAny>()?;
            } else if records.is_some() {
                map.next_value::<serde::de::IgnoredAny>()?;
                records = Some(Err(EventError::NotSqs("duplicate field `Records`".into())));
            } else {
                records = Some(map.next_value::<RecordsField>()?.0);
            }
        }
        Ok(match records {
            None => not_sqs("missing field `Records`"),
            Some(records) => Invocation(records.map(SqsInvocation)),
        })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Invocation, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(not_sqs(json_kind("a list")))
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Invocation, E> {
        Ok(not_sqs(json_kind("a string")))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Invocation, E> {
        Ok(not_sqs(json_kind("true or false")))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Invocation, E> {
        Ok(not_sqs(json_kind("a number")))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Invocation, E> {
        Ok(not_sqs(json_kind("a number")))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Invocation, E> {
        Ok(not_sqs(json_kind("a number")))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Invocation, E> {
        Ok(not_sqs(json_kind("null")))
    }
}

/// `Records`: its records, each read as it is reached, or why the event cannot be taken (not
/// a list, a record from elsewhere or without a `messageId`).
struct RecordsField(Result<Vec<Record>, EventError>);

impl<'de> Deserialize<'de> for RecordsField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RecordsVisitor)
    }
}

fn records_not_a_list(kind: &str) -> RecordsField {
    RecordsField(Err(EventError::NotSqs(format!(
        "`Records` is {kind}, not a list of records"
    ))))
}

struct RecordsVisitor;

impl<'de> serde::de::Visitor<'de> for RecordsVisitor {
    type Value = RecordsField;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of SQS records")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RecordsField, A::Error> {
        let mut reader = RecordReader::default();
        let mut records = Ok(Vec::with_capacity(seq.size_hint().unwrap_or(0)));
        // Each record's JSON is copied out on its own (a few hundred bytes, freed once read),
        // so a record that is not valid for its type cannot fail the others' deserialization.
        while let Some(raw) = seq.next_element::<Box<RawValue>>()? {
            if let Ok(read) = &mut records {
                match reader.read(read.len(), raw.get()) {
                    Ok(record) => read.push(record),
                    // the rest is still walked, so the payload stays valid JSON to the end
                    Err(e) => records = Err(e),
                }
            }
        }
        Ok(RecordsField(records))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RecordsField, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(records_not_a_list("an object"))
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<RecordsField, E> {
        Ok(records_not_a_list("a string"))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<RecordsField, E> {
        Ok(records_not_a_list("true or false"))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<RecordsField, E> {
        Ok(records_not_a_list("a number"))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<RecordsField, E> {
        Ok(records_not_a_list("a number"))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<RecordsField, E> {
        Ok(records_not_a_list("a number"))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<RecordsField, E> {
        Ok(records_not_a_list("null"))
    }
}

/// A JSON string, borrowed from the input when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> serde::de::Visitor<'de> for TextVisitor {
            type Value = Cow<'de, str>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v))
            }
        }
        d.deserialize_str(TextVisitor).map(Text)
    }
}

fn owned(text: Option<Text<'_>>) -> Option<String> {
    text.map(|t| t.0.into_owned())
}

/// One record as Lambda's SQS poller writes it, with `aws_lambda_events`' `SqsMessage`'s
/// fields, in its order and with its name in errors (so a record reads, or fails, exactly as it
/// did through that type), strings borrowed from the record's JSON until they are kept. The
/// MD5s and the region are checked to be strings and not stored.
#[derive(Deserialize)]
#[serde(expecting = "struct SqsMessage")]
struct WireRecord<'a> {
    #[serde(rename = "messageId", default, borrow)]
    message_id: Option<Text<'a>>,
    #[serde(rename = "receiptHandle", default, borrow)]
    receipt_handle: Option<Text<'a>>,
    #[serde(default, borrow)]
    body: Option<Text<'a>>,
    #[serde(rename = "md5OfBody", default, borrow)]
    _md5_of_body: Option<Text<'a>>,
    #[serde(rename = "md5OfMessageAttributes", default, borrow)]
    _md5_of_message_attributes: Option<Text<'a>>,
    #[serde(default, borrow)]
    attributes: Option<&'a RawValue>,
    #[serde(rename = "messageAttributes", default)]
    message_attributes: Option<HashMap<String, SqsMessageAttribute>>,
    #[serde(rename = "eventSourceARN", default, borrow)]
    event_source_arn: Option<Text<'a>>,
    #[serde(rename = "eventSource", default, borrow)]
    event_source: Option<Text<'a>>,
    #[serde(rename = "awsRegion", default, borrow)]
    _aws_region: Option<Text<'a>>,
}

/// What the consumer reads of a record's system attributes when the record is read: every
/// value must be a string (as SQS writes them); the rest stays in [`SystemAttributes`].
struct SystemHead {
    receive_count: Option<u32>,
    group_id: Option<String>,
    sent_at: Option<u64>,
}

impl<'de> Deserialize<'de> for SystemHead {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HeadVisitor;
        impl<'de> serde::de::Visitor<'de> for HeadVisitor {
            type Value = SystemHead;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of system attributes to strings")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<SystemHead, A::Error> {
                let mut head = SystemHead {
                    receive_count: None,
                    group_id: None,
                    sent_at: None,
                };
                while let Some(name) = map.next_key::<Text<'de>>()? {
                    let value = map.next_value::<Text<'de>>()?;
                    match &*name.0 {
                        "ApproximateReceiveCount" => {
                            head.receive_count = value.0.trim().parse().ok();
                        }
                        "MessageGroupId" => head.group_id = Some(value.0.into_owned()),
                        "SentTimestamp" => head.sent_at = value.0.trim().parse().ok(),
                        _ => {}
                    }
                }
                Ok(head)
            }
        }
        d.deserialize_map(HeadVisitor)
    }
}

/// A record's system attributes (`SentTimestamp`, `ApproximateReceiveCount`, `SenderId`,
/// `MessageGroupId`, …) as delivered: one JSON object of strings, checked when the record is
/// read and decoded only where they are used in full (an archive entry, a DLQ copy's
/// `x-first-sent-at`), so a record costs one small allocation for them instead of a map.
#[derive(Debug, Clone, Default)]
pub struct SystemAttributes(Option<Box<RawValue>>);

impl SystemAttributes {
    /// All of them, by name. (Only `RecordReader`, which checked them to be a map of
    /// strings, and [`SystemAttributes::from_map`] make one, so the text always decodes.)
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let map = self.0.as_ref().map(|raw| serde_json::from_str(raw.get()));
        debug_assert!(!matches!(map, Some(Err(_))), "checked when read");
        map.and_then(Result::ok).unwrap_or_default()
    }

    /// One of them.
    pub fn get(&self, name: &str) -> Option<String> {
        self.to_map().remove(name)
    }

    /// The attributes of `map` (tests and tools that build records).
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        Self(serde_json::value::to_raw_value(map).ok())
    }
}

impl PartialEq for SystemAttributes {
    fn eq(&self, other: &Self) -> bool {
        self.to_map() == other.to_map()
    }
}

impl Eq for SystemAttributes {}

/// Reads records in order; records from one queue share its ARN.
#[derive(Default)]
struct RecordReader {
    arn: Option<Arc<str>>,
}

impl RecordReader {
    /// Record `index` from its JSON. A record that does not decode (an attribute that is not
    /// base64, a field of the wrong type, text SQS cannot carry) is read as far as it can be
    /// and marked [`Record::unreadable`], so it is reported failed alone. `Err` only for a
    /// record that makes the event not an SQS event, or that cannot be reported (no
    /// `messageId`).
    fn read(&mut self, index: usize, raw: &str) -> Result<Record, EventError> {
        let wire = match serde_json::from_str::<WireRecord<'_>>(raw) {
            Ok(wire) => wire,
            Err(e) => return self.unreadable(index, raw, e.to_string()),
        };
        let head = match wire
            .attributes
            .map(|a| serde_json::from_str::<SystemHead>(a.get()))
            .transpose()
        {
            Ok(head) => head,
            Err(e) => return self.unreadable(index, raw, format!("attributes: {e}")),
        };
        check_source(index, wire.event_source.as_ref().map(|s| &*s.0))?;
        let message_id = owned(wire.message_id)
            .filter(|id| !id.is_empty())
            .ok_or(EventError::MissingMessageId { index })?;
        let (message_attributes, dropped_attributes) =
            lambda_attributes(wire.message_attributes.iter().flatten());
        let redrive_count = attributes::parse_redrive_count(&message_attributes);
        let (receive_count, group_id, sent_at) = head
            .map(|h| (h.receive_count, h.group_id, h.sent_at))
            .unwrap_or_default();
        Ok(Record {
            message_id,
            receipt_handle: owned(wire.receipt_handle).unwrap_or_default(),
            body: owned(wire.body),
            attributes: SystemAttributes(wire.attributes.map(RawValue::to_owned)),
            message_attributes,
            dropped_attributes,
            receive_count: receive_count.unwrap_or(1),
            redrive_count,
            group_id,
            source_arn: self.arn(wire.event_source_arn),
            sent_at,
            unreadable: None,
            raw: None,
        })
    }

    /// The queue's ARN, shared with the records before it when it is the same.
    fn arn(&mut self, arn: Option<Text<'_>>) -> Option<Arc<str>> {
        let arn = arn?;
        match &self.arn {
            Some(shared) if **shared == *arn.0 => {}
            _ => self.arn = Some(Arc::from(&*arn.0)),
        }
        self.arn.clone()
    }

    /// What can be read of a record that does not decode as a whole: everything that
    /// decodes on its own (the body, the system attributes, each message attribute), why the
    /// rest does not, naming each field, and the raw record.
    fn unreadable(&mut self, index: usize, raw: &str, error: String) -> Result<Record, EventError> {
        let head: RecordHead = serde_json::from_str(raw).map_err(|_| {
            EventError::NotSqs(format!("record {index} is not an SQS record: {error}"))
        })?;
        check_source(index, text(&head.event_source).as_deref())?;
        let message_id = text(&head.message_id)
            .filter(|id| !id.is_empty())
            .ok_or(EventError::MissingMessageId { index })?;
        let mut problems = Vec::new();
        let rest = serde_json::from_str::<RecordRest>(raw).unwrap_or_else(|e| {
            problems.push(without_position(&e.to_string()));
            RecordRest::default()
        });
        not_strings(&head, &rest, &mut problems);
        // a body that is not a string is kept as its JSON text (an object is the order itself)
        let body = match (&rest.body, text(&rest.body)) {
            (_, Some(body)) => Some(body),
            (Some(raw), None) if raw.get() != "null" => Some(raw.get().to_owned()),
            _ => None,
        };
        let system = loose_strings(rest.attributes.as_deref(), "attributes", &mut problems);
        let readable = loose_attributes(rest.message_attributes.as_deref(), &mut problems);
        let (message_attributes, dropped_attributes) = lambda_attributes(readable.iter());
        let redrive_count = attributes::parse_redrive_count(&message_attributes);
        let why = if problems.is_empty() {
            without_position(&error)
        } else {
            problems.sort();
            problems.join("; ")
        };
        let source_arn = text(&head.event_source_arn);
        Ok(Record {
            message_id,
            receipt_handle: text(&head.receipt_handle).unwrap_or_default(),
            body,
            receive_count: system
                .get("ApproximateReceiveCount")
                .and_then(|c| c.trim().parse().ok())
                .unwrap_or(1),
            group_id: system.get("MessageGroupId").cloned(),
            sent_at: system
                .get("SentTimestamp")
                .and_then(|t| t.trim().parse().ok()),
            attributes: SystemAttributes::from_map(&system),
            message_attributes,
            dropped_attributes,
            redrive_count,
            source_arn: source_arn.and_then(|arn| self.arn(Some(Text(Cow::Owned(arn))))),
            unreadable: Some(why),
            raw: Some(raw.to_owned()),
        })
    }
}

/// The fields of a record that must be strings and are not, as problems.
fn not_strings(head: &RecordHead, rest: &RecordRest, problems: &mut Vec<String>) {
    for (name, field) in [
        ("receiptHandle", &head.receipt_handle),
        ("eventSourceARN", &head.event_source_arn),
        ("body", &rest.body),
        ("md5OfBody", &rest.md5_of_body),
        ("md5OfMessageAttributes", &rest.md5_of_message_attributes),
        ("awsRegion", &rest.aws_region),
    ] {
        if let Some(raw) = field.as_deref().filter(|_| text(field).is_none()) {
            problems.push(format!(
                "{name}: {}, not a string",
                json_text_kind(raw.get())
            ));
        }
    }
}

/// The message attributes that decode on their own; each other one, or a field that is not an
/// object, is a problem named `messageAttributes.name`.
fn loose_attributes(
    raw: Option<&RawValue>,
    problems: &mut Vec<String>,
) -> HashMap<String, SqsMessageAttribute> {
    let Some(raw) = raw else {
        return HashMap::new();
    };
    let Ok(attrs) = serde_json::from_str::<HashMap<String, Box<RawValue>>>(raw.get()) else {
        let kind = json_text_kind(raw.get());
        problems.push(format!("messageAttributes: {kind}, not an object"));
        return HashMap::new();
    };
    let mut readable = HashMap::new();
    for (name, value) in attrs {
        match serde_json::from_str::<SqsMessageAttribute>(value.get()) {
            Ok(a) => _ = readable.insert(name, a),
            Err(e) => problems.push(format!(
                "messageAttributes.{name}: {}",
                without_position(&e.to_string())
            )),
        }
    }
    readable
}

/// The string-valued entries of a JSON object field; each other entry, or a field that is not
/// an object, is a problem named `field.name`.
fn loose_strings(
    raw: Option<&RawValue>,
    field: &str,
    problems: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let Some(raw) = raw else {
        return BTreeMap::new();
    };
    match serde_json::from_str::<BTreeMap<String, serde_json::Value>>(raw.get()) {
        Err(_) => {
            problems.push(format!(
                "{field}: {}, not an object",
                json_text_kind(raw.get())
            ));
            BTreeMap::new()
        }
        Ok(map) => map
            .into_iter()
            .filter_map(|(name, v)| match v {
                serde_json::Value::String(s) => Some((name, s)),
                other => {
                    problems.push(format!(
                        "{field}.{name}: {}, not a string",
                        json_text_kind(&other.to_string())
                    ));
                    None
                }
            })
            .collect(),
    }
}

/// What kind of JSON value `text` is, in words.
fn json_text_kind(text: &str) -> &'static str {
    match text.trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "a list",
        Some(b'"') => "text that is not valid (a lone surrogate?)",
        Some(b't' | b'f') => "true or false",
        Some(b'n') => "null",
        Some(_) => "a number",
        None => "nothing",
    }
}

/// A serde error without its " at line L column C" (a record's position means nothing to a
/// reader of the log).
fn without_position(error: &str) -> String {
    match error.rfind(" at line ") {
        Some(i) => error[..i].to_owned(),
        None => error.to_owned(),
    }
}

/// What is read of a record that does not decode as a whole: enough to report it. Each field
/// is kept raw and read on its own, so that one of the wrong type does not hide the others.
#[derive(Deserialize)]
struct RecordHead {
    #[serde(rename = "messageId", default)]
    message_id: Option<Box<RawValue>>,
    #[serde(rename = "receiptHandle", default)]
    receipt_handle: Option<Box<RawValue>>,
    #[serde(rename = "eventSource", default)]
    event_source: Option<Box<RawValue>>,
    #[serde(rename = "eventSourceARN", default)]
    event_source_arn: Option<Box<RawValue>>,
}

/// The rest of a record that does not decode, each field as its raw JSON (read apart from
/// [`RecordHead`], so that a problem here, such as a field given twice, still lets the record
/// be reported).
#[derive(Deserialize, Default)]
struct RecordRest {
    #[serde(default)]
    body: Option<Box<RawValue>>,
    #[serde(rename = "md5OfBody", default)]
    md5_of_body: Option<Box<RawValue>>,
    #[serde(rename = "md5OfMessageAttributes", default)]
    md5_of_message_attributes: Option<Box<RawValue>>,
    #[serde(rename = "awsRegion", default)]
    aws_region: Option<Box<RawValue>>,
    #[serde(default)]
    attributes: Option<Box<RawValue>>,
    #[serde(rename = "messageAttributes", default)]
    message_attributes: Option<Box<RawValue>>,
}

/// A raw field's text, when it is a string.
fn text(raw: &Option<Box<RawValue>>) -> Option<String> {
    raw.as_ref()
        .and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

impl SqsInvocation {
    /// Reads a payload from its JSON text exactly as the function reads it from the Lambda
    /// runtime (through [`Invocation`]): the one way into the engine for the function, the
    /// tests, the local runner and the bench.
    pub fn from_json(payload: &str) -> Result<Self, EventError> {
        serde_json::from_str::<Invocation>(payload)
            .map_err(|e| EventError::NotSqs(e.to_string()))?
            .0
    }
}

fn check_source(index: usize, source: Option<&str>) -> Result<(), EventError> {
    match source {
        Some("aws:sqs") => Ok(()),
        Some(other) => Err(EventError::NotSqs(format!(
            "record {index} has eventSource \"{other}\", expected \"aws:sqs\""
        ))),
        None => Err(EventError::NotSqs(format!(
            "record {index} has no eventSource, expected \"aws:sqs\""
        ))),
    }
}

/// A FIFO source: its ARN ends in `.fifo`.
pub fn is_fifo(records: &[Record]) -> bool {
    records
        .iter()
        .find_map(|r| r.source_arn.as_deref())
        .is_some_and(resq::sqs::is_fifo)
}

/// A queue named by an ARN: `arn:PARTITION:sqs:REGION:ACCOUNT:NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueArn<'a> {
    /// The owning account.
    pub account: &'a str,
    /// The queue's name.
    pub name: &'a str,
}

impl<'a> QueueArn<'a> {
    /// Reads an SQS queue ARN (`None` for anything else).
    pub fn parse(arn: &'a str) -> Option<Self> {
        let mut parts = arn.split(':');
        let (Some("arn"), Some(_), Some("sqs"), Some(_), Some(account), Some(name), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        (!name.is_empty()).then_some(Self { account, name })
    }

    /// Whether `url` is this queue's URL: the same name as its last path segment, and the
    /// same account as the segment before it. (AWS's, moto's and LocalStack's URLs all end
    /// `/ACCOUNT/NAME`.)
    pub fn is_url(&self, url: &str) -> bool {
        let mut segments = url_path(url).rsplit('/');
        segments.next() == Some(self.name) && segments.next() == Some(self.account)
    }

    /// This queue's URL, made from the URL of a queue in the same region and endpoint:
    /// `sibling` with its last two path segments replaced by this queue's account and name.
    pub fn url_beside(&self, sibling: &str) -> Option<String> {
        let sibling = sibling.trim_end_matches('/');
        let path = url_path(sibling);
        let base_len = sibling.len() - path.len();
        let mut cut = path.rsplitn(3, '/');
        let (_name, _account, prefix) = (cut.next()?, cut.next()?, cut.next()?);
        Some(format!(
            "{}{prefix}/{}/{}",
            &sibling[..base_len],
            self.account,
            self.name
        ))
    }
}

/// The path of a URL, without a trailing `/`.
fn url_path(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let path = url[after_scheme..]
        .find('/')
        .map_or("", |i| &url[after_scheme + i..]);
    path.trim_end_matches('/')
}

/// The Lambda event's attributes as resq's, dropping list-only values: the kept attributes and
/// the names of the dropped ones (for logging: nothing is dropped silently).
fn lambda_attributes<'a>(
    attrs: impl IntoIterator<Item = (&'a String, &'a SqsMessageAttribute)>,
) -> (MessageAttributes, Vec<String>) {
    let mut kept = MessageAttributes::new();
    let mut dropped = Vec::new();
    for (name, attr) in attrs {
        let data_type = attr.data_type.clone().filter(|t| !t.is_empty());
        let string_value = attr.string_value.clone();
        let binary_value = attr.binary_value.as_ref().map(|b| b.0.clone());
        match data_type.filter(|_| string_value.is_some() || binary_value.is_some()) {
            Some(data_type) => {
                _ = kept.insert(
                    name.clone(),
                    AttributeValue {
                        data_type,
                        string_value,
                        binary_value,
                    },
                )
            }
            None => dropped.push(name.clone()),
        }
    }
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_only_lambda_attributes_are_dropped() {
        let attrs: std::collections::HashMap<String, SqsMessageAttribute> = serde_json::from_value(serde_json::json!({
            "keep": {"stringValue": "x", "dataType": "String", "stringListValues": [], "binaryListValues": []},
            "bin": {"binaryValue": "AQID", "dataType": "Binary"},
            "list": {"stringListValues": ["a"], "binaryListValues": [], "dataType": "String"}
        }))
        .unwrap();
        let (kept, dropped) = lambda_attributes(&attrs);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept["bin"].binary_value.as_deref(), Some(&[1u8, 2, 3][..]));
        assert_eq!(dropped, vec!["list".to_owned()]);
    }

    #[test]
    fn an_arn_names_its_queue_and_its_url_beside_another() {
        let arn = QueueArn::parse("arn:aws:sqs:us-east-1:123456789012:orders-dlq").unwrap();
        assert_eq!((arn.account, arn.name), ("123456789012", "orders-dlq"));
        for url in [
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq",
            "http://127.0.0.1:4566/queue/us-east-1/123456789012/orders-dlq",
            "http://127.0.0.1:5000/123456789012/orders-dlq/",
        ] {
            assert!(arn.is_url(url), "{url}");
        }
        for url in [
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
            "https://sqs.us-east-1.amazonaws.com/999999999999/orders-dlq",
            "https://sqs.us-east-1.amazonaws.com/orders-dlq",
        ] {
            assert!(!arn.is_url(url), "{url}");
        }
        assert_eq!(
            arn.url_beside("https://sqs.us-east-1.amazonaws.com/123456789012/orders")
                .as_deref(),
            Some("https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq")
        );
        assert_eq!(
            arn.url_beside("http://127.0.0.1:4566/queue/us-east-1/000000000000/orders")
                .as_deref(),
            Some("http://127.0.0.1:4566/queue/us-east-1/123456789012/orders-dlq")
        );
        assert_eq!(
            arn.url_beside("https://sqs.us-east-1.amazonaws.com/123456789012/orders/")
                .as_deref(),
            Some("https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq")
        );
        assert_eq!(arn.url_beside("orders"), None);
        for bad in [
            "",
            "arn:aws:sns:us-east-1:1:topic",
            "arn:aws:sqs:us-east-1:1:",
            "arn:aws:sqs:us-east-1:1:a:b",
        ] {
            assert_eq!(QueueArn::parse(bad), None, "{bad}");
        }
    }
    use crate::decide::plan_lanes;
    use crate::fixtures::{parse_event, rec};
    use serde_json::{Value, json};

    #[test]
    fn reads_records_without_parsing_bodies() {
        let records = parse_event(json!({"Records": [
            rec("a", json!({"body": "not json"})),
            rec("b", json!({"attributes": {"ApproximateReceiveCount": "4"}, "messageAttributes": {
                "x-redrive-count": {"stringValue": "2", "dataType": "Number"},
                "tags": {"stringListValues": ["a"], "dataType": "String"}
            }}))
        ]}))
        .unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].body.as_deref(), Some("not json"));
        assert_eq!(records[1].receive_count, 4);
        assert_eq!(records[1].redrive_count, RedriveCount::Count(2));
        assert_eq!(records[1].dropped_attributes, vec!["tags".to_owned()]);
        assert!(!is_fifo(&records));
    }

    #[test]
    fn rejects_what_is_not_an_sqs_event() {
        for event in [
            json!({}),
            json!({"Records": {}}),
            json!("hello"),
            json!({"detail-type": "Scheduled Event"}),
        ] {
            assert!(matches!(parse_event(event), Err(EventError::NotSqs(_))));
        }
        let s3 = json!({"Records": [{"eventSource": "aws:s3", "s3": {}}]});
        let err = parse_event(s3).unwrap_err();
        assert!(err.to_string().contains("aws:s3"), "{err}");
        let no_id = json!({"Records": [rec("a", json!({})), rec("", json!({}))]});
        assert_eq!(
            parse_event(no_id),
            Err(EventError::MissingMessageId { index: 1 })
        );
        assert_eq!(parse_event(json!({"Records": []})), Ok(vec![]));
    }

    /// What the function reads through the runtime's deserializer ([`Invocation`]).
    fn as_the_function_reads(raw: &str) -> Result<Vec<Record>, String> {
        let jd = &mut serde_json::Deserializer::from_str(raw);
        let invocation: Invocation =
            serde_path_to_error::deserialize(jd).expect("reading JSON never fails");
        Ok(invocation.0.map_err(|e| e.to_string())?.0)
    }

    /// Payloads that are not SQS events, and what the error says.
    const NOT_SQS: &[(&str, &str)] = &[
        (
            r#"{"detail-type": "Scheduled Event", "detail": {"a": [1, 2]}}"#,
            "missing field `Records`",
        ),
        (
            "[1, 2]",
            "the payload is a list, not an object with `Records`",
        ),
        (
            r#""orders""#,
            "the payload is a string, not an object with `Records`",
        ),
        ("null", "the payload is null, not an object with `Records`"),
        ("7", "the payload is a number"),
        ("true", "the payload is true or false"),
        (
            r#"{"Records": {"a": [1]}}"#,
            "`Records` is an object, not a list of records",
        ),
        (
            r#"{"Records": "x"}"#,
            "`Records` is a string, not a list of records",
        ),
        (
            r#"{"Records": null}"#,
            "`Records` is null, not a list of records",
        ),
        (
            r#"{"Records": [], "Records": []}"#,
            "duplicate field `Records`",
        ),
        (
            r#"{"Records": [{"eventSource": "aws:s3", "messageId": "m"}]}"#,
            "record 0 has eventSource \"aws:s3\", expected \"aws:sqs\"",
        ),
        (
            r#"{"Records": [{"messageId": "m"}]}"#,
            "record 0 has no eventSource, expected \"aws:sqs\"",
        ),
    ];

    #[test]
    fn a_payload_that_is_not_an_sqs_event_is_read_as_the_reason() {
        for &(raw, says) in NOT_SQS {
            let err = as_the_function_reads(raw).unwrap_err();
            assert!(err.starts_with("not an SQS event: "), "{raw}: {err}");
            assert!(err.contains(says), "{raw}: {err}");
            for debug in ["Some(", "None", "Error(", "{"] {
                assert!(!err.contains(debug), "{raw}: {err}");
            }
        }
        // an SQS event reads as before, records raw
        let event = json!({"Records": [rec("a", json!({})), rec("b", json!({"body": "x"}))], "extra": {"k": [1]}});
        let records = as_the_function_reads(&event.to_string()).unwrap();
        assert_eq!(
            records
                .iter()
                .map(|r| r.message_id.as_str())
                .collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        assert_eq!(as_the_function_reads(r#"{"Records": []}"#), Ok(vec![]));
    }

    /// What the runtime does with the invocation's bytes (lambda_runtime's deserializer).
    fn as_the_runtime_reads(raw: &str) -> Result<Vec<Record>, String> {
        let jd = &mut serde_json::Deserializer::from_str(raw);
        let invocation: SqsInvocation =
            serde_path_to_error::deserialize(jd).map_err(|e| e.to_string())?;
        Ok(invocation.0)
    }

    #[test]
    fn a_record_that_cannot_be_read_fails_alone() {
        // GIVEN a batch where one record's binary attribute is not base64, one's body is text
        // SQS cannot carry (a lone surrogate), one has a field of the wrong type
        let ok = rec("ok", json!({}));
        let bad_b64 = rec(
            "b64",
            json!({"messageAttributes": {"a": {"dataType": "Binary", "binaryValue": "not base64!"}}}),
        );
        let wrong_type = rec(
            "typed",
            json!({"attributes": 5, "eventSourceARN": 5, "receiptHandle": ["x"]}),
        );
        let raw = format!(
            r#"{{"Records": [{ok}, {bad_b64}, {{"eventSource": "aws:sqs", "messageId": "surrogate", "receiptHandle": "rh-s", "body": "\ud800"}}, {wrong_type}]}}"#
        );
        // WHEN the runtime reads it
        let records = as_the_runtime_reads(&raw).unwrap();
        // THEN every record is there; the three unreadable ones are marked, with their receipt
        assert_eq!(records.len(), 4);
        assert_eq!(records[0].unreadable, None);
        for (r, id) in records[1..].iter().zip(["b64", "surrogate", "typed"]) {
            assert_eq!(r.message_id, id);
            assert!(r.unreadable.is_some(), "{id}");
        }
        assert!(!records[1].receipt_handle.is_empty());
        assert!(!records[2].receipt_handle.is_empty());
        assert_eq!(
            records[3].receipt_handle, "",
            "a receiptHandle of the wrong type is none"
        );
        assert!(
            records[1].unreadable.as_ref().unwrap().contains("base64")
                || records[1].unreadable.as_ref().unwrap().contains("Invalid"),
            "{:?}",
            records[1].unreadable
        );
    }

    #[test]
    fn a_record_keeps_what_the_consumer_uses_and_shares_its_queue() {
        // GIVEN records as the poller writes them: escaped text, null maps, a FIFO group,
        // system attributes the consumer only archives, fields it does not use
        let mut escaped = rec(
            "a\\\"1",
            json!({"receiptHandle": "rh/\u{e9}", "body": "{\"k\": \"\\n\"}"}),
        );
        escaped["attributes"]["SenderId"] = json!("AIDA");
        escaped["attributes"]["MessageGroupId"] = json!("g-1");
        escaped["attributes"]["ApproximateReceiveCount"] = json!(" 4");
        escaped["md5OfBody"] = json!("x");
        let nulls = rec("b", json!({"attributes": null, "messageAttributes": null}));
        let raw = json!({"Records": [escaped, nulls]})
            .to_string()
            .replace("rh/", "rh\\/");
        // WHEN the runtime reads them
        let records = as_the_runtime_reads(&raw).unwrap();
        // THEN escaped text reads as its value
        assert_eq!(records[0].message_id, "a\\\"1");
        assert_eq!(records[0].receipt_handle, "rh/\u{e9}");
        assert_eq!(records[0].body.as_deref(), Some("{\"k\": \"\\n\"}"));
        assert_eq!(records[0].group_id.as_deref(), Some("g-1"));
        assert_eq!(records[0].receive_count, 4);
        // every system attribute is kept for the archive, as delivered
        let attributes = records[0].attributes.to_map();
        assert_eq!(attributes.len(), 4, "{attributes:?}");
        assert_eq!(attributes["SenderId"], "AIDA");
        assert_eq!(
            records[0].attributes.get("SentTimestamp").as_deref(),
            Some("1700000000000")
        );
        // null maps read as empty, as aws_lambda_events reads them
        assert_eq!(records[1].unreadable, None);
        assert!(records[1].attributes.to_map().is_empty());
        assert_eq!(records[1].receive_count, 1);
        // one queue, one ARN in memory
        let (a, b) = (
            records[0].source_arn.as_ref(),
            records[1].source_arn.as_ref(),
        );
        assert!(std::sync::Arc::ptr_eq(a.unwrap(), b.unwrap()));
        // a system attribute that is not a string makes its record unreadable, alone
        let raw = json!({"Records": [rec("c", json!({"attributes": {"SentTimestamp": 5}})), rec("d", json!({}))]});
        let records = as_the_runtime_reads(&raw.to_string()).unwrap();
        assert!(
            records[0]
                .unreadable
                .as_deref()
                .unwrap()
                .contains("attributes"),
            "{:?}",
            records[0].unreadable
        );
        assert_eq!(records[1].unreadable, None);
    }

    #[test]
    fn a_record_reads_or_fails_as_it_did_through_sqs_message() {
        // fields the consumer does not keep are still checked to be strings
        for extra in [
            r#""md5OfBody": 7"#,
            r#""awsRegion": "\ud800""#,
            r#""awsRegion": "a", "awsRegion": "b""#,
        ] {
            let raw = format!(
                r#"{{"Records":[{{"messageId":"m","eventSource":"aws:sqs","body":"{{}}",{extra}}}]}}"#
            );
            let records = as_the_runtime_reads(&raw).unwrap();
            assert!(records[0].unreadable.is_some(), "{extra}");
        }
        // the same words for a record that is not one
        let err = as_the_runtime_reads(r#"{"Records":[5]}"#).unwrap_err();
        assert!(err.contains("expected struct SqsMessage"), "{err}");
        // and the same fields in the same order for a record written as a list
        let records = as_the_runtime_reads(
            r#"{"Records":[["m-1","rh","b",null,null,null,null,"arn","aws:sqs"]]}"#,
        )
        .unwrap();
        assert_eq!(
            (records[0].message_id.as_str(), records[0].body.as_deref()),
            ("m-1", Some("b"))
        );
    }

    #[test]
    fn an_unreadable_record_without_a_message_id_fails_the_invocation() {
        let raw = r#"{"Records": [{"eventSource": "aws:sqs", "body": "\ud800"}]}"#;
        let err = as_the_runtime_reads(raw).unwrap_err();
        assert!(err.contains("record 0 has no messageId"), "{err}");
        let raw = r#"{"Records": [{"eventSource": "aws:s3", "messageId": "m", "attributes": 5}]}"#;
        let err = as_the_runtime_reads(raw).unwrap_err();
        assert!(err.contains("aws:s3"), "{err}");
        let err = as_the_runtime_reads(r#"{"Records": [7]}"#).unwrap_err();
        assert!(err.contains("not an SQS record"), "{err}");
        let err = as_the_runtime_reads(r#"{"detail-type": "Scheduled Event"}"#).unwrap_err();
        assert!(
            err.contains("not an SQS event") && err.contains("Records"),
            "{err}"
        );
    }

    #[test]
    fn an_unreadable_fifo_record_keeps_its_group_in_order() {
        // GIVEN a FIFO batch: group G = [g1, g2 (not base64), g3], group H = [h1]
        let fifo = |id: &str, group: &str, extra: Value| {
            let mut r = rec(
                id,
                json!({"eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders.fifo",
                       "attributes": {"ApproximateReceiveCount": "1", "MessageGroupId": group}}),
            );
            if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
                for (k, v) in extra {
                    r.insert(k.clone(), v.clone());
                }
            }
            r
        };
        let bad = json!({"messageAttributes": {"a": {"dataType": "Binary", "binaryValue": "%%"}}});
        let raw = json!({"Records": [
            fifo("g1", "G", json!({})), fifo("g2", "G", bad.clone()), fifo("h1", "H", json!({})),
            fifo("g3", "G", json!({}))
        ]});
        let records = parse_event(raw).unwrap();
        assert!(records[1].unreadable.is_some());
        // THEN it stays in its group, ahead of g3
        assert_eq!(records[1].group_id.as_deref(), Some("G"));
        assert!(is_fifo(&records));
        assert_eq!(plan_lanes(&records, true), vec![vec![0, 1, 3], vec![2]]);
        // AND one whose group cannot be read holds everything after it
        let mut unknown = records.clone();
        unknown[1].group_id = None;
        assert_eq!(plan_lanes(&unknown, true), vec![vec![0], vec![1, 2, 3]]);
    }

    #[test]
    fn a_payload_that_is_not_sqs_is_refused_with_resqs_own_error_naming_what_is_wrong() {
        // the function's payload type: resq's error, with the reason and what to do
        let err = SqsInvocation::from_json(r#"{"source": "aws.events"}"#).unwrap_err();
        assert!(matches!(err, EventError::NotSqs(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with("not an SQS event: "), "{text}");
        assert!(text.contains("Records"), "{text}");
        assert!(text.ends_with("the consumer must be invoked by an SQS event source mapping"));
        // a record that is not an object cannot be reported alone: the event is refused
        let err = SqsInvocation::from_json(r#"{"Records": 7}"#).unwrap_err();
        assert!(matches!(err, EventError::NotSqs(_)), "{err:?}");
        // a record that does not decode fails alone, as long as it has a messageId to report
        let records = SqsInvocation::from_json(
            r#"{"Records": [{"messageId": "m-1", "eventSource": "aws:sqs", "body": 7}]}"#,
        )
        .unwrap()
        .0;
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].message_id, "m-1");
        assert!(records[0].unreadable.is_some());
        // without one, the batch cannot be reported record by record: the invocation fails
        assert!(matches!(
            SqsInvocation::from_json(r#"{"Records": [{"eventSource": "aws:sqs", "body": 7}]}"#),
            Err(EventError::MissingMessageId { index: 0 })
        ));
    }
}
