//! `resq send` and `resq status`, and the queue facts they read (a queue's depth, its ARN).
//! The consumer's line of the status is [`crate::consumer`]'s.

use std::collections::HashMap;

use aws_sdk_cloudwatch::types::{Dimension, StateValue, Statistic};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};

use crate::CliError;
use crate::consumer::ConsumerStatus;
use crate::context::Context;
use crate::orders::Outgoing;

/// What `send` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendReport {
    /// Messages SQS accepted.
    pub sent: usize,
    /// Order ids SQS did not accept, with why.
    pub failed: Vec<(String, String)>,
}

impl SendReport {
    /// The error a send of `total` orders ends with when some were not accepted.
    pub fn failure(&self, total: usize) -> Option<CliError> {
        (!self.failed.is_empty()).then_some(CliError::NotAccepted {
            failed: self.failed.len(),
            total,
        })
    }
}

/// Sends orders to the main queue, 10 per call, each with the attributes `attrs(order)`.
pub async fn send(
    ctx: &Context,
    orders: &[Outgoing],
    attrs: impl Fn(&Outgoing) -> HashMap<String, MessageAttributeValue>,
) -> Result<SendReport, CliError> {
    send_to(ctx, ctx.main_queue()?, orders, attrs).await
}

/// Sends orders to `queue_url` (the soak puts replayable messages straight into the DLQ, as
/// SQS's redrive policy would), 10 per call.
pub async fn send_to(
    ctx: &Context,
    queue_url: &str,
    orders: &[Outgoing],
    attrs: impl Fn(&Outgoing) -> HashMap<String, MessageAttributeValue>,
) -> Result<SendReport, CliError> {
    let mut report = SendReport::default();
    // an order's tenant is its group (a fair queue's); a FIFO queue needs one: without a tenant
    // each order is its own (orders are independent; the same order sent again falls into the
    // same group, where the template's content-based deduplication drops it)
    let fifo = resq::sqs::is_fifo(queue_url);
    for chunk in orders.chunks(resq::sqs::MAX_BATCH) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, o)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(&o.body)
                    .set_message_attributes(Some(attrs(o)).filter(|a| !a.is_empty()))
                    .set_message_group_id(o.group.clone().or_else(|| {
                        fifo.then(|| match o.order_id.is_empty() {
                            true => resq::sqs::DEFAULT_GROUP.to_owned(),
                            false => o.order_id.chars().take(resq::sqs::MAX_ID_LEN).collect(),
                        })
                    }))
                    .build()
                    .map_err(|e| CliError::Request {
                        what: "a send batch entry",
                        message: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = ctx
            .sqs
            .send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| CliError::aws(format!("sending to {queue_url}"), e))?;
        report.sent += out.successful().len();
        for f in out.failed() {
            if let Some(o) = f.id().parse::<usize>().ok().and_then(|i| chunk.get(i)) {
                report.failed.push((
                    o.order_id.clone(),
                    format!("{}: {}", f.code(), f.message().unwrap_or("")),
                ));
            }
        }
    }
    Ok(report)
}

/// One queue's state.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueState {
    /// Which queue (`orders`, `dlq`).
    pub label: &'static str,
    /// Its URL.
    pub url: String,
    /// Messages waiting.
    pub visible: u64,
    /// Messages received and not yet deleted.
    pub in_flight: u64,
    /// Oldest message age from CloudWatch (seconds), when it has a data point.
    pub oldest_age_seconds: Option<f64>,
}

/// Queues, the consumer and alarms.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// The main queue (labelled `orders`) and the DLQ.
    pub queues: Vec<QueueState>,
    /// Whether the consumer is running, paused by resq or paused by hand.
    pub consumer: ConsumerStatus,
    /// Alarms whose name starts with the prefix, with their state.
    pub alarms: Vec<(String, String)>,
}

impl Status {
    /// The error a status ends with, after it is printed: the consumer's state could not be
    /// told.
    pub fn failure(&self) -> Option<CliError> {
        self.consumer.failure()
    }
}

/// Reads depths, oldest ages, the consumer's standing (when its event source mapping is
/// named: then the archive bucket is needed too, for its pause record) and alarm states.
pub async fn status(ctx: &Context, alarm_prefix: &str) -> Result<Status, CliError> {
    let consumer = crate::consumer::read_in(ctx).await?;
    let mut queues = Vec::new();
    for (label, url) in [("main", ctx.main_queue()?), ("dlq", ctx.dlq()?)] {
        let (visible, in_flight) = crate::status::depth(&ctx.sqs, url)
            .await
            .map_err(|source| CliError::Aws {
                what: format!("reading {url}"),
                source,
            })?;
        let name = url.rsplit('/').next().unwrap_or_default().to_owned();
        let now =
            aws_sdk_cloudwatch::primitives::DateTime::from_secs(chrono::Utc::now().timestamp());
        let five_minutes_ago = aws_sdk_cloudwatch::primitives::DateTime::from_secs(
            chrono::Utc::now().timestamp() - 300,
        );
        let age = ctx
            .cloudwatch
            .get_metric_statistics()
            .namespace("AWS/SQS")
            .metric_name("ApproximateAgeOfOldestMessage")
            .dimensions(Dimension::builder().name("QueueName").value(name).build())
            .start_time(five_minutes_ago)
            .end_time(now)
            .period(60)
            .statistics(Statistic::Maximum)
            .send()
            .await
            .ok()
            .and_then(|o| {
                o.datapoints()
                    .iter()
                    .filter_map(|d| d.maximum())
                    .reduce(f64::max)
            });
        queues.push(QueueState {
            label,
            url: url.to_owned(),
            visible,
            in_flight,
            oldest_age_seconds: age,
        });
    }
    let out = ctx
        .cloudwatch
        .describe_alarms()
        .alarm_name_prefix(alarm_prefix)
        .send()
        .await
        .map_err(|e| CliError::aws("reading alarms", e))?;
    let alarms = out
        .metric_alarms()
        .iter()
        .map(|a| {
            let state = a.state_value().map_or("UNKNOWN", |s| match s {
                StateValue::Alarm => "ALARM",
                StateValue::Ok => "OK",
                StateValue::InsufficientData => "INSUFFICIENT_DATA",
                _ => "UNKNOWN",
            });
            (
                a.alarm_name().unwrap_or_default().to_owned(),
                state.to_owned(),
            )
        })
        .collect();
    Ok(Status {
        queues,
        consumer,
        alarms,
    })
}

/// A queue's ARN.
pub async fn queue_arn(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<String, resq::error::AwsError> {
    client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(resq::error::AwsError::from_sdk)?
        .attributes
        .and_then(|mut a| a.remove(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .ok_or_else(|| resq::error::AwsError::local(format!("{queue_url} has no QueueArn")))
}

/// A queue's depth: (`ApproximateNumberOfMessages`, `ApproximateNumberOfMessagesNotVisible`).
pub async fn depth(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<(u64, u64), resq::error::AwsError> {
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let out = client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(Q::ApproximateNumberOfMessages)
        .attribute_names(Q::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(resq::error::AwsError::from_sdk)?;
    let get = |n: Q| {
        out.attributes()
            .and_then(|a| a.get(&n))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((
        get(Q::ApproximateNumberOfMessages),
        get(Q::ApproximateNumberOfMessagesNotVisible),
    ))
}
