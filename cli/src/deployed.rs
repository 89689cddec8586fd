//! `--stack NAME` (or `RESQ_STACK`): what a command needs, read from the deployed stack
//! (CloudFormation `DescribeStacks`): the queue URLs, the bucket, the alarm prefix and the
//! consumer's event source mapping (with its breaker's alarms) from its outputs; the redrive
//! cap, the TTL, the permanent action and the idempotency window from its outputs or
//! parameters. An operator with a stack name needs nothing else.
//!
//! Which value wins ([`FromStack`]): a flag on the command line, then the stack's, then an
//! environment variable, then the built-in default. (A stack named on purpose is not
//! overridden by a variable left in the shell; a flag typed is.)

use std::collections::BTreeMap;

use resq::config::Vars;
use resq::correlation::CorrelationKey;
use resq_redriver::config::PermanentAction;

use crate::CliError;

/// The stack outputs and parameters `resq` reads.
pub mod keys {
    /// Output: the main queue's URL.
    pub const ORDERS_QUEUE_URL: &str = "OrdersQueueUrl";
    /// Output: the DLQ's URL.
    pub const DEAD_LETTER_QUEUE_URL: &str = "DeadLetterQueueUrl";
    /// Output: the archive bucket.
    pub const ARCHIVE_BUCKET_NAME: &str = "ArchiveBucketName";
    /// Output: the prefix of the stack's alarm names.
    pub const ALARM_PREFIX: &str = "AlarmPrefix";
    /// Output: the consumer's `IDEMPOTENCY_WINDOW_SECONDS`.
    pub const IDEMPOTENCY_WINDOW_SECONDS: &str = "IdempotencyWindowSeconds";
    /// Parameter: the order records' lifetime in days (the window, for stacks without the
    /// output).
    pub const ORDER_RECORD_RETENTION_DAYS: &str = "OrderRecordRetentionDays";
    /// Parameter: `ARCHIVE_AFTER_SECONDS`.
    pub const ARCHIVE_AFTER_SECONDS: &str = "ArchiveAfterSeconds";
    /// Parameter: `MAX_REDRIVE_ATTEMPTS`.
    pub const MAX_REDRIVE_ATTEMPTS: &str = "MaxRedriveAttempts";
    /// Parameter: `PERMANENT_ACTION`.
    pub const PERMANENT_ACTION: &str = "PermanentAction";
    /// Parameter: `KEPT_IN_FLIGHT_MAX`.
    pub const KEPT_IN_FLIGHT_MAX: &str = "KeptInFlightMax";
    /// Output and parameter: `RESQ_CORRELATION_KEY`, the business id's log key.
    pub const CORRELATION_KEY: &str = "CorrelationKey";
    /// Output and parameter: `RESQ_CORRELATION_FIELD`, the body's field holding the business
    /// id.
    pub const CORRELATION_FIELD: &str = "CorrelationField";
    /// Output: the consumer's event source mapping (the redriver's
    /// `CONSUMER_EVENT_SOURCE_MAPPING`), empty when the stack has no consumer breaker.
    pub const CONSUMER_EVENT_SOURCE_MAPPING: &str = "ConsumerEventSourceMapping";
    /// Output: the downstream-failing alarm's name (one of the consumer breaker's alarms).
    pub const DOWNSTREAM_FAILING_ALARM_NAME: &str = "DownstreamFailingAlarmName";
}

/// The consumer breaker's alarms (the redriver's `PAUSE_CONSUMER_ON_ALARMS` as the template
/// sets it) under an alarm prefix: `{prefix}downstream-failing`, `{prefix}consumer-errors`.
pub fn consumer_breaker_alarms(prefix: &str) -> Vec<String> {
    vec![
        format!("{prefix}downstream-failing"),
        format!("{prefix}consumer-errors"),
    ]
}

/// The redriver's breaker's alarms under an alarm prefix: its `PAUSE_ON_ALARMS` as the
/// template sets it (`{prefix}replays-failing`, `{prefix}consumer-errors`,
/// `{prefix}dead-letters-unexplained`), then the consumer breaker's
/// ([`consumer_breaker_alarms`]): `resq dlq redrive` refuses to replay while one is in ALARM.
pub fn replay_breaker_alarms(prefix: &str) -> Vec<String> {
    let mut alarms: Vec<String> = [
        "replays-failing",
        "consumer-errors",
        "dead-letters-unexplained",
    ]
    .iter()
    .map(|a| format!("{prefix}{a}"))
    .collect();
    for a in consumer_breaker_alarms(prefix) {
        if !alarms.contains(&a) {
            alarms.push(a);
        }
    }
    alarms
}

