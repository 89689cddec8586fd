//! The live local pipeline (`resq-local up`, `make local`): the stack on the emulator, and
//! what AWS runs around the two functions, as the template sets it:
//!
//! - Lambda's SQS event source mapping in front of the consumer: its batch size, batching
//!   window and maximum concurrency; a batch response deletes what it did not report failed, a
//!   function error deletes nothing;
//! - the EventBridge schedule in front of the redriver (the template's rate, or faster);
//! - Lambda's log pipeline: the functions' EMF lines become CloudWatch metrics, and each
//!   invocation adds `AWS/Lambda` `Invocations`, `Errors` and `Duration`, as Lambda does;
//! - SQS's own minute metrics (`AWS/SQS` depths and the oldest message's age), so the
//!   template's alarms have what they watch (on LocalStack they really change state).
//!
//! Each invocation goes to `cargo lambda watch` when it listens on the watch port (edits are
//! live: watch rebuilds the function), else to the built binary, run by the Lambda runtime API
//! stand-in ([`crate::chaos::runtime`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use crate::CliError;
use crate::chaos::runtime::Function;
use crate::driver::{
    Ended, EventSourceMapping, FirstRun, Invoke, Invoked, MappingHooks, Schedule, ScheduleHooks,
    Settled, next_tick,
};
use crate::emf::MetricForwarder;
use crate::emulator::{Emulator, EmulatorKind, Installs, REGION};
use crate::http::{http_response, post};
use crate::stack::{AroundFunctions, Resolver, StackOutputs, around_functions, deploy_stack};

/// How `up` runs.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Which emulator.
    pub emulator: EmulatorKind,
    /// Where the emulators are installed.
    pub installs: Installs,
    /// The translated template.
    pub template: PathBuf,
    /// The stack's name.
    pub stack_name: String,
    /// Where the functions' environment goes (for `make watch`).
    pub env_file: PathBuf,
    /// Where `cargo lambda watch` listens (`make watch`).
    pub watch_port: u16,
    /// The consumer binary, used while watch is not running.
    pub consumer_bin: PathBuf,
    /// The redriver binary.
    pub redriver_bin: PathBuf,
    /// Where the binaries' logs go.
    pub log_dir: PathBuf,
    /// The redriver's schedule; the template's when `None`.
    pub schedule: Option<Duration>,
    /// How often SQS's metrics are published (SQS: every minute).
    pub metrics_every: Duration,
}

/// Lines in the env file that are for the local tooling, not for the functions.
pub const FUNCTIONS_VAR: &str = "RESQ_LOCAL_FUNCTIONS";

