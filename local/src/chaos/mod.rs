//! `resq chaos`: the local pipeline with faults injected, then an audit of every order.
//!
//! The real `consumer` and `redriver` binaries run as child processes behind a Lambda runtime
//! API ([`runtime`]); this process plays Lambda's SQS poller and the EventBridge schedule. Both
//! functions reach the emulator only through a fault proxy ([`faults`]) that throttles, fails
//! or loses the answer to a share of their SQS and S3 calls and plays the orders' flaky
//! downstream. The SDK's own retries are off (`AWS_MAX_ATTEMPTS=1` by default) so every fault
//! reaches resq's code. Both processes are SIGKILLed at random moments mid-invocation. At the
//! end every order id is looked for: its order record (every stored version counts as one
//! effect write), the archive, both queues.

pub mod faults;
pub mod runtime;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use resq_redriver::config::PermanentAction;
use tokio::sync::watch;

use crate::demo::{self, Audit, DemoOptions, Downstream, Plan};
use crate::driver::{
    Ended, EventSourceMapping, FirstRun, Invoked, MappingHooks, Schedule, ScheduleHooks, Settled,
};
use crate::emulator::{Emulator, REGION};
use crate::pipeline::read_summary;
use crate::stack::{StackOutputs, deploy_stack};
use crate::{CliError, lock};
use faults::{FaultProxy, FaultStats};
use resq_ops::context::Context;
use runtime::Function;

/// What a chaos run does.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// Orders, their mix, the emulator, the template, the time limit and the seed.
    pub demo: DemoOptions,
    /// A flaky order fails 1 to this many times before its write goes through.
    pub max_flaky_failures: u32,
    /// % of the functions' SQS and S3 calls that fail.
    pub fault_pct: f64,
    /// Kill the consumer mid-batch at least this many times.
    pub consumer_kills: u32,
    /// Kill the redriver mid-run at least this many times.
    pub redriver_kills: u32,
    /// The `consumer` binary.
    pub consumer_bin: PathBuf,
    /// The `redriver` binary.
    pub redriver_bin: PathBuf,
    /// Where the functions' logs go (`consumer.log`, `redriver.log`).
    pub log_dir: PathBuf,
    /// `AWS_MAX_ATTEMPTS` for the functions (1: no SDK retries, every fault reaches resq).
    pub sdk_attempts: u32,
    /// The redriver's `PERMANENT_ACTION`.
    pub permanent_action: PermanentAction,
}

/// The redrive cap the run deploys with.
pub const MAX_REDRIVE_ATTEMPTS: u32 = resq::config::DEFAULT_MAX_REDRIVE_ATTEMPTS;
/// `maxReceiveCount` the run deploys with.
pub const MAX_RECEIVE_COUNT: u32 = 3;
const CONSUMER_TIMEOUT: Duration = Duration::from_secs(5);
const REDRIVER_TIMEOUT: Duration = Duration::from_secs(10);
const REDRIVE_EVERY: Duration = Duration::from_secs(3);
const QUEUE_DEPTH: u64 = 100;
/// The functions' access key ids (the emulator takes any): the proxy's record of each call
/// names the function that made it.
const CONSUMER_KEY: &str = "chaos-consumer";
const REDRIVER_KEY: &str = "chaos-redriver";

/// What happened, and where every order ended.
#[derive(Debug, Clone)]
pub struct ChaosReport {
    /// Where each order ended (order records, archive, queues).
    pub audit: Audit,
    /// Order writes beyond the first, as the proxy saw them succeed.
    pub duplicate_writes_seen: usize,
    /// The highest `x-redrive-count` of any copy sent, as the proxy saw it.
    pub max_redrive_sent: u32,
    /// Consumer processes killed mid-batch.
    pub consumer_kills: u32,
    /// Redriver processes killed mid-run.
    pub redriver_kills: u32,
    /// Random faults injected into SQS and S3 calls.
    pub injected_faults: u64,
    /// Of those, calls that took effect but were reported failed.
    pub lost_responses: u64,
    /// Order writes failed on purpose (flaky and doomed orders).
    pub downstream_failures: u64,
    /// Requests through the proxy.
    pub requests: u64,
    /// Consumer invocations, function errors, timeouts.
    pub consumer_invocations: u64,
    /// Redriver runs that answered.
    pub redrive_runs: u64,
    /// Dead letters without a reason the redriver saw over the run (the sum of its answered
    /// runs' `unexplained`: each counted once, by the run that saw it first).
    pub unexplained_seen: u64,
    /// Function errors and timeouts (either function).
    pub function_errors: u64,
    /// Every (IAM action, resource) each function's calls needed, by function (`consumer`,
    /// `redriver`), resources named by the template's logical ids (`OrdersQueue`,
    /// `ArchiveBucket/orders/o-1.json`), as `resq::iam::Permission::allows` takes them.
    pub calls: BTreeMap<&'static str, BTreeSet<(String, String)>>,
    /// Whether the pipeline settled before the time limit.
    pub settled: bool,
    /// Wall time.
    pub elapsed: Duration,
}

