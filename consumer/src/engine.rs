//! The batch engine (docs/design.md, "Consumer phases"): read → decide → settle → answer.
//! This file runs the handler, each record isolated (a panic or overrunning the margin is that
//! record's failure), up to `CONSUMER_CONCURRENCY` at once, FIFO groups in order, redeliveries
//! within the retry budget ([`crate::retry_budget`], held across invocations); what becomes
//! of a record is decided in [`crate::decide`], carried out in `settle` (through
//! resq's executor), and answered in [`crate::account`].
//!
//! With deadline `D` and margin `m` ([`Deadlines`]): records start until `D - m`, are abandoned
//! at `D - m/2`, and the settling calls (DLQ copies, archive entries, then the backoff of what
//! failed) stop at `D - m/8`, done or not: what was not confirmed leaves its record failed,
//! and SQS delivers it again.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::concurrency::{Carried, InFlight, Limit};
use crate::config::ConsumerConfig;
use crate::downstream::Throttling;
use crate::event::QueueArn;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use resq::correlation::CorrelationKey;
use resq::metrics;
use resq::payload::{MAX_PAYLOAD_BYTES, Payload, Pointer};
use resq::reason::{ErrorCode, FailureReason};
use resq::settle::{Action, Confirmation, Deadlines, QueueUrl, Settler};
use resq::sqs::QueueLimits;
use resq::sqs::Queues;
use resq::store::ObjectStore;
use resq::telemetry::Telemetry;
use tracing::{Instrument, Span, field};

use crate::account::{self, BatchReport, Tally};
use crate::decide::{self, Fate, Horizon, Ran};
use crate::event::{self, EventError, Record, SqsInvocation};
use crate::handler::{HandlerError, MessageHandler, RecordMeta};
use crate::retry_budget::{Delivery, RetryBudget};

/// Who archive entries are signed by.
pub const ARCHIVED_BY: &str = "consumer";

/// What the consumer's settling needs on SQS: copies sent to the DLQ (`SendMessageBatch`
/// authorizes as `SendMessage`), backoff on the main queue (`ChangeMessageVisibilityBatch` as
/// `ChangeMessageVisibility`), and the queue's limits (`GetQueueAttributes`, once).
pub const PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("sqs:SendMessage", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:ChangeMessageVisibility", "OrdersQueue"),
    resq::iam::Permission::new("sqs:GetQueueAttributes", "OrdersQueue"),
];

/// How long a source queue's limits that could not be read are not asked for again. Short:
/// until they are read, every transient failure on its last allowed receive goes to the DLQ
/// without a reason, so one failed read at a cold start must not blind an environment for
/// minutes; one `GetQueueAttributes` (of at most [`LIMITS_READ_TIMEOUT`]) every 10 s is cheap.
const LIMITS_RETRY_AFTER: Duration = Duration::from_secs(10);

/// How long limits read are used before they are read again (a stack update that changes the
/// queue's retention or `maxReceiveCount` does not recycle the consumer's containers).
pub const LIMITS_REFRESH_AFTER: Duration = Duration::from_secs(600);

/// The longest an invocation waits for a queue's limits: a slow `GetQueueAttributes` must not
/// keep the batch from starting (without them a record on its last receive is left to SQS).
const LIMITS_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// A source queue's limits as the consumer holds them: read (when), or when the read failed
/// (asked again after [`LIMITS_RETRY_AFTER`]).
#[derive(Clone)]
enum Known {
    Read(Arc<QueueLimits>, Instant),
    Unreadable(Instant),
}

/// The queue one record of a batch came from: where its backoff goes, and its limits.
struct Source {
    url: QueueUrl,
    limits: Option<Arc<QueueLimits>>,
}

/// The consumer: one per process, reused across invocations (it keeps only the source queues'
/// limits, the retry budget and the records' limit between them).
pub struct Consumer<H, Q, S> {
    handler: H,
    pub(crate) settler: Settler<Q, S>,
    pub(crate) config: ConsumerConfig,
    /// Where a body's business id is read from when the handler did not parse it.
    pub(crate) correlation: CorrelationKey,
    /// The source queues' limits, by URL, kept between invocations.
    limits: Mutex<HashMap<QueueUrl, Known>>,
    /// What the execution environment ran in the last minute, kept between invocations.
    retry_budget: Mutex<RetryBudget>,
    /// The process's records in flight, shared by the invocations it runs at once.
    in_flight: InFlight,
    /// The records' limit the last invocation to end left (`auto`), the next one resumes from.
    carried: Mutex<Option<Carried>>,
    /// The downstream's answers, as the HTTPS client counts them (nothing counts into it
    /// unless [`Consumer::with_throttling`] shares the client's).
    throttling: Throttling,
}