/// Starts the emulator and the stack, writes the env file, and runs the pipeline until
/// `stop` resolves. Prints what happens, one line per invocation.
pub async fn up(
    opts: &UpOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), CliError> {
    let template_json = std::fs::read_to_string(&opts.template).map_err(|e| {
        CliError::Usage(format!(
            "cannot read the translated template {}: {e} (make local translates it first)",
            opts.template.display()
        ))
    })?;
    let template: Value = serde_json::from_str(&template_json)
        .map_err(|e| CliError::Usage(format!("{} is not JSON: {e}", opts.template.display())))?;
    println!("starting {} on 127.0.0.1 …", opts.emulator);
    let started = Instant::now();
    let emulator = Emulator::start(opts.emulator, &opts.installs)?;
    let config = emulator.sdk_config().await;
    println!(
        "{} ready on {} in {:.1} s; deploying stack {} …",
        opts.emulator,
        emulator.endpoint(),
        started.elapsed().as_secs_f64(),
        opts.stack_name
    );
    let outputs = deploy_stack(
        opts.emulator,
        &config,
        &template_json,
        &opts.stack_name,
        &[],
    )
    .await?;
    let ctx = outputs.context(&config);
    let resolver = Resolver::new(&template, &opts.stack_name, &[]).with_outputs(&outputs);
    if opts.emulator == EmulatorKind::Moto {
        // moto's CloudFormation skips the bucket's versioning and the alarms
        crate::chaos::ensure_versioned(&ctx).await?;
        crate::stack::put_alarms(&template, &resolver, &ctx.cloudwatch).await?;
    }
    let around = around_functions(&template, &resolver)?;
    let schedule = opts.schedule.unwrap_or(around.schedule);
    write_env_file(&opts.env_file, emulator.endpoint(), &around, &outputs)?;
    std::fs::create_dir_all(&opts.log_dir)
        .map_err(|e| CliError::Usage(format!("cannot create {}: {e}", opts.log_dir.display())))?;

    let forwarder = MetricForwarder::start(aws_sdk_cloudwatch::Client::new(&config));
    let lambda = |watch_name, function_name: &str, binary: &Path, own_env: &[_], timeout| {
        let mut env = aws_env(emulator.endpoint());
        env.extend(own_env.iter().cloned());
        env.push(("AWS_LAMBDA_LOG_FORMAT".into(), "JSON".into()));
        env.push(("AWS_LAMBDA_LOG_LEVEL".into(), around.log_level.clone()));
        Lambda {
            watch_name,
            function_name: function_name.to_owned(),
            watch_port: opts.watch_port,
            binary: binary.to_owned(),
            env,
            log: opts.log_dir.join(format!("{watch_name}.log")),
            timeout,
            metrics: forwarder.sender(),
        }
    };
    let consumer = lambda(
        "consumer",
        &outputs.consumer_function,
        &opts.consumer_bin,
        &around.consumer_env,
        around.consumer_timeout,
    );
    let redriver = lambda(
        "redriver",
        &outputs.redriver_function,
        &opts.redriver_bin,
        &around.redriver_env,
        around.redriver_timeout,
    );
    print_banner(opts, &emulator, &outputs, &around, schedule);
    if watch_listens(opts.watch_port).await {
        println!(
            "WARNING: cargo lambda watch already listens on 127.0.0.1:{}: it still has the environment of the stack it started with (another endpoint, another bucket). Restart make watch.",
            opts.watch_port
        );
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let invocations = Arc::new(AtomicU64::new(0));
    // watch runs one invocation of a function at a time: pollers take turns there, so no batch
    // waits in its queue (with its visibility timeout running) behind a rebuild
    let watch_turn = Arc::new(tokio::sync::Mutex::new(()));
    // moto's SQS is not safe under concurrent receives of one queue (now and then a 500 with
    // the messages already hidden, or one message handed out twice): one poller there
    let concurrency = match emulator.kind() {
        EmulatorKind::Moto => 1,
        EmulatorKind::Localstack => around.max_concurrency.max(1),
    };
    let pollers = (0..concurrency).map(|_| {
        event_source_mapping(
            consumer.clone(),
            &ctx,
            &outputs,
            &around,
            stop_rx.clone(),
            invocations.clone(),
            watch_turn.clone(),
        )
    });
    let run = async {
        tokio::join!(
            futures::future::join_all(pollers),
            scheduler(redriver, schedule, stop_rx.clone()),
            sqs_metrics(
                &emulator,
                &ctx,
                &outputs,
                opts.metrics_every,
                stop_rx.clone()
            ),
        )
    };
    {
        tokio::pin!(run);
        tokio::select! {
            _ = &mut run => {}
            () = emulator_gone(emulator.endpoint()) => {
                println!("the emulator at {} stopped answering; stopping", emulator.endpoint());
                let _ = stop_tx.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(3), &mut run).await;
            }
            () = stop => {
                let _ = stop_tx.send(true);
                // the pipeline finishes what it is doing (an invocation, a receive), briefly
                let _ = tokio::time::timeout(Duration::from_secs(3), &mut run).await;
            }
        }
    }
    let _ = std::fs::remove_file(&opts.env_file);
    println!(
        "stopped after {} consumer invocations; the emulator and its state are gone",
        invocations.load(Ordering::Relaxed)
    );
    drop(forwarder);
    drop(emulator);
    Ok(())
}

/// Returns once the emulator has refused three connections in a row, two seconds apart.
async fn emulator_gone(endpoint: &str) {
    let addr = endpoint.trim_start_matches("http://").to_owned();
    let mut refused = 0;
    while refused < 3 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let up = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(addr.as_str()),
        )
        .await
        .is_ok_and(|c| c.is_ok());
        refused = if up { 0 } else { refused + 1 };
    }
}

