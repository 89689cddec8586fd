//! The redriver's alarms port (for the breaker) and its CloudWatch adapter. (SQS and S3 are
//! resq's ports, [`resq::sqs::Queues`] and [`resq::store::ObjectStore`].)

use std::future::Future;
use std::time::Duration;

use aws_sdk_cloudwatch::types::{AlarmType, HistoryItemType, ScanBy, StateValue};
use resq::mapping::Mapping;

pub use crate::breaker::AlarmState;

/// A call that did not go through.
pub type PortError = resq::error::AwsError;

/// Alarm states for the circuit breaker.
pub trait Alarms: Send + Sync {
    /// The states of the alarms among `names` that exist (a missing one is left out; the
    /// breaker then stays open). `Err` when they cannot be read.
    fn states(
        &self,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<AlarmState>, PortError>> + Send;

    /// How old the oldest message of the queue named `queue` is now, as CloudWatch last
    /// measured it (`AWS/SQS` `ApproximateAgeOfOldestMessage`, aged by the time since); `None`
    /// when it has no figure (a queue new or empty for a while, an emulator).
    fn oldest_age(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Option<Duration>, PortError>> + Send {
        let _ = queue;
        async { Ok(None) }
    }
}

impl<T: Alarms> Alarms for &T {
    fn states(
        &self,
        names: &[String],
    ) -> impl std::future::Future<Output = Result<Vec<AlarmState>, PortError>> + Send {
        (**self).states(names)
    }

    fn oldest_age(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Option<Duration>, PortError>> + Send {
        (**self).oldest_age(queue)
    }
}

/// What [`Alarms`] on CloudWatch needs: the states of the alarms the template puts in
/// `PAUSE_ON_ALARMS` and `PAUSE_CONSUMER_ON_ALARMS`, their history (whether the last change was
/// out of ALARM), and the main queue's oldest message's age (`GetMetricData` takes no narrower
/// resource than `*`).
pub const ALARM_PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("cloudwatch:DescribeAlarms", "alarm:downstream-failing"),
    resq::iam::Permission::new(
        "cloudwatch:DescribeAlarmHistory",
        "alarm:downstream-failing",
    ),
    resq::iam::Permission::new("cloudwatch:GetMetricData", "*"),
    resq::iam::Permission::new("cloudwatch:DescribeAlarms", "alarm:replays-failing"),
    resq::iam::Permission::new("cloudwatch:DescribeAlarmHistory", "alarm:replays-failing"),
    resq::iam::Permission::new("cloudwatch:DescribeAlarms", "alarm:consumer-errors"),
    resq::iam::Permission::new("cloudwatch:DescribeAlarmHistory", "alarm:consumer-errors"),
    resq::iam::Permission::new(
        "cloudwatch:DescribeAlarms",
        "alarm:dead-letters-unexplained",
    ),
    resq::iam::Permission::new(
        "cloudwatch:DescribeAlarmHistory",
        "alarm:dead-letters-unexplained",
    ),
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
    /// history cannot be read in time or does not say; `false` when it holds no state update).
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
        // no state update at all: the alarm has kept its first state (a new alarm without data,
        // INSUFFICIENT_DATA under TreatMissingData ignore, whose state changed "recently" at
        // its creation): it never left ALARM
        if out.alarm_history_items().is_empty() {
            return Some(false);
        }
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
    async fn oldest_age(&self, queue: &str) -> Result<Option<Duration>, PortError> {
        use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricStat};
        let now = std::time::SystemTime::now();
        let metric = Metric::builder()
            .namespace("AWS/SQS")
            .metric_name("ApproximateAgeOfOldestMessage")
            .dimensions(Dimension::builder().name("QueueName").value(queue).build())
            .build();
        let query = MetricDataQuery::builder()
            .id("oldest")
            .metric_stat(
                MetricStat::builder()
                    .metric(metric)
                    .period(60)
                    .stat("Maximum")
                    .build(),
            )
            .build();
        let out = self
            .client
            .get_metric_data()
            .metric_data_queries(query)
            .start_time((now - Duration::from_secs(900)).into())
            .end_time(now.into())
            .send()
            .await
            .map_err(PortError::from_sdk)?;
        let now_s = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        // the newest data point, aged by the time since it was measured
        let newest = out
            .metric_data_results()
            .iter()
            .flat_map(|r| r.timestamps().iter().zip(r.values()))
            .max_by(|a, b| a.0.secs().cmp(&b.0.secs()));
        Ok(newest.map(|(at, age)| {
            let since = (now_s - at.secs() as f64).max(0.0);
            Duration::from_secs_f64(age.max(0.0) + since)
        }))
    }

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

/// [`EventSourceMappings`](resq::mapping::EventSourceMappings) on Lambda.
#[derive(Debug, Clone)]
pub struct LambdaMappings {
    client: aws_sdk_lambda::Client,
}

impl LambdaMappings {
    /// The adapter.
    pub fn new(client: aws_sdk_lambda::Client) -> Self {
        Self { client }
    }
}

/// What Get and Update both answer.
fn mapping(
    uuid: &str,
    state: Option<&str>,
    source: Option<&str>,
    function: Option<&str>,
) -> Mapping {
    Mapping {
        uuid: uuid.to_owned(),
        state: resq::mapping::MappingState::parse(state.unwrap_or("Unknown")),
        event_source_arn: source.map(str::to_owned),
        function_arn: function.map(str::to_owned),
    }
}

impl resq::mapping::EventSourceMappings for LambdaMappings {
    async fn get(&self, uuid: &str) -> Result<Mapping, PortError> {
        let out = self
            .client
            .get_event_source_mapping()
            .uuid(uuid)
            .send()
            .await
            .map_err(PortError::from_sdk)?;
        Ok(mapping(
            uuid,
            out.state(),
            out.event_source_arn(),
            out.function_arn(),
        ))
    }

    async fn set_enabled(&self, uuid: &str, enabled: bool) -> Result<Mapping, PortError> {
        let out = self
            .client
            .update_event_source_mapping()
            .uuid(uuid)
            .enabled(enabled)
            .send()
            .await
            .map_err(PortError::from_sdk)?;
        Ok(mapping(
            uuid,
            out.state(),
            out.event_source_arn(),
            out.function_arn(),
        ))
    }
}
