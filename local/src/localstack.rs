//! LocalStack (a second local AWS) run as a child process on 127.0.0.1, on a free port,
//! without Docker: SQS, S3, CloudWatch (which really evaluates alarms from metric data, where
//! moto never does), SNS and CloudFormation. Started from its own Python 3.13 venv
//! (`make` installs `.venv-localstack` from `requirements-localstack.txt`); the process group
//! is stopped when the handle drops, and by the kernel if this process dies.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::CliError;

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
        let port = crate::emulator::free_port()?;
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
            if crate::emulator::http_ok(port, "/_localstack/health") {
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
        crate::emulator::local_sdk_config(&self.endpoint).await
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
