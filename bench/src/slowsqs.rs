//! The redriver against an SQS that slows down under load (issue 37, item 7): the stand-in
//! SQS ([`FakeSqs::start_with`]) answers each call after a log-normal latency times
//! `1 + calls in flight / k`, and carries out a call whose caller timed out (the copy lands, its
//! answer is lost, as on moto). resq's pipeline, whose cycles in flight back off
//! (`resq_redriver::backoff`), runs beside the fixed pipeline before it (`--fixed`: the cycles
//! at what the rate needs, whatever SQS answers), each as the measured `redrive` child at
//! [`RATE`]. Read off each run: messages redriven per second, and sends left unconfirmed (the
//! run's `failed`: the stand-in refuses nothing, so each is a send that got no answer) per
//! 1,000 replays.
//!
//! The stand-in's time is scaled down so a run takes seconds: the child's SQS calls time out
//! after [`CALL_TIMEOUT`] (resq's own attempt timeout is 10 s), and `k` is small. What the
//! comparison shows is the shape: a fixed window keeps as many calls in flight however slow
//! SQS gets; one that backs off does not.
//!
//! Measurements only: nothing here fails a run for being slow.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::child::Design;
use crate::fakesqs::{FakeSqs, Latency};
use crate::measured;
use crate::queues;

/// The rate configured: resq's maximum.
pub const RATE: f64 = resq_redriver::config::MAX_RATE_PER_SECOND;
/// The child's SQS call timeout (receives keep resq's own).
pub const CALL_TIMEOUT: Duration = Duration::from_millis(500);
/// The stand-in's latency doubles with this many calls in flight.
pub const LOAD_K: f64 = 4.0;
/// The log-normal spread of its latency (σ of the log: p99 about 2.5 × the median).
pub const SIGMA: f64 = 0.4;
/// The median latency of the headline runs, ms.
pub const MEDIAN_MS: u64 = 15;

/// One run of one design.
#[derive(Debug, Clone)]
pub struct LoadRun {
    /// Which design.
    pub design: Design,
    /// The stand-in's median latency of a call alone, ms.
    pub median_ms: u64,
    /// Messages in the DLQ.
    pub messages: usize,
    /// The run's wall time, s.
    pub seconds: f64,
    /// Replays confirmed.
    pub redriven: u64,
    /// Sends not answered (unconfirmed: not deleted; the next run sends them again).
    pub unconfirmed: u64,
    /// Copies in the main queue after the run (confirmed, unconfirmed that landed, and any
    /// the SDK's retries doubled).
    pub landed: usize,
}

impl LoadRun {
    /// Replays confirmed per second of the run.
    pub fn msgs_per_s(&self) -> f64 {
        self.redriven as f64 / self.seconds
    }
    /// Unconfirmed sends per 1,000 replays (sends attempted).
    pub fn unconfirmed_per_1000(&self) -> f64 {
        let sent = self.redriven + self.unconfirmed;
        match sent {
            0 => 0.0,
            _ => self.unconfirmed as f64 * 1000.0 / sent as f64,
        }
    }
}

/// Every run of the comparison.
#[derive(Debug, Clone, Default)]
pub struct SlowSqs {
    /// In the order run.
    pub runs: Vec<LoadRun>,
}

impl SlowSqs {
    /// The run of `design` at `median_ms` with the most messages (the headline's).
    pub fn run(&self, design: Design, median_ms: u64) -> Option<&LoadRun> {
        self.runs
            .iter()
            .filter(|r| r.design == design && r.median_ms == median_ms)
            .max_by_key(|r| r.messages)
    }

    /// `redrive_unconfirmed_per_1000`: resq's (backing off) at [`MEDIAN_MS`].
    pub fn unconfirmed_per_1000(&self) -> f64 {
        self.run(Design::Pipelined, MEDIAN_MS)
            .map_or(f64::NAN, LoadRun::unconfirmed_per_1000)
    }

    /// The drain rate against it, msgs/s: (backing off, fixed) at [`MEDIAN_MS`].
    pub fn drain_rates(&self) -> (f64, f64) {
        let rate = |d| self.run(d, MEDIAN_MS).map_or(f64::NAN, LoadRun::msgs_per_s);
        (rate(Design::Pipelined), rate(Design::Fixed))
    }

    /// The redriver's rate against SQS's latency, one series per design: (median latency
    /// of a call alone, ms; messages/s).
    pub fn series(&self) -> Vec<(String, Vec<(f64, f64)>)> {
        [Design::Pipelined, Design::Fixed]
            .into_iter()
            .map(|d| {
                let mut medians: Vec<u64> = self.runs.iter().map(|r| r.median_ms).collect();
                medians.sort_unstable();
                medians.dedup();
                let points = medians
                    .into_iter()
                    .filter_map(|m| self.run(d, m))
                    .map(|r| (r.median_ms as f64, r.msgs_per_s()))
                    .collect();
                (name(d).to_owned(), points)
            })
            .collect()
    }

