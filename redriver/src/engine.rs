//! The redrive engine (docs/design.md, "Redriver"): one run, in phases each bounded by the deadline.
//!
//! - **breaker**: an alarm of `PAUSE_ON_ALARMS` in `ALARM` (or unreadable) pauses redrive for
//!   the run; it is read again every [`BREAKER_RECHECK`] while replaying. A paused run still
//!   archives what is past its TTL or the cap;
//! - **unhide** (a selective run by `reason`): kept permanent failures of that reason, hidden
//!   by earlier runs, are made visible again from the keep list ([`resq::keep`]);
//! - then cycles, until `maxMessages` were handled, the DLQ is empty or the deadline margin is
//!   reached: **select** (receive 10, classify), **archive** (concurrent conditional puts),
//!   **replay** (token bucket, `SendMessageBatch`), **settle** (delete what is confirmed, hide
//!   kept permanent failures until their TTL). Kept and unselected messages do not count
//!   against `maxMessages`;
//! - **end**: write the keep list and hide the kept messages, release what was held for the
//!   run, the summary and metrics.
//!
//! Nothing new starts after `deadline - margin`; receives, archive writes and sends end by
//! `deadline - margin/2`, deletes, visibility changes and the keep list by
//! `deadline - margin/4`, done or not. What was not confirmed is not deleted: it reappears by
//! itself after its visibility timeout.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use resq::archive::{ArchiveFacts, Archiver, OriginalMessage};
use resq::attributes::RedriveCount;
use resq::config::RedriverConfig;
use resq::keep::{self, KeptMessage};
use resq::metrics::{self, Metrics};
use resq::reason::{ArchiveReason, ErrorCode};
use resq::store::ObjectStore;
use serde::{Deserialize, Serialize};

use crate::breaker::{self, Breaker};
use crate::classify::{self, Decision, DlqMessage, Keep, MAX_BATCH, RedriveCopy, Rules};
use crate::ports::{Alarms, Receipt, RedriveQueues};
use crate::ratelimit::TokenBucket;
use crate::request::RunRequest;

/// Who archive entries are signed by.
pub const ARCHIVED_BY: &str = "redriver";
/// How often a run reads the breaker's alarms again while it replays.
pub const BREAKER_RECHECK: Duration = Duration::from_secs(30);
/// How long a run waits for the breaker's alarms before it pauses redrive (and goes on
/// archiving): a slow CloudWatch must not eat the run.
pub const BREAKER_WAIT: Duration = Duration::from_secs(5);
/// Received messages stay hidden this long past the deadline, so one the run could not finish
/// (a crash, a call cut off) comes back soon after it.
pub const HOLD_PAST_DEADLINE: Duration = Duration::from_secs(30);

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The DLQ had nothing more to receive.
    Empty,
    /// `maxMessages` were handled.
    MaxMessages,
    /// The Lambda deadline margin was reached.
    Deadline,
    /// `ReceiveMessage` failed.
    ReceiveError,
}

/// What a run did (in a dry run: what it would have done).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Nothing was changed.
    pub dry_run: bool,
    /// The circuit breaker held replay (at the start or during the run).
    pub paused: bool,
    /// Which alarm, or why its state is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<String>,
    /// An alarm of the breaker cleared a short while ago: this run replayed at most this many
    /// (a probe), not its full budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<u32>,
    /// Messages received from the DLQ.
    pub received: u64,
    /// Copies confirmed in the main queue (their DLQ message deleted or being deleted).
    pub redriven: u64,
    /// Archive entries written, by reason.
    pub archived: BTreeMap<ArchiveReason, u64>,
    /// Left in the DLQ on purpose: permanent failures kept, messages outside the selection,
    /// replays held by the breaker or behind a failed send of their FIFO group.
    pub skipped: u64,
    /// Of those, permanent failures kept for a human (hidden until their TTL, see `resq dlq
    /// peek --kept`).
    pub kept: u64,
    /// Kept messages made visible again for this run (a selective run by reason; a dry run
    /// counts those it would bring back, and changes nothing).
    pub unhidden: u64,
    /// Not moved because a send or archive write failed or was not confirmed: still in the
    /// DLQ.
    pub failed: u64,
    /// Replays that had failed again (`x-redrive-count` ≥ 1) and that this run moved on
    /// (replayed again or archived): each counted by the run that moves it.
    pub returned: u64,
    /// Moved, but the DLQ delete failed: the message reappears (a FIFO resend is deduplicated).
    pub delete_failed: u64,
    /// Wall time of the run.
    pub elapsed_ms: u64,
    /// The configured rate.
    pub rate_per_second: f64,
    /// Replays per second between sends: the messages confirmed after the first send, over the
    /// time from the first send to the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    breaker_recheck: Duration,
}

/// When a run's phases end.
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    /// Nothing new starts after this.
    stop_at: Instant,
    /// Receives, archive writes and sends end by this, done or not, leaving the deletes that
    /// follow them time to run.
    work_by: Instant,
    /// Every call ends by this, done or not.
    settle_by: Instant,
}

/// What one cycle's messages are to become (what stays is held or waits to be hidden).
#[derive(Default)]
struct CyclePlan {
    archives: Vec<(DlqMessage, ArchiveReason, Option<String>)>,
    replays: Vec<(DlqMessage, RedriveCopy)>,
}

/// A kept permanent failure waiting to be hidden until its TTL: it is written to the keep list
/// first and hidden only once the list is in the bucket, so a hidden message can always be
/// reached (until then its receive keeps it hidden for the run).
struct PendingKeep {
    kept: KeptMessage,
    /// When its TTL ends (epoch millis).
    until_ms: u64,
    received_at: Instant,
}

