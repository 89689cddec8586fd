//! The batch engine (docs/design.md, "Consumer phases"): read → decide → settle → answer.
//! This file runs the handler, each record isolated (a panic or overrunning the margin is that
//! record's failure), up to `CONSUMER_CONCURRENCY` at once, FIFO groups in order; what becomes
//! of a record is decided in [`crate::decide`], carried out in [`crate::settle`] (through
//! resq's executor), and answered in [`crate::account`].
//!
//! With deadline `D` and margin `m` ([`Phases`]): records start until `D - m`, are abandoned at
//! `D - m/2`, and the settling calls (DLQ copies, archive entries, then the backoff of what
//! failed) stop at `D - m/8`, done or not: what was not confirmed leaves its record failed,
//! and SQS delivers it again.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures::{FutureExt, StreamExt, stream};
use resq::config::ConsumerConfig;
use resq::metrics::{self, Metrics};
use resq::settle::{Action, Confirmation, QueueUrl, Settler};
use resq::sqs::{CALLS_IN_FLIGHT, Queues};
use resq::store::ObjectStore;
use tracing::{Instrument, Span, field};

use crate::account::{self, BatchReport};
use crate::decide::{self, Fate, HandlerOutcome, Phases};
use crate::event::{self, Record, SqsInvocation};
use crate::handler::{MessageHandler, RecordMeta};

/// Who archive entries are signed by.
pub const ARCHIVED_BY: &str = "consumer";

/// What the consumer's settling needs on SQS: copies sent to the DLQ (`SendMessageBatch`
/// authorizes as `SendMessage`), backoff on the main queue (`ChangeMessageVisibilityBatch` as
/// `ChangeMessageVisibility`).
pub const PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("sqs:SendMessage", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:ChangeMessageVisibility", "OrdersQueue"),
];

/// The consumer: one per process, reused across invocations (it keeps no state between them).
pub struct Consumer<H, Q, S> {
    handler: H,
    pub(crate) settler: Settler<Q, S>,
    pub(crate) config: ConsumerConfig,
    pub(crate) main_queue: QueueUrl,
    function_name: String,
}

/// A record once it ran: its fate, the action still to carry it out, what became of an action
/// already settled in its FIFO lane, and its span while something is left to log.
pub(crate) struct Settling {
    pub(crate) fate: Fate,
    pub(crate) action: Option<Action>,
    pub(crate) settled: Option<Confirmation>,
    pub(crate) span: Span,
}

impl<H: MessageHandler, Q: Queues, S: ObjectStore> Consumer<H, Q, S> {
    /// A consumer over its ports: the handler, SQS and the archive bucket.
    pub fn new(handler: H, queues: Q, store: S, config: ConsumerConfig) -> Self {
        let in_flight = config.concurrency.max(CALLS_IN_FLIGHT);
        Self {
            handler,
            settler: Settler::new(queues, store, ARCHIVED_BY).with_calls_in_flight(in_flight),
            main_queue: QueueUrl::from(config.common.main_queue_url.as_str()),
            config,
            function_name: Metrics::function_name_from_env(ARCHIVED_BY),
        }
    }

    /// Handles one invocation: runs its records, settles what was decided, and answers with
    /// the partial batch response and the metrics (which the caller emits).
    pub async fn handle(&self, invocation: SqsInvocation, deadline: Instant) -> BatchReport {
        let records = invocation.0;
        // Lambda's poller received the batch at most a batching window before the invocation;
        // SQS's 12 h visibility limit counts from that receive.
        let received_at = Instant::now()
            .checked_sub(decide::LONGEST_BATCHING_WINDOW)
            .unwrap_or_else(Instant::now);
        let phases = Phases::new(deadline, self.config.common.deadline_margin);
        let fifo = event::is_fifo(&records);
        let lanes = decide::plan_lanes(&records, fifo);
        let mut ran = self.run(&records, &lanes, &phases, fifo).await;
        let outcomes = self.settle(&records, &mut ran, phases.settle_by).await;
        self.back_off(&records, &lanes, &outcomes, received_at, phases.settle_by)
            .await;
        let report = account::answer(&records, outcomes, &self.function_name);
        let m = &report.metrics;
        tracing::info!(
            records = records.len(),
            processed = m.get(metrics::PROCESSED),
            retried = m.get(metrics::RETRIED),
            dead_lettered = m.get(metrics::DEAD_LETTERED),
            archived = m.get(metrics::ARCHIVED),
            replays_failed = m.get(metrics::REDRIVE_RETURNED),
            "batch done"
        );
        report
    }

