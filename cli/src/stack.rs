//! `resq stack check`, which `make deploy` runs first: a parameter set evaluated against the
//! template (`infra/template.yaml`) before deploy. CloudFormation's `Rules` cannot compare
//! numbers, so resq does it: a set that could lose messages (the retry horizon against the
//! main queue's retention, an archive sweep too rare for the DLQ's retention), double an effect
//! (the order-record lifetime against a message's longest life) or stall (a breaker that can
//! never trip, a drain ceiling below its base rate, a batch whose tail can never start before
//! the deadline) is refused, naming the parameters in conflict.
//!
//! Everything here is pure ([`Template::parse`], [`parse_overrides`], [`samconfig_overrides`],
//! [`resolve`], [`refusals`], [`Settings::from_set`], [`evaluate`]) except [`load`], which reads
//! the two files and hands their text in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::CliError;
use resq_consumer::concurrency::Concurrency;

/// The template's `Parameters` that the rules read.
pub mod names {
    /// Standard or FIFO queues (FIFO has no batching window).
    pub const QUEUE_TYPE: &str = "QueueType";
    /// The main queue's `maxReceiveCount`.
    pub const MAX_RECEIVE_COUNT: &str = "MaxReceiveCount";
    /// Full-jitter backoff ceiling (`BACKOFF_MAX_SECONDS`).
    pub const BACKOFF_MAX_SECONDS: &str = "BackoffMaxSeconds";
    /// The consumer's timeout; the main queue's visibility timeout is seven times it.
    pub const CONSUMER_TIMEOUT: &str = "ConsumerTimeout";
    /// Lambda's batching window of the consumer's event source.
    pub const CONSUMER_BATCHING_WINDOW_SECONDS: &str = "ConsumerBatchingWindowSeconds";
    /// Concurrent consumer invocations (on-demand pollers' `ScalingConfig.MaximumConcurrency`).
    pub const CONSUMER_MAXIMUM_CONCURRENCY: &str = "ConsumerMaximumConcurrency";
    /// Provisioned pollers kept ready; 0: provisioned mode off.
    pub const CONSUMER_MINIMUM_POLLERS: &str = "ConsumerMinimumPollers";
    /// Provisioned pollers at most.
    pub const CONSUMER_MAXIMUM_POLLERS: &str = "ConsumerMaximumPollers";
    /// Records per consumer invocation.
    pub const CONSUMER_BATCH_SIZE: &str = "ConsumerBatchSize";
    /// Records in flight within one invocation (`CONSUMER_CONCURRENCY`).
    pub const CONSUMER_CONCURRENCY: &str = "ConsumerConcurrency";
    /// Both functions stop starting work this close to their deadline (`DEADLINE_MARGIN_MS`).
    pub const DEADLINE_MARGIN_MS: &str = "DeadlineMarginMs";
    /// The main queue's retention.
    pub const ORDERS_RETENTION_SECONDS: &str = "OrdersRetentionSeconds";
    /// The TTL (`ARCHIVE_AFTER_SECONDS`).
    pub const ARCHIVE_AFTER_SECONDS: &str = "ArchiveAfterSeconds";
    /// The order records' lifetime (the idempotency keys).
    pub const ORDER_RECORD_RETENTION_DAYS: &str = "OrderRecordRetentionDays";
    /// The replays-failing alarm's threshold, per period.
    pub const REPLAYS_FAILING_THRESHOLD: &str = "ReplaysFailingThreshold";
    /// Replays one redriver run makes at most (`MAX_MESSAGES_PER_RUN`): `auto` or a number.
    pub const MAX_MESSAGES_PER_RUN: &str = "MaxMessagesPerRun";
    /// The redriver's rate (`REDRIVE_RATE_PER_SECOND`).
    pub const REDRIVE_RATE_PER_SECOND: &str = "RedriveRatePerSecond";
    /// How often a paused or budget-spent run reads through the DLQ to archive
    /// (`ARCHIVE_SWEEP_SECONDS`).
    pub const ARCHIVE_SWEEP_SECONDS: &str = "ArchiveSweepSeconds";
    /// The redriver's timeout.
    pub const REDRIVER_TIMEOUT: &str = "RedriverTimeout";
    /// The redriver's EventBridge schedule expression.
    pub const REDRIVER_SCHEDULE: &str = "RedriverSchedule";
}

use names::*;

/// SQS hides a message for at most 12 hours: no backoff is longer.
const LONGEST_BACKOFF_SECONDS: f64 = resq::sqs::MAX_VISIBILITY_TIMEOUT.as_secs() as f64;
/// The main queue's visibility timeout is this many consumer timeouts (the template's
/// `ConsumerTimeouts` mapping): AWS's six ([`LAMBDA_VISIBILITY_TIMEOUTS`]) and one more, room
/// for a batching window up to one timeout.
pub const VISIBILITY_PER_TIMEOUT: f64 = 7.0;
/// AWS's guidance: a queue hides a message for at least this many of its function's timeouts,
/// plus the batching window (Lambda retries a throttled batch within that time, and its poller
/// holds the records through the window).
pub const LAMBDA_VISIBILITY_TIMEOUTS: f64 = 6.0;
/// AWS's guidance: a source queue's `maxReceiveCount` is at least this (at 1, a single
/// throttled or failed receive dead-letters a message).
pub const LEAST_MAX_RECEIVE_COUNT: f64 = 2.0;
/// The period of the replays-failing alarm, in seconds (its threshold counts per period).
pub const ALARM_PERIOD_SECONDS: f64 = 60.0;
/// The per-record time assumed when none is given (`--record-ms`).
pub const DEFAULT_RECORD_MS: u64 = 100;
/// The DLQ's retention, in seconds: 14 days, fixed in the template (`DeadLetterQueue`'s
/// `MessageRetentionPeriod`, checked by a test). What is not archived by then, SQS deletes.
pub const DLQ_RETENTION_SECONDS: f64 = 1_209_600.0;

/// Why the check could not evaluate a parameter set: what was given cannot be read. (A set
/// that can be read and is refused is a [`Report`] with refusals or conflicts.)
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StackError {
    /// The template cannot be read as a CloudFormation template.
    #[error("{0}")]
    Template(String),
    /// Overrides that do not parse.
    #[error("{from}: {message}")]
    Overrides {
        /// Where they came from.
        from: Source,
        /// What is wrong.
        message: String,
    },
    /// An override names a parameter the template does not have.
    #[error("{from} sets {name}, which is not a parameter of the template{}", hint.as_ref().map(|h| format!(" (did you mean {h}?)")).unwrap_or_default())]
    UnknownParameter {
        /// The name as given.
        name: String,
        /// Where it came from.
        from: Source,
        /// A parameter of the template spelt the same but for case.
        hint: Option<String>,
    },
    /// The template lacks a parameter the rules read, or its value is not of the kind they
    /// need (the template is not resq's, or not this version's).
    #[error("{0}")]
    Unusable(String),
}

/// Where a parameter's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The template's `Default`.
    Default,
    /// The deployed stack's current value: `sam deploy` keeps it (`UsePreviousValue`) for a
    /// parameter neither samconfig.toml nor the command line gives.
    Deployed,
    /// samconfig.toml's `parameter_overrides` (what `sam deploy` uses when given none).
    Samconfig,
    /// `--parameter-overrides`.
    CommandLine,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Default => "the template's default",
            Self::Deployed => "the deployed stack's value",
            Self::Samconfig => "samconfig.toml's parameter_overrides",
            Self::CommandLine => "--parameter-overrides",
        })
    }
}

/// A parameter of the template, as far as the check reads it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parameter {
    /// Its name.
    pub name: String,
    /// `Type`: `String`, `Number`, `CommaDelimitedList`, …
    pub kind: String,
    /// `Default`, as CloudFormation would hand it over (a string).
    pub default: Option<String>,
    /// `MinValue` (numbers).
    pub min_value: Option<f64>,
    /// `MaxValue` (numbers).
    pub max_value: Option<f64>,
    /// `MinLength` (strings).
    pub min_length: Option<usize>,
    /// `MaxLength` (strings).
    pub max_length: Option<usize>,
    /// `AllowedValues`.
    pub allowed_values: Option<Vec<String>>,
    /// `AllowedPattern` (matched against the whole value).
    pub allowed_pattern: Option<String>,
    /// `ConstraintDescription`: what CloudFormation says when a constraint fails.
    pub constraint_description: Option<String>,
}

/// The template's `Parameters`, in the template's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// Its parameters.
    pub parameters: Vec<Parameter>,
}

type Yaml = serde_norway::Value;

/// A scalar as CloudFormation passes it to a parameter: a string.
fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn number(v: &Yaml) -> Option<f64> {
    match v {
        Yaml::Number(n) => n.as_f64(),
        Yaml::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl Template {
    /// Reads the `Parameters` of a template (YAML; CloudFormation's short tags such as `!Ref`
    /// elsewhere in it parse as tagged values and are not looked at).
    pub fn parse(yaml: &str) -> Result<Self, StackError> {
        let doc: Yaml = serde_norway::from_str(yaml)
            .map_err(|e| StackError::Template(format!("not YAML: {e}")))?;
        let Some(params) = doc.get("Parameters").and_then(Yaml::as_mapping) else {
            return Err(StackError::Template(
                "has no Parameters section: is it resq's template (infra/template.yaml)?".into(),
            ));
        };
        let mut parameters = Vec::with_capacity(params.len());
        for (name, body) in params {
            let name = scalar(name)
                .ok_or_else(|| StackError::Template("a parameter's name is not a string".into()))?;
            let field = |key: &str| body.get(key);
            let bad =
                |key: &str| StackError::Template(format!("{name}: {key} is not a plain value"));
            let text = |key: &str| -> Result<Option<String>, StackError> {
                field(key)
                    .map(|v| scalar(v).ok_or_else(|| bad(key)))
                    .transpose()
            };
            let num = |key: &str| -> Result<Option<f64>, StackError> {
                field(key)
                    .map(|v| number(v).ok_or_else(|| bad(key)))
                    .transpose()
            };
            let length = |key: &str| -> Result<Option<usize>, StackError> {
                Ok(num(key)?.map(|n| n.max(0.0) as usize))
            };
            let allowed_values = match field("AllowedValues") {
                None => None,
                Some(Yaml::Sequence(items)) => Some(
                    items
                        .iter()
                        .map(|v| scalar(v).ok_or_else(|| bad("AllowedValues")))
                        .collect::<Result<_, _>>()?,
                ),
                Some(_) => return Err(bad("AllowedValues")),
            };
            parameters.push(Parameter {
                kind: text("Type")?.unwrap_or_else(|| "String".into()),
                default: text("Default")?,
                min_value: num("MinValue")?,
                max_value: num("MaxValue")?,
                min_length: length("MinLength")?,
                max_length: length("MaxLength")?,
                allowed_values,
                allowed_pattern: text("AllowedPattern")?,
                constraint_description: text("ConstraintDescription")?,
                name,
            });
        }
        Ok(Self { parameters })
    }

    /// The parameter of that name.
    pub fn parameter(&self, name: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| p.name == name)
    }
}

/// `KEY=VALUE` pairs in `sam deploy --parameter-overrides` syntax: `K=V K2="a b"`, or
/// `ParameterKey=K,ParameterValue=V`, separated by spaces; a value may be quoted with `"` or `'`
/// (and `\"`, `\'`, `\ ` escaped), as SAM reads them. Unlike SAM, text that is neither form is
/// an error rather than skipped: a check must not pass over a value it did not read.
pub fn parse_overrides(text: &str, source: Source) -> Result<Vec<(String, String)>, StackError> {
    let fail = |message: String| StackError::Overrides {
        from: source,
        message,
    };
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (key, tail) = match rest.strip_prefix("ParameterKey=") {
            Some(tail) => {
                let (key, tail) = split_key(tail);
                let tail = tail.strip_prefix(",ParameterValue=").ok_or_else(|| {
                    fail(format!(
                        "\"{}\" is not ParameterKey=K,ParameterValue=V",
                        token(rest)
                    ))
                })?;
                (key, tail)
            }
            None => {
                let (key, tail) = split_key(rest);
                let tail = tail
                    .strip_prefix('=')
                    .filter(|_| !key.is_empty())
                    .ok_or_else(|| fail(format!("\"{}\" is not KEY=VALUE", token(rest))))?;
                (key, tail)
            }
        };
        let (value, tail) = split_value(tail)
            .ok_or_else(|| fail(format!("the value of {key} has no closing quote")))?;
        if value.is_empty() {
            // SAM would skip it silently, leaving the parameter as it was
            return Err(fail(format!(
                "{key}= has no value (an empty one is written {key}=\"\")"
            )));
        }
        if tail.chars().next().is_some_and(|c| !c.is_whitespace()) {
            return Err(fail(format!(
                "\"{}\" is not KEY=VALUE (quote a value that holds spaces or quotes)",
                token(rest)
            )));
        }
        out.push((unquote(key), unquote(value)));
        rest = tail.trim_start();
    }
    Ok(out)
}

/// The first whitespace-separated word, for messages.
fn token(s: &str) -> &str {
    s.split_whitespace().next().unwrap_or(s)
}

/// A key: letters, digits and quotes (SAM's key pattern).
fn split_key(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '"' || c == '\''))
        .unwrap_or(s.len());
    s.split_at(end)
}

/// A value: quoted (to its closing quote, `\` escaping) or up to the next space.
fn split_value(s: &str) -> Option<(&str, &str)> {
    let quote = s.chars().next().filter(|c| *c == '"' || *c == '\'');
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if i > 0 && !escaped && c == q => return Some(s.split_at(i + 1)),
            None if !escaped && c.is_whitespace() => return Some(s.split_at(i)),
            _ => {}
        }
        escaped = !escaped && c == '\\';
    }
    quote.is_none().then_some((s, ""))
}

/// SAM's unquoting: wrapping quotes removed, `\ `, `\"` and `\'` unescaped.
fn unquote(s: &str) -> String {
    let inner = match (s.chars().next(), s.chars().last()) {
        (Some(a), Some(b)) if s.len() >= 2 && a == b && (a == '"' || a == '\'') => {
            &s[1..s.len() - 1]
        }
        _ => s,
    };
    inner
        .replace("\\ ", " ")
        .replace("\\\"", "\"")
        .replace("\\'", "'")
}

/// The overrides in a samconfig.toml, as `sam deploy` reads them: `parameter_overrides` of
/// `[default.deploy.parameters]`, else of `[default.global.parameters]`; a string in
/// `--parameter-overrides` syntax, a list of such strings, or a table of values (a list value
/// joined with commas, a boolean as SAM writes it: `True`/`False`). None when it has none.
pub fn samconfig_overrides(text: &str) -> Result<Vec<(String, String)>, StackError> {
    let source = Source::Samconfig;
    let fail = |message: String| StackError::Overrides {
        from: source,
        message,
    };
    let doc: toml::Table =
        toml::from_str(text).map_err(|e| fail(format!("not TOML: {}", e.message())))?;
    let section = |command: &str| {
        doc.get("default")
            .and_then(|v| v.get(command))
            .and_then(|v| v.get("parameters"))
            .and_then(|v| v.get("parameter_overrides"))
    };
    let Some(value) = section("deploy").or_else(|| section("global")) else {
        return Ok(Vec::new());
    };
    toml_overrides(value, source)
}