impl ChaosReport {
    /// Doubled effects: the larger of what the bucket's versions and the proxy show.
    pub fn duplicate_effects(&self) -> usize {
        self.audit.duplicate_effects.max(self.duplicate_writes_seen)
    }

    /// The highest redrive count seen anywhere.
    pub fn max_redrives(&self) -> u32 {
        self.audit.max_redrives.max(self.max_redrive_sent)
    }

    /// The calls a function made that its role (the permissions listed next to its code) does
    /// not grant.
    pub fn ungranted(&self) -> Vec<(&'static str, (String, String))> {
        self.calls
            .iter()
            .flat_map(|(f, calls)| {
                // (a call by anyone else is nobody's to make)
                let (role, _) = role_of(f);
                calls
                    .iter()
                    .filter(move |(a, r)| !role.iter().any(|p| p.allows(a, r)))
                    .map(move |c| (*f, c.clone()))
            })
            .collect()
    }

    /// The permissions `function`'s own code lists (not what Lambda does for it) that none of
    /// its calls in this run needed.
    pub fn unexercised(&self, function: &str) -> Vec<resq::iam::Permission> {
        let (role, lambda) = role_of(function);
        let calls = self.calls.get(function);
        role.into_iter()
            .filter(|p| !lambda.contains(p))
            .filter(|p| !calls.is_some_and(|c| c.iter().any(|(a, r)| p.allows(a, r))))
            .collect()
    }

    /// The run's last line. `unexplained` is [`Audit::unexplained`]: the messages left in the
    /// DLQ without `x-failure-class`, and the redriver's `INVOCATION_FAILED` copies of such.
    pub fn summary_line(&self) -> String {
        format!(
            "chaos: orders={} processed={} archived={} in_queues={} lost={} duplicate_effects={} max_redrives={} kills={} injected_faults={}{} unexplained={}",
            self.audit.sent,
            self.audit.processed,
            self.audit.archived,
            self.audit.in_queues,
            self.audit.lost.len(),
            self.duplicate_effects(),
            self.max_redrives(),
            self.consumer_kills + self.redriver_kills,
            self.injected_faults,
            self.audit
                .emulator
                .map(|e| format!(" emulator={e}"))
                .unwrap_or_default(),
            self.audit.unexplained(),
        )
    }

    /// What the run did, for the lines above the summary.
    pub fn details(&self) -> String {
        format!(
            "{} s, {}settled. Consumer: {} invocations, {} killed mid-batch. Redriver: {} runs answered, {} killed mid-run. Function errors and timeouts: {}.\nProxy: {} requests, {} faults injected ({} of them took effect with the answer lost), {} downstream failures (flaky and doomed orders).\nEffects: {} doubled by object versions, {} by writes seen. Highest redrive count: {} archived or queued, {} sent.\nDead letters without a reason: {} seen by the redriver's answered runs, {} left in the DLQ. Left in the DLQ by class/reason: {}.",
            self.elapsed.as_secs(),
            if self.settled { "" } else { "NOT " },
            self.consumer_invocations,
            self.consumer_kills,
            self.redrive_runs,
            self.redriver_kills,
            self.function_errors,
            self.requests,
            self.injected_faults,
            self.lost_responses,
            self.downstream_failures,
            self.audit.duplicate_effects,
            self.duplicate_writes_seen,
            self.audit.max_redrives,
            self.max_redrive_sent,
            self.unexplained_seen,
            self.audit.unexplained(),
            self.audit.dlq_reasons(),
        )
    }

