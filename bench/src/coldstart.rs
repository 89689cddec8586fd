//! Cold start: from spawning a function's `bootstrap` to its first
//! `GET /2018-06-01/runtime/invocation/next` on a stub Lambda runtime API on 127.0.0.1.
//! Everything the function does before it can take an event counts: config parsing, SDK
//! clients (the HTTPS client loads the trust store), the runtime's own start.
//!
//! The template sets `SSL_CERT_FILE` to Amazon Linux 2023's CA bundle
//! ([`AL2023_CA_BUNDLE`]): with it, rustls-native-certs reads that one file and skips the
//! platform probe's directory scan. Here the start is measured both ways, "before" without
//! the variable and "after" (as deployed) with this machine's bundle ([`LOCAL_CA_BUNDLE`])
//! standing in for AL2023's.

use std::io::Read;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NEXT: &str = "GET /2018-06-01/runtime/invocation/next";

/// The CA bundle of Lambda's `provided.al2023` runtime (Amazon Linux 2023's ca-certificates:
/// `/etc/pki/tls/certs/ca-bundle.crt` links to it), what `infra/template.yaml` sets as
/// `SSL_CERT_FILE`.
pub const AL2023_CA_BUNDLE: &str = "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem";

/// This machine's CA bundle (Debian), standing in for [`AL2023_CA_BUNDLE`].
pub const LOCAL_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Whether the runs set `SSL_CERT_FILE` (as deployed) or not (the platform probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// No `SSL_CERT_FILE`: rustls-native-certs probes the platform (bundle and directories).
    Probe,
    /// `SSL_CERT_FILE` = [`LOCAL_CA_BUNDLE`], as the template sets AL2023's.
    CertFile,
}

impl Trust {
    /// The variables this adds to the Lambda environment.
    pub fn env(self) -> Vec<(String, String)> {
        match self {
            Trust::Probe => Vec::new(),
            Trust::CertFile => vec![("SSL_CERT_FILE".to_owned(), LOCAL_CA_BUNDLE.to_owned())],
        }
    }
}

/// The environment Lambda gives a function, plus resq's own variables; endpoints point at a
/// closed loopback port so nothing can leave the machine.
pub fn lambda_env(function: &str, runtime_api: &str) -> Vec<(String, String)> {
    [
        ("AWS_LAMBDA_RUNTIME_API", runtime_api),
        ("AWS_LAMBDA_FUNCTION_NAME", function),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
        ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/resq-bench"),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/22/[$LATEST]bench"),
        ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_SESSION_TOKEN", "testing"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
        (
            "MAIN_QUEUE_URL",
            "http://127.0.0.1:9/123456789012/resq-orders",
        ),
        ("DLQ_URL", "http://127.0.0.1:9/123456789012/resq-orders-dlq"),
        ("ARCHIVE_BUCKET", "resq-bench"),
        ("PAUSE_ON_ALARMS", "resq-orders-age"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Medians of `runs` starts each without and with `SSL_CERT_FILE`, the two alternating:
/// (before, after), ms.
pub fn before_after(binary: &Path, function: &str, runs: usize) -> Result<(f64, f64), String> {
    // the consumer reads its queue's attributes during init: a stand-in answers at once (a
    // closed port would make the SDK retry for about a second)
    let sqs = crate::fakesqs::FakeSqs::start()?;
    let endpoint = vec![
        ("AWS_ENDPOINT_URL".to_owned(), sqs.endpoint.clone()),
        ("MAIN_QUEUE_URL".to_owned(), sqs.queue_url("resq-orders")),
        ("DLQ_URL".to_owned(), sqs.queue_url("resq-orders-dlq")),
    ];
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        before.push(once(binary, function, Trust::Probe, &endpoint)?);
        after.push(once(binary, function, Trust::CertFile, &endpoint)?);
    }
    Ok((
        crate::measured::median(&mut before),
        crate::measured::median(&mut after),
    ))
}

fn once(
    binary: &Path,
    function: &str,
    trust: Trust,
    env: &[(String, String)],
) -> Result<f64, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(binary);
    cmd.env_clear()
        .envs(lambda_env(function, &addr.to_string()))
        .envs(trust.env())
        .envs(env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let result = wait_for_next(&listener, started);
    let _ = child.kill();
    let _ = child.wait();
    result.map_err(|e| format!("{}: {e}", binary.display()))
}

fn wait_for_next(listener: &TcpListener, started: Instant) -> Result<f64, String> {
    let mut poll = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let ready = unsafe { libc::poll(&mut poll, 1, 10_000) };
    if ready != 1 {
        return Err("no connection to the runtime API within 10 s".into());
    }
    let (mut conn, _) = listener.accept().map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        let n = conn.read(&mut byte).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    let line = String::from_utf8_lossy(&head);
    if !line.starts_with(NEXT) {
        return Err(format!("first request was {line:?}, not {NEXT}"));
    }
    Ok(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_points_ssl_cert_file_at_amazon_linux_2023s_bundle() {
        let template = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/template.yaml"),
        )
        .unwrap();
        let line = format!("SSL_CERT_FILE: {AL2023_CA_BUNDLE}");
        assert_eq!(template.matches(&line).count(), 1, "{line}");
        assert_eq!(Trust::Probe.env(), vec![]);
        assert_eq!(Trust::CertFile.env()[0].1, LOCAL_CA_BUNDLE);
    }
}
