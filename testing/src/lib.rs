//! In-memory doubles of resq's ports, for tests and benchmarks: an SQS that keeps its
//! visibility rules ([`MemorySqs`]), an object store ([`MemoryStore`]) and a capture of the
//! JSON log lines resq writes ([`CapturedLogs`]). Each can be told to fail or to be slow. The
//! shipped functions carry none of it: in a team's crate, `resq-testing` goes under
//! `[dev-dependencies]`.
//!
//! ```
//! use resq::store::{ObjectStore, PutOutcome};
//! use resq_testing::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = MemoryStore::default();
//! let first = store.put_if_absent("payments/p-1.json", b"{}".to_vec()).await;
//! let again = store.put_if_absent("payments/p-1.json", b"{}".to_vec()).await;
//! assert_eq!(first.ok(), Some(PutOutcome::Created));
//! assert_eq!(again.ok(), Some(PutOutcome::AlreadyExists), "written once, never overwritten");
//!
//! // a store that fails, as S3 may: the caller must retry, never drop
//! store.set_failing(true);
//! assert!(store.get("payments/p-1.json").await.is_err());
//! # }
//! ```
#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use resq::error::AwsError;
use resq::mapping::{EventSourceMappings, Mapping, MappingState};
use resq::payload::{Payload, Pointer};
use resq::sqs::MAX_VISIBILITY_TIMEOUT;
use resq::sqs::{OutgoingMessage, Queues, ReceivedMessage};
use resq::store::{ObjectStore, PutOutcome};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One SQS call, for injecting faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// `ReceiveMessage`.
    Receive,
    /// `SendMessageBatch`.
    Send,
    /// `DeleteMessageBatch`.
    Delete,
    /// `ChangeMessageVisibilityBatch`.
    ChangeVisibility,
}

type SendFault = Box<dyn Fn(&OutgoingMessage) -> bool + Send + Sync>;
type ReceiptFault = Box<dyn Fn(&str) -> bool + Send + Sync>;

struct Stored {
    message: ReceivedMessage,
    visible_at: Instant,
    received_at: Option<Instant>,
    receives: u32,
    /// Handed out a second time while in flight ([`MemorySqs::deliver_twice`]).
    delivered_twice: bool,
}

#[derive(Default)]
struct State {
    queues: BTreeMap<String, VecDeque<Stored>>,
    offset: Duration,
    seq: u64,
    handed_out: HashSet<String>,
    sent: Vec<(String, OutgoingMessage)>,
    send_calls: Vec<(String, Vec<OutgoingMessage>)>,
    changes: Vec<(String, String, i32)>,
    deleted: Vec<(String, String)>,
    failing: HashSet<Call>,
    fail_send: Option<SendFault>,
    fail_delete: Option<ReceiptFault>,
    in_flight_quota: Option<usize>,
    deliver_twice: bool,
    /// Calls of a kind that time out (the SDK's operation timeout) without being carried out.
    time_outs: HashMap<Call, usize>,
    /// What `GetQueueAttributes` answers per queue (SQS's defaults when not set).
    limits: HashMap<String, Result<resq::sqs::QueueLimits, String>>,
    /// `GetQueueAttributes` calls made.
    limits_read: u64,
}

/// SQS in memory: queues by URL, oldest message first, each receive handing out a new receipt
/// handle and hiding the message for its visibility timeout (at most 12 h from the receive),
/// an old receipt handle no longer valid; a FIFO queue (`.fifo`) hands out nothing of a message
/// group while one of its messages is in flight. A receipt handle the double never handed out (a
/// test's own event) is taken at its word: its change or delete succeeds and is recorded. Time
/// is the machine's clock plus an offset a test moves ([`MemorySqs::advance`]).
#[derive(Default)]
pub struct MemorySqs {
    state: Mutex<State>,
    delay: Mutex<Duration>,
    calls: AtomicU64,
    /// Calls under way now, and the most at once.
    concurrent: Mutex<(u64, u64)>,
}

impl MemorySqs {
    /// The double's clock.
    pub fn now(&self) -> Instant {
        Instant::now() + lock(&self.state).offset
    }

    /// Moves the clock forward (hidden messages whose timeout passed become visible).
    pub fn advance(&self, by: Duration) {
        lock(&self.state).offset += by;
    }

