//! The batch engine (docs/design.md, "Consumer"), in phases each bounded by the deadline:
//!
//! 1. **read**: the records, each on its own;
//! 2. **run**: each record to a [`Disposition`], a value: the pure checks (redrive cap,
//!    parse and validate), then the order handler; up to `CONSUMER_CONCURRENCY` at once, FIFO
//!    groups in order; records stop starting at `deadline - margin` and are abandoned at
//!    `deadline - margin/2` ([`Phases`]);
//! 3. **settle**: one step that carries the dispositions out through the ports as concurrent
//!    batch calls (DLQ copies with `SendMessageBatch`, archive writes, then the visibility
//!    changes of what failed) and stops at `deadline - margin/8`, done or not. A write that
//!    did not complete in time leaves its record reported failed: SQS delivers it again;
//! 4. **answer**: the partial batch response and the metrics.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use aws_lambda_events::event::sqs::SqsBatchResponse;
use futures::{FutureExt, StreamExt, stream};
use resq::archive::{ArchiveFacts, Archiver, OriginalMessage};
use resq::attributes::{self, RedriveCount};
use resq::config::ConsumerConfig;
use resq::metrics::{self, Metrics};
use resq::reason::{ArchiveReason, ErrorCode};
use resq::sqs::OutgoingMessage;
use resq::store::ObjectStore;
use serde_json::Value;
use tracing::{Instrument, Span, field};

use crate::decision::{
    self, Disposition, EventError, Failure, Outcome, Phases, Record, SqsInvocation,
};
use crate::handler::{HandlerError, MessageHandler, RecordMeta, Rejection};
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

impl<H: MessageHandler, Q: QueuePort, S: ObjectStore> Consumer<H, Q, S> {
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

    /// Handles one Lambda invocation as the runtime delivers it (what `consumer::lambda::serve`
    /// does): emits its metrics and returns the partial batch response. (A payload that is not
    /// an SQS event never becomes an [`SqsInvocation`].)
    pub async fn handle_invocation(
        &self,
        invocation: SqsInvocation,
        deadline: Instant,
    ) -> SqsBatchResponse {
        let report = self.process_invocation(invocation, deadline).await;
        report.metrics.emit();
        report.response
    }

    /// Handles one invocation given as JSON: emits its metrics and returns the response.
    pub async fn handle_event(
        &self,
        event: Value,
        deadline: Instant,
    ) -> Result<SqsBatchResponse, EventError> {
        let report = self.process(event, deadline).await?;
        report.metrics.emit();
        Ok(report.response)
    }

    /// Processes one event given as JSON and reports what happened, without emitting anything.
    pub async fn process(
        &self,
        event: Value,
        deadline: Instant,
    ) -> Result<BatchReport, EventError> {
        Ok(self
            .process_records(decision::parse_event(event)?, deadline)
            .await)
    }

    /// Processes one invocation as the runtime delivers it, without emitting anything.
    pub async fn process_invocation(
        &self,
        invocation: SqsInvocation,
        deadline: Instant,
    ) -> BatchReport {
        self.process_records(invocation.0, deadline).await
    }

    async fn process_records(&self, records: Vec<Record>, deadline: Instant) -> BatchReport {
        // Lambda's poller received the batch at most a batching window before the invocation;
        // SQS's 12 h visibility limit counts from that receive.
        let received_at = Instant::now()
            .checked_sub(decision::LONGEST_BATCHING_WINDOW)
            .unwrap_or_else(Instant::now);
        let phases = Phases::new(deadline, self.config.common.deadline_margin);
        let lanes = decision::plan_lanes(&records, decision::is_fifo(&records));

        let (dispositions, spans) = self.run(&records, &lanes, &phases).await;
        let outcomes = self
            .settle(&records, &lanes, dispositions, &spans, received_at, &phases)
            .await;

        let metrics = self.count(&records, &outcomes);
        let response = decision::batch_response(&records, &outcomes);
        tracing::info!(
            records = records.len(),
            processed = metrics.get(metrics::PROCESSED),
            retried = metrics.get(metrics::RETRIED),
            dead_lettered = metrics.get(metrics::DEAD_LETTERED),
            archived = metrics.get(metrics::ARCHIVED),
            replays_failed = metrics.get(metrics::REDRIVE_RETURNED),
            "batch done"
        );
        BatchReport {
            response,
            outcomes,
            metrics,
        }
    }