/// A run's state between its phases.
struct RunState {
    summary: Summary,
    rules: Rules,
    /// Replays sent or attempted: what counts against `maxMessages`. Archiving does not
    /// (expired messages must not starve redrive, nor fresh ones their archiving), nor do kept
    /// or unselected messages.
    replays: u64,
    /// `maxMessages` of the run.
    max_messages: u32,
    /// Received messages to make visible again at the end of the run.
    held: Vec<Receipt>,
    /// Kept messages to list and hide.
    pending_keep: Vec<PendingKeep>,
    /// FIFO groups with a send that failed this run: the rest of each waits.
    failed_groups: HashSet<String>,
    first_send: Option<(Instant, u64)>,
    last_send: Option<Instant>,
    next_breaker_check: Instant,
}

impl RunState {
    fn apply(&mut self, verdict: Breaker) {
        match verdict {
            Breaker::Closed => {}
            Breaker::Open(reason) => self.pause(reason),
            Breaker::HalfOpen { budget, reason } => {
                if budget < self.max_messages {
                    tracing::warn!(reason = %reason, budget, "replaying a probe only");
                    self.max_messages = budget;
                    self.summary.probe = Some(budget);
                }
            }
        }
    }

    fn pause(&mut self, reason: String) {
        tracing::warn!(reason = %reason, "replay paused by the circuit breaker; archiving goes on");
        self.summary.paused = true;
        self.summary.pause_reason = Some(reason);
        self.rules.paused = true;
    }

    fn hold(&mut self, m: &DlqMessage) {
        self.held
            .push((m.message_id.clone(), m.receipt_handle.clone()));
    }
}

