//! Typed configuration from the environment (docs/design.md, "Configuration"), parsed once at start-up.
//!
//! Every error names the variable and what to do about it. Empty values count as unset, so a
//! template can pass an empty parameter to mean "use the default".

use std::str::FromStr;
use std::time::Duration;

use crate::backoff::{Backoff, MAX_VISIBILITY_TIMEOUT};
use crate::concurrency::Concurrency;

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
}

/// What the redriver does with permanent failures (`PERMANENT_ACTION`): `keep` or
/// `archive`, in any case, as [`FromStr`] reads it and [`Display`](std::fmt::Display) writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PermanentAction {
    /// Leave them in the DLQ for a human (default).
    #[default]
    Keep,
    /// Archive them to S3 (`PERMANENT_FAILURE`) and delete them from the DLQ.
    Archive,
}

impl PermanentAction {
    /// The value as `PERMANENT_ACTION` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Archive => "archive",
        }
    }
}

impl std::fmt::Display for PermanentAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PermanentAction {
    type Err = String;

    /// `keep` or `archive`, in any case, surrounding whitespace ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "keep" => Ok(Self::Keep),
            "archive" => Ok(Self::Archive),
            _ => Err(format!(
                "\"{s}\" is not a permanent action: keep or archive"
            )),
        }
    }
}

/// The redriver's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RedriverConfig {
    /// Shared settings.
    pub common: CommonConfig,
    /// `REDRIVE_RATE_PER_SECOND`: token-bucket rate of replays.
    pub rate_per_second: f64,
    /// `MAX_MESSAGES_PER_RUN`: replays per invocation at most; `None` is `auto` (the default):
    /// what the rate allows in the run's time.
    pub max_messages_per_run: Option<u32>,
    /// `KEPT_IN_FLIGHT_MAX`: kept permanent failures hidden in the DLQ at most; beyond, they
    /// are archived (`PERMANENT_FAILURE`).
    pub kept_in_flight_max: u64,
    /// `ARCHIVE_AFTER_SECONDS`: TTL from the producer's send.
    pub archive_after: Duration,
    /// `PERMANENT_ACTION`.
    pub permanent_action: PermanentAction,
    /// `PAUSE_ON_ALARMS`: alarm names that stop redrive while in `ALARM`.
    pub pause_on_alarms: Vec<String>,
}

/// `MAX_REDRIVE_ATTEMPTS` when unset.
pub const DEFAULT_MAX_REDRIVE_ATTEMPTS: u32 = 3;
/// `DEADLINE_MARGIN_MS` when unset.
pub const DEFAULT_DEADLINE_MARGIN_MS: u64 = 1000;

/// `IDEMPOTENCY_WINDOW_SECONDS` when unset: 90 days, the template's default order-record
/// lifetime (`OrderRecordRetentionDays`), which sets the variable.
pub const DEFAULT_IDEMPOTENCY_WINDOW_SECONDS: u64 = 90 * 86_400;
/// `BACKOFF_BASE_SECONDS` when unset.
pub(crate) const DEFAULT_BACKOFF_BASE_SECONDS: u64 = 2;
/// `BACKOFF_MAX_SECONDS` when unset.
pub(crate) const DEFAULT_BACKOFF_MAX_SECONDS: u64 = 300;
/// `REDRIVE_RATE_PER_SECOND` when unset.
pub const DEFAULT_RATE_PER_SECOND: f64 = 10.0;
/// `KEPT_IN_FLIGHT_MAX` when unset.
pub const DEFAULT_KEPT_IN_FLIGHT_MAX: u64 = 50_000;
/// Highest accepted `KEPT_IN_FLIGHT_MAX`: SQS stops handing out messages of a standard queue
/// at about 120,000 in flight (long polling then returns nothing, with no error), and a run's
/// own receives need room beside the kept ones.
pub(crate) const MAX_KEPT_IN_FLIGHT: u64 = 100_000;
/// `ARCHIVE_AFTER_SECONDS` when unset: a day.
pub const DEFAULT_ARCHIVE_AFTER_SECONDS: u64 = 86_400;

