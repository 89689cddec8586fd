//! `CONSUMER_CONCURRENCY`: how many records are in flight at once (docs/design.md, "Consumer").
//!
//! [`Concurrency`] is the setting: `auto` (the default) or a fixed number. Under `auto`, an
//! invocation starts with as many records in flight as the batch has, up to
//! `AUTO_CONCURRENCY_MAX`; [`Limit`] halves that when a downstream throttles (floor 1) and
//! raises it again one at a time as calls succeed. The downstream's answers reach it through
//! [`crate::downstream::Throttling`], which the HTTPS client ([`crate::downstream::Downstream`]) feeds with every response
//! it reads: a throttled one (S3 `SlowDown`, HTTP 503 or 429, SQS's throttling errors) or one
//! that went through. The same client holds at most [`Concurrency::cap`] connections per host.
//!
//! The cap holds per process too (`InFlight`): under Lambda Managed Instances one process
//! runs several invocations at once, and their records together stay within it.

use std::time::Instant;

use crate::downstream::Seen;

/// `CONSUMER_CONCURRENCY=auto`: records in flight at most (and connections per host).
pub const AUTO_CONCURRENCY_MAX: usize = 64;

/// The largest number `CONSUMER_CONCURRENCY` takes.
pub(crate) const FIXED_CONCURRENCY_MAX: usize = 1000;

/// The settle executor's calls in flight at most ([`Concurrency::settle_calls_in_flight`]).
pub(crate) const SETTLE_CALLS_MAX: usize = 64;

/// `CONSUMER_CONCURRENCY`: `auto`, or a number that fixes the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Concurrency {
    /// As many as the batch has records, up to `AUTO_CONCURRENCY_MAX`, adapted to throttling.
    #[default]
    Auto,
    /// Exactly this many (1–`FIXED_CONCURRENCY_MAX`), whatever the downstream answers.
    Fixed(usize),
}

impl Concurrency {
    /// The most records in flight at once, whatever the batch: the HTTPS client's connections
    /// per host, too.
    pub fn cap(self) -> usize {
        match self {
            Self::Auto => AUTO_CONCURRENCY_MAX,
            Self::Fixed(n) => n.max(1),
        }
    }

    /// Requests (so connections) the consumer's HTTPS client lets run at once to one host:
    /// the cap, and never fewer than the settle executor's calls in flight
    /// (`resq::sqs::CALLS_IN_FLIGHT`), which run after the records (or one at a time in a
    /// FIFO lane) and must not queue behind a small fixed limit.
    pub fn connections_per_host(self) -> usize {
        self.cap().max(resq::sqs::CALLS_IN_FLIGHT)
    }

    /// The settle executor's calls in flight (DLQ copies, archive writes, backoff): the
    /// connections per host, at most `SETTLE_CALLS_MAX`. They run after the records, while
    /// the records' connections may still be open (idle, to other hosts): a few dozen batch
    /// calls settle a 10,000-record batch within a second, and more would only add sockets.
    pub fn settle_calls_in_flight(self) -> usize {
        self.connections_per_host().min(SETTLE_CALLS_MAX)
    }

    /// The limit an invocation of `records` records starts with.
    pub fn initial(self, records: usize) -> usize {
        match self {
            Self::Auto => records.clamp(1, AUTO_CONCURRENCY_MAX),
            Self::Fixed(n) => n.max(1),
        }
    }
}

impl std::fmt::Display for Concurrency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for Concurrency {
    type Err = String;

    /// `auto` in any case, or a whole number from 1 to `FIXED_CONCURRENCY_MAX`; surrounding
    /// whitespace ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        match t.parse::<usize>() {
            Ok(n) if (1..=FIXED_CONCURRENCY_MAX).contains(&n) => Ok(Self::Fixed(n)),
            _ => Err(format!(
                "auto (as many as the batch has, up to {AUTO_CONCURRENCY_MAX}, adapted to throttling) or a whole number from 1 to {FIXED_CONCURRENCY_MAX}"
            )),
        }
    }
}

/// The records in flight of the whole process, whatever the invocations at once (several under
/// Lambda Managed Instances): at most [`Concurrency::cap`], one turn a lane. Each invocation's
/// [`Limit`] still says how many of its own lanes run; the turns are handed out in the order
/// asked for, so invocations at once share them.
#[derive(Debug)]
pub(crate) struct InFlight(tokio::sync::Semaphore);

impl InFlight {
    pub(crate) fn new(concurrency: Concurrency) -> Self {
        Self(tokio::sync::Semaphore::new(concurrency.cap()))
    }

    /// A turn for one lane, held while it runs; waited for until `until` at most (the lane's
    /// start-by time, after which its records are not started anyway): `None` then.
    pub(crate) async fn turn(&self, until: Instant) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let turn = tokio::time::timeout_at(until.into(), self.0.acquire()).await;
        turn.ok()?.ok()
    }
}

