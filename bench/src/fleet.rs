//! The fleet against one S3 prefix (issue 37, item 4): [`PROCESSES`] consumer functions at the
//! template's defaults (batches of its `ConsumerBatchSize`, `CONSUMER_CONCURRENCY` unset), each
//! the release `consumer` binary under a Lambda runtime API on loopback ([`Function`], as
//! [`crate::realio`] runs it), all writing their order records to one S3 stand-in bucket that
//! allows [`PREFIX_PUTS_PER_S`] `PUT`s a second and answers `503 SlowDown` above it
//! ([`crate::s3standin`]'s token bucket), as S3 answers one partitioned prefix.
//!
//! Each process is invoked back to back, as Lambda's poller feeds an environment while the queue
//! has a backlog, for the run's seconds; each invocation is a batch of new orders (every `PUT`
//! writes). What is read: `PUT`s that succeeded per second ÷ [`PREFIX_PUTS_PER_S`]
//! (`fleet_goodput_ratio`), the share of `PUT`s answered 503, the peak `PUT` rate, the records
//! the responses reported failed (SQS would deliver them again) and the DLQ copies the
//! consumers sent (dead-lettered).

use std::path::Path;
use std::time::{Duration, Instant};

use resq_local::driver::Ended;
use serde_json::Value;

use crate::event;
use crate::fakesqs::FakeSqs;
use crate::options::Options;
use crate::realio::Placement;
use crate::s3standin::{self, S3StandIn};

/// Consumer processes (execution environments) in the fleet.
pub const PROCESSES: usize = 10;

/// What S3 allows one partitioned prefix: 3,500 `PUT`/`COPY`/`POST`/`DELETE` requests a second
/// (Amazon S3 User Guide, "Best practices design patterns: optimizing Amazon S3 performance").
pub const PREFIX_PUTS_PER_S: f64 = 3500.0;

/// The goals (issue 37): goodput ratio at least, 503 share at most.
pub const GOODPUT_GOAL: f64 = 0.9;
pub const SLOW_DOWN_GOAL: f64 = 0.05;

/// The orders' `orderId` prefix in the event template, replaced per invocation.
const MARK: &str = "FLEETMARK-";

/// One fleet run.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetRun {
    /// Which consumer: as shipped, or the base commit's (its limit reset at every invocation).
    pub label: String,
    /// From the first invocation handed over to the last answer, s.
    pub seconds: f64,
    pub invocations: usize,
    /// Records per invocation.
    pub batch: usize,
    pub records: usize,
    /// `PUT`s answered, whatever the answer (the SDK's retries included).
    pub puts: usize,
    /// `PUT`s answered 200 (each order recorded).
    pub puts_ok: usize,
    /// `PUT`s answered `503 SlowDown`.
    pub slow_downs: usize,
    /// `PUT`s a second at the stand-in, the most in any 100 ms × 10.
    pub peak_puts_per_s: f64,
    /// Records the responses reported failed (retried by SQS).
    pub failed: usize,
    /// DLQ copies the consumers sent.
    pub dead_lettered: usize,
}

impl FleetRun {
    /// `fleet_goodput_ratio`: `PUT`s that succeeded per second ÷ [`PREFIX_PUTS_PER_S`].
    pub fn goodput_ratio(&self) -> f64 {
        self.puts_ok as f64 / self.seconds / PREFIX_PUTS_PER_S
    }
    /// `PUT`s answered 503, as a share of all answered.
    pub fn slow_down_share(&self) -> f64 {
        self.slow_downs as f64 / self.puts.max(1) as f64
    }
}

/// The fleet as shipped, and (when measured) the consumer of the base commit beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub shipped: FleetRun,
    pub before: Option<FleetRun>,
}

impl Fleet {
    /// The `bench:` line's part.
    pub fn summary(&self) -> String {
        let s = &self.shipped;
        format!(
            "fleet_goodput_ratio={:.2} fleet_503_pct={:.1} fleet_dead_lettered={}",
            s.goodput_ratio(),
            s.slow_down_share() * 100.0,
            s.dead_lettered
        )
    }