/// Highest accepted `REDRIVE_RATE_PER_SECOND` (SQS's own move task tops out at 500/s).
pub const MAX_RATE_PER_SECOND: f64 = 3000.0;

/// Lowest accepted `DEADLINE_MARGIN_MS`.
pub const MIN_DEADLINE_MARGIN_MS: u64 = 200;

/// The DLQ's message retention (the template's, and SQS's maximum): 14 days.
pub(crate) const DLQ_RETENTION_SECONDS: u64 = 1_209_600;
/// How long before the DLQ's retention ends a message must be past its TTL, so that scheduled
/// runs (and the hide of a kept message, which ends at its TTL) archive it before SQS would
/// delete it: one day.
pub(crate) const TTL_MARGIN_SECONDS: u64 = 86_400;
/// Highest accepted `ARCHIVE_AFTER_SECONDS`: the DLQ's retention less the margin (13 days).
pub const MAX_ARCHIVE_AFTER_SECONDS: u64 = DLQ_RETENTION_SECONDS - TTL_MARGIN_SECONDS;

impl RedriverConfig {
    /// The environment of a redriver process with this configuration (what
    /// [`RedriverConfig::from_vars`] reads back as it): for tools that start the function.
    pub fn to_vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = self.common.to_vars();
        vars.extend([
            ("REDRIVE_RATE_PER_SECOND", self.rate_per_second.to_string()),
            (
                "MAX_MESSAGES_PER_RUN",
                self.max_messages_per_run
                    .map_or_else(|| "auto".to_owned(), |n| n.to_string()),
            ),
            ("KEPT_IN_FLIGHT_MAX", self.kept_in_flight_max.to_string()),
            (
                "ARCHIVE_AFTER_SECONDS",
                self.archive_after.as_secs().to_string(),
            ),
            ("PERMANENT_ACTION", self.permanent_action.to_string()),
            ("PAUSE_ON_ALARMS", self.pause_on_alarms.join(",")),
        ]);
        vars
    }

    /// Parses the redriver's variables from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(&process_env())
    }

    /// Parses the redriver's variables from any lookup.
    pub fn from_vars(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<Self, ConfigError> {
        let permanent_action = match vars.get("PERMANENT_ACTION") {
            None => PermanentAction::default(),
            Some(raw) => raw.parse().map_err(|_| ConfigError::Invalid {
                var: "PERMANENT_ACTION",
                value: raw,
                expected: "keep or archive".into(),
            })?,
        };
        Ok(Self {
            common: CommonConfig::from_vars(vars)?,
            rate_per_second: rate_per_second(vars)?,
            max_messages_per_run: max_messages_per_run(vars)?,
            kept_in_flight_max: vars.number(
                "KEPT_IN_FLIGHT_MAX",
                DEFAULT_KEPT_IN_FLIGHT_MAX,
                0..=MAX_KEPT_IN_FLIGHT,
            )?,
            // at least a minute: a shorter TTL would archive messages before they could be
            // replayed; at most the DLQ's retention less a day, or a message could reach the
            // end of the retention before a run archives it (nothing may age out unarchived)
            archive_after: Duration::from_secs(vars.number(
                "ARCHIVE_AFTER_SECONDS",
                DEFAULT_ARCHIVE_AFTER_SECONDS,
                60..=MAX_ARCHIVE_AFTER_SECONDS,
            )?),
            permanent_action,
            pause_on_alarms: names(vars, "PAUSE_ON_ALARMS"),
        })
    }
}

/// `REDRIVE_RATE_PER_SECOND`: above 0, at most [`MAX_RATE_PER_SECOND`].
fn rate_per_second(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<f64, ConfigError> {
    let Some(raw) = vars.get("REDRIVE_RATE_PER_SECOND") else {
        return Ok(DEFAULT_RATE_PER_SECOND);
    };
    match raw.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= MAX_RATE_PER_SECOND => Ok(r),
        _ => Err(ConfigError::Invalid {
            var: "REDRIVE_RATE_PER_SECOND",
            value: raw,
            expected: format!(
                "a number of messages per second above 0 and at most {MAX_RATE_PER_SECOND}"
            ),
        }),
    }
}