    /// Every broken promise, in words (empty: the run passed).
    pub fn failures(&self, opts: &ChaosOptions) -> Vec<String> {
        let mut out: Vec<String> = self.audit.lost_orders().into_iter().collect();
        if self.duplicate_effects() > 0 {
            out.push(format!(
                "{} order effects doubled",
                self.duplicate_effects()
            ));
        }
        if self.max_redrives() > MAX_REDRIVE_ATTEMPTS {
            out.push(format!(
                "a message was redriven {} times (cap {MAX_REDRIVE_ATTEMPTS})",
                self.max_redrives()
            ));
        }
        for (function, call) in self.ungranted() {
            out.push(format!(
                "{function} called {} on {}, which its role does not grant (resq_consumer::permissions, resq_redriver::permissions)",
                call.0, call.1
            ));
        }
        if self.audit.sent < opts.demo.orders {
            out.push(format!(
                "only {} of {} orders were sent",
                self.audit.sent, opts.demo.orders
            ));
        }
        if self.consumer_kills < opts.consumer_kills || self.redriver_kills < opts.redriver_kills {
            out.push(format!(
                "kills: consumer {}/{}, redriver {}/{}: the run ended before it had killed enough",
                self.consumer_kills, opts.consumer_kills, self.redriver_kills, opts.redriver_kills
            ));
        }
        out
    }
}

/// Counters the three loops share.
#[derive(Default)]
struct State {
    sent: AtomicUsize,
    consumer_kills: AtomicU64,
    redriver_kills: AtomicU64,
    consumer_invocations: AtomicU64,
    processed: AtomicU64,
    redrive_runs: AtomicU64,
    redriven: AtomicU64,
    unexplained_seen: AtomicU64,
    archived_by_redriver: AtomicU64,
    function_errors: AtomicU64,
    /// What the latest redriver run that answered moved (`u64::MAX`: none yet, or it died).
    last_run_moved: AtomicU64,
    /// Redriver runs started.
    runs_started: AtomicU64,
    /// When the redriver was last killed: what it had received stays hidden in the DLQ for
    /// its visibility timeout.
    last_redriver_kill: Mutex<Option<Instant>>,
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Runs the chaos run and reports; the emulator and the functions stop when this returns.
pub async fn run(opts: &ChaosOptions) -> Result<ChaosReport, CliError> {
    let started = Instant::now();
    let template = std::fs::read_to_string(&opts.demo.template).map_err(|e| {
        CliError::Usage(format!(
            "cannot read the translated template {}: {e} (make chaos translates it first)",
            opts.demo.template.display()
        ))
    })?;
    std::fs::create_dir_all(&opts.log_dir)
        .map_err(|e| CliError::Usage(format!("cannot create {}: {e}", opts.log_dir.display())))?;
    println!("starting {} …", opts.demo.emulator);
    let emulator = Emulator::start(opts.demo.emulator, &opts.demo.installs)?;
    let config = emulator.sdk_config().await;
    let outputs = deploy_stack(
        opts.demo.emulator,
        &config,
        &template,
        "resq-chaos",
        &[
            ("MaxReceiveCount", &MAX_RECEIVE_COUNT.to_string()),
            ("MaxRedriveAttempts", &MAX_REDRIVE_ATTEMPTS.to_string()),
            ("ConsumerTimeout", &CONSUMER_TIMEOUT.as_secs().to_string()),
        ],
    )
    .await?;
    let ctx = outputs.context(&config);
    ensure_versioned(&ctx).await?;

    let mut rng = StdRng::seed_from_u64(opts.demo.seed);
    let planned = demo::plan_orders(&opts.demo, opts.max_flaky_failures, &mut rng);
    let plans: HashMap<String, Plan> = planned
        .iter()
        .map(|(o, p, _)| (o.order_id.clone(), *p))
        .collect();
    let downstream = Downstream::of(&planned);
    let upstream = emulator
        .endpoint()
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| CliError::Usage(format!("emulator address {}: {e}", emulator.endpoint())))?;
    let proxy = FaultProxy::start(
        upstream,
        opts.fault_pct / 100.0,
        downstream,
        opts.demo.seed ^ 0x5eed,
    )?;
    println!(
        "{} on {}, fault proxy on {} ({}% of calls fail), stack resq-chaos: {} → {}",
        opts.demo.emulator,
        emulator.endpoint(),
        proxy.endpoint,
        opts.fault_pct,
        outputs.main_queue_url,
        outputs.dlq_url
    );

    let mut env = function_env(
        opts.sdk_attempts,
        opts.permanent_action,
        &outputs,
        &proxy.endpoint,
    );
    // their service and namespace as the template sets them (the README's query filters on
    // the service)
    let template_json: serde_json::Value = serde_json::from_str(&template)
        .map_err(|e| CliError::Usage(format!("the translated template is not JSON: {e}")))?;
    let named = crate::stack::telemetry_env(
        &template_json,
        &crate::stack::Resolver::new(&template_json, "resq-chaos", &[]),
    )?;
    env.consumer.extend(named.iter().cloned());
    env.redriver.extend(named);
    let consumer = Function::new(
        "consumer",
        &opts.consumer_bin,
        env.consumer,
        &opts.log_dir.join("consumer.log"),
        CONSUMER_TIMEOUT,
    )?;
    let redriver = Function::new(
        "redriver",
        &opts.redriver_bin,
        env.redriver,
        &opts.log_dir.join("redriver.log"),
        REDRIVER_TIMEOUT,
    )?;

