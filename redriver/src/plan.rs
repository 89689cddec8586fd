//! What a run does with what it received (docs/design.md, "Run loop"), as settle plans: a
//! cycle's replays (copy, then delete) and archive entries (write, then delete); the kept
//! messages (listed, then hidden until their TTL); what was held for the run (released at its
//! end). No I/O here: the engine hands the plans to the settle executor.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use resq::keep::KeptMessage;
use resq::reason::ArchiveReason;
use resq::settle::{Action, ActionId, Confirmation, Plan, QueueUrl, Report, SettleError};
use resq::sqs::ReceivedMessage;

use crate::backoff::{Answer, Call};
use crate::classify::{self, Rules, Verdict};

/// The two queues of a run.
#[derive(Debug, Clone)]
pub struct QueueUrls {
    /// The main queue, where replays go.
    pub main: QueueUrl,
    /// The DLQ, read and settled.
    pub dlq: QueueUrl,
}

impl QueueUrls {
    /// The queues at these URLs.
    pub fn new(main: &str, dlq: &str) -> Self {
        Self {
            main: QueueUrl::from(main),
            dlq: QueueUrl::from(dlq),
        }
    }
}

/// What is to become of one received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Redriven: its replay, then (once the replay is confirmed) its delete.
    Redrive {
        /// The copy to the main queue (the replay).
        copy: ActionId,
        /// Its delete from the DLQ.
        delete: ActionId,
    },
    /// Archived: its entry, then (once written) its delete.
    Archive {
        /// Why.
        reason: ArchiveReason,
        /// The archive entry.
        write: ActionId,
        /// Its delete from the DLQ.
        delete: ActionId,
    },
    /// A permanent failure kept for a human: hidden until its TTL (epoch millis) once listed,
    /// or, when that is not known (a FIFO DLQ, an unknown age), held for the run.
    Kept(Option<u64>),
    /// Left in the DLQ for now: released at the end of the run.
    Held(Held),
    /// A dead letter without a reason, held by this run: its copy carrying its reason
    /// (`x-failure-class=transient`, `INVOCATION_FAILED`) goes into the DLQ, then the message
    /// is deleted, so it is counted once (`DeadLetteredUnexplained`) and says why from then on.
    Explain {
        /// The copy into the DLQ.
        copy: ActionId,
        /// The delete of the message without a reason.
        delete: ActionId,
    },
    /// Received again after this run confirmed its replay (its delete had failed, and it was
    /// made visible again): deleted, not sent twice.
    ReplayedBefore {
        /// Its delete from the DLQ.
        delete: ActionId,
    },
}

impl Fate {
    /// Whether the fate takes a replay from the run's budget.
    pub fn is_replay(&self) -> bool {
        matches!(self, Fate::Redrive { .. } | Fate::Held(Held::WouldRedrive))
    }
}

/// Why a message is held for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Outside the run's selection.
    NotSelected,
    /// The breaker holds replay.
    Paused,
    /// The run's replay budget is spent.
    OverBudget,
    /// A dry run: it would have been redriven.
    WouldRedrive,
    /// A dry run: it would have been archived.
    WouldArchive(ArchiveReason),
    /// Received again while a cycle of this run settles it (a standard queue may hand one
    /// message to two receives at once): that cycle decides its fate, this receipt is released.
    InFlight,
}

/// One cycle: each received message with its fate (its actions are in the cycle's plan).
#[derive(Debug)]
pub struct Cycle {
    /// The messages received, in order, with what is to become of each.
    pub items: Vec<(ReceivedMessage, Fate)>,
    /// When they were received.
    pub received_at: Instant,
}

impl Cycle {
    /// The replays, and the kept messages to hide, it planned.
    pub fn reserved(&self) -> (u64, u64) {
        let count = |f: fn(&Fate) -> bool| self.items.iter().filter(|(_, fate)| f(fate)).count();
        let kept = |f: &Fate| matches!(f, Fate::Kept(Some(_)));
        (count(Fate::is_replay) as u64, count(kept) as u64)
    }

