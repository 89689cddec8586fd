//! `resq`: the operator tool. Wiring only: parse, build the context, run, print.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use resq::config::PermanentAction;
use resq_cli::context::{Context, Endpoint};
use resq_cli::{CliError, archive, dlq, orders, status};

/// Keep SQS order pipelines flowing: inspect and operate a resq stack (AWS or a local emulator).
#[derive(Parser, Debug)]
#[command(name = "resq", version)]
struct Cli {
    /// A local emulator's endpoint (e.g. http://127.0.0.1:5000); AWS when absent.
    #[arg(long, global = true, env = "AWS_ENDPOINT_URL")]
    endpoint_url: Option<String>,
    /// AWS region.
    #[arg(long, global = true, env = "AWS_REGION")]
    region: Option<String>,
    /// The orders queue URL (stack output OrdersQueueUrl).
    #[arg(long, global = true, env = "MAIN_QUEUE_URL")]
    queue_url: Option<String>,
    /// The DLQ URL (stack output DeadLetterQueueUrl).
    #[arg(long, global = true, env = "DLQ_URL")]
    dlq_url: Option<String>,
    /// The archive bucket (stack output ArchiveBucketName).
    #[arg(long, global = true, env = "ARCHIVE_BUCKET")]
    bucket: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send orders to the orders queue, from a file or generated.
    Send(SendArgs),
    /// Queue depths, oldest message ages and alarm states.
    Status {
        /// Alarms whose names start with this (the stack name).
        #[arg(long, default_value = "resq-")]
        alarm_prefix: String,
    },
    /// Inspect and replay the dead-letter queue.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// List, show and restore archived messages.
    #[command(subcommand)]
    Archive(ArchiveCommand),
    /// Run the whole pipeline on a local emulator with faults, then audit every order.
    Demo(DemoArgs),
    /// The pipeline with the real function binaries, faults injected into their AWS calls and
    /// the processes killed at random, then an audit: nothing lost, no effect doubled.
    Chaos(ChaosArgs),
    /// Start a local emulator with the stack and write an env file for `cargo lambda watch`;
    /// runs until Ctrl-C.
    Local(LocalArgs),
    /// The pipeline over time, compressed, on LocalStack: a burst of permanent failures, a
    /// downstream outage that makes replays fail (the replays-failing alarm must pause replay),
    /// then recovery; fails if anything was lost, doubled, starved or replayed past the cap.
    Soak(SoakArgs),
}

