//! An in-memory [`QueuePort`] for tests and benchmarks; can be told to fail.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::queues::{OutgoingMessage, QueueError, QueuePort, VisibilityChange};

/// Records what the consumer sends and changes.
#[derive(Debug, Default)]
pub struct MemoryQueues {
    sent: Mutex<Vec<OutgoingMessage>>,
    changes: Mutex<Vec<VisibilityChange>>,
    fail_send: AtomicBool,
    fail_visibility: AtomicBool,
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
}

impl QueuePort for MemoryQueues {
    async fn send_to_dlq(&self, message: OutgoingMessage) -> Result<(), QueueError> {
        if self.fail_send.load(Ordering::SeqCst) {
            return Err(QueueError {
                code: Some("InternalError".into()),
                message: "injected DLQ send failure".into(),
            });
        }
        self.sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
        Ok(())
    }

    async fn change_visibility(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> Vec<(VisibilityChange, String)> {
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
        message: OutgoingMessage,
    ) -> impl Future<Output = Result<(), QueueError>> + Send {
        (**self).send_to_dlq(message)
    }

    fn change_visibility(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> impl Future<Output = Vec<(VisibilityChange, String)>> + Send {
        (**self).change_visibility(changes)
    }
}
