//! The answer to Lambda (docs/design.md, "Batch response"): what became of each record once
//! its action was confirmed or not, the partial batch response and the invocation's metrics.
//! No I/O here.

use std::collections::HashSet;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse};
use resq::attributes::RedriveCount;
use resq::metrics::{self, Metrics};
use resq::reason::{ArchiveReason, ErrorCode};
use resq::settle::{Confirmation, SettleError};

use crate::decide::{Failure, Fate, Ran};
use crate::event::Record;
use crate::handler::HandlerError;

/// Records handled successfully.
pub const PROCESSED: &str = "Processed";
/// Records reported for retry.
pub const RETRIED: &str = "Retried";
/// Records the consumer sent to the DLQ itself (permanent failures).
pub const DEAD_LETTERED: &str = "DeadLettered";
/// A replay that failed again, counted once per failed replay by the consumer, the moment the
/// replayed copy first fails (the replays-failing alarm, and so the breaker, watch it).
pub const REDRIVE_RETURNED: &str = "RedriveReturned";
/// Records the retry budget held back (not run).
pub const RETRY_BUDGET_EXCEEDED: &str = "RetryBudgetExceeded";
/// Of the records whose handler ran, the share that failed transiently (a transient error, a
/// panic, a timeout), in percent; written only when the handler ran at least one (the
/// downstream-failing alarm reads it).
pub const TRANSIENT_FAILURE_PERCENT: &str = "TransientFailurePercent";

/// How a record counts in the handler's metrics ([`RETRY_BUDGET_EXCEEDED`],
/// [`TRANSIENT_FAILURE_PERCENT`]): whether the handler ran it, and how that went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tally {
    /// The handler did not run it: held back unrun, refused by the handler's parsing, not
    /// started before the deadline margin, blocked behind its FIFO group.
    NotRun,
    /// A redelivery the retry budget held back.
    OverBudget,
    /// The handler ran it: it succeeded, or failed permanently.
    Ran,
    /// The handler ran it and it failed transiently: a transient error, a panic, a timeout.
    FailedTransiently,
}

impl Tally {
    /// How a record that came to `ran` counts.
    pub fn of(ran: &Ran) -> Self {
        match ran {
            Ran::NotRun | Ran::NotStarted | Ran::GroupBlocked | Ran::Rejected(_) => Tally::NotRun,
            Ran::OverBudget => Tally::OverBudget,
            Ran::Handled(Err(HandlerError::Transient { .. }))
            | Ran::Panicked(_)
            | Ran::TimedOut => Tally::FailedTransiently,
            Ran::Handled(_) => Tally::Ran,
        }
    }
}

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The order's effect is recorded (or was already).
    Processed,
    /// Archived to S3 with the full message; acknowledged.
    Archived(ArchiveReason),
    /// A copy is in the DLQ with `x-failure-class=permanent` and this reason; acknowledged.
    DeadLettered(String),
    /// Reported in `batchItemFailures`: the message stays in the queue.
    Failed(Failure),
}

impl Outcome {
    /// Reported back to Lambda as failed.
    pub fn is_failed(&self) -> bool {
        matches!(self, Outcome::Failed(_))
    }

    /// Why it is reported failed.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Outcome::Failed(f) => Some(f),
            _ => None,
        }
    }
}

/// A record's outcome: its fate, once the action that carries it out is confirmed. A DLQ copy
/// or archive entry that was refused, or not confirmed in time, leaves the record failed (SQS
/// delivers it again).
pub fn outcome(fate: &Fate, confirmation: Option<&Confirmation>) -> Outcome {
    let unconfirmed = |refused: ErrorCode, what: String| match confirmation {
        Some(Confirmation::Failed(SettleError::Refused(e))) => {
            Outcome::Failed(Failure::resq(refused, format!("{what}: {e}")))
        }
        _ => Outcome::Failed(Failure::resq(
            ErrorCode::SettleDeadline,
            "its DLQ copy or archive entry was not confirmed before the deadline margin; SQS delivers it again",
        )),
    };
    let confirmed = confirmation.is_some_and(Confirmation::is_confirmed);
    match fate {
        Fate::Ack => Outcome::Processed,
        Fate::Retry(f) => Outcome::Failed(f.clone()),
        Fate::DeadLetter { reason, .. } if confirmed => Outcome::DeadLettered(reason.clone()),
        Fate::DeadLetter { reason, .. } => unconfirmed(
            ErrorCode::DlqSendFailed,
            format!("its DLQ copy ({reason}) could not be sent"),
        ),
        Fate::Archive(reason) if confirmed => Outcome::Archived(*reason),
        Fate::Archive(_) => unconfirmed(
            ErrorCode::ArchiveFailed,
            "archive not written, message kept in the queue".to_owned(),
        ),
    }
}

