//! `resq dlq peek` and `resq dlq redrive`.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use resq::config::CommonConfig;
use resq::settle::{Plan, QueueUrl};
use resq::sqs::{Queues, ReceivedMessage};
use resq::store::S3Store;
use resq_redriver::config::{PermanentAction, RedriverConfig};
use resq_redriver::ports::CloudWatchAlarms;
use resq_redriver::request::RunRequest;
use resq_redriver::summary::Replayed;
use resq_redriver::{Redriver, StopReason, Summary, fair};

use crate::CliError;
use crate::context::Context;
use crate::hold::Holding;

/// A peek filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Only this `x-failure-reason`.
    pub reason: Option<String>,
    /// Only messages at least this old (from the producer's send).
    pub older_than: Option<Duration>,
    /// Only this `MessageGroupId` (a tenant).
    pub group: Option<String>,
    /// At most this many.
    pub limit: usize,
}

impl Filter {
    /// The redriver's selection for this filter: one rule for what a peek shows and what a
    /// run touches.
    fn selection(&self) -> resq_redriver::classify::Selection<'_> {
        resq_redriver::classify::Selection {
            reason: self.reason.as_deref(),
            older_than: self.older_than,
            group: self.group.as_deref(),
        }
    }
}

/// DLQ messages a peek reads to count what waits (or more, when it needs more to show
/// `--limit` of them; or fewer, when the DLQ holds fewer): enough to see which tenants and
/// reasons fill the DLQ without holding a large DLQ in flight (each message read stays hidden
/// until the peek ends).
pub const COUNTS_READ: usize = 1_000;

/// How a peek's counts name the messages without a `MessageGroupId` (SQS takes no space in a
/// group id: no group is named so).
pub const NO_GROUP: &str = "(no group)";

/// How a peek's counts name the messages without an `x-failure-reason` (dead letters SQS
/// moved itself).
pub const NO_REASON: &str = "(no reason)";

/// Messages under one key: a failure reason, or a `MessageGroupId` (`None`: without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// The reason or the group.
    pub key: Option<String>,
    /// How many messages.
    pub messages: usize,
}

/// Counts the messages by key, the largest first (equal counts by key, the messages without
/// one last).
pub fn tally<'a>(keys: impl IntoIterator<Item = Option<&'a str>>) -> Vec<Tally> {
    let mut by: HashMap<Option<&str>, usize> = HashMap::new();
    for key in keys {
        *by.entry(key).or_default() += 1;
    }
    let mut out: Vec<Tally> = by
        .into_iter()
        .map(|(key, messages)| Tally {
            key: key.map(str::to_owned),
            messages,
        })
        .collect();
    out.sort_by(|a, b| {
        let order = |t: &Tally| (std::cmp::Reverse(t.messages), t.key.is_none());
        order(a).cmp(&order(b)).then_with(|| a.key.cmp(&b.key))
    });
    out
}

/// What a peek counted: the messages that match its filter among those it read, by reason
/// and by group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// DLQ messages read (each once).
    pub read: usize,
    /// Of those, the messages that match the filter: those counted.
    pub matching: usize,
    /// The reading stopped at its bound, not at the end of the DLQ: it may hold more.
    pub more: bool,
    /// By `x-failure-reason`, the largest first.
    pub by_reason: Vec<Tally>,
    /// By `MessageGroupId` (a tenant), the largest first.
    pub by_group: Vec<Tally>,
}

impl Counts {
    /// The counts of `matching` (the messages that match, as (reason, group)) among `read`
    /// messages read.
    pub fn of<'a>(
        read: usize,
        matching: &[(Option<&'a str>, Option<&'a str>)],
        more: bool,
    ) -> Self {
        Self {
            read,
            matching: matching.len(),
            more,
            by_reason: tally(matching.iter().map(|(reason, _)| *reason)),
            by_group: tally(matching.iter().map(|(_, group)| *group)),
        }
    }
}

/// Whether a peek receives again, after a batch of `got` messages of which `new` were not
/// seen yet, with `shown` of `limit` shown and `read` messages read: until both what it shows
/// and what it counts are full, or it has been once through the DLQ: a batch empty, or with a
/// message it read before (its hide ran out: the DLQ came around), ends it, so that a rare
/// filter makes one pass, not one per hide.
pub fn peek_on(got: usize, new: usize, shown: usize, limit: usize, read: usize) -> bool {
    new > 0 && new == got && (shown < limit || read < COUNTS_READ)
}

/// One DLQ message as shown.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Peeked {
    /// DLQ message id.
    pub message_id: String,
    /// `x-failure-reason`, if any.
    pub reason: Option<String>,
    /// `x-failure-class`, if any.
    pub failure_class: Option<String>,
    /// `x-redrive-count` as sent.
    pub redrive_count: Option<String>,
    /// Age in seconds from the producer's send.
    pub age_seconds: Option<u64>,
    /// Its `MessageGroupId` (a fair queue's tenant, a FIFO group), if any.
    pub group: Option<String>,
    /// The body (cut at 200 characters).
    pub body: String,
}

