//! The real-client I/O comparison: what a batch of order records costs when each record's
//! effect is a conditional S3 put over a socket, as resq's reference handler makes it.
//!
//! S3 is the loopback stand-in ([`crate::s3standin`], every `PUT` answered after a fixed
//! latency), one instance per side so each side's connections are its own. Each side runs in its
//! own process, started with Lambda's descriptor limit (`RLIMIT_NOFILE` 1,024), warm: one
//! warm-up invocation (the batch, at most 1,000 records), then interleaved rounds, each invocation an event of its own (every
//! `orderId` new, so every `PUT` writes):
//!
//! - resq: the release `consumer` binary under a Lambda runtime API on loopback
//!   ([`Function`]), SQS on the stand-in SQS ([`FakeSqs`]: DLQ sends, `GetQueueAttributes`),
//!   S3 on the stand-in through the SDK's service endpoints (`AWS_ENDPOINT_URL_S3`,
//!   `AWS_ENDPOINT_URL_SQS`); at its default `CONSUMER_CONCURRENCY` (unset) and at
//!   `CONSUMER_CONCURRENCY` = the batch (capped at [`CONCURRENCY_CAP`]);
//! - Powertools `AsyncBatchProcessor` with an aiobotocore client, at its default pool (10) and
//!   with `max_pool_connections` = the batch (capped alike);
//! - Powertools `BatchProcessor` with a boto3 client (sequential; only up to `io_sync_max`
//!   records: beyond, one round would take minutes).
//!
//! Per side and batch size: the median wall time, and the peaks over the rounds of descriptors
//! open in the process (`/proc/PID/fd`, sampled about every millisecond in a thread while an
//! invocation runs), connections open at the stand-in, `PUT`s a second there, and the
//! process's resident memory (`VmHWM`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use resq_local::chaos::runtime::Function;
use resq_local::driver::Ended;
use serde_json::Value;

use crate::event;
use crate::fakesqs::FakeSqs;
use crate::function::MAX_PAYLOAD_BYTES;
use crate::measured::median;
use crate::options::Options;
use crate::s3standin::{self, S3StandIn};

/// Lambda's limit on a function's open file descriptors (soft and hard).
pub const NOFILE: u64 = 1024;

/// The most records (resq) or pooled connections (aiobotocore) the tuned settings run at once:
/// each needs a socket, and of Lambda's 1,024 descriptors about 20 are the process's own
/// (standard streams, the runtime API's and SQS's connections, epoll, the log pipes, the
/// interpreter's files); 900 leaves a hundred spare.
pub const CONCURRENCY_CAP: usize = 900;

/// resq's documented `auto` limit: at most this many records in flight (docs/design.md).
pub const AUTO_LIMIT: usize = resq_consumer::concurrency::AUTO_CONCURRENCY_MAX;

/// The bucket every side writes its order records to (resq's `ARCHIVE_BUCKET`).
pub const BUCKET: &str = "resq-bench";

/// The sides, in the table's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// resq, `CONSUMER_CONCURRENCY` unset.
    ResqDefault,
    /// resq, `CONSUMER_CONCURRENCY` = the batch (capped).
    ResqTuned,
    /// Powertools `AsyncBatchProcessor` + aiobotocore, `max_pool_connections` unset (10).
    AioDefault,
    /// Powertools `AsyncBatchProcessor` + aiobotocore, `max_pool_connections` = the batch
    /// (capped).
    AioTuned,
    /// Powertools `BatchProcessor` + boto3, defaults.
    Boto3,
}

impl Side {
    pub const ALL: [Side; 5] = [
        Side::ResqDefault,
        Side::ResqTuned,
        Side::AioDefault,
        Side::AioTuned,
        Side::Boto3,
    ];

    /// How the table names it, for a batch run at `tuned` at once.
    pub fn label(self, tuned: usize) -> String {
        match self {
            Side::ResqDefault => "resq, default `CONSUMER_CONCURRENCY`".into(),
            Side::ResqTuned => format!("resq, `CONSUMER_CONCURRENCY={tuned}`"),
            Side::AioDefault => "Powertools async + aiobotocore, default pool (10)".into(),
            Side::AioTuned => format!("Powertools async + aiobotocore, pool {tuned}"),
            Side::Boto3 => "Powertools BatchProcessor + boto3".into(),
        }
    }
}

