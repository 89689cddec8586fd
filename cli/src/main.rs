//! `resq`: the operator tool. Wiring only: parse, build the context, run the command, hand
//! its result to [`resq_ops::render`], map errors to exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgGroup, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use resq_ops::context::{Context, Endpoint};
use resq_ops::deployed::{self, Deployed, FromStack, Typed};
use resq_ops::{
    CliError, archive, canary, check, consumer, dlq, find, orders, render, shadow, stack, status,
};
use resq_redriver::config::PermanentAction;

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
    /// The main queue URL (stack output OrdersQueueUrl).
    #[arg(long, alias = "queue-url", global = true, env = "MAIN_QUEUE_URL")]
    main_queue_url: Option<String>,
    /// The DLQ URL (stack output DeadLetterQueueUrl).
    #[arg(long, global = true, env = "DLQ_URL")]
    dlq_url: Option<String>,
    /// The archive bucket (stack output ArchiveBucketName).
    #[arg(long, alias = "bucket", global = true, env = "ARCHIVE_BUCKET")]
    archive_bucket: Option<String>,
    /// The consumer's event source mapping, its UUID (stack output ConsumerEventSourceMapping):
    /// `resq status` says whether it runs, `resq consumer` pauses and resumes it.
    #[arg(
        long,
        global = true,
        env = "CONSUMER_EVENT_SOURCE_MAPPING",
        value_name = "UUID"
    )]
    mapping: Option<String>,
    /// The deployed stack to operate (CloudFormation): its outputs and parameters give the
    /// queue URLs, the bucket, the alarm prefix, the consumer's event source mapping, the
    /// redrive cap, the TTL, the permanent action and the idempotency window. A flag typed on the command line overrides the
    /// stack's value, which overrides an environment variable.
    #[arg(long, global = true, env = "RESQ_STACK", value_name = "NAME")]
    stack: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send orders to the main queue, from a file or generated.
    Send(SendArgs),
    /// Queue depths, oldest message ages, whether the consumer is running, paused by resq or
    /// paused by hand, and alarm states.
    Status {
        /// Alarms whose names start with this (with --stack: the stack's AlarmPrefix output).
        #[arg(long, default_value = "resq-")]
        alarm_prefix: String,
    },
    /// Where one order is: recorded (and how many writes), in the DLQ (and why), kept,
    /// archived, or nowhere. Exit status 0 found, 3 found nowhere, 4 not seen but part of the
    /// pipeline could not be looked at (or holds messages whose order could not be read). The
    /// main queue is not looked into unless --main-queue: looking receives its messages, and
    /// each receive raises a message's receive count toward maxReceiveCount (a message on its
    /// last receive then goes to the DLQ without a reason); by default its approximate counts
    /// are shown instead.
    Find(FindArgs),
    /// Inspect and redrive the dead-letter queue.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// List, show and restore archive entries.
    #[command(subcommand)]
    Archive(ArchiveCommand),
    /// Pause and resume the consumer's event source mapping by hand (resq's breaker never
    /// undoes an operator's pause).
    #[command(subcommand)]
    Consumer(ConsumerCommand),
    /// Check a parameter set against the template before deploy (`make deploy` runs it).
    #[command(subcommand)]
    Stack(StackCommand),
    /// Check a deployed function's queues and triggers against AWS's wiring guidance (the
    /// rules `resq stack check` applies), read-only, any function, resq's or not: exit 1
    /// naming what is wrong and what to change, 2 when no function has that name.
    Check {
        /// The function (name or ARN).
        #[arg(long, value_name = "NAME")]
        function: String,
    },
}

#[derive(Subcommand, Debug)]
enum ConsumerCommand {
    /// Pause the consumer: record the pause as yours (who, why, since when) in the archive
    /// bucket, then disable its event source mapping. Orders wait in the main queue. resq's
    /// breaker never resumes a pause made by hand (a pause of resq's becomes yours).
    Pause {
        /// Why, in words (recorded, and shown by `resq status`).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Resume the consumer: enable its event source mapping, then record the resume. Refused
    /// (exit 1, naming them) while an alarm of the consumer breaker is in ALARM.
    Resume {
        /// Resume even while the breaker's alarms are in ALARM (or cannot be read); the record
        /// says forced, and names them.
        #[arg(long)]
        force: bool,
        /// The consumer breaker's alarms (the redriver's PAUSE_CONSUMER_ON_ALARMS) [default:
        /// the stack's, else PREFIX-downstream-failing,PREFIX-consumer-errors].
        #[arg(
            long,
            env = "PAUSE_CONSUMER_ON_ALARMS",
            value_name = "NAMES",
            value_delimiter = ','
        )]
        pause_consumer_on_alarms: Vec<String>,
        /// The prefix of the breaker's alarm names (with --stack: the stack's AlarmPrefix
        /// output).
        #[arg(long, default_value = "resq-")]
        alarm_prefix: String,
    },
}

