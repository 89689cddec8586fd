//! A run's summary (docs/design.md, "Run summary"), counted by [`crate::run::Run`] from its
//! plans and what the settle executor reported, its log line and its metrics.

use std::collections::BTreeMap;

use resq::metrics::{self, Metrics};
use resq::reason::ArchiveReason;
use serde::{Deserialize, Serialize};

/// Messages replayed from the DLQ.
pub const REDRIVEN: &str = "Redriven";
/// DLQ messages left in place (permanent failures kept for a human).
pub const REDRIVE_SKIPPED: &str = "RedriveSkipped";
/// DLQ messages whose replay did not complete (left in the DLQ).
pub const REDRIVE_FAILED: &str = "RedriveFailed";
/// 1 for a redriver run the circuit breaker paused (it archived but replayed nothing), else 0.
pub const REDRIVE_PAUSED: &str = "RedrivePaused";
/// Kept permanent failures hidden in the DLQ now (a gauge, one value per redriver run): DLQ
/// depth less this is what waits for replay.
pub const KEPT: &str = "Kept";
/// Dead letters that reached the DLQ without `x-failure-class` (SQS moved them after
/// invocations that crashed or timed out), counted once by the redriver, the first time it
/// sees each; the replays-failing alarm counts them as failed replays.
pub const DEAD_LETTERED_UNEXPLAINED: &str = "DeadLetteredUnexplained";
/// 1 for a redriver run whose replay has been paused longer than the pausing alarm's hold, or
/// paused by an alarm it cannot read; else 0.
pub const REDRIVE_PAUSED_TOO_LONG: &str = "RedrivePausedTooLong";
/// 1 for a run that could not read the keep lists (in time): it hid no kept message, so the
/// kept ones it received stay visible and are read again by later runs; else 0.
pub const KEEP_LISTS_UNREAD: &str = "KeepListsUnread";

/// 1 for a run that found the consumer's event source mapping disabled (paused by resq or by
/// hand) or disabled it, else 0; only with a consumer breaker.
pub const CONSUMER_PAUSED: &str = "ConsumerPaused";

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The DLQ had nothing more to receive.
    Empty,
    /// A dry run's `maxMessages` were counted (a run that changes things reads on, to archive,
    /// as long as a sweep is due and, for an operator's run, its brief hold allows).
    MaxMessages,
    /// The Lambda deadline margin was reached.
    Deadline,
    /// `ReceiveMessage` failed.
    ReceiveError,
    /// The messages the run holds hidden (with the kept ones) reached its in-flight limit:
    /// SQS hands out nothing past its in-flight quota, so the run stops receiving before it.
    InFlightLimit,
    /// An operator interrupted the run (Ctrl-C, SIGTERM): it ended what was under way and
    /// released what it held.
    Interrupted,
}

impl StopReason {
    /// Its name in the summary (`empty`, `maxMessages`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Empty => "empty",
            StopReason::MaxMessages => "maxMessages",
            StopReason::Deadline => "deadline",
            StopReason::ReceiveError => "receiveError",
            StopReason::InFlightLimit => "inFlightLimit",
            StopReason::Interrupted => "interrupted",
        }
    }
}

