//! What becomes of each record (docs/design.md, "Consumer"): which records run, and in which
//! lanes; one pure function from a record, the configuration and what running it came to, to
//! its fate and the action that carries it out; and the backoff of what failed. No I/O here
//! (when each phase of an invocation ends is `resq::settle::Deadlines::before`).

use std::collections::HashMap;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::ConsumerConfig;
use rand::Rng;
use resq::archive::{ArchiveEntry, OriginalMessage};
use resq::attributes::{
    self, AttributeLimitExceeded, AttributeValue, FAILURE_CLASS_PERMANENT, FAILURE_CLASS_TRANSIENT,
    X_FAILURE_CLASS, X_FAILURE_REASON, X_FIRST_SENT_AT,
};
use resq::reason::{ArchiveReason, ErrorCode, FailureReason};
use resq::settle::{Action, QueueUrl};
use resq::sqs::OutgoingMessage;
use resq::sqs::QueueLimits;

use crate::event::Record;
use crate::handler::{HandlerError, Rejection};

/// Lanes run concurrently, starting in the order given; records within a lane run in order.
/// Standard queues: one record per lane, the highest `ApproximateReceiveCount` first (a record
/// near its last allowed receive is never the one the deadline leaves unstarted). FIFO: one lane per `MessageGroupId`, in order of first appearance. A FIFO record
/// that cannot be read and whose group cannot be read either could belong to any group: it
/// and every record after it go into one lane, so that they wait behind it (it fails).
pub fn plan_lanes(records: &[Record], fifo: bool) -> Vec<Vec<usize>> {
    if !fifo {
        let mut order: Vec<usize> = (0..records.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(records[i].receive_count));
        return order.into_iter().map(|i| vec![i]).collect();
    }
    let mut lanes: Vec<Vec<usize>> = Vec::new();
    let mut by_group: HashMap<&str, usize> = HashMap::new();
    let mut catch_all: Option<usize> = None;
    for (i, r) in records.iter().enumerate() {
        let lane = match (catch_all, &r.unreadable, r.group_id.as_deref()) {
            (Some(lane), _, _) => lane,
            (None, Some(_), None) => *catch_all.insert(lanes.len()),
            (None, _, group) => {
                let next = lanes.len();
                *by_group.entry(group.unwrap_or("")).or_insert(next)
            }
        };
        if lane == lanes.len() {
            lanes.push(Vec::new());
        }
        lanes[lane].push(i);
    }
    lanes
}

/// What the rules that depend on time and on SQS's limits know: the source queue's limits
/// (when they could be read) and now.
#[derive(Debug, Clone, Copy)]
pub struct Horizon<'a> {
    /// The limits of the queue the record came from; `None` when they could not be read (then
    /// the last allowed receive is not known, and SQS moves a record that used it up).
    pub limits: Option<&'a QueueLimits>,
    /// Now, in epoch milliseconds.
    pub now_ms: u64,
    /// The invocation's deadline, in epoch milliseconds: a failed record's backoff starts at
    /// the latest then.
    pub deadline_ms: u64,
}

#[cfg(test)]
impl Horizon<'_> {
    /// Now, with no limits known.
    pub fn now() -> Horizon<'static> {
        let now_ms = epoch_ms();
        Horizon {
            limits: None,
            now_ms,
            deadline_ms: now_ms,
        }
    }
}

/// Now, in epoch milliseconds.
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why a record is held back without running, in the order of the checks: it cannot be
/// read, it is past the redrive cap (a copy at the cap is the last real replay and runs), or it
/// was first sent before the idempotency window (its effect's key may be gone).
pub fn held_back(record: &Record, config: &ConsumerConfig, now_ms: u64) -> Option<Unrun> {
    if let Some(why) = &record.unreadable {
        return Some(Unrun::Unreadable(why.clone()));
    }
    if let Some(reason) = over_cap(record, config) {
        return Some(Unrun::Archive(reason));
    }
    let sent = attributes::first_sent_at(&record.message_attributes, record.sent_at)?;
    let window = config.idempotency_window.as_millis() as u64;
    (now_ms.saturating_sub(sent) > window)
        .then_some(Unrun::Archive(ArchiveReason::IdempotencyWindow))
}

/// Why [`held_back`] holds a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unrun {
    /// It could not be read: this, naming the field.
    Unreadable(String),
    /// It is archived unrun for this reason.
    Archive(ArchiveReason),
}

/// Whether the handler runs for `record` (see [`held_back`]).
pub fn runs(record: &Record, config: &ConsumerConfig, now_ms: u64) -> bool {
    held_back(record, config, now_ms).is_none()
}

/// Why a failed record's next receive would come too late: it would be moved by SQS, or
/// deleted, before it ran again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastReceive {
    /// Its `ApproximateReceiveCount` reached the queue's `maxReceiveCount`.
    ReceivesUsed {
        /// The queue's `maxReceiveCount`.
        max: u32,
    },
    /// The queue's retention (from its `SentTimestamp`) ends before its next delivery could.
    RetentionEnds {
        /// When SQS deletes it, epoch millis.
        at_ms: u64,
    },
}

impl std::fmt::Display for LastReceive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LastReceive::ReceivesUsed { max } => write!(
                f,
                "its last allowed receive (the queue's maxReceiveCount is {max})"
            ),
            LastReceive::RetentionEnds { at_ms } => write!(
                f,
                "the queue's retention ends at {} ms since the epoch, before its next delivery",
                at_ms
            ),
        }
    }
}

