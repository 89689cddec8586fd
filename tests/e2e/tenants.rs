//! Many tenants on one standard queue (SQS fair queues, docs/tenants.md): a tenant's
//! `MessageGroupId` survives every copy resq makes, and a run shares a small replay budget
//! between a quiet tenant's dead letters and another tenant's backlog.

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName as Sys};
use resq_e2e::{Stack, StackOptions};
use resq_ops::{archive, dlq, shadow};

use crate::helpers::*;

/// The tenant these tests follow.
const TENANT: &str = "tenant-b";

fn group(m: &Message) -> Option<&str> {
    sys_attr(m, Sys::MessageGroupId)
}

/// Prints a copy as the closing notes show it (`--nocapture`).
fn show(path: &str, copy: &Message) {
    let reason = attr(copy, "x-failure-reason").unwrap_or("-");
    let count = attr(copy, "x-redrive-count").unwrap_or("-");
    println!(
        "{path}: copy {} group={:?} x-failure-reason={reason} x-redrive-count={count}",
        copy.message_id().unwrap_or_default(),
        group(copy)
    );
}

#[tokio::test]
async fn a_tenants_permanent_failure_keeps_its_group_in_the_dlq() {
    // GIVEN a malformed order of the tenant in a standard main queue
    let stack = Stack::start(StackOptions::default()).await;
    send(&stack, &stack.main, "{not json", &[], Some(TENANT)).await;
    let received = stack.receive_n(&stack.main, 1).await;
    assert_eq!(group(&received[0]), Some(TENANT), "the emulator keeps it");
    // WHEN the consumer runs it
    let consumer = consumer(&stack, &NO_BACKOFF);
    assert!(failed_ids(&invoke(&stack, &consumer, &stack.main, &received).await).is_empty());
    // THEN its DLQ copy is the tenant's
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(attr(&dlq[0], "x-failure-reason"), Some("MALFORMED_JSON"));
    assert_eq!(group(&dlq[0]), Some(TENANT));
    show("consumer DLQ copy (permanent)", &dlq[0]);
}

#[tokio::test]
async fn a_tenants_last_receive_copy_keeps_its_group() {
    // GIVEN two receives allowed, and the tenant's order failing transiently on both
    let stack = Stack::start(StackOptions {
        max_receive_count: 2,
        ..StackOptions::default()
    })
    .await;
    let consumer = consumer(&stack, &NO_BACKOFF);
    let body = order_body("transient-tenant");
    send(&stack, &stack.main, &body, &[], Some(TENANT)).await;
    for _ in 0..2 {
        let received = stack.receive_n(&stack.main, 1).await;
        invoke(&stack, &consumer, &stack.main, &received).await;
    }
    // THEN the consumer's copy on its last receive is the tenant's
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(attr(&dlq[0], "x-failure-class"), Some("transient"));
    assert_eq!(group(&dlq[0]), Some(TENANT));
    show("consumer last-receive copy", &dlq[0]);
}

#[tokio::test]
async fn a_tenants_replay_keeps_its_group() {
    let stack = Stack::start(StackOptions::default()).await;
    send(
        &stack,
        &stack.dlq,
        &order_body("R-1"),
        &transient(),
        Some(TENANT),
    )
    .await;
    let run = redrive(&stack, &redriver(&stack, &[]), serde_json::json!({}), &[]).await;
    assert_eq!((run.redriven, run.groups_served), (1, 1), "{run:?}");
    let main = stack.receive_n(&stack.main, 1).await;
    assert_eq!(attr(&main[0], "x-redrive-count"), Some("1"));
    assert_eq!(group(&main[0]), Some(TENANT));
    show("redriver replay", &main[0]);
}

