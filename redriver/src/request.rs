//! What a run was asked to do: an EventBridge scheduled event (the configured defaults) or a
//! manual payload overriding any of them.

use std::time::Duration;

use crate::config::{MAX_RATE_PER_SECOND, RedriverConfig};
use serde_json::Value;

/// A manual payload: `{"dryRun", "maxMessages", "ratePerSecond", "reason", "olderThanSeconds",
/// "group"}`,
/// each field checked as it is read ([`FIELDS`] says what each takes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// Classify and report; change nothing.
    pub dry_run: Option<bool>,
    /// Handle at most this many messages (at least 1).
    pub max_messages: Option<u32>,
    /// Replay rate for this run (above 0, at most [`crate::config::MAX_RATE_PER_SECOND`]).
    pub rate_per_second: Option<f64>,
    /// Only messages whose `x-failure-reason` is this (permanent ones included: replaying a
    /// permanent failure after a fix is what this is for); not empty, trimmed.
    pub reason: Option<String>,
    /// Only messages at least this old (from the producer's send).
    pub older_than_seconds: Option<u64>,
    /// Only messages of this `MessageGroupId` (a tenant); 1 to 128 characters.
    pub group: Option<String>,
    /// Not a field: the alarm whose action invoked the run (a CloudWatch alarm event).
    pub alarm: Option<String>,
}

/// The fields of a manual payload.
pub const FIELDS: [&str; 6] = [
    "dryRun",
    "maxMessages",
    "ratePerSecond",
    "reason",
    "olderThanSeconds",
    "group",
];

/// What a field of a manual payload takes, in the words errors use: the bounds it is read
/// with.
fn takes(field: &str) -> String {
    match field {
        "dryRun" => "true or false".to_owned(),
        "maxMessages" => format!("a whole number from 1 to {}", u32::MAX),
        "ratePerSecond" => format!("a number above 0 and at most {MAX_RATE_PER_SECOND}"),
        "reason" => "a failure reason, a non-empty string (e.g. VALIDATION_FAILED)".to_owned(),
        "group" => format!(
            "a message group id (a tenant), 1 to {} characters",
            resq::sqs::MAX_ID_LEN
        ),
        _ => format!("a whole number of seconds from 0 to {}", u64::MAX),
    }
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
    /// Selection: this `MessageGroupId` only.
    pub group: Option<String>,
    /// The rate a run may climb to while its breakers stay closed (`REDRIVE_RATE_MAX`; a
    /// manual `ratePerSecond` is held, not climbed from).
    pub rate_max: f64,
    /// Invoked by this alarm's action (a CloudWatch alarm state-change event): the run reads
    /// the breakers and acts on the consumer, and touches no message.
    pub alarm: Option<String>,
}

/// What the redriver takes, for messages.
const EXPECTED: &str = "the redriver takes an EventBridge scheduled event, a CloudWatch alarm's state-change event, or a manual payload with dryRun, maxMessages, ratePerSecond, reason, olderThanSeconds or group";

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
            group: None,
            rate_max: config.rate_max.max(config.rate_per_second),
            alarm: None,
        }
    }

    /// Reads the invocation payload. A scheduled event (or `null`, `{}`) means the defaults.
    pub fn from_event(event: Value, config: &RedriverConfig) -> Result<Self, RequestError> {
        Ok(Self::defaults(config).with(Overrides::from_event(event)?))
    }

    /// The request with a manual payload's overrides (checked as they were read).
    fn with(mut self, overrides: Overrides) -> Self {
        if let Some(d) = overrides.dry_run {
            self.dry_run = d;
        }
        if let Some(n) = overrides.max_messages {
            self.max_messages = Some(n);
        }
        if let Some(r) = overrides.rate_per_second {
            (self.rate_per_second, self.rate_max) = (r, r);
        }
        if let Some(reason) = overrides.reason {
            self.reason = Some(reason);
        }
        self.older_than = overrides.older_than_seconds.map(Duration::from_secs);
        self.group = overrides.group;
        self.alarm = overrides.alarm;
        self
    }
}

