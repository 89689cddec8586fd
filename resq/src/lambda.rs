//! Small helpers around the Lambda runtime's context.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A function's invocation error as the runtime reports it (`errorType`, `errorMessage`) and
/// logs it. The runtime logs a handler's error in its debug form: here that form is the message.
pub struct InvocationError {
    error_type: &'static str,
    message: String,
}

impl InvocationError {
    /// An error of type `error_type` (e.g. `NotAnSqsEvent`) saying `e`.
    pub fn new(error_type: &'static str, e: impl std::fmt::Display) -> Self {
        Self {
            error_type,
            message: e.to_string(),
        }
    }
}

impl std::fmt::Debug for InvocationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<InvocationError> for lambda_runtime::Diagnostic {
    fn from(e: InvocationError) -> Self {
        lambda_runtime::Diagnostic {
            error_type: e.error_type.to_owned(),
            error_message: e.message,
        }
    }
}

/// Lambda's longest timeout: the budget assumed when a runtime gives no usable deadline.
pub(crate) const MAX_LAMBDA_TIMEOUT: Duration = Duration::from_secs(900);

/// The `Instant` of a Lambda deadline given as epoch millis (the runtime's `context.deadline`).
pub fn deadline_instant(deadline_epoch_ms: u64) -> Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    deadline_from(deadline_epoch_ms, now_ms, Instant::now())
}

/// [`deadline_instant`] with the clocks given. Lambda never starts an invocation whose deadline
/// has passed; a deadline at or before the start means the runtime sent no real one (local
/// emulators: `cargo lambda watch` sends its timeout, 600000, instead of an epoch time), and
/// then Lambda's longest timeout is assumed.
pub(crate) fn deadline_from(deadline_epoch_ms: u64, now_epoch_ms: u64, now: Instant) -> Instant {
    if deadline_epoch_ms <= now_epoch_ms {
        tracing::debug!(
            deadline_epoch_ms,
            "no usable deadline from the runtime; assuming 15 minutes"
        );
        return now + MAX_LAMBDA_TIMEOUT;
    }
    now + Duration::from_millis(deadline_epoch_ms - now_epoch_ms)
}

/// Removes `AWS_LAMBDA_MAX_CONCURRENCY` when it is `1`, as `cargo lambda watch` sets it: `1`
/// asks for one invocation at a time, which both functions then do, and the redriver's
/// sequential runtime would otherwise warn on every start that it runs sequentially. Any other
/// value stays: the consumer runs that many at once, the redriver refuses it
/// (docs/deploy.md, "Lambda Managed Instances"). Call it first thing in `main`, before the async runtime starts any
/// thread: changing the environment is only sound while a single thread runs.
pub(crate) fn drop_sequential_concurrency_setting() {
    const NAME: &str = "AWS_LAMBDA_MAX_CONCURRENCY";
    if std::env::var(NAME).is_ok_and(|v| v.trim() == "1") {
        // SAFETY: called before any other thread exists (see above), so nothing reads the
        // environment concurrently.
        unsafe { std::env::remove_var(NAME) };
    }
}

/// `SSL_CERT_FILE` names the CA bundle the HTTPS client reads instead of probing the
/// platform's (the template sets Amazon Linux 2023's). Set to something that is not a readable
/// file of PEM certificates, the client would trust nothing and every AWS call would fail: the
/// variable is then removed, so the platform's trust store is probed as without it, and the
/// returned warning says so. Only while one thread runs (it changes the environment): `main`
/// calls it first thing.
fn drop_missing_ca_bundle() -> Option<String> {
    const NAME: &str = "SSL_CERT_FILE";
    let value = std::env::var_os(NAME)?;
    // its start is enough to tell (the HTTPS client reads the whole of it afterwards)
    let start = |p: &std::path::Path| {
        use std::io::Read;
        let mut start = Vec::new();
        let file = std::fs::File::open(p).ok()?;
        file.take(64 * 1024).read_to_end(&mut start).ok()?;
        Some(start)
    };
    let warning = missing_ca_bundle(&value, start)?;
    // SAFETY: called before any other thread exists, so nothing reads the environment
    // concurrently.
    unsafe { std::env::remove_var(NAME) };
    Some(warning)
}

