//! The consumer's engine over resq's in-memory doubles (`resq-testing`): a batch from the
//! event as Lambda delivers it to the answer, its DLQ copies, archive entries and backoff.
//! What needs no I/O is tested beside the rules (`decide`, `account`, `event`).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_lambda_events::event::sqs::SqsBatchResponse;
use resq::attributes::{X_FAILURE_CLASS, X_FAILURE_REASON};
use resq::config::CommonConfig;
use resq::metrics;
use resq::reason::ArchiveReason;
use resq::sqs::OutgoingMessage;
use resq::sqs::Queues;
use resq::store::ObjectStore;
use resq_consumer::Consumer;
use resq_consumer::account::BatchReport;
use resq_consumer::account::Outcome;
use resq_consumer::account::{RETRY_BUDGET_EXCEEDED, TRANSIENT_FAILURE_PERCENT};
use resq_consumer::concurrency::Concurrency;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::decide;
use resq_consumer::decide::Failure;
use resq_consumer::downstream::Throttling;
use resq_consumer::event::EventError;
use resq_consumer::event::SqsInvocation;
use resq_consumer::handler::{HandlerError, Rejection};
use resq_consumer::handler::{MessageHandler, RecordMeta};
use resq_consumer::order::Order;
use resq_consumer::order::{OrderHandler, RecordOrder};
use resq_testing::{Call, MemorySqs, MemoryStore};
use serde_json::{Value, json};
use std::time::Duration;

const MAIN: &str = "http://127.0.0.1/123456789012/orders";

/// The engine on an event given as JSON, read as the runtime reads it.
trait Process {
    async fn process(&self, event: Value, deadline: Instant) -> Result<BatchReport, EventError>;
}

impl<H: MessageHandler, Q: Queues, S: ObjectStore> Process for Consumer<H, Q, S> {
    async fn process(&self, event: Value, deadline: Instant) -> Result<BatchReport, EventError> {
        let invocation = SqsInvocation::from_json(&event.to_string())?;
        self.handle(invocation, deadline).await
    }
}

/// What reached the DLQs of the tests' configurations.
fn dlq_copies(sqs: &MemorySqs) -> Vec<OutgoingMessage> {
    let dlqs = [
        "http://127.0.0.1/1/dlq",
        "http://127.0.0.1/1/dlq.fifo",
        "http://127.0.0.1/123456789012/dlq",
    ];
    dlqs.iter().flat_map(|q| sqs.sent(q)).collect()
}

/// The message ids of the records backed off (their receipt handles are `rh-{id}`).
fn backed_off(sqs: &MemorySqs) -> Vec<String> {
    let changes = sqs.changes(MAIN).into_iter();
    changes
        .map(|(rh, _)| rh.trim_start_matches("rh-").to_owned())
        .collect()
}

/// Behaves by the order id's prefix: `transient-`, `permanent-`, `panic-`, `slow-`, `hang-`.
struct Scripted;

impl OrderHandler for Scripted {
    async fn handle(&self, order: &Order, _: &RecordMeta<'_>) -> Result<(), HandlerError> {
        let id = order.order_id.as_str();
        if id.starts_with("transient-") {
            return Err(HandlerError::transient("DOWNSTREAM_UNAVAILABLE", "503"));
        }
        if id.starts_with("permanent-") {
            return Err(HandlerError::permanent("ORDER_REJECTED", "unknown product"));
        }
        if id.starts_with("nocode-") {
            return Err(HandlerError::permanent("", "the handler gave no code"));
        }
        if id.starts_with("panic-") {
            panic!("boom in {id}");
        }
        if id.starts_with("slow-") {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if id.starts_with("hang-") {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        Ok(())
    }
}

fn config(dlq: &str) -> ConsumerConfig {
    ConsumerConfig {
        common: CommonConfig {
            main_queue_url: "http://127.0.0.1/123456789012/orders".into(),
            dlq_url: dlq.into(),
            archive_bucket: "bucket".into(),
            max_redrive_attempts: 3,
            deadline_margin: Duration::from_millis(200),
        },
        concurrency: Concurrency::Fixed(4),
        backoff: resq_consumer::backoff::Backoff::default(),
        // the fixtures were sent in 2023: a window that holds them
        idempotency_window: std::time::Duration::from_secs(100 * 365 * 86_400),
        retry_budget_percent: Some(resq_consumer::config::DEFAULT_RETRY_BUDGET_PERCENT),
    }
}

/// The engine over the doubles, with the [`Scripted`] handler and the DLQ `dlq`.
fn scripted<'a>(
    queues: &'a MemorySqs,
    store: &'a MemoryStore,
    dlq: &str,
) -> Consumer<Scripted, &'a MemorySqs, &'a MemoryStore> {
    Consumer::new(Scripted, queues, store, config(dlq))
}

/// The engine over the doubles, with the reference handler recording into `store`.
fn recording<'a>(
    queues: &'a MemorySqs,
    store: &'a MemoryStore,
    dlq: &str,
) -> Consumer<RecordOrder<&'a MemoryStore>, &'a MemorySqs, &'a MemoryStore> {
    Consumer::new(RecordOrder::new(store), queues, store, config(dlq))
}

fn order(id: &str) -> String {
    json!({"orderId": id, "userId": "u1", "items": [{"productId": "p1", "quantity": 1}]})
        .to_string()
}

fn record(id: &str, body: &str, redrive: Option<&str>, group: Option<&str>) -> Value {
    // sent a minute ago: well inside the queue's retention and the idempotency window
    let sent = (decide::epoch_ms() - 60_000).to_string();
    let mut attrs = json!({"ApproximateReceiveCount": "2", "SentTimestamp": sent});
    let mut arn = "arn:aws:sqs:us-east-1:123456789012:orders".to_owned();
    if let Some(g) = group {
        attrs["MessageGroupId"] = json!(g);
        arn.push_str(".fifo");
    }
    let mut mattrs = json!({});
    if let Some(c) = redrive {
        mattrs["x-redrive-count"] = json!({"stringValue": c, "dataType": "Number"});
    }
    json!({"messageId": id, "receiptHandle": format!("rh-{id}"), "body": body, "attributes": attrs,
           "messageAttributes": mattrs, "eventSource": "aws:sqs", "eventSourceARN": arn, "awsRegion": "us-east-1"})
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn failed_ids(r: &SqsBatchResponse) -> Vec<&str> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

#[tokio::test]
async fn mixed_batch_gets_one_outcome_per_record() {
    // GIVEN a batch with one record of each kind
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/123456789012/dlq");
    let event = json!({"Records": [
        record("ok", &order("o-1"), None, None),
        record("malformed", "{not json", None, None),
        record("invalid", r#"{"orderId":"o-3","items":[]}"#, None, None),
        record("capped", &order("o-4"), Some("4"), None),
        record("badcount", &order("o-5"), Some("-1"), None),
        record("transient", &order("transient-6"), Some("1"), None),
        record("permanent", &order("permanent-7"), None, None),
        record("panic", &order("panic-8"), None, None),
    ]});
    // WHEN it is processed
    let report = consumer.process(event, later()).await.unwrap();
    // THEN only the retryable records are reported, and each went to its home
    assert_eq!(failed_ids(&report.response), vec!["transient", "panic"]);
    assert_eq!(
        report.outcomes[..5],
        [
            Outcome::Processed,
            Outcome::DeadLettered("MALFORMED_JSON".into()),
            Outcome::DeadLettered("VALIDATION_FAILED".into()),
            Outcome::Archived(ArchiveReason::RedriveCap),
            Outcome::Archived(ArchiveReason::InvalidRedriveCount),
        ]
    );
    assert_eq!(
        report.outcomes[6],
        Outcome::DeadLettered("ORDER_REJECTED".into())
    );
    assert!(
        matches!(&report.outcomes[7], Outcome::Failed(Failure::Resq { code, details }) if code.code() == "HANDLER_PANIC" && details.contains("boom"))
    );
    let reasons: Vec<_> = dlq_copies(&queues)
        .iter()
        .map(|m| m.attributes[X_FAILURE_REASON].string_value.clone().unwrap())
        .collect();
    assert_eq!(
        reasons,
        vec!["MALFORMED_JSON", "VALIDATION_FAILED", "ORDER_REJECTED"]
    );
    assert!(
        dlq_copies(&queues)
            .iter()
            .all(|m| m.attributes[X_FAILURE_CLASS].string_value.as_deref() == Some("permanent"))
    );
    assert_eq!(dlq_copies(&queues)[0].body, "{not json");
    assert_eq!(store.keys("archive/REDRIVE_CAP/").len(), 1);
    assert_eq!(store.keys("archive/INVALID_REDRIVE_COUNT/").len(), 1);
    assert_eq!(backed_off(&queues), vec!["transient", "panic"]);
    assert_eq!(report.metrics.get(resq_consumer::account::PROCESSED), 1);
    assert_eq!(report.metrics.get(resq_consumer::account::RETRIED), 2);
    assert_eq!(report.metrics.get(resq_consumer::account::DEAD_LETTERED), 3);
    assert_eq!(report.metrics.get(metrics::ARCHIVED), 2);
}

#[tokio::test]
async fn the_reference_handler_records_each_order_once() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = recording(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [record("a", &order("o-1"), None, None), record("b", &order("o-1"), None, None)]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(
        report.outcomes,
        vec![Outcome::Processed, Outcome::Processed]
    );
    assert_eq!(store.keys("orders/"), vec!["orders/o-1.json".to_owned()]);
}

#[tokio::test]
async fn failed_archive_or_dlq_writes_keep_the_record() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    store.set_failing(true);
    queues.fail_calls(Call::Send, true);
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [record("capped", &order("o-1"), Some("7"), None), record("bad", "nope", None, None)]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(failed_ids(&report.response), vec!["capped", "bad"]);
    assert!(
        matches!(&report.outcomes[0], Outcome::Failed(Failure::Resq { code, .. }) if code.code() == "ARCHIVE_FAILED")
    );
    assert!(
        matches!(&report.outcomes[1], Outcome::Failed(Failure::Resq { code, .. }) if code.code() == "DLQ_SEND_FAILED")
    );
}

#[tokio::test]
async fn visibility_failures_do_not_change_the_response() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    queues.fail_calls(Call::ChangeVisibility, true);
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [record("t", &order("transient-1"), None, None), record("ok", &order("o-2"), None, None)]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(failed_ids(&report.response), vec!["t"]);
}

