//! An in-memory [`QueuePort`] for tests and benchmarks; can be told to fail or to be slow.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::queues::{OutgoingMessage, QueueError, QueuePort, VisibilityChange};

/// Records what the consumer sends and changes.
#[derive(Debug, Default)]
pub struct MemoryQueues {
    sent: Mutex<Vec<OutgoingMessage>>,
    changes: Mutex<Vec<VisibilityChange>>,
    fail_send: AtomicBool,
    fail_visibility: AtomicBool,
    delay_ms: AtomicU64,
    calls: AtomicU64,
}

impl MemoryQueues {
    /// Makes DLQ sends fail (`true`) or succeed (`false`).
    pub fn set_failing_send(&self, failing: bool) {
        self.fail_send.store(failing, Ordering::SeqCst);
    }

    /// Makes visibility changes fail (`true`) or succeed (`false`).
    pub fn set_failing_visibility(&self, failing: bool) {
        self.fail_visibility.store(failing, Ordering::SeqCst);
    }

    /// Makes every call take this long before it answers (a slow SQS).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Calls made (each `SendMessageBatch` or visibility call of up to 10 entries).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Copies sent to the DLQ.
    pub fn sent(&self) -> Vec<OutgoingMessage> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Visibility changes that succeeded.
    pub fn changes(&self) -> Vec<VisibilityChange> {
        self.changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    async fn call(&self, entries: usize) {
        self.calls.fetch_add(
            entries.div_ceil(resq::sqs::MAX_BATCH).max(1) as u64,
            Ordering::SeqCst,
        );
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
    }
}

impl QueuePort for MemoryQueues {
    async fn send_to_dlq(
        &self,
        messages: &[&OutgoingMessage],
    ) -> Result<Vec<Option<String>>, QueueError> {
        self.call(messages.len()).await;
        if self.fail_send.load(Ordering::SeqCst) {
            return Err(QueueError::service(
                "InternalError",
                "injected DLQ send failure",
            ));
        }
        self.sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(messages.iter().map(|m| (*m).clone()));
        Ok(vec![None; messages.len()])
    }

    async fn change_visibility(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> Vec<(VisibilityChange, String)> {
        self.call(changes.len()).await;
        if self.fail_visibility.load(Ordering::SeqCst) {
            return changes
                .into_iter()
                .map(|c| (c, "injected failure".to_owned()))
                .collect();
        }
        self.changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(changes);
        Vec::new()
    }
}

impl<T: QueuePort> QueuePort for &T {
    fn send_to_dlq(
        &self,
        messages: &[&OutgoingMessage],
    ) -> impl Future<Output = Result<Vec<Option<String>>, QueueError>> + Send {
        (**self).send_to_dlq(messages)
    }

    fn change_visibility(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> impl Future<Output = Vec<(VisibilityChange, String)>> + Send {
        (**self).change_visibility(changes)
    }
}