#[derive(Args, Debug)]
struct SoakArgs {
    /// LocalStack's Python (its venv).
    #[arg(long, default_value = ".venv-localstack/bin/python")]
    localstack_python: PathBuf,
    /// The translated template (the replays-failing alarm's definition).
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
    /// MAX_MESSAGES_PER_RUN.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    max_messages_per_run: u32,
    /// Permanent failures in the burst per message of a run's budget.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    burst_factor: u32,
    /// Orders sent while the downstream is down.
    #[arg(long, default_value_t = 40)]
    outage_orders: usize,
    /// ARCHIVE_AFTER_SECONDS (the TTL, scaled down).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(60..))]
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
struct LocalArgs {
    /// The moto server binary.
    #[arg(long, default_value = ".venv/bin/moto_server")]
    moto_server: PathBuf,
    /// The translated template.
    #[arg(long, default_value = "target/infra/template.json")]
    template: PathBuf,
    /// Where to write the functions' environment.
    #[arg(long, default_value = "target/local.env")]
    env_file: PathBuf,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Orders to send.
    #[arg(long, default_value_t = 1000)]
    orders: usize,
    /// Percentage that is not JSON.
    #[arg(long, default_value_t = 3.0, value_parser = percent)]
    malformed_pct: f64,
    /// Percentage that is an invalid order.
    #[arg(long, default_value_t = 2.0, value_parser = percent)]
    invalid_pct: f64,
    /// Percentage failing transiently 1–3 times, then succeeding.
    #[arg(long, default_value_t = 8.0, value_parser = percent)]
    flaky_pct: f64,
    /// Percentage failing every time (archived after the redrive cap).
    #[arg(long, default_value_t = 2.0, value_parser = percent)]
    doomed_pct: f64,
    /// The moto server binary.
    #[arg(long, default_value = ".venv/bin/moto_server")]
    moto_server: PathBuf,
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

#[derive(Args, Debug)]
struct ChaosArgs {
    /// Orders to send.
    #[arg(long, default_value_t = 10_000)]
    orders: usize,
    /// Percentage that is not JSON.
    #[arg(long, default_value_t = 2.5, value_parser = percent)]
    malformed_pct: f64,
    /// Percentage that is an invalid order.
    #[arg(long, default_value_t = 2.5, value_parser = percent)]
    invalid_pct: f64,
    /// Percentage whose downstream fails a random number of times (1 to --max-flaky-failures).
    #[arg(long, default_value_t = 10.0, value_parser = percent)]
    flaky_pct: f64,
    /// A flaky order fails at most this many times (more than maxReceiveCount, 3: some go
    /// through the DLQ and back).
    #[arg(long, default_value_t = 5)]
    max_flaky_failures: u32,
    /// Percentage whose downstream always fails (archived after the redrive cap).
    #[arg(long, default_value_t = 3.0, value_parser = percent)]
    doomed_pct: f64,
    /// Percentage of the functions' SQS and S3 calls that fail (throttling, 5xx, lost answers).
    #[arg(long, default_value_t = 5.0, value_parser = percent)]
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
    #[arg(long, default_value = "keep", value_parser = ["keep", "archive"])]
    permanent_action: String,
    /// The moto server binary.
    #[arg(long, default_value = ".venv/bin/moto_server")]
    moto_server: PathBuf,
    /// The translated template.
    #[arg(long, default_value = "target/infra/template.json")]
    template: PathBuf,
    /// Give up waiting for the pipeline to settle after this many seconds.
    #[arg(long, default_value_t = 3600)]
    max_seconds: u64,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Args, Debug)]
struct SendArgs {
    /// Orders from a file: a JSON array, or one document per line.
    #[arg(long, conflicts_with = "count")]
    file: Option<PathBuf>,
    /// Generate this many orders.
    #[arg(long)]
    count: Option<usize>,
    /// Percentage of generated orders that are not JSON.
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    malformed_pct: f64,
    /// Percentage of generated orders that are invalid.
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    invalid_pct: f64,
    /// Prefix of generated order ids.
    #[arg(long, default_value = "ORD-")]
    prefix: String,
}

#[derive(Subcommand, Debug)]
enum DlqCommand {
    /// Show DLQ messages without removing them.
    Peek {
        /// Only this x-failure-reason (MALFORMED_JSON, VALIDATION_FAILED, …).
        #[arg(long)]
        reason: Option<String>,
        /// Only messages at least this many seconds old.
        #[arg(long)]
        older_than: Option<u64>,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Include the permanent failures the redriver keeps hidden until their TTL: makes
        /// them visible first (with --reason, those of that reason only).
        #[arg(long)]
        kept: bool,
    },
    /// Replay DLQ messages into the orders queue through the redriver's rules.
    Replay {
        /// Classify and report; change nothing. Run this first.
        #[arg(long)]
        dry_run: bool,
        /// Only this x-failure-reason (replays permanent failures of that reason after a fix).
        #[arg(long)]
        reason: Option<String>,
        /// Only messages at least this many seconds old.
        #[arg(long)]
        older_than: Option<u64>,
        /// Handle at most this many messages.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        max: u32,
        /// Replays per second.
        #[arg(long, default_value_t = 10.0, value_parser = rate)]
        rate: f64,
        /// The redrive cap (MAX_REDRIVE_ATTEMPTS).
        #[arg(long, env = "MAX_REDRIVE_ATTEMPTS", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
        cap: u32,
        /// The TTL (ARCHIVE_AFTER_SECONDS), as the stack's redriver has it.
        #[arg(long, env = "ARCHIVE_AFTER_SECONDS", default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(60..=resq::config::MAX_ARCHIVE_AFTER_SECONDS))]
        archive_after: u64,
        /// Archive permanent failures instead of keeping them.
        #[arg(long)]
        archive_permanent: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ArchiveCommand {
    /// List archive keys.
    Ls {
        /// Only this reason (REDRIVE_CAP, TTL_EXPIRED, …).
        #[arg(long)]
        reason: Option<String>,
        /// Only this day (YYYY-MM-DD).
        #[arg(long)]
        date: Option<String>,
    },
    /// Print one archive entry.
    Show {
        /// Its key.
        key: String,
    },
    /// Send archived messages back to the orders queue (redrive count reset).
    Restore {
        /// Their keys.
        #[arg(required = true)]
        keys: Vec<String>,
        /// Check the entries; send nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

fn percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a percentage from 0 to 100")),
    }
}

fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= resq::config::MAX_RATE_PER_SECOND => Ok(r),
        _ => Err(format!(
            "{s:?} is not a rate above 0 and at most {}",
            resq::config::MAX_RATE_PER_SECOND
        )),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // the functions' own warnings (failed records, retries) on stderr; RUST_LOG to see more
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resq: {e}");
            if e.to_string().contains("dispatch failure") {
                eprintln!(
                    "resq: the endpoint did not answer; check --endpoint-url (is the emulator running?) or your network"
                );
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    if let Command::Demo(args) = &cli.command {
        return demo(args).await;
    }
    if let Command::Local(args) = &cli.command {
        return local(args).await;
    }
    if let Command::Chaos(args) = &cli.command {
        return chaos(args).await;
    }
    if let Command::Soak(args) = &cli.command {
        return soak(args).await;
    }
    let endpoint = Endpoint {
        endpoint_url: cli.endpoint_url.clone(),
        region: cli.region.clone(),
    };
    let ctx = Context::new(&endpoint, cli.queue_url, cli.dlq_url, cli.bucket).await?;
    let json = cli.json;
    match cli.command {
        Command::Send(args) => {
            let batch = match (&args.file, args.count) {
                (Some(path), _) => orders::from_file(path)?,
                (None, Some(n)) => orders::generate(
                    &args.prefix,
                    n,
                    args.malformed_pct,
                    args.invalid_pct,
                    &mut rand::rng(),
                ),
                (None, None) => {
                    return Err(CliError::Usage(
                        "send needs --file PATH or --count N".into(),
                    ));
                }
            };
            let report = status::send(&ctx, &batch, |_| Default::default()).await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"sent": report.sent, "failed": report.failed})
                );
            } else {
                println!(
                    "sent {} of {} orders to {}",
                    report.sent,
                    batch.len(),
                    ctx.main_queue_url
                );
                for (id, why) in &report.failed {
                    println!("  not sent: {id}: {why}");
                }
            }
            if !report.failed.is_empty() {
                return Err(CliError::Usage(format!(
                    "{} orders were not accepted",
                    report.failed.len()
                )));
            }
        }
        Command::Status { alarm_prefix } => {
            let s = status::status(&ctx, &alarm_prefix).await?;
            if json {
                let queues: Vec<_> = s
                    .queues
                    .iter()
                    .map(|q| serde_json::json!({"queue": q.label, "url": q.url, "waiting": q.visible, "inFlight": q.in_flight, "oldestAgeSeconds": q.oldest_age_seconds}))
                    .collect();
                let alarms: Vec<_> = s
                    .alarms
                    .iter()
                    .map(|(n, st)| serde_json::json!({"name": n, "state": st}))
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"queues": queues, "alarms": alarms})
                );
            } else {
                print!("{s}");
            }
        }
        Command::Dlq(DlqCommand::Peek {
            reason,
            older_than,
            limit,
            kept,
        }) => {
            if kept {
                let n = dlq::unhide_kept(&ctx, reason.as_deref()).await?;
                eprintln!(
                    "{n} kept messages made visible (the next scheduled run keeps and hides them again)"
                );
            }
            let filter = dlq::Filter {
                reason,
                older_than: older_than.map(Duration::from_secs),
                limit,
            };
            let shown = dlq::peek(&ctx, &filter).await?;
            if !kept
                && let Ok((_, hidden)) = resq::sqs::depth(&ctx.sqs, &ctx.dlq_url).await
                && hidden > 0
            {
                eprintln!(
                    "{hidden} more DLQ messages are hidden: permanent failures the redriver keeps until their TTL (--kept shows them), or messages a run holds"
                );
            }
            if json {
                println!("{}", serde_json::to_string(&shown).unwrap_or_default());
            } else if shown.is_empty() {
                println!("no DLQ messages match");
            } else {
                for p in shown {
                    println!(
                        "{}  reason={} class={} redrives={} age={}s\n  {}",
                        p.message_id,
                        p.reason.as_deref().unwrap_or("-"),
                        p.failure_class.as_deref().unwrap_or("-"),
                        p.redrive_count.as_deref().unwrap_or("0"),
                        p.age_seconds.map_or("?".into(), |a| a.to_string()),
                        p.body
                    );
                }
            }
        }
        Command::Dlq(DlqCommand::Replay {
            dry_run,
            reason,
            older_than,
            max,
            rate,
            cap,
            archive_after,
            archive_permanent,
        }) => {
            let request = redriver::request::RunRequest {
                dry_run,
                max_messages: max,
                rate_per_second: rate,
                reason,
                older_than: older_than.map(Duration::from_secs),
            };
            let action = if archive_permanent {
                PermanentAction::Archive
            } else {
                PermanentAction::Keep
            };
            let summary = dlq::replay(
                &ctx,
                request,
                cap,
                Duration::from_secs(archive_after),
                action,
            )
            .await;
            println!(
                "{}",
                serde_json::to_string_pretty(&summary).unwrap_or_default()
            );
            if dry_run && !json {
                eprintln!("dry run: nothing was changed; run again without --dry-run to replay");
            }
        }
        Command::Archive(ArchiveCommand::Ls { reason, date }) => {
            let keys = archive::list(&ctx, reason.as_deref(), date.as_deref()).await?;
            if json {
                println!("{}", serde_json::to_string(&keys).unwrap_or_default());
            } else {
                keys.iter().for_each(|k| println!("{k}"));
                eprintln!("{} entries", keys.len());
            }
        }
        Command::Archive(ArchiveCommand::Show { key }) => {
            let envelope = archive::show(&ctx, &key).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&envelope).unwrap_or_default()
            );
        }
        Command::Demo(_) | Command::Local(_) | Command::Chaos(_) | Command::Soak(_) => {
            unreachable!("handled above")
        }
        Command::Archive(ArchiveCommand::Restore { keys, dry_run }) => {
            for key in keys {
                match archive::restore(&ctx, &key, dry_run).await? {
                    Some(id) => println!("restored {key} as message {id}"),
                    None => println!("would restore {key}"),
                }
            }
        }
    }
    Ok(())
}