/// A replayed copy (`x-redrive-count` ≥ 1) that failed again, counted once per replay: on its
/// first receive (`ApproximateReceiveCount` 1), when it ran and failed, was found not to be an
/// order, or was held behind a failure of its FIFO group (a FIFO probe of a few groups must be
/// able to trip the alarm). Retries of the same copy are not counted again; neither is a
/// record the deadline kept from starting, nor one archived unrun. A replay the consumer
/// dead-letters on a later receive (its last allowed one) is counted when it reaches the DLQ:
/// SQS no longer moves it without a reason for the redriver to count, and its first receive may
/// not have run (the deadline starts the records with the most receives first). One whose first
/// receive failed too is counted twice: the breaker trips earlier, never later.
pub fn returned_replay(record: &Record, outcome: &Outcome) -> bool {
    let replayed = matches!(record.redrive_count, RedriveCount::Count(n) if n >= 1);
    let failed = match outcome {
        Outcome::Failed(f) => f.ran() || *f == Failure::GroupBlocked,
        Outcome::DeadLettered(_) => true,
        Outcome::Archived(reason) => {
            matches!(
                reason,
                ArchiveReason::AttributeLimit | ArchiveReason::SizeLimit
            )
        }
        Outcome::Processed => false,
    };
    let first_failure = record.receive_count == 1 && failed;
    let reaches_the_dlq = record.receive_count > 1 && matches!(outcome, Outcome::DeadLettered(_));
    replayed && (first_failure || reaches_the_dlq)
}

/// Whether an invocation went as it should, so its `batch done` line is routine (DEBUG) rather
/// than worth an operator's eye (INFO): every one of its `records` processed (none retried,
/// held back, dead-lettered or archived, so no replay returned either) and no call to the
/// downstream throttled (`throttles`: the limit never had to come down). A healthy batch is
/// most batches: at INFO its line would be most of a healthy consumer's log bill. Its metrics
/// are written either way.
pub fn is_healthy(records: usize, metrics: &Metrics, throttles: u64) -> bool {
    metrics.get(PROCESSED) == records as u64 && throttles == 0
}

/// What one invocation did: the response for Lambda and the counts behind it.
#[derive(Debug)]
pub struct BatchReport {
    /// `batchItemFailures` for Lambda.
    pub response: SqsBatchResponse,
    /// Outcome of each record, in event order.
    pub outcomes: Vec<Outcome>,
    /// The invocation's metrics.
    pub metrics: Metrics,
}