#[tokio::test]
async fn too_many_attributes_for_a_dlq_copy_means_archive() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let mut r = record("full", "{oops", None, None);
    for i in 0..9 {
        r["messageAttributes"][format!("a{i}")] = json!({"stringValue": "v", "dataType": "String"});
    }
    let report = consumer
        .process(json!({"Records": [r]}), later())
        .await
        .unwrap();
    assert_eq!(
        report.outcomes,
        vec![Outcome::Archived(ArchiveReason::AttributeLimit)]
    );
    assert!(dlq_copies(&queues).is_empty());
    let key = &store.keys("archive/ATTRIBUTE_LIMIT/")[0];
    let envelope: Value = serde_json::from_slice(&store.objects()[key]).unwrap();
    assert_eq!(envelope["originalMessage"]["body"], "{oops");
    assert!(
        envelope["metadata"]["lastError"]
            .as_str()
            .unwrap()
            .contains("MALFORMED_JSON")
    );
}

#[tokio::test]
async fn fifo_an_unreadable_record_of_no_known_group_holds_every_record_after_it() {
    // GIVEN a FIFO batch where the second record cannot be read, its group included: it
    // could be of any group, so every record after it waits behind it
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq.fifo");
    let mut unknown = record("u", &order("u-1"), None, Some("A"));
    unknown["attributes"] = json!("not a map");
    let payload = json!({"Records": [
        record("a1", &order("a-1"), None, Some("A")),
        unknown,
        record("a2", &order("a-2"), None, Some("A")),
        record("b1", &order("b-1"), None, Some("B")),
    ]});
    let report = consumer.process(payload, later()).await.unwrap();
    // THEN it goes to the DLQ, and the records after it are not run before their turn
    // (they come back, in order, after it is gone)
    assert_eq!(report.outcomes[0], Outcome::Processed);
    assert_eq!(
        report.outcomes[1],
        Outcome::DeadLettered("UNREADABLE_RECORD".into())
    );
    assert_eq!(failed_ids(&report.response), vec!["a2", "b1"]);
    assert_eq!(report.outcomes[2], Outcome::Failed(Failure::GroupBlocked));
}

#[tokio::test]
async fn fifo_failure_blocks_only_the_rest_of_its_group() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq.fifo");
    let event = json!({"Records": [
        record("a1", &order("a-1"), None, Some("A")),
        record("b1", &order("transient-b1"), None, Some("B")),
        record("a2", &order("transient-a2"), None, Some("A")),
        record("b2", &order("b-2"), None, Some("B")),
        record("a3", &order("a-3"), None, Some("A")),
        record("c1", "{bad", None, Some("C")),
        record("c2", &order("c-2"), None, Some("C")),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(failed_ids(&report.response), vec!["b1", "a2", "b2", "a3"]);
    assert_eq!(report.outcomes[3], Outcome::Failed(Failure::GroupBlocked));
    assert_eq!(report.outcomes[4], Outcome::Failed(Failure::GroupBlocked));
    // a permanent failure is handled (in the DLQ), so its group goes on
    assert_eq!(
        report.outcomes[5],
        Outcome::DeadLettered("MALFORMED_JSON".into())
    );
    assert_eq!(report.outcomes[6], Outcome::Processed);
    let copy = &dlq_copies(&queues)[0];
    assert_eq!(copy.group_id.as_deref(), Some("C"));
    assert_eq!(copy.deduplication_id.as_deref(), Some("permanent-c1"));
}

#[tokio::test]
async fn fifo_a_dead_letter_not_confirmed_holds_the_rest_of_its_group() {
    // GIVEN a FIFO batch whose first record of group A is malformed, and a DLQ that
    // refuses the copy
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    queues.fail_calls(Call::Send, true);
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq.fifo");
    let event = json!({"Records": [
        record("a1", "{bad", None, Some("A")),
        record("a2", &order("a-2"), None, Some("A")),
        record("b1", &order("b-1"), None, Some("B")),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    // THEN a1 is kept (retried) and a2 waits behind it, unrun; B goes on
    assert_eq!(failed_ids(&report.response), vec!["a1", "a2"]);
    assert_eq!(report.outcomes[1], Outcome::Failed(Failure::GroupBlocked));
    assert_eq!(report.outcomes[2], Outcome::Processed);
    assert!(dlq_copies(&queues).is_empty());
}

#[tokio::test]
async fn no_state_survives_between_invocations() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq.fifo");
    let first = json!({"Records": [record("a1", &order("transient-a1"), None, Some("A"))]});
    assert_eq!(
        failed_ids(&consumer.process(first, later()).await.unwrap().response),
        vec!["a1"]
    );
    let second = json!({"Records": [record("a2", &order("a-2"), None, Some("A"))]});
    assert!(
        consumer
            .process(second, later())
            .await
            .unwrap()
            .response
            .batch_item_failures
            .is_empty()
    );
}

/// The main queue's limits as SQS reports them: `maxReceiveCount` 5, 4 days' retention.
fn main_limits(max_receive_count: u32) -> resq::sqs::QueueLimits {
    resq::sqs::QueueLimits {
        max_receive_count: Some(max_receive_count),
        dead_letter_target: Some("arn:aws:sqs:us-east-1:123456789012:dlq".into()),
        ..resq::sqs::QueueLimits::sqs_defaults()
    }
}

fn received(mut record: Value, times: u32) -> Value {
    record["attributes"]["ApproximateReceiveCount"] = json!(times.to_string());
    record
}

#[tokio::test]
async fn a_transient_failure_on_its_last_allowed_receive_is_dead_lettered_with_its_reason() {
    // GIVEN a main queue whose redrive policy allows 5 receives, and three transient
    // failures on their 4th, 5th and 6th receive (a replay, x-redrive-count 2, on its 5th)
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    queues.set_limits(MAIN, Ok(main_limits(5)));
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [
        received(record("fourth", &order("transient-4"), None, None), 4),
        received(record("fifth", &order("transient-5"), Some("2"), None), 5),
        received(record("sixth", &order("panic-6"), None, None), 6),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    // THEN the one with receives left is retried and backed off; the others are in the DLQ
    // as transient failures with their codes, acknowledged
    assert_eq!(failed_ids(&report.response), vec!["fourth"]);
    assert_eq!(backed_off(&queues), vec!["fourth"]);
    let copies = dlq_copies(&queues);
    let attr = |m: &OutgoingMessage, n: &str| m.attributes[n].string_value.clone();
    let marks: Vec<_> = copies
        .iter()
        .map(|c| (attr(c, X_FAILURE_CLASS), attr(c, X_FAILURE_REASON)))
        .collect();
    assert_eq!(
        marks,
        vec![
            (
                Some("transient".into()),
                Some("DOWNSTREAM_UNAVAILABLE".into())
            ),
            (Some("transient".into()), Some("HANDLER_PANIC".into())),
        ]
    );
    // AND the replay keeps its x-redrive-count (the redriver's cap still counts it)
    assert_eq!(attr(&copies[0], "x-redrive-count").as_deref(), Some("2"));
    assert_eq!(copies[0].body, order("transient-5"));
    // AND the queue's attributes were read once, and not again on the next invocation
    let again = json!({"Records": [received(record("x", &order("transient-x"), None, None), 5)]});
    consumer.process(again, later()).await.unwrap();
    assert_eq!(queues.limits_read(), 1);
    assert_eq!(dlq_copies(&queues).len(), 3);
}

#[tokio::test]
async fn a_failure_whose_retention_would_end_before_its_next_delivery_is_dead_lettered() {
    // GIVEN a queue that keeps messages an hour, and a transient failure sent 57 min ago:
    // its next delivery (up to its backoff or the visibility timeout, plus the longest
    // batching window) could come after SQS deletes it
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let limits = resq::sqs::QueueLimits {
        retention: Duration::from_secs(3600),
        ..main_limits(100)
    };
    queues.set_limits(MAIN, Ok(limits));
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let sent = |minutes_ago: u64| (decide::epoch_ms() - minutes_ago * 60_000).to_string();
    let mut old = record("old", &order("transient-old"), None, None);
    old["attributes"]["SentTimestamp"] = json!(sent(57));
    let mut young = record("young", &order("transient-young"), None, None);
    young["attributes"]["SentTimestamp"] = json!(sent(10));
    let report = consumer
        .process(json!({"Records": [old, young]}), later())
        .await
        .unwrap();
    // THEN the old one is in the DLQ with its reason; the young one is retried
    assert_eq!(failed_ids(&report.response), vec!["young"]);
    let copies = dlq_copies(&queues);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].body, order("transient-old"));
    assert_eq!(
        copies[0].attributes[X_FAILURE_CLASS]
            .string_value
            .as_deref(),
        Some("transient")
    );
}

#[tokio::test]
async fn limits_that_cannot_be_read_leave_failures_to_sqs_and_are_asked_again_later() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    queues.set_limits(MAIN, Err("not allowed".into()));
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [received(record("m", &order("transient-m"), None, None), 9)]});
    let report = consumer.process(event.clone(), later()).await.unwrap();
    assert_eq!(failed_ids(&report.response), vec!["m"]);
    assert!(dlq_copies(&queues).is_empty());
    // not asked on every invocation
    consumer.process(event, later()).await.unwrap();
    assert_eq!(queues.limits_read(), 1);
}

