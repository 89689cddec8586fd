//! Full-jitter exponential backoff of failed records (`BACKOFF_BASE_SECONDS`,
//! `BACKOFF_MAX_SECONDS`), within SQS's 12 h visibility limit.

use std::time::Duration;

use rand::Rng;
use resq::sqs::MAX_VISIBILITY_TIMEOUT;

/// Backoff settings: `BACKOFF_BASE_SECONDS` and `BACKOFF_MAX_SECONDS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay ceiling for the first receive.
    pub base: Duration,
    /// Upper bound of any delay (itself bounded by 12 h).
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(2),
            cap: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The ceiling of the jitter window: `min(cap, base·2^(receive_count-1), 12 h)`.
    /// A receive count of 0 (never seen in practice) is treated as 1.
    pub fn ceiling(&self, receive_count: u32) -> Duration {
        let exponent = receive_count.max(1) - 1;
        let factor = 2u32.checked_pow(exponent.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.cap)
            .min(MAX_VISIBILITY_TIMEOUT)
    }

    /// The longest backoff: `BACKOFF_MAX_SECONDS`, within 12 h. What a record the retry
    /// budget held back waits.
    pub fn longest(&self) -> Duration {
        self.cap.min(MAX_VISIBILITY_TIMEOUT)
    }

    /// Full jitter: a uniform draw in `[0, ceiling]`, in whole seconds (what SQS takes).
    pub fn delay_seconds(&self, receive_count: u32, rng: &mut impl Rng) -> i32 {
        let ceiling = self.ceiling(receive_count).as_secs();
        rng.random_range(0..=ceiling) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn ceiling_doubles_then_caps() {
        let b = Backoff::default();
        let secs: Vec<u64> = (0..=10).map(|n| b.ceiling(n).as_secs()).collect();
        assert_eq!(secs, vec![2, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn never_past_twelve_hours() {
        let b = Backoff {
            base: Duration::from_secs(3600),
            cap: Duration::from_secs(100_000),
        };
        assert_eq!(b.ceiling(1), Duration::from_secs(3600));
        assert_eq!(b.ceiling(40), MAX_VISIBILITY_TIMEOUT);
        assert_eq!(b.longest(), MAX_VISIBILITY_TIMEOUT);
        assert_eq!(Backoff::default().longest(), Duration::from_secs(300));
        let mut rng = StdRng::seed_from_u64(7);
        for n in 0..100 {
            assert!(b.delay_seconds(n, &mut rng) <= 43_200);
        }
    }

    #[test]
    fn draws_stay_in_the_window_and_spread() {
        let b = Backoff::default();
        let mut rng = StdRng::seed_from_u64(42);
        let draws: Vec<i32> = (0..2000).map(|_| b.delay_seconds(4, &mut rng)).collect();
        assert!(draws.iter().all(|&d| (0..=16).contains(&d)));
        // full jitter: both ends of the window are reached
        assert!(draws.contains(&0));
        assert!(draws.contains(&16));
    }

    #[test]
    fn zero_base_means_immediate_retry() {
        let b = Backoff {
            base: Duration::ZERO,
            cap: Duration::from_secs(300),
        };
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(b.delay_seconds(5, &mut rng), 0);
    }
}
