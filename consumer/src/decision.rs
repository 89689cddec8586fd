//! Pure decisions of the consumer: reading the event, grouping records into lanes, what each
//! outcome means for the batch response and for visibility. No I/O here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use rand::Rng;
use resq::attributes::{
    self, AttributeLimitExceeded, AttributeValue, FAILURE_CLASS_PERMANENT, MAX_MESSAGE_BYTES,
    MessageAttributes, RedriveCount, X_FAILURE_CLASS, X_FAILURE_REASON, X_FIRST_SENT_AT,
};
use resq::backoff::Backoff;
use resq::reason::ArchiveReason;
use serde_json::Value;

use crate::queues::{OutgoingMessage, VisibilityChange};

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
    pub attributes: BTreeMap<String, String>,
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
    /// The queue the record came from.
    pub source_arn: Option<String>,
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
}

/// The consumer's invocation payload: an SQS event, read straight from the runtime's bytes.
/// Anything else fails deserialization with [`EventError::NotSqs`]'s wording, so the function
/// error says what was wrong and what invokes the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsInvocation(pub SqsEvent);

impl<'de> serde::Deserialize<'de> for SqsInvocation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        SqsEvent::deserialize(d)
            .map(SqsInvocation)
            .map_err(|e| serde::de::Error::custom(EventError::NotSqs(e.to_string())))
    }
}

/// Reads the event. Bodies stay text: one malformed body never fails the batch.
pub fn parse_event(value: Value) -> Result<Vec<Record>, EventError> {
    if !value.get("Records").is_some_and(Value::is_array) {
        return Err(EventError::NotSqs("it has no \"Records\" array".into()));
    }
    let event: SqsEvent =
        serde_json::from_value(value).map_err(|e| EventError::NotSqs(e.to_string()))?;
    records_from(event)
}

/// The records of an SQS event the runtime has already deserialized (the functions' path: no
/// intermediate JSON tree). `Err` for a record that is not from SQS or has no `messageId`.
pub fn records_from(event: SqsEvent) -> Result<Vec<Record>, EventError> {
    event
        .records
        .into_iter()
        .enumerate()
        .map(|(index, m)| {
            match m.event_source.as_deref() {
                Some("aws:sqs") => {}
                other => {
                    return Err(EventError::NotSqs(format!(
                        "record {index} has eventSource {other:?}, expected \"aws:sqs\""
                    )));
                }
            }
            let message_id = m
                .message_id
                .filter(|id| !id.is_empty())
                .ok_or(EventError::MissingMessageId { index })?;
            let (message_attributes, dropped_attributes) =
                attributes::from_lambda_attributes(&m.message_attributes);
            let receive_count = m
                .attributes
                .get("ApproximateReceiveCount")
                .and_then(|c| c.trim().parse::<u32>().ok())
                .unwrap_or(1);
            let redrive_count = attributes::parse_redrive_count(&message_attributes);
            Ok(Record {
                message_id,
                receipt_handle: m.receipt_handle.unwrap_or_default(),
                body: m.body,
                group_id: m.attributes.get("MessageGroupId").cloned(),
                attributes: m.attributes.into_iter().collect(),
                message_attributes,
                dropped_attributes,
                receive_count,
                redrive_count,
                source_arn: m.event_source_arn,
            })
        })
        .collect()
}

/// A FIFO source: its ARN ends in `.fifo`.
pub fn is_fifo(records: &[Record]) -> bool {
    records
        .first()
        .and_then(|r| r.source_arn.as_deref())
        .is_some_and(|arn| arn.ends_with(".fifo"))
}

/// Lanes run concurrently; records within a lane run in order. Standard queues: one record
/// per lane. FIFO: one lane per `MessageGroupId`, in order of first appearance.
pub fn plan_lanes(records: &[Record], fifo: bool) -> Vec<Vec<usize>> {
    if !fifo {
        return (0..records.len()).map(|i| vec![i]).collect();
    }
    let mut lanes: Vec<Vec<usize>> = Vec::new();
    let mut by_group: HashMap<&str, usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        let group = r.group_id.as_deref().unwrap_or("");
        match by_group.get(group) {
            Some(&lane) => lanes[lane].push(i),
            None => {
                by_group.insert(group, lanes.len());
                lanes.push(vec![i]);
            }
        }
    }
    lanes
}

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The order's effect is recorded (or was already).
    Processed,
    /// Archived to S3 with the full message; acknowledged.
    Archived(ArchiveReason),
    /// A copy is in the DLQ with `x-failure-class=permanent` and this reason; acknowledged.
    DeadLettered(String),
    /// Reported in `batchItemFailures`: the message stays in the queue.
    Failed(Failure),
}

