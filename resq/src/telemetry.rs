//! Logging set up the way Lambda asks for it: `AWS_LAMBDA_LOG_FORMAT` (`JSON` or `Text`) and
//! `AWS_LAMBDA_LOG_LEVEL`; `RUST_LOG`, when set, refines the filter for local work.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields, MakeWriter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
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
    pub const ALL: [LogLevel; 6] = [
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

    /// The configured application level: `AWS_LAMBDA_LOG_LEVEL`, INFO when unset or unknown
    /// (Lambda's default).
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
    pub fn for_metrics(configured: LogLevel) -> Self {
        configured.max(LogLevel::Info)
    }
}

/// The resolved logging settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// Line format.
    pub format: LogFormat,
    /// Filter directives, as [`Targets`] reads them: a level (`info`), or `target=level` pairs
    /// separated by commas (`info,resq=debug,aws_smithy_runtime=warn`).
    pub filter: String,
}

impl LogSettings {
    /// Resolves the settings from the three variables' values.
    pub fn from_values(format: Option<&str>, level: Option<&str>, rust_log: Option<&str>) -> Self {
        let format = match format.map(str::trim) {
            Some(f) if f.eq_ignore_ascii_case("text") => LogFormat::Text,
            _ => LogFormat::Json,
        };
        let level = match level.map(|l| l.trim().to_ascii_uppercase()).as_deref() {
            Some("TRACE") => "trace",
            Some("DEBUG") => "debug",
            Some("WARN") => "warn",
            Some("ERROR") | Some("FATAL") => "error",
            _ => "info",
        };
        let filter = match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
            Some(directives) => directives.to_owned(),
            None => level.to_owned(),
        };
        Self { format, filter }
    }

    /// Resolves the settings from the process environment.
    pub fn from_env() -> Self {
        let get = |k: &str| std::env::var(k).ok();
        Self::from_values(
            get("AWS_LAMBDA_LOG_FORMAT").as_deref(),
            get("AWS_LAMBDA_LOG_LEVEL").as_deref(),
            get("RUST_LOG").as_deref(),
        )
    }
}

/// Installs the global subscriber (once; later calls do nothing). A `RUST_LOG` that does not
/// parse as [`Targets`] directives is set aside, with a warning, for `AWS_LAMBDA_LOG_LEVEL`.
pub fn init_tracing() {
    let settings = LogSettings::from_env();
    let (filter, refused) = match settings.filter.parse::<Targets>() {
        Ok(filter) => (filter, None),
        Err(e) => {
            let get = |k: &str| std::env::var(k).ok();
            let level =
                LogSettings::from_values(None, get("AWS_LAMBDA_LOG_LEVEL").as_deref(), None);
            let filter = level
                .filter
                .parse::<Targets>()
                .unwrap_or_else(|_| Targets::new().with_default(LevelFilter::INFO));
            (filter, Some(e))
        }
    };
    let _ = match settings.format {
        LogFormat::Json => tracing_subscriber::registry()
            .with(json_layer(std::io::stdout).with_filter(filter))
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
        tracing::warn!(rust_log = %settings.filter, error = %e, "RUST_LOG is not a list of target=level directives; AWS_LAMBDA_LOG_LEVEL applies");
    }
}

/// The JSON log layer both functions use, writing to `writer`: one object per line with
/// `timestamp` (RFC 3339: Lambda honours a line's `level` only next to a valid one, and files
/// it as INFO otherwise, so a WARN setting would drop every warning), `level`, the event's
/// fields, and the fields of the spans it is in, all at the top level. So `messageId` and
/// `orderId`, which the consumer puts on a record's span and the redriver on each line, are
/// the same keys in both functions' logs, and a Logs Insights query filters on them directly.
pub fn json_layer<S, W>(writer: W) -> impl tracing_subscriber::Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .fmt_fields(JsonFields::new())
        .event_format(FlatJson)
        .with_writer(writer)
}

/// [`json_layer`]'s line format: span fields (outermost first) and event fields in one flat
/// object; an event's own field wins over a span's of the same name.
#[derive(Debug, Clone, Copy, Default)]
pub struct FlatJson;

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
        let mut line = serde_json::Map::new();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        line.insert("timestamp".into(), now.into());
        line.insert("level".into(), event.metadata().level().as_str().into());
        let span = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current());
        if let Some(span) = span {
            for s in span.scope().from_root() {
                let extensions = s.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(serde_json::Value::Object(fields)) =
                    serde_json::from_str::<serde_json::Value>(fields)
                {
                    line.extend(fields);
                }
            }
        }
        event.record(&mut FieldsInto(&mut line));
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
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
    fn span_and_event_fields_are_top_level_keys_of_one_json_line() {
        let (logs, _guard) = crate::testing::CapturedLogs::start();
        let span =
            tracing::error_span!("record", messageId = "m-1", orderId = tracing::field::Empty);
        span.record("orderId", "o-1");
        span.in_scope(|| tracing::warn!(newMessageId = "m-2", count = 3_u64, ok = true, "copied"));
        tracing::info!(messageId = "m-9", "outside any span");
        let lines = logs.lines();
        let copied = &lines[0];
        assert_eq!(copied["message"], "copied");
        assert_eq!(copied["level"], "WARN");
        assert_eq!(
            (
                &copied["messageId"],
                &copied["orderId"],
                &copied["newMessageId"]
            ),
            (&"m-1".into(), &"o-1".into(), &"m-2".into())
        );
        assert_eq!((&copied["count"], &copied["ok"]), (&3.into(), &true.into()));
        assert!(copied.get("span").is_none(), "{copied}");
        let stamp = copied["timestamp"].as_str().unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(stamp).is_ok(),
            "{stamp}"
        );
        assert_eq!(lines[1]["messageId"], "m-9");
        assert!(lines[1].get("orderId").is_none());
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
        let warn: Targets = LogSettings::from_values(None, Some("WARN"), None)
            .filter
            .parse()
            .unwrap();
        assert!(warn.would_enable("consumer", &Level::WARN));
        assert!(!warn.would_enable("consumer", &Level::INFO));
        let refined: Targets =
            LogSettings::from_values(None, None, Some("info,aws_smithy_runtime=warn"))
                .filter
                .parse()
                .unwrap();
        assert!(refined.would_enable("consumer", &Level::INFO));
        assert!(!refined.would_enable("aws_smithy_runtime::client::orchestrator", &Level::INFO));
        assert!(refined.would_enable("aws_smithy_runtime::client::orchestrator", &Level::WARN));
        // EnvFilter's span and field filters are not directives here: INFO, as documented
        assert!(
            "consumer[record{messageId=m}]=debug"
                .parse::<Targets>()
                .is_err()
        );
    }

    #[test]
    fn lambda_switches_are_honoured() {
        let s = LogSettings::from_values(None, None, None);
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Json, "info"));
        let s = LogSettings::from_values(Some("Text"), Some("DEBUG"), None);
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Text, "debug"));
        let s = LogSettings::from_values(Some("JSON"), Some("fatal"), None);
        assert_eq!((s.format, s.filter.as_str()), (LogFormat::Json, "error"));
        let s = LogSettings::from_values(Some("JSON"), Some("WARN"), Some("consumer=trace"));
        assert_eq!(s.filter, "consumer=trace");
    }
}
