//! SQS as resq uses it: the [`Queues`] port (one call each, with per-entry results) and its
//! adapter on the SDK's client, the messages sent and received, and SQS's own rules: batch
//! packing, the 12 h visibility limit, the FIFO ids of a copy, a queue's limits.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::ops::Range;
use std::time::Duration;

use crate::error::AwsError;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};

use crate::archive::{ArchiveEntry, OriginalMessage};
use crate::attributes::{
    AttributeValue, FAILURE_CLASS_PERMANENT, MAX_MESSAGE_BYTES, MessageAttributes, RedriveCount,
    X_FAILURE_CLASS, X_FAILURE_REASON,
};
use crate::reason::ArchiveReason;

/// SQS takes at most 10 entries per batch call.
pub const MAX_BATCH: usize = 10;

/// Batch calls of one operation in flight at once (a settling step of a 10,000-record batch
/// makes up to 1,000 of them).
pub const CALLS_IN_FLIGHT: usize = 16;

/// SQS never accepts a visibility timeout beyond 12 hours.
pub const MAX_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(12 * 60 * 60);

/// The longest visibility timeout SQS still accepts for a message received `since_receive`
/// ago, in whole seconds: its 12 h limit counts from the receive, not from the change, so a
/// message already held for an hour can be hidden for at most 11 more. A second is kept in
/// hand for the time the call takes.
pub fn visibility_left(since_receive: Duration) -> i32 {
    MAX_VISIBILITY_TIMEOUT
        .saturating_sub(since_receive)
        .saturating_sub(Duration::from_secs(1))
        .as_secs() as i32
}

/// A message to send: a consumer's DLQ copy or a redriver's replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// The body, unchanged from the original.
    pub body: String,
    /// The attributes of the copy (already within SQS's limits).
    pub attributes: MessageAttributes,
    /// `MessageGroupId` for a FIFO queue.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId` for a FIFO queue.
    pub deduplication_id: Option<String>,
}

impl OutgoingMessage {
    /// The size SQS counts (body plus attributes).
    pub fn size(&self) -> usize {
        crate::attributes::message_size(&self.body, &self.attributes)
    }
}

/// Splits messages (by size, in order) into `SendMessageBatch` calls of at most 10 entries and
/// 1 MiB.
pub fn pack(sizes: &[usize]) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && (i - start == MAX_BATCH || bytes + size > MAX_MESSAGE_BYTES) {
            batches.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < sizes.len() {
        batches.push(start..sizes.len());
    }
    batches
}

/// A message as `ReceiveMessage` returns it, in resq's form (what the redriver reads from the
/// DLQ, what the operator tool peeks at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// Its id in the queue.
    pub message_id: String,
    /// The receipt handle of this receive.
    pub receipt_handle: String,
    /// The body.
    pub body: String,
    /// System attributes (`SentTimestamp`, `ApproximateReceiveCount`, `MessageGroupId`, …).
    pub attributes: BTreeMap<String, String>,
    /// Message attributes with scalar values.
    pub message_attributes: MessageAttributes,
    /// List-only attributes, which SQS cannot carry in a copy.
    pub dropped_attributes: Vec<String>,
}

