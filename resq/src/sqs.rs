//! SQS calls both functions make the same way: attribute conversion, batched sends,
//! visibility changes and deletes with per-entry results, and one error type for a call that
//! failed.

use std::collections::HashMap;
use std::future::Future;
use std::ops::Range;

use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};
use futures::StreamExt;

use crate::attributes::{MAX_MESSAGE_BYTES, MessageAttributes};

/// SQS takes at most 10 entries per batch call.
pub const MAX_BATCH: usize = 10;

/// Batch calls of one operation in flight at once (a settling step of a 10,000-record batch
/// makes up to 1,000 of them).
pub const CALLS_IN_FLIGHT: usize = 16;

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

/// One `SendMessageBatch` call of up to 10 messages: per message `None` when SQS reported it
/// `Successful`, else why not (anything not listed as `Successful` counts as not sent). `Err`
/// when the call itself failed: nothing was confirmed.
pub async fn send_batch(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    messages: &[&OutgoingMessage],
) -> Result<Vec<Option<String>>, AwsError> {
    let mut entries = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let entry = SendMessageBatchRequestEntry::builder()
            .id(i.to_string())
            .message_body(&m.body)
            .set_message_attributes(Some(sdk_attributes(&m.attributes)?).filter(|a| !a.is_empty()))
            .set_message_group_id(m.group_id.clone())
            .set_message_deduplication_id(m.deduplication_id.clone())
            .build()
            .map_err(|e| AwsError::local(e.to_string()))?;
        entries.push(entry);
    }
    let out = client
        .send_message_batch()
        .queue_url(queue_url)
        .set_entries(Some(entries))
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    let lost = unconfirmed(
        messages.len(),
        out.successful().iter().map(|s| s.id().to_owned()),
        out.failed(),
        "SendMessageBatch",
    );
    let mut results = vec![None; messages.len()];
    for (i, why) in lost {
        results[i] = Some(why);
    }
    Ok(results)
}

/// An AWS call that did not go through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AwsError {
    /// The service's error code when there was one (`RequestThrottled`, `AccessDenied`, …).
    pub code: Option<String>,
    /// The full error chain.
    pub message: String,
}

impl AwsError {
    /// From any SDK error, keeping its code and whole chain.
    pub fn from_sdk<E: ProvideErrorMetadata + std::error::Error + 'static>(err: E) -> Self {
        Self {
            code: err.code().map(str::to_owned),
            message: DisplayErrorContext(&err).to_string(),
        }
    }

    /// A problem found before calling.
    pub fn local(message: impl Into<String>) -> Self {
        Self {
            code: None,
            message: message.into(),
        }
    }
}