/// A deployed stack's outputs and parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployed {
    /// The stack's name.
    pub name: String,
    /// Output key → value.
    pub outputs: BTreeMap<String, String>,
    /// Parameter key → value.
    pub parameters: BTreeMap<String, String>,
}

impl Deployed {
    fn output(&self, key: &str) -> Option<&str> {
        self.outputs
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn parameter<T: std::str::FromStr>(&self, key: &str) -> Option<T> {
        self.parameters.get(key)?.trim().parse().ok()
    }

    /// An output, else the parameter of the same name (the template has both).
    fn output_or_parameter(&self, key: &str) -> Option<String> {
        self.output(key)
            .map(str::to_owned)
            .or_else(|| self.parameter::<String>(key))
            .filter(|v| !v.is_empty())
    }

    /// `OrdersQueueUrl`.
    pub fn main_queue_url(&self) -> Option<&str> {
        self.output(keys::ORDERS_QUEUE_URL)
    }

    /// `DeadLetterQueueUrl`.
    pub fn dlq_url(&self) -> Option<&str> {
        self.output(keys::DEAD_LETTER_QUEUE_URL)
    }

    /// `ArchiveBucketName`.
    pub fn bucket(&self) -> Option<&str> {
        self.output(keys::ARCHIVE_BUCKET_NAME)
    }

    /// `AlarmPrefix`; for a stack deployed before that output, `{name}-` (every alarm of the
    /// template is named `${AWS::StackName}-…`).
    pub fn alarm_prefix(&self) -> String {
        self.output(keys::ALARM_PREFIX)
            .map_or_else(|| format!("{}-", self.name), str::to_owned)
    }

    /// `ConsumerEventSourceMapping`: the UUID of the consumer's event source mapping.
    pub fn consumer_mapping(&self) -> Option<&str> {
        self.output(keys::CONSUMER_EVENT_SOURCE_MAPPING)
    }

    /// Whether the stack says it has no consumer breaker: its `ConsumerEventSourceMapping`
    /// output is there, and empty (a stack deployed before the output does not say).
    pub fn names_no_mapping(&self) -> bool {
        self.outputs
            .get(keys::CONSUMER_EVENT_SOURCE_MAPPING)
            .is_some_and(|v| v.trim().is_empty())
    }

    /// The consumer breaker's alarms: the `DownstreamFailingAlarmName` output (else
    /// `{prefix}downstream-failing`) and `{prefix}consumer-errors`, the prefix
    /// [`Deployed::alarm_prefix`]'s (the template's `PAUSE_CONSUMER_ON_ALARMS`).
    pub fn consumer_breaker_alarms(&self) -> Vec<String> {
        let mut alarms = consumer_breaker_alarms(&self.alarm_prefix());
        if let Some(name) = self.output(keys::DOWNSTREAM_FAILING_ALARM_NAME) {
            alarms[0] = name.to_owned();
        }
        alarms
    }

    /// The consumer's idempotency window: the `IdempotencyWindowSeconds` output, else the
    /// `OrderRecordRetentionDays` parameter in seconds.
    pub fn idempotency_window_seconds(&self) -> Option<u64> {
        self.output(keys::IDEMPOTENCY_WINDOW_SECONDS)
            .and_then(|v| v.parse().ok())
            .or_else(|| {
                self.parameter::<u64>(keys::ORDER_RECORD_RETENTION_DAYS)
                    .map(|days| days * 86_400)
            })
    }

    /// The `ArchiveAfterSeconds` parameter.
    pub fn archive_after_seconds(&self) -> Option<u64> {
        self.parameter(keys::ARCHIVE_AFTER_SECONDS)
    }

    /// The `MaxRedriveAttempts` parameter.
    pub fn max_redrive_attempts(&self) -> Option<u32> {
        self.parameter(keys::MAX_REDRIVE_ATTEMPTS)
    }

    /// The `PermanentAction` parameter.
    pub fn permanent_action(&self) -> Option<PermanentAction> {
        self.parameter(keys::PERMANENT_ACTION)
    }

    /// The `KeptInFlightMax` parameter (the redriver's `KEPT_IN_FLIGHT_MAX`).
    pub fn kept_in_flight_max(&self) -> Option<u64> {
        self.parameter(keys::KEPT_IN_FLIGHT_MAX)
    }

    /// The breakers' alarms a replay waits for ([`replay_breaker_alarms`] under
    /// [`Deployed::alarm_prefix`], the downstream-failing one by its output when the stack has
    /// it).
    pub fn replay_breaker_alarms(&self) -> Vec<String> {
        let mut alarms = replay_breaker_alarms(&self.alarm_prefix());
        let under_prefix = consumer_breaker_alarms(&self.alarm_prefix());
        for (named, default) in self.consumer_breaker_alarms().into_iter().zip(under_prefix) {
            if let Some(a) = alarms.iter_mut().find(|a| **a == default) {
                *a = named;
            }
        }
        alarms
    }

    /// `CorrelationKey` (output, else parameter): the business id's log key.
    pub fn correlation_key(&self) -> Option<String> {
        self.output_or_parameter(keys::CORRELATION_KEY)
    }

    /// `CorrelationField` (output, else parameter): the body's field holding the business id.
    pub fn correlation_field(&self) -> Option<String> {
        self.output_or_parameter(keys::CORRELATION_FIELD)
    }

    /// The stack as `DescribeStacks` describes it.
    pub fn from_stack(name: &str, stack: &aws_sdk_cloudformation::types::Stack) -> Self {
        Self {
            name: name.to_owned(),
            outputs: stack
                .outputs()
                .iter()
                .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
                .collect(),
            parameters: stack
                .parameters()
                .iter()
                .filter_map(|p| {
                    Some((
                        p.parameter_key()?.to_owned(),
                        p.parameter_value()?.to_owned(),
                    ))
                })
                .collect(),
        }
    }
}

/// Reads the stack `name`; an unknown name is [`CliError::NoSuchStack`].
pub async fn read(
    cloudformation: &aws_sdk_cloudformation::Client,
    name: &str,
) -> Result<Deployed, CliError> {
    use aws_sdk_cloudformation::error::ProvideErrorMetadata;
    let name = name.trim();
    if name.is_empty() {
        return Err(CliError::Usage(
            "--stack (or RESQ_STACK) is empty: name the deployed stack".into(),
        ));
    }
    let out = match cloudformation
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) if e.message().is_some_and(|m| m.contains("does not exist")) => {
            return Err(CliError::NoSuchStack {
                name: name.to_owned(),
            });
        }
        Err(e) => return Err(CliError::aws(format!("reading the stack {name}"), e)),
    };
    out.stacks()
        .first()
        .map(|s| Deployed::from_stack(name, s))
        .ok_or_else(|| CliError::NoSuchStack {
            name: name.to_owned(),
        })
}

