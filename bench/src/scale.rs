//! The redriver at scale (issue 24): the pipelined design (several receive → settle cycles in
//! flight under one token bucket) against the sequential one (`with_max_cycles_in_flight(1)`:
//! one batch at a time), each run as the measured `redrive` child.
//!
//! - On the bench's stand-in SQS ([`FakeSqs`]) answering every call 10 ms after it arrived:
//!   messages/s per run, SQS requests per redriven message (off the stand-in's request log),
//!   the rate error at each rate, and the minutes a 1,000,000-message DLQ takes (a large drain
//!   measured and extrapolated linearly; the sequential design's from its messages/s).
//! - On LocalStack's SQS, through the counting proxy: a large drain's messages/s, and what
//!   limits it (how long each call waited at the proxy, and the CPU each process used).
//!
//! Measurements only: nothing here fails a run for being slow.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::child::Design;
use crate::fakesqs::FakeSqs;
use crate::measured;
use crate::options::Options;
use crate::proxy::{CountingProxy, Request, achieved, breakdown, counted};
use crate::queues;

/// The rate the throughput and the drain are measured at: resq's maximum.
pub const SCALE_RATE: f64 = resq_redriver::config::MAX_RATE_PER_SECOND;
/// The drain the bench extrapolates to.
pub const MILLION: f64 = 1_000_000.0;

/// One run of one design.
#[derive(Debug, Clone)]
pub struct RunFigures {
    /// The configured rate.
    pub rate: f64,
    /// Messages seeded (and redriven: every one must arrive).
    pub messages: usize,
    /// The run's own wall time (the engine's `run`, in the child), s.
    pub seconds: f64,
    /// The rate between sends, read off the request log.
    pub achieved: f64,
    /// SQS requests it made (counted).
    pub requests: usize,
    /// CPU used over the run, s: the redriver child's (`getrusage` in the child) and the
    /// stand-in's (the bench process, which serves it, over the child's run).
    pub cpu_seconds: (f64, f64),
}

impl RunFigures {
    /// Messages redriven per second of the run.
    pub fn msgs_per_s(&self) -> f64 {
        self.messages as f64 / self.seconds
    }
    /// (achieved − configured) / configured, %.
    pub fn error_pct(&self) -> f64 {
        (self.achieved - self.rate) / self.rate * 100.0
    }
    /// CPU used over the run, in cores: (redriver, stand-in).
    pub fn cpu_cores(&self) -> (f64, f64) {
        (
            self.cpu_seconds.0 / self.seconds,
            self.cpu_seconds.1 / self.seconds,
        )
    }
}

/// One design on the stand-in with injected latency.
#[derive(Debug, Clone)]
pub struct DesignFigures {
    /// Which.
    pub design: Design,
    /// Its runs at each rate, in order.
    pub rates: Vec<RunFigures>,
    /// The large drain at [`SCALE_RATE`] (the pipelined design only).
    pub drain: Option<RunFigures>,
    /// `action count` of every run's requests.
    pub breakdown: String,
}

impl DesignFigures {
    fn runs(&self) -> impl Iterator<Item = &RunFigures> {
        self.rates.iter().chain(&self.drain)
    }
    /// The run its messages/s comes from: the drain, else its run at [`SCALE_RATE`].
    pub fn throughput_run(&self) -> Option<&RunFigures> {
        self.drain
            .as_ref()
            .or_else(|| self.rates.iter().find(|r| r.rate == SCALE_RATE))
    }
    /// Messages/s per run at [`SCALE_RATE`].
    pub fn msgs_per_s(&self) -> f64 {
        self.throughput_run()
            .map_or(f64::NAN, RunFigures::msgs_per_s)
    }
    /// SQS requests per redriven message over all its runs.
    pub fn requests_per_msg(&self) -> f64 {
        let requests: usize = self.runs().map(|r| r.requests).sum();
        let messages: usize = self.runs().map(|r| r.messages).sum();
        requests as f64 / messages as f64
    }
    /// The worst |rate error| of its runs at each rate, %.
    pub fn worst_rate_error_pct(&self) -> f64 {
        self.rates
            .iter()
            .map(|r| r.error_pct().abs())
            .fold(0.0, f64::max)
    }
    /// Minutes to drain 1,000,000 messages at [`SCALE_RATE`]: the measured drain (or the
    /// throughput run) extrapolated linearly.
    pub fn drain_1m_minutes(&self) -> f64 {
        MILLION / self.msgs_per_s() / 60.0
    }
}