#[derive(Args, Debug)]
struct FindArgs {
    /// The order's id (its body's business id: orderId, or the stack's CorrelationField).
    order_id: String,
    /// Also look into the main queue: receive up to 100 of its messages (--main-queue-limit),
    /// each once, released at once. Each receive raises a message's ApproximateReceiveCount
    /// toward maxReceiveCount: one on its last allowed receive is moved to the DLQ by SQS,
    /// without a reason, on the consumer's next receive.
    #[arg(long)]
    main_queue: bool,
    /// Look into the main queue, receiving at most N of its messages (0: do not look).
    #[arg(long, value_name = "N")]
    main_queue_limit: Option<usize>,
    /// Accepted for scripts written before --main-queue: the main queue is not looked into
    /// unless asked.
    #[arg(long, hide = true, conflicts_with_all = ["main_queue", "main_queue_limit"])]
    no_main_queue: bool,
    /// Receive at most this many DLQ messages.
    #[arg(long, value_name = "N", default_value_t = find::DEFAULT_DLQ_LIMIT, value_parser = clap::value_parser!(usize))]
    dlq_limit: usize,
    /// A string message attribute that names the order, tried before the body's field
    /// (e.g. demo-order-id, which the demo puts on every message, malformed ones too).
    #[arg(long, value_name = "NAME")]
    order_id_attribute: Option<String>,
    /// The body's top-level field holding the order's id [default: the stack's
    /// CorrelationField, else RESQ_CORRELATION_FIELD (or RESQ_CORRELATION_KEY in camelCase),
    /// else orderId].
    #[arg(long, value_name = "NAME")]
    correlation_field: Option<String>,
    /// Read only the archive entries written since this day (YYYY-MM-DD, UTC): the archive is
    /// keyed by message, not by order, so without it every entry is read.
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = day_start)]
    archive_since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only this tenant's copies in the queues: the main queue's and the DLQ's messages of this
    /// MessageGroupId (the order's copies in other groups are counted, not shown). Order
    /// records, kept messages and archive entries are shown whatever their group.
    #[arg(long, value_parser = group)]
    group: Option<String>,
}

#[derive(Subcommand, Debug)]
enum StackCommand {
    /// Refuse a parameter set that could lose, double or stall messages (exit 1, naming the
    /// parameters in conflict): the template's defaults, then samconfig.toml's
    /// parameter_overrides, then --parameter-overrides.
    Check(StackCheckArgs),
}

#[derive(Args, Debug)]
struct StackCheckArgs {
    /// The SAM template.
    #[arg(long, value_name = "PATH", default_value = "infra/template.yaml")]
    template: PathBuf,
    /// The samconfig.toml whose [default.deploy.parameters] parameter_overrides sam deploy uses
    /// [default: infra/samconfig.toml, when it exists].
    #[arg(long, value_name = "PATH")]
    samconfig: Option<PathBuf>,
    /// Values as sam deploy takes them: "K=V K2=V2" (or ParameterKey=K,ParameterValue=V);
    /// over samconfig.toml's.
    #[arg(
        long = "parameter-overrides",
        value_name = "K=V ...",
        allow_hyphen_values = true
    )]
    parameter_overrides: Vec<String>,
    /// Milliseconds one record is assumed to take in the consumer (for the batch against the
    /// deadline).
    #[arg(long = "record-ms", value_name = "N", default_value_t = stack::DEFAULT_RECORD_MS, value_parser = clap::value_parser!(u64).range(1..))]
    record_ms: u64,
    /// When the set passes, write its values given (samconfig.toml's, then
    /// --parameter-overrides) to PATH in sam deploy's --parameter-overrides syntax, so that sam
    /// deploys the very set checked (sam deploy's own --parameter-overrides replace
    /// samconfig.toml's instead of adding to them).
    #[arg(long = "write-overrides", value_name = "PATH")]
    write_overrides: Option<PathBuf>,
    /// Start from the deployed stack's parameters (samconfig.toml's stack_name; `make deploy`
    /// passes it): `sam deploy` keeps a deployed value it is not given, so the set deployed is
    /// the stack's values with samconfig.toml's and --parameter-overrides over them. Needs AWS
    /// credentials; a stack that does not exist yet starts from the template's defaults.
    #[arg(long)]
    deployed: bool,
    /// The stack to read with --deployed (instead of samconfig.toml's stack_name).
    #[arg(long = "stack-name", value_name = "NAME", requires = "deployed")]
    stack_name: Option<String>,
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
    #[arg(long, default_value_t = 0.0, value_parser = resq_ops::orders::percent)]
    malformed_pct: f64,
    /// Percentage of generated orders that are invalid.
    #[arg(long, default_value_t = 0.0, value_parser = resq_ops::orders::percent)]
    invalid_pct: f64,
    /// Prefix of generated order ids.
    #[arg(long, default_value = "ORD-")]
    prefix: String,
}

#[derive(Subcommand, Debug)]
enum DlqCommand {
    /// Show DLQ messages without removing them, and count those that match by failure reason
    /// and by MessageGroupId (a tenant), the largest first.
    Peek(PeekArgs),
    /// Redrive DLQ messages into the main queue through the redriver's rules.
    #[command(alias = "replay")]
    Redrive(RedriveArgs),
}

