//! The redriver as deployed (issue 37, item 3): the release `redriver` binary, handed its
//! invocation by a Lambda runtime API on 127.0.0.1 (the chaos run's
//! [`resq_local::chaos::runtime::Function`], as [`crate::function`] runs the consumer), under
//! the cgroup CPU quota of its memory size ([`CpuCgroup`]), with the template's environment
//! (its defaults), logging JSON at INFO as Lambda keeps it. SQS is the stand-in
//! ([`FakeSqs`]) answering each call after a log-normal latency (median [`SQS_MEDIAN_MS`],
//! seeded); S3 is the S3 stand-in ([`S3StandIn`], plain HTTP: archive writes and the
//! pointers of 1 MiB replays).
//!
//! What differs from AWS, on purpose: the stand-ins serve no CloudWatch, Lambda or S3
//! listing, so `PAUSE_ON_ALARMS` and `CONSUMER_EVENT_SOURCE_MAPPING` are left empty (reading
//! them is a call at the start of a run and every 30 s), and the keep lists cannot be read:
//! the run then holds its kept messages for the run (released at its end) instead of listing
//! and hiding them.
//!
//! Each run is one invocation, `{"ratePerSecond": 3000}` (resq's maximum), of a warm process
//! (a small invocation first warms it), on a DLQ of one [`Shape`]; every replay must arrive.
//! Its rate is read twice: between its first and last send, off the stand-in's request log
//! (the drain's sustained rate, what a run of up to 300 s keeps), and over the whole
//! invocation (its start, and its end: a last receive's 1 s long poll, the release of what it
//! held).
//!
//! Measurements only: nothing here fails a run for being slow.

use std::path::Path;
use std::time::{Duration, Instant};

use resq_local::chaos::runtime::Function;
use resq_local::driver::Ended;
use serde_json::{Value, json};

use crate::fakesqs::{FakeSqs, Latency};
use crate::function::CpuCgroup;
use crate::s3standin::{self, S3StandIn};

/// SQS's median latency, ms (log-normal, σ [`SQS_SIGMA`]).
pub const SQS_MEDIAN_MS: u64 = 15;
/// Its spread (σ of the log).
pub const SQS_SIGMA: f64 = 0.4;
/// The rate each run is invoked at.
pub const RATE: f64 = resq_redriver::config::MAX_RATE_PER_SECOND;
/// `redrive_msgs_per_s_deployed`'s goal.
pub const GOAL_MSGS_PER_S: f64 = 2_500.0;
/// The template's defaults, read as `resq check` reads them (the bench is built with it).
fn template() -> crate::cost::Template {
    crate::cost::Template::deployed().expect("infra/template.yaml has its defaults")
}

/// The template's `RedriverMemorySize` default, MB.
pub fn template_memory_mb() -> u64 {
    template().redriver_memory_mb as u64
}

/// What a DLQ holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Messages.
    pub messages: usize,
    /// Bytes of each body.
    pub body_bytes: usize,
    /// Of every ten, how many are permanent failures (kept).
    pub permanent_in_10: usize,
    /// A FIFO DLQ (and main queue) with this many message groups; `None`: standard.
    pub fifo_groups: Option<usize>,
}

impl Shape {
    /// Its name in the table.
    pub fn name(&self) -> String {
        let size = match self.body_bytes {
            b if b >= 1 << 20 => format!("{} MiB", b >> 20),
            b => format!("{} KB", b / 1024),
        };
        let queue = match self.fifo_groups {
            Some(1) => "FIFO, 1 group".to_owned(),
            Some(g) => format!("FIFO, {g} groups"),
            None => "standard".to_owned(),
        };
        let mix = match self.permanent_in_10 {
            0 => "all transient".to_owned(),
            p => format!("{} % permanent", p * 10),
        };
        format!("{queue}, {size}, {mix}")
    }
    /// The same DLQ as `other`, whatever the number of messages.
    pub fn like(&self, other: &Shape) -> bool {
        Shape {
            messages: other.messages,
            ..*self
        } == *other
    }
    /// Replays it should bring: its transient messages.
    pub fn replays(&self) -> usize {
        (0..self.messages)
            .filter(|i| i % 10 >= self.permanent_in_10)
            .count()
    }
}

