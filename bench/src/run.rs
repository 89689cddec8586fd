//! `make bench`: every measurement in one interleaved run, a table, `bench/RESULTS.md`, and the
//! summary line. Absolute times on a shared machine are noise; ratios from one run are not.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::child::Design;
use crate::coldstart;
use crate::cost;
use crate::event;
use crate::fakesqs::FakeSqs;
use crate::function::{self, FunctionRun};
use crate::measured::{self, median};
use crate::options::Options;
use crate::proxy::{CountingProxy, Request, achieved, breakdown, counted};
use crate::queues::{create_queue, depth, seed, seed_stand_in};
use crate::scale;

/// A replay rate that does not bind in the throughput comparison (resq's maximum).
pub const UNBOUND_RATE: f64 = resq_redriver::config::MAX_RATE_PER_SECOND;

/// One batch size of the I/O-bound comparison: median batch wall times in seconds.
#[derive(Debug, Clone)]
pub struct IoRow {
    /// Records in the batch.
    pub records: usize,
    /// FIFO: the message groups the records are dealt over (`None`: a standard queue).
    pub groups: Option<usize>,
    /// The effect's latency per order, s.
    pub latency: f64,
    /// resq's default `CONSUMER_CONCURRENCY`.
    pub default_concurrency: usize,
    /// resq at its default concurrency.
    pub resq_default: f64,
    /// resq with as many records at once as asyncio runs (all of them).
    pub resq_equal: f64,
    /// Powertools `BatchProcessor` (sequential); for FIFO, `SqsFifoPartialProcessor`
    /// (sequential, Powertools' FIFO processor).
    pub pt_sync: f64,
    /// Powertools `AsyncBatchProcessor` (asyncio, unbounded); NaN for FIFO, which it does not
    /// keep in order.
    pub pt_async: f64,
}

impl IoRow {
    /// The least time any engine can take: `ceil(records / concurrency) × latency`; FIFO, where
    /// a group's records run one after another: `ceil(groups / concurrency) × the longest
    /// group × latency`.
    pub fn limit(&self, concurrency: usize) -> f64 {
        let (lanes, lane_len) = match self.groups {
            None => (self.records, 1),
            Some(g) => {
                let g = g.clamp(1, self.records.max(1));
                (g, self.records.div_ceil(g))
            }
        };
        (lanes.div_ceil(concurrency.max(1)) * lane_len) as f64 * self.latency
    }
    /// The limit at resq's default concurrency ÷ resq's time there.
    pub fn efficiency(&self) -> f64 {
        self.limit(self.default_concurrency) / self.resq_default
    }
    /// Powertools `BatchProcessor` ÷ resq at its default.
    pub fn speedup(&self) -> f64 {
        self.pt_sync / self.resq_default
    }
    /// The faster Powertools processor ÷ resq, at equal downstream concurrency (`f64::min`
    /// passes over a FIFO row's NaN).
    pub fn vs_best_peer(&self) -> f64 {
        self.pt_sync.min(self.pt_async) / self.resq_equal
    }
    /// The faster Powertools processor ÷ resq at its default concurrency.
    pub fn default_vs_best_peer(&self) -> f64 {
        self.pt_sync.min(self.pt_async) / self.resq_default
    }
}

/// The worst of `f` over the rows (NaN when there are none).
#[cfg(test)]
fn worst(rows: &[IoRow], f: impl Fn(&IoRow) -> f64) -> f64 {
    rows.iter().map(f).reduce(f64::min).unwrap_or(f64::NAN)
}

/// Everything measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Records per second of the batch engine alone (the event already parsed, as the Lambda
    /// runtime hands it over), median of the rounds: (resq, Powertools).
    pub consumer_rps: (f64, f64),
    /// Records per second of the whole invocation (the event's JSON parse, the batch, the
    /// response's JSON), median of the rounds: (resq, Powertools).
    pub invocation_rps: (f64, f64),
    /// Records per second of the batch engine, the slowest and fastest warm invocation:
    /// ((resq min, max), (Powertools min, max)).
    pub consumer_rps_range: ((f64, f64), (f64, f64)),
    /// Warm invocations measured per side.
    pub consumer_warm_invocations: usize,
    /// Peak RSS in KiB after one invocation, highest of the rounds: (resq, Powertools).
    pub consumer_rss_kb: (u64, u64),
    /// Records in the event, and how many each rejected.
    pub records: usize,
    /// Wall seconds to redrive all messages: (resq, baseline).
    pub redrive_seconds: (f64, f64),
    /// SQS requests counted by the proxy: (resq, baseline), and their breakdown.
    pub redrive_requests: (usize, usize),
    /// `action=count` lists: (resq, baseline).
    pub redrive_breakdown: (String, String),
    /// Messages moto handed to two receives at once, so replayed twice: (resq, baseline).
    pub redrive_duplicates: (usize, usize),
    /// Messages each redrove.
    pub redriven: usize,
    /// (configured, resq achieved, baseline achieved), on the stand-in SQS.
    pub rates: Vec<(f64, f64, f64)>,
    /// The same on LocalStack's SQS, through the counting proxy.
    pub rates_localstack: Vec<(f64, f64, f64)>,
    /// The redriver at scale: pipelined against sequential, on the stand-in SQS with latency
    /// and on LocalStack.
    pub scale: crate::scale::Scale,
    /// The redriver against an SQS slowing under load: its pipeline that backs off beside the
    /// fixed one.
    pub slow_sqs: crate::slowsqs::SlowSqs,
    /// The redriver as deployed: the release binary under its memory size's CPU quota.
    pub deployed: crate::deployed::Deployed,
    /// Zip sizes in bytes: (consumer, redriver).
    pub zip_bytes: (u64, u64),
    /// Median init in ms, as deployed (`SSL_CERT_FILE` set): (consumer, redriver).
    pub init_ms: (f64, f64),
    /// Median init in ms without `SSL_CERT_FILE` (the platform probe): (consumer, redriver).
    pub init_before_ms: (f64, f64),
    /// Cold starts per function.
    pub coldstart_runs: usize,
    /// The sleep-only I/O-bound comparison (an upper bound), one row per batch size.
    pub io: Vec<IoRow>,
    /// The real-client I/O comparison (S3 stand-in, real clients, Lambda's descriptor limit).
    pub real_io: crate::realio::RealIo,
    /// The fleet against one S3 prefix (`fleet_goodput_ratio`, the 503 share).
    pub fleet: crate::fleet::Fleet,
    /// Records per second of the bare parse-and-validate loop, median of the rounds.
    pub bare_rps: f64,
    /// The consumer function run as Lambda runs it: on the consumer event, and on the largest
    /// payload Lambda delivers.
    pub function: Vec<FunctionRun>,
    /// Cost per million orders, resq against the seed design.
    pub cost: cost::Comparison,
    /// Unit prices: resq's own cost per million healthy orders, per failure, an outage.
    pub unit: cost::UnitPrices,
    /// The function's peak on a 6 MB payload whose every record is rejected.
    pub rejected_6mb: FunctionRun,
    /// The I/O-bound batch at each memory size's CPU share.
    pub sizes: function::Sizes,
    /// When and where.
    pub machine: String,
    /// When.
    pub date: String,
}