impl Overrides {
    /// What a payload overrides: nothing for a scheduled event (`aws.events`,
    /// `aws.scheduler`) or `null`; the alarm for a CloudWatch alarm's state-change event
    /// (`aws.cloudwatch` with `alarmData`); a manual payload's fields; an error naming what is
    /// wrong for anything else.
    fn from_event(event: Value) -> Result<Self, RequestError> {
        if event["source"] == "aws.cloudwatch" {
            return match event["alarmData"]["alarmName"].as_str() {
                Some(name) if !name.trim().is_empty() => Ok(Self {
                    alarm: Some(name.trim().to_owned()),
                    ..Self::default()
                }),
                _ => Err(RequestError(format!(
                    "a CloudWatch event without alarmData.alarmName; {EXPECTED}"
                ))),
            };
        }
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
            Value::Object(fields) => return Self::manual(&fields),
            Value::Array(_) => "a list",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "true or false",
        };
        Err(RequestError(format!(
            "the input is {kind}, not a JSON object; {EXPECTED}"
        )))
    }

    /// A manual payload's fields, each read as what it takes; every field that is not, and
    /// every field it does not take, named in the error. `null` leaves a field unset.
    fn manual(fields: &serde_json::Map<String, Value>) -> Result<Self, RequestError> {
        let mut o = Self::default();
        let (mut problems, mut unknown) = (Vec::new(), false);
        for (name, value) in fields {
            let Some(&field) = FIELDS.iter().find(|f| *f == name) else {
                unknown = true;
                let near = FIELDS
                    .iter()
                    .find(|f| f.eq_ignore_ascii_case(name))
                    .map(|f| format!(" (did you mean {f}?)"))
                    .unwrap_or_default();
                let name = cut(name);
                problems.push(format!("{name}: not a field of a manual payload{near}"));
                continue;
            };
            if value.is_null() {
                continue;
            }
            let read = match field {
                "dryRun" => value.as_bool().map(|b| o.dry_run = Some(b)),
                "maxMessages" => value
                    .as_u64()
                    .filter(|n| *n >= 1)
                    .and_then(|n| u32::try_from(n).ok())
                    .map(|n| o.max_messages = Some(n)),
                "ratePerSecond" => value
                    .as_f64()
                    .filter(|r| r.is_finite() && *r > 0.0 && *r <= MAX_RATE_PER_SECOND)
                    .map(|r| o.rate_per_second = Some(r)),
                "reason" => value
                    .as_str()
                    .map(str::trim)
                    .filter(|r| !r.is_empty())
                    .map(|r| o.reason = Some(r.to_owned())),
                "group" => value
                    .as_str()
                    .filter(|g| !g.is_empty() && g.chars().count() <= resq::sqs::MAX_ID_LEN)
                    .map(|g| o.group = Some(g.to_owned())),
                _ => value.as_u64().map(|s| o.older_than_seconds = Some(s)),
            };
            if read.is_none() {
                let (takes, got) = (takes(field), shown(value));
                problems.push(format!("{field}: expected {takes}, got {got}"));
            }
        }
        if problems.is_empty() {
            return Ok(o);
        }
        if unknown {
            problems.push(format!("a manual payload takes {}", FIELDS.join(", ")));
        }
        Err(RequestError(problems.join("; ")))
    }
}

/// A value as an error shows it: a string quoted (cut past 40 characters), a number or
/// `true`/`false` as written, a list or an object by its kind.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("\"{}\"", cut(s)),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
        other => other.to_string(),
    }
}

