//! Small helpers around the Lambda runtime's context.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Lambda's longest timeout: the budget assumed when a runtime gives no usable deadline.
pub const MAX_LAMBDA_TIMEOUT: Duration = Duration::from_secs(900);

/// The `Instant` of a Lambda deadline given as epoch millis (the runtime's `context.deadline`).
pub fn deadline_instant(deadline_epoch_ms: u64) -> Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    deadline_from(deadline_epoch_ms, now_ms, Instant::now())
}

/// [`deadline_instant`] with the clocks given. Lambda never starts an invocation whose deadline
/// has passed; a deadline at or before the start means the runtime sent no real one (local
/// emulators: `cargo lambda watch` sends its timeout, 600000, instead of an epoch time), and
/// then Lambda's longest timeout is assumed.
pub fn deadline_from(deadline_epoch_ms: u64, now_epoch_ms: u64, now: Instant) -> Instant {
    if deadline_epoch_ms <= now_epoch_ms {
        tracing::debug!(
            deadline_epoch_ms,
            "no usable deadline from the runtime; assuming 15 minutes"
        );
        return now + MAX_LAMBDA_TIMEOUT;
    }
    now + Duration::from_millis(deadline_epoch_ms - now_epoch_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_from_epoch_millis() {
        let now = Instant::now();
        assert_eq!(
            deadline_from(10_000, 4_000, now),
            now + Duration::from_secs(6)
        );
    }

    #[test]
    fn a_deadline_in_the_past_means_none_was_given() {
        let now = Instant::now();
        assert_eq!(deadline_from(1_000, 4_000, now), now + MAX_LAMBDA_TIMEOUT);
        assert_eq!(
            deadline_from(600_000, 1_795_305_560_647, now),
            now + MAX_LAMBDA_TIMEOUT,
            "cargo lambda watch"
        );
        assert_eq!(deadline_from(0, 4_000, now), now + MAX_LAMBDA_TIMEOUT);
    }
}