fn toml_overrides(
    value: &toml::Value,
    source: Source,
) -> Result<Vec<(String, String)>, StackError> {
    let fail = |message: String| StackError::Overrides {
        from: source,
        message,
    };
    match value {
        toml::Value::String(s) => parse_overrides(s, source),
        toml::Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(toml_overrides(item, source)?);
            }
            Ok(out)
        }
        toml::Value::Table(table) => table
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    toml::Value::Array(items) => items
                        .iter()
                        .map(toml_scalar)
                        .collect::<Option<Vec<_>>>()
                        .map(|v| v.join(",")),
                    other => toml_scalar(other),
                };
                value
                    .map(|v| (k.clone(), v))
                    .ok_or_else(|| fail(format!("the value of {k} is not a plain value")))
            })
            .collect(),
        other => Err(fail(format!(
            "parameter_overrides is a {}, not a string, a list or a table",
            other.type_str()
        ))),
    }
}

fn toml_scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        // SAM turns the table's values into strings with Python's str()
        toml::Value::Boolean(true) => Some("True".into()),
        toml::Value::Boolean(false) => Some("False".into()),
        _ => None,
    }
}

/// One parameter's value in a set.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// The value, as CloudFormation would get it; `None`: no default and not given.
    pub value: Option<String>,
    /// Where it came from.
    pub source: Source,
}

/// A parameter set: every parameter of the template with its value.
#[derive(Debug, Clone, PartialEq)]
pub struct ParameterSet {
    /// By name, in the template's order.
    pub values: Vec<(String, Value)>,
}

impl ParameterSet {
    /// The value of `name`, when it has one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.value.as_deref())
    }

    /// Where the value of `name` came from.
    pub fn source(&self, name: &str) -> Option<Source> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.source)
    }

    /// The values given rather than defaulted or kept from the deployed stack (which `sam
    /// deploy` keeps by itself), in the template's order.
    pub fn given(&self) -> impl Iterator<Item = (&str, &str, Source)> {
        self.values
            .iter()
            .filter_map(|(n, v)| match (&v.value, v.source) {
                (_, Source::Default | Source::Deployed) | (None, _) => None,
                (Some(value), source) => Some((n.as_str(), value.as_str(), source)),
            })
    }

    /// The values given, in `sam deploy --parameter-overrides` syntax (each value in double
    /// quotes, a `"` in it escaped; SAM unescapes nothing else), so that `sam deploy` gets the
    /// very set that was checked.
    pub fn sam_overrides(&self) -> String {
        self.given()
            .map(|(name, value, _)| format!("{name}=\"{}\"", value.replace('"', "\\\"")))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The set `sam deploy` would deploy: the template's defaults, then each layer of overrides in
/// turn (a later value of a parameter replaces an earlier one). An override of a parameter the
/// template does not have is an error naming it.
pub fn resolve(
    template: &Template,
    layers: &[(Source, Vec<(String, String)>)],
) -> Result<ParameterSet, StackError> {
    let mut values: BTreeMap<&str, Value> = template
        .parameters
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                Value {
                    value: p.default.clone(),
                    source: Source::Default,
                },
            )
        })
        .collect();
    for (source, pairs) in layers {
        for (name, value) in pairs {
            let Some(slot) = values.get_mut(name.as_str()) else {
                return Err(StackError::UnknownParameter {
                    name: name.clone(),
                    from: *source,
                    hint: template
                        .parameters
                        .iter()
                        .find(|p| p.name.eq_ignore_ascii_case(name))
                        .map(|p| p.name.clone()),
                });
            };
            *slot = Value {
                value: Some(value.clone()),
                source: *source,
            };
        }
    }
    Ok(ParameterSet {
        values: template
            .parameters
            .iter()
            .filter_map(|p| values.remove(p.name.as_str()).map(|v| (p.name.clone(), v)))
            .collect(),
    })
}

/// A value CloudFormation itself would refuse (its parameter's own constraints).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The parameter.
    pub parameter: String,
    /// Its value; `None`: it has none.
    pub value: Option<String>,
    /// Where the value came from.
    pub source: Source,
    /// The constraint it breaks.
    pub why: String,
}

/// The values of `set` that CloudFormation would refuse by their parameters' own `Type`,
/// `MinValue`/`MaxValue`, `MinLength`/`MaxLength`, `AllowedValues` and `AllowedPattern`. The
/// template's `Rules` (which compare no numbers) are CloudFormation's to check.
pub fn refusals(template: &Template, set: &ParameterSet) -> Vec<Refusal> {
    let mut out = Vec::new();
    for p in &template.parameters {
        let Some((_, v)) = set.values.iter().find(|(n, _)| *n == p.name) else {
            continue;
        };
        if let Some(why) = refused(p, v.value.as_deref()) {
            out.push(Refusal {
                parameter: p.name.clone(),
                value: v.value.clone(),
                source: v.source,
                why,
            });
        }
    }
    // what the template lets through but the functions refuse at start-up (a pattern this
    // check cannot read, one looser than the functions): both would fail every invocation
    for (parameter, var) in FUNCTION_VARIABLES {
        if out.iter().any(|r| r.parameter == parameter) {
            continue;
        }
        let Some((_, v)) = set.values.iter().find(|(n, _)| n == parameter) else {
            continue;
        };
        if let Some(why) = v
            .value
            .as_deref()
            .and_then(|given| refused_at_start(var, given))
        {
            out.push(Refusal {
                parameter: parameter.to_owned(),
                value: v.value.clone(),
                source: v.source,
                why,
            });
        }
    }
    out
}

/// The parameters the template hands both functions as a variable of their telemetry.
const FUNCTION_VARIABLES: [(&str, &str); 4] = [
    ("ServiceName", "POWERTOOLS_SERVICE_NAME"),
    ("MetricsNamespace", "POWERTOOLS_METRICS_NAMESPACE"),
    ("CorrelationKey", "RESQ_CORRELATION_KEY"),
    ("CorrelationField", "RESQ_CORRELATION_FIELD"),
];

/// Why the functions would refuse `var=value` at start-up, by their own check
/// (`resq::telemetry::Telemetry::from_vars`).
fn refused_at_start(var: &str, value: &str) -> Option<String> {
    let vars = resq::config::Vars(|k: &str| (k == var).then(|| value.to_owned()));
    resq::telemetry::Telemetry::from_vars(resq::telemetry::Names::ORDERS, &vars)
        .err()
        .map(|e| format!("both functions refuse it at start-up: {e}"))
}

fn refused(p: &Parameter, value: Option<&str>) -> Option<String> {
    let Some(value) = value else {
        return Some("it has no Default and no value was given".into());
    };
    let said = |derived: String| p.constraint_description.clone().unwrap_or(derived);
    // a list's constraints apply to each of its members: left to CloudFormation
    if p.kind.starts_with("List<") || p.kind == "CommaDelimitedList" {
        return None;
    }
    let numeric = p.kind == "Number";
    let n = value.trim().parse::<f64>().ok().filter(|n| n.is_finite());
    if numeric && n.is_none() {
        return Some("it is not a number".into());
    }
    if let Some(allowed) = &p.allowed_values {
        let listed = allowed
            .iter()
            .any(|a| match (numeric, a.parse::<f64>(), n) {
                (true, Ok(a), Some(n)) => a == n,
                _ => a == value,
            });
        if !listed {
            return Some(said(format!("it must be one of {}", allowed.join(", "))));
        }
    }
    if let (true, Some(n)) = (numeric, n) {
        if let Some(min) = p.min_value.filter(|min| n < *min) {
            return Some(said(format!("it must be at least {}", figure(min))));
        }
        if let Some(max) = p.max_value.filter(|max| n > *max) {
            return Some(said(format!("it must be at most {}", figure(max))));
        }
    }
    if !numeric {
        let len = value.chars().count();
        if let Some(min) = p.min_length.filter(|min| len < *min) {
            return Some(said(format!("it must be at least {min} characters long")));
        }
        if let Some(max) = p.max_length.filter(|max| len > *max) {
            return Some(said(format!("it must be at most {max} characters long")));
        }
    }
    if let Some(pattern) = &p.allowed_pattern {
        // CloudFormation matches the pattern against the whole value
        match regex_lite::Regex::new(&format!("^(?:{pattern})$")) {
            Ok(re) if !re.is_match(value) => {
                return Some(said(format!("it must match {pattern}")));
            }
            // a pattern this engine cannot read: CloudFormation checks it
            _ => {}
        }
    }
    None
}

/// The values the rules read, as numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `QueueType` is `fifo` (no batching window).
    pub fifo: bool,
    /// `MaxReceiveCount`.
    pub max_receive_count: f64,
    /// `BackoffMaxSeconds`.
    pub backoff_max_seconds: f64,
    /// `ConsumerTimeout`, seconds.
    pub consumer_timeout: f64,
    /// `ConsumerBatchingWindowSeconds`.
    pub batching_window_seconds: f64,
    /// `ConsumerBatchSize`.
    pub batch_size: f64,
    /// `ConsumerMaximumConcurrency` when given (not the template's default): the template
    /// leaves it out in provisioned mode.
    pub maximum_concurrency: Option<f64>,
    /// `ConsumerMinimumPollers` and `ConsumerMaximumPollers`; `None`: provisioned mode off (0).
    pub pollers: Option<(f64, f64)>,
    /// `ConsumerConcurrency`.
    pub concurrency: Concurrency,
    /// `DeadlineMarginMs`.
    pub deadline_margin_ms: f64,
    /// `OrdersRetentionSeconds`.
    pub orders_retention_seconds: f64,
    /// `ArchiveAfterSeconds`.
    pub archive_after_seconds: f64,
    /// `OrderRecordRetentionDays`.
    pub order_record_retention_days: f64,
    /// `ReplaysFailingThreshold`.
    pub replays_failing_threshold: f64,
    /// `MaxMessagesPerRun`; `None`: `auto`.
    pub max_messages_per_run: Option<f64>,
    /// `RedriveRatePerSecond`.
    pub rate_per_second: f64,
    /// `ArchiveSweepSeconds`.
    pub archive_sweep_seconds: f64,
    /// `RedriverTimeout`, seconds.
    pub redriver_timeout: f64,
    /// `RedriverSchedule`.
    pub schedule: String,
}

impl Settings {
    /// Reads the values the rules need from `set`.
    pub fn from_set(set: &ParameterSet) -> Result<Self, StackError> {
        let text = |name: &str| {
            set.get(name).ok_or_else(|| {
                StackError::Unusable(format!(
                    "the template has no value for {name}, which the check reads: is it resq's template?"
                ))
            })
        };
        let num = |name: &str| -> Result<f64, StackError> {
            let raw = text(name)?;
            raw.trim()
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .ok_or_else(|| StackError::Unusable(format!("{name}={raw} is not a number")))
        };
        let auto_or = |name: &str| -> Result<Option<f64>, StackError> {
            if text(name)?.trim().eq_ignore_ascii_case("auto") {
                Ok(None)
            } else {
                num(name).map(Some)
            }
        };
        Ok(Self {
            fifo: text(QUEUE_TYPE)?.trim() == "fifo",
            max_receive_count: num(MAX_RECEIVE_COUNT)?,
            backoff_max_seconds: num(BACKOFF_MAX_SECONDS)?,
            consumer_timeout: num(CONSUMER_TIMEOUT)?,
            batching_window_seconds: num(CONSUMER_BATCHING_WINDOW_SECONDS)?,
            batch_size: num(CONSUMER_BATCH_SIZE)?,
            // a cap given now: one only deployed (DescribeStacks lists every parameter) is
            // dropped by the template in provisioned mode, and `sam deploy` cannot leave it out
            maximum_concurrency: match set.source(CONSUMER_MAXIMUM_CONCURRENCY) {
                Some(Source::Default | Source::Deployed) => None,
                _ => Some(num(CONSUMER_MAXIMUM_CONCURRENCY)?),
            },
            pollers: match num(CONSUMER_MINIMUM_POLLERS)? {
                least if least > 0.0 => Some((least, num(CONSUMER_MAXIMUM_POLLERS)?)),
                _ => None,
            },
            concurrency: text(CONSUMER_CONCURRENCY)?.parse().map_err(|e| {
                StackError::Unusable(format!("{CONSUMER_CONCURRENCY}: expected {e}"))
            })?,
            deadline_margin_ms: num(DEADLINE_MARGIN_MS)?,
            orders_retention_seconds: num(ORDERS_RETENTION_SECONDS)?,
            archive_after_seconds: num(ARCHIVE_AFTER_SECONDS)?,
            order_record_retention_days: num(ORDER_RECORD_RETENTION_DAYS)?,
            replays_failing_threshold: num(REPLAYS_FAILING_THRESHOLD)?,
            max_messages_per_run: auto_or(MAX_MESSAGES_PER_RUN)?,
            rate_per_second: num(REDRIVE_RATE_PER_SECOND)?,
            archive_sweep_seconds: num(ARCHIVE_SWEEP_SECONDS)?,
            redriver_timeout: num(REDRIVER_TIMEOUT)?,
            schedule: text(REDRIVER_SCHEDULE)?.trim().to_owned(),
        })
    }
}

/// What the check assumes of what it cannot read from the template.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Assumptions {
    /// How long one record takes in the consumer, in milliseconds (`--record-ms`).
    pub record_ms: u64,
}

impl Default for Assumptions {
    fn default() -> Self {
        Self {
            record_ms: DEFAULT_RECORD_MS,
        }
    }
}

/// The rules, in the order they are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `MaxReceiveCount` × the longest delivery interval against the main queue's retention.
    RetryHorizon,
    /// The order records' lifetime against a message's longest life (TTL + retention).
    RecordLifetime,
    /// The TTL, the archive sweep's interval, the schedule and a run against the DLQ's
    /// retention.
    ArchiveSweep,
    /// A numeric `MaxMessagesPerRun` against the breaker's probe.
    ReplayBudget,
    /// A period of replays at `RedriveRatePerSecond` against the breaker's threshold.
    ReplayRate,
    /// A run's replays against the breaker's probe.
    ReplayRun,
    /// The consumer's deadline margin against its timeout.
    DeadlineMargin,
    /// A full batch's records against the consumer's time.
    BatchDeadline,
    /// `MaxMessagesPerRun=auto` and the schedule: the drain rate (a warning, never a refusal).
    ScheduledDrain,
    /// The redriver's timeout within its schedule's period.
    RedriverPeriod,
    /// The queue's visibility against 6 × the function's timeout + the batching window.
    Visibility,
    /// The source queue has a `RedrivePolicy`.
    DeadLetterQueue,
    /// `maxReceiveCount` at least 2.
    ReceivesPerTrip,
    /// The DLQ keeps messages longer than the source queue.
    DeadLetterRetention,
    /// Provisioned pollers without `MaximumConcurrency`, at least 2, the maximum at least the
    /// minimum.
    ProvisionedPollers,
    /// The mapping reports batch item failures (a warning).
    BatchItemFailures,
}

