//! Hostile events and configuration, sent to the real function binaries (behind the chaos
//! run's Lambda runtime API, against moto). Each gets its documented behaviour: a clear error
//! or the documented outcome (docs/design.md), never a silent drop.

use std::process::Command;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use resq::attributes::MAX_MESSAGE_BYTES;
use resq_e2e::{REGION, Stack, StackOptions, function_binary};
use resq_local::chaos::runtime::Function;
use resq_local::driver::Ended;
use serde_json::{Value, json};

use crate::helpers::{attr, number_attr, order_body, runtime_function, send, string_attr};

fn function(stack: &Stack, name: &str) -> Function {
    let log = std::env::temp_dir().join(format!("resq-hostile-{name}-{}.log", std::process::id()));
    runtime_function(stack, name, &[], &log)
}

async fn invoke(f: &mut Function, event: &Value) -> Ended {
    f.invoke(&event.to_string(), None).await.unwrap()
}

fn error_text(outcome: &Ended) -> String {
    match outcome {
        Ended::Error(body) => body.clone(),
        other => panic!("expected a function error, got {other:?}"),
    }
}

fn response(outcome: &Ended) -> Value {
    match outcome {
        Ended::Response(body) => serde_json::from_str(body).unwrap(),
        other => panic!("expected a response, got {other:?}"),
    }
}

/// The Lambda event of messages sent to the main queue with these bodies and attributes.
async fn event_of(stack: &Stack, messages: &[(&str, Vec<(&str, MessageAttributeValue)>)]) -> Value {
    for (body, attrs) in messages {
        send(stack, &stack.main, body, attrs, None).await;
    }
    let received = stack.receive_n(&stack.main, messages.len()).await;
    resq_local::event::lambda_event(&received, &stack.main.arn, REGION)
}

