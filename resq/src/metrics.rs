//! CloudWatch Embedded Metric Format: metrics as log lines, no API calls. Named as
//! Powertools Metrics names them: the namespace is the message type's (resq's `resq` by
//! default, `POWERTOOLS_METRICS_NAMESPACE` overrides), every metric has the dimensions
//! `service` and `function_name`, and a cold start writes `ColdStart`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::reason::ArchiveReason;
use crate::telemetry::{LogLevel, Telemetry};

/// Dimension naming the service (`POWERTOOLS_SERVICE_NAME`), on every metric.
pub const DIMENSION_SERVICE: &str = "service";
/// Dimension naming the function that emitted the metric, on every metric.
pub const DIMENSION_FUNCTION: &str = "function_name";
/// Dimension of `Archived` by reason.
pub(crate) const DIMENSION_REASON: &str = "reason";
/// 1 for an invocation that started a new process (a cold start), in a document of its own
/// with the dimensions `function_name` and `service`, as Powertools Metrics writes it.
pub(crate) const COLD_START: &str = "ColdStart";

/// Messages archived to S3 (also emitted per `Reason`).
pub const ARCHIVED: &str = "Archived";

/// Counts for one invocation, and its percentages, written out as EMF lines.
#[derive(Debug, Clone)]
pub struct Metrics {
    counts: BTreeMap<&'static str, u64>,
    archived: BTreeMap<ArchiveReason, u64>,
    percents: BTreeMap<&'static str, f64>,
}