/// An effect that waits 10–59 ms and counts how many records were in flight as each started;
/// its first `throttle_first` calls are throttled (counted into `throttling` as resq's
/// HTTPS client counts a 503 `SlowDown`), the rest go through.
#[derive(Clone, Default)]
struct Downstream(Arc<DownstreamState>);

#[derive(Default)]
struct DownstreamState {
    throttling: Throttling,
    throttle_first: usize,
    calls: std::sync::atomic::AtomicUsize,
    in_flight: std::sync::atomic::AtomicUsize,
    in_flight_at_start: Mutex<Vec<usize>>,
}

impl OrderHandler for Downstream {
    async fn handle(&self, _: &Order, _: &RecordMeta<'_>) -> Result<(), HandlerError> {
        use std::sync::atomic::Ordering::SeqCst;
        let s = &self.0;
        let now = s.in_flight.fetch_add(1, SeqCst) + 1;
        s.in_flight_at_start.lock().unwrap().push(now);
        let call = s.calls.fetch_add(1, SeqCst);
        let sent = Instant::now();
        // 10–59 ms, spread so that few calls end at the same tick
        let wait = 10 + (call as u64 * 7919) % 50;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        match call < s.throttle_first {
            true => s.throttling.throttled(sent),
            false => s.throttling.went_through(),
        }
        s.in_flight.fetch_sub(1, SeqCst);
        Ok(())
    }
}

/// Runs `records` orders through a consumer at `concurrency` over [`Downstream`]; returns
/// how many were in flight as each started, in the order they started.
async fn in_flight_at_starts(
    concurrency: Concurrency,
    records: usize,
    throttle_first: usize,
) -> Vec<usize> {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let effect = Downstream(Arc::new(DownstreamState {
        throttle_first,
        ..Default::default()
    }));
    let mut cfg = config("http://127.0.0.1/1/dlq");
    cfg.concurrency = concurrency;
    let consumer = Consumer::new(effect.clone(), &queues, &store, cfg)
        .with_throttling(effect.0.throttling.clone());
    // first deliveries: what is measured is the concurrency, not the retry budget
    let batch: Vec<Value> = (0..records)
        .map(|i| {
            received(
                record(&format!("m{i}"), &order(&format!("o-{i}")), None, None),
                1,
            )
        })
        .collect();
    let report = consumer
        .process(json!({ "Records": batch }), later())
        .await
        .unwrap();
    assert!(failed_ids(&report.response).is_empty());
    let starts = effect.0.in_flight_at_start.lock().unwrap().clone();
    assert_eq!(starts.len(), records);
    starts
}

