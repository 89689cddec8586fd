//! SQS calls both functions make the same way: attribute conversion, batched visibility
//! changes and deletes with per-entry results, and one error type for a call that failed.

use std::collections::HashMap;
use std::future::Future;
use std::ops::Range;

use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, MessageAttributeValue,
};

use crate::attributes::MessageAttributes;

/// SQS takes at most 10 entries per batch call.
pub const MAX_BATCH: usize = 10;

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

/// Runs one batch call per chunk of 10 positions; `call` returns the ids SQS reported
/// `Successful` and its `Failed` entries. Returns the positions not confirmed, with why.
async fn in_batches<F, Fut>(len: usize, name: &str, mut call: F) -> Vec<(usize, String)>
where
    F: FnMut(Range<usize>) -> Fut,
    Fut: Future<Output = Result<(Vec<String>, Vec<BatchResultErrorEntry>), AwsError>>,
{
    let mut failed = Vec::new();
    for start in (0..len).step_by(MAX_BATCH) {
        let range = start..(start + MAX_BATCH).min(len);
        let lost = match call(range.clone()).await {
            Ok((successful, errors)) => {
                unconfirmed(range.len(), successful.into_iter(), &errors, name)
            }
            Err(e) => range
                .clone()
                .map(|i| (i - start, e.message.clone()))
                .collect(),
        };
        failed.extend(lost.into_iter().map(|(i, why)| (start + i, why)));
    }
    failed
}

/// Sets visibility timeouts, 10 per call. Returns the positions in `changes` that did not
/// change, with why.
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

/// Deletes messages, 10 per call. Returns the positions in `receipts` not deleted, with why.
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
