//! What the measured child processes run: resq's consumer engine on one event, and resq's
//! redriver against an SQS endpoint. Each prints one JSON line for the orchestrator.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use resq::config::Vars;
use resq_consumer::Consumer;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::event::SqsInvocation;
use resq_consumer::handler::{HandlerError, RecordMeta};
use resq_consumer::order::Order;
use resq_consumer::order::OrderHandler;
use resq_redriver::Redriver;
use resq_redriver::config::RedriverConfig;
use resq_redriver::ports::CloudWatchAlarms;
use resq_redriver::request::RunRequest;
use resq_testing::{MemorySqs, MemoryStore};
use serde_json::{Value, json};

/// The benchmark's effect: an in-memory no-op, so the engine itself is what is measured.
pub struct NoopEffect;

impl OrderHandler for NoopEffect {
    async fn handle(&self, _order: &Order, _meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn vars(pairs: Vec<(&'static str, String)>) -> Vars<impl Fn(&str) -> Option<String>> {
    let map: HashMap<&'static str, String> = pairs.into_iter().collect();
    Vars(move |k: &str| map.get(k).cloned())
}

/// Logs as the deployed function writes them (JSON, info), into a sink: their cost counts.
fn quiet_json_logs() {
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false)
        .without_time()
        .with_target(false)
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_writer(std::io::sink)
        .try_init();
}

/// The I/O benchmark's effect: each order takes `latency` of I/O wait (a timer in the
/// process, as a conditional S3 put's round trip would be), nothing else.
pub struct SleepEffect(pub Duration);

impl OrderHandler for SleepEffect {
    async fn handle(&self, _order: &Order, _meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
        tokio::time::sleep(self.0).await;
        Ok(())
    }
}

/// The consumer's configuration in the bench: in-memory ports, `concurrency` records at once
/// (the default when `None`).
/// The DLQ of the measured engine (in memory: nothing listens there).
const BENCH_DLQ: &str = "http://127.0.0.1:9/123456789012/resq-orders-dlq";

fn bench_config(concurrency: Option<usize>) -> Result<ConsumerConfig, String> {
    let mut pairs = vec![
        (
            "MAIN_QUEUE_URL",
            "http://127.0.0.1:9/123456789012/resq-orders".into(),
        ),
        ("DLQ_URL", BENCH_DLQ.into()),
        ("ARCHIVE_BUCKET", "resq-bench".into()),
    ];
    if let Some(n) = concurrency {
        pairs.push(("CONSUMER_CONCURRENCY", n.to_string()));
    }
    ConsumerConfig::from_vars(&vars(pairs)).map_err(|e| e.to_string())
}

/// The consumer engine the bench measures: `handler` over in-memory ports (DLQ copies land in
/// `queues`), `concurrency` records at once (the default when `None`).
fn engine<H: OrderHandler>(
    handler: H,
    queues: &MemorySqs,
    concurrency: Option<usize>,
) -> Result<Consumer<H, &MemorySqs, MemoryStore>, String> {
    Ok(Consumer::new(
        handler,
        queues,
        MemoryStore::default(),
        bench_config(concurrency)?,
    ))
}

/// The bodies of the event's records, for the bare loop.
fn bodies(raw: &[u8]) -> Result<Vec<Option<String>>, String> {
    let event: Value = serde_json::from_slice(raw).map_err(|e| format!("event: {e}"))?;
    Ok(event["Records"]
        .as_array()
        .ok_or("event: no Records")?
        .iter()
        .map(|r| r["body"].as_str().map(str::to_owned))
        .collect())
}

/// The same per-record work with no engine around it: parse and validate each body, in a
/// plain loop. Returns the seconds it took and how many it rejected.
fn bare_loop(bodies: &[Option<String>]) -> (f64, usize) {
    let started = Instant::now();
    let rejected = bodies
        .iter()
        .filter(|b| std::hint::black_box(resq_consumer::order::parse_order(b.as_deref())).is_err())
        .count();
    (started.elapsed().as_secs_f64(), rejected)
}

/// One invocation of resq's consumer on the event in `path`: parse, process, serialize.
/// `batch_seconds` is the engine alone (the event parsed, as the runtime hands it over);
/// `seconds` the whole invocation; `bare_seconds` the same parse and validate in a plain loop,
/// measured after the invocation (and so not in its peak memory).
pub async fn consumer(path: &std::path::Path) -> Result<Value, String> {
    if std::env::var_os("BENCH_NO_LOGS").is_none() {
        quiet_json_logs();
    }
    let raw = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let queues = MemorySqs::default();
    let engine = engine(NoopEffect, &queues, None)?;
    let started = Instant::now();
    // What lambda_runtime does with the payload before the handler runs: the function's own
    // payload type (records kept as raw JSON, each decoded on its own by the engine).
    let text = std::str::from_utf8(&raw).map_err(|e| format!("event: {e}"))?;
    let invocation = SqsInvocation::from_json(text).map_err(|e| format!("event: {e}"))?;
    drop(raw);
    let batch_started = Instant::now();
    let report = engine
        .handle(invocation, Instant::now() + Duration::from_secs(900))
        .await
        .map_err(|e| e.to_string())?;
    let batch_seconds = batch_started.elapsed().as_secs_f64();
    let response = serde_json::to_vec(&report.response).map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    let vm_hwm_kb = crate::measured::vm_hwm_kb();
    let bodies = bodies(&std::fs::read(path).map_err(|e| e.to_string())?)?;
    let (bare_seconds, bare_rejected) = bare_loop(&bodies);
    if bare_rejected != queues.sent(BENCH_DLQ).len() {
        return Err(format!(
            "the bare loop rejected {bare_rejected} records, the engine {}",
            queues.sent(BENCH_DLQ).len()
        ));
    }
    Ok(json!({
        "impl": "resq",
        "records": report.outcomes.len(),
        "failures": report.response.batch_item_failures.len(),
        "rejected": queues.sent(BENCH_DLQ).len(),
        "response_bytes": response.len(),
        "batch_seconds": batch_seconds,
        "seconds": seconds,
        "bare_seconds": bare_seconds,
        "vm_hwm_kb": vm_hwm_kb,
    }))
}

/// `invocations` invocations of resq's consumer, one process, on the event in `path` (the
/// first a warm-up, as a cold start's is): for each, the engine's batch time
/// (`batch_seconds`), the whole invocation from the payload's text (`seconds`) and the bare
/// parse-and-validate loop over the same bodies (`bare_seconds`), each checked to reject the
/// same records; `vm_hwm_kb` after the first invocation (one invocation's peak).
pub async fn consumer_warm(path: &std::path::Path, invocations: usize) -> Result<Value, String> {
    quiet_json_logs();
    let raw = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bodies = bodies(raw.as_bytes())?;
    let queues = MemorySqs::default();
    let engine = engine(NoopEffect, &queues, None)?;
    let (mut batch, mut whole, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    let (mut records, mut rejected, mut failures, mut vm_hwm_kb) = (0, 0, 0, 0);
    for i in 0..invocations.max(1) {
        let sent_before = queues.sent(BENCH_DLQ).len();
        let started = Instant::now();
        let invocation = SqsInvocation::from_json(&raw).map_err(|e| format!("event: {e}"))?;
        let batch_started = Instant::now();
        let report = engine
            .handle(invocation, Instant::now() + Duration::from_secs(900))
            .await
            .map_err(|e| e.to_string())?;
        batch.push(batch_started.elapsed().as_secs_f64());
        let response = serde_json::to_vec(&report.response).map_err(|e| e.to_string())?;
        whole.push(started.elapsed().as_secs_f64());
        std::hint::black_box(response);
        if i == 0 {
            vm_hwm_kb = crate::measured::vm_hwm_kb();
        }
        records = report.outcomes.len();
        failures = report.response.batch_item_failures.len();
        rejected = queues.sent(BENCH_DLQ).len() - sent_before;
        let (bare_seconds, bare_rejected) = bare_loop(&bodies);
        if bare_rejected != rejected {
            return Err(format!(
                "the bare loop rejected {bare_rejected} records, the engine {rejected}"
            ));
        }
        bare.push(bare_seconds);
    }
    Ok(json!({
        "impl": "resq",
        "records": records,
        "failures": failures,
        "rejected": rejected,
        "batch_seconds": batch,
        "seconds": whole,
        "bare_seconds": bare,
        "vm_hwm_kb": vm_hwm_kb,
    }))
}

/// One invocation of resq's consumer on the event in `path` with an effect of `latency` per
/// order, `concurrency` records at once (the default when `None`): the batch's wall time.
pub async fn consumer_io(
    path: &std::path::Path,
    latency: Duration,
    concurrency: Option<usize>,
) -> Result<Value, String> {
    quiet_json_logs();
    let raw = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let setting = bench_config(concurrency)?.concurrency;
    let queues = MemorySqs::default();
    let engine = engine(SleepEffect(latency), &queues, concurrency)?;
    let invocation = SqsInvocation::from_json(&raw).map_err(|e| format!("event: {e}"))?;
    // the limit the batch starts with (nothing throttles here: it stays there)
    let concurrency = setting.initial(invocation.0.len());
    let started = Instant::now();
    let report = engine
        .handle(invocation, Instant::now() + Duration::from_secs(900))
        .await
        .map_err(|e| e.to_string())?;
    let batch_seconds = started.elapsed().as_secs_f64();
    Ok(json!({
        "impl": "resq",
        "records": report.outcomes.len(),
        "failures": report.response.batch_item_failures.len(),
        "rejected": queues.sent(BENCH_DLQ).len(),
        "concurrency": concurrency,
        "batch_seconds": batch_seconds,
    }))
}

/// Which of the redriver's designs a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// Several receive → settle cycles in flight under one token bucket, as many as SQS's
    /// answers allow up to what the rate needs (the default).
    Pipelined,
    /// The same pipeline with its cycles in flight fixed at what the rate needs, whatever SQS
    /// answers (`with_back_off(false)`, the design before), for comparison.
    Fixed,
    /// One batch in flight at a time (`with_max_cycles_in_flight(1)`, in the order received),
    /// for comparison.
    Sequential,
}

impl Design {
    /// Its name in the reports and on the child's command line.
    pub fn name(self) -> &'static str {
        match self {
            Design::Pipelined => "pipelined",
            Design::Fixed => "fixed",
            Design::Sequential => "sequential",
        }
    }
}

/// This process's CPU time so far (user + system), s.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is handed.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The longest a benchmark run may take: Lambda's maximum timeout (a 1,000,000-message drain
/// at 3,000/s takes about 5.6 min).
pub const RUN_DEADLINE: Duration = Duration::from_secs(900);

/// One run of resq's redriver: DLQ → main queue at `rate`, `MAX_MESSAGES_PER_RUN=auto` (what
/// the rate allows in the run's time), until the DLQ is empty; with `call_timeout`, each SQS
/// call (but the receives, which keep theirs) times out after it instead of resq's own (a
/// stand-in's time scaled down).
pub async fn redrive(
    endpoint: &str,
    dlq: &str,
    main: &str,
    rate: f64,
    design: Design,
    call_timeout: Option<Duration>,
) -> Result<Value, String> {
    quiet_json_logs();
    let mut sdk = resq_local::emulator::local_sdk_config(endpoint).await;
    if let Some(t) = call_timeout {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(t)
            .operation_timeout(t * 3)
            .build();
        sdk = sdk.into_builder().timeout_config(timeouts).build();
    }
    let config = RedriverConfig::from_vars(&vars(vec![
        ("MAIN_QUEUE_URL", main.into()),
        ("DLQ_URL", dlq.into()),
        ("ARCHIVE_BUCKET", "resq-bench".into()),
        ("REDRIVE_RATE_PER_SECOND", rate.to_string()),
        ("MAX_MESSAGES_PER_RUN", "auto".into()),
    ]))
    .map_err(|e| e.to_string())?;
    let request = RunRequest::defaults(&config);
    let mut engine = Redriver::new(
        aws_sdk_sqs::Client::new(&sdk),
        MemoryStore::default(),
        CloudWatchAlarms::new(aws_sdk_cloudwatch::Client::new(&sdk)),
        config,
    )
    .with_metrics(false)
    .with_receive_wait(0);
    let mut cycles = resq_redriver::plan::cycles_in_flight(rate);
    match design {
        // one batch at a time, in the order received (no candidates held ahead)
        Design::Sequential => {
            engine = engine.with_max_cycles_in_flight(1).with_candidates_max(0);
            cycles = 1;
        }
        Design::Fixed => engine = engine.with_back_off(false),
        Design::Pipelined => {}
    }
    let (started, cpu_before) = (Instant::now(), cpu_seconds());
    let summary = engine.run(&request, Instant::now() + RUN_DEADLINE).await;
    let seconds = started.elapsed().as_secs_f64();
    Ok(json!({
        "impl": "resq",
        "design": design.name(),
        "cycles_in_flight": cycles,
        "received": summary.received,
        "redriven": summary.redriven,
        "failed": summary.failed,
        "delete_failed": summary.delete_failed,
        "stopped_by": summary.stopped_by,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds() - cpu_before,
    }))
}