#[tokio::test(start_paused = true)]
async fn auto_runs_the_whole_batch_at_once_up_to_64_and_a_number_fixes_it() {
    let most = |v: Vec<usize>| v.into_iter().max().unwrap();
    assert_eq!(
        most(in_flight_at_starts(Concurrency::Auto, 10, 0).await),
        10
    );
    assert_eq!(
        most(in_flight_at_starts(Concurrency::Auto, 200, 0).await),
        64
    );
    assert_eq!(
        most(in_flight_at_starts(Concurrency::Fixed(4), 200, 0).await),
        4
    );
    assert_eq!(
        most(in_flight_at_starts(Concurrency::Fixed(100), 200, 0).await),
        100
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttled_downstream_halves_the_records_in_flight_and_calls_that_go_through_raise_them_again()
 {
    // GIVEN 600 records under auto, the first wave of 64 calls all throttled
    let starts = in_flight_at_starts(Concurrency::Auto, 600, 64).await;
    // THEN the first wave ran 64 at once
    let most = |from: usize, to: usize| *starts[from..to].iter().max().unwrap();
    assert_eq!(most(0, 64), 64);
    // and the next wave 32 (halved once: the other 63 throttled calls of the first wave
    // were sent before the halving, so they say nothing new)
    assert_eq!(most(64, 96), 32);
    // and as calls went through the limit rose one at a time: the last records ran more
    // at once than 32, and never more than 64
    let late = most(500, 600);
    assert!(late > 32, "{late}");
    assert_eq!(most(0, 600), 64);
    // a fixed number does not move, throttled or not
    let fixed = in_flight_at_starts(Concurrency::Fixed(20), 200, 200).await;
    assert_eq!(fixed[20..].iter().max(), Some(&20));
}

#[tokio::test(start_paused = true)]
async fn the_next_invocation_resumes_the_limit_where_the_last_one_left_it() {
    // GIVEN one consumer (one execution environment) whose first invocation of 600 had its
    // first wave of 64 throttled (halved to 32, then raised as calls went through)
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let effect = Downstream(Arc::new(DownstreamState {
        throttle_first: 64,
        ..Default::default()
    }));
    let mut cfg = config("http://127.0.0.1/1/dlq");
    cfg.concurrency = Concurrency::Auto;
    let consumer = Consumer::new(effect.clone(), &queues, &store, cfg)
        .with_throttling(effect.0.throttling.clone());
    let batch = |k: &str, n: usize| {
        let records: Vec<Value> = (0..n)
            .map(|i| {
                let id = format!("{k}-{i}");
                received(record(&id, &order(&id), None, None), 1)
            })
            .collect();
        json!({ "Records": records })
    };
    consumer.process(batch("a", 600), later()).await.unwrap();
    // WHEN the next invocation, of 200, runs right after it, nothing throttled
    consumer.process(batch("b", 200), later()).await.unwrap();
    // THEN its first wave runs as many at once as the first left (over 32), not 64 again
    let starts = effect.0.in_flight_at_start.lock().unwrap().clone();
    let wave = *starts[600..664].iter().max().unwrap();
    assert!(wave > 32 && wave < 64, "{wave}");
}

#[tokio::test(start_paused = true)]
async fn invocations_at_once_share_the_records_in_flight_of_the_process() {
    // GIVEN one consumer (one process) at 4 records in flight
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let effect = Downstream::default();
    let mut cfg = config("http://127.0.0.1/1/dlq");
    cfg.concurrency = Concurrency::Fixed(4);
    let consumer = Consumer::new(effect.clone(), &queues, &store, cfg);
    let batch = |k: usize| {
        let records: Vec<Value> = (0..10)
            .map(|i| {
                received(
                    record(
                        &format!("m{k}-{i}"),
                        &order(&format!("o{k}-{i}")),
                        None,
                        None,
                    ),
                    1,
                )
            })
            .collect();
        json!({ "Records": records })
    };
    // WHEN it runs two invocations of 10 at once (Lambda Managed Instances)
    let (a, b) = futures::join!(
        consumer.process(batch(0), later()),
        consumer.process(batch(1), later())
    );
    // THEN all 20 ran, never more than 4 at once: the limit is the process's, not 4 each
    assert!(failed_ids(&a.unwrap().response).is_empty());
    assert!(failed_ids(&b.unwrap().response).is_empty());
    let starts = effect.0.in_flight_at_start.lock().unwrap().clone();
    assert_eq!((starts.len(), starts.iter().max()), (20, Some(&4)));
}

#[tokio::test]
async fn records_nearest_their_last_receive_start_first() {
    // GIVEN one record at a time and a deadline that leaves room for about two
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let mut cfg = config("http://127.0.0.1/1/dlq");
    cfg.concurrency = Concurrency::Fixed(1);
    let consumer = Consumer::new(Scripted, &queues, &store, cfg);
    let event = json!({"Records": [
        received(record("r1", &order("slow-1"), None, None), 1),
        received(record("r2", &order("slow-2"), None, None), 2),
        received(record("r4", &order("slow-4"), None, None), 4),
        received(record("r3", &order("slow-3"), None, None), 3),
    ]});
    let deadline = Instant::now() + Duration::from_millis(650);
    let report = consumer.process(event, deadline).await.unwrap();
    // THEN the ones left unstarted are those with the most receives left
    let unstarted: Vec<&str> = failed_ids(&report.response);
    assert!(
        !unstarted.is_empty() && unstarted.len() < 4,
        "{unstarted:?}"
    );
    let started: Vec<u32> = report
        .outcomes
        .iter()
        .zip([1, 2, 4, 3])
        .filter(|(o, _)| **o == Outcome::Processed)
        .map(|(_, n)| n)
        .collect();
    let left: Vec<u32> = report
        .outcomes
        .iter()
        .zip([1, 2, 4, 3])
        .filter(|(o, _)| o.is_failed())
        .map(|(_, n)| n)
        .collect();
    assert!(
        started.iter().min() > left.iter().max(),
        "started {started:?}, left {left:?}"
    );
}

#[tokio::test]
async fn backoff_goes_to_the_queue_the_record_came_from() {
    // GIVEN a second event source: a queue other than MAIN_QUEUE_URL
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let mut other = record("o", &order("transient-o"), None, None);
    other["eventSourceARN"] = json!("arn:aws:sqs:us-east-1:123456789012:priority-orders");
    let report = consumer
        .process(
            json!({"Records": [other, record("m", &order("transient-m"), None, None)]}),
            later(),
        )
        .await
        .unwrap();
    assert_eq!(failed_ids(&report.response), vec!["o", "m"]);
    // THEN each is backed off on its own queue
    let priority = "http://127.0.0.1/123456789012/priority-orders";
    assert_eq!(
        queues.changes(priority).len(),
        1,
        "{:?}",
        queues.changes(priority)
    );
    assert_eq!(backed_off(&queues), vec!["m"]);
}

#[tokio::test]
async fn an_event_from_the_dlq_is_refused() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/123456789012/dlq");
    let mut looped = record("l", "{not json", None, None);
    looped["eventSourceARN"] = json!("arn:aws:sqs:us-east-1:123456789012:dlq");
    let err = consumer
        .process(json!({"Records": [looped]}), later())
        .await
        .unwrap_err();
    assert_eq!(err.error_type(), "EventFromDeadLetterQueue");
    assert!(
        err.to_string()
            .contains("arn:aws:sqs:us-east-1:123456789012:dlq"),
        "{err}"
    );
    assert_eq!(queues.calls(), 0, "nothing was copied back into the DLQ");
}

#[tokio::test]
async fn a_message_older_than_the_idempotency_window_is_archived_and_never_run() {
    // GIVEN order records kept for a day, and an order first sent two days ago (its
    // x-first-sent-at carried across a replay)
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let mut cfg = config("http://127.0.0.1/1/dlq");
    cfg.idempotency_window = Duration::from_secs(86_400);
    let consumer = Consumer::new(RecordOrder::new(&store), &queues, &store, cfg);
    let mut old = record("old", &order("o-old"), Some("1"), None);
    let first_sent = (decide::epoch_ms() - 2 * 86_400_000).to_string();
    old["messageAttributes"]["x-first-sent-at"] =
        json!({"stringValue": first_sent, "dataType": "Number"});
    let young = record("young", &order("o-young"), None, None);
    let report = consumer
        .process(json!({"Records": [old, young]}), later())
        .await
        .unwrap();
    assert_eq!(
        report.outcomes,
        vec![
            Outcome::Archived(ArchiveReason::IdempotencyWindow),
            Outcome::Processed
        ]
    );
    assert_eq!(store.keys("orders/"), vec!["orders/o-young.json"]);
    assert_eq!(store.keys("archive/IDEMPOTENCY_WINDOW/").len(), 1);
}

#[tokio::test]
async fn an_order_with_a_number_no_float_holds_is_recorded_as_written() {
    // GIVEN an order with an extra field holding 1e400 (valid JSON, more than an f64)
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = recording(&queues, &store, "http://127.0.0.1/1/dlq");
    let body = r#"{"orderId":"o-big","userId":"u1","items":[{"productId":"p1","quantity":1}],"weight":1e400}"#;
    let report = consumer
        .process(
            json!({"Records": [record("big", body, None, None)]}),
            later(),
        )
        .await
        .unwrap();
    // THEN it is recorded, the order byte for byte (not a panic, retried to the cap)
    assert_eq!(report.outcomes, vec![Outcome::Processed]);
    let stored = String::from_utf8(store.objects()["orders/o-big.json"].clone()).unwrap();
    assert!(stored.contains(body), "{stored}");
    // AND its redelivery is the same order
    let again = consumer
        .process(
            json!({"Records": [record("big-2", body, None, None)]}),
            later(),
        )
        .await
        .unwrap();
    assert_eq!(again.outcomes, vec![Outcome::Processed]);
}

#[tokio::test]
async fn a_different_order_under_a_recorded_order_id_is_a_conflict_and_the_same_one_is_done() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = recording(&queues, &store, "http://127.0.0.1/1/dlq");
    let body = |user: &str, items: Value| {
        json!({"orderId": "o-1", "userId": user, "items": items}).to_string()
    };
    let two = json!([{"productId": "p1", "quantity": 1}, {"productId": "p2", "quantity": 2}]);
    let first = record("first", &body("u1", two.clone()), None, None);
    consumer
        .process(json!({"Records": [first]}), later())
        .await
        .unwrap();
    // WHEN the producer retries it (items in another order), and sends two other orders
    // under its id
    let retry = record(
        "retry",
        &body(
            "u1",
            json!([{"productId": "p2", "quantity": 2}, {"productId": "p1", "quantity": 1}]),
        ),
        None,
        None,
    );
    let other_user = record("user", &body("u2", two), None, None);
    let other_items = record(
        "items",
        &body("u1", json!([{"productId": "p1", "quantity": 5}])),
        None,
        None,
    );
    let report = consumer
        .process(
            json!({"Records": [retry, other_user, other_items]}),
            later(),
        )
        .await
        .unwrap();
    // THEN the retry is done; the others go to the DLQ as ORDER_ID_CONFLICT
    let conflict = Outcome::DeadLettered("ORDER_ID_CONFLICT".into());
    assert_eq!(
        report.outcomes,
        vec![Outcome::Processed, conflict.clone(), conflict]
    );
    let copies = dlq_copies(&queues);
    assert_eq!(copies.len(), 2);
    assert!(copies[0].body.contains("u2"));
    assert_eq!(store.keys("orders/").len(), 1);
}

