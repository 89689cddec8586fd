//! The queues a redriver runs between on an emulator: created, their depth, and the DLQ seeded
//! with messages as the consumer leaves them.

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};

use crate::event;
use crate::fakesqs::FakeSqs;

/// The `x-failure-reason` of the DLQ messages the bench seeds, with `x-failure-class=transient`:
/// what the consumer writes when its downstream answers 503, so every seeded message is replayed.
pub const SEED_REASON: &str = "DOWNSTREAM_UNAVAILABLE";

/// Creates a standard queue named `name`; its URL.
pub async fn create_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> Result<String, String> {
    sqs.create_queue()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| format!("create queue {name}: {e:?}"))?
        .queue_url
        .ok_or_else(|| format!("create queue {name}: no URL"))
}

/// Messages in a queue, visible plus in flight.
pub async fn depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<usize, String> {
    resq_ops::status::depth(sqs, url)
        .await
        .map(|(visible, in_flight)| (visible + in_flight) as usize)
        .map_err(|e| format!("depth of {url}: {e}"))
}

/// `n` DLQ messages as the consumer leaves them (an order body and the failure marks), the
/// first numbered `from`.
pub async fn seed(
    sqs: &aws_sdk_sqs::Client,
    dlq: &str,
    from: usize,
    n: usize,
) -> Result<(), String> {
    let now = chrono::Utc::now().timestamp_millis().to_string();
    let ev = event::sqs_event(n, 0.0, from as u64);
    let bodies: Vec<String> = ev.event["Records"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|r| r["body"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let attr = |v: &str| {
        MessageAttributeValue::builder()
            .data_type("String")
            .string_value(v)
            .build()
            .map_err(|e| e.to_string())
    };
    for (b, chunk) in bodies.chunks(10).enumerate() {
        let mut entries = Vec::new();
        for (i, body) in chunk.iter().enumerate() {
            entries.push(
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{from}-{b}-{i}"))
                    .message_body(body)
                    .message_attributes(resq::attributes::X_FAILURE_CLASS, attr("transient")?)
                    .message_attributes(resq::attributes::X_FAILURE_REASON, attr(SEED_REASON)?)
                    .message_attributes(resq::attributes::X_FIRST_SENT_AT, attr(&now)?)
                    .build()
                    .map_err(|e| e.to_string())?,
            );
        }
        let out = sqs
            .send_message_batch()
            .queue_url(dlq)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| format!("seed {dlq}: {e:?}"))?;
        if !out.failed.is_empty() {
            return Err(format!("seed {dlq}: {:?}", out.failed));
        }
    }
    Ok(())
}

/// `n` DLQ messages on the stand-in SQS as the consumer leaves them: an order body (ids
/// `{prefix}-0`, `{prefix}-1`, …) and the failure marks.
pub fn seed_stand_in(sqs: &FakeSqs, dlq: &str, prefix: &str, n: usize) {
    let now = chrono::Utc::now().timestamp_millis().to_string();
    let attr = |v: &str| serde_json::json!({"DataType": "String", "StringValue": v});
    let bodies = (0..n)
        .map(|i| format!("{{\"orderId\":\"{prefix}-{i}\",\"userId\":\"u-1\",\"items\":[{{\"productId\":\"p-1\",\"quantity\":1}}]}}"))
        .collect();
    sqs.seed(
        dlq,
        bodies,
        &serde_json::json!({
            resq::attributes::X_FAILURE_CLASS: attr("transient"),
            resq::attributes::X_FAILURE_REASON: attr(SEED_REASON),
            resq::attributes::X_FIRST_SENT_AT: attr(&now),
        }),
    );
}
