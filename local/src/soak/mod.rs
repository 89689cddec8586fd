//! `resq soak`: the pipeline over time, compressed. The real `consumer` and `redriver` binaries
//! run behind the local Lambda runtime on LocalStack, whose CloudWatch evaluates alarms from
//! metric data; the functions' metric lines reach it as through Lambda's log pipeline (at
//! `AWS_LAMBDA_LOG_LEVEL=WARN`, so a level the template allows is proven to keep them), and each
//! consumer invocation puts the `AWS/Lambda` `Errors` datum Lambda itself would (1 when it
//! failed, 0 when it answered). The consumer's event source mapping lives in a moto server
//! beside LocalStack ([`mapping`]): the redriver's consumer breaker switches it there, and the
//! soak's poller honours its state as Lambda's does. The template's alarms are created from their
//! definitions, their periods scaled down: the three of the redriver's `PAUSE_ON_ALARMS`, and
//! the two of its `PAUSE_CONSUMER_ON_ALARMS` (downstream-failing, consumer-errors), whose state
//! changes to `ALARM` and `OK` invoke the redriver with CloudWatch's state-change event, one
//! invocation at a time with the schedule's. The redriver runs at the default
//! `MAX_MESSAGES_PER_RUN=auto`, may climb to twenty times its rate (the template's ratio), and
//! sweeps the DLQ for archiving every minute. The schedule fires every few seconds, the TTL is
//! a few minutes. Then, in phases:
//!
//! 1. **warm-up**: valid orders, processed;
//! 2. **burst**: permanent failures outnumbering the replayable probes behind them a hundred to
//!    one land in the DLQ: every probe must be replayed within two runs (`starved` counts those
//!    that were not);
//! 3. **crash**: the consumer fails whole invocations (killed as each starts, as by an init
//!    error or running out of memory) while orders arrive; the consumer-errors alarm pauses the
//!    consumer (orders wait in the main queue) and replay; nothing is archived without having
//!    run (`unrun_archived`); then the fix lands, a probe finds the consumer healthy, the alarm
//!    clears, the consumer resumes and what the crash left drains;
//! 4. **outage**: the orders' downstream fails every write for `outage_periods` of the alarm's
//!    periods (at least ten) while orders keep arriving; the downstream-failing alarm pauses the
//!    consumer, probes find the downstream still down, the paused runs go on archiving what
//!    reaches its TTL (the kept burst's), dead letters wait in the DLQ; then the fix, a probe, the
//!    alarm's OK, the resume, and the drain. Sampled every second into a timeline, a picture and
//!    the outage's profile ([`outage`]);
//! 5. **settle and audit**: every order is looked for (order records with their versions, the
//!    archive, both queues).

mod mapping;
pub mod outage;
mod plot;

use std::collections::{BTreeMap, HashMap};
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
use tokio::sync::{mpsc, watch};

use crate::chaos::faults::{self, FaultProxy};
use crate::chaos::runtime::Function;
use crate::demo::{self, Audit, Downstream, Plan};
use crate::driver::{
    AlarmAction, Ended, EventSourceMapping, FirstRun, Invoked, MappingHooks, MappingSwitch,
    Schedule, ScheduleHooks, Settled,
};
use crate::emf::MetricForwarder;
use crate::emulator::{LocalStack, REGION};
use crate::pipeline::read_summary;
use crate::stack::Resolver;
use crate::{CliError, lock};
use mapping::ConsumerMapping;
use outage::{Profile, Sample, Timeline};
use resq_ops::context::Context;
use resq_ops::orders::{self, Outgoing};

/// The stack name (the alarm's and the functions' names derive from it).
pub const STACK: &str = "resq-soak";
/// The redrive cap.
pub const MAX_REDRIVE_ATTEMPTS: u32 = 3;
/// The main queue's `maxReceiveCount`: the template's default. With the consumer breaker and
/// the retry budget an order of the outage no longer burns its receives while the alarm
/// comes: the budget holds its redeliveries back for the longest backoff, and the breaker
/// pauses the consumer.
pub const MAX_RECEIVE_COUNT: u32 = 5;
const CONSUMER_TIMEOUT: Duration = Duration::from_secs(5);
const REDRIVER_TIMEOUT: Duration = Duration::from_secs(20);
/// The main queue's retention: the template's default, four days. (Not scaled down: a pause
/// ends at the latest a tenth of the retention, at least 15 minutes, before it, and does not
/// start within twice that of it; a retention of soak scale would never pause.)
const MAIN_RETENTION: Duration = Duration::from_secs(345_600);
/// The DLQ's retention, as the template's.
const DLQ_RETENTION: Duration = Duration::from_secs(1_209_600);
/// `REDRIVE_RATE_MAX` over `REDRIVE_RATE_PER_SECOND`: the template's defaults' ratio (200 / 10).
pub const RATE_MAX_RATIO: u32 = 20;
/// How often the poller reads the mapping's state.
const MAPPING_READ_EVERY: Duration = Duration::from_millis(500);
/// The access key ids each caller signs with: the fault proxy counts requests by them.
const CONSUMER_KEY: &str = "soak-consumer";
const REDRIVER_KEY: &str = "soak-redriver";
const POLLER_KEY: &str = "lambda-poller";
/// The shortest outage, in the alarm's periods.
pub const MIN_OUTAGE_PERIODS: u32 = 10;
/// The goals of the outage (issue 34): orders of the outage dead-lettered, at most (%).
pub const OUTAGE_DEAD_LETTERED_PCT_MAX: f64 = 10.0;
/// Order writes attempted per order of the outage, at most (the one that succeeds included).
pub const OUTAGE_ATTEMPTS_PER_ORDER_MAX: f64 = 1.5;
/// From the fix until drained, over the outage's length, at most.
pub const RECOVERY_RATIO_MAX: f64 = 1.0;

/// What a soak run does.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// LocalStack's Python (`.venv-localstack/bin/python`).
    pub localstack_python: PathBuf,
    /// moto's `moto_server` (`.venv/bin/moto_server`): the consumer's event source mapping.
    pub moto_server: PathBuf,
    /// The translated template (the alarms' definitions come from it).
    pub template: PathBuf,
    /// The `consumer` binary.
    pub consumer_bin: PathBuf,
    /// The `redriver` binary.
    pub redriver_bin: PathBuf,
    /// Where the functions' logs and the outage's timeline, picture and profile go.
    pub log_dir: PathBuf,
    /// The redriver's schedule period.
    pub schedule_every: Duration,
    /// `MAX_MESSAGES_PER_RUN` (`None`: `auto`, the default).
    pub max_messages_per_run: Option<u32>,
    /// `REDRIVE_RATE_PER_SECOND` (`REDRIVE_RATE_MAX` is [`RATE_MAX_RATIO`] times it).
    pub rate_per_second: u32,
    /// Replayable messages behind the burst.
    pub probes: usize,
    /// Kept permanent failures in the burst per probe (100: a hundred to one).
    pub burst_factor: u32,
    /// Orders sent while the consumer crashes.
    pub crash_orders: usize,
    /// Valid orders before the burst.
    pub warmup_orders: usize,
    /// Orders sent per second while the downstream is down.
    pub outage_rate: f64,
    /// How long the downstream is down, in the alarm's periods (at least
    /// [`MIN_OUTAGE_PERIODS`]).
    pub outage_periods: u32,
    /// Dead letters from before the outage (replayable orders) put into the DLQ once the
    /// consumer is paused: replay waits for the consumer, and resumes with it; the drain's rate
    /// is measured over its full runs (two need about 2 × the redriver's timeout × the rate).
    pub recovery_orders: usize,
    /// `ARCHIVE_AFTER_SECONDS`.
    pub ttl: Duration,
    /// The alarms' period (the template's 60 s, scaled down).
    pub alarm_period: Duration,
    /// The replays-failing alarm's `ReplaysFailingHoldMinutes`, in (scaled) periods.
    pub hold_periods: u32,
    /// Its `ReplaysFailingThreshold`, per (scaled) period.
    pub threshold: u32,
    /// Give up after this long.
    pub max_duration: Duration,
    /// Random seed.
    pub seed: u64,
}

