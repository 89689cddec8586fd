//! `resq dlq peek` and `resq dlq redrive`.

use std::time::{Duration, Instant};

use resq::config::CommonConfig;
use resq::settle::{Plan, QueueUrl};
use resq::sqs::{Queues, ReceivedMessage};
use resq::store::S3Store;
use resq_redriver::config::{PermanentAction, RedriverConfig};
use resq_redriver::ports::CloudWatchAlarms;
use resq_redriver::request::RunRequest;
use resq_redriver::summary::Replayed;
use resq_redriver::{Redriver, StopReason, Summary};

use crate::CliError;
use crate::context::Context;

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
    reach(ctx).await?;
    let unhidden = if kept {
        Some(unhide_kept(ctx, filter.reason.as_deref()).await?)
    } else {
        None
    };
    let shown = peek(ctx, filter).await?;
    let hidden = if kept {
        0
    } else {
        reach(ctx).await.map_or(0, |(_, in_flight)| in_flight)
    };
    Ok(PeekReport {
        unhidden,
        shown,
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
    let dlq_url = ctx.dlq()?;
    let now_ms = crate::now_ms();
    let mut shown = Vec::new();
    let mut seen = Vec::new();
    // hidden while peeking, so each is seen once; released at the end
    loop {
        let batch = ctx
            .sqs
            .receive(dlq_url, 10, Some(60), 0)
            .await
            .map_err(|source| CliError::Aws {
                what: format!("receiving from {dlq_url}"),
                source,
            })?;
        if batch.is_empty() {
            break;
        }
        for m in batch {
            let p = peeked(&m, now_ms);
            let selected = resq_redriver::classify::Selection {
                reason: filter.reason.as_deref(),
                older_than: filter.older_than,
                group: filter.group.as_deref(),
            }
            .picks(&m, now_ms);
            if selected && shown.len() < filter.limit {
                shown.push(p);
            }
            seen.push(m.receipt_handle);
        }
        if shown.len() >= filter.limit {
            break;
        }
    }
    ctx.settle(&Plan::release(&QueueUrl::from(dlq_url), seen))
        .await;
    Ok(shown)
}

/// Checks what a redrive needs before it starts: the main queue (replays go there), the DLQ
/// (answering: credentials, endpoint, permission) and the bucket (archives, the keep list).
pub async fn ready_to_redrive(ctx: &Context) -> Result<(), CliError> {
    ctx.main_queue()?;
    ctx.archive_bucket()?;
    reach(ctx).await.map(|_| ())
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

/// `resq dlq redrive`: checks what the redrive needs, then runs it. A run that could not
/// move everything still returns its summary; [`redrive_failure`] says whether it failed.
pub async fn run_redrive(ctx: &Context, options: &RedriveOptions) -> Result<Summary, CliError> {
    ready_to_redrive(ctx).await?;
    Ok(redrive(
        ctx,
        options.run_request(),
        options.max_redrive_attempts,
        options.archive_after,
        options.permanent_action,
    )
    .await)
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
    redriver(ctx, &request, cap, archive_after, permanent_action)
        .run(&request, Instant::now() + RUN_WITHIN)
        .await
}

/// [`redrive`] as `options` ask, with the replays it confirmed.
pub(crate) async fn redrive_listed(
    ctx: &Context,
    options: &RedriveOptions,
) -> (Summary, Vec<Replayed>) {
    let request = options.run_request();
    let (cap, ttl) = (options.max_redrive_attempts, options.archive_after);
    redriver(ctx, &request, cap, ttl, options.permanent_action)
        .run_listed(&request, Instant::now() + RUN_WITHIN, true)
        .await
}

/// How long an operator's redrive may run: it has no Lambda deadline, an hour bounds it.
const RUN_WITHIN: Duration = Duration::from_secs(3600);

/// The redriver engine as an operator runs it: the scheduled function's configuration for
/// `request`, without a breaker, a receive wait or metrics.
fn redriver(
    ctx: &Context,
    request: &RunRequest,
    cap: u32,
    archive_after: Duration,
    permanent_action: PermanentAction,
) -> Redriver<aws_sdk_sqs::Client, S3Store, CloudWatchAlarms> {
    let config = RedriverConfig {
        common: CommonConfig {
            main_queue_url: ctx.main_queue_url.clone(),
            dlq_url: ctx.dlq_url.clone(),
            archive_bucket: ctx.bucket.clone(),
            max_redrive_attempts: cap,
            deadline_margin: Duration::from_secs(1),
        },
        rate_per_second: request.rate_per_second,
        max_messages_per_run: request.max_messages,
        kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
        archive_after,
        permanent_action,
        pause_on_alarms: Vec::new(),
        // the operator's run leaves the consumer to the stack's redriver
        pause_consumer_on_alarms: Vec::new(),
        consumer_mapping: None,
        rate_max: request.rate_per_second,
        archive_sweep: Duration::from_secs(resq_redriver::config::DEFAULT_ARCHIVE_SWEEP_SECONDS),
    };
    let alarms = CloudWatchAlarms::new(ctx.cloudwatch.clone());
    Redriver::new(ctx.sqs.clone(), ctx.store(), alarms, config)
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
            group: None,
            max_messages: 50,
            rate_per_second: 2.5,
            max_redrive_attempts: 3,
            archive_after: Duration::from_secs(86_400),
            permanent_action: PermanentAction::Keep,
        };
        assert_eq!(
            options.run_request(),
            RunRequest {
                dry_run: true,
                max_messages: Some(50),
                rate_per_second: 2.5,
                reason: Some("VALIDATION_FAILED".into()),
                older_than: Some(Duration::from_secs(600)),
                group: None,
                rate_max: 2.5,
                alarm: None,
            }
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