    /// Puts a message at the back of `queue`, visible (its receipt handle is ignored).
    pub fn push(&self, queue: &str, message: ReceivedMessage) {
        let now = self.now();
        lock(&self.state)
            .queues
            .entry(queue.to_owned())
            .or_default()
            .push_back(Stored {
                message,
                visible_at: now,
                received_at: None,
                receives: 0,
                delivered_twice: false,
            });
    }

    /// Messages in `queue`, visible or not.
    pub fn len(&self, queue: &str) -> usize {
        lock(&self.state).queues.get(queue).map_or(0, VecDeque::len)
    }

    /// `queue` holds nothing.
    pub fn is_empty(&self, queue: &str) -> bool {
        self.len(queue) == 0
    }

    /// Messages in `queue` visible now.
    pub fn visible(&self, queue: &str) -> usize {
        let now = self.now();
        let state = lock(&self.state);
        let queue = state.queues.get(queue);
        queue.map_or(0, |q| q.iter().filter(|s| s.visible_at <= now).count())
    }

    /// Ids of `queue`'s messages, oldest first.
    pub fn ids(&self, queue: &str) -> Vec<String> {
        let state = lock(&self.state);
        let queue = state.queues.get(queue).into_iter().flatten();
        queue.map(|s| s.message.message_id.clone()).collect()
    }

    /// Copies SQS took for `queue`, in order.
    pub fn sent(&self, queue: &str) -> Vec<OutgoingMessage> {
        let state = lock(&self.state);
        let sent = state.sent.iter().filter(|(q, _)| q == queue);
        sent.map(|(_, m)| m.clone()).collect()
    }

    /// Every `SendMessageBatch` call to `queue` that SQS answered: the entries it carried.
    pub fn send_calls(&self, queue: &str) -> Vec<Vec<OutgoingMessage>> {
        let state = lock(&self.state);
        let calls = state.send_calls.iter().filter(|(q, _)| q == queue);
        calls.map(|(_, entries)| entries.clone()).collect()
    }

    /// Visibility changes SQS took in `queue`: (receipt handle, seconds), in order.
    pub fn changes(&self, queue: &str) -> Vec<(String, i32)> {
        let state = lock(&self.state);
        let changes = state.changes.iter().filter(|(q, _, _)| q == queue);
        changes.map(|(_, r, s)| (r.clone(), *s)).collect()
    }

    /// Receipt handles deleted from `queue`, in order.
    pub fn deleted(&self, queue: &str) -> Vec<String> {
        let state = lock(&self.state);
        let deleted = state.deleted.iter().filter(|(q, _)| q == queue);
        deleted.map(|(_, r)| r.clone()).collect()
    }

    /// Calls made so far (each batch call counts once).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Makes every `call` fail as a whole (`true`) or work again (`false`).
    pub fn fail_calls(&self, call: Call, failing: bool) {
        let mut state = lock(&self.state);
        if failing {
            state.failing.insert(call);
        } else {
            state.failing.remove(&call);
        }
    }

    /// Makes the next `n` calls of `call` time out (as the SDK's operation timeout reports it:
    /// no answer, so not known to have been carried out; here they are not).
    pub fn time_out_calls(&self, call: Call, n: usize) {
        lock(&self.state).time_outs.insert(call, n);
    }

    /// Makes the sent entries matching `fault` fail, as SQS reports a failed entry.
    pub fn fail_sends(&self, fault: impl Fn(&OutgoingMessage) -> bool + Send + Sync + 'static) {
        lock(&self.state).fail_send = Some(Box::new(fault));
    }

    /// Makes the deletes of receipt handles matching `fault` fail, as SQS reports a failed
    /// entry.
    pub fn fail_deletes(&self, fault: impl Fn(&str) -> bool + Send + Sync + 'static) {
        lock(&self.state).fail_delete = Some(Box::new(fault));
    }

    /// Like SQS past its in-flight quota (about 120,000 in a standard queue), receives answer
    /// nothing, with no error, while `quota` messages or more of the queue are in flight.
    pub fn set_in_flight_quota(&self, quota: usize) {
        lock(&self.state).in_flight_quota = Some(quota);
    }

    /// Like a standard queue's at-least-once delivery (two receives at once may be handed the
    /// same message): a receive first hands out, once each, messages already in flight, with
    /// the receipt handle they have (a standard queue only).
    pub fn deliver_twice(&self, on: bool) {
        lock(&self.state).deliver_twice = on;
    }

