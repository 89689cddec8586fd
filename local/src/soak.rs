//! `resq soak`: the pipeline over time, compressed. The real `consumer` and `redriver` binaries
//! run behind the local Lambda runtime on LocalStack, whose CloudWatch evaluates alarms from
//! metric data; the functions' metric lines reach it as through Lambda's log pipeline (at
//! `AWS_LAMBDA_LOG_LEVEL=WARN`, so a level the template allows is proven to keep them), and a
//! failed consumer invocation puts the `AWS/Lambda` `Errors` datum Lambda itself would. The
//! template's three breaker alarms (replays-failing, consumer-errors,
//! dead-letters-unexplained) are created from their definitions, their periods scaled down,
//! and named in the redriver's `PAUSE_ON_ALARMS`. The redriver runs at the default
//! `MAX_MESSAGES_PER_RUN=auto`. The schedule fires every few seconds, the TTL is a few
//! minutes. Then, in phases:
//!
//! 1. **warm-up**: valid orders, processed;
//! 2. **burst**: permanent failures outnumbering the replayable probes behind them a hundred to
//!    one land in the DLQ: every probe must be replayed within two runs (`starved` counts those
//!    that were not);
//! 3. **crash**: the consumer fails whole invocations (killed as each starts, as by an init
//!    error or running out of memory) while orders arrive; SQS moves them to the DLQ with no
//!    reason; the consumer-errors alarm pauses redrive, nothing is archived without having run
//!    (`unrun_archived`); then the fix lands, the alarms clear and the DLQ drains at the
//!    configured rate (`drain_rate_error_pct`, over the full runs of the drain);
//! 4. **outage**: the orders' downstream fails every write; new orders go through the DLQ,
//!    their replays fail again, the alarm goes to ALARM and redrive pauses, while the paused
//!    runs go on archiving what reaches its TTL;
//! 5. **recovery**: the downstream is back; orders that fail twice more pass through the DLQ;
//!    the alarm returns to OK and redrive resumes;
//! 6. **settle and audit**: every order is looked for (order records with their versions, the
//!    archive, both queues).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_cloudwatch::operation::put_metric_alarm::builders::PutMetricAlarmInputBuilder;
use aws_sdk_cloudwatch::types::StateValue;
use aws_sdk_sqs::types::QueueAttributeName;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::Value;
use tokio::sync::watch;

use crate::chaos::faults::FaultProxy;
use crate::chaos::runtime::Function;
use crate::demo::{self, Audit, Downstream, Plan};
use crate::driver::{
    Ended, EventSourceMapping, FirstRun, Invoked, MappingHooks, Schedule, ScheduleHooks, Settled,
};
use crate::emf::MetricForwarder;
use crate::emulator::{LocalStack, REGION};
use crate::pipeline::read_summary;
use crate::stack::Resolver;
use crate::{CliError, lock};
use resq_ops::context::Context;
use resq_ops::orders::{self, Outgoing};

/// The stack name (the alarm's and the functions' names derive from it).
pub const STACK: &str = "resq-soak";
/// The redrive cap.
pub const MAX_REDRIVE_ATTEMPTS: u32 = 3;
/// The main queue's `maxReceiveCount`.
pub const MAX_RECEIVE_COUNT: u32 = 2;
const CONSUMER_TIMEOUT: Duration = Duration::from_secs(5);
const REDRIVER_TIMEOUT: Duration = Duration::from_secs(20);

/// What a soak run does.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// LocalStack's Python (`.venv-localstack/bin/python`).
    pub localstack_python: PathBuf,
    /// The translated template (the alarm's definition comes from it).
    pub template: PathBuf,
    /// The `consumer` binary.
    pub consumer_bin: PathBuf,
    /// The `redriver` binary.
    pub redriver_bin: PathBuf,
    /// Where the functions' logs go.
    pub log_dir: PathBuf,
    /// The redriver's schedule period.
    pub schedule_every: Duration,
    /// `MAX_MESSAGES_PER_RUN` (`None`: `auto`, the default).
    pub max_messages_per_run: Option<u32>,
    /// `REDRIVE_RATE_PER_SECOND`.
    pub rate_per_second: u32,
    /// Replayable messages behind the burst.
    pub probes: usize,
    /// Kept permanent failures in the burst per probe (100: a hundred to one).
    pub burst_factor: u32,
    /// Orders sent while the consumer crashes (enough for two full runs of the drain after).
    pub crash_orders: usize,
    /// Valid orders before the burst.
    pub warmup_orders: usize,
    /// Orders sent while the downstream is down.
    pub outage_orders: usize,
    /// Orders that fail twice more after the recovery (they pass through the DLQ).
    pub recovery_orders: usize,
    /// `ARCHIVE_AFTER_SECONDS`.
    pub ttl: Duration,
    /// The replays-failing alarm's period (the template's 60 s, scaled down).
    pub alarm_period: Duration,
    /// Its `ReplaysFailingHoldMinutes`, in (scaled) periods.
    pub hold_periods: u32,
    /// Its `ReplaysFailingThreshold`, per (scaled) period.
    pub threshold: u32,
    /// Give up after this long.
    pub max_duration: Duration,
    /// Random seed.
    pub seed: u64,
}