impl SoakOptions {
    /// How long the downstream is down.
    pub fn outage(&self) -> Duration {
        self.alarm_period * self.outage_periods.max(MIN_OUTAGE_PERIODS)
    }

    /// `ARCHIVE_SWEEP_SECONDS`: the template's hour scaled down as the TTL is (a day to
    /// `ttl`), at least the minute the redriver accepts.
    pub fn archive_sweep(&self) -> Duration {
        Duration::from_secs((3600 * self.ttl.as_secs() / 86_400).max(60))
    }

    /// `BACKOFF_MAX_SECONDS`: the template's 300 s over its alarms' minute, scaled as the
    /// alarms are (five of their periods).
    pub fn backoff_max(&self) -> Duration {
        self.alarm_period * 5
    }
}

/// One full run of the redriver's drain: replaying the whole time (not paused, no probe,
/// ended by its deadline), with the rate it achieved and the mean rate it paced at (the rate
/// it climbed through).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FullRun {
    /// `achievedRatePerSecond`.
    pub achieved: f64,
    /// `pacedRatePerSecond`.
    pub paced: f64,
    /// The highest rate it climbed to (`rampedTo`), when it climbed.
    pub ramped_to: Option<f64>,
}

impl FullRun {
    /// How far it was from its paced rate, in percent.
    pub fn error_pct(&self) -> f64 {
        (self.achieved - self.paced) / self.paced * 100.0
    }
}

/// What happened.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// Scheduled redriver runs that answered.
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
    /// After the outage, a run replayed again once the consumer had resumed.
    pub resumed: bool,
    /// Messages archived by paused runs.
    pub archived_while_paused: u64,
    /// Orders sent while the consumer crashed.
    pub crash_orders: usize,
    /// The consumer-errors alarm went to ALARM while it crashed.
    pub consumer_errors_fired: bool,
    /// The consumer's mapping was paused while it crashed.
    pub crash_consumer_paused: bool,
    /// Runs the breaker paused while the consumer crashed.
    pub crash_paused_runs: u64,
    /// Orders sent while the consumer crashed that ended in the archive: never run.
    pub unrun_archived: usize,
    /// The redriver's full runs after the burst (see [`FullRun`]).
    pub full_runs: Vec<FullRun>,
    /// The configured rate.
    pub rate_per_second: u32,
    /// The downstream-failing alarm went to ALARM during the outage.
    pub downstream_fired: bool,
    /// It was back in OK after the fix.
    pub downstream_cleared: bool,
    /// The replays-failing alarm's state changes, seconds into the run.
    pub alarm_states: Vec<(u64, String)>,
    /// The consumer's mapping was disabled (by the breaker) during the outage.
    pub consumer_paused: bool,
    /// Orders sent during the outage.
    pub outage_orders: usize,
    /// Of those, the ones that reached the DLQ.
    pub outage_dead_lettered: usize,
    /// Order writes attempted for them (at the stand-in, the one that succeeded included).
    pub outage_attempts: u64,
    /// How long the downstream was down.
    pub outage: Duration,
    /// From the fix until the queues held no replayable order; `None`: not within the limit.
    pub recovery: Option<Duration>,
    /// Messages found in a queue past that queue's retention.
    pub aged_out: usize,
    /// What happened during the outage.
    pub timeline: Timeline,
    /// The outage's requests and invocations.
    pub profile: Option<Profile>,
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
    /// The full run furthest from its paced rate: its error in percent.
    pub fn drain_rate_error_pct(&self) -> Option<f64> {
        self.full_runs
            .iter()
            .map(FullRun::error_pct)
            .max_by(|a, b| a.abs().total_cmp(&b.abs()))
    }

    /// Orders of the outage that reached the DLQ, in percent.
    pub fn outage_dead_lettered_pct(&self) -> f64 {
        outage::percent(self.outage_dead_lettered, self.outage_orders)
    }

    /// Order writes attempted per order of the outage.
    pub fn outage_attempts_per_order(&self) -> f64 {
        match self.outage_orders {
            0 => 0.0,
            n => self.outage_attempts as f64 / n as f64,
        }
    }

    /// From the fix until drained, over the outage's length.
    pub fn recovery_ratio(&self) -> Option<f64> {
        outage::recovery_ratio(self.outage, self.recovery)
    }

    /// The run's last line.
    pub fn summary_line(&self) -> String {
        let yes = |b: bool| if b { "yes" } else { "no" };
        format!(
            "soak: runs={} replayed={} starved={} max_replays={} paused_runs={} resumed={} archived_while_paused={} unrun_archived={} drain_rate_error_pct={} lost={} duplicate_effects={} consumer_paused={} outage_dead_lettered_pct={:.1} outage_attempts_per_order={:.2} recovery_ratio={} aged_out={}",
            self.runs,
            self.replayed,
            self.starved,
            self.max_replays,
            self.paused_runs,
            yes(self.resumed),
            self.archived_while_paused,
            self.unrun_archived,
            self.drain_rate_error_pct()
                .map_or_else(|| "none".to_owned(), |e| format!("{e:.1}")),
            self.audit.lost.len(),
            self.audit.duplicate_effects,
            yes(self.consumer_paused),
            self.outage_dead_lettered_pct(),
            self.outage_attempts_per_order(),
            self.recovery_ratio()
                .map_or_else(|| "none".to_owned(), |r| format!("{r:.2}")),
            self.aged_out,
        )
    }

    /// Every broken promise and missed goal, in words (empty: the run passed).
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
        out.extend(self.crash_failures());
        out.extend(self.outage_failures());
        match self.drain_rate_error_pct() {
            None => out.push(
                "no full run of the redriver (replaying until its deadline): its rate was not measured".into(),
            ),
            Some(e) if e.abs() > DRAIN_RATE_TOLERANCE_PCT => out.push(format!(
                "a full run replayed {e:+.1} % off the rate it paced at (tolerance ±{DRAIN_RATE_TOLERANCE_PCT} %; runs: {})",
                self.full_runs
                    .iter()
                    .map(|r| format!("{:.1}/s of {:.1}/s", r.achieved, r.paced))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(_) => {}
        }
        if self.aged_out > 0 {
            out.push(format!(
                "{} messages were found in a queue past its retention, unarchived",
                self.aged_out
            ));
        }
        if self.metrics_forwarded == 0 {
            out.push("no metric line reached CloudWatch".into());
        }
        out
    }

    fn crash_failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.consumer_errors_fired {
            out.push(
                "the consumer-errors alarm never went to ALARM while the consumer crashed".into(),
            );
        }
        if !self.crash_consumer_paused {
            out.push("the consumer was not paused while it crashed".into());
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
        out
    }

    fn outage_failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.downstream_fired {
            out.push("the downstream-failing alarm never went to ALARM during the outage".into());
        }
        if !self.consumer_paused {
            out.push("the consumer was not paused during the outage".into());
        }
        if self.paused_runs == 0 {
            out.push("redrive never paused".into());
        }
        if !self.downstream_cleared {
            out.push("the downstream-failing alarm did not return to OK after the fix".into());
        }
        if !self.resumed {
            out.push("redrive did not resume once the consumer had resumed".into());
        }
        if self.archived_while_paused == 0 {
            out.push("nothing was archived while replay was paused".into());
        }
        let pct = self.outage_dead_lettered_pct();
        if pct > OUTAGE_DEAD_LETTERED_PCT_MAX {
            out.push(format!(
                "{} of the outage's {} orders reached the DLQ ({pct:.1} %, goal ≤ {OUTAGE_DEAD_LETTERED_PCT_MAX} %)",
                self.outage_dead_lettered, self.outage_orders
            ));
        }
        let attempts = self.outage_attempts_per_order();
        if attempts > OUTAGE_ATTEMPTS_PER_ORDER_MAX {
            out.push(format!(
                "{attempts:.2} order writes were attempted per order of the outage (goal ≤ {OUTAGE_ATTEMPTS_PER_ORDER_MAX})"
            ));
        }
        match self.recovery_ratio() {
            None => out.push(
                "the main queue and the DLQ still held replayable orders at the time limit".into(),
            ),
            Some(r) if r > RECOVERY_RATIO_MAX => out.push(format!(
                "the pipeline took {:.0} s to drain after the fix, {r:.2} times the {:.0} s outage (goal ≤ {RECOVERY_RATIO_MAX})",
                self.recovery.unwrap_or_default().as_secs_f64(),
                self.outage.as_secs_f64()
            )),
            Some(_) => {}
        }
        out
    }
}