/// What a run did (in a dry run: what it would have done).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Nothing was changed.
    pub dry_run: bool,
    /// The circuit breaker held replay (at the start or during the run).
    pub paused: bool,
    /// Which alarm, or why its state is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_reason: Option<String>,
    /// An alarm of the breaker cleared a short while ago: this run replayed at most this many
    /// (a probe), not its full budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<u32>,
    /// Messages received from the DLQ.
    pub received: u64,
    /// Copies confirmed in the main queue (their DLQ message deleted or being deleted).
    pub redriven: u64,
    /// The message groups (tenants; messages without a group are one) those replays were of:
    /// a run shares its budget round-robin across the groups it holds.
    #[serde(default)]
    pub groups_served: u64,
    /// Archive entries written, by reason.
    pub archived: BTreeMap<ArchiveReason, u64>,
    /// Left in the DLQ on purpose: permanent failures kept, messages outside the selection,
    /// replays held by the breaker or behind a failed send of their FIFO group.
    pub skipped: u64,
    /// Of those, permanent failures kept for a human (hidden until their TTL, see `resq dlq
    /// peek --kept`).
    pub kept: u64,
    /// Kept messages made visible again for this run (a selective run by reason; a dry run
    /// counts those it would bring back, and changes nothing).
    pub unhidden: u64,
    /// Not moved because a send or archive write failed or was not confirmed: still in the
    /// DLQ.
    pub failed: u64,
    /// Replays that had failed again (`x-redrive-count` ≥ 1) and that this run moved on
    /// (replayed again or archived): each counted by the run that moves it.
    pub returned: u64,
    /// Moved, but the DLQ delete failed. A replayed one is made visible again at once: when
    /// this run receives it again it only deletes it; one a later run receives is sent again
    /// (a FIFO main queue deduplicates that within its 5-minute interval; the consumer is
    /// idempotent by orderId in any case). An archived one finds its entry.
    pub delete_failed: u64,
    /// Dead letters without a reason (`x-failure-class`) this run saw first: moved, or given
    /// their reason (`DeadLetteredUnexplained`).
    #[serde(default)]
    pub unexplained: u64,
    /// Kept permanent failures hidden in the DLQ at the end of the run (`Kept`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_in_flight: Option<u64>,
    /// Replay has been paused longer than the pausing alarm's hold, or by an alarm that could
    /// not be read (`RedrivePausedTooLong`).
    #[serde(default)]
    pub paused_too_long: bool,
    /// The keep lists could not be read (in time): hiding stopped for this run
    /// (`KeepListsUnread`).
    #[serde(default)]
    pub keep_lists_unread: bool,
    /// Wall time of the run.
    pub elapsed_ms: u64,
    /// The configured rate.
    pub rate_per_second: f64,
    /// Replays per second between sends: the messages confirmed after the first send, over the
    /// time from the first send to the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub achieved_rate_per_second: Option<f64>,
    /// The mean rate the run paced replays at over the same span (the configured rate, or the
    /// rates it climbed through): what the achieved rate is measured against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced_rate_per_second: Option<f64>,
    /// Why the run ended.
    pub stopped_by: StopReason,
    /// The consumer's event source mapping is paused (disabled, by resq or by hand) at the end
    /// of the run; absent without a consumer breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_paused: Option<bool>,
    /// What the consumer's breaker did or found, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The highest rate the run climbed to (from the configured rate, towards
    /// `REDRIVE_RATE_MAX`), when it climbed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramped_to: Option<f64>,
    /// The run read the DLQ through to its end (and noted it: the next archive sweep is due
    /// `ARCHIVE_SWEEP_SECONDS` later).
    #[serde(default)]
    pub swept: bool,
    /// The fewest cycles (receive, then copies and deletes) the run kept in flight, when SQS's
    /// answers (timeouts, throttling, rising latency) lowered them below what the rate needs;
    /// absent when they never did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_in_flight_lowest: Option<usize>,
}

impl Summary {
    /// A run's summary before it did anything: a dry run or not, at `rate_per_second`.
    pub fn new(dry_run: bool, rate_per_second: f64) -> Self {
        Self {
            dry_run,
            paused: false,
            pause_reason: None,
            probe: None,
            received: 0,
            redriven: 0,
            groups_served: 0,
            archived: BTreeMap::new(),
            skipped: 0,
            kept: 0,
            unhidden: 0,
            failed: 0,
            returned: 0,
            delete_failed: 0,
            unexplained: 0,
            kept_in_flight: None,
            paused_too_long: false,
            keep_lists_unread: false,
            elapsed_ms: 0,
            rate_per_second,
            achieved_rate_per_second: None,
            paced_rate_per_second: None,
            stopped_by: StopReason::Empty,
            consumer_paused: None,
            consumer: None,
            ramped_to: None,
            swept: false,
            cycles_in_flight_lowest: None,
        }
    }

