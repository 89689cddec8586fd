//! resq's operator tool: send orders, show queue and alarm state, peek and replay the DLQ,
//! list, show and restore the archive. Works against AWS or a local emulator.
#![deny(clippy::all)]
#![warn(missing_docs)]

pub mod archive;
pub mod chaos;
pub mod context;
pub mod demo;
pub mod dlq;
pub mod emf;
pub mod emulator;
pub mod http;
pub mod local;
pub mod localstack;
pub mod orders;
pub mod soak;
pub mod status;

/// A command failed; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad or missing input.
    #[error("{0}")]
    Usage(String),
    /// An AWS call failed.
    #[error("{what}: {source}")]
    Aws {
        /// What was being done.
        what: String,
        /// The SDK error chain.
        source: resq::sqs::AwsError,
    },
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
}
