//! Lambda's log pipeline, locally, for the metrics: CloudWatch Logs turns the Embedded Metric
//! Format lines that reach it (those Lambda's log-level filter keeps) into metric data. The
//! local runtime ([`crate::chaos::runtime`]) hands the kept EMF lines of a function to a
//! [`MetricForwarder`], which puts them into the emulator's CloudWatch, so that the template's
//! alarms (on LocalStack, which evaluates them) see what they would see in AWS.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
use serde_json::Value;
use tokio::sync::mpsc;

/// The `Errors` datum Lambda itself puts into CloudWatch (`AWS/Lambda`, by `FunctionName`)
/// for `errors` failed invocations of `function_name` (a crash, a timeout, an init error), as
/// a document for the [`MetricForwarder`]: locally nothing else reports them.
pub fn lambda_errors(function_name: &str, errors: u32) -> Value {
    serde_json::json!({
        "_aws": {
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": "AWS/Lambda",
                "Dimensions": [["FunctionName"]],
                "Metrics": [{"Name": "Errors", "Unit": "Count"}]
            }]
        },
        "FunctionName": function_name,
        "Errors": errors
    })
}

/// The metric data one EMF document carries: (namespace, datum) for each metric of each
/// dimension set of each directive. Documents that are not EMF give nothing.
pub fn datums(doc: &Value) -> Vec<(String, MetricDatum)> {
    let Some(directives) = doc["_aws"]["CloudWatchMetrics"].as_array() else {
        return Vec::new();
    };
    let at = doc["_aws"]["Timestamp"].as_i64().map(DateTime::from_millis);
    let mut out = Vec::new();
    for d in directives {
        let Some(namespace) = d["Namespace"].as_str() else {
            continue;
        };
        let sets: Vec<Vec<&str>> = d["Dimensions"]
            .as_array()
            .map(|sets| {
                sets.iter()
                    .filter_map(|s| s.as_array())
                    .map(|s| s.iter().filter_map(Value::as_str).collect())
                    .collect()
            })
            .unwrap_or_default();
        for m in d["Metrics"].as_array().into_iter().flatten() {
            let (Some(name), Some(value)) = (
                m["Name"].as_str(),
                m["Name"].as_str().and_then(|n| doc[n].as_f64()),
            ) else {
                continue;
            };
            let unit = m["Unit"].as_str().map(StandardUnit::from);
            for set in &sets {
                let dimensions: Vec<Dimension> = set
                    .iter()
                    .map(|k| {
                        let v = match &doc[*k] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        Dimension::builder().name(*k).value(v).build()
                    })
                    .collect();
                let datum = MetricDatum::builder()
                    .metric_name(name)
                    .set_dimensions(Some(dimensions))
                    .value(value)
                    .set_unit(unit.clone())
                    .set_timestamp(at)
                    .build();
                out.push((namespace.to_owned(), datum));
            }
        }
    }
    out
}