    /// Logs the summary: one INFO line `redrive run done` whose fields are the summary's, each
    /// a top-level key in the logs' one key style, snake_case (`received`, `delete_failed`, …;
    /// the returned summary, an API, keeps its camelCase), the archive entries by reason as
    /// `archived_{reason}` in lowercase (`archived_ttl_expired`; the reasons with entries only),
    /// so Logs Insights filters and sums on them. (tracing's JSON lines write no nested object
    /// without its unstable `valuable` support, and a JSON string cannot be filtered on.)
    pub fn log(&self) {
        let archived = |reason: ArchiveReason| self.archived.get(&reason).copied();
        tracing::info!(
            dry_run = self.dry_run,
            paused = self.paused,
            pause_reason = self.pause_reason.as_deref(),
            probe = self.probe,
            received = self.received,
            redriven = self.redriven,
            groups_served = self.groups_served,
            archived_redrive_cap = archived(ArchiveReason::RedriveCap),
            archived_invalid_redrive_count = archived(ArchiveReason::InvalidRedriveCount),
            archived_ttl_expired = archived(ArchiveReason::TtlExpired),
            archived_attribute_limit = archived(ArchiveReason::AttributeLimit),
            archived_permanent_failure = archived(ArchiveReason::PermanentFailure),
            archived_size_limit = archived(ArchiveReason::SizeLimit),
            archived_idempotency_window = archived(ArchiveReason::IdempotencyWindow),
            archived_unreadable_record = archived(ArchiveReason::UnreadableRecord),
            skipped = self.skipped,
            kept = self.kept,
            unhidden = self.unhidden,
            failed = self.failed,
            returned = self.returned,
            delete_failed = self.delete_failed,
            unexplained = self.unexplained,
            kept_in_flight = self.kept_in_flight,
            paused_too_long = self.paused_too_long,
            keep_lists_unread = self.keep_lists_unread,
            elapsed_ms = self.elapsed_ms,
            rate_per_second = self.rate_per_second,
            achieved_rate_per_second = self.achieved_rate_per_second,
            paced_rate_per_second = self.paced_rate_per_second,
            stopped_by = self.stopped_by.as_str(),
            consumer_paused = self.consumer_paused,
            consumer = self.consumer.as_deref(),
            ramped_to = self.ramped_to,
            swept = self.swept,
            cycles_in_flight_lowest = self.cycles_in_flight_lowest,
            "redrive run done"
        );
    }

    /// The run's metrics.
    pub fn metrics(&self) -> Metrics {
        let names = [
            REDRIVEN,
            REDRIVE_SKIPPED,
            REDRIVE_FAILED,
            REDRIVE_PAUSED,
            metrics::ARCHIVED,
            DEAD_LETTERED_UNEXPLAINED,
            REDRIVE_PAUSED_TOO_LONG,
            KEEP_LISTS_UNREAD,
        ];
        let mut m = Metrics::new(&names);
        m.add(REDRIVEN, self.redriven);
        m.add(REDRIVE_SKIPPED, self.skipped);
        m.add(REDRIVE_FAILED, self.failed);
        m.add(REDRIVE_PAUSED, u64::from(self.paused));
        m.add(DEAD_LETTERED_UNEXPLAINED, self.unexplained);
        m.add(REDRIVE_PAUSED_TOO_LONG, u64::from(self.paused_too_long));
        m.add(KEEP_LISTS_UNREAD, u64::from(self.keep_lists_unread));
        if let Some(kept) = self.kept_in_flight {
            m.add(KEPT, kept);
        }
        if let Some(paused) = self.consumer_paused {
            m.add(CONSUMER_PAUSED, u64::from(paused));
        }
        for (reason, n) in &self.archived {
            m.add_archived(*reason, *n);
        }
        m
    }
}