/// Text from the input as an error shows it: control characters escaped, cut past 40
/// characters.
fn cut(text: &str) -> String {
    let mut shown: String = text.chars().take(40).flat_map(char::escape_debug).collect();
    if text.chars().nth(40).is_some() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> RedriverConfig {
        crate::fixtures::config(&[])
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
            json!({"dryRun": true, "maxMessages": 50, "ratePerSecond": 2.5, "reason": "VALIDATION_FAILED", "olderThanSeconds": 600, "group": "tenant-b"}),
            &config(),
        )
        .unwrap();
        assert!(r.dry_run);
        assert_eq!((r.max_messages, r.rate_per_second), (Some(50), 2.5));
        assert_eq!(r.reason.as_deref(), Some("VALIDATION_FAILED"));
        assert_eq!(r.older_than, Some(Duration::from_secs(600)));
        assert_eq!(r.group.as_deref(), Some("tenant-b"));
        // a group SQS would not take is named
        for bad in [json!(""), json!("g".repeat(129)), json!(7)] {
            let err = RunRequest::from_event(json!({ "group": bad }), &config()).unwrap_err();
            assert!(
                err.0.starts_with("group: expected a message group id"),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        for (event, needle) in [
            (json!([1]), "the input is a list, not a JSON object"),
            (json!("run"), "the input is a string, not a JSON object"),
            (
                json!({"source": "aws.s3", "detail-type": "Object Created"}),
                "aws.s3",
            ),
            (
                json!({"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"}),
                "event source \"aws.ec2\" is not aws.events (a scheduled run) or aws.scheduler; the redriver takes an EventBridge scheduled event, a CloudWatch alarm's state-change event, or a manual payload",
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
        }
    }

    /// The error of a payload, without the prefix every error has.
    fn error_of(event: Value) -> String {
        let err = RunRequest::from_event(event.clone(), &config())
            .unwrap_err()
            .to_string();
        let said = err
            .strip_prefix("invalid redriver input: ")
            .unwrap_or_else(|| panic!("{event}: {err}"));
        // the field and what it takes, never a Rust type or debug form
        for rust in [
            "u32",
            "u64",
            "f64",
            "i64",
            "bool",
            "invalid type",
            "invalid value",
            "Some(",
            "None",
            "Object {",
            "String(",
        ] {
            assert!(!said.contains(rust), "{event}: {err}");
        }
        said.to_owned()
    }

    #[test]
    fn a_bad_field_is_named_with_what_it_takes() {
        let whole = "a whole number from 1 to 4294967295";
        let rate = "a number above 0 and at most 3000";
        let reason = "a failure reason, a non-empty string (e.g. VALIDATION_FAILED)";
        let seconds = "a whole number of seconds from 0 to 18446744073709551615";
        for (event, said) in [
            (
                json!({"maxMessages": "ten"}),
                format!("maxMessages: expected {whole}, got \"ten\""),
            ),
            (
                json!({"maxMessages": 0}),
                format!("maxMessages: expected {whole}, got 0"),
            ),
            (
                json!({"maxMessages": -1}),
                format!("maxMessages: expected {whole}, got -1"),
            ),
            (
                json!({"maxMessages": 2.5}),
                format!("maxMessages: expected {whole}, got 2.5"),
            ),
            (
                json!({"maxMessages": 4_294_967_296_u64}),
                format!("maxMessages: expected {whole}, got 4294967296"),
            ),
            (
                json!({"dryRun": "yes"}),
                "dryRun: expected true or false, got \"yes\"".to_owned(),
            ),
            (
                json!({"dryRun": 1}),
                "dryRun: expected true or false, got 1".to_owned(),
            ),
            (
                json!({"ratePerSecond": 0}),
                format!("ratePerSecond: expected {rate}, got 0"),
            ),
            (
                json!({"ratePerSecond": 3000.5}),
                format!("ratePerSecond: expected {rate}, got 3000.5"),
            ),
            (
                json!({"ratePerSecond": "fast"}),
                format!("ratePerSecond: expected {rate}, got \"fast\""),
            ),
            (
                json!({"reason": " "}),
                format!("reason: expected {reason}, got \" \""),
            ),
            (
                json!({"reason": ["MALFORMED_JSON"]}),
                format!("reason: expected {reason}, got a list"),
            ),
            (
                json!({"olderThanSeconds": -5}),
                format!("olderThanSeconds: expected {seconds}, got -5"),
            ),
            (
                json!({"olderThanSeconds": {"minutes": 5}}),
                format!("olderThanSeconds: expected {seconds}, got an object"),
            ),
            (
                json!({"olderThanSeconds": "x".repeat(100)}),
                format!(
                    "olderThanSeconds: expected {seconds}, got \"{}…\"",
                    "x".repeat(40)
                ),
            ),
            // unknown fields are refused, with the fields a payload takes
            (
                json!({"dryrun": true}),
                "dryrun: not a field of a manual payload (did you mean dryRun?); a manual payload takes dryRun, maxMessages, ratePerSecond, reason, olderThanSeconds, group".to_owned(),
            ),
            (
                json!({"limit": 5}),
                "limit: not a field of a manual payload; a manual payload takes dryRun, maxMessages, ratePerSecond, reason, olderThanSeconds, group".to_owned(),
            ),
            // every problem at once
            (
                json!({"maxMessages": "ten", "ratePerSecond": -1, "dryRun": true}),
                format!(
                    "maxMessages: expected {whole}, got \"ten\"; ratePerSecond: expected {rate}, got -1"
                ),
            ),
        ] {
            assert_eq!(error_of(event.clone()), said, "{event}");
        }
    }

    #[test]
    fn null_leaves_a_field_unset_and_bounds_are_inclusive() {
        let r = RunRequest::from_event(
            json!({"dryRun": null, "maxMessages": null, "ratePerSecond": null, "reason": null, "olderThanSeconds": null}),
            &config(),
        )
        .unwrap();
        assert_eq!(r, RunRequest::defaults(&config()));
        let r = RunRequest::from_event(
            json!({"maxMessages": 4_294_967_295_u64, "ratePerSecond": 3000, "reason": " MALFORMED_JSON ", "olderThanSeconds": 0}),
            &config(),
        )
        .unwrap();
        assert_eq!(
            (r.max_messages, r.rate_per_second, r.reason.as_deref()),
            (Some(u32::MAX), 3000.0, Some("MALFORMED_JSON"))
        );
        assert_eq!(r.older_than, Some(Duration::ZERO));
        let r = RunRequest::from_event(json!({"maxMessages": 1, "ratePerSecond": 0.01}), &config())
            .unwrap();
        assert_eq!((r.max_messages, r.rate_per_second), (Some(1), 0.01));
    }

    #[test]
    fn the_committed_fixtures_read_as_before() {
        let fixture = |text: &str| serde_json::from_str::<Value>(text).unwrap();
        let scheduled = fixture(include_str!("../../events/scheduled-event.json"));
        assert_eq!(
            RunRequest::from_event(scheduled, &config()).unwrap(),
            RunRequest::defaults(&config())
        );
        let manual = fixture(include_str!("../../events/redrive-manual.json"));
        assert_eq!(
            RunRequest::from_event(manual, &config()).unwrap(),
            RunRequest {
                dry_run: true,
                max_messages: Some(100),
                rate_per_second: 5.0,
                reason: Some("VALIDATION_FAILED".into()),
                older_than: None,
                group: None,
                rate_max: 5.0,
                alarm: None,
            }
        );
    }

    #[test]
    fn an_alarms_action_asks_for_the_breakers_only() {
        // the Rust runtime's own fixture of the event CloudWatch sends a function
        let event = serde_json::from_str::<Value>(include_str!(
            "../../tests/fixtures/third-party/aws-lambda-rust-runtime/example-cloudwatch-alarm-metric.json"
        ))
        .unwrap();
        let r = RunRequest::from_event(event, &config()).unwrap();
        assert_eq!(r.alarm.as_deref(), Some("lambda-demo-metric-alarm"));
        assert_eq!(
            RunRequest { alarm: None, ..r },
            RunRequest::defaults(&config())
        );
        let err =
            RunRequest::from_event(json!({"source": "aws.cloudwatch"}), &config()).unwrap_err();
        assert!(err.0.contains("alarmData.alarmName"), "{err}");
    }

    #[test]
    fn a_manual_rate_is_held_and_the_configured_one_climbs() {
        let mut c = config();
        (c.rate_per_second, c.rate_max) = (10.0, 200.0);
        assert_eq!(RunRequest::defaults(&c).rate_max, 200.0);
        let r = RunRequest::from_event(json!({"ratePerSecond": 50}), &c).unwrap();
        assert_eq!((r.rate_per_second, r.rate_max), (50.0, 50.0));
    }
}