    /// Messages of `queue` in flight (hidden) now.
    pub fn in_flight(&self, queue: &str) -> usize {
        self.len(queue) - self.visible(queue)
    }

    /// The most calls the double had under way at once.
    pub fn peak_concurrent_calls(&self) -> u64 {
        lock(&self.concurrent).1
    }

    /// Makes every call take this long before it answers (a slow SQS).
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.delay) = delay;
    }

    /// Counts the call, waits the delay, and says whether it fails as a whole.
    async fn call(&self, call: Call) -> Result<(), AwsError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        {
            let mut c = lock(&self.concurrent);
            c.0 += 1;
            c.1 = c.1.max(c.0);
        }
        let delay = *lock(&self.delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        lock(&self.concurrent).0 -= 1;
        let mut state = lock(&self.state);
        if state.failing.contains(&call) {
            return Err(AwsError::service(
                "InternalError",
                "InternalError: injected",
            ));
        }
        if let Some(left) = state.time_outs.get_mut(&call).filter(|n| **n > 0) {
            *left -= 1;
            return Err(AwsError {
                code: None,
                message: "operation timed out: injected".into(),
                kind: resq::error::AwsErrorKind::Timeout,
            });
        }
        Ok(())
    }
}

fn entry_error(code: &str) -> AwsError {
    AwsError::service(code, format!("{code}: injected"))
}

impl State {
    /// The stored message whose current receipt handle is `receipt`, in flight at `now`.
    fn in_flight(&mut self, queue: &str, receipt: &str, now: Instant) -> Option<&mut Stored> {
        let queue = self.queues.get_mut(queue)?;
        queue
            .iter_mut()
            .find(|s| s.message.receipt_handle == receipt && s.visible_at > now)
    }

    fn receive(
        &mut self,
        queue: &str,
        max: usize,
        hide: Duration,
        now: Instant,
    ) -> Vec<ReceivedMessage> {
        let mut out = Vec::new();
        let fifo = resq::sqs::is_fifo(queue);
        let quota = self.in_flight_quota;
        let stored = self.queues.entry(queue.to_owned()).or_default();
        // past its in-flight quota SQS answers a receive with nothing, and no error
        if quota.is_some_and(|q| stored.iter().filter(|s| s.visible_at > now).count() >= q) {
            return out;
        }
        if self.deliver_twice && !fifo {
            let again = stored
                .iter_mut()
                .filter(|s| s.visible_at > now && s.received_at.is_some() && !s.delivered_twice);
            for s in again.take(max) {
                s.delivered_twice = true;
                out.push(s.message.clone());
            }
            if !out.is_empty() {
                return out;
            }
        }
        // A FIFO queue hands out nothing of a group while a message of it is in flight.
        let mut locked = HashSet::new();
        let mut ready = Vec::new();
        for (i, s) in stored.iter().enumerate() {
            let group = s.message.group_id().filter(|_| fifo).map(str::to_owned);
            match (s.visible_at <= now, group) {
                (false, Some(g)) => {
                    locked.insert(g);
                }
                (true, Some(g)) if locked.contains(&g) => {}
                (true, _) => ready.push(i),
                (false, None) => {}
            }
        }
        for i in ready.into_iter().take(max) {
            let s = &mut stored[i];
            self.seq += 1;
            s.receives += 1;
            s.visible_at = now + hide;
            s.received_at = Some(now);
            s.message.receipt_handle = format!("rh-{}-{}", s.message.message_id, self.seq);
            let receives = s.receives.to_string();
            s.message
                .attributes
                .insert("ApproximateReceiveCount".into(), receives);
            self.handed_out.insert(s.message.receipt_handle.clone());
            out.push(s.message.clone());
        }
        out
    }

    fn send(&mut self, queue: &str, m: &OutgoingMessage, now: Instant) -> Result<String, AwsError> {
        if self.fail_send.as_ref().is_some_and(|f| f(m)) {
            return Err(entry_error("InternalError"));
        }
        self.seq += 1;
        let message_id = format!("m-{}", self.seq);
        let sent_ms = chrono::Utc::now().timestamp_millis().to_string();
        let mut attributes = BTreeMap::from([("SentTimestamp".to_owned(), sent_ms)]);
        if let Some(g) = &m.group_id {
            attributes.insert("MessageGroupId".into(), g.clone());
        }
        self.sent.push((queue.to_owned(), m.clone()));
        self.queues
            .entry(queue.to_owned())
            .or_default()
            .push_back(Stored {
                message: ReceivedMessage {
                    message_id: message_id.clone(),
                    receipt_handle: String::new(),
                    body: m.body.clone(),
                    attributes,
                    message_attributes: m.attributes.clone(),
                    dropped_attributes: Vec::new(),
                },
                visible_at: now,
                received_at: None,
                receives: 0,
                delivered_twice: false,
            });
        Ok(message_id)
    }

