//! Logging set up the way Lambda asks for it (`AWS_LAMBDA_LOG_FORMAT`, `AWS_LAMBDA_LOG_LEVEL`),
//! with Powertools Logger's keys and switches where they overlap (docs/design.md,
//! "Observability"): every JSON line carries `service`, `function_name`,
//! `function_memory_size` and, inside an invocation, `cold_start`, `function_arn`,
//! `function_request_id` and `xray_trace_id`; `POWERTOOLS_SERVICE_NAME`,
//! `POWERTOOLS_METRICS_NAMESPACE` and `POWERTOOLS_LOG_LEVEL` are honoured. `RUST_LOG`, when
//! set, refines the filter for local work.

use std::fmt;
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields, MakeWriter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{ConfigError, Vars};
use crate::correlation::CorrelationKey;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// One JSON object per line (the default: CloudWatch Logs Insights reads the fields).
    Json,
    /// Human-readable lines.
    Text,
}

/// Lambda's application log levels, least to most severe (`AWS_LAMBDA_LOG_LEVEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Most detail.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation (Lambda's default).
    Info,
    /// Potential problems.
    Warn,
    /// Failures.
    Error,
    /// Failures that stop the function.
    Fatal,
}

impl LogLevel {
    /// Every level, least severe first.
    pub(crate) const ALL: [LogLevel; 6] = [
        LogLevel::Trace,
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Warn,
        LogLevel::Error,
        LogLevel::Fatal,
    ];

    /// Reads a level name, in any case (`warn`, `WARN`); `WARNING` is not one of Lambda's.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(name.trim()))
    }

    /// The name Lambda uses (`INFO`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "TRACE",
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warn => "WARN",
            LogLevel::Error => "ERROR",
            LogLevel::Fatal => "FATAL",
        }
    }

    /// A level as Powertools' `POWERTOOLS_LOG_LEVEL` names it: Lambda's names, and Python's
    /// `WARNING` and `CRITICAL` (`SILENT` is [`LogSettings`]'s to read: no level at all).
    pub(crate) fn parse_powertools(name: &str) -> Option<Self> {
        match name.trim().to_ascii_uppercase().as_str() {
            "WARNING" => Some(LogLevel::Warn),
            "CRITICAL" => Some(LogLevel::Fatal),
            other => Self::parse(other),
        }
    }

    /// The [`Targets`] directive that keeps this level and above (`FATAL` is tracing's
    /// `error`: it has no higher level).
    pub(crate) fn directive(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error | LogLevel::Fatal => "error",
        }
    }

    /// The configured application level: `AWS_LAMBDA_LOG_LEVEL`, INFO when unset or unknown
    /// (Lambda's default). Lambda's filter reads this one only: `POWERTOOLS_LOG_LEVEL` sets
    /// what resq writes, not what Lambda keeps.
    pub fn configured() -> Self {
        std::env::var("AWS_LAMBDA_LOG_LEVEL")
            .ok()
            .and_then(|v| Self::parse(&v))
            .unwrap_or(LogLevel::Info)
    }

    /// The level metric lines are written at: INFO, or the configured level when that is
    /// higher. Lambda keeps a JSON line only at or above the configured level (and counts a
    /// line without one as INFO), so a metric line at this level reaches CloudWatch whatever
    /// the setting, and resq's metrics, alarms and breaker with it.
    pub(crate) fn for_metrics(configured: LogLevel) -> Self {
        configured.max(LogLevel::Info)
    }
}

/// The resolved logging settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogSettings {
    /// Line format.
    pub format: LogFormat,
    /// Filter directives, as [`Targets`] reads them: a level (`info`), or `target=level` pairs
    /// separated by commas (`info,resq=debug,aws_smithy_runtime=warn`).
    pub filter: String,
}

