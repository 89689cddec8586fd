//! The redrive engine: receive, classify, archive or replay, delete only what is confirmed.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::future::join_all;
use resq::archive::{ArchiveFacts, Archiver, OriginalMessage};
use resq::attributes::RedriveCount;
use resq::config::RedriverConfig;
use resq::metrics::{self, Metrics};
use resq::reason::ArchiveReason;
use resq::store::ObjectStore;
use serde::Serialize;

use crate::classify::{self, Decision, DlqMessage, MAX_BATCH, RedriveCopy, Rules};
use crate::ports::{Alarms, Receipt, RedriveQueues};
use crate::ratelimit::TokenBucket;
use crate::request::RunRequest;

/// Who archive entries are signed by.
pub const ARCHIVED_BY: &str = "redriver";

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The DLQ had nothing more to receive.
    Empty,
    /// `maxMessages` were handled.
    MaxMessages,
    /// The Lambda deadline margin was reached.
    Deadline,
    /// An alarm in `PAUSE_ON_ALARMS` is in `ALARM` (or could not be read).
    Paused,
    /// `ReceiveMessage` failed.
    ReceiveError,
}

/// What a run did (in a dry run: what it would have done).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Nothing was changed.
    pub dry_run: bool,
    /// The circuit breaker held the run.
    pub paused: bool,
    /// Which alarm, or why its state is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<String>,
    /// Messages received from the DLQ.
    pub received: u64,
    /// Copies confirmed in the main queue (their DLQ message deleted or being deleted).
    pub redriven: u64,
    /// Archive entries written, by reason.
    pub archived: BTreeMap<String, u64>,
    /// Left in the DLQ on purpose (permanent failures kept, or outside the selection).
    pub skipped: u64,
    /// Not moved because a send or archive write failed: still in the DLQ.
    pub failed: u64,
    /// Received messages that were replays failing again (`x-redrive-count` ≥ 1).
    pub returned: u64,
    /// Moved, but the DLQ delete failed: the message reappears (a FIFO resend is deduplicated).
    pub delete_failed: u64,
    /// Wall time of the run.
    pub elapsed_ms: u64,
    /// The configured rate.
    pub rate_per_second: f64,
    /// Replays per second between sends: the messages confirmed after the first send, over the
    /// time from the first send to the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub achieved_rate_per_second: Option<f64>,
    /// Why the run ended.
    pub stopped_by: StopReason,
}

/// The redriver over its ports.
pub struct Redriver<Q, S, A> {
    queues: Q,
    archiver: Archiver<S>,
    alarms: A,
    config: RedriverConfig,
    receive_wait_seconds: i32,
    function_name: String,
    emit_metrics: bool,
}

enum Work {
    Archive(DlqMessage, ArchiveReason, Option<String>),
    Redrive(DlqMessage, RedriveCopy),
}

impl<Q: RedriveQueues, S: ObjectStore, A: Alarms> Redriver<Q, S, A> {
    /// A redriver; `ReceiveMessage` long-polls 1 s so "empty" means empty.
    pub fn new(queues: Q, store: S, alarms: A, config: RedriverConfig) -> Self {
        Self {
            queues,
            archiver: Archiver::new(store, ARCHIVED_BY),
            alarms,
            config,
            receive_wait_seconds: 1,
            function_name: Metrics::function_name_from_env(ARCHIVED_BY),
            emit_metrics: true,
        }
    }

    /// Whether runs print their EMF metric lines (on in Lambda; a local runner may turn it off).
    pub fn with_metrics(mut self, emit: bool) -> Self {
        self.emit_metrics = emit;
        self
    }

    /// Sets the long-poll wait of `ReceiveMessage` (0 for a local emulator).
    pub fn with_receive_wait(mut self, seconds: i32) -> Self {
        self.receive_wait_seconds = seconds.clamp(0, 20);
        self
    }

    /// One run; emits its metrics (not for a dry run) and returns its summary.
    pub async fn run(&self, request: &RunRequest, deadline: Instant) -> Summary {
        let summary = self.execute(request, deadline).await;
        tracing::info!(summary = %serde_json::to_string(&summary).unwrap_or_default(), "redrive run done");
        if !summary.dry_run && self.emit_metrics {
            self.metrics(&summary).emit();
        }
        summary
    }

