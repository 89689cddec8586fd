//! The circuit breaker (SPEC §4 step 6), as a decision over the states of the alarms named in
//! `PAUSE_ON_ALARMS`.
//!
//! - **open**: an alarm is in `ALARM`, does not exist, or cannot be read: replay nothing (the
//!   run still archives);
//! - **half-open**: an alarm left `ALARM` a short while ago ([`probe_window`]): replay a
//!   probe of a few messages, as many as can trip the alarm again if they fail (its threshold
//!   plus one), so that a downstream still down costs a handful of replays, not a run's budget;
//! - **closed**: replay with the full budget.

use std::time::Duration;

/// What the breaker reads of one alarm.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmState {
    /// The alarm's name.
    pub name: String,
    /// In `ALARM` (anything else, `OK` or `INSUFFICIENT_DATA`, is not).
    pub in_alarm: bool,
    /// Epoch millis of its last change of state, when known.
    pub changed_at_ms: Option<u64>,
    /// Its period, for a metric alarm.
    pub period: Option<Duration>,
    /// Its threshold, for a metric alarm.
    pub threshold: Option<f64>,
    /// Its last change of state was out of `ALARM` (`Some(false)`: out of
    /// `INSUFFICIENT_DATA`, as a new alarm's first evaluation; `None`: not known).
    pub left_alarm: Option<bool>,
}

/// The breaker's verdict for a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Breaker {
    /// Replay with the full budget.
    Closed,
    /// Replay at most this many messages: an alarm cleared a short while ago.
    HalfOpen {
        /// Replays allowed.
        budget: u32,
        /// Which alarm, for the summary and the logs.
        reason: String,
    },
    /// Replay nothing.
    Open(String),
}

/// How long after an alarm leaves `ALARM` runs only probe: long enough for a failing probe's
/// metric to reach the alarm and trip it again: five of its periods (five minutes for the
/// template's), five minutes when the period is not known.
pub fn probe_window(period: Option<Duration>) -> Duration {
    period.map_or(Duration::from_secs(300), |p| p * 5)
}

/// The probe's size: enough failed replays to trip the alarm again (threshold + 1), 10 when the
/// threshold is unknown.
pub fn probe_budget(threshold: Option<f64>) -> u32 {
    threshold
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map_or(10, |t| (t.floor() as u32).saturating_add(1))
        .max(1)
}

/// The alarm changed state within its [`probe_window`] before `now_ms`.
pub fn recently_changed(s: &AlarmState, now_ms: u64) -> bool {
    s.changed_at_ms
        .is_some_and(|at| now_ms.saturating_sub(at) < probe_window(s.period).as_millis() as u64)
}

/// The verdict for `names` given what was read of them (`Err`: they could not be read).
pub fn decide(names: &[String], read: Result<&[AlarmState], &str>, now_ms: u64) -> Breaker {
    if names.is_empty() {
        return Breaker::Closed;
    }
    let states = match read {
        Ok(states) => states,
        Err(e) => return Breaker::Open(format!("alarm state unknown, not replaying blind: {e}")),
    };
    let firing: Vec<&str> = names
        .iter()
        .filter(|n| states.iter().any(|s| &s.name == *n && s.in_alarm))
        .map(String::as_str)
        .collect();
    if !firing.is_empty() {
        return Breaker::Open(format!("alarm in ALARM: {}", firing.join(", ")));
    }
    if let Some(missing) = names.iter().find(|n| !states.iter().any(|s| &s.name == *n)) {
        return Breaker::Open(format!(
            "alarm {missing:?} named in PAUSE_ON_ALARMS does not exist; not replaying blind"
        ));
    }
    // a change out of ALARM, or one that cannot be told apart from it
    let recent = states
        .iter()
        .filter(|s| names.contains(&s.name) && s.left_alarm != Some(false))
        .find(|s| recently_changed(s, now_ms));
    match recent {
        Some(s) => Breaker::HalfOpen {
            budget: probe_budget(s.threshold),
            reason: format!("alarm {} cleared recently: replaying a probe", s.name),
        },
        None => Breaker::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn state(name: &str, in_alarm: bool, changed_ago_s: u64) -> AlarmState {
        AlarmState {
            name: name.into(),
            in_alarm,
            changed_at_ms: Some(NOW - changed_ago_s * 1000),
            period: Some(Duration::from_secs(60)),
            threshold: Some(10.0),
            left_alarm: Some(!in_alarm),
        }
    }

    #[test]
    fn open_half_open_closed() {
        let names = vec!["replays-failing".to_owned()];
        assert_eq!(decide(&[], Err("x"), NOW), Breaker::Closed);
        assert!(
            matches!(decide(&names, Err("AccessDenied"), NOW), Breaker::Open(r) if r.contains("AccessDenied"))
        );
        assert!(
            matches!(decide(&names, Ok(&[]), NOW), Breaker::Open(r) if r.contains("does not exist"))
        );
        assert!(matches!(
            decide(&names, Ok(&[state("replays-failing", true, 3600)]), NOW),
            Breaker::Open(r) if r.contains("ALARM")
        ));
        // cleared two minutes ago: a probe of threshold + 1
        assert_eq!(
            decide(&names, Ok(&[state("replays-failing", false, 120)]), NOW),
            Breaker::HalfOpen {
                budget: 11,
                reason: "alarm replays-failing cleared recently: replaying a probe".into()
            }
        );
        // long ago (the window is 5 periods, 5 minutes at least)
        assert_eq!(
            decide(&names, Ok(&[state("replays-failing", false, 301)]), NOW),
            Breaker::Closed
        );
        let mut unknown = state("replays-failing", false, 0);
        unknown.changed_at_ms = None;
        assert_eq!(decide(&names, Ok(&[unknown]), NOW), Breaker::Closed);
        // a new alarm's first OK (out of INSUFFICIENT_DATA) is no reason to probe …
        let mut created = state("replays-failing", false, 10);
        created.left_alarm = Some(false);
        assert_eq!(decide(&names, Ok(&[created.clone()]), NOW), Breaker::Closed);
        // … but a change that cannot be told apart from leaving ALARM is
        created.left_alarm = None;
        assert!(matches!(
            decide(&names, Ok(&[created]), NOW),
            Breaker::HalfOpen { .. }
        ));
    }

    #[test]
    fn probes_are_small_and_windows_cover_a_few_periods() {
        assert_eq!(probe_budget(Some(10.0)), 11);
        assert_eq!(probe_budget(Some(0.0)), 1);
        assert_eq!(probe_budget(Some(2.5)), 3);
        assert_eq!(probe_budget(None), 10);
        assert_eq!(probe_budget(Some(f64::NAN)), 10);
        assert_eq!(
            probe_window(Some(Duration::from_secs(10))),
            Duration::from_secs(50)
        );
        assert_eq!(
            probe_window(Some(Duration::from_secs(60))),
            Duration::from_secs(300)
        );
        assert_eq!(
            probe_window(Some(Duration::from_secs(300))),
            Duration::from_secs(1500)
        );
        assert_eq!(probe_window(None), Duration::from_secs(300));
    }
}
