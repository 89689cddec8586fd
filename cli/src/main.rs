//! `resq`: the operator tool. Wiring only: parse, build the context, run, print.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
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
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).args(["file", "count"])))]
struct SendArgs {
    /// Orders from a file: a JSON array, or one document per line.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Generate this many orders.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    count: Option<u32>,
    /// Percentage of generated orders that are not JSON.
    #[arg(long, default_value_t = 0.0, value_parser = resq_cli::orders::percent)]
    malformed_pct: f64,
    /// Percentage of generated orders that are invalid.
    #[arg(long, default_value_t = 0.0, value_parser = resq_cli::orders::percent)]
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
        #[arg(long, value_parser = archive_reason)]
        reason: Option<String>,
        /// Only this day (YYYY-MM-DD).
        #[arg(long, value_parser = day)]
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

fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= resq::config::MAX_RATE_PER_SECOND => Ok(r),
        _ => Err(format!(
            "\"{s}\" is not a rate above 0 and at most {}",
            resq::config::MAX_RATE_PER_SECOND
        )),
    }
}

fn archive_reason(s: &str) -> Result<String, String> {
    match resq::reason::ArchiveReason::from_code(s.trim()) {
        Some(r) => Ok(r.code().to_owned()),
        None => Err(format!(
            "\"{s}\" is not an archive reason; one of {}",
            resq::reason::ArchiveReason::ALL
                .map(|r| r.code())
                .join(", ")
        )),
    }
}

fn day(s: &str) -> Result<String, String> {
    chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
        .map(|d| d.format("%Y-%m-%d").to_string())
        .map_err(|_| format!("\"{s}\" is not a day written YYYY-MM-DD"))
}

#[tokio::main]
async fn main() -> ExitCode {
    // `resq dlq peek | head`: a closed pipe ends the output quietly, as for any Unix tool,
    // instead of a panic on the next print
    // SAFETY: restores the default disposition of one signal; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // the functions' own warnings (failed records, retries) on stderr; RUST_LOG to see more
    resq_cli::init_stderr_tracing();
    let endpoint_url = cli.endpoint_url.clone();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resq: {e}");
            if let Some(problem) = resq_cli::errors::classify(&e) {
                eprintln!(
                    "resq: {}",
                    resq_cli::errors::hint(&problem, endpoint_url.as_deref())
                );
            }
            ExitCode::from(e.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let endpoint = Endpoint {
        endpoint_url: cli.endpoint_url.clone(),
        region: cli.region.clone(),
    };
    let ctx = Context::new(&endpoint, cli.queue_url, cli.dlq_url, cli.bucket).await?;
    let json = cli.json;
    match cli.command {
        Command::Send(args) => {
            let queue_url = ctx.main_queue()?;
            // clap requires one of --file and --count
            let batch = match &args.file {
                Some(path) => orders::from_file(path)?,
                None => orders::generate(
                    &args.prefix,
                    args.count.unwrap_or_default() as usize,
                    args.malformed_pct,
                    args.invalid_pct,
                    &mut rand::rng(),
                ),
            };
            let report = status::send(&ctx, &batch, |_| Default::default()).await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"sent": report.sent, "failed": report.failed})
                );
            } else {
                println!(
                    "sent {} of {} orders to {queue_url}",
                    report.sent,
                    batch.len(),
                );
                for (id, why) in &report.failed {
                    println!("  not sent: {id}: {why}");
                }
            }
            if !report.failed.is_empty() {
                return Err(CliError::Failed(format!(
                    "{} of {} orders were not accepted (listed above)",
                    report.failed.len(),
                    batch.len()
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
                ctx.archive_bucket()?;
            }
            // the DLQ answers (credentials, endpoint, permission) before anything is changed
            dlq::reach(&ctx).await?;
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
                && let Ok((_, hidden)) = dlq::reach(&ctx).await
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
            dlq::ready_to_replay(&ctx).await?;
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
            if let Some(why) = dlq::replay_failure(&summary) {
                return Err(CliError::Failed(why));
            }
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