/// What happened.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// Redriver runs that answered.
    pub runs: u64,
    /// Messages replayed, over all runs.
    pub replayed: u64,
    /// Probes behind the burst.
    pub probes: usize,
    /// Probes not replayed within two runs of the burst.
    pub starved: usize,
    /// The highest `x-redrive-count` of any copy sent or found.
    pub max_replays: u32,
    /// Runs the breaker paused.
    pub paused_runs: u64,
    /// A run replayed again after the alarm returned to OK.
    pub resumed: bool,
    /// Messages archived by paused runs.
    pub archived_while_paused: u64,
    /// Orders sent while the consumer crashed.
    pub crash_orders: usize,
    /// The consumer-errors alarm went to ALARM while it crashed.
    pub consumer_errors_fired: bool,
    /// Runs the breaker paused while the consumer crashed.
    pub crash_paused_runs: u64,
    /// Orders sent while the consumer crashed that ended in the archive: never run.
    pub unrun_archived: usize,
    /// The DLQ's drain after the fix: replayed, over the span of the full runs (neither
    /// paused, nor a probe, nor the last, which found the DLQ empty), in messages per second;
    /// `None` when no run of the drain was full.
    pub drain_rate: Option<f64>,
    /// Runs the drain rate is measured over.
    pub drain_runs: usize,
    /// The configured rate.
    pub rate_per_second: u32,
    /// The alarm was seen in ALARM, and in OK after that.
    pub alarm_fired: bool,
    /// The alarm was seen back in OK after it fired.
    pub alarm_cleared: bool,
    /// The alarm's state changes, seconds into the run.
    pub alarm_states: Vec<(u64, String)>,
    /// Datums put into CloudWatch from the functions' metric lines.
    pub metrics_forwarded: u64,
    /// Invocations that failed, timed out or did not answer with a response.
    pub function_errors: u64,
    /// Where every order ended.
    pub audit: Audit,
    /// The pipeline drained before the time limit.
    pub settled: bool,
    /// Wall time.
    pub elapsed: Duration,
}

impl SoakReport {
    /// How far the drain after the crash was from the configured rate, in percent.
    pub fn drain_rate_error_pct(&self) -> Option<f64> {
        self.drain_rate.map(|r| {
            (r - f64::from(self.rate_per_second)) / f64::from(self.rate_per_second) * 100.0
        })
    }

    /// The run's last line.
    pub fn summary_line(&self) -> String {
        format!(
            "soak: runs={} replayed={} starved={} max_replays={} paused_runs={} resumed={} archived_while_paused={} unrun_archived={} drain_rate_error_pct={} lost={} duplicate_effects={}",
            self.runs,
            self.replayed,
            self.starved,
            self.max_replays,
            self.paused_runs,
            if self.resumed { "yes" } else { "no" },
            self.archived_while_paused,
            self.unrun_archived,
            self.drain_rate_error_pct()
                .map_or_else(|| "none".to_owned(), |e| format!("{e:.1}")),
            self.audit.lost.len(),
            self.audit.duplicate_effects
        )
    }

    /// Every broken promise, in words (empty: the run passed).
    pub fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = self.audit.lost_orders().into_iter().collect();
        if self.audit.duplicate_effects > 0 {
            out.push(format!(
                "{} order effects doubled",
                self.audit.duplicate_effects
            ));
        }
        if self.starved > 0 {
            out.push(format!(
                "{} of {} replayable messages behind the burst were not replayed within two runs",
                self.starved, self.probes
            ));
        }
        if self.max_replays > MAX_REDRIVE_ATTEMPTS {
            out.push(format!(
                "a message was replayed {} times (cap {MAX_REDRIVE_ATTEMPTS})",
                self.max_replays
            ));
        }
        if !self.alarm_fired {
            out.push("the replays-failing alarm never went to ALARM during the outage".into());
        }
        if self.paused_runs == 0 {
            out.push("redrive did not pause during the outage".into());
        }
        if !self.alarm_cleared {
            out.push("the replays-failing alarm did not return to OK after the outage".into());
        }
        if !self.resumed {
            out.push("redrive did not resume after the alarm cleared".into());
        }
        if self.archived_while_paused == 0 {
            out.push("nothing was archived while replay was paused".into());
        }
        if !self.consumer_errors_fired {
            out.push(
                "the consumer-errors alarm never went to ALARM while the consumer crashed".into(),
            );
        }
        if self.crash_paused_runs == 0 {
            out.push("redrive did not pause while the consumer crashed".into());
        }
        if self.unrun_archived > 0 {
            out.push(format!(
                "{} of {} orders sent while the consumer crashed were archived without having run",
                self.unrun_archived, self.crash_orders
            ));
        }
        match self.drain_rate_error_pct() {
            None => out.push(
                "no full run drained the DLQ after the crash: its rate was not measured".into(),
            ),
            Some(e) if e.abs() > DRAIN_RATE_TOLERANCE_PCT => out.push(format!(
                "the DLQ drained at {:.1} messages/s after the crash, {e:+.1} % from the configured {} (tolerance ±{DRAIN_RATE_TOLERANCE_PCT} %)",
                self.drain_rate.unwrap_or_default(),
                self.rate_per_second
            )),
            Some(_) => {}
        }
        if self.metrics_forwarded == 0 {
            out.push("no metric line reached CloudWatch".into());
        }
        out
    }
}

/// How far the drain rate after the crash may be from the configured rate (percent).
pub const DRAIN_RATE_TOLERANCE_PCT: f64 = 5.0;

/// One redriver run, as the schedule saw it.
#[derive(Debug, Clone)]
struct RunRecord {
    started: Instant,
    ended: Instant,
    redriven: u64,
    paused: bool,
    probe: bool,
    stopped_by: resq_redriver::StopReason,
}