impl Report {
    /// Powertools' records/s → resq's, as a factor.
    pub fn consumer_speedup(&self) -> f64 {
        self.consumer_rps.0 / self.consumer_rps.1
    }
    /// Powertools' RSS over resq's.
    pub fn consumer_rss_ratio(&self) -> f64 {
        self.consumer_rss_kb.1 as f64 / self.consumer_rss_kb.0 as f64
    }
    /// Baseline wall time over resq's.
    pub fn redrive_speedup(&self) -> f64 {
        self.redrive_seconds.1 / self.redrive_seconds.0
    }
    /// SQS requests per redriven message: (resq, baseline).
    pub fn requests_per_msg(&self) -> (f64, f64) {
        let n = self.redriven as f64;
        (
            self.redrive_requests.0 as f64 / n,
            self.redrive_requests.1 as f64 / n,
        )
    }
    /// The worst |achieved − configured| / configured of resq on the stand-in SQS, in %.
    pub fn rate_error_pct(&self) -> f64 {
        worst_rate_error(&self.rates)
    }
    /// The same on LocalStack.
    pub fn rate_error_pct_localstack(&self) -> f64 {
        worst_rate_error(&self.rates_localstack)
    }
    /// Bare loop time ÷ engine time per record (CPU only).
    pub fn engine_efficiency(&self) -> f64 {
        self.consumer_rps.0 / self.bare_rps
    }
    /// The slower function's median init.
    pub fn init_ms_worst(&self) -> f64 {
        self.init_ms.0.max(self.init_ms.1)
    }

    /// The last line `make bench` prints.
    pub fn summary_line(&self) -> String {
        let (_, base_rpm) = self.requests_per_msg();
        format!(
            "bench: consumer_speedup={:.1} redrive_speedup={:.1} redrive_requests_per_msg_depth={:.3} baseline_requests_per_msg={:.3} rate_error_pct={:.2} zip_kb_consumer={} zip_kb_redriver={} init_ms={:.1} {} engine_efficiency={:.2} unit_cost_per_m_healthy={:.4} rejected_6mb_rss_mb={:.1} rate_error_pct_localstack={:.2} redrive_msgs_per_s={:.0} drain_1m_minutes={:.1} outage_cost_ratio={:.2} {} redrive_msgs_per_s_deployed={:.0} redrive_unconfirmed_per_1000={:.2}",
            self.consumer_speedup(),
            self.redrive_speedup(),
            self.scale.requests_per_msg_depth(),
            base_rpm,
            self.rate_error_pct(),
            self.zip_bytes.0 / 1024,
            self.zip_bytes.1 / 1024,
            self.init_ms_worst(),
            // the sleep-only rows' io_efficiency, io_speedup and io_vs_best_peer are left out:
            // with no socket they come down to min(records, concurrency)
            self.real_io.summary(),
            self.engine_efficiency(),
            self.unit.unit_cost_per_m_healthy(),
            self.rejected_6mb.peak_mb(),
            self.rate_error_pct_localstack(),
            self.scale.msgs_per_s(),
            self.scale.drain_1m_minutes(),
            self.unit.outage_cost_ratio(),
            self.fleet.summary(),
            self.deployed.msgs_per_s(),
            self.slow_sqs.unconfirmed_per_1000(),
        )
    }

    /// The redriver's rate against SQS's latency (the chart): one series per design, (median
    /// latency of a call alone, ms; messages/s).
    pub fn redrive_rate_vs_latency(&self) -> Vec<(String, Vec<(f64, f64)>)> {
        self.slow_sqs.series()
    }

