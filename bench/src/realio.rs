//! The real-client I/O comparison: what a batch of order records costs when each record's
//! effect is a conditional S3 put over a TLS connection, as resq's reference handler makes it,
//! each side under the CPU share Lambda gives a memory size.
//!
//! S3 is the loopback stand-in ([`crate::s3standin`]) over HTTPS (a CA made at run time, which
//! every client is told to trust as its users would: resq's `SSL_CERT_FILE`, botocore's
//! `AWS_CA_BUNDLE`, Node's `NODE_EXTRA_CA_CERTS`), each `PUT` answered after a log-normal
//! latency (median `io_latency_ms`, p99 [`P99_OVER_MEDIAN`] times it, the same seeded draws for
//! every side), one instance per side so each side's connections are its own. Each side runs
//! in its own process, with Lambda's descriptor limit (`RLIMIT_NOFILE` 1,024), in a CPU cgroup
//! of its own whose quota is the share of a vCPU of each of [`QUOTAS_MB`]
//! ([`CpuCgroup`]; without cgroups, as in CI, the quota's rows are skipped, saying why):
//!
//! - resq: the release `consumer` binary under a Lambda runtime API on loopback
//!   ([`Function`]), SQS on the stand-in SQS ([`FakeSqs`]), S3 on the stand-in through the SDK's
//!   service endpoints; at its default `CONSUMER_CONCURRENCY` (unset) and at
//!   `CONSUMER_CONCURRENCY` = the batch (capped at [`CONCURRENCY_CAP`]);
//! - Powertools `AsyncBatchProcessor` with an aiobotocore client, at its default pool (10) and
//!   with `max_pool_connections` = the batch (capped alike);
//! - Powertools `BatchProcessor` with a boto3 client (sequential; only up to `io_sync_max`
//!   records, where a round takes seconds: beyond, one would take minutes);
//! - Powertools for TypeScript `BatchProcessor` + `processPartialResponse` with the AWS SDK v3
//!   `S3Client` at its defaults (`bench/node/peer.js`; 50 sockets).
//!
//! Per quota, batch size and side: a fresh process (its init, the client built, no S3
//! connection yet), one invocation on cold connections, then warm invocations, interleaved
//! across the sides, each an event of its own (every `orderId` new, so every `PUT` writes). Of
//! the warm ones: p50 and p99 wall time, the CPU time the process used ([`process_cpu_ns`]),
//! and the peaks of descriptors open in the process (`/proc/PID/fd`, sampled about every
//! millisecond), connections open at the stand-in, `PUT`s a second there, and the process's
//! resident memory (`VmHWM`).
//!
//! Apart, resq at its default alone ([`ResqCurve`]): 1, 10, 100 and 1,000 records at each
//! quota, at a fixed latency and at the log-normal one: the fixed cost of an invocation (one
//! record), and where time goes against `ceil(R/64) × L` (`io_limit_efficiency`).

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
use crate::function::{CpuCgroup, MAX_PAYLOAD_BYTES, ONE_VCPU_MB};
use crate::options::Options;
use crate::s3standin::{self, S3StandIn, Spread, Tls};

/// Lambda's limit on a function's open file descriptors (soft and hard).
pub const NOFILE: u64 = 1024;

/// The most records (resq) or pooled connections (aiobotocore) the tuned settings run at once:
/// each needs a socket, and of Lambda's 1,024 descriptors about 20 are the process's own
/// (standard streams, the runtime API's and SQS's connections, epoll, the log pipes, the
/// interpreter's files); 900 leaves a hundred spare.
pub const CONCURRENCY_CAP: usize = 900;

/// resq's documented `auto` limit: at most this many records in flight (docs/design.md).
pub use resq_consumer::concurrency::AUTO_CONCURRENCY_MAX as AUTO_LIMIT;

/// The bucket every side writes its order records to (resq's `ARCHIVE_BUCKET`).
pub const BUCKET: &str = "resq-bench";

/// The memory sizes whose CPU share every side runs under: the template's consumer default
/// and one full vCPU.
pub const QUOTAS_MB: [u64; 2] = [256, ONE_VCPU_MB];

/// The stand-in's p99 latency over its median (20 ms → 150 ms).
pub const P99_OVER_MEDIAN: f64 = 7.5;

/// The seed of the stand-ins' latency draws (every side's stand-in draws the same sequence).
pub const LATENCY_SEED: u64 = 37;

/// The batch sizes of resq's own curves ([`ResqCurve`]); one record gives the fixed cost.
pub const CURVE_BATCHES: [usize; 4] = [1, 10, 100, 1000];

/// Warm invocations at a batch of `records`, `base` at 100 records and more: ten times as many
/// at 10 or fewer, where an invocation takes milliseconds and one slow draw of the log-normal
/// moves the p50.
pub fn rounds_at(base: usize, records: usize) -> usize {
    base.max(1) * (100 / records.max(1)).clamp(1, 10)
}

/// The smallest batch the figures compare at: at one record each side makes one call, so the
/// ratio is per-invocation overhead, not the concurrency design.
pub const FIGURE_MIN_RECORDS: usize = 10;

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
    /// Powertools for TypeScript `BatchProcessor` + AWS SDK v3 `S3Client`, defaults.
    Node,
}

impl Side {
    pub const ALL: [Side; 6] = [
        Side::ResqDefault,
        Side::ResqTuned,
        Side::AioDefault,
        Side::AioTuned,
        Side::Boto3,
        Side::Node,
    ];

    /// The peers at their own defaults (what `io_vs_real_peer` takes the best of).
    pub const PEERS_AT_DEFAULTS: [Side; 3] = [Side::AioDefault, Side::Boto3, Side::Node];

    /// How the table names it, for a batch run at `tuned` at once.
    pub fn label(self, tuned: usize) -> String {
        match self {
            Side::ResqTuned => format!("resq, `CONSUMER_CONCURRENCY={tuned}`"),
            Side::AioTuned => format!("Powertools async + aiobotocore, pool {tuned}"),
            other => other.name().into(),
        }
    }

