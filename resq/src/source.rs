//! A source queue's limits as the consumer sees them (docs/design.md, "Last allowed
//! receive"): what SQS puts on a message's life in it (its RedrivePolicy's `maxReceiveCount`,
//! its retention, its visibility timeout), read once per queue. Reading the attributes is the
//! only I/O here ([`read_limits`]).

use std::collections::HashMap;
use std::time::Duration;

use crate::error::AwsError;

/// What SQS does with a message in a queue: how often it may be received before SQS moves it
/// to the DLQ, and how long it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueLimits {
    /// The RedrivePolicy's `maxReceiveCount` (`None`: the queue has no redrive policy).
    pub max_receive_count: Option<u32>,
    /// The RedrivePolicy's `deadLetterTargetArn`.
    pub dead_letter_target: Option<String>,
    /// `MessageRetentionPeriod`: SQS deletes a message this long after it was sent.
    pub retention: Duration,
    /// `VisibilityTimeout`: when a message not backed off comes back.
    pub visibility_timeout: Duration,
}

impl QueueLimits {
    /// SQS's defaults for a queue without a redrive policy: 4 days' retention, a 30 s
    /// visibility timeout.
    pub fn sqs_defaults() -> Self {
        Self {
            max_receive_count: None,
            dead_letter_target: None,
            retention: Duration::from_secs(345_600),
            visibility_timeout: Duration::from_secs(30),
        }
    }

    /// The limits in a queue's attributes, by name as `GetQueueAttributes` returns them
    /// (`RedrivePolicy` is JSON, its `maxReceiveCount` a number or a string of one). A missing
    /// retention or visibility timeout is SQS's default; one that does not read is an error.
    pub(crate) fn from_attributes(attributes: &HashMap<String, String>) -> Result<Self, String> {
        let defaults = Self::sqs_defaults();
        let seconds = |name: &str, default: Duration| match attributes.get(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| format!("{name} is {v:?}, not a number of seconds")),
        };
        let (max_receive_count, dead_letter_target) = match attributes.get("RedrivePolicy") {
            None => (None, None),
            Some(p) if p.trim().is_empty() => (None, None),
            Some(policy) => {
                let v: serde_json::Value = serde_json::from_str(policy)
                    .map_err(|e| format!("RedrivePolicy {policy:?} is not JSON: {e}"))?;
                let count = match &v["maxReceiveCount"] {
                    serde_json::Value::Number(n) => n.as_u64(),
                    serde_json::Value::String(s) => s.trim().parse().ok(),
                    _ => None,
                }
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("RedrivePolicy {policy:?} has no maxReceiveCount"))?;
                let target = v["deadLetterTargetArn"].as_str().map(str::to_owned);
                (Some(count), target)
            }
        };
        Ok(Self {
            max_receive_count,
            dead_letter_target,
            retention: seconds("MessageRetentionPeriod", defaults.retention)?,
            visibility_timeout: seconds("VisibilityTimeout", defaults.visibility_timeout)?,
        })
    }
}

/// A queue's limits, by `GetQueueAttributes`.
pub async fn read_limits(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<QueueLimits, AwsError> {
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let out = client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(Q::RedrivePolicy)
        .attribute_names(Q::MessageRetentionPeriod)
        .attribute_names(Q::VisibilityTimeout)
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    let attributes: HashMap<String, String> = out
        .attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.as_str().to_owned(), v))
        .collect();
    QueueLimits::from_attributes(&attributes)
        .map_err(|e| AwsError::local(format!("{queue_url}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn limits_read_from_the_attributes_as_sqs_returns_them() {
        let dlq = "arn:aws:sqs:us-east-1:123456789012:orders-dlq";
        for policy in [
            format!(r#"{{"deadLetterTargetArn":"{dlq}","maxReceiveCount":5}}"#),
            format!(r#"{{"deadLetterTargetArn":"{dlq}","maxReceiveCount":"5"}}"#),
        ] {
            let l = QueueLimits::from_attributes(&attrs(&[
                ("RedrivePolicy", &policy),
                ("MessageRetentionPeriod", "3600"),
                ("VisibilityTimeout", "180"),
            ]))
            .unwrap();
            assert_eq!(l.max_receive_count, Some(5));
            assert_eq!(l.dead_letter_target.as_deref(), Some(dlq));
            assert_eq!(l.retention, Duration::from_secs(3600));
            assert_eq!(l.visibility_timeout, Duration::from_secs(180));
        }
        assert_eq!(
            QueueLimits::from_attributes(&attrs(&[])).unwrap(),
            QueueLimits::sqs_defaults()
        );
        for bad in [
            attrs(&[("RedrivePolicy", "{")]),
            attrs(&[("RedrivePolicy", r#"{"maxReceiveCount":0}"#)]),
            attrs(&[("MessageRetentionPeriod", "soon")]),
        ] {
            assert!(QueueLimits::from_attributes(&bad).is_err(), "{bad:?}");
        }
    }
}