    /// The SQS calls that carried its copies and deletes, once each, as [`CycleLimit`] takes
    /// them in: a call answered (done or refused), throttled, or not answered (it timed out or
    /// broke). A call cut off by the run's deadline, or not attempted, says nothing of SQS.
    ///
    /// [`CycleLimit`]: crate::backoff::CycleLimit
    pub fn calls(&self, r: &Report) -> Vec<Call> {
        let mut calls: Vec<Call> = Vec::new();
        let ids = self.items.iter().flat_map(|(_, fate)| match *fate {
            Fate::Redrive { copy, delete } | Fate::Explain { copy, delete } => vec![copy, delete],
            Fate::Archive { delete, .. } | Fate::ReplayedBefore { delete } => vec![delete],
            Fate::Kept(_) | Fate::Held(_) => vec![],
        });
        for id in ids {
            let (Some(sent), Some(latency)) = (r.started_at(id), r.took(id)) else {
                continue;
            };
            let answer = match r.get(id) {
                Confirmation::Failed(SettleError::Refused(e)) if is_throttling(e) => {
                    Answer::Throttled
                }
                Confirmation::Failed(SettleError::Unanswered(Some(_))) => Answer::Unanswered,
                Confirmation::Failed(SettleError::Unanswered(None))
                | Confirmation::NotAttempted(_) => continue,
                Confirmation::Confirmed(_) | Confirmation::Failed(SettleError::Refused(_)) => {
                    Answer::Through
                }
            };
            // the entries of one batch call share its start and latency: one call, whose
            // answer is its worst entry's (a throttled entry is SQS throttling the call)
            match calls
                .iter_mut()
                .find(|c| (c.sent, c.latency) == (sent, latency))
            {
                Some(c) => c.answer = c.answer.max(answer),
                None => calls.push(Call {
                    sent,
                    latency,
                    answer,
                }),
            }
        }
        calls
    }

    /// Its FIFO groups with a replay SQS refused.
    pub fn refused_groups(&self, r: &Report) -> HashSet<String> {
        let refused = |copy| matches!(r.get(copy), Confirmation::Failed(SettleError::Refused(_)));
        self.items
            .iter()
            .filter(|(_, fate)| matches!(fate, Fate::Redrive { copy, .. } if refused(*copy)))
            .filter_map(|(m, _)| m.group_id().map(str::to_owned))
            .collect()
    }
}

/// SQS said it is throttling: `RequestThrottled`, `ThrottlingException`, `ServiceUnavailable`
/// (its HTTP 503), `RequestLimitExceeded`.
fn is_throttling(e: &resq::error::AwsError) -> bool {
    let code = e.code.as_deref().unwrap_or_default().to_ascii_lowercase();
    [
        "throttl",
        "serviceunavailable",
        "requestlimitexceeded",
        "slowdown",
    ]
    .iter()
    .any(|c| code.contains(c))
}

/// What a cycle may do.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Replays left in the run's budget.
    pub budget: u64,
    /// Plan nothing: report what would happen.
    pub dry_run: bool,
    /// Now, in epoch millis (for TTLs).
    pub now_ms: u64,
    /// Kept messages that may still be hidden (`KEPT_IN_FLIGHT_MAX` less those hidden);
    /// beyond, a kept message is archived (`PERMANENT_FAILURE`). `None`: how many are hidden
    /// is not known (the keep lists could not be read), so kept ones are only held for the run.
    pub kept_room: Option<u64>,
}

/// The plan of one received batch. Replays of a FIFO main queue go into one lane per message
/// group, so a later message of a group is sent only after the one before it went; a delete
/// waits for its copy or archive entry. Of `seen` (DLQ message ids): a message whose replay
/// this run already confirmed (the first set) is only deleted; one that a cycle in flight holds
/// (the second) is only released.
pub fn cycle(
    batch: Vec<ReceivedMessage>,
    rules: &Rules,
    queues: &QueueUrls,
    mut limits: Limits,
    received_at: Instant,
    (replayed, in_flight): (&HashSet<String>, &HashSet<String>),
) -> (Plan, Cycle) {
    let mut plan = Plan::new();
    let mut items = Vec::with_capacity(batch.len());
    for m in batch {
        let fate = if in_flight.contains(&m.message_id) {
            Fate::Held(Held::InFlight)
        } else if replayed.contains(&m.message_id) && !limits.dry_run {
            Fate::ReplayedBefore {
                delete: plan.push(delete(&m, queues)),
            }
        } else {
            fate(&mut plan, &m, rules, queues, &mut limits)
        };
        items.push((m, fate));
    }
    let cycle = Cycle { items, received_at };
    (plan, cycle)
}