    /// The results as a Markdown table (also what stdout shows).
    pub fn table(&self) -> String {
        let (resq_rpm, base_rpm) = self.requests_per_msg();
        let cost = |rpm: f64| rpm * cost::SQS_REQUEST * 1e6;
        let mib = |kb: u64| kb as f64 / 1024.0;
        let mut t = String::new();
        t.push_str("| measure | resq | alternative | ratio | target |\n|---|---:|---:|---:|---|\n");
        let mut row = |m: &str, a: String, b: String, r: String, target: &str| {
            t.push_str(&format!("| {m} | {a} | {b} | {r} | {target} |\n"));
        };
        row(
            &format!(
                "consumer: records/s of the batch engine, {}-record event (≤ 6 MB), warm: median (min–max) of {} invocations (alt = Powertools BatchProcessor + process_partial_response)",
                self.records, self.consumer_warm_invocations
            ),
            format!(
                "{:.0} ({:.0}–{:.0})",
                self.consumer_rps.0, self.consumer_rps_range.0.0, self.consumer_rps_range.0.1
            ),
            format!(
                "{:.0} ({:.0}–{:.0})",
                self.consumer_rps.1, self.consumer_rps_range.1.0, self.consumer_rps_range.1.1
            ),
            format!("{:.1}×", self.consumer_speedup()),
            "",
        );
        row(
            "consumer: records/s of the whole invocation (event JSON parse + batch + response)",
            format!("{:.0}", self.invocation_rps.0),
            format!("{:.0}", self.invocation_rps.1),
            format!("{:.1}×", self.invocation_rps.0 / self.invocation_rps.1),
            "",
        );
        row(
            "consumer: records/s of a bare loop (parse + validate, no engine) / engine_efficiency",
            format!("{:.0}", self.bare_rps),
            "".into(),
            format!("{:.2}", self.engine_efficiency()),
            "≥ 0.5",
        );
        row(
            "consumer: peak RSS of the engine's process after one invocation, MiB (information: not the function's memory, see the rows as Lambda runs it)",
            format!("{:.1}", mib(self.consumer_rss_kb.0)),
            format!("{:.1}", mib(self.consumer_rss_kb.1)),
            format!("{:.1}× less", self.consumer_rss_ratio()),
            "",
        );
        row(
            &format!(
                "redrive: wall time for {} messages, s (alt = boto3 send_message loop)",
                self.redriven
            ),
            format!("{:.2}", self.redrive_seconds.0),
            format!("{:.2}", self.redrive_seconds.1),
            format!("{:.1}× faster", self.redrive_speedup()),
            "",
        );
        row(
            &format!(
                "redrive: SQS requests per redriven message (counted; information: moto's trickle-fed DLQ, about {FEED_DEPTH} waiting, receives without a long poll; the goal is on `redrive_requests_per_msg_depth`, below)"
            ),
            format!("{resq_rpm:.3}"),
            format!("{base_rpm:.3}"),
            format!("{:.1}× fewer", base_rpm / resq_rpm),
            "",
        );
        row(
            "redrive: messages moto handed to two receives at once, so replayed twice (its ReceiveMessage takes no lock)",
            self.redrive_duplicates.0.to_string(),
            self.redrive_duplicates.1.to_string(),
            "".into(),
            "",
        );
        row(
            "redrive: request cost per million redriven messages, $",
            format!("{:.3}", cost(resq_rpm)),
            format!("{:.3}", cost(base_rpm)),
            "".into(),
            "",
        );
        row(
            "redrive: requests by action",
            self.redrive_breakdown.0.clone(),
            self.redrive_breakdown.1.clone(),
            "".into(),
            "",
        );
        let rate_rows = self
            .rates
            .iter()
            .map(|r| (r, "the stand-in SQS", "resq within ±5 %"))
            .chain(
                self.rates_localstack
                    .iter()
                    .map(|r| (r, "LocalStack's SQS", "resq within ±1 %")),
            );
        for ((configured, resq, base), on, target) in rate_rows {
            row(
                &format!("rate {configured}/s: achieved between sends (error), on {on}"),
                format!(
                    "{resq:.2}/s ({:+.2} %)",
                    (resq - configured) / configured * 100.0
                ),
                format!(
                    "{base:.2}/s ({:+.2} %)",
                    (base - configured) / configured * 100.0
                ),
                "".into(),
                target,
            );
        }
        for [m, a, b, r, target] in self.scale.rows() {
            row(&m, a, b, r, &target);
        }
        for [m, a, b, r, target] in self.fleet.rows() {
            row(&m, a, b, r, &target);
        }
        row(
            "zip, consumer / redriver, KiB (arm64, `cargo lambda build --release --arm64 --output-format zip`)",
            format!("{} / {}", self.zip_bytes.0 / 1024, self.zip_bytes.1 / 1024),
            "".into(),
            "".into(),
            "≤ 4096 each",
        );
        row(
            &format!(
                "init to first `invocation/next`, consumer / redriver, ms (median of {}), SSL_CERT_FILE set as deployed (alt = without it: rustls-native-certs probes the bundle and scans the certificate directories)",
                self.coldstart_runs
            ),
            format!("{:.1} / {:.1}", self.init_ms.0, self.init_ms.1),
            format!(
                "{:.1} / {:.1}",
                self.init_before_ms.0, self.init_before_ms.1
            ),
            "".into(),
            "≤ 20",
        );
        let r = &self.rejected_6mb;
        row(
            &format!(
                "consumer function as Lambda runs it: peak RSS on {} records in {:.1} MB, every one rejected (its DLQ copy held until settle), a cold and a warm invocation (`rejected_6mb_rss_mb`, MB)",
                r.records,
                r.payload_bytes as f64 / 1e6
            ),
            format!("{:.1}", r.peak_mb()),
            "".into(),
            "".into(),
            "≤ 102 (128 MB with 20 % to spare)",
        );
        for line in sizes_rows(&self.sizes) {
            row(&line[0], line[1].clone(), "".into(), "".into(), &line[2]);
        }
        for f in &self.function {
            row(
                &format!(
                    "consumer function as Lambda runs it (release binary, runtime API, SDK clients, JSON logs): peak RSS, {} records in {:.1} MB; smallest memory size with 25 % headroom",
                    f.records,
                    f.payload_bytes as f64 / 1e6
                ),
                format!(
                    "{:.1} MiB; {} MB",
                    mib(f.peak_kb),
                    f.smallest_memory_mb(0.25)
                ),
                "".into(),
                "".into(),
                "",
            );
        }
        t.push('\n');
        t.push_str(&self.real_io.table());
        t.push('\n');
        t.push_str(&io_table(&self.io));
        t.push_str(
            "\nThe redriver against an SQS slowing under load (`bench/src/slowsqs.rs`):\n\n",
        );
        t.push_str(&self.slow_sqs.table());
        for (series, points) in self.redrive_rate_vs_latency() {
            let points: Vec<String> = points
                .iter()
                .map(|(ms, rate)| format!("{ms:.0} ms → {rate:.0}/s"))
                .collect();
            t.push_str(&format!("\n{series}: {}", points.join(", ")));
        }
        t.push('\n');
        t.push_str("\nThe redriver as deployed (`bench/src/deployed.rs`):\n\n");
        t.push_str(&self.deployed.table());
        t.push_str(&self.deployed.statement());
        t.push_str(&format!(
            "\nCost per million orders at {:.0} % permanent and {:.0} % transient failures (`bench/src/cost.rs`):\n\n",
            PERMANENT_SHARE * 100.0,
            TRANSIENT_SHARE * 100.0
        ));
        t.push_str(&self.cost.table());
        t.push('\n');
        t.push_str(&self.cost.statement());
        t.push('\n');
        t.push_str("\nUnit prices (`bench/src/cost.rs`, `UnitPrices`):\n\n");
        t.push_str(&self.unit.table());
        t
    }
}