/// One run of one shape at one memory size.
#[derive(Debug, Clone)]
pub struct DeployedRun {
    /// The DLQ.
    pub shape: Shape,
    /// The memory size emulated, MB (its CPU quota).
    pub memory_mb: u64,
    /// The invocation's wall time (the runtime API's), s.
    pub seconds: f64,
    /// Messages sent per second between its first and last send (the stand-in's log).
    pub sustained: f64,
    /// Replays confirmed.
    pub redriven: u64,
    /// Messages kept (permanent).
    pub kept: u64,
    /// The function's CPU over the invocation, s.
    pub cpu_seconds: f64,
    /// Periods its cgroup was throttled in, of those it ran in.
    pub throttled: (u64, u64),
}

impl DeployedRun {
    /// Replays confirmed per second of the whole invocation.
    pub fn invocation_msgs_per_s(&self) -> f64 {
        self.redriven as f64 / self.seconds
    }
    /// CPU per message received (replayed or kept), µs.
    pub fn cpu_us_per_msg(&self) -> f64 {
        self.cpu_seconds * 1e6 / (self.redriven + self.kept).max(1) as f64
    }
}

/// Every run.
#[derive(Debug, Clone, Default)]
pub struct Deployed {
    /// In the order run.
    pub runs: Vec<DeployedRun>,
    /// Why it was skipped (no cgroup), if it was.
    pub skipped: Option<String>,
}

impl Deployed {
    /// The headline run at `memory_mb`: the mixed standard DLQ of 1 KB bodies.
    pub fn headline(&self, memory_mb: u64) -> Option<&DeployedRun> {
        self.runs
            .iter()
            .find(|r| r.memory_mb == memory_mb && r.shape.like(&HEADLINE))
    }

    /// `redrive_msgs_per_s_deployed`: the headline's sustained rate at the template's default
    /// memory.
    pub fn msgs_per_s(&self) -> f64 {
        self.headline(template_memory_mb())
            .map_or(f64::NAN, |r| r.sustained)
    }

    /// The smallest memory size measured whose headline reaches the goal.
    pub fn smallest_reaching_goal(&self) -> Option<u64> {
        self.runs
            .iter()
            .filter(|r| r.shape.like(&HEADLINE) && r.sustained >= GOAL_MSGS_PER_S)
            .map(|r| r.memory_mb)
            .min()
    }

    /// The headline's cost per million replays at `memory_mb`, $ (Lambda's GB-s only).
    pub fn cost_per_million(&self, memory_mb: u64) -> Option<f64> {
        let r = self.headline(memory_mb)?;
        let ms_per_million = 1e6 / r.sustained * 1000.0;
        Some(crate::cost::gb_s(ms_per_million, memory_mb as f64) * crate::cost::LAMBDA_GB_SECOND)
    }

    /// What the figure says against its goal, and what the memory size that reaches it costs.
    pub fn statement(&self) -> String {
        if self.skipped.is_some() {
            return String::new();
        }
        let figure = format!(
            "\n`redrive_msgs_per_s_deployed` = {:.0} at {} MB (goal ≥ {GOAL_MSGS_PER_S:.0}; the standard DLQ of 1 KB bodies, 10 % permanent).",
            self.msgs_per_s(),
            template_memory_mb()
        );
        let cost = |mb: u64| {
            self.cost_per_million(mb).map_or(String::new(), |c| {
                format!(
                    " A million replays cost ${c:.4} of Lambda time there (GB-s at ${}).",
                    crate::cost::LAMBDA_GB_SECOND
                )
            })
        };
        match self.smallest_reaching_goal() {
            Some(mb) => format!(
                "{figure} The smallest memory size measured reaching it: {mb} MB.{}\n",
                cost(mb)
            ),
            None => format!("{figure} No memory size measured reached it.\n"),
        }
    }

    /// The table.
    pub fn table(&self) -> String {
        if let Some(why) = &self.skipped {
            return format!("skipped: {why}\n");
        }
        let mut out = "| DLQ | memory (CPU) | messages | invocation, s | msgs/s between sends | msgs/s of the invocation | CPU µs/msg | periods throttled |\n|---|---|---|---|---|---|---|---|\n".to_owned();
        for r in &self.runs {
            out.push_str(&format!(
                "| {} | {} MB ({:.3} vCPU) | {} | {:.2} | {:.0} | {:.0} | {:.0} | {} of {} |\n",
                r.shape.name(),
                r.memory_mb,
                CpuCgroup::quota_us(r.memory_mb) as f64 / crate::function::CFS_PERIOD_US as f64,
                r.shape.messages,
                r.seconds,
                r.sustained,
                r.invocation_msgs_per_s(),
                r.cpu_us_per_msg(),
                r.throttled.0,
                r.throttled.1
            ));
        }
        out
    }
}