/// What becomes of one message, its actions planned; `limits` counts down the budget and
/// the room for kept messages.
fn fate(
    plan: &mut Plan,
    m: &ReceivedMessage,
    rules: &Rules,
    queues: &QueueUrls,
    limits: &mut Limits,
) -> Fate {
    let dlq_is_fifo = resq::sqs::is_fifo(&queues.dlq);
    let held = |plan: &mut Plan, held| explain(plan, m, queues, limits.dry_run, held);
    match classify::classify(m, rules, limits.now_ms) {
        Verdict::Keep => {
            match (
                classify::keep_until(m, rules, dlq_is_fifo),
                limits.kept_room,
            ) {
                (Some(_), Some(0)) => {
                    let last = Some(format!(
                        "{} (KEPT_IN_FLIGHT_MAX reached: no more kept messages may be hidden)",
                        m.failure_reason().unwrap_or("permanent failure")
                    ));
                    archive(
                        plan,
                        m,
                        ArchiveReason::PermanentFailure,
                        last,
                        queues,
                        limits.dry_run,
                    )
                }
                (Some(until), Some(room)) => {
                    limits.kept_room = Some(room - 1);
                    Fate::Kept(Some(until))
                }
                _ => Fate::Kept(None),
            }
        }
        // a selective run touches nothing outside its selection
        Verdict::NotSelected => Fate::Held(Held::NotSelected),
        Verdict::Paused => held(plan, Held::Paused),
        Verdict::Archive(reason) => {
            let last = m.failure_reason().map(str::to_owned);
            archive(plan, m, reason, last, queues, limits.dry_run)
        }
        Verdict::Redrive => match redrive(plan, m, &mut limits.budget, queues, limits.dry_run) {
            Fate::Held(Held::OverBudget) => held(plan, Held::OverBudget),
            fate => fate,
        },
    }
}

/// A held message: left for later, or, when it is a dead letter without a reason in a
/// standard DLQ, given its reason ([`Fate::Explain`]) so that it is counted once.
fn explain(
    plan: &mut Plan,
    m: &ReceivedMessage,
    queues: &QueueUrls,
    dry_run: bool,
    held: Held,
) -> Fate {
    if dry_run || !classify::is_unexplained(m) || resq::sqs::is_fifo(&queues.dlq) {
        return Fate::Held(held);
    }
    let Ok(copy) = classify::explained(m) else {
        return Fate::Held(held);
    };
    let copy = plan.push(Action::Copy {
        to: queues.dlq.clone(),
        message: copy,
    });
    let delete = plan.then(copy, delete(m, queues));
    Fate::Explain { copy, delete }
}

/// A redrive within the budget: the replay (in its group's lane in a FIFO main queue), then
/// the delete. A message whose replay SQS would refuse is archived instead.
fn redrive(
    plan: &mut Plan,
    m: &ReceivedMessage,
    budget: &mut u64,
    queues: &QueueUrls,
    dry_run: bool,
) -> Fate {
    let copy = match classify::replay(m, resq::sqs::is_fifo(&queues.main)) {
        Ok(copy) => copy,
        Err(reason) => {
            let last = Some(format!("a copy cannot be sent: {reason}"));
            return archive(plan, m, reason, last, queues, dry_run);
        }
    };
    if *budget == 0 {
        return Fate::Held(Held::OverBudget);
    }
    *budget -= 1;
    if dry_run {
        return Fate::Held(Held::WouldRedrive);
    }
    // a group's order is FIFO's alone: a fair queue's tenants go out in parallel
    let lane = copy
        .group_id
        .clone()
        .filter(|_| resq::sqs::is_fifo(&queues.main));
    let action = Action::Copy {
        to: queues.main.clone(),
        message: copy,
    };
    let copy = match lane {
        Some(group) => plan.push_to(&group, action),
        None => plan.push(action),
    };
    let delete = plan.then(copy, delete(m, queues));
    Fate::Redrive { copy, delete }
}

/// An archive entry, then the delete.
fn archive(
    plan: &mut Plan,
    m: &ReceivedMessage,
    reason: ArchiveReason,
    last_error: Option<String>,
    queues: &QueueUrls,
    dry_run: bool,
) -> Fate {
    if dry_run {
        return Fate::Held(Held::WouldArchive(reason));
    }
    let entry = m.archive_entry(reason, &queues.dlq, last_error);
    let write = plan.push(Action::Archive(Box::new(entry)));
    let delete = plan.then(write, delete(m, queues));
    Fate::Archive {
        reason,
        write,
        delete,
    }
}