#[derive(Args, Debug)]
struct PeekArgs {
    /// Only this failure reason (x-failure-reason: MALFORMED_JSON, VALIDATION_FAILED, …).
    #[arg(long = "failure-reason", alias = "reason")]
    failure_reason: Option<String>,
    /// Only messages at least this many seconds old.
    #[arg(long = "older-than-seconds", alias = "older-than")]
    older_than_seconds: Option<u64>,
    /// Only this tenant: messages of this MessageGroupId (a fair queue's or a FIFO group).
    #[arg(long, value_parser = group)]
    group: Option<String>,
    /// Show at most this many (0: the counts only). The counts by reason and by group are of
    /// the messages that match among those read: the first 1,000 (more when showing --limit
    /// needs more), or the whole DLQ when it holds fewer.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Include the kept messages (permanent failures the redriver hides until their TTL):
    /// makes them visible first (with --failure-reason, those of that reason only).
    #[arg(long)]
    kept: bool,
}

#[derive(Args, Debug)]
struct RedriveArgs {
    /// Classify and report; change nothing. Run this first.
    #[arg(long)]
    dry_run: bool,
    /// Only this failure reason (redrives the permanent failures of that reason after a fix).
    #[arg(long = "failure-reason", alias = "reason")]
    failure_reason: Option<String>,
    /// Only messages at least this many seconds old.
    #[arg(long = "older-than-seconds", alias = "older-than")]
    older_than_seconds: Option<u64>,
    /// Only this tenant: messages of this MessageGroupId (a fair queue's or a FIFO group).
    #[arg(long, value_parser = group)]
    group: Option<String>,
    /// Replay anyway while an alarm of the breakers (the redriver's PAUSE_ON_ALARMS and the
    /// consumer breaker's) is in ALARM, or while they cannot be read.
    #[arg(long)]
    force: bool,
    /// The alarms a replay waits for [default: the stack's PAUSE_ON_ALARMS and
    /// PAUSE_CONSUMER_ON_ALARMS, else resq-replays-failing, resq-consumer-errors,
    /// resq-dead-letters-unexplained, resq-downstream-failing].
    #[arg(
        long,
        env = "PAUSE_ON_ALARMS",
        value_name = "NAMES",
        value_delimiter = ','
    )]
    pause_on_alarms: Vec<String>,
    /// Kept messages hidden in the DLQ at most, earlier runs' included (the stack's
    /// KEPT_IN_FLIGHT_MAX) [default: the stack's KeptInFlightMax, else 50000].
    #[arg(long, env = "KEPT_IN_FLIGHT_MAX", value_name = "N")]
    kept_in_flight_max: Option<u64>,
    /// Replay at most this many messages (past them the run reads on for 30 s, each message
    /// it reads hidden a minute, to archive what is due).
    #[arg(long = "max-messages", alias = "max", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    max_messages: u32,
    /// Redriven messages per second.
    #[arg(long = "rate-per-second", alias = "rate", default_value_t = resq_redriver::config::DEFAULT_RATE_PER_SECOND, value_parser = rate)]
    rate_per_second: f64,
    /// The redrive cap (MAX_REDRIVE_ATTEMPTS).
    #[arg(long = "max-redrive-attempts", alias = "cap", env = "MAX_REDRIVE_ATTEMPTS", default_value_t = resq::config::DEFAULT_MAX_REDRIVE_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..))]
    max_redrive_attempts: u32,
    /// The TTL (ARCHIVE_AFTER_SECONDS), as the stack's redriver has it.
    #[arg(long = "archive-after-seconds", alias = "archive-after", env = "ARCHIVE_AFTER_SECONDS", default_value_t = resq_redriver::config::DEFAULT_ARCHIVE_AFTER_SECONDS, value_parser = clap::value_parser!(u64).range(60..=resq_redriver::config::MAX_ARCHIVE_AFTER_SECONDS))]
    archive_after_seconds: u64,
    /// What to do with permanent failures: keep them in the DLQ, or archive them.
    #[arg(long = "permanent-action", value_name = "keep|archive", default_value_t = PermanentAction::default())]
    permanent_action: PermanentAction,
    /// The old spelling of --permanent-action archive.
    #[arg(
        long = "archive-permanent",
        hide = true,
        conflicts_with = "permanent_action"
    )]
    archive_permanent: bool,
    /// Shadow replay: copy the selected messages to this staging queue, as a replay would send
    /// them, instead of the main queue. Needs --keep-source.
    #[arg(long, value_name = "QUEUE_URL")]
    to: Option<String>,
    /// With --to: leave the DLQ as it is (nothing deleted, every message released, kept ones
    /// hidden again).
    #[arg(long)]
    keep_source: bool,
    /// Canary replay: replay this many first, wait for their outcome, and go on with the rest
    /// only at --min-success. Success is the reference handler's order record
    /// (orders/{orderId}.json): a team's own message type (ReferenceConsumer=false) cannot be
    /// seen to succeed, and the canary stops. With --failure-reason, the kept messages of that
    /// reason it does not replay are left visible until the next scheduled redriver run
    /// (keptLeftVisible).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    canary: Option<u32>,
    /// With --canary: the percentage of canaries that must succeed (default 100).
    #[arg(long, value_name = "P", value_parser = resq_ops::orders::percent)]
    min_success: Option<f64>,
    /// With --canary: wait at most this long for the canaries' outcome; one still undecided
    /// then did not succeed.
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    canary_timeout_seconds: u64,
}

