//! `resq dlq redrive --canary N --min-success P`: replay N of the selection through the normal
//! path (the redriver's engine, as `resq dlq redrive` does), follow each copy to its outcome
//! with the look `resq find` makes ([`crate::locate`]), and go on with the rest of the
//! selection only when at least P % succeeded. Otherwise stop: the rest stays in the DLQ as
//! it was, and the report names each canary that failed and why.
//!
//! A canary succeeded when its order's record (`orders/{orderId}.json`, written by the
//! reference handler) was written after the replay; it failed when a copy of its order came
//! back to the DLQ after the replay (its failure class and reason say why) or was archived
//! after it. One that did neither before the timeout (still retried by the consumer, backed off
//! in the main queue, or with no `orderId` to follow) did not succeed: it counts against P.
//! The main queue is not looked into while waiting: receiving a canary would raise its receive
//! count and hide it from the consumer, the very outcome being watched. So a team's own
//! message type (`ReferenceConsumer=false`), whose handler writes no order record, cannot be
//! seen to succeed: a copy that left the main queue cannot be told from one still in it
//! without receiving (SQS counts a queue's messages, it does not say which), and the canary
//! stops.
//!
//! A canary selected by `--failure-reason` runs the redriver's selective run, which first
//! makes the kept permanent failures of that reason visible and releases, visible, those its
//! budget did not replay (the redriver's own behaviour: the next scheduled run keeps and hides
//! them again). The report names them ([`CanaryReport::kept_left_visible`], [`left_visible`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use resq::keep::KeptMessage;
use resq_redriver::Summary;
use resq_redriver::summary::Replayed;
use serde::Serialize;

use crate::context::Context;
pub use crate::dlq::CanaryOptions;
use crate::dlq::{RedriveOptions, ready_to_redrive, redrive_failure, redrive_listed};
use crate::locate::{
    DEFAULT_DLQ_LIMIT, DLQ_VISIBILITY, Identity, Look, LookOptions, Place, QueueLook, Wanted,
    locate,
};
use crate::{CliError, now_ms};

/// How often a canary's outcome is looked for.
pub const POLL: Duration = Duration::from_secs(2);
/// Times written by S3 and SQS are compared with this machine's clock, less this much.
pub const CLOCK_SKEW: Duration = Duration::from_secs(2);

/// What became of one canary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum Outcome {
    /// It succeeded: its order record was written after the replay.
    #[serde(rename_all = "camelCase")]
    Succeeded {
        /// The record.
        key: String,
    },
    /// It failed again.
    #[serde(rename_all = "camelCase")]
    Failed {
        /// Where it went: `DLQ` or `archive`.
        place: String,
        /// Its DLQ copy's id, or its archive key.
        at: String,
        /// The failure class (`permanent`, `transient`), when it says.
        failure_class: Option<String>,
        /// The failure reason (`VALIDATION_FAILED`, …) or archive reason.
        reason: Option<String>,
    },
    /// Neither yet (when the wait ended: it did not succeed).
    #[serde(rename_all = "camelCase")]
    Pending {
        /// Why it is not known.
        why: String,
    },
}

impl Outcome {
    /// It succeeded.
    pub fn succeeded(&self) -> bool {
        matches!(self, Outcome::Succeeded { .. })
    }

    fn decided(&self) -> bool {
        !matches!(self, Outcome::Pending { .. })
    }
}