    let state = State {
        last_run_moved: AtomicU64::new(u64::MAX),
        ..Default::default()
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let (consumer_result, redriver_result, settled) = tokio::join!(
        event_source_mapping(
            consumer,
            &ctx,
            &outputs,
            &state,
            opts,
            stop_rx.clone(),
            opts.demo.seed ^ 1
        ),
        schedule(redriver, &state, opts, stop_rx, opts.demo.seed ^ 2),
        drive(&ctx, &planned, &state, &proxy.stats, opts, stop_tx),
    );
    consumer_result?;
    redriver_result?;
    let settled = settled?;
    println!("pipeline stopped; waiting for messages in flight to come back …");
    // kept permanent failures stay hidden until their TTL: made visible as an operator would
    resq_ops::dlq::unhide_kept(&ctx, None).await?;
    wait_until_nothing_in_flight(&ctx, REDRIVER_TIMEOUT + Duration::from_secs(35)).await;
    println!("auditing every order …");
    let mut audit = demo::audit(&ctx, &plans, state.sent.load(Ordering::Relaxed)).await?;
    audit.emulator = Some(opts.demo.emulator);
    let stats = &proxy.stats;
    let duplicate_writes_seen = lock(&stats.order_writes)
        .values()
        .map(|n| n.saturating_sub(1) as usize)
        .sum();
    let max_redrive_sent = lock(&stats.redrive_counts)
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    let calls = calls_by_function(&lock(&stats.calls), &outputs);
    drop(emulator);
    Ok(ChaosReport {
        calls,
        audit,
        duplicate_writes_seen,
        max_redrive_sent,
        consumer_kills: get(&state.consumer_kills) as u32,
        redriver_kills: get(&state.redriver_kills) as u32,
        injected_faults: FaultStats::get(&stats.injected),
        lost_responses: FaultStats::get(&stats.lost_responses),
        downstream_failures: FaultStats::get(&stats.downstream_failures),
        requests: FaultStats::get(&stats.requests),
        consumer_invocations: get(&state.consumer_invocations),
        redrive_runs: get(&state.redrive_runs),
        unexplained_seen: get(&state.unexplained_seen),
        function_errors: get(&state.function_errors),
        settled,
        elapsed: started.elapsed(),
    })
}

/// What `function`'s role grants (the permissions listed next to its code), and the part of it
/// Lambda itself uses (nothing for anyone else).
fn role_of(function: &str) -> (Vec<resq::iam::Permission>, &'static [resq::iam::Permission]) {
    match function {
        "consumer" => (
            resq_consumer::permissions(),
            resq_consumer::lambda::PERMISSIONS,
        ),
        "redriver" => (
            resq_redriver::permissions(),
            resq_redriver::LAMBDA_PERMISSIONS,
        ),
        _ => (Vec::new(), &[]),
    }
}

/// The proxy's record of calls, by function, resources named as in the template.
fn calls_by_function(
    seen: &BTreeSet<(String, String, String)>,
    outputs: &StackOutputs,
) -> BTreeMap<&'static str, BTreeSet<(String, String)>> {
    let mut out: BTreeMap<&'static str, BTreeSet<(String, String)>> = BTreeMap::new();
    for (key, action, resource) in seen {
        let function = match key.as_str() {
            CONSUMER_KEY => "consumer",
            REDRIVER_KEY => "redriver",
            _ => "unknown",
        };
        let resource = if *resource == outputs.main_queue_url {
            "OrdersQueue".to_owned()
        } else if *resource == outputs.dlq_url {
            "DeadLetterQueue".to_owned()
        } else if *resource == outputs.failure_queue_url {
            "RedriverFailureQueue".to_owned()
        } else if let Some(rest) = resource.strip_prefix(outputs.bucket.as_str()) {
            format!("ArchiveBucket{rest}")
        } else {
            resource.clone()
        };
        out.entry(function)
            .or_default()
            .insert((action.clone(), resource));
    }
    out
}

