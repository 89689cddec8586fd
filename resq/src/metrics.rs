//! CloudWatch Embedded Metric Format: metrics as log lines, no API calls.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::reason::ArchiveReason;
use crate::telemetry::LogLevel;

/// Namespace of every resq metric.
pub const NAMESPACE: &str = "resq";
/// Dimension naming the function that emitted the metric.
pub const DIMENSION_FUNCTION: &str = "FunctionName";
/// Dimension of `Archived` by reason.
pub const DIMENSION_REASON: &str = "Reason";

/// Records handled successfully.
pub const PROCESSED: &str = "Processed";
/// Records reported for retry.
pub const RETRIED: &str = "Retried";
/// Records the consumer sent to the DLQ itself (permanent failures).
pub const DEAD_LETTERED: &str = "DeadLettered";
/// Messages archived to S3 (also emitted per `Reason`).
pub const ARCHIVED: &str = "Archived";
/// Messages replayed from the DLQ.
pub const REDRIVEN: &str = "Redriven";
/// DLQ messages left in place (permanent failures kept for a human).
pub const REDRIVE_SKIPPED: &str = "RedriveSkipped";
/// DLQ messages whose replay did not complete (left in the DLQ).
pub const REDRIVE_FAILED: &str = "RedriveFailed";
/// 1 for a redriver run the circuit breaker paused (it archived but replayed nothing), else 0.
pub const REDRIVE_PAUSED: &str = "RedrivePaused";
/// A replay that failed again, counted once per failed replay by the consumer, the moment the
/// replayed copy first fails (the replays-failing alarm, and so the breaker, watch it).
pub const REDRIVE_RETURNED: &str = "RedriveReturned";

/// Kept permanent failures hidden in the DLQ now (a gauge, one value per redriver run): DLQ
/// depth less this is what waits for replay.
pub const KEPT: &str = "Kept";
/// Dead letters that reached the DLQ without `x-failure-class` (SQS moved them after
/// invocations that crashed or timed out), counted once by the redriver, the first time it
/// sees each; the replays-failing alarm counts them as failed replays.
pub const DEAD_LETTERED_UNEXPLAINED: &str = "DeadLetteredUnexplained";
/// 1 for a redriver run whose replay has been paused longer than the pausing alarm's hold, or
/// paused by an alarm it cannot read; else 0.
pub const REDRIVE_PAUSED_TOO_LONG: &str = "RedrivePausedTooLong";

/// Counts for one invocation, written out as EMF lines.
#[derive(Debug, Clone)]
pub struct Metrics {
    function_name: String,
    counts: BTreeMap<&'static str, u64>,
    archived: BTreeMap<ArchiveReason, u64>,
}

impl Metrics {
    /// Metrics for `function_name`, with `names` reported even when zero (alarms then see 0,
    /// not missing data).
    pub fn new(function_name: impl Into<String>, names: &[&'static str]) -> Self {
        Self {
            function_name: function_name.into(),
            counts: names.iter().map(|n| (*n, 0)).collect(),
            archived: BTreeMap::new(),
        }
    }

    /// The function name Lambda gives, or `fallback` outside Lambda.
    pub fn function_name_from_env(fallback: &str) -> String {
        std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| fallback.to_owned())
    }

    /// Adds `n` to a count.
    pub fn add(&mut self, name: &'static str, n: u64) {
        *self.counts.entry(name).or_default() += n;
    }

    /// Adds one archived message: to `Archived` and to `Archived` by `Reason`.
    pub fn add_archived(&mut self, reason: ArchiveReason) {
        self.add_archived_n(reason, 1);
    }

    /// Adds `n` archived messages of one reason.
    pub fn add_archived_n(&mut self, reason: ArchiveReason, n: u64) {
        self.add(ARCHIVED, n);
        *self.archived.entry(reason).or_default() += n;
    }

    /// The value of a count.
    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// The EMF documents: one with every count by function, one per archive reason.
    pub fn to_emf(&self, timestamp_ms: i64) -> Vec<Value> {
        let mut docs = Vec::new();
        let mut root = Map::new();
        root.insert(DIMENSION_FUNCTION.into(), json!(self.function_name));
        for (name, value) in &self.counts {
            root.insert((*name).into(), json!(value));
        }
        let defs: Vec<Value> = self
            .counts
            .keys()
            .map(|n| json!({"Name": n, "Unit": "Count"}))
            .collect();
        root.insert(
            "_aws".into(),
            aws_block(timestamp_ms, &[DIMENSION_FUNCTION], defs),
        );
        docs.push(Value::Object(root));
        for (reason, value) in &self.archived {
            docs.push(json!({
                "_aws": aws_block(timestamp_ms, &[DIMENSION_FUNCTION, DIMENSION_REASON], vec![json!({"Name": ARCHIVED, "Unit": "Count"})]),
                DIMENSION_FUNCTION: self.function_name,
                DIMENSION_REASON: reason.code(),
                ARCHIVED: value,
            }));
        }
        docs
    }

