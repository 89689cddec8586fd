//! The consumer function's memory as Lambda runs it: the release `consumer` binary in a child
//! process, handed one event by a Lambda runtime API on 127.0.0.1 (the chaos run's
//! [`resq_local::chaos::runtime::Function`]), its DLQ sends answered by the stand-in SQS, its
//! JSON logs at INFO read off its output. The figure is the process's `VmHWM` once it has
//! answered: what the function's memory size must hold, runtime, SDK clients and the
//! payload's bytes included.

use std::path::Path;
use std::time::Duration;

use resq_local::chaos::runtime::{Function, Outcome};
use serde_json::Value;

use crate::fakesqs::FakeSqs;

/// Lambda's smallest and largest memory sizes, MB.
pub const LAMBDA_MEMORY_MB: (u64, u64) = (128, 10_240);

/// The largest payload Lambda hands an SQS-triggered function (an event source mapping's batch
/// is at most 6 MB).
pub const MAX_PAYLOAD_BYTES: usize = 6_000_000;

/// One invocation of the function.
#[derive(Debug, Clone, Copy)]
pub struct FunctionRun {
    /// Records in the event.
    pub records: usize,
    /// The event's size, bytes.
    pub payload_bytes: usize,
    /// Peak resident memory of the process, KiB.
    pub peak_kb: u64,
    /// Records the response reported failed.
    pub failures: usize,
}

impl FunctionRun {
    /// The smallest Lambda memory size (1 MB steps from 128 MB) that holds the peak, with
    /// `headroom` (e.g. 0.25) for what varies between invocations.
    pub fn smallest_memory_mb(&self, headroom: f64) -> u64 {
        let needed_mb = (self.peak_kb as f64 * 1024.0 * (1.0 + headroom) / 1e6).ceil() as u64;
        needed_mb.clamp(LAMBDA_MEMORY_MB.0, LAMBDA_MEMORY_MB.1)
    }
}

/// Invokes the consumer `binary` once with the event in `event_path` (a fresh process: a
/// cold start, as the first invocation of an instance is) and reads its peak memory.
pub fn consumer_peak(binary: &Path, event_path: &Path) -> Result<FunctionRun, String> {
    let event = std::fs::read_to_string(event_path)
        .map_err(|e| format!("cannot read {}: {e}", event_path.display()))?;
    let records = serde_json::from_str::<Value>(&event)
        .map_err(|e| format!("{}: {e}", event_path.display()))?["Records"]
        .as_array()
        .map_or(0, Vec::len);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let sqs = FakeSqs::start()?;
        let log =
            std::env::temp_dir().join(format!("resq-bench-function-{}.log", std::process::id()));
        // the Lambda environment the cold-start runs use, pointed at the stand-in (later
        // entries win; the runtime API is the Function's own)
        let mut env = crate::coldstart::lambda_env("resq-consumer", "");
        env.extend(
            [
                ("MAIN_QUEUE_URL", sqs.queue_url("resq-orders")),
                ("DLQ_URL", sqs.queue_url("resq-orders-dlq")),
                ("AWS_ENDPOINT_URL", sqs.endpoint.clone()),
                ("AWS_LAMBDA_LOG_LEVEL", "INFO".into()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        let mut function = Function::new("consumer", binary, env, &log, Duration::from_secs(120))
            .map_err(|e| e.to_string())?;
        let outcome = function
            .invoke(&event, None)
            .await
            .map_err(|e| e.to_string());
        let peak_kb = function.peak_rss_kb();
        function.kill().await;
        let _ = std::fs::remove_file(&log);
        let body = match outcome? {
            Outcome::Response(body) => body,
            other => return Err(format!("the consumer did not answer: {other:?}")),
        };
        let failures = serde_json::from_str::<Value>(&body)
            .map_err(|e| format!("response {body:?}: {e}"))?["batchItemFailures"]
            .as_array()
            .map_or(0, Vec::len);
        Ok(FunctionRun {
            records,
            payload_bytes: event.len(),
            peak_kb: peak_kb.ok_or("the consumer's process was gone before its memory was read")?,
            failures,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_memory_size_holds_the_peak_with_headroom() {
        let run = |peak_kb| FunctionRun {
            records: 1,
            payload_bytes: 1,
            peak_kb,
            failures: 0,
        };
        // 20 MiB peak: Lambda's floor
        assert_eq!(run(20 * 1024).smallest_memory_mb(0.25), 128);
        // 200 MiB = 209.7 MB, +25 % = 262.1 MB: 263
        assert_eq!(run(200 * 1024).smallest_memory_mb(0.25), 263);
        assert_eq!(run(200 * 1024).smallest_memory_mb(0.0), 210);
        assert_eq!(run(u64::MAX / 4096).smallest_memory_mb(0.0), 10_240);
    }
}