/// A record once it ran: how it counts in the handler's metrics, its fate, the action still to
/// carry it out, what became of an action already settled in its FIFO lane, and its span while
/// something is left to log.
pub(crate) struct Settling {
    pub(crate) tally: Tally,
    pub(crate) fate: Fate,
    pub(crate) action: Option<Action>,
    pub(crate) settled: Option<Confirmation>,
    pub(crate) span: Span,
}

impl<H: MessageHandler, Q: Queues, S: ObjectStore> Consumer<H, Q, S> {
    /// A consumer over its ports: the handler, SQS and the archive bucket.
    pub fn new(handler: H, queues: Q, store: S, config: ConsumerConfig) -> Self {
        let in_flight = config.concurrency.settle_calls_in_flight();
        let retry_budget = Mutex::new(RetryBudget::new(config.retry_budget_percent));
        let records = InFlight::new(config.concurrency);
        Self {
            handler,
            settler: Settler::new(queues, store, ARCHIVED_BY).with_calls_in_flight(in_flight),
            config,
            correlation: Telemetry::from_env_or_declared(H::NAMES).correlation,
            limits: Mutex::new(HashMap::new()),
            retry_budget,
            in_flight: records,
            carried: Mutex::new(None),
            throttling: Throttling::default(),
        }
    }

    /// The same consumer, its limit following the throttling counted in `throttling` (the
    /// HTTPS client's: [`crate::downstream::Downstream`]).
    pub fn with_throttling(mut self, throttling: Throttling) -> Self {
        self.throttling = throttling;
        self
    }

