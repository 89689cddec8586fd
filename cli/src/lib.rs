//! resq's operator tool, the `resq` binary (`cargo install resq-ops`): send orders, show queue
//! and alarm state, peek and redrive the DLQ, list, show and restore the archive, pause and
//! resume the consumer by hand, check a parameter set before deploy, check any function's queue
//! and trigger against AWS's wiring guidance. Works against AWS, or a local emulator through
//! `--endpoint-url`; the local pipeline itself lives in the `local` crate (`resq-local`).
//!
//! The library is what the binary runs, one module per command, for tools and tests that drive
//! a resq stack. What `resq send --generate` sends, for instance, is an order resq's consumer
//! accepts:
//!
//! ```
//! use rand::SeedableRng;
//!
//! let mut rng = rand::rngs::StdRng::seed_from_u64(7);
//! let body = resq_ops::orders::valid("o-1", &mut rng);
//! let order = resq_consumer::order::parse_order(Some(&body)).expect("a valid order");
//! assert_eq!(order.order_id.as_str(), "o-1");
//! ```
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod archive;
pub mod canary;
pub mod check;
pub mod consumer;
pub mod context;
pub mod deployed;
pub mod dlq;
pub mod errors;
pub mod find;
pub mod hold;
pub mod locate;
pub mod orders;
pub mod render;
pub mod shadow;
pub mod stack;
pub mod status;

/// The tools' own logs (and the in-process functions' warnings) on stderr, at ERROR unless
/// `RUST_LOG` says otherwise.
pub fn init_stderr_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// This machine's clock in epoch milliseconds, as the times SQS and S3 write are compared.
pub fn now_ms() -> u64 {
    chrono::Utc::now().timestamp_millis().max(0) as u64
}