fn aws_env(endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_REGION", REGION),
        ("AWS_DEFAULT_REGION", REGION),
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The env file `make watch` hands `cargo lambda watch`: the emulator, both functions'
/// variables as the template sets them, readable text logs, and which stack function each
/// watched binary stands for (the log forwarder names the metrics after them).
pub fn env_file_text(endpoint: &str, around: &AroundFunctions, outputs: &StackOutputs) -> String {
    let mut vars = aws_env(endpoint);
    for (k, v) in around.consumer_env.iter().chain(&around.redriver_env) {
        if !vars.iter().any(|(have, _)| have == k) {
            vars.push((k.clone(), v.clone()));
        }
    }
    vars.push(("AWS_LAMBDA_LOG_FORMAT".into(), "Text".into()));
    vars.push((
        FUNCTIONS_VAR.into(),
        format!(
            "consumer={},redriver={}",
            outputs.consumer_function, outputs.redriver_function
        ),
    ));
    vars.iter().map(|(k, v)| env_line(k, v)).collect()
}

/// `KEY='value'`: single quotes read the same in a shell (`set -a; . FILE`) and in
/// `cargo lambda watch --env-file` (unquoted, `=` or `(` break its parser). A quote in a value
/// cannot be written so; it is dropped (no value resq writes has one).
fn env_line(key: &str, value: &str) -> String {
    format!("{key}='{}'\n", value.replace('\'', ""))
}

/// A variable's value in an env file [`env_file_text`] wrote.
pub fn env_file_var(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let v = l.strip_prefix(name)?.strip_prefix('=')?;
        Some(v.trim_matches('\'').to_owned())
    })
}

fn write_env_file(
    path: &std::path::Path,
    endpoint: &str,
    around: &AroundFunctions,
    outputs: &StackOutputs,
) -> Result<(), CliError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, env_file_text(endpoint, around, outputs))
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))
}

fn print_banner(
    opts: &UpOptions,
    emulator: &Emulator,
    o: &StackOutputs,
    a: &AroundFunctions,
    schedule: Duration,
) {
    println!(
        "stack {} on {} ({}):\n  main queue     {}\n  DLQ            {}\n  archive bucket {}",
        o.stack_name,
        emulator.endpoint(),
        emulator.kind(),
        o.main_queue_url,
        o.dlq_url,
        o.bucket
    );
    println!(
        "event source mapping: batches of up to {} records, {} s window, {} concurrent{}; consumer timeout {} s",
        a.batch_size,
        a.batching_window.as_secs_f64(),
        a.max_concurrency,
        if emulator.kind() == EmulatorKind::Moto {
            " (1 on moto)"
        } else {
            ""
        },
        a.consumer_timeout.as_secs()
    );
    println!(
        "schedule: the redriver every {} s; SQS metrics every {} s",
        schedule.as_secs(),
        opts.metrics_every.as_secs()
    );
    println!(
        "functions: through `cargo lambda watch` on 127.0.0.1:{} while it runs (make watch: edits are live), else {} and {} (logs in {})",
        opts.watch_port,
        opts.consumer_bin.display(),
        opts.redriver_bin.display(),
        opts.log_dir.display()
    );
    println!(
        "environment for make watch and for resq: {}\n  e.g.  set -a; . {}; set +a; resq send --count 20 --malformed-pct 10; resq status",
        opts.env_file.display(),
        opts.env_file.display()
    );
    if emulator.kind() == EmulatorKind::Moto {
        println!(
            "  (moto never evaluates an alarm: they stay OK. EMULATOR=localstack make local for alarms that change state)"
        );
    }
    println!("Ctrl-C stops everything");
}

/// Where an invocation ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `cargo lambda watch`.
    Watch,
    /// The built binary.
    Binary,
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Watch => "watch",
            Self::Binary => "binary",
        })
    }
}

/// One function, invoked through watch when it listens, else as its binary.
#[derive(Clone)]
struct Lambda {
    watch_name: &'static str,
    function_name: String,
    watch_port: u16,
    binary: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    timeout: Duration,
    metrics: mpsc::UnboundedSender<Value>,
}

/// An invoker of one [`Lambda`]; holds the binary's process while watch is away.
struct Invoker {
    lambda: Lambda,
    process: Option<Function>,
    /// Where the latest invocation ran.
    via: Via,
}

impl Invoker {
    fn new(lambda: Lambda) -> Self {
        Self {
            lambda,
            process: None,
            via: Via::Binary,
        }
    }

