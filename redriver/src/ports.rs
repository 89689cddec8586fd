//! The redriver's ports (queues, alarms) and their AWS adapters.

use std::future::Future;
use std::time::Duration;

use aws_sdk_cloudwatch::types::{AlarmType, HistoryItemType, ScanBy, StateValue};
use aws_sdk_sqs::types::Message;
use resq::attributes::AttributeValue;

pub use crate::breaker::AlarmState;
use crate::classify::{DlqMessage, RedriveCopy};

/// A call that did not go through.
pub type PortError = resq::sqs::AwsError;

/// A received message to delete or release: (message id, receipt handle).
pub type Receipt = (String, String);

/// What the redriver needs from SQS.
pub trait RedriveQueues: Send + Sync {
    /// Receives up to `max` (≤ 10) DLQ messages with every attribute, hidden for `visibility`
    /// seconds.
    fn receive(
        &self,
        max: i32,
        visibility: i32,
        wait_seconds: i32,
    ) -> impl Future<Output = Result<Vec<DlqMessage>, PortError>> + Send;

    /// Sends up to 10 copies to the main queue in one call; per entry `None` when SQS reported
    /// it `Successful`, else why not. `Err` when the call itself failed (nothing was sent).
    fn send_batch(
        &self,
        copies: &[&RedriveCopy],
    ) -> impl Future<Output = Result<Vec<Option<String>>, PortError>> + Send;

    /// Deletes from the DLQ; returns the receipts that could not be deleted, with why.
    fn delete(&self, receipts: Vec<Receipt>)
    -> impl Future<Output = Vec<(Receipt, String)>> + Send;

    /// Sets DLQ messages' visibility timeouts (0 makes them visible at once); returns the
    /// changes that did not happen, with why (those messages come back when their current
    /// timeout ends).
    fn change_visibility(
        &self,
        changes: Vec<(Receipt, i32)>,
    ) -> impl Future<Output = Vec<(Receipt, String)>> + Send;
}

/// Alarm states for the circuit breaker.
pub trait Alarms: Send + Sync {
    /// The states of the alarms among `names` that exist (a missing one is left out; the
    /// breaker then stays open). `Err` when they cannot be read.
    fn states(
        &self,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<AlarmState>, PortError>> + Send;
}

pub use resq::sqs::SqsQueues;

/// Reads an SDK message into the redriver's form.
pub fn dlq_message(m: Message) -> DlqMessage {
    let mut message_attributes = resq::attributes::MessageAttributes::new();
    let mut dropped_attributes = Vec::new();
    for (name, v) in m.message_attributes.unwrap_or_default() {
        match AttributeValue::from_sdk(&v) {
            Some(a) => {
                message_attributes.insert(name, a);
            }
            None => dropped_attributes.push(name),
        }
    }
    DlqMessage {
        message_id: m.message_id.unwrap_or_default(),
        receipt_handle: m.receipt_handle.unwrap_or_default(),
        body: m.body.unwrap_or_default(),
        attributes: m
            .attributes
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k.as_str().to_owned(), v))
            .collect(),
        message_attributes,
        dropped_attributes,
    }
}

/// What [`RedriveQueues`] on SQS needs: receives, deletes and visibility changes on the DLQ
/// (batch calls authorize as their single ones), copies sent to the main queue.
pub const QUEUE_PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("sqs:ReceiveMessage", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:DeleteMessage", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:ChangeMessageVisibility", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:SendMessage", "OrdersQueue"),
];

/// [`RedriveQueues`] on real SQS: receives, deletes and visibility changes on the DLQ, copies
/// to the main queue.
impl RedriveQueues for SqsQueues {
    async fn receive(
        &self,
        max: i32,
        visibility: i32,
        wait_seconds: i32,
    ) -> Result<Vec<DlqMessage>, PortError> {
        let messages = resq::sqs::receive(
            &self.client,
            &self.dlq_url,
            max,
            Some(visibility),
            wait_seconds,
        )
        .await?;
        Ok(messages.into_iter().map(dlq_message).collect())
    }

    async fn send_batch(&self, copies: &[&RedriveCopy]) -> Result<Vec<Option<String>>, PortError> {
        resq::sqs::send_batch(&self.client, &self.main_queue_url, copies).await
    }

    async fn delete(&self, receipts: Vec<Receipt>) -> Vec<(Receipt, String)> {
        let handles: Vec<&str> = receipts.iter().map(|(_, rh)| rh.as_str()).collect();
        resq::sqs::delete(&self.client, &self.dlq_url, &handles)
            .await
            .into_iter()
            .filter_map(|(i, why)| receipts.get(i).map(|r| (r.clone(), why)))
            .collect()
    }

    async fn change_visibility(&self, changes: Vec<(Receipt, i32)>) -> Vec<(Receipt, String)> {
        let entries: Vec<(&str, i32)> = changes
            .iter()
            .map(|((_, rh), timeout)| (rh.as_str(), *timeout))
            .collect();
        resq::sqs::change_visibility(&self.client, &self.dlq_url, &entries)
            .await
            .into_iter()
            .filter_map(|(i, why)| changes.get(i).map(|(r, _)| (r.clone(), why)))
            .collect()
    }
}