/// The memory-size sweep's table rows: [measure, resq, target].
pub fn sizes_rows(sizes: &function::Sizes) -> Vec<[String; 3]> {
    let what = format!(
        "consumer function, I/O-bound batch ({} valid orders, S3 puts answered after {} ms), warm, CPU quota of Lambda's share (cgroup)",
        sizes.records, sizes.latency_ms
    );
    if let Some(why) = &sizes.skipped {
        return vec![[what, format!("skipped: {why}"), String::new()]];
    }
    let mut rows: Vec<[String; 3]> = sizes
        .rows
        .iter()
        .map(|r| {
            let (lo, hi) = r.range_ms();
            [
                format!(
                    "{what}: {} MB ({:.1} ms CPU per 100 ms), median (min–max) ms; periods throttled",
                    r.memory_mb,
                    r.quota_us as f64 / 1000.0
                ),
                format!(
                    "{:.1} ({lo:.1}–{hi:.1}); {}",
                    r.median_ms(),
                    r.throttled_periods
                ),
                String::new(),
            ]
        })
        .collect();
    rows.push([
        format!("{what}: smallest memory size within 5 % of a full vCPU (1,769 MB)"),
        sizes
            .smallest_within(function::SLOWDOWN_TOLERANCE)
            .map_or("–".into(), |mb| format!("{mb} MB")),
        "the template's ConsumerMemorySize default".into(),
    ]);
    rows
}

/// The I/O-bound comparison as a Markdown table.
pub fn io_table(rows: &[IoRow]) -> String {
    let ms = |s: f64| {
        if s.is_nan() {
            "–".to_owned()
        } else {
            format!("{:.1}", s * 1000.0)
        }
    };
    let mut t = String::from(
        "Sleep-only rows, an upper bound no real client reaches: each record's effect is a 20 ms timer in the process (`tokio::time::sleep`, `time.sleep`, `asyncio.sleep`), no socket, no connection pool, no descriptor; information only (their ratios come down to min(records, concurrency)):\n\n| records × effect | limit at the default concurrency, ms | resq, default concurrency, ms | resq, all at once, ms | Powertools BatchProcessor (FIFO: SqsFifoPartialProcessor), ms | Powertools AsyncBatchProcessor, ms | io_efficiency | io_speedup | io_vs_best_peer, all at once | best peer ÷ resq at the default |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        t.push_str(&format!(
            "| {} × {:.0} ms{} (default concurrency {}) | {} | {} | {} | {} | {} | {:.2} | {:.1} | {:.2} | {:.2} |\n",
            r.records,
            r.latency * 1000.0,
            r.groups
                .map(|g| format!(", FIFO in {g} groups"))
                .unwrap_or_default(),
            r.default_concurrency,
            ms(r.limit(r.default_concurrency)),
            ms(r.resq_default),
            ms(r.resq_equal),
            ms(r.pt_sync),
            ms(r.pt_async),
            r.efficiency(),
            r.speedup(),
            r.vs_best_peer(),
            r.default_vs_best_peer(),
        ));
    }
    t
}

/// The I/O-bound comparison: for each batch size, an event of valid orders (the effect runs
/// for every record), each side in its own process, rounds interleaved; medians.
pub fn io(o: &Options) -> Result<Vec<IoRow>, String> {
    std::fs::create_dir_all(&o.work).map_err(|e| format!("{}: {e}", o.work.display()))?;
    let mut rows = Vec::new();
    for &n in &o.io_batches {
        eprintln!(
            "bench: I/O-bound batch of {n}, {} ms per order, {} rounds",
            o.io_latency_ms, o.io_rounds
        );
        let built = event::sqs_event(n, 0.0, 7);
        let path = o.work.join(format!("sqs-io-{n}.json"));
        rows.push(io_row(o, &built, &path, None)?);
    }
    for &g in &o.io_fifo_groups {
        let n = FIFO_BATCH;
        eprintln!(
            "bench: I/O-bound FIFO batch of {n} in {g} groups, {} ms per order, {} rounds",
            o.io_latency_ms, o.io_rounds
        );
        let built = event::sqs_fifo_event(n, g, 7);
        let path = o.work.join(format!("sqs-io-fifo-{n}-{g}.json"));
        rows.push(io_row(o, &built, &path, Some(g))?);
    }
    Ok(rows)
}

/// Lambda's largest batch from a FIFO queue (and the template's for `QueueType: fifo`).
const FIFO_BATCH: usize = 10;

/// One row of the I/O-bound comparison: resq at its default concurrency and with every record
/// at once, Powertools' sequential processor and (standard queues) its asyncio one, in
/// interleaved rounds; medians of the batch's wall time.
fn io_row(
    o: &Options,
    built: &event::BenchEvent,
    path: &Path,
    groups: Option<usize>,
) -> Result<IoRow, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let latency_ms = o.io_latency_ms.to_string();
    let n = built.event["Records"].as_array().map_or(0, Vec::len);
    let bytes = serde_json::to_vec(&built.event).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let resq = |concurrency: Option<usize>| {
        let mut cmd = Command::new(&me);
        cmd.arg("consumer-io").arg(path).arg(&latency_ms);
        if let Some(c) = concurrency {
            cmd.arg(c.to_string());
        }
        measured::run(&mut cmd)
    };
    let pt = |mode: &str| {
        measured::run(
            Command::new(&o.python)
                .arg(o.scripts.join("powertools_io.py"))
                .arg(path)
                .arg(&latency_ms)
                .arg(mode),
        )
    };
    let (mut d, mut e, mut s, mut a) = (vec![], vec![], vec![], vec![]);
    let mut default_concurrency = 0;
    for _ in 0..o.io_rounds.max(1) {
        let mut out = vec![resq(None)?, resq(Some(n))?];
        if groups.is_some() {
            out.push(pt("fifo")?);
        } else {
            out.push(pt("sync")?);
            out.push(pt("async")?);
        }
        for v in &out {
            let count = |k: &str| v[k].as_u64().unwrap_or(u64::MAX) as usize;
            if count("records") != n || count("failures") != 0 {
                return Err(format!("not every record of {n} succeeded: {v}"));
            }
        }
        default_concurrency = out[0]["concurrency"].as_u64().unwrap_or(0) as usize;
        for (sink, v) in [&mut d, &mut e, &mut s, &mut a].into_iter().zip(&out) {
            sink.push(seconds(&v["batch_seconds"])?);
        }
    }
    Ok(IoRow {
        records: n,
        groups,
        latency: o.io_latency_ms as f64 / 1000.0,
        default_concurrency,
        resq_default: median(&mut d),
        resq_equal: median(&mut e),
        pt_sync: median(&mut s),
        pt_async: if a.is_empty() {
            f64::NAN
        } else {
            median(&mut a)
        },
    })
}