/// The outcome of canary `c` from what a look saw, counting only what happened since `since_ms`
/// (epoch millis, the replay's start less [`CLOCK_SKEW`]): back in the DLQ or archived wins
/// over a record (a record written and a copy failed again is not a success).
pub fn outcome(c: &Replayed, look: &Look, since_ms: u64) -> Outcome {
    let Some(order_id) = c.order_id.as_deref() else {
        return Outcome::Pending {
            why: "its body has no orderId: its outcome cannot be followed".into(),
        };
    };
    let mut record = None;
    for place in look.of(order_id) {
        match place {
            Place::Dlq(q)
                if q.message_id != c.dlq_message_id && q.sent_at.is_some_and(|t| t >= since_ms) =>
            {
                return Outcome::Failed {
                    place: "DLQ".into(),
                    at: q.message_id.clone(),
                    failure_class: q.failure_class.clone(),
                    reason: q.failure_reason.clone(),
                };
            }
            Place::Archived(a) if a.written_at.is_some_and(|t| t >= since_ms) => {
                return Outcome::Failed {
                    place: "archive".into(),
                    at: a.key.clone(),
                    failure_class: None,
                    reason: Some(a.reason.clone()),
                };
            }
            Place::Recorded(r) if r.written_at.iter().any(|&t| t >= since_ms) => {
                record = Some(r.key.clone());
            }
            _ => {}
        }
    }
    match record {
        Some(key) => Outcome::Succeeded { key },
        None => Outcome::Pending {
            why: "neither recorded (its orders/{orderId}.json) nor back in the DLQ nor archived: still in the main queue (being processed, or backed off after a failure), or handled by a handler that writes no order record (a team's own message type: its success cannot be seen)".into(),
        },
    }
}

/// The kept messages of the selected reason (`kept`, from the keep lists before the canary
/// run) that the runs did not replay (`replayed`, DLQ message ids): made visible by the
/// selective run, they stay visible until the next scheduled redriver run keeps them again.
pub fn left_visible<'a>(
    kept: &[KeptMessage],
    replayed: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let replayed: BTreeSet<&str> = replayed.into_iter().collect();
    kept.iter()
        .map(|k| k.message_id.as_str())
        .filter(|id| !replayed.contains(id))
        .map(str::to_owned)
        .collect()
}

/// Whether `succeeded` of `total` canaries meet `min_success` %.
pub fn go_on(succeeded: usize, total: usize, min_success: f64) -> bool {
    total > 0 && succeeded as f64 * 100.0 >= min_success * total as f64
}

/// One canary and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryResult {
    /// The replay.
    #[serde(flatten)]
    pub replayed: Replayed,
    /// Its outcome.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What a canary replay did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryReport {
    /// The run that replayed the canaries.
    pub canary_run: Summary,
    /// Each canary.
    pub canaries: Vec<CanaryResult>,
    /// How many succeeded.
    pub succeeded: usize,
    /// The percentage asked for.
    pub min_success: f64,
    /// How long the outcomes were waited for, in milliseconds.
    pub waited_ms: u64,
    /// `go`: the rest was replayed; `stop`: it was not.
    pub decision: &'static str,
    /// The run that replayed the rest of the selection (`None`: stopped, or nothing left).
    pub rest: Option<Summary>,
    /// Kept permanent failures of the selected reason the canary run made visible (its
    /// `unhidden`), as any redriver run selected by reason does.
    pub kept_made_visible: u64,
    /// Of the kept messages of the reason, by DLQ message id, those the runs did not replay:
    /// they stay visible in the DLQ until the next scheduled redriver run keeps and hides
    /// them again (empty when none was made visible).
    pub kept_left_visible: Vec<String>,
}

impl CanaryReport {
    /// The error the command ends with: the canaries' verdict, or the runs' own failure.
    pub fn failure(&self) -> Option<CliError> {
        if self.decision == "stop" {
            return Some(CliError::CanaryStopped {
                succeeded: self.succeeded,
                total: self.canaries.len(),
                min_success: self.min_success,
            });
        }
        redrive_failure(&self.canary_run).or_else(|| self.rest.as_ref().and_then(redrive_failure))
    }
}