/// The SDK form of a message's attributes.
pub fn sdk_attributes(
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

fn entry_error(e: &BatchResultErrorEntry) -> String {
    format!("{}: {}", e.code(), e.message().unwrap_or(""))
}

/// Per-chunk outcome: the positions (within the chunk) not reported `Successful`, with why.
fn unconfirmed(
    len: usize,
    successful: impl Iterator<Item = String>,
    failed: &[BatchResultErrorEntry],
    call: &str,
) -> Vec<(usize, String)> {
    let mut done = vec![false; len];
    for id in successful {
        if let Some(d) = id.parse::<usize>().ok().and_then(|i| done.get_mut(i)) {
            *d = true;
        }
    }
    (0..len)
        .filter(|i| !done[*i])
        .map(|i| {
            let why = failed
                .iter()
                .find(|f| f.id() == i.to_string())
                .map_or(format!("not reported by {call}"), entry_error);
            (i, why)
        })
        .collect()
}

/// Runs one batch call per chunk of 10 positions, up to [`CALLS_IN_FLIGHT`] at once; `call`
/// returns the ids SQS reported `Successful` and its `Failed` entries. Returns the positions
/// not confirmed, with why, in order.
async fn in_batches<F, Fut>(len: usize, name: &str, call: F) -> Vec<(usize, String)>
where
    F: Fn(Range<usize>) -> Fut,
    Fut: Future<Output = Result<(Vec<String>, Vec<BatchResultErrorEntry>), AwsError>>,
{
    let chunks = (0..len)
        .step_by(MAX_BATCH)
        .map(|start| start..(start + MAX_BATCH).min(len));
    let call = &call;
    let mut failed: Vec<(usize, String)> = futures::stream::iter(chunks)
        .map(|range| async move {
            let start = range.start;
            let lost = match call(range.clone()).await {
                Ok((successful, errors)) => {
                    unconfirmed(range.len(), successful.into_iter(), &errors, name)
                }
                Err(e) => range
                    .clone()
                    .map(|i| (i - start, e.message.clone()))
                    .collect(),
            };
            lost.into_iter()
                .map(|(i, why)| (start + i, why))
                .collect::<Vec<_>>()
        })
        .buffer_unordered(CALLS_IN_FLIGHT)
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    failed.sort_by_key(|(i, _)| *i);
    failed
}

/// Sets visibility timeouts, 10 per call, calls in parallel. Returns the positions in `changes`
/// that did not change, with why.
pub async fn change_visibility(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    changes: &[(&str, i32)],
) -> Vec<(usize, String)> {
    in_batches(
        changes.len(),
        "ChangeMessageVisibilityBatch",
        |range| async move {
            let entries = changes[range]
                .iter()
                .enumerate()
                .filter_map(|(i, (receipt, timeout))| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(*receipt)
                        .visibility_timeout(*timeout)
                        .build()
                        .ok()
                })
                .collect();
            let out = client
                .change_message_visibility_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(AwsError::from_sdk)?;
            Ok((
                out.successful().iter().map(|s| s.id().to_owned()).collect(),
                out.failed().to_vec(),
            ))
        },
    )
    .await
}

/// Deletes messages, 10 per call, calls in parallel. Returns the positions in `receipts` not
/// deleted, with why.
pub async fn delete(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    receipts: &[&str],
) -> Vec<(usize, String)> {
    in_batches(receipts.len(), "DeleteMessageBatch", |range| async move {
        let entries = receipts[range]
            .iter()
            .enumerate()
            .filter_map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*receipt)
                    .build()
                    .ok()
            })
            .collect();
        let out = client
            .delete_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(AwsError::from_sdk)?;
        Ok((
            out.successful().iter().map(|s| s.id().to_owned()).collect(),
            out.failed().to_vec(),
        ))
    })
    .await
}

/// A queue's ARN.
pub async fn queue_arn(client: &aws_sdk_sqs::Client, queue_url: &str) -> Result<String, AwsError> {
    client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(AwsError::from_sdk)?
        .attributes
        .and_then(|mut a| a.remove(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .ok_or_else(|| AwsError::local(format!("{queue_url} has no QueueArn")))
}

/// A queue's depth: (`ApproximateNumberOfMessages`, `ApproximateNumberOfMessagesNotVisible`).
pub async fn depth(client: &aws_sdk_sqs::Client, queue_url: &str) -> Result<(u64, u64), AwsError> {
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let out = client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(Q::ApproximateNumberOfMessages)
        .attribute_names(Q::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    let get = |n: Q| {
        out.attributes()
            .and_then(|a| a.get(&n))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((
        get(Q::ApproximateNumberOfMessages),
        get(Q::ApproximateNumberOfMessagesNotVisible),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn unconfirmed_entries_carry_their_reason() {
        let failed = [BatchResultErrorEntry::builder()
            .id("1")
            .sender_fault(false)
            .code("InternalError")
            .message("boom")
            .build()
            .unwrap()];
        let lost = unconfirmed(3, ["0".to_owned()].into_iter(), &failed, "SendMessageBatch");
        assert_eq!(
            lost,
            vec![
                (1, "InternalError: boom".to_owned()),
                (2, "not reported by SendMessageBatch".to_owned())
            ]
        );
    }
}