/// Whether a record that failed now is on its last allowed receive: its receive count
/// reached the queue's `maxReceiveCount`, or the queue's retention would end before its next
/// delivery could come: from the invocation's deadline (when its backoff is set at the
/// latest), the longer of its backoff's ceiling (in FIFO, the backoff's cap: a blocked record
/// takes its group's delay; a fair queue's record is a standard one) and the queue's visibility timeout, plus the longest batching
/// window. `None` when the limits are not known.
pub fn last_receive(
    record: &Record,
    horizon: Horizon<'_>,
    backoff: &Backoff,
) -> Option<LastReceive> {
    // a fair queue's record (a standard queue's, with a group) is a standard record
    let delay = match record.source_arn.as_deref().is_some_and(resq::sqs::is_fifo) {
        true => backoff.ceiling(u32::MAX),
        false => backoff.ceiling(record.receive_count),
    };
    last_receive_after(record, horizon, delay)
}

/// [`last_receive`] of a record backed off for `delay` at most.
fn last_receive_after(
    record: &Record,
    horizon: Horizon<'_>,
    delay: Duration,
) -> Option<LastReceive> {
    let limits = horizon.limits?;
    if let Some(max) = limits.max_receive_count
        && record.receive_count >= max
    {
        return Some(LastReceive::ReceivesUsed { max });
    }
    let ends = record.sent_at? + limits.retention.as_millis() as u64;
    let next = delay.max(limits.visibility_timeout) + LONGEST_BATCHING_WINDOW;
    let from = horizon.deadline_ms.max(horizon.now_ms);
    (ends <= from + next.as_millis() as u64).then_some(LastReceive::RetentionEnds { at_ms: ends })
}

/// What running a record came to: the engine's part, the handler run under unwinding and a
/// timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// Not run: [`runs`] said no.
    NotRun,
    /// The deadline margin came before it started.
    NotStarted,
    /// FIFO: a record before it in its group failed.
    GroupBlocked,
    /// A main-queue redelivery over the retry budget ([`crate::retry_budget`]): not run.
    OverBudget,
    /// The handler's parsing refused it.
    Rejected(Rejection),
    /// The handler's effect returned.
    Handled(Result<(), HandlerError>),
    /// The handler's parsing or effect panicked, with this message.
    Panicked(String),
    /// Still running at the deadline margin: abandoned.
    TimedOut,
}

impl Ran {
    /// The handler's effect ran and did not succeed (what spends the retry budget).
    pub fn failed(&self) -> bool {
        matches!(
            self,
            Ran::Handled(Err(_)) | Ran::Panicked(_) | Ran::TimedOut
        )
    }
}

/// Why a record is reported failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The handler's transient error, with its own code.
    Transient {
        /// The handler's code.
        code: String,
        /// What happened.
        details: String,
    },
    /// resq's own: a panic, a timeout, a DLQ copy or archive entry not confirmed.
    Resq {
        /// resq's code.
        code: ErrorCode,
        /// What happened.
        details: String,
    },
    /// FIFO: an earlier record of the same group failed, so this one was not run.
    GroupBlocked,
    /// The deadline margin was reached before this record started.
    NotStarted,
    /// A main-queue redelivery over the retry budget, so not run: it waits the longest
    /// backoff.
    RetryBudget,
}

impl Failure {
    /// resq's own failure.
    pub fn resq(code: ErrorCode, details: impl Into<String>) -> Self {
        Self::Resq {
            code,
            details: details.into(),
        }
    }

    /// Machine code for logs.
    pub fn code(&self) -> &str {
        match self {
            Failure::Transient { code, .. } => code,
            Failure::Resq { code, .. } => code.code(),
            Failure::GroupBlocked => ErrorCode::FifoGroupBlocked.code(),
            Failure::NotStarted => ErrorCode::DeadlineNotStarted.code(),
            Failure::RetryBudget => ErrorCode::RetryBudget.code(),
        }
    }

    /// What happened, for logs.
    pub fn details(&self) -> &str {
        match self {
            Failure::Transient { details, .. } | Failure::Resq { details, .. } => details,
            Failure::GroupBlocked | Failure::NotStarted => "",
            Failure::RetryBudget => "a redelivery over the retry budget (RETRY_BUDGET_PERCENT)",
        }
    }

    /// The record ran (or was settled) and failed, as opposed to being held back unrun.
    pub fn ran(&self) -> bool {
        matches!(self, Failure::Transient { .. } | Failure::Resq { .. })
    }
}

/// What is to become of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Done: acknowledge (its effect is recorded).
    Ack,
    /// Report it in `batchItemFailures`, backed off unless it never started.
    Retry(Failure),
    /// Acknowledge once its DLQ copy (the decision's action) is confirmed.
    DeadLetter {
        /// `x-failure-class`: [`FAILURE_CLASS_PERMANENT`], or [`FAILURE_CLASS_TRANSIENT`] for
        /// a transient failure on its last allowed receive.
        class: &'static str,
        /// `x-failure-reason`.
        reason: String,
        /// What was wrong, for the logs.
        details: String,
    },
    /// Acknowledge once its archive entry (the decision's action) is confirmed.
    Archive(ArchiveReason),
}