#[tokio::test]
async fn a_tenants_dead_letter_without_a_reason_keeps_its_group_when_explained() {
    // GIVEN two dead letters SQS moved without a reason, and a budget of one replay
    let stack = Stack::start(StackOptions::default()).await;
    for id in ["U-1", "U-2"] {
        send(&stack, &stack.dlq, &order_body(id), &[], Some(TENANT)).await;
    }
    let payload = serde_json::json!({"maxMessages": 1});
    let run = redrive(&stack, &redriver(&stack, &[]), payload, &[]).await;
    // THEN one is replayed and the other's copy that says why is back in the DLQ: both the
    // tenant's
    assert_eq!((run.redriven, run.unexplained), (1, 2), "{run:?}");
    let main = stack.receive_n(&stack.main, 1).await;
    assert_eq!(group(&main[0]), Some(TENANT));
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(attr(&dlq[0], "x-failure-reason"), Some("INVOCATION_FAILED"));
    assert_eq!(group(&dlq[0]), Some(TENANT));
    show("redriver explained copy", &dlq[0]);
}

#[tokio::test]
async fn a_tenants_restored_archive_entry_keeps_its_group() {
    // GIVEN the tenant's dead letter archived at the redrive cap
    let stack = Stack::start(StackOptions::default()).await;
    let mut capped = transient();
    capped.push(("x-redrive-count", number_attr("3")));
    send(
        &stack,
        &stack.dlq,
        &order_body("A-1"),
        &capped,
        Some(TENANT),
    )
    .await;
    let run = redrive(&stack, &redriver(&stack, &[]), serde_json::json!({}), &[]).await;
    assert_eq!(run.archived.values().sum::<u64>(), 1, "{run:?}");
    let keys = stack.keys("archive/REDRIVE_CAP/").await;
    // WHEN an operator restores it
    let ctx = context(&stack).await;
    let id = archive::restore(&ctx, &keys[0], "ops", false, None, false)
        .await
        .unwrap();
    // THEN the main queue has it back, the tenant's
    let main = stack.receive_n(&stack.main, 1).await;
    assert_eq!(main[0].message_id(), id.as_deref());
    assert_eq!(group(&main[0]), Some(TENANT));
    show("archive restore", &main[0]);
}

#[tokio::test]
async fn a_tenants_shadow_copy_keeps_its_group() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let staging = staging_queue(&stack).await;
    send(
        &stack,
        &stack.dlq,
        &order_body("S-1"),
        &transient(),
        Some(TENANT),
    )
    .await;
    let options = dlq::RedriveOptions {
        dry_run: false,
        failure_reason: None,
        older_than: None,
        group: Some(TENANT.into()),
        max_messages: 10,
        rate_per_second: 100.0,
        max_redrive_attempts: 3,
        archive_after: std::time::Duration::from_secs(86_400),
        permanent_action: resq_redriver::config::PermanentAction::Keep,
        kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
    };
    let report = shadow::shadow(&ctx, &options, &staging).await.unwrap();
    assert_eq!(report.copied, 1, "{report:?}");
    let copies = receive_until(&stack.sqs, &staging, 1).await;
    assert_eq!(group(&copies[0]), Some(TENANT));
    show("shadow copy", &copies[0]);
    assert_eq!(stack.depth(&stack.dlq).await, (1, 0), "the DLQ as it was");
}

#[tokio::test]
async fn a_small_budget_replays_a_quiet_tenant_behind_another_tenants_backlog() {
    // GIVEN 600 dead letters of tenant A sent before 30 of tenant B
    let stack = Stack::start(StackOptions::default()).await;
    dead_letters(&stack, Some("tenant-a"), 600).await;
    dead_letters(&stack, Some(TENANT), 30).await;
    // WHEN one run goes with a budget of 60
    let payload = serde_json::json!({"maxMessages": 60, "ratePerSecond": 100});
    let run = redrive(&stack, &redriver(&stack, &[]), payload, &[]).await;
    println!("600/30 run: {}", serde_json::to_string(&run).unwrap());
    // THEN it replayed all 30 of B and 30 of A, each in its tenant's group
    assert_eq!((run.redriven, run.groups_served), (60, 2), "{run:?}");
    let main = stack.receive_n(&stack.main, 60).await;
    let of = |g: &str| main.iter().filter(|m| group(m) == Some(g)).count();
    assert_eq!((of("tenant-a"), of(TENANT)), (30, 30));
    // AND the other 570 of A wait in the DLQ, released: nothing lost, nothing archived
    assert_eq!(stack.depth(&stack.dlq).await, (570, 0));
    assert!(stack.keys("archive/").await.is_empty());
}
