//! The consumer's breaker (docs/design.md, "Consumer breaker"), as a decision over values: the
//! states of the alarms in `PAUSE_CONSUMER_ON_ALARMS`, the consumer's event source mapping, the
//! newest entry of its pause log, and how long the main queue keeps a message. While an alarm is
//! in `ALARM`, orders wait in the main queue instead of burning their receives into the DLQ.
//!
//! - **pause**: an alarm in `ALARM` and the mapping on: record the pause, then disable it;
//! - **probe**: resq's pause and an alarm still in `ALARM` (the downstream-failing alarm keeps its
//!   state while a paused consumer sends no data): every [`probe_every`] the mapping runs for a
//!   [`probe_window`] (counted from Lambda reporting it `Enabled`), then is disabled again. The
//!   records it ran put a data point in the alarm: failing, it stays in `ALARM`; succeeding, it
//!   goes to `OK`, and its OK action (or the next run) resumes. A probe costs the records a
//!   window runs, not the backlog;
//! - **resume**: resq's pause and no alarm in `ALARM`, or the main queue's oldest message near
//!   the end of its retention ([`cap_lead`]), whatever the alarms say;
//! - resq never enables a mapping it did not disable: an operator's pause, or a mapping disabled
//!   with no record of resq's, stays as it is. An alarm that cannot be read never pauses (the
//!   main flow fails open).

use std::time::Duration;

use resq::mapping::Mapping;
use resq::state::{PauseRecord, PauseState, PausedBy};

use crate::breaker::AlarmState;

/// What a run read of the consumer, besides the alarms.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerView {
    /// The mapping, or why it could not be read.
    pub mapping: Result<Mapping, String>,
    /// The newest entry of its pause log (`None`: none), or why it could not be read.
    pub record: Result<Option<PauseRecord>, String>,
    /// The main queue's `MessageRetentionPeriod`, or why it could not be read.
    pub retention: Result<Duration, String>,
    /// The age of the main queue's oldest message now, when CloudWatch told it.
    pub oldest_age: Option<Duration>,
    /// The main queue's visible messages (`ApproximateNumberOfMessages`), when read.
    pub waiting: Option<u64>,
}

/// Who holds the consumer paused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// resq's breaker, since `since` (epoch ms), for `alarms`.
    Resq {
        /// When the pause began.
        since: u64,
        /// The alarms that paused it.
        alarms: Vec<String>,
    },
    /// An operator (`resq consumer pause`), or whoever disabled it with no record of resq's.
    Operator {
        /// The operator's reason, or what is known.
        reason: String,
    },
}

/// Why resq ends its own pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeWhy {
    /// No alarm of `PAUSE_CONSUMER_ON_ALARMS` is in `ALARM`.
    AlarmsCleared,
    /// The main queue's oldest message nears the end of its retention.
    RetentionCap,
    /// The main queue's retention cannot be read: nothing guarantees a pause ends in time.
    RetentionUnknown,
    /// A probe was due and nothing waits in the main queue: it would run nothing, so give
    /// the alarms no data, and the pause (with replay paused behind it) would hold until the
    /// retention cap; a pause of an empty queue protects nothing.
    NothingWaiting,
}

impl ResumeWhy {
    /// In words, for the summary and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AlarmsCleared => "its alarms left ALARM",
            Self::RetentionCap => "the main queue's oldest message nears the end of its retention",
            Self::RetentionUnknown => "the main queue's retention cannot be read",
            Self::NothingWaiting => "nothing waits in the main queue for a probe to run",
        }
    }
}

/// What to do with the consumer's mapping now.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// It runs; nothing to do.
    Running,
    /// It is paused; nothing to do now.
    Held(Holder),
    /// Record `record` (resq's pause), then disable the mapping.
    Pause(PauseRecord),
    /// Enable the mapping, then record `record`.
    Resume(PauseRecord, ResumeWhy),
    /// Record `record` (probing), enable the mapping, let it run `window` once Lambda reports
    /// it enabled, then disable it and record the pause again ([`probe_over`]).
    Probe(PauseRecord, Duration),
    /// Leave it as it is; why (a mapping or a pause log that cannot be read, a mapping being
    /// updated).
    Unknown(String),
}

