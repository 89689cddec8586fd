//! Small helpers around the Lambda runtime's context.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The `Instant` of a Lambda deadline given as epoch millis (the runtime's `context.deadline`).
pub fn deadline_instant(deadline_epoch_ms: u64) -> Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    deadline_from(deadline_epoch_ms, now_ms, Instant::now())
}

/// [`deadline_instant`] with the clocks given.
pub fn deadline_from(deadline_epoch_ms: u64, now_epoch_ms: u64, now: Instant) -> Instant {
    now + Duration::from_millis(deadline_epoch_ms.saturating_sub(now_epoch_ms))
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
        assert_eq!(
            deadline_from(1_000, 4_000, now),
            now,
            "a passed deadline is now"
        );
    }
}