/// Which of the flags a deployed stack's value stands in for were typed on the command line
/// (not taken from their environment variable or their default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Typed {
    /// `--stack` itself (`resq stack check --deployed` takes it only typed).
    pub stack: bool,
    /// `--main-queue-url`.
    pub main_queue_url: bool,
    /// `--dlq-url`.
    pub dlq_url: bool,
    /// `--archive-bucket`.
    pub archive_bucket: bool,
    /// `--alarm-prefix` (`resq status`).
    pub alarm_prefix: bool,
    /// `--max-redrive-attempts` (`resq dlq redrive`).
    pub max_redrive_attempts: bool,
    /// `--archive-after-seconds` (`resq dlq redrive`, `resq archive restore`).
    pub archive_after_seconds: bool,
    /// `--permanent-action` (`resq dlq redrive`).
    pub permanent_action: bool,
    /// `--idempotency-window-seconds` (`resq archive restore`).
    pub idempotency_window_seconds: bool,
    /// `--mapping` (`resq status`, `resq consumer`).
    pub mapping: bool,
    /// `--pause-consumer-on-alarms` (`resq consumer resume`).
    pub pause_consumer_on_alarms: bool,
    /// `--kept-in-flight-max` (`resq dlq redrive`).
    pub kept_in_flight_max: bool,
    /// `--pause-on-alarms` (`resq dlq redrive`).
    pub pause_on_alarms: bool,
}