#[derive(Subcommand, Debug)]
enum ArchiveCommand {
    /// List archive keys.
    Ls {
        /// Only this archive reason (REDRIVE_CAP, TTL_EXPIRED, …).
        #[arg(long = "archive-reason", alias = "reason", value_parser = archive_reason)]
        archive_reason: Option<String>,
        /// Only this day (YYYY-MM-DD).
        #[arg(long, value_parser = day)]
        date: Option<String>,
    },
    /// Print one archive entry.
    Show {
        /// Its key.
        key: String,
    },
    /// Send archived messages back to the main queue (redrive count reset).
    Restore(RestoreArgs),
}

#[derive(Args, Debug)]
struct RestoreArgs {
    /// Their keys.
    #[arg(required = true)]
    keys: Vec<String>,
    /// Check the entries; send nothing.
    #[arg(long)]
    dry_run: bool,
    /// The consumer's idempotency window in seconds (its IDEMPOTENCY_WINDOW_SECONDS, the
    /// order records' lifetime): an entry first sent longer ago is refused, since its
    /// order could run again.
    #[arg(long, env = "IDEMPOTENCY_WINDOW_SECONDS", default_value_t = resq_consumer::config::DEFAULT_IDEMPOTENCY_WINDOW_SECONDS)]
    idempotency_window_seconds: u64,
    /// The redriver's TTL in seconds (its ARCHIVE_AFTER_SECONDS): with the main queue's
    /// retention, how long a restored copy may still run.
    #[arg(long, env = "ARCHIVE_AFTER_SECONDS", default_value_t = resq_redriver::config::DEFAULT_ARCHIVE_AFTER_SECONDS)]
    archive_after_seconds: u64,
    /// Restore even past the idempotency window.
    #[arg(long)]
    force: bool,
    /// Restore an entry an earlier restore sent (on purpose: its order runs again), or whose
    /// restore claimed it over 5 minutes ago and never recorded its send (check the main queue
    /// first: `resq find ORDER_ID`).
    #[arg(long)]
    again: bool,
    /// Repair the message first: a JSON merge patch (RFC 7396) applied to its body; the
    /// patch, who and when are recorded in the entry (one key only).
    #[arg(long, value_name = "FILE")]
    patch: Option<PathBuf>,
}

fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= resq_redriver::config::MAX_RATE_PER_SECOND => Ok(r),
        _ => Err(format!(
            "\"{s}\" is not a rate above 0 and at most {}",
            resq_redriver::config::MAX_RATE_PER_SECOND
        )),
    }
}

