//! A run's summary (docs/design.md, "Run summary"), counted from its plans and what the
//! settle executor reported: [`Run`] is a run as it goes, changed only by the pure steps here
//! (a breaker verdict, a cycle's report, a keep plan's report), never inside I/O. The metrics
//! come from the summary.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use resq::config::RedriverConfig;
use resq::keep::KeptMessage;
use resq::metrics::{self, Metrics};
use resq::reason::{ArchiveReason, ErrorCode};
use resq::settle::{ActionId, Confirmation, Report, SettleError, Unattempted};
use resq::sqs::ReceivedMessage;
use serde::{Deserialize, Serialize};

use crate::breaker::Breaker;
use crate::classify::{self, Rules};
use crate::plan::{self, Cycle, Fate, Held, Limits, PendingKeep, QueueUrls};
use crate::request::RunRequest;

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The DLQ had nothing more to receive.
    Empty,
    /// A dry run's `maxMessages` were counted (a run that changes things reads on, to archive).
    MaxMessages,
    /// The Lambda deadline margin was reached.
    Deadline,
    /// `ReceiveMessage` failed.
    ReceiveError,
    /// The messages the run holds hidden (with the kept ones) reached its in-flight limit:
    /// SQS hands out nothing past its in-flight quota, so the run stops receiving before it.
    InFlightLimit,
}

impl StopReason {
    /// Its name in the summary (`empty`, `maxMessages`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Empty => "empty",
            StopReason::MaxMessages => "maxMessages",
            StopReason::Deadline => "deadline",
            StopReason::ReceiveError => "receiveError",
            StopReason::InFlightLimit => "inFlightLimit",
        }
    }
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
    /// Moved, but the DLQ delete failed. A replayed one is made visible again at once: when
    /// this run receives it again it only deletes it; one a later run receives is sent again
    /// (a FIFO main queue deduplicates that within its 5-minute interval; the consumer is
    /// idempotent by orderId in any case). An archived one finds its entry.
    pub delete_failed: u64,
    /// Dead letters without a reason (`x-failure-class`) this run saw first: moved, or given
    /// their reason (`DeadLetteredUnexplained`).
    #[serde(default)]
    pub unexplained: u64,
    /// Kept permanent failures hidden in the DLQ at the end of the run (`Kept`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_in_flight: Option<u64>,
    /// Replay has been paused longer than the pausing alarm's hold, or by an alarm that could
    /// not be read (`RedrivePausedTooLong`).
    #[serde(default)]
    pub paused_too_long: bool,
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

impl Summary {
    /// Logs the summary: one INFO line `redrive run done` whose fields are the summary's, each
    /// a top-level key in the logs' one key style, snake_case (`received`, `delete_failed`, …;
    /// the returned summary, an API, keeps its camelCase), the archive entries by reason as
    /// `archived_{reason}` in lowercase (`archived_ttl_expired`; the reasons with entries only),
    /// so Logs Insights filters and sums on them. (tracing's JSON lines write no nested object
    /// without its unstable `valuable` support, and a JSON string cannot be filtered on.)
    pub fn log(&self) {
        let archived = |reason: ArchiveReason| self.archived.get(&reason).copied();
        tracing::info!(
            dry_run = self.dry_run,
            paused = self.paused,
            pause_reason = self.pause_reason.as_deref(),
            probe = self.probe,
            received = self.received,
            redriven = self.redriven,
            archived_redrive_cap = archived(ArchiveReason::RedriveCap),
            archived_invalid_redrive_count = archived(ArchiveReason::InvalidRedriveCount),
            archived_ttl_expired = archived(ArchiveReason::TtlExpired),
            archived_attribute_limit = archived(ArchiveReason::AttributeLimit),
            archived_permanent_failure = archived(ArchiveReason::PermanentFailure),
            archived_size_limit = archived(ArchiveReason::SizeLimit),
            archived_idempotency_window = archived(ArchiveReason::IdempotencyWindow),
            archived_unreadable_record = archived(ArchiveReason::UnreadableRecord),
            skipped = self.skipped,
            kept = self.kept,
            unhidden = self.unhidden,
            failed = self.failed,
            returned = self.returned,
            delete_failed = self.delete_failed,
            unexplained = self.unexplained,
            kept_in_flight = self.kept_in_flight,
            paused_too_long = self.paused_too_long,
            elapsed_ms = self.elapsed_ms,
            rate_per_second = self.rate_per_second,
            achieved_rate_per_second = self.achieved_rate_per_second,
            stopped_by = self.stopped_by.as_str(),
            "redrive run done"
        );
    }