impl ReceivedMessage {
    /// Reads an SDK message; list-valued attributes are named in
    /// [`ReceivedMessage::dropped_attributes`] instead of kept.
    pub fn from_sdk(m: aws_sdk_sqs::types::Message) -> Self {
        let mut message_attributes = MessageAttributes::new();
        let mut dropped_attributes = Vec::new();
        for (name, v) in m.message_attributes.unwrap_or_default() {
            match AttributeValue::from_sdk(&v) {
                Some(a) => {
                    message_attributes.insert(name, a);
                }
                None => dropped_attributes.push(name),
            }
        }
        Self {
            message_id: m.message_id.unwrap_or_default(),
            receipt_handle: m.receipt_handle.unwrap_or_default(),
            body: m.body.unwrap_or_default(),
            attributes: m
                .attributes
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k.as_str().to_owned(), v))
                .collect(),
            message_attributes,
            dropped_attributes,
        }
    }

    /// `x-redrive-count` as read.
    pub fn redrive_count(&self) -> RedriveCount {
        crate::attributes::parse_redrive_count(&self.message_attributes)
    }

    /// Epoch millis of the producer's send.
    pub fn first_sent_at(&self) -> Option<u64> {
        crate::attributes::first_sent_at(
            &self.message_attributes,
            self.attributes
                .get("SentTimestamp")
                .and_then(|s| s.trim().parse().ok()),
        )
    }

    /// `x-failure-reason`, if any.
    pub fn failure_reason(&self) -> Option<&str> {
        self.message_attributes
            .get(X_FAILURE_REASON)
            .and_then(|v| v.string_value.as_deref())
    }

    /// Marked `x-failure-class=permanent` by the consumer.
    pub fn is_permanent(&self) -> bool {
        self.message_attributes
            .get(X_FAILURE_CLASS)
            .and_then(|v| v.string_value.as_deref())
            == Some(FAILURE_CLASS_PERMANENT)
    }

    /// The FIFO message group, if any.
    pub fn group_id(&self) -> Option<&str> {
        self.attributes.get("MessageGroupId").map(String::as_str)
    }

    /// What the archive keeps of it: the message whole, and what resq knows about it.
    pub fn archive_entry(
        &self,
        reason: ArchiveReason,
        source_queue: &str,
        last_error: Option<String>,
    ) -> ArchiveEntry {
        ArchiveEntry::new(
            reason,
            source_queue,
            OriginalMessage {
                message_id: self.message_id.clone(),
                body: self.body.clone(),
                message_attributes: self.message_attributes.clone(),
                attributes: self.attributes.clone(),
                raw_record: None,
            },
            last_error,
        )
    }
}

/// Per entry of a batch call: `Ok` when SQS reported it `Successful` (for a send, with the
/// copy's new message id), else why not.
pub(crate) type EntryResults<T> = Vec<Result<T, AwsError>>;

/// The SQS calls resq makes, one call each (the batch calls take at most [`MAX_BATCH`]
/// entries; [`crate::settle`] splits and paces them). Implemented on the SDK's client, and on
/// an in-memory double for tests (`resq-testing`).
pub trait Queues: Send + Sync {
    /// One `ReceiveMessage`: up to `max` (1–10) messages with every message and system
    /// attribute, hidden for `visibility` seconds (`None`: the queue's own timeout), waiting up
    /// to `wait_seconds` for the first.
    fn receive(
        &self,
        queue: &str,
        max: i32,
        visibility: Option<i32>,
        wait_seconds: i32,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, AwsError>> + Send;

    /// One `SendMessageBatch`. `Err` when the call itself failed: nothing was confirmed.
    fn send(
        &self,
        queue: &str,
        messages: &[&OutgoingMessage],
    ) -> impl Future<Output = Result<EntryResults<String>, AwsError>> + Send;

    /// One `DeleteMessageBatch` of receipt handles.
    fn delete(
        &self,
        queue: &str,
        receipt_handles: &[&str],
    ) -> impl Future<Output = Result<EntryResults<()>, AwsError>> + Send;

    /// One `ChangeMessageVisibilityBatch` of (receipt handle, seconds).
    fn change_visibility(
        &self,
        queue: &str,
        changes: &[(&str, i32)],
    ) -> impl Future<Output = Result<EntryResults<()>, AwsError>> + Send;

    /// One `GetQueueAttributes`: the queue's redrive policy, retention and visibility timeout.
    fn limits(&self, queue: &str) -> impl Future<Output = Result<QueueLimits, AwsError>> + Send;
}

/// One `ReceiveMessage` call as Lambda's poller and the redriver make it: up to `max` (1–10)
/// messages with every message and system attribute, hidden for `visibility` seconds (`None`:
/// the queue's own visibility timeout), waiting up to `wait_seconds` for the first; as the SDK
/// gives them (the local event source mapping builds Lambda's event from them).
pub async fn receive(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    max: i32,
    visibility: Option<i32>,
    wait_seconds: i32,
) -> Result<Vec<aws_sdk_sqs::types::Message>, AwsError> {
    let out = client
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(max.clamp(1, MAX_BATCH as i32))
        .set_visibility_timeout(visibility)
        .wait_time_seconds(wait_seconds)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .customize()
        .config_override(
            aws_sdk_sqs::config::Builder::default()
                .timeout_config(crate::aws::long_poll_timeouts(wait_seconds)),
        )
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    Ok(out.messages.unwrap_or_default())
}

/// [`Queues`] on SQS.
impl Queues for aws_sdk_sqs::Client {
    async fn receive(
        &self,
        queue: &str,
        max: i32,
        visibility: Option<i32>,
        wait_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, AwsError> {
        let messages = receive(self, queue, max, visibility, wait_seconds).await?;
        Ok(messages
            .into_iter()
            .map(ReceivedMessage::from_sdk)
            .collect())
    }

    async fn send(
        &self,
        queue: &str,
        messages: &[&OutgoingMessage],
    ) -> Result<EntryResults<String>, AwsError> {
        let mut entries = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(&m.body)
                .set_message_attributes(
                    Some(sdk_attributes(&m.attributes)?).filter(|a| !a.is_empty()),
                )
                .set_message_group_id(m.group_id.clone())
                .set_message_deduplication_id(m.deduplication_id.clone())
                .build()
                .map_err(|e| AwsError::local(e.to_string()))?;
            entries.push(entry);
        }
        let out = self
            .send_message_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(AwsError::from_sdk)?;
        let successful = out
            .successful()
            .iter()
            .map(|s| (s.id().to_owned(), s.message_id().to_owned()));
        Ok(entry_results(
            messages.len(),
            successful,
            out.failed(),
            "SendMessageBatch",
        ))
    }

