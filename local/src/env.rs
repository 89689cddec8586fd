//! A function's configuration as its process environment: what the chaos run hands the real
//! binaries it starts, and what each function's `from_vars` reads back as the same
//! configuration.

use resq::config::CommonConfig;
use resq_consumer::config::ConsumerConfig;
use resq_redriver::config::RedriverConfig;

/// The variables both functions read.
fn common(c: &CommonConfig) -> Vec<(&'static str, String)> {
    vec![
        ("MAIN_QUEUE_URL", c.main_queue_url.clone()),
        ("DLQ_URL", c.dlq_url.clone()),
        ("ARCHIVE_BUCKET", c.archive_bucket.clone()),
        ("MAX_REDRIVE_ATTEMPTS", c.max_redrive_attempts.to_string()),
        (
            "DEADLINE_MARGIN_MS",
            c.deadline_margin.as_millis().to_string(),
        ),
    ]
}

/// The environment of a consumer process with this configuration.
pub fn consumer(c: &ConsumerConfig) -> Vec<(&'static str, String)> {
    let mut vars = common(&c.common);
    vars.extend([
        ("CONSUMER_CONCURRENCY", c.concurrency.to_string()),
        ("BACKOFF_BASE_SECONDS", c.backoff.base.as_secs().to_string()),
        ("BACKOFF_MAX_SECONDS", c.backoff.cap.as_secs().to_string()),
        (
            "IDEMPOTENCY_WINDOW_SECONDS",
            c.idempotency_window.as_secs().to_string(),
        ),
        (
            "RETRY_BUDGET_PERCENT",
            c.retry_budget_percent
                .map_or_else(|| "off".to_owned(), |p| p.to_string()),
        ),
    ]);
    vars
}

/// The environment of a redriver process with this configuration.
pub fn redriver(c: &RedriverConfig) -> Vec<(&'static str, String)> {
    let mut vars = common(&c.common);
    let max_messages = c
        .max_messages_per_run
        .map_or("auto".to_owned(), |n| n.to_string());
    vars.extend([
        ("REDRIVE_RATE_PER_SECOND", c.rate_per_second.to_string()),
        ("MAX_MESSAGES_PER_RUN", max_messages),
        ("KEPT_IN_FLIGHT_MAX", c.kept_in_flight_max.to_string()),
        (
            "ARCHIVE_AFTER_SECONDS",
            c.archive_after.as_secs().to_string(),
        ),
        ("PERMANENT_ACTION", c.permanent_action.to_string()),
        ("PAUSE_ON_ALARMS", c.pause_on_alarms.join(",")),
        (
            "PAUSE_CONSUMER_ON_ALARMS",
            c.pause_consumer_on_alarms.join(","),
        ),
        (
            "CONSUMER_EVENT_SOURCE_MAPPING",
            c.consumer_mapping.clone().unwrap_or_default(),
        ),
        ("REDRIVE_RATE_MAX", c.rate_max.to_string()),
        (
            "ARCHIVE_SWEEP_SECONDS",
            c.archive_sweep.as_secs().to_string(),
        ),
    ]);
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::config::Vars;
    use std::collections::HashMap;

    fn lookup(pairs: Vec<(&str, String)>) -> Vars<impl Fn(&str) -> Option<String>> {
        let map: HashMap<String, String> =
            pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        Vars(move |k: &str| map.get(k).cloned())
    }

    #[test]
    fn a_configuration_reads_back_from_its_variables() {
        let set = [
            (
                "MAIN_QUEUE_URL",
                "http://127.0.0.1:5000/123456789012/orders",
            ),
            ("DLQ_URL", "http://127.0.0.1:5000/123456789012/orders-dlq"),
            ("ARCHIVE_BUCKET", "resq-archive"),
            ("MAX_REDRIVE_ATTEMPTS", "5"),
            ("DEADLINE_MARGIN_MS", "1500"),
            ("CONSUMER_CONCURRENCY", "25"),
            ("BACKOFF_BASE_SECONDS", "1"),
            ("BACKOFF_MAX_SECONDS", "9"),
            ("REDRIVE_RATE_PER_SECOND", "12.5"),
            ("MAX_MESSAGES_PER_RUN", "70"),
            ("ARCHIVE_AFTER_SECONDS", "3600"),
            ("PERMANENT_ACTION", "archive"),
            ("PAUSE_ON_ALARMS", "a,b"),
            ("PAUSE_CONSUMER_ON_ALARMS", "c"),
            ("CONSUMER_EVENT_SOURCE_MAPPING", "esm-1"),
            ("REDRIVE_RATE_MAX", "40"),
            ("ARCHIVE_SWEEP_SECONDS", "120"),
            ("RETRY_BUDGET_PERCENT", "off"),
        ];
        let set = || lookup(set.iter().map(|(k, v)| (*k, v.to_string())).collect());
        let c = ConsumerConfig::from_vars(&set()).unwrap();
        assert_eq!(ConsumerConfig::from_vars(&lookup(consumer(&c))).unwrap(), c);
        let r = RedriverConfig::from_vars(&set()).unwrap();
        assert_eq!(RedriverConfig::from_vars(&lookup(redriver(&r))).unwrap(), r);
        assert_eq!(r.pause_on_alarms, ["a", "b"]);
        let auto = RedriverConfig {
            max_messages_per_run: None,
            ..r
        };
        let back = RedriverConfig::from_vars(&lookup(redriver(&auto))).unwrap();
        assert_eq!(back, auto);
    }
}