    fn metrics(&self, s: &Summary) -> Metrics {
        let mut m = Metrics::new(
            self.function_name.clone(),
            &[
                metrics::REDRIVEN,
                metrics::REDRIVE_SKIPPED,
                metrics::REDRIVE_FAILED,
                metrics::REDRIVE_RETURNED,
                metrics::ARCHIVED,
            ],
        );
        m.add(metrics::REDRIVEN, s.redriven);
        m.add(metrics::REDRIVE_SKIPPED, s.skipped);
        m.add(metrics::REDRIVE_FAILED, s.failed);
        m.add(metrics::REDRIVE_RETURNED, s.returned);
        for (reason, n) in &s.archived {
            if let Some(r) = ArchiveReason::from_code(reason) {
                m.add_archived_n(r, *n);
            }
        }
        m
    }

    async fn execute(&self, request: &RunRequest, deadline: Instant) -> Summary {
        let started = Instant::now();
        let mut s = Summary {
            dry_run: request.dry_run,
            paused: false,
            pause_reason: None,
            received: 0,
            redriven: 0,
            archived: BTreeMap::new(),
            skipped: 0,
            failed: 0,
            returned: 0,
            delete_failed: 0,
            elapsed_ms: 0,
            rate_per_second: request.rate_per_second,
            achieved_rate_per_second: None,
            stopped_by: StopReason::Empty,
        };
        if let Some(reason) = self.breaker().await {
            tracing::warn!(reason = %reason, "redrive paused by the circuit breaker");
            s.paused = true;
            s.pause_reason = Some(reason);
            s.stopped_by = StopReason::Paused;
            s.elapsed_ms = started.elapsed().as_millis() as u64;
            return s;
        }

        let stop_at = deadline
            .checked_sub(self.config.common.deadline_margin)
            .unwrap_or(started);
        // Hidden for the whole run: a message is seen once per run, and one that cannot be
        // finished (a crash) comes back soon after.
        let visibility =
            (deadline.saturating_duration_since(started).as_secs() + 30).clamp(30, 43_200) as i32;
        let rules = Rules {
            max_redrive_attempts: self.config.common.max_redrive_attempts,
            archive_after: self.config.archive_after,
            permanent_action: self.config.permanent_action,
            reason: request.reason.clone(),
            older_than: request.older_than,
        };
        let main_is_fifo = self.config.common.main_queue_url.ends_with(".fifo");
        let bucket = TokenBucket::new(request.rate_per_second);
        let mut to_release: Vec<Receipt> = Vec::new();
        // (when, messages confirmed) of the first send, and when the last one was confirmed.
        let mut first_send: Option<(Instant, u64)> = None;
        let mut last_send = None;

        loop {
            if s.received >= u64::from(request.max_messages) {
                s.stopped_by = StopReason::MaxMessages;
                break;
            }
            if Instant::now() >= stop_at {
                s.stopped_by = StopReason::Deadline;
                break;
            }
            let want = (u64::from(request.max_messages) - s.received).min(MAX_BATCH as u64) as i32;
            let batch = match self
                .queues
                .receive(want, visibility, self.receive_wait_seconds)
                .await
            {
                Ok(b) if b.is_empty() => {
                    s.stopped_by = StopReason::Empty;
                    break;
                }
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(error_code = "RECEIVE_FAILED", error_details = %e, "cannot receive from the DLQ");
                    s.stopped_by = StopReason::ReceiveError;
                    break;
                }
            };
            s.received += batch.len() as u64;
            let now_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;

            let mut work = Vec::new();
            for m in batch {
                if m.is_returned() {
                    s.returned += 1;
                }
                if !m.dropped_attributes.is_empty() {
                    tracing::warn!(message_id = %m.message_id, dropped = ?m.dropped_attributes, "list-valued attributes are not supported by SQS and are not copied");
                }
                match classify::classify(&m, &rules, now_ms) {
                    Decision::Keep(keep) => {
                        s.skipped += 1;
                        tracing::info!(message_id = %m.message_id, kept = ?keep, "left in the DLQ");
                        to_release.push((m.message_id, m.receipt_handle));
                    }
                    Decision::Archive(reason) => {
                        let last = m.failure_reason().map(str::to_owned);
                        work.push(Work::Archive(m, reason, last));
                    }
                    Decision::Redrive => match classify::redrive_copy(&m, main_is_fifo) {
                        Ok(copy) => work.push(Work::Redrive(m, copy)),
                        Err(reason) => {
                            let last = Some(format!("a copy cannot be sent: {reason}"));
                            work.push(Work::Archive(m, reason, last));
                        }
                    },
                }
            }

            if request.dry_run {
                for w in work {
                    match w {
                        Work::Archive(m, reason, _) => {
                            *s.archived.entry(reason.code().to_owned()).or_default() += 1;
                            to_release.push((m.message_id, m.receipt_handle));
                        }
                        Work::Redrive(m, _) => {
                            s.redriven += 1;
                            to_release.push((m.message_id, m.receipt_handle));
                        }
                    }
                }
                continue;
            }

            let mut to_delete: Vec<Receipt> = Vec::new();
            let mut archives = Vec::new();
            let mut redrives: Vec<(DlqMessage, RedriveCopy)> = Vec::new();
            for w in work {
                match w {
                    Work::Archive(m, reason, last) => archives.push(self.archive(m, reason, last)),
                    Work::Redrive(m, c) => redrives.push((m, c)),
                }
            }
            for (m, reason, ok) in join_all(archives).await {
                if ok {
                    *s.archived.entry(reason.code().to_owned()).or_default() += 1;
                    to_delete.push((m.message_id, m.receipt_handle));
                } else {
                    s.failed += 1;
                    to_release.push((m.message_id, m.receipt_handle));
                }
            }

            let sizes: Vec<usize> = redrives.iter().map(|(_, c)| c.size).collect();
            let mut out_of_time = false;
            for range in classify::pack(&sizes) {
                let group = &redrives[range];
                let mut ready = 0;
                for _ in group {
                    if out_of_time
                        || tokio::time::timeout_at(stop_at.into(), bucket.acquire())
                            .await
                            .is_err()
                    {
                        out_of_time = true;
                        break;
                    }
                    ready += 1;
                }
                let (sendable, unsent) = group.split_at(ready);
                to_release.extend(
                    unsent
                        .iter()
                        .map(|(m, _)| (m.message_id.clone(), m.receipt_handle.clone())),
                );
                if sendable.is_empty() {
                    continue;
                }
                let copies: Vec<&RedriveCopy> = sendable.iter().map(|(_, c)| c).collect();
                let sent_at = Instant::now();
                let redriven_before = s.redriven;
                match self.queues.send_batch(&copies).await {
                    Ok(results) => {
                        for ((m, _), result) in sendable.iter().zip(results) {
                            match result {
                                None => {
                                    s.redriven += 1;
                                    to_delete
                                        .push((m.message_id.clone(), m.receipt_handle.clone()));
                                }
                                Some(why) => {
                                    s.failed += 1;
                                    tracing::warn!(message_id = %m.message_id, error_code = "REDRIVE_SEND_FAILED", error_details = %why, "not replayed; left in the DLQ");
                                    to_release
                                        .push((m.message_id.clone(), m.receipt_handle.clone()));
                                }
                            }
                        }
                        first_send.get_or_insert((sent_at, s.redriven - redriven_before));
                        last_send = Some(sent_at);
                    }
                    Err(e) => {
                        s.failed += sendable.len() as u64;
                        tracing::warn!(error_code = "REDRIVE_SEND_FAILED", error_details = %e, "batch not replayed; left in the DLQ");
                        to_release.extend(
                            sendable
                                .iter()
                                .map(|(m, _)| (m.message_id.clone(), m.receipt_handle.clone())),
                        );
                    }
                }
            }

            if !to_delete.is_empty() {
                for ((id, _), why) in self.queues.delete(to_delete).await {
                    s.delete_failed += 1;
                    tracing::warn!(message_id = %id, error_code = "DLQ_DELETE_FAILED", error_details = %why, "moved but not deleted from the DLQ; it will be seen again");
                }
            }
            if out_of_time {
                s.stopped_by = StopReason::Deadline;
                break;
            }
        }