async fn chaos(args: &ChaosArgs) -> Result<(), CliError> {
    let opts = resq_cli::chaos::ChaosOptions {
        demo: resq_cli::demo::DemoOptions {
            orders: args.orders,
            malformed_pct: args.malformed_pct,
            invalid_pct: args.invalid_pct,
            flaky_pct: args.flaky_pct,
            doomed_pct: args.doomed_pct,
            moto_server: args.moto_server.clone(),
            template: args.template.clone(),
            max_duration: Duration::from_secs(args.max_seconds),
            seed: args.seed,
        },
        max_flaky_failures: args.max_flaky_failures,
        fault_pct: args.fault_pct,
        consumer_kills: args.consumer_kills,
        redriver_kills: args.redriver_kills,
        consumer_bin: args.consumer_bin.clone(),
        redriver_bin: args.redriver_bin.clone(),
        log_dir: args.log_dir.clone(),
        sdk_attempts: args.sdk_attempts,
        permanent_action: if args.permanent_action == "keep" {
            resq::config::PermanentAction::Keep
        } else {
            resq::config::PermanentAction::Archive
        },
    };
    // Ctrl-C drops the run: the emulator and the function processes die with their handles.
    let report = tokio::select! {
        report = resq_cli::chaos::run(&opts) => report?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("resq: interrupted; emulator and functions stopped");
            std::process::exit(130);
        }
    };
    println!("\n{}", resq_cli::demo::table(&report.audit));
    println!("{}", report.details());
    let failures = report.failures(&opts);
    for f in &failures {
        println!("FAILED: {f}");
    }
    println!("{}", report.summary_line());
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::Usage(failures.join("; ")))
    }
}