    /// Invokes the built binary, started the first time (and again after watch went away);
    /// `Err` when there is no binary to start (no invocation happened).
    async fn invoke_binary(
        &mut self,
        event: &str,
        kill_after: Option<Duration>,
    ) -> Result<Ended, CliError> {
        let l = &self.lambda;
        let process = match self.process.take() {
            Some(p) => p,
            None => Function::new(l.watch_name, &l.binary, l.env.clone(), &l.log, l.timeout)?
                .with_function_name(&l.function_name)
                .forward_metrics(l.metrics.clone()),
        };
        let process = self.process.insert(process);
        Ok(process
            .invoke(event, kill_after)
            .await
            .unwrap_or_else(|e| Ended::Error(e.to_string())))
    }
}

/// Invokes through watch when it listens (no kill there: watch runs the function), else the
/// binary; either way a failure to run it is the invocation's error, and Lambda's own metrics
/// for the invocation are published.
impl Invoke for Invoker {
    async fn invoke(
        &mut self,
        event: &str,
        kill_after: Option<Duration>,
    ) -> Result<Ended, CliError> {
        let started = Instant::now();
        self.via = if watch_listens(self.lambda.watch_port).await {
            Via::Watch
        } else {
            Via::Binary
        };
        let ended = match self.via {
            Via::Watch => {
                if let Some(mut p) = self.process.take() {
                    p.kill().await; // watch took over
                }
                let l = &self.lambda;
                invoke_watch(l.watch_port, l.watch_name, event)
                    .await
                    .unwrap_or_else(Ended::Error)
            }
            Via::Binary => match self.invoke_binary(event, kill_after).await {
                Ok(ended) => ended,
                // not an invocation: Lambda counts none
                Err(e) => return Ok(Ended::Error(e.to_string())),
            },
        };
        let _ = self.lambda.metrics.send(lambda_metrics(
            &self.lambda.function_name,
            !matches!(ended, Ended::Response(_)),
            started.elapsed(),
        ));
        Ok(ended)
    }

    async fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill().await;
        }
    }
}

/// The metrics Lambda publishes for one invocation (`AWS/Lambda`), as an EMF document.
pub fn lambda_metrics(function_name: &str, error: bool, took: Duration) -> Value {
    json!({
        "_aws": {
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": "AWS/Lambda",
                "Dimensions": [["FunctionName"]],
                "Metrics": [
                    {"Name": "Invocations", "Unit": "Count"},
                    {"Name": "Errors", "Unit": "Count"},
                    {"Name": "Duration", "Unit": "Milliseconds"}
                ]
            }]
        },
        "FunctionName": function_name,
        "Invocations": 1,
        "Errors": u8::from(error),
        "Duration": took.as_secs_f64() * 1000.0,
    })
}

async fn watch_listens(port: u16) -> bool {
    tokio::time::timeout(
        Duration::from_millis(300),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    .is_ok_and(|c| c.is_ok())
}

/// Lambda's `Invoke` against `cargo lambda watch`: 200 with the function's response, a
/// function error as an error document (watch answers 500), anything else an error. The
/// first invocation after an edit waits for watch to rebuild the function.
async fn invoke_watch(port: u16, function: &str, event: &str) -> Result<Ended, String> {
    let addr = format!("127.0.0.1:{port}");
    let path = format!("/2015-03-31/functions/{function}/invocations");
    let io = post(&addr, &path, "Content-Type: application/json\r\n", event);
    // a rebuild can take minutes on a cold target directory
    let raw = tokio::time::timeout(Duration::from_secs(900), io)
        .await
        .map_err(|_| "cargo lambda watch did not answer within 15 minutes".to_owned())?
        .map_err(|e| format!("cargo lambda watch on 127.0.0.1:{port}: {e}"))?;
    let (status, body) =
        http_response(&raw).ok_or_else(|| "cargo lambda watch sent no HTTP response".to_owned())?;
    Ok(if status == 200 {
        Ended::Response(body)
    } else {
        Ended::Error(format!("HTTP {status}: {body}"))
    })
}

/// The live pipeline's hooks on one poller: counts the invocations, takes watch's turn, prints
/// a line per invocation.
struct LiveBatches<'a> {
    invocations: &'a AtomicU64,
    watch_turn: &'a tokio::sync::Mutex<()>,
    watch_port: u16,
    /// Held from before a receive until the next one.
    turn: Option<tokio::sync::MutexGuard<'a, ()>>,
}