/// One side at one batch size.
#[derive(Debug, Clone, PartialEq)]
pub struct SideRun {
    pub side: Side,
    /// Median wall time of the rounds, s.
    pub wall: f64,
    /// Descriptors open in the process, the most sampled in any round.
    pub peak_fds: usize,
    /// Connections open at the side's stand-in, the most in any round.
    pub peak_connections: usize,
    /// `PUT`s a second at the stand-in (the most in any 100 ms, × 10), the most in any round.
    pub peak_puts_per_s: f64,
    /// The process's peak resident memory, KiB.
    pub peak_rss_kb: u64,
    /// Records reported failed, over all rounds.
    pub failures: usize,
    /// The client's own retries of its puts over all rounds, where it says (botocore's
    /// `RetryAttempts`; `None` for resq, whose SDK does not tell).
    pub retries: Option<usize>,
}

/// One batch size.
#[derive(Debug, Clone, PartialEq)]
pub struct RealRow {
    /// Records in each event.
    pub records: usize,
    /// The size of a round's event, bytes.
    pub payload_bytes: usize,
    /// The tuned settings' concurrency: the batch, capped at [`CONCURRENCY_CAP`].
    pub tuned: usize,
    /// The sides measured (boto3 is left out above `io_sync_max`).
    pub sides: Vec<SideRun>,
}

impl RealRow {
    pub fn side(&self, side: Side) -> Option<&SideRun> {
        self.sides.iter().find(|s| s.side == side)
    }
    fn wall(&self, side: Side) -> Option<f64> {
        self.side(side).map(|s| s.wall)
    }
    /// The faster real-client peer at its own defaults (aiobotocore's default pool, boto3) ÷
    /// resq at its default.
    pub fn vs_real_peer(&self) -> f64 {
        let peer = [Side::AioDefault, Side::Boto3]
            .into_iter()
            .filter_map(|s| self.wall(s))
            .reduce(f64::min);
        match (peer, self.wall(Side::ResqDefault)) {
            (Some(p), Some(r)) => p / r,
            _ => f64::NAN,
        }
    }
    /// aiobotocore with a pool of the batch ÷ resq with `CONSUMER_CONCURRENCY` = the batch.
    pub fn vs_tuned_peer(&self) -> f64 {
        match (self.wall(Side::AioTuned), self.wall(Side::ResqTuned)) {
            (Some(p), Some(r)) => p / r,
            _ => f64::NAN,
        }
    }
    /// `ceil(records / 64) × latency` (the least time at resq's `auto` limit) ÷ resq at its
    /// default.
    pub fn limit_efficiency(&self, latency: f64) -> f64 {
        let limit = self.records.div_ceil(AUTO_LIMIT) as f64 * latency;
        self.wall(Side::ResqDefault).map_or(f64::NAN, |r| limit / r)
    }
}

/// The throttling run: resq at its default against a stand-in answering `503 SlowDown` above a
/// rate.
#[derive(Debug, Clone, PartialEq)]
pub struct ThrottleRun {
    pub records: usize,
    /// The stand-in's `PUT`s a second before it answers 503.
    pub rate_limit: f64,
    /// Wall time of the invocation, s.
    pub wall: f64,
    /// `PUT`s answered, whatever the answer (retries included).
    pub puts: usize,
    /// `PUT`s answered `503 SlowDown`.
    pub slow_downs: usize,
    /// `PUT`s a second at the stand-in (the most in any 100 ms, × 10).
    pub peak_puts_per_s: f64,
    /// The most `PUT`s in flight in each 100 ms of the run.
    pub timeline: Vec<usize>,
    /// Records reported failed.
    pub failures: usize,
    /// Descriptors open in the process, the most sampled.
    pub peak_fds: usize,
    /// The process's peak resident memory, KiB.
    pub peak_rss_kb: u64,
    /// From the consumer's "batch done" log line, when it writes them.
    pub concurrency_lowest: Option<u64>,
    pub throttles: Option<u64>,
}

impl ThrottleRun {
    /// The most `PUT`s in flight in the first and in the last 100 ms of the run.
    pub fn first_and_last(&self) -> (usize, usize) {
        (
            self.timeline.first().copied().unwrap_or(0),
            self.timeline.last().copied().unwrap_or(0),
        )
    }
}

/// Everything the real-client comparison measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RealIo {
    /// The stand-in's latency per `PUT`, s.
    pub latency: f64,
    pub rows: Vec<RealRow>,
    pub throttle: Option<ThrottleRun>,
    /// Rounds per side and batch size (after the warm-up).
    pub rounds: usize,
}

/// The worst (least) of `f` over the rows that have it (NaN when none does).
fn worst(rows: &[RealRow], f: impl Fn(&RealRow) -> f64) -> f64 {
    rows.iter()
        .map(f)
        .filter(|v| !v.is_nan())
        .reduce(f64::min)
        .unwrap_or(f64::NAN)
}

