//! `resq dlq redrive --to QUEUE --keep-source`: a shadow replay. The selected DLQ messages are
//! copied to a staging queue exactly as a replay would send them to the main queue (the
//! redriver's own rules decide which would be replayed, and its own copy is sent: failure
//! marks dropped, `x-redrive-count` + 1, `x-first-sent-at` carried, FIFO group and
//! deduplication id), so a staging consumer sees what production would. The DLQ is left as it
//! was: nothing is deleted, every message received is released at the end, kept messages
//! made visible for the copy are hidden again until the moment they were hidden until, and
//! no message's `x-redrive-count` changes (the copy carries the count a replay would).
//!
//! Kept messages (`--failure-reason` brings back those of its reason, as a replay would) are
//! made visible only as many as the copy budget can take ([`to_unhide`]); the shadow then
//! receives until it has every one of them back, past the budget if need be ([`Receiving`]),
//! and lists and hides each again with its new receipt handle. One it did not get back (the
//! receiving stopped early, or someone else received it) is hidden again with the keep list's
//! own handle ([`hide_again`]); one that cannot be is named in the report
//! ([`ShadowReport::kept_left_visible`]). Messages it receives and does not copy are hidden
//! for its run: it receives at most [`NOT_COPIED_MAX`] of them.
//!
//! A copy counts only when SQS reported its send `Successful`.
//!
//! Why `--to` needs `--keep-source` (and is refused without it): moving messages out of the
//! DLQ into a queue that is not the main queue would take them out of resq's care (a staging
//! queue has no redrive cap, no archive and its own retention): a message could end nowhere
//! resq knows of. A real move is `resq dlq redrive` without `--to`, into the main queue.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use resq::keep::KeptMessage;
use resq::settle::{Action, ActionId, Confirmation, Plan, QueueUrl, Report};
use resq::sqs::{OutgoingMessage, Queues, ReceivedMessage};
use resq_redriver::classify::{self, Rules, Verdict};
use resq_redriver::plan::PendingKeep;
use resq_redriver::ratelimit::ReplayPace;
use serde::Serialize;

use crate::context::Context;
use crate::dlq::RedriveOptions;
use crate::locate::remaining_hide;
use crate::{CliError, now_ms};

/// What the shadow replay does with one DLQ message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shadow {
    /// Copy it: the replay the redriver would send.
    Copy(OutgoingMessage),
    /// Leave it: why a replay would not send it (`kept`, `notSelected`, or the archive
    /// reason it would be archived for).
    Skip(String),
}

/// The shadow of one message under `rules` at `now_ms`, into a queue that is FIFO or not:
/// the redriver's decision (`classify`) and its copy (`replay`), nothing of its own.
pub fn decide(m: &ReceivedMessage, rules: &Rules, now_ms: u64, to_fifo: bool) -> Shadow {
    match classify::classify(m, rules, now_ms) {
        Verdict::Redrive => match classify::replay(m, to_fifo) {
            Ok(copy) => Shadow::Copy(copy),
            Err(reason) => Shadow::Skip(reason.code().to_owned()),
        },
        Verdict::Archive(reason) => Shadow::Skip(reason.code().to_owned()),
        Verdict::Keep => Shadow::Skip("kept".to_owned()),
        Verdict::NotSelected => Shadow::Skip("notSelected".to_owned()),
        Verdict::Paused => Shadow::Skip("paused".to_owned()),
    }
}

/// Refuses a staging queue that is not one: the main queue (the copies would be real replays,
/// and the DLQ would keep its messages: every order twice), the DLQ itself, or any queue that
/// dead-letters into this DLQ (a production source). `dlq_arn`, `to_dead_letter_target`: the
/// DLQ's ARN and the staging queue's RedrivePolicy target, when known.
pub fn check_staging(
    to: &str,
    main_queue: Option<&str>,
    dlq: &str,
    dlq_arn: Option<&str>,
    to_dead_letter_target: Option<&str>,
) -> Result<(), CliError> {
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    let why = if same(to, dlq) {
        Some("is the DLQ itself")
    } else if main_queue.is_some_and(|m| same(to, m)) {
        Some(
            "is the main queue: the copies would be real replays while the DLQ keeps its messages (every order twice); `resq dlq redrive` without --to replays for real",
        )
    } else if dlq_arn.is_some() && dlq_arn == to_dead_letter_target {
        Some("dead-letters into this DLQ: it is a production source queue, not a staging queue")
    } else {
        None
    };
    match why {
        Some(why) => Err(CliError::Usage(format!("--to {to} {why}"))),
        None => Ok(()),
    }
}

