//! resq's operator tool: send orders, show queue and alarm state, peek and replay the DLQ,
//! list, show and restore the archive. Works against AWS, or a local emulator through
//! `--endpoint-url`; the local pipeline itself lives in the `local` crate (`resq-local`).
#![deny(clippy::all)]
#![warn(missing_docs)]

pub mod archive;
pub mod context;
pub mod dlq;
pub mod errors;
pub mod orders;
pub mod render;
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

/// A command failed; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input: a value the user typed, a file they named. Exit status 2.
    #[error("{0}")]
    Usage(String),
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
    /// An AWS call failed. Exit status 1.
    #[error("{what}: {source}")]
    Aws {
        /// What was being done.
        what: String,
        /// The SDK error chain.
        source: resq::sqs::AwsError,
    },
    /// The command ran, and what it did is a failure (orders not accepted, messages not
    /// moved, an object that is not an archive entry). Exit status 1.
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// Wraps an SDK error, naming the operation and, for connection failures, the endpoint.
    pub fn aws<E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static>(
        what: impl Into<String>,
        err: E,
    ) -> Self {
        Self::Aws {
            what: what.into(),
            source: resq::sqs::AwsError::from_sdk(err),
        }
    }

    /// The process's exit status for this error: 2 for what the user typed or left out (as
    /// for a flag the parser rejects), 1 for what happened when the command ran.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::Missing { .. } => 2,
            Self::Aws { .. } | Self::Failed(_) => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_problems_exit_2_and_run_problems_exit_1() {
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        let missing = CliError::Missing {
            flag: "--bucket",
            var: "ARCHIVE_BUCKET",
            hint: "the stack output ArchiveBucketName has it",
        };
        assert_eq!(missing.exit_code(), 2);
        assert_eq!(
            missing.to_string(),
            "--bucket (or ARCHIVE_BUCKET) is required: the stack output ArchiveBucketName has it"
        );
        let aws = CliError::Aws {
            what: "reading q".into(),
            source: resq::sqs::AwsError::service("AccessDenied", "no"),
        };
        assert_eq!(aws.exit_code(), 1);
        assert_eq!(aws.to_string(), "reading q: no");
        assert_eq!(
            CliError::Failed("2 orders were not accepted".into()).exit_code(),
            1
        );
    }
}
