//! The resq redriver: a scheduled Lambda that replays the DLQ into the main queue at a bounded
//! rate, selectively, and archives what is too old or has looped too often. Each replay counts
//! in `x-redrive-count`; permanent failures wait for a human; a run pauses while an alarm of
//! `PAUSE_ON_ALARMS` is in `ALARM`; a DLQ message is deleted only once its copy or archive is
//! confirmed. resq's SAM template deploys the `redriver` binary with its schedule; invoked by
//! hand it takes `{"dryRun", "maxMessages", "ratePerSecond", "reason", "olderThanSeconds", "group"}`
//! ([`request::RunRequest`]).
//!
//! [`Redriver`] is the engine over its ports (SQS, the archive store, the alarms). Here it runs
//! against resq's in-memory doubles (crate `resq-testing`): one dead letter is
//! replayed into the main queue, its redrive count raised to 1.
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! use resq::attributes::X_REDRIVE_COUNT;
//! use resq::config::Vars;
//! use resq_redriver::config::RedriverConfig;
//! use resq::sqs::ReceivedMessage;
//! use resq_testing::{MemorySqs, MemoryStore};
//! use resq_redriver::Redriver;
//! use resq_redriver::ports::{AlarmState, Alarms, PortError};
//! use resq_redriver::request::RunRequest;
//!
//! /// No alarm to pause on (`PAUSE_ON_ALARMS` is empty).
//! struct NoAlarms;
//!
//! impl Alarms for NoAlarms {
//!     async fn states(&self, _names: &[String]) -> Result<Vec<AlarmState>, PortError> {
//!         Ok(Vec::new())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let queue = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";
//! let dlq = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq";
//! let env = [("MAIN_QUEUE_URL", queue), ("DLQ_URL", dlq), ("ARCHIVE_BUCKET", "archive")];
//! let config = RedriverConfig::from_vars(&Vars(|name: &str| {
//!     env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
//! }))?;
//!
//! // a dead letter, sent a minute ago (well within ARCHIVE_AFTER_SECONDS)
//! let sqs = MemorySqs::default();
//! let sent = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() - 60_000;
//! sqs.push(dlq, ReceivedMessage {
//!     message_id: "m-1".into(),
//!     receipt_handle: String::new(),
//!     body: r#"{"orderId": "o-1"}"#.into(),
//!     attributes: [("SentTimestamp".to_owned(), sent.to_string())].into(),
//!     message_attributes: Default::default(),
//!     dropped_attributes: Vec::new(),
//! });
//!
//! // a manual invocation's payload, as the function reads it
//! let request = RunRequest::from_event(serde_json::json!({"maxMessages": 10}), &config)?;
//! let redriver = Redriver::new(&sqs, MemoryStore::default(), NoAlarms, config)
//!     .with_receive_wait(0);
//! let summary = redriver.run(&request, Instant::now() + Duration::from_secs(30)).await;
//!
//! assert_eq!((summary.received, summary.redriven), (1, 1));
//! let replayed = sqs.sent(queue);
//! assert_eq!(replayed[0].attributes[X_REDRIVE_COUNT].string_value.as_deref(), Some("1"));
//! assert!(sqs.is_empty(dlq), "deleted once its copy was confirmed");
//! # Ok(())
//! # }
//! ```
//!
//! A run is a state machine over values ([`run::Run`]: handed what arrived and the time, it
//! says what to do next; no I/O, no clock) driven by a thin shell ([`engine`]): receive →
//! classify ([`classify`]) → plan ([`plan`]) → settle (resq's executor, paced) → summary
//! ([`summary`]); docs/design.md, "Redriver", maps each rule to its code.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod breaker;
pub mod classify;
pub mod config;
pub mod consumer_breaker;
pub mod engine;
pub mod fair;
#[cfg(test)]
mod fixtures;
pub mod plan;
pub mod ports;
pub mod ratelimit;
pub mod request;
pub mod run;
pub mod summary;
pub mod sweep;

pub use engine::Redriver;
pub use summary::{StopReason, Summary};

/// What Lambda itself does with the redriver's role: write its logs, and send the record of a
/// failed run to its on-failure destination.
pub const LAMBDA_PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("logs:CreateLogStream", "RedriverLogGroup:*"),
    resq::iam::Permission::new("logs:PutLogEvents", "RedriverLogGroup:*"),
    resq::iam::Permission::new("sqs:SendMessage", "RedriverFailureQueue"),
];

/// Everything the redriver's role must allow: what Lambda does for it and what its AWS calls
/// need (infra/template.yaml grants exactly these).
pub fn permissions() -> Vec<resq::iam::Permission> {
    resq::iam::all(&[
        LAMBDA_PERMISSIONS,
        engine::PERMISSIONS,
        ports::ALARM_PERMISSIONS,
        resq::archive::PERMISSIONS,
        resq::keep::PERMISSIONS,
        resq::state::PERMISSIONS,
        resq::mapping::PERMISSIONS,
        resq::payload::PERMISSIONS,
    ])
}
