//! What a run was asked to do: an EventBridge scheduled event (the configured defaults) or a
//! manual payload overriding any of them.

use std::time::Duration;

use resq::config::RedriverConfig;
use serde::Deserialize;
use serde_json::Value;

/// A manual payload: `{"dryRun", "maxMessages", "ratePerSecond", "reason", "olderThanSeconds"}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Overrides {
    /// Classify and report; change nothing.
    pub dry_run: Option<bool>,
    /// Handle at most this many messages.
    pub max_messages: Option<u32>,
    /// Replay rate for this run.
    pub rate_per_second: Option<f64>,
    /// Only messages whose `x-failure-reason` is this (permanent ones included: replaying a
    /// permanent failure after a fix is what this is for).
    pub reason: Option<String>,
    /// Only messages at least this old (from the producer's send).
    pub older_than_seconds: Option<u64>,
}

/// The settings of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    /// Change nothing.
    pub dry_run: bool,
    /// Replays at most; `None`: what the rate allows in the run's time (`auto`).
    pub max_messages: Option<u32>,
    /// Token-bucket rate.
    pub rate_per_second: f64,
    /// Selection: this `x-failure-reason` only.
    pub reason: Option<String>,
    /// Selection: at least this old.
    pub older_than: Option<Duration>,
}

/// What the redriver takes, for messages.
const EXPECTED: &str = "the redriver takes an EventBridge scheduled event, or a manual payload with dryRun, maxMessages, ratePerSecond, reason or olderThanSeconds";

/// The input is neither a scheduled event nor a valid manual payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid redriver input: {0}")]
pub struct RequestError(pub String);

impl RunRequest {
    /// The run the configuration describes, with no overrides.
    pub fn defaults(config: &RedriverConfig) -> Self {
        Self {
            dry_run: false,
            max_messages: config.max_messages_per_run,
            rate_per_second: config.rate_per_second,
            reason: None,
            older_than: None,
        }
    }

    /// Reads the invocation payload. A scheduled event (or `null`, `{}`) means the defaults.
    pub fn from_event(event: Value, config: &RedriverConfig) -> Result<Self, RequestError> {
        Self::defaults(config).with(Overrides::from_event(event)?)
    }

    /// The request with a manual payload's overrides, each checked.
    fn with(mut self, overrides: Overrides) -> Result<Self, RequestError> {
        if let Some(d) = overrides.dry_run {
            self.dry_run = d;
        }
        if let Some(n) = overrides.max_messages {
            if n == 0 {
                return Err(RequestError("maxMessages must be at least 1".into()));
            }
            self.max_messages = Some(n);
        }
        if let Some(r) = overrides.rate_per_second {
            if !(r.is_finite() && r > 0.0 && r <= resq::config::MAX_RATE_PER_SECOND) {
                return Err(RequestError(format!(
                    "ratePerSecond must be above 0 and at most {}, got {r}",
                    resq::config::MAX_RATE_PER_SECOND
                )));
            }
            self.rate_per_second = r;
        }
        if let Some(reason) = overrides.reason {
            if reason.trim().is_empty() {
                return Err(RequestError("reason must not be empty".into()));
            }
            self.reason = Some(reason.trim().to_owned());
        }
        self.older_than = overrides.older_than_seconds.map(Duration::from_secs);
        Ok(self)
    }
}