impl RealIo {
    /// The best real-client peer at its defaults ÷ resq at its default, worst batch size.
    pub fn io_vs_real_peer(&self) -> f64 {
        worst(&self.rows, RealRow::vs_real_peer)
    }
    /// aiobotocore at pool = N ÷ resq at `CONSUMER_CONCURRENCY` = N, worst batch size.
    pub fn io_vs_tuned_peer(&self) -> f64 {
        worst(&self.rows, RealRow::vs_tuned_peer)
    }
    /// `ceil(R / 64) × latency` ÷ resq at its default, worst batch size.
    pub fn io_limit_efficiency(&self) -> f64 {
        worst(&self.rows, |r| r.limit_efficiency(self.latency))
    }
    /// resq's runs at its default: what ships. (The tuned runs hold a connection, so a
    /// descriptor, per record in flight by construction: their figures are in the table.)
    fn resq_runs(&self) -> impl Iterator<Item = &SideRun> {
        self.rows
            .iter()
            .flat_map(|r| &r.sides)
            .filter(|s| s.side == Side::ResqDefault)
    }
    /// The most descriptors resq's process had open in any run at its default (the throttling
    /// run included).
    pub fn peak_fds(&self) -> usize {
        self.resq_runs()
            .map(|s| s.peak_fds)
            .chain(self.throttle.as_ref().map(|t| t.peak_fds))
            .max()
            .unwrap_or(0)
    }
    /// resq's highest peak resident memory over its runs at its default, MiB.
    pub fn worst_rss_mb(&self) -> f64 {
        self.resq_runs()
            .map(|s| s.peak_rss_kb)
            .chain(self.throttle.as_ref().map(|t| t.peak_rss_kb))
            .max()
            .unwrap_or(0) as f64
            / 1024.0
    }

    /// The figures, as `make bench`'s summary line writes them.
    pub fn summary(&self) -> String {
        format!(
            "io_vs_real_peer={:.2} io_vs_tuned_peer={:.2} io_limit_efficiency={:.2} peak_fds={} worst_rss_mb={:.1}",
            self.io_vs_real_peer(),
            self.io_vs_tuned_peer(),
            self.io_limit_efficiency(),
            self.peak_fds(),
            self.worst_rss_mb()
        )
    }

    /// The comparison as Markdown: one row per batch size and side, then the throttling run.
    pub fn table(&self) -> String {
        let mut t = format!(
            "Real clients against the loopback S3 stand-in ({:.0} ms per `PUT`, every process under `RLIMIT_NOFILE` {NOFILE}; wall time: median of {} warm rounds; peaks: the most in any round):\n\n",
            self.latency * 1000.0,
            self.rounds
        );
        t.push_str("| records (event) | side | wall, ms | ÷ resq default | peak fds | peak connections | peak PUT/s | peak RSS, MiB | failed | client retries |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for r in &self.rows {
            let resq = r.wall(Side::ResqDefault);
            for s in &r.sides {
                t.push_str(&format!(
                    "| {} ({:.2} MB) | {} | {:.1} | {} | {} | {} | {:.0} | {:.1} | {} | {} |\n",
                    r.records,
                    r.payload_bytes as f64 / 1e6,
                    s.side.label(r.tuned),
                    s.wall * 1000.0,
                    resq.map_or("–".into(), |w| format!("{:.2}", s.wall / w)),
                    s.peak_fds,
                    s.peak_connections,
                    s.peak_puts_per_s,
                    s.peak_rss_kb as f64 / 1024.0,
                    s.failures,
                    s.retries.map_or("–".into(), |r| r.to_string()),
                ));
            }
        }
        t.push('\n');
        t.push_str("| records | best real peer at its defaults ÷ resq default (io_vs_real_peer ≥ 1.0) | aiobotocore pool N ÷ resq N (io_vs_tuned_peer ≥ 1.0) | ceil(R/64) × latency ÷ resq default (io_limit_efficiency ≥ 0.9) |\n|---:|---:|---:|---:|\n");
        for r in &self.rows {
            t.push_str(&format!(
                "| {} | {:.2} | {:.2} | {:.2} |\n",
                r.records,
                r.vs_real_peer(),
                r.vs_tuned_peer(),
                r.limit_efficiency(self.latency)
            ));
        }
        if let Some(th) = &self.throttle {
            let (first, last) = th.first_and_last();
            let opt = |v: Option<u64>| v.map_or("–".into(), |v| v.to_string());
            t.push_str(&format!(
                "\nThrottling: {} records through resq at its default, the stand-in answering `503 SlowDown` above {:.0} PUT/s: {:.1} ms, {} PUTs ({} answered 503), peak {:.0} PUT/s, {} records reported failed; PUTs in flight per 100 ms (most): first {first}, last {last}, [{}]; from the \"batch done\" line: concurrency_lowest {}, throttles {}.\n",
                th.records,
                th.rate_limit,
                th.wall * 1000.0,
                th.puts,
                th.slow_downs,
                th.peak_puts_per_s,
                th.failures,
                th.timeline
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
                opt(th.concurrency_lowest),
                opt(th.throttles),
            ));
        }
        t
    }
}