/// What the loops share.
#[derive(Default)]
struct State {
    hold_schedule: AtomicBool,
    run_in_progress: AtomicBool,
    /// The consumer fails every invocation (killed as it starts).
    crashing: AtomicBool,
    run_started: Mutex<Option<Instant>>,
    run_log: Mutex<Vec<RunRecord>>,
    consumer_errors_alarm: Mutex<Vec<(Instant, StateValue)>>,
    unexplained_alarm: Mutex<Vec<(Instant, StateValue)>>,
    runs: AtomicU64,
    replayed: AtomicU64,
    paused_runs: AtomicU64,
    archived_while_paused: AtomicU64,
    /// Runs that replayed something, with when they ended: a run paused at its start that
    /// finds its alarms cleared when it reads them again replays in the same run (it counts
    /// as paused, and replay resumed in it).
    replaying_runs: Mutex<Vec<Instant>>,
    last_run_moved: AtomicU64,
    function_errors: AtomicU64,
    alarm: Mutex<Vec<(Instant, StateValue)>>,
}

/// Runs the soak and reports; LocalStack and the functions stop when this returns.
pub async fn run(opts: &SoakOptions) -> Result<SoakReport, CliError> {
    let started = Instant::now();
    let template: Value = std::fs::read_to_string(&opts.template)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "cannot read the translated template {} (make soak translates it first)",
                opts.template.display()
            ))
        })?;
    std::fs::create_dir_all(&opts.log_dir)
        .map_err(|e| CliError::Usage(format!("cannot create {}: {e}", opts.log_dir.display())))?;
    for log in ["consumer.log", "redriver.log"] {
        let _ = std::fs::remove_file(opts.log_dir.join(log)); // this run's logs only
    }
    let localstack = LocalStack::start(&opts.localstack_python)?;
    let config = localstack.sdk_config().await;
    let ctx = deploy(&config).await?;
    for id in BREAKER_ALARMS {
        template_alarm(&template, opts, id)?
            .send_with(&ctx.cloudwatch)
            .await
            .map_err(|e| CliError::aws(format!("creating the alarm {id}"), e))?;
    }
    let alarm_name = format!("{STACK}-replays-failing");
    let consumer_errors = format!("{STACK}-consumer-errors");
    let unexplained = format!("{STACK}-dead-letters-unexplained");
    println!(
        "LocalStack on {}; stack {STACK}: {} → {}; alarms from the template, periods of {} s: {alarm_name} (RedriveReturned of {STACK}-consumer, Sum > {}, in ALARM until {} periods in a row are not), {unexplained} (alike), {consumer_errors} (AWS/Lambda Errors of {STACK}-consumer > 0)",
        localstack.endpoint,
        ctx.main_queue_url,
        ctx.dlq_url,
        opts.alarm_period.as_secs(),
        opts.threshold,
        opts.hold_periods
    );

    let upstream = localstack
        .endpoint
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| CliError::Usage(format!("LocalStack address {}: {e}", localstack.endpoint)))?;
    let proxy = FaultProxy::start(upstream, 0.0, Downstream::default(), opts.seed)?;
    let forwarder = MetricForwarder::start(ctx.cloudwatch.clone());
    let pause_on = [alarm_name.as_str(), &consumer_errors, &unexplained].join(",");
    let mut env = function_env(opts, &ctx, &proxy.endpoint, &pause_on);
    // named as the template names them: its alarms read the metrics by service and function
    env.extend(crate::stack::telemetry_env(
        &template,
        &Resolver::new(&template, STACK, &[]),
    )?);
    let consumer = Function::new(
        "consumer",
        &opts.consumer_bin,
        env.clone(),
        &opts.log_dir.join("consumer.log"),
        CONSUMER_TIMEOUT,
    )?
    .with_function_name(&format!("{STACK}-consumer"))
    .forward_metrics(forwarder.sender());
    let redriver = Function::new(
        "redriver",
        &opts.redriver_bin,
        env,
        &opts.log_dir.join("redriver.log"),
        REDRIVER_TIMEOUT,
    )?
    .with_function_name(&format!("{STACK}-redriver"))
    .forward_metrics(forwarder.sender());

    let state = State::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let main_arn = queue_arn(&ctx, &ctx.main_queue_url).await?;
    let batches = SoakBatches {
        state: &state,
        lambda_metrics: forwarder.sender(),
        function_name: format!("{STACK}-consumer"),
    };
    let (c, r, (), (), (), driven) = tokio::join!(
        event_source_mapping(consumer, &ctx, &main_arn, batches, stop_rx.clone()),
        schedule(redriver, &state, opts.schedule_every, stop_rx.clone()),
        watch_alarm(&ctx, &alarm_name, &state.alarm, stop_rx.clone()),
        watch_alarm(
            &ctx,
            &consumer_errors,
            &state.consumer_errors_alarm,
            stop_rx.clone()
        ),
        watch_alarm(&ctx, &unexplained, &state.unexplained_alarm, stop_rx),
        drive(&ctx, &proxy, &state, opts, started, stop_tx),
    );
    c?;
    r?;
    let driven = driven?;
    resq_ops::dlq::unhide_kept(&ctx, None).await?;
    let audit = demo::audit(&ctx, &driven.plans, driven.plans.len()).await?;
    let proxy_max = lock(&proxy.stats.redrive_counts)
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    let alarm_states = lock(&state.alarm)
        .iter()
        .map(|(at, s)| {
            (
                at.saturating_duration_since(started).as_secs(),
                s.as_str().to_owned(),
            )
        })
        .collect();
    let unrun_archived = driven
        .crash_ids
        .iter()
        .filter(|id| audit.places.get(*id) == Some(&"archived"))
        .count();
    let report = SoakReport {
        runs: state.runs.load(Ordering::Relaxed),
        replayed: state.replayed.load(Ordering::Relaxed),
        probes: driven.probes,
        starved: driven.starved,
        max_replays: audit.max_redrives.max(proxy_max),
        paused_runs: state.paused_runs.load(Ordering::Relaxed),
        resumed: driven.resumed,
        archived_while_paused: state.archived_while_paused.load(Ordering::Relaxed),
        crash_orders: driven.crash_ids.len(),
        consumer_errors_fired: driven.consumer_errors_fired,
        crash_paused_runs: driven.crash_paused_runs,
        unrun_archived,
        drain_rate: driven.drain.map(|(rate, _)| rate),
        drain_runs: driven.drain.map_or(0, |(_, runs)| runs),
        rate_per_second: opts.rate_per_second,
        alarm_fired: driven.alarm_fired,
        alarm_cleared: driven.alarm_cleared,
        alarm_states,
        metrics_forwarded: forwarder.sent.load(Ordering::Relaxed),
        function_errors: state.function_errors.load(Ordering::Relaxed),
        audit,
        settled: driven.settled,
        elapsed: started.elapsed(),
    };
    drop(localstack);
    Ok(report)
}