/// One copy made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Copied {
    /// The DLQ message copied.
    pub dlq_message_id: String,
    /// The copy's id in the staging queue.
    pub message_id: Option<String>,
    /// The body's `orderId`, when it has one.
    pub order_id: Option<String>,
}

/// One copy not made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotCopied {
    /// The DLQ message.
    pub dlq_message_id: String,
    /// Why: what SQS said, or that the send was not answered (it may have gone).
    pub error: String,
}

/// What a shadow replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowReport {
    /// The staging queue.
    pub to: String,
    /// DLQ messages received (each once).
    pub received: u64,
    /// Copies SQS reported `Successful`.
    pub copied: u64,
    /// Messages a replay would not send, by why (`kept`, `notSelected`, an archive reason).
    pub skipped: BTreeMap<String, u64>,
    /// The copies.
    pub copies: Vec<Copied>,
    /// The copies that failed.
    pub failed: Vec<NotCopied>,
    /// Kept messages of the selected reason the keep lists name as hidden.
    pub kept_listed: u64,
    /// Of those, made visible for the copy (as many as the copy budget can take).
    pub unhidden: u64,
    /// Of those, received back, then listed and hidden again (with their new receipt handle)
    /// until the moment they were hidden until.
    pub hidden_again: u64,
    /// Of those, not received back, hidden again with the keep list's receipt handle until
    /// the moment they were hidden until.
    pub hidden_again_by_keep_list: u64,
    /// Kept messages made visible that are left visible: not received back, and their keep
    /// list's handle no longer holds them (someone else received them; SQS may also refuse a
    /// handle for a message no longer in flight). They stay visible until the next scheduled
    /// redriver run keeps and hides them again. Their DLQ message ids.
    pub kept_left_visible: Vec<String>,
    /// Messages received and released at once (visible again).
    pub released: u64,
    /// Messages whose release (or hide again) failed: they come back by themselves after the
    /// receive's visibility timeout.
    pub not_released: u64,
    /// The copy budget was reached: more messages may be waiting.
    pub budget_reached: bool,
    /// Receiving stopped at [`NOT_COPIED_MAX`] messages received and not copied: selected
    /// messages beyond them were not reached.
    pub not_copied_limit_reached: bool,
    /// Receiving from the DLQ failed part-way: what SQS said (the DLQ was left as found all
    /// the same, as far as this report says).
    pub receive_error: Option<String>,
}

impl ShadowReport {
    /// The error the command ends with when receiving failed, or some copies did.
    pub fn failure(&self) -> Option<CliError> {
        if self.receive_error.is_some() {
            return Some(CliError::ReceiveStopped);
        }
        (!self.failed.is_empty()).then_some(CliError::NotCopied {
            count: self.failed.len() as u64,
        })
    }
}

/// Received messages a shadow replay does not copy (not selected, kept, past their TTL or the
/// cap, over the budget), at most: each is hidden for the run, so a DLQ of messages of other
/// reasons is not hidden whole from the redriver (nor pushed toward SQS's in-flight quota).
pub const NOT_COPIED_MAX: u64 = 10_000;

/// The kept messages of `reason` (from the keep lists) a shadow replay makes visible: as many
/// as its copy budget can take, oldest first (by the producer's send): it cannot copy more.
pub fn to_unhide(hidden: Vec<KeptMessage>, reason: &str, budget: u64) -> Vec<KeptMessage> {
    let mut of_reason: Vec<KeptMessage> = hidden
        .into_iter()
        .filter(|k| k.failure_reason.as_deref() == Some(reason))
        .collect();
    of_reason.sort_by_key(|k| (k.first_sent_at.is_none(), k.first_sent_at));
    of_reason.truncate(usize::try_from(budget).unwrap_or(usize::MAX));
    of_reason
}