impl MappingHooks<Invoker> for LiveBatches<'_> {
    // the turn is taken before the receive; the route is chosen again at the invocation
    // (watch may have come up during the receive and the batching window)
    async fn receiving(&mut self) {
        self.turn = None;
        if watch_listens(self.watch_port).await {
            self.turn = Some(self.watch_turn.lock().await);
        }
    }

    fn invoking(&mut self) -> Option<Duration> {
        self.invocations.fetch_add(1, Ordering::Relaxed);
        None
    }

    fn answered(&mut self, invoker: &Invoker, invoked: Invoked<'_>) {
        let records = invoked.batch.len();
        let unanswered = |ended: Ended| {
            format!(
                "{}; nothing deleted, the {records} records come back after the visibility timeout",
                describe(&ended)
            )
        };
        let line = match invoked.settled {
            Settled::Deleted(failed) if failed.is_empty() => {
                format!("{records} records settled and deleted")
            }
            Settled::Deleted(failed) => format!(
                "{records} records, {} reported failed (they come back after their backoff), the rest deleted",
                failed.len()
            ),
            Settled::BatchFailed(e) => format!("the whole batch failed: {e}; nothing deleted"),
            Settled::Error(body) => unanswered(Ended::Error(body)),
            Settled::Killed => unanswered(Ended::Killed),
            Settled::TimedOut => unanswered(Ended::TimedOut),
        };
        let (via, ms) = (invoker.via, invoked.took.as_millis());
        println!("consumer ({via}, {ms} ms): {line}");
    }
}

/// One of the event source mapping's pollers, as the template sets it.
async fn event_source_mapping(
    consumer: Lambda,
    ctx: &resq_ops::context::Context,
    outputs: &StackOutputs,
    around: &AroundFunctions,
    stop: watch::Receiver<bool>,
    invocations: Arc<AtomicU64>,
    watch_turn: Arc<tokio::sync::Mutex<()>>,
) {
    let mapping = EventSourceMapping {
        sqs: &ctx.sqs,
        queue_url: &outputs.main_queue_url,
        queue_arn: &outputs.main_queue_arn,
        batch_size: around.batch_size,
        batching_window: around.batching_window,
        switch: None,
    };
    let mut hooks = LiveBatches {
        invocations: &invocations,
        watch_turn: &watch_turn,
        watch_port: consumer.watch_port,
        turn: None,
    };
    // the invoker turns every failure into how the invocation ended: nothing to pass on
    let _ = mapping
        .run(&mut Invoker::new(consumer), &mut hooks, stop)
        .await;
}

fn describe(ended: &Ended) -> String {
    match ended {
        Ended::Response(body) => body.clone(),
        Ended::Error(body) => format!("function error: {}", body.trim()),
        Ended::Killed => "killed".into(),
        Ended::TimedOut => "timed out".into(),
    }
}

/// The live pipeline's hooks on the schedule: a line per run.
struct LiveRuns;

impl ScheduleHooks<Invoker> for LiveRuns {
    fn answered(&mut self, invoker: &Invoker, ended: Ended, took: Duration) {
        let (via, ms) = (invoker.via, took.as_millis());
        match ended {
            Ended::Response(body) => println!("redriver ({via}, {ms} ms): {}", run_line(&body)),
            other => println!("redriver ({via}, {ms} ms): {}", describe(&other)),
        }
    }
}

/// EventBridge's `rate()` schedule: the first run one period after the start, never two runs
/// at once (a late one is delayed).
async fn scheduler(redriver: Lambda, every: Duration, stop: watch::Receiver<bool>) {
    let schedule = Schedule {
        every,
        first: FirstRun::AfterOnePeriod,
        rule: "resq-local-RedriverFunctionSchedule",
    };
    // the invoker turns every failure into how the invocation ended: nothing to pass on
    let _ = schedule
        .run(&mut Invoker::new(redriver), &mut LiveRuns, stop)
        .await;
}

/// The redriver's summary in a line.
pub fn run_line(body: &str) -> String {
    let Ok(s) = crate::pipeline::read_summary(body) else {
        return body.to_owned();
    };
    let mut line = format!(
        "received {}, replayed {}, archived {}, kept {}, failed {}",
        s.received,
        s.redriven,
        s.archived.values().sum::<u64>(),
        s.kept,
        s.failed
    );
    if s.paused {
        line.push_str(&format!(
            " (paused: {})",
            s.pause_reason.as_deref().unwrap_or("an alarm is in ALARM")
        ));
    }
    line
}