/// The stack's queues and bucket on LocalStack, as the template makes them (the functions
/// run here; the replays-failing alarm is created from the template's own definition).
async fn deploy(config: &aws_config::SdkConfig) -> Result<Context, CliError> {
    let sqs = aws_sdk_sqs::Client::new(config);
    let create = |name: String, attrs: Vec<(QueueAttributeName, String)>| {
        let sqs = sqs.clone();
        async move {
            sqs.create_queue()
                .queue_name(&name)
                .set_attributes(Some(attrs.into_iter().collect()))
                .send()
                .await
                .map_err(|e| CliError::aws(format!("creating queue {name}"), e))?
                .queue_url
                .ok_or_else(|| CliError::Usage(format!("no URL for queue {name}")))
        }
    };
    let dlq_url = create(
        format!("{STACK}-orders-dlq"),
        vec![(QueueAttributeName::MessageRetentionPeriod, "1209600".into())],
    )
    .await?;
    let ctx = Context::from_config(
        config,
        String::new(),
        dlq_url.clone(),
        format!("{STACK}-archive"),
    );
    let dlq_arn = queue_arn(&ctx, &dlq_url).await?;
    let redrive = serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVE_COUNT.to_string()});
    let main_url = create(
        format!("{STACK}-orders"),
        vec![
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
            (
                QueueAttributeName::VisibilityTimeout,
                (6 * CONSUMER_TIMEOUT.as_secs()).to_string(),
            ),
        ],
    )
    .await?;
    let ctx = Context::from_config(config, main_url, dlq_url, format!("{STACK}-archive"));
    ctx.s3
        .create_bucket()
        .bucket(&ctx.bucket)
        .send()
        .await
        .map_err(|e| CliError::aws("creating the archive bucket", e))?;
    crate::chaos::ensure_versioned(&ctx).await?;
    Ok(ctx)
}

async fn queue_arn(ctx: &Context, url: &str) -> Result<String, CliError> {
    resq_ops::status::queue_arn(&ctx.sqs, url)
        .await
        .map_err(|source| CliError::Aws {
            what: format!("reading {url}"),
            source,
        })
}

/// The template's alarms the redriver's breaker reads (`PAUSE_ON_ALARMS`).
pub const BREAKER_ALARMS: [&str; 3] = [
    "ReplaysFailingAlarm",
    "ConsumerErrorsAlarm",
    "DeadLettersUnexplainedAlarm",
];

/// The template's alarm `id`, as `PutMetricAlarm` for the soak's stack: every property from
/// the template, the period scaled down to `alarm_period`, the hold and the threshold as the
/// soak's parameter values, the consumer as `{STACK}-consumer`. Alarm actions are left out (no
/// topic here).
pub fn template_alarm(
    template: &Value,
    opts: &SoakOptions,
    id: &str,
) -> Result<PutMetricAlarmInputBuilder, CliError> {
    let (threshold, hold) = (opts.threshold.to_string(), opts.hold_periods.to_string());
    let r = Resolver::new(
        template,
        STACK,
        &[
            ("ReplaysFailingThreshold", threshold.as_str()),
            ("ReplaysFailingHoldMinutes", hold.as_str()),
        ],
    )
    .with_resource("ConsumerFunction", &format!("{STACK}-consumer"));
    let period = r.number(
        &template["Resources"][id]["Properties"]["Period"],
        &format!("{id} Period"),
    )?;
    if period < opts.alarm_period.as_secs_f64() {
        return Err(CliError::Usage(
            "the soak's alarm period must scale the template's down".into(),
        ));
    }
    Ok(crate::stack::alarm(template, id, &r)?.period(opts.alarm_period.as_secs() as i32))
}

