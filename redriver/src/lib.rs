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