    fn count(&self, records: &[Record], outcomes: &[Outcome]) -> Metrics {
        let mut m = Metrics::new(
            self.function_name.clone(),
            &[
                metrics::PROCESSED,
                metrics::RETRIED,
                metrics::DEAD_LETTERED,
                metrics::ARCHIVED,
                metrics::REDRIVE_RETURNED,
            ],
        );
        for (r, o) in records.iter().zip(outcomes) {
            match o {
                Outcome::Processed => m.add(metrics::PROCESSED, 1),
                Outcome::Archived(reason) => m.add_archived(*reason),
                Outcome::DeadLettered(_) => m.add(metrics::DEAD_LETTERED, 1),
                Outcome::Failed(_) => m.add(metrics::RETRIED, 1),
            }
            if decision::replay_failed(r, o) {
                m.add(metrics::REDRIVE_RETURNED, 1);
            }
        }
        m
    }

    // ---------------------------------------------------------------- run

    /// Each record to a disposition; the span of each record still to be settled
    /// (`Span::none()` for the others).
    async fn run(
        &self,
        records: &[Record],
        lanes: &[Vec<usize>],
        phases: &Phases,
    ) -> (Vec<Disposition>, Vec<Span>) {
        let fifo = decision::is_fifo(records);
        let lane_results: Vec<Vec<(usize, Disposition, Span)>> = stream::iter(lanes.iter())
            .map(|lane| self.run_lane(records, lane, phases, fifo))
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        let mut dispositions = vec![Disposition::Retry(Failure::NotStarted); records.len()];
        let mut spans = vec![Span::none(); records.len()];
        for (i, d, span) in lane_results.into_iter().flatten() {
            dispositions[i] = d;
            spans[i] = span;
        }
        (dispositions, spans)
    }

    /// One lane, in order. In a FIFO batch a dead-letter or archive is carried out at once,
    /// within the record's time: the rest of its group may run only once it is confirmed (a
    /// failed one holds the group, as a failure does).
    async fn run_lane(
        &self,
        records: &[Record],
        lane: &[usize],
        phases: &Phases,
        fifo: bool,
    ) -> Vec<(usize, Disposition, Span)> {
        let mut out = Vec::with_capacity(lane.len());
        let mut blocked = false;
        for &i in lane {
            let record = &records[i];
            let (disposition, span) = if blocked {
                (Disposition::Retry(Failure::GroupBlocked), Span::none())
            } else if Instant::now() >= phases.start_by {
                (Disposition::Retry(Failure::NotStarted), Span::none())
            } else {
                let (d, span) = self.run_record(record, phases.stop_by).await;
                match d {
                    Disposition::DeadLetter { .. } | Disposition::Archive { .. } if fifo => {
                        let outcome = self.settle_now(record, d, &span, phases.stop_by).await;
                        (Disposition::Settled(outcome), span)
                    }
                    d => (d, span),
                }
            };
            if let Disposition::Retry(f) = &disposition
                && matches!(f, Failure::GroupBlocked | Failure::NotStarted)
            {
                tracing::warn!(message_id = %record.message_id, error_code = f.code(), "record reported failed without running");
            }
            blocked |= disposition.blocks_group();
            out.push((i, disposition, span));
        }
        out
    }

