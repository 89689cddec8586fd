//! Logging set up the way Lambda asks for it: `AWS_LAMBDA_LOG_FORMAT` (`JSON` or `Text`) and
//! `AWS_LAMBDA_LOG_LEVEL`; `RUST_LOG`, when set, refines the filter for local work.

use tracing_subscriber::EnvFilter;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (the default: CloudWatch Logs Insights reads the fields).
    Json,
    /// Human-readable lines.
    Text,
}

/// The resolved logging settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// Line format.
    pub format: LogFormat,
    /// An `EnvFilter` directive.
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

/// Installs the global subscriber (once; later calls do nothing).
pub fn init_tracing() {
    let settings = LogSettings::from_env();
    let filter = EnvFilter::try_new(&settings.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = match settings.format {
        // Lambda stamps each line itself; the span fields carry messageId / orderId.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .without_time()
            .try_init(),
        LogFormat::Text => builder.without_time().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

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