impl Outcome {
    /// Reported back to Lambda as failed.
    pub fn is_failed(&self) -> bool {
        matches!(self, Outcome::Failed(_))
    }
}

/// Why a record is reported failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Worth retrying: handler transient error, panic, timeout, or an archive/DLQ write that
    /// did not go through.
    Transient {
        /// Machine code.
        code: String,
        /// What happened.
        details: String,
    },
    /// FIFO: an earlier record of the same group failed, so this one was not run.
    GroupBlocked,
    /// The deadline margin was reached before this record started.
    NotStarted,
}

impl Failure {
    /// Machine code for logs.
    pub fn code(&self) -> &str {
        match self {
            Failure::Transient { code, .. } => code,
            Failure::GroupBlocked => "FIFO_GROUP_BLOCKED",
            Failure::NotStarted => "DEADLINE_NOT_STARTED",
        }
    }
}

/// When to stop starting records (`deadline - margin`) and when to abandon running ones
/// (`deadline - margin/2`, leaving time to report).
pub fn cutoffs(deadline: Instant, margin: Duration) -> (Instant, Instant) {
    let now = Instant::now();
    let sub = |d: Duration| deadline.checked_sub(d).unwrap_or_else(|| now.min(deadline));
    (sub(margin), sub(margin / 2))
}

/// The batch response: every failed record's id, in event order, once.
pub fn batch_response(records: &[Record], outcomes: &[Outcome]) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    let mut seen = HashSet::new();
    for (r, o) in records.iter().zip(outcomes) {
        if o.is_failed() && seen.insert(r.message_id.as_str()) {
            let mut f = BatchItemFailure::default();
            f.item_identifier = r.message_id.clone();
            response.batch_item_failures.push(f);
        }
    }
    response
}

/// Visibility changes for failed records: full jitter on the receive count; a FIFO record
/// blocked behind a failure in its group gets that record's delay, so the group comes back
/// together and in order.
pub fn plan_visibility(
    records: &[Record],
    lanes: &[Vec<usize>],
    outcomes: &[Outcome],
    backoff: &Backoff,
    rng: &mut impl Rng,
) -> Vec<VisibilityChange> {
    let mut changes = Vec::new();
    for lane in lanes {
        let mut group_delay = None;
        for &i in lane {
            let (r, o) = (&records[i], &outcomes[i]);
            let delay = match o {
                Outcome::Failed(Failure::GroupBlocked) => {
                    group_delay.unwrap_or_else(|| backoff.delay_seconds(r.receive_count, rng))
                }
                Outcome::Failed(_) => {
                    let d = backoff.delay_seconds(r.receive_count, rng);
                    group_delay.get_or_insert(d);
                    d
                }
                _ => continue,
            };
            if !r.receipt_handle.is_empty() {
                changes.push(VisibilityChange {
                    message_id: r.message_id.clone(),
                    receipt_handle: r.receipt_handle.clone(),
                    timeout_seconds: delay,
                });
            }
        }
    }
    changes
}

/// Why a DLQ copy cannot be sent: the record is archived instead (nothing is truncated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyRefused {
    /// More than 10 attributes.
    #[error(transparent)]
    AttributeLimit(#[from] AttributeLimitExceeded),
    /// Body plus attributes over SQS's 1 MiB.
    #[error("a copy would be {size} bytes; SQS allows {MAX_MESSAGE_BYTES}")]
    SizeLimit {
        /// The size SQS would count.
        size: usize,
    },
}

impl CopyRefused {
    /// The archive reason.
    pub fn reason(&self) -> ArchiveReason {
        match self {
            CopyRefused::AttributeLimit(_) => ArchiveReason::AttributeLimit,
            CopyRefused::SizeLimit { .. } => ArchiveReason::SizeLimit,
        }
    }
}

