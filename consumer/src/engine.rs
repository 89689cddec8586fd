//! The batch engine: runs each record through the checks of SPEC §3 and carries out the
//! decisions through the ports (queues, archive store, order handler).

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use futures::{FutureExt, StreamExt, stream};
use resq::archive::{ArchiveFacts, Archiver, OriginalMessage};
use resq::attributes::{self, RedriveCount};
use resq::config::ConsumerConfig;
use resq::metrics::{self, Metrics};
use resq::reason::ArchiveReason;
use resq::store::ObjectStore;
use serde_json::Value;
use tracing::{Instrument, field};

use crate::decision::{self, EventError, Failure, Outcome, Record};
use crate::handler::{HandlerError, OrderHandler, RecordMeta};
use crate::order::{Order, Rejection, parse_order};
use crate::queues::QueuePort;

/// Who archive entries are signed by.
pub const ARCHIVED_BY: &str = "consumer";

/// The consumer: one per process, reused across invocations (it keeps no state between them).
pub struct Consumer<H, Q, S> {
    handler: H,
    queues: Q,
    archiver: Archiver<S>,
    config: ConsumerConfig,
    function_name: String,
}

/// What one invocation did: the response for Lambda and the counts behind it.
#[derive(Debug)]
pub struct BatchReport {
    /// `batchItemFailures` for Lambda.
    pub response: SqsBatchResponse,
    /// Outcome of each record, in event order.
    pub outcomes: Vec<Outcome>,
    /// The invocation's metrics.
    pub metrics: Metrics,
}

impl<H: OrderHandler, Q: QueuePort, S: ObjectStore> Consumer<H, Q, S> {
    /// A consumer over its ports.
    pub fn new(handler: H, queues: Q, store: S, config: ConsumerConfig) -> Self {
        Self {
            handler,
            queues,
            archiver: Archiver::new(store, ARCHIVED_BY),
            config,
            function_name: Metrics::function_name_from_env(ARCHIVED_BY),
        }
    }

    /// Handles one Lambda invocation: emits its metrics and returns the partial batch response.
    /// `Err` only when the event is not an SQS event.
    pub async fn handle_event(
        &self,
        event: Value,
        deadline: Instant,
    ) -> Result<SqsBatchResponse, EventError> {
        let report = self.process(event, deadline).await?;
        report.metrics.emit();
        Ok(report.response)
    }

    /// Handles one invocation whose event the runtime deserialized as SQS (what the Lambda
    /// does); emits its metrics and returns the partial batch response.
    pub async fn handle_sqs_event(
        &self,
        event: SqsEvent,
        deadline: Instant,
    ) -> Result<SqsBatchResponse, EventError> {
        let report = self.process_sqs_event(event, deadline).await?;
        report.metrics.emit();
        Ok(report.response)
    }

    /// Processes one event given as JSON and reports what happened, without emitting anything.
    pub async fn process(
        &self,
        event: Value,
        deadline: Instant,
    ) -> Result<BatchReport, EventError> {
        self.process_records(decision::parse_event(event)?, deadline)
            .await
    }

    /// Processes one deserialized SQS event and reports what happened, without emitting anything.
    pub async fn process_sqs_event(
        &self,
        event: SqsEvent,
        deadline: Instant,
    ) -> Result<BatchReport, EventError> {
        self.process_records(decision::records_from(event)?, deadline)
            .await
    }