/// The audit counts effect writes by object versions, so the bucket must be versioned. The
/// template versions it, but moto's CloudFormation skips `VersioningConfiguration`: this puts
/// it in place before the first write.
pub async fn ensure_versioned(ctx: &Context) -> Result<(), CliError> {
    use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
    ctx.s3
        .put_bucket_versioning()
        .bucket(&ctx.bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .map_err(|e| CliError::aws("versioning the bucket", e))?;
    Ok(())
}

/// The audit reads the queues: a message in flight (hidden by a function that was stopped or
/// killed) would not be seen, so wait for its visibility timeout to pass.
async fn wait_until_nothing_in_flight(ctx: &Context, at_most: Duration) {
    let until = Instant::now() + at_most;
    while Instant::now() < until {
        let (_, main) = resq_ops::status::depth(&ctx.sqs, &ctx.main_queue_url)
            .await
            .unwrap_or((0, 1));
        let (_, dlq) = resq_ops::status::depth(&ctx.sqs, &ctx.dlq_url)
            .await
            .unwrap_or((0, 1));
        if main + dlq == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

struct FunctionEnv {
    consumer: Vec<(String, String)>,
    redriver: Vec<(String, String)>,
}

/// The functions' environment: their configuration variables (docs/design.md, "Configuration"),
/// the proxy as the SDK's endpoint.
fn function_env(
    sdk_attempts: u32,
    permanent_action: PermanentAction,
    outputs: &StackOutputs,
    endpoint: &str,
) -> FunctionEnv {
    // the demo's settings; the functions' processes get them as Lambda would, in the
    // environment
    let (consumer, redriver) = demo::configs(outputs, permanent_action);
    let aws = [
        ("AWS_ENDPOINT_URL", endpoint.to_owned()),
        ("AWS_REGION", REGION.into()),
        // (per function, below: the proxy tells their calls apart by it)
        ("AWS_SECRET_ACCESS_KEY", "chaos".into()),
        ("AWS_MAX_ATTEMPTS", sdk_attempts.max(1).to_string()),
        ("AWS_LAMBDA_LOG_FORMAT", "JSON".into()),
        // the template's default: the README's Logs Insights query follows an order over
        // these lines (tests/e2e/chaos.rs)
        ("AWS_LAMBDA_LOG_LEVEL", "INFO".into()),
    ];
    let with = |config: Vec<(&'static str, String)>, key: &str| {
        config
            .into_iter()
            .chain(aws.iter().cloned())
            .chain([("AWS_ACCESS_KEY_ID", key.to_owned())])
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    };
    FunctionEnv {
        consumer: with(crate::env::consumer(&consumer), CONSUMER_KEY),
        redriver: with(crate::env::redriver(&redriver), REDRIVER_KEY),
    }
}

/// When to kill: with probability `p`, at a uniform moment within the typical duration.
fn kill_plan(rng: &mut StdRng, p: f64, typical: Duration) -> Option<Duration> {
    (rng.random::<f64>() < p.clamp(0.0, 1.0)).then(|| {
        let ms = typical.as_millis().max(2) as u64;
        Duration::from_millis(rng.random_range(1..ms))
    })
}

/// Chaos's hooks around one function: when to kill it (at random, within how long an
/// invocation typically takes), and what to count. The consumer's spread the kills over the
/// run; the redriver's surely kill once every order is sent and kills are still owed.
struct ChaosHooks<'a> {
    state: &'a State,
    opts: &'a ChaosOptions,
    rng: StdRng,
    /// How long an answered invocation typically takes (the kills fall within it).
    typical: Duration,
}

impl<'a> ChaosHooks<'a> {
    fn new(state: &'a State, opts: &'a ChaosOptions, seed: u64, typical: Duration) -> Self {
        Self {
            state,
            opts,
            rng: StdRng::seed_from_u64(seed),
            typical,
        }
    }
}

impl<F> MappingHooks<F> for ChaosHooks<'_> {
    fn invoking(&mut self) -> Option<Duration> {
        // spread the kills over the run: the fewer orders left to send, the likelier
        let (state, wanted) = (self.state, u64::from(self.opts.consumer_kills));
        let kills = get(&state.consumer_kills);
        let left = self
            .opts
            .demo
            .orders
            .saturating_sub(state.sent.load(Ordering::Relaxed));
        let p = if kills >= wanted {
            0.0
        } else {
            2.0 * (wanted - kills) as f64 / (left as f64 / 10.0).max(1.0)
        };
        let kill_after = kill_plan(&mut self.rng, p, self.typical);
        state.consumer_invocations.fetch_add(1, Ordering::Relaxed);
        kill_after
    }

    fn answered(&mut self, _: &F, invoked: Invoked<'_>) {
        let state = self.state;
        if invoked.settled.answered() {
            self.typical = (self.typical * 3 + invoked.took) / 4;
        }
        match invoked.settled {
            Settled::Deleted(failed) => {
                let done = (invoked.batch.len() - failed.len()) as u64;
                state.processed.fetch_add(done, Ordering::Relaxed);
            }
            Settled::BatchFailed(e) => {
                state.function_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "the consumer's answer");
            }
            Settled::Killed => {
                state.consumer_kills.fetch_add(1, Ordering::Relaxed);
            }
            Settled::Error(body) => state.function_failed("consumer", Some(&body)),
            Settled::TimedOut => state.function_failed("consumer", None),
        }
    }
}

