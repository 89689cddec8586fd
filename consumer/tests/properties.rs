//! Property tests of the consumer's per-record path: arbitrary bodies (bytes, huge, deep JSON,
//! wrong types), attribute maps (0–10 attributes of every type, the resq attributes with
//! hostile values), receive counts and timestamps, duplicate message ids, FIFO groups, a
//! handler that fails or panics, and ports that fail. Whatever comes in: no panic escapes,
//! every record gets exactly one allowed outcome with its evidence, the batch response names
//! exactly the failed records (never an empty id), and no DLQ copy breaks SQS's limits.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use base64::Engine;
use proptest::prelude::*;
use resq::attributes::{MAX_MESSAGE_ATTRIBUTES, MAX_MESSAGE_BYTES, X_FAILURE_REASON, message_size};
use resq::config::CommonConfig;
use resq::store::ObjectStore;
use resq_consumer::Consumer;
use resq_consumer::account::Outcome;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::event::SqsInvocation;
use resq_consumer::handler::{HandlerError, RecordMeta};
use resq_consumer::order::{Order, parse_order};
use resq_consumer::order::{OrderHandler, RecordOrder, order_key};
use resq_testing::{Call, MemorySqs, MemoryStore};
use serde_json::{Value, json};

/// The reference handler behind scripted misbehaviour, by order id prefix.
struct Hostile<'a>(RecordOrder<&'a MemoryStore>);

impl OrderHandler for Hostile<'_> {
    async fn handle(&self, order: &Order, meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
        let id = order.order_id.as_str();
        if id.starts_with("panic-") {
            panic!("handler panic for {id}");
        }
        if id.starts_with("transient-") {
            return Err(HandlerError::transient("DOWNSTREAM_DOWN", "503"));
        }
        if id.starts_with("permanent-") {
            return Err(HandlerError::permanent("ORDER_REJECTED", "no such product"));
        }
        self.0.handle(order, meta).await
    }
}

fn order_id() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9]{1,8}".prop_map(|s| format!("o-{s}")),
        "[a-z0-9]{1,4}".prop_map(|s| format!("panic-{s}")),
        "[a-z0-9]{1,4}".prop_map(|s| format!("transient-{s}")),
        "[a-z0-9]{1,4}".prop_map(|s| format!("permanent-{s}")),
        Just(String::new()),
        Just("../../etc/passwd".to_owned()),
        "\\PC{1,40}",
        (100usize..3000).prop_map(|n| "x".repeat(n)),
    ]
}

/// JSON text of a value that may be of the wrong type (raw text: `1e309` is not a serde value).
fn raw_scalar() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "1",
        "7",
        "0",
        "-1",
        "1.5",
        "\"2\"",
        "1e309",
        "null",
        "true",
        "18446744073709551616",
        "[]",
        "{}",
        "\"\"",
    ])
    .prop_map(str::to_owned)
}

fn order_body() -> impl Strategy<Value = String> {
    let item = (
        prop_oneof![Just("\"p-1\"".to_owned()), raw_scalar()],
        prop_oneof![4 => (1u32..100).prop_map(|q| q.to_string()), 1 => raw_scalar()],
    )
        .prop_map(|(p, q)| format!(r#"{{"productId":{p},"quantity":{q}}}"#));
    (
        order_id(),
        prop_oneof![4 => Just("\"u-1\"".to_owned()), 1 => raw_scalar()],
        prop::collection::vec(item, 0..4),
        any::<bool>(),
    )
        .prop_map(|(id, user, items, id_as_string)| {
            let id = if id_as_string {
                serde_json::to_string(&id).unwrap_or_default()
            } else {
                "42".to_owned()
            };
            format!(
                r#"{{"orderId":{id},"userId":{user},"items":[{}]}}"#,
                items.join(",")
            )
        })
}

fn body() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => order_body().prop_map(Some),
        1 => Just(None),
        1 => prop::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| Some(String::from_utf8_lossy(&b).into_owned())),
        1 => "\\PC{0,200}".prop_map(Some),
        1 => (1usize..5000).prop_map(|d| Some(format!("{}{}", "[".repeat(d), "]".repeat(d)))),
        1 => (1usize..300).prop_map(|d| Some(format!("{}1{}", "{\"a\":".repeat(d), "}".repeat(d)))),
        1 => prop::sample::select(vec![MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES - 40, 300_000])
            .prop_map(|n| Some(format!("{{\"pad\":\"{}\"}}", "x".repeat(n - 10)))),
        1 => Just(Some(format!("{{{}", "x".repeat(MAX_MESSAGE_BYTES - 1)))),
    ]
}

