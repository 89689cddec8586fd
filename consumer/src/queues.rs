//! The queue port of the consumer (send copies to the DLQ, change visibility) and its SQS
//! adapter.

use std::future::Future;

pub use resq::sqs::{OutgoingMessage, SqsQueues};

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
pub type QueueError = resq::sqs::AwsError;

/// What the consumer needs from SQS.
pub trait QueuePort: Send + Sync {
    /// Sends up to 10 copies (≤ 1 MiB together) to the DLQ in one call: per copy `None` when
    /// SQS reported it `Successful`, else why not. `Err` when the call itself failed.
    fn send_to_dlq(
        &self,
        messages: &[&OutgoingMessage],
    ) -> impl Future<Output = Result<Vec<Option<String>>, QueueError>> + Send;

    /// Changes visibility in batches of 10; returns the changes that failed, with why.
    fn change_visibility(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> impl Future<Output = Vec<(VisibilityChange, String)>> + Send;
}

/// What [`QueuePort`] on SQS needs: copies sent to the DLQ (`SendMessageBatch` authorizes as
/// `SendMessage`), backoff on the main queue (`ChangeMessageVisibilityBatch` as
/// `ChangeMessageVisibility`).
pub const PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("sqs:SendMessage", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:ChangeMessageVisibility", "OrdersQueue"),
];

/// [`QueuePort`] on real SQS queues: copies go to the DLQ, visibility changes to the main
/// queue.
impl QueuePort for SqsQueues {
    async fn send_to_dlq(
        &self,
        messages: &[&OutgoingMessage],
    ) -> Result<Vec<Option<String>>, QueueError> {
        resq::sqs::send_batch(&self.client, &self.dlq_url, messages).await
    }

    async fn change_visibility(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> Vec<(VisibilityChange, String)> {
        let entries: Vec<(&str, i32)> = changes
            .iter()
            .map(|c| (c.receipt_handle.as_str(), c.timeout_seconds))
            .collect();
        resq::sqs::change_visibility(&self.client, &self.main_queue_url, &entries)
            .await
            .into_iter()
            .filter_map(|(i, why)| changes.get(i).map(|c| (c.clone(), why)))
            .collect()
    }
}

/// Faults the local emulator cannot produce (partial batch failures, throttling), through
/// aws-smithy-mocks.
#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::Client;
    use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
    use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
    use aws_sdk_sqs::types::error::RequestThrottled;
    use aws_sdk_sqs::types::{BatchResultErrorEntry, ChangeMessageVisibilityBatchResultEntry};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use resq::attributes::{AttributeValue, MessageAttributes};

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

    fn change(i: usize) -> VisibilityChange {
        VisibilityChange {
            message_id: format!("m{i}"),
            receipt_handle: format!("rh{i}"),
            timeout_seconds: 5,
        }
    }

    #[tokio::test]
    async fn partial_visibility_batch_failure_is_reported_per_entry() {
        // GIVEN SQS accepts entries 0 and 2 of each batch but not entry 1
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
        let queues = SqsQueues::new(client, "main", "dlq");
        // WHEN 12 changes are made (two batches: 10 + 2)
        let failed = queues
            .change_visibility((0..12).map(change).collect())
            .await;
        // THEN each batch's entry 1 is reported, with the reason
        assert_eq!(rule.num_calls(), 2);
        let ids: Vec<_> = failed.iter().map(|(c, _)| c.message_id.as_str()).collect();
        assert_eq!(ids, vec!["m1", "m11"]);
        assert!(failed[0].1.starts_with("ReceiptHandleIsInvalid"));
    }

    #[tokio::test]
    async fn a_failed_visibility_call_reports_every_entry() {
        let rule = mock!(Client::change_message_visibility_batch)
            .sequence()
            .http_status(500, None)
            .repeatedly()
            .build();
        let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
        let failed = SqsQueues::new(client, "main", "dlq")
            .change_visibility((0..3).map(change).collect())
            .await;
        assert_eq!(failed.len(), 3);
    }

    #[tokio::test]
    async fn throttled_dlq_send_is_an_error_not_a_drop() {
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
        let err = SqsQueues::new(client, "main", "dlq")
            .send_to_dlq(&[&message])
            .await
            .unwrap_err();
        // THEN the throttle is the call's error (nothing counted as sent), as the service said
        assert_eq!(err.code.as_deref(), Some("RequestThrottled"));
        assert_eq!(err.kind, resq::sqs::AwsErrorKind::Service);
        assert!(err.message.contains("Rate exceeded"), "{err}");
        assert!(rule.num_calls() >= 1, "the copy reached SQS as built");
    }

    #[tokio::test]
    async fn a_partly_failed_dlq_batch_keeps_exactly_the_failed_records() {
        use crate::engine::Consumer;
        use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
        use aws_sdk_sqs::types::SendMessageBatchResultEntry;
        use resq::store::MemoryStore;
        // GIVEN SQS takes every DLQ copy but the second of each batch
        let send = mock!(Client::send_message_batch).then_compute_output(|req| {
            let mut out = SendMessageBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]));
            for e in req.entries() {
                if e.id() == "1" {
                    out = out.failed(
                        BatchResultErrorEntry::builder()
                            .id("1")
                            .sender_fault(false)
                            .code("InternalError")
                            .build()
                            .unwrap(),
                    );
                } else {
                    out = out.successful(
                        SendMessageBatchResultEntry::builder()
                            .id(e.id())
                            .message_id("new")
                            .md5_of_message_body("x")
                            .build()
                            .unwrap(),
                    );
                }
            }
            out.build().unwrap()
        });
        let visibility = mock!(Client::change_message_visibility_batch).then_output(|| {
            ChangeMessageVisibilityBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]))
                .build()
                .unwrap()
        });
        let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&send, &visibility]);
        let store = MemoryStore::default();
        let config =
            resq::config::ConsumerConfig::from_vars(&resq::config::Vars(|k: &str| match k {
                "MAIN_QUEUE_URL" => Some("http://127.0.0.1/1/main".into()),
                "DLQ_URL" => Some("http://127.0.0.1/1/dlq".into()),
                "ARCHIVE_BUCKET" => Some("b".into()),
                _ => None,
            }))
            .unwrap();
        let consumer = Consumer::new(
            crate::handler::RecordOrder::new(&store),
            SqsQueues::new(client, "main", "dlq"),
            &store,
            config,
        );
        // WHEN twelve malformed records arrive (two SendMessageBatch calls: 10 + 2)
        let records: Vec<serde_json::Value> = (0..12)
            .map(|i| serde_json::json!({
                "messageId": format!("m{i}"), "receiptHandle": format!("rh{i}"), "body": "{broken",
                "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:1:main"
            }))
            .collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let response = consumer
            .handle_event(serde_json::json!({"Records": records}), deadline)
            .await
            .unwrap();
        // THEN exactly the entry SQS refused in each call is kept, and backed off
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, vec!["m1", "m11"]);
        assert_eq!(send.num_calls(), 2);
        assert_eq!(visibility.num_calls(), 1, "the kept records are backed off");
    }
}