/// Lambda's SQS poller in front of the consumer process, with kills.
async fn event_source_mapping(
    mut consumer: Function,
    ctx: &Context,
    outputs: &StackOutputs,
    state: &State,
    opts: &ChaosOptions,
    stop: watch::Receiver<bool>,
    seed: u64,
) -> Result<(), CliError> {
    let mapping = EventSourceMapping {
        sqs: &ctx.sqs,
        queue_url: &outputs.main_queue_url,
        queue_arn: &outputs.main_queue_arn,
        batch_size: 10,
        batching_window: Duration::from_millis(300),
        switch: None,
    };
    let mut hooks = ChaosHooks::new(state, opts, seed, Duration::from_millis(200));
    mapping.run(&mut consumer, &mut hooks, stop).await
}

impl<F> ScheduleHooks<F> for ChaosHooks<'_> {
    fn invoking(&mut self) -> Option<Duration> {
        let state = self.state;
        state.runs_started.fetch_add(1, Ordering::Relaxed);
        let kills = get(&state.redriver_kills);
        let all_sent = state.sent.load(Ordering::Relaxed) >= self.opts.demo.orders;
        let p = match kills >= u64::from(self.opts.redriver_kills) {
            true => 0.0,
            false if all_sent => 1.0,
            false => 0.25,
        };
        kill_plan(&mut self.rng, p, self.typical)
    }

    fn answered(&mut self, _: &F, ended: Ended, took: Duration) {
        let state = self.state;
        // whatever did not end in a summary leaves the DLQ's state unknown
        let mut moved = u64::MAX;
        match ended {
            Ended::Response(body) => {
                self.typical = (self.typical * 3 + took) / 4;
                match read_summary(&body) {
                    Ok(summary) => moved = state.count_run(&summary),
                    // a response that is not a run's summary: counted as a function error
                    Err(e) => {
                        state.function_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(body, error = %e, "redriver answered something that is not a summary");
                    }
                }
            }
            Ended::Killed => {
                state.redriver_kills.fetch_add(1, Ordering::Relaxed);
                *lock(&state.last_redriver_kill) = Some(Instant::now());
            }
            Ended::Error(body) => state.function_failed("redriver", Some(&body)),
            Ended::TimedOut => state.function_failed("redriver", None),
        }
        state.last_run_moved.store(moved, Ordering::Relaxed);
    }
}

impl State {
    /// Counts a function error (its error document) or, without one, a timeout.
    fn function_failed(&self, function: &str, error: Option<&str>) {
        self.function_errors.fetch_add(1, Ordering::Relaxed);
        match error {
            Some(body) => tracing::error!(body, "{function} invocation failed"),
            None => tracing::error!("{function} invocation timed out"),
        }
    }

    /// Counts a run that answered with its summary; what it moved, as far as it shows the
    /// DLQ settled (`u64::MAX`: it does not).
    fn count_run(&self, summary: &resq_redriver::Summary) -> u64 {
        let (redriven, archived) = (summary.redriven, summary.archived.values().sum());
        self.redrive_runs.fetch_add(1, Ordering::Relaxed);
        self.redriven.fetch_add(redriven, Ordering::Relaxed);
        self.unexplained_seen
            .fetch_add(summary.unexplained, Ordering::Relaxed);
        self.archived_by_redriver
            .fetch_add(archived, Ordering::Relaxed);
        // a run that could not even receive has not shown the DLQ to be settled
        if summary.stopped_by == resq_redriver::StopReason::ReceiveError || summary.failed != 0 {
            u64::MAX
        } else {
            redriven + archived
        }
    }
}

/// The EventBridge schedule in front of the redriver process: one run per period, with kills.
async fn schedule(
    mut redriver: Function,
    state: &State,
    opts: &ChaosOptions,
    stop: watch::Receiver<bool>,
    seed: u64,
) -> Result<(), CliError> {
    let schedule = Schedule {
        every: REDRIVE_EVERY,
        first: FirstRun::AtOnce,
        rule: "resq-chaos-schedule",
    };
    let mut hooks = ChaosHooks::new(state, opts, seed, Duration::from_secs(1));
    schedule.run(&mut redriver, &mut hooks, stop).await
}

