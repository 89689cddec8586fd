//! What the soak's outage phase measures, as values: the samples of the pipeline it takes every
//! second, the timeline of what the alarms and the redriver did, the outage's profile (requests by
//! action, invocations: what the bench's cost model reads) and the figures of the `soak:` line.
//! No I/O here but writing the files; the phase itself is in [`super`].

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::CliError;

/// The pipeline at one moment of the outage or its recovery.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Seconds since the outage began.
    pub at: f64,
    /// Messages in the main queue, visible and in flight.
    pub main_queue: u64,
    /// Messages in the DLQ, visible and in flight, less the permanent failures the redriver
    /// keeps hidden there until their TTL: what waits for replay.
    pub dlq: u64,
    /// The downstream-failing alarm's state (`OK`, `ALARM`, `INSUFFICIENT_DATA`), when read.
    pub alarm: Option<String>,
    /// The consumer's event source mapping is disabled, when read.
    pub consumer_paused: Option<bool>,
    /// Replays sent into the main queue per second since the sample before.
    pub replay_rate: f64,
}

/// One thing that happened, seconds after the outage began.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Seconds since the outage began (negative: before it).
    pub at: f64,
    /// What happened.
    pub what: String,
}

/// What happened during the outage and its recovery, in order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timeline {
    /// The events, by time.
    pub events: Vec<Event>,
}

impl Timeline {
    /// Adds `what` at `at` (an instant; `origin`: when the outage began).
    pub fn add(&mut self, origin: Instant, at: Instant, what: impl Into<String>) {
        self.events.push(Event {
            at: seconds_between(origin, at),
            what: what.into(),
        });
    }

    /// The events sorted by time (stable: same-time events keep their order).
    pub fn sorted(mut self) -> Self {
        self.events.sort_by(|a, b| a.at.total_cmp(&b.at));
        self
    }

    /// One line per event, for the run's output.
    pub fn lines(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|e| format!("{:>+7.1} s  {}", e.at, e.what))
            .collect()
    }
}

/// Seconds from `origin` to `at`, negative when `at` came first.
pub fn seconds_between(origin: Instant, at: Instant) -> f64 {
    match at.checked_duration_since(origin) {
        Some(d) => d.as_secs_f64(),
        None => -origin.saturating_duration_since(at).as_secs_f64(),
    }
}

/// The event a redriver summary's `consumer` field is worth on the timeline: a pause, a
/// probe, a resume, a failed action; `None` for a pause that merely goes on (or nothing).
pub fn consumer_event(consumer: Option<&str>) -> Option<String> {
    let c = consumer?;
    let notable = c.starts_with("alarm in ALARM")
        || c.starts_with("probed")
        || c.starts_with("resumed")
        || c.starts_with("could not act")
        || c.starts_with("paused by hand");
    notable.then(|| c.to_owned())
}

/// The outage as the bench's cost model reads it (`bench/outage-profile.json`): the requests
/// the functions made, by action, and their invocations, from the outage's start until the
/// pipeline drained. `requests` are the functions' own calls; `pollerRequests` are those of
/// the local stand-in for Lambda's SQS poller, which long-polls 1 s where Lambda's pollers wait
/// up to 20 s, and does not poll at all while the mapping is disabled.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    /// Orders sent per second during the outage.
    pub orders_per_second: f64,
    /// From the downstream failing to the fix, seconds.
    pub outage_seconds: f64,
    /// Orders sent during the outage.
    pub orders: u64,
    /// The functions' requests by action (`sqs:ReceiveMessage`, `s3:PutObject`, …).
    pub requests: BTreeMap<String, u64>,
    /// Consumer invocations.
    pub consumer_invocations: u64,
    /// Their total duration, ms.
    pub consumer_millis: u64,
    /// Redriver invocations (scheduled and by alarm actions).
    pub redriver_invocations: u64,
    /// Their total duration, ms.
    pub redriver_millis: u64,
    /// Copies sent to the DLQ.
    pub dead_lettered: u64,
    /// Replays sent to the main queue.
    pub replayed: u64,
    /// The local poller's requests by action.
    pub poller_requests: BTreeMap<String, u64>,
    /// From the fix until the queues held no replayable order, seconds.
    pub recovery_seconds: Option<f64>,
}

