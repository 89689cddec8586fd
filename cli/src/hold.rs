//! What an operator's command holds hidden in the DLQ, and its release (SPEC §9: the CLI's
//! state-changing commands release what they hold when interrupted, by Ctrl-C or an error).
//!
//! [`Holding`] stands between a run and SQS: it notes every DLQ message received and forgets
//! it once deleted or its visibility changed (released, or a kept message hidden on purpose),
//! so that whatever ended the run (its end, an error, a lost connection, Ctrl-C) what is still
//! hidden is known exactly, released, and what could not be released is counted, with when it
//! comes back by itself.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use resq::error::{AwsError, AwsErrorKind};
use resq::settle::{Deadlines, Plan, QueueUrl, Settler, Unpaced};
use resq::sqs::{OutgoingMessage, QueueLimits, Queues, ReceivedMessage};
use resq::store::ObjectStore;

/// How long an interrupted run may take to end what is under way and release what it holds.
pub const GRACE: Duration = Duration::from_secs(5);
/// How long the last release of what a run left hidden may take.
pub const RELEASE_WITHIN: Duration = Duration::from_secs(5);

/// SQS's calls on the DLQ, noting the receipt handles received and not yet deleted nor
/// released (each with when it comes back by itself).
pub struct Holding<Q> {
    inner: Q,
    dlq: String,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    until: HashMap<String, Instant>,
    released: u64,
    /// Receives given up before SQS answered (the run's cut-off, a deadline), and when what
    /// they may have taken comes back at the latest.
    cut_off: usize,
    cut_off_until: Option<Instant>,
}

/// What a command held when it ended, and what became of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// DLQ messages made visible again (by the run, or after it).
    pub released: u64,
    /// DLQ messages that could not be released: they come back by themselves.
    pub left: usize,
    /// Receives given up before SQS answered: what each took (up to 10 messages, unknown to
    /// the run) is hidden until it comes back by itself.
    pub receives_cut_off: usize,
    /// When the last of those comes back, from now.
    pub back_within: Option<Duration>,
}

impl<Q: Queues> Holding<Q> {
    /// `inner`, noting what is received from `dlq`.
    pub fn new(inner: Q, dlq: &str) -> Self {
        Self {
            inner,
            dlq: dlq.to_owned(),
            held: Mutex::new(Held::default()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the handles whose call `results` confirmed; `released` when made visible.
    fn forget(&self, handles: &[&str], results: &[Result<(), AwsError>], released: &[bool]) {
        let mut held = self.held();
        for ((handle, result), released) in handles.iter().zip(results).zip(released) {
            if result.is_ok() && held.until.remove(*handle).is_some() && *released {
                held.released += 1;
            }
        }
    }

    /// Makes visible again whatever is still held, through resq's settle executor, within
    /// `within`; what it released and what it could not.
    pub async fn release_all(&self, store: &impl ObjectStore, within: Duration) -> Released {
        let handles: Vec<String> = self.held().until.keys().cloned().collect();
        if !handles.is_empty() {
            let plan = Plan::release(&QueueUrl::from(self.dlq.as_str()), handles);
            let by = Deadlines::all_by(Instant::now() + within);
            Settler::new(self, store, "resq")
                .settle(&plan, by, &Unpaced)
                .await;
        }
        let held = self.held();
        let now = Instant::now();
        Released {
            released: held.released,
            left: held.until.len(),
            receives_cut_off: held.cut_off,
            back_within: held
                .until
                .values()
                .chain(&held.cut_off_until)
                .max()
                .map(|at| at.saturating_duration_since(now)),
        }
    }
}

impl<Q: Queues> Queues for Holding<Q> {
    async fn receive(
        &self,
        queue: &str,
        max: i32,
        visibility: Option<i32>,
        wait_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, AwsError> {
        // without a visibility of its own, SQS's default of 30 s (the queue's is not read)
        let hidden_for = Duration::from_secs(visibility.unwrap_or(30).max(0) as u64);
        // a receive dropped before its answer (the run cut off, a deadline) may still have
        // taken messages: SQS answered a connection nobody reads
        let pending = (queue == self.dlq).then(|| CutOff {
            held: &self.held,
            hidden_for,
            armed: true,
        });
        let got = self
            .inner
            .receive(queue, max, visibility, wait_seconds)
            .await;
        // so may one that timed out or whose connection broke; any other answer hid nothing
        // the run does not see
        if let Some(mut p) = pending {
            p.armed = matches!(&got, Err(e) if matches!(e.kind, AwsErrorKind::Timeout | AwsErrorKind::Unreachable));
        }
        let got = got?;
        if queue == self.dlq {
            let until = Instant::now() + hidden_for;
            let mut held = self.held();
            for m in &got {
                held.until.insert(m.receipt_handle.clone(), until);
            }
        }
        Ok(got)
    }

    async fn send(
        &self,
        queue: &str,
        messages: &[&OutgoingMessage],
    ) -> Result<Vec<Result<String, AwsError>>, AwsError> {
        self.inner.send(queue, messages).await
    }

    async fn delete(
        &self,
        queue: &str,
        receipt_handles: &[&str],
    ) -> Result<Vec<Result<(), AwsError>>, AwsError> {
        let results = self.inner.delete(queue, receipt_handles).await?;
        if queue == self.dlq {
            self.forget(receipt_handles, &results, &vec![false; results.len()]);
        }
        Ok(results)
    }

    async fn change_visibility(
        &self,
        queue: &str,
        changes: &[(&str, i32)],
    ) -> Result<Vec<Result<(), AwsError>>, AwsError> {
        let results = self.inner.change_visibility(queue, changes).await?;
        if queue == self.dlq {
            let handles: Vec<&str> = changes.iter().map(|(h, _)| *h).collect();
            let released: Vec<bool> = changes.iter().map(|(_, s)| *s == 0).collect();
            self.forget(&handles, &results, &released);
        }
        Ok(results)
    }

    async fn limits(&self, queue: &str) -> Result<QueueLimits, AwsError> {
        self.inner.limits(queue).await
    }
}

/// Counts its receive as cut off when dropped armed (disarmed once SQS answered): what it
/// took is hidden for its visibility from when SQS handled it, at the latest now.
struct CutOff<'a> {
    held: &'a Mutex<Held>,
    hidden_for: Duration,
    armed: bool,
}

impl Drop for CutOff<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.cut_off += 1;
            let until = Instant::now() + self.hidden_for;
            held.cut_off_until = held.cut_off_until.max(Some(until));
        }
    }
}