/// The settings a command takes from the deployed stack instead of its flags: each value the
/// stack has whose flag was not typed. A command uses each of them, else its flag's value
/// (from the environment variable or the default): so a flag typed wins, then the stack, then
/// the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FromStack {
    /// `OrdersQueueUrl`.
    pub main_queue_url: Option<String>,
    /// `DeadLetterQueueUrl`.
    pub dlq_url: Option<String>,
    /// `ArchiveBucketName`.
    pub archive_bucket: Option<String>,
    /// [`Deployed::alarm_prefix`].
    pub alarm_prefix: Option<String>,
    /// `MaxRedriveAttempts`.
    pub max_redrive_attempts: Option<u32>,
    /// `ArchiveAfterSeconds`.
    pub archive_after_seconds: Option<u64>,
    /// `PermanentAction`.
    pub permanent_action: Option<PermanentAction>,
    /// [`Deployed::idempotency_window_seconds`].
    pub idempotency_window_seconds: Option<u64>,
    /// `ConsumerEventSourceMapping`.
    pub mapping: Option<String>,
    /// [`Deployed::consumer_breaker_alarms`].
    pub pause_consumer_on_alarms: Option<Vec<String>>,
    /// `KeptInFlightMax`.
    pub kept_in_flight_max: Option<u64>,
    /// [`Deployed::replay_breaker_alarms`].
    pub pause_on_alarms: Option<Vec<String>>,
}

impl FromStack {
    /// The values of `stack` (none without one) whose flags were not `typed`.
    pub fn new(stack: Option<&Deployed>, typed: Typed) -> Self {
        let Some(d) = stack else {
            return Self::default();
        };
        fn unless<T>(typed: bool, value: Option<T>) -> Option<T> {
            value.filter(|_| !typed)
        }
        let owned = |v: Option<&str>| v.map(str::to_owned);
        Self {
            main_queue_url: unless(typed.main_queue_url, owned(d.main_queue_url())),
            dlq_url: unless(typed.dlq_url, owned(d.dlq_url())),
            archive_bucket: unless(typed.archive_bucket, owned(d.bucket())),
            alarm_prefix: unless(typed.alarm_prefix, Some(d.alarm_prefix())),
            max_redrive_attempts: unless(typed.max_redrive_attempts, d.max_redrive_attempts()),
            archive_after_seconds: unless(typed.archive_after_seconds, d.archive_after_seconds()),
            permanent_action: unless(typed.permanent_action, d.permanent_action()),
            idempotency_window_seconds: unless(
                typed.idempotency_window_seconds,
                d.idempotency_window_seconds(),
            ),
            mapping: unless(typed.mapping, owned(d.consumer_mapping())),
            // an --alarm-prefix typed names the alarms under it, not the stack's
            pause_consumer_on_alarms: unless(
                typed.pause_consumer_on_alarms || typed.alarm_prefix,
                Some(d.consumer_breaker_alarms()),
            ),
            kept_in_flight_max: unless(typed.kept_in_flight_max, d.kept_in_flight_max()),
            pause_on_alarms: unless(typed.pause_on_alarms, Some(d.replay_breaker_alarms())),
        }
    }
}