/// Where a shadow replay's receiving stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receiving {
    /// Copies planned so far.
    pub planned: u64,
    /// The copy budget (`--max-messages`).
    pub budget: u64,
    /// Messages received and not copied so far.
    pub not_copied: u64,
    /// Kept messages it made visible and has not received back yet.
    pub unhidden_out: usize,
}

/// What a shadow replay does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Receive up to this many.
    Receive(i32),
    /// Stop: the budget is spent and every kept message it made visible is back.
    Done,
    /// Stop: [`NOT_COPIED_MAX`] received and not copied.
    NotCopiedLimit,
}

impl Receiving {
    /// The next step: receive for the budget, and past it while kept messages it made visible
    /// are still out (so that it hides them again itself), within [`NOT_COPIED_MAX`].
    pub fn next(&self) -> Next {
        if self.not_copied >= NOT_COPIED_MAX {
            return Next::NotCopiedLimit;
        }
        let batch = resq::sqs::MAX_BATCH as u64;
        let want = match (self.planned < self.budget, self.unhidden_out > 0) {
            (_, true) => batch,
            (true, false) => (self.budget - self.planned).min(batch),
            (false, false) => return Next::Done,
        };
        Next::Receive(want as i32)
    }
}

/// The kept messages a shadow made visible and did not receive back (`received`), at
/// `now_ms`: those still within their hide, with the seconds it has left (to hide each again
/// with the keep list's handle); those whose hide is over would be visible by now anyway.
pub fn hide_again(
    unhidden: &HashMap<String, KeptMessage>,
    received: &HashSet<String>,
    now_ms: u64,
) -> Vec<(KeptMessage, i32)> {
    let mut out: Vec<(KeptMessage, i32)> = unhidden
        .values()
        .filter(|k| !received.contains(&k.message_id))
        .filter_map(|k| Some((k.clone(), remaining_hide(k.hidden_until, now_ms)?)))
        .collect();
    out.sort_by(|a, b| a.0.message_id.cmp(&b.0.message_id));
    out
}

/// How long the shadow hides what it receives: the time its budget takes at its rate, and a
/// minute, within SQS's 12 h (everything is released at the end).
pub fn hide_for(max_messages: u32, rate_per_second: f64) -> i32 {
    let run = f64::from(max_messages) / rate_per_second.max(f64::MIN_POSITIVE);
    (run.ceil() + 60.0).clamp(60.0, resq::sqs::MAX_VISIBILITY_TIMEOUT.as_secs() as f64) as i32
}

/// The shadow replay: checks the staging queue, copies, then leaves the DLQ as it found it.
pub async fn shadow(
    ctx: &Context,
    options: &RedriveOptions,
    to: &str,
) -> Result<ShadowReport, CliError> {
    let dlq_url = ctx.dlq()?.to_owned();
    ctx.archive_bucket()?;
    staging(ctx, to, &dlq_url).await?;
    let dlq = QueueUrl::from(dlq_url.as_str());
    let mut report = ShadowReport {
        to: to.to_owned(),
        ..Default::default()
    };
    // a replay selected by reason brings back the kept ones of that reason: so does its
    // shadow, as many as its budget can copy
    let unhidden = match options.failure_reason.as_deref() {
        Some(reason) => {
            let budget = u64::from(options.max_messages);
            unhide(ctx, &dlq, reason, budget, &mut report).await?
        }
        None => HashMap::new(),
    };
    let held = copy(ctx, &dlq_url, options, to, &unhidden, &mut report).await;
    leave_as_found(ctx, &dlq, held, &unhidden, &mut report).await;
    Ok(report)
}

/// Checks the staging queue before anything is changed: it exists (and says where it
/// dead-letters), the DLQ answers, and [`check_staging`] takes it.
async fn staging(ctx: &Context, to: &str, dlq_url: &str) -> Result<(), CliError> {
    let main = (!ctx.main_queue_url.trim().is_empty()).then_some(ctx.main_queue_url.trim());
    let to_limits = resq::sqs::read_limits(&ctx.sqs, to)
        .await
        .map_err(|source| CliError::Aws {
            what: format!("reading the staging queue {to}"),
            source,
        })?;
    let dlq_arn = crate::status::queue_arn(&ctx.sqs, dlq_url)
        .await
        .map_err(|source| CliError::Aws {
            what: format!("reading {dlq_url}"),
            source,
        })?;
    check_staging(
        to,
        main,
        dlq_url,
        Some(&dlq_arn),
        to_limits.dead_letter_target.as_deref(),
    )
}