/// The canary replay. `progress` is told what happens as it happens (a line each, for
/// stderr).
pub async fn run(
    ctx: &Context,
    options: &RedriveOptions,
    canary: &CanaryOptions,
    mut progress: impl FnMut(String),
) -> Result<CanaryReport, CliError> {
    ready_to_redrive(ctx).await?;
    // the kept messages the selective run will make visible, to say which it leaves so
    let kept: Vec<KeptMessage> = match options.failure_reason.as_deref() {
        Some(reason) => (ctx.kept().await?.into_iter())
            .filter(|k| k.failure_reason.as_deref() == Some(reason))
            .collect(),
        None => Vec::new(),
    };
    let since = now_ms().saturating_sub(CLOCK_SKEW.as_millis() as u64);
    let mut report = replay_canaries(ctx, options, canary).await;
    if report.canaries.is_empty() {
        progress(
            "canary: nothing was replayed (nothing selected in the DLQ, or the sends failed)"
                .into(),
        );
        if redrive_failure(&report.canary_run).is_some() {
            report.decision = "stop";
        }
        leave(&mut report, &kept, Vec::new(), options, &mut progress);
        return Ok(report);
    }
    let look = follow_look(since, options.group.as_deref());
    report.waited_ms = follow(
        ctx,
        &mut report.canaries,
        canary,
        (&look, since),
        &mut progress,
    )
    .await?;
    report.succeeded = report
        .canaries
        .iter()
        .filter(|c| c.outcome.succeeded())
        .count();
    let total = report.canaries.len();
    let mut replayed: Vec<String> = report
        .canaries
        .iter()
        .map(|c| c.replayed.dlq_message_id.clone())
        .collect();
    if !go_on(report.succeeded, total, canary.min_success) {
        report.decision = "stop";
        leave(&mut report, &kept, replayed, options, &mut progress);
        return Ok(report);
    }
    progress(format!(
        "canary: {} of {total} succeeded (at least {} %): replaying the rest of the selection",
        report.succeeded, canary.min_success
    ));
    if let Some(rest) = rest_run(options, total) {
        let (summary, rest_replayed) = redrive_listed(ctx, &rest).await;
        replayed.extend(rest_replayed.into_iter().map(|r| r.dlq_message_id));
        report.rest = Some(summary);
    }
    leave(&mut report, &kept, replayed, options, &mut progress);
    Ok(report)
}

/// The run that replays the canaries: the selection asked for (reason, age, group), N of it
/// (at most `--max-messages`).
pub fn canary_run(options: &RedriveOptions, canary: &CanaryOptions) -> RedriveOptions {
    RedriveOptions {
        max_messages: canary.count.min(options.max_messages),
        ..options.clone()
    }
}

/// The run that replays the rest of the selection after `replayed` canaries: the same
/// selection, what is left of `--max-messages` (`None`: nothing is left).
pub fn rest_run(options: &RedriveOptions, replayed: usize) -> Option<RedriveOptions> {
    let left = options
        .max_messages
        .saturating_sub(u32::try_from(replayed).unwrap_or(u32::MAX));
    (left > 0).then(|| RedriveOptions {
        max_messages: left,
        ..options.clone()
    })
}

/// Replays the canaries (at most `--max-messages`): the report of their run, each canary's
/// outcome not looked for yet.
async fn replay_canaries(
    ctx: &Context,
    options: &RedriveOptions,
    canary: &CanaryOptions,
) -> CanaryReport {
    let (canary_run, replayed) = redrive_listed(ctx, &canary_run(options, canary)).await;
    CanaryReport {
        kept_made_visible: canary_run.unhidden,
        canary_run,
        canaries: replayed
            .into_iter()
            .map(|replayed| CanaryResult {
                replayed,
                outcome: Outcome::Pending {
                    why: "not looked for yet".into(),
                },
            })
            .collect(),
        succeeded: 0,
        min_success: canary.min_success,
        waited_ms: 0,
        decision: "go",
        rest: None,
        kept_left_visible: Vec::new(),
    }
}