fn delete(m: &ReceivedMessage, queues: &QueueUrls) -> Action {
    Action::Delete {
        from: queues.dlq.clone(),
        receipt_handle: m.receipt_handle.clone(),
    }
}

/// A kept permanent failure waiting to be hidden until its TTL: it is written to the keep list
/// first and hidden only once the list is in the bucket, so a hidden message can always be
/// reached (until then its receive keeps it hidden for the run).
#[derive(Debug, Clone)]
pub struct PendingKeep {
    /// Its keep-list entry.
    pub kept: KeptMessage,
    /// When its TTL ends (epoch millis).
    pub until_ms: u64,
    /// When it was received (SQS's 12 h count from there).
    pub received_at: Instant,
}

/// The plan that lists kept messages, then hides each until its TTL (within SQS's 12 h from
/// its receive): per message, its listing and its hide.
pub fn keep(
    pending: Vec<PendingKeep>,
    dlq: &QueueUrl,
    now_ms: u64,
    now: Instant,
) -> (Plan, Vec<(KeptMessage, ActionId, ActionId)>) {
    let mut plan = Plan::new();
    let mut entries = Vec::with_capacity(pending.len());
    for p in pending {
        let since = now.saturating_duration_since(p.received_at);
        let secs = classify::keep_hidden_for(p.until_ms, now_ms, since);
        let mut kept = p.kept;
        kept.hidden_until = now_ms + secs as u64 * 1000;
        let listed = plan.push(Action::Keep {
            queue: dlq.clone(),
            message: kept.clone(),
        });
        let hide = Action::ChangeVisibility {
            of: dlq.clone(),
            receipt_handle: kept.receipt_handle.clone(),
            seconds: secs,
        };
        let hidden = plan.then(listed, hide);
        entries.push((kept, listed, hidden));
    }
    (plan, entries)
}

/// How long received messages stay hidden: until `HOLD_PAST_DEADLINE` past the deadline, so
/// that one the run could not finish (a crash, a call cut off) comes back soon after it, and
/// each is seen once a run; at least 30 s, at most SQS's 12 h.
pub fn receive_visibility(until_deadline: Duration, hold_past_deadline: Duration) -> i32 {
    (until_deadline + hold_past_deadline)
        .as_secs()
        .clamp(30, resq::sqs::MAX_VISIBILITY_TIMEOUT.as_secs()) as i32
}

/// `MAX_MESSAGES_PER_RUN=auto`: what the rate allows in `time`, the token bucket's first batch
/// included, so that runs back to back replay at the configured rate.
pub fn auto_budget(rate_per_second: f64, time: Duration) -> u64 {
    let allowed = (rate_per_second * time.as_secs_f64()).ceil();
    (allowed.clamp(0.0, u32::MAX as f64) as u64).saturating_add(resq::sqs::MAX_BATCH as u64)
}

/// The longest a cycle (receive, then copies and deletes) is assumed to take, for
/// [`cycles_in_flight`]: a few SQS round trips of tens of milliseconds each.
pub const CYCLE_TIME: Duration = Duration::from_millis(150);
/// The most cycles a run keeps in flight.
pub const MAX_CYCLES_IN_FLIGHT: usize = 64;

/// How many receive → settle cycles a run keeps in flight at `rate_per_second`: enough that
/// the token bucket, not the SQS round trips, sets the pace (a cycle carries 10 messages and
/// takes up to [`CYCLE_TIME`]), and no more, so that few received messages wait for tokens
/// (at least 2: one receiving while one settles).
pub fn cycles_in_flight(rate_per_second: f64) -> usize {
    let batches_per_cycle_time =
        rate_per_second * CYCLE_TIME.as_secs_f64() / resq::sqs::MAX_BATCH as f64;
    (batches_per_cycle_time.ceil() as usize + 1).clamp(2, MAX_CYCLES_IN_FLIGHT)
}

/// How many replays a run plans ahead of the token bucket at most (those received and not
/// yet sent): what the rate allows in a [`CYCLE_TIME`], plus a batch. Receiving further ahead
/// would only hold messages waiting, and plan them under a breaker verdict that may be stale
/// by the time their tokens come.
pub fn replays_ahead(rate_per_second: f64) -> u64 {
    (rate_per_second * CYCLE_TIME.as_secs_f64()).ceil() as u64 + resq::sqs::MAX_BATCH as u64
}
