//! The replay rate: a token bucket (GCRA, from `governor`) with a burst of one, so replays are
//! spaced evenly and the achieved rate over a run stays at the setting.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// One token per replayed message.
pub struct TokenBucket {
    limiter: DefaultDirectRateLimiter,
}

impl TokenBucket {
    /// A bucket refilling at `rate_per_second` (> 0); the first token is there at once.
    pub fn new(rate_per_second: f64) -> Self {
        let period = Duration::from_secs_f64(1.0 / rate_per_second.max(f64::MIN_POSITIVE))
            .max(Duration::from_nanos(1));
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::MIN);
        Self {
            limiter: RateLimiter::direct(quota),
        }
    }

    /// Waits for the next token.
    pub async fn acquire(&self) {
        self.limiter.until_ready().await;
    }
}
