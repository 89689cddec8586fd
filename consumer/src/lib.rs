//! The resq consumer: an SQS-triggered Lambda that processes orders, reports only the failed
//! records, backs failures off, fast-tracks permanent failures to the DLQ and archives
//! messages past the redrive cap (docs/design.md, "Consumer"): read ([`event`]) → run the
//! handler ([`engine`]) → decide ([`decide`]) → settle (resq's executor) → answer
//! ([`account`]).
#![warn(missing_docs)]

pub mod account;
pub mod decide;
pub mod engine;
pub mod event;
#[cfg(test)]
mod fixtures;
pub mod handler;
pub mod lambda;
pub mod order;
mod settle;

pub use engine::Consumer;

/// Everything the consumer's role must allow, with the reference handler: what Lambda does for
/// it and what its AWS calls need (infra/template.yaml grants exactly these).
pub fn permissions() -> Vec<resq::iam::Permission> {
    resq::iam::all(&[
        lambda::PERMISSIONS,
        engine::PERMISSIONS,
        handler::PERMISSIONS,
        resq::archive::PERMISSIONS,
    ])
}
