//! The replay rate: a token bucket (GCRA, from `governor`) holding at most one batch of tokens.
//! Tokens keep accruing while a batch is being sent, deleted and the next one received, so the
//! SQS round trips do not slow the run below the setting; over any window of `t` seconds at
//! most `rate × t + 10` messages are replayed.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use resq::settle::Pacer;
use resq::sqs::MAX_BATCH;

/// One token per replayed message.
pub struct TokenBucket {
    /// The limiter at the rate now: a new rate is a new limiter, and copies waiting on the old
    /// one finish their wait on it.
    limiter: Mutex<Arc<DefaultDirectRateLimiter>>,
}

fn limiter(rate_per_second: f64) -> Arc<DefaultDirectRateLimiter> {
    let period = Duration::from_secs_f64(1.0 / rate_per_second.max(f64::MIN_POSITIVE))
        .max(Duration::from_nanos(1));
    let quota = Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(NonZeroU32::new(MAX_BATCH as u32).unwrap_or(NonZeroU32::MIN));
    Arc::new(RateLimiter::direct(quota))
}

/// The replay rate of a run: one token per copy into the main queue. Other copies are not
/// replays and load no consumer (a dead letter given its reason goes back to the DLQ): they
/// are not paced, so that a paused run explains a DLQ full of crashed invocations' dead
/// letters at SQS's speed, not at the replay rate.
pub struct ReplayPace<'a> {
    bucket: TokenBucket,
    main_queue: &'a str,
}

impl<'a> ReplayPace<'a> {
    /// Copies into `main_queue` at `rate_per_second`, others unpaced.
    pub fn new(rate_per_second: f64, main_queue: &'a str) -> Self {
        Self {
            bucket: TokenBucket::new(rate_per_second),
            main_queue,
        }
    }

    /// Replays at `rate_per_second` from now on (a run's climb after recovery).
    pub fn set_rate(&self, rate_per_second: f64) {
        self.bucket.set_rate(rate_per_second);
    }
}

impl Pacer for ReplayPace<'_> {
    async fn admit(&self, queue: &str, n: usize, until: Instant) -> usize {
        if queue == self.main_queue {
            self.bucket.admit(queue, n, until).await
        } else {
            n
        }
    }
}

impl TokenBucket {
    /// A bucket refilling at `rate_per_second` (> 0); it starts full (one batch).
    pub fn new(rate_per_second: f64) -> Self {
        Self {
            limiter: Mutex::new(limiter(rate_per_second)),
        }
    }

    /// Refills at `rate_per_second` from now on.
    pub fn set_rate(&self, rate_per_second: f64) {
        *self.limiter.lock().unwrap_or_else(|e| e.into_inner()) = limiter(rate_per_second);
    }

    /// Waits for the next token.
    pub async fn acquire(&self) {
        let limiter = Arc::clone(&self.limiter.lock().unwrap_or_else(|e| e.into_inner()));
        limiter.until_ready().await;
    }
}

/// The settle executor takes a token per copy: a copy still waiting at `until` does not go.
impl Pacer for TokenBucket {
    async fn admit(&self, _queue: &str, n: usize, until: Instant) -> usize {
        for admitted in 0..n {
            if tokio::time::timeout_at(until.into(), self.acquire())
                .await
                .is_err()
            {
                return admitted;
            }
        }
        n
    }
}
