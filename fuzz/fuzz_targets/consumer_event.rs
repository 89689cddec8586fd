//! The consumer's entry points on raw bytes: the invocation payload as the runtime hands it
//! over (deserialized as the function does, then processed over in-memory ports with the
//! reference handler), and one record's body through the order parser.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use resq::attributes::{MAX_MESSAGE_ATTRIBUTES, MAX_MESSAGE_BYTES, message_size};
use resq::config::CommonConfig;
use resq_consumer::config::ConsumerConfig;
use resq_testing::{MemorySqs, MemoryStore};
use resq_consumer::Consumer;
use resq_consumer::event::{EventError, SqsInvocation};
use resq_consumer::order::RecordOrder;
use resq_consumer::order::parse_order;

fn config() -> ConsumerConfig {
    ConsumerConfig {
        common: CommonConfig {
            main_queue_url: "http://127.0.0.1/123456789012/orders".into(),
            dlq_url: "http://127.0.0.1/123456789012/orders-dlq".into(),
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

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = std::str::from_utf8(data)
        && let Ok(order) = parse_order(Some(body))
    {
        assert!(!order.order_id.as_str().is_empty());
        assert!(!order.items.is_empty());
    }
    // the one way a payload enters the engine (as the function's runtime reads it)
    let Some((text, invocation)) = std::str::from_utf8(data)
        .ok()
        .and_then(|text| Some((text, SqsInvocation::from_json(text).ok()?)))
    else {
        // not an SQS event, or a record not from SQS or without an id: the documented
        // whole-event error; the function fails the invocation, acknowledging nothing
        return;
    };
    // each record's messageId, read apart from the consumer and as leniently as it reads an
    // unreadable record
    #[derive(serde::Deserialize)]
    struct Records {
        #[serde(rename = "Records")]
        records: Vec<Box<serde_json::value::RawValue>>,
    }
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "messageId", default)]
        message_id: Option<String>,
    }
    let ids: Vec<Option<String>> = serde_json::from_str::<Records>(text)
        .map(|r| r.records)
        .unwrap_or_default()
        .iter()
        .map(|r| {
            serde_json::from_str::<Head>(r.get())
                .ok()
                .and_then(|h| h.message_id)
        })
        .collect();
    let (queues, store) = (MemorySqs::default(), MemoryStore::default());
    let consumer = Consumer::new(RecordOrder::new(&store), &queues, &store, config());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let report =
        match rt.block_on(consumer.handle(invocation, Instant::now() + Duration::from_secs(60))) {
            Ok(report) => report,
            // the one documented error: an event from the DLQ the consumer dead-letters into
            Err(EventError::FromDeadLetterQueue { .. }) => return,
            Err(e) => panic!("an error the consumer never returns for a readable event: {e}"),
        };
    assert_eq!(report.outcomes.len(), ids.len());
    for f in &report.response.batch_item_failures {
        assert!(!f.item_identifier.is_empty(), "an empty itemIdentifier");
        assert!(
            ids.iter()
                .any(|id| id.as_deref() == Some(f.item_identifier.as_str())),
            "an unknown itemIdentifier"
        );
    }
    for copy in queues.sent(&config().common.dlq_url) {
        assert!(copy.attributes.len() <= MAX_MESSAGE_ATTRIBUTES);
        assert!(message_size(&copy.body, &copy.attributes) <= MAX_MESSAGE_BYTES);
    }
});
