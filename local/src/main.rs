//! `resq-local`: the developer's local pipeline (`make local`, `make demo`, `make chaos`,
//! `make soak`, the invoke targets). Wiring only: parse, run, print.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use resq_local::CliError;
use resq_local::emulator::{EmulatorKind, Installs};

/// resq's local pipeline: the stack on a local AWS (moto or LocalStack) with what AWS runs
/// around the functions, and the runs built on it.
#[derive(Parser, Debug)]
#[command(name = "resq-local", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The live pipeline: the emulator with the stack, Lambda's event source mapping in front
    /// of the consumer, the schedule in front of the redriver, their metrics into CloudWatch.
    /// Invokes through `cargo lambda watch` while it runs, else the built binaries. Until Ctrl-C.
    Up(UpArgs),
    /// Run the whole pipeline on a local emulator with faults, then audit every order.
    Demo(DemoArgs),
    /// The pipeline with the real function binaries, faults injected into their AWS calls and
    /// the processes killed at random, then an audit: nothing lost, no effect doubled.
    Chaos(ChaosArgs),
    /// The pipeline over time, compressed, on LocalStack: a burst of permanent failures, a
    /// downstream outage that makes replays fail (the replays-failing alarm must pause redrive),
    /// then recovery; fails if anything was lost, doubled, starved or replayed past the cap.
    Soak(SoakArgs),
    /// Print a fixture event with its times moved to now (the newest becomes now), for
    /// `cargo lambda invoke --data-file`.
    Event {
        /// The event file (e.g. events/sqs-batch.json).
        file: PathBuf,
    },
    /// `make watch`'s log pipe: echo `cargo lambda watch`'s output, and put the functions'
    /// metric (EMF) lines into the local stack's CloudWatch under the stack's function names.
    WatchLogs {
        /// The env file `make local` wrote.
        #[arg(long, default_value = "target/local.env")]
        env_file: PathBuf,
    },
}

#[derive(Args, Debug)]
struct EmulatorArgs {
    /// Which local AWS.
    #[arg(long, env = "EMULATOR", value_enum, default_value_t = EmulatorKind::Moto)]
    emulator: EmulatorKind,
    /// The moto server binary.
    #[arg(long, default_value = ".venv/bin/moto_server")]
    moto_server: PathBuf,
    /// LocalStack's Python (its venv).
    #[arg(long, default_value = ".venv-localstack/bin/python")]
    localstack_python: PathBuf,
}

impl EmulatorArgs {
    fn installs(&self) -> Installs {
        Installs {
            moto_server: self.moto_server.clone(),
            localstack_python: self.localstack_python.clone(),
        }
    }
}

#[derive(Args, Debug)]
struct UpArgs {
    #[command(flatten)]
    emulator: EmulatorArgs,
    /// The translated template.
    #[arg(long, default_value = "target/infra/template.json")]
    template: PathBuf,
    /// The stack's name.
    #[arg(long, default_value = "resq-local")]
    stack_name: String,
    /// Where to write the functions' environment (for `make watch` and for `resq`).
    #[arg(long, default_value = "target/local.env")]
    env_file: PathBuf,
    /// Where `cargo lambda watch` listens.
    #[arg(long, env = "WATCH_PORT", default_value_t = 9010)]
    watch_port: u16,
    /// The consumer binary, used while watch is not running.
    #[arg(long, default_value = "target/debug/consumer")]
    consumer_bin: PathBuf,
    /// The redriver binary.
    #[arg(long, default_value = "target/debug/redriver")]
    redriver_bin: PathBuf,
    /// Where the binaries' logs go.
    #[arg(long, default_value = "target/local")]
    log_dir: PathBuf,
    /// Seconds between scheduled redriver runs (the template's schedule when absent).
    #[arg(long, env = "SCHEDULE_SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    schedule_seconds: Option<u64>,
    /// Seconds between SQS metric publications (SQS publishes every minute).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    metrics_seconds: u64,
}