    /// The run's metrics.
    pub fn metrics(&self) -> Metrics {
        let names = [
            metrics::REDRIVEN,
            metrics::REDRIVE_SKIPPED,
            metrics::REDRIVE_FAILED,
            metrics::REDRIVE_PAUSED,
            metrics::ARCHIVED,
            metrics::DEAD_LETTERED_UNEXPLAINED,
            metrics::REDRIVE_PAUSED_TOO_LONG,
        ];
        let mut m = Metrics::new(&names);
        m.add(metrics::REDRIVEN, self.redriven);
        m.add(metrics::REDRIVE_SKIPPED, self.skipped);
        m.add(metrics::REDRIVE_FAILED, self.failed);
        m.add(metrics::REDRIVE_PAUSED, u64::from(self.paused));
        m.add(metrics::DEAD_LETTERED_UNEXPLAINED, self.unexplained);
        m.add(
            metrics::REDRIVE_PAUSED_TOO_LONG,
            u64::from(self.paused_too_long),
        );
        if let Some(kept) = self.kept_in_flight {
            m.add(metrics::KEPT, kept);
        }
        for (reason, n) in &self.archived {
            m.add_archived_n(*reason, *n);
        }
        m
    }
}

/// A received message's (message id, receipt handle).
pub type Receipt = (String, String);

/// One replay a run confirmed, as an operator's canary follows it
/// ([`crate::Redriver::run_listed`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replayed {
    /// The DLQ message replayed.
    pub dlq_message_id: String,
    /// The copy's id in the main queue, when SQS gave it.
    pub message_id: Option<String>,
    /// The body's `orderId`, when it has one.
    pub order_id: Option<String>,
    /// The copy's `x-redrive-count`.
    pub redrive_count: Option<u64>,
    /// The failure reason the DLQ message had.
    pub failure_reason: Option<String>,
}

/// A run as it goes: its summary so far, its rules and budget, and what it holds.
#[derive(Debug)]
pub struct Run {
    summary: Summary,
    /// The rules its cycles classify by (the breaker may pause it).
    pub rules: Rules,
    max_messages: u64,
    /// Copies sent or attempted: what counts against `maxMessages`. Archiving does not
    /// (expired messages must not starve replay, nor fresh ones their archiving), nor do kept
    /// or unselected messages.
    replays: u64,
    /// Replays and kept messages planned by cycles still in flight.
    reserved: (u64, u64),
    /// `KEPT_IN_FLIGHT_MAX`.
    kept_max: u64,
    /// Kept messages hidden now (by earlier runs, from their keep lists, and by this one);
    /// `None` when the keep lists could not be read.
    kept_hidden: Option<u64>,
    /// DLQ message ids whose replay this run confirmed and whose delete did not go through
    /// (only those: a run at 3,000/s confirms millions of replays).
    replayed: HashSet<String>,
    /// DLQ message ids planned by cycles in flight: a standard queue may hand one message to
    /// two receives at once, and a second receipt must not be planned again.
    in_flight: HashSet<String>,
    /// Replayed messages whose delete failed, to make visible again at once.
    release_now: Vec<Receipt>,
    held: Vec<Receipt>,
    pending: Vec<PendingKeep>,
    /// The first send call and how many it confirmed, and the last send call.
    sends: Option<((Instant, u64), Instant)>,
    /// The replays confirmed, when the run lists them (`None`: it does not; a scheduled run
    /// at 3,000/s would hold millions).
    listed: Option<Vec<Replayed>>,
}