    /// One record, isolated: a panic or overrunning the margin is that record's failure.
    async fn run_record(&self, record: &Record, stop_by: Instant) -> (Disposition, Span) {
        // The checks are pure: run them first so the record's span is created once, with the
        // orderId already known (recording it later costs a second formatting of the fields).
        // The handler's parse and business id are the team's code: a panic there is that
        // record's transient failure, as a panic in its effect is, never the batch's.
        let check = std::panic::catch_unwind(AssertUnwindSafe(|| self.check(record)))
            .unwrap_or_else(|panic| Check::Panicked(panic_message(&panic)));
        let business_id = match &check {
            Check::Valid(message) => {
                std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.business_id(message)))
                    .ok()
            }
            Check::Rejected(rejection) => rejection.business_id.as_deref(),
            Check::OverCap(_) | Check::Unreadable(_) | Check::Panicked(_) => None,
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
        let dlq_is_fifo = resq::fifo::is_fifo(&self.config.common.dlq_url);
        let disposition = match check {
            Check::Unreadable(why) => Disposition::Retry(Failure::Unreadable(why)),
            Check::Panicked(why) => transient(ErrorCode::HandlerPanic.code(), why),
            Check::OverCap(reason) => Disposition::Archive {
                reason,
                last_error: None,
            },
            Check::Rejected(rejection) => {
                decision::dead_letter(record, &rejection.code, &rejection.details, dlq_is_fifo)
            }
            Check::Valid(message) => {
                let work =
                    AssertUnwindSafe(self.run_handler(record, &message).instrument(span.clone()))
                        .catch_unwind();
                match tokio::time::timeout_at(stop_by.into(), work).await {
                    Ok(Ok(Ok(()))) => Disposition::Ack,
                    Ok(Ok(Err(HandlerError::Transient { code, details }))) => {
                        transient(&code, details)
                    }
                    Ok(Ok(Err(HandlerError::Permanent { code, details }))) => {
                        decision::dead_letter(record, &code, &details, dlq_is_fifo)
                    }
                    Ok(Err(panic)) => {
                        transient(ErrorCode::HandlerPanic.code(), panic_message(&panic))
                    }
                    Err(_) => transient(
                        ErrorCode::RecordTimeout.code(),
                        "still running at the deadline margin; abandoned so the batch can report",
                    ),
                }
            }
        };
        if let Disposition::Retry(f) = &disposition {
            let details = match f {
                Failure::Transient { details, .. } => details.as_str(),
                Failure::Unreadable(why) => why.as_str(),
                _ => "",
            };
            span.record("error_code", f.code());
            span.record("error_details", details);
            span.in_scope(|| tracing::warn!("failed; will be retried"));
        }
        // Only a record still to be settled (a DLQ copy, an archive write) logs again, at
        // settle: the others' spans end here, so a batch holds spans only for those instead of
        // one per record until it is done.
        let span = match &disposition {
            Disposition::Ack => {
                // One line per success would dominate the log volume (and its cost) of a
                // healthy queue; AWS_LAMBDA_LOG_LEVEL=DEBUG shows them.
                span.in_scope(|| tracing::debug!("processed"));
                Span::none()
            }
            Disposition::Retry(_) => Span::none(),
            _ => span,
        };
        (disposition, span)
    }

    async fn run_handler(&self, record: &Record, message: &H::Message) -> Result<(), HandlerError> {
        let meta = RecordMeta {
            message_id: &record.message_id,
            receive_count: record.receive_count,
            redrive_count: match record.redrive_count {
                RedriveCount::Count(n) => n,
                RedriveCount::Invalid => 0,
            },
        };
        self.handler.handle(message, &meta).await
    }

    /// docs/design.md, "Consumer" steps 1 and 2: the redrive cap, then parsing and validation.
    fn check(&self, record: &Record) -> Check<H::Message> {
        if let Some(why) = &record.unreadable {
            return Check::Unreadable(why.clone());
        }
        if let Some(reason) = attributes::cap_on_delivery(
            record.redrive_count,
            self.config.common.max_redrive_attempts,
        ) {
            return Check::OverCap(reason);
        }
        match self.handler.parse(record.body.as_deref()) {
            Ok(message) => Check::Valid(message),
            Err(rejection) => Check::Rejected(rejection),
        }
    }

    // ---------------------------------------------------------------- settle

    /// Carries out one record's dead-letter or archive, by `until`.
    async fn settle_now(
        &self,
        record: &Record,
        disposition: Disposition,
        span: &Span,
        until: Instant,
    ) -> Outcome {
        match disposition {
            Disposition::DeadLetter {
                reason,
                details,
                copy,
            } => {
                span.record("error_code", reason.as_str());
                span.record("error_details", details.as_str());
                match tokio::time::timeout_at(until.into(), self.queues.send_to_dlq(&[&copy])).await
                {
                    Ok(Ok(results)) => sent_outcome(
                        &reason,
                        results
                            .into_iter()
                            .next()
                            .unwrap_or_else(|| Some("not reported by the DLQ send".to_owned())),
                    ),
                    Ok(Err(e)) => sent_outcome(&reason, Some(e.to_string())),
                    Err(_) => unsettled(),
                }
            }
            Disposition::Archive { reason, last_error } => {
                match tokio::time::timeout_at(
                    until.into(),
                    self.archive(record, reason, last_error),
                )
                .await
                {
                    Ok(result) => written_outcome(result),
                    Err(_) => unsettled(),
                }
            }
            Disposition::Ack => Outcome::Processed,
            Disposition::Retry(f) => Outcome::Failed(f),
            Disposition::Settled(o) => o,
        }
    }

    /// Carries the dispositions out, bounded by `phases.settle_by`: DLQ copies and archive
    /// writes concurrently, then the visibility changes of every record reported failed.
    async fn settle(
        &self,
        records: &[Record],
        lanes: &[Vec<usize>],
        dispositions: Vec<Disposition>,
        spans: &[Span],
        received_at: Instant,
        phases: &Phases,
    ) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; records.len()];
        let mut copies: Vec<(usize, String, OutgoingMessage)> = Vec::new();
        let mut archives: Vec<(usize, ArchiveReason, Option<String>)> = Vec::new();
        for (i, d) in dispositions.into_iter().enumerate() {
            match d {
                Disposition::Ack => outcomes[i] = Some(Outcome::Processed),
                Disposition::Retry(f) => outcomes[i] = Some(Outcome::Failed(f)),
                Disposition::DeadLetter {
                    reason,
                    details,
                    copy,
                } => {
                    spans[i].record("error_code", reason.as_str());
                    spans[i].record("error_details", details.as_str());
                    copies.push((i, reason, copy));
                }
                Disposition::Archive { reason, last_error } => {
                    archives.push((i, reason, last_error))
                }
                Disposition::Settled(o) => outcomes[i] = Some(o),
            }
        }

        // DLQ copies (SendMessageBatch, ≤ 10 entries and 1 MiB a call) and archive writes.
        let sizes: Vec<usize> = copies.iter().map(|(_, _, c)| c.size()).collect();
        let sends = resq::sqs::pack(&sizes).into_iter().map(|range| {
            let batch: Vec<&OutgoingMessage> =
                copies[range.clone()].iter().map(|(_, _, c)| c).collect();
            async move { (range, self.queues.send_to_dlq(&batch).await) }
        });
        let writes = archives.iter().map(|(i, reason, last)| async move {
            (*i, self.archive(&records[*i], *reason, last.clone()).await)
        });
        let in_flight = self.config.concurrency.max(resq::sqs::CALLS_IN_FLIGHT);
        let (sent, written) = futures::join!(
            resq::lambda::run_until(sends, resq::sqs::CALLS_IN_FLIGHT, phases.settle_by),
            resq::lambda::run_until(writes, in_flight, phases.settle_by),
        );
        for (range, result) in sent {
            let results = match result {
                Ok(per_entry) => per_entry,
                Err(e) => vec![Some(e.to_string()); range.len()],
            };
            for ((i, reason, _), why) in copies[range].iter().zip(results) {
                outcomes[*i] = Some(sent_outcome(reason, why));
            }
        }
        for (i, result) in written {
            outcomes[i] = Some(written_outcome(result));
        }
        let outcomes: Vec<Outcome> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(unsettled))
            .collect();
        for ((o, span), r) in outcomes.iter().zip(spans).zip(records) {
            let _enter = span.enter();
            match o {
                // logged when the handler returned (`run_record`)
                Outcome::Processed => {}
                Outcome::Archived(reason) => {
                    span.record("error_code", reason.code());
                    tracing::warn!(reason = reason.code(), "archived")
                }
                Outcome::DeadLettered(reason) => {
                    tracing::warn!(reason = %reason, "sent to the DLQ as a permanent failure")
                }
                Outcome::Failed(Failure::Transient { code, details })
                    if matches!(
                        ErrorCode::from_code(code),
                        Some(
                            ErrorCode::DlqSendFailed
                                | ErrorCode::ArchiveFailed
                                | ErrorCode::SettleDeadline
                        )
                    ) =>
                {
                    span.record("error_code", code.as_str());
                    span.record("error_details", details.as_str());
                    tracing::warn!(message_id = %r.message_id, "not settled; will be retried")
                }
                Outcome::Failed(_) => {}
            }
        }

        // Back off what failed, within SQS's 12 h from the receive.
        let ceiling = resq::backoff::visibility_left(received_at.elapsed());
        let changes = decision::plan_visibility(
            records,
            lanes,
            &outcomes,
            &self.config.backoff,
            ceiling,
            &mut rand::rng(),
        );
        if !changes.is_empty() {
            let planned = changes.len();
            match tokio::time::timeout_at(
                phases.settle_by.into(),
                self.queues.change_visibility(changes),
            )
            .await
            {
                Ok(failed) => {
                    for (change, why) in failed {
                        // The record is still reported failed; it comes back after the queue's
                        // own visibility timeout instead of the backoff.
                        tracing::warn!(message_id = %change.message_id, error_code = ErrorCode::VisibilityChangeFailed.code(), error_details = %why, "could not back the message off");
                    }
                }
                Err(_) => tracing::warn!(
                    planned,
                    error_code = ErrorCode::VisibilityChangeDeadline.code(),
                    "backoff not confirmed before the deadline margin; those records come back after the queue's visibility timeout"
                ),
            }
        }
        outcomes
    }

    /// Writes one archive entry; `Ok(reason)` once it is in the bucket.
    async fn archive(
        &self,
        record: &Record,
        reason: ArchiveReason,
        last_error: Option<String>,
    ) -> Result<ArchiveReason, resq::store::StoreError> {
        let message = OriginalMessage {
            message_id: record.message_id.clone(),
            body: record.body.clone().unwrap_or_default(),
            message_attributes: record.message_attributes.clone(),
            attributes: record.attributes.to_map(),
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
                record.attributes.get("SentTimestamp").as_deref(),
            ),
            last_error,
        };
        let (key, _) = self
            .archiver
            .archive(reason, chrono::Utc::now(), message, facts)
            .await?;
        tracing::info!(message_id = %record.message_id, key = %key, "archive written");
        Ok(reason)
    }
}

