//! The retry budget (docs/design.md, "Retry budget"): so that retries never multiply the load
//! on a struggling downstream, an execution environment lets main-queue redeliveries fail, over
//! any minute, at most `RETRY_BUDGET_PERCENT` of the first deliveries it ran in that minute, plus
//! [`FLOOR_PER_MINUTE`]; past that it runs no redelivery until the minute's failures have aged
//! out. A redelivery spends the budget when it fails, not when it starts: one that succeeds put
//! no extra load on a struggling downstream (as gRPC's retry throttling credits successes), so
//! after recovery a backlog of redeliveries (what the consumer breaker's probes and a crash
//! leave behind) drains at the consumer's speed instead of 10 a minute. Redeliveries already in
//! flight when the budget runs out still finish: it is exceeded by at most the records in flight.
//! A state machine over values: handed each record about to run, each failed redelivery and the
//! time, it says whether a record may run. No clock, no I/O; the engine holds one across
//! invocations.

use resq::attributes::RedriveCount;

use crate::event::Record;

/// Redeliveries that may fail in a minute whatever the first deliveries: a quiet queue's few
/// retries still run.
pub const FLOOR_PER_MINUTE: u64 = 10;

/// The sliding window, in one-second buckets.
const WINDOW_SECONDS: u64 = 60;

/// What a record about to run is to the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Its first receive from the main queue (`ApproximateReceiveCount` 1): earns budget.
    First,
    /// A main-queue redelivery (`ApproximateReceiveCount` > 1): runs only within the budget,
    /// and spends it when it fails.
    Redelivery,
    /// A replay (`x-redrive-count` ≥ 1), on any receive: the redriver paces replays, so the
    /// budget never refuses one and counts it as neither (its traffic earns no retries for the
    /// main queue, and its failures spend none of theirs).
    Replay,
}

impl Delivery {
    /// What `record` is to the budget.
    pub fn of(record: &Record) -> Self {
        match record.redrive_count {
            RedriveCount::Count(n) if n >= 1 => Delivery::Replay,
            _ if record.receive_count > 1 => Delivery::Redelivery,
            _ => Delivery::First,
        }
    }
}

/// Whether one more redelivery may run, with `first` first deliveries run and `failed`
/// redeliveries failed in the last minute: while the failures stay under the floor plus
/// `percent` % of the first deliveries.
pub fn allows(percent: u32, first: u64, failed: u64) -> bool {
    failed * 100 < FLOOR_PER_MINUTE * 100 + first * u64::from(percent)
}

/// One second's counts.
#[derive(Debug, Clone, Copy, Default)]
struct Second {
    /// Seconds since the epoch.
    at: u64,
    first: u64,
    failed: u64,
}

/// One execution environment's retry budget: what ran and failed in the last minute, by second
/// (a ring of 60, so its memory is bounded whatever the traffic).
#[derive(Debug, Clone)]
pub struct RetryBudget {
    /// `RETRY_BUDGET_PERCENT`; `None`: off, every record runs.
    percent: Option<u32>,
    seconds: [Second; WINDOW_SECONDS as usize],
}

impl RetryBudget {
    /// An empty budget of `percent` (`RETRY_BUDGET_PERCENT`; `None`: off).
    pub fn new(percent: Option<u32>) -> Self {
        Self {
            percent,
            seconds: [Second::default(); WINDOW_SECONDS as usize],
        }
    }

    /// Whether a record of `delivery` may start running at `now_ms` (epoch millis): a first
    /// delivery earns budget as it starts; a redelivery runs while the minute's failed
    /// redeliveries are within the budget.
    pub fn admit(&mut self, delivery: Delivery, now_ms: u64) -> bool {
        let Some(percent) = self.percent else {
            return true;
        };
        match delivery {
            Delivery::Replay => true,
            Delivery::First => {
                self.second(now_ms).first += 1;
                true
            }
            Delivery::Redelivery => {
                let (first, failed) = self.last_minute(now_ms);
                allows(percent, first, failed)
            }
        }
    }

    /// A record of `delivery` that ran failed at `now_ms`: a redelivery spends the budget.
    pub fn failed(&mut self, delivery: Delivery, now_ms: u64) {
        if self.percent.is_some() && delivery == Delivery::Redelivery {
            self.second(now_ms).failed += 1;
        }
    }

    /// The bucket of `now_ms`'s second, emptied first if it still held a second a minute or
    /// more ago.
    fn second(&mut self, now_ms: u64) -> &mut Second {
        let at = now_ms / 1000;
        let second = &mut self.seconds[(at % WINDOW_SECONDS) as usize];
        if second.at != at {
            *second = Second {
                at,
                ..Second::default()
            };
        }
        second
    }