/// How long a probe lets the consumer run: a twelfth of the alarm's period (5 s for the
/// template's minute, counted from Lambda reporting the mapping `Enabled`), at least a second:
/// enough records for a data point, few enough that a downstream still down costs few attempts
/// (a tenth of an outage's orders at the template's defaults; a sixth cost the soak 1.8 writes
/// an order).
pub fn probe_window(period: Duration) -> Duration {
    (period / 12).max(Duration::from_secs(1))
}

/// How often resq probes a pause whose alarms stay in `ALARM`: every four of the alarm's
/// periods (4 minutes for the template's: each run of its 5-minute schedule), so a probe's
/// data point is evaluated well before the next.
pub fn probe_every(period: Duration) -> Duration {
    period * 4
}

/// The alarm period assumed when none of the firing alarms says (a composite alarm): a minute.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(60);

/// How long before the main queue's retention ends a pause must end: a tenth of the retention,
/// at least 15 minutes, so the consumer receives the oldest messages again (and dead-letters
/// what it cannot run, with its reason) before SQS would delete them.
pub fn cap_lead(retention: Duration) -> Duration {
    (retention / 10).max(Duration::from_secs(900))
}

/// The decision for `mapping_id` at `now_ms`, given the states read of `names` (`Err`: they
/// could not be read) and `view`.
pub fn decide(
    mapping_id: &str,
    names: &[String],
    alarms: Result<&[AlarmState], &str>,
    view: &ConsumerView,
    now_ms: u64,
) -> Verdict {
    let mapping = match &view.mapping {
        Ok(m) => m,
        Err(e) => return Verdict::Unknown(format!("the consumer's mapping cannot be read: {e}")),
    };
    let record = match &view.record {
        Ok(r) => r.as_ref(),
        Err(e) => return Verdict::Unknown(format!("the consumer's pause log cannot be read: {e}")),
    };
    let Some(on) = mapping.state.is_on() else {
        return Verdict::Unknown(format!(
            "the consumer's mapping is {}: left as it is until it settles",
            mapping.state.as_str()
        ));
    };
    // an alarm that cannot be read, or does not exist, never pauses the main flow
    let firing: Vec<&AlarmState> = alarms
        .unwrap_or_default()
        .iter()
        .filter(|s| s.in_alarm && names.contains(&s.name))
        .collect();
    let firing_names: Vec<String> = firing.iter().map(|s| s.name.clone()).collect();
    let period = firing
        .iter()
        .filter_map(|s| s.period)
        .max()
        .unwrap_or(DEFAULT_PERIOD);
    let record_of = |state, by| PauseRecord::new(mapping_id, state, by, now_ms);
    let resq_pause = record.filter(|r| r.by == PausedBy::Resq && r.state != PauseState::Resumed);
    // how old the main queue's oldest message is, at least: CloudWatch's figure, or as long
    // as the pause has held it
    let pause_age = resq_pause
        .and_then(|r| r.since)
        .map(|since| Duration::from_millis(now_ms.saturating_sub(since)));
    let oldest = view.oldest_age.max(pause_age).unwrap_or_default();
    let room = view
        .retention
        .as_ref()
        .ok()
        .map(|r| r.saturating_sub(oldest));
    if let Some(held) = resq_pause {
        let why = match room {
            None => Some(ResumeWhy::RetentionUnknown),
            Some(room) if room <= cap_lead(view.retention.clone().unwrap_or_default()) => {
                Some(ResumeWhy::RetentionCap)
            }
            _ if firing.is_empty() => Some(ResumeWhy::AlarmsCleared),
            _ => None,
        };
        let last_probe = held.last_probe_at.or(held.since).unwrap_or(held.at);
        let probe_due =
            !on && now_ms.saturating_sub(last_probe) >= probe_every(period).as_millis() as u64;
        let why =
            why.or((probe_due && view.waiting == Some(0)).then_some(ResumeWhy::NothingWaiting));
        if let Some(why) = why {
            let mut r = record_of(PauseState::Resumed, PausedBy::Resq);
            (r.since, r.alarms) = (held.since, held.alarms.clone());
            r.reason = Some(why.as_str().to_owned());
            // at the cap, the consumer gets the lead to run (or dead-letter) the oldest
            // messages before a pause may start again: without CloudWatch's figure nothing
            // else would say they are still there
            if why == ResumeWhy::RetentionCap {
                let lead = cap_lead(view.retention.clone().unwrap_or_default());
                r.hold_off_until = Some(now_ms + lead.as_millis() as u64);
            }
            return Verdict::Resume(r, why);
        }
        let since = held.since.unwrap_or(held.at);
        if !on {
            if probe_due {
                let mut r = record_of(PauseState::Probing, PausedBy::Resq);
                (r.since, r.alarms) = (Some(since), firing_names);
                (r.last_probe_at, r.probes) = (Some(now_ms), held.probes + 1);
                return Verdict::Probe(r, probe_window(period));
            }
            return Verdict::Held(Holder::Resq {
                since,
                alarms: held.alarms.clone(),
            });
        }
        // on, with resq's pause or probe on record (a run that ended before it disabled the
        // mapping again, or someone enabled it by hand): the pause goes on
        let mut r = record_of(PauseState::Paused, PausedBy::Resq);
        (r.since, r.alarms) = (Some(since), firing_names);
        (r.last_probe_at, r.probes) = (held.last_probe_at, held.probes);
        return Verdict::Pause(r);
    }
    if !on {
        let reason = match record {
            Some(r) if r.by == PausedBy::Operator && r.state == PauseState::Paused => r
                .reason
                .clone()
                .unwrap_or_else(|| "paused by an operator".to_owned()),
            _ => "disabled outside resq (no pause of resq's on record)".to_owned(),
        };
        return Verdict::Held(Holder::Operator { reason });
    }
    if firing.is_empty() {
        return Verdict::Running;
    }
    // an operator's forced resume holds the breaker off until the alarms have left ALARM once;
    // a resume at the retention cap, for its lead
    if record.is_some_and(|r| r.forced || r.hold_off_until.is_some_and(|t| now_ms < t)) {
        return Verdict::Running;
    }
    // too close to the end of the retention to pause at all (the cap would end it at once)
    let Some(room) = room else {
        return Verdict::Running;
    };
    if room <= cap_lead(view.retention.clone().unwrap_or_default()) * 2 {
        return Verdict::Running;
    }
    let mut r = record_of(PauseState::Paused, PausedBy::Resq);
    (r.since, r.alarms) = (Some(now_ms), firing_names);
    r.reason = Some(format!("alarm in ALARM: {}", r.alarms.join(", ")));
    Verdict::Pause(r)
}

