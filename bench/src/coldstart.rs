//! Cold start: from spawning a function's `bootstrap` to its first
//! `GET /2018-06-01/runtime/invocation/next` on a stub Lambda runtime API on 127.0.0.1.
//! Everything the function does before it can take an event counts: config parsing, SDK
//! clients, the runtime's own start.

use std::io::Read;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NEXT: &str = "GET /2018-06-01/runtime/invocation/next";

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

/// Milliseconds from spawn to the first `invocation/next`, one per run.
pub fn init_ms(binary: &Path, function: &str, runs: usize) -> Result<Vec<f64>, String> {
    (0..runs).map(|_| once(binary, function)).collect()
}

fn once(binary: &Path, function: &str) -> Result<f64, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(binary);
    cmd.env_clear()
        .envs(lambda_env(function, &addr.to_string()))
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