/// The warning when `SSL_CERT_FILE=value` cannot be `read`, or what `read` gives (the file's
/// start) holds no PEM certificate.
fn missing_ca_bundle(
    value: &std::ffi::OsStr,
    read: impl Fn(&std::path::Path) -> Option<Vec<u8>>,
) -> Option<String> {
    const PEM: &[u8] = b"-----BEGIN CERTIFICATE-----";
    let path = std::path::Path::new(value);
    let holds_one = read(path).is_some_and(|b| b.windows(PEM.len()).any(|w| w == PEM));
    (!holds_one).then(|| {
        format!(
            "SSL_CERT_FILE={} is not a readable file of PEM certificates: ignored, the platform's trust store is read instead (start-up reads more files)",
            path.display()
        )
    })
}

/// A function's `main`: drops the sequential concurrency setting (see
/// `drop_sequential_concurrency_setting`) and a CA bundle that is not there (see
/// `drop_missing_ca_bundle`) while one thread runs, then runs `serve` on a
/// multi-threaded tokio runtime. An error ends the process with exit code 1 and
/// `{function}: {the messages of the error and its causes}` on stderr, never Rust's debug form
/// (which returning the error from `main` would print).
pub fn main<F>(function: &str, serve: impl FnOnce() -> F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>,
{
    drop_sequential_concurrency_setting();
    if let Some(warning) = drop_missing_ca_bundle() {
        eprintln!("{function}: {warning}");
    }
    let served = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        .and_then(|runtime| runtime.block_on(serve()));
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{function}: {}", crate::error::error_chain(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Lambda's log-level filter for application logs in JSON format, as documented: a line that
/// is a JSON object with a valid `level` (TRACE … FATAL, any case) and a valid RFC 3339
/// `timestamp` has that level; every other line (no level, an invalid one, no valid
/// timestamp, not JSON) counts as INFO. Lambda sends a line to CloudWatch Logs only when its
/// level is at or above the configured one. The local runtimes apply it to the functions'
/// output, so what they forward (metric lines included) is what Lambda would.
pub fn application_log_kept(line: &str, configured: crate::telemetry::LogLevel) -> bool {
    line_level(line) >= configured
}

/// The level Lambda files a line under (see [`application_log_kept`]).
pub(crate) fn line_level(line: &str) -> crate::telemetry::LogLevel {
    use crate::telemetry::LogLevel;
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        level: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        timestamp: Option<std::borrow::Cow<'a, str>>,
    }
    let Ok(head) = serde_json::from_str::<Head<'_>>(line.trim()) else {
        return LogLevel::Info;
    };
    let stamped = head
        .timestamp
        .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(&t).is_ok());
    match head.level.as_deref().and_then(LogLevel::parse) {
        Some(level) if stamped => level,
        _ => LogLevel::Info,
    }
}

/// Whether no invocation of this process has started yet.
static COLD: AtomicBool = AtomicBool::new(true);

