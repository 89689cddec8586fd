//! resq: the shared pieces of the consumer and the redriver.
//!
//! The message attribute contract, the archive envelope and its S3 writer, full-jitter
//! backoff, typed configuration, telemetry and CloudWatch EMF metrics. Decisions here are
//! plain functions over values; AWS calls sit behind the small [`store::ObjectStore`] port.
#![warn(missing_docs)]

pub mod archive;
pub mod attributes;
pub mod aws;
pub mod backoff;
pub mod concurrency;
pub mod config;
pub mod correlation;
pub mod fifo;
pub mod iam;
pub mod keep;
pub mod lambda;
pub mod metrics;
pub mod reason;
pub mod select;
pub mod settle;
pub mod source;
pub mod sqs;
pub mod sqs_event;
pub mod store;
pub mod telemetry;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