/// Runs everything, in order: consumer, redrive, rates, zips, cold start.
pub fn run(o: &Options) -> Result<Report, String> {
    std::fs::create_dir_all(&o.work).map_err(|e| format!("{}: {e}", o.work.display()))?;
    let date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string();
    eprintln!(
        "bench: consumer, {} records, {} rounds",
        o.records, o.rounds
    );
    let figures = consumer(o)?;
    let io = io(o)?;
    let real_io = crate::realio::real_io(o)?;
    let fleet = crate::fleet::fleet(o, None)?;

    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let moto = resq_local::emulator::MotoServer::start(&o.moto).map_err(|e| e.to_string())?;
    let (proxy, sqs) = counted(&moto.endpoint, &rt)?;
    let env = Env {
        o,
        endpoint: moto.endpoint.clone(),
        feed_depth: FEED_DEPTH,
        rt: &rt,
        sqs: &sqs,
        proxy: &proxy,
    };

    eprintln!("bench: redrive, {} messages each", o.redrive_messages);
    let redrive = env.redrive()?;
    drop(moto);
    let stand_in = FakeSqs::start()?;
    let mut rates = Vec::new();
    for &rate in &o.rates {
        eprintln!("bench: rate {rate}/s");
        let n = ((rate * o.rate_seconds).round() as usize).max(20);
        let resq = achieved_rate(o, &stand_in, Impl::Resq, rate, n)?;
        let base = achieved_rate(o, &stand_in, Impl::Baseline, rate, n)?;
        rates.push((rate, resq, base));
    }
    drop(stand_in);
    let (scale_stand_in_latency, scale_designs) = scale::stand_in(o)?;
    eprintln!("bench: LocalStack (starting it)");
    let localstack =
        resq_local::emulator::LocalStack::start(&o.localstack_python).map_err(|e| e.to_string())?;
    let rates_localstack = localstack_rates(o, &localstack, &rt)?;
    let scale = scale::Scale {
        latency: scale_stand_in_latency,
        designs: scale_designs,
        localstack: scale::localstack(o, &localstack, &rt)?,
    };
    drop(localstack);
    let slow_sqs = crate::slowsqs::measure(
        o.slow_sqs_messages,
        &o.slow_sqs_medians_ms,
        o.slow_sqs_chart_messages,
    )?;
    let deployed = crate::deployed::measure(&o.redriver_bin, &crate::deployed::SIZES_MB, 1.0)?;

    let zip = |f: &str| {
        let p = o.zips.join(f).join("bootstrap.zip");
        std::fs::metadata(&p)
            .map(|m| m.len())
            .map_err(|e| format!("{}: {e} (make bench builds it first)", p.display()))
    };
    let zip_bytes = (zip("consumer")?, zip("redriver")?);

    eprintln!("bench: the consumer function's memory, as Lambda runs it");
    let function = vec![function::consumer_peak(&o.consumer_bin, &figures.event, 1)?];
    let rejected_6mb = function::rejected_6mb_peak(&o.consumer_bin, &o.work)?;
    eprintln!("bench: the I/O-bound batch at each memory size's CPU share");
    let sizes = function::memory_sizes(
        &o.consumer_bin,
        &function::SWEEP_MB,
        100,
        o.io_latency_ms,
        SIZE_ROUNDS,
    )?;
    let (log_bytes, _) = function::log_bytes_per_invocation(&o.consumer_bin, 10, 20)?;

    eprintln!(
        "bench: cold start, {} runs each, without and with SSL_CERT_FILE",
        o.coldstart_runs
    );
    let consumer_init =
        coldstart::before_after(&o.consumer_bin, "resq-consumer", o.coldstart_runs)?;
    let redriver_init =
        coldstart::before_after(&o.redriver_bin, "resq-redriver", o.coldstart_runs)?;

    let measured = cost_inputs(&io, &redrive, scale.requests_per_msg_depth())?;
    let template = cost::Template::deployed()?;
    let cost = cost::per_million(
        &measured,
        &template,
        &cost::Assumptions::DEFAULT,
        PERMANENT_SHARE,
        TRANSIENT_SHARE,
    );
    let unit = cost::UnitPrices::new(
        &measured,
        &cost::UnitMeasured {
            extra_cpu_us_per_record: 1e6 / figures.batch_rps.0 - 1e6 / figures.bare_rps,
            log_bytes_per_invocation: log_bytes,
        },
        &template,
        PERMANENT_SHARE,
        crate::outage::OutageProfile::read(&o.outage_profile)?.as_ref(),
    );
    Ok(Report {
        consumer_rps: figures.batch_rps,
        consumer_rps_range: figures.batch_rps_range,
        consumer_warm_invocations: figures.warm_invocations,
        invocation_rps: figures.invocation_rps,
        consumer_rss_kb: figures.rss_kb,
        records: figures.records,
        init_before_ms: (consumer_init.0, redriver_init.0),
        unit,
        rejected_6mb,
        sizes,
        redrive_seconds: redrive.seconds,
        redrive_requests: redrive.requests,
        redrive_breakdown: redrive.breakdown,
        redrive_duplicates: redrive.duplicates,
        redriven: redrive.messages,
        rates,
        rates_localstack,
        scale,
        slow_sqs,
        deployed,
        zip_bytes,
        init_ms: (consumer_init.1, redriver_init.1),
        coldstart_runs: o.coldstart_runs,
        io,
        real_io,
        fleet,
        bare_rps: figures.bare_rps,
        cost,
        function,
        machine: machine(),
        date,
    })
}

/// Warm invocations per memory size in the sweep.
pub const SIZE_ROUNDS: usize = 7;

/// The failure shares the cost table is for (issue 15: 1 % permanent, 5 % transient).
const PERMANENT_SHARE: f64 = 0.01;
const TRANSIENT_SHARE: f64 = 0.05;

