//! `resq-bench`: `make bench`'s driver. `run` measures everything and prints the table and the
//! summary line; `consumer` and `redrive` are the measured child processes; `event` writes the
//! consumer's input for a look.

// Many small allocations per record: mimalloc keeps them cheap where glibc malloc did not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod chart;
mod child;
mod coldstart;
mod cost;
mod deployed;
mod event;
mod fakesqs;
mod fleet;
mod function;
mod measured;
mod options;
mod outage;
mod pictures;
mod proxy;
mod queues;
mod realio;
mod run;
mod s3standin;
mod scale;
mod slowsqs;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "resq-bench",
    about = "resq against the tools users would otherwise pick"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    options: options::Options,
    /// Versions of the alternatives, for the results file.
    #[arg(long, default_value = "")]
    versions: String,
}

#[derive(Subcommand)]
enum Cmd {
    /// Every measurement in one interleaved run; writes bench/RESULTS.md.
    Run(Box<RunArgs>),
    /// Only the redriver at scale (part of `run`): the pipelined and the sequential design on
    /// the stand-in SQS with latency per call, then drains on LocalStack; prints its rows and
    /// figures, and draws its picture into `--work`.
    RedriveScale(Box<options::Options>),
    /// Only the redriver against an SQS slowing under load (part of `run`): its pipeline that
    /// backs off beside the fixed one; prints its rows and figures, writes nothing.
    RedriveSlowSqs(Box<options::Options>),
    /// Only the redriver as deployed (part of `run`): the release binary under its memory
    /// size's CPU quota; prints its rows and figures, writes nothing.
    RedriveDeployed {
        /// The redriver's release binary.
        #[arg(long, default_value = "target/release/redriver")]
        binary: PathBuf,
        /// Memory sizes tried when the template's falls short, MB.
        #[arg(long, value_delimiter = ',', default_value = "256,512,1024,1769")]
        sizes: Vec<u64>,
        /// Scales every DLQ's messages (a quick look).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
    /// Child: one invocation of resq's consumer engine on an event file.
    Consumer { event: PathBuf },
    /// Child: one invocation of resq's consumer engine with an effect that waits `latency_ms`.
    ConsumerIo {
        event: PathBuf,
        latency_ms: u64,
        /// Records at once (`CONSUMER_CONCURRENCY`); its default when left out.
        concurrency: Option<usize>,
    },
    /// Only the I/O-bound comparisons (part of `run`): the real-client one (the S3 stand-in,
    /// the release consumer and the Powertools peers) and the sleep-only one; prints their
    /// tables and figures, and draws its picture into `--work`. `--io-real-only` skips the
    /// sleep-only rows.
    Io {
        #[command(flatten)]
        options: Box<options::Options>,
        #[arg(long)]
        io_real_only: bool,
    },
    /// Only the fleet against one S3 prefix (part of `run`): ten consumers at the defaults,
    /// one bucket allowing 3,500 PUT/s; prints its rows and figures, writes nothing.
    Fleet {
        #[command(flatten)]
        options: Box<options::Options>,
        /// A consumer binary of the base commit (its limit reset at every invocation), run
        /// the same way for comparison.
        #[arg(long)]
        before: Option<PathBuf>,
    },
    /// The consumer function's peak memory on an event file, run as Lambda runs it; without
    /// an event, on the largest payload (6 MB) whose every record is rejected.
    FunctionMemory {
        /// The consumer's release binary.
        #[arg(long, default_value = "target/release/consumer")]
        binary: PathBuf,
        event: Option<PathBuf>,
        /// Scratch space for the generated event.
        #[arg(long, default_value = "target/bench")]
        work: PathBuf,
    },
    /// The consumer function on an I/O-bound batch at each memory size's CPU share (a cgroup
    /// CPU quota, 1,769 MB = one vCPU): the smallest size within 5 % of a full vCPU.
    MemorySizes {
        #[arg(long, default_value = "target/release/consumer")]
        binary: PathBuf,
        #[arg(long, value_delimiter = ',', default_value = "128,256,512,1024,1769")]
        sizes: Vec<u64>,
        #[arg(long, default_value_t = 100)]
        records: usize,
        /// Delay of each S3 put's answer, ms.
        #[arg(long, default_value_t = 20)]
        latency_ms: u64,
        /// Warm invocations per size (after a warm-up).
        #[arg(long, default_value_t = 7)]
        rounds: usize,
    },
    /// Init to the first `invocation/next`, without and with `SSL_CERT_FILE`.
    Coldstart {
        #[arg(long, default_value = "target/release/consumer")]
        binary: PathBuf,
        #[arg(long, default_value = "resq-consumer")]
        function: String,
        #[arg(long, default_value_t = 20)]
        runs: usize,
    },
    /// The unit prices (`cost.rs`) from the latest run's measured figures in bench/RESULTS.md
    /// and the function's log bytes, measured now.
    Cost {
        #[arg(long, default_value = "target/release/consumer")]
        binary: PathBuf,
        /// resq's engine, warm, records/s; and the bare loop's (from a `consumer-warm` run).
        #[arg(long)]
        engine_rps: f64,
        #[arg(long)]
        bare_rps: f64,
        /// The consumer's memory size, MB (default: the template's).
        #[arg(long)]
        memory_mb: Option<f64>,
        /// The soak's outage profile (used when it exists).
        #[arg(long, default_value = outage::PROFILE_PATH)]
        outage_profile: PathBuf,
    },
    /// The outage's bill (`outage.rs`) at the latest run's measured figures, resq's from the
    /// soak's profile when it exists, and `outage_cost_ratio`: no build, no emulator.
    Outage {
        /// The soak's outage profile (used when it exists).
        #[arg(long, default_value = outage::PROFILE_PATH)]
        outage_profile: PathBuf,
    },
    /// Child: `invocations` warm invocations of resq's consumer engine on an event file.
    ConsumerWarm { event: PathBuf, invocations: usize },
    /// Child: one run of resq's redriver against an SQS endpoint.
    Redrive {
        endpoint: String,
        dlq_url: String,
        main_queue_url: String,
        rate: f64,
        /// One batch in flight at a time (the design before pipelining), for comparison.
        #[arg(long)]
        sequential: bool,
        /// The cycles in flight fixed at what the rate needs (the design before they backed
        /// off), for comparison.
        #[arg(long)]
        fixed: bool,
        /// Each SQS call but the receives times out after this many ms (a stand-in's time).
        #[arg(long)]
        call_timeout_ms: Option<u64>,
    },
    /// Writes the consumer's benchmark event.
    Event {
        #[arg(long, default_value_t = 10_000)]
        records: usize,
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    match dispatch(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resq-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cmd: Cmd) -> Result<(), String> {
    let rt = || tokio::runtime::Runtime::new().map_err(|e| e.to_string());
    match cmd {
        Cmd::Consumer { event } => {
            let out = rt()?.block_on(child::consumer(&event))?;
            println!("{out}");
        }
        Cmd::ConsumerIo {
            event,
            latency_ms,
            concurrency,
        } => {
            let latency = std::time::Duration::from_millis(latency_ms);
            let out = rt()?.block_on(child::consumer_io(&event, latency, concurrency))?;
            println!("{out}");
        }
        Cmd::RedriveScale(o) => {
            let rt = rt()?;
            let (latency, designs) = scale::stand_in(&o)?;
            let localstack = match o.localstack_drain + o.localstack_drain_sequential {
                0 => Vec::new(),
                _ => {
                    eprintln!("bench: LocalStack (starting it)");
                    let ls = resq_local::emulator::LocalStack::start(&o.localstack_python)
                        .map_err(|e| e.to_string())?;
                    scale::localstack(&o, &ls, &rt)?
                }
            };
            let scale = scale::Scale {
                latency,
                designs,
                localstack,
            };
            println!("{}", scale.table());
            println!("{}", scale.summary());
        }
        Cmd::Io {
            options,
            io_real_only,
        } => {
            let started = std::time::Instant::now();
            let real = realio::real_io(&options)?;
            println!("{}", real.table());
            let work = &options.work;
            std::fs::create_dir_all(work).map_err(|e| format!("{}: {e}", work.display()))?;
            pictures::write_io(work, &real.wall_charts())?;
            println!("picture: {}", work.join(pictures::IO_SVG).display());
            if !io_real_only {
                let rows = run::io(&options)?;
                println!("{}", run::io_table(&rows));
            }
            println!("bench-io: {}", real.summary());
            eprintln!("io: {:.0} s", started.elapsed().as_secs_f64());
        }
        Cmd::Fleet { options, before } => {
            let started = std::time::Instant::now();
            let fleet = fleet::fleet(&options, before.as_deref())?;
            println!(
                "| measure | as shipped | limit reset per invocation | | target |\n|---|---:|---:|---|---|"
            );
            for row in fleet.rows() {
                println!("| {} |", row.join(" | "));
            }
            println!("bench-fleet: {}", fleet.summary());
            eprintln!("fleet: {:.0} s", started.elapsed().as_secs_f64());
        }
        Cmd::ConsumerWarm { event, invocations } => {
            let out = rt()?.block_on(child::consumer_warm(&event, invocations))?;
            println!("{out}");
        }
        Cmd::MemorySizes {
            binary,
            sizes,
            records,
            latency_ms,
            rounds,
        } => {
            let s = function::memory_sizes(&binary, &sizes, records, latency_ms, rounds)?;
            for [m, r, target] in run::sizes_rows(&s) {
                println!("| {m} | {r} | {target} |");
            }
        }
        Cmd::Coldstart {
            binary,
            function,
            runs,
        } => {
            let (before, after) = coldstart::before_after(&binary, &function, runs)?;
            println!(
                "{function}: init to first invocation/next, median of {runs}: {before:.2} ms without SSL_CERT_FILE, {after:.2} ms with SSL_CERT_FILE={} (standing in for AL2023's {})",
                coldstart::LOCAL_CA_BUNDLE,
                coldstart::AL2023_CA_BUNDLE
            );
        }
        Cmd::Cost {
            binary,
            engine_rps,
            bare_rps,
            memory_mb,
            outage_profile,
        } => {
            let (log_bytes, lines) = function::log_bytes_per_invocation(&binary, 10, 20)?;
            eprintln!("a healthy invocation's log lines:\n{lines}");
            let unit = cost::UnitMeasured {
                extra_cpu_us_per_record: 1e6 / engine_rps - 1e6 / bare_rps,
                log_bytes_per_invocation: log_bytes,
            };
            let template = cost::Template::deployed()?;
            let template =
                template.with_consumer_memory(memory_mb.unwrap_or(template.consumer_memory_mb));
            let profile = outage::OutageProfile::read(&outage_profile)?;
            let prices = cost::UnitPrices::new(
                &cost::Measured::LATEST,
                &unit,
                &template,
                0.01,
                profile.as_ref(),
            );
            println!("{}", prices.table());
        }
        Cmd::Outage { outage_profile } => {
            let profile = outage::OutageProfile::read(&outage_profile)?;
            let (m, t) = (cost::Measured::LATEST, cost::Template::deployed()?);
            let s = outage::Scenario::DEFAULT;
            let bills = outage::Bills::new(&m, &t, &s, profile.as_ref());
            println!("| outage | resq | seed design |\n|---|---:|---:|");
            for [label, resq, seed] in bills.rows() {
                println!("| {label} | {resq} | {seed} |");
            }
            println!("\n{}", bills.statement());
            if let Some(p) = &profile {
                for a in outage::agreement(p, &m, &t, &s) {
                    println!(
                        "profile against the model at its shape: {}: measured {:.4}, modelled {:.4} ({:.0} % apart, {} {:.0} %)",
                        a.name,
                        a.measured,
                        a.modelled,
                        a.error() * 100.0,
                        if a.holds() { "within" } else { "NOT within" },
                        outage::AGREEMENT_TOLERANCE * 100.0
                    );
                }
            }
            println!("outage_cost_ratio={:.2}", bills.ratio());
        }
        Cmd::FunctionMemory {
            binary,
            event: None,
            work,
        } => {
            let run = function::rejected_6mb_peak(&binary, &work)?;
            println!(
                "{} records, {} bytes, every one rejected: peak {:.1} MB ({:.1} MiB) over a cold and a warm invocation; goal ≤ {} MB",
                run.records,
                run.payload_bytes,
                run.peak_mb(),
                run.peak_kb as f64 / 1024.0,
                function::PEAK_GOAL_MB
            );
        }
        Cmd::FunctionMemory {
            binary,
            event: Some(event),
            ..
        } => {
            let run = function::consumer_peak(&binary, &event, 1)?;
            println!(
                "{} records, {} bytes: peak {:.1} MiB, {} reported failed, smallest memory size {} MB",
                run.records,
                run.payload_bytes,
                run.peak_kb as f64 / 1024.0,
                run.failures,
                run.smallest_memory_mb(0.25)
            );
        }
        Cmd::Redrive {
            endpoint,
            dlq_url,
            main_queue_url,
            rate,
            sequential,
            fixed,
            call_timeout_ms,
        } => {
            let design = match (sequential, fixed) {
                (true, _) => child::Design::Sequential,
                (false, true) => child::Design::Fixed,
                (false, false) => child::Design::Pipelined,
            };
            let out = rt()?.block_on(child::redrive(
                &endpoint,
                &dlq_url,
                &main_queue_url,
                rate,
                design,
                call_timeout_ms.map(std::time::Duration::from_millis),
            ))?;
            println!("{out}");
        }
        Cmd::RedriveSlowSqs(o) => {
            let s = slowsqs::measure(
                o.slow_sqs_messages,
                &o.slow_sqs_medians_ms,
                o.slow_sqs_chart_messages,
            )?;
            println!("{}", s.table());
            let (adaptive, fixed) = s.drain_rates();
            println!(
                "redrive_unconfirmed_per_1000={:.2} drain msgs/s: backs off {adaptive:.0}, fixed {fixed:.0}",
                s.unconfirmed_per_1000()
            );
            std::fs::create_dir_all(&o.work).map_err(|e| format!("{}: {e}", o.work.display()))?;
            pictures::write_redrive(&o.work, &s.series())?;
            println!("picture: {}", o.work.join(pictures::REDRIVE_SVG).display());
        }
        Cmd::RedriveDeployed {
            binary,
            sizes,
            scale,
        } => {
            let d = deployed::measure(&binary, &sizes, scale)?;
            println!("{}", d.table());
            let smallest = d.smallest_reaching_goal();
            println!(
                "redrive_msgs_per_s_deployed={:.0}; smallest size reaching {}: {smallest:?}, ${:.4} per million replays",
                d.msgs_per_s(),
                deployed::GOAL_MSGS_PER_S,
                smallest
                    .and_then(|mb| d.cost_per_million(mb))
                    .unwrap_or(f64::NAN)
            );
        }
        Cmd::Event { records, out } => {
            let e = event::sqs_event(records, 5.0, 42);
            let bytes = serde_json::to_vec(&e.event).map_err(|e| e.to_string())?;
            std::fs::write(&out, bytes).map_err(|e| format!("{}: {e}", out.display()))?;
            eprintln!("{records} records, {} malformed or invalid", e.rejected);
        }
        Cmd::Run(args) => {
            let RunArgs {
                mut options,
                versions,
            } = *args;
            options.chunk = options.chunk.max(1);
            let o = options;
            let report = run::run(&o)?;
            run::write_results(&o.results, &report, &versions)?;
            println!("{}", report.table());
            println!("results: {}", o.results.display());
            println!("{}", report.summary_line());
        }
    }
    Ok(())
}
