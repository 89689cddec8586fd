//! The resq consumer: an SQS-triggered Lambda that runs a handler on each record, reports only
//! the failed records, backs failures off, fast-tracks permanent failures to the DLQ and
//! archives messages past the redrive cap. resq's own `consumer` binary runs the reference
//! order handler; a team's function runs its own message type on the same engine.
//!
//! # Your own message type
//!
//! Implement [`MessageHandler`](handler::MessageHandler): parse and validate a body into your
//! type (a [`Rejection`](handler::Rejection) is a permanent failure: the record goes to the
//! DLQ with your reason), name its business id, and apply its effect, idempotently by that id
//! (a [`HandlerError`](handler::HandlerError) says transient, retried with backoff, or
//! permanent). Your function's `main` is one line over [`lambda::serve`], which reads the
//! configuration from the environment (`MAIN_QUEUE_URL`, `DLQ_URL`, `ARCHIVE_BUCKET`, …) and
//! hands your factory the shared AWS configuration:
//!
//! ```no_run
//! # use resq_consumer::handler::{HandlerError, MessageHandler, RecordMeta, Rejection};
//! # struct Settle;
//! # impl MessageHandler for Settle {
//! #     type Message = String;
//! #     fn parse(&self, body: Option<&str>) -> Result<String, Rejection> { Ok(body.unwrap_or_default().to_owned()) }
//! #     fn business_id<'m>(&self, m: &'m String) -> &'m str { m }
//! #     async fn handle(&self, _: &String, _: &RecordMeta<'_>) -> Result<(), HandlerError> { Ok(()) }
//! # }
//! fn main() -> std::process::ExitCode {
//!     resq::lambda::main("payments", || resq_consumer::lambda::serve(|_resources| Settle))
//! }
//! ```
//!
//! Keep `[profile.release] panic = "unwind"` in your Cargo.toml: a handler's panic is caught
//! and fails its record alone, which aborting would not allow, so a binary over `serve` does
//! not build under `panic = "abort"`. The repository's `docs/own-function.md` goes from
//! `cargo new` to deploy (`infra/function.yaml`).
//!
//! # The engine, without Lambda
//!
//! [`Consumer`] is the engine over its ports (SQS, the archive store): the same batch, run
//! here against resq's in-memory doubles (crate `resq-testing`). A good
//! payment is acknowledged; a payment of nothing is rejected by the handler and copied to the
//! DLQ with resq's attributes and the handler's reason; neither is reported failed, so Lambda
//! deletes both from the queue.
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! use resq::attributes::{X_FAILURE_CLASS, X_FAILURE_REASON};
//! use resq::config::Vars;
//! use resq_consumer::config::ConsumerConfig;
//! use resq_testing::{MemorySqs, MemoryStore};
//! use resq_consumer::Consumer;
//! use resq_consumer::event::SqsInvocation;
//! use resq_consumer::handler::{HandlerError, MessageHandler, RecordMeta, Rejection};
//!
//! /// `{"paymentId": "p-1", "amountCents": 1250}`
//! #[derive(serde::Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct Payment {
//!     payment_id: String,
//!     amount_cents: u64,
//! }
//!
//! struct Settle;
//!
//! impl MessageHandler for Settle {
//!     type Message = Payment;
//!
//!     fn parse(&self, body: Option<&str>) -> Result<Payment, Rejection> {
//!         let body = body.ok_or_else(|| Rejection::malformed("the message has no body"))?;
//!         let payment: Payment =
//!             serde_json::from_str(body).map_err(|e| Rejection::malformed(e.to_string()))?;
//!         if payment.amount_cents == 0 {
//!             return Err(Rejection::new("ZERO_AMOUNT", "nothing to settle")
//!                 .with_business_id(Some(payment.payment_id)));
//!         }
//!         Ok(payment)
//!     }
//!
//!     fn business_id<'m>(&self, payment: &'m Payment) -> &'m str {
//!         &payment.payment_id
//!     }
//!
//!     async fn handle(&self, _payment: &Payment, _meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
//!         Ok(()) // settle it, keyed by payment_id
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let queue = "https://sqs.us-east-1.amazonaws.com/123456789012/payments";
//! let dlq = "https://sqs.us-east-1.amazonaws.com/123456789012/payments-dlq";
//! let env = [("MAIN_QUEUE_URL", queue), ("DLQ_URL", dlq), ("ARCHIVE_BUCKET", "archive")];
//! let config = ConsumerConfig::from_vars(&Vars(|name: &str| {
//!     env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
//! }))?;
//! let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
//! let consumer = Consumer::new(Settle, &sqs, &store, config);
//!
//! // two records as Lambda delivers them, sent just now
//! let sent = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis();
//! let record = |id: &str, body: &str| serde_json::json!({
//!     "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
//!     "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": sent.to_string()},
//!     "messageAttributes": {}, "eventSource": "aws:sqs",
//!     "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments", "awsRegion": "us-east-1"
//! });
//! let event = serde_json::json!({"Records": [
//!     record("m-1", r#"{"paymentId": "p-1", "amountCents": 1250}"#),
//!     record("m-2", r#"{"paymentId": "p-2", "amountCents": 0}"#),
//! ]});
//! let invocation = SqsInvocation::from_json(&event.to_string())?;
//! let report = consumer.handle(invocation, Instant::now() + Duration::from_secs(30)).await?;
//!
//! assert!(report.response.batch_item_failures.is_empty());
//! let dead = sqs.sent(dlq);
//! assert_eq!(dead.len(), 1);
//! let attribute = |name: &str| dead[0].attributes[name].string_value.as_deref();
//! assert_eq!(attribute(X_FAILURE_CLASS), Some("permanent"));
//! assert_eq!(attribute(X_FAILURE_REASON), Some("ZERO_AMOUNT"));
//! # Ok(())
//! # }
//! ```
//!
//! # How a batch runs
//!
//! read ([`event`]) → run the handler ([`engine`]) → decide ([`decide`]) → settle (resq's
//! executor) → answer ([`account`]); docs/design.md, "Consumer", maps each rule to its code.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod account;
pub mod backoff;
pub mod concurrency;
pub mod config;
pub mod decide;
pub mod downstream;
pub mod engine;
pub mod event;
#[cfg(test)]
mod fixtures;
pub mod handler;
pub mod lambda;
pub mod order;
pub mod retry_budget;
mod settle;

pub use engine::Consumer;

/// Everything the consumer's role must allow, with the reference handler: what Lambda does for
/// it and what its AWS calls need (infra/template.yaml grants exactly these).
pub fn permissions() -> Vec<resq::iam::Permission> {
    resq::iam::all(&[
        lambda::PERMISSIONS,
        engine::PERMISSIONS,
        order::PERMISSIONS,
        resq::archive::PERMISSIONS,
        resq::payload::PERMISSIONS,
    ])
}

/// What the role of any function on the engine must allow, whatever its handler: what Lambda
/// does for it and what the engine's own calls need (infra/function.yaml grants exactly these;
/// a team's handler brings its own).
pub fn engine_permissions() -> Vec<resq::iam::Permission> {
    resq::iam::all(&[
        lambda::PERMISSIONS,
        engine::PERMISSIONS,
        resq::archive::PERMISSIONS,
        resq::payload::PERMISSIONS,
    ])
}