impl LogSettings {
    /// Resolves the settings from the variables' values: `AWS_LAMBDA_LOG_FORMAT`,
    /// `AWS_LAMBDA_LOG_LEVEL`, then `POWERTOOLS_LOG_LEVEL` (used only without Lambda's, as
    /// Powertools ranks them; `SILENT` writes no log line, metric lines still go), then
    /// `RUST_LOG` over both.
    pub(crate) fn from_values(
        format: Option<&str>,
        level: Option<&str>,
        powertools_level: Option<&str>,
        rust_log: Option<&str>,
    ) -> Self {
        let format = match format.map(str::trim) {
            Some(f) if f.eq_ignore_ascii_case("text") => LogFormat::Text,
            _ => LogFormat::Json,
        };
        let silent = powertools_level.is_some_and(|l| l.trim().eq_ignore_ascii_case("silent"));
        let level = match (level.and_then(LogLevel::parse), powertools_level) {
            (Some(lambda), _) => lambda.directive(),
            (None, _) if silent => "off",
            (None, p) => p
                .and_then(LogLevel::parse_powertools)
                .unwrap_or(LogLevel::Info)
                .directive(),
        };
        let filter = match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
            Some(directives) => directives.to_owned(),
            None => level.to_owned(),
        };
        Self { format, filter }
    }

    /// Resolves the settings from the process environment.
    pub(crate) fn from_env() -> Self {
        let get = |k: &str| std::env::var(k).ok();
        Self::from_values(
            get("AWS_LAMBDA_LOG_FORMAT").as_deref(),
            get("AWS_LAMBDA_LOG_LEVEL").as_deref(),
            get("POWERTOOLS_LOG_LEVEL").as_deref(),
            get("RUST_LOG").as_deref(),
        )
    }
}

/// How a message type names itself in logs and metrics, as declared
/// (`MessageHandler::NAMES` in resq-consumer); the environment overrides each
/// ([`Telemetry::from_vars`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names {
    /// `service` on every line and the `service` dimension (`POWERTOOLS_SERVICE_NAME`).
    pub service: &'static str,
    /// The metrics' namespace (`POWERTOOLS_METRICS_NAMESPACE`).
    pub namespace: &'static str,
    /// The type's own log key for its business id, beside `correlation_id`
    /// (`RESQ_CORRELATION_KEY`).
    pub correlation_key: &'static str,
    /// The body's top-level field holding the business id (`RESQ_CORRELATION_FIELD`).
    pub correlation_field: &'static str,
}

impl Names {
    /// Orders, resq's own message type, and the defaults of both functions: service
    /// `orders`, namespace `resq`, the business id `orderId` logged as `order_id`.
    pub const ORDERS: Names = Names {
        service: "orders",
        namespace: "resq",
        correlation_key: "order_id",
        correlation_field: "orderId",
    };

    /// The correlation key as declared.
    pub fn correlation(&self) -> CorrelationKey {
        CorrelationKey::new(self.correlation_key, self.correlation_field)
    }
}

/// How this process names its lines and metrics, resolved once: the declared [`Names`] as
/// the environment overrides them, and the function Lambda runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Telemetry {
    /// `service`.
    pub service: String,
    /// The metrics' namespace.
    pub namespace: String,
    /// The business id's log key and body field.
    pub correlation: CorrelationKey,
    /// `AWS_LAMBDA_FUNCTION_NAME` (outside Lambda, the executable's name).
    pub function_name: String,
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, MB, when set.
    pub function_memory_size: Option<u32>,
    /// `"service":…,"function_name":…,"function_memory_size":…`: the keys every line carries,
    /// formatted once.
    process_keys: String,
}

impl Telemetry {
    /// `names` for `function_name`, without the environment (tests, tools). `Err` names what
    /// is invalid.
    pub fn of(
        names: Names,
        function_name: &str,
        function_memory_size: Option<u32>,
    ) -> Result<Self, ConfigError> {
        Self::from_vars(
            names,
            &Vars(|k: &str| match k {
                "AWS_LAMBDA_FUNCTION_NAME" => Some(function_name.to_owned()),
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" => function_memory_size.map(|m| m.to_string()),
                _ => None,
            }),
        )
    }