    /// Its name across batch sizes (a chart's legend).
    pub fn name(self) -> &'static str {
        match self {
            Side::ResqDefault => "resq, default `CONSUMER_CONCURRENCY`",
            Side::ResqTuned => "resq, `CONSUMER_CONCURRENCY` = the batch",
            Side::AioDefault => "Powertools async + aiobotocore, default pool (10)",
            Side::AioTuned => "Powertools async + aiobotocore, pool = the batch",
            Side::Boto3 => "Powertools BatchProcessor + boto3",
            Side::Node => "Powertools TypeScript BatchProcessor + SDK v3 S3Client, defaults",
        }
    }
}

/// The `q`-quantile (0–1) of `v` by nearest rank (of a handful, p99 is the slowest).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (q * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// One side at one batch size.
#[derive(Debug, Clone, PartialEq)]
pub struct SideRun {
    pub side: Side,
    /// Wall time of each warm invocation, s.
    pub walls: Vec<f64>,
    /// Wall time of the first invocation of a fresh process (cold connections), s.
    pub cold: f64,
    /// CPU time the process used in each warm invocation, s.
    pub cpu: Vec<f64>,
    /// Descriptors open in the process, the most sampled in any invocation.
    pub peak_fds: usize,
    /// Connections open at the side's stand-in, the most in any invocation.
    pub peak_connections: usize,
    /// `PUT`s a second at the stand-in (the most in any 100 ms, × 10), the most in any round.
    pub peak_puts_per_s: f64,
    /// The process's peak resident memory, KiB.
    pub peak_rss_kb: u64,
    /// Records reported failed, over all invocations.
    pub failures: usize,
    /// The client's own retries of its puts over all invocations, where it says (botocore's
    /// `RetryAttempts`, the SDK v3's `attempts`; `None` for resq, whose SDK does not tell).
    pub retries: Option<usize>,
}

impl SideRun {
    /// The median warm wall time, s.
    pub fn p50(&self) -> f64 {
        quantile(&self.walls, 0.5)
    }
    /// The 99th percentile of the warm wall times, s.
    pub fn p99(&self) -> f64 {
        quantile(&self.walls, 0.99)
    }
    /// The median CPU time of a warm invocation, s.
    pub fn cpu_per_invocation(&self) -> f64 {
        quantile(&self.cpu, 0.5)
    }
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
    fn p50(&self, side: Side) -> Option<f64> {
        self.side(side).map(SideRun::p50)
    }
    /// The fastest peer at its own defaults (aiobotocore's default pool, boto3, the SDK v3
    /// client) ÷ resq at its default, p50s.
    pub fn vs_real_peer(&self) -> f64 {
        let peer = Side::PEERS_AT_DEFAULTS
            .into_iter()
            .filter_map(|s| self.p50(s))
            .reduce(f64::min);
        match (peer, self.p50(Side::ResqDefault)) {
            (Some(p), Some(r)) => p / r,
            _ => f64::NAN,
        }
    }
    /// aiobotocore with a pool of the batch ÷ resq with `CONSUMER_CONCURRENCY` = the batch.
    pub fn vs_tuned_peer(&self) -> f64 {
        match (self.p50(Side::AioTuned), self.p50(Side::ResqTuned)) {
            (Some(p), Some(r)) => p / r,
            _ => f64::NAN,
        }
    }
    /// CPU per `PUT` of a side's warm invocations, s.
    pub fn cpu_per_put(&self, side: Side) -> Option<f64> {
        self.side(side)
            .map(|s| s.cpu_per_invocation() / self.records.max(1) as f64)
    }
}

/// Every side at one CPU quota.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaRun {
    /// The memory size whose CPU share the cgroups give, MB.
    pub memory_mb: u64,
    pub rows: Vec<RealRow>,
    /// Why nothing was measured at this quota (no cgroup), if so.
    pub skipped: Option<String>,
}

/// One batch size of a [`ResqCurve`].
#[derive(Debug, Clone, PartialEq)]
pub struct CurvePoint {
    pub records: usize,
    /// Wall time of each warm invocation, s.
    pub walls: Vec<f64>,
    /// CPU time of each warm invocation, s.
    pub cpu: Vec<f64>,
}

impl CurvePoint {
    pub fn p50(&self) -> f64 {
        quantile(&self.walls, 0.5)
    }
    /// The median CPU per `PUT`, s.
    pub fn cpu_per_put(&self) -> f64 {
        quantile(&self.cpu, 0.5) / self.records.max(1) as f64
    }
}

/// resq at its default alone, one warm process, at one quota and latency mode, over
/// [`CURVE_BATCHES`].
#[derive(Debug, Clone, PartialEq)]
pub struct ResqCurve {
    pub memory_mb: u64,
    /// Log-normal latencies (else each `PUT` answered after exactly the median).
    pub log_normal: bool,
    pub points: Vec<CurvePoint>,
}

/// The least time of `records` at resq's `auto` limit: `ceil(R / 64)` waves of `latency`, plus
/// the fixed cost of an invocation (the one-record invocation's wall time less its one call).
pub fn least_time(records: usize, latency: f64, one_record_wall: f64) -> f64 {
    records.div_ceil(AUTO_LIMIT) as f64 * latency + (one_record_wall - latency).max(0.0)
}

