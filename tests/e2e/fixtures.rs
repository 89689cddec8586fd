//! The committed fixture events (`events/`) parse and get the responses `events/README.md`
//! documents, against the real functions and a moto stack.

use aws_sdk_sqs::types::MessageSystemAttributeName as Sys;
use resq_e2e::{Stack, StackOptions, workspace_root};
use resq_redriver::request::RunRequest;
use serde_json::Value;

use crate::helpers::*;

fn fixture(name: &str) -> Value {
    let path = workspace_root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn run_consumer(stack: &Stack, event: Value) -> Vec<String> {
    let c = consumer(stack, &[]);
    failed_ids(&answer(&c, &event).await)
}

#[tokio::test]
async fn the_sqs_batch_fixture() {
    let stack = Stack::start(StackOptions::default()).await;
    assert!(
        run_consumer(&stack, fixture("sqs-batch.json"))
            .await
            .is_empty()
    );
    assert_eq!(
        stack.keys("orders/").await,
        vec!["orders/ORD-1001.json".to_owned()]
    );
    let mut reasons: Vec<String> = stack
        .receive_n(&stack.dlq, 2)
        .await
        .iter()
        .filter_map(|m| attr(m, "x-failure-reason").map(str::to_owned))
        .collect();
    reasons.sort();
    assert_eq!(reasons, vec!["MALFORMED_JSON", "VALIDATION_FAILED"]);
    let archived = stack.keys("archive/REDRIVE_CAP/").await;
    assert_eq!(archived.len(), 1);
    assert!(archived[0].ends_with("/7b2c5a61-4c1e-4d5e-9a0b-1f0c8f3a1004.json"));
}

#[tokio::test]
async fn the_fifo_batch_fixture() {
    let stack = Stack::start(StackOptions {
        fifo: true,
        ..Default::default()
    })
    .await;
    assert!(
        run_consumer(&stack, fixture("sqs-fifo-batch.json"))
            .await
            .is_empty()
    );
    let mut recorded = stack.keys("orders/").await;
    recorded.sort();
    assert_eq!(
        recorded,
        vec!["orders/ORD-2001.json", "orders/ORD-2003.json"]
    );
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(dlq[0].body(), Some("not an order at all"));
    assert_eq!(sys_attr(&dlq[0], Sys::MessageGroupId), Some("customer-2"));
}

#[tokio::test]
async fn the_redriver_fixtures() {
    let stack = Stack::start(StackOptions::default()).await;
    let config = redriver_config(&stack, &[]);
    let scheduled = RunRequest::from_event(fixture("scheduled-event.json"), &config).unwrap();
    assert_eq!(scheduled, RunRequest::defaults(&config));
    let manual = RunRequest::from_event(fixture("redrive-manual.json"), &config).unwrap();
    assert!(manual.dry_run);
    assert_eq!(
        (
            manual.max_messages,
            manual.rate_per_second,
            manual.reason.as_deref()
        ),
        (Some(100), 5.0, Some("VALIDATION_FAILED"))
    );

    send(
        &stack,
        &stack.dlq,
        &order_body("o-1"),
        &[
            ("x-failure-class", string_attr("permanent")),
            ("x-failure-reason", string_attr("VALIDATION_FAILED")),
        ],
        None,
    )
    .await;
    let r = redriver(&stack, &[]);
    let summary = redrive(&stack, &r, fixture("redrive-manual.json"), &[]).await;
    assert!(summary.dry_run);
    assert_eq!(
        summary.redriven, 1,
        "would replay the VALIDATION_FAILED message"
    );
    assert_eq!(stack.depth(&stack.dlq).await, (1, 0), "and changes nothing");
    let summary = redrive(&stack, &r, fixture("scheduled-event.json"), &[]).await;
    assert!(!summary.dry_run);
    assert_eq!(
        (summary.received, summary.skipped),
        (1, 1),
        "a scheduled run keeps permanent failures"
    );
}