    /// `names` as the variables override them: `POWERTOOLS_SERVICE_NAME` (1–255 printable
    /// ASCII characters), `POWERTOOLS_METRICS_NAMESPACE` (CloudWatch's rules: 1–255 of
    /// `0-9A-Za-z.-_/#:` and space, not `AWS/…`), `RESQ_CORRELATION_KEY` /
    /// `RESQ_CORRELATION_FIELD` ([`CorrelationKey::from_vars`]); the function from
    /// `AWS_LAMBDA_FUNCTION_NAME` and `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`.
    pub fn from_vars(
        names: Names,
        vars: &Vars<impl Fn(&str) -> Option<String>>,
    ) -> Result<Self, ConfigError> {
        let service = vars
            .get("POWERTOOLS_SERVICE_NAME")
            .unwrap_or_else(|| names.service.to_owned());
        if !valid_service(&service) {
            return Err(ConfigError::Invalid {
                var: "POWERTOOLS_SERVICE_NAME",
                value: service,
                expected: "a service name of 1 to 255 printable ASCII characters, no space at either end (the `service` key and dimension, matched byte for byte by the stack's alarms)".into(),
            });
        }
        let namespace = vars
            .get("POWERTOOLS_METRICS_NAMESPACE")
            .unwrap_or_else(|| names.namespace.to_owned());
        if !valid_namespace(&namespace) {
            return Err(ConfigError::Invalid {
                var: "POWERTOOLS_METRICS_NAMESPACE",
                value: namespace,
                expected: "a CloudWatch namespace: 1 to 255 of 0-9 A-Z a-z . - _ / # : and space, no space at either end, not starting with AWS/".into(),
            });
        }
        let correlation = CorrelationKey::from_vars(names.correlation(), vars)?;
        let function_name = vars
            .get("AWS_LAMBDA_FUNCTION_NAME")
            .map(|n| n.trim().to_owned())
            .unwrap_or_else(executable_name);
        let function_memory_size = vars
            .get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
            .and_then(|m| m.trim().parse().ok());
        let mut process_keys = format!(
            "\"service\":{},\"function_name\":{}",
            json_string(&service),
            json_string(&function_name)
        );
        if let Some(mb) = function_memory_size {
            process_keys.push_str(&format!(",\"function_memory_size\":{mb}"));
        }
        Ok(Self {
            service,
            namespace,
            correlation,
            function_name,
            function_memory_size,
            process_keys,
        })
    }

    /// [`Telemetry::from_vars`] over the process environment.
    pub(crate) fn from_env(names: Names) -> Result<Self, ConfigError> {
        Self::from_vars(names, &crate::config::process_env())
    }

    /// The environment's names, or `names` as declared when a variable is invalid (the
    /// function refused it at start-up already: [`init`]).
    pub fn from_env_or_declared(names: Names) -> Self {
        Self::from_env(names).unwrap_or_else(|_| {
            let function =
                std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| executable_name());
            Self::of(names, &function, None).unwrap_or_else(|_| Self::fallback(names, &function))
        })
    }

    /// `names` taken as they are, unchecked: the last resort when even the declaration is
    /// refused (the function stopped at start-up; tools go on).
    fn fallback(names: Names, function_name: &str) -> Self {
        Self {
            service: names.service.to_owned(),
            namespace: names.namespace.to_owned(),
            correlation: names.correlation(),
            function_name: function_name.to_owned(),
            function_memory_size: None,
            process_keys: format!(
                "\"service\":{},\"function_name\":{}",
                json_string(names.service),
                json_string(function_name)
            ),
        }
    }
}

/// Taken as given, never trimmed: the stack's alarms read the metrics by the template's value
/// byte for byte, so a value that would differ once trimmed is refused instead.
fn valid_service(s: &str) -> bool {
    (1..=255).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        && s.trim() == s
}

/// As [`valid_service`]: CloudWatch's characters, never trimmed, never `AWS/…`.
fn valid_namespace(s: &str) -> bool {
    (1..=255).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_/#: ".contains(&b))
        && s.trim() == s
        && !s.starts_with("AWS/")
}

/// The executable's file name: the function's name outside Lambda (`consumer`, `redriver`).
fn executable_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "resq".to_owned())
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

static INSTALLED: OnceLock<Telemetry> = OnceLock::new();

/// This process's telemetry: what [`init`] installed, or (tools, tests) resq's defaults as the
/// environment overrides them.
pub fn current() -> &'static Telemetry {
    INSTALLED.get_or_init(|| Telemetry::from_env_or_declared(Names::ORDERS))
}