/// `MAX_MESSAGES_PER_RUN`: `auto` (`None`, what the rate allows in the run's time) or 1 to
/// 1,000,000.
fn max_messages_per_run(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
) -> Result<Option<u32>, ConfigError> {
    match vars.get("MAX_MESSAGES_PER_RUN") {
        Some(raw) if raw.trim().eq_ignore_ascii_case("auto") => Ok(None),
        None => Ok(None),
        Some(_) => match vars.number("MAX_MESSAGES_PER_RUN", 1, 1..=1_000_000) {
            Ok(n) => Ok(Some(n)),
            Err(ConfigError::Invalid { var, value, .. }) => Err(ConfigError::Invalid {
                var,
                value,
                expected: "auto (what the rate allows in the run's time) or a whole number from 1 to 1000000".into(),
            }),
            Err(other) => Err(other),
        },
    }
}

/// A comma-separated list of names (alarms), blanks dropped; unset: none.
fn names(vars: &Vars<impl Fn(&str) -> Option<String>>, var: &str) -> Vec<String> {
    let Some(list) = vars.get(var) else {
        return Vec::new();
    };
    let names = list.split(',').map(str::trim).filter(|s| !s.is_empty());
    names.map(str::to_owned).collect()
}

/// Reads variables by name; the process environment or, in tests, a map.
pub struct Vars<F: Fn(&str) -> Option<String>>(pub F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    /// A variable's value; empty counts as unset.
    pub fn get(&self, var: &str) -> Option<String> {
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

impl CommonConfig {
    /// The variables that [`CommonConfig::from_vars`] reads back as this configuration.
    pub fn to_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MAIN_QUEUE_URL", self.main_queue_url.clone()),
            ("DLQ_URL", self.dlq_url.clone()),
            ("ARCHIVE_BUCKET", self.archive_bucket.clone()),
            (
                "MAX_REDRIVE_ATTEMPTS",
                self.max_redrive_attempts.to_string(),
            ),
            (
                "DEADLINE_MARGIN_MS",
                self.deadline_margin.as_millis().to_string(),
            ),
        ]
    }
}