    fn delete(&mut self, queue: &str, receipt: &str) -> Result<(), AwsError> {
        if self.fail_delete.as_ref().is_some_and(|f| f(receipt)) {
            return Err(entry_error("InternalError"));
        }
        let handed_out = self.handed_out.contains(receipt);
        let stored = self.queues.entry(queue.to_owned()).or_default();
        match stored
            .iter()
            .position(|s| s.message.receipt_handle == receipt)
        {
            Some(i) => {
                stored.remove(i);
            }
            None if handed_out => return Err(entry_error("ReceiptHandleIsInvalid")),
            None => {}
        }
        self.deleted.push((queue.to_owned(), receipt.to_owned()));
        Ok(())
    }

    fn change(
        &mut self,
        queue: &str,
        receipt: &str,
        seconds: i32,
        now: Instant,
    ) -> Result<(), AwsError> {
        let handed_out = self.handed_out.contains(receipt);
        let to = Duration::from_secs(seconds.max(0) as u64);
        match self.in_flight(queue, receipt, now) {
            Some(s) => {
                let held = now.saturating_duration_since(s.received_at.unwrap_or(now));
                if held + to > MAX_VISIBILITY_TIMEOUT {
                    return Err(AwsError::service(
                        "InvalidParameterValue",
                        "InvalidParameterValue: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]",
                    ));
                }
                s.visible_at = now + to;
            }
            None if handed_out => return Err(entry_error("MessageNotInflight")),
            None => {}
        }
        self.changes
            .push((queue.to_owned(), receipt.to_owned(), seconds));
        Ok(())
    }
}

impl MemorySqs {
    /// What `GetQueueAttributes` answers for `queue` from now on: these limits, or this error.
    pub fn set_limits(&self, queue: &str, limits: Result<resq::sqs::QueueLimits, String>) {
        lock(&self.state).limits.insert(queue.to_owned(), limits);
    }

    /// `GetQueueAttributes` calls so far (not counted in [`MemorySqs::calls`]).
    pub fn limits_read(&self) -> u64 {
        lock(&self.state).limits_read
    }
}

impl Queues for MemorySqs {
    async fn limits(&self, queue: &str) -> Result<resq::sqs::QueueLimits, AwsError> {
        let visible = self.visible(queue) as u64;
        let mut state = lock(&self.state);
        state.limits_read += 1;
        let limits = match state.limits.get(queue) {
            None => Ok(resq::sqs::QueueLimits::sqs_defaults()),
            Some(Ok(limits)) => Ok(limits.clone()),
            Some(Err(e)) => Err(AwsError::service("AccessDenied", e.clone())),
        };
        // as GetQueueAttributes answers: the depth of the moment beside the settings
        limits.map(|l| resq::sqs::QueueLimits {
            visible: Some(visible),
            ..l
        })
    }

    async fn receive(
        &self,
        queue: &str,
        max: i32,
        visibility: Option<i32>,
        _wait_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, AwsError> {
        self.call(Call::Receive).await?;
        let now = self.now();
        let hide = Duration::from_secs(visibility.unwrap_or(30).max(0) as u64);
        let max = max.clamp(1, resq::sqs::MAX_BATCH as i32) as usize;
        Ok(lock(&self.state).receive(queue, max, hide, now))
    }

    async fn send(
        &self,
        queue: &str,
        messages: &[&OutgoingMessage],
    ) -> Result<Vec<Result<String, AwsError>>, AwsError> {
        self.call(Call::Send).await?;
        let now = self.now();
        let mut state = lock(&self.state);
        let entries = messages.iter().map(|m| (*m).clone()).collect();
        state.send_calls.push((queue.to_owned(), entries));
        Ok(messages.iter().map(|m| state.send(queue, m, now)).collect())
    }

    async fn delete(
        &self,
        queue: &str,
        receipt_handles: &[&str],
    ) -> Result<Vec<Result<(), AwsError>>, AwsError> {
        self.call(Call::Delete).await?;
        let mut state = lock(&self.state);
        Ok(receipt_handles
            .iter()
            .map(|r| state.delete(queue, r))
            .collect())
    }

    async fn change_visibility(
        &self,
        queue: &str,
        changes: &[(&str, i32)],
    ) -> Result<Vec<Result<(), AwsError>>, AwsError> {
        self.call(Call::ChangeVisibility).await?;
        let now = self.now();
        let mut state = lock(&self.state);
        let results = changes.iter().map(|(r, s)| state.change(queue, r, *s, now));
        Ok(results.collect())
    }
}

/// An in-memory [`ObjectStore`]; can be told to fail.
#[derive(Debug, Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    failing: AtomicBool,
    puts: AtomicU64,
    delay: Mutex<Duration>,
}