    /// The table's rows: measure, as shipped, the base commit's, ratio, target.
    pub fn rows(&self) -> Vec<[String; 5]> {
        let s = &self.shipped;
        let b = self.before.as_ref();
        let of = |f: &dyn Fn(&FleetRun) -> String| b.map_or(String::new(), f);
        let head = format!(
            "fleet: {PROCESSES} consumers (batches of {}, CONSUMER_CONCURRENCY unset), back to back for {:.0} s, one bucket allowing {PREFIX_PUTS_PER_S:.0} PUT/s (503 SlowDown above; alt = the limit reset to min(batch, 64) at every invocation, eff7cab)",
            s.batch, s.seconds
        );
        let goodput = |r: &FleetRun| {
            format!(
                "{:.2} ({:.0} PUT/s)",
                r.goodput_ratio(),
                r.puts_ok as f64 / r.seconds
            )
        };
        let share = |r: &FleetRun| format!("{:.1} %", r.slow_down_share() * 100.0);
        let failed = |r: &FleetRun| format!("{} of {}", r.failed, r.records);
        vec![
            [
                format!("{head}: PUTs that succeeded per second ÷ 3,500 (fleet_goodput_ratio)"),
                goodput(s),
                of(&goodput),
                String::new(),
                format!("≥ {GOODPUT_GOAL}"),
            ],
            [
                "fleet: PUTs answered 503 SlowDown, share of PUTs".into(),
                share(s),
                of(&share),
                String::new(),
                format!("≤ {:.0} %", SLOW_DOWN_GOAL * 100.0),
            ],
            [
                "fleet: peak PUT/s at the bucket (most in any 100 ms × 10)".into(),
                format!("{:.0}", s.peak_puts_per_s),
                of(&|r| format!("{:.0}", r.peak_puts_per_s)),
                String::new(),
                String::new(),
            ],
            [
                "fleet: records reported failed (SQS retries them) of records run".into(),
                failed(s),
                of(&failed),
                String::new(),
                String::new(),
            ],
            [
                "fleet: records dead-lettered".into(),
                s.dead_lettered.to_string(),
                of(&|r| r.dead_lettered.to_string()),
                String::new(),
                "0".into(),
            ],
        ]
    }
}

/// The fleet as shipped (`o.consumer_bin`), and with `before` (a consumer binary of the base
/// commit) when given.
pub fn fleet(o: &Options, before: Option<&Path>) -> Result<Fleet, String> {
    let shipped = run(o, &o.consumer_bin, "as shipped")?;
    let before = before
        .map(|bin| run(o, bin, "limit reset per invocation"))
        .transpose()?;
    Ok(Fleet { shipped, before })
}

