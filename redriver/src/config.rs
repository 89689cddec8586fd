//! The redriver's configuration (docs/design.md, "Configuration"): its own variables beside
//! what both functions share ([`resq::config::CommonConfig`]), parsed once at start-up; every
//! error names the variable.

use std::str::FromStr;
use std::time::Duration;

use resq::config::{CommonConfig, ConfigError, Vars, process_env};

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
    /// `PAUSE_CONSUMER_ON_ALARMS`: alarm names that pause the consumer's event source mapping
    /// while in `ALARM`.
    pub pause_consumer_on_alarms: Vec<String>,
    /// `CONSUMER_EVENT_SOURCE_MAPPING`: the UUID of the consumer's event source mapping; `None`:
    /// no consumer breaker.
    pub consumer_mapping: Option<String>,
    /// `REDRIVE_RATE_MAX`: the rate a scheduled run may climb to while its breakers stay
    /// closed (at least `REDRIVE_RATE_PER_SECOND`, which it is when unset or set below: no
    /// climb).
    pub rate_max: f64,
    /// `ARCHIVE_SWEEP_SECONDS`: how often a paused or budget-spent run reads the whole DLQ to
    /// archive what is due.
    pub archive_sweep: Duration,
}

/// `REDRIVE_RATE_PER_SECOND` when unset.
pub const DEFAULT_RATE_PER_SECOND: f64 = 10.0;
/// `KEPT_IN_FLIGHT_MAX` when unset.
pub const DEFAULT_KEPT_IN_FLIGHT_MAX: u64 = 50_000;
/// Highest accepted `KEPT_IN_FLIGHT_MAX`: SQS stops handing out messages of a standard queue
/// at about 120,000 in flight (long polling then returns nothing, with no error), and a run's
/// own receives need room beside the kept ones.
const MAX_KEPT_IN_FLIGHT: u64 = 100_000;
/// `ARCHIVE_SWEEP_SECONDS` when unset: an hour.
pub const DEFAULT_ARCHIVE_SWEEP_SECONDS: u64 = 3600;
/// Highest accepted `ARCHIVE_SWEEP_SECONDS`: 12 hours, half the day a message past the longest
/// TTL has before the DLQ's retention ends (so two sweeps at least fall within it).
pub const MAX_ARCHIVE_SWEEP_SECONDS: u64 = TTL_MARGIN_SECONDS / 2;
/// `ARCHIVE_AFTER_SECONDS` when unset: a day.
pub const DEFAULT_ARCHIVE_AFTER_SECONDS: u64 = 86_400;

/// Highest accepted `REDRIVE_RATE_PER_SECOND` (SQS's own move task tops out at 500/s).
pub const MAX_RATE_PER_SECOND: f64 = 3000.0;

/// The DLQ's message retention (the template's, and SQS's maximum): 14 days.
const DLQ_RETENTION_SECONDS: u64 = 1_209_600;
/// How long before the DLQ's retention ends a message must be past its TTL, so that scheduled
/// runs (and the hide of a kept message, which ends at its TTL) archive it before SQS would
/// delete it: one day.
const TTL_MARGIN_SECONDS: u64 = 86_400;
/// Highest accepted `ARCHIVE_AFTER_SECONDS`: the DLQ's retention less the margin (13 days).
pub const MAX_ARCHIVE_AFTER_SECONDS: u64 = DLQ_RETENTION_SECONDS - TTL_MARGIN_SECONDS;

impl RedriverConfig {
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
        let rate =
            rate_variable(vars, "REDRIVE_RATE_PER_SECOND")?.unwrap_or(DEFAULT_RATE_PER_SECOND);
        Ok(Self {
            common: CommonConfig::from_vars(vars)?,
            rate_per_second: rate,
            // a ceiling at or below the base rate is no climb (the template accepts a base
            // rate above its default ceiling: that set must start, not fail every run)
            rate_max: rate_variable(vars, "REDRIVE_RATE_MAX")?.map_or(rate, |max| max.max(rate)),
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
            pause_on_alarms: vars.names("PAUSE_ON_ALARMS"),
            pause_consumer_on_alarms: vars.names("PAUSE_CONSUMER_ON_ALARMS"),
            consumer_mapping: vars
                .get("CONSUMER_EVENT_SOURCE_MAPPING")
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty()),
            archive_sweep: Duration::from_secs(vars.number(
                "ARCHIVE_SWEEP_SECONDS",
                DEFAULT_ARCHIVE_SWEEP_SECONDS,
                60..=MAX_ARCHIVE_SWEEP_SECONDS,
            )?),
        })
    }
}