/// How far a full run's achieved rate may be from the rate it paced at (percent).
pub const DRAIN_RATE_TOLERANCE_PCT: f64 = 5.0;

/// One redriver run, as the schedule saw it.
#[derive(Debug, Clone)]
struct RunRecord {
    started: Instant,
    redriven: u64,
    paused: bool,
    probe: bool,
    stopped_by: resq_redriver::StopReason,
    achieved: Option<f64>,
    paced: Option<f64>,
    ramped_to: Option<f64>,
}

impl RunRecord {
    /// The run as a full run of the drain, if it was one.
    fn full(&self) -> Option<FullRun> {
        let full = !self.paused
            && !self.probe
            && self.redriven > 0
            && self.stopped_by == resq_redriver::StopReason::Deadline;
        match (full, self.achieved, self.paced) {
            (true, Some(achieved), Some(paced)) if paced > 0.0 => Some(FullRun {
                achieved,
                paced,
                ramped_to: self.ramped_to,
            }),
            _ => None,
        }
    }
}

/// An alarm's state changes, as seen.
type AlarmLog = Mutex<Vec<(Instant, StateValue)>>;

/// What the loops share.
#[derive(Default)]
struct State {
    hold_schedule: AtomicBool,
    run_in_progress: AtomicBool,
    /// The consumer fails every invocation (killed as it starts).
    crashing: AtomicBool,
    run_started: Mutex<Option<Instant>>,
    run_log: Mutex<Vec<RunRecord>>,
    /// The replays-failing alarm.
    alarm: AlarmLog,
    consumer_errors_alarm: AlarmLog,
    unexplained_alarm: AlarmLog,
    downstream_alarm: AlarmLog,
    /// What the consumer's breaker did, in the words of the redriver's summaries: (when, what,
    /// in an invocation by an alarm's action).
    consumer_log: Mutex<Vec<(Instant, String, bool)>>,
    runs: AtomicU64,
    replayed: AtomicU64,
    paused_runs: AtomicU64,
    archived_while_paused: AtomicU64,
    /// Runs that replayed something, with when they ended.
    replaying_runs: Mutex<Vec<Instant>>,
    last_run_moved: AtomicU64,
    /// Kept messages hidden in the DLQ, as the last run said.
    kept_in_flight: AtomicU64,
    function_errors: AtomicU64,
    consumer_invocations: AtomicU64,
    consumer_millis: AtomicU64,
    redriver_invocations: AtomicU64,
    redriver_millis: AtomicU64,
}

/// The names of the soak stack's alarms.
struct Alarms {
    replays_failing: String,
    consumer_errors: String,
    unexplained: String,
    downstream: String,
}

impl Alarms {
    fn of(stack: &str) -> Self {
        Self {
            replays_failing: format!("{stack}-replays-failing"),
            consumer_errors: format!("{stack}-consumer-errors"),
            unexplained: format!("{stack}-dead-letters-unexplained"),
            downstream: format!("{stack}-downstream-failing"),
        }
    }

    /// `PAUSE_ON_ALARMS`.
    fn pause_on(&self) -> String {
        [
            &self.replays_failing,
            &self.consumer_errors,
            &self.unexplained,
        ]
        .map(String::as_str)
        .join(",")
    }

    /// `PAUSE_CONSUMER_ON_ALARMS`.
    fn pause_consumer_on(&self) -> String {
        [&self.downstream, &self.consumer_errors]
            .map(String::as_str)
            .join(",")
    }
}