/// What the pure checks found for a record.
enum Check<M> {
    /// It could not be read: report it failed.
    Unreadable(String),
    /// Over the redrive cap: archive it.
    OverCap(ArchiveReason),
    /// Not a valid message: dead-letter it.
    Rejected(Rejection),
    /// The handler's parsing panicked: retry it.
    Panicked(String),
    /// A valid message: run the handler.
    Valid(M),
}

fn transient_failure(code: &str, details: impl Into<String>) -> Failure {
    Failure::Transient {
        code: code.to_owned(),
        details: details.into(),
    }
}

fn transient(code: &str, details: impl Into<String>) -> Disposition {
    Disposition::Retry(transient_failure(code, details))
}

/// A DLQ copy's outcome: dead-lettered when SQS took it (`why` is `None`).
fn sent_outcome(reason: &str, why: Option<String>) -> Outcome {
    match why {
        None => Outcome::DeadLettered(reason.to_owned()),
        Some(why) => Outcome::Failed(transient_failure(
            ErrorCode::DlqSendFailed.code(),
            format!("permanent failure {reason} could not be sent to the DLQ: {why}"),
        )),
    }
}

/// An archive write's outcome.
fn written_outcome(result: Result<ArchiveReason, resq::store::StoreError>) -> Outcome {
    match result {
        Ok(reason) => Outcome::Archived(reason),
        Err(e) => Outcome::Failed(transient_failure(
            ErrorCode::ArchiveFailed.code(),
            format!("archive not written, message kept in the queue: {e}"),
        )),
    }
}