/// A record's fate, and the action that carries it out (a DLQ copy, an archive entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What is to become of it.
    pub fate: Fate,
    /// What must be confirmed first.
    pub action: Option<Action>,
}

impl From<Fate> for Decision {
    fn from(fate: Fate) -> Self {
        Self { fate, action: None }
    }
}

/// The one decision of a record's fate (docs/design.md, "Record checks"): unreadable → a
/// permanent DLQ copy (`UNREADABLE_RECORD`); past the redrive cap or the idempotency window →
/// archive; rejected by the handler's parsing, or a permanent error → a DLQ copy (archived
/// instead when SQS would refuse the copy); a transient error, a panic, a timeout, a
/// redelivery over the retry budget → retry, or, on its last allowed receive ([`last_receive`];
/// over the budget, with the longest backoff), a transient DLQ copy with its reason; success →
/// acknowledge.
pub fn decide(
    record: &Record,
    config: &ConsumerConfig,
    horizon: Horizon<'_>,
    ran: Ran,
) -> Decision {
    let last_receive = |failure: &Failure| match failure {
        Failure::RetryBudget => last_receive_after(record, horizon, config.backoff.longest()),
        _ => last_receive(record, horizon, &config.backoff),
    };
    let retry = |failure: Failure| match last_receive(&failure) {
        Some(last) => {
            let details = format!("{}; {last}", failure.details());
            let details = details.trim_start_matches("; ");
            let copy = dead_letter(
                record,
                config,
                FAILURE_CLASS_TRANSIENT,
                failure.code(),
                details,
            );
            // a transient failure no copy can carry (over SQS's limits) is retried as before,
            // and SQS moves it: archived, it would need a human where a replay can succeed
            match copy.fate {
                Fate::DeadLetter { .. } => copy,
                _ => Fate::Retry(failure).into(),
            }
        }
        None => Fate::Retry(failure).into(),
    };
    let permanent = |code: &str, details: &str| {
        dead_letter(record, config, FAILURE_CLASS_PERMANENT, code, details)
    };
    match ran {
        Ran::NotRun => match held_back(record, config, horizon.now_ms) {
            Some(Unrun::Unreadable(why)) => permanent(FailureReason::UnreadableRecord.code(), &why),
            Some(Unrun::Archive(reason)) => archive(record, config, reason, None),
            None => retry(Failure::NotStarted),
        },
        Ran::NotStarted => retry(Failure::NotStarted),
        // never dead-lettered ahead of the record it waits behind: SQS keeps the group's order
        Ran::GroupBlocked => Fate::Retry(Failure::GroupBlocked).into(),
        Ran::OverBudget => retry(Failure::RetryBudget),
        Ran::Rejected(r) => permanent(&r.code, &r.details),
        Ran::Handled(Ok(())) => Fate::Ack.into(),
        Ran::Handled(Err(HandlerError::Transient { code, details })) => {
            retry(Failure::Transient { code, details })
        }
        Ran::Handled(Err(HandlerError::Permanent { code, details })) => permanent(&code, &details),
        Ran::Panicked(why) => retry(Failure::resq(ErrorCode::HandlerPanic, why)),
        Ran::TimedOut => retry(Failure::resq(
            ErrorCode::RecordTimeout,
            "still running at the deadline margin; abandoned so the batch can report",
        )),
    }
}

fn over_cap(record: &Record, config: &ConsumerConfig) -> Option<ArchiveReason> {
    attributes::cap_on_delivery(record.redrive_count, config.common.max_redrive_attempts)
}

/// The archive entry of `record`, as an action.
fn archive(
    record: &Record,
    config: &ConsumerConfig,
    reason: ArchiveReason,
    last_error: Option<String>,
) -> Decision {
    let message = OriginalMessage {
        message_id: record.message_id.clone(),
        body: record.body.clone().unwrap_or_default(),
        message_attributes: record.message_attributes.clone(),
        attributes: record.attributes.to_map(),
        raw_record: record.raw.clone(),
    };
    let source = &config.common.main_queue_url;
    let entry = ArchiveEntry::new(reason, source, message, last_error);
    Decision {
        fate: Fate::Archive(reason),
        action: Some(Action::Archive(Box::new(entry))),
    }
}

/// A DLQ copy of `class` (`permanent`, or `transient` on the last allowed receive), or the
/// archive when no copy can be sent (a copy SQS would refuse; a record with no body to copy).
/// `reason` becomes `x-failure-reason` as [`resq::reason::failure_reason`] makes it sendable.
fn dead_letter(
    record: &Record,
    config: &ConsumerConfig,
    class: &'static str,
    reason: &str,
    details: &str,
) -> Decision {
    let reason = resq::reason::failure_reason(reason);
    let dlq = &config.common.dlq_url;
    // SQS takes no message without a body: such a record (only hand-made events have one) is
    // archived whole instead, never retried until SQS moves it without a reason
    if record.body.as_deref().is_none_or(str::is_empty) {
        let last_error = format!("{class} {reason}: {details}; no body a DLQ copy could carry");
        let why = match record.unreadable {
            Some(_) => ArchiveReason::UnreadableRecord,
            None => ArchiveReason::PermanentFailure,
        };
        return archive(record, config, why, Some(last_error));
    }
    match dead_letter_copy(record, class, &reason, resq::sqs::is_fifo(dlq)) {
        Ok(copy) => Decision {
            fate: Fate::DeadLetter {
                class,
                reason,
                details: details.to_owned(),
            },
            action: Some(Action::Copy {
                to: QueueUrl::from(dlq.as_str()),
                message: copy,
            }),
        },
        Err(refused) => {
            let last_error = format!("{reason}: {details}; {refused}");
            archive(record, config, refused.reason(), Some(last_error))
        }
    }
}