async fn soak(args: &SoakArgs) -> Result<(), CliError> {
    let opts = resq_cli::soak::SoakOptions {
        localstack_python: args.localstack_python.clone(),
        template: args.template.clone(),
        consumer_bin: args.consumer_bin.clone(),
        redriver_bin: args.redriver_bin.clone(),
        log_dir: args.log_dir.clone(),
        schedule_every: Duration::from_secs(args.schedule_seconds.max(1)),
        max_messages_per_run: args.max_messages_per_run,
        burst_factor: args.burst_factor,
        warmup_orders: 20,
        outage_orders: args.outage_orders,
        recovery_orders: 20,
        ttl: Duration::from_secs(args.ttl_seconds),
        alarm_period: Duration::from_secs(args.alarm_period_seconds),
        hold_periods: 3,
        threshold: 2,
        max_duration: Duration::from_secs(args.max_seconds),
        seed: args.seed,
    };
    // Ctrl-C drops the run: LocalStack and the function processes die with their handles.
    let report = tokio::select! {
        report = resq_cli::soak::run(&opts) => report?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("resq: interrupted; LocalStack and functions stopped");
            std::process::exit(130);
        }
    };
    println!("\n{}", resq_cli::demo::table(&report.audit));
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
    let failures = report.failures();
    for f in &failures {
        println!("FAILED: {f}");
    }
    println!("{}", report.summary_line());
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::Usage(failures.join("; ")))
    }
}