/// The number of descriptors `pid` has open now.
fn open_fds(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count())
}

/// `VmHWM` of `pid`, KiB.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Counts `pid`'s open descriptors about every millisecond, on a thread, until stopped.
struct FdSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FdSampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(open_fds(pid).unwrap_or(0)));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(n) = open_fds(pid) {
                    p.fetch_max(n, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Self {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

/// A Powertools peer: the Python process, warm, handed one event file a line on stdin.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    what: String,
}

/// Sets Lambda's descriptor limit (and ends the child with this process) before `exec`.
fn lambda_limits(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl and setrlimit are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            let limit = libc::rlimit {
                rlim_cur: NOFILE as libc::rlim_t,
                rlim_max: NOFILE as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Peer {
    fn start(o: &Options, mode: &str, endpoint: &str, pool: &str) -> Result<Self, String> {
        let mut cmd = Command::new(&o.python);
        cmd.arg(o.scripts.join("powertools_s3.py"))
            .args([mode, endpoint, BUCKET, pool])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        lambda_limits(&mut cmd);
        let what = format!("{cmd:?}");
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("{what}: no pipes"));
        };
        let mut peer = Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            what,
        };
        let ready = peer.line()?;
        if ready["ready"] != true {
            return Err(format!("{}: expected ready, got {ready}", peer.what));
        }
        Ok(peer)
    }

    fn line(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(|e| format!("{}: {e}", self.what))?;
        if n == 0 {
            return Err(format!("{} ended", self.what));
        }
        serde_json::from_str(&line)
            .map_err(|e| format!("{}: expected a JSON line, got {line:?}: {e}", self.what))
    }

    fn invoke(&mut self, event: &Path) -> Result<Value, String> {
        writeln!(self.stdin, "{}", event.display())
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("{}: {e}", self.what))?;
        self.line()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A side's process, warm.
enum Runner {
    Resq(Box<Function>),
    Peer(Peer),
}

/// One invocation as measured.
struct Invocation {
    wall: f64,
    records: usize,
    failures: usize,
    retries: Option<usize>,
}

impl Runner {
    fn pid(&self) -> Option<u32> {
        match self {
            Runner::Resq(f) => f.pid(),
            Runner::Peer(p) => Some(p.child.id()),
        }
    }

    fn invoke(&mut self, event: &Path, rt: &tokio::runtime::Runtime) -> Result<Invocation, String> {
        match self {
            Runner::Resq(f) => {
                let payload = std::fs::read_to_string(event)
                    .map_err(|e| format!("{}: {e}", event.display()))?;
                let records =
                    serde_json::from_str::<Value>(&payload).map_err(|e| e.to_string())?["Records"]
                        .as_array()
                        .map_or(0, Vec::len);
                let started = Instant::now();
                let ended = rt
                    .block_on(f.invoke(&payload, None))
                    .map_err(|e| e.to_string())?;
                let wall = started.elapsed().as_secs_f64();
                let body = match ended {
                    Ended::Response(body) => body,
                    other => return Err(format!("the consumer did not answer: {other:?}")),
                };
                let failures = serde_json::from_str::<Value>(&body)
                    .map_err(|e| format!("response {body:?}: {e}"))?["batchItemFailures"]
                    .as_array()
                    .map_or(0, Vec::len);
                Ok(Invocation {
                    wall,
                    records,
                    failures,
                    retries: None,
                })
            }
            Runner::Peer(p) => {
                let v = p.invoke(event)?;
                let count = |k: &str| v[k].as_u64().map(|n| n as usize);
                Ok(Invocation {
                    wall: v["batch_seconds"]
                        .as_f64()
                        .ok_or_else(|| format!("no batch_seconds in {v}"))?,
                    records: count("records").ok_or_else(|| format!("no records in {v}"))?,
                    failures: count("failures").ok_or_else(|| format!("no failures in {v}"))?,
                    retries: count("retries"),
                })
            }
        }
    }

    fn peak_rss_kb(&self) -> u64 {
        match self {
            Runner::Resq(f) => f.peak_rss_kb(),
            Runner::Peer(p) => vm_hwm_kb(p.child.id()),
        }
        .unwrap_or(0)
    }

    fn stop(self, rt: &tokio::runtime::Runtime) {
        match self {
            Runner::Resq(mut f) => rt.block_on(f.kill()),
            Runner::Peer(p) => drop(p),
        }
    }
}

/// Where the resq function's JSON log goes.
fn log_path(work: &Path, name: &str) -> PathBuf {
    work.join(format!("realio-{name}.log"))
}

/// resq's consumer function under the runtime API: SQS on `sqs`, S3 on `s3`, each by the SDK's
/// service endpoint variable; `concurrency` sets `CONSUMER_CONCURRENCY` (unset when `None`).
pub(crate) fn resq_function(
    o: &Options,
    sqs: &FakeSqs,
    s3: &S3StandIn,
    concurrency: Option<usize>,
    log: &Path,
) -> Result<Function, String> {
    let mut env: Vec<(String, String)> = crate::coldstart::lambda_env("resq-consumer", "")
        .into_iter()
        // the SDK's global endpoint would stand for both; each service is given its own below
        .filter(|(k, _)| k != "AWS_ENDPOINT_URL")
        .collect();
    env.extend(
        [
            ("MAIN_QUEUE_URL", sqs.queue_url("resq-orders")),
            ("DLQ_URL", sqs.queue_url("resq-orders-dlq")),
            ("AWS_ENDPOINT_URL_SQS", sqs.endpoint.clone()),
            ("AWS_ENDPOINT_URL_S3", s3.endpoint.clone()),
            ("ARCHIVE_BUCKET", BUCKET.into()),
            ("AWS_LAMBDA_LOG_LEVEL", "INFO".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    if let Some(c) = concurrency {
        env.push(("CONSUMER_CONCURRENCY".into(), c.to_string()));
    }
    let _ = std::fs::remove_file(log);
    Function::new(
        "consumer",
        &o.consumer_bin,
        env,
        log,
        Duration::from_secs(300),
    )
    .map(|f| f.with_nofile_limit(NOFILE))
    .map_err(|e| e.to_string())
}

/// The warm-up's batch at most: enough to open [`CONCURRENCY_CAP`] connections, a fraction of
/// the largest batch's time at a pool of 10.
pub const WARM_UP_MAX: usize = 1000;

/// The events of one batch size: the warm-up's (at most [`WARM_UP_MAX`] records), then each
/// round's, each with `orderId`s of its own; every one within Lambda's 6 MB.
fn events(work: &Path, records: usize, rounds: usize) -> Result<Vec<PathBuf>, String> {
    (0..=rounds)
        .map(|k| {
            let n = if k == 0 {
                records.min(WARM_UP_MAX)
            } else {
                records
            };
            let built = event::valid_orders(n, &format!("n{records}-k{k}-"), 11);
            let bytes = serde_json::to_vec(&built.event).map_err(|e| e.to_string())?;
            if bytes.len() > MAX_PAYLOAD_BYTES {
                return Err(format!(
                    "{records} orders are {} bytes, over Lambda's {MAX_PAYLOAD_BYTES}",
                    bytes.len()
                ));
            }
            let path = work.join(format!("sqs-real-io-{records}-{k}.json"));
            std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// What one measured invocation saw.
struct Sample {
    invocation: Invocation,
    fds: usize,
    window: s3standin::Window,
}

fn measure(
    runner: &mut Runner,
    s3: &S3StandIn,
    event: &Path,
    rt: &tokio::runtime::Runtime,
) -> Result<Sample, String> {
    let pid = runner.pid().ok_or("the side's process is not running")?;
    s3.begin();
    let sampler = FdSampler::start(pid);
    let invocation = runner.invoke(event, rt);
    let fds = sampler.stop();
    let window = s3.end();
    Ok(Sample {
        invocation: invocation?,
        fds,
        window,
    })
}

/// The real-client comparison: every batch size in `o.io_real_batches`, then the throttling
/// run (unless `o.io_throttle_rate` is 0).
pub fn real_io(o: &Options) -> Result<RealIo, String> {
    std::fs::create_dir_all(&o.work).map_err(|e| format!("{}: {e}", o.work.display()))?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let latency = Duration::from_millis(o.io_latency_ms);
    let config = s3standin::Config {
        latency,
        slow_down_above: None,
    };
    let sqs = FakeSqs::start()?;
    let stand_ins = Side::ALL
        .iter()
        .map(|_| S3StandIn::start(config))
        .collect::<Result<Vec<_>, _>>()?;
    let rounds = o.io_real_rounds.max(1);
    let mut rows = Vec::new();
    for &n in &o.io_real_batches {
        let tuned = n.clamp(1, CONCURRENCY_CAP);
        let sides: Vec<Side> = Side::ALL
            .into_iter()
            .filter(|s| *s != Side::Boto3 || n <= o.io_sync_max)
            .collect();
        eprintln!(
            "bench: real clients, batch of {n} ({} ms per PUT, {rounds} rounds): {}",
            o.io_latency_ms,
            sides
                .iter()
                .map(|s| s.label(tuned))
                .collect::<Vec<_>>()
                .join("; ")
        );
        let paths = events(&o.work, n, rounds)?;
        let payload_bytes = std::fs::metadata(&paths[paths.len() - 1])
            .map(|m| m.len() as usize)
            .unwrap_or(0);
        let s3_of = |side: Side| &stand_ins[Side::ALL.iter().position(|s| *s == side).unwrap_or(0)];
        let mut runners = Vec::new();
        for &side in &sides {
            let s3 = s3_of(side);
            s3.clear();
            let runner = match side {
                Side::ResqDefault | Side::ResqTuned => {
                    let c = (side == Side::ResqTuned).then_some(tuned);
                    let log = log_path(&o.work, &format!("{n}-{side:?}"));
                    Runner::Resq(Box::new(resq_function(o, &sqs, s3, c, &log)?))
                }
                Side::AioDefault => Runner::Peer(Peer::start(o, "async", &s3.endpoint, "default")?),
                Side::AioTuned => {
                    Runner::Peer(Peer::start(o, "async", &s3.endpoint, &tuned.to_string())?)
                }
                Side::Boto3 => Runner::Peer(Peer::start(o, "sync", &s3.endpoint, "default")?),
            };
            runners.push((side, runner));
        }
        // the warm-up: the process started, its clients built, a first batch through them
        for (side, runner) in &mut runners {
            let out = runner.invoke(&paths[0], &rt)?;
            if out.failures != 0 || out.records != n.min(WARM_UP_MAX) {
                return Err(format!(
                    "{side:?}'s warm-up of {n}: {} of {} records reported failed",
                    out.failures, out.records
                ));
            }
        }
        let mut samples: Vec<Vec<Sample>> = runners.iter().map(|_| Vec::new()).collect();
        for (k, path) in paths.iter().enumerate().skip(1) {
            // interleaved, the order rotating, so drift on the machine hits every side alike
            let m = runners.len();
            for i in (0..m).map(|i| (i + k) % m) {
                let (side, runner) = &mut runners[i];
                let sample = measure(runner, s3_of(*side), path, &rt)?;
                if sample.invocation.records != n {
                    return Err(format!(
                        "{side:?} saw {} records of {n}",
                        sample.invocation.records
                    ));
                }
                // every orderId is new: each record's put writes (a 412 would be a cheaper call)
                let (written, found) = (sample.window.count(200), sample.window.count(412));
                if found != 0 || written + sample.invocation.failures < n {
                    return Err(format!(
                        "{side:?}, batch of {n}: {written} puts written, {found} found an object"
                    ));
                }
                samples[i].push(sample);
            }
        }
        let mut measured = Vec::new();
        for ((side, runner), samples) in runners.into_iter().zip(samples) {
            let mut walls: Vec<f64> = samples.iter().map(|s| s.invocation.wall).collect();
            let run = SideRun {
                side,
                wall: median(&mut walls),
                peak_fds: samples.iter().map(|s| s.fds).max().unwrap_or(0),
                peak_connections: samples
                    .iter()
                    .map(|s| s.window.peak_connections)
                    .max()
                    .unwrap_or(0),
                peak_puts_per_s: samples
                    .iter()
                    .map(|s| s.window.peak_puts_per_s())
                    .fold(0.0, f64::max),
                peak_rss_kb: runner.peak_rss_kb(),
                failures: samples.iter().map(|s| s.invocation.failures).sum(),
                retries: samples.iter().map(|s| s.invocation.retries).sum(),
            };
            if run.failures > 0 {
                eprintln!("  {side:?}: {} records reported failed", run.failures);
            }
            eprintln!(
                "  {}: {:.1} ms, {} fds, {} connections, {:.0} PUT/s, {:.1} MiB, {:?} retries",
                side.label(tuned),
                run.wall * 1000.0,
                run.peak_fds,
                run.peak_connections,
                run.peak_puts_per_s,
                run.peak_rss_kb as f64 / 1024.0,
                run.retries
            );
            runner.stop(&rt);
            measured.push(run);
        }
        for s in &stand_ins {
            s.clear();
        }
        rows.push(RealRow {
            records: n,
            payload_bytes,
            tuned,
            sides: measured,
        });
    }
    let throttle = match o.io_throttle_rate {
        r if r > 0.0 => Some(throttling(o, &sqs, latency, r, &rt)?),
        _ => None,
    };
    Ok(RealIo {
        latency: latency.as_secs_f64(),
        rows,
        throttle,
        rounds,
    })
}

/// resq at its default through a stand-in answering `503 SlowDown` above `rate` PUT/s: a
/// warm-up of 10 records, then one batch of `o.io_throttle_records`.
fn throttling(
    o: &Options,
    sqs: &FakeSqs,
    latency: Duration,
    rate: f64,
    rt: &tokio::runtime::Runtime,
) -> Result<ThrottleRun, String> {
    let n = o.io_throttle_records;
    eprintln!("bench: throttling, {n} records through resq at its default, 503 above {rate} PUT/s");
    let s3 = S3StandIn::start(s3standin::Config {
        latency,
        slow_down_above: Some(rate),
    })?;
    let log = log_path(&o.work, "throttle");
    let mut runner = Runner::Resq(Box::new(resq_function(o, sqs, &s3, None, &log)?));
    let warm = event::valid_orders(10, "throttle-warm-", 11);
    let warm_path = o.work.join("sqs-real-io-throttle-warm.json");
    let batch_path = o.work.join(format!("sqs-real-io-throttle-{n}.json"));
    let batch = event::valid_orders(n, "throttle-", 11);
    for (path, e) in [(&warm_path, &warm), (&batch_path, &batch)] {
        let bytes = serde_json::to_vec(&e.event).map_err(|e| e.to_string())?;
        std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    runner.invoke(&warm_path, rt)?;
    // let the bucket fill again after the warm-up
    std::thread::sleep(Duration::from_millis(200));
    let sample = measure(&mut runner, &s3, &batch_path, rt)?;
    let peak_rss_kb = runner.peak_rss_kb();
    runner.stop(rt);
    let done = std::fs::read_to_string(&log)
        .ok()
        .and_then(|text| batch_done(&text));
    let field = |k: &str| done.as_ref().and_then(|v| v[k].as_u64());
    let w = &sample.window;
    Ok(ThrottleRun {
        records: n,
        rate_limit: rate,
        wall: sample.invocation.wall,
        puts: w.puts_total(),
        slow_downs: w.count(503),
        peak_puts_per_s: w.peak_puts_per_s(),
        timeline: w.in_flight_timeline(),
        failures: sample.invocation.failures,
        peak_fds: sample.fds,
        peak_rss_kb,
        concurrency_lowest: field("concurrency_lowest"),
        throttles: field("throttles"),
    })
}

/// The last "batch done" line of a consumer's JSON log, its fields flattened (wherever the
/// formatter put them: at the top or under `fields`).
pub fn batch_done(log: &str) -> Option<Value> {
    let line = log
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["message"] == "batch done" || v["fields"]["message"] == "batch done")?;
    let mut flat = serde_json::Map::new();
    for source in [&line["fields"], &line] {
        if let Some(m) = source.as_object() {
            for (k, v) in m {
                flat.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    Some(Value::Object(flat))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(side: Side, wall: f64, fds: usize, rss_kb: u64) -> SideRun {
        SideRun {
            side,
            wall,
            peak_fds: fds,
            peak_connections: 0,
            peak_puts_per_s: 0.0,
            peak_rss_kb: rss_kb,
            failures: 0,
            retries: None,
        }
    }

    fn row(records: usize, walls: [f64; 5]) -> RealRow {
        RealRow {
            records,
            payload_bytes: records * 900,
            tuned: records.min(CONCURRENCY_CAP),
            sides: Side::ALL
                .into_iter()
                .zip(walls)
                .filter(|(_, w)| !w.is_nan())
                .map(|(s, w)| side(s, w, 20, 30 * 1024))
                .collect(),
        }
    }

    #[test]
    fn the_figures_take_the_worst_batch_size() {
        // walls: resq default, resq tuned, aiobotocore default, aiobotocore tuned, boto3
        let rows = vec![
            // 10 records: boto3 is slow, aiobotocore's default pool holds all 10
            row(10, [0.021, 0.021, 0.025, 0.025, 0.22]),
            // 1,000: boto3 not run; resq at 64 takes 16 × 20 ms = 0.32 s
            row(1000, [0.40, 0.05, 2.2, 0.5, f64::NAN]),
        ];
        let io = RealIo {
            latency: 0.02,
            rows,
            throttle: None,
            rounds: 3,
        };
        // the best peer at its defaults: 0.025 / 0.021 at 10, 2.2 / 0.40 at 1,000
        assert!((io.rows[0].vs_real_peer() - 0.025 / 0.021).abs() < 1e-9);
        assert!((io.rows[1].vs_real_peer() - 5.5).abs() < 1e-9);
        assert!((io.io_vs_real_peer() - 0.025 / 0.021).abs() < 1e-9);
        // tuned: 0.025 / 0.021 and 0.5 / 0.05
        assert!((io.io_vs_tuned_peer() - 0.025 / 0.021).abs() < 1e-9);
        // the limit at 64: ceil(10/64) × 20 ms = 20 ms; ceil(1000/64) × 20 ms = 320 ms
        assert!((io.rows[0].limit_efficiency(0.02) - 0.02 / 0.021).abs() < 1e-9);
        assert!((io.rows[1].limit_efficiency(0.02) - 0.8).abs() < 1e-9);
        assert!((io.io_limit_efficiency() - 0.8).abs() < 1e-9);
        let line = io.summary();
        assert!(line.contains("io_limit_efficiency=0.80"), "{line}");
    }

    #[test]
    fn the_best_peer_is_the_faster_of_those_measured() {
        // boto3 faster than aiobotocore's default pool (a batch of one)
        let one = row(1, [0.022, 0.022, 0.030, 0.030, 0.024]);
        assert!((one.vs_real_peer() - 0.024 / 0.022).abs() < 1e-9);
        // nothing to compare: NaN, and the worst over rows passes over it
        let empty = RealRow {
            records: 5,
            payload_bytes: 4500,
            tuned: 5,
            sides: vec![],
        };
        assert!(empty.vs_real_peer().is_nan());
        assert!(empty.vs_tuned_peer().is_nan());
        let io = RealIo {
            latency: 0.02,
            rows: vec![empty, one],
            throttle: None,
            rounds: 1,
        };
        assert!((io.io_vs_real_peer() - 0.024 / 0.022).abs() < 1e-9);
        let none = RealIo { rows: vec![], ..io };
        assert!(none.io_vs_real_peer().is_nan());
    }

    #[test]
    fn resqs_peaks_are_the_highest_of_its_runs_and_never_a_peers() {
        let mut rows = vec![row(10, [0.02; 5]), row(100, [0.05; 5])];
        rows[0].sides[0].peak_fds = 31;
        rows[1].sides[0].peak_fds = 140;
        rows[1].sides[0].peak_rss_kb = 40 * 1024 + 512;
        // the tuned runs hold a descriptor per record in flight by construction: not counted
        rows[1].sides[1].peak_fds = 910;
        rows[1].sides[1].peak_rss_kb = 120 * 1024;
        // a peer's descriptors and memory are not resq's
        rows[1].sides[3].peak_fds = 920;
        rows[1].sides[3].peak_rss_kb = 90 * 1024;
        let mut io = RealIo {
            latency: 0.02,
            rows,
            throttle: None,
            rounds: 3,
        };
        assert_eq!(io.peak_fds(), 140);
        assert!((io.worst_rss_mb() - 40.5).abs() < 1e-9);
        // the throttling run counts
        io.throttle = Some(ThrottleRun {
            records: 1000,
            rate_limit: 1000.0,
            wall: 1.0,
            puts: 1200,
            slow_downs: 200,
            peak_puts_per_s: 1500.0,
            timeline: vec![64, 40, 16],
            failures: 0,
            peak_fds: 150,
            peak_rss_kb: 10,
            concurrency_lowest: Some(16),
            throttles: Some(3),
        });
        assert_eq!(io.peak_fds(), 150);
        assert_eq!(io.throttle.as_ref().unwrap().first_and_last(), (64, 16));
        assert!(io.summary().contains("peak_fds=150 worst_rss_mb=40.5"));
        assert!(io.table().contains("concurrency_lowest 16, throttles 3"));
    }

    #[test]
    fn the_batch_done_line_is_read_wherever_its_fields_are() {
        let log = [
            r#"{"level":"INFO","message":"batch done","records":10}"#,
            "not json",
            r#"{"level":"INFO","fields":{"message":"batch done","records":1000,"concurrency_lowest":16,"throttles":4}}"#,
            r#"{"level":"WARN","message":"something else"}"#,
        ]
        .join("\n");
        let done = batch_done(&log).unwrap();
        assert_eq!(done["records"], 1000);
        assert_eq!(done["concurrency_lowest"], 16);
        assert_eq!(done["throttles"], 4);
        let old = r#"{"level":"INFO","message":"batch done","records":10}"#;
        assert_eq!(batch_done(old).unwrap()["throttles"], Value::Null);
        assert!(batch_done("{}").is_none());
    }
}