/// Makes visible the kept messages of `reason` that a copy budget of `budget` can take
/// ([`to_unhide`]); those made visible, by DLQ message id.
async fn unhide(
    ctx: &Context,
    dlq: &QueueUrl,
    reason: &str,
    budget: u64,
    report: &mut ShadowReport,
) -> Result<HashMap<String, KeptMessage>, CliError> {
    let hidden = ctx.kept().await?;
    report.kept_listed = hidden
        .iter()
        .filter(|k| k.failure_reason.as_deref() == Some(reason))
        .count() as u64;
    let chosen = to_unhide(hidden, reason, budget);
    let plan = Plan::release(dlq, chosen.iter().map(|k| k.receipt_handle.clone()));
    let done = ctx.settle(&plan).await;
    let unhidden: HashMap<String, KeptMessage> = done
        .iter()
        .zip(chosen)
        .filter(|((_, c), _)| c.is_confirmed())
        .map(|(_, k)| (k.message_id.clone(), k))
        .collect();
    report.unhidden = unhidden.len() as u64;
    Ok(unhidden)
}

/// A message received: its id, its receipt handle, and when.
type Held = (String, String, Instant);

/// Receives from the DLQ and copies what a replay would send, within the budget, until
/// [`Receiving::next`] says to stop; returns every message received, to be left as found.
async fn copy(
    ctx: &Context,
    dlq_url: &str,
    options: &RedriveOptions,
    to: &str,
    unhidden: &HashMap<String, KeptMessage>,
    report: &mut ShadowReport,
) -> Vec<Held> {
    let visibility = hide_for(options.max_messages, options.rate_per_second);
    let pace = ReplayPace::new(options.rate_per_second, to);
    let mut copying = Copying::new(options, to);
    loop {
        let want = match copying.receiving(unhidden).next() {
            Next::Receive(want) => want,
            Next::Done => break,
            Next::NotCopiedLimit => {
                report.not_copied_limit_reached = true;
                break;
            }
        };
        let batch = match ctx.sqs.receive(dlq_url, want, Some(visibility), 1).await {
            Ok(batch) => batch,
            Err(e) => {
                // what was received is still left as found, and the report says so
                report.receive_error = Some(format!("receiving from {dlq_url}: {e}"));
                break;
            }
        };
        let (plan, copies, new) = copying.plan(batch, Instant::now(), report);
        if new == 0 {
            break;
        }
        if !plan.is_empty() {
            account(&ctx.settle_paced(&plan, &pace).await, copies, report);
        }
    }
    report.budget_reached = copying.planned >= copying.budget;
    copying.held
}

/// A shadow replay's copying as it goes: the redriver's rules, the staging queue, the budget
/// and what it received so far.
struct Copying {
    rules: Rules,
    to: QueueUrl,
    to_fifo: bool,
    budget: u64,
    planned: u64,
    not_copied: u64,
    seen: HashSet<String>,
    held: Vec<Held>,
}

impl Copying {
    fn new(options: &RedriveOptions, to: &str) -> Self {
        Self {
            rules: Rules {
                max_redrive_attempts: options.max_redrive_attempts,
                archive_after: options.archive_after,
                permanent_action: options.permanent_action,
                reason: options.failure_reason.clone(),
                older_than: options.older_than,
                group: options.group.clone(),
                paused: false,
            },
            to: QueueUrl::from(to),
            to_fifo: resq::sqs::is_fifo(to),
            budget: u64::from(options.max_messages),
            planned: 0,
            not_copied: 0,
            seen: HashSet::new(),
            held: Vec::new(),
        }
    }