/// Feeds the main queue progressively, shows progress, and stops the run once it settled:
/// everything sent, the main queue empty, nothing in flight in the DLQ, the kills done, and
/// two redriver runs since then, the last of which moved nothing.
async fn drive(
    ctx: &Context,
    planned: &[(resq_ops::orders::Outgoing, Plan, u32)],
    state: &State,
    stats: &FaultStats,
    opts: &ChaosOptions,
    stop: watch::Sender<bool>,
) -> Result<bool, CliError> {
    let started = Instant::now();
    let mut quiet_since_runs: Option<u64> = None;
    let mut last_print = Instant::now() - Duration::from_secs(10);
    let result = loop {
        let next = state.sent.load(Ordering::Relaxed);
        let (visible, in_flight) = resq_ops::status::depth(&ctx.sqs, &ctx.main_queue_url)
            .await
            .unwrap_or((u64::MAX / 4, 0));
        let (dlq_visible, dlq_in_flight) = resq_ops::status::depth(&ctx.sqs, &ctx.dlq_url)
            .await
            .unwrap_or((0, u64::MAX / 4));
        if next < planned.len() && visible + in_flight < QUEUE_DEPTH {
            let chunk: Vec<_> = planned[next..(next + 50).min(planned.len())]
                .iter()
                .map(|(o, _, _)| o.clone())
                .collect();
            let report = resq_ops::status::send(ctx, &chunk, demo::order_tag).await?;
            if !report.failed.is_empty() {
                break Err(CliError::Usage(format!(
                    "the emulator refused {} orders",
                    report.failed.len()
                )));
            }
            state.sent.fetch_add(chunk.len(), Ordering::Relaxed);
        }
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            println!(
                "[{:>4}s] sent {}/{}  acknowledged {}  main queue {}+{}  DLQ {}+{}  redriven {}  archived by redriver {}  kills {}+{}  faults {}  function errors {}",
                started.elapsed().as_secs(),
                next,
                planned.len(),
                get(&state.processed),
                visible,
                in_flight,
                dlq_visible,
                dlq_in_flight,
                get(&state.redriven),
                get(&state.archived_by_redriver),
                get(&state.consumer_kills),
                get(&state.redriver_kills),
                FaultStats::get(&stats.injected),
                get(&state.function_errors),
            );
        }
        // the DLQ's in-flight messages are the redriver's own during a run; after a kill they
        // stay hidden for its visibility timeout (the run's time left plus 30 s)
        let kill_hidden = lock(&state.last_redriver_kill)
            .is_some_and(|at| at.elapsed() < REDRIVER_TIMEOUT + Duration::from_secs(32));
        let quiet = next == planned.len()
            && visible + in_flight == 0
            && !kill_hidden
            && get(&state.consumer_kills) >= u64::from(opts.consumer_kills)
            && get(&state.redriver_kills) >= u64::from(opts.redriver_kills);
        let runs = get(&state.runs_started);
        quiet_since_runs = if quiet {
            Some(quiet_since_runs.unwrap_or(runs))
        } else {
            None
        };
        if quiet_since_runs.is_some_and(|at| get(&state.redrive_runs) > 0 && runs >= at + 2)
            && get(&state.last_run_moved) == 0
        {
            break Ok(true);
        }
        if started.elapsed() > opts.demo.max_duration {
            println!(
                "not settled after {}s; stopping and auditing what is there",
                opts.demo.max_duration.as_secs()
            );
            break Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = stop.send(true);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_functions_get_the_runs_settings_as_lambda_would_in_their_environment() {
        let outputs = StackOutputs {
            stack_name: "resq-chaos".into(),
            main_queue_url: "http://127.0.0.1:1/123456789012/resq-chaos-orders".into(),
            main_queue_arn: "arn:aws:sqs:us-east-1:123456789012:resq-chaos-orders".into(),
            dlq_url: "http://127.0.0.1:1/123456789012/resq-chaos-orders-dlq".into(),
            bucket: "resq-chaos-archive".into(),
            failure_queue_url: String::new(),
            consumer_function: "consumer".into(),
            redriver_function: "redriver".into(),
        };
        let env = function_env(1, PermanentAction::Keep, &outputs, "http://127.0.0.1:2");
        let get = |vars: &[(String, String)], k: &str| {
            vars.iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
        };
        for (k, v) in [
            ("MAIN_QUEUE_URL", outputs.main_queue_url.as_str()),
            ("DLQ_URL", outputs.dlq_url.as_str()),
            ("ARCHIVE_BUCKET", "resq-chaos-archive"),
            ("MAX_REDRIVE_ATTEMPTS", "3"),
            ("DEADLINE_MARGIN_MS", "1000"),
            ("CONSUMER_CONCURRENCY", "auto"),
            ("BACKOFF_BASE_SECONDS", "1"),
            ("BACKOFF_MAX_SECONDS", "2"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:2"),
            ("AWS_MAX_ATTEMPTS", "1"),
            ("AWS_LAMBDA_LOG_LEVEL", "INFO"),
        ] {
            assert_eq!(get(&env.consumer, k).as_deref(), Some(v), "consumer {k}");
        }
        for (k, v) in [
            ("REDRIVE_RATE_PER_SECOND", "200"),
            ("MAX_MESSAGES_PER_RUN", "auto"),
            ("KEPT_IN_FLIGHT_MAX", "50000"),
            ("ARCHIVE_AFTER_SECONDS", "86400"),
            ("PERMANENT_ACTION", "keep"),
            ("MAX_REDRIVE_ATTEMPTS", "3"),
        ] {
            assert_eq!(get(&env.redriver, k).as_deref(), Some(v), "redriver {k}");
        }
        // and the functions read them back as the run means them
        let vars = |pairs: Vec<(String, String)>| {
            resq::config::Vars(move |k: &str| {
                pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
            })
        };
        let redriver =
            resq_redriver::config::RedriverConfig::from_vars(&vars(env.redriver)).unwrap();
        assert_eq!(redriver.rate_per_second, 200.0);
        assert!(redriver.pause_on_alarms.is_empty());
        resq_consumer::config::ConsumerConfig::from_vars(&vars(env.consumer)).unwrap();
    }

    #[test]
    fn the_summary_line_keeps_its_fields_and_ends_with_the_unexplained_dead_letters() {
        // GIVEN a run that left in the DLQ two kept permanent failures, one dead letter SQS
        // moved without a reason and one the redriver explained
        let mut audit = Audit {
            sent: 500,
            processed: 480,
            archived: 15,
            in_queues: 5,
            emulator: Some(crate::emulator::EmulatorKind::Moto),
            ..Audit::default()
        };
        for (class, reason) in [
            (Some("permanent"), Some("MALFORMED_JSON")),
            (Some("permanent"), Some("MALFORMED_JSON")),
            (Some("permanent"), Some("VALIDATION_FAILED")),
            (None, None),
            (Some("transient"), Some("INVOCATION_FAILED")),
            (Some("transient"), Some("DEMO_DOWNSTREAM_DOWN")),
        ] {
            audit.dead_letter(class, reason);
        }
        let report = ChaosReport {
            audit,
            duplicate_writes_seen: 0,
            max_redrive_sent: 3,
            consumer_kills: 2,
            redriver_kills: 2,
            injected_faults: 40,
            lost_responses: 3,
            downstream_failures: 9,
            requests: 4000,
            consumer_invocations: 90,
            redrive_runs: 30,
            unexplained_seen: 7,
            function_errors: 0,
            calls: BTreeMap::new(),
            settled: true,
            elapsed: Duration::from_secs(100),
        };
        // THEN the line keeps its fields, in their order, and appends unexplained
        assert_eq!(
            report.summary_line(),
            "chaos: orders=500 processed=480 archived=15 in_queues=5 lost=0 duplicate_effects=0 max_redrives=3 kills=4 injected_faults=40 emulator=moto unexplained=2"
        );
        // AND the details group what is left in the DLQ by class and reason
        assert!(
            report.details().ends_with(
                "Dead letters without a reason: 7 seen by the redriver's answered runs, 2 left in the DLQ. Left in the DLQ by class/reason: (none)/(none) 1, permanent/MALFORMED_JSON 2, permanent/VALIDATION_FAILED 1, transient/DEMO_DOWNSTREAM_DOWN 1, transient/INVOCATION_FAILED 1."
            ),
            "{}",
            report.details()
        );
    }

    #[test]
    fn kills_fall_within_the_typical_duration_and_follow_the_odds() {
        let mut rng = StdRng::seed_from_u64(7);
        let typical = Duration::from_millis(300);
        let plans: Vec<Option<Duration>> = (0..1000)
            .map(|_| kill_plan(&mut rng, 0.2, typical))
            .collect();
        let kills: Vec<Duration> = plans.iter().flatten().copied().collect();
        assert!((150..250).contains(&kills.len()), "{} kills", kills.len());
        assert!(kills.iter().all(|k| *k > Duration::ZERO && *k < typical));
        assert!(kill_plan(&mut rng, 0.0, typical).is_none());
        assert!(kill_plan(&mut rng, 1.0, Duration::ZERO).is_some());
    }
}
