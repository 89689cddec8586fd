//! The archive sweep (docs/design.md, "Archive sweep"): a run that is paused, or has spent its
//! replay budget, reads on through the DLQ to archive what is past its TTL or the cap only when
//! a sweep is due, not on every run: a paused pipeline does not hold and re-read its whole DLQ
//! every five minutes. Each run that read the DLQ to its end notes it under `state/sweep/` in
//! the archive bucket; a sweep is due when the last note is older than `ARCHIVE_SWEEP_SECONDS`
//! (a sweep cut short by the deadline leaves no note: a DLQ too deep for one run is swept by
//! every run until one gets through).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One read of the DLQ through to its end: the run received until it had nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepRecord {
    /// Epoch millis of the run's start.
    pub at: u64,
}

/// Where `dlq_url`'s sweeps are noted.
pub fn prefix(dlq_url: &str) -> String {
    let name = dlq_url.rsplit('/').next().unwrap_or(dlq_url);
    format!(
        "{}sweep/{}/",
        resq::state::STATE_PREFIX,
        resq::state::safe(name)
    )
}

/// Whether a run at `now_ms` sweeps, given the last note (`Err`: it could not be read, and
/// archiving must not wait on a note).
pub fn due(last: Result<Option<SweepRecord>, &str>, every: Duration, now_ms: u64) -> bool {
    match last {
        Ok(Some(s)) => now_ms.saturating_sub(s.at) >= every.as_millis() as u64,
        Ok(None) | Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_sweep_is_due_an_interval_after_the_last_read_through() {
        let now = 10 * 3_600_000;
        let done = |ago_ms: u64| Ok(Some(SweepRecord { at: now - ago_ms }));
        assert!(due(Ok(None), HOUR, now));
        assert!(due(Err("AccessDenied"), HOUR, now));
        assert!(!due(done(3_599_999), HOUR, now));
        assert!(due(done(3_600_000), HOUR, now));
        assert_eq!(
            prefix("https://sqs.us-east-1.amazonaws.com/1/orders-dlq"),
            "state/sweep/orders-dlq/"
        );
    }
}
