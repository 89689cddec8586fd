//! Records for the consumer's unit tests, built as Lambda writes them and read as the
//! function reads them.

use serde_json::{Value, json};

use crate::event::{EventError, Record, SqsInvocation};

/// Reads an event given as a JSON value the way the runtime reads it.
pub fn parse_event(value: Value) -> Result<Vec<Record>, EventError> {
    Ok(SqsInvocation::from_json(&value.to_string())?.0)
}

/// A record of the main queue, with `extra` fields replacing its own.
pub fn rec(id: &str, extra: Value) -> Value {
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

/// FIFO records `m0`, `m1`, … of these groups, each on its third receive.
pub fn fifo_records(groups: &[&str]) -> Vec<Record> {
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
    parse_event(json!({"Records": recs})).unwrap_or_default()
}
