//! What a run does with what it received (docs/design.md, "Run loop"), as settle plans: a
//! cycle's replays (copy, then delete) and archive entries (write, then delete); the kept
//! messages (listed, then hidden until their TTL); what was held for the run (released at its
//! end). No I/O here: the engine hands the plans to the settle executor.

use std::time::{Duration, Instant};

use resq::keep::KeptMessage;
use resq::reason::ArchiveReason;
use resq::settle::{Action, ActionId, Plan, QueueUrl};
use resq::sqs::ReceivedMessage;

use crate::classify::{self, Decision, Keep, Rules};

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
}

/// One cycle: its plan, and each received message with its fate.
#[derive(Debug)]
pub struct Cycle {
    /// What the executor carries out.
    pub plan: Plan,
    /// The messages received, in order, with what is to become of each.
    pub items: Vec<(ReceivedMessage, Fate)>,
    /// When they were received.
    pub received_at: Instant,
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
}

/// The plan of one received batch. Replays of a FIFO main queue go into one lane per message
/// group, so a later message of a group is sent only after the one before it went; a delete
/// waits for its copy or archive entry.
pub fn cycle(
    batch: Vec<ReceivedMessage>,
    rules: &Rules,
    queues: &QueueUrls,
    limits: Limits,
    received_at: Instant,
) -> Cycle {
    let mut plan = Plan::new();
    let mut budget = limits.budget;
    let dlq_is_fifo = resq::fifo::is_fifo(&queues.dlq);
    let mut items = Vec::with_capacity(batch.len());
    for m in batch {
        let fate = match classify::classify(&m, rules, limits.now_ms) {
            Decision::Keep(Keep::Permanent) => {
                Fate::Kept(classify::keep_until(&m, rules, dlq_is_fifo))
            }
            Decision::Keep(Keep::NotSelected) => Fate::Held(Held::NotSelected),
            Decision::Keep(Keep::Paused) => Fate::Held(Held::Paused),
            Decision::Archive(reason) => {
                let last = m.failure_reason().map(str::to_owned);
                archive(&mut plan, &m, reason, last, queues, limits.dry_run)
            }
            Decision::Redrive => redrive(&mut plan, &m, &mut budget, queues, limits.dry_run),
        };
        items.push((m, fate));
    }
    Cycle {
        plan,
        items,
        received_at,
    }
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
    let copy = match classify::replay(m, resq::fifo::is_fifo(&queues.main)) {
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
    let lane = copy.group_id.clone();
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
        .clamp(30, resq::backoff::MAX_VISIBILITY_TIMEOUT.as_secs()) as i32
}