/// A DLQ copy or archive entry not confirmed in time: the record is retried.
fn unsettled() -> Outcome {
    Outcome::Failed(transient_failure(
        ErrorCode::SettleDeadline.code(),
        "its DLQ copy or archive entry was not confirmed before the deadline margin; SQS delivers it again",
    ))
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
    use crate::decision::SqsInvocation;
    use crate::handler::{OrderHandler, RecordOrder};
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

    #[test]
    fn a_payload_that_is_not_sqs_is_refused_with_resqs_own_error_naming_what_is_wrong() {
        // the function's payload type: resq's error, with the reason and what to do
        let err = SqsInvocation::from_json(r#"{"source": "aws.events"}"#).unwrap_err();
        assert!(matches!(err, EventError::NotSqs(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with("not an SQS event: "), "{text}");
        assert!(text.contains("Records"), "{text}");
        assert!(text.ends_with("the consumer must be invoked by an SQS event source mapping"));
        // a record that is not an object cannot be reported alone: the event is refused
        let err = SqsInvocation::from_json(r#"{"Records": 7}"#).unwrap_err();
        assert!(matches!(err, EventError::NotSqs(_)), "{err:?}");
        // a record that does not decode fails alone, as long as it has a messageId to report
        let records = SqsInvocation::from_json(
            r#"{"Records": [{"messageId": "m-1", "eventSource": "aws:sqs", "body": 7}]}"#,
        )
        .unwrap()
        .0;
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].message_id, "m-1");
        assert!(records[0].unreadable.is_some());
        // without one, the batch cannot be reported record by record: the invocation fails
        assert!(matches!(
            SqsInvocation::from_json(r#"{"Records": [{"eventSource": "aws:sqs", "body": 7}]}"#),
            Err(EventError::MissingMessageId { index: 0 })
        ));
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
    async fn fifo_a_dead_letter_not_confirmed_holds_the_rest_of_its_group() {
        // GIVEN a FIFO batch whose first record of group A is malformed, and a DLQ that
        // refuses the copy
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        queues.set_failing_send(true);
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
        assert!(queues.sent().is_empty());
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
        assert!(
            queues.changes().is_empty(),
            "records that never started need no visibility change: SQS returns them by itself"
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

    #[tokio::test]
    async fn the_last_replay_runs_and_a_count_past_the_cap_is_archived() {
        // GIVEN the cap is 3: a copy carrying 3 is the last real replay, 4 cannot come from
        // the redriver
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
            matches!(&report.outcomes[1], Outcome::Failed(Failure::Transient { code, details }) if code == "HANDLER_PANIC" && details.contains("parser bug")),
            "{:?}",
            report.outcomes
        );
        // a business id that cannot be read only leaves the log without it
        assert_eq!(report.outcomes[2], Outcome::Processed);
        assert!(queues.sent().is_empty());
    }

    #[tokio::test]
    async fn a_failing_replay_is_counted_once_the_moment_it_fails() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let event = json!({"Records": [record("n", &order("nocode-1"), None, None)]});
        let report = consumer.process(event, later()).await.unwrap();
        assert_eq!(
            report.outcomes,
            vec![Outcome::DeadLettered("UNSPECIFIED".into())]
        );
        assert_eq!(
            queues.sent()[0].attributes[X_FAILURE_REASON]
                .string_value
                .as_deref(),
            Some("UNSPECIFIED")
        );
    }

    #[tokio::test]
    async fn an_unreadable_record_fails_alone() {
        // GIVEN the runtime's bytes: one record whose binary attribute is not base64
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let mut bad = record("bad", &order("o-1"), None, None);
        bad["messageAttributes"]["blob"] =
            json!({"dataType": "Binary", "binaryValue": "not base64!"});
        let payload =
            json!({"Records": [record("ok", &order("o-2"), None, None), bad]}).to_string();
        let invocation: SqsInvocation = serde_json::from_str(&payload).unwrap();
        // WHEN it is processed THEN only that record is reported, and backed off
        let report = consumer.process_invocation(invocation, later()).await;
        assert_eq!(failed_ids(&report.response), vec!["bad"]);
        assert_eq!(report.outcomes[0], Outcome::Processed);
        assert!(
            matches!(&report.outcomes[1], Outcome::Failed(Failure::Unreadable(why)) if why.contains("base64") || why.contains("Invalid")),
            "{:?}",
            report.outcomes[1]
        );
        assert_eq!(queues.changes().len(), 1);
    }

    #[tokio::test]
    async fn a_slow_sqs_at_the_deadline_cannot_make_the_batch_late() {
        // GIVEN 30 failing records, 5 permanent failures and an SQS that takes 3 s per call,
        // with a 2 s budget (margin 200 ms)
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
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
        assert!(report.outcomes[30..].iter().all(|o| matches!(o, Outcome::Failed(Failure::Transient { code, .. }) if code == "SETTLE_DEADLINE")), "{:?}", &report.outcomes[30..]);
        assert!(queues.sent().is_empty());
        // one DLQ call, then (with no time left) no visibility calls waited for
        assert!(queues.calls() >= 1);
    }

    #[tokio::test]
    async fn dead_letters_go_out_in_batches_of_ten() {
        let (queues, store) = (MemoryQueues::default(), MemoryStore::default());
        let consumer = Consumer::new(Scripted, &queues, &store, config("http://127.0.0.1/1/dlq"));
        let records: Vec<Value> = (0..23)
            .map(|i| record(&format!("p{i}"), "{bad", None, None))
            .collect();
        let report = consumer
            .process(json!({"Records": records}), later())
            .await
            .unwrap();
        assert!(report.response.batch_item_failures.is_empty());
        assert_eq!(queues.sent().len(), 23);
        assert_eq!(queues.calls(), 3, "SendMessageBatch calls of 10, 10 and 3");
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