/// The record that ends probe `probing` at `now_ms`: the pause goes on, the probe counted.
pub fn probe_over(probing: &PauseRecord, now_ms: u64) -> PauseRecord {
    let mut r = probing.clone();
    (r.state, r.at) = (PauseState::Paused, now_ms);
    r
}

/// An operator's forced resume that the alarms have left once: the record that lets the
/// breaker pause again, `None` when there is nothing to clear.
pub fn clear_forced(
    mapping_id: &str,
    record: Option<&PauseRecord>,
    firing: bool,
    now_ms: u64,
) -> Option<PauseRecord> {
    let forced = record.filter(|r| r.forced && r.state == PauseState::Resumed)?;
    if firing {
        return None;
    }
    let mut r = PauseRecord::new(mapping_id, PauseState::Resumed, forced.by, now_ms);
    r.reason = Some("the alarms left ALARM after an operator's forced resume".to_owned());
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::mapping::MappingState;

    const NOW: u64 = 1_800_000_000_000;
    const MIN: u64 = 60_000;
    const ID: &str = "esm-1";

    fn names() -> Vec<String> {
        vec![
            "stk-downstream-failing".into(),
            "stk-consumer-errors".into(),
        ]
    }

    fn alarm(name: &str, in_alarm: bool) -> AlarmState {
        AlarmState {
            name: name.into(),
            in_alarm,
            changed_at_ms: Some(NOW - MIN),
            period: Some(Duration::from_secs(60)),
            evaluation_periods: Some(1),
            threshold: Some(50.0),
            left_alarm: None,
        }
    }

    fn view(state: MappingState, record: Option<PauseRecord>) -> ConsumerView {
        ConsumerView {
            mapping: Ok(Mapping {
                uuid: ID.into(),
                state,
                event_source_arn: None,
                function_arn: None,
            }),
            record: Ok(record),
            retention: Ok(Duration::from_secs(345_600)),
            oldest_age: None,
            waiting: Some(1000),
        }
    }

    fn resq_paused(since: u64, last_probe: Option<u64>) -> PauseRecord {
        let mut r = PauseRecord::new(ID, PauseState::Paused, PausedBy::Resq, since);
        r.since = Some(since);
        r.alarms = vec!["stk-downstream-failing".into()];
        r.last_probe_at = last_probe;
        r
    }

    fn down() -> Vec<AlarmState> {
        vec![
            alarm("stk-downstream-failing", true),
            alarm("stk-consumer-errors", false),
        ]
    }

    fn ok() -> Vec<AlarmState> {
        vec![
            alarm("stk-downstream-failing", false),
            alarm("stk-consumer-errors", false),
        ]
    }

    #[test]
    fn an_alarm_in_alarm_pauses_a_running_consumer_and_says_which() {
        let v = view(MappingState::Enabled, None);
        let Verdict::Pause(r) = decide(ID, &names(), Ok(&down()), &v, NOW) else {
            panic!("not paused");
        };
        assert_eq!(
            (r.state, r.by, r.since),
            (PauseState::Paused, PausedBy::Resq, Some(NOW))
        );
        assert_eq!(r.alarms, ["stk-downstream-failing"]);
        // nothing in ALARM: it runs
        assert_eq!(decide(ID, &names(), Ok(&ok()), &v, NOW), Verdict::Running);
        // an alarm not named does not count
        let other = vec![alarm("stk-replays-failing", true)];
        assert_eq!(decide(ID, &names(), Ok(&other), &v, NOW), Verdict::Running);
    }

    #[test]
    fn alarms_that_cannot_be_read_never_pause() {
        let v = view(MappingState::Enabled, None);
        assert_eq!(
            decide(ID, &names(), Err("AccessDenied"), &v, NOW),
            Verdict::Running
        );
        // and resq's own pause then ends: the main flow fails open
        let v = view(MappingState::Disabled, Some(resq_paused(NOW - MIN, None)));
        assert!(matches!(
            decide(ID, &names(), Err("AccessDenied"), &v, NOW),
            Verdict::Resume(_, ResumeWhy::AlarmsCleared)
        ));
    }

    #[test]
    fn resq_resumes_only_its_own_pause() {
        // resq's pause, alarms cleared: resumed, the record naming the pause it ends
        let v = view(
            MappingState::Disabled,
            Some(resq_paused(NOW - 10 * MIN, None)),
        );
        let Verdict::Resume(r, why) = decide(ID, &names(), Ok(&ok()), &v, NOW) else {
            panic!("not resumed");
        };
        assert_eq!(why, ResumeWhy::AlarmsCleared);
        assert_eq!(
            (r.state, r.since),
            (PauseState::Resumed, Some(NOW - 10 * MIN))
        );
        // an operator's pause: held, whatever the alarms say
        let mut op = PauseRecord::new(ID, PauseState::Paused, PausedBy::Operator, NOW - MIN);
        op.reason = Some("deploying the fix".into());
        let v = view(MappingState::Disabled, Some(op));
        for alarms in [ok(), down()] {
            assert_eq!(
                decide(ID, &names(), Ok(&alarms), &v, NOW),
                Verdict::Held(Holder::Operator {
                    reason: "deploying the fix".into()
                })
            );
        }
        // disabled with no record, or after resq's own resume: not resq's to enable
        for record in [
            None,
            Some(PauseRecord::new(
                ID,
                PauseState::Resumed,
                PausedBy::Resq,
                NOW - MIN,
            )),
        ] {
            let v = view(MappingState::Disabled, record);
            assert!(matches!(
                decide(ID, &names(), Ok(&ok()), &v, NOW),
                Verdict::Held(Holder::Operator { reason }) if reason.contains("outside resq")
            ));
        }
    }

    #[test]
    fn a_due_probe_of_an_empty_main_queue_resumes_instead() {
        // GIVEN resq's pause, its alarm still in ALARM, and nothing waiting in the main queue
        // (a crash's messages went to the DLQ, or no orders come in the night)
        let since = NOW - 4 * MIN;
        let mut v = view(MappingState::Disabled, Some(resq_paused(since, None)));
        v.waiting = Some(0);
        // THEN a probe would run nothing and give the alarm no data: resume instead
        let Verdict::Resume(r, why) = decide(ID, &names(), Ok(&down()), &v, NOW) else {
            panic!("no resume");
        };
        assert_eq!(why, ResumeWhy::NothingWaiting);
        assert_eq!((r.state, r.by), (PauseState::Resumed, PausedBy::Resq));
        // BUT before a probe is due the pause holds, and with the depth unknown it probes
        let mut early = view(
            MappingState::Disabled,
            Some(resq_paused(NOW - 3 * MIN, None)),
        );
        early.waiting = Some(0);
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &early, NOW),
            Verdict::Held(_)
        ));
        v.waiting = None;
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Probe(..)
        ));
    }

    #[test]
    fn a_pause_is_probed_every_four_periods_for_a_twelfth_of_one() {
        let since = NOW - 3 * MIN;
        let v = view(MappingState::Disabled, Some(resq_paused(since, None)));
        assert_eq!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Held(Holder::Resq {
                since,
                alarms: vec!["stk-downstream-failing".into()]
            })
        );
        let since = NOW - 4 * MIN;
        let v = view(MappingState::Disabled, Some(resq_paused(since, None)));
        let Verdict::Probe(r, window) = decide(ID, &names(), Ok(&down()), &v, NOW) else {
            panic!("no probe");
        };
        assert_eq!(window, Duration::from_secs(5));
        assert_eq!(
            (r.state, r.since, r.last_probe_at, r.probes),
            (PauseState::Probing, Some(since), Some(NOW), 1)
        );
        // the next probe counts from the last
        let v = view(
            MappingState::Disabled,
            Some(resq_paused(since, Some(NOW - 3 * MIN))),
        );
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Held(_)
        ));
        let over = probe_over(&r, NOW + 10_000);
        assert_eq!(
            (over.state, over.at, over.probes),
            (PauseState::Paused, NOW + 10_000, 1)
        );
        assert_eq!(probe_window(Duration::from_secs(3)), Duration::from_secs(1));
    }

    #[test]
    fn a_probe_or_pause_found_enabled_is_paused_again_or_resumed() {
        let mut probing = resq_paused(NOW - 20 * MIN, Some(NOW - MIN));
        probing.state = PauseState::Probing;
        let v = view(MappingState::Enabled, Some(probing));
        let Verdict::Pause(r) = decide(ID, &names(), Ok(&down()), &v, NOW) else {
            panic!("not paused again");
        };
        assert_eq!(
            (r.since, r.last_probe_at),
            (Some(NOW - 20 * MIN), Some(NOW - MIN))
        );
        assert!(matches!(
            decide(ID, &names(), Ok(&ok()), &v, NOW),
            Verdict::Resume(_, ResumeWhy::AlarmsCleared)
        ));
    }

    #[test]
    fn a_pause_ends_before_the_oldest_message_could_outlive_the_retention() {
        // four days' retention: the lead is a tenth, 9.6 h
        let retention = Duration::from_secs(345_600);
        assert_eq!(cap_lead(retention), Duration::from_secs(34_560));
        assert_eq!(cap_lead(Duration::from_secs(600)), Duration::from_secs(900));
        // CloudWatch says the oldest is 86 h old: 10 h of room, more than the lead
        let mut v = view(
            MappingState::Disabled,
            Some(resq_paused(NOW - 60 * MIN, None)),
        );
        v.oldest_age = Some(Duration::from_secs(86 * 3600));
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Held(_) | Verdict::Probe(..)
        ));
        // 87 h: 9 h of room, within the lead: resumed whatever the alarms say
        v.oldest_age = Some(Duration::from_secs(87 * 3600));
        let Verdict::Resume(resumed, ResumeWhy::RetentionCap) =
            decide(ID, &names(), Ok(&down()), &v, NOW)
        else {
            panic!("not resumed at the cap");
        };
        // and no pause starts again for the lead, though the alarm holds and, without
        // CloudWatch's figure, nothing says the oldest are still there
        let lead_ms = 34_560_000;
        let after = view(MappingState::Enabled, Some(resumed));
        assert_eq!(
            decide(ID, &names(), Ok(&down()), &after, NOW + lead_ms - 1),
            Verdict::Running
        );
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &after, NOW + lead_ms),
            Verdict::Pause(_)
        ));
        // without CloudWatch's figure the pause's own length counts
        v.oldest_age = None;
        v.record = Ok(Some(resq_paused(NOW - 87 * 3600 * 1000, None)));
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Resume(_, ResumeWhy::RetentionCap)
        ));
        // and no pause starts within twice the lead of the end (it would end at once)
        let mut v = view(MappingState::Enabled, None);
        v.oldest_age = Some(Duration::from_secs(77 * 3600));
        assert_eq!(decide(ID, &names(), Ok(&down()), &v, NOW), Verdict::Running);
        v.oldest_age = Some(Duration::from_secs(75 * 3600));
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Pause(_)
        ));
        // a retention that cannot be read: no pause starts, resq's own ends
        v.retention = Err("AccessDenied".into());
        assert_eq!(decide(ID, &names(), Ok(&down()), &v, NOW), Verdict::Running);
        v.mapping = Ok(Mapping {
            state: MappingState::Disabled,
            ..v.mapping.clone().unwrap()
        });
        v.record = Ok(Some(resq_paused(NOW - MIN, None)));
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Resume(_, ResumeWhy::RetentionUnknown)
        ));
    }

    #[test]
    fn what_cannot_be_read_or_is_settling_is_left_as_it_is() {
        let mut v = view(MappingState::Enabled, None);
        v.mapping = Err("ResourceNotFoundException".into());
        assert!(
            matches!(decide(ID, &names(), Ok(&down()), &v, NOW), Verdict::Unknown(e) if e.contains("ResourceNotFound"))
        );
        let mut v = view(MappingState::Enabled, None);
        v.record = Err("AccessDenied".into());
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Unknown(_)
        ));
        let v = view(MappingState::Other("Updating".into()), None);
        assert!(
            matches!(decide(ID, &names(), Ok(&down()), &v, NOW), Verdict::Unknown(e) if e.contains("Updating"))
        );
    }

    #[test]
    fn an_operators_forced_resume_holds_the_breaker_off_until_the_alarms_leave_alarm() {
        let mut forced = PauseRecord::new(ID, PauseState::Resumed, PausedBy::Operator, NOW - MIN);
        forced.forced = true;
        let v = view(MappingState::Enabled, Some(forced.clone()));
        assert_eq!(decide(ID, &names(), Ok(&down()), &v, NOW), Verdict::Running);
        assert_eq!(clear_forced(ID, Some(&forced), true, NOW), None);
        let cleared = clear_forced(ID, Some(&forced), false, NOW).unwrap();
        assert!(!cleared.forced);
        let v = view(MappingState::Enabled, Some(cleared));
        assert!(matches!(
            decide(ID, &names(), Ok(&down()), &v, NOW),
            Verdict::Pause(_)
        ));
        assert_eq!(clear_forced(ID, None, false, NOW), None);
    }
}