/// The cost model's measured inputs: the 10-record I/O-bound batch (resq at its default
/// concurrency, Powertools `BatchProcessor`), the redrive run, and resq's requests per
/// message on a DLQ with depth (`redrive_requests_per_msg_depth`: a DLQ being drained has
/// depth; moto's trickle-fed figure does not price it).
fn cost_inputs(
    io: &[IoRow],
    redrive: &Redrive,
    resq_requests_per_redrive: f64,
) -> Result<cost::Measured, String> {
    let batch = io
        .iter()
        .find(|r| r.records == 10 && r.groups.is_none())
        .ok_or("the cost table needs the I/O-bound batch of 10 (--io-batches)")?;
    let per_message = |s: f64| s * 1000.0 / redrive.messages as f64;
    Ok(cost::Measured {
        resq_batch_ms: batch.resq_default * 1000.0,
        seed_batch_ms: batch.pt_sync * 1000.0,
        resq_requests_per_redrive,
        seed_requests_per_redrive: redrive.requests.1 as f64 / redrive.messages as f64,
        resq_redrive_ms: per_message(redrive.seconds.0),
        seed_redrive_ms: per_message(redrive.seconds.1),
    })
}

type Pair<T> = (T, T);

/// The consumer comparison's figures: (resq, Powertools) each.
struct ConsumerFigures {
    batch_rps: Pair<f64>,
    batch_rps_range: Pair<(f64, f64)>,
    invocation_rps: Pair<f64>,
    rss_kb: Pair<u64>,
    bare_rps: f64,
    records: usize,
    warm_invocations: usize,
    /// The event file.
    event: PathBuf,
}

/// The consumer event: `records` orders, or (0) as many as fit in Lambda's 6 MB; 5 %
/// malformed or invalid, from a fixed seed.
fn consumer_event(o: &Options) -> Result<(event::BenchEvent, Vec<u8>), String> {
    match o.records {
        0 => event::largest_within(function::MAX_PAYLOAD_BYTES, |n| {
            event::sqs_event(n, 5.0, 42)
        }),
        n => {
            let e = event::sqs_event(n, 5.0, 42);
            let bytes = serde_json::to_vec(&e.event).map_err(|e| e.to_string())?;
            Ok((e, bytes))
        }
    }
}

/// Seconds per invocation in a child's JSON (`key` holds a list), the warm-up (the first)
/// left out.
fn warm_seconds(v: &Value, key: &str) -> Result<Vec<f64>, String> {
    let all = v[key]
        .as_array()
        .ok_or_else(|| format!("no {key} list in {v}"))?
        .iter()
        .map(seconds)
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(all.into_iter().skip(1).collect())
}

/// (min, max) of `values`.
fn range(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        })
}

fn consumer(o: &Options) -> Result<ConsumerFigures, String> {
    let (built, bytes) = consumer_event(o)?;
    let records = built.event["Records"].as_array().map_or(0, Vec::len);
    let path = o.work.join(format!("sqs-event-{records}.json"));
    std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let invocations = o.consumer_invocations.max(2).to_string();
    let (mut resq_rps, mut pt_rps) = (Vec::new(), Vec::new());
    let (mut resq_inv, mut pt_inv) = (Vec::new(), Vec::new());
    let (mut resq_rss, mut pt_rss) = (0, 0);
    let mut bare = Vec::new();
    for round in 0..o.rounds.max(1) {
        let resq_run = || {
            measured::run(
                Command::new(&me)
                    .arg("consumer-warm")
                    .arg(&path)
                    .arg(&invocations),
            )
        };
        let pt_run = || {
            measured::run(
                Command::new(&o.python)
                    .arg(o.scripts.join("powertools_consumer.py"))
                    .arg(&path)
                    .arg(&invocations),
            )
        };
        // Interleaved, the order alternating, so drift on the machine hits both alike.
        let (rj, pj) = if round % 2 == 0 {
            let r = resq_run()?;
            (r, pt_run()?)
        } else {
            let p = pt_run()?;
            (resq_run()?, p)
        };
        check_same_work(&rj, &pj, records, built.rejected)?;
        let per_second = |v: &Value, key: &str| -> Result<Vec<f64>, String> {
            Ok(warm_seconds(v, key)?
                .into_iter()
                .map(|s| records as f64 / s)
                .collect())
        };
        let (r, p) = (
            per_second(&rj, "batch_seconds")?,
            per_second(&pj, "batch_seconds")?,
        );
        eprintln!(
            "  round {}: resq {:.0} rec/s (median of {}), powertools {:.0} rec/s",
            round + 1,
            median(&mut r.clone()),
            r.len(),
            median(&mut p.clone()),
        );
        resq_rps.extend(r);
        pt_rps.extend(p);
        resq_inv.extend(per_second(&rj, "seconds")?);
        pt_inv.extend(per_second(&pj, "seconds")?);
        bare.extend(per_second(&rj, "bare_seconds")?);
        let rss = |v: &Value| v["vm_hwm_kb"].as_u64().filter(|k| *k > 0);
        resq_rss = resq_rss.max(rss(&rj).ok_or("resq reported no VmHWM")?);
        pt_rss = pt_rss.max(rss(&pj).ok_or("Powertools reported no VmHWM")?);
    }
    Ok(ConsumerFigures {
        batch_rps_range: (range(&resq_rps), range(&pt_rps)),
        warm_invocations: resq_rps.len(),
        batch_rps: (median(&mut resq_rps), median(&mut pt_rps)),
        invocation_rps: (median(&mut resq_inv), median(&mut pt_inv)),
        rss_kb: (resq_rss, pt_rss),
        bare_rps: median(&mut bare),
        records,
        event: path,
    })
}

/// Both consumers saw every record and turned away exactly the bad ones: resq dead-letters
/// them (and reports no failure), Powertools reports them as `batchItemFailures`.
fn check_same_work(
    resq: &Value,
    pt: &Value,
    records: usize,
    rejected: usize,
) -> Result<(), String> {
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(u64::MAX) as usize;
    if n(resq, "records") != records || n(pt, "records") != records {
        return Err(format!(
            "not every record was processed: resq {resq}, powertools {pt}"
        ));
    }
    if n(resq, "rejected") != rejected || n(resq, "failures") != 0 {
        return Err(format!(
            "resq rejected other records than the {rejected} bad ones: {resq}"
        ));
    }
    if n(pt, "failures") != rejected {
        return Err(format!(
            "Powertools failed other records than the {rejected} bad ones: {pt}"
        ));
    }
    Ok(())
}