/// Runs the soak and reports; LocalStack, moto and the functions stop when this returns.
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
    let main_arn = queue_arn(&ctx, &ctx.main_queue_url).await?;
    let consumer_function = format!("{STACK}-consumer");
    let mapping = ConsumerMapping::start(
        &opts.moto_server,
        &main_arn,
        &consumer_function,
        BATCH_SIZE,
        Duration::ZERO,
    )
    .await?;
    for id in BREAKER_ALARMS.iter().chain(&CONSUMER_BREAKER_ALARMS) {
        template_alarm(&template, opts, id)?
            .send_with(&ctx.cloudwatch)
            .await
            .map_err(|e| CliError::aws(format!("creating the alarm {id}"), e))?;
    }
    let alarms = Alarms::of(STACK);
    println!(
        "LocalStack on {}; stack {STACK}: {} → {}; the consumer's event source mapping {} in moto on {}; alarms from the template, periods of {} s: PAUSE_ON_ALARMS={} (replays failing: RedriveReturned Sum > {}, in ALARM until {} periods in a row are not), PAUSE_CONSUMER_ON_ALARMS={} (their ALARM and OK invoke the redriver)",
        localstack.endpoint,
        ctx.main_queue_url,
        ctx.dlq_url,
        mapping.uuid,
        mapping.moto.endpoint,
        opts.alarm_period.as_secs(),
        alarms.pause_on(),
        opts.threshold,
        opts.hold_periods,
        alarms.pause_consumer_on(),
    );

    let address = |endpoint: &str| {
        endpoint
            .trim_start_matches("http://")
            .parse()
            .map_err(|e| CliError::Usage(format!("emulator address {endpoint}: {e}")))
    };
    let proxy = FaultProxy::start(
        address(&localstack.endpoint)?,
        0.0,
        Downstream::default(),
        opts.seed,
    )?;
    proxy.watch_queue(&ctx.main_queue_url, faults::MAIN, MAIN_RETENTION);
    proxy.watch_queue(&ctx.dlq_url, faults::DLQ, DLQ_RETENTION);
    // the redriver's Lambda calls go to moto through a proxy of their own, which counts them
    let lambda_proxy = FaultProxy::start(
        address(&mapping.moto.endpoint)?,
        0.0,
        Downstream::default(),
        opts.seed,
    )?;
    let forwarder = MetricForwarder::start(ctx.cloudwatch.clone());
    let mut env = function_env(opts, &ctx, &proxy.endpoint);
    // named as the template names them: its alarms read the metrics by service and function
    env.extend(crate::stack::telemetry_env(
        &template,
        &Resolver::new(&template, STACK, &[]),
    )?);
    let consumer = Function::new(
        "consumer",
        &opts.consumer_bin,
        with_key(env.clone(), CONSUMER_KEY),
        &opts.log_dir.join("consumer.log"),
        CONSUMER_TIMEOUT,
    )?
    .with_function_name(&consumer_function)
    .forward_metrics(forwarder.sender());
    let mut redriver_env = with_key(env, REDRIVER_KEY);
    redriver_env.extend(
        [
            ("AWS_ENDPOINT_URL_LAMBDA", lambda_proxy.endpoint.clone()),
            ("CONSUMER_EVENT_SOURCE_MAPPING", mapping.uuid.clone()),
            ("PAUSE_CONSUMER_ON_ALARMS", alarms.pause_consumer_on()),
            (
                "REDRIVE_RATE_MAX",
                (opts.rate_per_second * RATE_MAX_RATIO).to_string(),
            ),
            (
                "ARCHIVE_SWEEP_SECONDS",
                opts.archive_sweep().as_secs().to_string(),
            ),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let redriver = Function::new(
        "redriver",
        &opts.redriver_bin,
        redriver_env,
        &opts.log_dir.join("redriver.log"),
        REDRIVER_TIMEOUT,
    )?
    .with_function_name(&format!("{STACK}-redriver"))
    .forward_metrics(forwarder.sender());

    let state = State::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (actions_tx, actions_rx) = mpsc::unbounded_channel();
    let poller_sqs = aws_sdk_sqs::Client::new(
        &crate::emulator::local_sdk_config_as(&proxy.endpoint, POLLER_KEY).await,
    );
    let switch = mapping.switch(MAPPING_READ_EVERY);
    let batches = SoakBatches {
        state: &state,
        lambda_metrics: forwarder.sender(),
        function_name: consumer_function.clone(),
    };
    let world = World {
        ctx: &ctx,
        proxy: &proxy,
        lambda_proxy: &lambda_proxy,
        mapping: &mapping,
        state: &state,
        opts,
        started,
    };
    let (c, r, (), (), (), (), driven) = tokio::join!(
        event_source_mapping(
            consumer,
            &poller_sqs,
            &ctx,
            &main_arn,
            &switch,
            batches,
            stop_rx.clone()
        ),
        schedule(
            redriver,
            &state,
            opts.schedule_every,
            actions_rx,
            stop_rx.clone()
        ),
        watch_alarm(
            &ctx,
            &alarms.replays_failing,
            &state.alarm,
            None,
            stop_rx.clone()
        ),
        watch_alarm(
            &ctx,
            &alarms.consumer_errors,
            &state.consumer_errors_alarm,
            Some(actions_tx.clone()),
            stop_rx.clone()
        ),
        watch_alarm(
            &ctx,
            &alarms.unexplained,
            &state.unexplained_alarm,
            None,
            stop_rx.clone()
        ),
        watch_alarm(
            &ctx,
            &alarms.downstream,
            &state.downstream_alarm,
            Some(actions_tx),
            stop_rx
        ),
        drive(&world, stop_tx),
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
    let o = &driven.outage;
    // an order of the outage reached the DLQ if a function sent a copy there, if a copy was
    // replayed from it, or if it was found there or in the archive in the end
    let outage_dead_lettered = {
        let sent = lock(&proxy.stats.sent_to);
        let counts = lock(&proxy.stats.redrive_counts);
        o.ids
            .iter()
            .filter(|id| {
                sent.contains_key(&(faults::DLQ, (*id).clone()))
                    || counts.get(*id).is_some_and(|n| *n >= 1)
                    || matches!(audit.places.get(*id), Some(&"DLQ" | &"archived"))
            })
            .count()
    };
    let outage_attempts = {
        let attempts = lock(&proxy.stats.order_attempts);
        o.ids
            .iter()
            .map(|id| u64::from(attempts.get(id).copied().unwrap_or(0)))
            .sum()
    };
    let now_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
    let aged_out = lock(&proxy.stats.aged_out).len() + audit_aged_out(&audit, now_ms);
    let full_runs = lock(&state.run_log)
        .iter()
        .filter(|r| r.started >= driven.burst_over)
        .filter_map(RunRecord::full)
        .collect();
    let report = SoakReport {
        runs: state.runs.load(Ordering::Relaxed),
        replayed: state.replayed.load(Ordering::Relaxed),
        probes: driven.probes,
        starved: driven.starved,
        max_replays: audit.max_redrives.max(proxy_max),
        paused_runs: state.paused_runs.load(Ordering::Relaxed),
        resumed: o.resumed,
        archived_while_paused: state.archived_while_paused.load(Ordering::Relaxed),
        crash_orders: driven.crash_ids.len(),
        consumer_errors_fired: driven.crash.consumer_errors_fired,
        crash_consumer_paused: driven.crash.consumer_paused,
        crash_paused_runs: driven.crash.paused_runs,
        unrun_archived,
        full_runs,
        rate_per_second: opts.rate_per_second,
        downstream_fired: o.fired,
        downstream_cleared: o.cleared,
        alarm_states,
        consumer_paused: o.consumer_paused,
        outage_orders: o.ids.len(),
        outage_dead_lettered,
        outage_attempts,
        outage: o.length,
        recovery: o.recovery,
        aged_out,
        timeline: o.timeline.clone(),
        profile: o.profile.clone(),
        metrics_forwarded: forwarder.sent.load(Ordering::Relaxed),
        function_errors: state.function_errors.load(Ordering::Relaxed),
        audit,
        settled: driven.settled,
        elapsed: started.elapsed(),
    };
    drop(localstack);
    Ok(report)
}

/// Messages the audit found in a queue past that queue's retention (by their `SentTimestamp`).
fn audit_aged_out(audit: &Audit, now_ms: u64) -> usize {
    let past = |sent: Option<u64>, retention: Duration| {
        sent.is_some_and(|s| now_ms.saturating_sub(s) > retention.as_millis() as u64)
    };
    audit
        .queued
        .iter()
        .filter(|(in_dlq, sent)| {
            past(
                *sent,
                if *in_dlq {
                    DLQ_RETENTION
                } else {
                    MAIN_RETENTION
                },
            )
        })
        .count()
}

/// `env` signed with access key `key` (the fault proxy counts requests by it).
fn with_key(mut env: Vec<(String, String)>, key: &str) -> Vec<(String, String)> {
    env.push(("AWS_ACCESS_KEY_ID".into(), key.into()));
    env
}

/// The stack's queues and bucket on LocalStack, as the template makes them (the functions
/// run here; the alarms are created from the template's own definitions).
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
        vec![(
            QueueAttributeName::MessageRetentionPeriod,
            DLQ_RETENTION.as_secs().to_string(),
        )],
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
            (
                QueueAttributeName::MessageRetentionPeriod,
                MAIN_RETENTION.as_secs().to_string(),
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

/// The template's alarms the consumer's breaker reads (`PAUSE_CONSUMER_ON_ALARMS`) that
/// [`BREAKER_ALARMS`] does not name already.
pub const CONSUMER_BREAKER_ALARMS: [&str; 1] = ["DownstreamFailingAlarm"];

/// The consumer's event source mapping's batch size (the template's `ConsumerBatchSize`).
const BATCH_SIZE: i32 = 10;

/// The template's alarm `id`, as `PutMetricAlarm` for the soak's stack: every property from
/// the template, the period scaled down to `alarm_period`, the hold and the threshold as the
/// soak's parameter values, the consumer as `{STACK}-consumer`. Alarm actions are left out (no
/// topic here; the soak invokes the redriver for the consumer breaker's alarms itself).
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

/// The variables both functions get.
fn function_env(opts: &SoakOptions, ctx: &Context, endpoint: &str) -> Vec<(String, String)> {
    let alarms = Alarms::of(STACK);
    [
        ("MAIN_QUEUE_URL", ctx.main_queue_url.clone()),
        ("DLQ_URL", ctx.dlq_url.clone()),
        ("ARCHIVE_BUCKET", ctx.bucket.clone()),
        ("MAX_REDRIVE_ATTEMPTS", MAX_REDRIVE_ATTEMPTS.to_string()),
        ("DEADLINE_MARGIN_MS", "1000".into()),
        ("BACKOFF_BASE_SECONDS", "1".into()),
        (
            "BACKOFF_MAX_SECONDS",
            opts.backoff_max().as_secs().to_string(),
        ),
        ("REDRIVE_RATE_PER_SECOND", opts.rate_per_second.to_string()),
        (
            "MAX_MESSAGES_PER_RUN",
            opts.max_messages_per_run
                .map_or_else(|| "auto".to_owned(), |n| n.to_string()),
        ),
        ("ARCHIVE_AFTER_SECONDS", opts.ttl.as_secs().to_string()),
        ("PERMANENT_ACTION", "keep".into()),
        ("PAUSE_ON_ALARMS", alarms.pause_on()),
        ("AWS_ENDPOINT_URL", endpoint.to_owned()),
        ("AWS_REGION", REGION.into()),
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
/// the invocations and what did not settle, and puts each invocation's `AWS/Lambda` `Errors`
/// datum as Lambda does (1 for a failed one, 0 for one that answered).
struct SoakBatches<'a> {
    state: &'a State,
    lambda_metrics: mpsc::UnboundedSender<Value>,
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
        let state = self.state;
        let crashed = state.crashing.load(Ordering::SeqCst);
        state.consumer_invocations.fetch_add(1, Ordering::Relaxed);
        state
            .consumer_millis
            .fetch_add(invoked.took.as_millis() as u64, Ordering::Relaxed);
        let errors = match invoked.settled {
            Settled::Deleted(_) => 0,
            Settled::BatchFailed(e) => {
                state.function_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "the consumer's answer");
                0
            }
            other => {
                if !crashed {
                    state.function_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(outcome = ?other, "consumer invocation failed");
                }
                1
            }
        };
        let _ = self
            .lambda_metrics
            .send(crate::emf::lambda_errors(&self.function_name, errors));
    }
}

/// Lambda's SQS poller in front of the consumer process: it receives and deletes through
/// `sqs` (the fault proxy, which counts its requests apart), and honours the mapping's state.
async fn event_source_mapping(
    mut consumer: Function,
    sqs: &aws_sdk_sqs::Client,
    ctx: &Context,
    main_arn: &str,
    switch: &MappingSwitch,
    mut hooks: SoakBatches<'_>,
    stop: watch::Receiver<bool>,
) -> Result<(), CliError> {
    let mapping = EventSourceMapping {
        sqs,
        queue_url: &ctx.main_queue_url,
        queue_arn: main_arn,
        batch_size: BATCH_SIZE,
        batching_window: Duration::from_millis(200),
        switch: Some(switch),
    };
    mapping.run(&mut consumer, &mut hooks, stop).await
}

/// The soak's hooks on the schedule: held during the burst; counts the runs, the paused ones
/// and what they archived; notes what the consumer's breaker did.
struct SoakRuns<'a>(&'a State);

impl SoakRuns<'_> {
    /// The summary a run answered with, counted as an invocation; `None` (counted as a
    /// function error) when it did not answer with one.
    fn summary(&self, ended: Ended, took: Duration) -> Option<resq_redriver::Summary> {
        let state = self.0;
        state.redriver_invocations.fetch_add(1, Ordering::Relaxed);
        state
            .redriver_millis
            .fetch_add(took.as_millis() as u64, Ordering::Relaxed);
        state.run_in_progress.store(false, Ordering::SeqCst);
        match ended {
            Ended::Response(body) => match read_summary(&body) {
                Ok(s) => Some(s),
                Err(e) => {
                    state.function_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, body, "not a redriver summary");
                    None
                }
            },
            other => {
                state.function_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(outcome = ?other, "redriver invocation failed");
                None
            }
        }
    }

    /// Notes what the consumer's breaker did in a run, if worth noting.
    fn note_consumer(&self, s: &resq_redriver::Summary, by_alarm: bool, at: Instant) {
        if let Some(what) = outage::consumer_event(s.consumer.as_deref()) {
            lock(&self.0.consumer_log).push((at, what, by_alarm));
        }
    }
}