    /// Runs every lane, up to `CONSUMER_CONCURRENCY` at once.
    async fn run(
        &self,
        records: &[Record],
        lanes: &[Vec<usize>],
        phases: &Phases,
        fifo: bool,
    ) -> Vec<Settling> {
        let lanes = stream::iter(lanes)
            .map(|lane| self.run_lane(records, lane, phases, fifo))
            .buffer_unordered(self.config.concurrency)
            .collect::<Vec<_>>()
            .await;
        let mut ran: Vec<(usize, Settling)> = lanes.into_iter().flatten().collect();
        ran.sort_by_key(|(i, _)| *i);
        ran.into_iter().map(|(_, s)| s).collect()
    }

    /// One lane, in order. In a FIFO lane a DLQ copy or archive entry is settled at once,
    /// within the record's time: the rest of its group may run only once it is confirmed (one
    /// that is not holds the group, as a failure does).
    async fn run_lane(
        &self,
        records: &[Record],
        lane: &[usize],
        phases: &Phases,
        fifo: bool,
    ) -> Vec<(usize, Settling)> {
        let mut out = Vec::with_capacity(lane.len());
        let mut blocked = false;
        for &i in lane {
            let record = &records[i];
            let mut s = if blocked {
                self.unrun(record, HandlerOutcome::GroupBlocked)
            } else if Instant::now() >= phases.start_by {
                self.unrun(record, HandlerOutcome::NotStarted)
            } else {
                self.run_record(record, phases.stop_by).await
            };
            if fifo && let Some(action) = s.action.take() {
                let report = self.settle_plan(vec![action], phases.stop_by).await;
                s.settled = report.into_iter().next();
                blocked |= account::outcome(&s.fate, s.settled.as_ref()).is_failed();
            }
            blocked |= matches!(s.fate, Fate::Retry(_));
            out.push((i, s));
        }
        out
    }

    /// A record held back without running.
    fn unrun(&self, record: &Record, ran: HandlerOutcome) -> Settling {
        let decision = decide::decide(record, &self.config, ran);
        if let Fate::Retry(f) = &decision.fate {
            tracing::warn!(message_id = %record.message_id, error_code = f.code(), "record reported failed without running");
        }
        Settling {
            fate: decision.fate,
            action: decision.action,
            settled: None,
            span: Span::none(),
        }
    }

    /// One record: parsed, then its effect run, each under unwinding, the effect until
    /// `stop_by`; then its fate decided.
    async fn run_record(&self, record: &Record, stop_by: Instant) -> Settling {
        let parsed = decide::runs(record, &self.config).then(|| self.parse(record));
        let business_id = match &parsed {
            Some(Ok(message)) => {
                std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.business_id(message)))
                    .ok()
            }
            Some(Err(HandlerOutcome::Rejected(rejection))) => rejection.business_id.as_deref(),
            _ => None,
        };
        // At ERROR level so that it is on whatever AWS_LAMBDA_LOG_LEVEL allows: at WARN an INFO
        // span would be off, and the warnings would lose their messageId and orderId.
        let span = tracing::error_span!(
            "record",
            messageId = %record.message_id,
            orderId = business_id,
            error_code = field::Empty,
            error_details = field::Empty,
        );
        if !record.dropped_attributes.is_empty() {
            span.in_scope(|| tracing::warn!(dropped = %record.dropped_attributes.join(", "), "list-valued message attributes are not supported by SQS and are not copied"));
        }
        let ran = match parsed {
            None => HandlerOutcome::NotRun,
            Some(Err(ran)) => ran,
            Some(Ok(message)) => self.effect(record, &message, &span, stop_by).await,
        };
        let decision = decide::decide(record, &self.config, ran);
        Settling {
            span: log_decision(span, &decision.fate),
            fate: decision.fate,
            action: decision.action,
            settled: None,
        }
    }

    /// The handler's parsing: the team's code, so a panic there is the record's failure.
    fn parse(&self, record: &Record) -> Result<H::Message, HandlerOutcome> {
        let parsed = std::panic::catch_unwind(AssertUnwindSafe(|| {
            self.handler.parse(record.body.as_deref())
        }));
        match parsed {
            Ok(Ok(message)) => Ok(message),
            Ok(Err(rejection)) => Err(HandlerOutcome::Rejected(rejection)),
            Err(panic) => Err(HandlerOutcome::Panicked(panic_message(&panic))),
        }
    }

    /// The handler's effect, unwound and abandoned at `stop_by`.
    async fn effect(
        &self,
        record: &Record,
        message: &H::Message,
        span: &Span,
        stop_by: Instant,
    ) -> HandlerOutcome {
        let meta = RecordMeta {
            message_id: &record.message_id,
            receive_count: record.receive_count,
            redrive_count: match record.redrive_count {
                resq::attributes::RedriveCount::Count(n) => n,
                resq::attributes::RedriveCount::Invalid => 0,
            },
        };
        let work = self.handler.handle(message, &meta).instrument(span.clone());
        match tokio::time::timeout_at(stop_by.into(), AssertUnwindSafe(work).catch_unwind()).await {
            Ok(Ok(result)) => HandlerOutcome::Handled(result),
            Ok(Err(panic)) => HandlerOutcome::Panicked(panic_message(&panic)),
            Err(_) => HandlerOutcome::TimedOut,
        }
    }
}

