//! Lambda's events, as the local pipeline, the tests and the bench make them: the SQS event
//! built from messages received with the SDK, exactly as Lambda's SQS poller builds it
//! ([`lambda_event`]); and fixture events that never go stale: `resq-local event FILE` prints
//! the event with its times moved to now (`make invoke-consumer` and `make invoke-redriver`
//! send it that way). Every time in it moves by the same amount, so the newest is now and the
//! gaps between them (a replay's `x-first-sent-at` before its `SentTimestamp`) stay as
//! written.

use aws_sdk_sqs::types::Message;
use serde_json::{Map, Value, json};

const MS_ATTRIBUTES: [&str; 2] = ["SentTimestamp", "ApproximateFirstReceiveTimestamp"];
const MS_MESSAGE_ATTRIBUTES: [&str; 1] = [resq::attributes::X_FIRST_SENT_AT];

/// Moves every time in `event` (SQS records' timestamps and `x-first-sent-at`, an EventBridge
/// event's `time`) so that the newest is `now_ms`. Returns by how many milliseconds.
pub fn stamp(event: &mut Value, now_ms: i64) -> i64 {
    let mut newest: Option<i64> = None;
    visit(event, &mut |t| {
        newest = Some(newest.map_or(*t, |n| n.max(*t)));
    });
    let Some(newest) = newest else {
        return 0;
    };
    let shift = now_ms - newest;
    visit(event, &mut |t| *t += shift);
    shift
}