/// A function's logging, first thing at start-up: resolves `names` with the environment
/// ([`Telemetry::from_vars`], an invalid variable is the error), makes it [`current`], and
/// installs the global subscriber (later calls install nothing and keep the first). A
/// `RUST_LOG` that does not parse as [`Targets`] directives is set aside, with a warning,
/// for the level.
pub fn init(names: Names) -> Result<&'static Telemetry, ConfigError> {
    let resolved = Telemetry::from_env(names)?;
    let telemetry = INSTALLED.get_or_init(|| resolved);
    let settings = LogSettings::from_env();
    let (filter, refused) = match settings.filter.parse::<Targets>() {
        Ok(filter) => (filter, None),
        Err(e) => {
            let get = |k: &str| std::env::var(k).ok();
            let level = LogSettings::from_values(
                None,
                get("AWS_LAMBDA_LOG_LEVEL").as_deref(),
                get("POWERTOOLS_LOG_LEVEL").as_deref(),
                None,
            );
            let filter = level
                .filter
                .parse::<Targets>()
                .unwrap_or_else(|_| Targets::new().with_default(LevelFilter::INFO));
            (filter, Some(e))
        }
    };
    // the invocation's span carries the keys of every line in it: always on
    let filter = filter.with_target(INVOCATION_TARGET, LevelFilter::ERROR);
    let _ = match settings.format {
        LogFormat::Json => tracing_subscriber::registry()
            .with(json_layer(telemetry, std::io::stdout).with_filter(filter))
            .try_init(),
        LogFormat::Text => tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_target(false)
                    .without_time()
                    .with_filter(filter),
            )
            .try_init(),
    };
    if let Some(e) = refused {
        tracing::warn!(rust_log = %settings.filter, error = %e, "RUST_LOG is not a list of target=level directives; AWS_LAMBDA_LOG_LEVEL (or POWERTOOLS_LOG_LEVEL) applies");
    }
    Ok(telemetry)
}

/// The target of the invocation's span (`resq::lambda::invocation`), which [`FlatJson`] writes as Powertools' keys.
pub(crate) const INVOCATION_TARGET: &str = "resq::invocation";

/// The trace id of Lambda's trace header (`Root=1-5759e988-bd862e3fe1be46a994272793;
/// Parent=…;Sampled=1`): `1-5759e988-bd862e3fe1be46a994272793`, as Powertools logs it; a
/// header without `Root=` is the id itself.
pub(crate) fn trace_root(header: &str) -> Option<&str> {
    let root = header
        .split(';')
        .map(str::trim)
        .find_map(|part| part.strip_prefix("Root="))
        .unwrap_or_else(|| header.split(';').next().unwrap_or_default().trim());
    (!root.is_empty() && !root.contains('=')).then_some(root)
}

/// The JSON log layer of a function with `telemetry`, writing to `writer`: one object per line
/// with `timestamp` (RFC 3339: Lambda honours a line's `level` only next to a valid one, and
/// files it as INFO otherwise, so a WARN setting would drop every warning), `level`, the
/// process's keys (`service`, `function_name`, `function_memory_size`), inside an
/// the invocation's span (`resq::lambda::invocation`) its keys, then the event's fields and the fields of the spans it is in, all
/// at the top level; a `correlation_id` is written again under the message type's own key
/// (`order_id`). So `message_id`, `correlation_id` and `order_id`, which the consumer puts on
/// a record's span and the redriver on each line, are the same keys in both functions' logs,
/// and a Logs Insights query (a Powertools one too) filters on them directly.
pub fn json_layer<S, W>(telemetry: &Telemetry, writer: W) -> impl tracing_subscriber::Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .fmt_fields(JsonFields::new())
        .event_format(FlatJson {
            process_keys: telemetry.process_keys.clone(),
            correlation_key: telemetry.correlation.log_key().to_owned(),
        })
        .with_writer(writer)
}

