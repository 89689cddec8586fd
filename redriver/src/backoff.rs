//! The cycles a run keeps in flight, adapted to SQS's answers (docs/design.md, "Run loop"), as
//! the consumer's limit adapts to S3's (`consumer/src/concurrency.rs`): [`CycleLimit`] starts
//! at what the rate needs ([`crate::plan::cycles_in_flight`]), is halved (floor 1) when a call
//! sent since the last halving times out, is throttled, or finds SQS slow (its smoothed
//! latency past [`RISE`] times the lowest it has been), and is raised by one each time as many
//! fast calls have gone through as the limit is, never above what the rate needs. A slower SQS
//! so gets fewer calls at once, not more, and its calls stay short of their timeout.
//!
//! It only sizes the window: a send that timed out stays unconfirmed (not deleted, not sent
//! again by this run) whatever the limit does.

use std::time::{Duration, Instant};

/// Calls smoothed over before the latency is judged (and after each halving, the calls sent
/// since): one slow call among them is jitter, not load.
pub const WARM: u32 = 8;
/// SQS is slow when its smoothed latency is past this many times the lowest it has been
/// (log-normal jitter of a healthy SQS stays well within it).
pub const RISE: f64 = 3.0;
/// The weight of each call in the smoothed latency (TCP's 1/8).
const GAIN: f64 = 1.0 / 8.0;
/// At its floor (one cycle), each judged call lets the baseline rise by this share toward the
/// smoothed latency: an SQS that stays slower even then (larger bodies, a farther region, a
/// CPU share that stalls the run) is, after some tens of calls, the new normal, and the limit
/// grows again instead of staying at one for the rest of the run. Above the floor the baseline
/// never rises: a baseline that followed a loaded SQS would let the load grow with it.
const DRIFT: f64 = 1.0 / 256.0;
/// A call counts in the smoothed latency for at most this many times the baseline: one outlier
/// (a long poll, a stall) is not a trend.
const OUTLIER: f64 = 2.0 * RISE;

/// What a call's answer says about SQS, from the best to the worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Answer {
    /// Answered (done or refused for its own reasons).
    Through,
    /// Throttled (`RequestThrottled`, `ThrottlingException`, HTTP 503 or 429).
    Throttled,
    /// No answer: it timed out, or the connection broke.
    Unanswered,
}

/// One SQS call, as the run saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// When it was sent.
    pub sent: Instant,
    /// How long its answer took.
    pub latency: Duration,
    /// What the answer was.
    pub answer: Answer,
}

/// The cycles in flight at most, now: see the module's doc. A limit that does not adapt (the
/// fixed pipeline, for comparison) stays at what the rate needs.
#[derive(Debug, Clone)]
pub struct CycleLimit {
    current: usize,
    cap: usize,
    adapts: bool,
    /// Fast calls (within [`RISE`] times the baseline) that went through since the limit
    /// last moved.
    through: u64,
    lowered_at: Option<Instant>,
    started: Instant,
    /// The smoothed latency of the calls sent since the last halving, s, and how many.
    smoothed: Option<f64>,
    samples: u32,
    /// The lowest smoothed latency seen (once [`WARM`] calls were smoothed), s.
    baseline: Option<f64>,
    lowest: usize,
    halvings: u64,
}

impl CycleLimit {
    /// A limit at `cap` (what the rate needs), adapting or not, started at `now`.
    pub fn new(cap: usize, adapts: bool, now: Instant) -> Self {
        let cap = cap.max(1);
        Self {
            current: cap,
            cap,
            adapts,
            through: 0,
            lowered_at: None,
            started: now,
            smoothed: None,
            samples: 0,
            baseline: None,
            lowest: cap,
            halvings: 0,
        }
    }

    /// Cycles in flight at most, now.
    pub fn current(&self) -> usize {
        self.current
    }

    /// The lowest the limit went.
    pub fn lowest(&self) -> usize {
        self.lowest
    }

    /// How many times it was halved.
    pub fn halvings(&self) -> u64 {
        self.halvings
    }