/// The answer for `records` with these outcomes and tallies: every failed record's id in the
/// response, in event order, once; and the invocation's metrics.
pub fn answer(records: &[Record], outcomes: Vec<Outcome>, tallies: &[Tally]) -> BatchReport {
    let mut response = SqsBatchResponse::default();
    let mut seen = HashSet::new();
    let names = [
        PROCESSED,
        RETRIED,
        DEAD_LETTERED,
        metrics::ARCHIVED,
        REDRIVE_RETURNED,
        RETRY_BUDGET_EXCEEDED,
    ];
    let mut m = Metrics::new(&names);
    for (r, o) in records.iter().zip(&outcomes) {
        match o {
            Outcome::Processed => m.add(PROCESSED, 1),
            Outcome::Archived(reason) => m.add_archived(*reason, 1),
            Outcome::DeadLettered(_) => m.add(DEAD_LETTERED, 1),
            Outcome::Failed(_) => m.add(RETRIED, 1),
        }
        m.add(REDRIVE_RETURNED, u64::from(returned_replay(r, o)));
        if o.is_failed() && seen.insert(r.message_id.as_str()) {
            let mut f = BatchItemFailure::default();
            f.item_identifier = r.message_id.clone();
            response.batch_item_failures.push(f);
        }
    }
    let count = |of: &[Tally]| tallies.iter().filter(|t| of.contains(t)).count();
    m.add(RETRY_BUDGET_EXCEEDED, count(&[Tally::OverBudget]) as u64);
    let ran = count(&[Tally::Ran, Tally::FailedTransiently]);
    if ran > 0 {
        let failed = count(&[Tally::FailedTransiently]);
        m.set_percent(
            TRANSIENT_FAILURE_PERCENT,
            100.0 * failed as f64 / ran as f64,
        );
    }
    BatchReport {
        response,
        outcomes,
        metrics: m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::fifo_records;
    use resq::error::AwsError;
    use resq::telemetry::{LogLevel, Names, Telemetry};

    #[test]
    fn response_lists_each_failed_id_once_in_order() {
        let records = fifo_records(&["a", "a", "b", "c"]);
        let outcomes = vec![
            Outcome::Failed(Failure::Transient {
                code: "X".into(),
                details: String::new(),
            }),
            Outcome::Failed(Failure::GroupBlocked),
            Outcome::Processed,
            Outcome::DeadLettered("MALFORMED_JSON".into()),
        ];
        let tallies = [Tally::NotRun; 4];
        let ids: Vec<String> = answer(&records, outcomes.clone(), &tallies)
            .response
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        assert_eq!(ids, vec!["m0", "m1"]);
        let mut dup = records.clone();
        dup[1].message_id = "m0".into();
        let report = answer(&dup, outcomes, &tallies);
        assert_eq!(report.response.batch_item_failures.len(), 1);
    }
    #[test]
    fn an_action_not_confirmed_leaves_its_record_failed_and_says_why() {
        let dead_letter = Fate::DeadLetter {
            class: resq::attributes::FAILURE_CLASS_PERMANENT,
            reason: "MALFORMED_JSON".into(),
            details: String::new(),
        };
        let archive = Fate::Archive(ArchiveReason::RedriveCap);
        let confirmed = Confirmation::Confirmed(None);
        assert_eq!(
            outcome(&dead_letter, Some(&confirmed)),
            Outcome::DeadLettered("MALFORMED_JSON".into())
        );
        assert_eq!(
            outcome(&archive, Some(&confirmed)),
            Outcome::Archived(ArchiveReason::RedriveCap)
        );
        let refused = Confirmation::Failed(SettleError::Refused(AwsError::service(
            "ThrottlingException",
            "slow down",
        )));
        let unanswered = Confirmation::Failed(SettleError::Unanswered(None));
        let code = |o: Outcome| match o {
            Outcome::Failed(Failure::Resq { code, details }) => (code, details),
            other => panic!("{other:?}"),
        };
        let (c, details) = code(outcome(&dead_letter, Some(&refused)));
        assert_eq!(c, ErrorCode::DlqSendFailed);
        assert!(
            details.contains("MALFORMED_JSON") && details.contains("slow down"),
            "{details}"
        );
        assert_eq!(
            code(outcome(&archive, Some(&refused))).0,
            ErrorCode::ArchiveFailed
        );
        for c in [Some(&unanswered), None] {
            assert_eq!(code(outcome(&archive, c)).0, ErrorCode::SettleDeadline);
            assert_eq!(code(outcome(&dead_letter, c)).0, ErrorCode::SettleDeadline);
        }
    }

    #[test]
    fn a_batch_is_healthy_only_when_every_record_was_processed_and_nothing_throttled() {
        let records = fifo_records(&["a", "b", "c"]);
        let transient = Failure::Transient {
            code: "DOWN".into(),
            details: String::new(),
        };
        let report = |third: Outcome, tally: Tally| {
            let outcomes = vec![Outcome::Processed, Outcome::Processed, third];
            answer(&records, outcomes, &[Tally::Ran, Tally::Ran, tally]).metrics
        };
        // GIVEN every record processed and no throttled call: healthy (DEBUG)
        let all_good = report(Outcome::Processed, Tally::Ran);
        assert!(is_healthy(records.len(), &all_good, 0));
        // a throttled call, even one the SDK's retry got through, is worth a look
        assert!(!is_healthy(records.len(), &all_good, 1));
        // every other fate of one record makes the line INFO
        let others = [
            (Outcome::Failed(transient), Tally::FailedTransiently),
            (Outcome::Failed(Failure::GroupBlocked), Tally::NotRun),
            (Outcome::Failed(Failure::RetryBudget), Tally::OverBudget),
            (Outcome::Failed(Failure::NotStarted), Tally::NotRun),
            (
                Outcome::DeadLettered("MALFORMED_JSON".into()),
                Tally::NotRun,
            ),
            (Outcome::Archived(ArchiveReason::SizeLimit), Tally::NotRun),
        ];
        for (third, tally) in others {
            let m = report(third.clone(), tally);
            assert!(!is_healthy(records.len(), &m, 0), "{third:?}");
        }
    }

    #[test]
    fn what_ran_is_tallied_by_how_it_went() {
        let transient = HandlerError::transient("DOWN", "503");
        let permanent = HandlerError::permanent("ORDER_REJECTED", "no such product");
        let rejected = crate::handler::Rejection::malformed("not JSON");
        let cases = [
            (Ran::NotRun, Tally::NotRun),
            (Ran::NotStarted, Tally::NotRun),
            (Ran::GroupBlocked, Tally::NotRun),
            (Ran::Rejected(rejected), Tally::NotRun),
            (Ran::OverBudget, Tally::OverBudget),
            (Ran::Handled(Ok(())), Tally::Ran),
            (Ran::Handled(Err(permanent)), Tally::Ran),
            (Ran::Handled(Err(transient)), Tally::FailedTransiently),
            (Ran::Panicked("boom".into()), Tally::FailedTransiently),
            (Ran::TimedOut, Tally::FailedTransiently),
        ];
        for (ran, tally) in cases {
            assert_eq!(Tally::of(&ran), tally, "{ran:?}");
        }
    }

    #[test]
    fn the_transient_failure_share_counts_only_what_the_handler_ran() {
        // GIVEN six records: three the handler ran (one failed transiently), one held back by
        // the budget, two it never ran
        let records = fifo_records(&["a", "b", "c", "d", "e", "f"]);
        let failed = || Outcome::Failed(Failure::RetryBudget);
        let outcomes = vec![
            Outcome::Processed,
            Outcome::DeadLettered("ORDER_REJECTED".into()),
            Outcome::DeadLettered("DOWNSTREAM_UNAVAILABLE".into()),
            failed(),
            Outcome::Failed(Failure::NotStarted),
            Outcome::Archived(ArchiveReason::RedriveCap),
        ];
        let tallies = [
            Tally::Ran,
            Tally::Ran,
            Tally::FailedTransiently,
            Tally::OverBudget,
            Tally::NotRun,
            Tally::NotRun,
        ];
        let m = answer(&records, outcomes, &tallies).metrics;
        // THEN one in three failed; one was held back
        assert_eq!(m.percent(TRANSIENT_FAILURE_PERCENT), Some(100.0 / 3.0));
        assert_eq!(m.get(RETRY_BUDGET_EXCEEDED), 1);
        // AND with nothing run, no share at all, and the count written as 0
        let m = answer(
            &records[..2],
            vec![failed(), failed()],
            &[Tally::OverBudget; 2],
        )
        .metrics;
        assert_eq!(m.percent(TRANSIENT_FAILURE_PERCENT), None);
        assert_eq!(m.get(RETRY_BUDGET_EXCEEDED), 2);
        let m = answer(&records[..1], vec![Outcome::Processed], &[Tally::Ran]).metrics;
        assert_eq!(m.percent(TRANSIENT_FAILURE_PERCENT), Some(0.0));
        let t = Telemetry::of(Names::ORDERS, "orders-consumer", None).unwrap();
        let line = &m.to_lines(&t, chrono::Utc::now(), LogLevel::Info)[0];
        assert!(line.contains(r#""RetryBudgetExceeded":0"#), "{line}");
    }

    #[test]
    fn a_replay_is_counted_failed_once_and_only_when_it_ran() {
        let mut r = fifo_records(&["a"]).remove(0);
        let transient = Outcome::Failed(Failure::Transient {
            code: "X".into(),
            details: String::new(),
        });
        // not a replay
        r.receive_count = 1;
        r.redrive_count = RedriveCount::Count(0);
        assert!(!returned_replay(&r, &transient));
        // a replay failing on its first receive: counted
        r.redrive_count = RedriveCount::Count(2);
        assert!(returned_replay(&r, &transient));
        assert!(returned_replay(
            &r,
            &Outcome::DeadLettered("ORDER_REJECTED".into())
        ));
        assert!(returned_replay(
            &r,
            &Outcome::Archived(ArchiveReason::SizeLimit)
        ));
        // the same replay failing again on later receives: not counted again
        r.receive_count = 2;
        assert!(!returned_replay(&r, &transient));
        // but when the consumer dead-letters it (on its last allowed receive), it is: SQS no
        // longer moves it without a reason for the redriver to count
        r.receive_count = 5;
        assert!(returned_replay(
            &r,
            &Outcome::DeadLettered("DOWNSTREAM_UNAVAILABLE".into())
        ));
        // held behind a failure of its FIFO group: counted (the group's replays failed)
        r.receive_count = 1;
        assert!(returned_replay(&r, &Outcome::Failed(Failure::GroupBlocked)));
        // not started, archived unrun, or processed: not a failed replay
        for o in [
            Outcome::Failed(Failure::NotStarted),
            Outcome::Archived(ArchiveReason::RedriveCap),
            Outcome::Processed,
        ] {
            assert!(!returned_replay(&r, &o), "{o:?}");
        }
    }
}