/// What a peek shows of a message: the failure reason as the redriver reads it, the failure
/// class and redrive count as they were sent (raw, so an operator sees an unreadable one).
fn peeked(m: &ReceivedMessage, now_ms: u64) -> Peeked {
    let attr = |n: &str| {
        m.message_attributes
            .get(n)
            .and_then(|v| v.string_value.clone())
    };
    let mut body: String = m.body.chars().take(200).collect();
    if body.len() < m.body.len() {
        body.push('…');
    }
    Peeked {
        message_id: m.message_id.clone(),
        reason: m.failure_reason().map(str::to_owned),
        failure_class: attr(resq::attributes::X_FAILURE_CLASS),
        redrive_count: attr(resq::attributes::X_REDRIVE_COUNT),
        age_seconds: m.first_sent_at().map(|t| now_ms.saturating_sub(t) / 1000),
        group: m.group_id().map(str::to_owned),
        body,
    }
}

/// Makes the permanent failures the redriver kept and hid (until their TTL) visible again, so
/// that a peek or a redrive reaches them now; with `reason`, only those of that
/// `x-failure-reason`. Returns how many were made visible. The next scheduled run keeps and
/// hides them again unless something redrives them first.
pub async fn unhide_kept(ctx: &Context, reason: Option<&str>) -> Result<usize, CliError> {
    let (dlq_url, bucket) = (ctx.dlq()?, ctx.archive_bucket()?);
    let hidden = resq::keep::still_hidden(&ctx.store(), dlq_url, chrono::Utc::now())
        .await
        .map_err(|source| CliError::Aws {
            what: format!("reading the keep list in s3://{bucket}/kept/"),
            source,
        })?;
    let plan = Plan::release(
        &QueueUrl::from(dlq_url),
        resq::keep::handles(hidden, reason),
    );
    // a handle that no longer works belongs to a message already visible, redriven or archived
    let report = ctx.settle(&plan).await;
    Ok(report.iter().filter(|(_, c)| c.is_confirmed()).count())
}

/// What `resq dlq peek` found: the messages shown, and what to tell the operator about the
/// others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeekReport {
    /// With `--kept`: how many kept messages were made visible first.
    pub unhidden: Option<usize>,
    /// The messages selected.
    pub shown: Vec<Peeked>,
    /// What waits, counted by reason and by group.
    pub counts: Counts,
    /// DLQ messages visible when the peek began.
    pub waiting: u64,
    /// Without `--kept`: DLQ messages in flight after the peek (kept permanent failures, or
    /// messages a run holds); 0 when unknown.
    pub hidden: u64,
}

/// `resq dlq peek`: checks the DLQ answers before anything is changed; with `kept`, makes the
/// kept permanent failures (of the filter's reason) visible first; then peeks; without
/// `kept`, counts what stays hidden.
pub async fn peek_report(
    ctx: &Context,
    filter: &Filter,
    kept: bool,
) -> Result<PeekReport, CliError> {
    if kept {
        ctx.archive_bucket()?;
    }
    // the DLQ answers (credentials, endpoint, permission) before anything is changed
    let (waiting, _) = reach(ctx).await?;
    let unhidden = if kept {
        Some(unhide_kept(ctx, filter.reason.as_deref()).await?)
    } else {
        None
    };
    let Peek { shown, counts } = peek_counted(ctx, filter).await?;
    let hidden = if kept {
        0
    } else {
        reach(ctx).await.map_or(0, |(_, in_flight)| in_flight)
    };
    Ok(PeekReport {
        unhidden,
        shown,
        counts,
        waiting,
        hidden,
    })
}

/// Checks that the DLQ answers (credentials, endpoint, permission), before a command reads
/// it; returns its depth (visible, in flight).
pub async fn reach(ctx: &Context) -> Result<(u64, u64), CliError> {
    let dlq_url = ctx.dlq()?;
    crate::status::depth(&ctx.sqs, dlq_url)
        .await
        .map_err(|source| CliError::Aws {
            what: format!("reading {dlq_url}"),
            source,
        })
}

/// Lists DLQ messages without removing any: each is received, shown, and made visible again.
pub async fn peek(ctx: &Context, filter: &Filter) -> Result<Vec<Peeked>, CliError> {
    peek_counted(ctx, filter).await.map(|p| p.shown)
}

/// What a peek saw: the messages shown, and what waits, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peek {
    /// The first `limit` messages that match the filter.
    pub shown: Vec<Peeked>,
    /// The messages that match, among those read, by reason and by group.
    pub counts: Counts,
}