    /// The table's rows.
    pub fn table(&self) -> String {
        let mut out = "| SQS median (alone) | design | messages | s | msgs/s | unconfirmed | per 1,000 | landed in main |\n|---|---|---|---|---|---|---|---|\n".to_owned();
        for r in &self.runs {
            out.push_str(&format!(
                "| {} ms | {} | {} | {:.1} | {:.0} | {} | {:.2} | {} |\n",
                r.median_ms,
                name(r.design),
                r.messages,
                r.seconds,
                r.msgs_per_s(),
                r.unconfirmed,
                r.unconfirmed_per_1000(),
                r.landed
            ));
        }
        out
    }
}

/// A design's name in the table and the chart.
pub fn name(d: Design) -> &'static str {
    match d {
        Design::Pipelined => "backs off (resq)",
        Design::Fixed => "fixed window (before)",
        Design::Sequential => "sequential",
    }
}

/// The stand-in's latency at `median_ms`.
pub fn latency(median_ms: u64, seed: u64) -> Latency {
    Latency {
        median: Duration::from_millis(median_ms),
        sigma: SIGMA,
        load: Some(LOAD_K),
        seed,
    }
}

/// One run: `n` DLQ messages on a fresh stand-in at `median_ms`, redriven by `design`.
fn one(design: Design, median_ms: u64, n: usize) -> Result<LoadRun, String> {
    let sqs = FakeSqs::start_with(latency(median_ms, 37))?;
    let name = format!("slow-{}", design.name());
    let (dlq, main) = (sqs.queue_url(&format!("{name}-dlq")), sqs.queue_url(&name));
    queues::seed_stand_in(&sqs, &dlq, "slow", n);
    let mut cmd = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    cmd.args(["redrive", &sqs.endpoint, &dlq, &main, &RATE.to_string()]);
    cmd.args(["--call-timeout-ms", &CALL_TIMEOUT.as_millis().to_string()]);
    if design == Design::Fixed {
        cmd.arg("--fixed");
    }
    let out: Value = measured::run(&mut cmd)?;
    let count = |k: &str| out[k].as_u64().unwrap_or(0);
    let run = LoadRun {
        design,
        median_ms,
        messages: n,
        seconds: out["seconds"].as_f64().unwrap_or(f64::NAN),
        redriven: count("redriven"),
        unconfirmed: count("failed"),
        landed: sqs.depth(&main),
    };
    eprintln!(
        "  {} at {median_ms} ms: {n} messages, {:.1} s, {:.0} msg/s, {} unconfirmed ({:.2} per 1,000), {} landed",
        self::name(design),
        run.seconds,
        run.msgs_per_s(),
        run.unconfirmed,
        run.unconfirmed_per_1000(),
        run.landed
    );
    Ok(run)
}

/// Both designs at [`MEDIAN_MS`] over `messages`, then at each of `medians_ms` over
/// `chart_messages` (the chart's points), the two alternating.
pub fn measure(
    messages: usize,
    medians_ms: &[u64],
    chart_messages: usize,
) -> Result<SlowSqs, String> {
    eprintln!(
        "bench: the redriver against an SQS slowing under load ({MEDIAN_MS} ms median × (1 + in flight / {LOAD_K}), calls time out after {} ms)",
        CALL_TIMEOUT.as_millis()
    );
    let mut out = SlowSqs::default();
    for (median, n) in std::iter::once((MEDIAN_MS, messages)).chain(
        medians_ms
            .iter()
            .filter(|m| **m != MEDIAN_MS)
            .map(|m| (*m, chart_messages)),
    ) {
        if n == 0 {
            continue;
        }
        for design in [Design::Pipelined, Design::Fixed] {
            out.runs.push(one(design, median, n)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(design: Design, median_ms: u64, redriven: u64, unconfirmed: u64) -> LoadRun {
        LoadRun {
            design,
            median_ms,
            messages: 1000,
            seconds: 2.0,
            redriven,
            unconfirmed,
            landed: 0,
        }
    }

    #[test]
    fn the_figures_come_from_the_headline_runs_and_the_series_from_every_latency() {
        let s = SlowSqs {
            runs: vec![
                run(Design::Pipelined, 15, 1000, 0),
                run(Design::Fixed, 15, 900, 100),
                run(Design::Pipelined, 50, 500, 0),
                run(Design::Fixed, 50, 300, 300),
            ],
        };
        assert_eq!(s.unconfirmed_per_1000(), 0.0);
        assert_eq!(s.drain_rates(), (500.0, 450.0));
        assert_eq!(
            s.run(Design::Fixed, 50).unwrap().unconfirmed_per_1000(),
            500.0
        );
        let series = s.series();
        assert_eq!(series[0].1, vec![(15.0, 500.0), (50.0, 250.0)]);
        assert_eq!(series[1].1, vec![(15.0, 450.0), (50.0, 150.0)]);
    }
}