    async fn process_records(
        &self,
        records: Vec<Record>,
        deadline: Instant,
    ) -> Result<BatchReport, EventError> {
        let lanes = decision::plan_lanes(&records, decision::is_fifo(&records));
        let (start_by, stop_by) = decision::cutoffs(deadline, self.config.common.deadline_margin);

        let lane_results: Vec<Vec<(usize, Outcome)>> = stream::iter(lanes.iter())
            .map(|lane| self.run_lane(&records, lane, start_by, stop_by))
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        let mut outcomes = vec![Outcome::Failed(Failure::NotStarted); records.len()];
        for (i, outcome) in lane_results.into_iter().flatten() {
            outcomes[i] = outcome;
        }

        let changes = decision::plan_visibility(
            &records,
            &lanes,
            &outcomes,
            &self.config.backoff,
            &mut rand::rng(),
        );
        if !changes.is_empty() {
            for (change, why) in self.queues.change_visibility(changes).await {
                // The record is still reported failed; it comes back after the queue's own
                // visibility timeout instead of the backoff.
                tracing::warn!(message_id = %change.message_id, error_code = "VISIBILITY_CHANGE_FAILED", error_details = %why, "could not back the message off");
            }
        }

        let metrics = self.count(&outcomes);
        let response = decision::batch_response(&records, &outcomes);
        tracing::info!(
            records = records.len(),
            processed = metrics.get(metrics::PROCESSED),
            retried = metrics.get(metrics::RETRIED),
            dead_lettered = metrics.get(metrics::DEAD_LETTERED),
            archived = metrics.get(metrics::ARCHIVED),
            "batch done"
        );
        Ok(BatchReport {
            response,
            outcomes,
            metrics,
        })
    }

    fn count(&self, outcomes: &[Outcome]) -> Metrics {
        let mut m = Metrics::new(
            self.function_name.clone(),
            &[
                metrics::PROCESSED,
                metrics::RETRIED,
                metrics::DEAD_LETTERED,
                metrics::ARCHIVED,
            ],
        );
        for o in outcomes {
            match o {
                Outcome::Processed => m.add(metrics::PROCESSED, 1),
                Outcome::Archived(reason) => m.add_archived(*reason),
                Outcome::DeadLettered(_) => m.add(metrics::DEAD_LETTERED, 1),
                Outcome::Failed(_) => m.add(metrics::RETRIED, 1),
            }
        }
        m
    }

    async fn run_lane(
        &self,
        records: &[Record],
        lane: &[usize],
        start_by: Instant,
        stop_by: Instant,
    ) -> Vec<(usize, Outcome)> {
        let mut out = Vec::with_capacity(lane.len());
        let mut blocked = false;
        for &i in lane {
            let record = &records[i];
            let outcome = if blocked {
                Outcome::Failed(Failure::GroupBlocked)
            } else if Instant::now() >= start_by {
                Outcome::Failed(Failure::NotStarted)
            } else {
                self.run_record(record, stop_by).await
            };
            if let Outcome::Failed(f) = &outcome {
                blocked = true;
                if !matches!(f, Failure::Transient { .. }) {
                    tracing::warn!(message_id = %record.message_id, error_code = f.code(), "record reported failed without running");
                }
            }
            out.push((i, outcome));
        }
        out
    }