impl Run {
    /// A run of `request` under `config`, with `time` to start work in (`auto`: the budget is
    /// what the rate allows in that time).
    pub fn new(request: &RunRequest, config: &RedriverConfig, time: Duration) -> Self {
        Self {
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
                unexplained: 0,
                kept_in_flight: None,
                paused_too_long: false,
                elapsed_ms: 0,
                rate_per_second: request.rate_per_second,
                achieved_rate_per_second: None,
                stopped_by: StopReason::Empty,
            },
            rules: Rules {
                max_redrive_attempts: config.common.max_redrive_attempts,
                archive_after: config.archive_after,
                permanent_action: config.permanent_action,
                reason: request.reason.clone(),
                older_than: request.older_than,
                paused: false,
            },
            max_messages: request.max_messages.map_or_else(
                || plan::auto_budget(request.rate_per_second, time),
                u64::from,
            ),
            replays: 0,
            reserved: (0, 0),
            kept_max: config.kept_in_flight_max,
            kept_hidden: None,
            replayed: HashSet::new(),
            in_flight: HashSet::new(),
            release_now: Vec::new(),
            held: Vec::new(),
            pending: Vec::new(),
            sends: None,
            listed: None,
        }
    }

    /// Takes the breaker's verdict: open pauses replay (archiving goes on), half-open lowers
    /// the budget to a probe.
    pub fn apply(&mut self, verdict: Breaker) {
        match verdict {
            Breaker::Closed => {}
            Breaker::Open { reason, too_long } => {
                match too_long {
                    true => {
                        tracing::error!(error_code = ErrorCode::BreakerUnreadable.code(), reason = %reason, "replay paused longer than the alarm's hold, or by an alarm that cannot be read; archiving goes on")
                    }
                    false => {
                        tracing::warn!(reason = %reason, "replay paused by the circuit breaker; archiving goes on")
                    }
                }
                self.summary.paused = true;
                self.summary.paused_too_long |= too_long;
                self.summary.pause_reason = Some(reason);
                self.rules.paused = true;
            }
            Breaker::HalfOpen { budget, reason } if u64::from(budget) < self.max_messages => {
                tracing::warn!(reason = %reason, budget, "replaying a probe only");
                self.max_messages = u64::from(budget);
                self.summary.probe = Some(budget);
            }
            Breaker::HalfOpen { .. } => {}
        }
    }

    /// Lists every replay this run confirms ([`Run::take_listed`] hands them over).
    pub fn list_replays(&mut self) {
        self.listed.get_or_insert_with(Vec::new);
    }

    /// The replays listed so far (none when the run does not list them).
    pub fn take_listed(&mut self) -> Vec<Replayed> {
        self.listed.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Replays left in the budget (less those planned by cycles in flight).
    pub fn budget(&self) -> u64 {
        self.max_messages
            .saturating_sub(self.replays)
            .saturating_sub(self.reserved.0)
    }

    /// Replays planned by cycles in flight and not yet counted.
    pub fn planned(&self) -> u64 {
        self.reserved.0
    }

    /// How many kept messages earlier runs left hidden (`None`: not known), less the ones this
    /// run made visible again.
    pub fn kept_hidden_before(&mut self, hidden: Option<u64>, unhidden: u64) {
        self.kept_hidden = hidden.map(|h| h.saturating_sub(unhidden));
        self.summary.kept_in_flight = self.kept_hidden;
    }

    /// Messages the run holds hidden in the DLQ: held for the run, kept (hidden or waiting to
    /// be), and those in cycles in flight are the engine's to add.
    pub fn hidden(&self) -> u64 {
        (self.held.len() + self.pending.len()) as u64 + self.kept_hidden.unwrap_or(self.kept_max)
    }

    /// Whether the run is a dry run.
    pub fn is_dry_run(&self) -> bool {
        self.summary.dry_run
    }

    /// The plan of a received batch, under the run's rules, budget and room for kept messages;
    /// what it plans is reserved until [`Run::account`] counts it.
    pub fn plan(
        &mut self,
        batch: Vec<ReceivedMessage>,
        queues: &QueueUrls,
        now_ms: u64,
        received_at: Instant,
    ) -> Cycle {
        let kept_room = self.kept_hidden.map(|hidden| {
            self.kept_max
                .saturating_sub(hidden + self.pending.len() as u64 + self.reserved.1)
        });
        let limits = Limits {
            budget: self.budget(),
            dry_run: self.summary.dry_run,
            now_ms,
            kept_room,
        };
        let cycle = plan::cycle(
            batch,
            &self.rules,
            queues,
            limits,
            received_at,
            &self.replayed,
            &self.in_flight,
        );
        for (m, fate) in &cycle.items {
            if !matches!(fate, Fate::Held(Held::InFlight)) {
                self.in_flight.insert(m.message_id.clone());
            }
        }
        let (replays, kept) = reserved(&cycle);
        self.reserved = (self.reserved.0 + replays, self.reserved.1 + kept);
        cycle
    }

    /// Kept messages made visible for this run.
    pub fn unhidden(&mut self, count: u64) {
        self.summary.unhidden = count;
    }

    /// Why the run ends.
    pub fn stop(&mut self, why: StopReason) {
        self.summary.stopped_by = why;
    }

    /// Counts a cycle from what the executor reported (`None`: a dry run, nothing settled).
    /// Returns whether the cycle ran out of time (a copy that could not start, or was not
    /// answered, before its deadline).
    pub fn account(&mut self, cycle: Cycle, report: Option<&Report>) -> bool {
        let (replays, kept) = reserved(&cycle);
        self.reserved = (
            self.reserved.0.saturating_sub(replays),
            self.reserved.1.saturating_sub(kept),
        );
        self.summary.received += cycle.items.len() as u64;
        let refused = report
            .map(|r| refused_groups(&cycle, r))
            .unwrap_or_default();
        for (m, fate) in &cycle.items {
            if !matches!(fate, Fate::Held(Held::InFlight)) {
                self.in_flight.remove(&m.message_id);
            }
        }
        let mut out_of_time = false;
        for (m, fate) in cycle.items {
            if !m.dropped_attributes.is_empty() {
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(&m), dropped = %m.dropped_attributes.join(", "), "list-valued attributes are not supported by SQS and are not copied");
            }
            match (fate, report) {
                (Fate::Held(held), _) => self.held(m, held),
                (Fate::Kept(until), _) => self.kept(m, until, cycle.received_at),
                (Fate::Redrive { copy, delete }, Some(r)) => {
                    let behind_refused = m.group_id().is_some_and(|g| refused.contains(g));
                    out_of_time |= self.redriven(&m, r, copy, delete, behind_refused);
                }
                (
                    Fate::Archive {
                        reason,
                        write,
                        delete,
                    },
                    Some(r),
                ) => self.archived(&m, r, reason, write, delete),
                (Fate::Explain { copy, delete }, Some(r)) => self.explained(&m, r, copy, delete),
                (Fate::ReplayedBefore { delete }, Some(r)) => {
                    self.deleted(&m, r.get(delete), false)
                }
                (_, None) => self.hold(&m),
            }
        }
        out_of_time
    }

    fn held(&mut self, m: ReceivedMessage, held: Held) {
        match held {
            Held::NotSelected | Held::Paused => {
                tracing::debug!(message_id = %m.message_id, correlation_id = correlation_id(&m), held = ?held, "left in the DLQ");
                self.summary.skipped += 1;
            }
            Held::OverBudget => {}
            Held::InFlight => {
                tracing::debug!(message_id = %m.message_id, correlation_id = correlation_id(&m), "received again while this run settles it; released");
            }
            Held::WouldRedrive => {
                self.replays += 1;
                self.summary.redriven += 1;
            }
            Held::WouldArchive(reason) => *self.summary.archived.entry(reason).or_default() += 1,
        }
        self.hold(&m);
    }

    fn kept(&mut self, m: ReceivedMessage, until: Option<u64>, received_at: Instant) {
        self.summary.skipped += 1;
        self.summary.kept += 1;
        match until {
            Some(until_ms) if !self.summary.dry_run => self.pending.push(PendingKeep {
                kept: KeptMessage {
                    order_id: correlation_id(&m),
                    failure_reason: m.failure_reason().map(str::to_owned),
                    first_sent_at: m.first_sent_at(),
                    message_id: m.message_id,
                    receipt_handle: m.receipt_handle,
                    hidden_until: until_ms,
                },
                until_ms,
                received_at,
            }),
            _ => self.hold(&m),
        }
    }

    /// A redrive: its replay confirmed, refused (held for the run), unanswered (it reappears
    /// by itself) or not attempted. Returns whether it ran out of time.
    fn redriven(
        &mut self,
        m: &ReceivedMessage,
        r: &Report,
        copy: ActionId,
        delete: ActionId,
        behind_refused: bool,
    ) -> bool {
        let attempted = r.started_at(copy);
        if let Some(at) = attempted {
            self.replays += 1;
            self.note_send(at, r.is_confirmed(copy));
        }
        match r.get(copy) {
            Confirmation::Confirmed(new_id) => {
                tracing::info!(message_id = %m.message_id, new_message_id = new_id.as_deref(), correlation_id = correlation_id(m), redrive_count = classify::next_redrive_count(m).ok(), "redriven");
                self.summary.redriven += 1;
                self.summary.returned += u64::from(classify::is_returned_replay(m));
                self.summary.unexplained += u64::from(classify::is_unexplained(m));
                if let Some(listed) = &mut self.listed {
                    listed.push(Replayed {
                        dlq_message_id: m.message_id.clone(),
                        message_id: new_id.clone(),
                        order_id: correlation_id(m),
                        redrive_count: classify::next_redrive_count(m).ok(),
                        failure_reason: m.failure_reason().map(str::to_owned),
                    });
                }
                if !r.is_confirmed(delete) {
                    self.replayed.insert(m.message_id.clone());
                }
                self.deleted(m, r.get(delete), true);
                false
            }
            Confirmation::Failed(SettleError::Refused(why)) => {
                self.summary.failed += 1;
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(m), error_code = ErrorCode::RedriveSendFailed.code(), error_details = %why, "not redriven; left in the DLQ");
                self.hold(m);
                false
            }
            // unknown whether SQS took it: neither deleted nor released; it reappears after
            // its visibility timeout and a later run sends it again (a FIFO main queue
            // deduplicates that within its 5-minute interval; the consumer is idempotent by
            // orderId in any case)
            Confirmation::Failed(SettleError::Unanswered) => {
                self.summary.failed += 1;
                true
            }
            // behind a send of its FIFO group that did not go: it waits for a later run (left
            // on purpose, and so skipped, when SQS refused that send; behind one not answered
            // in time it is only held)
            Confirmation::NotAttempted(Unattempted::Held) => {
                self.summary.skipped += u64::from(behind_refused);
                self.hold(m);
                false
            }
            Confirmation::NotAttempted(Unattempted::OutOfTime) => {
                self.hold(m);
                true
            }
        }
    }

    /// An archive entry: written (then deleted), refused (held for the run), or not written in
    /// time (it reappears by itself).
    fn archived(
        &mut self,
        m: &ReceivedMessage,
        r: &Report,
        reason: ArchiveReason,
        write: ActionId,
        delete: ActionId,
    ) {
        match r.get(write) {
            Confirmation::Confirmed(key) => {
                tracing::info!(message_id = %m.message_id, correlation_id = correlation_id(m), reason = reason.code(), key = key.as_deref(), "archived");
                *self.summary.archived.entry(reason).or_default() += 1;
                self.summary.returned += u64::from(classify::is_returned_replay(m));
                self.summary.unexplained += u64::from(classify::is_unexplained(m));
                self.deleted(m, r.get(delete), false);
            }
            Confirmation::Failed(SettleError::Refused(why)) => {
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(m), error_code = ErrorCode::ArchiveFailed.code(), error_details = %why, "not archived; left in the DLQ");
                self.summary.failed += 1;
                self.hold(m);
            }
            _ => self.summary.failed += 1,
        }
    }

    /// An unexplained dead letter held by the run: counted once its copy with a reason is in
    /// the DLQ (then it is deleted); left as it is, and held, when that copy did not go.
    fn explained(&mut self, m: &ReceivedMessage, r: &Report, copy: ActionId, delete: ActionId) {
        self.summary.skipped += 1;
        match r.get(copy) {
            Confirmation::Confirmed(id) => {
                tracing::info!(message_id = %m.message_id, new_message_id = id.as_deref(), correlation_id = correlation_id(m), reason = resq::reason::FailureReason::InvocationFailed.code(), "dead letter without a reason: its copy in the DLQ now says why");
                self.summary.unexplained += 1;
                // like a replay: one whose delete failed is made visible again at once, and
                // when this run receives it again it is only deleted (not explained twice)
                if !r.is_confirmed(delete) {
                    self.replayed.insert(m.message_id.clone());
                }
                self.deleted(m, r.get(delete), true);
            }
            Confirmation::Failed(SettleError::Unanswered) => {}
            _ => self.hold(m),
        }
    }

    /// A moved message's delete. One not confirmed leaves it to be seen again: an archive
    /// finds its entry; a replay (or an explained dead letter) is made visible again at once
    /// (`replay`), and when this run receives it again it is only deleted.
    fn deleted(&mut self, m: &ReceivedMessage, delete: &Confirmation, replay: bool) {
        if replay && !delete.is_confirmed() {
            self.release_now
                .push((m.message_id.clone(), m.receipt_handle.clone()));
        }
        match delete {
            Confirmation::Confirmed(_) => {}
            Confirmation::Failed(SettleError::Refused(why)) => {
                self.summary.delete_failed += 1;
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(m), error_code = ErrorCode::DlqDeleteFailed.code(), error_details = %why, "moved but not deleted from the DLQ; it will be seen again (an archive finds its entry; a replay is sent again)");
            }
            _ => {
                self.summary.delete_failed += 1;
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(m), error_code = ErrorCode::DlqDeleteDeadline.code(), "delete not confirmed before the deadline margin; it will be seen again (an archive finds its entry; a replay is sent again)");
            }
        }
    }

    fn note_send(&mut self, at: Instant, confirmed: bool) {
        let confirmed = u64::from(confirmed);
        self.sends = Some(match self.sends {
            None => ((at, confirmed), at),
            Some(((first, n), last)) if at == first => ((first, n + confirmed), last.max(at)),
            Some(((first, _), last)) if at < first => ((at, confirmed), last.max(first)),
            Some((first, last)) => (first, last.max(at)),
        });
    }

    fn hold(&mut self, m: &ReceivedMessage) {
        self.held
            .push((m.message_id.clone(), m.receipt_handle.clone()));
    }

    /// Replayed messages whose delete failed, to make visible again now.
    pub fn take_release_now(&mut self) -> Vec<Receipt> {
        std::mem::take(&mut self.release_now)
    }

    /// Kept messages waiting to be listed and hidden.
    pub fn pending_keeps(&self) -> usize {
        self.pending.len()
    }

    /// Takes the kept messages waiting to be listed and hidden.
    pub fn take_pending_keeps(&mut self) -> Vec<PendingKeep> {
        std::mem::take(&mut self.pending)
    }

    /// Counts a keep plan from what the executor reported: a message whose listing was not
    /// confirmed is not hidden either, and is released at the end of the run (released
    /// earlier, the run would read it again).
    pub fn account_keeps(&mut self, entries: &[(KeptMessage, ActionId, ActionId)], r: &Report) {
        let unlisted: Vec<&KeptMessage> = entries
            .iter()
            .filter(|(_, listed, _)| !r.is_confirmed(*listed))
            .map(|(k, _, _)| k)
            .collect();
        if let Some((_, listed, _)) = entries.iter().find(|(_, l, _)| !r.is_confirmed(*l)) {
            tracing::warn!(error_code = ErrorCode::KeepListFailed.code(), error_details = %describe(r.get(*listed)), count = unlisted.len(), "keep list not written: kept messages are released after the run, not hidden (a hidden message must be reachable)");
        }
        for k in unlisted {
            self.held
                .push((k.message_id.clone(), k.receipt_handle.clone()));
        }
        let hidden = entries
            .iter()
            .filter(|(_, _, h)| r.is_confirmed(*h))
            .count() as u64;
        if let Some(before) = self.kept_hidden {
            self.kept_hidden = Some(before + hidden);
            self.summary.kept_in_flight = self.kept_hidden;
        }
        let not_hidden = entries
            .iter()
            .filter(|(_, l, h)| r.is_confirmed(*l) && !r.is_confirmed(*h))
            .count();
        if not_hidden > 0 {
            tracing::warn!(
                error_code = ErrorCode::KeepHideDeadline.code(),
                count = not_hidden,
                "kept messages not hidden; they come back after the run"
            );
        }
    }

    /// Takes what the run holds, to release at its end.
    pub fn take_held(&mut self) -> Vec<Receipt> {
        std::mem::take(&mut self.held)
    }

    /// The summary, once the run took `elapsed`.
    pub fn finish(mut self, elapsed: Duration) -> Summary {
        if let Some(((first, in_first), last)) = self.sends {
            let secs = last.duration_since(first).as_secs_f64();
            if secs > 0.0 {
                // What the first send carried was paid for before it; the rest after it.
                let after_first = self.summary.redriven.saturating_sub(in_first);
                self.summary.achieved_rate_per_second = Some(after_first as f64 / secs);
            }
        }
        self.summary.elapsed_ms = elapsed.as_millis() as u64;
        self.summary
    }
}