fn attribute_value() -> impl Strategy<Value = Value> {
    let hostile = prop_oneof![
        prop::sample::select(vec![
            "-1",
            "1e309",
            " 3",
            "3",
            "0",
            "2",
            "NaN",
            "",
            "permanent",
            "99999999999999999999",
            "3.0",
            "+3",
            "0x3",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,30}",
        (200usize..2000).prop_map(|n| "9".repeat(n)),
    ];
    prop_oneof![
        (
            prop::sample::select(vec!["String", "Number", "String.custom", "Number.int"]),
            hostile
        )
            .prop_map(|(t, v)| json!({"dataType": t, "stringValue": v})),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| json!({
            "dataType": "Binary",
            "binaryValue": base64::engine::general_purpose::STANDARD.encode(b)
        })),
        Just(json!({"dataType": "StringList", "stringListValues": ["a", "b"]})),
        Just(json!({"dataType": "String"})),
    ]
}

fn attribute_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "x-redrive-count",
            "x-failure-class",
            "x-failure-reason",
            "x-first-sent-at",
            "trace-id",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9_.-]{1,20}",
    ]
}

fn system_number() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        any::<u32>().prop_map(|n| Some(n.to_string())),
        (1u32..10).prop_map(|n| Some(n.to_string())),
        any::<u64>().prop_map(|n| Some(n.to_string())),
        prop::sample::select(vec!["-1", "abc", "", "1e3", " 2"]).prop_map(|s| Some(s.to_owned())),
    ]
}

#[derive(Clone)]
struct Rec {
    id: String,
    body: Option<String>,
    attributes: BTreeMap<String, Value>,
    receive_count: Option<String>,
    sent_timestamp: Option<String>,
    group: String,
}

/// Shrunk failures print bodies of up to 1 MiB: keep their head and length only.
impl std::fmt::Debug for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = self.body.as_ref().map(|b| {
            let head: String = b.chars().take(120).collect();
            format!("{head:?}… ({} bytes)", b.len())
        });
        f.debug_struct("Rec")
            .field("id", &self.id)
            .field("body", &body)
            .field("attributes", &self.attributes)
            .field("receive_count", &self.receive_count)
            .field("sent_timestamp", &self.sent_timestamp)
            .field("group", &self.group)
            .finish()
    }
}

fn record() -> impl Strategy<Value = Rec> {
    (
        prop_oneof![
            prop::sample::select(vec!["m-0", "m-1", "m-2"]).prop_map(str::to_owned),
            "[a-f0-9]{8}-[a-f0-9]{4}",
        ],
        body(),
        prop::collection::btree_map(attribute_name(), attribute_value(), 0..=10),
        system_number(),
        system_number(),
        prop::sample::select(vec!["g1", "g2", "g3"]).prop_map(str::to_owned),
    )
        .prop_map(
            |(id, body, attributes, receive_count, sent_timestamp, group)| Rec {
                id,
                body,
                attributes,
                receive_count,
                sent_timestamp,
                group,
            },
        )
}