    /// One record, isolated: a panic or overrunning the deadline is that record's failure.
    async fn run_record(&self, record: &Record, stop_by: Instant) -> Outcome {
        // The checks are pure: run them first so the record's span is created once, with the
        // orderId already known (recording it later costs a second formatting of the fields).
        let check = self.check(record);
        let order_id = match &check {
            Check::Order(order) => Some(order.order_id.as_str()),
            Check::Rejected(rejection) => rejection.order_id.as_deref(),
            Check::OverCap(_) => None,
        };
        let span = tracing::info_span!(
            "record",
            messageId = %record.message_id,
            orderId = order_id,
            error_code = field::Empty,
            error_details = field::Empty,
        );
        let work =
            AssertUnwindSafe(self.carry_out(record, check).instrument(span.clone())).catch_unwind();
        let outcome = match tokio::time::timeout_at(stop_by.into(), work).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(panic)) => transient("HANDLER_PANIC", panic_message(&panic)),
            Err(_) => transient(
                "RECORD_TIMEOUT",
                "still running at the deadline margin; abandoned so the batch can report",
            ),
        };
        let _enter = span.enter();
        match &outcome {
            // One line per success would dominate the log volume (and its cost) of a healthy
            // queue; AWS_LAMBDA_LOG_LEVEL=DEBUG shows them.
            Outcome::Processed => tracing::debug!("processed"),
            Outcome::Archived(reason) => tracing::warn!(reason = reason.code(), "archived"),
            Outcome::DeadLettered(reason) => {
                tracing::warn!(reason = %reason, "sent to the DLQ as a permanent failure")
            }
            Outcome::Failed(Failure::Transient { code, details }) => {
                span.record("error_code", code.as_str());
                span.record("error_details", details.as_str());
                tracing::warn!("failed; will be retried")
            }
            Outcome::Failed(_) => {}
        }
        outcome
    }

    /// SPEC §3 steps 1 and 2: the redrive cap, then parsing and validation.
    fn check(&self, record: &Record) -> Check {
        if let Some(reason) = attributes::cap_check(
            record.redrive_count,
            self.config.common.max_redrive_attempts,
        ) {
            return Check::OverCap(reason);
        }
        match parse_order(record.body.as_deref()) {
            Ok(order) => Check::Order(order),
            Err(rejection) => Check::Rejected(rejection),
        }
    }

    async fn carry_out(&self, record: &Record, check: Check) -> Outcome {
        if !record.dropped_attributes.is_empty() {
            tracing::warn!(dropped = ?record.dropped_attributes, "list-valued message attributes are not supported by SQS and are not copied");
        }
        let order = match check {
            Check::OverCap(reason) => return self.archive(record, reason, None).await,
            Check::Rejected(rejection) => {
                return self
                    .dead_letter(record, rejection.code, &rejection.details)
                    .await;
            }
            Check::Order(order) => order,
        };
        // 3. The order handler.
        let meta = RecordMeta {
            message_id: &record.message_id,
            receive_count: record.receive_count,
            redrive_count: match record.redrive_count {
                RedriveCount::Count(n) => n,
                RedriveCount::Invalid => 0,
            },
        };
        match AssertUnwindSafe(self.handler.handle(&order, &meta))
            .catch_unwind()
            .await
        {
            Ok(Ok(())) => Outcome::Processed,
            Ok(Err(HandlerError::Transient { code, details })) => transient(&code, details),
            Ok(Err(HandlerError::Permanent { code, details })) => {
                self.dead_letter(record, &code, &details).await
            }
            Err(panic) => transient("HANDLER_PANIC", panic_message(&panic)),
        }
    }

    async fn dead_letter(&self, record: &Record, reason: &str, details: &str) -> Outcome {
        let span = tracing::Span::current();
        span.record("error_code", reason);
        span.record("error_details", details);
        let dlq_is_fifo = self.config.common.dlq_url.ends_with(".fifo");
        let copy = match decision::dead_letter_copy(record, reason, dlq_is_fifo) {
            Ok(copy) => copy,
            Err(refused) => {
                let last_error = format!("{reason}: {details}; {refused}");
                return self
                    .archive(record, refused.reason(), Some(last_error))
                    .await;
            }
        };
        match self.queues.send_to_dlq(copy).await {
            Ok(()) => Outcome::DeadLettered(reason.to_owned()),
            Err(e) => transient(
                "DLQ_SEND_FAILED",
                format!("permanent failure {reason} could not be sent to the DLQ: {e}"),
            ),
        }
    }

    async fn archive(
        &self,
        record: &Record,
        reason: ArchiveReason,
        last_error: Option<String>,
    ) -> Outcome {
        let message = OriginalMessage {
            message_id: record.message_id.clone(),
            body: record.body.clone().unwrap_or_default(),
            message_attributes: record.message_attributes.clone(),
            attributes: record.attributes.clone(),
        };
        let facts = ArchiveFacts {
            source_queue: self.config.common.main_queue_url.clone(),
            redrive_count: match record.redrive_count {
                RedriveCount::Count(n) => Some(n),
                RedriveCount::Invalid => None,
            },
            receive_count: Some(record.receive_count),
            first_sent_at: attributes::first_sent_at(
                &record.message_attributes,
                record.attributes.get("SentTimestamp").map(String::as_str),
            ),
            last_error,
        };
        match self
            .archiver
            .archive(reason, chrono::Utc::now(), message, facts)
            .await
        {
            Ok((key, _)) => {
                tracing::Span::current().record("error_code", reason.code());
                tracing::info!(key = %key, "archive written");
                Outcome::Archived(reason)
            }
            Err(e) => transient(
                "ARCHIVE_FAILED",
                format!("archive ({reason}) not written, message kept in the queue: {e}"),
            ),
        }
    }
}