#[derive(Args, Debug)]
struct SoakArgs {
    /// LocalStack's Python (its venv).
    #[arg(long, default_value = ".venv-localstack/bin/python")]
    localstack_python: PathBuf,
    /// moto's server (the consumer's event source mapping lives there).
    #[arg(long, default_value = ".venv/bin/moto_server")]
    moto_server: PathBuf,
    /// The translated template (the alarms' definitions).
    #[arg(long, default_value = "target/infra/template.json")]
    template: PathBuf,
    /// The consumer binary.
    #[arg(long, default_value = "target/debug/consumer")]
    consumer_bin: PathBuf,
    /// The redriver binary.
    #[arg(long, default_value = "target/debug/redriver")]
    redriver_bin: PathBuf,
    /// Where the functions' logs go.
    #[arg(long, default_value = "target/soak")]
    log_dir: PathBuf,
    /// Seconds between scheduled redriver runs.
    #[arg(long, default_value_t = 2)]
    schedule_seconds: u64,
    /// MAX_MESSAGES_PER_RUN (left out: `auto`, the default).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_messages_per_run: Option<u32>,
    /// REDRIVE_RATE_PER_SECOND.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=3000))]
    rate_per_second: u32,
    /// Replayable messages behind the burst.
    #[arg(long, default_value_t = 10)]
    probes: usize,
    /// Permanent failures in the burst per replayable message behind it.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    burst_factor: u32,
    /// Orders sent while the consumer crashes.
    #[arg(long, default_value_t = 1000)]
    crash_orders: usize,
    /// Orders sent per second while the downstream is down.
    #[arg(long, default_value_t = 20.0)]
    outage_rate: f64,
    /// How long the downstream is down, in alarm periods (at least 10).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(10..))]
    outage_periods: u32,
    /// Dead letters put into the DLQ once the consumer is paused (replayed after it resumes;
    /// the drain's rate is measured over the full runs: two need about 2 × 20 × the rate).
    #[arg(long, default_value_t = 2000)]
    recovery_orders: usize,
    /// ARCHIVE_AFTER_SECONDS (the TTL, scaled down; longer than the crash phase, so that
    /// what it dead-letters is replayed before its TTL).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(60..))]
    ttl_seconds: u64,
    /// The replays-failing alarm's period in seconds (the template's 60, scaled down).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(10..=60))]
    alarm_period_seconds: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 900)]
    max_seconds: u64,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Orders to send.
    #[arg(long, default_value_t = 1000)]
    orders: usize,
    /// Percentage that is not JSON.
    #[arg(long, default_value_t = 3.0, value_parser = resq_ops::orders::percent)]
    malformed_pct: f64,
    /// Percentage that is an invalid order.
    #[arg(long, default_value_t = 2.0, value_parser = resq_ops::orders::percent)]
    invalid_pct: f64,
    /// Percentage failing transiently 1–3 times, then succeeding.
    #[arg(long, default_value_t = 8.0, value_parser = resq_ops::orders::percent)]
    flaky_pct: f64,
    /// Percentage failing every time (archived after the redrive cap).
    #[arg(long, default_value_t = 2.0, value_parser = resq_ops::orders::percent)]
    doomed_pct: f64,
    #[command(flatten)]
    emulator: EmulatorArgs,
    /// The translated template.
    #[arg(long, default_value = "target/infra/template.json")]
    template: PathBuf,
    /// Give up waiting for the pipeline to settle after this many seconds.
    #[arg(long, default_value_t = 600)]
    max_seconds: u64,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

impl DemoArgs {
    fn options(&self) -> resq_local::demo::DemoOptions {
        resq_local::demo::DemoOptions {
            orders: self.orders,
            malformed_pct: self.malformed_pct,
            invalid_pct: self.invalid_pct,
            flaky_pct: self.flaky_pct,
            doomed_pct: self.doomed_pct,
            emulator: self.emulator.emulator,
            installs: self.emulator.installs(),
            template: self.template.clone(),
            max_duration: Duration::from_secs(self.max_seconds),
            seed: self.seed,
        }
    }
}