/// [`PROCESSES`] functions of `binary` invoked back to back for `o.fleet_seconds`.
pub fn run(o: &Options, binary: &Path, label: &str) -> Result<FleetRun, String> {
    let batch = match o.fleet_batch {
        Some(batch) => batch,
        None => crate::cost::Template::deployed()?.batch_size as usize,
    };
    eprintln!(
        "bench: fleet ({label}), {PROCESSES} consumers, batches of {batch}, {:.0} s against {PREFIX_PUTS_PER_S} PUT/s",
        o.fleet_seconds
    );
    std::fs::create_dir_all(&o.work).map_err(|e| format!("{}: {e}", o.work.display()))?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let s3 = S3StandIn::start(s3standin::Config {
        latency: Duration::from_millis(o.io_latency_ms),
        slow_down_above: Some(PREFIX_PUTS_PER_S),
    })?;
    let sqs = FakeSqs::start()?;
    let dlq = sqs.queue_url("resq-orders-dlq");
    let with_binary = Options {
        consumer_bin: binary.to_owned(),
        ..o.clone()
    };
    let mut functions = (0..PROCESSES)
        .map(|i| {
            let tag = format!("fleet-{i}");
            crate::realio::resq_function(&with_binary, &sqs, &s3, None, &tag, Placement::PLAIN)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let template = serde_json::to_string(&event::valid_orders(batch, MARK, 11).event)
        .map_err(|e| e.to_string())?;
    // cold starts (and the connections' first handshakes) before the measured run
    rt.block_on(async {
        for (i, f) in functions.iter_mut().enumerate() {
            invoke(f, &template.replace(MARK, &format!("w{i}-"))).await?;
        }
        Ok::<_, String>(())
    })?;
    std::thread::sleep(Duration::from_millis(200)); // the token bucket fills again
    s3.begin();
    let dead_before = sqs.depth(&dlq);
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(o.fleet_seconds);
    let template = std::sync::Arc::new(template);
    let tasks: Vec<_> = functions
        .drain(..)
        .enumerate()
        .map(|(i, mut f)| {
            let template = template.clone();
            rt.spawn(async move {
                let (mut invocations, mut failed) = (0, 0);
                while Instant::now() < end {
                    let payload = template.replace(MARK, &format!("f{i}-{invocations}-"));
                    match invoke(&mut f, &payload).await {
                        Ok(n) => failed += n,
                        Err(e) => return (f, Err(e)),
                    }
                    invocations += 1;
                }
                (f, Ok((invocations, failed)))
            })
        })
        .collect();
    let mut tallies = Vec::new();
    for task in tasks {
        let (f, tally) = rt.block_on(task).map_err(|e| e.to_string())?;
        functions.push(f);
        tallies.push(tally);
    }
    let seconds = started.elapsed().as_secs_f64();
    let window = s3.end();
    rt.block_on(async {
        for f in &mut functions {
            f.kill().await;
        }
    });
    s3.clear();
    let (mut invocations, mut failed) = (0, 0);
    for t in tallies {
        let (n, f) = t?;
        invocations += n;
        failed += f;
    }
    Ok(FleetRun {
        label: label.to_owned(),
        seconds,
        invocations,
        batch,
        records: invocations * batch,
        puts: window.puts_total(),
        puts_ok: window.count(200),
        slow_downs: window.count(503),
        peak_puts_per_s: window.peak_puts_per_s(),
        failed,
        dead_lettered: sqs.depth(&dlq) - dead_before,
    })
}

/// One invocation: the records its response reported failed.
async fn invoke(
    f: &mut resq_local::chaos::runtime::Function,
    event: &str,
) -> Result<usize, String> {
    let body = match f.invoke(event, None).await.map_err(|e| e.to_string())? {
        Ended::Response(body) => body,
        other => return Err(format!("the consumer did not answer: {other:?}")),
    };
    let response: Value =
        serde_json::from_str(&body).map_err(|e| format!("response {body:?}: {e}"))?;
    Ok(response["batchItemFailures"].as_array().map_or(0, Vec::len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(puts_ok: usize, slow_downs: usize, seconds: f64) -> FleetRun {
        FleetRun {
            label: "as shipped".into(),
            seconds,
            invocations: 0,
            batch: 10,
            records: 0,
            puts: puts_ok + slow_downs,
            puts_ok,
            slow_downs,
            peak_puts_per_s: 0.0,
            failed: 0,
            dead_lettered: 0,
        }
    }

    #[test]
    fn goodput_is_the_puts_that_succeeded_per_second_over_the_prefixs_rate() {
        // 60 s at 3,150 PUT/s through, 1,000 503s
        let r = run(189_000, 1_000, 60.0);
        assert!((r.goodput_ratio() - 0.9).abs() < 1e-9);
        assert!((r.slow_down_share() - 1_000.0 / 190_000.0).abs() < 1e-12);
        assert_eq!(run(0, 0, 1.0).slow_down_share(), 0.0);
        let fleet = Fleet {
            shipped: r,
            before: None,
        };
        assert_eq!(
            fleet.summary(),
            "fleet_goodput_ratio=0.90 fleet_503_pct=0.5 fleet_dead_lettered=0"
        );
        // without the base commit's run, its column is empty
        assert!(fleet.rows().iter().all(|row| row[2].is_empty()));
    }
}