/// A `MessageGroupId` as SQS takes one: 1 to 128 characters.
fn group(s: &str) -> Result<String, String> {
    match s.chars().count() {
        1..=resq::sqs::MAX_ID_LEN => Ok(s.to_owned()),
        _ => Err(format!(
            "a message group id is 1 to {} characters",
            resq::sqs::MAX_ID_LEN
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

fn date(s: &str) -> Result<chrono::NaiveDate, String> {
    chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
        .map_err(|_| format!("\"{s}\" is not a day written YYYY-MM-DD"))
}

fn day(s: &str) -> Result<String, String> {
    date(s).map(|d| d.format("%Y-%m-%d").to_string())
}

fn day_start(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    date(s).map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc())
}

#[tokio::main]
async fn main() -> ExitCode {
    // `resq dlq peek | head`: a closed pipe ends the output quietly, as for any Unix tool,
    // instead of a panic on the next print
    // SAFETY: restores the default disposition of one signal; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // the functions' own warnings (failed records, retries) on stderr; RUST_LOG to see more
    resq_ops::init_stderr_tracing();
    let endpoint_url = cli.endpoint_url.clone();
    match run(cli, typed_flags(&matches)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprint!("{}", render::error(&e, endpoint_url.as_deref()));
            ExitCode::from(e.exit_code())
        }
    }
}

/// Which of the flags the precedence of a setting turns on were typed on the command line.
fn typed_flags(matches: &ArgMatches) -> Typed {
    let typed = |id: &str| typed(matches, id);
    Typed {
        stack: typed("stack"),
        main_queue_url: typed("main_queue_url"),
        dlq_url: typed("dlq_url"),
        archive_bucket: typed("archive_bucket"),
        alarm_prefix: typed("alarm_prefix"),
        max_redrive_attempts: typed("max_redrive_attempts"),
        archive_after_seconds: typed("archive_after_seconds"),
        permanent_action: typed("permanent_action"),
        idempotency_window_seconds: typed("idempotency_window_seconds"),
        mapping: typed("mapping"),
        pause_consumer_on_alarms: typed("pause_consumer_on_alarms"),
        kept_in_flight_max: typed("kept_in_flight_max"),
        pause_on_alarms: typed("pause_on_alarms"),
    }
}

/// Whether the argument `id` was typed on the command line (not taken from its environment
/// variable or its default), at any level of subcommands.
fn typed(matches: &ArgMatches, id: &str) -> bool {
    let here = matches.ids().any(|i| i.as_str() == id)
        && matches.value_source(id) == Some(ValueSource::CommandLine);
    here || matches.subcommand().is_some_and(|(_, sub)| typed(sub, id))
}

/// Resolves where the command acts (the stack's values over the flags not typed, the
/// context) and runs it.
async fn run(cli: Cli, typed: Typed) -> Result<(), CliError> {
    let endpoint = Endpoint {
        endpoint_url: cli.endpoint_url,
        region: cli.region,
    };
    // the one command that needs no AWS configuration (nor a region) unless --deployed
    let command = match cli.command {
        Command::Stack(StackCommand::Check(args)) => {
            return stack_check(args, &endpoint, cli.stack.filter(|_| typed.stack)).await;
        }
        other => other,
    };
    let config = endpoint.regional_config().await?;
    let deployed = match &cli.stack {
        Some(name) => {
            let cloudformation = aws_sdk_cloudformation::Client::new(&config);
            Some(deployed::read(&cloudformation, name).await?)
        }
        None => None,
    };
    let from_stack = FromStack::new(deployed.as_ref(), typed);
    let ctx = Context::new(
        &endpoint,
        from_stack.main_queue_url.clone().or(cli.main_queue_url),
        from_stack.dlq_url.clone().or(cli.dlq_url),
        from_stack.archive_bucket.clone().or(cli.archive_bucket),
    )
    .await?
    .from_stack(deployed.as_ref().map(|d| d.name.clone()))
    .with_mapping(from_stack.mapping.clone().or(cli.mapping));
    let json = cli.json;
    match command {
        Command::Send(args) => send(&ctx, args, json).await,
        Command::Status { alarm_prefix } => {
            let alarm_prefix = from_stack.alarm_prefix.unwrap_or(alarm_prefix);
            status(&ctx, &alarm_prefix, json).await
        }
        Command::Consumer(command) => {
            let stack = (&from_stack, typed);
            consumer(&ctx, &config, command, deployed.as_ref(), stack, json).await
        }
        Command::Find(args) => find(&ctx, args, deployed.as_ref(), json).await,
        Command::Dlq(DlqCommand::Peek(args)) => peek(&ctx, args, json).await,
        Command::Dlq(DlqCommand::Redrive(args)) => redrive(&ctx, args, &from_stack, json).await,
        Command::Archive(ArchiveCommand::Ls {
            archive_reason,
            date,
        }) => archive_ls(&ctx, archive_reason, date, json).await,
        Command::Archive(ArchiveCommand::Show { key }) => {
            let envelope = archive::show(&ctx, &key).await?;
            print!("{}", render::archive_entry(&envelope));
            Ok(())
        }
        Command::Archive(ArchiveCommand::Restore(args)) => {
            restore(&ctx, &config, args, &from_stack, json).await
        }
        Command::Check { function } => {
            let found = check::read(&ctx.lambda, &ctx.sqs, &function).await?;
            print!("{}", render::function_check(&found));
            found.failure().map_or(Ok(()), Err)
        }
        Command::Stack(_) => unreachable!("handled before the context is built"),
    }
}

/// `resq stack check`: no AWS, only the files (and the deployed stack's parameters with
/// `--deployed`).
async fn stack_check(
    args: StackCheckArgs,
    endpoint: &Endpoint,
    typed_stack: Option<String>,
) -> Result<(), CliError> {
    let default_samconfig = PathBuf::from("infra/samconfig.toml");
    let samconfig = args
        .samconfig
        .or_else(|| default_samconfig.is_file().then_some(default_samconfig));
    let deployed = if args.deployed {
        // a --stack typed on the command line names it too (not RESQ_STACK: a variable left in
        // the shell must not make `make deploy` check another stack than the one it deploys)
        let stack_name = stack::deployed_stack_name(args.stack_name.or(typed_stack), || {
            std::fs::read_to_string(samconfig.as_deref()?).ok()
        })?;
        let config = endpoint.sdk_config().await;
        let cloudformation = aws_sdk_cloudformation::Client::new(&config);
        stack::deployed_parameters(&cloudformation, &stack_name).await?
    } else {
        Vec::new()
    };
    let input = stack::Input {
        template: args.template,
        samconfig,
        deployed,
        overrides: args.parameter_overrides.join(" "),
        assumptions: stack::Assumptions {
            record_ms: args.record_ms,
        },
    };
    let report = stack::load(&input)?;
    print!("{}", render::stack_check(&report, &input.template));
    if let Some(e) = report.failure() {
        return Err(e);
    }
    let Some(path) = args.write_overrides else {
        return Ok(());
    };
    path.parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&path, report.set.sam_overrides()))
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))
}

/// `resq send`.
async fn send(ctx: &Context, args: SendArgs, json: bool) -> Result<(), CliError> {
    let queue_url = ctx.main_queue()?;
    // clap requires one of --file and --count
    let source = match args.file {
        Some(path) => orders::Source::File(path),
        None => orders::Source::Generated {
            prefix: args.prefix,
            count: args.count.unwrap_or_default() as usize,
            malformed_pct: args.malformed_pct,
            invalid_pct: args.invalid_pct,
        },
    };
    let batch = source.load(&mut rand::rng())?;
    let report = status::send(ctx, &batch, |_| Default::default()).await?;
    print!("{}", render::send(&report, batch.len(), queue_url, json));
    report.failure(batch.len()).map_or(Ok(()), Err)
}