/// The limit of one invocation: starts at [`Concurrency::initial`]; under `auto`, halved
/// (floor 1) when a call sent since the last halving is throttled (calls already under way
/// when it was halved say nothing new), and raised by one each time as many calls have gone
/// through as the limit is, up to [`Concurrency::cap`]. A fixed number never moves.
#[derive(Debug, Clone)]
pub struct Limit {
    current: usize,
    cap: usize,
    adapts: bool,
    /// Calls that went through since the limit last moved.
    through: u64,
    lowered_at: Option<Instant>,
    started: Instant,
    last: Seen,
    lowest: usize,
    throttles: u64,
}

impl Limit {
    /// The limit of an invocation of `records` records, started at `now` with the downstream's
    /// counts at `seen`.
    pub fn new(concurrency: Concurrency, records: usize, seen: Seen, now: Instant) -> Self {
        let current = concurrency.initial(records);
        Self {
            current,
            cap: concurrency.cap(),
            adapts: concurrency == Concurrency::Auto,
            through: 0,
            lowered_at: None,
            started: now,
            last: seen,
            lowest: current,
            throttles: 0,
        }
    }

    /// Records in flight at most, now.
    pub fn current(&self) -> usize {
        self.current
    }

    /// The lowest the limit went in this invocation.
    pub fn lowest(&self) -> usize {
        self.lowest
    }

    /// Throttled responses seen in this invocation.
    pub fn throttles(&self) -> u64 {
        self.throttles
    }