/// Lists DLQ messages without removing any, and counts those that match the filter by reason
/// and by group: each message is received (once, however often SQS hands it out), shown or
/// counted, and made visible again when the peek ends. Reads until it has shown `limit` and
/// read [`COUNTS_READ`] messages, or to the end of the DLQ ([`peek_on`]).
pub async fn peek_counted(ctx: &Context, filter: &Filter) -> Result<Peek, CliError> {
    let dlq_url = ctx.dlq()?;
    let now_ms = crate::now_ms();
    let selection = filter.selection();
    let mut shown = Vec::new();
    let mut matching = Vec::new();
    let mut ids = HashSet::new();
    let mut handles = Vec::new();
    // hidden while peeking, so each is seen once; released at the end
    let (received, more) = loop {
        let batch = match ctx.sqs.receive(dlq_url, 10, Some(60), 0).await {
            Ok(batch) => batch,
            Err(source) => {
                break (
                    Err(CliError::Aws {
                        what: format!("receiving from {dlq_url}"),
                        source,
                    }),
                    false,
                );
            }
        };
        let (got, mut new) = (batch.len(), 0);
        for m in batch {
            handles.push(m.receipt_handle.clone());
            if !ids.insert(m.message_id.clone()) {
                continue;
            }
            new += 1;
            if !selection.picks(&m, now_ms) {
                continue;
            }
            if shown.len() < filter.limit {
                shown.push(peeked(&m, now_ms));
            }
            matching.push(m);
        }
        if !peek_on(got, new, shown.len(), filter.limit, ids.len()) {
            break (Ok(()), new > 0);
        }
    };
    // what was received is released even when receiving failed part-way
    ctx.settle(&Plan::release(&QueueUrl::from(dlq_url), handles))
        .await;
    received?;
    let keys: Vec<(Option<&str>, Option<&str>)> = matching
        .iter()
        .map(|m| (m.failure_reason(), m.group_id()))
        .collect();
    Ok(Peek {
        shown,
        counts: Counts::of(ids.len(), &keys, more),
    })
}

/// Checks what a redrive needs before it starts: the main queue (replays go there), the DLQ
/// (answering: credentials, endpoint, permission) and the bucket (archives, the keep list).
pub async fn ready_to_redrive(ctx: &Context) -> Result<(), CliError> {
    ctx.main_queue()?;
    ctx.archive_bucket()?;
    reach(ctx).await.map(|_| ())
}

/// Whether a replay may go while the breakers' alarms read as `reading` (SPEC §9): refused,
/// naming them, while one is in ALARM or they cannot be read (the scheduled redriver pauses
/// then too), unless `force`; a dry run is never refused. The notes to print either way.
pub fn replay_verdict(
    reading: Result<crate::consumer::AlarmReading, CliError>,
    force: bool,
    dry_run: bool,
) -> Result<Vec<String>, CliError> {
    let mut notes = Vec::new();
    let r = match (reading, force || dry_run) {
        (Ok(r), _) => r,
        (Err(e), true) => {
            let then = if dry_run {
                "a replay would be refused"
            } else {
                "replaying anyway (--force)"
            };
            notes.push(format!(
                "the breaker's alarms could not be read ({e}): {then}"
            ));
            return Ok(notes);
        }
        (Err(e), false) => return Err(e),
    };
    if !r.missing.is_empty() {
        notes.push(format!(
            "the breaker's alarms {} do not exist: not checked",
            r.missing.join(", ")
        ));
    }
    match (r.in_alarm.is_empty(), dry_run, force) {
        (true, _, _) => {}
        (false, true, _) => notes.push(format!(
            "{} in ALARM: a replay would be refused (--force replays anyway)",
            r.in_alarm.join(", ")
        )),
        (false, false, true) => notes.push(format!(
            "replaying although {} in ALARM (--force)",
            r.in_alarm.join(", ")
        )),
        (false, false, false) => return Err(CliError::ReplayInAlarm { alarms: r.in_alarm }),
    }
    Ok(notes)
}

/// [`replay_verdict`] on the states of `alarms` as CloudWatch has them.
pub async fn check_breakers(
    ctx: &Context,
    alarms: &[String],
    force: bool,
    dry_run: bool,
) -> Result<Vec<String>, CliError> {
    let refused = "a replay is refused while they cannot be read; --force replays anyway";
    let reading = crate::consumer::read_alarms(&ctx.cloudwatch, alarms, refused).await;
    replay_verdict(reading, force, dry_run)
}

/// Why a redrive's result is a failure, if it is: messages not moved, or a DLQ that stopped
/// answering. Nothing is lost either way: what was not moved stays in the DLQ.
pub fn redrive_failure(summary: &Summary) -> Option<CliError> {
    if summary.stopped_by == StopReason::ReceiveError {
        Some(CliError::ReceiveStopped)
    } else if summary.failed > 0 {
        Some(CliError::NotMoved {
            count: summary.failed,
        })
    } else {
        None
    }
}