/// One invocation's span, for the handler's future to run in (`.instrument(span)`): every
/// line inside it carries `cold_start` (true on the process's first invocation only),
/// `function_arn`, `function_request_id` and `xray_trace_id` (the `Root` of Lambda's trace
/// header, as Powertools writes it), formatted once, here. On a cold start it also writes the
/// `ColdStart` metric, as Powertools Metrics does. At ERROR level, so whatever level is
/// configured the keys are on every line.
pub fn invocation(context: &lambda_runtime::Context) -> tracing::Span {
    let cold = COLD.swap(false, Ordering::Relaxed);
    if cold {
        crate::metrics::emit_cold_start(crate::telemetry::current());
    }
    let trace = context
        .xray_trace_id
        .as_deref()
        .and_then(crate::telemetry::trace_root);
    tracing::error_span!(
        target: crate::telemetry::INVOCATION_TARGET,
        "invocation",
        cold_start = cold,
        function_arn = %context.invoked_function_arn,
        function_request_id = %context.request_id,
        xray_trace_id = trace,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_bundle_that_holds_no_certificate_is_dropped_with_a_warning() {
        let bundle = std::ffi::OsStr::new("/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem");
        let pem = b"# roots\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        assert_eq!(missing_ca_bundle(bundle, |_| Some(pem.to_vec())), None);
        let warning = missing_ca_bundle(bundle, |_| None).unwrap();
        assert!(
            warning.starts_with("SSL_CERT_FILE=/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem is not a readable file of PEM certificates: ignored"),
            "{warning}"
        );
        // empty, or not PEM: goes too
        assert!(missing_ca_bundle(bundle, |_| Some(Vec::new())).is_some());
        assert!(missing_ca_bundle(bundle, |_| Some(b"\x30\x82".to_vec())).is_some());
        // a file on disk that is no bundle, and a missing one
        let read = |p: &std::path::Path| std::fs::read(p).ok();
        let der = std::env::temp_dir().join(format!("resq-not-pem-{}", std::process::id()));
        std::fs::write(&der, b"\x30\x82\x01\x0a").unwrap();
        let dropped = missing_ca_bundle(der.as_os_str(), read);
        std::fs::remove_file(&der).unwrap();
        assert!(dropped.is_some());
        assert!(missing_ca_bundle(std::ffi::OsStr::new("/nonexistent/ca.pem"), read).is_some());
    }

    #[test]
    fn an_invocation_error_is_logged_and_reported_as_its_message() {
        let e = InvocationError::new("InvalidInput", "maxMessages must be at least 1");
        assert_eq!(format!("{e:?}"), "maxMessages must be at least 1");
        let d = lambda_runtime::Diagnostic::from(e);
        assert_eq!(
            (d.error_type.as_str(), d.error_message.as_str()),
            ("InvalidInput", "maxMessages must be at least 1")
        );
    }
    use crate::telemetry::LogLevel;

    #[test]
    fn lambdas_filter_reads_level_and_timestamp() {
        let ts = "2026-11-23T10:00:00.123456Z";
        let at = |level: &str| format!(r#"{{"level":"{level}","timestamp":"{ts}","message":"m"}}"#);
        assert_eq!(line_level(&at("WARN")), LogLevel::Warn);
        assert_eq!(line_level(&at("debug")), LogLevel::Debug);
        assert_eq!(
            line_level(&at("WARNING")),
            LogLevel::Info,
            "not a Lambda level"
        );
        assert_eq!(
            line_level(r#"{"level":"ERROR","message":"no timestamp"}"#),
            LogLevel::Info
        );
        assert_eq!(
            line_level(r#"{"level":"ERROR","timestamp":"yesterday"}"#),
            LogLevel::Info
        );
        assert_eq!(line_level(r#"{"_aws":{}}"#), LogLevel::Info);
        assert_eq!(line_level("plain text"), LogLevel::Info);
        assert_eq!(line_level("[1, 2]"), LogLevel::Info);
        assert!(application_log_kept(&at("ERROR"), LogLevel::Warn));
        assert!(!application_log_kept(&at("INFO"), LogLevel::Warn));
        assert!(!application_log_kept("plain text", LogLevel::Error));
        assert!(application_log_kept("plain text", LogLevel::Info));
    }

    #[test]
    fn deadline_from_epoch_millis() {
        let now = Instant::now();
        assert_eq!(
            deadline_from(10_000, 4_000, now),
            now + Duration::from_secs(6)
        );
    }

    #[test]
    fn a_deadline_in_the_past_means_none_was_given() {
        let now = Instant::now();
        assert_eq!(deadline_from(1_000, 4_000, now), now + MAX_LAMBDA_TIMEOUT);
        assert_eq!(
            deadline_from(600_000, 1_795_305_560_647, now),
            now + MAX_LAMBDA_TIMEOUT,
            "cargo lambda watch"
        );
        assert_eq!(deadline_from(0, 4_000, now), now + MAX_LAMBDA_TIMEOUT);
    }
}