/// One replay a run confirmed, as an operator's canary follows it
/// ([`crate::Redriver::run_listed`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replayed {
    /// The DLQ message replayed.
    pub dlq_message_id: String,
    /// The copy's id in the main queue, when SQS gave it.
    pub message_id: Option<String>,
    /// The body's `orderId`, when it has one.
    pub order_id: Option<String>,
    /// The copy's `x-redrive-count`.
    pub redrive_count: Option<u64>,
    /// The failure reason the DLQ message had.
    pub failure_reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq_testing::CapturedLogs;
    use serde_json::Value;

    /// A summary with every field set, every archive reason counted.
    fn full() -> Summary {
        Summary {
            dry_run: false,
            paused: true,
            pause_reason: Some("replays-failing is in ALARM".into()),
            probe: Some(10),
            received: 120,
            redriven: 40,
            groups_served: 3,
            archived: ArchiveReason::ALL
                .into_iter()
                .zip(1..)
                .collect::<BTreeMap<_, _>>(),
            skipped: 30,
            kept: 20,
            unhidden: 2,
            failed: 3,
            returned: 4,
            delete_failed: 5,
            unexplained: 6,
            kept_in_flight: Some(700),
            paused_too_long: true,
            keep_lists_unread: true,
            elapsed_ms: 8_123,
            rate_per_second: 10.0,
            achieved_rate_per_second: Some(9.75),
            paced_rate_per_second: Some(10.0),
            stopped_by: StopReason::InFlightLimit,
            consumer_paused: Some(true),
            consumer: Some("paused by resq (stk-downstream-failing)".into()),
            ramped_to: Some(120.0),
            swept: true,
            cycles_in_flight_lowest: Some(5),
        }
    }

    /// The `redrive run done` line `summary` logs, parsed.
    fn logged(summary: &Summary) -> serde_json::Map<String, Value> {
        let (logs, _guard) = CapturedLogs::start();
        summary.log();
        let mut lines = logs.with_message("redrive run done");
        assert_eq!(lines.len(), 1, "{:?}", logs.lines());
        match lines.pop() {
            Some(Value::Object(line)) => line,
            other => panic!("{other:?}"),
        }
    }

    /// `dryRun` → `dry_run`.
    fn snake_case(camel: &str) -> String {
        let mut out = String::new();
        for c in camel.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    }

    /// Every field of the returned summary is a field of the line, under the same name in
    /// snake_case with the same value (`archived` by reason as `archived_{reason}`), and the
    /// line has nothing else but its level, time, message and the process's keys.
    fn assert_logged_as_returned(summary: &Summary) {
        let line = logged(summary);
        let Value::Object(returned) = serde_json::to_value(summary).unwrap() else {
            panic!("a summary is an object");
        };
        let mut expected = serde_json::Map::new();
        for (key, value) in returned {
            match (key.as_str(), value) {
                ("archived", Value::Object(by_reason)) => {
                    for (reason, n) in by_reason {
                        expected.insert(format!("archived_{}", reason.to_lowercase()), n);
                    }
                }
                (_, value) => _ = expected.insert(snake_case(&key), value),
            }
        }
        let mut fields = line.clone();
        for meta in [
            "timestamp",
            "level",
            "message",
            "service",
            "function_name",
            "function_memory_size",
        ] {
            assert!(fields.remove(meta).is_some(), "{meta} in {line:?}");
        }
        assert_eq!(fields, expected);
    }

    #[test]
    fn the_summary_is_logged_as_fields_named_as_it_is_returned() {
        let summary = full();
        assert_logged_as_returned(&summary);
        let line = logged(&summary);
        // numbers are numbers (Logs Insights filters and sums them), not a JSON string
        assert_eq!(line["received"], 120);
        assert_eq!(line["archived_ttl_expired"], 3);
        assert_eq!(line["achieved_rate_per_second"], 9.75);
        assert_eq!(line["stopped_by"], "inFlightLimit");
        assert!(!line.contains_key("summary"), "{line:?}");
        // a quiet run: no reason archived, nothing unknown
        let quiet = Summary {
            paused: false,
            pause_reason: None,
            probe: None,
            archived: BTreeMap::new(),
            kept_in_flight: None,
            achieved_rate_per_second: None,
            ..full()
        };
        assert_logged_as_returned(&quiet);
        let line = logged(&quiet);
        assert!(!line.keys().any(|k| k.starts_with("archived")), "{line:?}");
    }

    #[test]
    fn every_stop_reason_is_logged_as_it_is_returned() {
        for stopped_by in [
            StopReason::Empty,
            StopReason::MaxMessages,
            StopReason::Deadline,
            StopReason::ReceiveError,
            StopReason::InFlightLimit,
            StopReason::Interrupted,
        ] {
            assert_eq!(
                serde_json::to_value(stopped_by).unwrap(),
                stopped_by.as_str()
            );
        }
    }
}