impl ResqCurve {
    fn point(&self, records: usize) -> Option<&CurvePoint> {
        self.points.iter().find(|p| p.records == records)
    }
    /// [`least_time`] ÷ the p50 at `records` (NaN without the one-record point).
    pub fn efficiency(&self, records: usize, latency: f64) -> f64 {
        match (self.point(1), self.point(records)) {
            (Some(one), Some(p)) => least_time(records, latency, one.p50()) / p.p50(),
            _ => f64::NAN,
        }
    }
    /// The worst [`Self::efficiency`] from [`FIGURE_MIN_RECORDS`] up.
    pub fn worst_efficiency(&self, latency: f64) -> f64 {
        worst(
            self.points
                .iter()
                .filter(|p| p.records >= FIGURE_MIN_RECORDS)
                .map(|p| self.efficiency(p.records, latency)),
        )
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
    /// The stand-in's median latency per `PUT` (the fixed one in the fixed mode), s.
    pub latency: f64,
    /// Every side at each quota (log-normal latency, TLS).
    pub quotas: Vec<QuotaRun>,
    /// resq at its default alone, each quota × latency mode.
    pub curves: Vec<ResqCurve>,
    pub throttle: Option<ThrottleRun>,
    /// Warm invocations per side at 100 records and more (after the cold one; [`rounds_at`]).
    pub rounds: usize,
    /// The comparison's wall time, s.
    pub seconds: f64,
}

/// A chart's title and its series: each a side's name and its (batch size, p50 ms) points.
pub type Chart = (String, Vec<(String, Vec<(f64, f64)>)>);

/// The worst (least) of `values` that are numbers (NaN when none is).
fn worst(values: impl Iterator<Item = f64>) -> f64 {
    values
        .filter(|v| !v.is_nan())
        .reduce(f64::min)
        .unwrap_or(f64::NAN)
}

impl RealIo {
    fn quota(&self, memory_mb: u64) -> Option<&QuotaRun> {
        self.quotas.iter().find(|q| q.memory_mb == memory_mb)
    }
    /// `f` at the rows of `memory_mb` from [`FIGURE_MIN_RECORDS`] up, the worst.
    fn worst_at(&self, memory_mb: u64, f: impl Fn(&RealRow) -> f64) -> f64 {
        worst(
            self.quota(memory_mb)
                .into_iter()
                .flat_map(|q| &q.rows)
                .filter(|r| r.records >= FIGURE_MIN_RECORDS)
                .map(f),
        )
    }
    /// The best peer at its defaults ÷ resq at its default, worst batch size, at 256 MB.
    pub fn io_vs_real_peer_256mb(&self) -> f64 {
        self.worst_at(256, RealRow::vs_real_peer)
    }
    /// The best peer at its defaults ÷ resq at its default, worst batch size, at one vCPU.
    pub fn io_vs_real_peer(&self) -> f64 {
        self.worst_at(ONE_VCPU_MB, RealRow::vs_real_peer)
    }
    /// aiobotocore at pool = N ÷ resq at `CONSUMER_CONCURRENCY` = N, worst batch size, at one
    /// vCPU.
    pub fn io_vs_tuned_peer(&self) -> f64 {
        self.worst_at(ONE_VCPU_MB, RealRow::vs_tuned_peer)
    }
    fn curve(&self, memory_mb: u64, log_normal: bool) -> Option<&ResqCurve> {
        self.curves
            .iter()
            .find(|c| c.memory_mb == memory_mb && c.log_normal == log_normal)
    }
    /// `ceil(R/64) × L` + the fixed cost ÷ resq at its default, worst batch size from 10, at a
    /// fixed latency L and one vCPU.
    pub fn io_limit_efficiency(&self) -> f64 {
        self.curve(ONE_VCPU_MB, false)
            .map_or(f64::NAN, |c| c.worst_efficiency(self.latency))
    }
    /// resq's runs at its default at every quota: what ships. (The tuned runs hold a
    /// connection, so a descriptor, per record in flight by construction: their figures are in
    /// the table.)
    fn resq_runs(&self) -> impl Iterator<Item = &SideRun> {
        self.quotas
            .iter()
            .flat_map(|q| &q.rows)
            .flat_map(|r| &r.sides)
            .filter(|s| s.side == Side::ResqDefault)
    }
    /// The most descriptors resq's process had open in any run at its default, at any quota
    /// (the throttling run included).
    pub fn peak_fds(&self) -> usize {
        self.resq_runs()
            .map(|s| s.peak_fds)
            .chain(self.throttle.as_ref().map(|t| t.peak_fds))
            .max()
            .unwrap_or(0)
    }
    /// resq's highest peak resident memory over its runs at its default, at any quota, MiB.
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
            "io_vs_real_peer_256mb={:.2} io_vs_real_peer={:.2} io_vs_tuned_peer={:.2} io_limit_efficiency={:.2} peak_fds={} worst_rss_mb={:.1}",
            self.io_vs_real_peer_256mb(),
            self.io_vs_real_peer(),
            self.io_vs_tuned_peer(),
            self.io_limit_efficiency(),
            self.peak_fds(),
            self.worst_rss_mb()
        )
    }

    /// What the I/O chart draws: per quota, a title and one series per side of (batch size,
    /// p50 wall time in ms) points.
    pub fn wall_charts(&self) -> Vec<Chart> {
        self.quotas
            .iter()
            .filter(|q| q.skipped.is_none())
            .map(|q| {
                let title = format!(
                    "{} MB ({:.3} vCPU): p50 wall time per batch, ms (TLS, S3 latency log-normal, median {:.0} ms)",
                    q.memory_mb,
                    q.memory_mb as f64 / ONE_VCPU_MB as f64,
                    self.latency * 1000.0
                );
                let series = Side::ALL
                    .into_iter()
                    .filter_map(|side| {
                        let points: Vec<(f64, f64)> = q
                            .rows
                            .iter()
                            .filter_map(|r| r.side(side).map(|s| (r.records as f64, s.p50() * 1000.0)))
                            .collect();
                        (!points.is_empty()).then(|| (side.name().to_owned(), points))
                    })
                    .collect();
                (title, series)
            })
            .collect()
    }

    /// The comparison as Markdown: per quota, one row per batch size and side and the ratios;
    /// resq's curves; the throttling run.
    pub fn table(&self) -> String {
        let mut t = format!(
            "Real clients against the loopback S3 stand-in over TLS (each `PUT` answered after a log-normal latency: median {:.0} ms, p99 about {:.0} ms, the same seeded draws for every side), every process under `RLIMIT_NOFILE` {NOFILE} and in a CPU cgroup of its own at a memory size's share of a vCPU; per batch size a fresh process: a cold invocation (its first, no connection open yet), then {} warm ones ({} at 10 records; p99 of fewer than 100 is their slowest); CPU: the process's own (every thread's run time, `/proc/PID/task/*/schedstat`), median of the warm invocations ({:.0} s in all):\n\n",
            self.latency * 1000.0,
            self.latency * 1000.0 * P99_OVER_MEDIAN,
            self.rounds,
            rounds_at(self.rounds, 10),
            self.seconds,
        );
        for q in &self.quotas {
            t.push_str(&format!(
                "**{} MB** ({:.3} vCPU, quota {} µs per {} µs):",
                q.memory_mb,
                q.memory_mb as f64 / ONE_VCPU_MB as f64,
                CpuCgroup::quota_us(q.memory_mb),
                crate::function::CFS_PERIOD_US
            ));
            if let Some(why) = &q.skipped {
                t.push_str(&format!(" skipped: {why}\n\n"));
                continue;
            }
            t.push_str("\n\n| records (event) | side | p50, ms | p99, ms | cold, ms | p50 ÷ resq default | CPU per invocation, ms | CPU per PUT, µs | peak fds | peak connections | peak PUT/s | peak RSS, MiB | failed | client retries |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            for r in &q.rows {
                let resq = r.p50(Side::ResqDefault);
                for s in &r.sides {
                    t.push_str(&format!(
                        "| {} ({:.2} MB) | {} | {:.1} | {:.1} | {:.1} | {} | {:.1} | {:.0} | {} | {} | {:.0} | {:.1} | {} | {} |\n",
                        r.records,
                        r.payload_bytes as f64 / 1e6,
                        s.side.label(r.tuned),
                        s.p50() * 1000.0,
                        s.p99() * 1000.0,
                        s.cold * 1000.0,
                        resq.map_or("–".into(), |w| format!("{:.2}", s.p50() / w)),
                        s.cpu_per_invocation() * 1000.0,
                        r.cpu_per_put(s.side).unwrap_or(f64::NAN) * 1e6,
                        s.peak_fds,
                        s.peak_connections,
                        s.peak_puts_per_s,
                        s.peak_rss_kb as f64 / 1024.0,
                        s.failures,
                        s.retries.map_or("–".into(), |r| r.to_string()),
                    ));
                }
            }
            t.push_str("\n| records | best peer at its defaults ÷ resq default | aiobotocore pool N ÷ resq N |\n|---:|---:|---:|\n");
            for r in &q.rows {
                t.push_str(&format!(
                    "| {} | {:.2} | {:.2} |\n",
                    r.records,
                    r.vs_real_peer(),
                    r.vs_tuned_peer(),
                ));
            }
            t.push('\n');
        }
        t.push_str(&format!(
            "Figures from {FIGURE_MIN_RECORDS} records up (at one record each side makes one call: per-invocation overhead): io_vs_real_peer_256mb (≥ 1.0) at 256 MB = {:.2}; io_vs_real_peer (≥ 1.0) = {:.2} and io_vs_tuned_peer (≥ 1.0) = {:.2} at {ONE_VCPU_MB} MB; peak_fds and worst_rss_mb: resq at its default, every quota and the throttling run.\n\n",
            self.io_vs_real_peer_256mb(),
            self.io_vs_real_peer(),
            self.io_vs_tuned_peer(),
        ));
        if !self.curves.is_empty() {
            t.push_str(&format!(
                "resq at its default alone (one warm process per quota and latency mode, TLS, {} warm invocations per batch size, {} at 1 and 10 records): least time = ceil(R/{AUTO_LIMIT}) × {:.0} ms + the fixed cost (the one-record p50 less one call); io_limit_efficiency (≥ 0.9) is least ÷ p50 at the fixed latency and {ONE_VCPU_MB} MB, worst from {FIGURE_MIN_RECORDS} records = {:.2} (at the log-normal latency the same formula, with L its median, shows what the jitter costs):\n\n| MB | S3 latency | records | p50, ms | least, ms | least ÷ p50 | CPU per PUT, µs | CPU ÷ wall (the quota's share) |\n|---:|---|---:|---:|---:|---:|---:|---:|\n",
                self.rounds,
                rounds_at(self.rounds, 10),
                self.latency * 1000.0,
                self.io_limit_efficiency(),
            ));
            for c in &self.curves {
                let one = c.point(1).map(CurvePoint::p50);
                for p in &c.points {
                    let least = one.map_or(f64::NAN, |o| least_time(p.records, self.latency, o));
                    let cpu = quantile(&p.cpu, 0.5);
                    t.push_str(&format!(
                        "| {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.0} | {:.2} ({:.3}) |\n",
                        c.memory_mb,
                        if c.log_normal { "log-normal" } else { "fixed" },
                        p.records,
                        p.p50() * 1000.0,
                        least * 1000.0,
                        least / p.p50(),
                        p.cpu_per_put() * 1e6,
                        cpu / p.p50(),
                        c.memory_mb as f64 / ONE_VCPU_MB as f64,
                    ));
                }
            }
        }
        if let Some(th) = &self.throttle {
            let (first, last) = th.first_and_last();
            let opt = |v: Option<u64>| v.map_or("–".into(), |v| v.to_string());
            t.push_str(&format!(
                "\nThrottling (plain HTTP, fixed {:.0} ms latency, no CPU quota): {} records through resq at its default, the stand-in answering `503 SlowDown` above {:.0} PUT/s: {:.1} ms, {} PUTs ({} answered 503), peak {:.0} PUT/s, {} records reported failed; PUTs in flight per 100 ms (most): first {first}, last {last}, [{}]; from the \"batch done\" line: concurrency_lowest {}, throttles {}.\n",
                self.latency * 1000.0,
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

/// The CPU time `pid`'s threads have run, ns: the sum of each live thread's
/// `/proc/PID/task/TID/schedstat` run time (nanoseconds, where `/proc/PID/stat` counts 10 ms
/// ticks; a thread that has ended no longer counts, and none of the sides ends its threads).
pub fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
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

/// A peer: the Python or Node process, warm, handed one event file a line on stdin.
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

/// Where a side's process runs: its CPU cgroup (none: no quota) and the CA its client is told
/// to trust (none: the stand-in speaks plain HTTP).
#[derive(Clone, Copy)]
pub(crate) struct Placement<'a> {
    cgroup: Option<&'a CpuCgroup>,
    ca: Option<&'a Path>,
}

impl Placement<'_> {
    pub(crate) const PLAIN: Placement<'static> = Placement {
        cgroup: None,
        ca: None,
    };

    /// What to run for `program`: itself, or a script (at `wrapper`) that joins the cgroup
    /// first.
    fn program(&self, program: &Path, wrapper: PathBuf) -> Result<PathBuf, String> {
        match self.cgroup {
            None => Ok(program.to_owned()),
            Some(c) => {
                c.wrapper(&wrapper, program)?;
                Ok(wrapper)
            }
        }
    }
}

impl Peer {
    /// Starts the process (its interpreter's start, its client built: it says it is ready
    /// when [`Self::ready`] reads it).
    fn spawn(
        o: &Options,
        side: Side,
        s3: &S3StandIn,
        tuned: usize,
        at: Placement<'_>,
        tag: &str,
    ) -> Result<Self, String> {
        let tuned = tuned.to_string();
        let (interpreter, args, trust): (&Path, Vec<String>, &str) = match side {
            Side::Node => (
                &o.node,
                vec![
                    o.node_peer.display().to_string(),
                    s3.endpoint.clone(),
                    BUCKET.into(),
                ],
                "NODE_EXTRA_CA_CERTS",
            ),
            _ => {
                let (mode, pool) = match side {
                    Side::AioDefault => ("async", "default"),
                    Side::AioTuned => ("async", tuned.as_str()),
                    _ => ("sync", "default"),
                };
                let script = o.scripts.join("powertools_s3.py").display().to_string();
                (
                    &o.python,
                    [script.as_str(), mode, &s3.endpoint, BUCKET, pool]
                        .map(String::from)
                        .to_vec(),
                    "AWS_CA_BUNDLE",
                )
            }
        };
        let program = at.program(interpreter, o.work.join(format!("realio-{tag}.sh")))?;
        let mut cmd = Command::new(&program);
        cmd.args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(ca) = at.ca {
            cmd.env(trust, ca);
        }
        lambda_limits(&mut cmd);
        let what = format!("{cmd:?}");
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("{what}: no pipes"));
        };
        Ok(Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            what,
        })
    }

    fn ready(&mut self) -> Result<(), String> {
        let ready = self.line()?;
        if ready["ready"] != true {
            return Err(format!("{}: expected ready, got {ready}", self.what));
        }
        Ok(())
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
    fn start(
        o: &Options,
        side: Side,
        sqs: &FakeSqs,
        s3: &S3StandIn,
        tuned: usize,
        at: Placement<'_>,
        tag: &str,
    ) -> Result<Self, String> {
        match side {
            Side::ResqDefault | Side::ResqTuned => {
                let c = (side == Side::ResqTuned).then_some(tuned);
                Ok(Runner::Resq(Box::new(resq_function(
                    o, sqs, s3, c, tag, at,
                )?)))
            }
            _ => Ok(Runner::Peer(Peer::spawn(o, side, s3, tuned, at, tag)?)),
        }
    }

    /// Waits for the process to be ready: a peer's line; resq's init and an invocation of an
    /// empty batch (`empty`: no S3 connection opened, as the peers have none yet).
    fn ready(&mut self, empty: &Path, rt: &tokio::runtime::Runtime) -> Result<(), String> {
        match self {
            Runner::Resq(_) => self.invoke(empty, rt).map(|_| ()),
            Runner::Peer(p) => p.ready(),
        }
    }

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
/// service endpoint variable, the stand-in's CA (if any) as `SSL_CERT_FILE` (where the template
/// names AL2023's bundle); `concurrency` sets `CONSUMER_CONCURRENCY` (unset when `None`). Its
/// log is [`log_path`] of `tag`.
pub(crate) fn resq_function(
    o: &Options,
    sqs: &FakeSqs,
    s3: &S3StandIn,
    concurrency: Option<usize>,
    tag: &str,
    at: Placement<'_>,
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
    if let Some(ca) = at.ca {
        env.push(("SSL_CERT_FILE".into(), ca.display().to_string()));
    }
    if let Some(c) = concurrency {
        env.push(("CONSUMER_CONCURRENCY".into(), c.to_string()));
    }
    let log = log_path(&o.work, tag);
    let _ = std::fs::remove_file(&log);
    let binary = std::fs::canonicalize(&o.consumer_bin)
        .map_err(|e| format!("{}: {e} (build it first)", o.consumer_bin.display()))?;
    let program = at.program(&binary, o.work.join(format!("realio-{tag}.sh")))?;
    Function::new("consumer", &program, env, &log, Duration::from_secs(300))
        .map(|f| f.with_nofile_limit(NOFILE))
        .map_err(|e| e.to_string())
}

/// Writes `records` valid orders (`orderId`s starting `prefix`) as an event at `path`, within
/// Lambda's 6 MB; its size.
fn write_event(path: &Path, records: usize, prefix: &str) -> Result<usize, String> {
    let built = event::valid_orders(records, prefix, 11);
    let bytes = serde_json::to_vec(&built.event).map_err(|e| e.to_string())?;
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "{records} orders are {} bytes, over Lambda's {MAX_PAYLOAD_BYTES}",
            bytes.len()
        ));
    }
    std::fs::write(path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes.len())
}

