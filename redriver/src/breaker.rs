//! The circuit breaker (docs/design.md, "Breaker"), as a decision over the states of the alarms named in
//! `PAUSE_ON_ALARMS`.
//!
//! - **open**: an alarm is in `ALARM`, does not exist, or cannot be read: redrive nothing (the
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
    /// Its evaluation periods, for a metric alarm (the template's hold).
    pub evaluation_periods: Option<u32>,
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
    Open {
        /// Which alarm, or why its state is unknown.
        reason: String,
        /// The pause has lasted longer than the alarm's hold (plus [`PAUSE_SLACK`]), or the
        /// alarm cannot be read: no silent pause may end in a mass archive.
        too_long: bool,
    },
}

/// How much longer than an alarm's hold a pause may last before it is reported as too long:
/// a schedule period of the redriver (the default, five minutes).
pub const PAUSE_SLACK: Duration = Duration::from_secs(300);

/// An alarm in `ALARM` has held it longer than its hold (its evaluation periods) plus
/// [`PAUSE_SLACK`] at `now_ms`: replays or the consumer keep failing, or nothing brings it
/// back. Not known (no change time or period): not too long.
pub fn held_too_long(s: &AlarmState, now_ms: u64) -> bool {
    let (Some(at), Some(period)) = (s.changed_at_ms, s.period) else {
        return false;
    };
    let hold = period * s.evaluation_periods.unwrap_or(1) + PAUSE_SLACK;
    now_ms.saturating_sub(at) > hold.as_millis() as u64
}

/// How long after an alarm leaves `ALARM` runs only probe: as long as it held `ALARM` after the
/// last breach (its evaluation periods: the template's hold, 15 minutes), and at least five of
/// its periods, so that a failing probe's metric reaches it and trips it again, and so that a
/// scheduled run falls inside even when runs are late; 15 minutes when not known.
pub fn probe_window(s: &AlarmState) -> Duration {
    match s.period {
        Some(p) => p * s.evaluation_periods.unwrap_or(1).max(5),
        None => Duration::from_secs(900),
    }
}

/// The probe's size: twice what trips the alarm again (threshold + 1), so that it does even
/// when its failures fall into two of the alarm's periods; 20 when the threshold is unknown.
pub fn probe_budget(threshold: Option<f64>) -> u32 {
    threshold
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map_or(20, |t| {
            (t.floor() as u32).saturating_add(1).saturating_mul(2)
        })
        .max(2)
}

/// The alarm changed state within its [`probe_window`] before `now_ms`.
pub fn recently_changed(s: &AlarmState, now_ms: u64) -> bool {
    s.changed_at_ms
        .is_some_and(|at| now_ms.saturating_sub(at) < probe_window(s).as_millis() as u64)
}

/// The verdict for `names` given what was read of them (`Err`: they could not be read).
pub fn decide(names: &[String], read: Result<&[AlarmState], &str>, now_ms: u64) -> Breaker {
    if names.is_empty() {
        return Breaker::Closed;
    }
    let states = match read {
        Ok(states) => states,
        Err(e) => {
            return Breaker::Open {
                reason: format!("alarm state unknown, not replaying blind: {e}"),
                too_long: true,
            };
        }
    };
    let firing: Vec<&AlarmState> = states
        .iter()
        .filter(|s| names.contains(&s.name) && s.in_alarm)
        .collect();
    if !firing.is_empty() {
        let names: Vec<&str> = firing.iter().map(|s| s.name.as_str()).collect();
        return Breaker::Open {
            reason: format!("alarm in ALARM: {}", names.join(", ")),
            too_long: firing.iter().any(|s| held_too_long(s, now_ms)),
        };
    }
    if let Some(missing) = names.iter().find(|n| !states.iter().any(|s| &s.name == *n)) {
        return Breaker::Open {
            reason: format!(
                "alarm \"{missing}\" named in PAUSE_ON_ALARMS does not exist; not replaying blind"
            ),
            too_long: true,
        };
    }
    // a change out of ALARM, or one that cannot be told apart from it; the smallest probe
    let recent = states
        .iter()
        .filter(|s| names.contains(&s.name) && s.left_alarm != Some(false))
        .filter(|s| recently_changed(s, now_ms))
        .min_by_key(|s| probe_budget(s.threshold));
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
            evaluation_periods: Some(15),
            threshold: Some(10.0),
            left_alarm: Some(!in_alarm),
        }
    }

    #[test]
    fn open_half_open_closed() {
        let names = vec!["replays-failing".to_owned()];
        assert_eq!(decide(&[], Err("x"), NOW), Breaker::Closed);
        // what cannot be read pauses, and says the pause is one to look at
        assert!(
            matches!(decide(&names, Err("AccessDenied"), NOW), Breaker::Open { reason, too_long: true } if reason.contains("AccessDenied"))
        );
        assert!(
            matches!(decide(&names, Ok(&[]), NOW), Breaker::Open { reason, too_long: true } if reason.contains("does not exist"))
        );
        // in ALARM for its hold (15 periods of a minute) and a schedule period: not yet too long
        assert!(matches!(
            decide(&names, Ok(&[state("replays-failing", true, 1200)]), NOW),
            Breaker::Open { reason, too_long: false } if reason.contains("ALARM")
        ));
        assert!(matches!(
            decide(&names, Ok(&[state("replays-failing", true, 1201)]), NOW),
            Breaker::Open { too_long: true, .. }
        ));
        // cleared two minutes ago: a probe of twice threshold + 1
        assert_eq!(
            decide(&names, Ok(&[state("replays-failing", false, 120)]), NOW),
            Breaker::HalfOpen {
                budget: 22,
                reason: "alarm replays-failing cleared recently: replaying a probe".into()
            }
        );
        // long ago (the window is the alarm's hold: 15 periods of a minute)
        assert_eq!(
            decide(&names, Ok(&[state("replays-failing", false, 901)]), NOW),
            Breaker::Closed
        );
        // several cleared: the smallest probe
        let mut low = state("dlq-depth", false, 60);
        low.threshold = Some(1.0);
        let both = vec!["replays-failing".to_owned(), "dlq-depth".to_owned()];
        assert!(matches!(
            decide(&both, Ok(&[state("replays-failing", false, 60), low]), NOW),
            Breaker::HalfOpen { budget: 4, .. }
        ));
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
    fn probes_trip_the_alarm_again_and_windows_cover_the_hold() {
        assert_eq!(probe_budget(Some(10.0)), 22);
        assert_eq!(probe_budget(Some(0.0)), 2);
        assert_eq!(probe_budget(Some(2.5)), 6);
        assert_eq!(probe_budget(None), 20);
        assert_eq!(probe_budget(Some(f64::NAN)), 20);
        let mut s = state("a", false, 0);
        // the template's: 15 periods of a minute
        assert_eq!(probe_window(&s), Duration::from_secs(900));
        s.evaluation_periods = Some(3);
        s.period = Some(Duration::from_secs(10));
        assert_eq!(
            probe_window(&s),
            Duration::from_secs(50),
            "five periods at least"
        );
        s.period = None;
        assert_eq!(probe_window(&s), Duration::from_secs(900));
    }
}