async fn demo(args: &DemoArgs) -> Result<(), CliError> {
    let opts = resq_cli::demo::DemoOptions {
        orders: args.orders,
        malformed_pct: args.malformed_pct,
        invalid_pct: args.invalid_pct,
        flaky_pct: args.flaky_pct,
        doomed_pct: args.doomed_pct,
        moto_server: args.moto_server.clone(),
        template: args.template.clone(),
        max_duration: Duration::from_secs(args.max_seconds),
        seed: args.seed,
    };
    // Ctrl-C drops the demo future: the emulator handle kills moto on the way out.
    let audit = tokio::select! {
        audit = resq_cli::demo::run(&opts) => audit?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("resq: interrupted; emulator stopped");
            std::process::exit(130);
        }
    };
    println!("\n{}", resq_cli::demo::table(&audit));
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

async fn local(args: &LocalArgs) -> Result<(), CliError> {
    let template = std::fs::read_to_string(&args.template).map_err(|e| {
        CliError::Usage(format!(
            "cannot read {}: {e} (make local translates it first)",
            args.template.display()
        ))
    })?;
    let moto = resq_cli::emulator::MotoServer::start(&args.moto_server)?;
    let config = moto.sdk_config().await;
    let outputs = resq_cli::local::deploy_stack(&config, &template, "resq-local", &[]).await?;
    let env = format!(
        "AWS_ENDPOINT_URL={endpoint}\nAWS_REGION=us-east-1\nAWS_DEFAULT_REGION=us-east-1\nAWS_ACCESS_KEY_ID=local\nAWS_SECRET_ACCESS_KEY=local\n\
         MAIN_QUEUE_URL={main}\nDLQ_URL={dlq}\nARCHIVE_BUCKET={bucket}\nAWS_LAMBDA_LOG_FORMAT=Text\n",
        endpoint = moto.endpoint,
        main = outputs.main_queue_url,
        dlq = outputs.dlq_url,
        bucket = outputs.bucket,
    );
    if let Some(dir) = args.env_file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Usage(format!("{}: {e}", dir.display())))?;
    }
    std::fs::write(&args.env_file, env)
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.env_file.display())))?;
    println!("local stack resq-local on {}", moto.endpoint);
    println!(
        "  MAIN_QUEUE_URL={}\n  DLQ_URL={}\n  ARCHIVE_BUCKET={}",
        outputs.main_queue_url, outputs.dlq_url, outputs.bucket
    );
    println!(
        "environment written to {}; in another terminal: make watch, then make invoke-consumer",
        args.env_file.display()
    );
    println!(
        "resq commands: export $(cat {}) and run e.g. resq status",
        args.env_file.display()
    );
    println!("Ctrl-C stops the emulator");
    let _ = tokio::signal::ctrl_c().await;
    let _ = std::fs::remove_file(&args.env_file);
    drop(moto);
    println!("stopped");
    Ok(())
}