impl<F> ScheduleHooks<F> for SoakRuns<'_> {
    fn held(&self) -> bool {
        self.0.hold_schedule.load(Ordering::SeqCst)
    }

    fn invoking(&mut self) -> Option<Duration> {
        self.0.run_in_progress.store(true, Ordering::SeqCst);
        *lock(&self.0.run_started) = Some(Instant::now());
        None
    }

    fn answered(&mut self, _: &F, ended: Ended, took: Duration) {
        let started = lock(&self.0.run_started)
            .take()
            .unwrap_or_else(Instant::now);
        if let Some(s) = self.summary(ended, took) {
            // one instant for all it did: a run that resumed the consumer and replayed did both
            let at = Instant::now();
            self.0.count_run(&s, at);
            self.note_consumer(&s, false, at);
            lock(&self.0.run_log).push(RunRecord {
                started,
                redriven: s.redriven,
                paused: s.paused,
                probe: s.probe.is_some(),
                stopped_by: s.stopped_by,
                achieved: s.achieved_rate_per_second,
                paced: s.paced_rate_per_second,
                ramped_to: s.ramped_to,
            });
        }
    }

    fn alarm_answered(&mut self, _: &F, action: &AlarmAction, ended: Ended, took: Duration) {
        let _ = lock(&self.0.run_started).take();
        if let Some(s) = self.summary(ended, took) {
            tracing::info!(alarm = %action.alarm, state = %action.state, consumer = ?s.consumer, "the redriver, invoked by an alarm's action");
            self.note_consumer(&s, true, Instant::now());
        }
    }
}

impl State {
    /// Counts a scheduled run that answered with its summary.
    fn count_run(&self, s: &resq_redriver::Summary, at: Instant) {
        let archived: u64 = s.archived.values().sum();
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.replayed.fetch_add(s.redriven, Ordering::Relaxed);
        if s.paused {
            self.paused_runs.fetch_add(1, Ordering::Relaxed);
            self.archived_while_paused
                .fetch_add(archived, Ordering::Relaxed);
        }
        if s.redriven > 0 {
            lock(&self.replaying_runs).push(at);
        }
        if let Some(kept) = s.kept_in_flight {
            self.kept_in_flight.store(kept, Ordering::Relaxed);
        }
        self.last_run_moved
            .store(s.redriven + archived, Ordering::Relaxed);
    }
}

/// The EventBridge schedule in front of the redriver process (held during the burst), and
/// the alarm actions that invoke it between runs.
async fn schedule(
    mut redriver: Function,
    state: &State,
    every: Duration,
    actions: mpsc::UnboundedReceiver<AlarmAction>,
    stop: watch::Receiver<bool>,
) -> Result<(), CliError> {
    let schedule = Schedule {
        every,
        first: FirstRun::AtOnce,
        rule: &format!("{STACK}-schedule"),
    };
    schedule
        .run_with_alarms(&mut redriver, &mut SoakRuns(state), actions, stop)
        .await
}