impl Rule {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::RetryHorizon => "retry horizon",
            Self::RecordLifetime => "order-record lifetime",
            Self::ArchiveSweep => "archive sweep",
            Self::ReplayBudget => "replay budget",
            Self::ReplayRate => "replay rate",
            Self::ReplayRun => "replays of a run",
            Self::DeadlineMargin => "deadline margin",
            Self::BatchDeadline => "batch before the deadline",
            Self::ScheduledDrain => "scheduled drain",
            Self::RedriverPeriod => "redriver run within its period",
            Self::Visibility => "visibility",
            Self::DeadLetterQueue => "dead-letter queue",
            Self::ReceivesPerTrip => "receives before the DLQ",
            Self::DeadLetterRetention => "dead-letter retention",
            Self::ProvisionedPollers => "provisioned pollers",
            Self::BatchItemFailures => "partial batch responses",
        }
    }
}

/// What a parameter set in conflict could do to messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Risk {
    /// A message could end without being processed, queued or archived.
    Lose,
    /// An order's effect could run twice.
    Double,
    /// Messages could stop moving (a breaker that never trips, records that never start).
    Stall,
    /// A message could reach the DLQ without having run (a throttle, a single failure).
    DeadLetter,
    /// The function could run more at once than the operator capped.
    Overrun,
}

impl Risk {
    /// Its word in the report.
    pub fn word(self) -> &'static str {
        match self {
            Self::Lose => "lose",
            Self::Double => "double",
            Self::Stall => "stall",
            Self::DeadLetter => "dead-letter unrun",
            Self::Overrun => "overrun its cap",
        }
    }
}

/// One rule's verdict on a set.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The rule holds; the figures say how.
    Holds {
        /// Which rule.
        rule: Rule,
        /// What was compared, with the numbers.
        figures: String,
    },
    /// The rule fails: the set is refused.
    Conflict(Conflict),
    /// Not a refusal, but not what the operator likely meant.
    Warning {
        /// Which rule.
        rule: Rule,
        /// What was found, with the numbers.
        figures: String,
    },
}

/// A rule the set breaks.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// Which rule.
    pub rule: Rule,
    /// What could happen.
    pub risk: Risk,
    /// The parameters in conflict, the deciding ones first.
    pub parameters: Vec<&'static str>,
    /// What was compared, with the numbers.
    pub figures: String,
    /// What would go wrong (and what to change).
    pub consequence: String,
}

/// Every rule's verdict on `s`.
pub fn evaluate(s: &Settings, a: &Assumptions) -> Vec<Verdict> {
    let mut out = vec![retry_horizon(s), record_lifetime(s), archive_sweep(s)];
    out.extend(breaker(s));
    out.extend(batch_deadline(s, a));
    out.extend(scheduled_drain(s));
    out.extend(redriver_period(s));
    out.extend(wiring(&Wiring::of_template(s), &TEMPLATE_NAMES));
    out
}