/// The events of one batch size: the cold invocation's, then each warm one's, each with
/// `orderId`s of its own.
fn events(work: &Path, records: usize, rounds: usize) -> Result<Vec<PathBuf>, String> {
    (0..=rounds)
        .map(|k| {
            let path = work.join(format!("sqs-real-io-{records}-{k}.json"));
            write_event(&path, records, &format!("n{records}-k{k}-"))?;
            Ok(path)
        })
        .collect()
}

/// What one measured invocation saw.
struct Sample {
    invocation: Invocation,
    /// CPU time the process used, s.
    cpu: f64,
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
    let cpu_before = process_cpu_ns(pid);
    let invocation = runner.invoke(event, rt);
    let cpu = process_cpu_ns(pid).saturating_sub(cpu_before) as f64 / 1e9;
    let fds = sampler.stop();
    let window = s3.end();
    Ok(Sample {
        invocation: invocation?,
        cpu,
        fds,
        window,
    })
}

/// Checks a sample of `side` at a batch of `n`: every record seen, every `PUT` a write (every
/// `orderId` is new; a 412 would be a cheaper call).
fn check(side: Side, n: usize, sample: &Sample) -> Result<(), String> {
    if sample.invocation.records != n {
        return Err(format!(
            "{side:?} saw {} records of {n}",
            sample.invocation.records
        ));
    }
    let (written, found) = (sample.window.count(200), sample.window.count(412));
    if found != 0 || written + sample.invocation.failures < n {
        return Err(format!(
            "{side:?}, batch of {n}: {written} puts written, {found} found an object"
        ));
    }
    Ok(())
}