/// The headline's DLQ: standard, 1 KB bodies, 10 % permanent.
pub const HEADLINE: Shape = Shape {
    messages: 20_000,
    body_bytes: 1024,
    permanent_in_10: 1,
    fifo_groups: None,
};

/// Every shape measured at the template's memory size (the headline first).
pub fn shapes() -> Vec<Shape> {
    let standard = |messages, body_bytes| Shape {
        messages,
        body_bytes,
        ..HEADLINE
    };
    let fifo = |messages, groups| Shape {
        messages,
        body_bytes: 1024,
        permanent_in_10: 0,
        fifo_groups: Some(groups),
    };
    vec![
        HEADLINE,
        standard(2_000, 64 * 1024),
        standard(200, 1 << 20),
        fifo(500, 1),
        fifo(2_000, 10),
        fifo(10_000, 1_000),
    ]
}

/// The environment of the template's defaults, pointed at the stand-ins.
fn env(sqs: &FakeSqs, s3: &S3StandIn, memory_mb: u64, fifo: bool) -> Vec<(String, String)> {
    let suffix = if fifo { ".fifo" } else { "" };
    let mut env = crate::coldstart::lambda_env("resq-redriver", "");
    env.extend(crate::coldstart::Trust::CertFile.env());
    let t = template();
    env.extend(
        [
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.to_string()),
            ("AWS_LAMBDA_LOG_LEVEL", "INFO".into()),
            // S3 path-style at the S3 stand-in; SQS at the SQS stand-in
            ("AWS_ENDPOINT_URL", s3.endpoint.clone()),
            ("AWS_ENDPOINT_URL_SQS", sqs.endpoint.clone()),
            (
                "MAIN_QUEUE_URL",
                sqs.queue_url(&format!("resq-orders{suffix}")),
            ),
            (
                "DLQ_URL",
                sqs.queue_url(&format!("resq-orders-dlq{suffix}")),
            ),
            ("ARCHIVE_BUCKET", "resq-bench".into()),
            ("MAX_REDRIVE_ATTEMPTS", "3".into()),
            ("DEADLINE_MARGIN_MS", "1000".into()),
            (
                "REDRIVE_RATE_PER_SECOND",
                t.redrive_rate_per_second.to_string(),
            ),
            ("MAX_MESSAGES_PER_RUN", "auto".into()),
            ("KEPT_IN_FLIGHT_MAX", "50000".into()),
            ("ARCHIVE_AFTER_SECONDS", t.archive_after_seconds.to_string()),
            ("PERMANENT_ACTION", "keep".into()),
            ("PAUSE_ON_ALARMS", String::new()),
            ("PAUSE_CONSUMER_ON_ALARMS", String::new()),
            ("CONSUMER_EVENT_SOURCE_MAPPING", String::new()),
            ("REDRIVE_RATE_MAX", "200".into()),
            ("ARCHIVE_SWEEP_SECONDS", "3600".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    env
}

/// Seeds the DLQ with `shape`'s messages (as the consumer leaves them).
fn seed(sqs: &FakeSqs, dlq: &str, shape: Shape, tag: &str) {
    let now = chrono::Utc::now().timestamp_millis().to_string();
    let attr = |v: &str| json!({"DataType": "String", "StringValue": v});
    let pad = "x".repeat(shape.body_bytes.saturating_sub(100));
    let messages = (0..shape.messages).map(|i| {
        let class = match i % 10 < shape.permanent_in_10 {
            true => "permanent",
            false => "transient",
        };
        let body = format!(
            "{{\"orderId\":\"{tag}-{i}\",\"userId\":\"u-1\",\"items\":[{{\"productId\":\"p-1\",\"quantity\":1}}],\"note\":\"{pad}\"}}"
        );
        let attributes = json!({
            resq::attributes::X_FAILURE_CLASS: attr(class),
            resq::attributes::X_FAILURE_REASON: attr("DOWNSTREAM_UNAVAILABLE"),
            resq::attributes::X_FIRST_SENT_AT: attr(&now),
        });
        let group = shape.fifo_groups.map(|g| format!("g-{}", i % g.max(1)));
        (body, attributes, group)
    });
    sqs.seed_each(dlq, messages);
}

/// CPU time of process `pid` so far (user + system), s.
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let Some(stat) = pid.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
    else {
        return 0.0;
    };
    // after the command's closing parenthesis: fields 3 onwards; utime and stime are 14, 15
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// `cpu.stat`'s periods and throttled periods of a cgroup.
fn periods(c: &CpuCgroup) -> (u64, u64) {
    let stat = std::fs::read_to_string(c.procs().with_file_name("cpu.stat")).unwrap_or_default();
    let get = |k: &str| {
        stat.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (get("nr_periods "), get("nr_throttled "))
}

/// A warm redriver process at `memory_mb` against fresh stand-ins, for `fifo` queues or not.
struct Deployment {
    rt: tokio::runtime::Runtime,
    sqs: FakeSqs,
    s3: S3StandIn,
    function: Function,
    cgroup: CpuCgroup,
    fifo: bool,
    files: Vec<std::path::PathBuf>,
}

impl Deployment {
    fn start(binary: &Path, memory_mb: u64, fifo: bool) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let sqs = FakeSqs::start_with(Latency {
            median: Duration::from_millis(SQS_MEDIAN_MS),
            sigma: SQS_SIGMA,
            load: None,
            seed: 37,
        })?;
        let s3 = S3StandIn::start(s3standin::Config::default())?;
        let cgroup = CpuCgroup::create(memory_mb)?;
        let binary = std::fs::canonicalize(binary)
            .map_err(|e| format!("{}: {e} (build it first)", binary.display()))?;
        let tag = format!("redriver-{}-{memory_mb}-{fifo}", std::process::id());
        let wrapper = std::env::temp_dir().join(format!("resq-bench-in-cgroup-{tag}.sh"));
        cgroup.wrapper(&wrapper, &binary)?;
        let log = std::env::temp_dir().join(format!("resq-bench-{tag}.log"));
        let function = Function::new(
            "redriver",
            &wrapper,
            env(&sqs, &s3, memory_mb, fifo),
            &log,
            Duration::from_secs_f64(template().redriver_timeout_seconds),
        )
        .map_err(|e| e.to_string())?;
        Ok(Self {
            rt,
            sqs,
            s3,
            function,
            cgroup,
            fifo,
            files: vec![wrapper, log],
        })
    }

    fn queue(&self, name: &str) -> String {
        let suffix = if self.fifo { ".fifo" } else { "" };
        self.sqs.queue_url(&format!("{name}{suffix}"))
    }

    /// One invocation over a DLQ of `shape`; every replay must arrive.
    fn run(&mut self, shape: Shape, memory_mb: u64) -> Result<DeployedRun, String> {
        let (dlq, main) = (self.queue("resq-orders-dlq"), self.queue("resq-orders"));
        seed(
            &self.sqs,
            &dlq,
            shape,
            &format!("d{}", rand::random::<u32>()),
        );
        let event = json!({ "ratePerSecond": RATE }).to_string();
        let (cpu_before, periods_before) =
            (cpu_seconds(self.function.pid()), periods(&self.cgroup));
        let mark = self.sqs.mark();
        let started = Instant::now();
        let ended = self
            .rt
            .block_on(self.function.invoke(&event, None))
            .map_err(|e| e.to_string())?;
        let seconds = started.elapsed().as_secs_f64();
        // the process starts on the first invocation: its CPU counts from 0 then
        let cpu = cpu_seconds(self.function.pid()) - cpu_before;
        let after = periods(&self.cgroup);
        let summary: Value = match ended {
            Ended::Response(body) => serde_json::from_str(&body).map_err(|e| e.to_string())?,
            other => return Err(format!("the redriver did not answer: {other:?}")),
        };
        let count = |k: &str| summary[k].as_u64().unwrap_or(0);
        let sustained = crate::proxy::achieved(&self.sqs.since(mark)).unwrap_or(f64::NAN);
        let (redriven, kept, landed) = (count("redriven"), count("kept"), self.sqs.depth(&main));
        self.sqs.purge(&main);
        self.sqs.purge(&dlq);
        self.s3.clear();
        let what = format!("{} at {memory_mb} MB", shape.name());
        if redriven as usize != shape.replays() || landed != shape.replays() {
            return Err(format!(
                "{what}: {redriven} redriven, {landed} arrived of {} ({summary})",
                shape.replays()
            ));
        }
        let run = DeployedRun {
            shape,
            memory_mb,
            seconds,
            sustained,
            redriven,
            kept,
            cpu_seconds: cpu,
            throttled: (after.1 - periods_before.1, after.0 - periods_before.0),
        };
        eprintln!(
            "  {what}: {:.2} s, {:.0} msg/s between sends, {:.0} msg/s of the invocation, {:.0} µs CPU/msg, throttled {} of {} periods",
            run.seconds,
            run.sustained,
            run.invocation_msgs_per_s(),
            run.cpu_us_per_msg(),
            run.throttled.0,
            run.throttled.1
        );
        Ok(run)
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        self.rt.block_on(self.function.kill());
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// A small warm-up invocation (a cold start is not what is measured).
fn warm(d: &mut Deployment, memory_mb: u64) -> Result<(), String> {
    let shape = Shape {
        messages: 100,
        ..HEADLINE
    };
    let shape = Shape {
        permanent_in_10: if d.fifo { 0 } else { 1 },
        fifo_groups: d.fifo.then_some(10),
        ..shape
    };
    d.run(shape, memory_mb).map(|_| ())
}

/// The memory sizes the headline is measured at besides the template's, MB: those below it
/// (what they fall short by), and those above until one reaches the goal.
pub const SIZES_MB: [u64; 4] = [256, 512, 1024, crate::function::ONE_VCPU_MB];

/// Every shape at the template's memory size; the headline at each of `sizes` (MB) below it,
/// and, while none reaches the goal, above it. `scale` (0–1] scales the message counts down
/// (a quick look).
pub fn measure(binary: &Path, sizes: &[u64], scale: f64) -> Result<Deployed, String> {
    eprintln!(
        "bench: the redriver as deployed (release binary, Lambda runtime API, cgroup CPU quota; SQS {SQS_MEDIAN_MS} ms log-normal)"
    );
    let mut out = Deployed::default();
    if let Err(e) = CpuCgroup::create(template_memory_mb()) {
        out.skipped = Some(e);
        return Ok(out);
    }
    let scaled = |s: Shape| Shape {
        messages: ((s.messages as f64 * scale).round() as usize).max(20),
        ..s
    };
    let shapes: Vec<Shape> = shapes().into_iter().map(scaled).collect();
    for fifo in [false, true] {
        let mut d = Deployment::start(binary, template_memory_mb(), fifo)?;
        warm(&mut d, template_memory_mb())?;
        for shape in shapes.iter().filter(|s| s.fifo_groups.is_some() == fifo) {
            out.runs.push(d.run(*shape, template_memory_mb())?);
        }
    }
    let headline = scaled(HEADLINE);
    for &mb in sizes.iter().filter(|mb| **mb != template_memory_mb()) {
        if mb > template_memory_mb() && out.smallest_reaching_goal().is_some() {
            break;
        }
        let mut d = Deployment::start(binary, mb, false)?;
        warm(&mut d, mb)?;
        out.runs.push(d.run(headline, mb)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(memory_mb: u64, msgs_per_s: f64) -> DeployedRun {
        DeployedRun {
            shape: HEADLINE,
            memory_mb,
            seconds: 1.0,
            sustained: msgs_per_s,
            redriven: msgs_per_s as u64,
            kept: 0,
            cpu_seconds: 0.0,
            throttled: (0, 0),
        }
    }

    #[test]
    fn the_figure_is_the_headline_at_the_template_memory_and_the_size_is_the_smallest_reaching_the_goal()
     {
        let d = Deployed {
            runs: vec![
                run(256, 1300.0),
                run(512, 2400.0),
                run(1024, 2900.0),
                run(1769, 2950.0),
            ],
            skipped: None,
        };
        assert_eq!(
            d.msgs_per_s(),
            d.headline(template_memory_mb()).unwrap().sustained
        );
        assert_eq!(d.smallest_reaching_goal(), Some(1024));
        // 1e6 replays at 2,900/s: 344.8 s of 1 GB (1,024 MB / 1,024)
        let cost = d.cost_per_million(1024).unwrap();
        assert!(
            (cost - 344.83 * crate::cost::LAMBDA_GB_SECOND).abs() < 1e-6,
            "{cost}"
        );
        assert_eq!(HEADLINE.replays(), 18_000);
    }
}