    /// Where its receiving stands, with the kept messages it made visible (`unhidden`).
    fn receiving(&self, unhidden: &HashMap<String, KeptMessage>) -> Receiving {
        Receiving {
            planned: self.planned,
            budget: self.budget,
            not_copied: self.not_copied,
            unhidden_out: unhidden
                .keys()
                .filter(|id| !self.seen.contains(*id))
                .count(),
        }
    }

    /// Holds a batch received at `received_at` and plans the copies of the messages it had not
    /// seen ([`decide`], within the budget): the plan, each copy's action and message, and how
    /// many messages were new.
    fn plan(
        &mut self,
        batch: Vec<ReceivedMessage>,
        received_at: Instant,
        report: &mut ShadowReport,
    ) -> (Plan, Vec<(ActionId, ReceivedMessage)>, usize) {
        let mut plan = Plan::new();
        let mut copies = Vec::new();
        let mut new = 0;
        for m in batch {
            let (id, handle) = (m.message_id.clone(), m.receipt_handle.clone());
            self.held.push((id, handle, received_at));
            if !self.seen.insert(m.message_id.clone()) {
                continue;
            }
            new += 1;
            report.received += 1;
            let why = match decide(&m, &self.rules, now_ms(), self.to_fifo) {
                Shadow::Copy(message) if self.planned < self.budget => {
                    self.planned += 1;
                    let action = Action::Copy {
                        to: self.to.clone(),
                        message,
                    };
                    // a group's order is FIFO's alone: a fair queue's tenants go in parallel
                    let id = match m.group_id().filter(|_| self.to_fifo) {
                        Some(group) => plan.push_to(group, action),
                        None => plan.push(action),
                    };
                    copies.push((id, m));
                    continue;
                }
                Shadow::Copy(_) => "overBudget".to_owned(),
                Shadow::Skip(why) => why,
            };
            self.not_copied += 1;
            *report.skipped.entry(why).or_default() += 1;
        }
        (plan, copies, new)
    }
}

/// Notes what became of each copy sent: copied when SQS reported it `Successful`, else not,
/// with why.
fn account(done: &Report, copies: Vec<(ActionId, ReceivedMessage)>, report: &mut ShadowReport) {
    for (id, m) in copies {
        match done.get(id) {
            Confirmation::Confirmed(message_id) => {
                report.copied += 1;
                report.copies.push(Copied {
                    dlq_message_id: m.message_id.clone(),
                    message_id: message_id.clone(),
                    order_id: resq::correlation::CorrelationKey::ORDERS.read(&m.body),
                });
            }
            other => report.failed.push(NotCopied {
                dlq_message_id: m.message_id.clone(),
                error: match other {
                    Confirmation::Failed(e) => e.to_string(),
                    _ => "not attempted (behind a failed copy of its FIFO group, or out of time)"
                        .to_owned(),
                },
            }),
        }
    }
}