    /// Handles one invocation: runs its records, settles what was decided, and answers with
    /// the partial batch response and the metrics (which the caller emits). `Err` only for an
    /// event from the DLQ the consumer dead-letters into (it would loop).
    pub async fn handle(
        &self,
        invocation: SqsInvocation,
        deadline: Instant,
    ) -> Result<BatchReport, EventError> {
        let records = invocation.0;
        // Lambda's poller received the batch at most a batching window before the invocation;
        // SQS's 12 h visibility limit counts from that receive.
        let received_at = Instant::now()
            .checked_sub(decide::LONGEST_BATCHING_WINDOW)
            .unwrap_or_else(Instant::now);
        let margin = self.config.common.deadline_margin;
        let phases = Deadlines::before(deadline, margin, 8, Instant::now());
        let (sources, of_record) = self.sources(&records, phases.start_by).await?;
        let now_ms = decide::epoch_ms();
        let left = deadline.saturating_duration_since(Instant::now());
        let deadline_ms = now_ms + left.as_millis() as u64;
        let horizons: Vec<Horizon<'_>> = of_record
            .iter()
            .map(|&s| Horizon {
                limits: sources[s].limits.as_deref(),
                now_ms,
                deadline_ms,
            })
            .collect();
        let fifo = event::is_fifo(&records);
        let lanes = decide::plan_lanes(&records, fifo);
        let (mut ran, limit) = self.run(&records, &horizons, &lanes, &phases, fifo).await;
        let outcomes = self.settle(&mut ran, phases.settle_by).await;
        let queues: Vec<&QueueUrl> = of_record.iter().map(|&s| &sources[s].url).collect();
        self.back_off(
            &records,
            &queues,
            &lanes,
            &outcomes,
            received_at,
            phases.settle_by,
        )
        .await;
        let tallies: Vec<Tally> = ran.iter().map(|s| s.tally).collect();
        let report = account::answer(&records, outcomes, &tallies);
        let m = &report.metrics;
        // routine at DEBUG, worth a look at INFO (`account::is_healthy`); the metrics go out
        // whatever the level
        macro_rules! batch_done {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    records = records.len(),
                    processed = m.get(crate::account::PROCESSED),
                    retried = m.get(crate::account::RETRIED),
                    dead_lettered = m.get(crate::account::DEAD_LETTERED),
                    archived = m.get(metrics::ARCHIVED),
                    returned = m.get(crate::account::REDRIVE_RETURNED),
                    retry_budget_exceeded = m.get(crate::account::RETRY_BUDGET_EXCEEDED),
                    concurrency_lowest = limit.lowest(),
                    throttles = limit.throttles(),
                    "batch done"
                )
            };
        }
        if account::is_healthy(records.len(), m, limit.throttles()) {
            batch_done!(tracing::Level::DEBUG);
        } else {
            batch_done!(tracing::Level::INFO);
        }
        Ok(report)
    }

    /// The queues the records came from (by `eventSourceARN`; the main queue when a record
    /// names none), each with its limits, read once per queue by `until`; and the index of
    /// each record's. An event from the DLQ is refused.
    async fn sources(
        &self,
        records: &[Record],
        until: Instant,
    ) -> Result<(Vec<Source>, Vec<usize>), EventError> {
        let mut sources: Vec<Source> = Vec::new();
        let mut by_arn: HashMap<Option<&str>, usize> = HashMap::new();
        let mut of_record = Vec::with_capacity(records.len());
        for r in records {
            let arn = r.source_arn.as_deref();
            if let Some(&i) = by_arn.get(&arn) {
                of_record.push(i);
                continue;
            }
            let parsed = arn.and_then(QueueArn::parse);
            if let (Some(arn), Some(parsed)) = (arn, &parsed)
                && parsed.is_url(&self.config.common.dlq_url)
            {
                return Err(EventError::FromDeadLetterQueue {
                    arn: arn.to_owned(),
                });
            }
            let main = &self.config.common.main_queue_url;
            let url = match &parsed {
                Some(q) if !q.is_url(main) => q.url_beside(main).unwrap_or_else(|| main.clone()),
                _ => main.clone(),
            };
            let url = QueueUrl::from(url.as_str());
            let limits = self.limits_of(&url, until).await;
            by_arn.insert(arn, sources.len());
            of_record.push(sources.len());
            sources.push(Source { url, limits });
        }
        Ok((sources, of_record))
    }

    /// A source queue's limits: read once (for at most [`LIMITS_READ_TIMEOUT`], and by
    /// `until`), then kept, and read again every [`LIMITS_REFRESH_AFTER`] (the old ones are
    /// used while a new read fails).
    async fn limits_of(&self, url: &QueueUrl, until: Instant) -> Option<Arc<QueueLimits>> {
        let known = self.lock_limits().get(url).cloned();
        let stale = match known {
            Some(Known::Read(limits, at)) if at.elapsed() < LIMITS_REFRESH_AFTER => {
                return Some(limits);
            }
            Some(Known::Read(limits, _)) => Some(limits),
            Some(Known::Unreadable(at)) if at.elapsed() < LIMITS_RETRY_AFTER => return None,
            _ => None,
        };
        let until = until.min(Instant::now() + LIMITS_READ_TIMEOUT);
        let read = tokio::time::timeout_at(until.into(), self.settler.queues().limits(url)).await;
        let known = match (read, stale) {
            (Ok(Ok(limits)), _) => Known::Read(Arc::new(limits), Instant::now()),
            (failed, stale) => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "no answer in time".to_owned(),
                };
                match stale {
                    Some(limits) => {
                        tracing::warn!(queue = %url, error_details = %why, "could not read the queue's redrive policy and retention again; the ones read before still apply");
                        // asked again after the retry delay, not on every invocation
                        let at = Instant::now()
                            .checked_sub(LIMITS_REFRESH_AFTER - LIMITS_RETRY_AFTER)
                            .unwrap_or_else(Instant::now);
                        Known::Read(limits, at)
                    }
                    None => {
                        tracing::warn!(queue = %url, error_details = %why, "could not read the queue's redrive policy and retention; until they are read, a transient failure on its last allowed receive is left for SQS to move to the DLQ without a reason");
                        Known::Unreadable(Instant::now())
                    }
                }
            }
        };
        self.lock_limits().insert(url.clone(), known.clone());
        match known {
            Known::Read(limits, _) => Some(limits),
            Known::Unreadable(_) => None,
        }
    }

    /// Reads the main queue's limits before the first invocation (Lambda's init phase, outside
    /// the invocation's time), so the first batch does not wait for them.
    pub async fn read_main_queue_limits(&self) {
        let main = QueueUrl::from(self.config.common.main_queue_url.as_str());
        self.limits_of(&main, Instant::now() + LIMITS_READ_TIMEOUT)
            .await;
    }

    fn lock_carried(&self) -> std::sync::MutexGuard<'_, Option<Carried>> {
        self.carried.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_limits(&self) -> std::sync::MutexGuard<'_, HashMap<QueueUrl, Known>> {
        self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs every lane, in their order, as many at once as the invocation's [`Limit`] allows
    /// (`CONSUMER_CONCURRENCY`: under `auto` it follows the downstream's throttling, read
    /// each time a lane ends, resumed from where the last invocation left it); returns what
    /// ran and the limit as it ended.
    async fn run(
        &self,
        records: &[Record],
        horizons: &[Horizon<'_>],
        lanes: &[Vec<usize>],
        phases: &Deadlines,
        fifo: bool,
    ) -> (Vec<Settling>, Limit) {
        let mut limit = Limit::new(
            self.config.concurrency,
            records.len(),
            *self.lock_carried(),
            self.throttling.seen(),
            Instant::now(),
        );
        let mut waiting = lanes.iter();
        let mut running = FuturesUnordered::new();
        let mut ran: Vec<(usize, Settling)> = Vec::with_capacity(records.len());
        loop {
            while running.len() < limit.current() {
                let Some(lane) = waiting.next() else { break };
                running.push(async move {
                    let _turn = self.in_flight.turn(phases.start_by).await;
                    self.run_lane(records, horizons, lane, phases, fifo).await
                });
            }
            let Some(done) = running.next().await else {
                break;
            };
            ran.extend(done);
            limit.observe(self.throttling.seen(), Instant::now());
        }
        // invocations at once (Managed Instances) each halve on every throttle sent while they
        // run (the process's one count of the downstream's answers): the last to end leaves its own
        if let Some(carried) = limit.carried(Instant::now()) {
            *self.lock_carried() = Some(carried);
        }
        ran.sort_by_key(|(i, _)| *i);
        (ran.into_iter().map(|(_, s)| s).collect(), limit)
    }

    /// One lane, in order. In a FIFO lane a DLQ copy or archive entry is settled at once,
    /// within the record's time: the rest of its group may run only once it is confirmed (one
    /// that is not holds the group, as a failure does).
    async fn run_lane(
        &self,
        records: &[Record],
        horizons: &[Horizon<'_>],
        lane: &[usize],
        phases: &Deadlines,
        fifo: bool,
    ) -> Vec<(usize, Settling)> {
        let mut out = Vec::with_capacity(lane.len());
        let mut blocked = false;
        for &i in lane {
            let (record, horizon) = (&records[i], horizons[i]);
            let mut s = if blocked {
                self.unrun(record, horizon, Ran::GroupBlocked)
            } else if Instant::now() >= phases.start_by {
                self.unrun(record, horizon, Ran::NotStarted)
            } else {
                self.run_record(record, horizon, phases.move_by).await
            };
            if fifo && let Some(action) = s.action.take() {
                let report = self.settle_plan(vec![action], phases.move_by).await;
                s.settled = report.into_iter().next();
                blocked |= account::outcome(&s.fate, s.settled.as_ref()).is_failed();
            }
            blocked |= matches!(s.fate, Fate::Retry(_));
            // one that could be of any group holds every record after it, whatever became of
            // it (decide::plan_lanes put them behind it)
            blocked |= fifo && record.unreadable.is_some() && record.group_id.is_none();
            out.push((i, s));
        }
        out
    }

    /// A record held back without running.
    fn unrun(&self, record: &Record, horizon: Horizon<'_>, ran: Ran) -> Settling {
        let tally = Tally::of(&ran);
        let decision = decide::decide(record, &self.config, horizon, ran);
        let span = match &decision.fate {
            Fate::Retry(f) => {
                let id = self.correlation_id(record);
                tracing::warn!(message_id = %record.message_id, correlation_id = id, error_code = f.code(), "record reported failed without running");
                Span::none()
            }
            fate => {
                let id = self.correlation_id(record);
                log_decision(record_span(record, id.as_deref()), fate)
            }
        };
        Settling {
            tally,
            fate: decision.fate,
            action: decision.action,
            settled: None,
            span,
        }
    }

    /// One record: parsed, then its effect run, each under unwinding, the effect until
    /// `stop_by`; then its fate decided.
    async fn run_record(
        &self,
        record: &Record,
        horizon: Horizon<'_>,
        stop_by: Instant,
    ) -> Settling {
        let runs = decide::runs(record, &self.config, horizon.now_ms);
        // a pointer's payload is read only once the retry budget admits the record: the read
        // is a call to the downstream too
        let delivery = Delivery::of(record);
        let pointer = record.body.as_deref().and_then(Pointer::parse);
        let admitted = (runs && pointer.is_some())
            .then(|| self.retry_budget(|b| b.admit(delivery, decide::epoch_ms())));
        let parsed = match (runs, pointer, admitted) {
            (false, ..) => None,
            (true, None, _) => Some(self.parse(record.body.as_deref())),
            (true, Some(_), Some(false)) => Some(Err(Ran::OverBudget)),
            (true, Some(pointer), _) => Some(self.payload(record, &pointer, stop_by).await),
        };
        let business_id = match &parsed {
            Some(Ok(message)) => {
                std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.business_id(message)))
                    .ok()
            }
            Some(Err(Ran::Rejected(rejection))) => rejection.business_id.as_deref(),
            _ => None,
        };
        // a record held back unrun (archived, unreadable) is still followed by its business id
        let read = business_id
            .is_none()
            .then(|| self.correlation_id(record))
            .flatten();
        let span = record_span(record, business_id.or(read.as_deref()));
        if let Some(why) = &record.unreadable {
            span.in_scope(|| tracing::warn!(error_details = %why, "the record cannot be read"));
        }
        if !record.dropped_attributes.is_empty() {
            span.in_scope(|| tracing::warn!(dropped = %record.dropped_attributes.join(", "), "list-valued message attributes are not supported by SQS and are not copied"));
        }
        let spend = |ran: Ran| {
            if ran.failed() {
                self.retry_budget(|b| b.failed(delivery, decide::epoch_ms()));
            }
            ran
        };
        let ran = match parsed {
            None => Ran::NotRun,
            Some(Err(ran)) if admitted == Some(true) => spend(ran),
            Some(Err(ran)) => ran,
            Some(Ok(message)) => {
                let admit = || self.retry_budget(|b| b.admit(delivery, decide::epoch_ms()));
                if admitted.unwrap_or_else(admit) {
                    spend(self.effect(record, &message, &span, stop_by).await)
                } else {
                    Ran::OverBudget
                }
            }
        };
        let tally = Tally::of(&ran);
        let decision = decide::decide(record, &self.config, horizon, ran);
        Settling {
            tally,
            span: log_decision(span, &decision.fate),
            fate: decision.fate,
            action: decision.action,
            settled: None,
        }
    }

    /// The business id in a record's body, read without the handler (its correlation key's
    /// body field): for a record the handler did not parse.
    pub(crate) fn correlation_id(&self, record: &Record) -> Option<String> {
        record
            .body
            .as_deref()
            .and_then(|b| self.correlation.read(b))
    }

    /// The retry budget, locked for `f`: a parsed record's effect starts only if it admits it
    /// (what reaches the downstream), and a redelivery's failure spends it; a record the
    /// handler never runs, or whose parsing refuses it, neither earns nor spends.
    fn retry_budget<T>(&self, f: impl FnOnce(&mut RetryBudget) -> T) -> T {
        f(&mut self.retry_budget.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The message an extended-client pointer's payload parses to, read by `stop_by` within the
    /// process's read budget; or how the record ends: no object (or one too large) is
    /// permanent, any other failure transient.
    async fn payload(
        &self,
        record: &Record,
        pointer: &Pointer,
        stop_by: Instant,
    ) -> Result<H::Message, Ran> {
        let at = format!("s3://{}/{}", pointer.bucket, pointer.key);
        let failed = |e| Err(Ran::Handled(Err(e)));
        let read = async {
            let _reserved = resq::payload::reserve(&record.message_attributes).await;
            Ok::<_, resq::error::AwsError>(match self.settler.store().payload(pointer).await? {
                Payload::Found(bytes) => self.parse(Some(&resq::payload::text(bytes))),
                Payload::Missing => failed(HandlerError::permanent(
                    FailureReason::PayloadNotFound.code(),
                    format!("{at}: no such object"),
                )),
                Payload::TooLarge(size) => failed(HandlerError::permanent(
                    FailureReason::PayloadTooLarge.code(),
                    format!("{at}: {size} bytes, over the {MAX_PAYLOAD_BYTES} resq reads"),
                )),
            })
        };
        match tokio::time::timeout_at(stop_by.into(), read).await {
            Ok(Ok(parsed)) => parsed,
            Ok(Err(e)) => failed(HandlerError::transient(
                ErrorCode::PayloadUnreadable.code(),
                e.to_string(),
            )),
            Err(_) => Err(Ran::TimedOut),
        }
    }

    /// The handler's parsing: the team's code, so a panic there is the record's failure.
    fn parse(&self, body: Option<&str>) -> Result<H::Message, Ran> {
        let parsed = std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.parse(body)));
        match parsed {
            Ok(Ok(message)) => Ok(message),
            Ok(Err(rejection)) => Err(Ran::Rejected(rejection)),
            Err(panic) => Err(Ran::Panicked(panic_message(&panic))),
        }
    }

    /// The handler's effect, unwound and abandoned at `stop_by`.
    async fn effect(
        &self,
        record: &Record,
        message: &H::Message,
        span: &Span,
        stop_by: Instant,
    ) -> Ran {
        let meta = RecordMeta {
            message_id: &record.message_id,
            receive_count: record.receive_count,
            redrive_count: match record.redrive_count {
                resq::attributes::RedriveCount::Count(n) => n,
                resq::attributes::RedriveCount::Invalid => 0,
            },
        };
        let work = self.handler.handle(message, &meta).instrument(span.clone());
        match tokio::time::timeout_at(stop_by.into(), AssertUnwindSafe(work).catch_unwind()).await {
            Ok(Ok(result)) => Ran::Handled(result),
            Ok(Err(panic)) => Ran::Panicked(panic_message(&panic)),
            Err(_) => Ran::TimedOut,
        }
    }
}