/// What an operator's redrive was asked to do (`resq dlq redrive`'s flags).
#[derive(Debug, Clone, PartialEq)]
pub struct RedriveOptions {
    /// Classify and report; change nothing.
    pub dry_run: bool,
    /// Only this `x-failure-reason`.
    pub failure_reason: Option<String>,
    /// Only messages at least this old.
    pub older_than: Option<Duration>,
    /// Only this `MessageGroupId` (a tenant).
    pub group: Option<String>,
    /// Handle at most this many messages.
    pub max_messages: u32,
    /// Token-bucket rate.
    pub rate_per_second: f64,
    /// The redrive cap (`MAX_REDRIVE_ATTEMPTS`).
    pub max_redrive_attempts: u32,
    /// The TTL (`ARCHIVE_AFTER_SECONDS`).
    pub archive_after: Duration,
    /// What to do with permanent failures.
    pub permanent_action: PermanentAction,
    /// The stack's `KEPT_IN_FLIGHT_MAX`: kept messages hidden at most, earlier runs' included.
    pub kept_in_flight_max: u64,
}

impl RedriveOptions {
    /// The redriver's run request for these options.
    pub fn run_request(&self) -> RunRequest {
        RunRequest {
            dry_run: self.dry_run,
            max_messages: Some(self.max_messages),
            rate_per_second: self.rate_per_second,
            reason: self.failure_reason.clone(),
            older_than: self.older_than,
            group: self.group.clone(),
            // an operator's rate is held, not climbed from
            rate_max: self.rate_per_second,
            alarm: None,
        }
    }
}

/// `--canary N --min-success P --canary-timeout-seconds T` (see [`crate::canary`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CanaryOptions {
    /// Canaries to replay first.
    pub count: u32,
    /// Go on only when at least this percentage of them succeeded.
    pub min_success: f64,
    /// Wait at most this long for their outcomes.
    pub timeout: Duration,
}

/// What `resq dlq redrive` was asked to do, by its flags.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Replay into the main queue through the redriver's rules.
    Replay,
    /// Shadow replay: copy to a staging queue, the DLQ unchanged (`--to QUEUE --keep-source`).
    Shadow {
        /// The staging queue.
        to: String,
    },
    /// Canary replay (`--canary N --min-success P`).
    Canary(CanaryOptions),
}

/// The flags that choose the [`Mode`].
#[derive(Debug, Clone, PartialEq)]
pub struct ModeFlags {
    /// `--to`.
    pub to: Option<String>,
    /// `--keep-source`.
    pub keep_source: bool,
    /// `--canary`.
    pub canary: Option<u32>,
    /// `--min-success`.
    pub min_success: Option<f64>,
    /// `--canary-timeout-seconds`.
    pub canary_timeout: Duration,
    /// `--dry-run`.
    pub dry_run: bool,
}

/// The mode the flags ask for, or why they do not go together. `--to` without
/// `--keep-source` is refused, not read as a move: a move into a queue other than the main
/// queue would take the messages out of resq's care (no redrive cap, no archive, the staging
/// queue's own retention). `--keep-source` without `--to` is refused too: a replay into the
/// main queue that keeps its source would run every order twice.
pub fn mode(flags: &ModeFlags) -> Result<Mode, CliError> {
    let usage = |m: &str| Err(CliError::Usage(m.to_owned()));
    if flags.min_success.is_some() && flags.canary.is_none() {
        return usage("--min-success goes with --canary N");
    }
    match (&flags.to, flags.keep_source, flags.canary) {
        (Some(_), _, Some(_)) => usage(
            "--canary replays into the main queue and --to copies to a staging queue: choose one",
        ),
        (Some(_), false, None) => usage(
            "--to copies to a staging queue and needs --keep-source (the DLQ stays as it is); a real move replays into the main queue: `resq dlq redrive` without --to (moving messages to another queue would take them out of resq's redrive cap and archive)",
        ),
        (None, true, _) => usage(
            "--keep-source leaves the DLQ as it is and so needs a staging queue: --to QUEUE_URL (a replay into the main queue that kept its source would run every order twice)",
        ),
        (Some(_), true, None) if flags.dry_run => usage(
            "--dry-run shows what a replay would send without --to; a shadow replay (--to … --keep-source) leaves the DLQ as it is already",
        ),
        (Some(to), true, None) => Ok(Mode::Shadow { to: to.clone() }),
        (None, false, Some(_)) if flags.dry_run => {
            usage("--canary replays for real: run --dry-run alone first, then --canary")
        }
        (None, false, Some(count)) => Ok(Mode::Canary(CanaryOptions {
            count,
            min_success: flags.min_success.unwrap_or(100.0),
            timeout: flags.canary_timeout,
        })),
        (None, false, None) => Ok(Mode::Replay),
    }
}