fn seconds(v: &Value) -> Result<f64, String> {
    v.as_f64()
        .filter(|s| *s > 0.0)
        .ok_or_else(|| format!("no time in {v}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Impl {
    Resq,
    Baseline,
}

struct Env<'a> {
    o: &'a Options,
    /// The emulator behind the proxy (the feeder talks to it directly).
    endpoint: String,
    /// DLQ messages kept waiting while a redriver runs (moto: [`FEED_DEPTH`]; LocalStack,
    /// fast at depth: all of them, seeded up front).
    feed_depth: usize,
    rt: &'a tokio::runtime::Runtime,
    sqs: &'a aws_sdk_sqs::Client,
    proxy: &'a CountingProxy,
}

struct Redrive {
    seconds: Pair<f64>,
    requests: Pair<usize>,
    breakdown: Pair<String>,
    duplicates: Pair<usize>,
    messages: usize,
}

/// What one redriver's replay of a DLQ came to.
struct Replayed {
    seconds: f64,
    requests: Vec<Request>,
    /// Messages the emulator handed out twice (replayed twice).
    duplicates: usize,
}

impl Env<'_> {
    fn redrive(&self) -> Result<Redrive, String> {
        let chunks = self.o.redrive_messages.div_ceil(self.o.chunk);
        let mut seconds = (0.0, 0.0);
        let mut duplicates = (0, 0);
        let mut resq_log = Vec::new();
        let mut base_log = Vec::new();
        for c in 0..chunks {
            let n = self.o.chunk.min(self.o.redrive_messages - c * self.o.chunk);
            let order = if c % 2 == 0 {
                [Impl::Resq, Impl::Baseline]
            } else {
                [Impl::Baseline, Impl::Resq]
            };
            for which in order {
                let out = self.replay(which, UNBOUND_RATE, n, &format!("t{c}"))?;
                match which {
                    Impl::Resq => {
                        seconds.0 += out.seconds;
                        duplicates.0 += out.duplicates;
                        resq_log.extend(out.requests);
                    }
                    Impl::Baseline => {
                        seconds.1 += out.seconds;
                        duplicates.1 += out.duplicates;
                        base_log.extend(out.requests);
                    }
                }
            }
        }
        let sqs_count = |log: &[Request]| log.iter().filter(|r| r.sqs).count();
        Ok(Redrive {
            seconds,
            requests: (sqs_count(&resq_log), sqs_count(&base_log)),
            breakdown: (breakdown(&resq_log), breakdown(&base_log)),
            duplicates,
            messages: self.o.redrive_messages,
        })
    }

    /// Fresh queues and one run of `which` through the proxy over `n` DLQ messages, fed as it
    /// goes so the DLQ holds about `FEED_DEPTH` (moto's receive slows down with depth); then
    /// checks that every message reached the main queue and none is left behind. moto's
    /// `ReceiveMessage` takes no lock: two receives at once (the pipelined redriver's cycles)
    /// can both be handed the same message, and both replay it. SQS's standard queues deliver
    /// at least once too, so such a message is counted as a duplicate, not as an error.
    fn replay(&self, which: Impl, rate: f64, n: usize, tag: &str) -> Result<Replayed, String> {
        let name = format!("bench-{tag}-{which:?}-{}", rand::random::<u32>())
            .to_lowercase()
            .replace('.', "_");
        let first = n.min(self.feed_depth);
        let (dlq, main) = self.rt.block_on(async {
            let dlq = create_queue(self.sqs, &format!("{name}-dlq")).await?;
            let main = create_queue(self.sqs, &name).await?;
            seed(self.sqs, &dlq, 0, first).await?;
            Ok::<_, String>((dlq, main))
        })?;
        let mark = self.proxy.mark();
        let feeder = {
            let (proxy, dlq, endpoint, depth) = (
                self.proxy.clone(),
                dlq.clone(),
                self.endpoint.clone(),
                self.feed_depth,
            );
            std::thread::spawn(move || feed(&proxy, mark, &endpoint, &dlq, (first, depth), n))
        };
        let result = redriver_run(self.o, which, &self.proxy.endpoint, &dlq, &main, rate);
        let fed = feeder
            .join()
            .map_err(|_| "the feeder panicked".to_owned())??;
        let result = result?;
        let requests = self.proxy.since(mark);
        let redriven = result["redriven"].as_u64().unwrap_or(0) as usize;
        let (in_dlq, in_main) = self.rt.block_on(async {
            Ok::<_, String>((depth(self.sqs, &dlq).await?, depth(self.sqs, &main).await?))
        })?;
        if fed != n || redriven < n || in_dlq != 0 || in_main != redriven {
            return Err(format!(
                "{which:?} did not move every message: {fed} of {n} fed, {redriven} redriven, {in_main} in the main queue, {in_dlq} left in the DLQ ({result}); \
                 if the run stopped early, the feeder fell behind (raise FEED_DEPTH)"
            ));
        }
        self.rt.block_on(async {
            for q in [&dlq, &main] {
                let _ = self.sqs.delete_queue().queue_url(q).send().await;
            }
        });
        Ok(Replayed {
            seconds: seconds(&result["seconds"])?,
            requests,
            duplicates: redriven - n,
        })
    }
}

/// The worst |achieved − configured| / configured of resq over `rates`, in %.
fn worst_rate_error(rates: &[(f64, f64, f64)]) -> f64 {
    rates
        .iter()
        .map(|(c, a, _)| (a - c).abs() / c * 100.0)
        .fold(0.0, f64::max)
}

/// The rate rows on LocalStack's SQS (real round trips, fast at depth), each redriver through
/// the counting proxy, the rate read off its request log as on the stand-in.
fn localstack_rates(
    o: &Options,
    localstack: &resq_local::emulator::LocalStack,
    rt: &tokio::runtime::Runtime,
) -> Result<Vec<(f64, f64, f64)>, String> {
    let (proxy, sqs) = counted(&localstack.endpoint, rt)?;
    let env = Env {
        o,
        endpoint: localstack.endpoint.clone(),
        feed_depth: usize::MAX,
        rt,
        sqs: &sqs,
        proxy: &proxy,
    };
    let mut rates = Vec::new();
    for &rate in &o.rates {
        eprintln!("bench: rate {rate}/s on LocalStack");
        let n = ((rate * o.rate_seconds).round() as usize).max(20);
        let achieved_by = |which| {
            let out = env.replay(which, rate, n, "ls")?;
            achieved(&out.requests)
                .ok_or_else(|| format!("{which:?} at {rate}/s sent fewer than two requests"))
        };
        let resq = achieved_by(Impl::Resq)?;
        let base = achieved_by(Impl::Baseline)?;
        rates.push((rate, resq, base));
    }
    Ok(rates)
}