/// `resq status`: printed whole, then failed if the consumer's state could not be told.
async fn status(ctx: &Context, alarm_prefix: &str, json: bool) -> Result<(), CliError> {
    let s = status::status(ctx, alarm_prefix).await?;
    print!("{}", render::status(&s, resq_ops::now_ms(), json));
    s.failure().map_or(Ok(()), Err)
}

/// `resq consumer pause` / `resume`, on the mapping named (a stack whose output names none has
/// no consumer breaker: said so).
async fn consumer(
    ctx: &Context,
    config: &aws_config::SdkConfig,
    command: ConsumerCommand,
    deployed: Option<&Deployed>,
    (from_stack, typed): (&FromStack, Typed),
    json: bool,
) -> Result<(), CliError> {
    if let Some(d) = deployed.filter(|d| ctx.mapping_named().is_none() && d.names_no_mapping()) {
        return Err(CliError::NoConsumerBreaker {
            stack: d.name.clone(),
        });
    }
    // what is missing is said before anyone's identity is asked for
    ctx.mapping()?;
    ctx.archive_bucket()?;
    let who = archive::caller(config).await;
    match command {
        ConsumerCommand::Pause { reason } => {
            let report = consumer::pause_in(ctx, reason, who).await?;
            print!(
                "{}",
                render::consumer_paused(&report, resq_ops::now_ms(), json)
            );
        }
        ConsumerCommand::Resume {
            force,
            pause_consumer_on_alarms,
            alarm_prefix,
        } => {
            let alarms = breaker_alarms(typed, from_stack, pause_consumer_on_alarms, &alarm_prefix);
            let report = consumer::resume_in(ctx, &alarms, force, who).await?;
            print!(
                "{}",
                render::consumer_resumed(&report, resq_ops::now_ms(), json)
            );
            eprint!("{}", render::consumer_resumed_notes(&report));
        }
    }
    Ok(())
}

/// The consumer breaker's alarms `resume` checks: `--pause-consumer-on-alarms` typed, else
/// those under an `--alarm-prefix` typed, else the stack's, else `PAUSE_CONSUMER_ON_ALARMS`
/// (`given` holds the flag's or the variable's), else those under the default prefix.
fn breaker_alarms(
    typed: Typed,
    from_stack: &FromStack,
    given: Vec<String>,
    prefix: &str,
) -> Vec<String> {
    let given: Vec<String> = given
        .iter()
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .collect();
    let under_prefix = || deployed::consumer_breaker_alarms(prefix);
    match (typed.pause_consumer_on_alarms, typed.alarm_prefix) {
        (true, _) if !given.is_empty() => given,
        (_, true) => under_prefix(),
        _ => from_stack
            .pause_consumer_on_alarms
            .clone()
            .or((!given.is_empty()).then_some(given))
            .unwrap_or_else(under_prefix),
    }
}

/// `resq find`: the business id's field by the flag, the stack, then the environment.
async fn find(
    ctx: &Context,
    args: FindArgs,
    deployed: Option<&Deployed>,
    json: bool,
) -> Result<(), CliError> {
    let correlation = deployed::correlation(args.correlation_field.as_deref(), deployed, |var| {
        std::env::var(var).ok()
    })?;
    // --no-main-queue: the default now (clap refuses it beside the other two)
    let _ = args.no_main_queue;
    let options = find::FindOptions {
        main_queue_limit: find::main_queue_limit(args.main_queue, args.main_queue_limit),
        dlq_limit: args.dlq_limit,
        order_id_attribute: args.order_id_attribute,
        correlation,
        archive_since: args.archive_since,
        group: args.group,
    };
    let finding = find::find(ctx, &args.order_id, &options).await?;
    print!("{}", render::find(&finding, resq_ops::now_ms(), json));
    eprint!("{}", render::find_notes(&finding, json));
    finding.failure().map_or(Ok(()), Err)
}

/// `resq dlq peek`.
async fn peek(ctx: &Context, args: PeekArgs, json: bool) -> Result<(), CliError> {
    let filter = dlq::Filter {
        reason: args.failure_reason,
        older_than: args.older_than_seconds.map(Duration::from_secs),
        group: args.group,
        limit: args.limit,
    };
    let report = dlq::peek_report(ctx, &filter, args.kept).await?;
    eprint!("{}", render::peek_notes(&report));
    print!("{}", render::peek(&report, json));
    Ok(())
}