fn now_ms() -> u64 {
    chrono::Utc::now().timestamp_millis().max(0) as u64
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
            breaker_recheck: BREAKER_RECHECK,
        }
    }

    /// How often a run reads the breaker's alarms again while it replays (default
    /// [`BREAKER_RECHECK`]).
    pub fn with_breaker_recheck(mut self, every: Duration) -> Self {
        self.breaker_recheck = every;
        self
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

    /// One run; emits its metrics (not for a dry run) and returns its summary. Every phase is
    /// bounded by the deadline, so the summary and the metrics are written even when the run
    /// is cut short.
    pub async fn run(&self, request: &RunRequest, deadline: Instant) -> Summary {
        let summary = self.execute(request, deadline).await;
        tracing::info!(summary = %serde_json::to_string(&summary).unwrap_or_default(), "redrive run done");
        if !summary.dry_run && self.emit_metrics {
            self.metrics(&summary).emit();
        }
        summary
    }

    /// The run's metrics.
    pub fn metrics(&self, s: &Summary) -> Metrics {
        let mut m = Metrics::new(
            self.function_name.clone(),
            &[
                metrics::REDRIVEN,
                metrics::REDRIVE_SKIPPED,
                metrics::REDRIVE_FAILED,
                metrics::REDRIVE_PAUSED,
                metrics::ARCHIVED,
            ],
        );
        m.add(metrics::REDRIVEN, s.redriven);
        m.add(metrics::REDRIVE_SKIPPED, s.skipped);
        m.add(metrics::REDRIVE_FAILED, s.failed);
        m.add(metrics::REDRIVE_PAUSED, u64::from(s.paused));
        for (reason, n) in &s.archived {
            m.add_archived_n(*reason, *n);
        }
        m
    }

    async fn execute(&self, request: &RunRequest, deadline: Instant) -> Summary {
        let started = Instant::now();
        let margin = self.config.common.deadline_margin;
        let times = Deadlines {
            stop_at: deadline.checked_sub(margin).unwrap_or(started),
            work_by: deadline.checked_sub(margin / 2).unwrap_or(started),
            settle_by: deadline.checked_sub(margin / 4).unwrap_or(started),
        };
        let mut st = RunState {
            summary: Summary {
                dry_run: request.dry_run,
                paused: false,
                pause_reason: None,
                probe: None,
                received: 0,
                redriven: 0,
                archived: BTreeMap::new(),
                skipped: 0,
                kept: 0,
                unhidden: 0,
                failed: 0,
                returned: 0,
                delete_failed: 0,
                elapsed_ms: 0,
                rate_per_second: request.rate_per_second,
                achieved_rate_per_second: None,
                stopped_by: StopReason::Empty,
            },
            rules: Rules {
                max_redrive_attempts: self.config.common.max_redrive_attempts,
                archive_after: self.config.archive_after,
                permanent_action: self.config.permanent_action,
                reason: request.reason.clone(),
                older_than: request.older_than,
                paused: false,
            },
            replays: 0,
            max_messages: request.max_messages,
            held: Vec::new(),
            pending_keep: Vec::new(),
            failed_groups: HashSet::new(),
            first_send: None,
            last_send: None,
            next_breaker_check: started + self.breaker_recheck,
        };

        // breaker
        let verdict = self.breaker(times.stop_at).await;
        st.apply(verdict);
        // unhide: a selective run by reason reaches the kept messages of that reason
        if let Some(reason) = request.reason.clone()
            && !st.rules.paused
        {
            self.unhide(&mut st, &reason, times).await;
        }

        let bucket = TokenBucket::new(request.rate_per_second);
        let dlq_is_fifo = resq::fifo::is_fifo(&self.config.common.dlq_url);
        loop {
            if st.replays >= u64::from(st.max_messages) {
                st.summary.stopped_by = StopReason::MaxMessages;
                break;
            }
            let now = Instant::now();
            if now >= times.stop_at {
                st.summary.stopped_by = StopReason::Deadline;
                break;
            }
            // select
            let want = MAX_BATCH as i32;
            let wait = (self.receive_wait_seconds as u64)
                .min(times.stop_at.saturating_duration_since(now).as_secs())
                as i32;
            let visibility = (deadline.saturating_duration_since(now) + HOLD_PAST_DEADLINE)
                .as_secs()
                .clamp(30, resq::backoff::MAX_VISIBILITY_TIMEOUT.as_secs())
                as i32;
            let received_at = Instant::now();
            let batch = match tokio::time::timeout_at(
                times.work_by.into(),
                self.queues.receive(want, visibility, wait),
            )
            .await
            {
                Ok(Ok(b)) if b.is_empty() => {
                    st.summary.stopped_by = StopReason::Empty;
                    break;
                }
                Ok(Ok(b)) => b,
                Ok(Err(e)) => {
                    tracing::error!(error_code = ErrorCode::ReceiveFailed.code(), error_details = %e, "cannot receive from the DLQ");
                    st.summary.stopped_by = StopReason::ReceiveError;
                    break;
                }
                Err(_) => {
                    st.summary.stopped_by = StopReason::Deadline;
                    break;
                }
            };
            st.summary.received += batch.len() as u64;
            let plan = self.select(&mut st, batch, received_at, dlq_is_fifo);
            if request.dry_run {
                Self::account_dry_run(&mut st, plan);
                continue;
            }
            // archive
            let mut deletes = self.archive_all(&mut st, plan.archives, times).await;
            // replay
            let (replayed, out_of_time) = self.replay(&mut st, plan.replays, &bucket, times).await;
            deletes.extend(replayed);
            // settle
            self.delete_confirmed(&mut st, deletes, times).await;
            if st.pending_keep.len() >= keep::MAX_ENTRIES_PER_LIST {
                let pending = std::mem::take(&mut st.pending_keep);
                let unlisted = self.keep_and_hide(pending, times).await;
                st.held.extend(unlisted);
            }
            if out_of_time {
                st.summary.stopped_by = StopReason::Deadline;
                break;
            }
        }

        // end
        self.settle_run(&mut st, times).await;
        if let (Some((first, in_first)), Some(last)) = (st.first_send, st.last_send) {
            let secs = last.duration_since(first).as_secs_f64();
            if secs > 0.0 {
                // What the first send carried was paid for before it; the rest after it.
                st.summary.achieved_rate_per_second =
                    Some((st.summary.redriven - in_first) as f64 / secs);
            }
        }
        st.summary.elapsed_ms = started.elapsed().as_millis() as u64;
        st.summary
    }

    /// The breaker's verdict (see [`crate::breaker`]); states that cannot be read by `until`
    /// (at most [`BREAKER_WAIT`] from now) open it.
    async fn breaker(&self, until: Instant) -> Breaker {
        let until = until.min(Instant::now() + BREAKER_WAIT);
        let names = &self.config.pause_on_alarms;
        if names.is_empty() {
            return Breaker::Closed;
        }
        let now = now_ms();
        match tokio::time::timeout_at(until.into(), self.alarms.states(names)).await {
            Ok(Ok(states)) => breaker::decide(names, Ok(&states), now),
            Ok(Err(e)) => breaker::decide(names, Err(&e.to_string()), now),
            Err(_) => breaker::decide(names, Err("no answer in time"), now),
        }
    }

    /// Makes the kept messages of `reason` visible again, from the keep list.
    async fn unhide(&self, st: &mut RunState, reason: &str, times: Deadlines) {
        let store = self.archiver.store();
        let dlq = &self.config.common.dlq_url;
        let hidden = match tokio::time::timeout_at(
            times.settle_by.into(),
            keep::still_hidden(store, dlq, chrono::Utc::now()),
        )
        .await
        {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                tracing::warn!(error_code = ErrorCode::KeepListUnreadable.code(), error_details = %e, "kept messages hidden by earlier runs stay hidden until their TTL");
                return;
            }
            Err(_) => return,
        };
        let changes: Vec<(Receipt, i32)> = hidden
            .into_iter()
            .filter(|k| k.failure_reason.as_deref() == Some(reason))
            .map(|k| ((k.message_id, k.receipt_handle), 0))
            .collect();
        if changes.is_empty() {
            return;
        }
        let asked = changes.len() as u64;
        if st.summary.dry_run {
            // a dry run changes nothing: it says how many a real run would bring back
            st.summary.unhidden = asked;
            return;
        }
        if let Ok(failed) = tokio::time::timeout_at(
            times.settle_by.into(),
            self.queues.change_visibility(changes),
        )
        .await
        {
            st.summary.unhidden = asked - failed.len() as u64;
            tracing::info!(
                reason,
                unhidden = st.summary.unhidden,
                "kept messages made visible for this run"
            );
        }
    }

    /// Classifies a received batch into the cycle's work; what stays is held or hidden.
    fn select(
        &self,
        st: &mut RunState,
        batch: Vec<DlqMessage>,
        received_at: Instant,
        dlq_is_fifo: bool,
    ) -> CyclePlan {
        let main_is_fifo = resq::fifo::is_fifo(&self.config.common.main_queue_url);
        let now = now_ms();
        let mut plan = CyclePlan::default();
        for m in batch {
            if !m.dropped_attributes.is_empty() {
                tracing::warn!(message_id = %m.message_id, dropped = %m.dropped_attributes.join(", "), "list-valued attributes are not supported by SQS and are not copied");
            }
            match classify::classify(&m, &st.rules, now) {
                Decision::Keep(Keep::Permanent) => {
                    st.summary.skipped += 1;
                    st.summary.kept += 1;
                    match classify::keep_until(&m, &st.rules, dlq_is_fifo) {
                        Some(until_ms) => st.pending_keep.push(PendingKeep {
                            kept: KeptMessage {
                                message_id: m.message_id.clone(),
                                receipt_handle: m.receipt_handle.clone(),
                                failure_reason: m.failure_reason().map(str::to_owned),
                                first_sent_at: m.first_sent_at(),
                                hidden_until: until_ms,
                            },
                            until_ms,
                            received_at,
                        }),
                        None => st.hold(&m),
                    }
                }
                Decision::Keep(keep) => {
                    tracing::debug!(message_id = %m.message_id, kept = ?keep, "left in the DLQ");
                    st.summary.skipped += 1;
                    st.hold(&m);
                }
                Decision::Archive(reason) => {
                    let last = m.failure_reason().map(str::to_owned);
                    plan.archives.push((m, reason, last));
                }
                Decision::Redrive => match classify::redrive_copy(&m, main_is_fifo) {
                    Ok(copy) => plan.replays.push((m, copy)),
                    Err(reason) => {
                        let last = Some(format!("a copy cannot be sent: {reason}"));
                        plan.archives.push((m, reason, last));
                    }
                },
            }
        }
        plan
    }

    fn account_dry_run(st: &mut RunState, plan: CyclePlan) {
        let mut budget = u64::from(st.max_messages).saturating_sub(st.replays);
        for (m, reason, _) in plan.archives {
            *st.summary.archived.entry(reason).or_default() += 1;
            st.hold(&m);
        }
        for (m, _) in plan.replays {
            if budget > 0 {
                budget -= 1;
                st.replays += 1;
                st.summary.redriven += 1;
            }
            st.hold(&m);
        }
        for p in st.pending_keep.drain(..) {
            st.held.push((p.kept.message_id, p.kept.receipt_handle));
        }
    }

    /// Writes the cycle's archive entries; returns the receipts to delete (confirmed writes).
    async fn archive_all(
        &self,
        st: &mut RunState,
        archives: Vec<(DlqMessage, ArchiveReason, Option<String>)>,
        times: Deadlines,
    ) -> Vec<Receipt> {
        let writes = archives
            .iter()
            .enumerate()
            .map(|(i, (m, reason, last))| async move {
                (i, self.archive(m, *reason, last.clone()).await)
            });
        let done = resq::lambda::run_until(writes, resq::sqs::CALLS_IN_FLIGHT, times.work_by).await;
        let mut confirmed = vec![None; archives.len()];
        for (i, ok) in done {
            confirmed[i] = Some(ok);
        }
        let mut deletes = Vec::new();
        for ((m, reason, _), ok) in archives.into_iter().zip(confirmed) {
            match ok {
                Some(true) => {
                    *st.summary.archived.entry(reason).or_default() += 1;
                    st.summary.returned += u64::from(m.is_returned());
                    deletes.push((m.message_id, m.receipt_handle));
                }
                // a failed write: back for a later run; one not done in time: it reappears
                Some(false) => {
                    st.summary.failed += 1;
                    st.hold(&m);
                }
                None => st.summary.failed += 1,
            }
        }
        deletes
    }

    /// Replays the cycle's copies at the rate; returns the receipts to delete (copies SQS
    /// reported `Successful`) and whether the run ran out of time.
    async fn replay(
        &self,
        st: &mut RunState,
        replays: Vec<(DlqMessage, RedriveCopy)>,
        bucket: &TokenBucket,
        times: Deadlines,
    ) -> (Vec<Receipt>, bool) {
        let main_is_fifo = resq::fifo::is_fifo(&self.config.common.main_queue_url);
        let copies: Vec<&RedriveCopy> = replays.iter().map(|(_, c)| c).collect();
        let mut deletes = Vec::new();
        let mut out_of_time = false;
        for range in classify::plan_sends(&copies, main_is_fifo) {
            // FIFO: a group whose earlier message failed to go waits (its order is kept)
            let (ready, waiting): (Vec<usize>, Vec<usize>) = range.clone().partition(|&i| {
                replays[i]
                    .1
                    .group_id
                    .as_ref()
                    .is_none_or(|g| !st.failed_groups.contains(g))
            });
            for &i in &waiting {
                st.summary.skipped += 1;
                st.hold(&replays[i].0);
            }
            if ready.is_empty() {
                continue;
            }
            if !st.rules.paused
                && !self.config.pause_on_alarms.is_empty()
                && Instant::now() >= st.next_breaker_check
            {
                st.next_breaker_check = Instant::now() + self.breaker_recheck;
                let verdict = self.breaker(times.work_by).await;
                st.apply(verdict);
            }
            let mut sendable = 0;
            let budget = u64::from(st.max_messages).saturating_sub(st.replays) as usize;
            if !st.rules.paused && !out_of_time {
                for _ in ready.iter().take(budget) {
                    if tokio::time::timeout_at(times.stop_at.into(), bucket.acquire())
                        .await
                        .is_err()
                    {
                        out_of_time = true;
                        break;
                    }
                    sendable += 1;
                }
            }
            let (send, hold) = ready.split_at(sendable);
            for &i in hold {
                // held by the breaker, the budget or the clock: visible again after the run
                st.summary.skipped += u64::from(st.rules.paused);
                st.hold(&replays[i].0);
            }
            if send.is_empty() {
                continue;
            }
            st.replays += send.len() as u64;
            let batch: Vec<&RedriveCopy> = send.iter().map(|&i| &replays[i].1).collect();
            let sent_at = Instant::now();
            let redriven_before = st.summary.redriven;
            let results =
                match tokio::time::timeout_at(times.work_by.into(), self.queues.send_batch(&batch))
                    .await
                {
                    Ok(Ok(results)) => results,
                    Ok(Err(e)) => vec![Some(e.to_string()); send.len()],
                    Err(_) => {
                        // unknown whether SQS took them: neither deleted nor released; they
                        // reappear after their visibility timeout (a FIFO resend is deduplicated)
                        st.summary.failed += send.len() as u64;
                        out_of_time = true;
                        continue;
                    }
                };
            for (&i, result) in send.iter().zip(results) {
                let m = &replays[i].0;
                match result {
                    None => {
                        st.summary.redriven += 1;
                        st.summary.returned += u64::from(m.is_returned());
                        deletes.push((m.message_id.clone(), m.receipt_handle.clone()));
                    }
                    Some(why) => {
                        st.summary.failed += 1;
                        tracing::warn!(message_id = %m.message_id, error_code = ErrorCode::RedriveSendFailed.code(), error_details = %why, "not redriven; left in the DLQ");
                        if let Some(g) = &replays[i].1.group_id {
                            st.failed_groups.insert(g.clone());
                        }
                        st.hold(m);
                    }
                }
            }
            st.first_send
                .get_or_insert((sent_at, st.summary.redriven - redriven_before));
            st.last_send = Some(sent_at);
        }
        (deletes, out_of_time)
    }

    /// Deletes what the cycle confirmed: archive entries written, copies `Successful`.
    async fn delete_confirmed(&self, st: &mut RunState, deletes: Vec<Receipt>, times: Deadlines) {
        if deletes.is_empty() {
            return;
        }
        // A message that was moved but not deleted is moved again when it reappears: a second
        // archive attempt finds its entry, but a second replay is a duplicate copy. So a
        // failed delete is tried once more while its receipt handle still holds.
        let mut pending = deletes;
        for attempt in 0..2 {
            let pending_count = pending.len() as u64;
            match tokio::time::timeout_at(times.settle_by.into(), self.queues.delete(pending)).await
            {
                Ok(failed) if failed.is_empty() => return,
                Ok(failed) if attempt == 0 => {
                    pending = failed.into_iter().map(|(r, _)| r).collect();
                }
                Ok(failed) => {
                    for ((id, _), why) in failed {
                        st.summary.delete_failed += 1;
                        tracing::warn!(message_id = %id, error_code = ErrorCode::DlqDeleteFailed.code(), error_details = %why, "moved but not deleted from the DLQ; it will be seen again (an archive finds its entry; a replay is sent again)");
                    }
                    return;
                }
                Err(_) => {
                    // not known which went through: counted as not deleted
                    st.summary.delete_failed += pending_count;
                    tracing::warn!(
                        error_code = ErrorCode::DlqDeleteDeadline.code(),
                        "deletes not confirmed before the deadline margin; those messages will be seen again (an archive finds its entry; a replay is sent again)"
                    );
                    return;
                }
            }
        }
    }

    /// Writes the pending kept messages to the keep list, then hides them until their TTL.
    /// When the list is not written (in time), they are not hidden either: their receipts are
    /// returned, to be released at the end of the run (released earlier, the run would read
    /// them again).
    async fn keep_and_hide(&self, pending: Vec<PendingKeep>, times: Deadlines) -> Vec<Receipt> {
        if pending.is_empty() {
            return Vec::new();
        }
        let now = now_ms();
        let (kept, hides): (Vec<KeptMessage>, Vec<(Receipt, i32)>) = pending
            .into_iter()
            .map(|p| {
                let secs = classify::keep_hidden_for(p.until_ms, now, p.received_at.elapsed());
                let mut kept = p.kept;
                kept.hidden_until = now + secs as u64 * 1000;
                let receipt = (kept.message_id.clone(), kept.receipt_handle.clone());
                (kept, (receipt, secs))
            })
            .unzip();
        let run = format!("{:016x}", rand::random::<u64>());
        let written = tokio::time::timeout_at(
            times.settle_by.into(),
            keep::write(
                self.archiver.store(),
                &self.config.common.dlq_url,
                &run,
                chrono::Utc::now(),
                &kept,
            ),
        )
        .await;
        if !matches!(written, Ok(Ok(_))) {
            let why = match written {
                Ok(Err(e)) => e.to_string(),
                _ => "not confirmed before the deadline margin".to_owned(),
            };
            tracing::warn!(error_code = ErrorCode::KeepListFailed.code(), error_details = %why, count = kept.len(), "keep list not written: kept messages are released after the run, not hidden (a hidden message must be reachable)");
            return hides.into_iter().map(|(r, _)| r).collect();
        }
        match tokio::time::timeout_at(times.settle_by.into(), self.queues.change_visibility(hides))
            .await
        {
            Ok(failed) if failed.is_empty() => {}
            Ok(failed) => {
                tracing::warn!(count = failed.len(), error_details = %failed[0].1, "kept messages not hidden; they come back after the run")
            }
            Err(_) => tracing::warn!(
                error_code = ErrorCode::KeepHideDeadline.code(),
                "kept messages not hidden before the deadline margin; they come back after the run"
            ),
        }
        Vec::new()
    }

    /// Lists and hides the kept messages, then releases what was held for the run (kept
    /// messages that could not be listed with it).
    async fn settle_run(&self, st: &mut RunState, times: Deadlines) {
        let pending = std::mem::take(&mut st.pending_keep);
        let unlisted = self.keep_and_hide(pending, times).await;
        st.held.extend(unlisted);
        let held = std::mem::take(&mut st.held);
        let release = async {
            if held.is_empty() {
                return;
            }
            let changes: Vec<(Receipt, i32)> = held.into_iter().map(|r| (r, 0)).collect();
            match tokio::time::timeout_at(
                times.settle_by.into(),
                self.queues.change_visibility(changes),
            )
            .await
            {
                Ok(failed) if failed.is_empty() => {}
                Ok(failed) => {
                    tracing::warn!(count = failed.len(), error_details = %failed[0].1, "could not release DLQ messages; they return after their visibility timeout")
                }
                Err(_) => tracing::warn!(
                    "releases not confirmed before the deadline margin; those messages return after their visibility timeout"
                ),
            }
        };
        release.await;
    }

    async fn archive(
        &self,
        m: &DlqMessage,
        reason: ArchiveReason,
        last_error: Option<String>,
    ) -> bool {
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
                true
            }
            Err(e) => {
                tracing::warn!(message_id = %m.message_id, error_code = ErrorCode::ArchiveFailed.code(), error_details = %e, "not archived; left in the DLQ");
                false
            }
        }
    }
}