/// One paced run of `which` on the stand-in SQS: `n` messages at `rate`; the achieved rate is
/// read off the stand-in's request log. Every message must arrive.
fn achieved_rate(
    o: &Options,
    sqs: &FakeSqs,
    which: Impl,
    rate: f64,
    n: usize,
) -> Result<f64, String> {
    let name = format!("rate-{which:?}-{}", rand::random::<u32>()).to_lowercase();
    let (dlq, main) = (sqs.queue_url(&format!("{name}-dlq")), sqs.queue_url(&name));
    seed_stand_in(sqs, &dlq, "rate", n);
    let mark = sqs.mark();
    let result = redriver_run(o, which, &sqs.endpoint, &dlq, &main, rate)?;
    let (moved, left) = (sqs.depth(&main), sqs.depth(&dlq));
    if moved != n || left != 0 {
        return Err(format!(
            "{which:?} at {rate}/s: {n} seeded, {moved} arrived, {left} left behind ({result})"
        ));
    }
    achieved(&sqs.since(mark))
        .ok_or_else(|| format!("{which:?} at {rate}/s sent fewer than two requests"))
}

/// Runs one redriver child against `endpoint` and returns its JSON line.
fn redriver_run(
    o: &Options,
    which: Impl,
    endpoint: &str,
    dlq: &str,
    main: &str,
    rate: f64,
) -> Result<Value, String> {
    match which {
        Impl::Resq => scale::child(endpoint, dlq, main, rate, Design::Pipelined),
        Impl::Baseline => measured::run(
            Command::new(&o.python)
                .arg(o.scripts.join("baseline_redriver.py"))
                .args([endpoint, dlq, main, &rate.to_string()]),
        ),
    }
}

/// DLQ messages kept waiting (visible or in flight) while a redriver runs.
pub const FEED_DEPTH: usize = 40;

/// Tops the DLQ up to `FEED_DEPTH` (fed − deleted, the deletes read off the proxy's log) until
/// `n` have been fed. Talks to moto directly, so its requests are not counted.
fn feed(
    proxy: &CountingProxy,
    mark: usize,
    endpoint: &str,
    dlq: &str,
    (mut fed, depth): (usize, usize),
    n: usize,
) -> Result<usize, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let sqs = rt.block_on(async {
        aws_sdk_sqs::Client::new(&resq_local::emulator::local_sdk_config(endpoint).await)
    });
    let started = std::time::Instant::now();
    while fed < n {
        if started.elapsed() > std::time::Duration::from_secs(600) {
            return Err(format!(
                "feeding {dlq}: stuck at {fed} of {n} for 10 minutes"
            ));
        }
        if fed.saturating_sub(proxy.deleted_since(mark)) < depth {
            let k = (n - fed).min(10);
            rt.block_on(seed(&sqs, dlq, fed, k))?;
            fed += k;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    Ok(fed)
}

/// CPU, cores, memory and kernel of this machine.
pub fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let kernel = read("/proc/sys/kernel/osrelease");
    format!(
        "{cpu}, {cores} cores, {mem_gib:.0} GiB, Linux {} ({})",
        kernel.trim(),
        std::env::consts::ARCH
    )
}

/// Replaces the generated part of `bench/RESULTS.md` (between the markers), keeping the rest.
pub fn write_results(path: &Path, report: &Report, versions: &str) -> Result<(), String> {
    const BEGIN: &str = "<!-- bench:begin (written by `make bench`) -->";
    const END: &str = "<!-- bench:end -->";
    let dir = path.parent().unwrap_or(Path::new("."));
    let pictures = crate::pictures::write(
        dir,
        &report.real_io.wall_charts(),
        &report.redrive_rate_vs_latency(),
    )?;
    let generated = format!(
        "{BEGIN}\n## Latest run\n\n{} on {}.\n{versions}\n\n{pictures}{}\n```\n{}\n```\n{END}",
        report.date,
        report.machine,
        report.table(),
        report.summary_line()
    );
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if e > b => format!("{}{generated}{}", &old[..b], &old[e + END.len()..]),
        _ => format!("# resq benchmarks\n\n{generated}\n{old}"),
    };
    std::fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row_of(records: usize, resq_default: f64, resq_equal: f64) -> IoRow {
        IoRow {
            records,
            groups: None,
            latency: 0.02,
            default_concurrency: 10,
            resq_default,
            resq_equal,
            pt_sync: 2.05,
            pt_async: 0.024,
        }
    }

    #[test]
    fn io_figures_are_taken_against_the_limit_and_the_peers() {
        let row = row_of(100, 0.25, 0.03);
        // ceil(100 / 10) × 20 ms
        assert!((row.limit(10) - 0.2).abs() < 1e-9);
        assert!((row.limit(100) - 0.02).abs() < 1e-9);
        assert!((row.efficiency() - 0.8).abs() < 1e-9);
        assert!((row.speedup() - 8.2).abs() < 1e-9);
        assert!((row.vs_best_peer() - 0.8).abs() < 1e-9);
        // the summary takes the worst row
        let rows = [row_of(10, 0.021, 0.021), row];
        assert!((worst(&rows, IoRow::efficiency) - 0.8).abs() < 1e-9);
        assert!(worst(&[], IoRow::efficiency).is_nan());
        // FIFO: a group's records one after another; the asyncio peer does not apply
        let fifo = |groups| IoRow {
            groups: Some(groups),
            pt_sync: 0.2,
            pt_async: f64::NAN,
            ..row_of(10, 0.1, 0.1)
        };
        // 10 in 2 groups: 5 × 20 ms at any concurrency ≥ 2; one at a time: 10 × 20 ms
        assert!((fifo(2).limit(10) - 0.1).abs() < 1e-9);
        assert!((fifo(2).limit(1) - 0.2).abs() < 1e-9);
        // 10 in 10 groups: 20 ms; 3 at a time: ceil(10 / 3) × 20 ms
        assert!((fifo(10).limit(10) - 0.02).abs() < 1e-9);
        assert!((fifo(10).limit(3) - 0.08).abs() < 1e-9);
        assert!((fifo(2).vs_best_peer() - 2.0).abs() < 1e-9);
    }
}