fn function_env(
    opts: &SoakOptions,
    ctx: &Context,
    endpoint: &str,
    pause_on_alarms: &str,
) -> Vec<(String, String)> {
    [
        ("MAIN_QUEUE_URL", ctx.main_queue_url.clone()),
        ("DLQ_URL", ctx.dlq_url.clone()),
        ("ARCHIVE_BUCKET", ctx.bucket.clone()),
        ("MAX_REDRIVE_ATTEMPTS", MAX_REDRIVE_ATTEMPTS.to_string()),
        ("DEADLINE_MARGIN_MS", "1000".into()),
        ("BACKOFF_BASE_SECONDS", "0".into()),
        ("BACKOFF_MAX_SECONDS", "1".into()),
        ("REDRIVE_RATE_PER_SECOND", opts.rate_per_second.to_string()),
        (
            "MAX_MESSAGES_PER_RUN",
            opts.max_messages_per_run
                .map_or_else(|| "auto".to_owned(), |n| n.to_string()),
        ),
        ("ARCHIVE_AFTER_SECONDS", opts.ttl.as_secs().to_string()),
        ("PERMANENT_ACTION", "keep".into()),
        ("PAUSE_ON_ALARMS", pause_on_alarms.to_owned()),
        ("AWS_ENDPOINT_URL", endpoint.to_owned()),
        ("AWS_REGION", REGION.into()),
        ("AWS_ACCESS_KEY_ID", "soak".into()),
        ("AWS_SECRET_ACCESS_KEY", "soak".into()),
        // JSON logs at WARN, a level the template allows: the metrics must still get through
        ("AWS_LAMBDA_LOG_FORMAT", "JSON".into()),
        ("AWS_LAMBDA_LOG_LEVEL", "WARN".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The soak's hooks on the event source mapping: crashes the consumer on purpose, counts
/// what did not settle, and reports a failed invocation as Lambda does (`AWS/Lambda`
/// `Errors`).
struct SoakBatches<'a> {
    state: &'a State,
    lambda_metrics: tokio::sync::mpsc::UnboundedSender<Value>,
    function_name: String,
}

impl<F> MappingHooks<F> for SoakBatches<'_> {
    fn invoking(&mut self) -> Option<Duration> {
        // killed as it starts: the invocation fails whole, as after an init error or OOM
        self.state
            .crashing
            .load(Ordering::SeqCst)
            .then_some(Duration::ZERO)
    }

    fn answered(&mut self, _: &F, invoked: Invoked<'_>) {
        let crashed = self.state.crashing.load(Ordering::SeqCst);
        match invoked.settled {
            Settled::Deleted(_) => {}
            Settled::BatchFailed(e) => {
                self.state.function_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "the consumer's answer");
            }
            other => {
                let _ = self
                    .lambda_metrics
                    .send(crate::emf::lambda_errors(&self.function_name, 1));
                if !crashed {
                    self.state.function_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(outcome = ?other, "consumer invocation failed");
                }
            }
        }
    }
}

/// Lambda's SQS poller in front of the consumer process.
async fn event_source_mapping(
    mut consumer: Function,
    ctx: &Context,
    main_arn: &str,
    mut hooks: SoakBatches<'_>,
    stop: watch::Receiver<bool>,
) -> Result<(), CliError> {
    let mapping = EventSourceMapping {
        sqs: &ctx.sqs,
        queue_url: &ctx.main_queue_url,
        queue_arn: main_arn,
        batch_size: 10,
        batching_window: Duration::from_millis(200),
    };
    mapping.run(&mut consumer, &mut hooks, stop).await
}

/// The soak's hooks on the schedule: held during the burst; counts the runs, the paused ones
/// and what they archived.
struct SoakRuns<'a>(&'a State);

impl<F> ScheduleHooks<F> for SoakRuns<'_> {
    fn held(&self) -> bool {
        self.0.hold_schedule.load(Ordering::SeqCst)
    }

    fn invoking(&mut self) -> Option<Duration> {
        self.0.run_in_progress.store(true, Ordering::SeqCst);
        *lock(&self.0.run_started) = Some(Instant::now());
        None
    }

    fn answered(&mut self, _: &F, ended: Ended, _: Duration) {
        let state = self.0;
        let started = lock(&state.run_started).take().unwrap_or_else(Instant::now);
        match ended {
            Ended::Response(body) => match read_summary(&body) {
                Ok(s) => {
                    state.count_run(&s);
                    lock(&state.run_log).push(RunRecord {
                        started,
                        ended: Instant::now(),
                        redriven: s.redriven,
                        paused: s.paused,
                        probe: s.probe.is_some(),
                        stopped_by: s.stopped_by,
                    });
                }
                Err(e) => {
                    state.function_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, body, "not a redriver summary");
                }
            },
            other => {
                state.function_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(outcome = ?other, "redriver invocation failed");
            }
        }
        state.run_in_progress.store(false, Ordering::SeqCst);
    }
}

impl State {
    /// Counts a run that answered with its summary.
    fn count_run(&self, s: &resq_redriver::Summary) {
        let archived: u64 = s.archived.values().sum();
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.replayed.fetch_add(s.redriven, Ordering::Relaxed);
        if s.paused {
            self.paused_runs.fetch_add(1, Ordering::Relaxed);
            self.archived_while_paused
                .fetch_add(archived, Ordering::Relaxed);
        }
        if s.redriven > 0 {
            lock(&self.replaying_runs).push(Instant::now());
        }
        self.last_run_moved
            .store(s.redriven + archived, Ordering::Relaxed);
    }
}

/// The EventBridge schedule in front of the redriver process (held during the burst).
async fn schedule(
    mut redriver: Function,
    state: &State,
    every: Duration,
    stop: watch::Receiver<bool>,
) -> Result<(), CliError> {
    let schedule = Schedule {
        every,
        first: FirstRun::AtOnce,
        rule: &format!("{STACK}-schedule"),
    };
    schedule
        .run(&mut redriver, &mut SoakRuns(state), stop)
        .await
}

