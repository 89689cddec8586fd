//! The consumer's settling (docs/design.md, "Consumer phases"): what the records' fates still
//! need (DLQ copies, archive entries, then the backoff of what failed) carried out through
//! resq's settle executor by the settle deadline, and what became of each record logged in its
//! span.

use std::time::Instant;

use resq::reason::ErrorCode;
use resq::settle::{Action, Confirmation, Deadlines, Plan, QueueUrl, SettleError, Unpaced};
use resq::sqs::Queues;
use resq::store::ObjectStore;

use crate::account::{self, Outcome};
use crate::decide::{self, Failure, Fate};
use crate::engine::{Consumer, Settling};
use crate::event::Record;
use crate::handler::MessageHandler;
use resq::attributes::{FAILURE_CLASS_PERMANENT, FAILURE_CLASS_TRANSIENT};

impl<H: MessageHandler, Q: Queues, S: ObjectStore> Consumer<H, Q, S> {
    /// Carries out the actions still to settle (DLQ copies, archive entries) by `settle_by`,
    /// and says what became of every record.
    pub(crate) async fn settle(&self, ran: &mut [Settling], settle_by: Instant) -> Vec<Outcome> {
        let pending: Vec<usize> = (0..ran.len())
            .filter(|&i| ran[i].action.is_some())
            .collect();
        let actions = pending
            .iter()
            .filter_map(|&i| ran[i].action.take())
            .collect();
        let confirmations = self.settle_plan(actions, settle_by).await;
        for (i, c) in pending.into_iter().zip(confirmations) {
            ran[i].settled = Some(c);
        }
        let outcomes = ran
            .iter()
            .map(|s| account::outcome(&s.fate, s.settled.as_ref()));
        let outcomes: Vec<Outcome> = outcomes.collect();
        for (s, o) in ran.iter().zip(&outcomes) {
            log_outcome(s, o);
        }
        outcomes
    }

    /// Settles independent actions by `until`; what became of each, in order.
    pub(crate) async fn settle_plan(
        &self,
        actions: Vec<Action>,
        until: Instant,
    ) -> Vec<Confirmation> {
        if actions.is_empty() {
            return Vec::new();
        }
        let mut plan = Plan::new();
        for action in actions {
            plan.push(action);
        }
        let report = self
            .settler
            .settle(&plan, Deadlines::all_by(until), &Unpaced)
            .await;
        report.iter().map(|(_, c)| c.clone()).collect()
    }

    /// Backs off what failed, within SQS's 12 h from the receive, by `settle_by`.
    pub(crate) async fn back_off(
        &self,
        records: &[Record],
        queues: &[&QueueUrl],
        lanes: &[Vec<usize>],
        outcomes: &[Outcome],
        received_at: Instant,
        settle_by: Instant,
    ) {
        let ceiling = resq::sqs::visibility_left(received_at.elapsed());
        let failures: Vec<Option<&Failure>> = outcomes.iter().map(Outcome::failure).collect();
        let backoff = &self.config.backoff;
        let delays = decide::backoff(
            records,
            lanes,
            &failures,
            backoff,
            ceiling,
            &mut rand::rng(),
        );
        // each on the queue it came from (its eventSourceARN)
        let changes = delays.iter().map(|&(i, seconds)| Action::ChangeVisibility {
            of: queues[i].clone(),
            receipt_handle: records[i].receipt_handle.clone(),
            seconds,
        });
        let confirmations = self.settle_plan(changes.collect(), settle_by).await;
        let mut unanswered = 0;
        for ((i, _), c) in delays.iter().zip(&confirmations) {
            match c {
                Confirmation::Confirmed(_) => {}
                // still reported failed: it comes back after the queue's visibility timeout
                Confirmation::Failed(SettleError::Refused(why)) => {
                    tracing::warn!(message_id = %records[*i].message_id, correlation_id = self.correlation_id(&records[*i]), error_code = ErrorCode::VisibilityChangeFailed.code(), error_details = %why, "could not back the message off")
                }
                _ => unanswered += 1,
            }
        }
        if unanswered > 0 {
            tracing::warn!(
                planned = unanswered,
                error_code = ErrorCode::VisibilityChangeDeadline.code(),
                "backoff not confirmed before the deadline margin; those records come back after the queue's visibility timeout"
            );
        }
    }
}

/// Logs what became of a record's DLQ copy or archive entry, in its span.
fn log_outcome(s: &Settling, outcome: &Outcome) {
    let _enter = s.span.enter();
    match outcome {
        Outcome::Archived(reason) => {
            s.span.record("error_code", reason.code());
            let key = match &s.settled {
                Some(Confirmation::Confirmed(key)) => key.as_deref(),
                _ => None,
            };
            tracing::warn!(reason = reason.code(), key, "archived")
        }
        Outcome::DeadLettered(reason) => {
            let new_id = match &s.settled {
                Some(Confirmation::Confirmed(id)) => id.as_deref(),
                _ => None,
            };
            match &s.fate {
                Fate::DeadLetter { class, details, .. } if *class == FAILURE_CLASS_TRANSIENT => {
                    tracing::warn!(reason = %reason, new_message_id = new_id, failure_class = *class, error_details = %details, "sent to the DLQ on its last allowed receive")
                }
                _ => {
                    tracing::warn!(reason = %reason, new_message_id = new_id, failure_class = FAILURE_CLASS_PERMANENT, "sent to the DLQ as a permanent failure")
                }
            }
        }
        Outcome::Failed(Failure::Resq { code, details })
            if matches!(
                code,
                ErrorCode::DlqSendFailed | ErrorCode::ArchiveFailed | ErrorCode::SettleDeadline
            ) =>
        {
            s.span.record("error_code", code.code());
            s.span.record("error_details", details.as_str());
            tracing::warn!("not settled; will be retried")
        }
        Outcome::Processed | Outcome::Failed(_) => {}
    }
}
