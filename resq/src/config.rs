//! Typed configuration from the environment (docs/design.md, "Configuration"), parsed once at
//! start-up: what both functions share ([`CommonConfig`]) and how variables are read
//! ([`Vars`]); each function's own settings are its crate's (`resq_consumer::config`,
//! `resq_redriver::config`).
//!
//! Every error names the variable and what to do about it. Empty values count as unset, so a
//! template can pass an empty parameter to mean "use the default".

use std::str::FromStr;
use std::time::Duration;

/// A configuration problem found at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is unset or empty.
    #[error("{var} is not set; {hint}")]
    Missing {
        /// The variable.
        var: &'static str,
        /// What it is for.
        hint: &'static str,
    },
    /// A variable holds a value that cannot be used.
    #[error("{var}=\"{value}\" is invalid: expected {expected}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// The value found.
        value: String,
        /// What would be accepted.
        expected: String,
    },
}

/// Settings both functions share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommonConfig {
    /// `MAIN_QUEUE_URL`: the main queue.
    pub main_queue_url: String,
    /// `DLQ_URL`: the main queue's dead-letter queue.
    pub dlq_url: String,
    /// `ARCHIVE_BUCKET`: the archive and the reference handler's order records.
    pub archive_bucket: String,
    /// `MAX_REDRIVE_ATTEMPTS`: the redrive cap.
    pub max_redrive_attempts: u32,
    /// `DEADLINE_MARGIN_MS`: stop starting work this close to the Lambda deadline.
    pub deadline_margin: Duration,
}

/// `MAX_REDRIVE_ATTEMPTS` when unset.
pub const DEFAULT_MAX_REDRIVE_ATTEMPTS: u32 = 3;
/// `DEADLINE_MARGIN_MS` when unset.
pub const DEFAULT_DEADLINE_MARGIN_MS: u64 = 1000;

/// Lowest accepted `DEADLINE_MARGIN_MS`.
pub const MIN_DEADLINE_MARGIN_MS: u64 = 200;

/// Reads variables by name; the process environment or, in tests, a map.
pub struct Vars<F: Fn(&str) -> Option<String>>(pub F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    /// A variable's value; empty counts as unset.
    pub fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
    }

    /// A comma-separated list of names (alarms), blanks dropped; unset: none.
    pub fn names(&self, var: &str) -> Vec<String> {
        let Some(list) = self.get(var) else {
            return Vec::new();
        };
        let names = list.split(',').map(str::trim).filter(|s| !s.is_empty());
        names.map(str::to_owned).collect()
    }

    /// A required, non-empty variable.
    pub fn required(&self, var: &'static str, hint: &'static str) -> Result<String, ConfigError> {
        self.get(var)
            .map(|v| v.trim().to_owned())
            .ok_or(ConfigError::Missing { var, hint })
    }

    /// An optional number within `range`, or `default` when unset.
    pub fn number<T>(
        &self,
        var: &'static str,
        default: T,
        range: std::ops::RangeInclusive<T>,
    ) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        let Some(raw) = self.get(var) else {
            return Ok(default);
        };
        match raw.trim().parse::<T>() {
            Ok(v) if range.contains(&v) => Ok(v),
            _ => Err(ConfigError::Invalid {
                var,
                value: raw,
                expected: format!("a whole number from {} to {}", range.start(), range.end()),
            }),
        }
    }
}

/// What a function's binary needs from Lambda's runtime environment (the runtime client reads
/// these and panics when one is missing). Checked at start-up so that a binary started outside
/// Lambda says what it needs.
pub fn lambda_environment(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<(), ConfigError> {
    const HINT: &str = "Lambda sets it; to run the function on this machine use `cargo lambda watch` (make watch) and invoke it with `cargo lambda invoke`";
    for var in [
        "AWS_LAMBDA_RUNTIME_API",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_VERSION",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    ] {
        vars.required(var, HINT)?;
    }
    vars.number("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", 128_i32, 1..=i32::MAX)?;
    Ok(())
}

/// Reads the process environment.
pub fn process_env() -> Vars<impl Fn(&str) -> Option<String>> {
    Vars(|k: &str| std::env::var(k).ok())
}

fn queue_url(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
    var: &'static str,
    hint: &'static str,
) -> Result<String, ConfigError> {
    let url = vars.required(var, hint)?;
    if url.starts_with("https://") || url.starts_with("http://") {
        Ok(url)
    } else {
        Err(ConfigError::Invalid {
            var,
            value: url,
            expected: "a queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)".into(),
        })
    }
}

impl CommonConfig {
    /// Parses the shared variables.
    pub fn from_vars(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<Self, ConfigError> {
        Ok(Self {
            main_queue_url: queue_url(
                vars,
                "MAIN_QUEUE_URL",
                "resq needs the URL of the main queue",
            )?,
            dlq_url: queue_url(
                vars,
                "DLQ_URL",
                "resq needs the URL of the main queue's dead-letter queue",
            )?,
            archive_bucket: vars.required(
                "ARCHIVE_BUCKET",
                "resq needs the S3 bucket that holds the archive and the order records",
            )?,
            // 0 would archive every message on first sight.
            max_redrive_attempts: vars.number(
                "MAX_REDRIVE_ATTEMPTS",
                DEFAULT_MAX_REDRIVE_ATTEMPTS,
                1..=1000,
            )?,
            // at least 200 ms: the functions split the margin between their last phases (the
            // settling calls, the response, the metrics); with none they would answer late
            deadline_margin: Duration::from_millis(vars.number(
                "DEADLINE_MARGIN_MS",
                DEFAULT_DEADLINE_MARGIN_MS,
                MIN_DEADLINE_MARGIN_MS..=900_000,
            )?),
        })
    }
}