fn event(records: &[Rec], fifo: bool) -> Value {
    let arn = if fifo {
        "arn:aws:sqs:us-east-1:123456789012:orders.fifo"
    } else {
        "arn:aws:sqs:us-east-1:123456789012:orders"
    };
    let records: Vec<Value> = records
        .iter()
        .map(|r| {
            let mut attrs = serde_json::Map::new();
            if let Some(c) = &r.receive_count {
                attrs.insert("ApproximateReceiveCount".into(), json!(c));
            }
            if let Some(t) = &r.sent_timestamp {
                attrs.insert("SentTimestamp".into(), json!(t));
            }
            if fifo {
                attrs.insert("MessageGroupId".into(), json!(r.group));
            }
            json!({
                "messageId": r.id, "receiptHandle": format!("rh-{}", r.id), "body": r.body,
                "attributes": attrs, "messageAttributes": r.attributes, "eventSource": "aws:sqs",
                "eventSourceARN": arn, "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
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
        concurrency: resq_consumer::concurrency::Concurrency::Fixed(4),
        backoff: resq_consumer::backoff::Backoff::default(),
        // the fixtures were sent in 2023: a window that holds them
        idempotency_window: std::time::Duration::from_secs(100 * 365 * 86_400),
        retry_budget_percent: Some(resq_consumer::config::DEFAULT_RETRY_BUDGET_PERCENT),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_record_gets_exactly_one_allowed_outcome(
        records in prop::collection::vec(record(), 0..10),
        fifo in any::<bool>(),
        failing_send in prop::bool::weighted(0.2),
        failing_store in prop::bool::weighted(0.2),
    ) {
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        queues.fail_calls(Call::Send, failing_send);
        store.set_failing(failing_store);
        let dlq = if fifo { "http://127.0.0.1/1/dlq.fifo" } else { "http://127.0.0.1/1/dlq" };
        let consumer = Consumer::new(Hostile(RecordOrder::new(&store)), &queues, &store, config(dlq));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let invocation = SqsInvocation::from_json(&event(&records, fifo).to_string())
            .map_err(|e| TestCaseError::fail(format!("an SQS event was refused: {e}")))?;
        let report = rt.block_on(consumer.handle(invocation, Instant::now() + Duration::from_secs(60)))
            .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;

        prop_assert_eq!(report.outcomes.len(), records.len());
        let reported: Vec<&str> = report
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        prop_assert!(reported.iter().all(|id| !id.is_empty()), "an empty itemIdentifier");
        let unique: BTreeSet<&str> = reported.iter().copied().collect();
        prop_assert_eq!(unique.len(), reported.len(), "an id reported twice");
        let failed: BTreeSet<&str> = records
            .iter()
            .zip(&report.outcomes)
            .filter(|(_, o)| o.is_failed())
            .map(|(r, _)| r.id.as_str())
            .collect();
        prop_assert_eq!(unique, failed, "the response names exactly the failed records");

        let sent = queues.sent(dlq);
        for copy in &sent {
            prop_assert!(copy.attributes.len() <= MAX_MESSAGE_ATTRIBUTES);
            prop_assert!(message_size(&copy.body, &copy.attributes) <= MAX_MESSAGE_BYTES,
                "a DLQ copy of {} bytes", message_size(&copy.body, &copy.attributes));
        }
        let keys = store.keys("");
        for (r, outcome) in records.iter().zip(&report.outcomes) {
            match outcome {
                Outcome::Processed => {
                    let order = parse_order(r.body.as_deref());
                    prop_assert!(order.is_ok(), "processed, but not a valid order: {:?}", r.body);
                    if let Ok(order) = order {
                        let key = order_key(&order);
                        prop_assert!(keys.contains(&key) || order.order_id.as_str().starts_with("panic-"),
                            "processed without its record {}", key);
                    }
                }
                Outcome::DeadLettered(reason) => {
                    let body = r.body.clone().unwrap_or_default();
                    // a copy too large for SQS went as a pointer to its stored body
                    let stored = |c: &resq::sqs::OutgoingMessage| {
                        resq::payload::Pointer::parse(&c.body).is_some_and(|p| {
                            let object = futures::executor::block_on(store.get(&p.key));
                            object.ok().flatten().as_deref() == Some(body.as_bytes())
                        })
                    };
                    prop_assert!(
                        sent.iter().any(|c| (c.body == body || stored(c))
                            && c.attributes.get(X_FAILURE_REASON).and_then(|v| v.string_value.as_deref()) == Some(reason.as_str())),
                        "dead-lettered without a DLQ copy"
                    );
                }
                Outcome::Archived(reason) => {
                    let prefix = format!("archive/{}/", reason.code());
                    prop_assert!(keys.iter().any(|k| k.starts_with(&prefix)), "archived without an archive entry");
                }
                Outcome::Failed(_) => {}
            }
        }
    }
}