    /// The rate changed: at most `cap` from now on (a fixed limit is `cap`); a raised cap is
    /// reached by fast calls, as before.
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap.max(1);
        self.current = match self.adapts {
            true => self.current.min(self.cap),
            false => self.cap,
        };
        self.lowest = self.lowest.min(self.current);
    }

    /// Takes in one call's answer, at `now`. Calls sent before the last halving say nothing
    /// new: they were under way when it was decided.
    pub fn observe(&mut self, call: Call, now: Instant) {
        if !self.adapts || call.sent < self.lowered_at.unwrap_or(self.started) {
            return;
        }
        let latency = call.latency.as_secs_f64();
        let counted = self.baseline.map_or(latency, |b| latency.min(OUTLIER * b));
        let smoothed = match self.smoothed {
            Some(s) => s + GAIN * (counted - s),
            None => counted,
        };
        self.smoothed = Some(smoothed);
        self.samples = self.samples.saturating_add(1);
        let warm = self.samples >= WARM;
        if warm {
            let rise = if self.current == 1 { 1.0 + DRIFT } else { 1.0 };
            let drifted = |b: f64| smoothed.min(b * rise);
            self.baseline = Some(self.baseline.map_or(smoothed, drifted));
        }
        let slow = warm && self.baseline.is_some_and(|b| smoothed > RISE * b);
        if call.answer != Answer::Through || slow {
            self.current = (self.current / 2).max(1);
            self.lowest = self.lowest.min(self.current);
            self.halvings += 1;
            self.lowered_at = Some(now);
            // judged again after WARM calls sent since
            (self.through, self.smoothed, self.samples) = (0, None, 0);
            return;
        }
        // a slow call, not yet enough to halve, raises nothing
        if self.baseline.is_some_and(|b| latency > RISE * b) {
            return;
        }
        self.through += 1;
        while self.current < self.cap && self.through >= self.current as u64 {
            self.through -= self.current as u64;
            self.current += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    /// A call sent at `sent` ms, answered after `latency` ms.
    fn call(t0: Instant, sent: u64, latency: u64, answer: Answer) -> (Call, Instant) {
        let c = Call {
            sent: ms(t0, sent),
            latency: Duration::from_millis(latency),
            answer,
        };
        (c, ms(t0, sent + latency))
    }

    /// Feeds `n` calls of `latency` ms one after another from `from` ms; returns when the last
    /// was answered (ms).
    fn feed(l: &mut CycleLimit, t0: Instant, from: u64, n: u64, latency: u64) -> u64 {
        let mut at = from;
        for _ in 0..n {
            let (c, now) = call(t0, at, latency, Answer::Through);
            l.observe(c, now);
            at += latency;
        }
        at
    }

    #[test]
    fn fast_calls_keep_what_the_rate_needs_and_never_go_above_it() {
        // GIVEN the limit of a run at 3,000/s (46 cycles) on a healthy SQS (15 ms, jittered)
        let t0 = Instant::now();
        let mut l = CycleLimit::new(46, true, t0);
        // (a call sent each millisecond)
        for at in 0..2_000u64 {
            let latency = [12, 15, 18, 14, 30, 13][(at % 6) as usize];
            let (c, now) = call(t0, at, latency, Answer::Through);
            l.observe(c, now);
        }
        // THEN it never moved below nor above it
        assert_eq!((l.current(), l.lowest()), (46, 46));
    }

    #[test]
    fn a_slow_sqs_gets_fewer_calls_in_flight_not_more() {
        // GIVEN a healthy SQS seen for a while
        let t0 = Instant::now();
        let mut l = CycleLimit::new(46, true, t0);
        let at = feed(&mut l, t0, 0, 50, 15);
        // WHEN SQS slows down to 10 times its latency
        let mut got = Vec::new();
        let mut at = at;
        for _ in 0..6 {
            at = feed(&mut l, t0, at, WARM as u64, 150);
            got.push(l.current());
        }
        // THEN the limit halves about once per WARM calls sent since the last halving, to 1
        assert_eq!(got, [23, 11, 5, 2, 1, 1]);
        assert_eq!(l.lowest(), 1);
    }

    #[test]
    fn timeouts_and_throttles_halve_it_once_per_round() {
        let t0 = Instant::now();
        let mut l = CycleLimit::new(40, true, t0);
        // a timeout halves
        let (c, now) = call(t0, 10, 1000, Answer::Unanswered);
        l.observe(c, now);
        assert_eq!(l.current(), 20);
        // 30 more timeouts of calls sent before that halving (at 1,010 ms): no news
        for i in 0..30 {
            let (c, now) = call(t0, 20 + i, 1000, Answer::Unanswered);
            l.observe(c, now);
        }
        assert_eq!(l.current(), 20);
        // a throttle of a call sent after it halves again
        let (c, now) = call(t0, 1100, 20, Answer::Throttled);
        l.observe(c, now);
        assert_eq!((l.current(), l.lowest()), (10, 10));
    }

    #[test]
    fn a_recovered_sqs_grows_it_back_to_what_the_rate_needs() {
        // GIVEN a limit brought down to 1 by timeouts
        let t0 = Instant::now();
        let mut l = CycleLimit::new(46, true, t0);
        feed(&mut l, t0, 0, 20, 15);
        let mut at = 400;
        for _ in 0..6 {
            let (c, now) = call(t0, at, 500, Answer::Unanswered);
            l.observe(c, now);
            at += 501;
        }
        assert_eq!(l.current(), 1);
        // WHEN SQS answers fast again: one step per limit of calls
        let at = feed(&mut l, t0, at, 1 + 2 + 3, 15);
        assert_eq!(l.current(), 4);
        // THEN enough fast calls bring it back to what the rate needs, and no further
        feed(&mut l, t0, at, 5_000, 15);
        assert_eq!((l.current(), l.lowest()), (46, 1));
    }

    #[test]
    fn an_sqs_that_stays_slower_becomes_the_new_normal_and_the_limit_grows_again() {
        // GIVEN a healthy SQS (15 ms), then one that answers in 60 ms for good (larger bodies)
        let t0 = Instant::now();
        let mut l = CycleLimit::new(46, true, t0);
        let at = feed(&mut l, t0, 0, 50, 15);
        let at = feed(&mut l, t0, at, 40, 60);
        let low = l.current();
        assert!(low < 46, "the slowdown halves it: {low}");
        // WHEN it stays at 60 ms
        feed(&mut l, t0, at, 5_000, 60);
        // THEN the baseline re-learns it and the limit climbs back to what the rate needs
        assert_eq!(l.current(), 46);
    }

    #[test]
    fn one_outlier_after_a_halving_does_not_halve_it_again() {
        // GIVEN a limit halved once by a timeout on a healthy SQS
        let t0 = Instant::now();
        let mut l = CycleLimit::new(46, true, t0);
        let at = feed(&mut l, t0, 0, 50, 15);
        let (c, now) = call(t0, at, 500, Answer::Unanswered);
        l.observe(c, now);
        assert_eq!(l.current(), 23);
        // WHEN the first call after it waits out a 1 s long poll, the next ones are fast
        let (c, now) = call(t0, at + 600, 1_000, Answer::Through);
        l.observe(c, now);
        feed(&mut l, t0, at + 1_700, WARM as u64, 15);
        // THEN nothing more was halved
        assert_eq!((l.current(), l.halvings()), (23, 1));
    }

    #[test]
    fn a_fixed_limit_never_moves_and_follows_the_rate() {
        let t0 = Instant::now();
        let mut l = CycleLimit::new(46, false, t0);
        for i in 0..20 {
            let (c, now) = call(t0, i * 10, 5000, Answer::Unanswered);
            l.observe(c, now);
        }
        assert_eq!(l.current(), 46);
        l.set_cap(64);
        assert_eq!(l.current(), 64);
        // an adapting limit is brought under a lower cap at once, and climbs to a higher one
        let mut a = CycleLimit::new(46, true, t0);
        a.set_cap(10);
        assert_eq!(a.current(), 10);
        a.set_cap(20);
        assert_eq!(a.current(), 10);
        feed(&mut a, t0, 0, 200, 15);
        assert_eq!(a.current(), 20);
    }
}
