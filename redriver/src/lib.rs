//! The resq redriver: a scheduled Lambda that replays the DLQ into the main queue at a bounded
//! rate, selectively, and archives what is too old or has looped too often (docs/design.md,
//! "Redriver"): receive → classify ([`classify`]) → plan ([`plan`]) → settle (resq's executor,
//! paced, run by [`engine`]) → summary ([`summary`]).
#![warn(missing_docs)]

pub mod breaker;
pub mod classify;
pub mod engine;
#[cfg(test)]
mod fixtures;
pub mod plan;
pub mod ports;
pub mod ratelimit;
pub mod request;
pub mod summary;

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
    ])
}
