//! resq keeps an SQS pipeline on AWS Lambda flowing when messages fail, and loses none of
//! them. Its consumer (crate `resq-consumer`) runs a handler on each record, reports only the
//! failed ones, backs them off, and sends permanent failures to the dead-letter queue with
//! their reason; its redriver (crate `resq-redriver`) replays the DLQ at a bounded rate and
//! archives to S3 what can never succeed. This crate holds what both share:
//!
//! - the message attribute contract ([`attributes`]: `x-redrive-count`, `x-failure-class`,
//!   `x-failure-reason`, `x-first-sent-at`) and the failure and archive reasons ([`reason`]);
//! - the S3 archive envelope and its write-once writer ([`archive`], [`store`]);
//! - typed configuration from the environment ([`config`]), JSON logs ([`telemetry`]) and
//!   CloudWatch EMF metrics ([`metrics`]);
//! - the SQS and S3 adapters behind small ports ([`sqs::Queues`], [`store::ObjectStore`]), the
//!   AWS clients every function builds ([`aws`]) and the one settle executor both functions
//!   use ([`settle`]);
//! - in-memory doubles of those ports for your tests are a crate of their own
//!   (`resq-testing`).
//!
//! A team writing its own function depends on `resq-consumer` and implements its
//! `MessageHandler`; the repository's `docs/own-function.md` goes from `cargo new` to deploy.
//!
//! Decisions are plain functions over values, so every rule can be checked without AWS. The
//! redrive cap, for instance: a copy carrying exactly `MAX_REDRIVE_ATTEMPTS` is the last real
//! replay (the consumer runs it, the redriver replays it no more), and an unreadable count
//! counts as past the cap; each capped message is archived under its reason and day.
//!
//! ```
//! use std::time::Duration;
//!
//! use resq::archive::archive_key;
//! use resq::attributes::{cap_on_delivery, cap_on_replay, parse_count_value};
//! use resq::sqs::visibility_left;
//! use resq::reason::ArchiveReason;
//!
//! let max_redrive_attempts = 3;
//! let last = parse_count_value("3");
//! assert_eq!(cap_on_delivery(last, max_redrive_attempts), None);
//! assert_eq!(cap_on_replay(last, max_redrive_attempts), Some(ArchiveReason::RedriveCap));
//! assert_eq!(
//!     cap_on_delivery(parse_count_value("-1"), max_redrive_attempts),
//!     Some(ArchiveReason::InvalidRedriveCount)
//! );
//!
//! let day = chrono::DateTime::parse_from_rfc3339("2026-11-26T10:00:00Z")?.to_utc();
//! assert_eq!(
//!     archive_key(ArchiveReason::RedriveCap, day, "m-1"),
//!     "archive/REDRIVE_CAP/2026/11/26/m-1.json"
//! );
//!
//! // SQS's 12 h visibility limit counts from the receive: a message held an hour can be
//! // hidden for at most 11 more (a second kept in hand for the call)
//! assert_eq!(visibility_left(Duration::from_secs(3600)), 39_599);
//! # Ok::<(), chrono::ParseError>(())
//! ```
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod archive;
pub mod attributes;
pub mod aws;
pub mod config;
pub mod correlation;
pub mod error;
pub mod iam;
pub mod keep;
pub mod lambda;
pub mod mapping;
pub mod metrics;
pub mod payload;
pub mod reason;
pub mod settle;
pub mod sqs;
pub mod state;
pub mod store;
pub mod telemetry;