/// A drain on LocalStack, and what it shows about its limit.
#[derive(Debug, Clone)]
pub struct LocalStackDrain {
    /// Which design.
    pub design: Design,
    /// Cycles in flight the child ran with.
    pub cycles_in_flight: u64,
    /// The configured rate.
    pub rate: f64,
    /// Messages drained.
    pub messages: usize,
    /// The run's wall time (in the child), s.
    pub seconds: f64,
    /// SQS requests (counted).
    pub requests: usize,
    /// Mean wait per call at the proxy (arrival to the first byte of the answer), ms, by
    /// action, with the number of calls.
    pub waited_ms: BTreeMap<String, (usize, f64)>,
    /// CPU used during the run, in cores (CPU seconds ÷ wall seconds): LocalStack's process
    /// group, the redriver child, this process (the counting proxy), the whole machine.
    pub cpu_cores: CpuShares,
    /// Cores of the machine.
    pub cores: usize,
}

/// CPU used over a run, in cores.
#[derive(Debug, Clone, Copy)]
pub struct CpuShares {
    /// LocalStack's Python runtime (its process group).
    pub localstack: f64,
    /// The redriver child.
    pub redriver: f64,
    /// The bench's own process (the counting proxy).
    pub proxy: f64,
    /// Every process on the machine.
    pub machine: f64,
}

impl LocalStackDrain {
    /// Messages redriven per second of the run.
    pub fn msgs_per_s(&self) -> f64 {
        self.messages as f64 / self.seconds
    }
    /// SQS requests per redriven message.
    pub fn requests_per_msg(&self) -> f64 {
        self.requests as f64 / self.messages as f64
    }
    fn waited(&self, action: &str) -> f64 {
        self.waited_ms.get(action).map_or(0.0, |(_, ms)| *ms)
    }
    /// A cycle's round trips at the measured waits (receive, send, delete), ms.
    pub fn cycle_ms(&self) -> f64 {
        self.waited("ReceiveMessage")
            + self.waited("SendMessageBatch")
            + self.waited("DeleteMessageBatch")
    }
    /// What the measured waits allow: its cycles in flight, 10 messages each, per cycle time.
    pub fn latency_bound(&self) -> f64 {
        self.cycles_in_flight as f64 * resq::sqs::MAX_BATCH as f64 / (self.cycle_ms() / 1000.0)
    }
    /// What limits the drain, read off the figures: the token bucket when it reached the
    /// rate; one batch in flight for the sequential design (its pace is the round trips);
    /// else whichever process used about a core of CPU (LocalStack is one Python interpreter:
    /// a core at most), the machine's cores, or the waits per call.
    pub fn limit(&self) -> String {
        let c = self.cpu_cores;
        let cpu = format!(
            "CPU in cores: LocalStack {:.2}, redriver {:.2}, proxy {:.2}, machine {:.2} of {}",
            c.localstack, c.redriver, c.proxy, c.machine, self.cores
        );
        let waits = format!(
            "receive + send + delete {:.1} ms at the proxy",
            self.cycle_ms()
        );
        let what = if self.msgs_per_s() >= 0.95 * self.rate {
            "the configured rate (the token bucket)".to_owned()
        } else if self.cycles_in_flight <= 1 {
            format!(
                "per-call latency: one batch in flight, 10 messages per {waits} (bound {:.0}/s)",
                self.latency_bound()
            )
        } else if c.localstack >= 0.8 {
            format!(
                "LocalStack's CPU: its Python runtime used {:.0} % of a core (one interpreter, one core at most), so calls queue in it ({waits}, {} cycles in flight)",
                c.localstack * 100.0,
                self.cycles_in_flight
            )
        } else if c.machine >= 0.9 * self.cores as f64 {
            "the machine's CPU (every core busy)".to_owned()
        } else if c.redriver >= 0.8 {
            "the redriver's CPU".to_owned()
        } else {
            format!(
                "per-call latency: {waits}, {} cycles in flight (bound {:.0}/s)",
                self.cycles_in_flight,
                self.latency_bound()
            )
        };
        format!("{what}; {cpu}")
    }
}