/// What grew between two snapshots of counters by key (keys that did not grow are left out).
pub fn grown<K: Ord + Clone>(
    before: &BTreeMap<K, u64>,
    after: &BTreeMap<K, u64>,
) -> BTreeMap<K, u64> {
    after
        .iter()
        .filter_map(|(k, n)| {
            let d = n.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// `part` of `whole` in percent (0 for nothing of nothing).
pub fn percent(part: usize, whole: usize) -> f64 {
    match whole {
        0 => 0.0,
        w => part as f64 * 100.0 / w as f64,
    }
}

/// From the fix until the queues drained, over the outage's length; `None` when they did not
/// drain.
pub fn recovery_ratio(outage: Duration, recovery: Option<Duration>) -> Option<f64> {
    let r = recovery?;
    (outage > Duration::ZERO).then(|| r.as_secs_f64() / outage.as_secs_f64())
}

/// Writes `value` as pretty JSON to `path`, making its directory.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), CliError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_counts_from_the_outage_and_keeps_order() {
        let origin = Instant::now() + Duration::from_secs(10);
        let mut t = Timeline::default();
        t.add(origin, origin + Duration::from_millis(12_500), "fix");
        t.add(origin, origin - Duration::from_secs(2), "before");
        t.add(origin, origin, "outage begins");
        let t = t.sorted();
        let at: Vec<f64> = t.events.iter().map(|e| e.at).collect();
        assert_eq!(at, [-2.0, 0.0, 12.5]);
        assert_eq!(t.lines()[2], "  +12.5 s  fix");
    }

    #[test]
    fn only_a_pause_a_probe_a_resume_or_a_failure_makes_the_timeline() {
        for (consumer, kept) in [
            (Some("alarm in ALARM: stk-downstream-failing"), true),
            (Some("probed (probe 2)"), true),
            (Some("resumed: its alarms left ALARM"), true),
            (
                Some("could not act on the consumer's mapping: timeout"),
                true,
            ),
            (Some("paused by resq (stk-downstream-failing)"), false),
            (None, false),
        ] {
            assert_eq!(consumer_event(consumer).is_some(), kept, "{consumer:?}");
        }
    }

    #[test]
    fn what_grew_between_snapshots() {
        let before = BTreeMap::from([("a", 3), ("b", 5)]);
        let after = BTreeMap::from([("a", 3), ("b", 9), ("c", 1)]);
        assert_eq!(grown(&before, &after), BTreeMap::from([("b", 4), ("c", 1)]));
    }

    #[test]
    fn figures_of_the_soak_line() {
        assert_eq!(percent(0, 0), 0.0);
        assert_eq!(percent(1, 8), 12.5);
        let outage = Duration::from_secs(120);
        assert_eq!(
            recovery_ratio(outage, Some(Duration::from_secs(90))),
            Some(0.75)
        );
        assert_eq!(recovery_ratio(outage, None), None);
    }

    #[test]
    fn the_profile_is_written_with_the_schemas_names() {
        let p = Profile {
            orders_per_second: 10.0,
            outage_seconds: 120.0,
            orders: 1200,
            requests: BTreeMap::from([("sqs:ReceiveMessage".to_owned(), 7)]),
            consumer_invocations: 3,
            consumer_millis: 40,
            redriver_invocations: 2,
            redriver_millis: 900,
            dead_lettered: 1,
            replayed: 1,
            poller_requests: BTreeMap::new(),
            recovery_seconds: Some(30.0),
        };
        let v = serde_json::to_value(&p).unwrap();
        for key in [
            "ordersPerSecond",
            "outageSeconds",
            "orders",
            "requests",
            "consumerInvocations",
            "consumerMillis",
            "redriverInvocations",
            "redriverMillis",
            "deadLettered",
            "replayed",
        ] {
            assert!(v.get(key).is_some(), "{key}: {v}");
        }
        assert_eq!(v["requests"]["sqs:ReceiveMessage"], 7);
    }
}
