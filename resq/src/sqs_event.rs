//! Builds the Lambda SQS event from messages received with the SDK, exactly as Lambda's SQS
//! poller does: used by the local runner and the end-to-end tests.

use aws_sdk_sqs::types::Message;
use serde_json::{Map, Value, json};

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