#[tokio::test]
async fn deadline_margin_reports_records_not_started() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let mut cfg = config("http://127.0.0.1/1/dlq");
    cfg.concurrency = Concurrency::Fixed(1);
    let consumer = Consumer::new(Scripted, &queues, &store, cfg);
    // start_by = now + 200 ms; the first record takes 250 ms
    let deadline = Instant::now() + Duration::from_millis(400);
    let event = json!({"Records": [
        record("slow", &order("slow-1"), None, None),
        record("next", &order("o-2"), None, None),
        record("last", &order("o-3"), None, None),
    ]});
    let report = consumer.process(event, deadline).await.unwrap();
    assert_eq!(report.outcomes[0], Outcome::Processed);
    assert_eq!(
        report.outcomes[1..],
        [
            Outcome::Failed(Failure::NotStarted),
            Outcome::Failed(Failure::NotStarted)
        ]
    );
    assert_eq!(failed_ids(&report.response), vec!["next", "last"]);
    assert!(
        store.keys("").is_empty(),
        "nothing started may have written"
    );
    assert!(
        backed_off(&queues).is_empty(),
        "records that never started need no visibility change: SQS returns them by itself"
    );
}

#[tokio::test]
async fn deadline_already_inside_the_margin_starts_nothing() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [record("a", &order("o-1"), None, None), record("b", "{bad", None, None)]});
    let report = consumer
        .process(event, Instant::now() + Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(failed_ids(&report.response), vec!["a", "b"]);
    assert!(dlq_copies(&queues).is_empty());
}

#[tokio::test]
async fn a_hanging_handler_is_abandoned_at_the_margin() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let deadline = Instant::now() + Duration::from_millis(600);
    let event = json!({"Records": [record("hang", &order("hang-1"), None, None), record("ok", &order("o-2"), None, None)]});
    let report = consumer.process(event, deadline).await.unwrap();
    assert!(
        Instant::now() < deadline,
        "the batch must answer before the deadline"
    );
    assert!(
        matches!(&report.outcomes[0], Outcome::Failed(Failure::Resq { code, .. }) if code.code() == "RECORD_TIMEOUT")
    );
    assert_eq!(report.outcomes[1], Outcome::Processed);
}