/// Releases what the shadow received, except the kept messages it made visible: those are
/// hidden again until the moment they were hidden until, and listed again (with their new
/// receipt handle) so that they stay reachable. Those it made visible and did not receive
/// back are hidden again with the keep list's handle ([`hide_again`]); those that cannot be
/// are named.
async fn leave_as_found(
    ctx: &Context,
    dlq: &QueueUrl,
    held: Vec<Held>,
    unhidden: &HashMap<String, KeptMessage>,
    report: &mut ShadowReport,
) {
    let received: HashSet<String> = held.iter().map(|(id, _, _)| id.clone()).collect();
    let mut release = Vec::new();
    // a kept message received twice (its hide for the run ran out) is kept by its last
    // receipt, the one SQS honours
    let mut pending: BTreeMap<String, PendingKeep> = BTreeMap::new();
    for (message_id, receipt_handle, received_at) in held {
        match unhidden.get(&message_id) {
            Some(k) if k.hidden_until > now_ms() => {
                pending.insert(
                    message_id,
                    PendingKeep {
                        kept: KeptMessage {
                            receipt_handle,
                            ..k.clone()
                        },
                        until_ms: k.hidden_until,
                        received_at,
                    },
                );
            }
            _ => release.push(receipt_handle),
        }
    }
    let pending: Vec<PendingKeep> = pending.into_values().collect();
    if !pending.is_empty() {
        let (plan, entries) = resq_redriver::plan::keep(pending, dlq, now_ms(), Instant::now());
        let done = ctx.settle(&plan).await;
        for (_, listed, hidden) in entries {
            if done.get(listed).is_confirmed() && done.get(hidden).is_confirmed() {
                report.hidden_again += 1;
            } else {
                report.not_released += 1;
            }
        }
    }
    // made visible, not received back: hidden again by the handle the keep list holds (it
    // still names the message while nobody else received it)
    let out = hide_again(unhidden, &received, now_ms());
    if !out.is_empty() {
        let mut plan = Plan::new();
        let ids: Vec<(ActionId, String)> = out
            .into_iter()
            .map(|(k, seconds)| {
                let id = plan.push(Action::ChangeVisibility {
                    of: dlq.clone(),
                    receipt_handle: k.receipt_handle,
                    seconds,
                });
                (id, k.message_id)
            })
            .collect();
        let done = ctx.settle(&plan).await;
        for (id, message_id) in ids {
            if done.get(id).is_confirmed() {
                report.hidden_again_by_keep_list += 1;
            } else {
                report.kept_left_visible.push(message_id);
            }
        }
    }
    let count = release.len() as u64;
    let done = ctx.settle(&Plan::release(dlq, release)).await;
    let failed = done.iter().filter(|(_, c)| !c.is_confirmed()).count() as u64;
    report.released = count - failed;
    report.not_released += failed;
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::attributes::AttributeValue;
    use resq_redriver::config::PermanentAction;
    use std::time::Duration;

    const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/1/orders-dlq";
    const MAIN: &str = "https://sqs.us-east-1.amazonaws.com/1/orders";
    const STAGING: &str = "https://sqs.us-east-1.amazonaws.com/1/orders-staging";

    fn rules(reason: Option<&str>) -> Rules {
        Rules {
            max_redrive_attempts: 3,
            archive_after: Duration::from_secs(86_400),
            permanent_action: PermanentAction::Keep,
            reason: reason.map(str::to_owned),
            older_than: None,
            group: None,
            paused: false,
        }
    }

    fn dead_letter(attrs: &[(&str, AttributeValue)], sent_ms: u64) -> ReceivedMessage {
        let mut m = resq_testing::received("d-1", r#"{"orderId":"ORD-1"}"#, sent_ms, attrs);
        m.receipt_handle = "rh".into();
        m
    }

    #[test]
    fn the_shadow_is_the_copy_a_replay_would_send() {
        // GIVEN a transient dead letter replayed once already, with a trace attribute
        let now = 10_000_000;
        let m = dead_letter(
            &[
                ("x-failure-class", AttributeValue::string("transient")),
                ("x-failure-reason", AttributeValue::string("DOWNSTREAM")),
                ("x-redrive-count", AttributeValue::number(1)),
                ("trace-id", AttributeValue::string("t-1")),
            ],
            now - 1000,
        );
        // WHEN its shadow is decided
        let Shadow::Copy(copy) = decide(&m, &rules(None), now, false) else {
            panic!("not copied")
        };
        // THEN it is exactly the redriver's replay
        assert_eq!(copy, classify::replay(&m, false).unwrap());
        assert_eq!(
            copy.attributes["x-redrive-count"].string_value.as_deref(),
            Some("2")
        );
        assert!(!copy.attributes.contains_key("x-failure-reason"));
        assert_eq!(
            copy.attributes["trace-id"].string_value.as_deref(),
            Some("t-1")
        );
        // AND into a FIFO staging queue it carries a group and a deduplication id
        let Shadow::Copy(fifo) = decide(&m, &rules(None), now, true) else {
            panic!("not copied")
        };
        assert!(fifo.group_id.is_some() && fifo.deduplication_id.is_some());
    }

    #[test]
    fn what_a_replay_would_not_send_is_not_copied_and_says_why() {
        let now = 100 * 86_400_000;
        let permanent = [
            ("x-failure-class", AttributeValue::string("permanent")),
            (
                "x-failure-reason",
                AttributeValue::string("VALIDATION_FAILED"),
            ),
        ];
        let kept = dead_letter(&permanent, now - 1000);
        assert_eq!(
            decide(&kept, &rules(None), now, false),
            Shadow::Skip("kept".into())
        );
        // picked by its reason (after a fix), a permanent failure is replayed: so is its shadow
        assert!(matches!(
            decide(&kept, &rules(Some("VALIDATION_FAILED")), now, false),
            Shadow::Copy(_)
        ));
        assert_eq!(
            decide(&kept, &rules(Some("MALFORMED_JSON")), now, false),
            Shadow::Skip("notSelected".into())
        );
        let old = dead_letter(&[], now - 2 * 86_400_000);
        assert_eq!(
            decide(&old, &rules(None), now, false),
            Shadow::Skip("TTL_EXPIRED".into())
        );
        let capped = dead_letter(&[("x-redrive-count", AttributeValue::number(3))], now);
        assert_eq!(
            decide(&capped, &rules(None), now, false),
            Shadow::Skip("REDRIVE_CAP".into())
        );
    }

    #[test]
    fn a_shadow_of_one_tenant_copies_that_tenants_dead_letters_with_their_group() {
        // GIVEN `--group tenant-b --to STAGING --keep-source`
        let options = RedriveOptions {
            dry_run: false,
            failure_reason: None,
            older_than: None,
            group: Some("tenant-b".into()),
            max_messages: 10,
            rate_per_second: 10.0,
            max_redrive_attempts: 3,
            archive_after: Duration::from_secs(86_400),
            permanent_action: PermanentAction::Keep,
            kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
        };
        let rules = Copying::new(&options, STAGING).rules;
        assert_eq!(rules.group.as_deref(), Some("tenant-b"));
        let now = 10_000_000;
        let transient = [("x-failure-class", AttributeValue::string("transient"))];
        let of = |group: Option<&str>| {
            let mut m = dead_letter(&transient, now - 1000);
            if let Some(g) = group {
                m.attributes.insert("MessageGroupId".into(), g.into());
            }
            m
        };
        // THEN tenant-b's dead letter is copied, keeping its group on the standard queue
        let Shadow::Copy(copy) = decide(&of(Some("tenant-b")), &rules, now, false) else {
            panic!("not copied")
        };
        assert_eq!(copy.group_id.as_deref(), Some("tenant-b"));
        assert_eq!(copy.deduplication_id, None);
        // AND another tenant's, or one without a group, is not selected
        for other in [Some("tenant-a"), None] {
            assert_eq!(
                decide(&of(other), &rules, now, false),
                Shadow::Skip("notSelected".into())
            );
        }
    }

    #[test]
    fn a_staging_queue_must_not_be_production() {
        let dlq_arn = "arn:aws:sqs:us-east-1:1:orders-dlq";
        assert!(check_staging(STAGING, Some(MAIN), DLQ, Some(dlq_arn), None).is_ok());
        let main = check_staging(MAIN, Some(MAIN), DLQ, Some(dlq_arn), None).unwrap_err();
        assert_eq!(main.exit_code(), 2);
        assert!(main.to_string().contains("is the main queue"), "{main}");
        assert!(
            check_staging(&format!("{DLQ}/"), None, DLQ, None, None)
                .unwrap_err()
                .to_string()
                .contains("is the DLQ itself")
        );
        // a queue dead-lettering into this DLQ is a source, known even without --main-queue-url
        let source = check_staging(STAGING, None, DLQ, Some(dlq_arn), Some(dlq_arn)).unwrap_err();
        assert!(
            source.to_string().contains("production source queue"),
            "{source}"
        );
    }

    fn kept(id: &str, reason: &str, first_sent_at: Option<u64>, hidden_until: u64) -> KeptMessage {
        KeptMessage {
            message_id: id.into(),
            receipt_handle: format!("rh-{id}"),
            failure_reason: Some(reason.into()),
            first_sent_at,
            hidden_until,
            order_id: None,
        }
    }

    #[test]
    fn only_as_many_kept_messages_as_the_budget_can_copy_are_made_visible() {
        // GIVEN three kept VALIDATION_FAILED messages and one of another reason
        let listed = vec![
            kept("k-3", "VALIDATION_FAILED", Some(300), 9),
            kept("k-1", "VALIDATION_FAILED", Some(100), 9),
            kept("k-x", "MALFORMED_JSON", Some(50), 9),
            kept("k-2", "VALIDATION_FAILED", None, 9),
        ];
        // WHEN a shadow of that reason may copy one
        let chosen = to_unhide(listed.clone(), "VALIDATION_FAILED", 1);
        // THEN one is made visible, the oldest
        let ids = |v: &[KeptMessage]| v.iter().map(|k| k.message_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&chosen), vec!["k-1"]);
        // AND with room for all, all of that reason (an unknown age last), none of another
        assert_eq!(
            ids(&to_unhide(listed, "VALIDATION_FAILED", 1000)),
            vec!["k-1", "k-3", "k-2"]
        );
    }

    #[test]
    fn the_shadow_receives_until_every_kept_message_it_made_visible_is_back() {
        let at = |planned, budget, not_copied, unhidden_out| {
            Receiving {
                planned,
                budget,
                not_copied,
                unhidden_out,
            }
            .next()
        };
        // GIVEN a budget of 25: batches of 10, then what is left
        assert_eq!(at(0, 25, 0, 0), Next::Receive(10));
        assert_eq!(at(20, 25, 3, 0), Next::Receive(5));
        // WHEN the budget is spent and nothing it made visible is out: done
        assert_eq!(at(25, 25, 3, 0), Next::Done);
        // BUT while kept messages it made visible are out, it goes on receiving (past the
        // budget: they are not copied, they are hidden again)
        assert_eq!(at(1, 1, 0, 2), Next::Receive(10));
        // AND never past NOT_COPIED_MAX messages received and not copied
        assert_eq!(at(1, 1, NOT_COPIED_MAX, 2), Next::NotCopiedLimit);
        assert_eq!(at(0, 1000, NOT_COPIED_MAX, 0), Next::NotCopiedLimit);
        assert_eq!(at(0, 1000, NOT_COPIED_MAX - 1, 0), Next::Receive(10));
    }

    #[test]
    fn kept_messages_made_visible_and_not_received_back_are_hidden_again_until_the_same_moment() {
        // GIVEN three kept messages made visible, one received back
        let now = 1_000_000;
        let unhidden: HashMap<String, KeptMessage> = [
            kept("k-1", "VALIDATION_FAILED", None, now + 90_200),
            kept("k-2", "VALIDATION_FAILED", None, now + 5_000),
            kept("k-3", "VALIDATION_FAILED", None, now - 1),
        ]
        .into_iter()
        .map(|k| (k.message_id.clone(), k))
        .collect();
        let received = HashSet::from(["k-2".to_owned()]);
        // WHEN the run ends
        let out = hide_again(&unhidden, &received, now);
        // THEN the one not received and still within its hide is hidden again, by the keep
        // list's handle, for the time it had left; one whose hide is over stays visible (as
        // it would be by now anyway)
        assert_eq!(
            out.iter()
                .map(|(k, s)| (k.receipt_handle.as_str(), *s))
                .collect::<Vec<_>>(),
            vec![("rh-k-1", 91)]
        );
    }

    #[test]
    fn a_shadow_whose_receiving_failed_still_reports_then_fails() {
        // GIVEN a shadow whose receive failed part-way, after leaving the DLQ as found
        let report = ShadowReport {
            receive_error: Some("receiving from q: throttled".into()),
            kept_left_visible: vec!["k-1".into()],
            ..ShadowReport::default()
        };
        // THEN the command fails (exit 1) after its report, which names what it left visible
        let e = report.failure().unwrap();
        assert_eq!(e.exit_code(), 1);
        let notes = crate::render::shadow_notes(&report, false);
        assert!(
            notes.contains("error: receiving stopped part-way: receiving from q: throttled"),
            "{notes}"
        );
        assert!(
            notes.contains("could not be hidden again") && notes.contains("k-1"),
            "{notes}"
        );
        assert!(ShadowReport::default().failure().is_none());
    }

    #[test]
    fn the_shadow_hides_what_it_holds_for_its_run_and_a_minute() {
        assert_eq!(hide_for(1000, 10.0), 160);
        assert_eq!(hide_for(1, 1000.0), 61);
        assert_eq!(hide_for(u32::MAX, 0.001), 43_200);
    }
}