/// A rate variable (`REDRIVE_RATE_PER_SECOND`, `REDRIVE_RATE_MAX`): above 0 and at most
/// [`MAX_RATE_PER_SECOND`]; `None` when unset.
fn rate_variable(
    vars: &Vars<impl Fn(&str) -> Option<String>>,
    var: &'static str,
) -> Result<Option<f64>, ConfigError> {
    let Some(raw) = vars.get(var) else {
        return Ok(None);
    };
    match raw.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= MAX_RATE_PER_SECOND => Ok(Some(r)),
        _ => Err(ConfigError::Invalid {
            var,
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

/// `AWS_LAMBDA_MAX_CONCURRENCY`, the invocations Lambda Managed Instances sends one process at
/// once: more than 1 is refused. The redriver's rules are written for one run at a time (the
/// template reserves it a concurrency of 1): one run's rate, its in-flight room and the keep
/// lists are the stack's, and two runs at once would each take them whole. Refused at start-up,
/// where an operator sees why, rather than run sequentially while Lambda counts on several.
pub fn one_run_at_a_time(vars: &Vars<impl Fn(&str) -> Option<String>>) -> Result<(), ConfigError> {
    const VAR: &str = "AWS_LAMBDA_MAX_CONCURRENCY";
    match vars.get(VAR) {
        Some(raw) if raw.trim().parse::<u32>().is_ok_and(|n| n > 1) => Err(ConfigError::Invalid {
            var: VAR,
            value: raw,
            expected: "1: the redriver runs one run at a time (one rate, one in-flight room and the keep lists are the stack's); on Lambda Managed Instances set its PerExecutionEnvironmentMaxConcurrency to 1".into(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq_testing::{REQUIRED_VARS as REQUIRED, vars};

    #[test]
    fn more_than_one_invocation_at_once_is_refused() {
        for ok in [None, Some("1"), Some(" 1 ")] {
            let v: Vec<_> = ok
                .map(|n| ("AWS_LAMBDA_MAX_CONCURRENCY", n))
                .into_iter()
                .collect();
            assert!(one_run_at_a_time(&vars(&v)).is_ok(), "{ok:?}");
        }
        let e = one_run_at_a_time(&vars(&[("AWS_LAMBDA_MAX_CONCURRENCY", "8")])).unwrap_err();
        assert!(
            e.to_string().starts_with("AWS_LAMBDA_MAX_CONCURRENCY=\"8\" is invalid: expected 1: the redriver runs one run at a time"),
            "{e}"
        );
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
    fn redriver_defaults_and_overrides() {
        let c = RedriverConfig::from_vars(&vars(&REQUIRED)).unwrap();
        assert_eq!(c.rate_per_second, 10.0);
        assert_eq!(c.max_messages_per_run, None, "auto");
        assert_eq!(c.kept_in_flight_max, 50_000);
        assert_eq!(c.archive_after, Duration::from_secs(86_400));
        assert_eq!(c.permanent_action, PermanentAction::Keep);
        assert!(c.pause_on_alarms.is_empty());
        assert!(c.pause_consumer_on_alarms.is_empty());
        assert_eq!(c.consumer_mapping, None, "no consumer breaker");
        assert_eq!(c.rate_max, 10.0, "no climb");
        assert_eq!(c.archive_sweep, Duration::from_secs(3600));
        let mut v = REQUIRED.to_vec();
        v.extend([
            ("REDRIVE_RATE_PER_SECOND", "2.5"),
            ("MAX_MESSAGES_PER_RUN", "50"),
            ("KEPT_IN_FLIGHT_MAX", "7"),
            ("ARCHIVE_AFTER_SECONDS", "3600"),
            ("PERMANENT_ACTION", "Archive"),
            ("PAUSE_ON_ALARMS", " replays-failing , ,dlq-depth"),
            (
                "PAUSE_CONSUMER_ON_ALARMS",
                "downstream-failing,consumer-errors",
            ),
            ("CONSUMER_EVENT_SOURCE_MAPPING", " 6f1c2d3e-uuid "),
            ("REDRIVE_RATE_MAX", "200"),
            ("ARCHIVE_SWEEP_SECONDS", "600"),
        ]);
        let c = RedriverConfig::from_vars(&vars(&v)).unwrap();
        assert_eq!(c.rate_per_second, 2.5);
        assert_eq!(c.max_messages_per_run, Some(50));
        assert_eq!(c.kept_in_flight_max, 7);
        assert_eq!(
            c.pause_consumer_on_alarms,
            ["downstream-failing", "consumer-errors"]
        );
        assert_eq!(c.consumer_mapping.as_deref(), Some("6f1c2d3e-uuid"));
        assert_eq!(
            (c.rate_max, c.archive_sweep),
            (200.0, Duration::from_secs(600))
        );
        // a ceiling below the base rate: no climb, not a refusal
        let mut low = REQUIRED.to_vec();
        low.extend([
            ("REDRIVE_RATE_PER_SECOND", "3000"),
            ("REDRIVE_RATE_MAX", "200"),
        ]);
        let no_climb = RedriverConfig::from_vars(&vars(&low)).unwrap();
        assert_eq!(
            (no_climb.rate_per_second, no_climb.rate_max),
            (3000.0, 3000.0)
        );
        for (raw, parsed) in [("auto", None), (" AUTO ", None), ("1", Some(1))] {
            v.retain(|(k, _)| *k != "MAX_MESSAGES_PER_RUN");
            v.push(("MAX_MESSAGES_PER_RUN", raw));
            let c = RedriverConfig::from_vars(&vars(&v)).unwrap();
            assert_eq!(c.max_messages_per_run, parsed, "{raw}");
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
            ("REDRIVE_RATE_MAX", "0"),
            ("REDRIVE_RATE_MAX", "3001"),
            ("ARCHIVE_SWEEP_SECONDS", "59"),
            ("ARCHIVE_SWEEP_SECONDS", "43201"),
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
    fn a_bad_permanent_action_says_what_is_allowed() {
        let mut v = REQUIRED.to_vec();
        v.push(("PERMANENT_ACTION", "delete"));
        let err = RedriverConfig::from_vars(&vars(&v))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "PERMANENT_ACTION=\"delete\" is invalid: expected keep or archive"
        );
    }
}