/// What the pure checks found for a record.
enum Check {
    /// Over the redrive cap: archive it.
    OverCap(ArchiveReason),
    /// Not an order: dead-letter it.
    Rejected(Rejection),
    /// A valid order: run the handler.
    Order(Order),
}

fn transient(code: &str, details: impl Into<String>) -> Outcome {
    Outcome::Failed(Failure::Transient {
        code: code.to_owned(),
        details: details.into(),
    })
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the order handler panicked".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::RecordOrder;
    use crate::memory::MemoryQueues;
    use crate::order::Order;
    use resq::attributes::{X_FAILURE_CLASS, X_FAILURE_REASON};
    use resq::config::{CommonConfig, ConsumerConfig};
    use resq::store::MemoryStore;
    use serde_json::json;
    use std::time::Duration;

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
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
            record("capped", &order("o-4"), Some("3"), None),
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
            matches!(&report.outcomes[7], Outcome::Failed(Failure::Transient { code, details }) if code == "HANDLER_PANIC" && details.contains("boom"))
        );
        let reasons: Vec<_> = queues
            .sent()
            .iter()
            .map(|m| m.attributes[X_FAILURE_REASON].string_value.clone().unwrap())
            .collect();
        assert_eq!(
            reasons,
            vec!["MALFORMED_JSON", "VALIDATION_FAILED", "ORDER_REJECTED"]
        );
        assert!(queues.sent().iter().all(|m| m.attributes[X_FAILURE_CLASS].string_value.as_deref() == Some("permanent")));
        assert_eq!(queues.sent()[0].body, "{not json");
        assert_eq!(store.keys("archive/REDRIVE_CAP/").len(), 1);
        assert_eq!(store.keys("archive/INVALID_REDRIVE_COUNT/").len(), 1);
        let backed_off: Vec<_> = queues.changes().into_iter().map(|c| c.message_id).collect();
        assert_eq!(backed_off, vec!["transient", "panic"]);
        assert_eq!(report.metrics.get(metrics::PROCESSED), 1);
        assert_eq!(report.metrics.get(metrics::RETRIED), 2);
        assert_eq!(report.metrics.get(metrics::DEAD_LETTERED), 3);
        assert_eq!(report.metrics.get(metrics::ARCHIVED), 2);
    }

    #[tokio::test]
    async fn the_functions_typed_event_path_decides_as_the_json_path_does() {
        // GIVEN the same mixed batch as JSON and as the runtime deserializes it (main.rs)
        let event = json!({"Records": [
            record("ok", &order("o-1"), None, None),
            record("malformed", "{not json", None, None),
            record("capped", &order("o-4"), Some("3"), None),
            record("transient", &order("transient-6"), Some("1"), None),
        ]});
        let typed: SqsEvent = serde_json::from_value(event.clone()).unwrap();
        let run = |typed: Option<SqsEvent>| {
            let event = event.clone();
            async move {
                let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
                let consumer =
                    Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
                let report = match typed {
                    Some(e) => consumer.process_sqs_event(e, later()).await.unwrap(),
                    None => consumer.process(event, later()).await.unwrap(),
                };
                let failed: Vec<String> = failed_ids(&report.response)
                    .into_iter()
                    .map(|id| id.to_string())
                    .collect();
                (
                    report.outcomes,
                    failed,
                    queues.sent().len(),
                    store.keys("archive/").len(),
                )
            }
        };
        // WHEN both are processed THEN outcomes, response and side effects are the same
        let (json_path, typed_path) = (run(None).await, run(Some(typed)).await);
        assert_eq!(typed_path, json_path);
        assert_eq!(typed_path.1, vec!["transient"]);
        assert_eq!((typed_path.2, typed_path.3), (1, 1));
    }

    #[test]
    fn a_payload_that_is_not_sqs_fails_the_runtimes_deserialization_by_name() {
        // The function's runtime deserializes straight into SqsEvent; its error names the field
        let err = serde_json::from_value::<SqsEvent>(json!({"source": "aws.events"})).unwrap_err();
        assert!(err.to_string().contains("Records"), "{err}");
        let err =
            serde_json::from_value::<SqsEvent>(json!({"Records": [{"messageId": 7}]})).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
    }

    #[tokio::test]
    async fn the_reference_handler_records_each_order_once() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        store.set_failing(true);
        queues.set_failing_send(true);
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let event = json!({"Records": [record("capped", &order("o-1"), Some("7"), None), record("bad", "nope", None, None)]});
        let report = consumer.process(event, later()).await.unwrap();
        assert_eq!(failed_ids(&report.response), vec!["capped", "bad"]);
        assert!(
            matches!(&report.outcomes[0], Outcome::Failed(Failure::Transient { code, .. }) if code == "ARCHIVE_FAILED")
        );
        assert!(
            matches!(&report.outcomes[1], Outcome::Failed(Failure::Transient { code, .. }) if code == "DLQ_SEND_FAILED")
        );
    }

    #[tokio::test]
    async fn visibility_failures_do_not_change_the_response() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        queues.set_failing_visibility(true);
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let event = json!({"Records": [record("t", &order("transient-1"), None, None), record("ok", &order("o-2"), None, None)]});
        let report = consumer.process(event, later()).await.unwrap();
        assert_eq!(failed_ids(&report.response), vec!["t"]);
    }

    #[tokio::test]
    async fn too_many_attributes_for_a_dlq_copy_means_archive() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
        assert!(queues.sent().is_empty());
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
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
        let copy = &queues.sent()[0];
        assert_eq!(copy.group_id.as_deref(), Some("C"));
        assert_eq!(copy.deduplication_id.as_deref(), Some("permanent-c1"));
    }

    #[tokio::test]
    async fn no_state_survives_between_invocations() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
    }

    #[tokio::test]
    async fn deadline_already_inside_the_margin_starts_nothing() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let event = json!({"Records": [record("a", &order("o-1"), None, None), record("b", "{bad", None, None)]});
        let report = consumer
            .process(event, Instant::now() + Duration::from_millis(50))
            .await
            .unwrap();
        assert_eq!(failed_ids(&report.response), vec!["a", "b"]);
        assert!(queues.sent().is_empty());
    }

    #[tokio::test]
    async fn a_hanging_handler_is_abandoned_at_the_margin() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let deadline = Instant::now() + Duration::from_millis(600);
        let event = json!({"Records": [record("hang", &order("hang-1"), None, None), record("ok", &order("o-2"), None, None)]});
        let report = consumer.process(event, deadline).await.unwrap();
        assert!(
            Instant::now() < deadline,
            "the batch must answer before the deadline"
        );
        assert!(
            matches!(&report.outcomes[0], Outcome::Failed(Failure::Transient { code, .. }) if code == "RECORD_TIMEOUT")
        );
        assert_eq!(report.outcomes[1], Outcome::Processed);
    }

    /// A writer that keeps what the JSON log layer prints.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn log_lines_carry_the_correlation_fields() {
        // GIVEN the JSON log format the functions use in Lambda
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(move || sink.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let event = json!({"Records": [record("m-7", &order("transient-7"), None, None)]});
        // WHEN a record fails
        consumer.process(event, later()).await.unwrap();
        // THEN its log line names the message, the order and the error
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let line: Value = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["message"] == "failed; will be retried")
            .unwrap_or_else(|| panic!("no failure line in {text}"));
        assert_eq!(line["span"]["messageId"], "m-7");
        assert_eq!(line["span"]["orderId"], "transient-7");
        assert_eq!(line["span"]["error_code"], "DOWNSTREAM_UNAVAILABLE");
        assert_eq!(line["span"]["error_details"], "503");
    }

    #[tokio::test]
    async fn an_event_that_is_not_sqs_is_an_error() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let err = consumer
            .process(json!({"source": "aws.events"}), later())
            .await
            .unwrap_err();
        assert!(err.to_string().starts_with("not an SQS event"), "{err}");
    }
}