/// Records the alarm's state changes into `states` (once a second); with `actions`, sends each
/// change to `ALARM` or `OK` there, as the alarm's action invoking the redriver.
async fn watch_alarm(
    ctx: &Context,
    name: &str,
    states: &AlarmLog,
    actions: Option<mpsc::UnboundedSender<AlarmAction>>,
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
            let at = Instant::now();
            lock(states).push((at, now.clone()));
            if let Some(tx) = &actions
                && matches!(now, StateValue::Alarm | StateValue::Ok)
            {
                let previous = last
                    .as_ref()
                    .map_or("INSUFFICIENT_DATA", |s| s.as_str())
                    .to_owned();
                let _ = tx.send(AlarmAction {
                    alarm: name.to_owned(),
                    state: now.as_str().to_owned(),
                    previous,
                    at,
                });
            }
            last = Some(now);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
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

/// When `states` first showed `value` (after `after`).
fn seen(states: &AlarmLog, value: &StateValue, after: Option<Instant>) -> Option<Instant> {
    lock(states)
        .iter()
        .find(|(at, s)| s == value && after.is_none_or(|a| *at > a))
        .map(|(at, _)| *at)
}

/// Orders as [`orders::generate`] makes them, spread over tenants as a fair queue sees them
/// ([`orders::with_tenants`]: a third under one noisy tenant).
fn tenants_orders(
    prefix: &str,
    count: usize,
    malformed_pct: f64,
    invalid_pct: f64,
    rng: &mut impl rand::Rng,
) -> Vec<Outgoing> {
    let orders = orders::generate(prefix, count, malformed_pct, invalid_pct, rng);
    orders::with_tenants(orders, rng)
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

/// What the phases work with.
struct World<'a> {
    ctx: &'a Context,
    /// In front of LocalStack: the functions' and the poller's calls.
    proxy: &'a FaultProxy,
    /// In front of moto: the redriver's Lambda calls.
    lambda_proxy: &'a FaultProxy,
    mapping: &'a ConsumerMapping,
    state: &'a State,
    opts: &'a SoakOptions,
    started: Instant,
}

impl World<'_> {
    fn limit(&self) -> Instant {
        self.started + self.opts.max_duration
    }

    fn at(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// How many of `ids` have their order written.
    fn written(&self, ids: &[String]) -> usize {
        let writes = lock(&self.proxy.stats.order_writes);
        ids.iter().filter(|id| writes.contains_key(*id)).count()
    }

    /// The requests so far by caller and action, of both proxies.
    fn actions(&self) -> BTreeMap<(String, String), u64> {
        let mut all = self.proxy.stats.actions();
        for (k, n) in self.lambda_proxy.stats.actions() {
            *all.entry(k).or_default() += n;
        }
        all
    }
}

/// What the phases saw.
struct Driven {
    plans: HashMap<String, Plan>,
    crash_ids: Vec<String>,
    crash: Crash,
    /// When the burst phase was over: the drain's full runs count from there.
    burst_over: Instant,
    probes: usize,
    starved: usize,
    outage: Outage,
    settled: bool,
}

/// The phases; stops the loops at the end.
async fn drive(world: &World<'_>, stop: watch::Sender<bool>) -> Result<Driven, CliError> {
    let result = phases(world).await;
    let _ = stop.send(true);
    result
}

async fn phases(w: &World<'_>) -> Result<Driven, CliError> {
    let (ctx, state, opts) = (w.ctx, w.state, w.opts);
    let (limit, started) = (w.limit(), w.started);
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut plans: HashMap<String, Plan> = HashMap::new();

    // 1. warm-up
    let warm = tenants_orders("SOAK-WARM-", opts.warmup_orders, 0.0, 0.0, &mut rng);
    send_orders(ctx, &warm, Plan::Valid, &mut plans).await?;
    let ids: Vec<String> = warm.iter().map(|o| o.order_id.clone()).collect();
    until("warm-up orders processed", limit, started, || async {
        w.written(&ids) == opts.warmup_orders
    })
    .await;

    // 2. the burst of permanent failures, then replayable probes behind them
    state.hold_schedule.store(true, Ordering::SeqCst);
    until("the schedule held", limit, started, || async {
        !state.run_in_progress.load(Ordering::SeqCst)
    })
    .await;
    let burst_size = opts.burst_factor as usize * opts.probes;
    let burst = tenants_orders("SOAK-BURST-", burst_size, 100.0, 0.0, &mut rng);
    let burst_at = Instant::now();
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
    let probes = tenants_orders("SOAK-PROBE-", opts.probes, 0.0, 0.0, &mut rng);
    // straight into the DLQ, where SQS's redrive policy would put them
    let report = resq_ops::status::send_to(ctx, &ctx.dlq_url, &probes, demo::order_tag).await?;
    if !report.failed.is_empty() {
        return Err(CliError::Usage("LocalStack refused a probe".into()));
    }
    plans.extend(probes.iter().map(|o| (o.order_id.clone(), Plan::Valid)));
    let runs_before = state.runs.load(Ordering::Relaxed);
    println!(
        "[{:>4}s] {} permanent failures ahead of {} replayable messages in the DLQ; budget {} a run; schedule released",
        w.at(),
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
        let counts = lock(&w.proxy.stats.redrive_counts);
        probes
            .iter()
            .filter(|o| counts.get(&o.order_id).is_some_and(|n| *n >= 1))
            .count()
    };
    let starved = probes.len() - replayed;
    println!(
        "[{:>4}s] replayed within two runs: {replayed} of {}",
        w.at(),
        probes.len()
    );
    let burst_over = Instant::now();

    // 3. the consumer crashes, then the fix lands
    let (crash_ids, crash) = crash(w, &mut rng, &mut plans).await?;

    // 4. the outage, timed so that the kept burst reaches its TTL while the consumer is paused
    let outage = outage(w, burst_at, &mut rng, &mut plans).await?;

    // 5. settle: both queues drained (the kept burst is archived at its TTL)
    let settled = until("both queues drained", limit, started, || async {
        depth(ctx, &ctx.main_queue_url).await == 0
            && depth(ctx, &ctx.dlq_url).await == 0
            && state.last_run_moved.load(Ordering::Relaxed) == 0
    })
    .await;
    Ok(Driven {
        plans,
        crash_ids,
        crash,
        burst_over,
        probes: probes.len(),
        starved,
        outage,
        settled,
    })
}

/// What the crash phase saw.
struct Crash {
    consumer_errors_fired: bool,
    consumer_paused: bool,
    paused_runs: u64,
}

/// The consumer fails every invocation while `crash_orders` orders arrive, until the
/// consumer-errors alarm has paused the consumer (orders wait in the main queue) and replay;
/// then the fix lands, and the phase waits until each of the orders has been processed: a probe
/// of the paused consumer finds it healthy, the alarm returns to OK, its action resumes the
/// consumer, and the main queue drains (with what SQS moved to the DLQ before the pause,
/// replayed).
async fn crash(
    w: &World<'_>,
    rng: &mut StdRng,
    plans: &mut HashMap<String, Plan>,
) -> Result<(Vec<String>, Crash), CliError> {
    let (ctx, state, opts) = (w.ctx, w.state, w.opts);
    let (limit, started) = (w.limit(), w.started);
    let crash_started = Instant::now();
    state.crashing.store(true, Ordering::SeqCst);
    let orders = tenants_orders("SOAK-CRASH-", opts.crash_orders, 0.0, 0.0, rng);
    for chunk in orders.chunks(500) {
        send_orders(ctx, chunk, Plan::Valid, plans).await?;
    }
    let ids: Vec<String> = orders.iter().map(|o| o.order_id.clone()).collect();
    println!(
        "[{:>4}s] the consumer crashes on every invocation; {} orders sent",
        w.at(),
        ids.len()
    );
    let paused_since = |from: Instant, to: Option<Instant>| {
        lock(&state.run_log)
            .iter()
            .filter(|r| r.paused && r.started >= from && to.is_none_or(|t| r.started < t))
            .count() as u64
    };
    let consumer_paused = AtomicBool::new(false);
    until(
        "the consumer-errors alarm in ALARM, the consumer and replay paused",
        limit,
        started,
        || async {
            if w.mapping.paused().await == Some(true) {
                consumer_paused.store(true, Ordering::Relaxed);
            }
            seen(
                &state.consumer_errors_alarm,
                &StateValue::Alarm,
                Some(crash_started),
            )
            .is_some()
                && consumer_paused.load(Ordering::Relaxed)
                && paused_since(crash_started, None) > 0
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
        "[{:>4}s] the fix lands: {paused_runs} runs paused meanwhile; main queue {}, DLQ {}",
        w.at(),
        depth(ctx, &ctx.main_queue_url).await,
        depth(ctx, &ctx.dlq_url).await
    );
    until(
        "every crashed order processed (a probe finds the consumer healthy, the alarm clears, the consumer resumes)",
        limit,
        started,
        || async { w.written(&ids) == ids.len() },
    )
    .await;
    println!(
        "[{:>4}s] the crash's orders drained {:.0} s after the fix",
        w.at(),
        fixed_at.elapsed().as_secs_f64()
    );
    until("the run in progress ended", limit, started, || async {
        !state.run_in_progress.load(Ordering::SeqCst)
    })
    .await;
    Ok((
        ids,
        Crash {
            consumer_errors_fired,
            consumer_paused: consumer_paused.load(Ordering::Relaxed),
            paused_runs,
        },
    ))
}

/// What the outage phase saw.
struct Outage {
    /// The orders sent while the downstream was down.
    ids: Vec<String>,
    length: Duration,
    recovery: Option<Duration>,
    fired: bool,
    cleared: bool,
    consumer_paused: bool,
    resumed: bool,
    timeline: Timeline,
    profile: Option<Profile>,
}

/// Counters at one moment, for the outage's profile.
struct Counters {
    actions: BTreeMap<(String, String), u64>,
    consumer_invocations: u64,
    consumer_millis: u64,
    redriver_invocations: u64,
    redriver_millis: u64,
    dead_lettered: u64,
    replayed: u64,
}

impl Counters {
    fn now(w: &World<'_>) -> Self {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Self {
            actions: w.actions(),
            consumer_invocations: get(&w.state.consumer_invocations),
            consumer_millis: get(&w.state.consumer_millis),
            redriver_invocations: get(&w.state.redriver_invocations),
            redriver_millis: get(&w.state.redriver_millis),
            dead_lettered: get(&w.proxy.stats.dead_lettered),
            replayed: get(&w.proxy.stats.replays),
        }
    }
}

/// The orders' downstream fails every write for the outage's length while orders arrive at
/// `outage_rate`; the phase starts when the kept burst (sent at `burst_at`) is half the
/// outage from its TTL, so that it comes due while the consumer is paused. Then the fix, and
/// the drain: until every order sent before the fix is processed, the main queue is empty and
/// nothing waits for replay in the DLQ. Sampled every second throughout.
async fn outage(
    w: &World<'_>,
    burst_at: Instant,
    rng: &mut StdRng,
    plans: &mut HashMap<String, Plan>,
) -> Result<Outage, CliError> {
    let (state, opts) = (w.state, w.opts);
    let length = opts.outage();
    let begin = (burst_at + opts.ttl)
        .checked_sub(length / 2)
        .unwrap_or(burst_at)
        .max(Instant::now());
    if begin > Instant::now() {
        println!(
            "[{:>4}s] the outage begins in {:.0} s, so that the kept burst reaches its TTL while the consumer is paused",
            w.at(),
            begin
                .saturating_duration_since(Instant::now())
                .as_secs_f64()
        );
        tokio::time::sleep_until(begin.into()).await;
    }
    let before = Counters::now(w);
    let origin = Instant::now();
    w.proxy.set_outage(true);
    println!(
        "[{:>4}s] the downstream goes down for {} s; {} orders a second",
        w.at(),
        length.as_secs(),
        opts.outage_rate
    );
    let sampling = AtomicBool::new(true);
    let (driven, samples) = tokio::join!(
        async {
            let r = outage_orders(w, origin, length, rng, plans).await;
            sampling.store(false, Ordering::SeqCst);
            r
        },
        sample(w, origin, &sampling)
    );
    let (ids, recovery_ids, fixed_at, drained_at) = driven?;
    let after = Counters::now(w);
    let recovery = drained_at.map(|d| d.saturating_duration_since(fixed_at));

    // the timeline: the alarms, the redriver's doings on the consumer, the fix, the drain
    let mut timeline = Timeline::default();
    let window = |at: &Instant| *at >= origin.checked_sub(Duration::from_secs(5)).unwrap_or(origin);
    timeline.add(
        origin,
        origin,
        "the downstream goes down: every order write fails",
    );
    for (log, name) in [
        (&state.downstream_alarm, "downstream-failing"),
        (&state.consumer_errors_alarm, "consumer-errors"),
        (&state.alarm, "replays-failing"),
    ] {
        for (at, s) in lock(log).iter().filter(|(at, _)| window(at)) {
            timeline.add(origin, *at, format!("alarm {name} → {}", s.as_str()));
        }
    }
    let consumer_log: Vec<(Instant, String, bool)> = lock(&state.consumer_log)
        .iter()
        .filter(|(at, _, _)| window(at))
        .cloned()
        .collect();
    for (at, what, by_alarm) in &consumer_log {
        let by = if *by_alarm {
            "redriver (alarm action)"
        } else {
            "redriver (schedule)"
        };
        timeline.add(origin, *at, format!("{by}: consumer {what}"));
    }
    timeline.add(
        origin,
        fixed_at,
        "the fix: the downstream takes writes again",
    );
    if let Some(d) = drained_at {
        timeline.add(
            origin,
            d,
            "drained: every order of the outage processed, the main queue empty, nothing waiting for replay in the DLQ",
        );
    }
    let resumed_at = consumer_log
        .iter()
        .find(|(at, what, _)| *at > fixed_at && what.starts_with("resumed"))
        .map(|(at, _, _)| *at);
    let replayed_after = resumed_at.and_then(|r| {
        lock(&state.replaying_runs)
            .iter()
            .find(|at| **at >= r)
            .copied()
    });
    if let Some(at) = replayed_after {
        timeline.add(
            origin,
            at,
            "a run replayed (the dead letters waited for the consumer)",
        );
    }
    let timeline = timeline.sorted();
    let recovery_written = w.written(&recovery_ids) == recovery_ids.len();
    let fired = seen(&state.downstream_alarm, &StateValue::Alarm, Some(origin));
    let cleared = seen(&state.downstream_alarm, &StateValue::Ok, Some(fixed_at)).is_some();
    let consumer_paused = samples
        .iter()
        .any(|s| s.at < length.as_secs_f64() && s.consumer_paused == Some(true));

    let sent = ids.len() as u64;
    let outage = Outage {
        ids,
        length,
        recovery,
        fired: fired.is_some(),
        cleared,
        consumer_paused,
        resumed: replayed_after.is_some() && recovery_written,
        timeline,
        profile: Some(Profile {
            orders_per_second: opts.outage_rate,
            outage_seconds: length.as_secs_f64(),
            orders: sent,
            requests: by_action(
                &before.actions,
                &after.actions,
                &[CONSUMER_KEY, REDRIVER_KEY],
            ),
            consumer_invocations: after.consumer_invocations - before.consumer_invocations,
            consumer_millis: after.consumer_millis - before.consumer_millis,
            redriver_invocations: after.redriver_invocations - before.redriver_invocations,
            redriver_millis: after.redriver_millis - before.redriver_millis,
            dead_lettered: after.dead_lettered - before.dead_lettered,
            replayed: after.replayed - before.replayed,
            poller_requests: by_action(&before.actions, &after.actions, &[POLLER_KEY]),
            recovery_seconds: recovery.map(|r| r.as_secs_f64()),
        }),
    };
    write_outage(
        w,
        &outage,
        &samples,
        fixed_at.saturating_duration_since(origin),
        drained_at.map(|d| d.saturating_duration_since(origin)),
    )?;
    Ok(outage)
}

/// The requests of `callers` between two snapshots, by action (callers summed).
fn by_action(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
    callers: &[&str],
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ((caller, action), n) in outage::grown(before, after) {
        if callers.contains(&caller.as_str()) {
            *out.entry(action).or_default() += n;
        }
    }
    out
}

/// Writes the outage's timeline (with the samples), picture and profile into the log
/// directory, and prints the timeline.
fn write_outage(
    w: &World<'_>,
    o: &Outage,
    samples: &[Sample],
    fixed: Duration,
    drained: Option<Duration>,
) -> Result<(), CliError> {
    let dir = &w.opts.log_dir;
    println!("\nthe outage, seconds from the downstream going down:");
    for line in o.timeline.lines() {
        println!("  {line}");
    }
    outage::write_json(
        &dir.join("outage-timeline.json"),
        &serde_json::json!({
            "outageSeconds": o.length.as_secs_f64(),
            "fixedAt": fixed.as_secs_f64(),
            "drainedAt": drained.map(|d| d.as_secs_f64()),
            "events": o.timeline.events,
            "samples": samples,
        }),
    )?;
    if let Some(p) = &o.profile {
        outage::write_json(&dir.join("outage-requests.json"), p)?;
        println!(
            "requests by action, the outage and its recovery: {}",
            serde_json::to_string(&p.requests).unwrap_or_default()
        );
    }
    plot::draw(
        samples,
        plot::Marks {
            fixed: fixed.as_secs_f64(),
            drained: drained.map(|d| d.as_secs_f64()),
        },
        &dir.join("outage.svg"),
    )?;
    println!(
        "the outage's timeline, picture and requests: {}/outage-timeline.json, outage.svg, outage-requests.json\n",
        dir.display()
    );
    Ok(())
}

/// Sends the outage's orders (a second's worth each second) until its end, puts the recovery
/// dead letters into the DLQ once the consumer is paused, lands the fix, and waits for the
/// drain: (the outage's order ids, the dead letters' ids, when the fix landed, when it drained).
async fn outage_orders(
    w: &World<'_>,
    origin: Instant,
    length: Duration,
    rng: &mut StdRng,
    plans: &mut HashMap<String, Plan>,
) -> Result<(Vec<String>, Vec<String>, Instant, Option<Instant>), CliError> {
    let (ctx, opts) = (w.ctx, w.opts);
    let mut ids: Vec<String> = Vec::new();
    let mut recovery_ids: Vec<String> = Vec::new();
    let mut second = 0u64;
    while origin.elapsed() < length {
        second += 1;
        let due = (opts.outage_rate * second as f64).round() as usize;
        let batch = tenants_orders(
            &format!("SOAK-OUTAGE-{second:04}-"),
            due.saturating_sub(ids.len()),
            0.0,
            0.0,
            rng,
        );
        send_orders(ctx, &batch, Plan::Doomed, plans).await?;
        ids.extend(batch.into_iter().map(|o| o.order_id));
        if recovery_ids.is_empty()
            && opts.recovery_orders > 0
            && w.mapping.paused().await == Some(true)
        {
            // dead letters from before the outage, where SQS's redrive policy would have put
            // them: replay waits while the consumer is paused, and resumes with it
            let dead = tenants_orders("SOAK-RECOVERY-", opts.recovery_orders, 0.0, 0.0, rng);
            let report =
                resq_ops::status::send_to(ctx, &ctx.dlq_url, &dead, demo::order_tag).await?;
            if !report.failed.is_empty() {
                return Err(CliError::Usage("LocalStack refused a dead letter".into()));
            }
            plans.extend(dead.iter().map(|o| (o.order_id.clone(), Plan::Valid)));
            recovery_ids = dead.into_iter().map(|o| o.order_id).collect();
            println!(
                "[{:>4}s] the consumer is paused; {} dead letters put in the DLQ",
                w.at(),
                recovery_ids.len()
            );
        }
        if second.is_multiple_of(10) {
            let (main, dlq, paused) = tokio::join!(
                depth(ctx, &ctx.main_queue_url),
                depth(ctx, &ctx.dlq_url),
                w.mapping.paused()
            );
            let alarm = lock(&w.state.downstream_alarm)
                .last()
                .map_or_else(|| "unknown".to_owned(), |(_, s)| s.as_str().to_owned());
            let consumer = match paused {
                Some(true) => "paused",
                Some(false) => "running",
                None => "unknown",
            };
            println!(
                "[{:>4}s] outage: {} orders sent; main queue {main}, DLQ {dlq}; downstream-failing {alarm}; consumer {consumer}",
                w.at(),
                ids.len(),
            );
        }
        tokio::time::sleep_until(
            (origin + Duration::from_secs(second))
                .min(origin + length)
                .into(),
        )
        .await;
    }
    w.proxy.set_outage(false);
    let fixed_at = Instant::now();
    println!(
        "[{:>4}s] the fix: the downstream takes writes again; {} orders were sent during the outage",
        w.at(),
        ids.len()
    );
    let all: Vec<String> = ids.iter().chain(&recovery_ids).cloned().collect();
    let drained = until(
        "every order of the outage processed, the main queue empty, nothing in the DLQ to replay",
        w.limit(),
        w.started,
        || async {
            w.written(&all) == all.len()
                && depth(ctx, &ctx.main_queue_url).await == 0
                && dlq_visible(ctx).await == 0
        },
    )
    .await;
    let drained_at = drained.then(Instant::now);
    // a few more seconds of the picture after the drain
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok((ids, recovery_ids, fixed_at, drained_at))
}

/// Messages visible in the DLQ (the kept ones are hidden): what waits for replay.
async fn dlq_visible(ctx: &Context) -> u64 {
    resq_ops::status::depth(&ctx.sqs, &ctx.dlq_url)
        .await
        .map_or(u64::MAX, |(v, _)| v)
}

/// One sample a second while `sampling` holds.
async fn sample(w: &World<'_>, origin: Instant, sampling: &AtomicBool) -> Vec<Sample> {
    let (ctx, state) = (w.ctx, w.state);
    let mut out = Vec::new();
    let mut last_replays = (
        Instant::now(),
        w.proxy.stats.replays.load(Ordering::Relaxed),
    );
    while sampling.load(Ordering::SeqCst) {
        let tick = Instant::now();
        let (main, dlq, paused) = tokio::join!(
            depth(ctx, &ctx.main_queue_url),
            depth(ctx, &ctx.dlq_url),
            w.mapping.paused()
        );
        let replays = w.proxy.stats.replays.load(Ordering::Relaxed);
        let span = last_replays.0.elapsed().as_secs_f64().max(0.001);
        let rate = (replays - last_replays.1) as f64 / span;
        last_replays = (Instant::now(), replays);
        let kept = state.kept_in_flight.load(Ordering::Relaxed);
        out.push(Sample {
            at: outage::seconds_between(origin, tick),
            main_queue: main,
            dlq: dlq.saturating_sub(kept),
            alarm: lock(&state.downstream_alarm)
                .last()
                .map(|(_, s)| s.as_str().to_owned()),
            consumer_paused: paused,
            replay_rate: rate,
        });
        tokio::time::sleep_until((tick + Duration::from_secs(1)).into()).await;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq_redriver::StopReason;

    fn run(redriven: u64, stopped_by: StopReason, rates: Option<(f64, f64)>) -> RunRecord {
        RunRecord {
            started: Instant::now(),
            redriven,
            paused: false,
            probe: false,
            stopped_by,
            achieved: rates.map(|r| r.0),
            paced: rates.map(|r| r.1),
            ramped_to: None,
        }
    }

    #[test]
    fn a_full_run_replayed_until_its_deadline_and_is_measured_against_its_own_pace() {
        // GIVEN a run that climbed (paced at a mean of 40/s) and achieved 39/s
        let climbed = run(700, StopReason::Deadline, Some((39.0, 40.0)));
        let full = climbed.full().unwrap();
        // THEN its error is against its paced rate, not the base
        assert!(
            (full.error_pct() + 2.5).abs() < 1e-9,
            "{}",
            full.error_pct()
        );
        // AND a run that emptied the DLQ, a paused one, a probe, one that replayed nothing
        // are not full
        assert_eq!(run(50, StopReason::Empty, Some((10.0, 10.0))).full(), None);
        let mut paused = run(0, StopReason::Deadline, None);
        paused.paused = true;
        assert_eq!(paused.full(), None);
        let mut probe = run(6, StopReason::Deadline, Some((10.0, 10.0)));
        probe.probe = true;
        assert_eq!(probe.full(), None);
        assert_eq!(run(0, StopReason::Deadline, None).full(), None);
    }

    #[test]
    fn the_line_reports_the_full_run_furthest_from_its_pace_and_each_missed_goal() {
        let mut r = SoakReport {
            runs: 10,
            replayed: 100,
            probes: 5,
            starved: 0,
            max_replays: 1,
            paused_runs: 3,
            resumed: true,
            archived_while_paused: 5,
            crash_orders: 10,
            consumer_errors_fired: true,
            crash_consumer_paused: true,
            crash_paused_runs: 2,
            unrun_archived: 0,
            full_runs: vec![
                FullRun {
                    achieved: 9.8,
                    paced: 10.0,
                    ramped_to: None,
                },
                FullRun {
                    achieved: 41.0,
                    paced: 40.0,
                    ramped_to: Some(57.5),
                },
            ],
            rate_per_second: 10,
            downstream_fired: true,
            downstream_cleared: true,
            alarm_states: Vec::new(),
            consumer_paused: true,
            outage_orders: 200,
            outage_dead_lettered: 6,
            outage_attempts: 250,
            outage: Duration::from_secs(100),
            recovery: Some(Duration::from_secs(60)),
            aged_out: 0,
            timeline: Timeline::default(),
            profile: None,
            metrics_forwarded: 1,
            function_errors: 0,
            audit: Audit::default(),
            settled: true,
            elapsed: Duration::from_secs(1),
        };
        assert_eq!(r.failures(), Vec::<String>::new());
        let line = r.summary_line();
        for field in [
            "drain_rate_error_pct=2.5",
            "resumed=yes",
            "consumer_paused=yes",
            "outage_dead_lettered_pct=3.0",
            "outage_attempts_per_order=1.25",
            "recovery_ratio=0.60",
            "aged_out=0",
            "lost=0",
        ] {
            assert!(line.contains(field), "{field}: {line}");
        }
        // WHEN every outage goal is missed
        (r.consumer_paused, r.outage_dead_lettered, r.outage_attempts) = (false, 30, 400);
        (r.recovery, r.aged_out) = (Some(Duration::from_secs(150)), 2);
        // THEN each is reported
        let failures = r.failures().join("\n");
        for said in [
            "not paused during the outage",
            "15.0 %",
            "2.00 order writes",
            "1.50 times",
            "past its retention",
        ] {
            assert!(failures.contains(said), "{said}: {failures}");
        }
        r.recovery = None;
        assert!(r.failures().join("\n").contains("at the time limit"));
        r.full_runs.clear();
        assert!(r.failures().join("\n").contains("not measured"));
    }
}