/// Why a DLQ copy cannot be sent: the record is archived instead (nothing is truncated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyRefused {
    /// More than 10 attributes.
    #[error(transparent)]
    AttributeLimit(#[from] AttributeLimitExceeded),
    /// Body plus attributes over SQS's 1 MiB, and no pointer can carry it.
    #[error(transparent)]
    Unfit(#[from] resq::payload::Unfit),
}

impl CopyRefused {
    /// The archive reason.
    pub fn reason(&self) -> ArchiveReason {
        match self {
            CopyRefused::AttributeLimit(_) => ArchiveReason::AttributeLimit,
            CopyRefused::Unfit(unfit) => unfit.reason(),
        }
    }
}

/// The DLQ copy of a failure of `class`: body unchanged, original attributes kept
/// (`x-redrive-count` with them), `x-failure-class`, `x-failure-reason` and `x-first-sent-at`
/// set. A FIFO DLQ copy keeps the group and takes a deduplication id derived from the message
/// id.
pub fn dead_letter_copy(
    record: &Record,
    class: &str,
    reason: &str,
    dlq_is_fifo: bool,
) -> Result<OutgoingMessage, CopyRefused> {
    let mut set = vec![
        (X_FAILURE_CLASS, AttributeValue::string(class)),
        (X_FAILURE_REASON, AttributeValue::string(reason)),
    ];
    if let Some(sent) = attributes::first_sent_at(&record.message_attributes, record.sent_at) {
        set.push((X_FIRST_SENT_AT, AttributeValue::number(sent)));
    }
    let attributes = attributes::copy_attributes(&record.message_attributes, set)?;
    let body = record.body.clone().unwrap_or_default();
    resq::payload::fits(&body, &attributes)?;
    let (group_id, deduplication_id) = resq::sqs::copy_ids(
        dlq_is_fifo,
        record.group_id.as_deref(),
        resq::sqs::Copy::DeadLetter,
        &record.message_id,
    );
    Ok(OutgoingMessage {
        body,
        attributes,
        group_id,
        deduplication_id,
    })
}

/// Lambda's poller may hold a batch this long (the longest batching window) between the
/// receive and the invocation; the 12 h visibility limit counts from the receive.
pub const LONGEST_BATCHING_WINDOW: Duration = Duration::from_secs(300);

/// The backoff of the records reported failed (`failures[i]`, `None` for the others), as
/// (record, seconds): full jitter on the receive count, never past what SQS still accepts
/// (`ceiling_seconds`: its 12 h count from the receive); a redelivery the retry budget held
/// back, the longest backoff, so that the budget has refilled when it comes back. A FIFO
/// record held behind a failure in its group gets that record's delay, so the group comes back
/// together and in order. Records
/// that never started get none: SQS returns them by itself after the queue's visibility
/// timeout; neither does a record without a receipt handle.
pub fn backoff(
    records: &[Record],
    lanes: &[Vec<usize>],
    failures: &[Option<&Failure>],
    backoff: &Backoff,
    ceiling_seconds: i32,
    rng: &mut impl Rng,
) -> Vec<(usize, i32)> {
    let mut changes = Vec::new();
    for lane in lanes {
        let mut group_delay = None;
        for &i in lane {
            let delay = match failures[i] {
                None | Some(Failure::NotStarted) => continue,
                Some(Failure::GroupBlocked) => match group_delay {
                    Some(d) => d,
                    None => continue,
                },
                Some(failure) => {
                    let d = match failure {
                        Failure::RetryBudget => backoff.longest().as_secs() as i32,
                        _ => backoff.delay_seconds(records[i].receive_count, rng),
                    };
                    let d = d.min(ceiling_seconds.max(0));
                    group_delay.get_or_insert(d);
                    d
                }
            };
            if !records[i].receipt_handle.is_empty() {
                changes.push((i, delay));
            }
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::is_fifo;
    use crate::fixtures::{fifo_records, parse_event, rec};
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use resq::attributes::MAX_MESSAGE_BYTES;
    use resq::config::CommonConfig;
    use serde_json::{Value, json};

    fn config() -> ConsumerConfig {
        ConsumerConfig {
            common: CommonConfig {
                main_queue_url: "http://127.0.0.1/1/orders".into(),
                dlq_url: "http://127.0.0.1/1/orders-dlq".into(),
                archive_bucket: "b".into(),
                max_redrive_attempts: 3,
                deadline_margin: Duration::from_secs(1),
            },
            concurrency: crate::concurrency::Concurrency::Fixed(4),
            backoff: Backoff::default(),
            // the fixtures were sent in 2023: a window that holds them
            idempotency_window: std::time::Duration::from_secs(100 * 365 * 86_400),
            retry_budget_percent: Some(crate::config::DEFAULT_RETRY_BUDGET_PERCENT),
        }
    }

    /// A record with nine attributes: one too many for a DLQ copy, which adds two.
    fn nine_attributes() -> Value {
        let attrs: serde_json::Map<String, Value> = (0..9)
            .map(|i| {
                (
                    format!("a{i}"),
                    json!({"stringValue": "v", "dataType": "String"}),
                )
            })
            .collect();
        rec("a", json!({"messageAttributes": attrs}))
    }

    fn transient() -> Failure {
        Failure::Transient {
            code: "X".into(),
            details: String::new(),
        }
    }

    #[test]
    fn lanes_standard_and_fifo() {
        let records = fifo_records(&["a", "b", "a", "c", "b", "a"]);
        assert!(is_fifo(&records));
        assert_eq!(
            plan_lanes(&records, true),
            vec![vec![0, 2, 5], vec![1, 4], vec![3]]
        );
        assert_eq!(
            plan_lanes(&records, false),
            (0..6).map(|i| vec![i]).collect::<Vec<_>>()
        );
    }

    #[test]
    fn what_does_not_run_and_what_succeeds_have_their_fates() {
        let records = parse_event(json!({"Records": [
            rec("a", json!({})),
            rec("capped", json!({"messageAttributes": {"x-redrive-count": {"stringValue": "4", "dataType": "Number"}}})),
            rec("bad", json!({"messageAttributes": {"a": {"dataType": "Binary", "binaryValue": "%%"}}})),
        ]}))
        .unwrap();
        let (ok, capped, bad) = (&records[0], &records[1], &records[2]);
        let cfg = config();
        assert!(
            runs(ok, &cfg, epoch_ms())
                && !runs(capped, &cfg, epoch_ms())
                && !runs(bad, &cfg, epoch_ms())
        );
        let fate = |r: &Record, ran: Ran| decide(r, &cfg, Horizon::now(), ran).fate;
        assert_eq!(fate(ok, Ran::Handled(Ok(()))), Fate::Ack);
        assert_eq!(
            fate(capped, Ran::NotRun),
            Fate::Archive(ArchiveReason::RedriveCap)
        );
        assert!(matches!(
            fate(bad, Ran::NotRun),
            Fate::DeadLetter { class: "permanent", ref reason, ref details } if reason == "UNREADABLE_RECORD" && details.starts_with("messageAttributes.a: ")
        ));
    }

    #[test]
    fn a_handlers_errors_and_what_the_engine_saw_have_their_fates() {
        let records = parse_event(json!({"Records": [rec("a", json!({}))]})).unwrap();
        let (ok, cfg) = (&records[0], config());
        let fate = |r: &Record, ran: Ran| decide(r, &cfg, Horizon::now(), ran).fate;
        let transient = HandlerError::transient("DOWNSTREAM", "503");
        assert_eq!(
            fate(ok, Ran::Handled(Err(transient))),
            Fate::Retry(Failure::Transient {
                code: "DOWNSTREAM".into(),
                details: "503".into()
            })
        );
        let permanent = HandlerError::permanent("ORDER_REJECTED", "unknown product");
        let d = decide(ok, &cfg, Horizon::now(), Ran::Handled(Err(permanent)));
        assert_eq!(
            d.fate,
            Fate::DeadLetter {
                class: FAILURE_CLASS_PERMANENT,
                reason: "ORDER_REJECTED".into(),
                details: "unknown product".into()
            }
        );
        assert!(
            matches!(d.action, Some(Action::Copy { ref to, .. }) if &**to == "http://127.0.0.1/1/orders-dlq")
        );
        let d = decide(
            ok,
            &cfg,
            Horizon::now(),
            Ran::Rejected(Rejection::malformed("not JSON")),
        );
        assert!(
            matches!(d.fate, Fate::DeadLetter { ref reason, .. } if reason == "MALFORMED_JSON")
        );
        for (ran, code) in [
            (Ran::Panicked("boom".into()), ErrorCode::HandlerPanic),
            (Ran::TimedOut, ErrorCode::RecordTimeout),
        ] {
            assert!(
                matches!(fate(ok, ran), Fate::Retry(Failure::Resq { code: c, .. }) if c == code)
            );
        }
        assert_eq!(fate(ok, Ran::NotStarted), Fate::Retry(Failure::NotStarted));
        assert_eq!(
            fate(ok, Ran::GroupBlocked),
            Fate::Retry(Failure::GroupBlocked)
        );
    }

    #[test]
    fn an_archive_entry_keeps_the_record_whole_with_what_resq_knows() {
        let records = parse_event(json!({"Records": [rec("m-1", json!({
            "body": "{\"orderId\": \"o-1\"}",
            "attributes": {"ApproximateReceiveCount": "2", "SentTimestamp": "1700000000000"},
            "messageAttributes": {"x-redrive-count": {"stringValue": "4", "dataType": "Number"}}
        }))]}))
        .unwrap();
        let d = decide(&records[0], &config(), Horizon::now(), Ran::NotRun);
        let Some(Action::Archive(entry)) = d.action else {
            panic!("{d:?}")
        };
        assert_eq!(entry.reason, ArchiveReason::RedriveCap);
        assert_eq!(entry.message.body, "{\"orderId\": \"o-1\"}");
        assert_eq!(entry.message.attributes["ApproximateReceiveCount"], "2");
        assert_eq!(entry.facts.source_queue, "http://127.0.0.1/1/orders");
        assert_eq!(
            (
                entry.facts.redrive_count,
                entry.facts.receive_count,
                entry.facts.first_sent_at
            ),
            (Some(4), Some(2), Some(1_700_000_000_000))
        );
    }

    #[test]
    fn a_copy_sqs_would_refuse_is_archived_with_why() {
        let records = parse_event(json!({"Records": [nine_attributes()]})).unwrap();
        let d = decide(
            &records[0],
            &config(),
            Horizon::now(),
            Ran::Rejected(Rejection::malformed("x")),
        );
        assert_eq!(d.fate, Fate::Archive(ArchiveReason::AttributeLimit));
        let Some(Action::Archive(entry)) = d.action else {
            panic!("{d:?}")
        };
        let last = entry.facts.last_error.unwrap_or_default();
        assert!(last.starts_with("MALFORMED_JSON: x; "), "{last}");
        assert_eq!(entry.message.message_attributes.len(), 9);
    }

    fn limits(max_receive_count: u32, retention_s: u64) -> QueueLimits {
        QueueLimits {
            max_receive_count: Some(max_receive_count),
            retention: Duration::from_secs(retention_s),
            ..QueueLimits::sqs_defaults()
        }
    }

    /// A record on its `receives`th receive, sent `sent_ms`, with `extra` fields.
    fn received(receives: u32, sent_ms: u64, extra: Value) -> Value {
        let mut r = rec("r", extra);
        r["attributes"]["ApproximateReceiveCount"] = json!(receives.to_string());
        r["attributes"]["SentTimestamp"] = json!(sent_ms.to_string());
        r
    }

    #[test]
    fn on_its_last_allowed_receive_a_transient_failure_is_copied_unless_no_copy_can_carry_it() {
        let now = epoch_ms();
        let five = limits(5, 345_600);
        let horizon = Horizon {
            limits: Some(&five),
            now_ms: now,
            deadline_ms: now,
        };
        let nine = nine_attributes()["messageAttributes"].clone();
        let records = parse_event(json!({"Records": [
            received(4, now, json!({})),
            received(5, now, json!({})),
            received(5, now, json!({"messageAttributes": nine})),
        ]}))
        .unwrap();
        let ran = || Ran::Handled(Err(HandlerError::transient("DOWN", "503")));
        let fate = |r: &Record, ran: Ran| decide(r, &config(), horizon, ran).fate;
        // receives left: retried
        assert!(matches!(fate(&records[0], ran()), Fate::Retry(_)));
        // the last one: a transient copy with its code
        assert!(matches!(
            fate(&records[1], ran()),
            Fate::DeadLetter { class: "transient", ref reason, .. } if reason == "DOWN"
        ));
        // a copy SQS would refuse (11 attributes): retried, left to SQS, never archived
        assert!(matches!(
            fate(&records[2], ran()),
            Fate::Retry(Failure::Transient { .. })
        ));
        // held behind its FIFO group: retried, so the group keeps its order
        assert_eq!(
            fate(&records[1], Ran::GroupBlocked),
            Fate::Retry(Failure::GroupBlocked)
        );
        // limits unknown: left to SQS
        let unknown = decide(&records[1], &config(), Horizon::now(), ran()).fate;
        assert!(matches!(unknown, Fate::Retry(_)));
    }

    #[test]
    fn the_retention_rule_counts_from_the_deadline_and_in_fifo_from_the_backoffs_cap() {
        // GIVEN a queue keeping messages an hour (visibility 30 s, backoff 2 s … 300 s), and a
        // record whose retention ends in 400 s
        let now = epoch_ms();
        let hour = limits(100, 3600);
        let sent = now + 400_000 - 3_600_000;
        let standard = parse_event(json!({"Records": [received(1, sent, json!({}))]})).unwrap();
        let fifo = parse_event(json!({"Records": [received(1, sent, json!({
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders.fifo",
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": sent.to_string(), "MessageGroupId": "g"}
        }))]}))
        .unwrap();
        let at = |deadline_ms: u64| Horizon {
            limits: Some(&hour),
            now_ms: now,
            deadline_ms,
        };
        let backoff = Backoff::default();
        // its next delivery comes at most 2 s (or the 30 s visibility) + 300 s (the longest
        // batching window) after its backoff is set: from now, in time
        assert_eq!(last_receive(&standard[0], at(now), &backoff), None);
        // but the backoff is set as late as the deadline: 100 s later, too late
        assert!(matches!(
            last_receive(&standard[0], at(now + 100_000), &backoff),
            Some(LastReceive::RetentionEnds { .. })
        ));
        // in FIFO a blocked record takes its group's delay, up to the backoff's cap (300 s)
        assert!(matches!(
            last_receive(&fifo[0], at(now), &backoff),
            Some(LastReceive::RetentionEnds { .. })
        ));
        // a fair queue's record (a standard queue's, with a group) is a standard record
        let fair = parse_event(json!({"Records": [received(1, sent, json!({
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": sent.to_string(), "MessageGroupId": "tenant-a"}
        }))]}))
        .unwrap();
        assert_eq!(fair[0].group_id.as_deref(), Some("tenant-a"));
        assert_eq!(last_receive(&fair[0], at(now), &backoff), None);
    }

    #[test]
    fn blocked_records_follow_their_groups_delay() {
        let records = fifo_records(&["a", "a", "a", "b", "c"]);
        let lanes = plan_lanes(&records, true);
        let (failed, blocked) = (transient(), Failure::GroupBlocked);
        let unreadable = Failure::resq(ErrorCode::HandlerPanic, "boom");
        let failures = [None, Some(&failed), Some(&blocked), Some(&unreadable), None];
        let policy = Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(300),
        };
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let changes = backoff(&records, &lanes, &failures, &policy, 43_000, &mut rng);
            let ids: Vec<usize> = changes.iter().map(|(i, _)| *i).collect();
            assert_eq!(ids, vec![1, 2, 3]);
            assert_eq!(changes[0].1, changes[1].1);
            // receive count 3 ⇒ window [0, 40]
            assert!(changes.iter().all(|(_, s)| (0..=40).contains(s)));
        }
    }

    #[test]
    fn a_redelivery_over_the_budget_is_retried_or_on_its_last_receive_dead_lettered() {
        // GIVEN a queue allowing 5 receives, and redeliveries held back by the retry budget
        let now = epoch_ms();
        let five = limits(5, 345_600);
        let horizon = Horizon {
            limits: Some(&five),
            now_ms: now,
            deadline_ms: now,
        };
        let records = parse_event(json!({"Records": [
            received(2, now, json!({})),
            received(5, now, json!({})),
        ]}))
        .unwrap();
        let d = |r: &Record| decide(r, &config(), horizon, Ran::OverBudget);
        // THEN with receives left it is retried, unrun
        assert_eq!(d(&records[0]), Fate::Retry(Failure::RetryBudget).into());
        // AND on its last one it is a transient DLQ copy, RETRY_BUDGET
        let last = d(&records[1]);
        assert!(
            matches!(last.fate, Fate::DeadLetter { class: "transient", ref reason, .. } if reason == "RETRY_BUDGET"),
            "{last:?}"
        );
        let Some(Action::Copy { message, .. }) = last.action else {
            panic!("{last:?}")
        };
        let attribute = |n: &str| message.attributes[n].string_value.clone();
        assert_eq!(attribute(X_FAILURE_CLASS).as_deref(), Some("transient"));
        assert_eq!(attribute(X_FAILURE_REASON).as_deref(), Some("RETRY_BUDGET"));
    }

    #[test]
    fn a_held_redelivery_waits_the_longest_so_its_retention_is_counted_from_that() {
        // GIVEN a queue keeping messages an hour (visibility 30 s, backoff 2 s … 300 s), and a
        // record on its 2nd receive whose retention ends in 400 s
        let now = epoch_ms();
        let hour = limits(100, 3600);
        let horizon = Horizon {
            limits: Some(&hour),
            now_ms: now,
            deadline_ms: now,
        };
        let sent = now + 400_000 - 3_600_000;
        let records = parse_event(json!({"Records": [received(2, sent, json!({}))]})).unwrap();
        let fate = |ran: Ran| decide(&records[0], &config(), horizon, ran).fate;
        // THEN failed, it comes back within 4 s (its backoff) or 30 s (the visibility), plus
        // 300 s (the longest batching window): in time, retried
        let transient = Ran::Handled(Err(HandlerError::transient("DOWN", "503")));
        assert!(matches!(fate(transient), Fate::Retry(_)));
        // BUT held by the budget it waits 300 s, plus 300 s: too late, dead-lettered now
        assert!(matches!(
            fate(Ran::OverBudget),
            Fate::DeadLetter { class: "transient", ref reason, .. } if reason == "RETRY_BUDGET"
        ));
    }

    #[test]
    fn a_redelivery_held_by_the_budget_waits_the_longest_backoff_and_its_group_with_it() {
        // GIVEN group a held by the budget (a record blocked behind it), and group b failed
        let records = fifo_records(&["a", "a", "b"]);
        let lanes = plan_lanes(&records, true);
        let (held, blocked, failed) = (Failure::RetryBudget, Failure::GroupBlocked, transient());
        let failures = [Some(&held), Some(&blocked), Some(&failed)];
        let policy = Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(300),
        };
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let changes = backoff(&records, &lanes, &failures, &policy, 43_000, &mut rng);
            // THEN group a waits BACKOFF_MAX_SECONDS, no jitter; group b its jittered backoff
            assert_eq!(changes[..2], [(0, 300), (1, 300)]);
            assert!((0..=40).contains(&changes[2].1), "{changes:?}");
        }
        // AND never past SQS's 12 h counted from the receive
        let mut rng = StdRng::seed_from_u64(1);
        let changes = backoff(&records, &lanes, &failures, &policy, 120, &mut rng);
        assert_eq!(changes[..2], [(0, 120), (1, 120)]);
    }

    #[test]
    fn records_that_never_started_need_no_visibility_change() {
        // GIVEN the deadline cut a batch short: a FIFO group and a record unstarted
        let records = fifo_records(&["a", "a", "b"]);
        let lanes = plan_lanes(&records, true);
        let (not_started, blocked) = (Failure::NotStarted, Failure::GroupBlocked);
        let failures = [Some(&not_started), Some(&blocked), Some(&not_started)];
        // THEN nothing is planned: SQS returns them by itself after the visibility timeout
        let mut rng = StdRng::seed_from_u64(1);
        let policy = Backoff::default();
        let changes = backoff(&records, &lanes, &failures, &policy, 43_000, &mut rng);
        assert_eq!(changes, vec![]);
    }

    #[test]
    fn no_delay_passes_the_twelve_hours_counted_from_the_receive() {
        let records = fifo_records(&["a"]);
        let failed = transient();
        let long = Backoff {
            base: Duration::from_secs(43_200),
            cap: Duration::from_secs(43_200),
        };
        for seed in 0..50 {
            let mut rng = StdRng::seed_from_u64(seed);
            let changes = backoff(
                &records,
                &[vec![0]],
                &[Some(&failed)],
                &long,
                1_000,
                &mut rng,
            );
            assert!(changes[0].1 <= 1_000, "{changes:?}");
        }
    }

    #[test]
    fn an_empty_or_unsendable_failure_reason_still_makes_a_sendable_copy() {
        let records = parse_event(json!({"Records": [rec("a", json!({}))]})).unwrap();
        for (given, expected) in [
            ("", "UNSPECIFIED"),
            ("  ", "UNSPECIFIED"),
            ("BAD\u{0}", "BAD_"),
        ] {
            let ran = Ran::Rejected(Rejection::new(given, "details"));
            match decide(&records[0], &config(), Horizon::now(), ran) {
                Decision {
                    fate: Fate::DeadLetter { reason, .. },
                    action: Some(Action::Copy { message, .. }),
                } => {
                    assert_eq!(reason, expected);
                    assert_eq!(
                        message.attributes[X_FAILURE_REASON].string_value.as_deref(),
                        Some(expected)
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn dead_letter_copy_keeps_attributes_and_marks_the_failure() {
        let records = parse_event(json!({"Records": [rec("a", json!({"messageAttributes": {
            "trace": {"stringValue": "t-1", "dataType": "String"}
        }}))]}))
        .unwrap();
        let copy = dead_letter_copy(&records[0], "permanent", "MALFORMED_JSON", false).unwrap();
        assert_eq!(copy.body, "{}");
        assert_eq!(
            copy.attributes["trace"].string_value.as_deref(),
            Some("t-1")
        );
        assert_eq!(
            copy.attributes[X_FAILURE_CLASS].string_value.as_deref(),
            Some("permanent")
        );
        assert_eq!(
            copy.attributes[X_FAILURE_REASON].string_value.as_deref(),
            Some("MALFORMED_JSON")
        );
        assert_eq!(
            copy.attributes[X_FIRST_SENT_AT].string_value.as_deref(),
            Some("1700000000000")
        );
        assert_eq!((copy.group_id, copy.deduplication_id), (None, None));
        // a fair queue's tenant stays on the copy, without a deduplication id
        let fair = parse_event(json!({"Records": [rec("a", json!({"attributes": {
            "ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000", "MessageGroupId": "tenant-a"
        }}))]}))
        .unwrap();
        let copy = dead_letter_copy(&fair[0], "permanent", "MALFORMED_JSON", false).unwrap();
        assert_eq!(
            (copy.group_id.as_deref(), copy.deduplication_id),
            (Some("tenant-a"), None)
        );

        let fifo = fifo_records(&["g7"]);
        let copy = dead_letter_copy(&fifo[0], "permanent", "VALIDATION_FAILED", true).unwrap();
        assert_eq!(copy.group_id.as_deref(), Some("g7"));
        assert_eq!(copy.deduplication_id.as_deref(), Some("permanent-m0"));
    }
    #[test]
    fn dead_letter_copy_over_the_attribute_limit_fails() {
        let records = parse_event(json!({"Records": [nine_attributes()]})).unwrap();
        assert_eq!(
            dead_letter_copy(&records[0], "permanent", "MALFORMED_JSON", false).unwrap_err(),
            CopyRefused::AttributeLimit(AttributeLimitExceeded { count: 12 })
        );
    }
    #[test]
    fn a_dead_letter_copy_over_the_size_limit_travels_as_a_pointer() {
        // a body that fits alone, but not with the failure marks: the copy keeps it whole (the
        // settle executor stores it and sends the pointer), unless no attribute is left for one
        let body = format!("{{{}", "x".repeat(MAX_MESSAGE_BYTES - 10));
        let records = parse_event(json!({"Records": [rec("a", json!({"body": body}))]})).unwrap();
        let copy = dead_letter_copy(&records[0], "permanent", "MALFORMED_JSON", false).unwrap();
        assert_eq!(copy.body, body);
        assert!(copy.size() > MAX_MESSAGE_BYTES);
        let attrs: serde_json::Map<String, serde_json::Value> = (0..7)
            .map(|i| {
                (
                    format!("a{i}"),
                    json!({"dataType": "String", "stringValue": "v"}),
                )
            })
            .collect();
        let full = rec("b", json!({"body": body, "messageAttributes": attrs}));
        let records = parse_event(json!({"Records": [full]})).unwrap();
        let refused =
            dead_letter_copy(&records[0], "permanent", "MALFORMED_JSON", false).unwrap_err();
        assert!(matches!(refused, CopyRefused::Unfit(_)), "{refused:?}");
        assert_eq!(refused.reason(), ArchiveReason::AttributeLimit);
    }
}
