//! Log lines as the functions write them in Lambda, captured for tests: JSON, the event's
//! fields flattened to the top level, the current span under `span` (the layer
//! [`crate::telemetry::init_tracing`] installs for `AWS_LAMBDA_LOG_FORMAT=JSON`), every level.
//! Behind the `test-util` feature, like [`crate::testing`].

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::filter::LevelFilter;

/// Captures the lines logged on this thread while it lives (a `#[tokio::test]` runs on one
/// thread).
pub struct LogCapture {
    written: Arc<Mutex<Vec<u8>>>,
    _guard: DefaultGuard,
}

/// A writer into the captured bytes.
#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Starts capturing.
    pub fn start() -> Self {
        let written = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(written.clone());
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_target(false)
            .with_max_level(LevelFilter::TRACE)
            .with_writer(move || sink.clone())
            .finish();
        Self {
            written,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Every line so far, as JSON (a line that is not JSON fails the test).
    pub fn lines(&self) -> Vec<Value> {
        let bytes = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The lines whose `message` is `message`.
    pub fn with_message(&self, message: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["message"] == message)
            .collect()
    }
}