/// A record's span: every line about it carries its `message_id`, its `receive_count` and, once
/// read, its business id as `correlation_id` (which the log format writes again under the message type's own key,
/// `order_id`). At ERROR level so that it is on whatever AWS_LAMBDA_LOG_LEVEL allows: at WARN
/// an INFO span would be off, and the warnings would lose their message_id and correlation_id.
fn record_span(record: &Record, business_id: Option<&str>) -> Span {
    tracing::error_span!(
        "record",
        message_id = %record.message_id,
        correlation_id = business_id,
        receive_count = record.receive_count,
        error_code = field::Empty,
        error_details = field::Empty,
    )
}

/// Logs a decided fate in the record's span; returns the span while something is left to log
/// (a DLQ copy or archive entry to settle), so a batch holds spans only for those.
fn log_decision(span: Span, fate: &Fate) -> Span {
    match fate {
        Fate::Ack => {
            // One line per success would dominate the log volume (and its cost) of a healthy
            // queue; AWS_LAMBDA_LOG_LEVEL=DEBUG shows them.
            span.in_scope(|| tracing::debug!("processed"));
            Span::none()
        }
        Fate::Retry(f) => {
            span.record("error_code", f.code());
            span.record("error_details", f.details());
            match f.ran() {
                true => span.in_scope(|| tracing::warn!("failed; will be retried")),
                // held back by the retry budget
                false => span.in_scope(|| tracing::warn!("record reported failed without running")),
            }
            Span::none()
        }
        Fate::DeadLetter {
            reason, details, ..
        } => {
            span.record("error_code", reason.as_str());
            span.record("error_details", details.as_str());
            span
        }
        Fate::Archive(_) => span,
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the handler panicked".to_owned())
}
