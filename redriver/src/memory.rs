//! In-memory doubles of the redriver's ports, for unit tests and benchmarks: a DLQ that keeps
//! SQS's visibility rules (receipt handles, the 12 h limit counted from the receive, oldest
//! first), a main queue that records what was sent, and alarms whose states a test sets. Time
//! is the machine's clock plus an offset a test can move forward ([`MemoryDlq::advance`]).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use resq::backoff::MAX_VISIBILITY_TIMEOUT;

use crate::classify::{DlqMessage, RedriveCopy};
use crate::ports::{AlarmState, Alarms, PortError, Receipt, RedriveQueues};

type SendFault = Box<dyn Fn(&RedriveCopy) -> bool + Send + Sync>;

struct Stored {
    message: DlqMessage,
    visible_at: Instant,
    received_at: Option<Instant>,
    receipt: Option<String>,
    receives: u32,
}

/// A DLQ and its main queue, in memory.
#[derive(Default)]
pub struct MemoryDlq {
    dlq: Mutex<VecDeque<Stored>>,
    main: Mutex<Vec<RedriveCopy>>,
    offset: Mutex<Duration>,
    seq: Mutex<u64>,
    fail_send: Mutex<Option<SendFault>>,
    delay: Mutex<Duration>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MemoryDlq {
    /// The double's clock.
    pub fn now(&self) -> Instant {
        Instant::now() + *lock(&self.offset)
    }

    /// Moves the clock forward (hidden messages whose timeout passed become visible).
    pub fn advance(&self, by: Duration) {
        *lock(&self.offset) += by;
    }

    /// Puts a message at the back of the DLQ, visible (its receipt handle is ignored).
    pub fn push(&self, message: DlqMessage) {
        let now = self.now();
        lock(&self.dlq).push_back(Stored {
            message,
            visible_at: now,
            received_at: None,
            receipt: None,
            receives: 0,
        });
    }

    /// Messages in the DLQ (visible or not).
    pub fn len(&self) -> usize {
        lock(&self.dlq).len()
    }

    /// The DLQ is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages in the DLQ visible now.
    pub fn visible(&self) -> usize {
        let now = self.now();
        lock(&self.dlq)
            .iter()
            .filter(|s| s.visible_at <= now)
            .count()
    }

    /// Ids of the DLQ's messages, oldest first.
    pub fn ids(&self) -> Vec<String> {
        lock(&self.dlq)
            .iter()
            .map(|s| s.message.message_id.clone())
            .collect()
    }

    /// Copies sent to the main queue so far.
    pub fn main(&self) -> Vec<RedriveCopy> {
        lock(&self.main).clone()
    }

    /// Makes sends of copies matching `fault` fail (per entry, as SQS reports a failed entry).
    pub fn fail_sends(&self, fault: impl Fn(&RedriveCopy) -> bool + Send + Sync + 'static) {
        *lock(&self.fail_send) = Some(Box::new(fault));
    }

    /// Makes every call take this long (a slow SQS).
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.delay) = delay;
    }

    async fn wait(&self) {
        let delay = *lock(&self.delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
}

impl RedriveQueues for MemoryDlq {
    async fn receive(
        &self,
        max: i32,
        visibility: i32,
        _wait_seconds: i32,
    ) -> Result<Vec<DlqMessage>, PortError> {
        self.wait().await;
        let now = self.now();
        let mut out = Vec::new();
        let mut dlq = lock(&self.dlq);
        for s in dlq.iter_mut() {
            if out.len() >= max.clamp(1, 10) as usize {
                break;
            }
            if s.visible_at > now {
                continue;
            }
            let mut seq = lock(&self.seq);
            *seq += 1;
            let receipt = format!("rh-{}-{}", s.message.message_id, *seq);
            s.receives += 1;
            s.visible_at = now + Duration::from_secs(visibility.max(0) as u64);
            s.received_at = Some(now);
            s.receipt = Some(receipt.clone());
            let mut m = s.message.clone();
            m.receipt_handle = receipt;
            m.attributes
                .insert("ApproximateReceiveCount".into(), s.receives.to_string());
            out.push(m);
        }
        Ok(out)
    }

    async fn send_batch(&self, copies: &[&RedriveCopy]) -> Result<Vec<Option<String>>, PortError> {
        self.wait().await;
        let fault = lock(&self.fail_send);
        let mut main = lock(&self.main);
        Ok(copies
            .iter()
            .map(|c| {
                if fault.as_ref().is_some_and(|f| f(c)) {
                    Some("InternalError: injected".to_owned())
                } else {
                    main.push((*c).clone());
                    None
                }
            })
            .collect())
    }

    async fn delete(&self, receipts: Vec<Receipt>) -> Vec<(Receipt, String)> {
        self.wait().await;
        let mut dlq = lock(&self.dlq);
        let mut failed = Vec::new();
        for r in receipts {
            match dlq
                .iter()
                .position(|s| s.receipt.as_deref() == Some(r.1.as_str()))
            {
                Some(i) => {
                    dlq.remove(i);
                }
                None => failed.push((r, "ReceiptHandleIsInvalid".to_owned())),
            }
        }
        failed
    }

    async fn change_visibility(&self, changes: Vec<(Receipt, i32)>) -> Vec<(Receipt, String)> {
        self.wait().await;
        let now = self.now();
        let mut dlq = lock(&self.dlq);
        let mut failed = Vec::new();
        for (r, timeout) in changes {
            let Some(s) = dlq
                .iter_mut()
                .find(|s| s.receipt.as_deref() == Some(r.1.as_str()) && s.visible_at > now)
            else {
                failed.push((r, "MessageNotInflight".to_owned()));
                continue;
            };
            let held = now.saturating_duration_since(s.received_at.unwrap_or(now));
            let total = held + Duration::from_secs(timeout.max(0) as u64);
            if total > MAX_VISIBILITY_TIMEOUT {
                failed.push((
                    r,
                    "InvalidParameterValue: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]".to_owned(),
                ));
                continue;
            }
            s.visible_at = now + Duration::from_secs(timeout.max(0) as u64);
        }
        failed
    }
}

/// Alarm states a test sets. An alarm not set does not exist.
#[derive(Debug)]
pub struct FixedAlarms {
    state: Mutex<Result<Vec<AlarmState>, PortError>>,
    reads: Mutex<u64>,
}

impl Default for FixedAlarms {
    fn default() -> Self {
        Self {
            state: Mutex::new(Ok(Vec::new())),
            reads: Mutex::default(),
        }
    }
}

impl FixedAlarms {
    /// Sets one alarm: in `ALARM` or not (then it left `ALARM`), its last change `changed_ago`
    /// before now, its threshold per 60 s period, held 15 periods.
    pub fn set(&self, name: &str, in_alarm: bool, changed_ago: Duration, threshold: f64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let state = AlarmState {
            name: name.to_owned(),
            in_alarm,
            changed_at_ms: Some(now.saturating_sub(changed_ago).as_millis() as u64),
            period: Some(Duration::from_secs(60)),
            evaluation_periods: Some(15),
            threshold: Some(threshold),
            left_alarm: Some(!in_alarm),
        };
        let mut all = lock(&self.state);
        let mut list = all.as_ref().cloned().unwrap_or_default();
        list.retain(|s| s.name != name);
        list.push(state);
        *all = Ok(list);
    }

    /// How often the states were read.
    pub fn reads(&self) -> u64 {
        *lock(&self.reads)
    }
}

impl Alarms for FixedAlarms {
    async fn states(&self, names: &[String]) -> Result<Vec<AlarmState>, PortError> {
        *lock(&self.reads) += 1;
        lock(&self.state).clone().map(|all| {
            all.into_iter()
                .filter(|s| names.contains(&s.name))
                .collect()
        })
    }
}

impl<T: RedriveQueues> RedriveQueues for &T {
    fn receive(
        &self,
        max: i32,
        visibility: i32,
        wait_seconds: i32,
    ) -> impl std::future::Future<Output = Result<Vec<DlqMessage>, PortError>> + Send {
        (**self).receive(max, visibility, wait_seconds)
    }

    fn send_batch(
        &self,
        copies: &[&RedriveCopy],
    ) -> impl std::future::Future<Output = Result<Vec<Option<String>>, PortError>> + Send {
        (**self).send_batch(copies)
    }

    fn delete(
        &self,
        receipts: Vec<Receipt>,
    ) -> impl std::future::Future<Output = Vec<(Receipt, String)>> + Send {
        (**self).delete(receipts)
    }

    fn change_visibility(
        &self,
        changes: Vec<(Receipt, i32)>,
    ) -> impl std::future::Future<Output = Vec<(Receipt, String)>> + Send {
        (**self).change_visibility(changes)
    }
}

impl<T: Alarms> Alarms for &T {
    fn states(
        &self,
        names: &[String],
    ) -> impl std::future::Future<Output = Result<Vec<AlarmState>, PortError>> + Send {
        (**self).states(names)
    }
}