impl Metrics {
    /// Metrics with `names` reported even when zero (alarms then see 0, not missing data).
    pub fn new(names: &[&'static str]) -> Self {
        Self {
            counts: names.iter().map(|n| (*n, 0)).collect(),
            archived: BTreeMap::new(),
            percents: BTreeMap::new(),
        }
    }

    /// Adds `n` to a count.
    pub fn add(&mut self, name: &'static str, n: u64) {
        *self.counts.entry(name).or_default() += n;
    }

    /// Adds `n` archived messages of one reason: to `Archived` and to `Archived` by `Reason`.
    pub fn add_archived(&mut self, reason: ArchiveReason, n: u64) {
        self.add(ARCHIVED, n);
        *self.archived.entry(reason).or_default() += n;
    }

    /// The value of a count.
    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// Sets a percentage (unit `Percent`): written only once set, so that an invocation with
    /// nothing to measure leaves no datapoint.
    pub fn set_percent(&mut self, name: &'static str, value: f64) {
        self.percents.insert(name, value);
    }

    /// A percentage, when set.
    pub fn percent(&self, name: &str) -> Option<f64> {
        self.percents.get(name).copied()
    }

    /// The EMF documents in `t`'s namespace: one with every count and percentage by `service`
    /// and `function_name`, one per archive reason (by `service`, `function_name` and `reason`).
    pub(crate) fn to_emf(&self, t: &Telemetry, timestamp_ms: i64) -> Vec<Value> {
        let mut docs = Vec::new();
        let mut root = Map::new();
        root.insert(DIMENSION_SERVICE.into(), json!(t.service));
        root.insert(DIMENSION_FUNCTION.into(), json!(t.function_name));
        for (name, value) in &self.counts {
            root.insert((*name).into(), json!(value));
        }
        for (name, value) in &self.percents {
            root.insert((*name).into(), json!(value));
        }
        let counts = self.counts.keys().map(|n| (n, "Count"));
        let percents = self.percents.keys().map(|n| (n, "Percent"));
        let defs: Vec<Value> = counts
            .chain(percents)
            .map(|(n, unit)| json!({"Name": n, "Unit": unit}))
            .collect();
        root.insert(
            "_aws".into(),
            aws_block(
                &t.namespace,
                timestamp_ms,
                &[DIMENSION_SERVICE, DIMENSION_FUNCTION],
                defs,
            ),
        );
        docs.push(Value::Object(root));
        for (reason, value) in &self.archived {
            docs.push(json!({
                "_aws": aws_block(&t.namespace, timestamp_ms, &[DIMENSION_SERVICE, DIMENSION_FUNCTION, DIMENSION_REASON], vec![json!({"Name": ARCHIVED, "Unit": "Count"})]),
                DIMENSION_SERVICE: t.service,
                DIMENSION_FUNCTION: t.function_name,
                DIMENSION_REASON: reason.code(),
                ARCHIVED: value,
            }));
        }
        docs
    }

    /// The EMF documents as log lines that Lambda's log-level filter files under `level` (see
    /// `LogLevel::for_metrics`): above INFO each carries `level` and an RFC 3339 `timestamp`.
    pub fn to_lines(
        &self,
        t: &Telemetry,
        at: chrono::DateTime<chrono::Utc>,
        level: LogLevel,
    ) -> Vec<String> {
        self.to_emf(t, at.timestamp_millis())
            .into_iter()
            .map(|doc| line(doc, at, level))
            .collect()
    }

    /// Prints the EMF lines on stdout, where Lambda's log agent picks them up, named by this
    /// process's telemetry ([`crate::telemetry::current`]), at the level that survives the
    /// configured `AWS_LAMBDA_LOG_LEVEL`.
    pub fn emit(&self) {
        let t = crate::telemetry::current();
        self.write_lines(&mut std::io::stdout().lock(), t, LogLevel::configured());
    }

    /// Writes the EMF lines to `out` straight, not through the log subscriber: no log filter
    /// (`RUST_LOG`, `POWERTOOLS_LOG_LEVEL`, the level a line is logged at) drops a metric;
    /// only Lambda's own level (`configured`) sets the `level` each line carries.
    fn write_lines(&self, out: &mut impl std::io::Write, t: &Telemetry, configured: LogLevel) {
        let level = LogLevel::for_metrics(configured);
        for line in self.to_lines(t, chrono::Utc::now(), level) {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// The `ColdStart` document: `ColdStart` 1 by `function_name` and `service`, as Powertools
/// Metrics writes it on a cold start.
pub(crate) fn cold_start_emf(t: &Telemetry, timestamp_ms: i64) -> Value {
    json!({
        "_aws": aws_block(&t.namespace, timestamp_ms, &[DIMENSION_FUNCTION, DIMENSION_SERVICE], vec![json!({"Name": COLD_START, "Unit": "Count"})]),
        DIMENSION_FUNCTION: t.function_name,
        DIMENSION_SERVICE: t.service,
        COLD_START: 1,
    })
}

/// The `ColdStart` line, as [`Metrics::to_lines`] writes its lines.
pub fn cold_start_line(
    t: &Telemetry,
    at: chrono::DateTime<chrono::Utc>,
    level: LogLevel,
) -> String {
    line(cold_start_emf(t, at.timestamp_millis()), at, level)
}

/// Prints the `ColdStart` line on stdout, as [`Metrics::emit`] prints its lines.
pub(crate) fn emit_cold_start(t: &Telemetry) {
    let level = LogLevel::for_metrics(LogLevel::configured());
    println!("{}", cold_start_line(t, chrono::Utc::now(), level));
}

/// An EMF document as a line Lambda's filter files under `level`. At INFO or below it carries
/// neither `level` nor `timestamp`, as Powertools' EMF lines: Lambda files a line without them
/// as INFO, and the two keys are a tenth of a healthy consumer's log bytes.
fn line(mut doc: Value, at: chrono::DateTime<chrono::Utc>, level: LogLevel) -> String {
    if level <= LogLevel::Info {
        return doc.to_string();
    }
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("level".into(), json!(level.as_str()));
        obj.insert(
            "timestamp".into(),
            json!(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        );
    }
    doc.to_string()
}

fn aws_block(
    namespace: &str,
    timestamp_ms: i64,
    dimensions: &[&str],
    metrics: Vec<Value>,
) -> Value {
    json!({
        "Timestamp": timestamp_ms,
        "CloudWatchMetrics": [{"Namespace": namespace, "Dimensions": [dimensions], "Metrics": metrics}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Names;

    #[test]
    fn emf_documents_declare_what_they_carry() {
        let t = Telemetry::of(Names::ORDERS, "orders-consumer", Some(256)).unwrap();
        let mut m = Metrics::new(&["Processed", "Retried"]);
        m.add("Processed", 3);
        m.add_archived(ArchiveReason::RedriveCap, 1);
        m.add_archived(ArchiveReason::RedriveCap, 1);
        m.add_archived(ArchiveReason::InvalidRedriveCount, 1);
        let docs = m.to_emf(&t, 1_700_000_000_000);
        assert_eq!(docs.len(), 3);
        let main = &docs[0];
        assert_eq!(main["Processed"], 3);
        assert_eq!(main["Retried"], 0);
        assert_eq!(main["Archived"], 3);
        assert_eq!(
            (&main["function_name"], &main["service"]),
            (&json!("orders-consumer"), &json!("orders"))
        );
        let cw = &main["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(cw["Namespace"], "resq");
        assert_eq!(cw["Dimensions"], json!([["service", "function_name"]]));
        // every declared metric is present as a number at the root
        for def in cw["Metrics"].as_array().unwrap() {
            assert!(main[def["Name"].as_str().unwrap()].is_u64());
        }
        let by_reason: Vec<(String, u64)> = docs[1..]
            .iter()
            .map(|d| {
                (
                    d["reason"].as_str().unwrap().to_owned(),
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
            json!([["service", "function_name", "reason"]])
        );
        assert!(docs[1..].iter().all(|d| d["service"] == "orders"));
    }

    #[test]
    fn a_percentage_is_written_in_percent_only_once_set() {
        let t = Telemetry::of(Names::ORDERS, "orders-consumer", None).unwrap();
        let mut m = Metrics::new(&["Processed"]);
        let declared = |m: &Metrics| {
            let doc = m.to_emf(&t, 1).remove(0);
            let defs = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].clone();
            (doc, defs)
        };
        // not set: no datapoint, nothing declared
        let (doc, defs) = declared(&m);
        assert!(doc.get("FailurePercent").is_none());
        assert_eq!(defs, json!([{"Name": "Processed", "Unit": "Count"}]));
        // set: its value, declared in Percent beside the counts
        m.set_percent("FailurePercent", 100.0 / 3.0);
        assert_eq!(m.percent("FailurePercent"), Some(100.0 / 3.0));
        let (doc, defs) = declared(&m);
        assert_eq!(doc["FailurePercent"].as_f64(), Some(100.0 / 3.0));
        assert_eq!(
            defs,
            json!([{"Name": "Processed", "Unit": "Count"}, {"Name": "FailurePercent", "Unit": "Percent"}])
        );
    }

    #[test]
    fn the_namespace_and_service_are_the_telemetrys() {
        // GIVEN a payments service whose namespace is its own
        let names = Names {
            service: "payments",
            namespace: "acme/payments",
            ..Names::ORDERS
        };
        let t = Telemetry::of(names, "payments-consumer", None).unwrap();
        let mut m = Metrics::new(&["Processed"]);
        m.add_archived(ArchiveReason::TtlExpired, 1);
        // THEN every document is in its namespace, by its service
        for doc in m.to_emf(&t, 1) {
            assert_eq!(
                doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
                "acme/payments"
            );
            assert_eq!(doc["service"], "payments");
        }
        // and a cold start is Powertools' ColdStart document
        let cold = cold_start_emf(&t, 7);
        assert_eq!(cold["ColdStart"], 1);
        assert_eq!(
            cold["_aws"]["CloudWatchMetrics"][0],
            json!({"Namespace": "acme/payments", "Dimensions": [["function_name", "service"]], "Metrics": [{"Name": "ColdStart", "Unit": "Count"}]})
        );
        assert_eq!(
            (&cold["function_name"], &cold["service"]),
            (&json!("payments-consumer"), &json!("payments"))
        );
    }

    #[test]
    fn metric_lines_bypass_the_log_filter() {
        use tracing_subscriber::prelude::*;
        // GIVEN logging switched off as RUST_LOG=off or POWERTOOLS_LOG_LEVEL=SILENT leave it
        let t = Telemetry::of(Names::ORDERS, "orders-consumer", None).unwrap();
        let mut m = Metrics::new(&["Processed"]);
        m.add("Processed", 10);
        for filter in [
            crate::telemetry::LogSettings::from_values(None, None, Some("SILENT"), None).filter,
            crate::telemetry::LogSettings::from_values(None, Some("INFO"), None, Some("off"))
                .filter,
        ] {
            let filter: tracing_subscriber::filter::Targets = filter.parse().unwrap();
            let logs = tracing_subscriber::registry().with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::sink)
                    .with_filter(filter),
            );
            // WHEN the invocation's metrics are written
            let mut out = Vec::new();
            tracing::subscriber::with_default(logs, || {
                tracing::info!("dropped by the filter");
                m.write_lines(&mut out, &t, LogLevel::Info);
            });
            // THEN every line is written, an EMF document Lambda keeps at INFO
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text.lines().count(), 1, "{text}");
            let doc: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
            assert_eq!(doc["Processed"], 10);
            assert!(crate::lambda::application_log_kept(
                text.trim(),
                LogLevel::Info
            ));
        }
    }

    #[test]
    fn metric_lines_survive_every_lambda_log_level() {
        // GIVEN the metric lines a function prints under each application log level
        let t = Telemetry::of(Names::ORDERS, "orders-consumer", None).unwrap();
        let mut m = Metrics::new(&["Processed"]);
        m.add_archived(ArchiveReason::TtlExpired, 1);
        let at = chrono::Utc::now();
        for configured in LogLevel::ALL {
            let mut lines = m.to_lines(&t, at, LogLevel::for_metrics(configured));
            lines.push(cold_start_line(&t, at, LogLevel::for_metrics(configured)));
            assert_eq!(lines.len(), 3);
            for line in &lines {
                // THEN Lambda's filter keeps every one, and each is still an EMF document
                assert!(
                    crate::lambda::application_log_kept(line, configured),
                    "{configured:?} drops {line}"
                );
                let doc: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(doc["_aws"]["Timestamp"], at.timestamp_millis());
                // a level only where INFO would be dropped: at INFO the line needs none
                let labelled = configured > LogLevel::Info;
                assert_eq!(doc.get("level").is_some(), labelled, "{line}");
                assert_eq!(doc.get("timestamp").is_some(), labelled, "{line}");
            }
        }
        // and without the level field Lambda would drop them above INFO
        let bare = m.to_emf(&t, at.timestamp_millis())[0].to_string();
        assert!(!crate::lambda::application_log_kept(&bare, LogLevel::Warn));
    }
}