    /// The EMF documents as log lines, each with a `level` and an RFC 3339 `timestamp` so that
    /// Lambda's log-level filter files it under `level` (see [`LogLevel::for_metrics`]).
    pub fn to_lines(&self, at: chrono::DateTime<chrono::Utc>, level: LogLevel) -> Vec<String> {
        let stamp = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        self.to_emf(at.timestamp_millis())
            .into_iter()
            .map(|mut doc| {
                if let Some(obj) = doc.as_object_mut() {
                    obj.insert("level".into(), json!(level.as_str()));
                    obj.insert("timestamp".into(), json!(stamp));
                }
                doc.to_string()
            })
            .collect()
    }

    /// Prints the EMF lines on stdout, where Lambda's log agent picks them up, at the level
    /// that survives the configured `AWS_LAMBDA_LOG_LEVEL`.
    pub fn emit(&self) {
        let level = LogLevel::for_metrics(LogLevel::configured());
        for line in self.to_lines(chrono::Utc::now(), level) {
            println!("{line}");
        }
    }
}

fn aws_block(timestamp_ms: i64, dimensions: &[&str], metrics: Vec<Value>) -> Value {
    json!({
        "Timestamp": timestamp_ms,
        "CloudWatchMetrics": [{"Namespace": NAMESPACE, "Dimensions": [dimensions], "Metrics": metrics}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_documents_declare_what_they_carry() {
        let mut m = Metrics::new("orders-consumer", &[PROCESSED, RETRIED]);
        m.add(PROCESSED, 3);
        m.add_archived(ArchiveReason::RedriveCap);
        m.add_archived(ArchiveReason::RedriveCap);
        m.add_archived(ArchiveReason::InvalidRedriveCount);
        let docs = m.to_emf(1_700_000_000_000);
        assert_eq!(docs.len(), 3);
        let main = &docs[0];
        assert_eq!(main["Processed"], 3);
        assert_eq!(main["Retried"], 0);
        assert_eq!(main["Archived"], 3);
        assert_eq!(main["FunctionName"], "orders-consumer");
        let cw = &main["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(cw["Namespace"], "resq");
        assert_eq!(cw["Dimensions"], json!([["FunctionName"]]));
        // every declared metric is present as a number at the root
        for def in cw["Metrics"].as_array().unwrap() {
            assert!(main[def["Name"].as_str().unwrap()].is_u64());
        }
        let by_reason: Vec<(String, u64)> = docs[1..]
            .iter()
            .map(|d| {
                (
                    d["Reason"].as_str().unwrap().to_owned(),
                    d["Archived"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            by_reason,
            vec![
                ("REDRIVE_CAP".into(), 2),
                ("INVALID_REDRIVE_COUNT".into(), 1)
            ]
        );
        assert_eq!(
            docs[1]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["FunctionName", "Reason"]])
        );
    }

    #[test]
    fn metric_lines_survive_every_lambda_log_level() {
        // GIVEN the metric lines a function prints under each application log level
        let mut m = Metrics::new("orders-consumer", &[PROCESSED]);
        m.add_archived(ArchiveReason::TtlExpired);
        let at = chrono::Utc::now();
        for configured in LogLevel::ALL {
            let lines = m.to_lines(at, LogLevel::for_metrics(configured));
            assert_eq!(lines.len(), 2);
            for line in &lines {
                // THEN Lambda's filter keeps every one, and each is still an EMF document
                assert!(
                    crate::lambda::application_log_kept(line, configured),
                    "{configured:?} drops {line}"
                );
                let doc: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(doc["_aws"]["Timestamp"], at.timestamp_millis());
            }
        }
        // and without the level field Lambda would drop them above INFO
        let bare = m.to_emf(at.timestamp_millis())[0].to_string();
        assert!(!crate::lambda::application_log_kept(&bare, LogLevel::Warn));
    }
}