    async fn delete(
        &self,
        queue: &str,
        receipt_handles: &[&str],
    ) -> Result<EntryResults<()>, AwsError> {
        let entries = receipt_handles
            .iter()
            .enumerate()
            .map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*receipt)
                    .build()
                    .map_err(|e| AwsError::local(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .delete_message_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(AwsError::from_sdk)?;
        let successful = out.successful().iter().map(|s| (s.id().to_owned(), ()));
        Ok(entry_results(
            receipt_handles.len(),
            successful,
            out.failed(),
            "DeleteMessageBatch",
        ))
    }

    async fn change_visibility(
        &self,
        queue: &str,
        changes: &[(&str, i32)],
    ) -> Result<EntryResults<()>, AwsError> {
        let entries = changes
            .iter()
            .enumerate()
            .map(|(i, (receipt, seconds))| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*receipt)
                    .visibility_timeout(*seconds)
                    .build()
                    .map_err(|e| AwsError::local(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .change_message_visibility_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(AwsError::from_sdk)?;
        let successful = out.successful().iter().map(|s| (s.id().to_owned(), ()));
        let call = "ChangeMessageVisibilityBatch";
        Ok(entry_results(changes.len(), successful, out.failed(), call))
    }

    async fn limits(&self, queue: &str) -> Result<QueueLimits, AwsError> {
        read_limits(self, queue).await
    }
}

impl<T: Queues> Queues for &T {
    fn receive(
        &self,
        queue: &str,
        max: i32,
        visibility: Option<i32>,
        wait_seconds: i32,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, AwsError>> + Send {
        (**self).receive(queue, max, visibility, wait_seconds)
    }

    fn send(
        &self,
        queue: &str,
        messages: &[&OutgoingMessage],
    ) -> impl Future<Output = Result<EntryResults<String>, AwsError>> + Send {
        (**self).send(queue, messages)
    }

    fn delete(
        &self,
        queue: &str,
        receipt_handles: &[&str],
    ) -> impl Future<Output = Result<EntryResults<()>, AwsError>> + Send {
        (**self).delete(queue, receipt_handles)
    }

    fn change_visibility(
        &self,
        queue: &str,
        changes: &[(&str, i32)],
    ) -> impl Future<Output = Result<EntryResults<()>, AwsError>> + Send {
        (**self).change_visibility(queue, changes)
    }

    fn limits(&self, queue: &str) -> impl Future<Output = Result<QueueLimits, AwsError>> + Send {
        (**self).limits(queue)
    }
}

/// The SDK form of a message's attributes.
pub(crate) fn sdk_attributes(
    attrs: &MessageAttributes,
) -> Result<HashMap<String, MessageAttributeValue>, AwsError> {
    attrs
        .iter()
        .map(|(name, v)| {
            v.to_sdk()
                .map(|v| (name.clone(), v))
                .map_err(|e| AwsError::local(format!("attribute {name}: {e}")))
        })
        .collect()
}

/// Per entry of a call of `len`: `Ok` for the ids SQS listed `Successful`, else its `Failed`
/// entry as an error (an entry listed nowhere counts as not done).
fn entry_results<T>(
    len: usize,
    successful: impl Iterator<Item = (String, T)>,
    failed: &[BatchResultErrorEntry],
    call: &str,
) -> EntryResults<T> {
    let mut results: EntryResults<T> = (0..len)
        .map(|i| {
            Err(match failed.iter().find(|f| f.id() == i.to_string()) {
                Some(f) => AwsError::service(
                    f.code(),
                    format!("{}: {}", f.code(), f.message().unwrap_or_default()),
                ),
                None => AwsError::local(format!("not reported by {call}")),
            })
        })
        .collect();
    for (id, value) in successful {
        if let Some(r) = id.parse::<usize>().ok().and_then(|i| results.get_mut(i)) {
            *r = Ok(value);
        }
    }
    results
}

// FIFO queues: how resq recognises them and the message group and deduplication ids of the
// copies it sends (a DLQ copy of a permanent failure, a replay, a restored archive entry).
// See docs/design.md, "FIFO".
//
// A copy keeps the original's `MessageGroupId`, so a group's order survives the trip (and, on
// a standard queue, a fair queue's tenant: docs/tenants.md). A FIFO copy's
// deduplication id is derived from the original's message id and what the copy is, so a
// retried send of the same copy (an entry SQS did not confirm, a run that ended before its
// delete) is dropped by SQS as a duplicate inside its five-minute window, while a later,
// different copy of the same message (the next replay) is not.

/// SQS's limit on `MessageGroupId` and `MessageDeduplicationId`.
pub const MAX_ID_LEN: usize = 128;

/// The group of a copy whose original had none (a message moved from a standard queue).
pub const DEFAULT_GROUP: &str = "resq";

/// A queue URL or ARN names a FIFO queue (its name ends `.fifo`).
pub fn is_fifo(queue: &str) -> bool {
    queue.ends_with(".fifo")
}

/// What a copy is, for its deduplication id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copy {
    /// The consumer's DLQ copy of a permanent failure.
    DeadLetter,
    /// The redriver's replay carrying this `x-redrive-count`.
    Replay {
        /// The replay's `x-redrive-count`.
        redrive_count: u64,
    },
    /// An archive entry restored by the operator tool.
    Restore,
}

/// The `(MessageGroupId, MessageDeduplicationId)` of a copy of message `message_id` (whose
/// group was `group`): to a FIFO queue, the group (or [`DEFAULT_GROUP`]) and a deduplication
/// id; to a standard queue, the group alone (a fair queue's tenant), none without one.
pub fn copy_ids(
    to_fifo: bool,
    group: Option<&str>,
    copy: Copy,
    message_id: &str,
) -> (Option<String>, Option<String>) {
    if !to_fifo {
        return (group.map(str::to_owned), None);
    }
    let deduplication_id = match copy {
        Copy::DeadLetter => format!("permanent-{message_id}"),
        Copy::Replay { redrive_count } => format!("redrive-{redrive_count}-{message_id}"),
        Copy::Restore => format!("restore-{message_id}"),
    };
    (
        Some(group.unwrap_or(DEFAULT_GROUP).to_owned()),
        Some(deduplication_id.chars().take(MAX_ID_LEN).collect()),
    )
}

// A source queue's limits as the consumer sees them (docs/design.md, "Last allowed
// receive"): what SQS puts on a message's life in it (its RedrivePolicy's `maxReceiveCount`,
// its retention, its visibility timeout), read once per queue. Reading the attributes is the
// only I/O here ([`read_limits`]).

/// What SQS does with a message in a queue: how often it may be received before SQS moves it
/// to the DLQ, and how long it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueLimits {
    /// The RedrivePolicy's `maxReceiveCount` (`None`: the queue has no redrive policy).
    pub max_receive_count: Option<u32>,
    /// The RedrivePolicy's `deadLetterTargetArn`.
    pub dead_letter_target: Option<String>,
    /// `MessageRetentionPeriod`: SQS deletes a message this long after it was sent.
    pub retention: Duration,
    /// `VisibilityTimeout`: when a message not backed off comes back.
    pub visibility_timeout: Duration,
    /// `ApproximateNumberOfMessages` when these were read (a snapshot, for a reader that
    /// reads them each time: the redriver's consumer breaker; `None` when not given).
    pub visible: Option<u64>,
}

impl QueueLimits {
    /// SQS's defaults for a queue without a redrive policy: 4 days' retention, a 30 s
    /// visibility timeout.
    pub fn sqs_defaults() -> Self {
        Self {
            max_receive_count: None,
            dead_letter_target: None,
            retention: Duration::from_secs(345_600),
            visibility_timeout: Duration::from_secs(30),
            visible: None,
        }
    }

    /// The limits in a queue's attributes, by name as `GetQueueAttributes` returns them
    /// (`RedrivePolicy` is JSON, its `maxReceiveCount` a number or a string of one). A missing
    /// retention or visibility timeout is SQS's default; one that does not read is an error.
    pub(crate) fn from_attributes(attributes: &HashMap<String, String>) -> Result<Self, String> {
        let defaults = Self::sqs_defaults();
        let seconds = |name: &str, default: Duration| match attributes.get(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| format!("{name} is {v:?}, not a number of seconds")),
        };
        let (max_receive_count, dead_letter_target) = match attributes.get("RedrivePolicy") {
            None => (None, None),
            Some(p) if p.trim().is_empty() => (None, None),
            Some(policy) => {
                let v: serde_json::Value = serde_json::from_str(policy)
                    .map_err(|e| format!("RedrivePolicy {policy:?} is not JSON: {e}"))?;
                let count = match &v["maxReceiveCount"] {
                    serde_json::Value::Number(n) => n.as_u64(),
                    serde_json::Value::String(s) => s.trim().parse().ok(),
                    _ => None,
                }
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("RedrivePolicy {policy:?} has no maxReceiveCount"))?;
                let target = v["deadLetterTargetArn"].as_str().map(str::to_owned);
                (Some(count), target)
            }
        };
        Ok(Self {
            max_receive_count,
            dead_letter_target,
            retention: seconds("MessageRetentionPeriod", defaults.retention)?,
            visibility_timeout: seconds("VisibilityTimeout", defaults.visibility_timeout)?,
            visible: attributes
                .get("ApproximateNumberOfMessages")
                .and_then(|v| v.trim().parse().ok()),
        })
    }
}

/// A queue's limits, by `GetQueueAttributes`.
pub async fn read_limits(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<QueueLimits, AwsError> {
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let out = client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(Q::RedrivePolicy)
        .attribute_names(Q::MessageRetentionPeriod)
        .attribute_names(Q::VisibilityTimeout)
        .attribute_names(Q::ApproximateNumberOfMessages)
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    let attributes: HashMap<String, String> = out
        .attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.as_str().to_owned(), v))
        .collect();
    QueueLimits::from_attributes(&attributes)
        .map_err(|e| AwsError::local(format!("{queue_url}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_twelve_hours_count_from_the_receive() {
        assert_eq!(visibility_left(Duration::ZERO), 43_199);
        assert_eq!(visibility_left(Duration::from_secs(3600)), 39_599);
        assert_eq!(visibility_left(Duration::from_millis(3_600_400)), 39_598);
        assert_eq!(visibility_left(MAX_VISIBILITY_TIMEOUT), 0);
        assert_eq!(visibility_left(Duration::from_secs(100_000)), 0);
    }

    #[test]
    fn packing_respects_count_and_bytes() {
        assert_eq!(pack(&[]), Vec::<Range<usize>>::new());
        assert_eq!(pack(&[10; 23]), vec![0..10, 10..20, 20..23]);
        let half = MAX_MESSAGE_BYTES / 2;
        assert_eq!(pack(&[half, half, 1, half]), vec![0..2, 2..4]);
        assert_eq!(
            pack(&[MAX_MESSAGE_BYTES, 5, MAX_MESSAGE_BYTES]),
            vec![0..1, 1..2, 2..3]
        );
        for batch in pack(&[700_000, 400_000, 300_000, 300_000, 300_000, 200]) {
            assert!(batch.len() <= MAX_BATCH);
        }
    }

    #[test]
    fn entries_not_reported_successful_carry_their_reason() {
        let failed = [BatchResultErrorEntry::builder()
            .id("1")
            .sender_fault(false)
            .code("InternalError")
            .message("boom")
            .build()
            .unwrap()];
        let successful = [("0".to_owned(), "new-0".to_owned())].into_iter();
        let results = entry_results(3, successful, &failed, "SendMessageBatch");
        assert_eq!(results[0], Ok("new-0".to_owned()));
        let failed = results[1].as_ref().unwrap_err();
        assert_eq!(
            (failed.code.as_deref(), failed.message.as_str()),
            (Some("InternalError"), "InternalError: boom")
        );
        assert_eq!(
            results[2].as_ref().unwrap_err().message,
            "not reported by SendMessageBatch"
        );
    }

    /// The adapter on the SDK's client, against faults the emulators cannot produce (partial
    /// batch failures, throttling), through aws-smithy-mocks.
    mod adapter {
        use super::super::*;
        use aws_sdk_sqs::Client;
        use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
        use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
        use aws_sdk_sqs::types::ChangeMessageVisibilityBatchResultEntry;
        use aws_sdk_sqs::types::error::RequestThrottled;
        use aws_smithy_mocks::{RuleMode, mock, mock_client};

        fn throttled() -> RequestThrottled {
            let meta = aws_sdk_sqs::error::ErrorMetadata::builder()
                .code("RequestThrottled")
                .message("Rate exceeded")
                .build();
            RequestThrottled::builder()
                .message("Rate exceeded")
                .meta(meta)
                .build()
        }

        #[tokio::test]
        async fn a_partly_failed_visibility_call_is_reported_per_entry() {
            // GIVEN SQS accepts entries 0 and 2 but not entry 1
            let rule = mock!(Client::change_message_visibility_batch)
                .match_requests(|r| r.queue_url() == Some("main"))
                .then_compute_output(|req| {
                    let mut out = ChangeMessageVisibilityBatchOutput::builder();
                    for e in req.entries() {
                        if e.id() == "1" {
                            out = out.failed(
                                BatchResultErrorEntry::builder()
                                    .id("1")
                                    .sender_fault(true)
                                    .code("ReceiptHandleIsInvalid")
                                    .message("expired")
                                    .build()
                                    .unwrap(),
                            );
                        } else {
                            out = out.successful(
                                ChangeMessageVisibilityBatchResultEntry::builder()
                                    .id(e.id())
                                    .build()
                                    .unwrap(),
                            );
                        }
                    }
                    out.build().unwrap()
                });
            let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
            // WHEN three changes are made in one call
            let results = client
                .change_visibility("main", &[("rh0", 5), ("rh1", 5), ("rh2", 5)])
                .await
                .unwrap();
            // THEN entry 1 is reported, with the reason
            assert_eq!(rule.num_calls(), 1);
            assert!(results[0].is_ok() && results[2].is_ok());
            let failed = results[1].as_ref().unwrap_err();
            assert_eq!(failed.code.as_deref(), Some("ReceiptHandleIsInvalid"));
            assert_eq!(failed.message, "ReceiptHandleIsInvalid: expired");
        }

        #[tokio::test]
        async fn a_failed_visibility_call_is_the_calls_error() {
            let rule = mock!(Client::change_message_visibility_batch)
                .sequence()
                .http_status(500, None)
                .repeatedly()
                .build();
            let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
            let result = client.change_visibility("main", &[("rh0", 5)]).await;
            assert!(result.is_err(), "{result:?}");
        }

        #[tokio::test]
        async fn a_throttled_send_is_an_error_not_a_drop() {
            // the rule answers only the call that carries the copy as built (one entry, body and
            // attributes unchanged, no FIFO ids): any other request would find no rule and fail
            // with a different error
            let rule = mock!(Client::send_message_batch)
                .match_requests(|r| {
                    let [entry] = r.entries() else { return false };
                    entry.message_body() == "{"
                        && entry
                            .message_attributes()
                            .and_then(|a| a.get("x-failure-class"))
                            .and_then(|v| v.string_value())
                            == Some("permanent")
                        && entry.message_group_id().is_none()
                        && entry.message_deduplication_id().is_none()
                        && r.queue_url() == Some("dlq")
                })
                .then_error(|| SendMessageBatchError::RequestThrottled(throttled()));
            let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
            let message = OutgoingMessage {
                body: "{".into(),
                attributes: MessageAttributes::from([(
                    "x-failure-class".into(),
                    AttributeValue::string("permanent"),
                )]),
                group_id: None,
                deduplication_id: None,
            };
            let err = client.send("dlq", &[&message]).await.unwrap_err();
            // THEN the throttle is the call's error (nothing counted as sent), as the service said
            assert_eq!(err.code.as_deref(), Some("RequestThrottled"));
            assert_eq!(err.kind, crate::error::AwsErrorKind::Service);
            assert!(err.message.contains("Rate exceeded"), "{err}");
            assert!(rule.num_calls() >= 1, "the copy reached SQS as built");
        }
    }

    #[test]
    fn a_standard_queue_gets_the_group_alone() {
        // a fair queue's tenant stays on the copy; no deduplication id (SQS refuses one there)
        assert_eq!(
            copy_ids(false, Some("g"), Copy::Restore, "m"),
            (Some("g".into()), None)
        );
        assert_eq!(copy_ids(false, None, Copy::Restore, "m"), (None, None));
    }

    #[test]
    fn each_copy_keeps_the_group_and_gets_its_own_deduplication_id() {
        let ids = |copy| copy_ids(true, Some("g-1"), copy, "m-1");
        assert_eq!(
            ids(Copy::DeadLetter),
            (Some("g-1".into()), Some("permanent-m-1".into()))
        );
        assert_eq!(
            ids(Copy::Replay { redrive_count: 2 }),
            (Some("g-1".into()), Some("redrive-2-m-1".into()))
        );
        assert_eq!(
            ids(Copy::Restore),
            (Some("g-1".into()), Some("restore-m-1".into()))
        );
        // the next replay of the same message is a different copy
        assert_ne!(
            ids(Copy::Replay { redrive_count: 2 }),
            ids(Copy::Replay { redrive_count: 3 })
        );
    }

    #[test]
    fn ids_stay_within_sqs_limits() {
        let long = "x".repeat(300);
        let (group, dedup) = copy_ids(true, None, Copy::Replay { redrive_count: 9 }, &long);
        assert_eq!(group.as_deref(), Some(DEFAULT_GROUP));
        assert_eq!(dedup.unwrap().len(), MAX_ID_LEN);
    }

    #[test]
    fn fifo_is_the_name_suffix() {
        assert!(is_fifo("https://sqs.eu-west-1.amazonaws.com/1/orders.fifo"));
        assert!(is_fifo("arn:aws:sqs:eu-west-1:1:orders.fifo"));
        assert!(!is_fifo(
            "https://sqs.eu-west-1.amazonaws.com/1/orders-fifo"
        ));
    }

    fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn limits_read_from_the_attributes_as_sqs_returns_them() {
        let dlq = "arn:aws:sqs:us-east-1:123456789012:orders-dlq";
        for policy in [
            format!(r#"{{"deadLetterTargetArn":"{dlq}","maxReceiveCount":5}}"#),
            format!(r#"{{"deadLetterTargetArn":"{dlq}","maxReceiveCount":"5"}}"#),
        ] {
            let l = QueueLimits::from_attributes(&attrs(&[
                ("RedrivePolicy", &policy),
                ("MessageRetentionPeriod", "3600"),
                ("VisibilityTimeout", "180"),
            ]))
            .unwrap();
            assert_eq!(l.max_receive_count, Some(5));
            assert_eq!(l.dead_letter_target.as_deref(), Some(dlq));
            assert_eq!(l.retention, Duration::from_secs(3600));
            assert_eq!(l.visibility_timeout, Duration::from_secs(180));
        }
        assert_eq!(
            QueueLimits::from_attributes(&attrs(&[])).unwrap(),
            QueueLimits::sqs_defaults()
        );
        for bad in [
            attrs(&[("RedrivePolicy", "{")]),
            attrs(&[("RedrivePolicy", r#"{"maxReceiveCount":0}"#)]),
            attrs(&[("MessageRetentionPeriod", "soon")]),
        ] {
            assert!(QueueLimits::from_attributes(&bad).is_err(), "{bad:?}");
        }
    }
}