        if !to_release.is_empty() {
            self.queues.release(to_release).await;
        }
        if let (Some((first, in_first)), Some(last)) = (first_send, last_send) {
            let secs = last.duration_since(first).as_secs_f64();
            if secs > 0.0 {
                // What the first send carried was paid for before it; the rest after it.
                s.achieved_rate_per_second = Some((s.redriven - in_first) as f64 / secs);
            }
        }
        s.elapsed_ms = started.elapsed().as_millis() as u64;
        s
    }

    /// `Some(reason)` when replay must not run.
    async fn breaker(&self) -> Option<String> {
        let names = &self.config.pause_on_alarms;
        if names.is_empty() {
            return None;
        }
        match self.alarms.in_alarm(names).await {
            Ok(firing) if firing.is_empty() => None,
            Ok(firing) => Some(format!("alarm in ALARM: {}", firing.join(", "))),
            Err(e) => Some(format!("alarm state unknown, not replaying blind: {e}")),
        }
    }

    async fn archive(
        &self,
        m: DlqMessage,
        reason: ArchiveReason,
        last_error: Option<String>,
    ) -> (DlqMessage, ArchiveReason, bool) {
        let facts = ArchiveFacts {
            source_queue: self.config.common.dlq_url.clone(),
            redrive_count: match m.redrive_count() {
                RedriveCount::Count(n) => Some(n),
                RedriveCount::Invalid => None,
            },
            receive_count: m
                .attributes
                .get("ApproximateReceiveCount")
                .and_then(|c| c.parse().ok()),
            first_sent_at: m.first_sent_at(),
            last_error,
        };
        let original = OriginalMessage {
            message_id: m.message_id.clone(),
            body: m.body.clone(),
            message_attributes: m.message_attributes.clone(),
            attributes: m.attributes.clone(),
        };
        match self
            .archiver
            .archive(reason, chrono::Utc::now(), original, facts)
            .await
        {
            Ok((key, _)) => {
                tracing::info!(message_id = %m.message_id, reason = reason.code(), key = %key, "archived");
                (m, reason, true)
            }
            Err(e) => {
                tracing::warn!(message_id = %m.message_id, error_code = "ARCHIVE_FAILED", error_details = %e, "not archived; left in the DLQ");
                (m, reason, false)
            }
        }
    }
}