/// `resq dlq redrive`: a replay, a shadow replay or a canary replay, as the flags say.
async fn redrive(
    ctx: &Context,
    args: RedriveArgs,
    from_stack: &FromStack,
    json: bool,
) -> Result<(), CliError> {
    let mode = dlq::mode(&dlq::ModeFlags {
        to: args.to,
        keep_source: args.keep_source,
        canary: args.canary,
        min_success: args.min_success,
        canary_timeout: Duration::from_secs(args.canary_timeout_seconds),
        dry_run: args.dry_run,
    })?;
    let cap = from_stack.max_redrive_attempts;
    let ttl = from_stack.archive_after_seconds;
    let permanent_action = from_stack.permanent_action.unwrap_or(args.permanent_action);
    let kept_in_flight_max = from_stack
        .kept_in_flight_max
        .or(args.kept_in_flight_max)
        .unwrap_or_else(|| {
            eprintln!("{}", render::kept_limit_unknown());
            resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX
        });
    if !matches!(mode, dlq::Mode::Shadow { .. }) {
        // a flag typed, then the stack's, then PAUSE_ON_ALARMS, then the template's names
        let given = (!args.pause_on_alarms.is_empty()).then_some(args.pause_on_alarms);
        let alarms = (from_stack.pause_on_alarms.clone())
            .or(given)
            .unwrap_or_else(|| deployed::replay_breaker_alarms("resq-"));
        let notes = dlq::check_breakers(ctx, &alarms, args.force, args.dry_run).await?;
        notes.iter().for_each(|n| eprintln!("{n}"));
    }
    let options = dlq::RedriveOptions {
        dry_run: args.dry_run,
        failure_reason: args.failure_reason,
        older_than: args.older_than_seconds.map(Duration::from_secs),
        group: args.group,
        max_messages: args.max_messages,
        rate_per_second: args.rate_per_second,
        max_redrive_attempts: cap.unwrap_or(args.max_redrive_attempts),
        archive_after: Duration::from_secs(ttl.unwrap_or(args.archive_after_seconds)),
        permanent_action: dlq::permanent_action(permanent_action, args.archive_permanent),
        kept_in_flight_max,
    };
    match mode {
        dlq::Mode::Replay => {
            let stop = resq_ops::hold::interrupted();
            let done = dlq::run_redrive(ctx, &options, stop).await?;
            print!("{}", render::redrive(&done.summary));
            eprint!("{}", render::redrive_notes(&done, json));
            done.failure().map_or(Ok(()), Err)?;
        }
        dlq::Mode::Shadow { to } => {
            let report = shadow::shadow(ctx, &options, &to).await?;
            print!("{}", render::shadow(&report));
            eprint!("{}", render::shadow_notes(&report, json));
            report.failure().map_or(Ok(()), Err)?;
        }
        dlq::Mode::Canary(how) => {
            let progress = |line| {
                if !json {
                    eprintln!("{line}");
                }
            };
            let report = canary::run(ctx, &options, &how, progress).await?;
            print!("{}", render::canary(&report));
            report.failure().map_or(Ok(()), Err)?;
        }
    }
    Ok(())
}

/// `resq archive ls`.
async fn archive_ls(
    ctx: &Context,
    reason: Option<String>,
    date: Option<String>,
    json: bool,
) -> Result<(), CliError> {
    let keys = archive::list(ctx, reason.as_deref(), date.as_deref()).await?;
    print!("{}", render::archive_keys(&keys, json));
    eprint!("{}", render::archive_keys_notes(&keys, json));
    Ok(())
}