#[tokio::test]
async fn the_last_replay_runs_and_a_count_past_the_cap_is_archived() {
    // GIVEN the cap is 3: a copy carrying 3 is the last real replay, 4 cannot come from
    // the redriver
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [
        record("last", &order("o-1"), Some("3"), None),
        record("past", &order("o-2"), Some("4"), None),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(
        report.outcomes,
        vec![
            Outcome::Processed,
            Outcome::Archived(ArchiveReason::RedriveCap)
        ]
    );
    // and with the cap at 1, the one replay is real
    let mut cfg = config("http://127.0.0.1/1/dlq");
    cfg.common.max_redrive_attempts = 1;
    let consumer = Consumer::new(Scripted, &queues, &store, cfg);
    let event = json!({"Records": [record("one", &order("o-3"), Some("1"), None)]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(report.outcomes, vec![Outcome::Processed]);
}

/// A team's handler whose parsing panics on `"parse-panic"` and whose business id panics
/// on `"id-panic"`.
struct PanickyParse;

impl MessageHandler for PanickyParse {
    type Message = String;

    fn parse(&self, body: Option<&str>) -> Result<String, Rejection> {
        match body {
            Some("parse-panic") => panic!("parser bug"),
            Some(b) => Ok(b.to_owned()),
            None => Err(Rejection::malformed("no body")),
        }
    }

    fn business_id<'m>(&self, message: &'m String) -> &'m str {
        assert_ne!(message, "id-panic", "business id bug");
        message
    }

    async fn handle(&self, _: &String, _: &RecordMeta<'_>) -> Result<(), HandlerError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_panic_in_a_handlers_parsing_fails_that_record_only() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = Consumer::new(
        PanickyParse,
        &queues,
        &store,
        config("http://127.0.0.1/1/dlq"),
    );
    let event = json!({"Records": [
        record("ok", "fine", None, None),
        record("bad-parse", "parse-panic", None, None),
        record("bad-id", "id-panic", None, None),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(failed_ids(&report.response), vec!["bad-parse"]);
    assert!(
        matches!(&report.outcomes[1], Outcome::Failed(Failure::Resq { code, details }) if code.code() == "HANDLER_PANIC" && details.contains("parser bug")),
        "{:?}",
        report.outcomes
    );
    // a business id that cannot be read only leaves the log without it
    assert_eq!(report.outcomes[2], Outcome::Processed);
    assert!(dlq_copies(&queues).is_empty());
}

#[tokio::test]
async fn a_failing_replay_is_counted_once_the_moment_it_fails() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let mut first = record("r1", &order("transient-1"), Some("1"), None);
    first["attributes"]["ApproximateReceiveCount"] = json!("1");
    let mut permanent = record("r2", &order("permanent-2"), Some("2"), None);
    permanent["attributes"]["ApproximateReceiveCount"] = json!("1");
    // the same replayed copy on its second receive: already counted
    let again = record("r3", &order("transient-3"), Some("1"), None);
    let mut original = record("o4", &order("transient-4"), None, None);
    original["attributes"]["ApproximateReceiveCount"] = json!("1");
    let mut fine = record("r5", &order("o-5"), Some("1"), None);
    fine["attributes"]["ApproximateReceiveCount"] = json!("1");
    let event = json!({"Records": [first, permanent, again, original, fine]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(
        report.metrics.get(resq_consumer::account::REDRIVE_RETURNED),
        2
    );
    let t = resq::telemetry::Telemetry::of(resq::telemetry::Names::ORDERS, "c", None).unwrap();
    let level = resq::telemetry::LogLevel::Info;
    let lines = report.metrics.to_lines(&t, chrono::Utc::now(), level);
    let line: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(
        line["RedriveReturned"], 2,
        "emitted even by the consumer: {line}"
    );
}

#[tokio::test]
async fn an_empty_failure_reason_from_a_handler_still_reaches_the_dlq() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [record("n", &order("nocode-1"), None, None)]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(
        report.outcomes,
        vec![Outcome::DeadLettered("UNSPECIFIED".into())]
    );
    assert_eq!(
        dlq_copies(&queues)[0].attributes[X_FAILURE_REASON]
            .string_value
            .as_deref(),
        Some("UNSPECIFIED")
    );
}

#[tokio::test]
async fn an_unreadable_record_is_dead_lettered_at_once_with_what_could_be_read() {
    // GIVEN the runtime's bytes: one record whose binary attribute is not base64 (as in
    // Powertools' sqsEvent.json), one whose body is a JSON object, not a string
    let (logs, _guard) = resq_testing::CapturedLogs::start();
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let mut bad = record("bad", &order("o-1"), Some("1"), None);
    bad["messageAttributes"]["blob"] = json!({"dataType": "Binary", "binaryValue": "not base64!"});
    let mut object = record("object", "", None, None);
    object["body"] = json!({"orderId": "o-3"});
    let payload =
        json!({"Records": [record("ok", &order("o-2"), None, None), bad, object]}).to_string();
    let invocation: SqsInvocation = serde_json::from_str(&payload).unwrap();
    // WHEN it is processed
    let report = consumer.handle(invocation, later()).await.unwrap();
    // THEN nothing is retried: both go to the DLQ at once as permanent UNREADABLE_RECORD
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(report.outcomes[0], Outcome::Processed);
    for o in &report.outcomes[1..] {
        assert_eq!(o, &Outcome::DeadLettered("UNREADABLE_RECORD".into()));
    }
    let copies = dlq_copies(&queues);
    assert_eq!(copies.len(), 2);
    let attr = |m: &OutgoingMessage, n: &str| m.attributes[n].string_value.clone();
    for c in &copies {
        assert_eq!(attr(c, X_FAILURE_CLASS).as_deref(), Some("permanent"));
        assert_eq!(
            attr(c, X_FAILURE_REASON).as_deref(),
            Some("UNREADABLE_RECORD")
        );
    }
    // AND each copy keeps what could be read: the body and the readable attributes
    assert_eq!(copies[0].body, order("o-1"));
    assert_eq!(attr(&copies[0], "x-redrive-count").as_deref(), Some("1"));
    assert!(!copies[0].attributes.contains_key("blob"));
    assert_eq!(copies[1].body, r#"{"orderId":"o-3"}"#);
    // AND the log names the field and what was wrong with it
    let lines = logs.lines();
    let read = |id: &str| {
        lines
            .iter()
            .find(|l| l["message_id"] == id && l["message"] == "the record cannot be read")
            .unwrap_or_else(|| panic!("{id}: {lines:?}"))["error_details"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        read("bad").starts_with("messageAttributes.blob: "),
        "{}",
        read("bad")
    );
    assert_eq!(read("object"), "body: an object, not a string");
    assert!(backed_off(&queues).is_empty());
}

#[tokio::test]
async fn a_record_without_a_body_is_archived_not_copied_into_a_refusal() {
    // GIVEN hand-made records (SQS never delivers them) with an empty body and with none:
    // SQS refuses a DLQ copy without a body, so a copy would fail on every receive
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let mut none = record("none", "", None, None);
    none.as_object_mut().unwrap().remove("body");
    let report = consumer
        .process(
            json!({"Records": [record("empty", "", None, None), none]}),
            later(),
        )
        .await
        .unwrap();
    // THEN both are archived with their reason, nothing is retried
    let archived = Outcome::Archived(ArchiveReason::PermanentFailure);
    assert_eq!(report.outcomes, vec![archived.clone(), archived]);
    assert!(dlq_copies(&queues).is_empty());
    let keys = store.keys("archive/PERMANENT_FAILURE/");
    assert_eq!(keys.len(), 2);
    let entry: Value = serde_json::from_slice(&store.objects()[&keys[0]]).unwrap();
    let last = entry["metadata"]["lastError"].as_str().unwrap();
    assert!(last.starts_with("permanent MALFORMED_JSON: "), "{last}");
}

#[tokio::test]
async fn an_unreadable_record_without_a_body_is_archived_whole() {
    // GIVEN a record whose body is a list and whose attributes would overflow a copy
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let mut bad = record("nobody", "", None, None);
    bad.as_object_mut().unwrap().remove("body");
    bad["messageAttributes"]["blob"] = json!({"dataType": "Binary", "binaryValue": "%%"});
    let payload = json!({"Records": [bad]}).to_string();
    let report = consumer
        .handle(serde_json::from_str(&payload).unwrap(), later())
        .await
        .unwrap();
    // THEN it is archived, the entry holding the raw record
    assert_eq!(
        report.outcomes,
        vec![Outcome::Archived(ArchiveReason::UnreadableRecord)]
    );
    let keys = store.keys("archive/UNREADABLE_RECORD/");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let entry: Value = serde_json::from_slice(&store.objects()[&keys[0]]).unwrap();
    let raw = entry["originalMessage"]["rawRecord"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(raw).unwrap()["messageId"],
        "nobody"
    );
    assert!(raw.contains("%%"), "{raw}");
    assert!(dlq_copies(&queues).is_empty());
}

#[tokio::test]
async fn a_slow_sqs_at_the_deadline_cannot_make_the_batch_late() {
    // GIVEN 30 failing records, 5 permanent failures and an SQS that takes 3 s per call,
    // with a 2 s budget (margin 200 ms)
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    queues.set_delay(Duration::from_secs(3));
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let mut records: Vec<Value> = (0..30)
        .map(|i| {
            record(
                &format!("t{i}"),
                &order(&format!("transient-{i}")),
                None,
                None,
            )
        })
        .collect();
    records.extend((0..5).map(|i| record(&format!("p{i}"), "{bad", None, None)));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(2);
    // WHEN the batch runs
    let report = consumer
        .process(json!({"Records": records}), deadline)
        .await
        .unwrap();
    // THEN it answers before the deadline, the visibility calls were made concurrently,
    // and the permanent failures whose DLQ copies were not confirmed are kept (retried)
    assert!(
        Instant::now() < deadline,
        "answered {:?} into a 2 s budget",
        started.elapsed()
    );
    assert_eq!(report.response.batch_item_failures.len(), 35);
    assert!(report.outcomes[30..].iter().all(|o| matches!(o, Outcome::Failed(Failure::Resq { code, .. }) if code.code() == "SETTLE_DEADLINE")), "{:?}", &report.outcomes[30..]);
    assert!(dlq_copies(&queues).is_empty());
    // one DLQ call, then (with no time left) no visibility calls waited for
    assert!(queues.calls() >= 1);
}

#[tokio::test]
async fn dead_letters_go_out_in_batches_of_ten() {
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let records: Vec<Value> = (0..23)
        .map(|i| record(&format!("p{i}"), "{bad", None, None))
        .collect();
    let report = consumer
        .process(json!({"Records": records}), later())
        .await
        .unwrap();
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(dlq_copies(&queues).len(), 23);
    assert_eq!(queues.calls(), 3, "SendMessageBatch calls of 10, 10 and 3");
}

#[tokio::test]
async fn log_lines_carry_the_correlation_fields() {
    // GIVEN the JSON log format the functions use in Lambda
    let (logs, _guard) = resq_testing::CapturedLogs::start();
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let event = json!({"Records": [record("m-7", &order("transient-7"), None, None)]});
    // WHEN a record fails
    consumer.process(event, later()).await.unwrap();
    // THEN its log line names the message, the order (under Powertools' key and the
    // order's own) and the error
    let line = logs.line("failed; will be retried");
    assert_eq!(line["message_id"], "m-7");
    assert_eq!(line["correlation_id"], "transient-7");
    assert_eq!(line["order_id"], "transient-7");
    assert_eq!(line["error_code"], "DOWNSTREAM_UNAVAILABLE");
    assert_eq!(line["error_details"], "503");
    assert_eq!(line["service"], "orders");
}

#[tokio::test]
async fn an_unparsed_body_is_followed_by_the_types_own_field() {
    // GIVEN a message type whose business id is `ticketId`, logged as `ticket_id`
    struct Tickets;
    impl MessageHandler for Tickets {
        type Message = String;
        const NAMES: resq::telemetry::Names = resq::telemetry::Names {
            service: "tickets",
            correlation_key: "ticket_id",
            correlation_field: "ticketId",
            ..resq::telemetry::Names::ORDERS
        };
        fn parse(&self, _: Option<&str>) -> Result<String, Rejection> {
            Err(Rejection::invalid("never valid"))
        }
        fn business_id<'m>(&self, m: &'m String) -> &'m str {
            m
        }
        async fn handle(&self, _: &String, _: &RecordMeta<'_>) -> Result<(), HandlerError> {
            Ok(())
        }
    }
    let t = resq::telemetry::Telemetry::of(Tickets::NAMES, "tickets-consumer", None).unwrap();
    let (logs, _guard) = resq_testing::CapturedLogs::start_for(&t);
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = Consumer::new(Tickets, &queues, &store, config("http://127.0.0.1/1/dlq"));
    // WHEN a body it rejects names its ticket
    let event =
        json!({"Records": [record("m-1", r#"{"ticketId":"t-9","orderId":"o-1"}"#, None, None)]});
    consumer.process(event, later()).await.unwrap();
    // THEN the line of its trip to the DLQ follows the ticket, not an order
    let line = logs.line("sent to the DLQ as a permanent failure");
    assert_eq!(
        (
            &line["message_id"],
            &line["correlation_id"],
            &line["ticket_id"],
            &line["service"]
        ),
        (
            &json!("m-1"),
            &json!("t-9"),
            &json!("t-9"),
            &json!("tickets")
        )
    );
    assert!(line.get("order_id").is_none(), "{line}");
}

#[tokio::test]
async fn a_partly_failed_dlq_batch_keeps_exactly_the_failed_records() {
    // GIVEN SQS takes every DLQ copy but two
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    queues.fail_sends(|m| m.body == "{broken-1" || m.body == "{broken-11");
    let consumer = recording(&queues, &store, "http://127.0.0.1/1/dlq");
    // WHEN twelve malformed records arrive (two SendMessageBatch calls: 10 + 2)
    let records: Vec<Value> = (0..12)
        .map(|i| record(&format!("m{i}"), &format!("{{broken-{i}"), None, None))
        .collect();
    let report = consumer
        .process(json!({"Records": records}), later())
        .await
        .unwrap();
    // THEN exactly the entries SQS refused are kept, and backed off
    assert_eq!(failed_ids(&report.response), vec!["m1", "m11"]);
    assert_eq!(dlq_copies(&queues).len(), 10);
    assert_eq!(backed_off(&queues), vec!["m1", "m11"]);
    assert_eq!(
        queues.calls(),
        3,
        "two SendMessageBatch calls, one visibility call"
    );
}

/// Takes any body and notes the message id of each record whose effect it runs; a body naming
/// `transient-`, or any body while the downstream is down ([`Noting::set_down`]), fails
/// transiently.
#[derive(Clone, Default)]
struct Noting {
    ran: Arc<Mutex<Vec<String>>>,
    down: Arc<std::sync::atomic::AtomicBool>,
}

impl Noting {
    /// The message ids of the records run, in the order they ran.
    fn ran(&self) -> Vec<String> {
        self.ran.lock().unwrap().clone()
    }

    /// The downstream goes down (every effect fails) or comes back.
    fn set_down(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::SeqCst);
    }
}

impl MessageHandler for Noting {
    type Message = String;
    fn parse(&self, body: Option<&str>) -> Result<String, Rejection> {
        Ok(body.unwrap_or_default().to_owned())
    }
    fn business_id<'m>(&self, body: &'m String) -> &'m str {
        body
    }
    async fn handle(&self, body: &String, meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
        self.ran.lock().unwrap().push(meta.message_id.to_owned());
        let down = self.down.load(std::sync::atomic::Ordering::SeqCst);
        match down || body.contains("transient-") {
            true => Err(HandlerError::transient("DOWNSTREAM_UNAVAILABLE", "503")),
            false => Ok(()),
        }
    }
}

/// `n` orders `{id}{i}`, each on its `receives`th receive.
fn orders(id: &str, n: usize, receives: u32) -> Value {
    let records: Vec<Value> = (0..n)
        .map(|i| {
            let id = format!("{id}{i}");
            received(
                record(&id, &order(&format!("o-{id}")), None, None),
                receives,
            )
        })
        .collect();
    json!({ "Records": records })
}

/// `BACKOFF_MAX_SECONDS` in the tests' configuration.
const LONGEST: i32 = 300;

#[tokio::test]
async fn a_redelivery_over_the_retry_budget_is_not_run_and_waits_the_longest_backoff() {
    // GIVEN a new execution environment (no first deliveries yet: the floor of 10 a minute)
    // whose downstream is down, and 10 redeliveries that ran and failed: the budget is spent
    let (logs, _guard) = resq_testing::CapturedLogs::start();
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let handler = Noting::default();
    handler.set_down(true);
    let consumer = Consumer::new(
        handler.clone(),
        &queues,
        &store,
        config("http://127.0.0.1/1/dlq"),
    );
    let spent = consumer.process(orders("r", 10, 2), later()).await.unwrap();
    assert_eq!(spent.response.batch_item_failures.len(), 10);
    assert_eq!(spent.metrics.get(RETRY_BUDGET_EXCEEDED), 0);
    // WHEN 2 more redeliveries arrive
    let report = consumer.process(orders("h", 2, 2), later()).await.unwrap();
    // THEN neither runs: reported failed, backed off the longest
    let held = failed_ids(&report.response);
    assert_eq!(held, ["h0", "h1"]);
    assert_eq!(handler.ran().len(), 10);
    let expected: Vec<(String, i32)> = held
        .iter()
        .map(|id| (format!("rh-{id}"), LONGEST))
        .collect();
    assert!(queues.changes(MAIN).ends_with(&expected));
    let failures: Vec<&Outcome> = report.outcomes.iter().filter(|o| o.is_failed()).collect();
    assert_eq!(failures, [&Outcome::Failed(Failure::RetryBudget); 2]);
    // AND each says so in its line
    let lines = logs.with_message("record reported failed without running");
    let text = |l: &Value, key: &str| l[key].as_str().unwrap_or_default().to_owned();
    let mut said: Vec<(String, String)> = lines
        .iter()
        .map(|l| (text(l, "message_id"), text(l, "error_code")))
        .collect();
    said.sort();
    let mut expected: Vec<(String, String)> = held
        .iter()
        .map(|id| (id.to_string(), "RETRY_BUDGET".into()))
        .collect();
    expected.sort();
    assert_eq!(said, expected);
    // AND counted: 2 held back; the handler ran none, so no failure share
    assert_eq!(report.metrics.get(RETRY_BUDGET_EXCEEDED), 2);
    assert_eq!(report.metrics.percent(TRANSIENT_FAILURE_PERCENT), None);
    // AND on the next invocation, the downstream back, a replay (on its 2nd receive) still
    // runs, while a redelivery is still refused: the failures of the minute outlive the
    // invocation
    handler.set_down(false);
    let event = json!({"Records": [
        record("replay", &order("o-replay"), Some("1"), None),
        received(record("again", &order("o-again"), None, None), 3),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    assert_eq!(failed_ids(&report.response), vec!["again"]);
    assert_eq!(handler.ran().last().map(String::as_str), Some("replay"));
    assert_eq!(report.metrics.get(RETRY_BUDGET_EXCEEDED), 1);
}

#[tokio::test]
async fn redeliveries_that_succeed_are_never_held_so_a_backlog_drains_at_the_consumers_speed() {
    // GIVEN a new execution environment (no first deliveries: the floor of 10 a minute) and a
    // healthy downstream, after an outage whose probes received every message once
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let handler = Noting::default();
    let consumer = Consumer::new(
        handler.clone(),
        &queues,
        &store,
        config("http://127.0.0.1/1/dlq"),
    );
    // WHEN 50 redeliveries arrive in five batches
    for batch in 0..5 {
        let report = consumer
            .process(orders(&format!("b{batch}-"), 10, 2), later())
            .await
            .unwrap();
        // THEN every one runs and succeeds: none held back
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(report.metrics.get(RETRY_BUDGET_EXCEEDED), 0);
    }
    assert_eq!(handler.ran().len(), 50);
}

#[tokio::test]
async fn a_held_redelivery_on_its_last_allowed_receive_is_dead_lettered_with_retry_budget() {
    // GIVEN a queue allowing 5 receives, and an environment whose 10 redeliveries failed
    // (its downstream down)
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    queues.set_limits(MAIN, Ok(main_limits(5)));
    let handler = Noting::default();
    handler.set_down(true);
    let consumer = Consumer::new(
        handler.clone(),
        &queues,
        &store,
        config("http://127.0.0.1/1/dlq"),
    );
    let spent = consumer.process(orders("r", 10, 2), later()).await.unwrap();
    assert_eq!(spent.response.batch_item_failures.len(), 10);
    // WHEN a redelivery on its 5th receive and one on its 3rd arrive
    let event = json!({"Records": [
        received(record("fifth", &order("o-fifth"), None, None), 5),
        received(record("third", &order("o-third"), None, None), 3),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    // THEN neither runs; the one on its last receive is in the DLQ, transient, RETRY_BUDGET,
    // and acknowledged; the other waits the longest backoff
    assert_eq!(handler.ran().len(), 10);
    assert_eq!(failed_ids(&report.response), vec!["third"]);
    assert_eq!(
        queues.changes(MAIN).last(),
        Some(&("rh-third".to_owned(), LONGEST))
    );
    assert_eq!(
        report.outcomes[0],
        Outcome::DeadLettered("RETRY_BUDGET".into())
    );
    let copies = dlq_copies(&queues);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].body, order("o-fifth"));
    let attr = |n: &str| copies[0].attributes[n].string_value.clone();
    assert_eq!(attr(X_FAILURE_CLASS).as_deref(), Some("transient"));
    assert_eq!(attr(X_FAILURE_REASON).as_deref(), Some("RETRY_BUDGET"));
    // AND both were held back; the handler ran nothing, so no failure share
    assert_eq!(report.metrics.get(RETRY_BUDGET_EXCEEDED), 2);
    assert_eq!(report.metrics.get(resq_consumer::account::DEAD_LETTERED), 1);
    assert_eq!(report.metrics.percent(TRANSIENT_FAILURE_PERCENT), None);
}

#[tokio::test]
async fn fifo_a_group_the_retry_budget_stops_is_held_as_after_a_failure() {
    // GIVEN an environment whose 10 redeliveries failed in the last minute (its downstream
    // down, now back)
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let handler = Noting::default();
    let dlq = "http://127.0.0.1/1/dlq.fifo";
    let consumer = Consumer::new(handler.clone(), &queues, &store, config(dlq));
    handler.set_down(true);
    consumer.process(orders("r", 10, 2), later()).await.unwrap();
    handler.set_down(false);
    // WHEN a FIFO batch comes: group A a redelivery then a first delivery, group B a replay
    let event = json!({"Records": [
        record("a1", &order("o-a1"), None, Some("A")),
        received(record("a2", &order("o-a2"), None, Some("A")), 1),
        record("b1", &order("o-b1"), Some("1"), Some("B")),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    // THEN group A is held whole, in order: a1 by the budget, a2 behind it, neither run,
    // both backed off the longest; group B runs
    assert_eq!(failed_ids(&report.response), vec!["a1", "a2"]);
    assert_eq!(
        report.outcomes,
        vec![
            Outcome::Failed(Failure::RetryBudget),
            Outcome::Failed(Failure::GroupBlocked),
            Outcome::Processed,
        ]
    );
    assert_eq!(handler.ran()[10..], ["b1".to_owned()]);
    let fifo = "http://127.0.0.1/123456789012/orders.fifo";
    let held = vec![("rh-a1".to_owned(), LONGEST), ("rh-a2".to_owned(), LONGEST)];
    assert_eq!(queues.changes(fifo), held);
    // AND only the record the budget stopped counts as held back by it
    assert_eq!(report.metrics.get(RETRY_BUDGET_EXCEEDED), 1);
}

#[tokio::test]
async fn the_transient_failure_share_counts_the_records_the_handler_ran() {
    // GIVEN first deliveries: one succeeds, one fails transiently, one panics, one fails
    // permanently; one is not JSON and one is past the redrive cap (the handler runs neither)
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = scripted(&queues, &store, "http://127.0.0.1/1/dlq");
    let first = |r: Value| received(r, 1);
    let event = json!({"Records": [
        first(record("ok", &order("o-1"), None, None)),
        first(record("transient", &order("transient-2"), None, None)),
        first(record("panic", &order("panic-3"), None, None)),
        first(record("permanent", &order("permanent-4"), None, None)),
        first(record("malformed", "{not json", None, None)),
        first(record("capped", &order("o-6"), Some("4"), None)),
    ]});
    let report = consumer.process(event, later()).await.unwrap();
    // THEN two of the four it ran failed transiently: 50 %
    assert_eq!(
        report.metrics.percent(TRANSIENT_FAILURE_PERCENT),
        Some(50.0)
    );
    assert_eq!(report.metrics.get(RETRY_BUDGET_EXCEEDED), 0);
}

/// An event other projects wrote, from `tests/fixtures/third-party/`.
fn third_party(path: &str) -> Value {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/third-party/"
    );
    let text = std::fs::read_to_string(format!("{dir}{path}")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn first_deliveries_earn_redeliveries_their_share_in_events_other_projects_wrote() {
    // GIVEN Powertools for Java's 25-record batch of first deliveries, four times: 100 run
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    // the Go runtime's record was sent in 2018: its queue keeps it (else its retention would
    // have ended, and a held one would be dead-lettered at once)
    let own = "http://127.0.0.1/123456789012/SQSQueue";
    let keeps_it = resq::sqs::QueueLimits {
        retention: Duration::from_secs(100 * 365 * 86_400),
        ..main_limits(100)
    };
    queues.set_limits(own, Ok(keeps_it));
    let handler = Noting::default();
    let consumer = Consumer::new(
        handler.clone(),
        &queues,
        &store,
        config("http://127.0.0.1/1/dlq"),
    );
    let first = third_party("powertools-lambda-java/sqs_event_big.json");
    for _ in 0..4 {
        let report = consumer.process(first.clone(), later()).await.unwrap();
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(report.metrics.get(RETRY_BUDGET_EXCEEDED), 0);
    }
    assert_eq!(handler.ran().len(), 100);
    // WHEN the downstream goes down and the Go runtime's record on its 2nd receive comes 25
    // times
    handler.set_down(true);
    let again = third_party("aws-lambda-go/sqs-event.json");
    let mut held = 0;
    for _ in 0..25 {
        let report = consumer.process(again.clone(), later()).await.unwrap();
        held += report.metrics.get(RETRY_BUDGET_EXCEEDED);
    }
    // THEN 10 % of the 100 plus the floor of 10 run (and fail); the other 5 are held back
    let redelivered = handler
        .ran()
        .iter()
        .filter(|id| *id == "MessageID_1")
        .count();
    assert_eq!((redelivered, held), (20, 5));
    // AND each held one waits the longest backoff on its own queue (those that ran and failed
    // their jittered backoff, a few seconds at their second receive)
    let longest = ("MessageReceiptHandle".to_owned(), LONGEST);
    let changes = queues.changes(own);
    assert!(changes.ends_with(&vec![longest.clone(); 5]), "{changes:?}");
    assert_eq!(changes.iter().filter(|c| **c == longest).count(), 5);
}

#[tokio::test]
async fn an_extended_client_pointer_runs_its_payload_and_travels_as_the_pointer() {
    use resq::payload::Pointer;
    // GIVEN pointers as an extended client sends them: one to a stored order, one to nothing
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    store
        .put_if_absent("big/o-1", order("o-1").into_bytes())
        .await
        .unwrap();
    let pointer = |key: &str| {
        let bucket = resq_testing::MEMORY_BUCKET.to_owned();
        let key = key.to_owned();
        Pointer { bucket, key }.body()
    };
    let (found, gone) = (pointer("big/o-1"), pointer("big/gone"));
    let consumer = recording(&queues, &store, "http://127.0.0.1/1/dlq");
    let event =
        json!({"Records": [record("a", &found, None, None), record("b", &gone, None, None)]});
    // WHEN the batch runs
    let report = consumer.process(event, later()).await.unwrap();
    // THEN the payload is the order the handler recorded; a pointer to nothing is permanent,
    // and its DLQ copy is the pointer
    assert_eq!(
        report.outcomes,
        vec![
            Outcome::Processed,
            Outcome::DeadLettered("PAYLOAD_NOT_FOUND".into())
        ]
    );
    assert_eq!(store.keys("orders/"), vec!["orders/o-1.json".to_owned()]);
    let copies = dlq_copies(&queues);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].body, gone);
    // AND a store that cannot be read makes the pointer a transient failure, retried
    store.set_failing(true);
    let event = json!({"Records": [record("c", &found, None, None)]});
    let report = consumer.process(event, later()).await.unwrap();
    assert!(
        matches!(&report.outcomes[0], Outcome::Failed(Failure::Transient { code, .. }) if code == "PAYLOAD_UNREADABLE"),
        "{:?}",
        report.outcomes
    );
}

#[tokio::test]
async fn a_pointer_is_read_only_once_the_retry_budget_admits_it_and_its_failures_spend_it() {
    use resq::payload::Pointer;
    // GIVEN redeliveries whose payloads cannot be read (the store fails): they spend the
    // budget as failed redeliveries do
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = Consumer::new(
        Noting::default(),
        &queues,
        &store,
        config("http://127.0.0.1/1/dlq"),
    );
    let pointer = |id: &str| {
        let body = Pointer {
            bucket: resq_testing::MEMORY_BUCKET.into(),
            key: format!("gone/{id}"),
        }
        .body();
        received(record(id, &body, None, None), 2)
    };
    store.set_failing(true);
    let records: Vec<Value> = (0..10).map(|i| pointer(&format!("p{i}"))).collect();
    let spent = consumer
        .process(json!({ "Records": records }), later())
        .await
        .unwrap();
    let unreadable = |o: &Outcome| matches!(o, Outcome::Failed(Failure::Transient { code, .. }) if code == "PAYLOAD_UNREADABLE");
    assert!(
        spent.outcomes.iter().all(unreadable),
        "{:?}",
        spent.outcomes
    );
    // WHEN one more arrives, its object gone (a read would find PAYLOAD_NOT_FOUND)
    store.set_failing(false);
    let report = consumer
        .process(json!({ "Records": [pointer("q")] }), later())
        .await
        .unwrap();
    // THEN it is held by the budget, unread
    assert!(
        matches!(&report.outcomes[0], Outcome::Failed(Failure::RetryBudget)),
        "{:?}",
        report.outcomes
    );
    assert_eq!(report.metrics.get(RETRY_BUDGET_EXCEEDED), 1);
}
