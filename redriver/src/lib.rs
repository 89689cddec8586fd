//! The resq redriver: a scheduled Lambda that replays the DLQ into the main queue at a bounded
//! rate, selectively, and archives what is too old or has looped too often (docs/design.md, "Redriver").
#![warn(missing_docs)]

pub mod breaker;
pub mod classify;
pub mod engine;
pub mod memory;
pub mod ports;
pub mod ratelimit;
pub mod request;

pub use engine::{Redriver, Summary};

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
        ports::QUEUE_PERMISSIONS,
        ports::ALARM_PERMISSIONS,
        resq::archive::PERMISSIONS,
        resq::keep::PERMISSIONS,
    ])
}