impl ConsumerConfig {
    /// The environment of a consumer process with this configuration (what
    /// [`ConsumerConfig::from_vars`] reads back as it): for tools that start the function.
    pub fn to_vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = self.common.to_vars();
        vars.extend([
            ("CONSUMER_CONCURRENCY", self.concurrency.to_string()),
            (
                "BACKOFF_BASE_SECONDS",
                self.backoff.base.as_secs().to_string(),
            ),
            (
                "BACKOFF_MAX_SECONDS",
                self.backoff.cap.as_secs().to_string(),
            ),
            (
                "IDEMPOTENCY_WINDOW_SECONDS",
                self.idempotency_window.as_secs().to_string(),
            ),
        ]);
        vars
    }

    /// Parses the consumer's variables from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(&process_env())
    }

    /// Parses the consumer's variables from any lookup.
    pub fn from_vars(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<Self, ConfigError> {
        let max = MAX_VISIBILITY_TIMEOUT.as_secs();
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
    fn a_configuration_reads_back_from_its_variables() {
        let lookup = |pairs: Vec<(&'static str, String)>| {
            let map: HashMap<String, String> =
                pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            Vars(move |k: &str| map.get(k).cloned())
        };
        let mut pairs: Vec<(&str, &str)> = REQUIRED.to_vec();
        pairs.extend([
            ("MAX_REDRIVE_ATTEMPTS", "5"),
            ("DEADLINE_MARGIN_MS", "1500"),
            ("CONSUMER_CONCURRENCY", "25"),
            ("BACKOFF_BASE_SECONDS", "1"),
            ("BACKOFF_MAX_SECONDS", "9"),
            ("REDRIVE_RATE_PER_SECOND", "12.5"),
            ("MAX_MESSAGES_PER_RUN", "70"),
            ("ARCHIVE_AFTER_SECONDS", "3600"),
            ("PERMANENT_ACTION", "archive"),
            ("PAUSE_ON_ALARMS", "a,b"),
        ]);
        let consumer = ConsumerConfig::from_vars(&vars(&pairs)).unwrap();
        assert_eq!(
            ConsumerConfig::from_vars(&lookup(consumer.to_vars())).unwrap(),
            consumer
        );
        let redriver = RedriverConfig::from_vars(&vars(&pairs)).unwrap();
        assert_eq!(
            RedriverConfig::from_vars(&lookup(redriver.to_vars())).unwrap(),
            redriver
        );
        assert_eq!(redriver.pause_on_alarms, vec!["a", "b"]);
    }

    #[test]
    fn permanent_action_reads_what_it_writes() {
        for action in [PermanentAction::Keep, PermanentAction::Archive] {
            assert_eq!(action.to_string().parse(), Ok(action));
            assert_eq!(
                format!(" {} ", action.as_str().to_uppercase()).parse(),
                Ok(action)
            );
        }
        assert_eq!(PermanentAction::default(), PermanentAction::Keep);
        assert!("delete".parse::<PermanentAction>().is_err());
    }

    #[test]
    fn defaults() {
        let c = ConsumerConfig::from_vars(&vars(&REQUIRED)).unwrap();
        assert_eq!(c.common.max_redrive_attempts, 3);
        assert_eq!(c.common.deadline_margin, Duration::from_millis(1000));
        assert_eq!(c.concurrency, Concurrency::Auto);
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
        assert_eq!(
            (c.common.max_redrive_attempts, c.concurrency),
            (5, Concurrency::Fixed(4))
        );
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
    fn redriver_defaults_and_overrides() {
        let c = RedriverConfig::from_vars(&vars(&REQUIRED)).unwrap();
        assert_eq!(c.rate_per_second, 10.0);
        assert_eq!(c.max_messages_per_run, None, "auto");
        assert_eq!(c.kept_in_flight_max, 50_000);
        assert_eq!(c.archive_after, Duration::from_secs(86_400));
        assert_eq!(c.permanent_action, PermanentAction::Keep);
        assert!(c.pause_on_alarms.is_empty());
        let mut v = REQUIRED.to_vec();
        v.extend([
            ("REDRIVE_RATE_PER_SECOND", "2.5"),
            ("MAX_MESSAGES_PER_RUN", "50"),
            ("KEPT_IN_FLIGHT_MAX", "7"),
            ("ARCHIVE_AFTER_SECONDS", "3600"),
            ("PERMANENT_ACTION", "Archive"),
            ("PAUSE_ON_ALARMS", " replays-failing , ,dlq-depth"),
        ]);
        let c = RedriverConfig::from_vars(&vars(&v)).unwrap();
        assert_eq!(c.rate_per_second, 2.5);
        assert_eq!(c.max_messages_per_run, Some(50));
        assert_eq!(c.kept_in_flight_max, 7);
        for (raw, parsed) in [("auto", None), (" AUTO ", None), ("1", Some(1))] {
            v.retain(|(k, _)| *k != "MAX_MESSAGES_PER_RUN");
            v.push(("MAX_MESSAGES_PER_RUN", raw));
            let c = RedriverConfig::from_vars(&vars(&v)).unwrap();
            assert_eq!(c.max_messages_per_run, parsed, "{raw}");
            let back = c.to_vars();
            let back: Vec<(&str, &str)> = back.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(RedriverConfig::from_vars(&vars(&back)).unwrap(), c);
        }
        for bad in [
            ("MAX_MESSAGES_PER_RUN", "0"),
            ("MAX_MESSAGES_PER_RUN", "many"),
            ("KEPT_IN_FLIGHT_MAX", "100001"),
        ] {
            let mut w = v.clone();
            w.retain(|(k, _)| *k != bad.0);
            w.push(bad);
            let err = RedriverConfig::from_vars(&vars(&w)).unwrap_err();
            assert!(err.to_string().starts_with(bad.0), "{err}");
        }
        assert_eq!(c.archive_after, Duration::from_secs(3600));
        assert_eq!(c.permanent_action, PermanentAction::Archive);
        assert_eq!(
            c.pause_on_alarms,
            vec!["replays-failing".to_owned(), "dlq-depth".to_owned()]
        );
    }

    #[test]
    fn redriver_invalid_values_name_the_variable() {
        for (var, value) in [
            ("REDRIVE_RATE_PER_SECOND", "0"),
            ("REDRIVE_RATE_PER_SECOND", "-3"),
            ("REDRIVE_RATE_PER_SECOND", "NaN"),
            ("REDRIVE_RATE_PER_SECOND", "1e9"),
            ("MAX_MESSAGES_PER_RUN", "0"),
            ("ARCHIVE_AFTER_SECONDS", "10"),
            // the DLQ keeps messages 14 days: a TTL that long would let them age out
            ("ARCHIVE_AFTER_SECONDS", "1209600"),
            ("ARCHIVE_AFTER_SECONDS", "1123201"),
            ("PERMANENT_ACTION", "delete"),
        ] {
            let mut v = REQUIRED.to_vec();
            v.push((var, value));
            let err = RedriverConfig::from_vars(&vars(&v)).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { var: got, .. } if *got == var),
                "{var}={value}: {err}"
            );
        }
    }

    #[test]
    fn invalid_values_name_the_variable() {
        for (var, value) in [
            ("MAX_REDRIVE_ATTEMPTS", "0"),
            ("MAX_REDRIVE_ATTEMPTS", "three"),
            ("MAX_REDRIVE_ATTEMPTS", "-1"),
            ("CONSUMER_CONCURRENCY", "0"),
            ("CONSUMER_CONCURRENCY", "automatic"),
            ("BACKOFF_BASE_SECONDS", "1.5"),
            ("BACKOFF_MAX_SECONDS", "50000"),
            ("BACKOFF_MAX_SECONDS", "1"),
            ("DEADLINE_MARGIN_MS", "soon"),
            ("DEADLINE_MARGIN_MS", "0"),
            ("DEADLINE_MARGIN_MS", "199"),
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

    #[test]
    fn messages_name_the_variable_the_value_and_what_is_allowed() {
        let mut v = REQUIRED.to_vec();
        v.push(("CONSUMER_CONCURRENCY", "abc"));
        let err = ConsumerConfig::from_vars(&vars(&v))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "CONSUMER_CONCURRENCY=\"abc\" is invalid: expected auto (as many as the batch has, up to 64, adapted to throttling) or a whole number from 1 to 1000"
        );
        let mut v = REQUIRED.to_vec();
        v.push(("PERMANENT_ACTION", "delete"));
        let err = RedriverConfig::from_vars(&vars(&v))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "PERMANENT_ACTION=\"delete\" is invalid: expected keep or archive"
        );
        let err = ConsumerConfig::from_vars(&vars(&REQUIRED[1..]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "MAIN_QUEUE_URL is not set; resq needs the URL of the main queue"
        );
    }

    #[test]
    fn outside_lambda_the_runtime_variables_are_named() {
        let lambda = [
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("AWS_LAMBDA_FUNCTION_NAME", "consumer"),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
        ];
        assert_eq!(lambda_environment(&vars(&lambda)), Ok(()));
        let err = lambda_environment(&vars(&lambda[1..])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("AWS_LAMBDA_RUNTIME_API is not set; Lambda sets it; to run the function on this machine use `cargo lambda watch`"),
            "{err}"
        );
        let mut odd = lambda.to_vec();
        odd[3] = ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "lots");
        assert!(matches!(
            lambda_environment(&vars(&odd)),
            Err(ConfigError::Invalid {
                var: "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
                ..
            })
        ));
    }
}