/// A DLQ message's business id (`correlation_id`): the body field of this process's
/// correlation key (`orderId`, or `RESQ_CORRELATION_KEY` / `RESQ_CORRELATION_FIELD`'s), when
/// it has one (read only for a line that is written).
fn correlation_id(m: &ReceivedMessage) -> Option<String> {
    resq::telemetry::current().correlation.read(&m.body)
}

/// The replays and the kept messages to hide a cycle planned.
fn reserved(cycle: &Cycle) -> (u64, u64) {
    let count =
        |f: fn(&Fate) -> bool| cycle.items.iter().filter(|(_, fate)| f(fate)).count() as u64;
    (
        count(Fate::is_replay),
        count(|f| matches!(f, Fate::Kept(Some(_)))),
    )
}

/// The FIFO groups of a cycle with a replay SQS refused.
fn refused_groups(cycle: &Cycle, r: &Report) -> HashSet<String> {
    let refused = |copy| matches!(r.get(copy), Confirmation::Failed(SettleError::Refused(_)));
    cycle
        .items
        .iter()
        .filter(|(_, fate)| matches!(fate, Fate::Redrive { copy, .. } if refused(*copy)))
        .filter_map(|(m, _)| m.group_id().map(str::to_owned))
        .collect()
}

fn describe(c: &Confirmation) -> String {
    match c {
        Confirmation::Failed(e) => e.to_string(),
        _ => "not attempted before the deadline margin".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::testing::CapturedLogs;
    use serde_json::Value;

    /// A summary with every field set, every archive reason counted.
    fn full() -> Summary {
        Summary {
            dry_run: false,
            paused: true,
            pause_reason: Some("replays-failing is in ALARM".into()),
            probe: Some(10),
            received: 120,
            redriven: 40,
            archived: ArchiveReason::ALL
                .into_iter()
                .zip(1..)
                .collect::<BTreeMap<_, _>>(),
            skipped: 30,
            kept: 20,
            unhidden: 2,
            failed: 3,
            returned: 4,
            delete_failed: 5,
            unexplained: 6,
            kept_in_flight: Some(700),
            paused_too_long: true,
            elapsed_ms: 8_123,
            rate_per_second: 10.0,
            achieved_rate_per_second: Some(9.75),
            stopped_by: StopReason::InFlightLimit,
        }
    }

    /// The `redrive run done` line `summary` logs, parsed.
    fn logged(summary: &Summary) -> serde_json::Map<String, Value> {
        let (logs, _guard) = CapturedLogs::start();
        summary.log();
        let mut lines = logs.with_message("redrive run done");
        assert_eq!(lines.len(), 1, "{:?}", logs.lines());
        match lines.pop() {
            Some(Value::Object(line)) => line,
            other => panic!("{other:?}"),
        }
    }

    /// `dryRun` → `dry_run`.
    fn snake_case(camel: &str) -> String {
        let mut out = String::new();
        for c in camel.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    }

    /// Every field of the returned summary is a field of the line, under the same name in
    /// snake_case with the same value (`archived` by reason as `archived_{reason}`), and the
    /// line has nothing else but its level, time, message and the process's keys.
    fn assert_logged_as_returned(summary: &Summary) {
        let line = logged(summary);
        let Value::Object(returned) = serde_json::to_value(summary).unwrap() else {
            panic!("a summary is an object");
        };
        let mut expected = serde_json::Map::new();
        for (key, value) in returned {
            match (key.as_str(), value) {
                ("archived", Value::Object(by_reason)) => {
                    for (reason, n) in by_reason {
                        expected.insert(format!("archived_{}", reason.to_lowercase()), n);
                    }
                }
                (_, value) => _ = expected.insert(snake_case(&key), value),
            }
        }
        let mut fields = line.clone();
        for meta in [
            "timestamp",
            "level",
            "message",
            "service",
            "function_name",
            "function_memory_size",
        ] {
            assert!(fields.remove(meta).is_some(), "{meta} in {line:?}");
        }
        assert_eq!(fields, expected);
    }

    #[test]
    fn the_summary_is_logged_as_fields_named_as_it_is_returned() {
        let summary = full();
        assert_logged_as_returned(&summary);
        let line = logged(&summary);
        // numbers are numbers (Logs Insights filters and sums them), not a JSON string
        assert_eq!(line["received"], 120);
        assert_eq!(line["archived_ttl_expired"], 3);
        assert_eq!(line["achieved_rate_per_second"], 9.75);
        assert_eq!(line["stopped_by"], "inFlightLimit");
        assert!(!line.contains_key("summary"), "{line:?}");
        // a quiet run: no reason archived, nothing unknown
        let quiet = Summary {
            paused: false,
            pause_reason: None,
            probe: None,
            archived: BTreeMap::new(),
            kept_in_flight: None,
            achieved_rate_per_second: None,
            ..full()
        };
        assert_logged_as_returned(&quiet);
        let line = logged(&quiet);
        assert!(!line.keys().any(|k| k.starts_with("archived")), "{line:?}");
    }

    #[test]
    fn every_stop_reason_is_logged_as_it_is_returned() {
        for stopped_by in [
            StopReason::Empty,
            StopReason::MaxMessages,
            StopReason::Deadline,
            StopReason::ReceiveError,
            StopReason::InFlightLimit,
        ] {
            assert_eq!(
                serde_json::to_value(stopped_by).unwrap(),
                stopped_by.as_str()
            );
        }
    }
}