/// Calls `f` on each time in the event (as milliseconds), writing back what it leaves.
fn visit(event: &mut Value, f: &mut impl FnMut(&mut i64)) {
    if let Some(records) = event.get_mut("Records").and_then(Value::as_array_mut) {
        for r in records {
            for name in MS_ATTRIBUTES {
                if let Some(v) = r.get_mut("attributes").and_then(|a| a.get_mut(name)) {
                    edit_ms(v, f);
                }
            }
            for name in MS_MESSAGE_ATTRIBUTES {
                if let Some(v) = r
                    .get_mut("messageAttributes")
                    .and_then(|a| a.get_mut(name))
                    .and_then(|a| a.get_mut("stringValue"))
                {
                    edit_ms(v, f);
                }
            }
        }
    }
    if event.get("detail-type").is_some()
        && let Some(v) = event.get_mut("time")
        && let Some(t) = v
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
    {
        let mut ms = t.timestamp_millis();
        f(&mut ms);
        if let Some(t) = chrono::DateTime::from_timestamp_millis(ms) {
            *v = Value::String(t.format("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
    }
}

fn edit_ms(v: &mut Value, f: &mut impl FnMut(&mut i64)) {
    if let Some(mut ms) = v.as_str().and_then(|s| s.parse::<i64>().ok()) {
        f(&mut ms);
        *v = Value::String(ms.to_string());
    }
}

/// One record of the event.
pub fn lambda_record(message: &Message, queue_arn: &str, region: &str) -> Value {
    let attributes: Map<String, Value> = message
        .attributes()
        .map(|a| {
            a.iter()
                .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
                .collect()
        })
        .unwrap_or_default();
    let message_attributes: Map<String, Value> = message
        .message_attributes()
        .map(|attrs| {
            attrs
                .iter()
                .map(|(name, v)| {
                    let mut a = Map::new();
                    if let Some(s) = v.string_value() {
                        a.insert("stringValue".into(), json!(s));
                    }
                    if let Some(b) = v.binary_value() {
                        use base64::Engine;
                        a.insert(
                            "binaryValue".into(),
                            json!(base64::engine::general_purpose::STANDARD.encode(b.as_ref())),
                        );
                    }
                    a.insert("stringListValues".into(), json!(v.string_list_values()));
                    let lists: Vec<String> = v
                        .binary_list_values()
                        .iter()
                        .map(|b| {
                            use base64::Engine;
                            base64::engine::general_purpose::STANDARD.encode(b.as_ref())
                        })
                        .collect();
                    a.insert("binaryListValues".into(), json!(lists));
                    a.insert("dataType".into(), json!(v.data_type()));
                    (name.clone(), Value::Object(a))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut record = json!({
        "messageId": message.message_id(),
        "receiptHandle": message.receipt_handle(),
        "body": message.body(),
        "attributes": attributes,
        "messageAttributes": message_attributes,
        "md5OfBody": message.md5_of_body(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    });
    if let Some(md5) = message.md5_of_message_attributes() {
        record["md5OfMessageAttributes"] = json!(md5);
    }
    record
}

/// The whole event: `{"Records": [...]}`.
pub fn lambda_event(messages: &[Message], queue_arn: &str, region: &str) -> Value {
    json!({ "Records": messages.iter().map(|m| lambda_record(m, queue_arn, region)).collect::<Vec<_>>() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_newest_time_becomes_now_and_the_gaps_stay() {
        let mut e = json!({"Records": [
            {"attributes": {"SentTimestamp": "1000", "ApproximateFirstReceiveTimestamp": "1100"}},
            {"attributes": {"SentTimestamp": "2000"}, "messageAttributes": {"x-first-sent-at": {"stringValue": "500", "dataType": "Number"}}}
        ]});
        assert_eq!(stamp(&mut e, 10_000), 8_000);
        assert_eq!(e["Records"][0]["attributes"]["SentTimestamp"], "9000");
        assert_eq!(
            e["Records"][0]["attributes"]["ApproximateFirstReceiveTimestamp"],
            "9100"
        );
        assert_eq!(e["Records"][1]["attributes"]["SentTimestamp"], "10000");
        assert_eq!(
            e["Records"][1]["messageAttributes"]["x-first-sent-at"]["stringValue"],
            "8500"
        );
    }

    #[test]
    fn a_scheduled_event_gets_the_time_now_and_others_stay_as_they_are() {
        let mut e = json!({"detail-type": "Scheduled Event", "time": "2026-11-21T10:00:00Z"});
        stamp(&mut e, 1_795_400_000_000);
        assert_eq!(e["time"], "2026-11-23T02:13:20Z");
        let mut manual = json!({"dryRun": true, "maxMessages": 100});
        let before = manual.clone();
        assert_eq!(stamp(&mut manual, 1_795_400_000_000), 0);
        assert_eq!(manual, before);
    }
}

#[cfg(test)]
mod poller {
    use super::*;
    use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};

    #[test]
    fn record_has_lambdas_shape_and_parses_as_an_sqs_event() {
        let m = Message::builder()
            .message_id("id-1")
            .receipt_handle("rh")
            .body("{}")
            .md5_of_body("md5")
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "2")
            .attributes(MessageSystemAttributeName::MessageGroupId, "g1")
            .message_attributes(
                "n",
                MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value("1")
                    .build()
                    .unwrap(),
            )
            .message_attributes(
                "b",
                MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(aws_sdk_sqs::primitives::Blob::new(vec![1, 2, 3]))
                    .build()
                    .unwrap(),
            )
            .build();
        let event = lambda_event(&[m], "arn:aws:sqs:us-east-1:1:q.fifo", "us-east-1");
        let r = &event["Records"][0];
        assert_eq!(r["attributes"]["ApproximateReceiveCount"], "2");
        assert_eq!(r["attributes"]["MessageGroupId"], "g1");
        assert_eq!(
            r["messageAttributes"]["n"],
            json!({"stringValue": "1", "stringListValues": [], "binaryListValues": [], "dataType": "Number"})
        );
        assert_eq!(r["messageAttributes"]["b"]["binaryValue"], "AQID");
        assert_eq!(r["eventSourceARN"], "arn:aws:sqs:us-east-1:1:q.fifo");
        let parsed: aws_lambda_events::event::sqs::SqsEvent =
            serde_json::from_value(event).unwrap();
        assert_eq!(parsed.records[0].message_id.as_deref(), Some("id-1"));
        assert_eq!(
            parsed.records[0].message_attributes["b"]
                .binary_value
                .as_ref()
                .unwrap()
                .0,
            vec![1, 2, 3]
        );
    }
}
