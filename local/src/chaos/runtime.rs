//! A function as Lambda runs it: the real binary in a child process, talking to a Lambda
//! runtime API served here on 127.0.0.1 (`AWS_LAMBDA_RUNTIME_API`). An invocation hands the
//! process an event and waits for its response or error, a timeout, or a kill. A killed or
//! timed-out process is replaced by a fresh one (a cold start) with a runtime API of its own,
//! so nothing addressed to the dead process can reach the new one.
//!
//! Each invocation is handed what Lambda hands one: a request id, the invoked function's ARN,
//! the deadline and a trace header of its own (`Lambda-Runtime-*` headers).
//!
//! Its output goes through Lambda's log pipeline: with `AWS_LAMBDA_LOG_FORMAT=JSON`, a line
//! below `AWS_LAMBDA_LOG_LEVEL` is dropped as Lambda drops it ([`resq::lambda`]); the lines kept
//! go to the log file, and the metric (EMF) lines among them, when a forwarder is attached,
//! into the emulator's CloudWatch ([`crate::emf`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use resq::telemetry::LogLevel;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

use crate::driver::{Ended, Invoke};
use crate::http::next_request;
use crate::{CliError, lock};

type Reply = oneshot::Sender<Result<String, String>>;

struct Pending {
    id: String,
    trace_id: String,
    deadline_ms: u64,
    event: String,
    reply: Reply,
}

/// One runtime API, for one process.
struct RuntimeApi {
    addr: String,
    invocations: mpsc::Sender<Pending>,
    task: tokio::task::JoinHandle<()>,
}

struct ApiState {
    next: tokio::sync::Mutex<mpsc::Receiver<Pending>>,
    waiting: Mutex<HashMap<String, Reply>>,
    function_arn: String,
}

impl RuntimeApi {
    async fn start(function_arn: String) -> Result<Self, CliError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| CliError::Usage(format!("cannot listen on 127.0.0.1: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| CliError::Usage(e.to_string()))?
            .to_string();
        let (tx, rx) = mpsc::channel(1);
        let state = Arc::new(ApiState {
            next: tokio::sync::Mutex::new(rx),
            waiting: Mutex::default(),
            function_arn,
        });
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                // an invocation is written as a head and a body: with Nagle's algorithm the
                // body would wait for the head's ACK, which the function delays (40 ms)
                let _ = conn.set_nodelay(true);
                let state = state.clone();
                tokio::spawn(async move {
                    let _ = serve(conn, &state).await;
                });
            }
        });
        Ok(Self {
            addr,
            invocations: tx,
            task,
        })
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const NEXT: &str = "/2018-06-01/runtime/invocation/next";
const INVOCATION: &str = "/2018-06-01/runtime/invocation/";
const INIT_ERROR: &str = "/2018-06-01/runtime/init/error";

/// One request per connection, answered with `Connection: close`.
async fn serve(mut conn: TcpStream, state: &ApiState) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(8 * 1024);
    while let Some(request) = next_request(&mut conn, &mut buf).await? {
        let line = request.head.lines().next().unwrap_or_default().to_owned();
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let body = String::from_utf8_lossy(request.body(&buf)).into_owned();
        buf.drain(..request.end);
        let response = if method == "GET" && path == NEXT {
            let Some(p) = state.next.lock().await.recv().await else {
                return Ok(()); // the process this API served is gone
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nLambda-Runtime-Aws-Request-Id: {}\r\nLambda-Runtime-Deadline-Ms: {}\r\nLambda-Runtime-Invoked-Function-Arn: {}\r\nLambda-Runtime-Trace-Id: {}\r\nContent-Length: {}\r\n\r\n",
                p.id,
                p.deadline_ms,
                state.function_arn,
                p.trace_id,
                p.event.len()
            );
            lock(&state.waiting).insert(p.id.clone(), p.reply);
            conn.write_all(head.as_bytes()).await?;
            conn.write_all(p.event.as_bytes()).await?;
            continue;
        } else if method == "POST" && path == INIT_ERROR {
            tracing::warn!(error = %body, "function init failed");
            202
        } else if let Some(rest) = path.strip_prefix(INVOCATION).filter(|_| method == "POST") {
            let (id, kind) = rest.split_once('/').unwrap_or((rest, ""));
            let reply = lock(&state.waiting).remove(id);
            match (reply, kind) {
                (Some(r), "response") => {
                    let _ = r.send(Ok(body));
                    202
                }
                (Some(r), "error") => {
                    let _ = r.send(Err(body));
                    202
                }
                _ => 400,
            }
        } else {
            404
        };
        let reason = match response {
            202 => "Accepted",
            400 => "Bad Request",
            _ => "Not Found",
        };
        conn.write_all(
            format!("HTTP/1.1 {response} {reason}\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{{}}").as_bytes(),
        )
        .await?;
    }
    Ok(())
}

