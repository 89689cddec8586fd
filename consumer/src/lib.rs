//! The resq consumer: an SQS-triggered Lambda that processes orders, reports only the failed
//! records, backs failures off, fast-tracks permanent failures to the DLQ and archives
//! messages past the redrive cap (docs/design.md, "Consumer").
#![warn(missing_docs)]

pub mod decision;
pub mod engine;
pub mod handler;
pub mod lambda;
pub mod memory;
pub mod order;
pub mod queues;

pub use engine::Consumer;

/// Everything the consumer's role must allow, with the reference handler: what Lambda does for
/// it and what its AWS calls need (infra/template.yaml grants exactly these).
pub fn permissions() -> Vec<resq::iam::Permission> {
    resq::iam::all(&[
        lambda::PERMISSIONS,
        queues::PERMISSIONS,
        handler::PERMISSIONS,
        resq::archive::PERMISSIONS,
    ])
}
