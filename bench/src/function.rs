//! The consumer function as Lambda runs it: the release `consumer` binary in a child process,
//! handed events by a Lambda runtime API on 127.0.0.1 (the chaos run's
//! [`resq_local::chaos::runtime::Function`]), its DLQ sends and its order records' S3 puts
//! answered by the stand-in (in memory, at once or after a set delay), its JSON logs at INFO
//! read off its output as Lambda's log pipeline keeps them.
//!
//! What is read off it:
//! - its memory: the process's `VmHWM` once it has answered (runtime, SDK clients and the
//!   payload's bytes included): what the function's memory size must hold;
//! - its wall time per warm invocation under a CPU quota of the share Lambda gives a memory
//!   size ([`CpuCgroup`]: 1,769 MB is one vCPU), on an I/O-bound batch ([`memory_sizes`]);
//! - the bytes of log output per warm invocation ([`log_bytes_per_invocation`]), what
//!   CloudWatch Logs ingests.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use resq_local::chaos::runtime::Function;
use resq_local::driver::Ended;
use serde_json::Value;

use crate::fakesqs::FakeSqs;

/// Lambda's smallest and largest memory sizes, MB.
pub const LAMBDA_MEMORY_MB: (u64, u64) = (128, 10_240);

/// The memory size at which Lambda gives a function one full vCPU (AWS Lambda developer
/// guide, "Configure Lambda function memory": CPU is allocated in proportion to memory).
pub const ONE_VCPU_MB: u64 = 1769;

/// The largest payload Lambda hands an SQS-triggered function (an event source mapping's batch
/// is at most 6 MB).
pub const MAX_PAYLOAD_BYTES: usize = 6_000_000;

/// The goal for the function's peak on the largest payload: 128 MB, Lambda's smallest size,
/// with 20 % to spare (128 / 1.25 = 102.4).
pub const PEAK_GOAL_MB: f64 = 102.0;

/// One invocation of the function.
#[derive(Debug, Clone, Copy)]
pub struct FunctionRun {
    /// Records in the event.
    pub records: usize,
    /// The event's size, bytes.
    pub payload_bytes: usize,
    /// Peak resident memory of the process, KiB.
    pub peak_kb: u64,
    /// Records the response reported failed.
    pub failures: usize,
}

impl FunctionRun {
    /// The smallest Lambda memory size (1 MB steps from 128 MB) that holds the peak, with
    /// `headroom` (e.g. 0.25) for what varies between invocations.
    pub fn smallest_memory_mb(&self, headroom: f64) -> u64 {
        let needed_mb = (self.peak_kb as f64 * 1024.0 * (1.0 + headroom) / 1e6).ceil() as u64;
        needed_mb.clamp(LAMBDA_MEMORY_MB.0, LAMBDA_MEMORY_MB.1)
    }

    /// The peak in MB (10^6 bytes, as Lambda counts memory sizes).
    pub fn peak_mb(&self) -> f64 {
        self.peak_kb as f64 * 1024.0 / 1e6
    }
}

/// A CPU cgroup (v1) whose quota is the share of a vCPU Lambda gives `memory_mb`: a period of
/// 100 ms and a quota of `100 ms × memory / 1,769` (at least 1 ms). Removed when dropped (its
/// processes must be gone by then).
pub struct CpuCgroup {
    dir: PathBuf,
    /// The memory size it stands for, MB.
    pub memory_mb: u64,
}

/// Where cgroup v1's CPU controller is mounted.
const CPU_CGROUP_ROOT: &str = "/sys/fs/cgroup/cpu";
/// The CFS period, µs.
pub const CFS_PERIOD_US: u64 = 100_000;

impl CpuCgroup {
    /// The quota per [`CFS_PERIOD_US`] for `memory_mb`, µs.
    pub fn quota_us(memory_mb: u64) -> u64 {
        (CFS_PERIOD_US * memory_mb / ONE_VCPU_MB).max(1000)
    }