/// Puts the metric data of EMF documents into CloudWatch, as they come.
pub struct MetricForwarder {
    tx: mpsc::UnboundedSender<Value>,
    /// Datums accepted by CloudWatch so far.
    pub sent: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl MetricForwarder {
    /// A forwarder into `client`'s CloudWatch.
    pub fn start(client: aws_sdk_cloudwatch::Client) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        let sent = Arc::new(AtomicU64::new(0));
        let s = sent.clone();
        let task = tokio::spawn(async move {
            while let Some(doc) = rx.recv().await {
                // what came meanwhile goes in the same calls (PutMetricData takes up to 1,000
                // data): a busy consumer's lines do not queue up behind one call each
                let mut docs = vec![doc];
                while docs.len() < 100
                    && let Ok(more) = rx.try_recv()
                {
                    docs.push(more);
                }
                let mut by_namespace: std::collections::BTreeMap<String, Vec<MetricDatum>> =
                    Default::default();
                for (ns, datum) in docs.iter().flat_map(datums) {
                    by_namespace.entry(ns).or_default().push(datum);
                }
                for (ns, data) in by_namespace {
                    let n = data.len() as u64;
                    match client
                        .put_metric_data()
                        .namespace(&ns)
                        .set_metric_data(Some(data))
                        .send()
                        .await
                    {
                        Ok(_) => {
                            s.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(e) => {
                            tracing::warn!(error = %resq::error::AwsError::from_sdk(e), "metric forwarding: PutMetricData failed");
                        }
                    }
                }
            }
        });
        Self { tx, sent, task }
    }

    /// Where a runtime sends the EMF documents its function printed.
    pub fn sender(&self) -> mpsc::UnboundedSender<Value> {
        self.tx.clone()
    }
}

impl Drop for MetricForwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An EMF document, if the line is one.
pub fn emf_document(line: &str) -> Option<Value> {
    if !line.contains("\"_aws\"") {
        return None;
    }
    let doc: Value = serde_json::from_str(line).ok()?;
    doc["_aws"]["CloudWatchMetrics"].is_array().then_some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::metrics::{self, Metrics};
    use resq::reason::ArchiveReason;
    use resq::telemetry::{LogLevel, Names, Telemetry};

    #[test]
    fn a_functions_metric_lines_become_the_metric_data_cloudwatch_would_extract() {
        // GIVEN the lines the consumer prints for one invocation, a cold one
        let t = Telemetry::of(Names::ORDERS, "resq-soak-consumer", Some(256)).unwrap();
        let mut m = Metrics::new(&[
            resq_consumer::account::PROCESSED,
            resq_consumer::account::REDRIVE_RETURNED,
        ]);
        m.add(resq_consumer::account::REDRIVE_RETURNED, 3);
        m.add_archived(ArchiveReason::RedriveCap, 1);
        let at = chrono::Utc::now();
        let mut lines = m.to_lines(&t, at, LogLevel::Warn);
        lines.push(metrics::cold_start_line(&t, at, LogLevel::Warn));
        let docs: Vec<Value> = lines.iter().filter_map(|l| emf_document(l)).collect();
        assert_eq!(docs.len(), 3);
        // WHEN they are read as CloudWatch Logs reads EMF
        let data: Vec<(String, MetricDatum)> = docs.iter().flat_map(datums).collect();
        // THEN each metric is a datum in resq's namespace by service and function (what the
        // template's alarms watch), Archived also by reason
        let dims = |d: &MetricDatum| -> Vec<(String, String)> {
            d.dimensions()
                .iter()
                .map(|x| {
                    let (n, v) = (x.name().unwrap_or_default(), x.value().unwrap_or_default());
                    (n.to_owned(), v.to_owned())
                })
                .collect()
        };
        let find = |name: &str, n: usize| {
            data.iter()
                .find(|(_, d)| d.metric_name() == Some(name) && d.dimensions().len() == n)
                .map(|(ns, d)| (ns.clone(), d.value(), dims(d)))
        };
        let by_function = vec![
            ("service".to_owned(), "orders".to_owned()),
            ("function_name".to_owned(), "resq-soak-consumer".to_owned()),
        ];
        assert_eq!(
            find("RedriveReturned", 2),
            Some(("resq".into(), Some(3.0), by_function.clone()))
        );
        assert_eq!(find("Processed", 2).map(|f| f.1), Some(Some(0.0)));
        let archived = find("Archived", 3).unwrap();
        assert_eq!(archived.1, Some(1.0));
        assert_eq!(
            archived.2[2],
            ("reason".to_owned(), "REDRIVE_CAP".to_owned())
        );
        let cold = find("ColdStart", 2).unwrap();
        assert_eq!(cold.1, Some(1.0));
        assert_eq!(
            cold.2,
            vec![
                ("function_name".to_owned(), "resq-soak-consumer".to_owned()),
                ("service".to_owned(), "orders".to_owned()),
            ]
        );
        assert!(data.iter().all(|(_, d)| d.timestamp().is_some()));
        assert!(emf_document(r#"{"level":"WARN","message":"x"}"#).is_none());
    }
}