/// SQS's minute metrics for the stack's queues, published as SQS would: the depths, and on
/// LocalStack the oldest message's age (read without receiving anything, from LocalStack's
/// developer endpoint; moto has none, so no age there).
async fn sqs_metrics(
    emulator: &Emulator,
    ctx: &resq_ops::context::Context,
    outputs: &StackOutputs,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let cloudwatch = ctx.cloudwatch.clone();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let queues = [
        &outputs.main_queue_url,
        &outputs.dlq_url,
        &outputs.failure_queue_url,
    ];
    while next_tick(&mut ticks, &mut stop).await {
        let now = chrono::Utc::now();
        let mut data = Vec::new();
        for url in queues {
            let name = url.rsplit('/').next().unwrap_or_default();
            let Ok((visible, hidden)) = resq_ops::status::depth(&ctx.sqs, url).await else {
                continue;
            };
            let mut push = |metric: &str, value: f64, unit: StandardUnit| {
                data.push(
                    MetricDatum::builder()
                        .metric_name(metric)
                        .dimensions(Dimension::builder().name("QueueName").value(name).build())
                        .value(value)
                        .unit(unit)
                        .timestamp(DateTime::from_millis(now.timestamp_millis()))
                        .build(),
                );
            };
            push(
                "ApproximateNumberOfMessagesVisible",
                visible as f64,
                StandardUnit::Count,
            );
            push(
                "ApproximateNumberOfMessagesNotVisible",
                hidden as f64,
                StandardUnit::Count,
            );
            if let Emulator::LocalStack(_) = emulator
                && let Some(oldest) = oldest_sent_ms(emulator.endpoint(), url).await
            {
                let age = (now.timestamp_millis() as u64).saturating_sub(oldest) / 1000;
                push(
                    "ApproximateAgeOfOldestMessage",
                    age as f64,
                    StandardUnit::Seconds,
                );
            }
        }
        if let Err(e) = cloudwatch
            .put_metric_data()
            .namespace("AWS/SQS")
            .set_metric_data(Some(data))
            .send()
            .await
        {
            tracing::warn!(error = %resq::error::AwsError::from_sdk(e), "SQS metrics: PutMetricData failed");
        }
    }
}

/// The oldest `SentTimestamp` in a LocalStack queue, visible or not, read from its developer
/// endpoint (`/_aws/sqs/messages`), which changes nothing (no receive counted).
pub async fn oldest_sent_ms(endpoint: &str, queue_url: &str) -> Option<u64> {
    let addr = endpoint.trim_start_matches("http://");
    // a ReceiveMessage in SQS's JSON protocol, answered from the store without receiving
    let body = json!({ "QueueUrl": queue_url }).to_string();
    let io = post(
        addr,
        "/_aws/sqs/messages?ShowInvisible=true&ShowDelayed=true",
        "Content-Type: application/x-amz-json-1.0\r\nX-Amz-Target: AmazonSQS.ReceiveMessage\r\n",
        &body,
    );
    let raw = tokio::time::timeout(Duration::from_secs(5), io)
        .await
        .ok()?
        .ok()?;
    let (status, body) = http_response(&raw)?;
    if status != 200 {
        return None;
    }
    let doc: Value = serde_json::from_str(&body).ok()?;
    doc["Messages"]
        .as_array()?
        .iter()
        .filter_map(|m| {
            m["Attributes"]["SentTimestamp"]
                .as_str()?
                .parse::<u64>()
                .ok()
        })
        .min()
}