    /// Takes in the downstream's counts at `now`.
    pub fn observe(&mut self, seen: Seen, now: Instant) {
        let throttled = seen.throttled.saturating_sub(self.last.throttled);
        let through = seen.ok.saturating_sub(self.last.ok);
        self.last = seen;
        self.throttles += throttled;
        if !self.adapts {
            return;
        }
        let since = self.lowered_at.unwrap_or(self.started);
        let news = throttled > 0 && seen.last_throttled_sent.is_some_and(|sent| sent >= since);
        if news {
            self.current = (self.current / 2).max(1);
            self.lowest = self.lowest.min(self.current);
            self.lowered_at = Some(now);
            self.through = 0;
            return;
        }
        self.through += through;
        while self.current < self.cap && self.through >= self.current as u64 {
            self.through -= self.current as u64;
            self.current += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::Throttling;
    use std::time::Duration;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    /// The counts after `ok` more calls went through and `throttled` more were throttled,
    /// the latest of them sent at `sent`.
    fn after(last: Seen, ok: u64, throttled: u64, sent: Option<Instant>) -> Seen {
        Seen {
            ok: last.ok + ok,
            throttled: last.throttled + throttled,
            last_throttled_sent: sent.or(last.last_throttled_sent),
        }
    }

    #[test]
    fn auto_starts_at_the_batch_up_to_64_and_a_number_fixes_it() {
        assert_eq!(Concurrency::Auto.initial(1), 1);
        assert_eq!(Concurrency::Auto.initial(10), 10);
        assert_eq!(Concurrency::Auto.initial(64), 64);
        assert_eq!(Concurrency::Auto.initial(10_000), 64);
        assert_eq!(Concurrency::Auto.initial(0), 1);
        assert_eq!(Concurrency::Auto.cap(), 64);
        assert_eq!(Concurrency::Fixed(10).initial(10_000), 10);
        assert_eq!(Concurrency::Fixed(500).initial(3), 500);
        assert_eq!(Concurrency::Fixed(500).cap(), 500);
        assert_eq!(Concurrency::Auto.connections_per_host(), 64);
        assert_eq!(Concurrency::Fixed(500).connections_per_host(), 500);
        // the settle phase's S3 calls are at most SETTLE_CALLS_MAX at once, never fewer than
        // its own 16 (its SQS calls: 16)
        assert_eq!(
            Concurrency::Fixed(1000).settle_calls_in_flight(),
            SETTLE_CALLS_MAX
        );
        assert_eq!(Concurrency::Auto.settle_calls_in_flight(), 64);
        assert_eq!(
            Concurrency::Fixed(1).settle_calls_in_flight(),
            resq::sqs::CALLS_IN_FLIGHT
        );
        assert_eq!(
            Concurrency::Fixed(1).connections_per_host(),
            resq::sqs::CALLS_IN_FLIGHT
        );
    }

    #[test]
    fn the_setting_reads_what_it_writes_and_names_what_is_allowed() {
        for c in [
            Concurrency::Auto,
            Concurrency::Fixed(1),
            Concurrency::Fixed(1000),
        ] {
            assert_eq!(c.to_string().parse(), Ok(c));
        }
        assert_eq!(" AUTO ".parse(), Ok(Concurrency::Auto));
        assert_eq!(" 4 ".parse(), Ok(Concurrency::Fixed(4)));
        for bad in ["0", "1001", "-1", "ten", ""] {
            let e = bad.parse::<Concurrency>().unwrap_err();
            assert!(
                e.starts_with("auto (") && e.ends_with("from 1 to 1000"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_throttle_halves_the_limit_down_to_one() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let mut l = Limit::new(Concurrency::Auto, 1000, seen, t0);
        assert_eq!(l.current(), 64);
        let mut got = Vec::new();
        for i in 1..=8 {
            // each throttled call was sent after the halving before it
            seen = after(seen, 0, 1, Some(ms(t0, 10 * i)));
            l.observe(seen, ms(t0, 10 * i + 5));
            got.push(l.current());
        }
        assert_eq!(got, [32, 16, 8, 4, 2, 1, 1, 1]);
        assert_eq!((l.lowest(), l.throttles()), (1, 8));
    }

    #[test]
    fn calls_sent_before_a_halving_do_not_halve_it_again() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let mut l = Limit::new(Concurrency::Auto, 64, seen, t0);
        // 64 calls under way; the first throttled answer halves the limit at 20 ms
        seen = after(seen, 0, 1, Some(ms(t0, 1)));
        l.observe(seen, ms(t0, 20));
        assert_eq!(l.current(), 32);
        // 40 more throttled answers, all of calls sent before 20 ms: no news
        seen = after(seen, 0, 40, Some(ms(t0, 2)));
        l.observe(seen, ms(t0, 21));
        assert_eq!(l.current(), 32);
        // one sent after the halving is: halved again
        seen = after(seen, 0, 1, Some(ms(t0, 25)));
        l.observe(seen, ms(t0, 45));
        assert_eq!(l.current(), 16);
        assert_eq!(l.throttles(), 42);
    }

    #[test]
    fn the_limit_rises_by_one_for_each_limit_of_calls_that_go_through_up_to_the_cap() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let mut l = Limit::new(Concurrency::Auto, 1000, seen, t0);
        seen = after(seen, 0, 1, Some(ms(t0, 1)));
        l.observe(seen, ms(t0, 2));
        seen = after(seen, 0, 1, Some(ms(t0, 3)));
        l.observe(seen, ms(t0, 4));
        assert_eq!(l.current(), 16);
        // 15 through: not yet a round of 16
        seen = after(seen, 15, 0, None);
        l.observe(seen, ms(t0, 30));
        assert_eq!(l.current(), 16);
        // the 16th: 17; then 17 more: 18
        seen = after(seen, 1, 0, None);
        l.observe(seen, ms(t0, 31));
        assert_eq!(l.current(), 17);
        seen = after(seen, 17, 0, None);
        l.observe(seen, ms(t0, 50));
        assert_eq!(l.current(), 18);
        // a flood of successes climbs one step per round, and stops at the cap
        seen = after(seen, 1_000_000, 0, None);
        l.observe(seen, ms(t0, 60));
        assert_eq!((l.current(), l.lowest()), (64, 16));
    }

    #[test]
    fn throttles_before_the_invocation_do_not_count_and_a_fixed_limit_never_moves() {
        let t0 = Instant::now();
        // an earlier invocation's throttles are in the counts the limit starts from
        let before = Seen {
            ok: 5,
            throttled: 9,
            last_throttled_sent: Some(t0),
        };
        let mut l = Limit::new(Concurrency::Auto, 10, before, ms(t0, 100));
        l.observe(after(before, 3, 0, None), ms(t0, 120));
        assert_eq!((l.current(), l.throttles()), (10, 0));
        let mut f = Limit::new(Concurrency::Fixed(10), 1000, Seen::default(), t0);
        let seen = after(Seen::default(), 50, 20, Some(ms(t0, 5)));
        f.observe(seen, ms(t0, 10));
        assert_eq!((f.current(), f.lowest(), f.throttles()), (10, 10, 20));
    }

    #[test]
    fn throttled_retries_of_calls_sent_before_a_halving_do_not_halve_it_again() {
        // GIVEN a limit halved once by a first attempt's throttle
        let t0 = Instant::now();
        let signal = Throttling::default();
        let mut l = Limit::new(Concurrency::Auto, 1000, signal.seen(), t0);
        signal.throttled(Instant::now());
        l.observe(signal.seen(), Instant::now());
        assert_eq!(l.current(), 32);
        // WHEN the SDK's retries of the calls then under way are throttled again, later
        for _ in 0..100 {
            signal.throttled_retry();
        }
        l.observe(signal.seen(), Instant::now());
        // THEN they are counted and the limit holds
        assert_eq!((l.current(), l.throttles()), (32, 101));
    }
}