/// Faults the local emulator cannot produce, through aws-smithy-mocks: partial
/// `SendMessageBatch` and `DeleteMessageBatch` failures, a failed send call, archive failures.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{PortError, SqsQueues};
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

    struct NoAlarms(Result<Vec<crate::ports::AlarmState>, PortError>);

    impl Alarms for NoAlarms {
        async fn states(&self, _: &[String]) -> Result<Vec<crate::ports::AlarmState>, PortError> {
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
        let queues = SqsQueues::new(
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
    async fn unreadable_alarm_states_pause_replay() {
        let sqs = sqs(vec![message(0, None)], send_failing(&[]), &[]);
        let err = PortError::service("AccessDenied", "not allowed");
        let summary = run(
            &sqs,
            &MemoryStore::default(),
            NoAlarms(Err(err)),
            &[("PAUSE_ON_ALARMS", "a")],
        )
        .await;
        assert!(summary.paused);
        assert!(summary.pause_reason.unwrap().contains("not allowed"));
        // the run still reads the DLQ (to archive what must be), replays nothing, and
        // leaves the replayable message visible again
        assert_eq!(
            (summary.received, summary.redriven, summary.skipped),
            (1, 0, 1)
        );
        assert!(sqs.deleted.lock().unwrap().is_empty());
        assert_eq!(sorted(&sqs.released), vec!["rh0"]);
    }
}

/// The run's phases over in-memory ports ([`crate::memory`]): time, budgets and the order of
/// what each phase does.
#[cfg(test)]
mod phases {
    use super::*;
    use crate::memory::{FixedAlarms, MemoryDlq};
    use resq::attributes::{
        AttributeValue, MessageAttributes, X_FAILURE_CLASS, X_FAILURE_REASON, X_REDRIVE_COUNT,
    };
    use resq::config::Vars;
    use resq::store::MemoryStore;

    const HOUR_MS: u64 = 3_600_000;

    fn config(extra: &[(&str, &str)]) -> RedriverConfig {
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RedriverConfig::from_vars(&Vars(move |k: &str| {
            if let Some((_, v)) = extra.iter().find(|(n, _)| n == k) {
                return Some(v.clone());
            }
            match k {
                "MAIN_QUEUE_URL" => Some("http://127.0.0.1/1/orders".into()),
                "DLQ_URL" => Some("http://127.0.0.1/1/orders-dlq".into()),
                "ARCHIVE_BUCKET" => Some("b".into()),
                "REDRIVE_RATE_PER_SECOND" => Some("1000".into()),
                _ => None,
            }
        }))
        .unwrap()
    }

    fn dlq_message(id: &str, sent_ms: u64, attrs: &[(&str, AttributeValue)]) -> DlqMessage {
        DlqMessage {
            message_id: id.into(),
            receipt_handle: String::new(),
            body: format!("{{\"orderId\":\"{id}\"}}"),
            attributes: BTreeMap::from([("SentTimestamp".into(), sent_ms.to_string())]),
            message_attributes: attrs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<MessageAttributes>(),
            dropped_attributes: vec![],
        }
    }

    fn permanent(reason: &str) -> Vec<(&'static str, AttributeValue)> {
        vec![
            (X_FAILURE_CLASS, AttributeValue::string("permanent")),
            (X_FAILURE_REASON, AttributeValue::string(reason)),
        ]
    }

    fn now_ms() -> u64 {
        super::now_ms()
    }

    async fn scheduled(
        dlq: &MemoryDlq,
        store: &MemoryStore,
        alarms: &FixedAlarms,
        cfg: &RedriverConfig,
    ) -> Summary {
        let r = Redriver::new(dlq, store, alarms, cfg.clone()).with_receive_wait(0);
        r.run(
            &RunRequest::defaults(cfg),
            Instant::now() + Duration::from_secs(60),
        )
        .await
    }

    #[tokio::test]
    async fn kept_messages_a_hundred_times_the_budget_starve_nothing() {
        // GIVEN 2,000 kept permanent failures ahead of 20 replayable messages, and a budget of
        // 20 messages a run (kept : budget = 100 : 1)
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "20")]);
        let sent = now_ms() - HOUR_MS;
        for i in 0..2000 {
            dlq.push(dlq_message(
                &format!("kept-{i}"),
                sent,
                &permanent("MALFORMED_JSON"),
            ));
        }
        for i in 0..20 {
            dlq.push(dlq_message(&format!("replay-{i}"), sent, &[]));
        }
        // WHEN two scheduled runs happen
        let first = scheduled(&dlq, &store, &alarms, &cfg).await;
        let second = scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN every replayable message was replayed (by the first already), the kept ones did
        // not count against the budget, and the second run did not re-read them
        let replayed: HashSet<String> = dlq.main().iter().map(|c| c.body.clone()).collect();
        assert_eq!(replayed.len(), 20, "{first:?}");
        assert_eq!((first.redriven, first.kept), (20, 2000));
        assert_eq!(first.stopped_by, StopReason::MaxMessages);
        assert_eq!((second.received, second.stopped_by), (0, StopReason::Empty));
        // the kept messages are all still in the DLQ, hidden until their TTL, and listed
        assert_eq!((dlq.len(), dlq.visible()), (2000, 0));
        let listed = keep::still_hidden(&store, &cfg.common.dlq_url, chrono::Utc::now())
            .await
            .unwrap();
        assert_eq!(listed.len(), 2000);
        // nor does any run before SQS's 12 h limit ends their hide; then one run reads them
        // again and hides them for the rest of their TTL
        dlq.advance(Duration::from_secs(12 * 3600 - 60));
        let third = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!(third.received, 0);
        dlq.advance(Duration::from_secs(60));
        let fourth = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!((fourth.received, fourth.kept), (2000, 2000));
    }

    #[tokio::test]
    async fn expired_messages_do_not_use_up_the_replay_budget() {
        // GIVEN 100 messages past their TTL ahead of 5 replayable ones, a budget of 5 replays
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "5")]);
        for i in 0..100 {
            dlq.push(dlq_message(
                &format!("old-{i}"),
                now_ms() - 25 * HOUR_MS,
                &[],
            ));
        }
        for i in 0..5 {
            dlq.push(dlq_message(&format!("new-{i}"), now_ms(), &[]));
        }
        // WHEN one scheduled run happens
        let run = scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN all are archived and all five replayed: archiving is not replay work
        assert_eq!(
            run.archived.get(&ArchiveReason::TtlExpired),
            Some(&100),
            "{run:?}"
        );
        assert_eq!(run.redriven, 5);
        assert!(dlq.is_empty());
        // and the budget still bounds replays
        for i in 0..12 {
            dlq.push(dlq_message(&format!("more-{i}"), now_ms(), &[]));
        }
        let run = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!((run.redriven, run.stopped_by), (5, StopReason::MaxMessages));
        assert_eq!((dlq.len(), dlq.visible()), (7, 7));
    }

    #[tokio::test]
    async fn a_paused_run_archives_what_is_due_and_replays_nothing() {
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        alarms.set("replays-failing", true, Duration::from_secs(60), 10.0);
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let now = now_ms();
        dlq.push(dlq_message("expired", now - 25 * HOUR_MS, &[]));
        dlq.push(dlq_message(
            "capped",
            now,
            &[(X_REDRIVE_COUNT, AttributeValue::number(3))],
        ));
        dlq.push(dlq_message("waiting", now, &[]));
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert!(summary.paused, "{summary:?}");
        assert_eq!(summary.redriven, 0);
        assert_eq!(summary.archived.get(&ArchiveReason::TtlExpired), Some(&1));
        assert_eq!(summary.archived.get(&ArchiveReason::RedriveCap), Some(&1));
        assert_eq!(summary.skipped, 1);
        assert!(dlq.main().is_empty());
        assert_eq!(dlq.ids(), vec!["waiting"]);
        assert_eq!(
            dlq.visible(),
            1,
            "the held message is visible again for the next run"
        );
        let m = Redriver::new(&dlq, &store, &alarms, cfg.clone()).metrics(&summary);
        assert_eq!(m.get(metrics::REDRIVE_PAUSED), 1);
    }

    #[tokio::test]
    async fn the_breaker_is_read_again_while_replaying() {
        // GIVEN a run replaying 40 messages at 20/s, and an alarm that fires after 0.5 s
        let (dlq, store) = (MemoryDlq::default(), MemoryStore::default());
        let alarms = std::sync::Arc::new(FixedAlarms::default());
        let cfg = config(&[
            ("PAUSE_ON_ALARMS", "replays-failing"),
            ("REDRIVE_RATE_PER_SECOND", "20"),
        ]);
        for i in 0..40 {
            dlq.push(dlq_message(&format!("m{i}"), now_ms(), &[]));
        }
        alarms.set("replays-failing", false, Duration::from_secs(3600), 10.0);
        let flip = alarms.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            flip.set("replays-failing", true, Duration::ZERO, 10.0);
        });
        let r = Redriver::new(&dlq, &store, alarms.as_ref(), cfg.clone())
            .with_receive_wait(0)
            .with_breaker_recheck(Duration::from_millis(200));
        let summary = r
            .run(
                &RunRequest::defaults(&cfg),
                Instant::now() + Duration::from_secs(60),
            )
            .await;
        // THEN replay stopped soon after the alarm fired; the rest stays in the DLQ, visible
        assert!(summary.paused, "{summary:?}");
        assert!(
            summary.redriven >= 10 && summary.redriven < 40,
            "{summary:?}"
        );
        assert_eq!(dlq.len() as u64, 40 - summary.redriven);
        assert_eq!(dlq.visible(), dlq.len());
        assert!(alarms.reads() >= 2);
    }

    #[tokio::test]
    async fn after_the_alarm_clears_a_run_replays_a_probe_not_its_budget() {
        // GIVEN 100 replayable messages and the breaker's alarm back in OK two minutes ago
        // (threshold 4 a minute)
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        for i in 0..100 {
            dlq.push(dlq_message(&format!("m{i}"), now_ms(), &[]));
        }
        alarms.set("replays-failing", false, Duration::from_secs(120), 4.0);
        // WHEN a scheduled run happens
        let probe = scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN it replays a probe of 10: twice what trips the alarm again if they fail
        assert_eq!((probe.redriven, probe.probe), (10, Some(10)), "{probe:?}");
        assert!(!probe.paused);
        // AND once the alarm has been OK for a while, runs replay with their full budget
        alarms.set("replays-failing", false, Duration::from_secs(3600), 4.0);
        let full = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!((full.redriven, full.probe), (90, None));
    }

    #[tokio::test]
    async fn a_failed_fifo_send_holds_the_rest_of_its_group() {
        // GIVEN a FIFO pipeline: group A (a1 a2 a3) and B (b1 b2); a1's send fails
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        let mut cfg = config(&[]);
        cfg.common.main_queue_url = "http://127.0.0.1/1/orders.fifo".into();
        cfg.common.dlq_url = "http://127.0.0.1/1/orders-dlq.fifo".into();
        for (id, g) in [
            ("a1", "A"),
            ("b1", "B"),
            ("a2", "A"),
            ("a3", "A"),
            ("b2", "B"),
        ] {
            let mut m = dlq_message(id, now_ms(), &[]);
            m.attributes.insert("MessageGroupId".into(), g.into());
            dlq.push(m);
        }
        dlq.fail_sends(|c| c.body.contains("a1"));
        let first = scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN group B went, in order; A's later messages waited behind a1
        let order = |dlq: &MemoryDlq| -> Vec<String> {
            dlq.main()
                .iter()
                .map(|c| {
                    c.body
                        .trim_start_matches("{\"orderId\":\"")
                        .trim_end_matches("\"}")
                        .to_owned()
                })
                .collect()
        };
        assert_eq!(order(&dlq), vec!["b1", "b2"], "{first:?}");
        assert_eq!((first.failed, first.skipped), (1, 2));
        assert_eq!(dlq.ids(), vec!["a1", "a2", "a3"]);
        // AND once sends go through again, the whole group follows in order
        dlq.fail_sends(|_| false);
        scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!(order(&dlq), vec!["b1", "b2", "a1", "a2", "a3"]);
        assert!(dlq.is_empty());
    }

    #[tokio::test]
    async fn a_slow_sqs_cannot_make_the_run_late() {
        // GIVEN an SQS that takes 2 s per call and a 3 s budget (margin 1 s)
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        for i in 0..30 {
            dlq.push(dlq_message(&format!("m{i}"), now_ms(), &[]));
        }
        dlq.set_delay(Duration::from_secs(2));
        let cfg = config(&[]);
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone()).with_receive_wait(0);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(3);
        let summary = r.run(&RunRequest::defaults(&cfg), deadline).await;
        // THEN the summary comes before the deadline, whatever was left undone
        assert!(Instant::now() < deadline, "{:?}", started.elapsed());
        assert_eq!(summary.stopped_by, StopReason::Deadline, "{summary:?}");
        // nothing unconfirmed was deleted: every message is still in the DLQ or in the main queue
        assert_eq!(dlq.len() + dlq.main().len(), 30);
    }

    #[tokio::test]
    async fn returned_replays_are_counted_once_by_the_run_that_moves_them() {
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        let cfg = config(&[]);
        let now = now_ms();
        let mut kept = permanent("VALIDATION_FAILED");
        kept.push((X_REDRIVE_COUNT, AttributeValue::number(1)));
        dlq.push(dlq_message("kept-returned", now, &kept));
        dlq.push(dlq_message(
            "returned",
            now,
            &[(X_REDRIVE_COUNT, AttributeValue::number(1))],
        ));
        let first = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!(first.returned, 1, "only the one moved: {first:?}");
        // the kept one is seen again by later runs (when it reappears), never counted while kept
        dlq.advance(Duration::from_secs(13 * 3600));
        let second = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!((second.received, second.returned), (1, 0), "{second:?}");
    }

    #[tokio::test]
    async fn a_selective_run_brings_back_the_kept_messages_of_its_reason() {
        // GIVEN a scheduled run kept (and hid) two permanent failures of different reasons
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        let cfg = config(&[]);
        dlq.push(dlq_message(
            "fixed",
            now_ms(),
            &permanent("VALIDATION_FAILED"),
        ));
        dlq.push(dlq_message("other", now_ms(), &permanent("MALFORMED_JSON")));
        let first = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!((first.kept, dlq.visible()), (2, 0));
        // a dry run first says what it would bring back, and changes nothing
        let dry = RunRequest {
            dry_run: true,
            reason: Some("VALIDATION_FAILED".into()),
            ..RunRequest::defaults(&cfg)
        };
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone()).with_receive_wait(0);
        let summary = r.run(&dry, Instant::now() + Duration::from_secs(60)).await;
        assert_eq!((summary.unhidden, summary.redriven), (1, 0), "{summary:?}");
        assert_eq!(dlq.visible(), 0, "a dry run changes nothing");
        // WHEN an operator replays VALIDATION_FAILED after a fix
        let request = RunRequest {
            reason: Some("VALIDATION_FAILED".into()),
            ..RunRequest::defaults(&cfg)
        };
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone()).with_receive_wait(0);
        let summary = r
            .run(&request, Instant::now() + Duration::from_secs(60))
            .await;
        // THEN that one is made visible and replayed at once; the other stays hidden
        assert_eq!((summary.unhidden, summary.redriven), (1, 1), "{summary:?}");
        assert_eq!(dlq.ids(), vec!["other"]);
        assert_eq!(dlq.visible(), 0);
    }

    #[tokio::test]
    async fn no_message_is_hidden_that_the_keep_list_does_not_name() {
        // GIVEN a bucket that takes no writes
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        store.set_failing(true);
        let cfg = config(&[]);
        for i in 0..3 {
            dlq.push(dlq_message(
                &format!("k{i}"),
                now_ms(),
                &permanent("MALFORMED_JSON"),
            ));
        }
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN the kept messages are left visible (an operator can peek them), not hidden
        assert_eq!(summary.kept, 3);
        assert_eq!(dlq.visible(), 3);
    }

    #[tokio::test]
    async fn kept_hides_stay_within_twelve_hours_of_the_receive() {
        // GIVEN a TTL of 13 days: a kept message's TTL is far beyond SQS's 12 h
        let (dlq, store, alarms) = (
            MemoryDlq::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        );
        let cfg = config(&[("ARCHIVE_AFTER_SECONDS", "1123200")]);
        dlq.push(dlq_message("k", now_ms(), &permanent("MALFORMED_JSON")));
        scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN the hide was accepted (the double rejects more than 12 h from the receive)
        assert_eq!(dlq.visible(), 0);
        dlq.advance(Duration::from_secs(12 * 3600));
        assert_eq!(dlq.visible(), 1, "back after at most 12 h");
    }
}
