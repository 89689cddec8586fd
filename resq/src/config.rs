//! Typed configuration from the environment (SPEC §8), parsed once at start-up.
//!
//! Every error names the variable and what to do about it. Empty values count as unset, so a
//! template can pass an empty parameter to mean "use the default".

use std::str::FromStr;
use std::time::Duration;

use crate::backoff::{Backoff, MAX_VISIBILITY_TIMEOUT};

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
    #[error("{var}={value:?} is invalid: expected {expected}")]
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
    /// `MAIN_QUEUE_URL`: the orders queue.
    pub main_queue_url: String,
    /// `DLQ_URL`: the orders queue's dead-letter queue.
    pub dlq_url: String,
    /// `ARCHIVE_BUCKET`: the archive and the reference handler's order records.
    pub archive_bucket: String,
    /// `MAX_REDRIVE_ATTEMPTS`: the redrive cap.
    pub max_redrive_attempts: u32,
    /// `DEADLINE_MARGIN_MS`: stop starting work this close to the Lambda deadline.
    pub deadline_margin: Duration,
}

/// The consumer's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Shared settings.
    pub common: CommonConfig,
    /// `CONSUMER_CONCURRENCY`: records in flight per invocation.
    pub concurrency: usize,
    /// `BACKOFF_BASE_SECONDS` / `BACKOFF_MAX_SECONDS`.
    pub backoff: Backoff,
}

/// Reads variables by name; the process environment or, in tests, a map.
pub struct Vars<F: Fn(&str) -> Option<String>>(pub F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
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
                "resq needs the URL of the orders queue",
            )?,
            dlq_url: queue_url(
                vars,
                "DLQ_URL",
                "resq needs the URL of the orders queue's dead-letter queue",
            )?,
            archive_bucket: vars.required(
                "ARCHIVE_BUCKET",
                "resq needs the S3 bucket that holds the archive and the order records",
            )?,
            // 0 would archive every message on first sight.
            max_redrive_attempts: vars.number("MAX_REDRIVE_ATTEMPTS", 3, 1..=1000)?,
            deadline_margin: Duration::from_millis(vars.number(
                "DEADLINE_MARGIN_MS",
                1000,
                0..=900_000,
            )?),
        })
    }
}

impl ConsumerConfig {
    /// Parses the consumer's variables from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(&process_env())
    }

    /// Parses the consumer's variables from any lookup.
    pub fn from_vars(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<Self, ConfigError> {
        let max = MAX_VISIBILITY_TIMEOUT.as_secs();
        let base = vars.number("BACKOFF_BASE_SECONDS", 2, 0..=max)?;
        let cap = vars.number("BACKOFF_MAX_SECONDS", 300, 0..=max)?;
        if cap < base {
            return Err(ConfigError::Invalid {
                var: "BACKOFF_MAX_SECONDS",
                value: cap.to_string(),
                expected: format!("at least BACKOFF_BASE_SECONDS ({base})"),
            });
        }
        Ok(Self {
            common: CommonConfig::from_vars(vars)?,
            concurrency: vars.number("CONSUMER_CONCURRENCY", 10, 1..=1000)?,
            backoff: Backoff {
                base: Duration::from_secs(base),
                cap: Duration::from_secs(cap),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> Vars<impl Fn(&str) -> Option<String>> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Vars(move |k: &str| map.get(k).cloned())
    }

    const REQUIRED: [(&str, &str); 3] = [
        (
            "MAIN_QUEUE_URL",
            "http://127.0.0.1:5000/123456789012/orders",
        ),
        ("DLQ_URL", "http://127.0.0.1:5000/123456789012/orders-dlq"),
        ("ARCHIVE_BUCKET", "resq-archive"),
    ];

    #[test]
    fn defaults() {
        let c = ConsumerConfig::from_vars(&vars(&REQUIRED)).unwrap();
        assert_eq!(c.common.max_redrive_attempts, 3);
        assert_eq!(c.common.deadline_margin, Duration::from_millis(1000));
        assert_eq!(c.concurrency, 10);
        assert_eq!(c.backoff, Backoff::default());
        assert_eq!(c.common.archive_bucket, "resq-archive");
    }

    #[test]
    fn overrides() {
        let mut v = REQUIRED.to_vec();
        v.extend([
            ("MAX_REDRIVE_ATTEMPTS", "5"),
            ("CONSUMER_CONCURRENCY", " 4 "),
            ("BACKOFF_BASE_SECONDS", "1"),
            ("BACKOFF_MAX_SECONDS", "60"),
            ("DEADLINE_MARGIN_MS", "250"),
        ]);
        let c = ConsumerConfig::from_vars(&vars(&v)).unwrap();
        assert_eq!((c.common.max_redrive_attempts, c.concurrency), (5, 4));
        assert_eq!(c.backoff.cap, Duration::from_secs(60));
        assert_eq!(c.common.deadline_margin, Duration::from_millis(250));
    }

    #[test]
    fn missing_required_names_the_variable() {
        for (i, (name, _)) in REQUIRED.iter().enumerate() {
            let mut v = REQUIRED.to_vec();
            v.remove(i);
            let err = ConsumerConfig::from_vars(&vars(&v)).unwrap_err();
            assert!(
                matches!(err, ConfigError::Missing { var, .. } if var == *name),
                "{err}"
            );
            assert!(err.to_string().starts_with(&format!("{name} is not set; ")));
            // empty counts as unset
            v.insert(i, (name, "  "));
            assert!(matches!(
                ConsumerConfig::from_vars(&vars(&v)),
                Err(ConfigError::Missing { .. })
            ));
        }
    }

    #[test]
    fn invalid_values_name_the_variable() {
        for (var, value) in [
            ("MAX_REDRIVE_ATTEMPTS", "0"),
            ("MAX_REDRIVE_ATTEMPTS", "three"),
            ("MAX_REDRIVE_ATTEMPTS", "-1"),
            ("CONSUMER_CONCURRENCY", "0"),
            ("BACKOFF_BASE_SECONDS", "1.5"),
            ("BACKOFF_MAX_SECONDS", "50000"),
            ("BACKOFF_MAX_SECONDS", "1"),
            ("DEADLINE_MARGIN_MS", "soon"),
            ("DLQ_URL", "orders-dlq"),
        ] {
            let mut v = REQUIRED.to_vec();
            v.retain(|(k, _)| *k != var);
            v.push((var, value));
            let err = ConsumerConfig::from_vars(&vars(&v)).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { var: got, .. } if *got == var),
                "{var}={value}: {err}"
            );
            assert!(err.to_string().starts_with(var), "{err}");
        }
    }
}