// the demo's flags, with the chaos run's defaults and meanings, then the chaos run's own
#[derive(Args, Debug)]
#[command(
    mut_arg("orders", |a| a.default_value("10000")),
    mut_arg("malformed_pct", |a| a.default_value("2.5")),
    mut_arg("invalid_pct", |a| a.default_value("2.5")),
    mut_arg("flaky_pct", |a| a.default_value("10").help(
        "Percentage whose downstream fails a random number of times (1 to --max-flaky-failures)"
    )),
    mut_arg("doomed_pct", |a| a.default_value("3").help(
        "Percentage whose downstream always fails (archived after the redrive cap)"
    )),
    mut_arg("max_seconds", |a| a.default_value("3600")),
)]
struct ChaosArgs {
    #[command(flatten)]
    demo: DemoArgs,
    /// A flaky order fails at most this many times (more than maxReceiveCount, 3: some go
    /// through the DLQ and back).
    #[arg(long, default_value_t = 5)]
    max_flaky_failures: u32,
    /// Percentage of the functions' SQS and S3 calls that fail (throttling, 5xx, lost answers).
    #[arg(long, default_value_t = 5.0, value_parser = resq_ops::orders::percent)]
    fault_pct: f64,
    /// Kill the consumer mid-batch at least this many times.
    #[arg(long, default_value_t = 5)]
    consumer_kills: u32,
    /// Kill the redriver mid-run at least this many times.
    #[arg(long, default_value_t = 5)]
    redriver_kills: u32,
    /// The consumer binary.
    #[arg(long, default_value = "target/debug/consumer")]
    consumer_bin: PathBuf,
    /// The redriver binary.
    #[arg(long, default_value = "target/debug/redriver")]
    redriver_bin: PathBuf,
    /// Where the functions' logs go.
    #[arg(long, default_value = "target/chaos")]
    log_dir: PathBuf,
    /// `AWS_MAX_ATTEMPTS` for the functions (1: the SDK does not retry, resq sees every fault).
    #[arg(long, default_value_t = 1)]
    sdk_attempts: u32,
    /// The redriver's PERMANENT_ACTION (the template's default, `keep`: the kept permanent
    /// failures are hidden until their TTL, and the audit makes them visible first).
    #[arg(long, default_value_t = resq_redriver::config::PermanentAction::Keep)]
    permanent_action: resq_redriver::config::PermanentAction,
}

async fn chaos(args: &ChaosArgs) -> Result<(), CliError> {
    let opts = resq_local::chaos::ChaosOptions {
        demo: args.demo.options(),
        max_flaky_failures: args.max_flaky_failures,
        fault_pct: args.fault_pct,
        consumer_kills: args.consumer_kills,
        redriver_kills: args.redriver_kills,
        consumer_bin: args.consumer_bin.clone(),
        redriver_bin: args.redriver_bin.clone(),
        log_dir: args.log_dir.clone(),
        sdk_attempts: args.sdk_attempts,
        permanent_action: args.permanent_action,
    };
    let report = until_ctrl_c(resq_local::chaos::run(&opts), "emulator and functions").await?;
    println!("\n{}", resq_local::demo::table(&report.audit));
    println!("{}", report.details());
    verdict(report.failures(&opts), &report.summary_line())
}

async fn soak(args: &SoakArgs) -> Result<(), CliError> {
    let opts = resq_local::soak::SoakOptions {
        localstack_python: args.localstack_python.clone(),
        moto_server: args.moto_server.clone(),
        template: args.template.clone(),
        consumer_bin: args.consumer_bin.clone(),
        redriver_bin: args.redriver_bin.clone(),
        log_dir: args.log_dir.clone(),
        schedule_every: Duration::from_secs(args.schedule_seconds.max(1)),
        max_messages_per_run: args.max_messages_per_run,
        rate_per_second: args.rate_per_second,
        probes: args.probes,
        burst_factor: args.burst_factor,
        crash_orders: args.crash_orders,
        warmup_orders: 20,
        outage_rate: args.outage_rate,
        outage_periods: args.outage_periods,
        recovery_orders: args.recovery_orders,
        ttl: Duration::from_secs(args.ttl_seconds),
        alarm_period: Duration::from_secs(args.alarm_period_seconds),
        hold_periods: 3,
        threshold: 2,
        max_duration: Duration::from_secs(args.max_seconds),
        seed: args.seed,
    };
    let report = until_ctrl_c(resq_local::soak::run(&opts), "LocalStack and functions").await?;
    println!("\n{}", resq_local::demo::table(&report.audit));
    println!(
        "alarm states (s: state): {}",
        report
            .alarm_states
            .iter()
            .map(|(at, s)| format!("{at}: {s}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "{} s, {}settled; {} metric data points forwarded to CloudWatch; {} function errors",
        report.elapsed.as_secs(),
        if report.settled { "" } else { "NOT " },
        report.metrics_forwarded,
        report.function_errors
    );
    verdict(report.failures(), &report.summary_line())
}

/// Runs `run` to its end; on Ctrl-C, drops it (`stopped`, the processes it started, die with
/// their handles) and exits 130.
async fn until_ctrl_c<T>(
    run: impl Future<Output = Result<T, CliError>>,
    stopped: &str,
) -> Result<T, CliError> {
    tokio::select! {
        done = run => done,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("resq: interrupted; {stopped} stopped");
            std::process::exit(130);
        }
    }
}

/// Prints each failure, then the summary line; an error naming the failures, if any.
fn verdict(failures: Vec<String>, summary_line: &str) -> Result<(), CliError> {
    for f in &failures {
        println!("FAILED: {f}");
    }
    println!("{summary_line}");
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::Usage(failures.join("; ")))
    }
}