/// The conflicts of `s`: empty when the set may be deployed.
pub fn conflicts(s: &Settings, a: &Assumptions) -> Vec<Conflict> {
    evaluate(s, a)
        .into_iter()
        .filter_map(|v| match v {
            Verdict::Conflict(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// Lose: a message's retries must all fit in the main queue's retention. The longest delivery
/// interval is the longer of the backoff's ceiling (at most SQS's 12 h) and the visibility
/// timeout (7 × `ConsumerTimeout`: after an invocation that crashed or timed out), plus the
/// batching window (none for FIFO); the horizon is `MaxReceiveCount` of them.
fn retry_horizon(s: &Settings) -> Verdict {
    let backoff = s.backoff_max_seconds.min(LONGEST_BACKOFF_SECONDS);
    let visibility = VISIBILITY_PER_TIMEOUT * s.consumer_timeout;
    let window = if s.fifo {
        0.0
    } else {
        s.batching_window_seconds
    };
    let (dominant, longest) = if backoff >= visibility {
        (
            BACKOFF_MAX_SECONDS,
            format!("BackoffMaxSeconds {} s", figure(backoff)),
        )
    } else {
        (
            CONSUMER_TIMEOUT,
            format!(
                "a visibility of {} × ConsumerTimeout {} s = {} s",
                figure(VISIBILITY_PER_TIMEOUT),
                figure(s.consumer_timeout),
                figure(visibility)
            ),
        )
    };
    let interval = backoff.max(visibility) + window;
    let horizon = s.max_receive_count * interval;
    let interval_text = if window > 0.0 {
        format!(
            "{} s ({longest} + ConsumerBatchingWindowSeconds {} s)",
            figure(interval),
            figure(window)
        )
    } else {
        format!("{} s ({longest})", figure(interval))
    };
    let retention = s.orders_retention_seconds;
    if horizon <= retention {
        return Verdict::Holds {
            rule: Rule::RetryHorizon,
            figures: format!(
                "MaxReceiveCount {} × {interval_text} = {} s ≤ OrdersRetentionSeconds {} s",
                figure(s.max_receive_count),
                figure(horizon),
                figure(retention)
            ),
        };
    }
    // when one interval alone outlasts the retention, no MaxReceiveCount helps
    let single = interval > retention;
    let mut parameters = if single {
        vec![dominant]
    } else {
        vec![MAX_RECEIVE_COUNT, dominant]
    };
    if window > 0.0 {
        parameters.push(CONSUMER_BATCHING_WINDOW_SECONDS);
    }
    parameters.push(ORDERS_RETENTION_SECONDS);
    let consequence = if !single {
        "a message retried to its last receive ages out of the main queue before SQS moves it to the DLQ, and SQS deletes it".to_owned()
    } else if dominant == CONSUMER_TIMEOUT {
        "one delivery interval alone outlasts the main queue's retention: a message whose invocation crashed or timed out stays hidden until SQS deletes it, after a single receive".to_owned()
    } else {
        "one delivery interval alone outlasts the main queue's retention: a message backed off to the ceiling stays hidden until SQS deletes it".to_owned()
    };
    Verdict::Conflict(Conflict {
        rule: Rule::RetryHorizon,
        risk: Risk::Lose,
        parameters,
        figures: format!(
            "MaxReceiveCount {} × {interval_text} = {} s > OrdersRetentionSeconds {} s",
            figure(s.max_receive_count),
            figure(horizon),
            figure(retention)
        ),
        consequence,
    })
}

/// Double: an order's record (its idempotency key) must outlive every copy of the message; a
/// replay can run up to `ArchiveAfterSeconds` (in the DLQ) + `OrdersRetentionSeconds` (back in
/// the main queue) after the original send.
fn record_lifetime(s: &Settings) -> Verdict {
    let lifetime = s.order_record_retention_days * 86_400.0;
    let longest_life = s.archive_after_seconds + s.orders_retention_seconds;
    let figures = |cmp: &str| {
        format!(
            "OrderRecordRetentionDays {} = {} s {cmp} ArchiveAfterSeconds {} s + OrdersRetentionSeconds {} s = {} s",
            figure(s.order_record_retention_days),
            figure(lifetime),
            figure(s.archive_after_seconds),
            figure(s.orders_retention_seconds),
            figure(longest_life)
        )
    };
    if lifetime >= longest_life {
        return Verdict::Holds {
            rule: Rule::RecordLifetime,
            figures: figures("≥"),
        };
    }
    Verdict::Conflict(Conflict {
        rule: Rule::RecordLifetime,
        risk: Risk::Double,
        parameters: vec![
            ORDER_RECORD_RETENTION_DAYS,
            ARCHIVE_AFTER_SECONDS,
            ORDERS_RETENTION_SECONDS,
        ],
        figures: figures("<"),
        consequence:
            "a replay that arrives after its order's record expired runs the order's effect again"
                .into(),
    })
}

/// Lose: a message past its TTL must be archived before the DLQ's retention ends. A run that is
/// paused or has spent its replay budget archives only during an archive sweep, due
/// `ArchiveSweepSeconds` after the last one: a message reaching its TTL just after a sweep
/// passed it waits for the next one to come due, for the next scheduled run (a period of
/// `RedriverSchedule`), and for that run to reach it (at most `RedriverTimeout`). So
/// `ArchiveAfterSeconds` + `ArchiveSweepSeconds` + the period + the timeout must stay below the
/// DLQ's retention. A cron schedule has no one period: a warning with the room it has.
fn archive_sweep(s: &Settings) -> Verdict {
    let rule = Rule::ArchiveSweep;
    let known = s.archive_after_seconds + s.archive_sweep_seconds + s.redriver_timeout;
    let period = schedule_period_seconds(&s.schedule);
    let longest = known + period.unwrap_or(0.0);
    let schedule = match period {
        Some(p) => format!("RedriverSchedule {} = {} s", s.schedule, figure(p)),
        None => format!("RedriverSchedule {} (period unknown)", s.schedule),
    };
    let figures = |cmp: &str| {
        format!(
            "ArchiveAfterSeconds {} s + ArchiveSweepSeconds {} s + {schedule} + RedriverTimeout {} s = {} s {cmp} the DLQ's retention {} s (14 days)",
            figure(s.archive_after_seconds),
            figure(s.archive_sweep_seconds),
            figure(s.redriver_timeout),
            figure(longest),
            figure(DLQ_RETENTION_SECONDS)
        )
    };
    if longest >= DLQ_RETENTION_SECONDS {
        return Verdict::Conflict(Conflict {
            rule,
            risk: Risk::Lose,
            parameters: vec![
                ARCHIVE_SWEEP_SECONDS,
                ARCHIVE_AFTER_SECONDS,
                REDRIVER_SCHEDULE,
                REDRIVER_TIMEOUT,
            ],
            figures: figures("≥"),
            consequence: "while replay is paused or its budget spent, a message past its TTL can wait for the next archive sweep longer than the DLQ keeps it: SQS deletes it unarchived".into(),
        });
    }
    match period {
        Some(_) => Verdict::Holds {
            rule,
            figures: figures("<"),
        },
        None => Verdict::Warning {
            rule,
            figures: format!(
                "{}: a run must come at least every {} s (the DLQ's retention less the rest), or a message past its TTL can wait for an archive sweep until SQS deletes it",
                figures("<"),
                figure(DLQ_RETENTION_SECONDS - known)
            ),
        },
    }
}

/// Stall: the breaker must be able to trip. The replays-failing alarm trips when more than
/// `ReplaysFailingThreshold` replays fail within one 60 s period, and a probe after it clears
/// is 2 × (threshold + 1) replays ([`resq_redriver::breaker::probe_budget`]): a run's replays spread
/// over two periods leave at least half in one of them, and a run that covers a whole period
/// fills it at the rate. So a numeric budget must hold a probe, a period at the rate must hold
/// more than the threshold, and a run's replay time (`RedriverTimeout` less the deadline
/// margin) at the rate must hold a probe. (The template's ranges keep all three: threshold ≤
/// 50, rate ≥ 1, a numeric budget ≥ 102, timeout ≥ 180 s, margin ≤ 60 s.)
fn breaker(s: &Settings) -> Vec<Verdict> {
    let threshold = s.replays_failing_threshold;
    let probe = f64::from(resq_redriver::breaker::probe_budget(Some(threshold)));
    let probe_text = format!(
        "the breaker's probe 2 × (ReplaysFailingThreshold {} + 1) = {}",
        figure(threshold),
        figure(probe)
    );
    vec![
        replay_budget(s, probe, &probe_text),
        replay_rate(s),
        replay_run(s, probe, &probe_text),
    ]
}

/// The breaker: a numeric budget must hold a probe (`probe_text` says it).
fn replay_budget(s: &Settings, probe: f64, probe_text: &str) -> Verdict {
    match s.max_messages_per_run {
        None => Verdict::Holds {
            rule: Rule::ReplayBudget,
            figures: "MaxMessagesPerRun auto: a run replays what the rate allows in its time"
                .into(),
        },
        Some(budget) if budget >= probe => Verdict::Holds {
            rule: Rule::ReplayBudget,
            figures: format!("MaxMessagesPerRun {} ≥ {probe_text}", figure(budget)),
        },
        Some(budget) => Verdict::Conflict(Conflict {
            rule: Rule::ReplayBudget,
            risk: Risk::Stall,
            parameters: vec![MAX_MESSAGES_PER_RUN, REPLAYS_FAILING_THRESHOLD],
            figures: format!("MaxMessagesPerRun {} < {probe_text}", figure(budget)),
            consequence: "a run's failing replays may never exceed the threshold within one period: the breaker cannot trip, and replay goes on into a consumer that fails them".into(),
        }),
    }
}

/// The breaker: a period at the rate must hold more than the threshold.
fn replay_rate(s: &Settings) -> Verdict {
    let threshold = s.replays_failing_threshold;
    let per_period = s.rate_per_second * ALARM_PERIOD_SECONDS;
    let rate_figures = |cmp: &str| {
        format!(
            "RedriveRatePerSecond {} × {} s = {} replays a period {cmp} ReplaysFailingThreshold {}",
            figure(s.rate_per_second),
            figure(ALARM_PERIOD_SECONDS),
            figure(per_period),
            figure(threshold)
        )
    };
    if per_period > threshold {
        Verdict::Holds {
            rule: Rule::ReplayRate,
            figures: rate_figures(">"),
        }
    } else {
        Verdict::Conflict(Conflict {
            rule: Rule::ReplayRate,
            risk: Risk::Stall,
            parameters: vec![REDRIVE_RATE_PER_SECOND, REPLAYS_FAILING_THRESHOLD],
            figures: rate_figures("≤"),
            consequence: "even if every replay fails, no period holds more than the threshold: the breaker never trips".into(),
        })
    }
}

/// The breaker: a run's replay time at the rate must hold a probe (`probe_text` says it).
fn replay_run(s: &Settings, probe: f64, probe_text: &str) -> Verdict {
    let replay_time = s.redriver_timeout - s.deadline_margin_ms / 1000.0;
    let replays = s.rate_per_second * replay_time.max(0.0);
    // a numeric budget below the probe is the replay budget's conflict: here, the run's time
    let run_figures = |cmp: &str| {
        format!(
            "RedriveRatePerSecond {} × (RedriverTimeout {} s − DeadlineMarginMs {} s) = {} replays a run {cmp} {probe_text}",
            figure(s.rate_per_second),
            figure(s.redriver_timeout),
            figure(s.deadline_margin_ms / 1000.0),
            figure(replays)
        )
    };
    if replays >= probe {
        Verdict::Holds {
            rule: Rule::ReplayRun,
            figures: run_figures("≥"),
        }
    } else {
        Verdict::Conflict(Conflict {
            rule: Rule::ReplayRun,
            risk: Risk::Stall,
            parameters: vec![
                REDRIVER_TIMEOUT,
                DEADLINE_MARGIN_MS,
                REDRIVE_RATE_PER_SECOND,
                REPLAYS_FAILING_THRESHOLD,
            ],
            figures: run_figures("<"),
            consequence: "a run's failing replays, spread over two periods, may never exceed the threshold in either: the breaker cannot trip".into(),
        })
    }
}

/// Stall: a full batch must be able to start before the consumer's deadline margin. A margin
/// as long as the timeout leaves no record any time; otherwise ⌈batch ÷ concurrency⌉ rounds of
/// `record_ms` must fit in the timeout less the margin, or the tail of every full batch never
/// starts and uses up its receives without running.
fn batch_deadline(s: &Settings, a: &Assumptions) -> Vec<Verdict> {
    let timeout_ms = s.consumer_timeout * 1000.0;
    if s.deadline_margin_ms >= timeout_ms {
        return vec![Verdict::Conflict(Conflict {
            rule: Rule::DeadlineMargin,
            risk: Risk::Stall,
            parameters: vec![DEADLINE_MARGIN_MS, CONSUMER_TIMEOUT],
            figures: format!(
                "DeadlineMarginMs {} ms ≥ ConsumerTimeout {} s = {} ms",
                figure(s.deadline_margin_ms),
                figure(s.consumer_timeout),
                figure(timeout_ms)
            ),
            consequence: "no record can ever start: every message is received and reported failed until it reaches the DLQ unrun".into(),
        })];
    }
    let margin = Verdict::Holds {
        rule: Rule::DeadlineMargin,
        figures: format!(
            "DeadlineMarginMs {} ms < ConsumerTimeout {} s = {} ms",
            figure(s.deadline_margin_ms),
            figure(s.consumer_timeout),
            figure(timeout_ms)
        ),
    };
    // the limit a full batch starts with (under auto, a throttling downstream lowers it)
    let concurrency = s.concurrency.initial(s.batch_size.max(1.0) as usize) as f64;
    let concurrency_text = match s.concurrency {
        Concurrency::Fixed(_) => format!("ConsumerConcurrency {}", figure(concurrency)),
        Concurrency::Auto => format!("ConsumerConcurrency auto = {}", figure(concurrency)),
    };
    let rounds = (s.batch_size / concurrency).ceil();
    let needed = rounds * a.record_ms as f64;
    let available = timeout_ms - s.deadline_margin_ms;
    let figures = |cmp: &str| {
        format!(
            "⌈ConsumerBatchSize {} ÷ {concurrency_text}⌉ = {} round{} × {} ms a record (assumed: --record-ms) = {} ms {cmp} ConsumerTimeout {} ms − DeadlineMarginMs {} ms = {} ms",
            figure(s.batch_size),
            figure(rounds),
            if rounds == 1.0 { "" } else { "s" },
            a.record_ms,
            figure(needed),
            figure(timeout_ms),
            figure(s.deadline_margin_ms),
            figure(available)
        )
    };
    let batch = if needed <= available {
        Verdict::Holds {
            rule: Rule::BatchDeadline,
            figures: figures("≤"),
        }
    } else {
        Verdict::Conflict(Conflict {
            rule: Rule::BatchDeadline,
            risk: Risk::Stall,
            parameters: vec![
                CONSUMER_BATCH_SIZE,
                CONSUMER_CONCURRENCY,
                CONSUMER_TIMEOUT,
                DEADLINE_MARGIN_MS,
            ],
            figures: figures(">"),
            consequence: "the tail of every full batch never starts before the deadline margin: those records come back and use up their receives without running".into(),
        })
    };
    vec![margin, batch]
}

/// The period of a `rate(N unit)` schedule expression, in seconds; `None` for anything else
/// (a cron expression has no one period).
pub fn schedule_period_seconds(expression: &str) -> Option<f64> {
    let inner = expression.trim().strip_prefix("rate(")?.strip_suffix(')')?;
    let mut words = inner.split_whitespace();
    let n: f64 = words.next()?.parse().ok()?;
    let unit = match words.next()? {
        "minute" | "minutes" => 60.0,
        "hour" | "hours" => 3600.0,
        "day" | "days" => 86_400.0,
        _ => return None,
    };
    (words.next().is_none() && n > 0.0).then_some(n * unit)
}

/// With `MaxMessagesPerRun=auto`, a run replays at the rate for its time only: a schedule
/// period longer than `RedriverTimeout` drains at rate × timeout ÷ period. A warning, with the
/// figure; nothing is said for a numeric budget.
fn scheduled_drain(s: &Settings) -> Option<Verdict> {
    if s.max_messages_per_run.is_some() {
        return None;
    }
    let rule = Rule::ScheduledDrain;
    let Some(period) = schedule_period_seconds(&s.schedule) else {
        return Some(Verdict::Warning {
            rule,
            figures: format!(
                "RedriverSchedule {}: the check cannot compute its period; with MaxMessagesPerRun auto the DLQ drains at RedriveRatePerSecond {}/s only if a run comes every RedriverTimeout {} s",
                s.schedule,
                figure(s.rate_per_second),
                figure(s.redriver_timeout)
            ),
        });
    };
    if period <= s.redriver_timeout {
        return Some(Verdict::Holds {
            rule,
            figures: format!(
                "RedriverSchedule {} = {} s ≤ RedriverTimeout {} s: MaxMessagesPerRun auto drains at RedriveRatePerSecond {}/s",
                s.schedule,
                figure(period),
                figure(s.redriver_timeout),
                figure(s.rate_per_second)
            ),
        });
    }
    let drain = s.rate_per_second * s.redriver_timeout / period;
    Some(Verdict::Warning {
        rule,
        figures: format!(
            "RedriverSchedule {} = {} s > RedriverTimeout {} s: MaxMessagesPerRun auto drains at RedriveRatePerSecond {} × {} ÷ {} = {}/s, below the configured {}/s (make the timeout equal to the period)",
            s.schedule,
            figure(period),
            figure(s.redriver_timeout),
            figure(s.rate_per_second),
            figure(s.redriver_timeout),
            figure(period),
            figure(drain),
            figure(s.rate_per_second)
        ),
    })
}

/// Stall: the redriver runs one at a time (reserved concurrency 1), so a run longer than the
/// schedule's period has the next scheduled run throttled (EventBridge retries it for hours, the
/// redriver's throttle alarm stays up). A cron schedule has no one period: nothing is said here
/// (the scheduled drain warns).
fn redriver_period(s: &Settings) -> Option<Verdict> {
    let period = schedule_period_seconds(&s.schedule)?;
    let figures = |cmp: &str| {
        format!(
            "RedriverTimeout {} s {cmp} RedriverSchedule {} = {} s",
            figure(s.redriver_timeout),
            s.schedule,
            figure(period)
        )
    };
    let rule = Rule::RedriverPeriod;
    Some(if s.redriver_timeout <= period {
        Verdict::Holds {
            rule,
            figures: figures("≤"),
        }
    } else {
        Verdict::Conflict(Conflict {
            rule,
            risk: Risk::Stall,
            parameters: vec![REDRIVER_TIMEOUT, REDRIVER_SCHEDULE],
            figures: figures(">"),
            consequence: format!(
                "the redriver runs one at a time: a run that outlasts the period has the next scheduled one throttled, EventBridge retries it for hours and the throttle alarm stays up; set RedriverTimeout to at most {} s, or a longer RedriverSchedule",
                figure(period)
            ),
        })
    })
}

/// A queue and the event source mapping that feeds a function from it, as AWS's wiring
/// guidance reads them: the template's under a parameter set ([`Wiring::of_template`]), or a
/// deployed function's (`resq check --function`).
#[derive(Debug, Clone, PartialEq)]
pub struct Wiring {
    /// The function's timeout, seconds.
    pub timeout: f64,
    /// The mapping's batching window, seconds (0 for a FIFO queue: it has none).
    pub window: f64,
    /// The queue's visibility timeout, seconds.
    pub visibility: f64,
    /// The `maxReceiveCount` of the queue's `RedrivePolicy`; `None`: the queue has no DLQ.
    pub max_receive_count: Option<f64>,
    /// The queue's retention, seconds.
    pub retention: f64,
    /// The DLQ's retention, seconds (`None`: no DLQ, or it could not be read).
    pub dlq_retention: Option<f64>,
    /// `ScalingConfig.MaximumConcurrency`, when set.
    pub maximum_concurrency: Option<f64>,
    /// `ProvisionedPollerConfig` (minimum, maximum); `None`: on-demand pollers.
    pub pollers: Option<(f64, f64)>,
    /// `FunctionResponseTypes` holds `ReportBatchItemFailures`.
    pub reports_batch_item_failures: bool,
}

impl Wiring {
    /// The template's queue and consumer under `s` (its visibility is
    /// [`VISIBILITY_PER_TIMEOUT`] timeouts, its DLQ keeps messages 14 days, its mapping
    /// reports batch item failures).
    pub fn of_template(s: &Settings) -> Self {
        Self {
            timeout: s.consumer_timeout,
            window: if s.fifo {
                0.0
            } else {
                s.batching_window_seconds
            },
            visibility: VISIBILITY_PER_TIMEOUT * s.consumer_timeout,
            max_receive_count: Some(s.max_receive_count),
            retention: s.orders_retention_seconds,
            dlq_retention: Some(DLQ_RETENTION_SECONDS),
            maximum_concurrency: s.maximum_concurrency,
            pollers: s.pollers,
            reports_batch_item_failures: true,
        }
    }
}

/// What the wiring rules call each value they compare, and name when it is in conflict: the
/// template's parameters ([`TEMPLATE_NAMES`]) or a deployed function's settings.
#[derive(Debug, Clone, Copy)]
pub struct WiringNames {
    /// The function's timeout.
    pub timeout: &'static str,
    /// The batching window.
    pub window: &'static str,
    /// The queue's visibility timeout; `None`: [`VISIBILITY_PER_TIMEOUT`] × the timeout.
    pub visibility: Option<&'static str>,
    /// The queue's `maxReceiveCount` (and its `RedrivePolicy`).
    pub max_receive_count: &'static str,
    /// The queue's retention.
    pub retention: &'static str,
    /// The DLQ's retention; `None`: fixed (the template's 14 days).
    pub dlq_retention: Option<&'static str>,
    /// `ScalingConfig.MaximumConcurrency`.
    pub maximum_concurrency: &'static str,
    /// `ProvisionedPollerConfig`.
    pub pollers: &'static str,
}

/// The template's parameters, as the wiring rules name them.
pub const TEMPLATE_NAMES: WiringNames = WiringNames {
    timeout: CONSUMER_TIMEOUT,
    window: CONSUMER_BATCHING_WINDOW_SECONDS,
    visibility: None,
    max_receive_count: MAX_RECEIVE_COUNT,
    retention: ORDERS_RETENTION_SECONDS,
    dlq_retention: None,
    maximum_concurrency: CONSUMER_MAXIMUM_CONCURRENCY,
    pollers: CONSUMER_MINIMUM_POLLERS,
};

/// AWS's guidance on a queue and its trigger, one home for `resq stack check` and `resq check
/// --function`: the visibility covers six timeouts and the window, the queue has a DLQ reached
/// after at least 2 receives and keeping messages longer than the queue, provisioned pollers
/// come without `MaximumConcurrency`, and the mapping reports batch item failures (a warning).
pub fn wiring(w: &Wiring, n: &WiringNames) -> Vec<Verdict> {
    let mut out = vec![visibility(w, n)];
    out.extend(dead_letter(w, n));
    out.extend(provisioned(w, n));
    out.push(batch_item_failures(w));
    out
}

/// Double: Lambda retries a throttled batch within six timeouts and its poller holds the
/// records through the batching window, so the queue must hide them that long.
fn visibility(w: &Wiring, n: &WiringNames) -> Verdict {
    let needed = LAMBDA_VISIBILITY_TIMEOUTS * w.timeout + w.window;
    let visibility = match n.visibility {
        Some(name) => format!("{name} {} s", figure(w.visibility)),
        None => format!(
            "the main queue's visibility {} × {} {} s = {} s",
            figure(VISIBILITY_PER_TIMEOUT),
            n.timeout,
            figure(w.timeout),
            figure(w.visibility)
        ),
    };
    let window = if w.window > 0.0 {
        format!(" + {} {} s", n.window, figure(w.window))
    } else {
        String::new()
    };
    let figures = |cmp: &str| {
        format!(
            "{visibility} {cmp} {} × {} {} s{window} = {} s",
            figure(LAMBDA_VISIBILITY_TIMEOUTS),
            n.timeout,
            figure(w.timeout),
            figure(needed)
        )
    };
    if w.visibility >= needed {
        return Verdict::Holds {
            rule: Rule::Visibility,
            figures: figures("≥"),
        };
    }
    let mut fixes = vec![match n.visibility {
        Some(name) => format!("raise {name} to at least {} s", figure(needed)),
        None => format!(
            "raise {} to at least {} s (the visibility is {} times it)",
            n.timeout,
            figure(w.window / (VISIBILITY_PER_TIMEOUT - LAMBDA_VISIBILITY_TIMEOUTS)),
            figure(VISIBILITY_PER_TIMEOUT)
        ),
    }];
    let room = w.visibility - LAMBDA_VISIBILITY_TIMEOUTS * w.timeout;
    if w.window > 0.0 && room >= 0.0 {
        fixes.push(format!("lower {} to at most {} s", n.window, figure(room)));
    }
    let mut parameters: Vec<&'static str> = n.visibility.into_iter().collect();
    parameters.push(n.timeout);
    if w.window > 0.0 {
        parameters.push(n.window);
    }
    Verdict::Conflict(Conflict {
        rule: Rule::Visibility,
        risk: Risk::Double,
        parameters,
        figures: figures("<"),
        consequence: format!(
            "a message becomes visible again while its batch is still gathered or running: it is received twice, and its receives run out until SQS dead-letters it without a reason; {}",
            fixes.join(", or ")
        ),
    })
}

/// Lose: a queue without a DLQ retries a poison message until its retention ends, then SQS
/// deletes it; dead-letter: at `maxReceiveCount` 1 a single throttled or failed receive moves a
/// message to the DLQ; lose: a standard queue's dead letter keeps its original enqueue time,
/// so a DLQ that keeps messages no longer than the queue deletes them early.
fn dead_letter(w: &Wiring, n: &WiringNames) -> Vec<Verdict> {
    let Some(count) = w.max_receive_count else {
        return vec![Verdict::Conflict(Conflict {
            rule: Rule::DeadLetterQueue,
            risk: Risk::Lose,
            parameters: vec![n.max_receive_count],
            figures: "the queue has no RedrivePolicy".into(),
            consequence: "a message that keeps failing is received again and again until the queue's retention ends, then SQS deletes it: give the queue a RedrivePolicy (a deadLetterTargetArn and a maxReceiveCount of 5, say)".into(),
        })];
    };
    let receives = if count >= LEAST_MAX_RECEIVE_COUNT {
        Verdict::Holds {
            rule: Rule::ReceivesPerTrip,
            figures: format!(
                "{} {} ≥ {}",
                n.max_receive_count,
                figure(count),
                figure(LEAST_MAX_RECEIVE_COUNT)
            ),
        }
    } else {
        Verdict::Conflict(Conflict {
            rule: Rule::ReceivesPerTrip,
            risk: Risk::DeadLetter,
            parameters: vec![n.max_receive_count],
            figures: format!(
                "{} {} < {} (AWS: never 1)",
                n.max_receive_count,
                figure(count),
                figure(LEAST_MAX_RECEIVE_COUNT)
            ),
            consequence: format!(
                "a single throttled invocation or failed receive moves a message to the DLQ, without a reason and without a retry; set {} to at least {} (5, say)",
                n.max_receive_count,
                figure(LEAST_MAX_RECEIVE_COUNT)
            ),
        })
    };
    let Some(dlq) = w.dlq_retention else {
        return vec![receives];
    };
    let dlq_name = n.dlq_retention.unwrap_or("the DLQ's retention");
    let figures = |cmp: &str| {
        format!(
            "{dlq_name} {} s {cmp} {} {} s",
            figure(dlq),
            n.retention,
            figure(w.retention)
        )
    };
    let retention = if dlq > w.retention {
        Verdict::Holds {
            rule: Rule::DeadLetterRetention,
            figures: figures(">"),
        }
    } else {
        Verdict::Conflict(Conflict {
            rule: Rule::DeadLetterRetention,
            risk: Risk::Lose,
            parameters: n.dlq_retention.into_iter().chain([n.retention]).collect(),
            figures: figures("≤"),
            consequence: format!(
                "a dead letter keeps its original enqueue time (standard queues), so SQS deletes it from the DLQ as soon as it would have left the queue, before anyone replays it; make {dlq_name} longer than {} (14 days at most)",
                n.retention
            ),
        })
    };
    vec![receives, retention]
}

/// Overrun: Lambda takes no `MaximumConcurrency` with provisioned pollers (the template drops
/// it): a cap set beside them does not hold. Nothing is said of on-demand pollers.
fn provisioned(w: &Wiring, n: &WiringNames) -> Option<Verdict> {
    let (least, most) = w.pollers?;
    let pollers = format!(
        "{} {} to {} pollers",
        n.pollers,
        figure(least),
        figure(most)
    );
    Some(match w.maximum_concurrency {
        None => Verdict::Holds {
            rule: Rule::ProvisionedPollers,
            figures: format!("{pollers}, no {}", n.maximum_concurrency),
        },
        Some(cap) => Verdict::Conflict(Conflict {
            rule: Rule::ProvisionedPollers,
            risk: Risk::Overrun,
            parameters: vec![n.maximum_concurrency, n.pollers],
            figures: format!("{pollers} with {} {}", n.maximum_concurrency, figure(cap)),
            consequence: format!(
                "Lambda takes no MaximumConcurrency in provisioned mode: the cap of {} does not hold, the pollers set the concurrency; leave {} out, or turn provisioned mode off",
                figure(cap),
                n.maximum_concurrency
            ),
        }),
    })
}

/// A warning: without `ReportBatchItemFailures`, the `batchItemFailures` a function returns are
/// ignored (the whole batch is deleted, its failed records with it), and a function that fails
/// its invocation instead has every record of the batch received again.
fn batch_item_failures(w: &Wiring) -> Verdict {
    let rule = Rule::BatchItemFailures;
    if w.reports_batch_item_failures {
        Verdict::Holds {
            rule,
            figures: "FunctionResponseTypes has ReportBatchItemFailures".into(),
        }
    } else {
        Verdict::Warning {
            rule,
            figures: "FunctionResponseTypes lacks ReportBatchItemFailures: Lambda ignores the batchItemFailures a function returns and deletes the whole batch, its failed records with it; a function that fails the invocation instead has every record of the batch received again (those that succeeded too, and one poison record uses up its batch's receives). Add ReportBatchItemFailures and return the failed records' ids".into(),
        }
    }
}

/// A number for a person: digits grouped by thousands, at most two decimals.
pub fn figure(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let cents = (x.abs() * 100.0).round();
    let whole = (cents / 100.0).trunc();
    let fraction = (cents - whole * 100.0) as u64;
    let digits = format!("{whole:.0}");
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if x < 0.0 && cents > 0.0 { "-" } else { "" };
    match fraction {
        0 => format!("{sign}{grouped}"),
        f if f % 10 == 0 => format!("{sign}{grouped}.{}", f / 10),
        f => format!("{sign}{grouped}.{f:02}"),
    }
}

/// What the check found for one parameter set.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The set evaluated.
    pub set: ParameterSet,
    /// Values CloudFormation itself would refuse; when any, the rules were not evaluated.
    pub refusals: Vec<Refusal>,
    /// Each rule's verdict.
    pub verdicts: Vec<Verdict>,
    /// What was assumed.
    pub assumptions: Assumptions,
}

impl Report {
    /// Evaluates `set` against `template`: its parameters' own constraints first (a set
    /// CloudFormation would refuse is not evaluated further), then the rules.
    pub fn new(
        template: &Template,
        set: ParameterSet,
        assumptions: Assumptions,
    ) -> Result<Self, StackError> {
        let refusals = refusals(template, &set);
        let verdicts = if refusals.is_empty() {
            evaluate(&Settings::from_set(&set)?, &assumptions)
        } else {
            Vec::new()
        };
        Ok(Self {
            set,
            refusals,
            verdicts,
            assumptions,
        })
    }

    /// The parameters in conflict or refused, each once, in the order found; empty when the
    /// set may be deployed.
    pub fn parameters_in_conflict(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let named = self.refusals.iter().map(|r| r.parameter.as_str()).chain(
            self.verdicts.iter().flat_map(|v| match v {
                Verdict::Conflict(c) => c.parameters.clone(),
                _ => Vec::new(),
            }),
        );
        for name in named {
            if !out.iter().any(|n| n == name) {
                out.push(name.to_owned());
            }
        }
        out
    }

    /// The error the command ends with when the set is refused.
    pub fn failure(&self) -> Option<CliError> {
        let parameters = self.parameters_in_conflict();
        (!parameters.is_empty()).then_some(CliError::Refused {
            parameters,
            by_cloudformation: !self.refusals.is_empty(),
        })
    }
}

/// The stack name `sam deploy` deploys to: samconfig.toml's `stack_name` (its deploy section,
/// else its global one).
pub fn samconfig_stack_name(text: &str) -> Option<String> {
    let doc: toml::Table = text.parse().ok()?;
    ["deploy", "global"].iter().find_map(|section| {
        doc.get("default")?
            .get(section)?
            .get("parameters")?
            .get("stack_name")?
            .as_str()
            .map(str::to_owned)
    })
}

/// The stack `--deployed` reads: the one `given` (`--stack-name`, else a `--stack` typed on the
/// command line), else samconfig.toml's `stack_name` (`samconfig` reads its text).
pub fn deployed_stack_name(
    given: Option<String>,
    samconfig: impl FnOnce() -> Option<String>,
) -> Result<String, CliError> {
    given
        .or_else(|| samconfig().as_deref().and_then(samconfig_stack_name))
        .ok_or_else(|| {
            CliError::Usage(
                "--deployed needs the stack's name: samconfig.toml has no stack_name; pass --stack-name".into(),
            )
        })
}

/// The deployed stack's parameters (what `sam deploy` keeps for a parameter it is not given);
/// none when the stack does not exist yet (a first deploy).
pub async fn deployed_parameters(
    cloudformation: &aws_sdk_cloudformation::Client,
    stack_name: &str,
) -> Result<Vec<(String, String)>, CliError> {
    use aws_sdk_cloudformation::error::ProvideErrorMetadata;
    let out = match cloudformation
        .describe_stacks()
        .stack_name(stack_name)
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) if e.message().is_some_and(|m| m.contains("does not exist")) => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(CliError::aws(format!("reading the stack {stack_name}"), e)),
    };
    let stack = out.stacks.unwrap_or_default().into_iter().next();
    Ok(stack
        .map(|s| s.parameters.unwrap_or_default())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| Some((p.parameter_key?, p.parameter_value?)))
        .collect())
}