impl MemoryStore {
    /// Makes every following call fail (`true`) or succeed again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// A copy of the stored objects.
    pub fn objects(&self) -> BTreeMap<String, Vec<u8>> {
        lock(&self.objects).clone()
    }

    /// Keys stored under `prefix`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let objects = lock(&self.objects);
        let keys = objects.keys().filter(|k| k.starts_with(prefix));
        keys.cloned().collect()
    }

    /// Makes every put take this long before it answers (a slow S3).
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.delay) = delay;
    }

    fn check(&self, what: &str) -> Result<(), AwsError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(AwsError::service(
                "InternalError",
                format!("{what}: injected failure"),
            ));
        }
        Ok(())
    }
}

/// The bucket a [`MemoryStore`] says it is.
pub const MEMORY_BUCKET: &str = "memory-bucket";

impl ObjectStore for MemoryStore {
    fn bucket(&self) -> &str {
        MEMORY_BUCKET
    }

    /// A pointer into [`MEMORY_BUCKET`] reads from this store; one into any other bucket
    /// finds nothing.
    async fn payload(&self, pointer: &Pointer) -> Result<Payload, AwsError> {
        self.check(&pointer.key)?;
        let object = (pointer.bucket == MEMORY_BUCKET)
            .then(|| lock(&self.objects).get(&pointer.key).cloned())
            .flatten();
        Ok(object.map_or(Payload::Missing, Payload::Found))
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, AwsError> {
        self.check(key)?;
        Ok(lock(&self.objects).get(key).cloned())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, AwsError> {
        self.check(prefix)?;
        Ok(self.keys(prefix))
    }

    async fn put_if_absent(&self, key: &str, body: Vec<u8>) -> Result<PutOutcome, AwsError> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        let delay = *lock(&self.delay);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.check(key)?;
        let mut objects = lock(&self.objects);
        if objects.contains_key(key) {
            return Ok(PutOutcome::AlreadyExists);
        }
        objects.insert(key.to_owned(), body);
        Ok(PutOutcome::Created)
    }
}

/// An event source mapping in memory ([`EventSourceMappings`]): it switches at once, counts
/// the switches, and can be told to fail (as Lambda's API may).
#[derive(Debug)]
pub struct MemoryMapping {
    uuid: String,
    state: Mutex<MappingState>,
    switches: Mutex<Vec<bool>>,
    failing: AtomicBool,
}

impl MemoryMapping {
    /// The mapping `uuid`, enabled.
    pub fn new(uuid: &str) -> Self {
        Self {
            uuid: uuid.to_owned(),
            state: Mutex::new(MappingState::Enabled),
            switches: Mutex::new(Vec::new()),
            failing: AtomicBool::new(false),
        }
    }

    /// Sets its state, as an operator or Lambda would (not counted as a switch).
    pub fn set_state(&self, state: MappingState) {
        *lock(&self.state) = state;
    }

    /// Its state now.
    pub fn state(&self) -> MappingState {
        lock(&self.state).clone()
    }

    /// Every switch asked for through the port (`true`: enable), in order.
    pub fn switches(&self) -> Vec<bool> {
        lock(&self.switches).clone()
    }

    /// Every call fails (`true`) or none does.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    fn check(&self, uuid: &str) -> Result<(), AwsError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(AwsError::local("injected Lambda failure"));
        }
        if uuid != self.uuid {
            return Err(AwsError {
                code: Some("ResourceNotFoundException".into()),
                message: format!("no event source mapping {uuid}"),
                kind: resq::error::AwsErrorKind::Service,
            });
        }
        Ok(())
    }

    fn mapping(&self) -> Mapping {
        Mapping {
            uuid: self.uuid.clone(),
            state: self.state(),
            event_source_arn: None,
            function_arn: None,
        }
    }
}