/// Records the alarm's state changes into `states` (once a second).
async fn watch_alarm(
    ctx: &Context,
    name: &str,
    states: &Mutex<Vec<(Instant, StateValue)>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last: Option<StateValue> = None;
    loop {
        if let Ok(out) = ctx
            .cloudwatch
            .describe_alarms()
            .alarm_names(name)
            .send()
            .await
            && let Some(now) = out
                .metric_alarms()
                .first()
                .and_then(|a| a.state_value().cloned())
            && last.as_ref() != Some(&now)
        {
            lock(states).push((Instant::now(), now.clone()));
            last = Some(now);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
}

struct Driven {
    plans: HashMap<String, Plan>,
    crash_ids: Vec<String>,
    consumer_errors_fired: bool,
    crash_paused_runs: u64,
    /// (messages per second, runs) of the drain after the crash.
    drain: Option<(f64, usize)>,
    probes: usize,
    starved: usize,
    resumed: bool,
    alarm_fired: bool,
    alarm_cleared: bool,
    settled: bool,
}

async fn depth(ctx: &Context, url: &str) -> u64 {
    resq_ops::status::depth(&ctx.sqs, url)
        .await
        .map_or(u64::MAX, |(v, h)| v + h)
}

/// Waits (printing progress) until `done` holds or `limit` passes; `false` on the limit.
async fn until<F, Fut>(what: &str, limit: Instant, started: Instant, mut done: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut last_print = Instant::now();
    loop {
        if done().await {
            println!("[{:>4}s] {what}: done", started.elapsed().as_secs());
            return true;
        }
        if Instant::now() >= limit {
            println!(
                "[{:>4}s] {what}: NOT done in time",
                started.elapsed().as_secs()
            );
            return false;
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            println!("[{:>4}s] waiting: {what}", started.elapsed().as_secs());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn alarm_seen(state: &State, value: &StateValue, after: Option<Instant>) -> Option<Instant> {
    seen(&state.alarm, value, after)
}

/// The replays-failing alarm is in OK now, and a run replayed after both that and `since`.
/// (The alarm may flap while replay is paused: no replays, so no failures, then a failing
/// probe; only its state since `since` counts.)
fn resumed_since(state: &State, since: Instant) -> bool {
    let ok = match lock(&state.alarm).last() {
        Some((at, StateValue::Ok)) => *at,
        _ => return false,
    };
    let after = ok.max(since);
    lock(&state.replaying_runs).iter().any(|at| *at > after)
}

/// When `states` first showed `value` (after `after`).
fn seen(
    states: &Mutex<Vec<(Instant, StateValue)>>,
    value: &StateValue,
    after: Option<Instant>,
) -> Option<Instant> {
    lock(states)
        .iter()
        .find(|(at, s)| s == value && after.is_none_or(|a| *at > a))
        .map(|(at, _)| *at)
}

async fn send_orders(
    ctx: &Context,
    orders: &[Outgoing],
    plan: Plan,
    plans: &mut HashMap<String, Plan>,
) -> Result<(), CliError> {
    let report = resq_ops::status::send(ctx, orders, demo::order_tag).await?;
    if !report.failed.is_empty() {
        return Err(CliError::Usage(format!(
            "LocalStack refused {} orders",
            report.failed.len()
        )));
    }
    plans.extend(orders.iter().map(|o| (o.order_id.clone(), plan)));
    Ok(())
}

/// The phases; stops the loops at the end.
async fn drive(
    ctx: &Context,
    proxy: &FaultProxy,
    state: &State,
    opts: &SoakOptions,
    started: Instant,
    stop: watch::Sender<bool>,
) -> Result<Driven, CliError> {
    let result = phases(ctx, proxy, state, opts, started).await;
    let _ = stop.send(true);
    result
}

async fn phases(
    ctx: &Context,
    proxy: &FaultProxy,
    state: &State,
    opts: &SoakOptions,
    started: Instant,
) -> Result<Driven, CliError> {
    let limit = started + opts.max_duration;
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut plans: HashMap<String, Plan> = HashMap::new();
    let written = |ids: Vec<String>| {
        let writes = lock(&proxy.stats.order_writes);
        ids.iter().filter(|id| writes.contains_key(*id)).count()
    };

    // 1. warm-up
    let warm = orders::generate("SOAK-WARM-", opts.warmup_orders, 0.0, 0.0, &mut rng);
    send_orders(ctx, &warm, Plan::Valid, &mut plans).await?;
    let ids: Vec<String> = warm.iter().map(|o| o.order_id.clone()).collect();
    until("warm-up orders processed", limit, started, || {
        let ids = ids.clone();
        async move { written(ids) == opts.warmup_orders }
    })
    .await;

    // 2. the burst of permanent failures, then replayable probes behind them
    state.hold_schedule.store(true, Ordering::SeqCst);
    until("the schedule held", limit, started, || async {
        !state.run_in_progress.load(Ordering::SeqCst)
    })
    .await;
    let burst_size = opts.burst_factor as usize * opts.probes;
    let burst = orders::generate("SOAK-BURST-", burst_size, 100.0, 0.0, &mut rng);
    for chunk in burst.chunks(100) {
        send_orders(ctx, chunk, Plan::Malformed, &mut plans).await?;
    }
    until(
        &format!("{burst_size} permanent failures in the DLQ"),
        limit,
        started,
        || async { depth(ctx, &ctx.dlq_url).await >= burst_size as u64 },
    )
    .await;
    let probes = orders::generate("SOAK-PROBE-", opts.probes, 0.0, 0.0, &mut rng);
    // straight into the DLQ, where SQS's redrive policy would put them
    let report = resq_ops::status::send_to(ctx, &ctx.dlq_url, &probes, demo::order_tag).await?;
    if !report.failed.is_empty() {
        return Err(CliError::Usage("LocalStack refused a probe".into()));
    }
    plans.extend(probes.iter().map(|o| (o.order_id.clone(), Plan::Valid)));
    let runs_before = state.runs.load(Ordering::Relaxed);
    println!(
        "[{:>4}s] {} permanent failures ahead of {} replayable messages in the DLQ; budget {} a run; schedule released",
        started.elapsed().as_secs(),
        burst_size,
        probes.len(),
        opts.max_messages_per_run
            .map_or_else(|| "auto".to_owned(), |n| n.to_string())
    );
    state.hold_schedule.store(false, Ordering::SeqCst);
    until("two scheduled runs", limit, started, || async {
        state.runs.load(Ordering::Relaxed) >= runs_before + 2
    })
    .await;
    let replayed: usize = {
        let counts = lock(&proxy.stats.redrive_counts);
        probes
            .iter()
            .filter(|o| counts.get(&o.order_id).is_some_and(|n| *n >= 1))
            .count()
    };
    let starved = probes.len() - replayed;
    println!(
        "[{:>4}s] replayed within two runs: {replayed} of {}",
        started.elapsed().as_secs(),
        probes.len()
    );

    // 3. the consumer crashes, then the fix lands
    let crash = crash(ctx, state, opts, started, &mut rng, &mut plans, &written).await?;

    // 4. the outage
    proxy.set_outage(true);
    let outage_started = Instant::now();
    let outage = orders::generate("SOAK-OUTAGE-", opts.outage_orders, 0.0, 0.0, &mut rng);
    send_orders(ctx, &outage, Plan::Doomed, &mut plans).await?;
    println!(
        "[{:>4}s] downstream down; {} orders sent",
        started.elapsed().as_secs(),
        outage.len()
    );
    // orders keep arriving during the outage (a few every 10 s), so that whatever the timing
    // of the alarm, some reach their TTL while replay is paused
    let mut trickle = 0usize;
    let mut next_trickle = Instant::now() + Duration::from_secs(10);
    loop {
        if alarm_seen(state, &StateValue::Alarm, Some(outage_started)).is_some()
            && state.paused_runs.load(Ordering::Relaxed) >= 2
            && state.archived_while_paused.load(Ordering::Relaxed) > 0
        {
            println!(
                "[{:>4}s] the alarm in ALARM, redrive paused, and something archived while paused",
                started.elapsed().as_secs()
            );
            break;
        }
        if Instant::now() >= limit {
            println!(
                "[{:>4}s] the outage did not pause redrive and archive in time",
                started.elapsed().as_secs()
            );
            break;
        }
        if Instant::now() >= next_trickle {
            next_trickle += Duration::from_secs(10);
            let more = orders::generate(&format!("SOAK-OUTAGE-{trickle}-"), 5, 0.0, 0.0, &mut rng);
            trickle += 1;
            send_orders(ctx, &more, Plan::Doomed, &mut plans).await?;
            println!(
                "[{:>4}s] outage: {} runs paused, {} archived while paused, alarm {}",
                started.elapsed().as_secs(),
                state.paused_runs.load(Ordering::Relaxed),
                state.archived_while_paused.load(Ordering::Relaxed),
                lock(&state.alarm)
                    .last()
                    .map_or("unknown", |(_, s)| s.as_str())
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let alarm_fired = alarm_seen(state, &StateValue::Alarm, Some(outage_started)).is_some();

    // 5. recovery: orders that fail twice more pass through the DLQ and need a replay
    proxy.set_outage(false);
    let recovered_at = Instant::now();
    let recovery = orders::generate("SOAK-RECOVERY-", opts.recovery_orders, 0.0, 0.0, &mut rng);
    for o in &recovery {
        proxy.add_flaky(&o.order_id, MAX_RECEIVE_COUNT);
    }
    send_orders(ctx, &recovery, Plan::Flaky, &mut plans).await?;
    println!(
        "[{:>4}s] downstream back; {} orders that fail {MAX_RECEIVE_COUNT} more times sent",
        started.elapsed().as_secs(),
        recovery.len()
    );
    let fired_at = alarm_seen(state, &StateValue::Alarm, Some(outage_started));
    until(
        "the alarm back in OK and replay resumed",
        limit,
        started,
        || async { resumed_since(state, recovered_at) },
    )
    .await;
    let cleared_at = fired_at.and_then(|f| alarm_seen(state, &StateValue::Ok, Some(f)));
    let resumed = resumed_since(state, recovered_at);

    // 6. settle: both queues drained (the kept burst is archived at its TTL)
    let settled = until("both queues drained", limit, started, || async {
        depth(ctx, &ctx.main_queue_url).await == 0
            && depth(ctx, &ctx.dlq_url).await == 0
            && state.last_run_moved.load(Ordering::Relaxed) == 0
    })
    .await;
    Ok(Driven {
        plans,
        crash_ids: crash.ids,
        consumer_errors_fired: crash.consumer_errors_fired,
        crash_paused_runs: crash.paused_runs,
        drain: crash.drain,
        probes: probes.len(),
        starved,
        resumed,
        alarm_fired,
        alarm_cleared: cleared_at.is_some(),
        settled,
    })
}

/// What the crash phase saw.
struct Crash {
    ids: Vec<String>,
    consumer_errors_fired: bool,
    paused_runs: u64,
    drain: Option<(f64, usize)>,
}

/// The consumer fails every invocation while `crash_orders` orders arrive, until the
/// consumer-errors alarm has paused redrive and SQS has moved every one of them to the DLQ
/// (with no reason: `maxReceiveCount` used up by crashed invocations); then the fix lands,
/// and the phase waits until each of them has been replayed and processed.
async fn crash(
    ctx: &Context,
    state: &State,
    opts: &SoakOptions,
    started: Instant,
    rng: &mut StdRng,
    plans: &mut HashMap<String, Plan>,
    written: &impl Fn(Vec<String>) -> usize,
) -> Result<Crash, CliError> {
    let limit = started + opts.max_duration;
    let crash_started = Instant::now();
    state.crashing.store(true, Ordering::SeqCst);
    let orders = orders::generate("SOAK-CRASH-", opts.crash_orders, 0.0, 0.0, rng);
    for chunk in orders.chunks(500) {
        send_orders(ctx, chunk, Plan::Valid, plans).await?;
    }
    let ids: Vec<String> = orders.iter().map(|o| o.order_id.clone()).collect();
    println!(
        "[{:>4}s] the consumer crashes on every invocation; {} orders sent",
        started.elapsed().as_secs(),
        ids.len()
    );
    let paused_since = |from: Instant, to: Option<Instant>| {
        lock(&state.run_log)
            .iter()
            .filter(|r| r.paused && r.started >= from && to.is_none_or(|t| r.started < t))
            .count() as u64
    };
    until(
        "the consumer-errors alarm in ALARM, redrive paused, every crashed order in the DLQ",
        limit,
        started,
        || async {
            seen(
                &state.consumer_errors_alarm,
                &StateValue::Alarm,
                Some(crash_started),
            )
            .is_some()
                && paused_since(crash_started, None) > 0
                && depth(ctx, &ctx.main_queue_url).await == 0
        },
    )
    .await;
    state.crashing.store(false, Ordering::SeqCst);
    let fixed_at = Instant::now();
    let consumer_errors_fired = seen(
        &state.consumer_errors_alarm,
        &StateValue::Alarm,
        Some(crash_started),
    )
    .is_some();
    let paused_runs = paused_since(crash_started, Some(fixed_at));
    println!(
        "[{:>4}s] the fix lands: {paused_runs} runs paused meanwhile; DLQ depth {}",
        started.elapsed().as_secs(),
        depth(ctx, &ctx.dlq_url).await
    );
    until(
        "every crashed order replayed and processed",
        limit,
        started,
        || async { written(ids.clone()) == ids.len() },
    )
    .await;
    until("the run in progress ended", limit, started, || async {
        !state.run_in_progress.load(Ordering::SeqCst)
    })
    .await;
    let drain = drain_rate(&lock(&state.run_log), fixed_at);
    match drain {
        Some((rate, runs)) => println!(
            "[{:>4}s] the DLQ drained at {rate:.1} messages/s over {runs} full runs (configured {})",
            started.elapsed().as_secs(),
            opts.rate_per_second
        ),
        None => println!(
            "[{:>4}s] no full run in the drain: its rate is unmeasured",
            started.elapsed().as_secs()
        ),
    }
    Ok(Crash {
        ids,
        consumer_errors_fired,
        paused_runs,
        drain,
    })
}

/// The scheduled drain rate after `after`: over the longest streak of consecutive full runs
/// (not paused, not a probe, ended by the deadline: replaying the whole time), the messages
/// replayed over the time from the streak's first start to its last end, gaps between runs
/// included; with the number of runs. `None` without a full run.
fn drain_rate(runs: &[RunRecord], after: Instant) -> Option<(f64, usize)> {
    let full = |r: &RunRecord| {
        !r.paused
            && !r.probe
            && r.redriven > 0
            && r.stopped_by == resq_redriver::StopReason::Deadline
    };
    let mut best: Option<&[RunRecord]> = None;
    let after: Vec<RunRecord> = runs
        .iter()
        .filter(|r| r.started >= after)
        .cloned()
        .collect();
    for streak in after.split(|r| !full(r)) {
        if !streak.is_empty() && best.is_none_or(|b| streak.len() > b.len()) {
            best = Some(streak);
        }
    }
    let streak = best?;
    let (first, last) = (streak.first()?, streak.last()?);
    let span = last
        .ended
        .saturating_duration_since(first.started)
        .as_secs_f64();
    let replayed: u64 = streak.iter().map(|r| r.redriven).sum();
    (span > 0.0).then(|| (replayed as f64 / span, streak.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq_redriver::StopReason;

    fn run(
        at: Instant,
        from_s: u64,
        to_s: u64,
        redriven: u64,
        stopped_by: StopReason,
    ) -> RunRecord {
        RunRecord {
            started: at + Duration::from_secs(from_s),
            ended: at + Duration::from_secs(to_s),
            redriven,
            paused: false,
            probe: false,
            stopped_by,
        }
    }

    #[test]
    fn the_drain_rate_is_over_the_full_runs_gaps_included() {
        // GIVEN a paused run, a probe, two full runs with a 1 s gap between them, and the last
        // run that emptied the DLQ
        let t = Instant::now();
        let mut paused = run(t, 0, 5, 0, StopReason::Deadline);
        paused.paused = true;
        let mut probe = run(t, 5, 24, 22, StopReason::Deadline);
        probe.probe = true;
        let runs = vec![
            paused,
            probe,
            run(t, 24, 43, 950, StopReason::Deadline),
            run(t, 44, 63, 950, StopReason::Deadline),
            run(t, 63, 70, 300, StopReason::Empty),
        ];
        // WHEN the rate is read
        let (rate, n) = drain_rate(&runs, t).unwrap();
        // THEN it is the two full runs' 1,900 over 24..63 s (39 s)
        assert_eq!(n, 2);
        assert!((rate - 1900.0 / 39.0).abs() < 1e-9, "{rate}");
        // and runs before `after` do not count; without a full run there is no rate
        assert_eq!(
            drain_rate(&runs, t + Duration::from_secs(44)).map(|(_, n)| n),
            Some(1)
        );
        assert_eq!(drain_rate(&runs[..2], t), None);
    }
}