/// Completes on the first SIGINT (Ctrl-C), SIGTERM or SIGHUP (a terminal or SSH session that
/// went away); never when they cannot be listened to.
pub async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq_testing::{Call, MemorySqs, MemoryStore};

    #[tokio::test]
    async fn what_is_held_is_known_until_deleted_released_or_hidden_and_the_rest_released() {
        // GIVEN a DLQ of 30 messages, 30 received through a Holding
        let sqs = MemorySqs::default();
        for i in 0..30 {
            sqs.push(
                "dlq",
                resq_testing::received(&format!("m{i}"), "{}", 0, &[]),
            );
        }
        let holding = Holding::new(&sqs, "dlq");
        let mut handles = Vec::new();
        for _ in 0..3 {
            let batch = holding.receive("dlq", 10, Some(3600), 0).await.unwrap();
            handles.extend(batch.into_iter().map(|m| m.receipt_handle));
        }
        assert_eq!(handles.len(), 30);
        // WHEN 5 are deleted, 5 released, 5 hidden on purpose (kept)
        let h: Vec<&str> = handles.iter().map(String::as_str).collect();
        holding.delete("dlq", &h[..5]).await.unwrap();
        let release: Vec<(&str, i32)> = h[5..10].iter().map(|h| (*h, 0)).collect();
        holding.change_visibility("dlq", &release).await.unwrap();
        let hide: Vec<(&str, i32)> = h[10..15].iter().map(|h| (*h, 600)).collect();
        holding.change_visibility("dlq", &hide).await.unwrap();
        // AND the release of the rest fails at first
        sqs.fail_calls(Call::ChangeVisibility, true);
        let store = MemoryStore::default();
        let r = holding.release_all(&store, RELEASE_WITHIN).await;
        // THEN the 15 are said to be left, back within the hour they were hidden for
        assert_eq!((r.released, r.left), (5, 15));
        let back = r.back_within.unwrap();
        assert!(back > Duration::from_secs(3500) && back <= Duration::from_secs(3600));
        // AND once SQS answers they are released, 20 in all, none left
        sqs.fail_calls(Call::ChangeVisibility, false);
        let r = holding.release_all(&store, RELEASE_WITHIN).await;
        let all = Released {
            released: 20,
            left: 0,
            receives_cut_off: 0,
            back_within: None,
        };
        assert_eq!(r, all);
        assert_eq!((sqs.len("dlq"), sqs.visible("dlq")), (25, 20));
    }

    #[tokio::test]
    async fn a_receive_given_up_before_its_answer_is_counted_with_when_its_take_comes_back() {
        // GIVEN a slow SQS, and a receive through a Holding given up after 10 ms
        let sqs = MemorySqs::default();
        sqs.push("dlq", resq_testing::received("m", "{}", 0, &[]));
        sqs.set_delay(Duration::from_secs(1));
        let holding = Holding::new(&sqs, "dlq");
        let receive = holding.receive("dlq", 10, Some(60), 0);
        let given_up = tokio::time::timeout(Duration::from_millis(10), receive).await;
        assert!(given_up.is_err());
        // AND one that timed out, one SQS refused, one that got its answer
        sqs.set_delay(Duration::ZERO);
        sqs.time_out_calls(Call::Receive, 1);
        assert!(holding.receive("dlq", 10, Some(60), 0).await.is_err());
        sqs.fail_calls(Call::Receive, true);
        assert!(holding.receive("dlq", 10, Some(60), 0).await.is_err());
        sqs.fail_calls(Call::Receive, false);
        holding.receive("dlq", 10, Some(60), 0).await.unwrap();
        // THEN the release says two receives may have hidden what it never saw (the refused
        // one hid nothing), back within their minute
        let r = holding
            .release_all(&MemoryStore::default(), RELEASE_WITHIN)
            .await;
        assert_eq!((r.released, r.left, r.receives_cut_off), (1, 0, 2));
        let back = r.back_within.unwrap();
        assert!(back > Duration::from_secs(50) && back <= Duration::from_secs(60));
    }
}