/// Where the check reads its input.
#[derive(Debug, Clone)]
pub struct Input {
    /// The SAM template.
    pub template: PathBuf,
    /// The samconfig.toml to take `parameter_overrides` from; `None`: none.
    pub samconfig: Option<PathBuf>,
    /// `--parameter-overrides`, as given.
    pub overrides: String,
    /// The deployed stack's parameters (`--deployed`; empty for a first deploy).
    pub deployed: Vec<(String, String)>,
    /// What the check assumes.
    pub assumptions: Assumptions,
}

fn read(path: &Path, what: &str) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| {
        CliError::Usage(format!(
            "cannot read the {what} {}: {e}{}",
            path.display(),
            if e.kind() == std::io::ErrorKind::NotFound && what == "template" {
                " (run resq stack check from the repository's root, or pass --template PATH)"
            } else {
                ""
            }
        ))
    })
}

/// Reads the template and the samconfig and evaluates the set they and the overrides make (the
/// I/O edge of the check). What cannot be read is a usage error naming the file or the value.
pub fn load(input: &Input) -> Result<Report, CliError> {
    let usage = |e: StackError| CliError::Usage(e.to_string());
    let template = Template::parse(&read(&input.template, "template")?)
        .map_err(|e| CliError::Usage(format!("the template {}: {e}", input.template.display())))?;
    let samconfig = match &input.samconfig {
        Some(path) => samconfig_overrides(&read(path, "samconfig")?)
            .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?,
        None => Vec::new(),
    };
    let command_line = parse_overrides(&input.overrides, Source::CommandLine).map_err(usage)?;
    // a parameter the deployed stack has and this template no longer has is not deployed again
    let deployed = input
        .deployed
        .iter()
        .filter(|(name, _)| template.parameter(name).is_some())
        .cloned()
        .collect();
    let set = resolve(
        &template,
        &[
            (Source::Deployed, deployed),
            (Source::Samconfig, samconfig),
            (Source::CommandLine, command_line),
        ],
    )
    .map_err(usage)?;
    Report::new(&template, set, input.assumptions).map_err(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's own template.
    fn template() -> Template {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");
        Template::parse(&std::fs::read_to_string(path).expect("infra/template.yaml"))
            .expect("the template parses")
    }

    /// The template's defaults with `overrides`, unchecked against the parameters' own
    /// constraints (so that the rules can be tried past the template's ranges).
    fn set(overrides: &[(&str, &str)]) -> ParameterSet {
        let pairs = overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(&template(), &[(Source::CommandLine, pairs)]).expect("known parameters")
    }

    fn settings(overrides: &[(&str, &str)]) -> Settings {
        Settings::from_set(&set(overrides)).expect("settings")
    }

    /// The conflicts of the defaults with `overrides`, at the default `--record-ms`.
    fn conflicts_with(overrides: &[(&str, &str)]) -> Vec<Conflict> {
        conflicts(&settings(overrides), &Assumptions::default())
    }

    fn rules_in_conflict(overrides: &[(&str, &str)]) -> Vec<Rule> {
        conflicts_with(overrides).iter().map(|c| c.rule).collect()
    }

    fn only(overrides: &[(&str, &str)], rule: Rule) -> Conflict {
        let found = conflicts_with(overrides);
        assert_eq!(
            found.iter().map(|c| c.rule).collect::<Vec<_>>(),
            vec![rule],
            "{overrides:?}: {found:#?}"
        );
        found.into_iter().next().unwrap()
    }

    #[test]
    fn the_templates_defaults_pass_every_rule() {
        // GIVEN the template as it is, nothing overridden
        let t = template();
        let set = set(&[]);
        // THEN CloudFormation would accept every default, and no rule is broken
        assert_eq!(refusals(&t, &set), vec![]);
        let report = Report::new(&t, set, Assumptions::default()).unwrap();
        assert!(report.failure().is_none(), "{report:#?}");
        let rules: Vec<Rule> = report
            .verdicts
            .iter()
            .map(|v| match v {
                Verdict::Holds { rule, .. } => *rule,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            rules,
            [
                Rule::RetryHorizon,
                Rule::RecordLifetime,
                Rule::ArchiveSweep,
                Rule::ReplayBudget,
                Rule::ReplayRate,
                Rule::ReplayRun,
                Rule::DeadlineMargin,
                Rule::BatchDeadline,
                Rule::ScheduledDrain,
                Rule::RedriverPeriod,
                Rule::Visibility,
                Rule::ReceivesPerTrip,
                Rule::DeadLetterRetention,
                Rule::BatchItemFailures
            ]
        );
        // AWS's visibility rule, which the template's defaults used to miss by a second
        let visibility = report
            .verdicts
            .iter()
            .find_map(|v| match v {
                Verdict::Holds {
                    rule: Rule::Visibility,
                    figures,
                } => Some(figures.as_str()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            visibility,
            "the main queue's visibility 7 × ConsumerTimeout 30 s = 210 s ≥ 6 × ConsumerTimeout 30 s + ConsumerBatchingWindowSeconds 1 s = 181 s"
        );
        let Verdict::Holds { figures, .. } = &report.verdicts[0] else {
            unreachable!()
        };
        assert_eq!(
            figures,
            "MaxReceiveCount 5 × 301 s (BackoffMaxSeconds 300 s + ConsumerBatchingWindowSeconds 1 s) = 1,505 s ≤ OrdersRetentionSeconds 345,600 s"
        );
    }

    #[test]
    fn the_template_reads_its_parameters_through_short_tags() {
        let t = template();
        let timeout = t.parameter(CONSUMER_TIMEOUT).unwrap();
        assert_eq!(timeout.kind, "String");
        assert_eq!(timeout.default.as_deref(), Some("30"));
        assert_eq!(
            timeout
                .allowed_values
                .as_deref()
                .unwrap()
                .first()
                .map(String::as_str),
            Some("5")
        );
        let budget = t.parameter(MAX_MESSAGES_PER_RUN).unwrap();
        assert_eq!(budget.default.as_deref(), Some("auto"));
        assert!(budget.allowed_pattern.is_some());
        let count = t.parameter(MAX_RECEIVE_COUNT).unwrap();
        assert_eq!(
            (count.default.as_deref(), count.min_value, count.max_value),
            (Some("5"), Some(2.0), Some(1000.0))
        );
        assert_eq!(
            t.parameter("CreateOrdersTopic").unwrap().default.as_deref(),
            Some("false")
        );
        assert_eq!(
            t.parameter("OrdersProducerArns")
                .unwrap()
                .default
                .as_deref(),
            Some("")
        );
    }

    #[test]
    fn the_visibility_is_six_consumer_timeouts_as_the_templates_mapping_says() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");
        let doc: Yaml = serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mapping = doc["Mappings"]["ConsumerTimeouts"].as_mapping().unwrap();
        let allowed = template()
            .parameter(CONSUMER_TIMEOUT)
            .unwrap()
            .allowed_values
            .clone()
            .unwrap();
        assert_eq!(mapping.len(), allowed.len());
        for (key, row) in mapping {
            let timeout = number(&row["Timeout"]).unwrap();
            assert_eq!(scalar(key).unwrap(), figure(timeout));
            assert_eq!(
                number(&row["Visibility"]).unwrap(),
                VISIBILITY_PER_TIMEOUT * timeout
            );
        }
    }

    // ---- retry horizon (lose)

    #[test]
    fn the_retry_horizon_may_reach_the_retention_but_not_pass_it() {
        // 10 × (359 + 1) = 3,600 against a retention of 3,600: held
        let edge = [
            (ORDERS_RETENTION_SECONDS, "3600"),
            (MAX_RECEIVE_COUNT, "10"),
            (BACKOFF_MAX_SECONDS, "359"),
        ];
        assert_eq!(rules_in_conflict(&edge), vec![]);
        // 10 × (360 + 1) = 3,610: refused, naming the backoff that sets the interval
        let c = only(
            &[
                (ORDERS_RETENTION_SECONDS, "3600"),
                (MAX_RECEIVE_COUNT, "10"),
                (BACKOFF_MAX_SECONDS, "360"),
            ],
            Rule::RetryHorizon,
        );
        assert_eq!(c.risk, Risk::Lose);
        assert_eq!(
            c.parameters,
            [
                MAX_RECEIVE_COUNT,
                BACKOFF_MAX_SECONDS,
                CONSUMER_BATCHING_WINDOW_SECONDS,
                ORDERS_RETENTION_SECONDS
            ]
        );
        assert!(
            c.figures
                .contains("= 3,610 s > OrdersRetentionSeconds 3,600 s"),
            "{}",
            c.figures
        );
        // one receive more is past the edge too
        assert_eq!(
            rules_in_conflict(&[
                (ORDERS_RETENTION_SECONDS, "3600"),
                (MAX_RECEIVE_COUNT, "11"),
                (BACKOFF_MAX_SECONDS, "359"),
            ]),
            vec![Rule::RetryHorizon]
        );
    }

    #[test]
    fn a_visibility_longer_than_the_backoff_sets_the_interval_and_is_named() {
        // ConsumerTimeout 600: a visibility of 4,200 s; no batching window
        let base = [
            (CONSUMER_TIMEOUT, "600"),
            (CONSUMER_BATCHING_WINDOW_SECONDS, "0"),
            (MAX_RECEIVE_COUNT, "2"),
        ];
        let with = |retention: &'static str| {
            let mut o = base.to_vec();
            o.push((ORDERS_RETENTION_SECONDS, retention));
            o
        };
        assert_eq!(rules_in_conflict(&with("8400")), vec![]);
        let c = only(&with("4199"), Rule::RetryHorizon);
        // one interval alone is too long: MaxReceiveCount is not in conflict
        assert_eq!(c.parameters, [CONSUMER_TIMEOUT, ORDERS_RETENTION_SECONDS]);
        assert!(
            c.consequence
                .starts_with("one delivery interval alone outlasts")
        );
    }

    #[test]
    fn the_backoff_counts_at_most_sqs_twelve_hours() {
        // a ceiling past 12 h is cut to 12 h: 2 × (43,200 + 1) against 86,402
        let at = |backoff: &'static str, retention: &'static str| {
            rules_in_conflict(&[
                (MAX_RECEIVE_COUNT, "2"),
                (BACKOFF_MAX_SECONDS, backoff),
                (ORDERS_RETENTION_SECONDS, retention),
            ])
        };
        assert_eq!(at("100000", "86402"), vec![]);
        assert_eq!(at("100000", "86401"), vec![Rule::RetryHorizon]);
    }

    #[test]
    fn a_fifo_queue_has_no_batching_window_in_its_interval() {
        let with = |queue_type: &'static str| {
            rules_in_conflict(&[
                (QUEUE_TYPE, queue_type),
                (CONSUMER_BATCHING_WINDOW_SECONDS, "300"),
                (ORDERS_RETENTION_SECONDS, "3600"),
                (MAX_RECEIVE_COUNT, "10"),
                (BACKOFF_MAX_SECONDS, "360"),
            ])
        };
        assert_eq!(with("fifo"), vec![]);
        // (a window of 300 s is also past the visibility's room: 7 × 30 s < 6 × 30 s + 300 s)
        assert_eq!(with("standard"), vec![Rule::RetryHorizon, Rule::Visibility]);
    }

    #[test]
    fn the_issues_retry_examples_are_refused() {
        // 20 receives, a 300 s backoff ceiling and a 1 h retention
        let c = only(
            &[
                (MAX_RECEIVE_COUNT, "20"),
                (BACKOFF_MAX_SECONDS, "300"),
                (ORDERS_RETENTION_SECONDS, "3600"),
            ],
            Rule::RetryHorizon,
        );
        assert!(
            c.figures
                .contains("= 6,020 s > OrdersRetentionSeconds 3,600 s"),
            "{}",
            c.figures
        );
        // a 900 s consumer timeout hides a message 6,300 s, longer than the 1 h retention
        let c = only(
            &[
                (CONSUMER_TIMEOUT, "900"),
                (ORDERS_RETENTION_SECONDS, "3600"),
            ],
            Rule::RetryHorizon,
        );
        assert_eq!(
            c.parameters,
            [
                CONSUMER_TIMEOUT,
                CONSUMER_BATCHING_WINDOW_SECONDS,
                ORDERS_RETENTION_SECONDS
            ]
        );
        assert!(
            c.figures.contains("7 × ConsumerTimeout 900 s = 6,300 s"),
            "{}",
            c.figures
        );
    }

    // ---- AWS's wiring guidance (the template's, and any deployed pipeline's)

    #[test]
    fn the_issues_wiring_mistakes_are_refused_naming_the_parameters() {
        // GIVEN a 5 s consumer that gathers records for a minute
        let c = only(
            &[
                (CONSUMER_TIMEOUT, "5"),
                (CONSUMER_BATCHING_WINDOW_SECONDS, "60"),
            ],
            Rule::Visibility,
        );
        // THEN the visibility rule names both, with each side's number and what to change
        assert_eq!(c.risk, Risk::Double);
        assert_eq!(
            c.parameters,
            [CONSUMER_TIMEOUT, CONSUMER_BATCHING_WINDOW_SECONDS]
        );
        assert_eq!(
            c.figures,
            "the main queue's visibility 7 × ConsumerTimeout 5 s = 35 s < 6 × ConsumerTimeout 5 s + ConsumerBatchingWindowSeconds 60 s = 90 s"
        );
        assert!(
            c.consequence.ends_with(
                "raise ConsumerTimeout to at least 60 s (the visibility is 7 times it), or lower ConsumerBatchingWindowSeconds to at most 5 s"
            ),
            "{}",
            c.consequence
        );
        // a window as long as the timeout fits, a second more does not
        let window = |w: &'static str| {
            rules_in_conflict(&[
                (CONSUMER_TIMEOUT, "30"),
                (CONSUMER_BATCHING_WINDOW_SECONDS, w),
            ])
        };
        assert_eq!(window("30"), vec![]);
        assert_eq!(window("31"), vec![Rule::Visibility]);
        // a FIFO queue has no window
        assert_eq!(
            rules_in_conflict(&[
                (QUEUE_TYPE, "fifo"),
                (CONSUMER_TIMEOUT, "5"),
                (CONSUMER_BATCHING_WINDOW_SECONDS, "60")
            ]),
            vec![]
        );

        // GIVEN a single receive before the DLQ (past the template's own minimum)
        let c = only(&[(MAX_RECEIVE_COUNT, "1")], Rule::ReceivesPerTrip);
        assert_eq!(
            (c.risk, c.parameters.as_slice(), c.figures.as_str()),
            (
                Risk::DeadLetter,
                [MAX_RECEIVE_COUNT].as_slice(),
                "MaxReceiveCount 1 < 2 (AWS: never 1)"
            )
        );

        // GIVEN a 10-minute redriver on the 5-minute schedule
        let c = only(&[(REDRIVER_TIMEOUT, "600")], Rule::RedriverPeriod);
        assert_eq!(c.parameters, [REDRIVER_TIMEOUT, REDRIVER_SCHEDULE]);
        assert_eq!(
            c.figures,
            "RedriverTimeout 600 s > RedriverSchedule rate(5 minutes) = 300 s"
        );
        assert!(c.consequence.contains("at most 300 s"), "{}", c.consequence);
        // the same timeout on a 10-minute schedule fits (a cron schedule: nothing to compare)
        let period = |schedule: &'static str| {
            rules_in_conflict(&[(REDRIVER_TIMEOUT, "600"), (REDRIVER_SCHEDULE, schedule)])
        };
        assert_eq!(period("rate(10 minutes)"), vec![]);
        assert_eq!(period("cron(0/5 * * * ? *)"), vec![]);
    }

    #[test]
    fn provisioned_pollers_refuse_a_maximum_concurrency_given_beside_them() {
        let provisioned = [
            (CONSUMER_MINIMUM_POLLERS, "2"),
            (CONSUMER_MAXIMUM_POLLERS, "20"),
        ];
        // GIVEN provisioned mode alone THEN it holds (the template leaves its default cap out)
        let held: Vec<Verdict> = evaluate(&settings(&provisioned), &Assumptions::default())
            .into_iter()
            .filter(|v| {
                matches!(
                    v,
                    Verdict::Holds {
                        rule: Rule::ProvisionedPollers,
                        ..
                    }
                )
            })
            .collect();
        assert_eq!(held.len(), 1, "{held:?}");
        // GIVEN a cap given beside them THEN refused, naming both
        let mut both = provisioned.to_vec();
        both.push((CONSUMER_MAXIMUM_CONCURRENCY, "10"));
        let c = only(&both, Rule::ProvisionedPollers);
        assert_eq!(c.risk, Risk::Overrun);
        assert_eq!(
            c.parameters,
            [CONSUMER_MAXIMUM_CONCURRENCY, CONSUMER_MINIMUM_POLLERS]
        );
        // AND on-demand pollers take a cap (nothing said of them)
        assert_eq!(
            rules_in_conflict(&[(CONSUMER_MAXIMUM_CONCURRENCY, "50")]),
            vec![]
        );
    }

    #[test]
    fn a_deployed_pipeline_is_held_to_the_same_rules_under_its_own_names() {
        const DEPLOYED: WiringNames = WiringNames {
            timeout: "Timeout",
            window: "MaximumBatchingWindowInSeconds",
            visibility: Some("VisibilityTimeout"),
            max_receive_count: "maxReceiveCount",
            retention: "MessageRetentionPeriod",
            dlq_retention: Some("the DLQ's MessageRetentionPeriod"),
            maximum_concurrency: "MaximumConcurrency",
            pollers: "ProvisionedPollerConfig",
        };
        let sound = Wiring {
            timeout: 5.0,
            window: 60.0,
            visibility: 90.0,
            max_receive_count: Some(5.0),
            retention: 345_600.0,
            dlq_retention: Some(1_209_600.0),
            maximum_concurrency: Some(10.0),
            pollers: None,
            reports_batch_item_failures: true,
        };
        let found = |w: &Wiring| -> Vec<(Rule, &'static str)> {
            wiring(w, &DEPLOYED)
                .into_iter()
                .map(|v| match v {
                    Verdict::Holds { rule, .. } => (rule, "ok"),
                    Verdict::Warning { rule, .. } => (rule, "warning"),
                    Verdict::Conflict(c) => (c.rule, "conflict"),
                })
                .collect()
        };
        assert!(found(&sound).iter().all(|(_, v)| *v == "ok"));
        // a visibility a second short: its own setting is named, with the number to raise it to
        let short = Wiring {
            visibility: 89.0,
            ..sound.clone()
        };
        let Verdict::Conflict(c) = wiring(&short, &DEPLOYED).remove(0) else {
            panic!("refused")
        };
        assert_eq!(
            c.parameters,
            [
                "VisibilityTimeout",
                "Timeout",
                "MaximumBatchingWindowInSeconds"
            ]
        );
        assert!(
            c.consequence
                .ends_with("raise VisibilityTimeout to at least 90 s, or lower MaximumBatchingWindowInSeconds to at most 59 s"),
            "{}",
            c.consequence
        );
        // no DLQ at all, a DLQ that keeps messages no longer than its source, no partial
        // batch responses, provisioned pollers with a cap
        let no_dlq = Wiring {
            max_receive_count: None,
            dlq_retention: None,
            ..sound.clone()
        };
        assert!(found(&no_dlq).contains(&(Rule::DeadLetterQueue, "conflict")));
        let short_dlq = Wiring {
            dlq_retention: Some(345_600.0),
            ..sound.clone()
        };
        assert!(found(&short_dlq).contains(&(Rule::DeadLetterRetention, "conflict")));
        let whole_batches = Wiring {
            reports_batch_item_failures: false,
            ..sound.clone()
        };
        assert!(found(&whole_batches).contains(&(Rule::BatchItemFailures, "warning")));
        let capped = Wiring {
            pollers: Some((2.0, 20.0)),
            ..sound
        };
        assert!(found(&capped).contains(&(Rule::ProvisionedPollers, "conflict")));
    }

    // ---- order-record lifetime (double)

    #[test]
    fn the_order_records_must_outlive_a_messages_longest_life() {
        // defaults: TTL 86,400 + retention 345,600 = 432,000 s = 5 days
        assert_eq!(
            rules_in_conflict(&[(ORDER_RECORD_RETENTION_DAYS, "5")]),
            vec![]
        );
        let c = only(&[(ORDER_RECORD_RETENTION_DAYS, "4")], Rule::RecordLifetime);
        assert_eq!(c.risk, Risk::Double);
        assert_eq!(
            c.parameters,
            [
                ORDER_RECORD_RETENTION_DAYS,
                ARCHIVE_AFTER_SECONDS,
                ORDERS_RETENTION_SECONDS
            ]
        );
        assert!(c.figures.contains("345,600 s < ArchiveAfterSeconds 86,400 s + OrdersRetentionSeconds 345,600 s = 432,000 s"), "{}", c.figures);
        // either side of the longest life moves the edge
        assert_eq!(
            rules_in_conflict(&[
                (ORDER_RECORD_RETENTION_DAYS, "5"),
                (ARCHIVE_AFTER_SECONDS, "86401"),
            ]),
            vec![Rule::RecordLifetime]
        );
        assert_eq!(
            rules_in_conflict(&[
                (ORDER_RECORD_RETENTION_DAYS, "5"),
                (ORDERS_RETENTION_SECONDS, "345601"),
            ]),
            vec![Rule::RecordLifetime]
        );
        // the issue's example: two days against a longest life of up to 25 days
        only(&[(ORDER_RECORD_RETENTION_DAYS, "2")], Rule::RecordLifetime);
        let at_maxima = [
            (ARCHIVE_AFTER_SECONDS, "1123200"),
            (ORDERS_RETENTION_SECONDS, "1036800"),
        ];
        let c = only(
            &[
                at_maxima[0],
                at_maxima[1],
                (ORDER_RECORD_RETENTION_DAYS, "24"),
            ],
            Rule::RecordLifetime,
        );
        assert!(c.figures.ends_with("= 2,160,000 s"), "{}", c.figures);
        assert_eq!(
            rules_in_conflict(&[
                at_maxima[0],
                at_maxima[1],
                (ORDER_RECORD_RETENTION_DAYS, "25"),
            ]),
            vec![]
        );
    }

    // ---- breaker (stall)

    #[test]
    fn a_numeric_budget_must_hold_the_breakers_probe() {
        // threshold 10: the probe is 22
        assert_eq!(rules_in_conflict(&[(MAX_MESSAGES_PER_RUN, "22")]), vec![]);
        let c = only(&[(MAX_MESSAGES_PER_RUN, "21")], Rule::ReplayBudget);
        assert_eq!(c.risk, Risk::Stall);
        assert_eq!(
            c.parameters,
            [MAX_MESSAGES_PER_RUN, REPLAYS_FAILING_THRESHOLD]
        );
        // the template's smallest budget against its largest threshold, and one past it
        assert_eq!(
            rules_in_conflict(&[
                (MAX_MESSAGES_PER_RUN, "102"),
                (REPLAYS_FAILING_THRESHOLD, "50")
            ]),
            vec![]
        );
        only(
            &[
                (MAX_MESSAGES_PER_RUN, "102"),
                (REPLAYS_FAILING_THRESHOLD, "51"),
            ],
            Rule::ReplayBudget,
        );
        // auto is what the rate allows: the rate's rules judge it
        assert_eq!(
            rules_in_conflict(&[
                (MAX_MESSAGES_PER_RUN, "auto"),
                (REPLAYS_FAILING_THRESHOLD, "50")
            ]),
            vec![]
        );
    }

    #[test]
    fn a_period_at_the_rate_must_hold_more_than_the_threshold() {
        assert_eq!(
            rules_in_conflict(&[
                (REDRIVE_RATE_PER_SECOND, "1"),
                (REPLAYS_FAILING_THRESHOLD, "59")
            ]),
            vec![]
        );
        let c = only(
            &[
                (REDRIVE_RATE_PER_SECOND, "1"),
                (REPLAYS_FAILING_THRESHOLD, "60"),
            ],
            Rule::ReplayRate,
        );
        assert_eq!(
            c.parameters,
            [REDRIVE_RATE_PER_SECOND, REPLAYS_FAILING_THRESHOLD]
        );
        assert!(
            c.figures
                .contains("= 60 replays a period ≤ ReplaysFailingThreshold 60"),
            "{}",
            c.figures
        );
        // a slower rate than the template allows
        assert_eq!(
            rules_in_conflict(&[(REDRIVE_RATE_PER_SECOND, "0.05")]),
            vec![Rule::ReplayRate, Rule::ReplayRun]
        );
    }

    #[test]
    fn a_runs_replay_time_at_the_rate_must_hold_the_probe() {
        // rate 1, threshold 50 (probe 102): 180 s less 78 s of margin is 102 replays
        let with = |margin: &'static str| {
            rules_in_conflict(&[
                (REDRIVE_RATE_PER_SECOND, "1"),
                (REPLAYS_FAILING_THRESHOLD, "50"),
                (REDRIVER_TIMEOUT, "180"),
                (DEADLINE_MARGIN_MS, margin),
                (CONSUMER_TIMEOUT, "120"),
            ])
        };
        assert_eq!(with("78000"), vec![]);
        assert_eq!(with("78001"), vec![Rule::ReplayRun]);
        let c = conflicts_with(&[
            (REDRIVE_RATE_PER_SECOND, "1"),
            (REPLAYS_FAILING_THRESHOLD, "50"),
            (REDRIVER_TIMEOUT, "102"),
        ]);
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(
            c[0].parameters,
            [
                REDRIVER_TIMEOUT,
                DEADLINE_MARGIN_MS,
                REDRIVE_RATE_PER_SECOND,
                REPLAYS_FAILING_THRESHOLD
            ]
        );
        assert!(c[0].figures.contains("= 101 replays a run < the breaker's probe 2 × (ReplaysFailingThreshold 50 + 1) = 102"), "{}", c[0].figures);
    }

    #[test]
    fn the_templates_ranges_keep_the_breaker_able_to_trip_as_its_comments_say() {
        // GIVEN the corners of the accepted ranges that make tripping hardest
        let t = template();
        let p = |name: &str| t.parameter(name).unwrap().clone();
        let worst = [
            (
                REPLAYS_FAILING_THRESHOLD,
                p(REPLAYS_FAILING_THRESHOLD).max_value.unwrap().to_string(),
            ),
            (
                REDRIVE_RATE_PER_SECOND,
                p(REDRIVE_RATE_PER_SECOND).min_value.unwrap().to_string(),
            ),
            (
                REDRIVER_TIMEOUT,
                p(REDRIVER_TIMEOUT).min_value.unwrap().to_string(),
            ),
            (
                DEADLINE_MARGIN_MS,
                p(DEADLINE_MARGIN_MS).max_value.unwrap().to_string(),
            ),
            // a consumer timeout longer than that margin
            (CONSUMER_TIMEOUT, "900".to_owned()),
        ];
        let strs: Vec<(&str, &str)> = worst.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // WHEN the budget is auto, or the smallest number the pattern accepts
        for budget in ["auto", "102"] {
            let mut o = strs.clone();
            o.push((MAX_MESSAGES_PER_RUN, budget));
            let set = set(&o);
            // THEN CloudFormation accepts the set and no breaker rule fails
            assert_eq!(refusals(&t, &set), vec![], "{o:?}");
            let found: Vec<Rule> =
                conflicts(&Settings::from_set(&set).unwrap(), &Assumptions::default())
                    .iter()
                    .map(|c| c.rule)
                    .collect();
            assert_eq!(found, vec![], "{o:?}");
        }
        // and the pattern refuses the budget just below
        let below = set(&[(MAX_MESSAGES_PER_RUN, "101")]);
        assert_eq!(refusals(&t, &below).len(), 1);
    }

    // ---- archive sweep (lose)

    /// The verdict of the archive-sweep rule on the defaults with `overrides`.
    fn sweep(overrides: &[(&str, &str)]) -> Verdict {
        archive_sweep(&settings(overrides))
    }

    #[test]
    fn the_dlqs_retention_is_the_templates() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");
        let doc: Yaml = serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let dlq = &doc["Resources"]["DeadLetterQueue"]["Properties"];
        assert_eq!(
            number(&dlq["MessageRetentionPeriod"]),
            Some(DLQ_RETENTION_SECONDS)
        );
    }

    #[test]
    fn a_ttl_an_archive_sweep_a_period_and_a_run_must_end_before_the_dlqs_retention() {
        // GIVEN the template's longest TTL, sweep interval and timeout: 1,123,200 + 43,200 +
        // 900 = 1,167,300 s, which leaves 42,300 s (705 minutes) of the 14 days for the period
        let longest = [
            (ARCHIVE_AFTER_SECONDS, "1123200"),
            (ARCHIVE_SWEEP_SECONDS, "43200"),
            (REDRIVER_TIMEOUT, "900"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut o = longest.to_vec();
            o.extend_from_slice(extra);
            o
        };
        // THEN a period of 704 minutes passes (60 s to spare) …
        let edge = with(&[(REDRIVER_SCHEDULE, "rate(704 minutes)")]);
        assert_eq!(rules_in_conflict(&edge), vec![]);
        let Verdict::Holds { figures, .. } = sweep(&edge) else {
            panic!("holds");
        };
        assert_eq!(
            figures,
            "ArchiveAfterSeconds 1,123,200 s + ArchiveSweepSeconds 43,200 s + RedriverSchedule rate(704 minutes) = 42,240 s + RedriverTimeout 900 s = 1,209,540 s < the DLQ's retention 1,209,600 s (14 days)"
        );
        // … and 705 minutes reach the retention: refused, naming all four
        let c = only(
            &with(&[(REDRIVER_SCHEDULE, "rate(705 minutes)")]),
            Rule::ArchiveSweep,
        );
        assert_eq!(c.risk, Risk::Lose);
        assert_eq!(
            c.parameters,
            [
                ARCHIVE_SWEEP_SECONDS,
                ARCHIVE_AFTER_SECONDS,
                REDRIVER_SCHEDULE,
                REDRIVER_TIMEOUT
            ]
        );
        assert!(
            c.figures
                .ends_with("= 1,209,600 s ≥ the DLQ's retention 1,209,600 s (14 days)"),
            "{}",
            c.figures
        );
        // AND each of the other three terms moves the edge as much
        for (name, value) in [
            (ARCHIVE_SWEEP_SECONDS, "43260"),
            (ARCHIVE_AFTER_SECONDS, "1123260"),
            (REDRIVER_TIMEOUT, "960"),
        ] {
            let mut o = edge.clone();
            o.retain(|(n, _)| *n != name);
            o.push((name, value));
            assert_eq!(rules_in_conflict(&o), vec![Rule::ArchiveSweep], "{name}");
        }
    }

    #[test]
    fn the_templates_longest_ttl_sweep_and_run_fit_the_default_schedule() {
        // GIVEN each term at the largest value the template accepts, the schedule at its default
        let t = template();
        let max = |name: &str| t.parameter(name).unwrap().max_value.unwrap().to_string();
        let o = [
            (ARCHIVE_AFTER_SECONDS, max(ARCHIVE_AFTER_SECONDS)),
            (ARCHIVE_SWEEP_SECONDS, max(ARCHIVE_SWEEP_SECONDS)),
            (REDRIVER_TIMEOUT, max(REDRIVER_TIMEOUT)),
        ];
        let o: Vec<(&str, &str)> = o.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // THEN CloudFormation accepts them and they are archived in time
        assert_eq!(refusals(&t, &set(&o)), vec![]);
        assert!(
            matches!(sweep(&o), Verdict::Holds { .. }),
            "{:?}",
            sweep(&o)
        );
    }

    #[test]
    fn a_cron_schedule_warns_how_often_a_run_must_come_unless_the_rest_is_already_too_long() {
        let cron = (REDRIVER_SCHEDULE, "cron(0/5 * * * ? *)");
        // the defaults leave 1,209,600 − (86,400 + 3,600 + 300) s for the period
        let Verdict::Warning { figures, .. } = sweep(&[cron]) else {
            panic!("a warning");
        };
        assert!(
            figures.contains("a run must come at least every 1,119,300 s"),
            "{figures}"
        );
        assert_eq!(rules_in_conflict(&[cron]), vec![]);
        // without any period, past the retention already: refused
        let too_long = [
            cron,
            (ARCHIVE_AFTER_SECONDS, "1200000"),
            (ARCHIVE_SWEEP_SECONDS, "9600"),
        ];
        assert_eq!(rules_in_conflict(&too_long), vec![Rule::ArchiveSweep]);
    }

    // ---- batch against the deadline (stall)

    #[test]
    fn the_deadline_margin_must_be_shorter_than_the_timeout() {
        let one_ms = Assumptions { record_ms: 1 };
        let with = |margin: &'static str| {
            conflicts(
                &settings(&[(CONSUMER_TIMEOUT, "5"), (DEADLINE_MARGIN_MS, margin)]),
                &one_ms,
            )
            .iter()
            .map(|c| c.rule)
            .collect::<Vec<_>>()
        };
        // 4,999 ms of margin leaves 1 ms: one round of 1 ms fits
        assert_eq!(with("4999"), vec![]);
        assert_eq!(with("5000"), vec![Rule::DeadlineMargin]);
        let c = conflicts(
            &settings(&[(CONSUMER_TIMEOUT, "5"), (DEADLINE_MARGIN_MS, "5000")]),
            &one_ms,
        );
        assert_eq!(c[0].parameters, [DEADLINE_MARGIN_MS, CONSUMER_TIMEOUT]);
        assert_eq!(c[0].risk, Risk::Stall);
    }

    #[test]
    fn a_full_batch_must_start_before_the_deadline() {
        // one record at a time, 100 ms each, 29,000 ms to start them in
        let with = |batch: &'static str| {
            rules_in_conflict(&[(CONSUMER_BATCH_SIZE, batch), (CONSUMER_CONCURRENCY, "1")])
        };
        assert_eq!(with("290"), vec![]);
        assert_eq!(with("291"), vec![Rule::BatchDeadline]);
        let c = only(
            &[(CONSUMER_BATCH_SIZE, "291"), (CONSUMER_CONCURRENCY, "1")],
            Rule::BatchDeadline,
        );
        assert_eq!(
            c.parameters,
            [
                CONSUMER_BATCH_SIZE,
                CONSUMER_CONCURRENCY,
                CONSUMER_TIMEOUT,
                DEADLINE_MARGIN_MS
            ]
        );
        assert!(c.figures.contains("= 291 rounds × 100 ms a record (assumed: --record-ms) = 29,100 ms > ConsumerTimeout 30,000 ms − DeadlineMarginMs 1,000 ms = 29,000 ms"), "{}", c.figures);
        // the assumed per-record time moves the edge
        let s = settings(&[(CONSUMER_BATCH_SIZE, "290"), (CONSUMER_CONCURRENCY, "1")]);
        assert_eq!(conflicts(&s, &Assumptions { record_ms: 101 }).len(), 1);
        // records in flight together make rounds
        assert_eq!(
            rules_in_conflict(&[(CONSUMER_BATCH_SIZE, "2900"), (CONSUMER_CONCURRENCY, "10")]),
            vec![]
        );
        assert_eq!(
            rules_in_conflict(&[(CONSUMER_BATCH_SIZE, "2901"), (CONSUMER_CONCURRENCY, "10")]),
            vec![Rule::BatchDeadline]
        );
    }

    #[test]
    fn auto_concurrency_is_the_batch_up_to_64() {
        // 10,000 records 64 at a time: 157 rounds of 100 ms
        let with = |timeout: &'static str| {
            rules_in_conflict(&[
                (CONSUMER_BATCH_SIZE, "10000"),
                (CONSUMER_CONCURRENCY, "auto"),
                (CONSUMER_TIMEOUT, timeout),
                (DEADLINE_MARGIN_MS, "1000"),
            ])
        };
        assert_eq!(with("30"), vec![]);
        assert_eq!(with("15"), vec![Rule::BatchDeadline]);
        assert_eq!(
            settings(&[(CONSUMER_CONCURRENCY, "auto")]).concurrency,
            Concurrency::Auto
        );
    }

    // ---- scheduled drain (a warning)

    fn drain(overrides: &[(&str, &str)]) -> Option<Verdict> {
        scheduled_drain(&settings(overrides))
    }

    #[test]
    fn auto_with_a_period_longer_than_the_timeout_is_a_warning_with_the_drain_rate() {
        assert!(matches!(drain(&[]), Some(Verdict::Holds { .. })));
        let Some(Verdict::Warning { figures, .. }) = drain(&[(REDRIVER_TIMEOUT, "180")]) else {
            panic!("a warning");
        };
        assert!(
            figures.contains("= 6/s, below the configured 10/s"),
            "{figures}"
        );
        // a warning is no conflict
        assert_eq!(rules_in_conflict(&[(REDRIVER_TIMEOUT, "180")]), vec![]);
        assert!(matches!(
            drain(&[
                (REDRIVER_SCHEDULE, "rate(3 minutes)"),
                (REDRIVER_TIMEOUT, "180")
            ]),
            Some(Verdict::Holds { .. })
        ));
        let Some(Verdict::Warning { figures, .. }) =
            drain(&[(REDRIVER_SCHEDULE, "cron(0/5 * * * ? *)")])
        else {
            panic!("a warning");
        };
        assert!(figures.contains("cannot compute its period"), "{figures}");
        // a numeric budget: nothing to say
        assert_eq!(
            drain(&[(MAX_MESSAGES_PER_RUN, "500"), (REDRIVER_TIMEOUT, "180")]),
            None
        );
    }

    #[test]
    fn schedule_periods() {
        assert_eq!(schedule_period_seconds("rate(5 minutes)"), Some(300.0));
        assert_eq!(schedule_period_seconds("rate(1 minute)"), Some(60.0));
        assert_eq!(schedule_period_seconds("rate(2 hours)"), Some(7200.0));
        assert_eq!(schedule_period_seconds("rate(1 day)"), Some(86_400.0));
        assert_eq!(schedule_period_seconds("rate(0 minutes)"), None);
        assert_eq!(schedule_period_seconds("rate(5 fortnights)"), None);
        assert_eq!(schedule_period_seconds("cron(0 * * * ? *)"), None);
    }

    // ---- parameters: resolution and CloudFormation's own constraints

    #[test]
    fn overrides_parse_as_sam_reads_them() {
        let cl = Source::CommandLine;
        let pairs = |s: &str| parse_overrides(s, cl).unwrap();
        let kv = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(pairs(""), vec![]);
        assert_eq!(pairs("   "), vec![]);
        assert_eq!(
            pairs("MaxReceiveCount=20  OrdersRetentionSeconds=3600"),
            vec![
                kv("MaxReceiveCount", "20"),
                kv("OrdersRetentionSeconds", "3600")
            ]
        );
        assert_eq!(
            pairs(r#"RedriverSchedule="rate(5 minutes)" AlertEmail='a b' X=a\ b Y="say \"hi\"""#),
            vec![
                kv("RedriverSchedule", "rate(5 minutes)"),
                kv("AlertEmail", "a b"),
                kv("X", "a b"),
                kv("Y", "say \"hi\"")
            ]
        );
        assert_eq!(
            pairs(
                "ParameterKey=MaxReceiveCount,ParameterValue=7 ParameterKey=RedriverSchedule,ParameterValue=\"rate(1 hour)\""
            ),
            vec![
                kv("MaxReceiveCount", "7"),
                kv("RedriverSchedule", "rate(1 hour)")
            ]
        );
        assert_eq!(
            pairs("OrdersProducerArns=arn:a,arn:b Empty=\"\""),
            vec![kv("OrdersProducerArns", "arn:a,arn:b"), kv("Empty", "")]
        );
        for bad in [
            "MaxReceiveCount",
            "=5",
            "A=\"open",
            "A=1 junk",
            "A=\"x\"y",
            "A=",
            "A= B=1",
        ] {
            let err = parse_overrides(bad, cl).unwrap_err();
            assert!(
                err.to_string().starts_with("--parameter-overrides: "),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn samconfig_overrides_come_from_the_deploy_section() {
        let string = r#"
version = 0.1
[default.deploy.parameters]
stack_name = "resq"
parameter_overrides = "MaxReceiveCount=\"7\" RedriverSchedule=\"rate(10 minutes)\""
"#;
        assert_eq!(
            samconfig_overrides(string).unwrap(),
            vec![
                ("MaxReceiveCount".into(), "7".into()),
                ("RedriverSchedule".into(), "rate(10 minutes)".into())
            ]
        );
        let list = r#"
[default.global.parameters]
parameter_overrides = ["MaxReceiveCount=8"]
"#;
        assert_eq!(
            samconfig_overrides(list).unwrap(),
            vec![("MaxReceiveCount".into(), "8".into())]
        );
        let table = r#"
[default.deploy.parameters.parameter_overrides]
MaxReceiveCount = 9
OrdersProducerArns = ["arn:a", "arn:b"]
CreateOrdersTopic = true
"#;
        let mut found = samconfig_overrides(table).unwrap();
        found.sort();
        assert_eq!(
            found,
            vec![
                ("CreateOrdersTopic".into(), "True".into()),
                ("MaxReceiveCount".into(), "9".into()),
                ("OrdersProducerArns".into(), "arn:a,arn:b".into())
            ]
        );
        // the repository's own samconfig.toml sets none
        let own = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../infra/samconfig.toml"
        ))
        .unwrap();
        assert_eq!(samconfig_overrides(&own).unwrap(), vec![]);
        assert!(samconfig_overrides("not = [toml").is_err());
    }

    #[test]
    fn later_overrides_win_and_unknown_parameters_are_named() {
        let t = template();
        let kv = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        let set = resolve(
            &t,
            &[
                (Source::Samconfig, kv(MAX_RECEIVE_COUNT, "7")),
                (Source::CommandLine, kv(MAX_RECEIVE_COUNT, "8")),
                (Source::Samconfig, vec![]),
            ],
        )
        .unwrap();
        assert_eq!(set.get(MAX_RECEIVE_COUNT), Some("8"));
        assert_eq!(
            set.given().collect::<Vec<_>>(),
            vec![(MAX_RECEIVE_COUNT, "8", Source::CommandLine)]
        );
        let err = resolve(&t, &[(Source::CommandLine, kv("maxreceivecount", "7"))]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--parameter-overrides sets maxreceivecount, which is not a parameter of the template (did you mean MaxReceiveCount?)"
        );
        let err = resolve(&t, &[(Source::Samconfig, kv("Nope", "1"))]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "samconfig.toml's parameter_overrides sets Nope, which is not a parameter of the template"
        );
    }

    #[test]
    fn the_checked_set_is_handed_to_sam_as_given() {
        let t = template();
        let set = resolve(
            &t,
            &[
                (
                    Source::Samconfig,
                    vec![("RedriverSchedule".into(), "rate(5 minutes)".into())],
                ),
                (
                    Source::CommandLine,
                    vec![
                        ("AlertEmail".into(), "a\"b".into()),
                        ("LogLevel".into(), r"^\d$".into()),
                    ],
                ),
            ],
        )
        .unwrap();
        let text = set.sam_overrides();
        assert_eq!(
            text,
            r#"RedriverSchedule="rate(5 minutes)" LogLevel="^\d$" AlertEmail="a\"b""#
        );
        // read back as SAM reads it: the same values
        assert_eq!(
            parse_overrides(&text, Source::CommandLine).unwrap(),
            vec![
                ("RedriverSchedule".into(), "rate(5 minutes)".into()),
                ("LogLevel".into(), r"^\d$".into()),
                ("AlertEmail".into(), "a\"b".into())
            ]
        );
    }

    #[test]
    fn names_the_functions_refuse_at_start_up_are_refused_before_deploy() {
        let t = template();
        let refused = |overrides: &[(&str, &str)]| -> Vec<String> {
            refusals(&t, &set(overrides))
                .into_iter()
                .map(|r| r.parameter)
                .collect()
        };
        // GIVEN names the functions' own check refuses (a key resq writes itself, an AWS/
        // namespace, a name a trailing space would set apart from the alarms')
        for (parameter, value) in [
            ("CorrelationKey", "correlation_id"),
            ("CorrelationKey", "message_id"),
            ("CorrelationKey", "key"),
            ("MetricsNamespace", "AWS/Orders"),
            ("MetricsNamespace", "resq "),
            ("ServiceName", "orders "),
        ] {
            // THEN the set is refused, naming the parameter once
            assert_eq!(refused(&[(parameter, value)]), vec![parameter], "{value:?}");
        }
        // AND names they take pass
        for (parameter, value) in [
            ("CorrelationKey", "payment_id"),
            ("CorrelationField", "paymentId"),
            ("MetricsNamespace", "Acme/Orders"),
            ("ServiceName", "payments"),
        ] {
            assert_eq!(
                refused(&[(parameter, value)]),
                Vec::<String>::new(),
                "{value:?}"
            );
        }
    }

    #[test]
    fn values_cloudformation_refuses_are_named_before_any_rule() {
        let t = template();
        let refused = |overrides: &[(&str, &str)]| -> Vec<(String, String)> {
            refusals(&t, &set(overrides))
                .into_iter()
                .map(|r| (r.parameter, r.why))
                .collect()
        };
        // AWS: never 1 (the template's ConstraintDescription says why)
        assert_eq!(
            refused(&[(MAX_RECEIVE_COUNT, "1")]),
            vec![(
                MAX_RECEIVE_COUNT.to_owned(),
                "2 to 1000 (AWS advises against 1: a single throttled or failed receive would move a message to the DLQ)".to_owned()
            )]
        );
        assert_eq!(
            refused(&[(CONSUMER_MAXIMUM_POLLERS, "1")]),
            vec![(
                CONSUMER_MAXIMUM_POLLERS.to_owned(),
                "it must be at least 2".to_owned()
            )]
        );
        assert_eq!(
            refused(&[(MAX_RECEIVE_COUNT, "many")]),
            vec![(
                MAX_RECEIVE_COUNT.to_owned(),
                "it is not a number".to_owned()
            )]
        );
        assert_eq!(
            refused(&[(CONSUMER_TIMEOUT, "45")]),
            vec![(
                CONSUMER_TIMEOUT.to_owned(),
                "it must be one of 5, 10, 15, 30, 60, 120, 300, 600, 900".to_owned()
            )]
        );
        assert_eq!(
            refused(&[(MAX_MESSAGES_PER_RUN, "50")]),
            vec![(
                MAX_MESSAGES_PER_RUN.to_owned(),
                "auto, or a whole number from 102 to 1000000".to_owned()
            )]
        );
        assert_eq!(refused(&[(MAX_MESSAGES_PER_RUN, "1000000")]), vec![]);
        assert_eq!(refused(&[(REDRIVER_SCHEDULE, "every 5 minutes")]).len(), 1);
        assert_eq!(refused(&[("LogRetentionDays", "30")]), vec![]);
        assert_eq!(refused(&[("LogRetentionDays", "31")]).len(), 1);
        // ConsumerConcurrency: auto or 1 to 1000
        assert_eq!(refused(&[(CONSUMER_CONCURRENCY, "auto")]), vec![]);
        assert_eq!(refused(&[(CONSUMER_CONCURRENCY, "1000")]), vec![]);
        for bad in ["0", "1001", "Auto", "ten"] {
            assert_eq!(refused(&[(CONSUMER_CONCURRENCY, bad)]).len(), 1, "{bad}");
        }
        // a refused set is not evaluated
        let report = Report::new(
            &t,
            set(&[(MAX_MESSAGES_PER_RUN, "50")]),
            Assumptions::default(),
        )
        .unwrap();
        assert!(report.verdicts.is_empty());
        assert_eq!(report.parameters_in_conflict(), vec![MAX_MESSAGES_PER_RUN]);
        assert!(matches!(
            report.failure(),
            Some(CliError::Refused {
                by_cloudformation: true,
                ..
            })
        ));
    }

    #[test]
    fn a_template_without_the_rules_parameters_is_unusable() {
        let t =
            Template::parse("Parameters:\n  MaxReceiveCount:\n    Type: Number\n    Default: 5\n")
                .unwrap();
        let set = resolve(&t, &[]).unwrap();
        let err = Report::new(&t, set, Assumptions::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("the template has no value for QueueType"),
            "{err}"
        );
        assert!(Template::parse("Resources: {}\n").is_err());
        assert!(Template::parse("Parameters: [\n").is_err());
        // short tags anywhere are read as tagged values
        let t = Template::parse(
            "Parameters:\n  A:\n    Type: String\n    Default: x\nResources:\n  Q:\n    Properties:\n      Name: !Ref A\n      Both: !If [C, !Ref A, !Ref AWS::NoValue]\n",
        )
        .unwrap();
        assert_eq!(t.parameters.len(), 1);
    }

    #[test]
    fn figures_group_thousands() {
        assert_eq!(figure(0.0), "0");
        assert_eq!(figure(999.0), "999");
        assert_eq!(figure(1000.0), "1,000");
        assert_eq!(figure(345_600.0), "345,600");
        assert_eq!(figure(2_160_000.0), "2,160,000");
        assert_eq!(figure(1.5), "1.5");
        assert_eq!(figure(9.966), "9.97");
        assert_eq!(figure(1234.05), "1,234.05");
        assert_eq!(figure(-1.0), "-1");
    }

    #[test]
    fn the_deployed_stacks_values_are_what_sam_keeps_and_are_checked_under_the_new_ones() {
        // GIVEN a stack deployed with 20 receives and an hour's backoff, and a deploy that
        // now gives only a shorter retention
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let set = resolve(
            &template(),
            &[
                (
                    Source::Deployed,
                    pairs(&[(MAX_RECEIVE_COUNT, "20"), (BACKOFF_MAX_SECONDS, "3600")]),
                ),
                (
                    Source::CommandLine,
                    pairs(&[(ORDERS_RETENTION_SECONDS, "60000")]),
                ),
            ],
        )
        .unwrap();
        // THEN the check sees the kept values, and refuses the set sam would deploy
        let found: Vec<Rule> =
            conflicts(&Settings::from_set(&set).unwrap(), &Assumptions::default())
                .iter()
                .map(|c| c.rule)
                .collect();
        assert_eq!(found, vec![Rule::RetryHorizon]);
        // AND sam is handed only what was given: it keeps the rest itself
        assert_eq!(set.sam_overrides(), "OrdersRetentionSeconds=\"60000\"");
        // without the deployed values the same overrides pass: the gap --deployed closes
        let alone = resolve(
            &template(),
            &[(
                Source::CommandLine,
                pairs(&[(ORDERS_RETENTION_SECONDS, "60000")]),
            )],
        )
        .unwrap();
        assert!(
            conflicts(
                &Settings::from_set(&alone).unwrap(),
                &Assumptions::default()
            )
            .is_empty()
        );
    }

    #[test]
    fn the_stack_name_comes_from_samconfig() {
        let text = "version = 0.1\n[default.global.parameters]\nstack_name = \"resq\"\n";
        assert_eq!(samconfig_stack_name(text).as_deref(), Some("resq"));
        let both = format!("{text}[default.deploy.parameters]\nstack_name = \"prod\"\n");
        assert_eq!(samconfig_stack_name(&both).as_deref(), Some("prod"));
        assert_eq!(samconfig_stack_name("version = 0.1"), None);
        let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/samconfig.toml");
        assert_eq!(
            samconfig_stack_name(&std::fs::read_to_string(repo).unwrap()).as_deref(),
            Some("resq")
        );
    }

    #[test]
    fn deployed_reads_the_stack_named_else_samconfigs() {
        let samconfig = || Some("[default.deploy.parameters]\nstack_name = \"prod\"\n".to_owned());
        // a name given wins, and samconfig.toml is not read
        let unread = || -> Option<String> { panic!("samconfig.toml read") };
        assert_eq!(
            deployed_stack_name(Some("resq-b".into()), unread).unwrap(),
            "resq-b"
        );
        assert_eq!(deployed_stack_name(None, samconfig).unwrap(), "prod");
        // neither: a usage error saying what to pass
        let e = deployed_stack_name(None, || None).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("pass --stack-name"), "{e}");
    }
}