/// Faults the local emulator cannot produce, through aws-smithy-mocks: partial
/// `SendMessageBatch` and `DeleteMessageBatch` failures, a failed send call, archive failures.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{PortError, SqsRedriveQueues};
    use aws_sdk_sqs::Client;
    use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
    use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchOutput;
    use aws_sdk_sqs::operation::receive_message::ReceiveMessageOutput;
    use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
    use aws_sdk_sqs::types::{
        BatchResultErrorEntry, ChangeMessageVisibilityBatchResultEntry,
        DeleteMessageBatchResultEntry, Message, MessageAttributeValue, SendMessageBatchResultEntry,
    };
    use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
    use resq::config::Vars;
    use resq::store::MemoryStore;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    struct NoAlarms(Result<Vec<String>, PortError>);

    impl Alarms for NoAlarms {
        async fn in_alarm(&self, _: &[String]) -> Result<Vec<String>, PortError> {
            self.0.clone()
        }
    }

    fn config(extra: &[(&str, &str)]) -> RedriverConfig {
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RedriverConfig::from_vars(&Vars(move |k: &str| match k {
            "MAIN_QUEUE_URL" => Some("http://127.0.0.1/1/orders".into()),
            "DLQ_URL" => Some("http://127.0.0.1/1/orders-dlq".into()),
            "ARCHIVE_BUCKET" => Some("b".into()),
            _ => extra.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
        }))
        .unwrap()
    }

    fn message(i: usize, redrive_count: Option<&str>) -> Message {
        let mut m = Message::builder()
            .message_id(format!("m{i}"))
            .receipt_handle(format!("rh{i}"))
            .body(format!("{{\"orderId\":\"o-{i}\"}}"));
        if let Some(c) = redrive_count {
            m = m.message_attributes(
                "x-redrive-count",
                MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value(c)
                    .build()
                    .unwrap(),
            );
        }
        m.build()
    }

    /// Receives `messages` once, then nothing; records deletes and releases.
    struct Sqs {
        rules: Vec<Rule>,
        deleted: Arc<Mutex<Vec<String>>>,
        released: Arc<Mutex<Vec<String>>>,
    }

    fn sqs(messages: Vec<Message>, send: Rule, failing_delete_ids: &'static [&'static str]) -> Sqs {
        let receive = mock!(Client::receive_message)
            .sequence()
            .output(move || {
                ReceiveMessageOutput::builder()
                    .set_messages(Some(messages.clone()))
                    .build()
            })
            .output(|| ReceiveMessageOutput::builder().build())
            .repeatedly()
            .build();
        let deleted = Arc::new(Mutex::new(Vec::new()));
        let d = deleted.clone();
        let delete = mock!(Client::delete_message_batch).then_compute_output(move |req| {
            let mut out = DeleteMessageBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]));
            for e in req.entries() {
                if failing_delete_ids.contains(&e.id()) {
                    out = out.failed(
                        BatchResultErrorEntry::builder()
                            .id(e.id())
                            .sender_fault(false)
                            .code("InternalError")
                            .build()
                            .unwrap(),
                    );
                } else {
                    d.lock().unwrap().push(e.receipt_handle().to_owned());
                    out = out.successful(
                        DeleteMessageBatchResultEntry::builder()
                            .id(e.id())
                            .build()
                            .unwrap(),
                    );
                }
            }
            out.build().unwrap()
        });
        let released = Arc::new(Mutex::new(Vec::new()));
        let r = released.clone();
        let release =
            mock!(Client::change_message_visibility_batch).then_compute_output(move |req| {
                let mut out =
                    ChangeMessageVisibilityBatchOutput::builder().set_failed(Some(vec![]));
                for e in req.entries() {
                    r.lock().unwrap().push(e.receipt_handle().to_owned());
                    out = out.successful(
                        ChangeMessageVisibilityBatchResultEntry::builder()
                            .id(e.id())
                            .build()
                            .unwrap(),
                    );
                }
                out.build().unwrap()
            });
        Sqs {
            rules: vec![receive, send, delete, release],
            deleted,
            released,
        }
    }

    fn send_failing(ids: &'static [&'static str]) -> Rule {
        mock!(Client::send_message_batch).then_compute_output(move |req| {
            let mut out = SendMessageBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]));
            for e in req.entries() {
                if ids.contains(&e.id()) {
                    out = out.failed(
                        BatchResultErrorEntry::builder()
                            .id(e.id())
                            .sender_fault(false)
                            .code("InternalError")
                            .build()
                            .unwrap(),
                    );
                } else {
                    out = out.successful(
                        SendMessageBatchResultEntry::builder()
                            .id(e.id())
                            .message_id("new")
                            .md5_of_message_body("x")
                            .build()
                            .unwrap(),
                    );
                }
            }
            out.build().unwrap()
        })
    }

    async fn run(
        sqs: &Sqs,
        store: &MemoryStore,
        alarms: NoAlarms,
        extra: &[(&str, &str)],
    ) -> Summary {
        run_with(
            sqs,
            store,
            alarms,
            extra,
            1000.0,
            Instant::now() + Duration::from_secs(30),
        )
        .await
    }

    async fn run_with(
        sqs: &Sqs,
        store: &MemoryStore,
        alarms: NoAlarms,
        extra: &[(&str, &str)],
        rate: f64,
        deadline: Instant,
    ) -> Summary {
        let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, &sqs.rules);
        let queues = SqsRedriveQueues::new(
            client,
            "http://127.0.0.1/1/orders",
            "http://127.0.0.1/1/orders-dlq",
        );
        let cfg = config(extra);
        let request = RunRequest {
            rate_per_second: rate,
            ..RunRequest::defaults(&cfg)
        };
        let redriver = Redriver::new(queues, store, alarms, cfg).with_receive_wait(0);
        redriver.run(&request, deadline).await
    }

    fn sorted(v: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
        let mut v = v.lock().unwrap().clone();
        v.sort();
        v
    }

    #[tokio::test]
    async fn only_successful_sends_are_deleted() {
        // GIVEN SendMessageBatch reports entry 1 failed
        let sqs = sqs(
            (0..3).map(|i| message(i, None)).collect(),
            send_failing(&["1"]),
            &[],
        );
        let summary = run(&sqs, &MemoryStore::default(), NoAlarms(Ok(vec![])), &[]).await;
        // THEN only entries 0 and 2 leave the DLQ; entry 1 stays, released for a later run
        assert_eq!((summary.redriven, summary.failed), (2, 1));
        assert_eq!(sorted(&sqs.deleted), vec!["rh0", "rh2"]);
        assert_eq!(sorted(&sqs.released), vec!["rh1"]);
    }

    #[tokio::test]
    async fn a_failed_send_call_deletes_nothing() {
        let send = mock!(Client::send_message_batch)
            .sequence()
            .http_status(500, None)
            .repeatedly()
            .build();
        let sqs = sqs((0..3).map(|i| message(i, None)).collect(), send, &[]);
        let summary = run(&sqs, &MemoryStore::default(), NoAlarms(Ok(vec![])), &[]).await;
        assert_eq!((summary.redriven, summary.failed), (0, 3));
        assert!(sqs.deleted.lock().unwrap().is_empty());
        assert_eq!(sorted(&sqs.released), vec!["rh0", "rh1", "rh2"]);
    }

    #[tokio::test]
    async fn a_partial_delete_failure_is_reported_and_loses_nothing() {
        let sqs = sqs(
            (0..3).map(|i| message(i, None)).collect(),
            send_failing(&[]),
            &["0"],
        );
        let summary = run(&sqs, &MemoryStore::default(), NoAlarms(Ok(vec![])), &[]).await;
        // all three reached the main queue; one stays in the DLQ too (seen again later)
        assert_eq!(
            (summary.redriven, summary.delete_failed, summary.failed),
            (3, 1, 0)
        );
        assert_eq!(sorted(&sqs.deleted), vec!["rh1", "rh2"]);
    }

    #[tokio::test]
    async fn a_failed_archive_write_keeps_the_message() {
        let store = MemoryStore::default();
        store.set_failing(true);
        let sqs = sqs(
            vec![message(0, Some("3")), message(1, None)],
            send_failing(&[]),
            &[],
        );
        let summary = run(&sqs, &store, NoAlarms(Ok(vec![])), &[]).await;
        assert_eq!((summary.redriven, summary.failed), (1, 1));
        assert!(summary.archived.is_empty());
        assert_eq!(sorted(&sqs.deleted), vec!["rh1"]);
        assert_eq!(sorted(&sqs.released), vec!["rh0"]);
    }

    #[tokio::test]
    async fn nothing_starts_inside_the_deadline_margin() {
        let sqs = sqs(vec![message(0, None)], send_failing(&[]), &[]);
        let summary = run_with(
            &sqs,
            &MemoryStore::default(),
            NoAlarms(Ok(vec![])),
            &[],
            10.0,
            Instant::now(),
        )
        .await;
        assert_eq!(
            (summary.received, summary.stopped_by),
            (0, StopReason::Deadline)
        );
    }

    #[tokio::test]
    async fn replays_waiting_for_tokens_past_the_margin_are_released_not_sent() {
        // 1 token per second and a full bucket (one batch) at the start; the margin (1 s) is
        // reached 0.5 s in: the first batch goes, the next would wait past the margin
        let sqs = sqs(
            (0..13).map(|i| message(i, None)).collect(),
            send_failing(&[]),
            &[],
        );
        let deadline = Instant::now() + Duration::from_millis(1500);
        let summary = run_with(
            &sqs,
            &MemoryStore::default(),
            NoAlarms(Ok(vec![])),
            &[],
            1.0,
            deadline,
        )
        .await;
        assert_eq!(
            (summary.received, summary.redriven, summary.failed),
            (13, 10, 0)
        );
        assert_eq!(summary.stopped_by, StopReason::Deadline);
        let mut first_batch: Vec<String> = (0..10).map(|i| format!("rh{i}")).collect();
        first_batch.sort();
        assert_eq!(sorted(&sqs.deleted), first_batch);
        assert_eq!(sorted(&sqs.released), vec!["rh10", "rh11", "rh12"]);
        assert!(
            Instant::now() < deadline,
            "the run ends before the deadline"
        );
    }

    #[tokio::test]
    async fn unreadable_alarm_states_pause_the_run() {
        let sqs = sqs(vec![message(0, None)], send_failing(&[]), &[]);
        let err = PortError {
            code: Some("AccessDenied".into()),
            message: "not allowed".into(),
        };
        let summary = run(
            &sqs,
            &MemoryStore::default(),
            NoAlarms(Err(err)),
            &[("PAUSE_ON_ALARMS", "a")],
        )
        .await;
        assert!(summary.paused);
        assert_eq!(summary.stopped_by, StopReason::Paused);
        assert!(summary.pause_reason.unwrap().contains("not allowed"));
        assert_eq!(summary.received, 0);
    }
}