    /// First deliveries run and redeliveries failed in the minute up to `now_ms` (this second
    /// and the 59 before it). A second later than now (the clock was set back) is not counted.
    fn last_minute(&self, now_ms: u64) -> (u64, u64) {
        let now = now_ms / 1000;
        let recent = self
            .seconds
            .iter()
            .filter(|s| s.at <= now && now - s.at < WINDOW_SECONDS);
        recent.fold((0, 0), |(f, r), s| (f + s.first, r + s.failed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{parse_event, rec};
    use serde_json::json;

    /// Some time on 14 November 2023, in epoch millis.
    const T0: u64 = 1_700_000_000_000;
    const SECOND: u64 = 1000;

    /// How many of `n` (at most 1000) redeliveries, one a millisecond from `at`, each failing
    /// as it ends (the downstream still down), the budget runs.
    fn redeliveries_run(budget: &mut RetryBudget, n: u64, at: u64) -> u64 {
        let admitted = (0..n).filter(|i| {
            let run = budget.admit(Delivery::Redelivery, at + i);
            if run {
                budget.failed(Delivery::Redelivery, at + i);
            }
            run
        });
        admitted.count() as u64
    }

    /// `n` first deliveries spread evenly over the minute from `at`.
    fn first_deliveries_over_a_minute(budget: &mut RetryBudget, n: u64, at: u64) {
        for i in 0..n {
            assert!(budget.admit(Delivery::First, at + i * 60 * SECOND / n));
        }
    }

    #[test]
    fn redeliveries_run_at_most_the_percentage_of_a_minutes_first_deliveries_plus_the_floor() {
        for (percent, first) in [(10, 1000), (10, 55), (25, 400), (100, 30), (1, 0)] {
            // GIVEN a minute of first deliveries
            let mut budget = RetryBudget::new(Some(percent));
            first_deliveries_over_a_minute(&mut budget, first, T0);
            // WHEN redeliveries come in its last second
            let run = redeliveries_run(&mut budget, 1000, T0 + 59 * SECOND);
            // THEN the floor plus the percentage run (rounded up: one runs while under it), the
            // rest are refused
            let allowance = FLOOR_PER_MINUTE + (first * u64::from(percent)).div_ceil(100);
            assert_eq!(run, allowance, "{percent} % of {first}");
        }
    }

    #[test]
    fn redeliveries_that_succeed_spend_nothing_so_a_backlog_drains_after_recovery() {
        // GIVEN a budget spent by failing redeliveries (the downstream down) and no first
        // deliveries (the consumer paused, then resumed on a backlog of redeliveries)
        let mut budget = RetryBudget::new(Some(10));
        assert_eq!(redeliveries_run(&mut budget, 50, T0), FLOOR_PER_MINUTE);
        // THEN within that minute none runs
        assert!(!budget.admit(Delivery::Redelivery, T0 + 30 * SECOND));
        // WHEN the failures have aged out and the downstream is back
        let back = T0 + 61 * SECOND;
        // THEN every redelivery runs as long as they succeed: thousands in a minute
        let run = (0..5000)
            .filter(|i| budget.admit(Delivery::Redelivery, back + i * 10))
            .count();
        assert_eq!(run, 5000);
        // AND a redelivery's failure spends the budget again
        for i in 0..FLOOR_PER_MINUTE {
            budget.failed(Delivery::Redelivery, back + 50_000 + i);
        }
        assert!(!budget.admit(Delivery::Redelivery, back + 50_100));
    }

    #[test]
    fn redeliveries_in_flight_when_the_budget_runs_out_still_finish() {
        // GIVEN a batch of 64 redeliveries admitted at once (their failures not yet known)
        let mut budget = RetryBudget::new(Some(10));
        let admitted = (0..64)
            .filter(|i| budget.admit(Delivery::Redelivery, T0 + i))
            .count() as u64;
        // THEN all run: the budget is exceeded by at most what is in flight
        assert_eq!(admitted, 64);
        // AND once they have failed, nothing more runs that minute
        for i in 0..admitted {
            budget.failed(Delivery::Redelivery, T0 + 100 + i);
        }
        assert!(!budget.admit(Delivery::Redelivery, T0 + 59 * SECOND));
    }

    #[test]
    fn a_quiet_environment_still_runs_the_floor_a_minute() {
        // GIVEN no first deliveries at all
        let mut budget = RetryBudget::new(Some(10));
        // THEN 10 redeliveries run in a minute, and no more within it
        assert_eq!(redeliveries_run(&mut budget, 50, T0), FLOOR_PER_MINUTE);
        assert_eq!(redeliveries_run(&mut budget, 50, T0 + 59 * SECOND), 0);
        // AND a minute after the first ran, the floor is there again
        assert_eq!(
            redeliveries_run(&mut budget, 50, T0 + 60 * SECOND),
            FLOOR_PER_MINUTE
        );
    }

    #[test]
    fn the_window_slides_second_by_second() {
        // GIVEN 200 first deliveries in the minute's first second: 10 + 20 redeliveries allowed
        let mut budget = RetryBudget::new(Some(10));
        for _ in 0..200 {
            budget.admit(Delivery::First, T0);
        }
        // and 30 redeliveries run 30 s later, spending it all
        assert_eq!(redeliveries_run(&mut budget, 100, T0 + 30 * SECOND), 30);
        // THEN 59.9 s after the first deliveries, nothing more runs
        assert_eq!(redeliveries_run(&mut budget, 1, T0 + 59_900), 0);
        // AND once they have left the window (60 s) only the floor is earned, and the 30 spent
        // are still in it: nothing
        assert_eq!(redeliveries_run(&mut budget, 1, T0 + 60 * SECOND), 0);
        // AND once the redeliveries have left it too, the floor again
        assert_eq!(
            redeliveries_run(&mut budget, 100, T0 + 90 * SECOND),
            FLOOR_PER_MINUTE
        );
    }

    #[test]
    fn a_ring_slot_reused_a_minute_later_forgets_what_it_held() {
        // GIVEN first deliveries at T0, in the slot that T0 + 60 s reuses
        let mut budget = RetryBudget::new(Some(100));
        for _ in 0..50 {
            budget.admit(Delivery::First, T0);
        }
        // WHEN a first delivery arrives in the same slot a minute later
        budget.admit(Delivery::First, T0 + 60 * SECOND);
        // THEN only it counts: 10 + 1 redeliveries run
        assert_eq!(redeliveries_run(&mut budget, 100, T0 + 60 * SECOND), 11);
    }

    #[test]
    fn a_clock_set_back_counts_no_second_from_the_future() {
        let mut budget = RetryBudget::new(Some(10));
        assert_eq!(
            redeliveries_run(&mut budget, 50, T0 + 30 * SECOND),
            FLOOR_PER_MINUTE
        );
        // the clock steps back 10 s: those redeliveries are "later" and not counted against it
        assert_eq!(
            redeliveries_run(&mut budget, 50, T0 + 20 * SECOND),
            FLOOR_PER_MINUTE
        );
    }

    #[test]
    fn off_runs_everything_and_replays_are_never_refused_nor_counted() {
        // GIVEN the budget off
        let mut off = RetryBudget::new(None);
        assert_eq!(redeliveries_run(&mut off, 1000, T0), 1000);
        // GIVEN a budget spent on the floor
        let mut budget = RetryBudget::new(Some(10));
        assert_eq!(redeliveries_run(&mut budget, 20, T0), FLOOR_PER_MINUTE);
        // THEN a replay still runs, on any receive
        assert!((0..500).all(|i| budget.admit(Delivery::Replay, T0 + i)));
        // AND replays earned nothing: a redelivery is still refused
        assert!(!budget.admit(Delivery::Redelivery, T0 + 1000));
        // AND a replay's failure does not spend: in a fresh minute the floor is whole
        let mut fresh = RetryBudget::new(Some(10));
        for i in 0..500 {
            fresh.admit(Delivery::Replay, T0 + i);
            fresh.failed(Delivery::Replay, T0 + i);
        }
        assert_eq!(redeliveries_run(&mut fresh, 20, T0), FLOOR_PER_MINUTE);
    }

    #[test]
    fn a_record_is_a_first_delivery_a_redelivery_or_a_replay() {
        let count = |c: &str| json!({"x-redrive-count": {"stringValue": c, "dataType": "Number"}});
        let received = |n: &str| json!({"ApproximateReceiveCount": n, "SentTimestamp": "1"});
        let records = parse_event(json!({"Records": [
            rec("first", json!({"attributes": received("1")})),
            rec("again", json!({"attributes": received("2")})),
            rec("unknown", json!({"attributes": {"SentTimestamp": "1"}})),
            rec("original", json!({"attributes": received("3"), "messageAttributes": count("0")})),
            rec("replay", json!({"attributes": received("1"), "messageAttributes": count("1")})),
            rec("replay-again", json!({"attributes": received("4"), "messageAttributes": count("3")})),
        ]}))
        .unwrap();
        let kinds: Vec<Delivery> = records.iter().map(Delivery::of).collect();
        use Delivery::*;
        assert_eq!(
            kinds,
            vec![First, Redelivery, First, Redelivery, Replay, Replay]
        );
    }
}