impl Overrides {
    /// What a payload overrides: nothing for a scheduled event (`aws.events`,
    /// `aws.scheduler`) or `null`; a manual payload's fields; an error naming what is wrong
    /// for anything else.
    fn from_event(event: Value) -> Result<Self, RequestError> {
        let scheduled = |obj: &serde_json::Map<String, Value>| match obj.get("source") {
            Some(Value::String(s)) if s == "aws.events" || s == "aws.scheduler" => Ok(()),
            Some(Value::String(other)) => Err(format!(
                "event source \"{other}\" is not aws.events (a scheduled run) or aws.scheduler"
            )),
            Some(other) => Err(format!(
                "event source {other} is not aws.events (a scheduled run) or aws.scheduler"
            )),
            None => Err("an event with a detail-type but no source".to_owned()),
        };
        let kind = match event {
            Value::Null => return Ok(Self::default()),
            Value::Object(ref obj)
                if obj.contains_key("detail-type") || obj.contains_key("source") =>
            {
                return scheduled(obj)
                    .map(|()| Self::default())
                    .map_err(|why| RequestError(format!("{why}; {EXPECTED}")));
            }
            Value::Object(_) => {
                return serde_json::from_value(event).map_err(|e| {
                    RequestError(format!(
                        "{e}; a manual payload takes dryRun (bool), maxMessages (n ≥ 1), ratePerSecond (r > 0), reason (string), olderThanSeconds (n ≥ 0)"
                    ))
                });
            }
            Value::Array(_) => "a list",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "true or false",
        };
        Err(RequestError(format!(
            "the input is {kind}, not a JSON object; {EXPECTED}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::config::Vars;
    use serde_json::json;

    fn config() -> RedriverConfig {
        RedriverConfig::from_vars(&Vars(|k: &str| match k {
            "MAIN_QUEUE_URL" => Some("http://127.0.0.1/1/orders".into()),
            "DLQ_URL" => Some("http://127.0.0.1/1/orders-dlq".into()),
            "ARCHIVE_BUCKET" => Some("b".into()),
            _ => None,
        }))
        .unwrap()
    }

    #[test]
    fn a_scheduled_event_means_the_defaults() {
        let scheduled = json!({
            "version": "0", "id": "89d1a02d-5ec7-412e-82f5-13505f849b41", "detail-type": "Scheduled Event",
            "source": "aws.events", "account": "123456789012", "time": "2026-11-21T10:00:00Z",
            "region": "us-east-1", "resources": ["arn:aws:events:us-east-1:123456789012:rule/resq-redrive"], "detail": {}
        });
        let r = RunRequest::from_event(scheduled, &config()).unwrap();
        assert_eq!(r, RunRequest::defaults(&config()));
        assert_eq!(
            RunRequest::from_event(json!({}), &config()).unwrap(),
            RunRequest::defaults(&config())
        );
        assert_eq!(
            RunRequest::from_event(Value::Null, &config()).unwrap(),
            RunRequest::defaults(&config())
        );
    }

    #[test]
    fn a_manual_payload_overrides() {
        let r = RunRequest::from_event(
            json!({"dryRun": true, "maxMessages": 50, "ratePerSecond": 2.5, "reason": "VALIDATION_FAILED", "olderThanSeconds": 600}),
            &config(),
        )
        .unwrap();
        assert!(r.dry_run);
        assert_eq!((r.max_messages, r.rate_per_second), (Some(50), 2.5));
        assert_eq!(r.reason.as_deref(), Some("VALIDATION_FAILED"));
        assert_eq!(r.older_than, Some(Duration::from_secs(600)));
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        for (event, needle) in [
            (json!({"dryrun": true}), "unknown field `dryrun`"),
            (json!({"maxMessages": 0}), "maxMessages must be at least 1"),
            (json!({"maxMessages": -1}), "invalid value"),
            (json!({"ratePerSecond": 0}), "ratePerSecond must be above 0"),
            (json!({"reason": " "}), "reason must not be empty"),
            (json!({"dryRun": "yes"}), "invalid type"),
            (json!([1]), "the input is a list, not a JSON object"),
            (json!("run"), "the input is a string, not a JSON object"),
            (
                json!({"source": "aws.s3", "detail-type": "Object Created"}),
                "aws.s3",
            ),
            (
                json!({"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"}),
                "event source \"aws.ec2\" is not aws.events (a scheduled run) or aws.scheduler; the redriver takes an EventBridge scheduled event, or a manual payload",
            ),
            (
                json!({"source": 7, "detail-type": "Scheduled Event"}),
                "event source 7 is not aws.events",
            ),
            (
                json!({"detail-type": "Scheduled Event"}),
                "an event with a detail-type but no source",
            ),
        ] {
            let err = RunRequest::from_event(event.clone(), &config())
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{event}: {err}");
            assert!(err.starts_with("invalid redriver input: "), "{err}");
            for debug in ["Some(", "None", "Object {", "String("] {
                assert!(!err.contains(debug), "{event}: {err}");
            }
        }
    }
}
