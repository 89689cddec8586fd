//! What the redriver's unit tests share: a configuration, dead letters, and alarms whose
//! states a test sets.

use std::sync::Mutex;
use std::time::Duration;

use crate::config::RedriverConfig;
use resq::attributes::{AttributeValue, X_FAILURE_CLASS, X_FAILURE_REASON};
use resq::config::Vars;
use resq::sqs::ReceivedMessage;

use crate::ports::{AlarmState, Alarms, PortError};

/// An hour, in millis.
pub const HOUR_MS: u64 = 3_600_000;
/// The main queue of [`config`].
pub const MAIN: &str = "http://127.0.0.1/1/orders";
/// The DLQ of [`config`].
pub const DLQ: &str = "http://127.0.0.1/1/orders-dlq";

/// A configuration on [`MAIN`] and [`DLQ`] at 1,000 replays a second, with `extra` variables.
pub fn config(extra: &[(&str, &str)]) -> RedriverConfig {
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = RedriverConfig::from_vars(&Vars(move |k: &str| {
        if let Some((_, v)) = extra.iter().find(|(n, _)| n == k) {
            return Some(v.clone());
        }
        match k {
            "MAIN_QUEUE_URL" => Some(MAIN.into()),
            "DLQ_URL" => Some(DLQ.into()),
            "ARCHIVE_BUCKET" => Some("b".into()),
            "REDRIVE_RATE_PER_SECOND" => Some("1000".into()),
            _ => None,
        }
    }));
    config.unwrap_or_else(|e| panic!("{e}"))
}

/// A dead letter with a reason (a transient failure, unless `attrs` say otherwise), the body
/// of order `id`.
pub fn dlq_message(id: &str, sent_ms: u64, attrs: &[(&str, AttributeValue)]) -> ReceivedMessage {
    let mut m = unexplained(id, sent_ms, attrs);
    for (name, value) in [
        (X_FAILURE_CLASS, "transient"),
        (X_FAILURE_REASON, "DOWNSTREAM_UNAVAILABLE"),
    ] {
        m.message_attributes
            .entry(name.to_owned())
            .or_insert_with(|| AttributeValue::string(value));
    }
    m
}

/// A dead letter SQS moved without a reason.
pub fn unexplained(id: &str, sent_ms: u64, attrs: &[(&str, AttributeValue)]) -> ReceivedMessage {
    let body = format!("{{\"orderId\":\"{id}\"}}");
    resq_testing::received(id, &body, sent_ms, attrs)
}

/// The attributes of a permanent failure of `reason`.
pub fn permanent(reason: &str) -> Vec<(&'static str, AttributeValue)> {
    vec![
        (X_FAILURE_CLASS, AttributeValue::string("permanent")),
        (X_FAILURE_REASON, AttributeValue::string(reason)),
    ]
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Alarm states a test sets. An alarm not set does not exist.
#[derive(Debug)]
pub struct FixedAlarms {
    state: Mutex<Result<Vec<AlarmState>, PortError>>,
}

impl Default for FixedAlarms {
    fn default() -> Self {
        Self {
            state: Mutex::new(Ok(Vec::new())),
        }
    }
}

impl FixedAlarms {
    /// Sets one alarm: in `ALARM` or not (then it left `ALARM`), its last change `changed_ago`
    /// before now, its threshold per 60 s period, held 15 periods.
    pub fn set(&self, name: &str, in_alarm: bool, changed_ago: Duration, threshold: f64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let state = AlarmState {
            name: name.to_owned(),
            in_alarm,
            changed_at_ms: Some(now.saturating_sub(changed_ago).as_millis() as u64),
            period: Some(Duration::from_secs(60)),
            evaluation_periods: Some(15),
            threshold: Some(threshold),
            left_alarm: Some(!in_alarm),
        };
        let mut all = lock(&self.state);
        let mut list = all.as_ref().cloned().unwrap_or_default();
        list.retain(|s| s.name != name);
        list.push(state);
        *all = Ok(list);
    }

    /// Makes the states unreadable: every read fails with `e`.
    pub fn fail(&self, e: PortError) {
        *lock(&self.state) = Err(e);
    }
}

impl Alarms for FixedAlarms {
    async fn states(&self, names: &[String]) -> Result<Vec<AlarmState>, PortError> {
        lock(&self.state).clone().map(|all| {
            all.into_iter()
                .filter(|s| names.contains(&s.name))
                .collect()
        })
    }
}