/// What [`Alarms`] on CloudWatch needs: the state of the alarm the template puts in
/// `PAUSE_ON_ALARMS`, and its history (whether its last change was out of ALARM).
pub const ALARM_PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("cloudwatch:DescribeAlarms", "alarm:replays-failing"),
    resq::iam::Permission::new("cloudwatch:DescribeAlarmHistory", "alarm:replays-failing"),
];

/// [`Alarms`] on CloudWatch.
#[derive(Debug, Clone)]
pub struct CloudWatchAlarms {
    client: aws_sdk_cloudwatch::Client,
}

impl CloudWatchAlarms {
    /// The adapter.
    pub fn new(client: aws_sdk_cloudwatch::Client) -> Self {
        Self { client }
    }
}

/// What a metric and a composite alarm both tell: name, state, when the state value last
/// changed (not any update of the alarm).
fn alarm_state(
    name: Option<&str>,
    value: Option<&StateValue>,
    transitioned: Option<&aws_sdk_cloudwatch::primitives::DateTime>,
    updated: Option<&aws_sdk_cloudwatch::primitives::DateTime>,
) -> AlarmState {
    AlarmState {
        name: name.unwrap_or_default().to_owned(),
        in_alarm: value == Some(&StateValue::Alarm),
        changed_at_ms: transitioned
            .or(updated)
            .and_then(|t| t.to_millis().ok())
            .and_then(|ms| u64::try_from(ms).ok()),
        period: None,
        evaluation_periods: None,
        threshold: None,
        left_alarm: None,
    }
}

/// How long the breaker waits for an alarm's history before it assumes the alarm left `ALARM`
/// (and probes).
const HISTORY_WAIT: Duration = Duration::from_secs(2);

impl CloudWatchAlarms {
    /// Whether the alarm left `ALARM` since `since_ms`, from its history (`None` when the
    /// history cannot be read in time or does not say).
    async fn left_alarm(&self, name: &str, since_ms: u64) -> Option<bool> {
        let call = self
            .client
            .describe_alarm_history()
            .alarm_name(name)
            .alarm_types(AlarmType::MetricAlarm)
            .alarm_types(AlarmType::CompositeAlarm)
            .history_item_type(HistoryItemType::StateUpdate)
            .scan_by(ScanBy::TimestampDescending)
            .max_records(10)
            .send();
        let out = tokio::time::timeout(HISTORY_WAIT, call).await.ok()?.ok()?;
        let mut seen = false;
        for item in out.alarm_history_items() {
            let at = item
                .timestamp()
                .and_then(|t| t.to_millis().ok())
                .and_then(|ms| u64::try_from(ms).ok());
            let Some(data) = item
                .history_data()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            else {
                continue;
            };
            seen = true;
            // any exit from ALARM inside the window (ALARM → INSUFFICIENT_DATA → OK counts)
            if at.is_some_and(|at| at + HISTORY_SLACK_MS >= since_ms)
                && data["oldState"]["stateValue"] == StateValue::Alarm.as_str()
            {
                return Some(true);
            }
        }
        seen.then_some(false)
    }
}

/// Some emulators stamp a history item with the time of the change before it: accept items
/// a little older than the window.
const HISTORY_SLACK_MS: u64 = 60_000;

impl Alarms for CloudWatchAlarms {
    async fn states(&self, names: &[String]) -> Result<Vec<AlarmState>, PortError> {
        let out = self
            .client
            .describe_alarms()
            .set_alarm_names(Some(names.to_vec()))
            .alarm_types(AlarmType::MetricAlarm)
            .alarm_types(AlarmType::CompositeAlarm)
            .send()
            .await
            .map_err(PortError::from_sdk)?;
        let mut found: Vec<AlarmState> = Vec::new();
        for a in out.metric_alarms() {
            found.push(AlarmState {
                period: a
                    .period()
                    .and_then(|p| u64::try_from(p).ok())
                    .map(Duration::from_secs),
                evaluation_periods: a.evaluation_periods().and_then(|n| u32::try_from(n).ok()),
                threshold: a.threshold(),
                ..alarm_state(
                    a.alarm_name(),
                    a.state_value(),
                    a.state_transitioned_timestamp(),
                    a.state_updated_timestamp(),
                )
            });
        }
        for a in out.composite_alarms() {
            found.push(alarm_state(
                a.alarm_name(),
                a.state_value(),
                a.state_transitioned_timestamp(),
                a.state_updated_timestamp(),
            ));
        }
        // only a recent change out of ALARM makes the breaker half-open: ask which it was
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for s in found.iter_mut() {
            if !s.in_alarm && crate::breaker::recently_changed(s, now) {
                let since = now.saturating_sub(crate::breaker::probe_window(s).as_millis() as u64);
                s.left_alarm = self.left_alarm(&s.name, since).await;
            }
        }
        Ok(found)
    }
}