/// [`json_layer`]'s line format: the standard keys, then span fields (outermost first) and
/// event fields in one flat object; an event's own field wins over a span's of the same name.
/// The Lambda runtime's own span (`requestId`, `xrayTraceId`) is left out: its keys are
/// written as Powertools names them.
#[derive(Debug, Clone, Default)]
pub(crate) struct FlatJson {
    /// The process's keys, formatted once (no braces).
    process_keys: String,
    /// The message type's own key for `correlation_id`.
    correlation_key: String,
}

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        write!(
            writer,
            "{{\"timestamp\":\"{now}\",\"level\":\"{}\"",
            event.metadata().level().as_str()
        )?;
        if !self.process_keys.is_empty() {
            write!(writer, ",{}", self.process_keys)?;
        }
        let mut line = serde_json::Map::new();
        span_fields(ctx, event, &mut writer, &mut line)?;
        event.record(&mut FieldsInto(&mut line));
        let message = line.remove("message");
        for key in crate::correlation::RESERVED_KEYS {
            if key != crate::correlation::CORRELATION_ID {
                line.remove(key);
            }
        }
        if let Some(id) = line.get(crate::correlation::CORRELATION_ID).cloned() {
            line.insert(self.correlation_key.clone(), id);
        }
        if let Some(message) = message {
            let text = serde_json::to_string(&message).map_err(|_| fmt::Error)?;
            write!(writer, ",\"message\":{text}")?;
        }
        if !line.is_empty() {
            let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
            write!(writer, ",{}", &text[1..text.len() - 1])?;
        }
        writeln!(writer, "}}")
    }
}

/// The fields of the spans `event` is in, outermost first: the invocation's (formatted once,
/// when it began) written as they are, the others gathered into `line`. The Lambda runtime's
/// own span is left out.
fn span_fields<S, N>(
    ctx: &FmtContext<'_, S, N>,
    event: &Event<'_>,
    writer: &mut Writer<'_>,
    line: &mut serde_json::Map<String, serde_json::Value>,
) -> fmt::Result
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    let span = event
        .parent()
        .and_then(|id| ctx.span(id))
        .or_else(|| ctx.lookup_current());
    let Some(span) = span else {
        return Ok(());
    };
    for s in span.scope().from_root() {
        let target = s.metadata().target();
        if target.starts_with("lambda_runtime") {
            continue;
        }
        let extensions = s.extensions();
        let Some(fields) = extensions.get::<FormattedFields<N>>() else {
            continue;
        };
        if target == INVOCATION_TARGET {
            let inner = fields.trim().trim_start_matches('{').trim_end_matches('}');
            if !inner.is_empty() {
                write!(writer, ",{inner}")?;
            }
        } else if let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(fields) {
            line.extend(fields);
        }
    }
    Ok(())
}