/// The look that follows canaries replayed since `since` (epoch millis): the DLQ (a copy back
/// there failed again), the records and the archive written since; not the main queue (a
/// receive would hide a canary from the consumer). A canary's copy keeps its group: with
/// `group`, the DLQ is looked at for that group's messages only (another tenant's order of the
/// same id is not a canary's).
pub fn follow_look(since: u64, group: Option<&str>) -> LookOptions {
    LookOptions {
        main_queue: QueueLook::SKIP,
        count_main_queue: false,
        dlq: QueueLook {
            limit: DEFAULT_DLQ_LIMIT,
            visibility: DLQ_VISIBILITY,
        },
        kept: false,
        archive_since: chrono::DateTime::from_timestamp_millis(since as i64),
        identity: Identity::default(),
        group: group.map(str::to_owned),
        receive_wait: 1,
    }
}

/// Waits for the canaries' outcomes, replayed `since` (epoch millis): looks (`look_options`)
/// every [`POLL`] until each is decided or the canary's timeout is over, telling `progress`
/// each outcome. Returns how long it waited, in milliseconds.
async fn follow(
    ctx: &Context,
    canaries: &mut [CanaryResult],
    canary: &CanaryOptions,
    (look_options, since): (&LookOptions, u64),
    progress: &mut impl FnMut(String),
) -> Result<u64, CliError> {
    progress(format!(
        "canary: replayed {} ({}); waiting up to {} s for their outcome …",
        canaries.len(),
        canaries
            .iter()
            .map(|c| c.replayed.order_id.as_deref().unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(", "),
        canary.timeout.as_secs()
    ));
    let started = Instant::now();
    loop {
        let pending: BTreeSet<String> = canaries
            .iter()
            .filter(|c| !c.outcome.decided())
            .filter_map(|c| c.replayed.order_id.clone())
            .collect();
        if pending.is_empty() || started.elapsed() >= canary.timeout {
            break;
        }
        tokio::time::sleep(POLL.min(canary.timeout.saturating_sub(started.elapsed()))).await;
        let look = locate(ctx, &Wanted::Orders(pending), look_options).await?;
        for c in canaries.iter_mut().filter(|c| !c.outcome.decided()) {
            c.outcome = outcome(&c.replayed, &look, since);
            if c.outcome.decided() {
                progress(line(c));
            }
        }
    }
    let waited_ms = started.elapsed().as_millis() as u64;
    for c in canaries.iter_mut().filter(|c| !c.outcome.decided()) {
        if c.replayed.order_id.is_none() {
            c.outcome = outcome(&c.replayed, &Look::default(), since);
        }
        progress(line(c));
    }
    Ok(waited_ms)
}

/// Names the kept messages the canary run made visible that the runs did not replay
/// (`replayed`, DLQ message ids: [`left_visible`]), in the report and to `progress`.
fn leave(
    report: &mut CanaryReport,
    kept: &[KeptMessage],
    replayed: Vec<String>,
    options: &RedriveOptions,
    progress: &mut impl FnMut(String),
) {
    if report.kept_made_visible > 0 {
        report.kept_left_visible = left_visible(kept, replayed.iter().map(String::as_str));
    }
    if report.kept_left_visible.is_empty() {
        return;
    }
    progress(format!(
        "canary: {} kept {} messages made visible by the selective run and not replayed stay visible in the DLQ until the next scheduled redriver run keeps and hides them again (keptLeftVisible)",
        report.kept_left_visible.len(),
        options.failure_reason.as_deref().unwrap_or("")
    ));
}

/// A canary's outcome in a line.
pub fn line(c: &CanaryResult) -> String {
    let who = format!(
        "canary {} (DLQ message {} → {})",
        c.replayed.order_id.as_deref().unwrap_or("?"),
        c.replayed.dlq_message_id,
        c.replayed.message_id.as_deref().unwrap_or("?")
    );
    match &c.outcome {
        Outcome::Succeeded { key } => format!("{who}: succeeded: {key} written"),
        Outcome::Failed {
            place,
            at,
            failure_class,
            reason,
        } => format!(
            "{who}: failed again: {} {at} ({}{})",
            if place == "DLQ" {
                "back in the DLQ as"
            } else {
                "archived as"
            },
            failure_class
                .as_deref()
                .map_or_else(String::new, |c| format!("{c}, ")),
            reason.as_deref().unwrap_or("no reason given")
        ),
        Outcome::Pending { why } => format!("{who}: did not succeed in time: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locate::{Archived, Queued, Recorded};

    fn canary(order: Option<&str>) -> Replayed {
        Replayed {
            dlq_message_id: "d-1".into(),
            message_id: Some("m-1".into()),
            order_id: order.map(str::to_owned),
            redrive_count: Some(1),
            failure_reason: Some("VALIDATION_FAILED".into()),
        }
    }

    fn dlq(id: &str, sent: u64) -> Place {
        Place::Dlq(Queued {
            message_id: id.into(),
            receive_count: Some(1),
            redrive_count: Some("1".into()),
            failure_class: Some("permanent".into()),
            failure_reason: Some("VALIDATION_FAILED".into()),
            sent_at: Some(sent),
            first_sent_at: Some(1),
            group: None,
            matched_by_text: false,
        })
    }

    fn redrive_options(group: Option<&str>, max_messages: u32) -> RedriveOptions {
        RedriveOptions {
            dry_run: false,
            failure_reason: Some("VALIDATION_FAILED".into()),
            older_than: None,
            group: group.map(str::to_owned),
            max_messages,
            rate_per_second: 10.0,
            max_redrive_attempts: 3,
            archive_after: Duration::from_secs(86_400),
            permanent_action: resq_redriver::config::PermanentAction::Keep,
            kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
        }
    }

    #[test]
    fn the_canaries_and_the_rest_are_of_the_selection_asked_for() {
        // GIVEN a canary replay of tenant-b's dead letters, 100 at most, 5 canaries
        let options = redrive_options(Some("tenant-b"), 100);
        let how = CanaryOptions {
            count: 5,
            min_success: 100.0,
            timeout: Duration::from_secs(60),
        };
        // THEN the canaries are 5 of tenant-b's
        let first = canary_run(&options, &how);
        assert_eq!(first.group.as_deref(), Some("tenant-b"));
        assert_eq!(first.max_messages, 5);
        assert_eq!(
            first.run_request().group.as_deref(),
            Some("tenant-b"),
            "the run selects the group"
        );
        // AND the rest is tenant-b's too, what --max-messages leaves
        let rest = rest_run(&options, 5).unwrap();
        assert_eq!(
            (rest.group.as_deref(), rest.max_messages),
            (Some("tenant-b"), 95)
        );
        // AND never more canaries than --max-messages, nor a rest past it
        assert_eq!(canary_run(&redrive_options(None, 3), &how).max_messages, 3);
        assert_eq!(rest_run(&redrive_options(None, 3), 3), None);
        // AND their copies are followed in that group's messages only
        assert_eq!(
            follow_look(1_000, Some("tenant-b")).group.as_deref(),
            Some("tenant-b")
        );
        assert_eq!(follow_look(1_000, None).group, None);
    }

    fn recorded(at: u64) -> Place {
        Place::Recorded(Recorded {
            key: "orders/A.json".into(),
            writes: 1,
            written_at: vec![at],
            current: true,
        })
    }

    fn look(places: Vec<Place>) -> Look {
        Look::of_one("A", &places)
    }

    #[test]
    fn a_canary_succeeds_when_its_record_is_written_after_the_replay() {
        let since = 1_000;
        assert_eq!(
            outcome(&canary(Some("A")), &look(vec![recorded(1_500)]), since),
            Outcome::Succeeded {
                key: "orders/A.json".into()
            }
        );
        // a record from before the replay says nothing about the replay
        assert!(matches!(
            outcome(&canary(Some("A")), &look(vec![recorded(900)]), since),
            Outcome::Pending { .. }
        ));
    }

    #[test]
    fn a_canary_fails_when_a_copy_comes_back_to_the_dlq_or_is_archived() {
        let since = 1_000;
        // back in the DLQ after the replay: failed, with its reason; it wins over a record
        let back = outcome(
            &canary(Some("A")),
            &look(vec![recorded(1_200), dlq("d-2", 1_100)]),
            since,
        );
        assert_eq!(
            back,
            Outcome::Failed {
                place: "DLQ".into(),
                at: "d-2".into(),
                failure_class: Some("permanent".into()),
                reason: Some("VALIDATION_FAILED".into()),
            }
        );
        // an older copy of the order, or the replayed message itself, is not its return
        assert!(matches!(
            outcome(
                &canary(Some("A")),
                &look(vec![dlq("d-0", 900), dlq("d-1", 1_100)]),
                since
            ),
            Outcome::Pending { .. }
        ));
        let archived = Place::Archived(Archived {
            key: "archive/REDRIVE_CAP/2026/11/26/m.json".into(),
            reason: "REDRIVE_CAP".into(),
            archived_by: "consumer".into(),
            archived_at: "2026-11-26T00:00:00.000Z".into(),
            redrive_count: Some(4),
            last_error: None,
            restores: 0,
            written_at: Some(1_300),
            matched_by_text: false,
        });
        assert!(matches!(
            outcome(&canary(Some("A")), &look(vec![archived]), since),
            Outcome::Failed { place, .. } if place == "archive"
        ));
        // without an orderId there is nothing to follow: it cannot count as a success
        assert!(matches!(
            outcome(&canary(None), &look(vec![recorded(1_500)]), since),
            Outcome::Pending { .. }
        ));
    }

    #[test]
    fn the_kept_messages_the_runs_did_not_replay_are_left_visible_and_named() {
        let kept = |id: &str| KeptMessage {
            message_id: id.into(),
            receipt_handle: format!("rh-{id}"),
            failure_reason: Some("VALIDATION_FAILED".into()),
            first_sent_at: None,
            hidden_until: 1,
            order_id: None,
        };
        // GIVEN three kept messages of the reason, one of them replayed as a canary, and a
        // replay of a message that was not kept
        let listed = [kept("k-1"), kept("k-2"), kept("k-3")];
        // THEN the other two are left visible
        assert_eq!(left_visible(&listed, ["k-2", "d-9"]), vec!["k-1", "k-3"]);
        assert!(left_visible(&listed, ["k-1", "k-2", "k-3"]).is_empty());
    }

    #[test]
    fn the_rest_goes_only_at_the_success_rate_asked_for() {
        assert!(go_on(2, 2, 100.0));
        assert!(!go_on(1, 2, 100.0));
        assert!(go_on(1, 2, 50.0));
        assert!(!go_on(1, 3, 50.0));
        assert!(go_on(0, 3, 0.0));
        assert!(!go_on(0, 0, 0.0), "no canary, no evidence");
    }

    #[test]
    fn a_failed_canary_says_where_it_went_and_why() {
        let c = CanaryResult {
            replayed: canary(Some("A")),
            outcome: Outcome::Failed {
                place: "DLQ".into(),
                at: "d-2".into(),
                failure_class: Some("permanent".into()),
                reason: Some("VALIDATION_FAILED".into()),
            },
        };
        assert_eq!(
            line(&c),
            "canary A (DLQ message d-1 → m-1): failed again: back in the DLQ as d-2 (permanent, VALIDATION_FAILED)"
        );
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["outcome"], "failed");
        assert_eq!(v["orderId"], "A");
        assert_eq!(v["reason"], "VALIDATION_FAILED");
    }
}
