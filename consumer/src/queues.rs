//! The queue port of the consumer (send a copy to the DLQ, change visibility) and its SQS
//! adapter.

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;
use resq::attributes::MessageAttributes;

/// SQS takes at most 10 entries per batch call.
pub const MAX_BATCH: usize = 10;

/// A copy to send to the DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// The body, unchanged.
    pub body: String,
    /// The attributes of the copy (already within the limit).
    pub attributes: MessageAttributes,
    /// `MessageGroupId` for a FIFO DLQ.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId` for a FIFO DLQ.
    pub deduplication_id: Option<String>,
}

/// A visibility change for one received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibilityChange {
    /// The message (for logs).
    pub message_id: String,
    /// The receipt handle of this delivery.
    pub receipt_handle: String,
    /// New visibility timeout in seconds (0–43200).
    pub timeout_seconds: i32,
}

/// A call that did not go through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QueueError {
    /// The service's error code when there was one.
    pub code: Option<String>,
    /// The full error chain.
    pub message: String,
}

/// What the consumer needs from SQS.
pub trait QueuePort: Send + Sync {
    /// Sends one copy to the DLQ; `Ok` only when SQS accepted it.
    fn send_to_dlq(
        &self,
        message: OutgoingMessage,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;

    /// Changes visibility in batches of 10; returns the changes that failed, with why.
    fn change_visibility(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> impl Future<Output = Vec<(VisibilityChange, String)>> + Send;
}

/// [`QueuePort`] on real SQS queues.
#[derive(Debug, Clone)]
pub struct SqsQueues {
    client: aws_sdk_sqs::Client,
    main_queue_url: String,
    dlq_url: String,
}

impl SqsQueues {
    /// The adapter for the main queue (visibility) and its DLQ (copies).
    pub fn new(
        client: aws_sdk_sqs::Client,
        main_queue_url: impl Into<String>,
        dlq_url: impl Into<String>,
    ) -> Self {
        Self {
            client,
            main_queue_url: main_queue_url.into(),
            dlq_url: dlq_url.into(),
        }
    }
}

fn queue_error<E: ProvideErrorMetadata + std::error::Error + 'static>(err: E) -> QueueError {
    QueueError {
        code: err.code().map(str::to_owned),
        message: DisplayErrorContext(&err).to_string(),
    }
}

impl QueuePort for SqsQueues {
    async fn send_to_dlq(&self, message: OutgoingMessage) -> Result<(), QueueError> {
        let mut attributes = HashMap::with_capacity(message.attributes.len());
        for (name, value) in &message.attributes {
            let v = value.to_sdk().map_err(|e| QueueError {
                code: None,
                message: format!("attribute {name}: {e}"),
            })?;
            attributes.insert(name.clone(), v);
        }
        self.client
            .send_message()
            .queue_url(&self.dlq_url)
            .message_body(message.body)
            .set_message_attributes(Some(attributes))
            .set_message_group_id(message.group_id)
            .set_message_deduplication_id(message.deduplication_id)
            .send()
            .await
            .map(|_| ())
            .map_err(queue_error)
    }

    async fn change_visibility(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> Vec<(VisibilityChange, String)> {
        let mut failed = Vec::new();
        for chunk in changes.chunks(MAX_BATCH) {
            let entries: Vec<_> = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(&c.receipt_handle)
                        .visibility_timeout(c.timeout_seconds)
                        .build()
                        .ok()
                })
                .collect();
            let result = self
                .client
                .change_message_visibility_batch()
                .queue_url(&self.main_queue_url)
                .set_entries(Some(entries))
                .send()
                .await;
            match result {
                Ok(out) => {
                    for f in out.failed() {
                        if let Some(c) = f.id().parse::<usize>().ok().and_then(|i| chunk.get(i)) {
                            failed.push((
                                c.clone(),
                                format!("{}: {}", f.code(), f.message().unwrap_or("")),
                            ));
                        }
                    }
                }
                Err(err) => {
                    let why = queue_error(err).message;
                    failed.extend(chunk.iter().map(|c| (c.clone(), why.clone())));
                }
            }
        }
        failed
    }
}
