//! Large payloads (SPEC §2, §3 "Large payloads"): a copy too large for SQS travels as a pointer
//! to its body in the archive bucket, and the pointers of AWS's SQS extended client are read
//! before the handler runs.

use std::process::Command;

use resq::attributes::MAX_MESSAGE_BYTES;
use resq::config::Vars;
use resq::payload::Pointer;
use resq::store::S3Store;
use resq_consumer::Consumer;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::order::RecordOrder;
use resq_e2e::{Stack, StackOptions};
use serde_json::{Value, json};

use crate::helpers::*;

/// An order of exactly `size` bytes (a `note` pads it).
fn order_of(id: &str, size: usize) -> String {
    let mut order: Value = serde_json::from_str(&order_body(id)).unwrap();
    order["note"] = json!("");
    let pad = size - order.to_string().len();
    order["note"] = json!("n".repeat(pad));
    order.to_string()
}

#[tokio::test]
async fn a_large_order_failing_on_its_last_receive_is_dead_lettered_with_its_reason_replayed_and_processed()
 {
    // GIVEN an order that fits in SQS with its producer's attribute, but not with resq's
    // marks, whose downstream fails on both of its allowed receives
    let stack = Stack::start(StackOptions {
        max_receive_count: 2,
        ..StackOptions::default()
    })
    .await;
    let tag = "trace-id".len() + "String".len() + "t-big".len();
    let body = order_of("transient-big", MAX_MESSAGE_BYTES - tag);
    send(
        &stack,
        &stack.main,
        &body,
        &[("trace-id", string_attr("t-big"))],
        None,
    )
    .await;
    let consumer = consumer(&stack, &NO_BACKOFF);
    for _ in 0..2 {
        let got = stack.receive_n(&stack.main, 1).await;
        invoke(&stack, &consumer, &stack.main, &got).await;
    }
    // THEN it is dead-lettered with its reason, as a pointer to its body in the bucket
    let dlq = drain_view(&stack, &stack.dlq).await;
    assert_eq!(dlq.len(), 1);
    let pointer = Pointer::parse(dlq[0].body().unwrap()).expect("a pointer");
    assert_eq!(pointer.bucket, stack.bucket);
    assert_eq!(stack.object(&pointer.key).await, body.as_bytes());
    assert_eq!(attr(&dlq[0], "x-failure-class"), Some("transient"));
    assert_eq!(
        attr(&dlq[0], "x-failure-reason"),
        Some("DOWNSTREAM_UNAVAILABLE")
    );
    assert_eq!(attr(&dlq[0], "trace-id"), Some("t-big"));
    let size = body.len().to_string();
    assert_eq!(attr(&dlq[0], "ExtendedPayloadSize"), Some(size.as_str()));
    println!("dead-lettered: {} bytes as {pointer:?}", body.len());

    // WHEN the redriver runs, and the fixed downstream receives the replay
    let summary = redrive(&stack, &redriver(&stack, &[]), json!({}), &[]).await;
    assert_eq!((summary.redriven, summary.failed), (1, 0), "{summary:?}");
    let replay = stack.receive_n(&stack.main, 1).await;
    assert_eq!(replay[0].body(), Some(pointer.body().as_str()));
    assert_eq!(attr(&replay[0], "x-redrive-count"), Some("1"));
    let mut env = stack.env();
    env.extend(NO_BACKOFF.map(|(k, v)| (k.to_owned(), v.to_owned())));
    let config = ConsumerConfig::from_vars(&Vars(move |k: &str| env.get(k).cloned())).unwrap();
    let store = S3Store::new(stack.s3.clone(), &stack.bucket);
    let fixed = Consumer::new(
        RecordOrder::new(store.clone()),
        stack.sqs.clone(),
        store,
        config,
    );
    let response = invoke(&stack, &fixed, &stack.main, &replay).await;

    // THEN the replay ran the whole order: it is recorded, and nothing was archived
    assert!(failed_ids(&response).is_empty());
    let record = stack.json_object("orders/transient-big.json").await;
    let sent: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(record["order"], sent, "the whole order ran");
    println!(
        "replayed and processed: orders/transient-big.json, message {}",
        record["messageId"]
    );
    assert!(stack.keys("archive/").await.is_empty());
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
    assert_eq!(stack.depth(&stack.dlq).await, (0, 0));
}

/// Sends each order through AWS's Python SQS extended client, every body through S3 (the
/// client patches boto3 as it is imported, so it runs in a process of its own).
const EXTENDED_CLIENT_SEND: &str = r#"
import sys, boto3, sqs_extended_client
queue, bucket, bodies = sys.argv[1], sys.argv[2], sys.argv[3:]
sqs = boto3.client("sqs", region_name="us-east-1")
sqs.large_payload_support = bucket
sqs.always_through_s3 = True
for body in bodies:
    sqs.send_message(QueueUrl=queue, MessageBody=body)
"#;

#[tokio::test]
async fn an_extended_client_producers_orders_are_processed_unchanged() {
    // GIVEN two orders sent by AWS's extended client through the producer's bucket, one of
    // whose payloads is gone by the time the consumer reads it
    let stack = Stack::start(StackOptions::default()).await;
    let bucket = "producer-payloads";
    stack
        .s3
        .create_bucket()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    let (kept, gone) = (order_body("o-ext"), order_body("o-gone"));
    let sent = Command::new(resq_e2e::tools_python())
        .args([
            "-c",
            EXTENDED_CLIENT_SEND,
            &stack.main.url,
            bucket,
            &kept,
            &gone,
        ])
        .env("AWS_ENDPOINT_URL", stack.emulator.endpoint())
        .envs([
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
        ])
        .output()
        .unwrap();
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let messages = stack.receive_n(&stack.main, 2).await;
    let pointers: Vec<Pointer> = messages
        .iter()
        .map(|m| Pointer::parse(m.body().unwrap()).expect("the extended client's pointer"))
        .collect();
    assert!(
        messages
            .iter()
            .all(|m| attr(m, "ExtendedPayloadSize").is_some())
    );
    for p in &pointers {
        if stack.object_in(bucket, &p.key).await == gone.as_bytes() {
            stack
                .s3
                .delete_object()
                .bucket(bucket)
                .key(&p.key)
                .send()
                .await
                .unwrap();
        }
    }

    // WHEN the consumer runs them
    let consumer = consumer(&stack, &[]);
    let response = invoke(&stack, &consumer, &stack.main, &messages).await;

    // THEN the order is processed as the producer sent it, and the pointer to nothing is a
    // permanent failure whose DLQ copy is the pointer, with its reason
    assert!(failed_ids(&response).is_empty());
    let record = stack.json_object("orders/o-ext.json").await;
    let sent: Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(record["order"], sent, "the order as the producer sent it");
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(attr(&dlq[0], "x-failure-reason"), Some("PAYLOAD_NOT_FOUND"));
    let copied = Pointer::parse(dlq[0].body().unwrap()).expect("the pointer, kept");
    assert_eq!(copied.bucket, bucket);
    assert!(attr(&dlq[0], "ExtendedPayloadSize").is_some());
    println!(
        "extended client: o-ext recorded as sent {}; o-gone dead-lettered PAYLOAD_NOT_FOUND as {copied:?}",
        record["order"]
    );
}