async fn demo(args: &DemoArgs) -> Result<(), CliError> {
    let opts = args.options();
    let audit = until_ctrl_c(resq_local::demo::run(&opts), "emulator").await?;
    println!("\n{}", resq_local::demo::table(&audit));
    if !audit.lost.is_empty() {
        println!("lost orders: {}", audit.lost.join(", "));
    }
    println!("{}", audit.summary_line());
    if audit.lost.is_empty() && audit.duplicate_effects == 0 {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "{} orders were lost, {} order effects doubled",
            audit.lost.len(),
            audit.duplicate_effects
        )))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // the functions' own warnings (failed records, retries) on stderr; RUST_LOG to see more
    resq_ops::init_stderr_tracing();
    let result = match &cli.command {
        Command::Up(args) => up(args).await,
        Command::Demo(args) => demo(args).await,
        Command::Chaos(args) => chaos(args).await,
        Command::Soak(args) => soak(args).await,
        Command::Event { file } => event(file),
        Command::WatchLogs { env_file } => watch_logs(env_file).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resq-local: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn up(args: &UpArgs) -> Result<(), CliError> {
    let opts = resq_local::live::UpOptions {
        emulator: args.emulator.emulator,
        installs: args.emulator.installs(),
        template: args.template.clone(),
        stack_name: args.stack_name.clone(),
        env_file: args.env_file.clone(),
        watch_port: args.watch_port,
        consumer_bin: args.consumer_bin.clone(),
        redriver_bin: args.redriver_bin.clone(),
        log_dir: args.log_dir.clone(),
        schedule: args.schedule_seconds.map(Duration::from_secs),
        metrics_every: Duration::from_secs(args.metrics_seconds),
    };
    resq_local::live::up(&opts, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

fn event(file: &std::path::Path) -> Result<(), CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", file.display())))?;
    let mut event: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CliError::Usage(format!("{} is not JSON: {e}", file.display())))?;
    resq_local::event::stamp(&mut event, chrono::Utc::now().timestamp_millis());
    println!(
        "{}",
        serde_json::to_string_pretty(&event).unwrap_or_default()
    );
    Ok(())
}

async fn watch_logs(env_file: &std::path::Path) -> Result<(), CliError> {
    let text = std::fs::read_to_string(env_file).map_err(|e| {
        CliError::Usage(format!(
            "cannot read {}: {e} (run make local in another terminal first)",
            env_file.display()
        ))
    })?;
    let var = |name: &str| resq_local::live::env_file_var(&text, name);
    let endpoint = var("AWS_ENDPOINT_URL").ok_or_else(|| {
        CliError::Usage(format!("{} has no AWS_ENDPOINT_URL", env_file.display()))
    })?;
    let renames = var(resq_local::live::FUNCTIONS_VAR).unwrap_or_default();
    let config = resq_local::emulator::local_sdk_config(&endpoint).await;
    let forwarder =
        resq_local::emf::MetricForwarder::start(aws_sdk_cloudwatch::Client::new(&config));
    resq_local::live::forward_watch_logs(tokio::io::stdin(), forwarder.sender(), &renames).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo_flags(args: &[&str]) -> resq_local::demo::DemoOptions {
        match Cli::parse_from(args).command {
            Command::Demo(demo) => demo.options(),
            Command::Chaos(chaos) => chaos.demo.options(),
            other => panic!("not the demo's flags: {other:?}"),
        }
    }

    #[test]
    fn the_chaos_run_takes_the_demos_flags_with_its_own_defaults() {
        // WHEN neither command is given a flag
        let demo = demo_flags(&["resq-local", "demo"]);
        let chaos = demo_flags(&["resq-local", "chaos"]);
        // THEN each has its own defaults (the chaos run names the demo's flags by id)
        let defaults = |o: &resq_local::demo::DemoOptions| {
            let pcts = [o.malformed_pct, o.invalid_pct, o.flaky_pct, o.doomed_pct];
            (o.orders, pcts, o.max_duration.as_secs(), o.seed)
        };
        assert_eq!(defaults(&demo), (1000, [3.0, 2.0, 8.0, 2.0], 600, 7));
        assert_eq!(defaults(&chaos), (10_000, [2.5, 2.5, 10.0, 3.0], 3600, 7));
        // AND a flag given to the chaos run reaches its demo options
        let given = demo_flags(&["resq-local", "chaos", "--orders", "12", "--flaky-pct", "1"]);
        assert_eq!((given.orders, given.flaky_pct), (12, 1.0));
    }
}