    /// Creates `resq-bench-<size>-<pid>` under the CPU controller with the quota for
    /// `memory_mb`; an error (e.g. no cgroup v1, not root) says why.
    pub fn create(memory_mb: u64) -> Result<Self, String> {
        let root = Path::new(CPU_CGROUP_ROOT);
        if !root.join("cpu.cfs_quota_us").exists() {
            return Err(format!(
                "no cgroup v1 CPU controller at {CPU_CGROUP_ROOT} (cpu.cfs_quota_us)"
            ));
        }
        let dir = root.join(format!("resq-bench-{memory_mb}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let cgroup = Self { dir, memory_mb };
        cgroup.write("cpu.cfs_period_us", CFS_PERIOD_US)?;
        cgroup.write("cpu.cfs_quota_us", Self::quota_us(memory_mb))?;
        Ok(cgroup)
    }

    fn write(&self, file: &str, value: u64) -> Result<(), String> {
        let path = self.dir.join(file);
        std::fs::write(&path, value.to_string()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// `cgroup.procs`: a process writes its own pid there to join.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// A script that joins this cgroup, then `exec`s `binary` (so the pid and its memory are
    /// the binary's): what a function runs under the quota. `tag` names it apart.
    pub fn wrapper(&self, binary: &Path, tag: &str) -> Result<PathBuf, String> {
        let path = std::env::temp_dir().join(format!("resq-bench-in-cgroup-{tag}.sh"));
        let script = format!(
            "#!/bin/sh\necho $$ > '{}' || exit 97\nexec '{}'\n",
            self.procs().display(),
            binary.display()
        );
        std::fs::write(&path, script).map_err(|e| format!("{}: {e}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    /// Periods in which the group was throttled, from `cpu.stat`.
    pub fn throttled_periods(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("cpu.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The consumer binary running as Lambda runs it, one warm process, invoked as often as asked.
pub struct Harness {
    rt: tokio::runtime::Runtime,
    /// The stand-in SQS and S3.
    pub sqs: FakeSqs,
    function: Function,
    log: PathBuf,
    wrapper: Option<PathBuf>,
}

/// One invocation as the runtime API saw it.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// From handing the event over to the response, as the runtime API sees it.
    pub wall: Duration,
    /// The response body.
    pub response: String,
    /// Records it reported failed.
    pub failures: usize,
}

impl Harness {
    /// Starts the stand-in (every answer `latency` after its call arrived) and readies the
    /// function; the process starts on the first invocation. With `cgroup`, the process joins
    /// it before it runs (a wrapper script writes its own pid to `cgroup.procs`, then `exec`s
    /// the binary, so the pid and its memory are the binary's).
    pub fn start(
        binary: &Path,
        latency: Duration,
        cgroup: Option<&CpuCgroup>,
    ) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let sqs = FakeSqs::start_with_latency(latency)?;
        let tag = format!(
            "{}-{}",
            std::process::id(),
            cgroup.map_or(0, |c| c.memory_mb)
        );
        let log = std::env::temp_dir().join(format!("resq-bench-function-{tag}.log"));
        let _ = std::fs::remove_file(&log);
        let binary = std::fs::canonicalize(binary)
            .map_err(|e| format!("{}: {e} (build it first)", binary.display()))?;
        let wrapper = match cgroup {
            None => None,
            Some(c) => Some(c.wrapper(&binary, &tag)?),
        };
        // the Lambda environment the cold-start runs use, pointed at the stand-in (later
        // entries win; the runtime API is the Function's own)
        let mut env = crate::coldstart::lambda_env("resq-consumer", "");
        env.extend(crate::coldstart::Trust::CertFile.env()); // as the template deploys it
        env.extend(
            [
                ("MAIN_QUEUE_URL", sqs.queue_url("resq-orders")),
                ("DLQ_URL", sqs.queue_url("resq-orders-dlq")),
                ("AWS_ENDPOINT_URL", sqs.endpoint.clone()),
                ("AWS_LAMBDA_LOG_LEVEL", "INFO".into()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        let program = wrapper.as_deref().unwrap_or(&binary);
        let function = Function::new("consumer", program, env, &log, Duration::from_secs(120))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            rt,
            sqs,
            function,
            log,
            wrapper,
        })
    }

    /// The DLQ's URL at the stand-in.
    pub fn dlq_url(&self) -> String {
        self.sqs.queue_url("resq-orders-dlq")
    }

    /// Invokes the function with `event` and waits for its answer.
    pub fn invoke(&mut self, event: &str) -> Result<Invocation, String> {
        let started = Instant::now();
        let ended = self
            .rt
            .block_on(self.function.invoke(event, None))
            .map_err(|e| e.to_string())?;
        let wall = started.elapsed();
        let response = match ended {
            Ended::Response(body) => body,
            other => return Err(format!("the consumer did not answer: {other:?}")),
        };
        let failures = serde_json::from_str::<Value>(&response)
            .map_err(|e| format!("response {response:?}: {e}"))?["batchItemFailures"]
            .as_array()
            .map_or(0, Vec::len);
        Ok(Invocation {
            wall,
            response,
            failures,
        })
    }

    /// The process's peak resident memory so far, KiB.
    pub fn peak_kb(&self) -> Result<u64, String> {
        self.function
            .peak_rss_kb()
            .ok_or_else(|| "the consumer's process was gone before its memory was read".into())
    }

    /// Bytes of log output kept so far (what Lambda's pipeline passes on to CloudWatch Logs),
    /// once the lines in flight have arrived.
    pub fn log_bytes(&self) -> u64 {
        self.rt
            .block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.rt.block_on(self.function.kill());
        let _ = std::fs::remove_file(&self.log);
        if let Some(w) = &self.wrapper {
            let _ = std::fs::remove_file(w);
        }
    }
}

fn records_in(event: &str) -> Result<usize, String> {
    Ok(
        serde_json::from_str::<Value>(event).map_err(|e| format!("event: {e}"))?["Records"]
            .as_array()
            .map_or(0, Vec::len),
    )
}

/// Invokes the consumer `binary` `invocations` times (at least once; the first in a fresh
/// process: a cold start, as the first invocation of an instance is) with the event in
/// `event_path` and reads its peak memory over all of them.
pub fn consumer_peak(
    binary: &Path,
    event_path: &Path,
    invocations: usize,
) -> Result<FunctionRun, String> {
    let event = std::fs::read_to_string(event_path)
        .map_err(|e| format!("cannot read {}: {e}", event_path.display()))?;
    let records = records_in(&event)?;
    let mut h = Harness::start(binary, Duration::ZERO, None)?;
    let mut failures = 0;
    for _ in 0..invocations.max(1) {
        failures = failures.max(h.invoke(&event)?.failures);
    }
    Ok(FunctionRun {
        records,
        payload_bytes: event.len(),
        peak_kb: h.peak_kb()?,
        failures,
    })
}

/// The function's peak on the largest payload Lambda delivers (6 MB) in which every record is
/// rejected (order-sized bodies failing validation: each one's DLQ copy is held until the
/// invocation settles), over a cold and a warm invocation. Every copy must reach the DLQ and
/// nothing be reported failed. The event is written to `work`.
pub fn rejected_6mb_peak(binary: &Path, work: &Path) -> Result<FunctionRun, String> {
    let (built, bytes) = crate::event::largest_within(MAX_PAYLOAD_BYTES, |n| {
        crate::event::sqs_rejected_event(n, 42)
    })?;
    let records = built.rejected;
    std::fs::create_dir_all(work).map_err(|e| format!("{}: {e}", work.display()))?;
    let path = work.join(format!("sqs-event-6mb-rejected-{records}.json"));
    std::fs::write(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let event = String::from_utf8(bytes).map_err(|e| e.to_string())?;
    let mut h = Harness::start(binary, Duration::ZERO, None)?;
    for i in 1..=2 {
        let out = h.invoke(&event)?;
        let copies = h.sqs.depth(&h.dlq_url());
        if out.failures != 0 || copies != records {
            return Err(format!(
                "the rejected 6 MB event, invocation {i}: {} reported failed, {copies} DLQ copies of {records} records",
                out.failures
            ));
        }
        // the stand-in's copies are the bench's memory, not the function's
        h.sqs.purge(&h.dlq_url());
    }
    Ok(FunctionRun {
        records,
        payload_bytes: event.len(),
        peak_kb: h.peak_kb()?,
        failures: 0,
    })
}

/// One memory size of [`memory_sizes`].
#[derive(Debug, Clone, PartialEq)]
pub struct SizeRow {
    /// The memory size emulated, MB.
    pub memory_mb: u64,
    /// The CPU quota per 100 ms period, µs.
    pub quota_us: u64,
    /// Wall time of each warm invocation, ms (the warm-up left out).
    pub wall_ms: Vec<f64>,
    /// Periods in which the cgroup was throttled over the warm invocations.
    pub throttled_periods: u64,
}

impl SizeRow {
    /// The median warm wall time, ms.
    pub fn median_ms(&self) -> f64 {
        crate::measured::median(&mut self.wall_ms.clone())
    }
    /// The fastest and slowest warm invocation, ms.
    pub fn range_ms(&self) -> (f64, f64) {
        let min = self.wall_ms.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self
            .wall_ms
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    }
}

/// The memory-size sweep: the rows measured, or why none could be.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizes {
    /// Records in the batch and the stand-in's answer delay, ms.
    pub records: usize,
    /// Delay of each S3 put's (and SQS call's) answer, ms.
    pub latency_ms: u64,
    /// One per memory size, smallest first.
    pub rows: Vec<SizeRow>,
    /// Why the sweep was skipped (no cgroup), if it was.
    pub skipped: Option<String>,
}

/// The tolerance of [`Sizes::smallest_within`]: no more than 5 % slower than a full vCPU.
pub const SLOWDOWN_TOLERANCE: f64 = 0.05;

impl Sizes {
    /// The smallest memory size whose median is within `tolerance` of the largest size's
    /// (the full vCPU's); `None` without rows.
    pub fn smallest_within(&self, tolerance: f64) -> Option<u64> {
        let full = self.rows.iter().max_by_key(|r| r.memory_mb)?.median_ms();
        self.rows
            .iter()
            .filter(|r| r.median_ms() <= full * (1.0 + tolerance))
            .map(|r| r.memory_mb)
            .min()
    }
}

/// The memory sizes the sweep emulates, MB.
pub const SWEEP_MB: [u64; 5] = [128, 256, 512, 1024, ONE_VCPU_MB];

/// An I/O-bound batch (`records` valid orders, each S3 conditional put answered `latency_ms`
/// after it arrived) through the consumer binary at each memory size's CPU share: one warm
/// process per size, each in its cgroup, a warm-up invocation each, then `rounds` invocations
/// per size, the sizes taking turns (drift on the machine hits all alike). If a cgroup cannot
/// be made, the sweep is skipped with the reason, never failed.
pub fn memory_sizes(
    binary: &Path,
    sizes: &[u64],
    records: usize,
    latency_ms: u64,
    rounds: usize,
) -> Result<Sizes, String> {
    let mut out = Sizes {
        records,
        latency_ms,
        rows: Vec::new(),
        skipped: None,
    };
    let mut cgroups = Vec::new();
    for &mb in sizes {
        match CpuCgroup::create(mb) {
            Ok(c) => cgroups.push(c),
            Err(e) => {
                out.skipped = Some(format!("cannot emulate Lambda's CPU share: {e}"));
                return Ok(out);
            }
        }
    }
    let event = serde_json::to_string(&crate::event::sqs_event(records, 0.0, 7).event)
        .map_err(|e| e.to_string())?;
    let latency = Duration::from_millis(latency_ms);
    let mut harnesses = Vec::new();
    for c in &cgroups {
        let mut h = Harness::start(binary, latency, Some(c))?;
        let warm_up = h.invoke(&event)?; // the cold start, the SDK's first connections
        if warm_up.failures != 0 {
            return Err(format!(
                "warm-up at {} MB: {}",
                c.memory_mb, warm_up.response
            ));
        }
        harnesses.push(h);
    }
    let before: Vec<u64> = cgroups.iter().map(CpuCgroup::throttled_periods).collect();
    let mut walls = vec![Vec::new(); cgroups.len()];
    for _ in 0..rounds.max(1) {
        for (h, w) in harnesses.iter_mut().zip(&mut walls) {
            let inv = h.invoke(&event)?;
            if inv.failures != 0 {
                return Err(format!(
                    "a warm invocation failed records: {}",
                    inv.response
                ));
            }
            w.push(inv.wall.as_secs_f64() * 1000.0);
        }
    }
    for ((c, w), b) in cgroups.iter().zip(walls).zip(before) {
        out.rows.push(SizeRow {
            memory_mb: c.memory_mb,
            quota_us: CpuCgroup::quota_us(c.memory_mb),
            wall_ms: w,
            throttled_periods: c.throttled_periods().saturating_sub(b),
        });
    }
    drop(harnesses); // the processes go before their cgroups
    Ok(out)
}

/// Bytes of log output per warm invocation of a healthy batch of `records` valid orders (the
/// template's batch size), at INFO, as Lambda's pipeline keeps them: the mean over
/// `invocations` warm invocations after a warm-up.
pub fn log_bytes_per_invocation(
    binary: &Path,
    records: usize,
    invocations: usize,
) -> Result<f64, String> {
    let event = serde_json::to_string(&crate::event::sqs_event(records, 0.0, 11).event)
        .map_err(|e| e.to_string())?;
    let mut h = Harness::start(binary, Duration::ZERO, None)?;
    h.invoke(&event)?;
    let before = h.log_bytes();
    let n = invocations.max(1);
    for _ in 0..n {
        let out = h.invoke(&event)?;
        if out.failures != 0 {
            return Err(format!("a healthy batch failed records: {}", out.response));
        }
    }
    Ok((h.log_bytes() - before) as f64 / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_memory_size_holds_the_peak_with_headroom() {
        let run = |peak_kb| FunctionRun {
            records: 1,
            payload_bytes: 1,
            peak_kb,
            failures: 0,
        };
        // 20 MiB peak: Lambda's floor
        assert_eq!(run(20 * 1024).smallest_memory_mb(0.25), 128);
        // 200 MiB = 209.7 MB, +25 % = 262.1 MB: 263
        assert_eq!(run(200 * 1024).smallest_memory_mb(0.25), 263);
        assert_eq!(run(200 * 1024).smallest_memory_mb(0.0), 210);
        assert_eq!(run(u64::MAX / 4096).smallest_memory_mb(0.0), 10_240);
        // 100,000 KiB = 102.4 MB
        assert!((run(100_000).peak_mb() - 102.4).abs() < 1e-9);
    }

    #[test]
    fn the_cpu_quota_is_lambdas_share_of_a_vcpu() {
        // 100 ms × 128 / 1769 = 7.235 ms
        assert_eq!(CpuCgroup::quota_us(128), 7235);
        assert_eq!(CpuCgroup::quota_us(256), 14_471);
        assert_eq!(CpuCgroup::quota_us(1769), 100_000);
        assert_eq!(CpuCgroup::quota_us(3538), 200_000);
        // never under the kernel's 1 ms minimum
        assert_eq!(CpuCgroup::quota_us(1), 1000);
    }

    fn row(memory_mb: u64, wall_ms: Vec<f64>) -> SizeRow {
        SizeRow {
            memory_mb,
            quota_us: CpuCgroup::quota_us(memory_mb),
            wall_ms,
            throttled_periods: 0,
        }
    }

    #[test]
    fn the_smallest_size_within_five_percent_of_a_full_vcpu_is_found_on_medians() {
        let sizes = Sizes {
            records: 100,
            latency_ms: 20,
            rows: vec![
                row(128, vec![400.0, 420.0, 380.0]),
                row(256, vec![212.0, 300.0, 209.0]), // median 212: 6 % over 200
                row(512, vec![205.0, 209.0, 900.0]), // median 209: 4.5 % over
                row(1769, vec![199.0, 200.0, 201.0]),
            ],
            skipped: None,
        };
        assert_eq!(sizes.smallest_within(0.05), Some(512));
        assert_eq!(sizes.smallest_within(0.10), Some(256));
        assert_eq!(sizes.rows[2].range_ms(), (205.0, 900.0));
        let none = Sizes {
            rows: vec![],
            ..sizes
        };
        assert_eq!(none.smallest_within(0.05), None);
    }
}