/// The permanent action an operator asked for: `--permanent-action`, or `archive` when the
/// old `--archive-permanent` switch is given.
pub fn permanent_action(chosen: PermanentAction, archive_permanent: bool) -> PermanentAction {
    if archive_permanent {
        PermanentAction::Archive
    } else {
        chosen
    }
}

/// What `resq dlq redrive` did: the run's summary and what it held at its end.
#[derive(Debug, Clone, PartialEq)]
pub struct Redriven {
    /// The run's summary.
    pub summary: Summary,
    /// The DLQ messages it held, released or left.
    pub held: crate::hold::Released,
}

impl Redriven {
    /// Why it is a failure, if it is: interrupted (saying what it released), or as
    /// [`redrive_failure`] says.
    pub fn failure(&self) -> Option<CliError> {
        match self.summary.stopped_by {
            StopReason::Interrupted => Some(CliError::Interrupted {
                released: self.held.released,
                left: self.held.left,
                receives_cut_off: self.held.receives_cut_off,
                back_within_seconds: self.held.back_within.map_or(0, |d| d.as_secs()),
            }),
            _ => redrive_failure(&self.summary),
        }
    }
}

/// `resq dlq redrive`: checks what the redrive needs, then runs it until it ends or `stop`
/// completes (Ctrl-C: see [`crate::hold::interrupted`]); then releases whatever it still holds
/// (an error, a lost connection, a run cut short), within [`crate::hold::RELEASE_WITHIN`]. A
/// run that could not move everything still returns its summary; [`Redriven::failure`] says
/// whether it failed.
pub async fn run_redrive(
    ctx: &Context,
    options: &RedriveOptions,
    stop: impl Future<Output = ()>,
) -> Result<Redriven, CliError> {
    ready_to_redrive(ctx).await?;
    let (summary, _, held) = held_run(ctx, options, false, stop).await;
    Ok(Redriven { summary, held })
}

/// Redrives the DLQ through the redriver engine (same rules, rate limit and summary as the
/// scheduled function). The context must name the main queue, the DLQ and the bucket
/// ([`ready_to_redrive`] checks them).
pub async fn redrive(
    ctx: &Context,
    request: RunRequest,
    cap: u32,
    archive_after: Duration,
    permanent_action: PermanentAction,
) -> Summary {
    let options = RedriveOptions {
        dry_run: request.dry_run,
        failure_reason: request.reason,
        older_than: request.older_than,
        group: request.group,
        max_messages: request.max_messages.unwrap_or(u32::MAX),
        rate_per_second: request.rate_per_second,
        max_redrive_attempts: cap,
        archive_after,
        permanent_action,
        kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
    };
    held_run(ctx, &options, false, std::future::pending())
        .await
        .0
}

/// [`redrive`] as `options` ask, with the replays it confirmed.
pub(crate) async fn redrive_listed(
    ctx: &Context,
    options: &RedriveOptions,
) -> (Summary, Vec<Replayed>) {
    let (summary, listed, _) = held_run(ctx, options, true, std::future::pending()).await;
    (summary, listed)
}

/// One operator's run through a [`Holding`], cut short when `stop` completes; then what it
/// still holds released.
async fn held_run(
    ctx: &Context,
    options: &RedriveOptions,
    list: bool,
    stop: impl Future<Output = ()>,
) -> (Summary, Vec<Replayed>, crate::hold::Released) {
    let holding = Holding::new(ctx.sqs.clone(), &ctx.dlq_url);
    let request = options.run_request();
    let deadline = Instant::now() + RUN_WITHIN;
    let (summary, listed) = redriver(ctx, &holding, options)
        .run_until(&request, deadline, list, stop, crate::hold::GRACE)
        .await;
    let held = holding
        .release_all(&ctx.store(), crate::hold::RELEASE_WITHIN)
        .await;
    (summary, listed, held)
}

/// How long an operator's redrive may run: it has no Lambda deadline, an hour bounds it.
const RUN_WITHIN: Duration = Duration::from_secs(3600);

/// How long an operator's run hides what it reads past its `--max-messages` (to archive what
/// is due): it reads on for half of it, and what it strands if killed is back within it.
pub const READ_ON_HOLD: Duration = Duration::from_secs(60);