/// A command failed; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A name the command needs was not given (a queue URL, the bucket, the region). Exit
    /// status 2.
    #[error("{flag} (or {var}) is required: {hint}")]
    Missing {
        /// The flag that gives it.
        flag: &'static str,
        /// The environment variable that gives it.
        var: &'static str,
        /// Where to find the value.
        hint: &'static str,
    },
    /// The orders file named cannot be read (missing, a directory, not UTF-8 text). Exit
    /// status 2.
    #[error("cannot read {}: {source}", path.display())]
    UnreadableFile {
        /// The file as named.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The orders file named holds no orders: nothing to send. Exit status 2.
    #[error("{} holds no orders", path.display())]
    NoOrders {
        /// The file as named.
        path: std::path::PathBuf,
    },
    /// Bad input described in words: resq-local's own checks (its options, the tools and
    /// binaries it starts). Exit status 2.
    #[error("{0}")]
    Usage(String),
    /// An AWS call failed. Exit status 1.
    #[error("{what}: {source}")]
    Aws {
        /// What was being done.
        what: String,
        /// The SDK error chain.
        source: resq::error::AwsError,
    },
    /// An object in the bucket could not be read (the call failed, or its body broke off);
    /// the error names the object. Exit status 1.
    #[error("reading {0}")]
    Read(resq::error::AwsError),
    /// The object at a key is not an archive entry (not JSON, or not an envelope). Exit
    /// status 1.
    #[error(
        "s3://{bucket}/{key} is not an archive entry ({reason}): `resq archive ls` lists the entries"
    )]
    NotAnArchiveEntry {
        /// The bucket.
        bucket: String,
        /// The object's key.
        key: String,
        /// Why it does not parse as an envelope.
        reason: String,
    },
    /// A request could not be built (a bug: resq always sets the fields the SDK requires).
    /// Exit status 1.
    #[error("could not build {what}: {message}")]
    Request {
        /// Which request.
        what: &'static str,
        /// What the SDK said.
        message: String,
    },
    /// SQS did not accept some of the orders sent (each listed with its reason). Exit
    /// status 1.
    #[error("{failed} of {total} orders were not accepted (listed above)")]
    NotAccepted {
        /// Orders not accepted.
        failed: usize,
        /// Orders sent.
        total: usize,
    },
    /// A redrive could not move some messages (a send or an archive write failed); they stay
    /// in the DLQ. Exit status 1.
    #[error(
        "{count} messages were not moved (a send or an archive write failed); they stay in the DLQ and a later redrive retries them"
    )]
    NotMoved {
        /// Messages not moved.
        count: u64,
    },
    /// An archived message is older than the consumer's idempotency window: restoring it could
    /// run its effect a second time (its order record may have expired). Exit status 1.
    #[error(
        "not restored: {key} {why}; restored, it could run again an order whose record has expired (a doubled order); `--force` restores it anyway"
    )]
    PastIdempotencyWindow {
        /// The archive key.
        key: String,
        /// How old it is against the window, in words.
        why: String,
    },
    /// Another restore claimed the archive entry (sent it, or is sending it): restored again,
    /// its order could run twice. Exit status 1.
    #[error("not restored: {key} {why}")]
    Claimed {
        /// The archive key.
        key: String,
        /// Who restored it, when, and what to do.
        why: String,
    },
    /// Receiving from the DLQ failed part-way through a redrive. Exit status 1.
    #[error(
        "receiving from the DLQ failed part-way (the error is logged above); what was not moved stays in the DLQ"
    )]
    ReceiveStopped,
    /// `resq find`: the order was seen nowhere, and the look covered everything. Exit status 3.
    #[error("{order_id} was found nowhere")]
    Nowhere {
        /// The order.
        order_id: String,
    },
    /// `resq find`: the order was not seen, but part of the pipeline could not be looked at
    /// (messages in flight, a queue past its limit or skipped). Exit status 4.
    #[error("{}", not_seen(order_id, *unseen))]
    NotSeen {
        /// The order.
        order_id: String,
        /// How many parts could not be looked at.
        unseen: usize,
    },
    /// A canary replay's canaries did not succeed often enough: the rest of the selection was
    /// not replayed. Exit status 5.
    #[error(
        "the canary stopped the replay: {succeeded} of {total} canaries succeeded, below --min-success {min_success} %; the rest of the selection stays in the DLQ, untouched (fix, then replay again)"
    )]
    CanaryStopped {
        /// Canaries that succeeded.
        succeeded: usize,
        /// Canaries replayed.
        total: usize,
        /// The percentage asked for.
        min_success: f64,
    },
    /// A shadow replay could not copy some messages to the staging queue. Exit status 1.
    #[error(
        "{count} messages were not copied to the staging queue (listed above); the DLQ is unchanged: run the shadow replay again"
    )]
    NotCopied {
        /// Messages not copied.
        count: u64,
    },
    /// An archive entry cannot be patched (its body is not JSON, or the patched message
    /// would not fit in SQS). Exit status 1.
    #[error("{key} cannot be patched: {why}; nothing was sent")]
    NotPatchable {
        /// The archive key.
        key: String,
        /// Why not.
        why: String,
    },
    /// `--stack` names no stack CloudFormation knows (in this region and account). Exit
    /// status 2.
    #[error(
        "no stack named {name}: check --stack (or RESQ_STACK) and the region (--region or AWS_REGION); `aws cloudformation list-stacks` lists the stacks"
    )]
    NoSuchStack {
        /// The name given.
        name: String,
    },
    /// The stack named by `--stack` has no output (or parameter) for a value a command needs:
    /// it was deployed from an older template. Exit status 2.
    #[error(
        "the stack {stack} has no output {output} (deployed from an older template?): pass {flag}, or deploy the current template"
    )]
    MissingFromStack {
        /// The stack.
        stack: String,
        /// The output it lacks.
        output: &'static str,
        /// The flag that gives the value instead.
        flag: &'static str,
    },
    /// Lambda knows no event source mapping of this UUID (in this region and account). Exit
    /// status 1.
    #[error(
        "no event source mapping {mapping} in this region and account: check --mapping (or CONSUMER_EVENT_SOURCE_MAPPING; the stack output ConsumerEventSourceMapping has it) and the region (--region or AWS_REGION); `aws lambda list-event-source-mappings --function-name FUNCTION` lists a function's"
    )]
    NoSuchMapping {
        /// The UUID given.
        mapping: String,
    },
    /// The event source mapping is being created, updated or deleted: Lambda switches it only
    /// once that is over. Exit status 1.
    #[error(
        "the event source mapping {mapping} is {state}: Lambda switches it only once that is over; nothing was changed: try again in a few seconds"
    )]
    MappingBusy {
        /// The mapping.
        mapping: String,
        /// Lambda's word for its state.
        state: String,
    },
    /// `resq consumer resume` refused: an alarm of the consumer breaker is in ALARM. Exit
    /// status 1.
    #[error("{}", in_alarm(alarms))]
    BreakerInAlarm {
        /// The breaker's alarms in ALARM.
        alarms: Vec<String>,
    },
    /// `resq dlq redrive` refused: an alarm of the breakers is in ALARM. Exit status 1.
    #[error(
        "not replayed: the breaker's alarm{} {} in ALARM (replays are failing again, or the consumer or its downstream fails): replayed now, these messages would spend their redrive count and come back, or be archived at the cap. Wait until {} ALARM (`resq status`), or replay anyway with --force",
        plural(alarms.len(), "", "s"),
        format!("{} {}", alarms.join(", "), plural(alarms.len(), "is", "are")),
        plural(alarms.len(), "it leaves", "they leave")
    )]
    ReplayInAlarm {
        /// The breakers' alarms in ALARM.
        alarms: Vec<String>,
    },
    /// A redrive was interrupted (Ctrl-C, SIGTERM): it ended what was under way and released
    /// what it held. Exit status 130.
    #[error(
        "interrupted: the redrive stopped (its summary is above); it released the {released} DLQ messages it held{}",
        match not_released(*left, *receives_cut_off, *back_within_seconds) {
            n if n.is_empty() => n,
            n => format!(", but {n}"),
        }
    )]
    Interrupted {
        /// DLQ messages released.
        released: u64,
        /// DLQ messages it could not release.
        left: usize,
        /// Receives given up before SQS answered (what they took is unknown to the run).
        receives_cut_off: usize,
        /// When the last of those comes back, in seconds from now.
        back_within_seconds: u64,
    },
    /// The stack named by `--stack` has no consumer breaker: its `ConsumerEventSourceMapping`
    /// output is empty. Exit status 2.
    #[error(
        "the stack {stack} has no consumer breaker (its output ConsumerEventSourceMapping is empty: a consumer of your own, deployed without the ConsumerEventSourceMapping parameter): pass --mapping UUID"
    )]
    NoConsumerBreaker {
        /// The stack.
        stack: String,
    },
    /// `resq stack check` refused the parameter set: the conflicts, or the values
    /// CloudFormation itself would refuse, are listed above. Exit status 1.
    #[error("{}", refused(parameters, *by_cloudformation))]
    Refused {
        /// The parameters in conflict, each once.
        parameters: Vec<String>,
        /// CloudFormation would refuse some value itself (the rules were not evaluated).
        by_cloudformation: bool,
    },
    /// `resq check --function`: the function's queue and trigger go against AWS's guidance
    /// (the rules broken are listed above). Exit status 1.
    #[error(
        "the wiring of {function} goes against AWS's guidance: {} (above); change them as said and check again",
        settings.join(", ")
    )]
    Miswired {
        /// The function.
        function: String,
        /// The settings in conflict, each once.
        settings: Vec<String>,
    },
    /// `resq check --function`: Lambda knows no function of this name (in this region and
    /// account). Exit status 2.
    #[error(
        "no function named {function} in this region and account: check the name (or ARN) and the region (--region or AWS_REGION); `aws lambda list-functions` lists them"
    )]
    NoSuchFunction {
        /// The name given.
        function: String,
    },
}

