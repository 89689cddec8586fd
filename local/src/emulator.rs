//! The local AWS emulators, each run as a child process on 127.0.0.1, on a free port: moto
//! server, and LocalStack without Docker: SQS, S3, CloudWatch (which really evaluates alarms
//! from metric data, where moto never does), SNS and CloudFormation, started from its own
//! Python 3.13 venv (`make` installs `.venv-localstack` from `requirements-localstack.txt`).
//! Each is stopped when its handle is dropped (LocalStack's whole process group), and by the
//! kernel if this process dies.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::CliError;

/// Region used against the emulator.
pub const REGION: &str = "us-east-1";

/// A moto server child process; killed when dropped (also on a panic that unwinds).
pub struct MotoServer {
    child: Child,
    /// `http://127.0.0.1:{port}`.
    pub endpoint: String,
}

/// A free port on 127.0.0.1.
pub fn free_port() -> Result<u16, CliError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| CliError::Usage(format!("no free port on 127.0.0.1: {e}")))
}

/// `GET path` on 127.0.0.1:`port` answers 200 (an emulator's readiness probe).
pub fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    s.read_exact(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.1 200")
}

impl MotoServer {
    /// Starts `binary` (moto_server) on 127.0.0.1 and waits until it answers.
    pub fn start(binary: &Path) -> Result<Self, CliError> {
        Self::start_with(binary, &[])
    }