/// `resq archive restore`: each key as it is, or one key patched (`--patch`).
async fn restore(
    ctx: &Context,
    config: &aws_config::SdkConfig,
    args: RestoreArgs,
    from_stack: &FromStack,
    json: bool,
) -> Result<(), CliError> {
    let window = from_stack.idempotency_window_seconds;
    let ttl = from_stack.archive_after_seconds;
    let window = (!args.force).then(|| archive::RestoreWindow {
        window: Duration::from_secs(window.unwrap_or(args.idempotency_window_seconds)),
        ttl: Duration::from_secs(ttl.unwrap_or(args.archive_after_seconds)),
    });
    let Some(path) = &args.patch else {
        let by = archive::caller(config).await;
        for key in &args.keys {
            let id = archive::restore(ctx, key, &by, args.dry_run, window, args.again).await?;
            print!("{}", render::restored(key, id.as_deref(), json));
        }
        return Ok(());
    };
    let [key] = args.keys.as_slice() else {
        return Err(CliError::Usage(format!(
            "--patch repairs one archived message: give one key, not {}",
            args.keys.len()
        )));
    };
    // the patch is read (and must be JSON) before anything is read from AWS
    let patch = archive::read_patch(path)?;
    let (queue_url, bucket) = (ctx.main_queue()?, ctx.archive_bucket()?);
    let by = archive::caller(config).await;
    let request = archive::RestoreRequest {
        key,
        bucket,
        queue_url,
        patch: Some(&patch),
        by: &by,
        dry_run: args.dry_run,
        window,
        again: args.again,
        now: chrono::Utc::now(),
        id: archive::restore_id(),
    };
    let done = archive::restore_entry(&archive::AwsRestore(ctx), &request).await?;
    print!("{}", render::patched(&done, json));
    eprint!("{}", render::patched_notes(&done, json));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed_in(args: &[&str]) -> Typed {
        typed_flags(&Cli::command().get_matches_from(args))
    }

    #[test]
    fn the_flags_typed_are_found_at_any_level() {
        // GIVEN every flag a stack's value stands in for, typed
        let redrive = typed_in(&[
            "resq",
            "--stack",
            "s",
            "--main-queue-url",
            "q",
            "--dlq-url",
            "d",
            "dlq",
            "redrive",
            "--archive-bucket",
            "b",
            "--max-redrive-attempts",
            "3",
            "--archive-after-seconds",
            "3600",
            "--permanent-action",
            "keep",
            "--mapping",
            "u",
            "--kept-in-flight-max",
            "100",
            "--pause-on-alarms",
            "a",
        ]);
        let status = typed_in(&["resq", "status", "--alarm-prefix", "x-"]);
        let resume = typed_in(&[
            "resq",
            "consumer",
            "resume",
            "--pause-consumer-on-alarms",
            "a,b",
            "--alarm-prefix",
            "x-",
        ]);
        let restore = typed_in(&[
            "resq",
            "archive",
            "restore",
            "k",
            "--idempotency-window-seconds",
            "9",
        ]);
        // THEN each is seen typed (its id is the argument's)
        assert_eq!(
            redrive,
            Typed {
                alarm_prefix: false,
                idempotency_window_seconds: false,
                pause_consumer_on_alarms: false,
                ..typed_everything()
            }
        );
        assert!(status.alarm_prefix && restore.idempotency_window_seconds);
        assert!(resume.pause_consumer_on_alarms && resume.alarm_prefix && !resume.mapping);
        // AND one left to its default or environment variable is not
        assert_eq!(typed_in(&["resq", "dlq", "redrive"]), Typed::default());
    }

    #[test]
    fn the_breakers_alarms_are_the_flags_then_the_stacks_then_the_variables_then_the_prefixs() {
        let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let stack = FromStack {
            pause_consumer_on_alarms: Some(names(&[
                "stk-downstream-failing",
                "stk-consumer-errors",
            ])),
            ..FromStack::default()
        };
        let typed = |list: bool, prefix: bool| Typed {
            pause_consumer_on_alarms: list,
            alarm_prefix: prefix,
            ..Typed::default()
        };
        // GIVEN nothing: those under the default prefix
        assert_eq!(
            breaker_alarms(Typed::default(), &FromStack::default(), vec![], "resq-"),
            names(&["resq-downstream-failing", "resq-consumer-errors"])
        );
        // the variable's (the redriver's own PAUSE_CONSUMER_ON_ALARMS), blanks dropped
        assert_eq!(
            breaker_alarms(
                Typed::default(),
                &FromStack::default(),
                names(&[" a ", ""]),
                "resq-"
            ),
            names(&["a"])
        );
        // the stack's over the variable
        assert_eq!(
            breaker_alarms(Typed::default(), &stack, names(&["a"]), "resq-"),
            names(&["stk-downstream-failing", "stk-consumer-errors"])
        );
        // a prefix typed over the stack (FromStack leaves its list out then) and the variable
        assert_eq!(
            breaker_alarms(
                typed(false, true),
                &FromStack::default(),
                names(&["a"]),
                "x-"
            ),
            names(&["x-downstream-failing", "x-consumer-errors"])
        );
        // the list typed over everything
        assert_eq!(
            breaker_alarms(
                typed(true, true),
                &FromStack::default(),
                names(&["b", "c"]),
                "x-"
            ),
            names(&["b", "c"])
        );
    }

    #[test]
    fn group_narrows_peek_redrive_and_find_to_one_tenant() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|cli| cli.command);
        // GIVEN --group on each command that takes it THEN each carries it
        let group = |args: &[&str]| match parse(args).unwrap() {
            Command::Dlq(DlqCommand::Peek(a)) => a.group,
            Command::Dlq(DlqCommand::Redrive(a)) => a.group,
            Command::Find(a) => a.group,
            other => panic!("{other:?}"),
        };
        let tenant = Some("tenant-b".to_owned());
        assert_eq!(
            group(&["resq", "dlq", "peek", "--group", "tenant-b"]),
            tenant
        );
        assert_eq!(
            group(&["resq", "dlq", "redrive", "--dry-run", "--group", "tenant-b"]),
            tenant
        );
        assert_eq!(
            group(&[
                "resq", "dlq", "redrive", "--group", "tenant-b", "--canary", "2"
            ]),
            tenant
        );
        assert_eq!(
            group(&[
                "resq",
                "dlq",
                "redrive",
                "--group",
                "tenant-b",
                "--to",
                "https://q/staging",
                "--keep-source"
            ]),
            tenant
        );
        assert_eq!(
            group(&["resq", "find", "ORD-1", "--group", "tenant-b"]),
            tenant
        );
        assert_eq!(group(&["resq", "find", "ORD-1"]), None);
        // AND a group SQS would not take is refused, saying why
        let too_long = "g".repeat(resq::sqs::MAX_ID_LEN + 1);
        for bad in ["", too_long.as_str()] {
            let e = parse(&["resq", "find", "ORD-1", "--group", bad]).unwrap_err();
            assert!(
                e.to_string()
                    .contains("a message group id is 1 to 128 characters"),
                "{e}"
            );
        }
    }

    fn typed_everything() -> Typed {
        Typed {
            stack: true,
            main_queue_url: true,
            dlq_url: true,
            archive_bucket: true,
            alarm_prefix: true,
            max_redrive_attempts: true,
            archive_after_seconds: true,
            permanent_action: true,
            idempotency_window_seconds: true,
            mapping: true,
            pause_consumer_on_alarms: true,
            kept_in_flight_max: true,
            pause_on_alarms: true,
        }
    }
}