/// The business id's body field a command reads (`resq find`): `--correlation-field` when
/// typed (`flag`), else the stack's `CorrelationKey` / `CorrelationField`, else
/// `RESQ_CORRELATION_KEY` / `RESQ_CORRELATION_FIELD` (`env`), else orders' (`orderId`), by
/// the rule the functions use ([`CorrelationKey::from_vars`]: a key alone names its camelCase
/// field). An invalid value is a usage error naming it.
pub fn correlation(
    flag: Option<&str>,
    stack: Option<&Deployed>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<CorrelationKey, CliError> {
    const KEY: &str = "RESQ_CORRELATION_KEY";
    const FIELD: &str = "RESQ_CORRELATION_FIELD";
    let from_stack = stack.and_then(|d| {
        let (key, field) = (d.correlation_key(), d.correlation_field());
        (key.is_some() || field.is_some()).then_some((key, field))
    });
    let resolved = match (flag, from_stack) {
        (Some(field), _) => CorrelationKey::from_vars(
            CorrelationKey::ORDERS,
            &Vars(|name: &str| (name == FIELD).then(|| field.to_owned())),
        ),
        (None, Some((key, field))) => CorrelationKey::from_vars(
            CorrelationKey::ORDERS,
            &Vars(|name: &str| match name {
                KEY => key.clone(),
                FIELD => field.clone(),
                _ => None,
            }),
        ),
        (None, None) => CorrelationKey::from_vars(CorrelationKey::ORDERS, &Vars(env)),
    };
    resolved.map_err(|e| {
        let source = match (flag, stack) {
            (Some(_), _) => "--correlation-field".to_owned(),
            (None, Some(d)) if d.correlation_field().is_some() || d.correlation_key().is_some() => {
                format!("the stack {}'s CorrelationKey / CorrelationField", d.name)
            }
            _ => "the environment".to_owned(),
        };
        CliError::Usage(format!("{source}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployed(outputs: &[(&str, &str)], parameters: &[(&str, &str)]) -> Deployed {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        Deployed {
            name: "resq-prod".into(),
            outputs: map(outputs),
            parameters: map(parameters),
        }
    }

    #[test]
    fn the_stack_gives_the_names_and_settings() {
        let d = deployed(
            &[
                ("OrdersQueueUrl", "https://sqs/1/q"),
                ("DeadLetterQueueUrl", "https://sqs/1/dlq"),
                ("ArchiveBucketName", "b"),
                ("AlarmPrefix", "resq-prod-"),
                ("IdempotencyWindowSeconds", "604800"),
            ],
            &[
                ("ArchiveAfterSeconds", "3600"),
                ("MaxRedriveAttempts", "5"),
                ("PermanentAction", "archive"),
                ("OrderRecordRetentionDays", "90"),
            ],
        );
        assert_eq!(d.main_queue_url(), Some("https://sqs/1/q"));
        assert_eq!(d.dlq_url(), Some("https://sqs/1/dlq"));
        assert_eq!(d.bucket(), Some("b"));
        assert_eq!(d.alarm_prefix(), "resq-prod-");
        assert_eq!(
            d.idempotency_window_seconds(),
            Some(604_800),
            "the output first"
        );
        assert_eq!(d.archive_after_seconds(), Some(3600));
        assert_eq!(d.max_redrive_attempts(), Some(5));
        assert_eq!(d.permanent_action(), Some(PermanentAction::Archive));
        assert_eq!(d.kept_in_flight_max(), None, "an older stack");
        let kept = deployed(&[], &[("KeptInFlightMax", "20000")]);
        assert_eq!(kept.kept_in_flight_max(), Some(20_000));
        // the breakers' alarms a replay waits for: the redriver's, then the consumer's
        assert_eq!(
            d.replay_breaker_alarms(),
            [
                "resq-prod-replays-failing",
                "resq-prod-consumer-errors",
                "resq-prod-dead-letters-unexplained",
                "resq-prod-downstream-failing"
            ]
        );
    }

    #[test]
    fn the_stack_names_the_consumers_mapping_and_its_breakers_alarms() {
        // GIVEN a stack with a consumer breaker
        let d = deployed(
            &[
                ("ConsumerEventSourceMapping", "7c1f0d2e-uuid"),
                ("DownstreamFailingAlarmName", "resq-prod-downstream-failing"),
                ("AlarmPrefix", "resq-prod-"),
            ],
            &[],
        );
        assert_eq!(d.consumer_mapping(), Some("7c1f0d2e-uuid"));
        assert!(!d.names_no_mapping());
        assert_eq!(
            d.consumer_breaker_alarms(),
            ["resq-prod-downstream-failing", "resq-prod-consumer-errors"]
        );
        let s = FromStack::new(Some(&d), Typed::default());
        assert_eq!(s.mapping.as_deref(), Some("7c1f0d2e-uuid"));
        assert_eq!(
            s.pause_consumer_on_alarms,
            Some(vec![
                "resq-prod-downstream-failing".to_owned(),
                "resq-prod-consumer-errors".to_owned()
            ])
        );
        // AND a --mapping or an --alarm-prefix typed leaves the stack's out
        let typed = Typed {
            mapping: true,
            alarm_prefix: true,
            ..Typed::default()
        };
        let s = FromStack::new(Some(&d), typed);
        assert_eq!((s.mapping, s.pause_consumer_on_alarms), (None, None));
        // WHEN the stack has no breaker (its output empty) it says so; an older stack does not
        let off = deployed(&[("ConsumerEventSourceMapping", "")], &[]);
        assert_eq!(off.consumer_mapping(), None);
        assert!(off.names_no_mapping());
        let older = deployed(&[], &[]);
        assert!(!older.names_no_mapping());
        assert_eq!(
            older.consumer_breaker_alarms(),
            ["resq-prod-downstream-failing", "resq-prod-consumer-errors"],
            "the template's names under the stack's name"
        );
    }

    #[test]
    fn an_older_stack_falls_back_to_what_it_has() {
        let d = deployed(
            &[("OrdersQueueUrl", " ")],
            &[("OrderRecordRetentionDays", "7")],
        );
        assert_eq!(d.main_queue_url(), None, "an empty output is no output");
        assert_eq!(d.alarm_prefix(), "resq-prod-");
        assert_eq!(d.idempotency_window_seconds(), Some(7 * 86_400));
        assert_eq!(d.max_redrive_attempts(), None);
    }

    #[test]
    fn the_business_id_field_is_the_flags_then_the_stacks_then_the_environments() {
        let team = deployed(
            &[
                ("CorrelationKey", "payment_id"),
                ("CorrelationField", "paymentId"),
            ],
            &[],
        );
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let field = |k: Result<CorrelationKey, CliError>| k.unwrap().body_field().to_owned();
        // GIVEN nothing: orders'
        assert_eq!(field(correlation(None, None, env(&[]))), "orderId");
        // WHEN the stack names its field (output, or parameter on an older stack): the stack's
        assert_eq!(
            field(correlation(
                None,
                Some(&team),
                env(&[("RESQ_CORRELATION_FIELD", "x")])
            )),
            "paymentId"
        );
        let by_parameter = deployed(&[], &[("CorrelationField", "refundId")]);
        assert_eq!(
            field(correlation(None, Some(&by_parameter), env(&[]))),
            "refundId"
        );
        // AND a stack without it leaves the environment's (a key alone names its camelCase)
        let older = deployed(&[], &[]);
        assert_eq!(
            field(correlation(
                None,
                Some(&older),
                env(&[("RESQ_CORRELATION_KEY", "refund_id")])
            )),
            "refundId"
        );
        assert_eq!(
            field(correlation(
                None,
                None,
                env(&[("RESQ_CORRELATION_FIELD", "paymentId")])
            )),
            "paymentId"
        );
        // AND the flag typed beats them all
        assert_eq!(
            field(correlation(Some("invoiceId"), Some(&team), env(&[]))),
            "invoiceId"
        );
        // AND an invalid value is a usage error naming where it came from
        let e = correlation(None, None, env(&[("RESQ_CORRELATION_KEY", "Bad-Key")])).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("RESQ_CORRELATION_KEY"), "{e}");
    }

    #[test]
    fn a_typed_flag_beats_the_stack_which_beats_the_environment_and_defaults() {
        let d = deployed(
            &[("DeadLetterQueueUrl", "https://sqs/1/dlq")],
            &[("MaxRedriveAttempts", "5"), ("ArchiveAfterSeconds", "3600")],
        );
        // GIVEN --max-redrive-attempts typed, the rest from the environment or defaults
        let typed = Typed {
            max_redrive_attempts: true,
            ..Typed::default()
        };
        let s = FromStack::new(Some(&d), typed);
        // THEN the typed flag wins: the stack gives no cap
        assert_eq!(s.max_redrive_attempts.unwrap_or(3), 3);
        // AND the stack's values stand in for the flags not typed
        assert_eq!(s.archive_after_seconds.unwrap_or(86_400), 3600);
        assert_eq!(s.dlq_url.as_deref(), Some("https://sqs/1/dlq"));
        assert_eq!(s.alarm_prefix.as_deref(), Some("resq-prod-"));
        // AND what the stack lacks is left to the flag (its environment variable or default)
        assert_eq!(s.main_queue_url, None);
        assert_eq!(s.permanent_action, None);
        // AND without a stack every flag stands
        assert_eq!(FromStack::new(None, Typed::default()), FromStack::default());
    }
}