/// Logs a decided fate in the record's span; returns the span while something is left to log
/// (a DLQ copy or archive entry to settle), so a batch holds spans only for those.
fn log_decision(span: Span, fate: &Fate) -> Span {
    match fate {
        Fate::Ack => {
            // One line per success would dominate the log volume (and its cost) of a healthy
            // queue; AWS_LAMBDA_LOG_LEVEL=DEBUG shows them.
            span.in_scope(|| tracing::debug!("processed"));
            Span::none()
        }
        Fate::Retry(f) => {
            span.record("error_code", f.code());
            span.record("error_details", f.details());
            span.in_scope(|| tracing::warn!("failed; will be retried"));
            Span::none()
        }
        Fate::DeadLetter { reason, details } => {
            span.record("error_code", reason.as_str());
            span.record("error_details", details.as_str());
            span
        }
        Fate::Archive(_) => span,
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the handler panicked".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::Outcome;
    use crate::decide::Failure;
    use crate::event::EventError;
    use crate::handler::{HandlerError, OrderHandler, RecordOrder, Rejection};
    use crate::order::Order;
    use aws_lambda_events::event::sqs::SqsBatchResponse;
    use resq::attributes::{X_FAILURE_CLASS, X_FAILURE_REASON};
    use resq::config::CommonConfig;
    use resq::reason::ArchiveReason;
    use resq::sqs::OutgoingMessage;
    use resq::testing::{Call, MemorySqs, MemoryStore};
    use serde_json::{Value, json};
    use std::time::Duration;

    const MAIN: &str = "http://127.0.0.1/123456789012/orders";

    /// The engine on an event given as JSON, read as the runtime reads it.
    trait Process {
        async fn process(&self, event: Value, deadline: Instant)
        -> Result<BatchReport, EventError>;
    }

    impl<H: MessageHandler, Q: Queues, S: ObjectStore> Process for Consumer<H, Q, S> {
        async fn process(
            &self,
            event: Value,
            deadline: Instant,
        ) -> Result<BatchReport, EventError> {
            let invocation = SqsInvocation::from_json(&event.to_string())?;
            Ok(self.handle(invocation, deadline).await)
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
            concurrency: 4,
            backoff: resq::backoff::Backoff::default(),
        }
    }

    fn order(id: &str) -> String {
        json!({"orderId": id, "userId": "u1", "items": [{"productId": "p1", "quantity": 1}]})
            .to_string()
    }

    fn record(id: &str, body: &str, redrive: Option<&str>, group: Option<&str>) -> Value {
        let mut attrs = json!({"ApproximateReceiveCount": "2", "SentTimestamp": "1700000000000"});
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
        let consumer = Consumer::new(
            Scripted,
            &queues,
            &store,
            config("http://127.0.0.1/123456789012/dlq"),
        );
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
        assert!(dlq_copies(&queues).iter().all(|m| m.attributes[X_FAILURE_CLASS].string_value.as_deref() == Some("permanent")));
        assert_eq!(dlq_copies(&queues)[0].body, "{not json");
        assert_eq!(store.keys("archive/REDRIVE_CAP/").len(), 1);
        assert_eq!(store.keys("archive/INVALID_REDRIVE_COUNT/").len(), 1);
        assert_eq!(backed_off(&queues), vec!["transient", "panic"]);
        assert_eq!(report.metrics.get(metrics::PROCESSED), 1);
        assert_eq!(report.metrics.get(metrics::RETRIED), 2);
        assert_eq!(report.metrics.get(metrics::DEAD_LETTERED), 3);
        assert_eq!(report.metrics.get(metrics::ARCHIVED), 2);
    }

    #[tokio::test]
    async fn the_reference_handler_records_each_order_once() {
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        let consumer = Consumer::new(
            RecordOrder::new(&store),
            &queues,
            &store,
            config("http://127.0.0.1/1/dlq"),
        );
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
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
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
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let event = json!({"Records": [record("t", &order("transient-1"), None, None), record("ok", &order("o-2"), None, None)]});
        let report = consumer.process(event, later()).await.unwrap();
        assert_eq!(failed_ids(&report.response), vec!["t"]);
    }

    #[tokio::test]
    async fn too_many_attributes_for_a_dlq_copy_means_archive() {
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let mut r = record("full", "{oops", None, None);
        for i in 0..9 {
            r["messageAttributes"][format!("a{i}")] =
                json!({"stringValue": "v", "dataType": "String"});
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
    async fn fifo_failure_blocks_only_the_rest_of_its_group() {
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        let consumer = Consumer::new(
            Scripted,
            &queues,
            &store,
            config("http://127.0.0.1/1/dlq.fifo"),
        );
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
        let consumer = Consumer::new(
            Scripted,
            &queues,
            &store,
            config("http://127.0.0.1/1/dlq.fifo"),
        );
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
        let consumer = Consumer::new(
            Scripted,
            &queues,
            &store,
            config("http://127.0.0.1/1/dlq.fifo"),
        );
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

    #[tokio::test]
    async fn deadline_margin_reports_records_not_started() {
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        let mut cfg = config("http://127.0.0.1/1/dlq");
        cfg.concurrency = 1;
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
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
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
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
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
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
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
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
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
        assert_eq!(report.metrics.get(metrics::REDRIVE_RETURNED), 2);
        let line = &report.metrics.to_emf(0)[0];
        assert_eq!(
            line["RedriveReturned"], 2,
            "emitted even by the consumer: {line}"
        );
    }

    #[tokio::test]
    async fn an_empty_failure_reason_from_a_handler_still_reaches_the_dlq() {
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
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
    async fn an_unreadable_record_fails_alone() {
        // GIVEN the runtime's bytes: one record whose binary attribute is not base64
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let mut bad = record("bad", &order("o-1"), None, None);
        bad["messageAttributes"]["blob"] =
            json!({"dataType": "Binary", "binaryValue": "not base64!"});
        let payload =
            json!({"Records": [record("ok", &order("o-2"), None, None), bad]}).to_string();
        let invocation: SqsInvocation = serde_json::from_str(&payload).unwrap();
        // WHEN it is processed THEN only that record is reported, and backed off
        let report = consumer.handle(invocation, later()).await;
        assert_eq!(failed_ids(&report.response), vec!["bad"]);
        assert_eq!(report.outcomes[0], Outcome::Processed);
        assert!(
            matches!(&report.outcomes[1], Outcome::Failed(Failure::Unreadable(why)) if why.contains("base64") || why.contains("Invalid")),
            "{:?}",
            report.outcomes[1]
        );
        assert_eq!(backed_off(&queues), vec!["bad"]);
    }

    #[tokio::test]
    async fn a_slow_sqs_at_the_deadline_cannot_make_the_batch_late() {
        // GIVEN 30 failing records, 5 permanent failures and an SQS that takes 3 s per call,
        // with a 2 s budget (margin 200 ms)
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        queues.set_delay(Duration::from_secs(3));
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
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
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
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
        let (logs, _guard) = resq::testing::CapturedLogs::start();
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let event = json!({"Records": [record("m-7", &order("transient-7"), None, None)]});
        // WHEN a record fails
        consumer.process(event, later()).await.unwrap();
        // THEN its log line names the message, the order and the error
        let line = logs.line("failed; will be retried");
        assert_eq!(line["messageId"], "m-7");
        assert_eq!(line["orderId"], "transient-7");
        assert_eq!(line["error_code"], "DOWNSTREAM_UNAVAILABLE");
        assert_eq!(line["error_details"], "503");
    }

    #[tokio::test]
    async fn a_partly_failed_dlq_batch_keeps_exactly_the_failed_records() {
        // GIVEN SQS takes every DLQ copy but two
        let (queues, store) = (MemorySqs::default(), MemoryStore::default());
        queues.fail_sends(|m| m.body == "{broken-1" || m.body == "{broken-11");
        let consumer = Consumer::new(
            RecordOrder::new(&store),
            &queues,
            &store,
            config("http://127.0.0.1/1/dlq"),
        );
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
}