/// The redriver engine as an operator runs it over `queues`: the scheduled function's
/// configuration for `options`, without a breaker (the command checks the alarms first), a
/// receive wait or metrics.
fn redriver<Q: Queues>(
    ctx: &Context,
    queues: Q,
    options: &RedriveOptions,
) -> Redriver<Q, S3Store, CloudWatchAlarms> {
    let config = RedriverConfig {
        common: CommonConfig {
            main_queue_url: ctx.main_queue_url.clone(),
            dlq_url: ctx.dlq_url.clone(),
            archive_bucket: ctx.bucket.clone(),
            max_redrive_attempts: options.max_redrive_attempts,
            deadline_margin: Duration::from_secs(1),
        },
        rate_per_second: options.rate_per_second,
        max_messages_per_run: Some(options.max_messages),
        kept_in_flight_max: options.kept_in_flight_max,
        archive_after: options.archive_after,
        permanent_action: options.permanent_action,
        pause_on_alarms: Vec::new(),
        // the operator's run leaves the consumer to the stack's redriver
        pause_consumer_on_alarms: Vec::new(),
        consumer_mapping: None,
        rate_max: options.rate_per_second,
        archive_sweep: Duration::from_secs(resq_redriver::config::DEFAULT_ARCHIVE_SWEEP_SECONDS),
    };
    let alarms = CloudWatchAlarms::new(ctx.cloudwatch.clone());
    // an operator's run holds about what it replays (twice its --max-messages, up to the
    // scheduled run's 1,000): an interrupted one leaves little hidden
    let candidates = (options.max_messages as usize)
        .saturating_mul(2)
        .clamp(resq::sqs::MAX_BATCH, fair::MAX_CANDIDATES);
    Redriver::new(queues, ctx.store(), alarms, config)
        .with_candidates_max(candidates)
        .with_read_on_hold(READ_ON_HOLD)
        .with_receive_wait(0)
        // an operator's run prints its summary; EMF lines on a terminal reach no CloudWatch
        .with_metrics(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redrive_options_make_the_run_request() {
        let options = RedriveOptions {
            dry_run: true,
            failure_reason: Some("VALIDATION_FAILED".into()),
            older_than: Some(Duration::from_secs(600)),
            group: Some("tenant-b".into()),
            max_messages: 50,
            rate_per_second: 2.5,
            max_redrive_attempts: 3,
            archive_after: Duration::from_secs(86_400),
            permanent_action: PermanentAction::Keep,
            kept_in_flight_max: 50_000,
        };
        assert_eq!(
            options.run_request(),
            RunRequest {
                dry_run: true,
                max_messages: Some(50),
                rate_per_second: 2.5,
                reason: Some("VALIDATION_FAILED".into()),
                older_than: Some(Duration::from_secs(600)),
                group: Some("tenant-b".into()),
                rate_max: 2.5,
                alarm: None,
            }
        );
    }

    #[test]
    fn a_peeks_filter_is_the_redrivers_selection() {
        // GIVEN dead letters of two tenants, and one without a group
        let dead_letter = |group: Option<&str>, reason: &str| {
            let mut m = resq_testing::received(
                "m-1",
                "{}",
                0,
                &[(
                    resq::attributes::X_FAILURE_REASON,
                    resq::attributes::AttributeValue::string(reason),
                )],
            );
            if let Some(g) = group {
                m.attributes.insert("MessageGroupId".into(), g.into());
            }
            m
        };
        let filter = Filter {
            group: Some("tenant-b".into()),
            reason: Some("DOWNSTREAM_UNAVAILABLE".into()),
            ..Filter::default()
        };
        // THEN --group picks that tenant's only, with the other filters
        let picks = |m: &ReceivedMessage| filter.selection().picks(m, 0);
        assert!(picks(&dead_letter(
            Some("tenant-b"),
            "DOWNSTREAM_UNAVAILABLE"
        )));
        assert!(!picks(&dead_letter(
            Some("tenant-a"),
            "DOWNSTREAM_UNAVAILABLE"
        )));
        assert!(!picks(&dead_letter(None, "DOWNSTREAM_UNAVAILABLE")));
        assert!(!picks(&dead_letter(Some("tenant-b"), "VALIDATION_FAILED")));
        // AND a message's group is shown
        let shown = peeked(&dead_letter(Some("tenant-b"), "X"), 0);
        assert_eq!(shown.group.as_deref(), Some("tenant-b"));
        assert_eq!(peeked(&dead_letter(None, "X"), 0).group, None);
    }

    #[test]
    fn counts_are_the_largest_first_and_the_messages_without_a_key_last() {
        // GIVEN keys with ties, and messages without a key as many as the largest
        let keys = [
            Some("b"),
            None,
            Some("a"),
            Some("c"),
            Some("c"),
            None,
            Some("b"),
            Some("c"),
            Some("a"),
            None,
        ];
        // THEN the largest first, ties by key, the messages without one last among equals
        let tallies = tally(keys);
        let counted: Vec<(Option<&str>, usize)> = tallies
            .iter()
            .map(|t| (t.key.as_deref(), t.messages))
            .collect();
        assert_eq!(
            counted,
            vec![(Some("c"), 3), (None, 3), (Some("a"), 2), (Some("b"), 2)]
        );
        assert_eq!(
            counted.iter().map(|(_, n)| n).sum::<usize>(),
            keys.len(),
            "every message counted once"
        );
        assert!(tally([]).is_empty());
    }

    #[test]
    fn a_peek_counts_what_matches_by_reason_and_by_group() {
        // GIVEN 5 messages read, 3 matching: two of tenant-a, one without a group
        let matching = [
            (Some("DOWNSTREAM_UNAVAILABLE"), Some("tenant-a")),
            (None, None),
            (Some("DOWNSTREAM_UNAVAILABLE"), Some("tenant-a")),
        ];
        let c = Counts::of(5, &matching, false);
        // THEN each is counted once by reason and once by group
        assert_eq!((c.read, c.matching, c.more), (5, 3, false));
        assert_eq!(
            c.by_group,
            vec![
                Tally {
                    key: Some("tenant-a".into()),
                    messages: 2
                },
                Tally {
                    key: None,
                    messages: 1
                }
            ]
        );
        assert_eq!(
            c.by_reason[0].key.as_deref(),
            Some("DOWNSTREAM_UNAVAILABLE")
        );
        assert_eq!(
            c.by_reason[1],
            Tally {
                key: None,
                messages: 1
            }
        );
    }

    #[test]
    fn a_peek_reads_until_it_has_shown_and_counted_enough_or_the_dlq_ends() {
        // GIVEN a batch that brought new messages
        // WHEN fewer are shown than asked, or fewer read than counted at most: on
        assert!(peek_on(10, 10, 5, 20, 5));
        assert!(peek_on(10, 10, 20, 20, 20), "shown enough, but not counted");
        assert!(
            peek_on(10, 10, 5, 20, COUNTS_READ),
            "counted, but not shown"
        );
        // THEN both full: stop (the counts say there may be more)
        assert!(!peek_on(10, 10, 20, 20, COUNTS_READ));
        assert!(!peek_on(10, 10, 0, 0, COUNTS_READ), "--limit 0 counts only");
        // AND an empty batch is the end of the DLQ
        assert!(!peek_on(0, 0, 0, 20, 3));
        // AND so is one with a message read before (its hide ran out): one pass, however
        // rare the filter and however little shown
        assert!(!peek_on(10, 9, 0, 20, 5_000));
    }

    #[test]
    fn a_replay_waits_for_the_breakers_alarms_unless_forced_and_a_dry_run_is_told() {
        use crate::consumer::AlarmReading;
        let reading = |in_alarm: &[&str], missing: &[&str]| {
            let names = |n: &[&str]| n.iter().map(|a| (*a).to_owned()).collect();
            Ok(AlarmReading {
                in_alarm: names(in_alarm),
                missing: names(missing),
            })
        };
        let unread = || {
            Err(CliError::Aws {
                what: "reading the breaker's alarms a, b".into(),
                source: resq::error::AwsError::service("AccessDenied", "no"),
            })
        };
        // GIVEN an alarm in ALARM: refused, naming it, exit 1
        let e = replay_verdict(reading(&["resq-replays-failing"], &[]), false, false).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(
            e.to_string()
                .starts_with("not replayed: the breaker's alarm resq-replays-failing is in ALARM")
                && e.to_string().contains("--force"),
            "{e}"
        );
        // AND --force replays, saying so; a dry run is not refused, and told
        let forced = replay_verdict(reading(&["x"], &[]), true, false).unwrap();
        assert_eq!(forced, ["replaying although x in ALARM (--force)"]);
        let dry = replay_verdict(reading(&["x"], &[]), false, true).unwrap();
        assert!(dry[0].contains("a replay would be refused"), "{dry:?}");
        // WHEN the alarms cannot be read: refused too, unless forced (or a dry run)
        assert!(matches!(
            replay_verdict(unread(), false, false),
            Err(CliError::Aws { .. })
        ));
        let forced = replay_verdict(unread(), true, false).unwrap();
        assert!(
            forced[0].starts_with("the breaker's alarms could not be read"),
            "{forced:?}"
        );
        // AND all OK goes on; an alarm that does not exist is said not checked
        assert!(
            replay_verdict(reading(&[], &[]), false, false)
                .unwrap()
                .is_empty()
        );
        let missing = replay_verdict(reading(&[], &["y"]), false, false).unwrap();
        assert_eq!(
            missing,
            ["the breaker's alarms y do not exist: not checked"]
        );
    }

    #[test]
    fn an_interrupted_redrive_says_what_it_released_and_exits_130() {
        let done = |left| Redriven {
            summary: summary(0, "interrupted"),
            held: crate::hold::Released {
                released: 12,
                left,
                receives_cut_off: 0,
                back_within: Some(Duration::from_secs(59)),
            },
        };
        let e = done(0).failure().unwrap();
        assert_eq!(e.exit_code(), 130);
        assert!(
            e.to_string()
                .ends_with("it released the 12 DLQ messages it held"),
            "{e}"
        );
        let e = done(3).failure().unwrap().to_string();
        assert!(
            e.ends_with("but 3 could not be released: they come back by themselves within 59 s"),
            "{e}"
        );
        // a receive given up before its answer may have taken messages the run never saw
        let mut cut = done(0);
        cut.held.receives_cut_off = 2;
        let e = cut.failure().unwrap().to_string();
        assert!(
            e.ends_with("but 2 receives given up before SQS answered may have hidden up to 20 it never saw: they come back by themselves within 59 s"),
            "{e}"
        );
        assert!(
            Redriven {
                summary: summary(0, "empty"),
                ..done(0)
            }
            .failure()
            .is_none()
        );
    }

    fn summary(failed: u64, stopped_by: &str) -> Summary {
        serde_json::from_value(serde_json::json!({
            "dryRun": false, "paused": false, "received": 4, "redriven": 4 - failed,
            "archived": {}, "skipped": 0, "kept": 0, "unhidden": 0, "failed": failed,
            "returned": 0, "deleteFailed": 0, "elapsedMs": 10, "ratePerSecond": 10.0,
            "stoppedBy": stopped_by
        }))
        .expect("a summary")
    }

    #[test]
    fn a_redrive_fails_when_it_could_not_move_everything() {
        assert!(redrive_failure(&summary(0, "empty")).is_none());
        assert!(matches!(
            redrive_failure(&summary(3, "maxMessages")),
            Some(CliError::NotMoved { count: 3 })
        ));
        assert!(matches!(
            redrive_failure(&summary(0, "receiveError")),
            Some(CliError::ReceiveStopped)
        ));
    }

    fn flags() -> ModeFlags {
        ModeFlags {
            to: None,
            keep_source: false,
            canary: None,
            min_success: None,
            canary_timeout: Duration::from_secs(300),
            dry_run: false,
        }
    }

    #[test]
    fn the_flags_choose_a_replay_a_shadow_or_a_canary() {
        assert_eq!(mode(&flags()).unwrap(), Mode::Replay);
        let staging = "https://sqs.us-east-1.amazonaws.com/1/staging".to_owned();
        let shadow = ModeFlags {
            to: Some(staging.clone()),
            keep_source: true,
            ..flags()
        };
        assert_eq!(
            mode(&shadow).unwrap(),
            Mode::Shadow {
                to: staging.clone()
            }
        );
        let canary = ModeFlags {
            canary: Some(5),
            min_success: Some(80.0),
            ..flags()
        };
        assert_eq!(
            mode(&canary).unwrap(),
            Mode::Canary(CanaryOptions {
                count: 5,
                min_success: 80.0,
                timeout: Duration::from_secs(300)
            })
        );
        // every canary must succeed unless told otherwise
        let all = ModeFlags {
            canary: Some(2),
            ..flags()
        };
        assert!(matches!(mode(&all).unwrap(), Mode::Canary(c) if c.min_success == 100.0));
    }

    #[test]
    fn flags_that_do_not_go_together_are_refused_saying_why() {
        let refused = |f: ModeFlags| {
            let e = mode(&f).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            e.to_string()
        };
        let to = Some("https://q/staging".to_owned());
        assert!(
            refused(ModeFlags {
                to: to.clone(),
                ..flags()
            })
            .contains("needs --keep-source")
        );
        assert!(
            refused(ModeFlags {
                keep_source: true,
                ..flags()
            })
            .contains("needs a staging queue")
        );
        assert!(
            refused(ModeFlags {
                to: to.clone(),
                keep_source: true,
                canary: Some(1),
                ..flags()
            })
            .contains("choose one")
        );
        assert!(
            refused(ModeFlags {
                min_success: Some(50.0),
                ..flags()
            })
            .contains("goes with --canary")
        );
        assert!(
            refused(ModeFlags {
                canary: Some(1),
                dry_run: true,
                ..flags()
            })
            .contains("replays for real")
        );
        assert!(
            refused(ModeFlags {
                to,
                keep_source: true,
                dry_run: true,
                ..flags()
            })
            .contains("--dry-run")
        );
    }

    #[test]
    fn the_permanent_action_from_the_flags() {
        assert_eq!(
            permanent_action(PermanentAction::Keep, false),
            PermanentAction::Keep
        );
        assert_eq!(
            permanent_action(PermanentAction::Keep, true),
            PermanentAction::Archive
        );
        assert_eq!(
            permanent_action(PermanentAction::Archive, false),
            PermanentAction::Archive
        );
    }
}