impl EventSourceMappings for MemoryMapping {
    async fn get(&self, uuid: &str) -> Result<Mapping, AwsError> {
        self.check(uuid)?;
        Ok(self.mapping())
    }

    async fn set_enabled(&self, uuid: &str, enabled: bool) -> Result<Mapping, AwsError> {
        self.check(uuid)?;
        lock(&self.switches).push(enabled);
        self.set_state(match enabled {
            true => MappingState::Enabled,
            false => MappingState::Disabled,
        });
        Ok(self.mapping())
    }
}

/// A log sink for tests: the JSON lines `resq::telemetry::json_layer` writes, kept in
/// memory while the returned guard is the thread's default subscriber.
#[derive(Clone, Default)]
pub struct CapturedLogs(std::sync::Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Captures the lines of the current thread (at every level) until the guard drops, as a
    /// function of resq's orders names logs them ([`resq::telemetry::Names::ORDERS`],
    /// function `test-function`, 256 MB).
    pub fn start() -> (Self, tracing::subscriber::DefaultGuard) {
        let orders = resq::telemetry::Telemetry::of(
            resq::telemetry::Names::ORDERS,
            "test-function",
            Some(256),
        );
        match orders {
            Ok(t) => Self::start_for(&t),
            Err(e) => panic!("resq's own names are refused: {e}"),
        }
    }

    /// Captures the lines of the current thread, as a function with `telemetry` logs them.
    pub fn start_for(
        telemetry: &resq::telemetry::Telemetry,
    ) -> (Self, tracing::subscriber::DefaultGuard) {
        use tracing_subscriber::prelude::*;
        // tracing caches each callsite's interest process-wide, computed by the first thread to
        // reach it: a test thread without a subscriber would cache `never` and blind every
        // capture of that line. A global registry, which keeps nothing, holds every callsite
        // open; each capturing thread still gets its own lines.
        static CALLSITES_OPEN: std::sync::Once = std::sync::Once::new();
        CALLSITES_OPEN.call_once(|| {
            let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
        });
        let logs = Self::default();
        let sink = logs.clone();
        let subscriber = tracing_subscriber::registry()
            .with(resq::telemetry::json_layer(telemetry, move || sink.clone()));
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// Every line so far, as written.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }

    /// Every line so far, parsed.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        let text = String::from_utf8_lossy(&lock(&self.0)).into_owned();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The lines whose `message` is `message`.
    pub fn with_message(&self, message: &str) -> Vec<serde_json::Value> {
        let lines = self.lines().into_iter();
        lines.filter(|l| l["message"] == message).collect()
    }

    /// The first line whose `message` is `message`.
    pub fn line(&self, message: &str) -> serde_json::Value {
        let lines = self.lines();
        lines
            .iter()
            .find(|l| l["message"] == message)
            .cloned()
            .unwrap_or_else(|| panic!("no line {message:?} in {lines:?}"))
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Variables from `pairs`, as a function reads its environment: for tests of a configuration.
pub fn vars(pairs: &[(&str, &str)]) -> resq::config::Vars<impl Fn(&str) -> Option<String>> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    resq::config::Vars(move |k: &str| map.get(k).cloned())
}

/// The variables both functions require, on a local endpoint.
pub const REQUIRED_VARS: [(&str, &str); 3] = [
    (
        "MAIN_QUEUE_URL",
        "http://127.0.0.1:5000/123456789012/orders",
    ),
    ("DLQ_URL", "http://127.0.0.1:5000/123456789012/orders-dlq"),
    ("ARCHIVE_BUCKET", "resq-archive"),
];

/// A message as a receive hands it over: `id` with `body`, sent at `sent_ms` (epoch millis),
/// with these message attributes.
pub fn received(
    id: &str,
    body: &str,
    sent_ms: u64,
    attrs: &[(&str, resq::attributes::AttributeValue)],
) -> ReceivedMessage {
    ReceivedMessage {
        message_id: id.into(),
        receipt_handle: String::new(),
        body: body.into(),
        attributes: BTreeMap::from([("SentTimestamp".into(), sent_ms.to_string())]),
        message_attributes: attrs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        dropped_attributes: vec![],
    }
}
