//! Selecting DLQ messages: by failure reason (`x-failure-reason`) and by age from the
//! producer's send. One rule for the redriver's selective runs and the operator tool's peek.
//! See docs/design.md, "Classification".

use std::time::Duration;

/// Whether a message with failure reason `reason` and age `age` (from the producer's send;
/// `None` when unknown) is selected by `failure_reason` and `older_than` (`None`: any). A
/// message of unknown age is never selected by age.
pub fn selects(
    failure_reason: Option<&str>,
    older_than: Option<Duration>,
    reason: Option<&str>,
    age: Option<Duration>,
) -> bool {
    failure_reason.is_none_or(|wanted| reason == Some(wanted))
        && older_than.is_none_or(|min| age.is_some_and(|a| a >= min))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_and_age_both_select() {
        let min = Some(Duration::from_secs(60));
        let (old, young) = (Some(Duration::from_secs(61)), Some(Duration::from_secs(59)));
        assert!(selects(None, None, None, None));
        assert!(selects(Some("A"), None, Some("A"), None));
        assert!(!selects(Some("A"), None, Some("B"), old));
        assert!(!selects(Some("A"), None, None, old));
        assert!(selects(None, min, None, old));
        assert!(selects(None, min, None, Some(Duration::from_secs(60))));
        assert!(!selects(None, min, None, young));
        assert!(!selects(None, min, Some("A"), None), "unknown age");
        assert!(selects(Some("A"), min, Some("A"), old));
        assert!(!selects(Some("A"), min, Some("A"), young));
    }
}