/// `make watch`'s log pipe: each line of `cargo lambda watch`'s output is echoed, and the
/// EMF documents among them go to CloudWatch as Lambda's log pipeline would send them, under
/// the stack's function names (watch names a function after its binary). `renames` is the env
/// file's [`FUNCTIONS_VAR`]: `consumer=stk-consumer,redriver=stk-redriver`.
pub async fn forward_watch_logs(
    input: impl tokio::io::AsyncRead + Unpin,
    metrics: mpsc::UnboundedSender<Value>,
    renames: &str,
) {
    use tokio::io::AsyncBufReadExt;
    let renames: Vec<(&str, &str)> = renames
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .collect();
    let mut reader = tokio::io::BufReader::new(input);
    let mut raw = Vec::new();
    let mut out = tokio::io::stdout();
    while let Ok(n) = reader.read_until(b'\n', &mut raw).await {
        if n == 0 {
            break;
        }
        let _ = out.write_all(&raw).await;
        let _ = out.flush().await;
        let line = String::from_utf8_lossy(&raw).trim_end().to_owned();
        raw.clear();
        if let Some(mut doc) = crate::emf::emf_document(&line) {
            rename_function(&mut doc, &renames);
            let _ = metrics.send(doc);
        }
    }
}

/// Renames an EMF document's `function_name` dimension from a watched binary's name to the
/// stack's.
pub fn rename_function(doc: &mut Value, renames: &[(&str, &str)]) {
    let key = resq::metrics::DIMENSION_FUNCTION;
    if let Some(name) = doc.get(key).and_then(Value::as_str)
        && let Some((_, to)) = renames.iter().find(|(from, _)| *from == name)
    {
        doc[key] = json!(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_metrics_are_an_emf_document_in_aws_lambda() {
        let doc = lambda_metrics("stk-consumer", true, Duration::from_millis(1500));
        let datums = crate::emf::datums(&doc);
        let names: Vec<(String, Option<String>, Option<f64>)> = datums
            .iter()
            .map(|(ns, d)| {
                assert_eq!(ns, "AWS/Lambda");
                assert_eq!(d.dimensions()[0].value(), Some("stk-consumer"));
                (ns.clone(), d.metric_name().map(str::to_owned), d.value())
            })
            .collect();
        assert!(
            names
                .iter()
                .any(|(_, n, v)| n.as_deref() == Some("Errors") && *v == Some(1.0))
        );
        assert!(
            names
                .iter()
                .any(|(_, n, v)| n.as_deref() == Some("Invocations") && *v == Some(1.0))
        );
        assert!(
            names
                .iter()
                .any(|(_, n, v)| n.as_deref() == Some("Duration") && *v == Some(1500.0))
        );
    }

    #[test]
    fn run_lines_sum_the_archive_reasons_and_say_paused() {
        let summary = resq_redriver::Summary {
            paused: true,
            pause_reason: Some("resq-local-replays-failing is in ALARM".into()),
            received: 5,
            redriven: 2,
            archived: [
                (resq::reason::ArchiveReason::TtlExpired, 1),
                (resq::reason::ArchiveReason::RedriveCap, 2),
            ]
            .into(),
            kept: 1,
            elapsed_ms: 10,
            ..resq_redriver::Summary::new(false, 10.0)
        };
        let line = run_line(&serde_json::to_string(&summary).unwrap());
        assert_eq!(
            line,
            "received 5, replayed 2, archived 3, kept 1, failed 0 (paused: resq-local-replays-failing is in ALARM)"
        );
        assert_eq!(run_line("not json"), "not json");
    }

    #[test]
    fn env_file_values_are_quoted_and_read_back() {
        let line = env_line("RESQ_LOCAL_FUNCTIONS", "consumer=a,redriver=b");
        assert_eq!(line, "RESQ_LOCAL_FUNCTIONS='consumer=a,redriver=b'\n");
        let text = format!(
            "{line}{}",
            env_line("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        );
        assert_eq!(
            env_file_var(&text, "AWS_ENDPOINT_URL").as_deref(),
            Some("http://127.0.0.1:1")
        );
        assert_eq!(
            env_file_var(&text, "RESQ_LOCAL_FUNCTIONS").as_deref(),
            Some("consumer=a,redriver=b")
        );
        assert_eq!(env_file_var(&text, "AWS_ENDPOINT"), None);
    }

    #[test]
    fn watched_binaries_metrics_take_the_stacks_function_names() {
        let renames = [("consumer", "stk-consumer"), ("redriver", "stk-redriver")];
        let mut doc = json!({"function_name": "consumer", "service": "orders", "Processed": 1});
        rename_function(&mut doc, &renames);
        assert_eq!(doc["function_name"], "stk-consumer");
        let mut other = json!({"function_name": "stk-redriver"});
        rename_function(&mut other, &renames);
        assert_eq!(other["function_name"], "stk-redriver");
    }
}