/// The empty batch that readies resq's process (its init, no S3 call).
fn empty_event(work: &Path) -> Result<PathBuf, String> {
    let path = work.join("sqs-real-io-empty.json");
    std::fs::write(&path, br#"{"Records":[]}"#).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The real-client comparison: every side at each of [`QUOTAS_MB`] over every batch size in
/// `o.io_real_batches`, resq's curves, then the throttling run (unless `o.io_throttle_rate` is
/// 0).
pub fn real_io(o: &Options) -> Result<RealIo, String> {
    let started = Instant::now();
    std::fs::create_dir_all(&o.work).map_err(|e| format!("{}: {e}", o.work.display()))?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let latency = Duration::from_millis(o.io_latency_ms);
    let config = s3standin::Config {
        latency,
        slow_down_above: None,
    };
    let tls = Tls::new()?;
    let ca = o.work.join("realio-standin-ca.pem");
    tls.write_ca(&ca)?;
    let sqs = FakeSqs::start()?;
    let empty = empty_event(&o.work)?;
    let rounds = o.io_real_rounds.max(1);
    let log_normal = Spread::log_normal(P99_OVER_MEDIAN, LATENCY_SEED);
    let mut quotas = Vec::new();
    let mut curves = Vec::new();
    for mb in QUOTAS_MB {
        let cgroups = match Side::ALL
            .iter()
            .map(|s| CpuCgroup::create_named(mb, &format!("{s:?}").to_lowercase()))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("bench: real clients at {mb} MB skipped: {e}");
                quotas.push(QuotaRun {
                    memory_mb: mb,
                    rows: Vec::new(),
                    skipped: Some(format!("cannot emulate Lambda's CPU share: {e}")),
                });
                continue;
            }
        };
        let at = |side: Side| Placement {
            cgroup: Side::ALL
                .iter()
                .position(|s| *s == side)
                .map(|i| &cgroups[i]),
            ca: Some(ca.as_path()),
        };
        let stand_ins = Side::ALL
            .iter()
            .map(|_| S3StandIn::start_with(config, log_normal, Some(&tls)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut rows = Vec::new();
        for &n in &o.io_real_batches {
            let quota_started = Instant::now();
            rows.push(quota_row(
                o, mb, n, rounds, &sqs, &stand_ins, &at, &empty, &rt,
            )?);
            eprintln!(
                "  {mb} MB, {n} records: {:.0} s",
                quota_started.elapsed().as_secs_f64()
            );
        }
        for (spread, is_log_normal) in [(Spread::Fixed, false), (log_normal, true)] {
            let s3 = S3StandIn::start_with(config, spread, Some(&tls))?;
            curves.push(resq_curve(
                o,
                mb,
                is_log_normal,
                rounds,
                &sqs,
                &s3,
                at(Side::ResqDefault),
                &empty,
                &rt,
            )?);
        }
        quotas.push(QuotaRun {
            memory_mb: mb,
            rows,
            skipped: None,
        });
        // the processes are gone: the cgroups go with `cgroups`
    }
    let throttle = match o.io_throttle_rate {
        r if r > 0.0 => Some(throttling(o, &sqs, latency, r, &rt)?),
        _ => None,
    };
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("bench: real clients done in {seconds:.0} s");
    Ok(RealIo {
        latency: latency.as_secs_f64(),
        quotas,
        curves,
        throttle,
        rounds,
        seconds,
    })
}

/// Every side at `mb`'s quota with a batch of `n`: fresh processes, a cold invocation each,
/// then `rounds` warm ones interleaved.
#[allow(clippy::too_many_arguments)]
fn quota_row<'a>(
    o: &Options,
    mb: u64,
    n: usize,
    rounds: usize,
    sqs: &FakeSqs,
    stand_ins: &[S3StandIn],
    at: &dyn Fn(Side) -> Placement<'a>,
    empty: &Path,
    rt: &tokio::runtime::Runtime,
) -> Result<RealRow, String> {
    let tuned = n.clamp(1, CONCURRENCY_CAP);
    let sides: Vec<Side> = Side::ALL
        .into_iter()
        .filter(|s| *s != Side::Boto3 || n <= o.io_sync_max)
        .collect();
    let rounds = rounds_at(rounds, n);
    eprintln!(
        "bench: real clients at {mb} MB, batch of {n} (TLS, log-normal latency, median {} ms; a cold invocation, {rounds} warm): {}",
        o.io_latency_ms,
        sides
            .iter()
            .map(|s| s.label(tuned))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let paths = events(&o.work, n, rounds)?;
    let payload_bytes = std::fs::metadata(&paths[0]).map_or(0, |m| m.len() as usize);
    let s3_of = |side: Side| &stand_ins[Side::ALL.iter().position(|s| *s == side).unwrap_or(0)];
    // every process starts at once (each in its own cgroup), then each says it is ready
    let mut runners = Vec::new();
    for &side in &sides {
        let tag = format!("{mb}-{n}-{side:?}");
        runners.push((
            side,
            Runner::start(o, side, sqs, s3_of(side), tuned, at(side), &tag)?,
        ));
    }
    for (_, runner) in &mut runners {
        runner.ready(empty, rt)?;
    }
    // the cold invocation: the first, on no connection
    let mut colds = Vec::new();
    for (side, runner) in &mut runners {
        s3_of(*side).clear();
        let sample = measure(runner, s3_of(*side), &paths[0], rt)?;
        check(*side, n, &sample)?;
        colds.push(sample);
    }
    let mut samples: Vec<Vec<Sample>> = runners.iter().map(|_| Vec::new()).collect();
    for (k, path) in paths.iter().enumerate().skip(1) {
        // interleaved, the order rotating, so drift on the machine hits every side alike
        let m = runners.len();
        for i in (0..m).map(|i| (i + k) % m) {
            let (side, runner) = &mut runners[i];
            let sample = measure(runner, s3_of(*side), path, rt)?;
            check(*side, n, &sample)?;
            samples[i].push(sample);
        }
    }
    let mut measured = Vec::new();
    for (((side, runner), samples), cold) in runners.into_iter().zip(samples).zip(colds) {
        let all = || samples.iter().chain(std::iter::once(&cold));
        let run = SideRun {
            side,
            walls: samples.iter().map(|s| s.invocation.wall).collect(),
            cold: cold.invocation.wall,
            cpu: samples.iter().map(|s| s.cpu).collect(),
            peak_fds: all().map(|s| s.fds).max().unwrap_or(0),
            peak_connections: all().map(|s| s.window.peak_connections).max().unwrap_or(0),
            peak_puts_per_s: all()
                .map(|s| s.window.peak_puts_per_s())
                .fold(0.0, f64::max),
            peak_rss_kb: runner.peak_rss_kb(),
            failures: all().map(|s| s.invocation.failures).sum(),
            retries: all().map(|s| s.invocation.retries).sum(),
        };
        if run.failures > 0 {
            eprintln!("  {side:?}: {} records reported failed", run.failures);
        }
        eprintln!(
            "  {}: p50 {:.1} ms, p99 {:.1} ms, cold {:.1} ms, CPU {:.1} ms ({:.0} µs per PUT), {} fds, {} connections, {:.1} MiB, {:?} retries",
            side.label(tuned),
            run.p50() * 1000.0,
            run.p99() * 1000.0,
            run.cold * 1000.0,
            run.cpu_per_invocation() * 1000.0,
            run.cpu_per_invocation() / n as f64 * 1e6,
            run.peak_fds,
            run.peak_connections,
            run.peak_rss_kb as f64 / 1024.0,
            run.retries
        );
        runner.stop(rt);
        measured.push(run);
    }
    for s in stand_ins {
        s.clear();
    }
    Ok(RealRow {
        records: n,
        payload_bytes,
        tuned,
        sides: measured,
    })
}

/// resq at its default alone in one process at `mb`'s quota: warmed up (an empty batch, then
/// 10 records), then `rounds` invocations of each of [`CURVE_BATCHES`].
#[allow(clippy::too_many_arguments)]
fn resq_curve(
    o: &Options,
    mb: u64,
    log_normal: bool,
    rounds: usize,
    sqs: &FakeSqs,
    s3: &S3StandIn,
    at: Placement<'_>,
    empty: &Path,
    rt: &tokio::runtime::Runtime,
) -> Result<ResqCurve, String> {
    let mode = if log_normal { "lognormal" } else { "fixed" };
    let tag = format!("curve-{mb}-{mode}");
    let mut runner = Runner::start(o, Side::ResqDefault, sqs, s3, 1, at, &tag)?;
    runner.ready(empty, rt)?;
    let warm = o.work.join(format!("sqs-real-io-{tag}-warm.json"));
    write_event(&warm, 10, &format!("{tag}-warm-"))?;
    runner.invoke(&warm, rt)?;
    let mut points = Vec::new();
    for n in CURVE_BATCHES {
        let (mut walls, mut cpu) = (Vec::new(), Vec::new());
        for k in 0..rounds_at(rounds, n) {
            let path = o.work.join(format!("sqs-real-io-{tag}-{n}-{k}.json"));
            write_event(&path, n, &format!("{tag}-{n}-{k}-"))?;
            let sample = measure(&mut runner, s3, &path, rt)?;
            check(Side::ResqDefault, n, &sample)?;
            walls.push(sample.invocation.wall);
            cpu.push(sample.cpu);
        }
        points.push(CurvePoint {
            records: n,
            walls,
            cpu,
        });
    }
    runner.stop(rt);
    s3.clear();
    let c = ResqCurve {
        memory_mb: mb,
        log_normal,
        points,
    };
    eprintln!(
        "  resq alone, {mb} MB, {mode} latency: {}",
        c.points
            .iter()
            .map(|p| format!(
                "{} records {:.1} ms ({:.0} µs CPU per PUT)",
                p.records,
                p.p50() * 1000.0,
                p.cpu_per_put() * 1e6
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(c)
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
    let mut runner = Runner::Resq(Box::new(resq_function(
        o,
        sqs,
        &s3,
        None,
        "throttle",
        Placement::PLAIN,
    )?));
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

    fn side(side: Side, p50: f64, fds: usize, rss_kb: u64) -> SideRun {
        SideRun {
            side,
            walls: vec![p50 * 0.9, p50, p50 * 1.5],
            cold: p50 * 3.0,
            cpu: vec![0.001, 0.002, 0.003],
            peak_fds: fds,
            peak_connections: 0,
            peak_puts_per_s: 0.0,
            peak_rss_kb: rss_kb,
            failures: 0,
            retries: None,
        }
    }

    fn row(records: usize, p50s: [f64; 6]) -> RealRow {
        RealRow {
            records,
            payload_bytes: records * 900,
            tuned: records.min(CONCURRENCY_CAP),
            sides: Side::ALL
                .into_iter()
                .zip(p50s)
                .filter(|(_, w)| !w.is_nan())
                .map(|(s, w)| side(s, w, 20, 30 * 1024))
                .collect(),
        }
    }

    fn io(quotas: Vec<QuotaRun>) -> RealIo {
        RealIo {
            latency: 0.02,
            quotas,
            curves: vec![],
            throttle: None,
            rounds: 3,
            seconds: 1.0,
        }
    }

    fn quota(memory_mb: u64, rows: Vec<RealRow>) -> QuotaRun {
        QuotaRun {
            memory_mb,
            rows,
            skipped: None,
        }
    }

    #[test]
    fn small_batches_get_more_rounds() {
        assert_eq!(rounds_at(4, 1), 40);
        assert_eq!(rounds_at(4, 10), 40);
        assert_eq!(rounds_at(4, 50), 8);
        assert_eq!(rounds_at(4, 100), 4);
        assert_eq!(rounds_at(4, 1000), 4);
        assert_eq!(rounds_at(0, 1000), 1);
    }

    #[test]
    fn quantiles_are_by_nearest_rank() {
        let v = [3.0, 1.0, 2.0, 10.0];
        assert_eq!(quantile(&v, 0.5), 2.0);
        // p99 of four is the slowest
        assert_eq!(quantile(&v, 0.99), 10.0);
        assert_eq!(quantile(&[5.0], 0.5), 5.0);
        assert!(quantile(&[], 0.5).is_nan());
        let s = side(Side::Node, 0.1, 1, 1);
        assert!((s.p50() - 0.1).abs() < 1e-12 && (s.p99() - 0.15).abs() < 1e-12);
        assert!((s.cpu_per_invocation() - 0.002).abs() < 1e-12);
    }

    #[test]
    fn the_figures_take_the_worst_batch_size_from_ten_records_at_their_quota() {
        // p50s: resq default, resq tuned, aio default, aio tuned, boto3, node
        let at_256 = vec![
            // one record: per-invocation overhead, left out of the figures
            row(1, [0.05, 0.05, 0.03, 0.03, 0.03, 0.03]),
            row(10, [0.04, 0.04, 0.06, 0.06, 0.30, 0.05]),
            row(1000, [0.80, 0.30, 9.0, 8.0, f64::NAN, 2.0]),
        ];
        let at_full = vec![
            row(10, [0.021, 0.021, 0.025, 0.025, 0.22, 0.030]),
            row(1000, [0.40, 0.05, 2.2, 0.5, f64::NAN, 0.9]),
        ];
        let io = io(vec![quota(256, at_256), quota(ONE_VCPU_MB, at_full)]);
        // 256 MB: the best peer at its defaults is node, 0.05/0.04 at 10, 2.0/0.8 at 1,000
        assert!((io.io_vs_real_peer_256mb() - 1.25).abs() < 1e-9);
        // one vCPU: aiobotocore's default pool at 10 (0.025/0.021), node at 1,000 (0.9/0.4)
        assert!((io.io_vs_real_peer() - 0.025 / 0.021).abs() < 1e-9);
        assert!((io.quotas[1].rows[1].vs_real_peer() - 2.25).abs() < 1e-9);
        // tuned: 0.025/0.021 and 0.5/0.05
        assert!((io.io_vs_tuned_peer() - 0.025 / 0.021).abs() < 1e-9);
        let line = io.summary();
        assert!(
            line.starts_with("io_vs_real_peer_256mb=1.25 io_vs_real_peer=1.19"),
            "{line}"
        );
        // a quota skipped: its figure is NaN, its rows say why
        let skipped = RealIo {
            quotas: vec![QuotaRun {
                memory_mb: 256,
                rows: vec![],
                skipped: Some("no cgroup".into()),
            }],
            ..io.clone()
        };
        assert!(skipped.io_vs_real_peer_256mb().is_nan());
        assert!(skipped.table().contains("skipped: no cgroup"));
        assert!(skipped.wall_charts().is_empty());
        // CPU per PUT: the median CPU over the records
        assert!((io.quotas[0].rows[1].cpu_per_put(Side::Node).unwrap() - 0.0002).abs() < 1e-12);
    }

    #[test]
    fn the_least_time_adds_the_fixed_cost_of_an_invocation() {
        // one record took 23 ms at 20 ms latency: 3 ms fixed; 1,000 records: 16 waves
        assert!((least_time(1000, 0.02, 0.023) - 0.323).abs() < 1e-12);
        assert!((least_time(10, 0.02, 0.023) - 0.023).abs() < 1e-12);
        assert!((least_time(64, 0.02, 0.023) - 0.023).abs() < 1e-12);
        assert!((least_time(65, 0.02, 0.023) - 0.043).abs() < 1e-12);
        // a one-record run faster than the latency has no negative fixed cost
        assert!((least_time(1, 0.02, 0.019) - 0.02).abs() < 1e-12);
        let point = |records, p50: f64| CurvePoint {
            records,
            walls: vec![p50],
            cpu: vec![0.0001 * records as f64],
        };
        let fixed = ResqCurve {
            memory_mb: ONE_VCPU_MB,
            log_normal: false,
            points: vec![point(1, 0.023), point(10, 0.025), point(1000, 0.38)],
        };
        let mut io = io(vec![]);
        io.curves = vec![
            fixed.clone(),
            ResqCurve {
                log_normal: true,
                points: vec![point(1, 0.03), point(1000, 2.0)],
                ..fixed.clone()
            },
        ];
        // worst from 10 records: 0.323 / 0.38 (the fixed curve at one vCPU)
        assert!((io.io_limit_efficiency() - 0.323 / 0.38).abs() < 1e-9);
        assert!((fixed.efficiency(10, 0.02) - 0.023 / 0.025).abs() < 1e-9);
        assert!((fixed.points[2].cpu_per_put() - 0.0001).abs() < 1e-12);
        assert!(io.table().contains("| 1769 | log-normal | 1000 |"));
        let no_one = ResqCurve {
            points: vec![point(10, 0.025)],
            ..fixed
        };
        assert!(no_one.worst_efficiency(0.02).is_nan());
    }

    #[test]
    fn the_charts_have_one_series_per_side_measured_at_each_quota() {
        let io = io(vec![
            quota(
                256,
                vec![
                    row(10, [0.04, 0.04, 0.06, 0.06, 0.30, 0.05]),
                    row(1000, [0.80, 0.30, 9.0, 8.0, f64::NAN, 2.0]),
                ],
            ),
            QuotaRun {
                memory_mb: ONE_VCPU_MB,
                rows: vec![],
                skipped: Some("no cgroup".into()),
            },
        ]);
        let charts = io.wall_charts();
        assert_eq!(charts.len(), 1);
        let (title, series) = &charts[0];
        assert!(title.starts_with("256 MB (0.145 vCPU)"), "{title}");
        assert_eq!(series.len(), 6);
        let boto3 = series
            .iter()
            .find(|(name, _)| name == Side::Boto3.name())
            .unwrap();
        assert_eq!(boto3.1, vec![(10.0, 300.0)]);
        let resq = &series[0];
        assert_eq!(resq.0, Side::ResqDefault.name());
        assert_eq!(resq.1.len(), 2);
        assert!((resq.1[1].0 - 1000.0).abs() < 1e-9 && (resq.1[1].1 - 800.0).abs() < 1e-9);
    }

    #[test]
    fn resqs_peaks_are_the_highest_of_its_runs_and_never_a_peers() {
        let mut rows = vec![row(10, [0.02; 6]), row(100, [0.05; 6])];
        rows[0].sides[0].peak_fds = 31;
        rows[1].sides[0].peak_fds = 140;
        rows[1].sides[0].peak_rss_kb = 40 * 1024 + 512;
        // the tuned runs hold a descriptor per record in flight by construction: not counted
        rows[1].sides[1].peak_fds = 910;
        rows[1].sides[1].peak_rss_kb = 120 * 1024;
        // a peer's descriptors and memory are not resq's
        rows[1].sides[3].peak_fds = 920;
        rows[1].sides[3].peak_rss_kb = 90 * 1024;
        let mut other = vec![row(10, [0.02; 6])];
        other[0].sides[0].peak_fds = 35;
        let mut io = io(vec![quota(256, rows), quota(ONE_VCPU_MB, other)]);
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
    fn a_process_cpu_time_is_read_from_its_threads() {
        let me = std::process::id();
        let before = process_cpu_ns(me);
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_ns(me) > before);
        assert_eq!(process_cpu_ns(u32::MAX), 0);
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