/// A function binary, run the way Lambda runs it.
pub struct Function {
    name: String,
    function_name: String,
    metrics: Option<mpsc::UnboundedSender<serde_json::Value>>,
    binary: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    timeout: Duration,
    running: Option<(Child, RuntimeApi)>,
    invocations: u64,
    /// Processes started (cold starts).
    pub starts: u64,
    /// The open-file limit each process starts with (`RLIMIT_NOFILE`), if set.
    nofile: Option<u64>,
}

impl Function {
    /// `binary` with `env` (configuration and `AWS_ENDPOINT_URL`); output appended to `log`.
    pub fn new(
        name: &str,
        binary: &Path,
        env: Vec<(String, String)>,
        log: &Path,
        timeout: Duration,
    ) -> Result<Self, CliError> {
        if !binary.exists() {
            return Err(CliError::Usage(format!(
                "function binary {} not found; build it first (`cargo build -p {name}`)",
                binary.display()
            )));
        }
        Ok(Self {
            name: name.to_owned(),
            function_name: name.to_owned(),
            metrics: None,
            binary: binary.to_owned(),
            env,
            log: log.to_owned(),
            timeout,
            running: None,
            invocations: 0,
            starts: 0,
            nofile: None,
        })
    }

    /// Starts each process with at most `limit` open file descriptors (soft and hard
    /// `RLIMIT_NOFILE`), as Lambda's execution environment does (1,024).
    pub fn with_nofile_limit(mut self, limit: u64) -> Self {
        self.nofile = Some(limit);
        self
    }

    /// The running process's id; `None` when no process runs.
    pub fn pid(&self) -> Option<u32> {
        self.running.as_ref()?.0.id()
    }

    /// Runs under this function name (`AWS_LAMBDA_FUNCTION_NAME`, the metrics' dimension),
    /// e.g. the stack's `resq-soak-consumer`; the binary's name by default.
    pub fn with_function_name(mut self, name: &str) -> Self {
        self.function_name = name.to_owned();
        self
    }