async fn archived_under(stack: &Stack, reason: &str) -> Vec<String> {
    let out = stack
        .s3
        .list_objects_v2()
        .bucket(&stack.bucket)
        .prefix(format!("archive/{reason}/"))
        .send()
        .await
        .unwrap();
    out.contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn events_that_are_not_sqs_fail_the_invocation_with_a_clear_error() {
    let stack = Stack::start(StackOptions::default()).await;
    let mut consumer = function(&stack, "consumer");
    for (event, says) in [
        (
            json!({"detail-type": "Scheduled Event"}),
            "missing field `Records`",
        ),
        (json!([1, 2]), "not an SQS event"),
        (json!("orders"), "not an SQS event"),
        (json!(null), "not an SQS event"),
        (
            json!({"Records": [{"eventSource": "aws:s3", "s3": {}, "messageId": "m"}]}),
            "aws:s3",
        ),
        (
            json!({"Records": [{"eventSource": "aws:sqs", "body": "{}", "receiptHandle": "rh"}]}),
            "messageId",
        ),
        // a record that cannot be read and has no messageId to report it by
        (
            json!({"Records": [{"eventSource": "aws:sqs", "messageAttributes":
                {"a": {"dataType": "Binary", "binaryValue": "not base64!"}}}]}),
            "messageId",
        ),
    ] {
        let err = error_text(&invoke(&mut consumer, &event).await);
        assert!(err.contains(says), "{event}: {err}");
        assert!(
            err.contains("not an SQS event") || says == "messageId",
            "{event}: {err}"
        );
    }
    // SQS never delivers these (its character set has no lone surrogates; Lambda always
    // base64-encodes binary values), but a record that cannot be read goes to the DLQ alone
    // (UNREADABLE_RECORD) when it has a messageId: the others of the batch go on
    let ok = json!({"eventSource": "aws:sqs", "messageId": "ok", "receiptHandle": "rh-ok",
        "body": order_body("o-readable"), "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {}, "eventSourceARN": stack.main.arn});
    let b64 = json!({"eventSource": "aws:sqs", "messageId": "b64", "messageAttributes":
        {"a": {"dataType": "Binary", "binaryValue": "not base64!"}}});
    let raw = format!(
        r#"{{"Records": [{ok}, {b64}, {{"eventSource": "aws:sqs", "messageId": "surrogate", "body": "\ud800"}}]}}"#
    );
    let outcome = consumer.invoke(&raw, None).await.unwrap();
    assert_eq!(response(&outcome), json!({"batchItemFailures": []}));
    // the surrogate's body, which is not text, is copied as its JSON; the record without a
    // body is archived whole, its raw record kept
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(attr(&dlq[0], "x-failure-reason"), Some("UNREADABLE_RECORD"));
    assert_eq!(dlq[0].body(), Some(r#""\ud800""#));
    let archived = stack.keys("archive/UNREADABLE_RECORD/").await;
    assert_eq!(archived.len(), 1, "{archived:?}");
    let entry = stack.json_object(&archived[0]).await;
    assert!(
        entry["originalMessage"]["rawRecord"]
            .as_str()
            .is_some_and(|r| r.contains("not base64!")),
        "{entry}"
    );
    assert!(
        stack
            .s3
            .get_object()
            .bucket(&stack.bucket)
            .key("orders/o-readable.json")
            .send()
            .await
            .is_ok(),
        "the readable record of the same batch was processed"
    );
    assert_eq!(
        response(&invoke(&mut consumer, &json!({"Records": []})).await),
        json!({"batchItemFailures": []}),
        "an empty batch is a normal, empty response"
    );

    let mut redriver = function(&stack, "redriver");
    for (event, says) in [
        (json!({"maxMessages": -1}), "maxMessages"),
        (json!({"ratePerSecond": "fast"}), "ratePerSecond"),
        (
            json!({"Records": []}),
            "Records: not a field of a manual payload",
        ),
        (
            json!({"source": "aws.s3", "detail-type": "Object Created"}),
            "aws.s3",
        ),
    ] {
        let err = error_text(&invoke(&mut redriver, &event).await);
        assert!(err.contains(says), "{event}: {err}");
    }
}

#[tokio::test]
async fn hostile_records_get_the_spec_outcome() {
    let stack = Stack::start(StackOptions::default()).await;
    let mut consumer = function(&stack, "consumer");
    let binary = MessageAttributeValue::builder()
        .data_type("Binary")
        .binary_value(Blob::new(vec![0xff, 0xfe, 0x00, 0xc3]))
        .build()
        .unwrap();
    // a valid order of exactly 1 MiB, and a malformed message of exactly 1 MiB: SQS counts the
    // attributes too (body + each attribute's name, type and value; moto does not, LocalStack
    // and AWS do), so its body is 1 MiB less its tag
    let mut big_order: Value = serde_json::from_str(&order_body("big")).unwrap();
    big_order["note"] = json!("");
    let pad = MAX_MESSAGE_BYTES - big_order.to_string().len();
    big_order["note"] = json!("n".repeat(pad));
    let big_order = big_order.to_string();
    let tag_bytes = "tag".len() + "String".len() + "big-malformed".len();
    let big_malformed = format!("{{{}", "x".repeat(MAX_MESSAGE_BYTES - tag_bytes - 1));
    assert_eq!(
        (big_order.len(), big_malformed.len() + tag_bytes),
        (MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES)
    );

    let event = event_of(
        &stack,
        &[
            (big_order.as_str(), vec![]),
            (
                big_malformed.as_str(),
                vec![("tag", string_attr("big-malformed"))],
            ),
            ("{not json", vec![("raw", binary.clone())]),
            (
                &order_body("minus"),
                vec![("x-redrive-count", number_attr("-1"))],
            ),
            (
                &order_body("huge"),
                vec![("x-redrive-count", number_attr("1e309"))],
            ),
            (
                &order_body("spaced"),
                vec![("x-redrive-count", string_attr(" 3"))],
            ),
            (
                &order_body("past"),
                vec![("x-redrive-count", string_attr("4 "))],
            ),
        ],
    )
    .await;
    let mut event = event;
    // the same message twice (at-least-once delivery): one record in the response at most
    let first = event["Records"][0].clone();
    event["Records"].as_array_mut().unwrap().push(first);
    let r = response(&invoke(&mut consumer, &event).await);
    assert_eq!(
        r,
        json!({"batchItemFailures": []}),
        "every record has its home"
    );

    // the 1 MiB order is recorded once
    let order = stack
        .s3
        .get_object()
        .bucket(&stack.bucket)
        .key("orders/big.json")
        .send()
        .await;
    assert!(order.is_ok(), "the 1 MiB order is processed");
    // its malformed twin no longer fits with the failure marks (over 1 MiB): no archive, its
    // DLQ copy travels as a pointer to its body, stored in the bucket
    assert!(archived_under(&stack, "SIZE_LIMIT").await.is_empty());
    // -1 and 1e309 are unreadable counts; " 3" reads as 3, the cap: the last replay, which
    // runs; "4 " is past the cap
    assert_eq!(
        archived_under(&stack, "INVALID_REDRIVE_COUNT").await.len(),
        2
    );
    let capped = archived_under(&stack, "REDRIVE_CAP").await;
    assert_eq!(capped.len(), 1);
    let spaced = stack
        .s3
        .get_object()
        .bucket(&stack.bucket)
        .key("orders/spaced.json")
        .send()
        .await;
    assert!(spaced.is_ok(), "the copy at the cap is processed");
    let mut copies = stack.receive_n(&stack.dlq, 2).await;
    copies.sort_by_key(|c| c.body().map(str::len));
    let pointer = resq::payload::Pointer::parse(copies[1].body().unwrap()).expect("a pointer");
    assert_eq!(stack.object(&pointer.key).await, big_malformed.as_bytes());
    assert_eq!(attr(&copies[1], "x-failure-reason"), Some("MALFORMED_JSON"));
    assert_eq!(attr(&copies[1], "tag"), Some("big-malformed"));
    let size = big_malformed.len().to_string();
    assert_eq!(attr(&copies[1], "ExtendedPayloadSize"), Some(size.as_str()));
    // the malformed message's DLQ copy carries its non-UTF-8 binary attribute byte for byte
    assert_eq!(copies[0].body(), Some("{not json"));
    assert_eq!(attr(&copies[0], "x-failure-reason"), Some("MALFORMED_JSON"));
    let raw = copies[0]
        .message_attributes()
        .and_then(|a| a.get("raw"))
        .and_then(|v| v.binary_value())
        .map(|b| b.as_ref().to_vec());
    assert_eq!(raw, Some(vec![0xff, 0xfe, 0x00, 0xc3]));
}

/// Runs a function binary with only `vars` (and PATH) set: it must exit at once, non-zero,
/// naming the variable.
fn start_up(name: &str, vars: &[(&str, &str)]) -> String {
    let out = Command::new(function_binary(name))
        .env_clear()
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{name} started with {vars:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn missing_or_nonsense_configuration_stops_the_functions_at_start_up() {
    let base = [
        ("MAIN_QUEUE_URL", "http://127.0.0.1:1/123456789012/orders"),
        ("DLQ_URL", "http://127.0.0.1:1/123456789012/orders-dlq"),
        ("ARCHIVE_BUCKET", "b"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v = base.to_vec();
        v.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        v.extend(extra.iter().filter(|(_, v)| !v.is_empty()));
        v
    };
    for (name, vars, names) in [
        ("consumer", vec![], "MAIN_QUEUE_URL"),
        ("redriver", vec![], "MAIN_QUEUE_URL"),
        ("consumer", with(&[("DLQ_URL", "")]), "DLQ_URL"),
        (
            "consumer",
            with(&[("ARCHIVE_BUCKET", "")]),
            "ARCHIVE_BUCKET",
        ),
        (
            "consumer",
            with(&[("MAIN_QUEUE_URL", "orders")]),
            "MAIN_QUEUE_URL",
        ),
        (
            "consumer",
            with(&[("CONSUMER_CONCURRENCY", "lots")]),
            "CONSUMER_CONCURRENCY",
        ),
        (
            "consumer",
            with(&[("CONSUMER_CONCURRENCY", "0")]),
            "CONSUMER_CONCURRENCY",
        ),
        (
            "consumer",
            with(&[("BACKOFF_BASE_SECONDS", "-2")]),
            "BACKOFF_BASE_SECONDS",
        ),
        (
            "consumer",
            with(&[("MAX_REDRIVE_ATTEMPTS", "1e309")]),
            "MAX_REDRIVE_ATTEMPTS",
        ),
        (
            "consumer",
            with(&[("DEADLINE_MARGIN_MS", "soon")]),
            "DEADLINE_MARGIN_MS",
        ),
        (
            "redriver",
            with(&[("REDRIVE_RATE_PER_SECOND", "0")]),
            "REDRIVE_RATE_PER_SECOND",
        ),
        (
            "redriver",
            with(&[("REDRIVE_RATE_PER_SECOND", "NaN")]),
            "REDRIVE_RATE_PER_SECOND",
        ),
        (
            "redriver",
            with(&[("PERMANENT_ACTION", "delete")]),
            "PERMANENT_ACTION",
        ),
        (
            "redriver",
            with(&[("MAX_MESSAGES_PER_RUN", "-5")]),
            "MAX_MESSAGES_PER_RUN",
        ),
        (
            "redriver",
            with(&[("ARCHIVE_AFTER_SECONDS", "forever")]),
            "ARCHIVE_AFTER_SECONDS",
        ),
    ] {
        let stderr = start_up(name, &vars);
        assert!(stderr.contains(names), "{name} {vars:?}: {stderr}");
    }
}