/// The DLQ copy of a permanent failure: body unchanged, original attributes kept,
/// `x-failure-class`, `x-failure-reason` and `x-first-sent-at` set. A FIFO DLQ copy keeps the
/// group and takes a deduplication id derived from the message id.
pub fn dead_letter_copy(
    record: &Record,
    reason: &str,
    dlq_is_fifo: bool,
) -> Result<OutgoingMessage, CopyRefused> {
    let mut set = vec![
        (
            X_FAILURE_CLASS,
            AttributeValue::string(FAILURE_CLASS_PERMANENT),
        ),
        (X_FAILURE_REASON, AttributeValue::string(reason)),
    ];
    if !record.message_attributes.contains_key(X_FIRST_SENT_AT)
        && let Some(sent) = attributes::first_sent_at(
            &record.message_attributes,
            record.attributes.get("SentTimestamp").map(String::as_str),
        )
    {
        set.push((X_FIRST_SENT_AT, AttributeValue::number(sent)));
    }
    let attributes = attributes::copy_attributes(&record.message_attributes, set)?;
    let body = record.body.clone().unwrap_or_default();
    let size = attributes::message_size(&body, &attributes);
    if size > MAX_MESSAGE_BYTES {
        return Err(CopyRefused::SizeLimit { size });
    }
    let (group_id, deduplication_id) = if dlq_is_fifo {
        let group = record.group_id.clone().unwrap_or_else(|| "resq".to_owned());
        (
            Some(group),
            Some(
                format!("permanent-{}", record.message_id)
                    .chars()
                    .take(128)
                    .collect(),
            ),
        )
    } else {
        (None, None)
    };
    Ok(OutgoingMessage {
        body,
        attributes,
        group_id,
        deduplication_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use serde_json::json;

    fn rec(id: &str, extra: Value) -> Value {
        let mut r = json!({
            "messageId": id, "receiptHandle": format!("rh-{id}"), "body": "{}",
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"},
            "messageAttributes": {}, "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders", "awsRegion": "us-east-1"
        });
        if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                r.insert(k.clone(), v.clone());
            }
        }
        r
    }

    fn fifo_records(groups: &[&str]) -> Vec<Record> {
        let recs: Vec<Value> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                rec(
                    &format!("m{i}"),
                    json!({
                        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders.fifo",
                        "attributes": {"ApproximateReceiveCount": "3", "MessageGroupId": g}
                    }),
                )
            })
            .collect();
        parse_event(json!({"Records": recs})).unwrap()
    }

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

    #[test]
    fn lanes_standard_and_fifo() {
        let records = fifo_records(&["a", "b", "a", "c", "b", "a"]);
        assert!(is_fifo(&records));
        assert_eq!(
            plan_lanes(&records, true),
            vec![vec![0, 2, 5], vec![1, 4], vec![3]]
        );
        assert_eq!(
            plan_lanes(&records, false),
            (0..6).map(|i| vec![i]).collect::<Vec<_>>()
        );
    }

    #[test]
    fn response_lists_each_failed_id_once_in_order() {
        let records = fifo_records(&["a", "a", "b", "c"]);
        let outcomes = vec![
            Outcome::Failed(Failure::Transient {
                code: "X".into(),
                details: String::new(),
            }),
            Outcome::Failed(Failure::GroupBlocked),
            Outcome::Processed,
            Outcome::DeadLettered("MALFORMED_JSON".into()),
        ];
        let ids: Vec<String> = batch_response(&records, &outcomes)
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        assert_eq!(ids, vec!["m0", "m1"]);
        let mut dup = records.clone();
        dup[1].message_id = "m0".into();
        assert_eq!(batch_response(&dup, &outcomes).batch_item_failures.len(), 1);
    }

    #[test]
    fn blocked_records_follow_their_groups_delay() {
        let records = fifo_records(&["a", "a", "a", "b", "c"]);
        let lanes = plan_lanes(&records, true);
        let outcomes = vec![
            Outcome::Processed,
            Outcome::Failed(Failure::Transient {
                code: "X".into(),
                details: String::new(),
            }),
            Outcome::Failed(Failure::GroupBlocked),
            Outcome::Failed(Failure::NotStarted),
            Outcome::Archived(ArchiveReason::RedriveCap),
        ];
        let backoff = Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(300),
        };
        for seed in 0..20 {
            let changes = plan_visibility(
                &records,
                &lanes,
                &outcomes,
                &backoff,
                &mut StdRng::seed_from_u64(seed),
            );
            let ids: Vec<&str> = changes.iter().map(|c| c.message_id.as_str()).collect();
            assert_eq!(ids, vec!["m1", "m2", "m3"]);
            assert_eq!(changes[0].timeout_seconds, changes[1].timeout_seconds);
            // receive count 3 ⇒ window [0, 40]
            assert!(
                changes
                    .iter()
                    .all(|c| (0..=40).contains(&c.timeout_seconds))
            );
            assert_eq!(changes[0].receipt_handle, "rh-m1");
        }
    }

    #[test]
    fn deadline_cutoffs() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(10);
        let (start_by, stop_by) = cutoffs(deadline, Duration::from_secs(2));
        assert_eq!(start_by, deadline - Duration::from_secs(2));
        assert_eq!(stop_by, deadline - Duration::from_secs(1));
        // a margin larger than the time left: nothing may start
        let (start_by, _) = cutoffs(now + Duration::from_millis(500), Duration::from_secs(2));
        assert!(start_by <= Instant::now());
    }

    #[test]
    fn dead_letter_copy_keeps_attributes_and_marks_the_failure() {
        let records = parse_event(json!({"Records": [rec("a", json!({"messageAttributes": {
            "trace": {"stringValue": "t-1", "dataType": "String"}
        }}))]}))
        .unwrap();
        let copy = dead_letter_copy(&records[0], "MALFORMED_JSON", false).unwrap();
        assert_eq!(copy.body, "{}");
        assert_eq!(
            copy.attributes["trace"].string_value.as_deref(),
            Some("t-1")
        );
        assert_eq!(
            copy.attributes[X_FAILURE_CLASS].string_value.as_deref(),
            Some("permanent")
        );
        assert_eq!(
            copy.attributes[X_FAILURE_REASON].string_value.as_deref(),
            Some("MALFORMED_JSON")
        );
        assert_eq!(
            copy.attributes[X_FIRST_SENT_AT].string_value.as_deref(),
            Some("1700000000000")
        );
        assert_eq!((copy.group_id, copy.deduplication_id), (None, None));

        let fifo = fifo_records(&["g7"]);
        let copy = dead_letter_copy(&fifo[0], "VALIDATION_FAILED", true).unwrap();
        assert_eq!(copy.group_id.as_deref(), Some("g7"));
        assert_eq!(copy.deduplication_id.as_deref(), Some("permanent-m0"));
    }

    #[test]
    fn dead_letter_copy_over_the_attribute_limit_fails() {
        let attrs: serde_json::Map<String, Value> = (0..9)
            .map(|i| {
                (
                    format!("a{i}"),
                    json!({"stringValue": "v", "dataType": "String"}),
                )
            })
            .collect();
        let records =
            parse_event(json!({"Records": [rec("a", json!({"messageAttributes": attrs}))]}))
                .unwrap();
        assert_eq!(
            dead_letter_copy(&records[0], "MALFORMED_JSON", false).unwrap_err(),
            CopyRefused::AttributeLimit(AttributeLimitExceeded { count: 12 })
        );
    }

    #[test]
    fn dead_letter_copy_over_the_size_limit_fails() {
        // a body that fits alone, but not with the failure marks
        let body = format!("{{{}", "x".repeat(MAX_MESSAGE_BYTES - 10));
        let records = parse_event(json!({"Records": [rec("a", json!({"body": body}))]})).unwrap();
        let refused = dead_letter_copy(&records[0], "MALFORMED_JSON", false).unwrap_err();
        assert_eq!(refused.reason(), ArchiveReason::SizeLimit);
        assert!(
            matches!(refused, CopyRefused::SizeLimit { size } if size > MAX_MESSAGE_BYTES),
            "{refused:?}"
        );
    }
}