    /// Sends the EMF documents among the kept log lines to `metrics` (a
    /// [`crate::emf::MetricForwarder`]), as CloudWatch Logs would extract them.
    pub fn forward_metrics(mut self, metrics: mpsc::UnboundedSender<serde_json::Value>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn env_var(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    async fn start(&mut self) -> Result<(), CliError> {
        let arn = format!(
            "arn:aws:lambda:{}:123456789012:function:{}",
            crate::emulator::REGION,
            self.function_name
        );
        let api = RuntimeApi::start(arn).await?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| CliError::Usage(format!("cannot open {}: {e}", self.log.display())))?;
        let log = Arc::new(Mutex::new(log));
        // Lambda filters application logs by level only in its JSON log format
        let filter = self
            .env_var("AWS_LAMBDA_LOG_FORMAT")
            .is_some_and(|f| f.eq_ignore_ascii_case("json"))
            .then(|| {
                self.env_var("AWS_LAMBDA_LOG_LEVEL")
                    .and_then(LogLevel::parse)
                    .unwrap_or(LogLevel::Info)
            });
        let mut cmd = Command::new(&self.binary);
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("AWS_LAMBDA_RUNTIME_API", &api.addr)
            .env("AWS_LAMBDA_FUNCTION_NAME", &self.function_name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", self.name),
            )
            .env(
                "AWS_LAMBDA_LOG_STREAM_NAME",
                format!("chaos/{}", self.starts),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let nofile = self.nofile;
        // SAFETY: prctl and setrlimit are async-signal-safe; the kernel kills the function if
        // this process dies.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(n) = nofile {
                    let limit = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| CliError::Usage(format!("cannot start {}: {e}", self.binary.display())))?;
        if let Some(out) = child.stdout.take() {
            tokio::spawn(log_pipeline(out, filter, log.clone(), self.metrics.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(log_pipeline(err, filter, log, self.metrics.clone()));
        }
        self.starts += 1;
        self.running = Some((child, api));
        Ok(())
    }

    /// The running process's peak resident memory so far (`VmHWM`, KiB), as the memory a
    /// Lambda function's size must hold; `None` when no process runs.
    pub fn peak_rss_kb(&self) -> Option<u64> {
        let (child, _) = self.running.as_ref()?;
        std::fs::read_to_string(format!("/proc/{}/status", child.id()?))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// SIGKILLs the process (if any) and waits for it to be gone.
    pub async fn kill(&mut self) {
        if let Some((mut child, api)) = self.running.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
            drop(api);
        }
    }

    /// Invokes the function with `event`. With `kill_after`, the process is SIGKILLed that
    /// long into the invocation if it has not answered by then.
    pub async fn invoke(
        &mut self,
        event: &str,
        kill_after: Option<Duration>,
    ) -> Result<Ended, CliError> {
        if self
            .running
            .as_mut()
            .is_none_or(|(child, _)| !matches!(child.try_wait(), Ok(None)))
        {
            self.kill().await;
            self.start().await?;
        }
        self.invocations += 1;
        let id = format!("{}-{:08}", self.name, self.invocations);
        let deadline_ms =
            chrono::Utc::now().timestamp_millis().max(0) as u64 + self.timeout.as_millis() as u64;
        let (reply, answer) = oneshot::channel();
        let Some((_, api)) = self.running.as_ref() else {
            return Err(CliError::Usage(format!("{} did not start", self.name)));
        };
        let pending = Pending {
            id,
            trace_id: trace_header(chrono::Utc::now().timestamp()),
            deadline_ms,
            event: event.to_owned(),
            reply,
        };
        if api.invocations.send(pending).await.is_err() {
            self.kill().await;
            return Ok(Ended::TimedOut);
        }
        let started = Instant::now();
        // Lambda gives the function its timeout; a little more covers the cold start
        let limit = self.timeout + Duration::from_secs(2);
        let kill_at = kill_after.map(|k| started + k);
        let ended = tokio::select! {
            biased;
            answer = answer => match answer {
                Ok(Ok(body)) => Ended::Response(body),
                Ok(Err(body)) => Ended::Error(body),
                Err(_) => Ended::TimedOut,
            },
            () = sleep_until(kill_at) => Ended::Killed,
            () = tokio::time::sleep(limit) => Ended::TimedOut,
        };
        if matches!(ended, Ended::Killed | Ended::TimedOut) {
            self.kill().await;
        }
        Ok(ended)
    }
}

/// The driver's function: the binary under the runtime API, killed when the run is over.
impl Invoke for Function {
    async fn invoke(
        &mut self,
        event: &str,
        kill_after: Option<Duration>,
    ) -> Result<Ended, CliError> {
        Function::invoke(self, event, kill_after).await
    }

    async fn stop(&mut self) {
        self.kill().await;
    }
}

/// Lambda's log pipeline for one output stream: each line Lambda's level filter keeps (all of
/// them without a filter, as in its text format) goes to the log file, and an EMF document to
/// the metric forwarder.
async fn log_pipeline(
    stream: impl tokio::io::AsyncRead + Unpin,
    filter: Option<LogLevel>,
    log: Arc<Mutex<std::fs::File>>,
    metrics: Option<mpsc::UnboundedSender<serde_json::Value>>,
) {
    use std::io::Write;
    let mut reader = tokio::io::BufReader::new(stream);
    let mut raw = Vec::new();
    // bytes, not UTF-8 lines: a stray byte must not stop the reading (the function would
    // then block on a full pipe)
    while let Ok(n) = reader.read_until(b'\n', &mut raw).await {
        if n == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&raw)
            .trim_end_matches(['\n', '\r'])
            .to_owned();
        raw.clear();
        if filter.is_some_and(|level| !resq::lambda::application_log_kept(&line, level)) {
            continue;
        }
        let _ = writeln!(lock(&log), "{line}");
        if let Some(tx) = &metrics
            && let Some(doc) = crate::emf::emf_document(&line)
        {
            let _ = tx.send(doc);
        }
    }
}

/// A trace header for one invocation, as Lambda hands it (`Lambda-Runtime-Trace-Id`): an X-Ray
/// trace id of the time `epoch_seconds` and 96 random bits, a parent segment, not sampled.
pub fn trace_header(epoch_seconds: i64) -> String {
    format!(
        "Root=1-{:08x}-{:024x};Parent={:016x};Sampled=0",
        epoch_seconds.max(0) as u32,
        rand::random::<u128>() >> 32,
        rand::random::<u64>()
    )
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_invocation_gets_a_trace_id_of_its_own_as_lambda_writes_them() {
        let (a, b) = (trace_header(1_700_000_000), trace_header(1_700_000_000));
        assert_ne!(a, b);
        let root = a
            .strip_prefix("Root=")
            .and_then(|r| r.split(';').next())
            .unwrap();
        let parts: Vec<&str> = root.split('-').collect();
        assert_eq!(parts.len(), 3, "{root}");
        assert_eq!(
            (parts[0], parts[1], parts[2].len()),
            ("1", "6553f100", 24),
            "{root}"
        );
        assert!(parts[2].chars().all(|c| c.is_ascii_hexdigit()), "{root}");
        assert!(a.ends_with(";Sampled=0") && a.contains(";Parent="), "{a}");
    }
}
