//! The consumer's configuration (docs/design.md, "Configuration"): its own variables beside
//! what both functions share ([`resq::config::CommonConfig`]), parsed once at start-up; every
//! error names the variable.

use std::time::Duration;

use resq::config::{CommonConfig, ConfigError, Vars, process_env};

use crate::backoff::Backoff;
use crate::concurrency::Concurrency;

/// The consumer's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Shared settings.
    pub common: CommonConfig,
    /// `CONSUMER_CONCURRENCY`: records in flight per invocation (`auto` or a number).
    pub concurrency: Concurrency,
    /// `BACKOFF_BASE_SECONDS` / `BACKOFF_MAX_SECONDS`.
    pub backoff: Backoff,
    /// `IDEMPOTENCY_WINDOW_SECONDS`: how long the order effect's idempotency key lasts (the
    /// order records' lifetime). A message first sent longer ago than this is archived
    /// (`IDEMPOTENCY_WINDOW`), never run: its key may be gone, and running it could double it.
    pub idempotency_window: Duration,
    /// `RETRY_BUDGET_PERCENT`: over a minute, main-queue redeliveries run at most this many per
    /// 100 first deliveries run (plus [`crate::retry_budget::FLOOR_PER_MINUTE`]); `None`
    /// (`off`): no retry budget.
    pub retry_budget_percent: Option<u32>,
}

/// `IDEMPOTENCY_WINDOW_SECONDS` when unset: 90 days, the template's default order-record
/// lifetime (`OrderRecordRetentionDays`), which sets the variable.
pub const DEFAULT_IDEMPOTENCY_WINDOW_SECONDS: u64 = 90 * 86_400;
/// `RETRY_BUDGET_PERCENT` when unset: retries at most 10 % of requests (Envoy's, gRPC's and
/// Linkerd's default).
pub const DEFAULT_RETRY_BUDGET_PERCENT: u32 = 10;
/// `BACKOFF_BASE_SECONDS` when unset.
const DEFAULT_BACKOFF_BASE_SECONDS: u64 = 2;
/// `BACKOFF_MAX_SECONDS` when unset.
const DEFAULT_BACKOFF_MAX_SECONDS: u64 = 300;

impl ConsumerConfig {
    /// Parses the consumer's variables from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(&process_env())
    }

    /// Parses the consumer's variables from any lookup.
    pub fn from_vars(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<Self, ConfigError> {
        let max = resq::sqs::MAX_VISIBILITY_TIMEOUT.as_secs();
        let base = vars.number(
            "BACKOFF_BASE_SECONDS",
            DEFAULT_BACKOFF_BASE_SECONDS,
            0..=max,
        )?;
        let cap = vars.number("BACKOFF_MAX_SECONDS", DEFAULT_BACKOFF_MAX_SECONDS, 0..=max)?;
        if cap < base {
            return Err(ConfigError::Invalid {
                var: "BACKOFF_MAX_SECONDS",
                value: cap.to_string(),
                expected: format!("at least BACKOFF_BASE_SECONDS ({base})"),
            });
        }
        Ok(Self {
            common: CommonConfig::from_vars(vars)?,
            concurrency: match vars.get("CONSUMER_CONCURRENCY") {
                None => Concurrency::default(),
                Some(raw) => raw.parse().map_err(|expected| ConfigError::Invalid {
                    var: "CONSUMER_CONCURRENCY",
                    value: raw,
                    expected,
                })?,
            },
            backoff: Backoff {
                base: Duration::from_secs(base),
                cap: Duration::from_secs(cap),
            },
            // at least a minute; at most 100 years (S3 lifecycles count days)
            idempotency_window: Duration::from_secs(vars.number(
                "IDEMPOTENCY_WINDOW_SECONDS",
                DEFAULT_IDEMPOTENCY_WINDOW_SECONDS,
                60..=100 * 365 * 86_400,
            )?),
            retry_budget_percent: retry_budget_percent(vars)?,
        })
    }
}

/// `RETRY_BUDGET_PERCENT`: `off` (any case), or a whole number from 1 to 100.
fn retry_budget_percent(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
) -> Result<Option<u32>, ConfigError> {
    let Some(raw) = vars.get("RETRY_BUDGET_PERCENT") else {
        return Ok(Some(DEFAULT_RETRY_BUDGET_PERCENT));
    };
    let value = raw.trim();
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match value.parse() {
        Ok(percent @ 1..=100) => Ok(Some(percent)),
        _ => Err(ConfigError::Invalid {
            var: "RETRY_BUDGET_PERCENT",
            value: raw,
            expected: "off (no retry budget) or a whole number from 1 to 100".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq_testing::{REQUIRED_VARS as REQUIRED, vars};

    #[test]
    fn defaults() {
        let c = ConsumerConfig::from_vars(&vars(&REQUIRED)).unwrap();
        assert_eq!(c.common.max_redrive_attempts, 3);
        assert_eq!(c.common.deadline_margin, Duration::from_millis(1000));
        assert_eq!(c.concurrency, Concurrency::Auto);
        assert_eq!(c.backoff, Backoff::default());
        assert_eq!(c.common.archive_bucket, "resq-archive");
        assert_eq!(c.retry_budget_percent, Some(DEFAULT_RETRY_BUDGET_PERCENT));
    }

    #[test]
    fn the_retry_budget_is_a_percentage_or_off() {
        let budget = |value: &str| {
            let mut v = REQUIRED.to_vec();
            v.push(("RETRY_BUDGET_PERCENT", value));
            ConsumerConfig::from_vars(&vars(&v)).map(|c| c.retry_budget_percent)
        };
        for (value, expected) in [
            ("1", Some(1)),
            (" 25 ", Some(25)),
            ("100", Some(100)),
            ("off", None),
            ("OFF", None),
            (" Off ", None),
            // empty counts as unset
            ("", Some(DEFAULT_RETRY_BUDGET_PERCENT)),
        ] {
            assert_eq!(budget(value), Ok(expected), "{value:?}");
        }
        for value in ["0", "101", "10.5", "-5", "10%", "none", "false"] {
            let err = budget(value).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "RETRY_BUDGET_PERCENT=\"{value}\" is invalid: expected off (no retry budget) or a whole number from 1 to 100"
                )
            );
        }
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
        assert_eq!(
            (c.common.max_redrive_attempts, c.concurrency),
            (5, Concurrency::Fixed(4))
        );
        assert_eq!(c.backoff.cap, Duration::from_secs(60));
        assert_eq!(c.common.deadline_margin, Duration::from_millis(250));
    }

    #[test]
    fn invalid_consumer_values_name_the_variable() {
        for (var, value) in [
            ("CONSUMER_CONCURRENCY", "0"),
            ("CONSUMER_CONCURRENCY", "automatic"),
            ("BACKOFF_BASE_SECONDS", "1.5"),
            ("BACKOFF_MAX_SECONDS", "50000"),
            ("BACKOFF_MAX_SECONDS", "1"),
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

    #[test]
    fn a_bad_concurrency_says_what_is_allowed() {
        let mut v = REQUIRED.to_vec();
        v.push(("CONSUMER_CONCURRENCY", "abc"));
        let err = ConsumerConfig::from_vars(&vars(&v))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "CONSUMER_CONCURRENCY=\"abc\" is invalid: expected auto (as many as the batch has, up to 64, adapted to throttling) or a whole number from 1 to 1000"
        );
    }
}