/// What an ended redrive could not release, and when it comes back: `left` messages it
/// held, and what receives given up before SQS answered took (up to 10 each); empty if none.
pub(crate) fn not_released(
    left: usize,
    receives_cut_off: usize,
    back_within_seconds: u64,
) -> String {
    let mut parts = Vec::new();
    if left > 0 {
        parts.push(format!("{left} could not be released"));
    }
    if receives_cut_off > 0 {
        parts.push(format!(
            "{receives_cut_off} receive{} given up before SQS answered may have hidden up to {} it never saw",
            plural(receives_cut_off, "", "s"),
            receives_cut_off * resq::sqs::MAX_BATCH
        ));
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!(
            "{}: they come back by themselves within {back_within_seconds} s",
            parts.join(", and ")
        ),
    }
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

fn not_seen(order_id: &str, unseen: usize) -> String {
    format!(
        "{order_id} was not seen, but {unseen} part{} of the pipeline could not be looked at (listed above)",
        if unseen == 1 { "" } else { "s" }
    )
}

fn in_alarm(alarms: &[String]) -> String {
    let (s, is) = if alarms.len() == 1 {
        ("", "is")
    } else {
        ("s", "are")
    };
    format!(
        "not resumed: the consumer breaker's alarm{s} {} {is} in ALARM (its downstream is still failing, or it fails whole invocations): resumed now, the consumer would burn its orders' receives into the DLQ. Wait until {} ALARM, or resume anyway with `resq consumer resume --force` (recorded as forced: resq's breaker then does not pause the consumer again until {} left ALARM once)",
        alarms.join(", "),
        if alarms.len() == 1 {
            "it leaves"
        } else {
            "they leave"
        },
        if alarms.len() == 1 {
            "it has"
        } else {
            "they have"
        },
    )
}

fn refused(parameters: &[String], by_cloudformation: bool) -> String {
    let what = if by_cloudformation {
        "CloudFormation would refuse"
    } else {
        "the parameter set is refused, in conflict:"
    };
    format!(
        "{what} {} (above); change them (`make deploy PARAMS=\"K=V ...\"`, or parameter_overrides in infra/samconfig.toml) and check again",
        parameters.join(", ")
    )
}

impl CliError {
    /// Wraps an SDK error, naming the operation and, for connection failures, the endpoint.
    pub fn aws<E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static>(
        what: impl Into<String>,
        err: E,
    ) -> Self {
        Self::Aws {
            what: what.into(),
            source: resq::error::AwsError::from_sdk(err),
        }
    }

    /// The process's exit status for this error: 2 for what the user typed or left out (as
    /// for a flag the parser rejects), 1 for what happened when the command ran.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Missing { .. }
            | Self::UnreadableFile { .. }
            | Self::NoOrders { .. }
            | Self::Usage(_)
            | Self::NoSuchStack { .. }
            | Self::MissingFromStack { .. }
            | Self::NoConsumerBreaker { .. }
            | Self::NoSuchFunction { .. } => 2,
            Self::Nowhere { .. } => 3,
            Self::NotSeen { .. } => 4,
            Self::CanaryStopped { .. } => 5,
            // as a shell reports a command ended by SIGINT
            Self::Interrupted { .. } => 130,
            Self::Aws { .. }
            | Self::Read(_)
            | Self::NotAnArchiveEntry { .. }
            | Self::Request { .. }
            | Self::NotAccepted { .. }
            | Self::NotMoved { .. }
            | Self::PastIdempotencyWindow { .. }
            | Self::Claimed { .. }
            | Self::ReceiveStopped
            | Self::NotCopied { .. }
            | Self::NotPatchable { .. }
            | Self::NoSuchMapping { .. }
            | Self::MappingBusy { .. }
            | Self::BreakerInAlarm { .. }
            | Self::ReplayInAlarm { .. }
            | Self::Refused { .. }
            | Self::Miswired { .. } => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_problems_exit_2_and_run_problems_exit_1() {
        let missing = CliError::Missing {
            flag: "--archive-bucket",
            var: "ARCHIVE_BUCKET",
            hint: "the stack output ArchiveBucketName has it",
        };
        assert_eq!(missing.exit_code(), 2);
        assert_eq!(
            missing.to_string(),
            "--archive-bucket (or ARCHIVE_BUCKET) is required: the stack output ArchiveBucketName has it"
        );
        let unreadable = CliError::UnreadableFile {
            path: "/nonexistent/orders.json".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(unreadable.exit_code(), 2);
        assert_eq!(
            unreadable.to_string(),
            "cannot read /nonexistent/orders.json: entity not found"
        );
        let empty = CliError::NoOrders {
            path: "orders.json".into(),
        };
        assert_eq!(
            (empty.exit_code(), empty.to_string().as_str()),
            (2, "orders.json holds no orders")
        );
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);

        let aws = CliError::Aws {
            what: "reading q".into(),
            source: resq::error::AwsError::service("AccessDenied", "no"),
        };
        assert_eq!(aws.exit_code(), 1);
        assert_eq!(aws.to_string(), "reading q: no");
        let not_entry = CliError::NotAnArchiveEntry {
            bucket: "b".into(),
            key: "archive/x.json".into(),
            reason: "expected value at line 1 column 1".into(),
        };
        assert_eq!(not_entry.exit_code(), 1);
        assert_eq!(
            not_entry.to_string(),
            "s3://b/archive/x.json is not an archive entry (expected value at line 1 column 1): `resq archive ls` lists the entries"
        );
        let read = CliError::Read(resq::error::AwsError::local("s3://b/k: connection reset"));
        assert_eq!(
            (read.exit_code(), read.to_string().as_str()),
            (1, "reading s3://b/k: connection reset")
        );
        let request = CliError::Request {
            what: "a send batch entry",
            message: "id was not specified".into(),
        };
        assert_eq!(
            (request.exit_code(), request.to_string().as_str()),
            (
                1,
                "could not build a send batch entry: id was not specified"
            )
        );
        let not_accepted = CliError::NotAccepted {
            failed: 2,
            total: 20,
        };
        assert_eq!(not_accepted.exit_code(), 1);
        assert_eq!(
            not_accepted.to_string(),
            "2 of 20 orders were not accepted (listed above)"
        );
        let not_moved = CliError::NotMoved { count: 4 };
        assert_eq!(not_moved.exit_code(), 1);
        assert!(
            not_moved
                .to_string()
                .starts_with("4 messages were not moved (a send or an archive write failed)")
        );
        assert_eq!(CliError::ReceiveStopped.exit_code(), 1);
        let refused = CliError::Refused {
            parameters: vec!["MaxReceiveCount".into(), "OrdersRetentionSeconds".into()],
            by_cloudformation: false,
        };
        assert_eq!(refused.exit_code(), 1);
        assert!(
            refused.to_string().starts_with(
                "the parameter set is refused, in conflict: MaxReceiveCount, OrdersRetentionSeconds (above)"
            ),
            "{refused}"
        );
        assert!(
            CliError::ReceiveStopped
                .to_string()
                .starts_with("receiving from the DLQ failed part-way")
        );
    }
}