/// Everything measured at scale.
#[derive(Debug, Clone)]
pub struct Scale {
    /// The stand-in's latency per call.
    pub latency: Duration,
    /// The pipelined design, then the sequential one, on the stand-in.
    pub designs: Vec<DesignFigures>,
    /// The drains on LocalStack, pipelined then sequential.
    pub localstack: Vec<LocalStackDrain>,
}

impl Scale {
    /// The figures of `design` on the stand-in.
    pub fn design(&self, design: Design) -> Option<&DesignFigures> {
        self.designs.iter().find(|d| d.design == design)
    }
    /// The pipelined design's messages/s at [`SCALE_RATE`] on the stand-in.
    pub fn msgs_per_s(&self) -> f64 {
        self.design(Design::Pipelined)
            .map_or(f64::NAN, DesignFigures::msgs_per_s)
    }
    /// `redrive_requests_per_msg_depth`: the pipelined design's SQS requests per redriven
    /// message on a DLQ with depth, its drain on the stand-in (filled up front); its runs at
    /// each rate when there is no drain.
    pub fn requests_per_msg_depth(&self) -> f64 {
        self.design(Design::Pipelined)
            .map_or(f64::NAN, |d| match &d.drain {
                Some(r) => r.requests as f64 / r.messages as f64,
                None => d.requests_per_msg(),
            })
    }
    /// The pipelined design's minutes for 1,000,000 messages on the stand-in.
    pub fn drain_1m_minutes(&self) -> f64 {
        self.design(Design::Pipelined)
            .map_or(f64::NAN, DesignFigures::drain_1m_minutes)
    }