/// Puts an event's fields into a JSON object: numbers and booleans as themselves, the rest
/// as text.
struct FieldsInto<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl Visit for FieldsInto<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_id_is_the_root_of_lambdas_header() {
        assert_eq!(
            trace_root(
                "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"
            ),
            Some("1-5759e988-bd862e3fe1be46a994272793")
        );
        assert_eq!(
            trace_root("Parent=5;Root=1-2-3"),
            Some("1-2-3"),
            "wherever it is"
        );
        assert_eq!(trace_root("1-2-3"), Some("1-2-3"));
        assert_eq!(trace_root(""), None);
        assert_eq!(trace_root("Parent=5;Sampled=1"), None);
    }

    fn vars(pairs: &[(&str, &str)]) -> Vars<impl Fn(&str) -> Option<String>> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Vars(move |k: &str| map.get(k).cloned())
    }

    #[test]
    fn the_environment_names_the_service_the_namespace_and_the_correlation_key() {
        fn names(t: &Telemetry) -> (&str, &str, &str, &str) {
            (
                t.service.as_str(),
                t.namespace.as_str(),
                t.correlation.log_key(),
                t.correlation.body_field(),
            )
        }
        // declared
        let t = Telemetry::from_vars(Names::ORDERS, &vars(&[("AWS_LAMBDA_FUNCTION_NAME", "f")]))
            .unwrap();
        assert_eq!(names(&t), ("orders", "resq", "order_id", "orderId"));
        assert_eq!(
            (t.function_name.as_str(), t.function_memory_size),
            ("f", None)
        );
        // overridden, as Powertools and resq name the variables
        let t = Telemetry::from_vars(
            Names::ORDERS,
            &vars(&[
                ("POWERTOOLS_SERVICE_NAME", "checkout"),
                ("POWERTOOLS_METRICS_NAMESPACE", "Acme/Checkout"),
                ("RESQ_CORRELATION_KEY", "cart_id"),
                ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"),
            ]),
        )
        .unwrap();
        assert_eq!(
            names(&t),
            ("checkout", "Acme/Checkout", "cart_id", "cartId")
        );
        assert_eq!(t.function_memory_size, Some(1024));
        // refused, naming the variable
        for (var, value) in [
            ("POWERTOOLS_METRICS_NAMESPACE", "AWS/SQS"),
            ("POWERTOOLS_METRICS_NAMESPACE", "a;b"),
            ("POWERTOOLS_SERVICE_NAME", "caf\u{e9}"),
            ("POWERTOOLS_SERVICE_NAME", "orders "),
            ("POWERTOOLS_METRICS_NAMESPACE", " resq"),
            ("RESQ_CORRELATION_KEY", "orderId"),
            ("RESQ_CORRELATION_KEY", "service"),
            ("RESQ_CORRELATION_KEY", "correlation_id"),
        ] {
            match Telemetry::from_vars(Names::ORDERS, &vars(&[(var, value)])) {
                Err(ConfigError::Invalid { var: named, .. }) => assert_eq!(named, var, "{value}"),
                other => panic!("{var}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn powertools_log_level_applies_without_lambdas() {
        let level =
            |lambda, powertools| LogSettings::from_values(None, lambda, powertools, None).filter;
        assert_eq!(level(None, Some("WARNING")), "warn");
        assert_eq!(level(None, Some("critical")), "error");
        assert_eq!(level(None, Some("DEBUG")), "debug");
        assert_eq!(level(None, Some("SILENT")), "off");
        assert_eq!(level(None, Some("nonsense")), "info");
        // Lambda's own setting ranks first, as Powertools ranks it
        assert_eq!(level(Some("ERROR"), Some("DEBUG")), "error");
        assert_eq!(level(Some("INFO"), Some("SILENT")), "info");
    }

    #[test]
    fn levels_read_and_order_as_lambdas() {
        assert_eq!(LogLevel::parse("warn"), Some(LogLevel::Warn));
        assert_eq!(LogLevel::parse(" FATAL "), Some(LogLevel::Fatal));
        assert_eq!(LogLevel::parse("WARNING"), None);
        assert!(LogLevel::Trace < LogLevel::Info && LogLevel::Error < LogLevel::Fatal);
        for l in LogLevel::ALL {
            assert_eq!(LogLevel::parse(l.as_str()), Some(l));
            assert!(LogLevel::for_metrics(l) >= l, "{l:?}");
            assert!(LogLevel::for_metrics(l) >= LogLevel::Info, "{l:?}");
        }
        assert_eq!(LogLevel::for_metrics(LogLevel::Debug), LogLevel::Info);
        assert_eq!(LogLevel::for_metrics(LogLevel::Error), LogLevel::Error);
    }

    #[test]
    fn filters_read_as_targets_directives() {
        use tracing::Level;
        let warn: Targets = LogSettings::from_values(None, Some("WARN"), None, None)
            .filter
            .parse()
            .unwrap();
        assert!(warn.would_enable("consumer", &Level::WARN));
        assert!(!warn.would_enable("consumer", &Level::INFO));
        let refined: Targets =
            LogSettings::from_values(None, None, None, Some("info,aws_smithy_runtime=warn"))
                .filter
                .parse()
                .unwrap();
        assert!(refined.would_enable("consumer", &Level::INFO));
        assert!(!refined.would_enable("aws_smithy_runtime::client::orchestrator", &Level::INFO));
        assert!(refined.would_enable("aws_smithy_runtime::client::orchestrator", &Level::WARN));
        // EnvFilter's span and field filters are not directives here: INFO, as documented
        assert!(
            "consumer[record{message_id=m}]=debug"
                .parse::<Targets>()
                .is_err()
        );
    }

    #[test]
    fn lambda_switches_are_honoured() {
        let s = LogSettings::from_values(None, None, None, None);
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Json, "info"));
        let s = LogSettings::from_values(Some("Text"), Some("DEBUG"), None, None);
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Text, "debug"));
        let s = LogSettings::from_values(Some("JSON"), Some("fatal"), None, None);
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Json, "error"));
        let s = LogSettings::from_values(Some("JSON"), Some("WARN"), None, Some("consumer=trace"));
        assert_eq!(s.filter, "consumer=trace");
    }
}