    /// Starts `binary` with `env` added to its environment (e.g. `MOTO_ACCOUNT_ID`, the account
    /// every resource it makes belongs to) and waits until it answers.
    pub fn start_with(binary: &Path, env: &[(&str, &str)]) -> Result<Self, CliError> {
        if !binary.exists() {
            return Err(CliError::Usage(format!(
                "moto server not found at {}; run `make setup` (or `make test`, which installs it)",
                binary.display()
            )));
        }
        for _attempt in 0..5 {
            let port = free_port()?;
            let mut cmd = Command::new(binary);
            cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: prctl is async-signal-safe; it makes the kernel kill moto if this process
            // dies without running destructors (SIGKILL, abort).
            unsafe {
                use std::os::unix::process::CommandExt;
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut child = cmd
                .spawn()
                .map_err(|e| CliError::Usage(format!("cannot start {}: {e}", binary.display())))?;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(60) {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // exited: most likely the port was taken meanwhile; try another
                }
                if http_ok(port, "/moto-api/data.json") {
                    return Ok(Self {
                        child,
                        endpoint: format!("http://127.0.0.1:{port}"),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        Err(CliError::Usage(
            "moto server did not come up on 127.0.0.1".into(),
        ))
    }

    /// The SDK configuration for this server (region us-east-1, dummy credentials).
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        local_sdk_config(&self.endpoint).await
    }
}

impl MotoServer {
    /// A form `POST` to moto's Query API of `service` (e.g. IAM's `Action=CreateRole&…`, which
    /// the SDKs this workspace uses do not include): the status and body of the answer.
    pub async fn post_form(&self, service: &str, form: &str) -> Result<(u16, String), CliError> {
        let addr = self.endpoint.trim_start_matches("http://");
        let headers = format!(
            "Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/{REGION}/{service}/aws4_request, SignedHeaders=host, Signature=0\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        );
        let raw = crate::http::post(addr, "/", &headers, form)
            .await
            .map_err(|e| CliError::Usage(format!("moto on {addr}: {e}")))?;
        crate::http::http_response(&raw)
            .ok_or_else(|| CliError::Usage(format!("moto on {addr} answered no HTTP")))
    }

    /// A plain `GET` of moto's REST API, as JSON (for responses the SDK cannot parse because
    /// moto deviates from AWS).
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let port: u16 = self
            .endpoint
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to moto");
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential=testing/20260101/{REGION}/lambda/aws4_request, SignedHeaders=host, Signature=0\r\nConnection: close\r\n\r\n"
        );
        s.write_all(request.as_bytes()).expect("send");
        let mut response = String::new();
        s.read_to_string(&mut response).expect("read");
        let (head, body) = response.split_once("\r\n\r\n").expect("http response");
        assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
        serde_json::from_str(body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }
}

/// The SDK configuration for a local endpoint (region us-east-1, dummy credentials).
pub async fn local_sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    local_sdk_config_as(endpoint, "testing").await
}

/// The SDK configuration for a local endpoint, signing with access key id `key` (a proxy in
/// front of the emulator tells callers apart by it).
pub async fn local_sdk_config_as(endpoint: &str, key: &str) -> aws_config::SdkConfig {
    resq::aws::config_loader()
        .endpoint_url(endpoint)
        .region(aws_config::Region::new(REGION))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            key,
            "testing",
            None,
            None,
            "resq-local",
        ))
        .load()
        .await
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A LocalStack runtime; stopped (its whole process group) when dropped.
pub struct LocalStack {
    child: Child,
    /// `http://127.0.0.1:{port}`.
    pub endpoint: String,
    dir: PathBuf,
}

impl LocalStack {
    /// Starts LocalStack with `python` (the venv's interpreter, which has `localstack-core`)
    /// and waits until it answers. Its log is in a temporary directory, shown if it fails.
    pub fn start(python: &Path) -> Result<Self, CliError> {
        if !python.exists() {
            return Err(CliError::Usage(format!(
                "LocalStack's Python not found at {}; run `make setup` (or `make test`, which installs it into .venv-localstack)",
                python.display()
            )));
        }
        let port = free_port()?;
        let dir =
            std::env::temp_dir().join(format!("resq-localstack-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::Usage(format!("{}: {e}", dir.display())))?;
        let log_path = dir.join("localstack.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| CliError::Usage(format!("{}: {e}", log_path.display())))?;
        let err_log = log
            .try_clone()
            .map_err(|e| CliError::Usage(e.to_string()))?;
        let address = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(python);
        cmd.args(["-m", "localstack.runtime.main"])
            .env("GATEWAY_LISTEN", &address)
            .env("LOCALSTACK_HOST", &address)
            .env(
                "SERVICES",
                "sqs,s3,cloudwatch,cloudformation,sns,events,logs,sts,iam,kms",
            )
            .env("DNS_ADDRESS", "0")
            .env("LOCALSTACK_TELEMETRY", "0")
            .env("DISABLE_EVENTS", "1")
            .env("OVERRIDE_IN_DOCKER", "0")
            .env("SQS_ENDPOINT_STRATEGY", "path")
            // without it LocalStack's SQS is 4× slower and keeps burning CPU after a run
            .env("SQS_DISABLE_CLOUDWATCH_METRICS", "1")
            .env("FILESYSTEM_ROOT", dir.join("fs"))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log));
        // SAFETY: setpgid and prctl are async-signal-safe. Its own process group, so the whole
        // runtime stops with it; killed by the kernel if this process dies.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| {
            CliError::Usage(format!(
                "cannot start LocalStack with {}: {e}",
                python.display()
            ))
        })?;
        let mut me = Self {
            child,
            endpoint: format!("http://{address}"),
            dir,
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(90) {
            if let Ok(Some(status)) = me.child.try_wait() {
                return Err(CliError::Usage(format!(
                    "LocalStack exited ({status}) before it was ready:\n{}",
                    me.log_tail()
                )));
            }
            // the port opens only once the runtime is ready
            if http_ok(port, "/_localstack/health") {
                return Ok(me);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(CliError::Usage(format!(
            "LocalStack did not answer on {} within 90 s:\n{}",
            me.endpoint,
            me.log_tail()
        )))
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("localstack.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Its process id, which is also its process group's (its CPU time can be read there).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The SDK configuration for it (region us-east-1, dummy credentials).
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        local_sdk_config(&self.endpoint).await
    }
}

impl Drop for LocalStack {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: signals the process group this handle started (its pid is the group id).
        unsafe {
            libc::killpg(pid, libc::SIGTERM);
        }
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: as above; whatever is left of the group.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Which local AWS to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmulatorKind {
    /// moto server: every service resq's template uses, CloudFormation with Lambda functions;
    /// its SQS slows down with queue depth and its CloudWatch never evaluates an alarm.
    Moto,
    /// LocalStack: SQS that stays fast at depth, CloudWatch that evaluates alarms, SNS;
    /// CloudFormation without Lambda functions (they need Docker), so the stack is deployed
    /// without them ([`crate::stack::without_functions`]).
    Localstack,
}

impl std::fmt::Display for EmulatorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Moto => "moto",
            Self::Localstack => "localstack",
        })
    }
}

/// Where each emulator is installed (`make` puts them in `.venv` and `.venv-localstack`).
#[derive(Debug, Clone)]
pub struct Installs {
    /// moto's `moto_server`.
    pub moto_server: std::path::PathBuf,
    /// LocalStack's Python (its venv's interpreter).
    pub localstack_python: std::path::PathBuf,
}

/// A running local AWS; stopped when dropped.
pub enum Emulator {
    /// moto server.
    Moto(MotoServer),
    /// LocalStack.
    LocalStack(LocalStack),
}

impl Emulator {
    /// Starts the emulator of `kind` and waits until it answers.
    pub fn start(kind: EmulatorKind, installs: &Installs) -> Result<Self, CliError> {
        Ok(match kind {
            EmulatorKind::Moto => Self::Moto(MotoServer::start(&installs.moto_server)?),
            EmulatorKind::Localstack => {
                Self::LocalStack(LocalStack::start(&installs.localstack_python)?)
            }
        })
    }

    /// Which one this is.
    pub fn kind(&self) -> EmulatorKind {
        match self {
            Self::Moto(_) => EmulatorKind::Moto,
            Self::LocalStack(_) => EmulatorKind::Localstack,
        }
    }

    /// `http://127.0.0.1:{port}`.
    pub fn endpoint(&self) -> &str {
        match self {
            Self::Moto(m) => &m.endpoint,
            Self::LocalStack(l) => &l.endpoint,
        }
    }

    /// The SDK configuration for it (region us-east-1, dummy credentials).
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        local_sdk_config(self.endpoint()).await
    }
}