    /// Its figures in one line: the pipelined design's, then the sequential one's.
    pub fn summary(&self) -> String {
        let of = |d: Design| {
            self.design(d).map_or(String::new(), |f| {
                format!(
                    "{}: msgs_per_s={:.0} requests_per_msg={:.3} worst_rate_error_pct={:.2} drain_1m_minutes={:.1}",
                    d.name(),
                    f.msgs_per_s(),
                    f.requests_per_msg(),
                    f.worst_rate_error_pct(),
                    f.drain_1m_minutes()
                )
            })
        };
        let ls = self
            .localstack
            .iter()
            .map(|d| {
                format!(
                    "localstack {}: msgs_per_s={:.0}",
                    d.design.name(),
                    d.msgs_per_s()
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "redrive-scale: redrive_msgs_per_s={:.0} drain_1m_minutes={:.1} redrive_requests_per_msg_depth={:.3} | {} | {} | {ls}",
            self.msgs_per_s(),
            self.drain_1m_minutes(),
            self.requests_per_msg_depth(),
            of(Design::Pipelined),
            of(Design::Sequential)
        )
    }

    /// Its rows as a Markdown table (`resq-bench redrive-scale`).
    pub fn table(&self) -> String {
        let mut t = String::from(
            "| measure | resq | alternative | ratio | target |\n|---|---:|---:|---:|---|\n",
        );
        for r in self.rows() {
            t.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        t
    }

    /// Its rows in the report's table (`| measure | resq | alternative | ratio | target |`):
    /// resq pipelined, and the sequential design as the alternative.
    pub fn rows(&self) -> Vec<[String; 5]> {
        let mut rows = Vec::new();
        let (Some(p), Some(s)) = (
            self.design(Design::Pipelined),
            self.design(Design::Sequential),
        ) else {
            return rows;
        };
        let on = format!("in-memory SQS + {} ms per call", self.latency.as_millis());
        let (pt, st) = (p.throughput_run(), s.throughput_run());
        let count = |r: Option<&RunFigures>| r.map_or(0, |r| r.messages);
        rows.push([
            format!(
                "redrive at scale ({on}): messages/s per run at {SCALE_RATE}/s (resq: a {}-message drain; alt = resq sequential, `with_max_cycles_in_flight(1)`: {} messages)",
                count(pt),
                count(st)
            ),
            format!("{:.0}", p.msgs_per_s()),
            format!("{:.0}", s.msgs_per_s()),
            format!("{:.1}×", p.msgs_per_s() / s.msgs_per_s()),
            "≥ 2,500".into(),
        ]);
        rows.push([
            format!(
                "redrive at scale ({on}): SQS requests per redriven message on a DLQ with depth (`redrive_requests_per_msg_depth`: resq's {}; alt: all its runs; counted)",
                match &p.drain {
                    Some(r) => format!("{}-message drain", r.messages),
                    None => "runs".into(),
                }
            ),
            format!("{:.3}", self.requests_per_msg_depth()),
            format!("{:.3}", s.requests_per_msg()),
            String::new(),
            "≤ 0.31".into(),
        ]);
        let cores = |r: Option<&RunFigures>| {
            r.map_or("–".into(), |r| {
                let (redriver, stand_in) = r.cpu_cores();
                format!("{redriver:.2} / {stand_in:.2}")
            })
        };
        rows.push([
            format!(
                "redrive at scale ({on}): CPU used over the run at {SCALE_RATE}/s above, in cores: redriver / stand-in (the bench process)"
            ),
            cores(pt),
            cores(st),
            String::new(),
            String::new(),
        ]);
        rows.push([
            format!("redrive at scale ({on}): requests by action"),
            p.breakdown.clone(),
            s.breakdown.clone(),
            String::new(),
            String::new(),
        ]);
        for (a, b) in p.rates.iter().zip(&s.rates) {
            rows.push([
                format!(
                    "redrive at scale ({on}): rate {}/s, achieved between sends (error); {} / {} messages",
                    a.rate, a.messages, b.messages
                ),
                format!("{:.1}/s ({:+.2} %)", a.achieved, a.error_pct()),
                format!("{:.1}/s ({:+.2} %)", b.achieved, b.error_pct()),
                String::new(),
                "resq within ±5 %".into(),
            ]);
        }
        rows.push([
            format!("redrive at scale ({on}): worst rate error of the rates above, %"),
            format!("{:.2}", p.worst_rate_error_pct()),
            format!("{:.2}", s.worst_rate_error_pct()),
            String::new(),
            "resq within ±5 %".into(),
        ]);
        let drained = |d: &DesignFigures| match &d.drain {
            Some(r) => format!("{} measured in {:.1} s", r.messages, r.seconds),
            None => "from its messages/s".into(),
        };
        rows.push([
            format!(
                "redrive at scale ({on}): minutes to drain 1,000,000 messages at {SCALE_RATE}/s, extrapolated linearly (resq: {}; alt: {})",
                drained(p),
                drained(s)
            ),
            format!("{:.1}", p.drain_1m_minutes()),
            format!("{:.1}", s.drain_1m_minutes()),
            format!("{:.1}× faster", s.drain_1m_minutes() / p.drain_1m_minutes()),
            String::new(),
        ]);
        let (Some(lp), Some(ls)) = (
            self.localstack
                .iter()
                .find(|d| d.design == Design::Pipelined),
            self.localstack
                .iter()
                .find(|d| d.design == Design::Sequential),
        ) else {
            return rows;
        };
        rows.push([
            format!(
                "redrive on LocalStack's SQS: messages/s of a {}-message drain at {}/s (alt = resq sequential, {} messages); SQS requests per message",
                lp.messages, lp.rate, ls.messages
            ),
            format!("{:.0}; {:.3}", lp.msgs_per_s(), lp.requests_per_msg()),
            format!("{:.0}; {:.3}", ls.msgs_per_s(), ls.requests_per_msg()),
            format!("{:.1}×", lp.msgs_per_s() / ls.msgs_per_s()),
            String::new(),
        ]);
        let waits = |d: &LocalStackDrain| {
            ["ReceiveMessage", "SendMessageBatch", "DeleteMessageBatch"]
                .map(|a| format!("{:.1}", d.waited(a)))
                .join(" / ")
        };
        rows.push([
            "redrive on LocalStack's SQS: mean wait per call at the proxy, ms (receive / send / delete)".into(),
            waits(lp),
            waits(ls),
            String::new(),
            String::new(),
        ]);
        rows.push([
            "redrive on LocalStack's SQS: what limits the drain".into(),
            lp.limit(),
            ls.limit(),
            String::new(),
            String::new(),
        ]);
        rows
    }
}

/// Runs the redrive child on `endpoint` at `rate`.
pub fn child(
    endpoint: &str,
    dlq: &str,
    main: &str,
    rate: f64,
    design: Design,
) -> Result<Value, String> {
    let mut cmd = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    cmd.args(["redrive", endpoint, dlq, main, &rate.to_string()]);
    if design == Design::Sequential {
        cmd.arg("--sequential");
    }
    measured::run(&mut cmd)
}

/// The child's wall seconds, after checking it redrove `n` and failed none.
fn checked_seconds(out: &Value, n: usize, what: &str) -> Result<f64, String> {
    let redriven = out["redriven"].as_u64().unwrap_or(0) as usize;
    if redriven != n || out["failed"].as_u64() != Some(0) {
        return Err(format!("{what}: {redriven} of {n} redriven ({out})"));
    }
    out["seconds"]
        .as_f64()
        .filter(|s| *s > 0.0)
        .ok_or_else(|| format!("{what}: no time in {out}"))
}

/// One run on the stand-in: `n` DLQ messages as the consumer leaves them, redriven by
/// `design` at `rate`; every one must reach the main queue.
fn stand_in_run(
    sqs: &FakeSqs,
    design: Design,
    rate: f64,
    n: usize,
) -> Result<(RunFigures, Vec<Request>), String> {
    let name = format!("scale-{}-{}", design.name(), rand::random::<u32>());
    let (dlq, main) = (sqs.queue_url(&format!("{name}-dlq")), sqs.queue_url(&name));
    queues::seed_stand_in(sqs, &dlq, "scale", n);
    let mark = sqs.mark();
    let what = format!("{} at {rate}/s, {n} messages", design.name());
    let own = crate::child::cpu_seconds();
    let out = child(&sqs.endpoint, &dlq, &main, rate, design)?;
    let own = crate::child::cpu_seconds() - own;
    let (moved, left) = (sqs.depth(&main), sqs.depth(&dlq));
    sqs.purge(&main);
    sqs.purge(&dlq);
    if moved != n || left != 0 {
        return Err(format!(
            "{what}: {moved} arrived, {left} left behind ({out})"
        ));
    }
    let seconds = checked_seconds(&out, n, &what)?;
    let requests = sqs.since(mark);
    let achieved =
        achieved(&requests).ok_or_else(|| format!("{what}: fewer than two send requests"))?;
    let figures = RunFigures {
        rate,
        messages: n,
        seconds,
        achieved,
        requests: requests.iter().filter(|r| r.sqs).count(),
        cpu_seconds: (out["cpu_seconds"].as_f64().unwrap_or(f64::NAN), own),
    };
    eprintln!(
        "  {what}: {:.1} s, {:.0} msg/s, achieved {:.1}/s ({:+.2} %), {:.3} requests/msg",
        figures.seconds,
        figures.msgs_per_s(),
        figures.achieved,
        figures.error_pct(),
        figures.requests as f64 / n as f64
    );
    Ok((figures, requests))
}

/// Both designs on the stand-in SQS with `o.scale_latency_ms` per call: at each of
/// `o.scale_rates` (`rate × o.rate_seconds` messages; the sequential design at most
/// `o.sequential_max_messages`, which it cannot move faster than a few hundred a second),
/// the two alternating; then the pipelined design's drain of `o.drain_messages` at
/// [`SCALE_RATE`].
pub fn stand_in(o: &Options) -> Result<(Duration, Vec<DesignFigures>), String> {
    let latency = Duration::from_millis(o.scale_latency_ms);
    let sqs = FakeSqs::start_with_latency(latency)?;
    let designs = [Design::Pipelined, Design::Sequential];
    let mut figures: Vec<DesignFigures> = designs
        .iter()
        .map(|&design| DesignFigures {
            design,
            rates: Vec::new(),
            drain: None,
            breakdown: String::new(),
        })
        .collect();
    let mut logs: Vec<Vec<Request>> = vec![Vec::new(); designs.len()];
    for (k, &rate) in o.scale_rates.iter().enumerate() {
        let n = ((rate * o.rate_seconds).round() as usize).max(20);
        eprintln!(
            "bench: redrive at scale, {rate}/s on the stand-in SQS ({} ms per call)",
            latency.as_millis()
        );
        // alternating which goes first, so drift on the machine hits both alike
        let order: Vec<usize> = match k % 2 {
            0 => vec![0, 1],
            _ => vec![1, 0],
        };
        for i in order {
            let n = match designs[i] {
                Design::Sequential => n.min(o.sequential_max_messages.max(20)),
                Design::Pipelined | Design::Fixed => n,
            };
            let (run, log) = stand_in_run(&sqs, designs[i], rate, n)?;
            figures[i].rates.push(run);
            logs[i].extend(log);
        }
    }
    if o.drain_messages > 0 {
        eprintln!(
            "bench: redrive at scale, a {}-message drain at {SCALE_RATE}/s on the stand-in SQS",
            o.drain_messages
        );
        let (run, log) = stand_in_run(&sqs, Design::Pipelined, SCALE_RATE, o.drain_messages)?;
        figures[0].drain = Some(run);
        logs[0].extend(log);
    }
    for (f, log) in figures.iter_mut().zip(&logs) {
        f.breakdown = breakdown(log);
    }
    Ok((latency, figures))
}

/// CPU ticks (user + system) of every process in group `pgid`, and of the whole machine
/// (busy, all), from `/proc`.
fn ticks(pgid: u32) -> (u64, (u64, u64)) {
    let mut group = 0;
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(stat) = std::fs::read_to_string(entry.path().join("stat")).ok() else {
                continue;
            };
            // the fields after the command's closing parenthesis: state, ppid, pgrp, …
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() > 12 && f[2].parse() == Ok(pgid) {
                group += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
            }
        }
    }
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let all: u64 = cpu.iter().take(8).sum();
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    (group, (all.saturating_sub(idle), all))
}

/// Drains of `o.localstack_drain` (pipelined) and `o.localstack_drain_sequential` messages
/// at [`SCALE_RATE`] on LocalStack's SQS, the DLQ filled up front (directly, not counted),
/// each redriver through the counting proxy.
pub fn localstack(
    o: &Options,
    localstack: &resq_local::emulator::LocalStack,
    rt: &tokio::runtime::Runtime,
) -> Result<Vec<LocalStackDrain>, String> {
    let (proxy, sqs) = counted(&localstack.endpoint, rt)?;
    let mut drains = Vec::new();
    for (design, n) in [
        (Design::Pipelined, o.localstack_drain),
        (Design::Sequential, o.localstack_drain_sequential),
    ] {
        if n == 0 {
            continue;
        }
        drains.push(localstack_drain(localstack, &proxy, &sqs, rt, design, n)?);
    }
    Ok(drains)
}

fn localstack_drain(
    localstack: &resq_local::emulator::LocalStack,
    proxy: &CountingProxy,
    sqs: &aws_sdk_sqs::Client,
    rt: &tokio::runtime::Runtime,
    design: Design,
    n: usize,
) -> Result<LocalStackDrain, String> {
    const SEEDERS: usize = 4;
    eprintln!(
        "bench: redrive at scale, a {n}-message drain on LocalStack ({}), seeding",
        design.name()
    );
    let name = format!("drain-{}-{}", design.name(), rand::random::<u32>());
    let seeded = Instant::now();
    let (dlq, main) = rt.block_on(async {
        let dlq = queues::create_queue(sqs, &format!("{name}-dlq")).await?;
        let main = queues::create_queue(sqs, &name).await?;
        let mut seeders = tokio::task::JoinSet::new();
        let per = n.div_ceil(SEEDERS);
        for w in 0..SEEDERS {
            let (from, to) = (w * per, ((w + 1) * per).min(n));
            let (sqs, dlq) = (sqs.clone(), dlq.clone());
            seeders.spawn(
                async move { queues::seed(&sqs, &dlq, from, to.saturating_sub(from)).await },
            );
        }
        while let Some(done) = seeders.join_next().await {
            done.map_err(|e| e.to_string())??;
        }
        Ok::<_, String>((dlq, main))
    })?;
    eprintln!(
        "  seeded in {:.1} s; draining at {SCALE_RATE}/s",
        seeded.elapsed().as_secs_f64()
    );
    let mark = proxy.mark();
    let (ls_before, machine_before) = ticks(localstack.pid());
    let (own_before, wall) = (crate::child::cpu_seconds(), Instant::now());
    let out = child(&proxy.endpoint, &dlq, &main, SCALE_RATE, design)?;
    let wall = wall.elapsed().as_secs_f64();
    let (ls_after, machine_after) = ticks(localstack.pid());
    let own = crate::child::cpu_seconds() - own_before;
    let what = format!("{} on LocalStack, {n} messages", design.name());
    let (in_dlq, in_main) = rt.block_on(async {
        Ok::<_, String>((
            queues::depth(sqs, &dlq).await?,
            queues::depth(sqs, &main).await?,
        ))
    })?;
    rt.block_on(async {
        for q in [&dlq, &main] {
            let _ = sqs.delete_queue().queue_url(q).send().await;
        }
    });
    if in_dlq != 0 || in_main != n {
        return Err(format!(
            "{what}: {in_main} in the main queue, {in_dlq} left in the DLQ ({out})"
        ));
    }
    let seconds = checked_seconds(&out, n, &what)?;
    let hz = {
        // SAFETY: sysconf reads a constant.
        let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if t > 0 { t as f64 } else { 100.0 }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let machine = {
        let (busy, all) = (
            machine_after.0.saturating_sub(machine_before.0),
            machine_after.1.saturating_sub(machine_before.1),
        );
        if all > 0 {
            busy as f64 / all as f64 * cores as f64
        } else {
            f64::NAN
        }
    };
    let requests = proxy.since(mark);
    let mut waited: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.sqs) {
        if let Some(w) = r.waited {
            let e = waited.entry(r.action.clone()).or_default();
            e.0 += 1;
            e.1 += w.as_secs_f64() * 1000.0;
        }
    }
    for (count, total) in waited.values_mut() {
        *total /= *count as f64;
    }
    let drain = LocalStackDrain {
        design,
        cycles_in_flight: out["cycles_in_flight"].as_u64().unwrap_or(0),
        rate: SCALE_RATE,
        messages: n,
        seconds,
        requests: requests.iter().filter(|r| r.sqs).count(),
        waited_ms: waited,
        cpu_cores: CpuShares {
            localstack: ls_after.saturating_sub(ls_before) as f64 / hz / wall,
            redriver: out["cpu_seconds"].as_f64().unwrap_or(f64::NAN) / seconds,
            proxy: own / wall,
            machine,
        },
        cores,
    };
    eprintln!(
        "  {what}: {:.1} s, {:.0} msg/s, {:.3} requests/msg; limit: {}",
        drain.seconds,
        drain.msgs_per_s(),
        drain.requests_per_msg(),
        drain.limit()
    );
    Ok(drain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(
        rate: f64,
        messages: usize,
        seconds: f64,
        achieved: f64,
        requests: usize,
    ) -> RunFigures {
        RunFigures {
            rate,
            messages,
            seconds,
            achieved,
            requests,
            cpu_seconds: (0.5, 0.25),
        }
    }

    #[test]
    fn the_drain_is_extrapolated_from_the_drain_else_from_the_run_at_the_top_rate() {
        let pipelined = DesignFigures {
            design: Design::Pipelined,
            rates: vec![
                run_of(100.0, 500, 5.0, 101.0, 151),
                run_of(SCALE_RATE, 15_000, 5.0, 2_970.0, 4_501),
            ],
            drain: Some(run_of(SCALE_RATE, 200_000, 80.0, 2_990.0, 60_001)),
            breakdown: String::new(),
        };
        // 200,000 in 80 s: 2,500/s, so 1,000,000 in 400 s
        assert!((pipelined.msgs_per_s() - 2_500.0).abs() < 1e-9);
        assert!((pipelined.drain_1m_minutes() - 400.0 / 60.0).abs() < 1e-9);
        // requests over every run: 64,653 for 215,500 messages
        assert!((pipelined.requests_per_msg() - 64_653.0 / 215_500.0).abs() < 1e-12);
        // the worst of the rate runs (the drain is not one): +1 %
        assert!((pipelined.worst_rate_error_pct() - 1.0).abs() < 1e-9);
        // the depth figure is the drain's: 60,001 requests for 200,000 messages
        let scale = Scale {
            latency: Duration::from_millis(10),
            designs: vec![pipelined.clone()],
            localstack: Vec::new(),
        };
        assert!((scale.requests_per_msg_depth() - 60_001.0 / 200_000.0).abs() < 1e-12);
        // without a drain, every run's
        let no_drain = Scale {
            designs: vec![DesignFigures {
                drain: None,
                ..pipelined.clone()
            }],
            ..scale
        };
        assert!((no_drain.requests_per_msg_depth() - 4_652.0 / 15_500.0).abs() < 1e-12);
        // 0.5 s of the redriver's CPU over an 80 s drain
        let drain = pipelined.drain.as_ref().unwrap();
        assert!((drain.cpu_cores().0 - 0.5 / 80.0).abs() < 1e-12);
        let sequential = DesignFigures {
            design: Design::Sequential,
            drain: None,
            ..pipelined.clone()
        };
        // 15,000 in 5 s at the top rate: 3,000/s
        assert!((sequential.msgs_per_s() - 3_000.0).abs() < 1e-9);
        assert!((sequential.drain_1m_minutes() - MILLION / 3_000.0 / 60.0).abs() < 1e-9);
    }

    fn drain(cycles: u64, messages_per_s: f64, localstack: f64) -> LocalStackDrain {
        LocalStackDrain {
            design: Design::Pipelined,
            cycles_in_flight: cycles,
            rate: SCALE_RATE,
            messages: 10_000,
            seconds: 10_000.0 / messages_per_s,
            requests: 3_001,
            waited_ms: [
                ("ReceiveMessage", 4.0),
                ("SendMessageBatch", 3.0),
                ("DeleteMessageBatch", 3.0),
            ]
            .into_iter()
            .map(|(a, ms)| (a.to_owned(), (1_000, ms)))
            .collect(),
            cpu_cores: CpuShares {
                localstack,
                redriver: 0.2,
                proxy: 0.1,
                machine: 1.3,
            },
            cores: 2,
        }
    }

    #[test]
    fn the_limit_is_named_from_the_figures() {
        // 46 cycles of 10 messages per 10 ms of waits
        assert!((drain(46, 1_000.0, 0.5).latency_bound() - 46_000.0).abs() < 1e-6);
        assert!(
            drain(46, 2_990.0, 1.0)
                .limit()
                .starts_with("the configured rate")
        );
        assert!(
            drain(1, 900.0, 0.9)
                .limit()
                .starts_with("per-call latency: one batch")
        );
        assert!(
            drain(46, 1_200.0, 0.97)
                .limit()
                .starts_with("LocalStack's CPU")
        );
        assert!(
            drain(46, 1_200.0, 0.3)
                .limit()
                .starts_with("per-call latency")
        );
    }
}
