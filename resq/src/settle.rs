//! The settle executor: the one place where both functions carry out what they decided
//! (docs/design.md, "Settle"). A function decides, as a value, a [`Plan`] of typed
//! [`Action`]s (copy a message to a queue, write an archive entry, note a kept message in the
//! keep list, delete a received message, change its visibility); [`Settler::settle`] carries
//! it out and reports each action as confirmed, failed (with the typed error) or not
//! attempted.
//!
//! - **Lanes.** Actions go into lanes; an action that is not confirmed holds the rest of its
//!   lane, which is then not attempted. A message's delete waits in its lane for its copy or
//!   archive entry (nothing leaves a queue before its next home is confirmed); a FIFO
//!   message group is one lane, so a later message of a group is never sent ahead of an
//!   earlier one that did not go, and no call carries two messages of one group.
//! - **Batches.** What is ready goes out in as few calls as SQS allows: copies per queue in
//!   `SendMessageBatch` calls of at most 10 entries and 1 MiB, deletes and visibility changes
//!   10 per call, kept messages in lists of up to 2,000; archive entries one conditional put
//!   each. Calls run concurrently, SQS's and S3's each up to their own limit.
//! - **Pace.** Copies take their turn from a [`Pacer`] (the redriver's token bucket); one
//!   still waiting when copies must stop starting is not attempted.
//! - **Deadlines.** Copies, archive writes and keep lists are answered by
//!   [`Deadlines::move_by`], deletes and visibility changes by [`Deadlines::settle_by`], or
//!   they count as unanswered: they may or may not have taken effect, so nothing that depends
//!   on them happens, and SQS brings the message back by itself.
//! - **Shared.** A settler holds no state between calls: several plans may settle at once
//!   (the consumer's lanes, batches in flight under one pacer).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::archive::{ArchiveEntry, Archiver};
use crate::error::AwsError;
use crate::keep::{KeptMessage, MAX_ENTRIES_PER_LIST};
use crate::sqs::{CALLS_IN_FLIGHT, MAX_BATCH, OutgoingMessage, Queues};
use crate::store::ObjectStore;

/// A queue's URL, shared by the actions on it.
pub type QueueUrl = Arc<str>;

/// One thing to do with SQS or S3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send a copy to a queue (`SendMessageBatch`).
    Copy {
        /// The queue.
        to: QueueUrl,
        /// The copy.
        message: OutgoingMessage,
    },
    /// Write an archive entry (a conditional put: an entry already there counts as written).
    Archive(Box<ArchiveEntry>),
    /// Note a kept message in its queue's keep list (before it is hidden).
    Keep {
        /// The queue it is kept in.
        queue: QueueUrl,
        /// The entry.
        message: KeptMessage,
    },
    /// Delete a received message (`DeleteMessageBatch`); a delete SQS refused is tried once
    /// more while its receipt handle holds.
    Delete {
        /// The queue.
        from: QueueUrl,
        /// The receipt handle of its receive.
        receipt_handle: String,
    },
    /// Change a received message's visibility timeout (`ChangeMessageVisibilityBatch`).
    ChangeVisibility {
        /// The queue.
        of: QueueUrl,
        /// The receipt handle of its receive.
        receipt_handle: String,
        /// The new timeout (0 makes it visible at once).
        seconds: i32,
    },
}

/// An action's place in its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionId(usize);

/// Actions in lanes, decided as a value and carried out by [`Settler::settle`].
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Each action, and the one it waits for.
    steps: Vec<(Action, Option<usize>)>,
    /// The last action of each named lane.
    lanes: HashMap<String, usize>,
}

impl Plan {
    /// An empty plan.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an action in a lane of its own: it waits for nothing.
    pub fn push(&mut self, action: Action) -> ActionId {
        self.add(action, None)
    }

    /// Adds an action at the end of lane `lane` (a FIFO message group): it is attempted only
    /// once the lane's previous action is confirmed.
    pub fn push_to(&mut self, lane: &str, action: Action) -> ActionId {
        let after = self.lanes.get(lane).copied();
        let id = self.add(action, after);
        self.lanes.insert(lane.to_owned(), id.0);
        id
    }

    /// Adds an action attempted only once `after` is confirmed (a message's delete after its
    /// copy). It holds back only what is added after it.
    pub fn then(&mut self, after: ActionId, action: Action) -> ActionId {
        self.add(action, Some(after.0))
    }

    /// A plan that makes received messages of `queue` visible again at once (visibility 0):
    /// what a run held, what a peek looked at.
    pub fn release(queue: &QueueUrl, receipt_handles: impl IntoIterator<Item = String>) -> Self {
        let mut plan = Self::new();
        for receipt_handle in receipt_handles {
            plan.push(Action::ChangeVisibility {
                of: queue.clone(),
                receipt_handle,
                seconds: 0,
            });
        }
        plan
    }

    fn add(&mut self, action: Action, after: Option<usize>) -> ActionId {
        self.steps.push((action, after));
        ActionId(self.steps.len() - 1)
    }

    /// The plan's actions, in order.
    pub fn actions(&self) -> impl Iterator<Item = &Action> {
        self.steps.iter().map(|(action, _)| action)
    }

    /// Actions in the plan.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// When a settle's actions must be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// No copy starts after this (one still waiting for its pacer is not attempted).
    pub start_by: Instant,
    /// Copies, archive writes and keep lists are answered by this.
    pub move_by: Instant,
    /// Deletes and visibility changes are answered by this.
    pub settle_by: Instant,
}

impl Deadlines {
    /// The cut-offs of an invocation whose Lambda deadline is `deadline`, with margin `m`
    /// (`DEADLINE_MARGIN_MS`): nothing starts after `deadline - m`, what moves a message (and,
    /// in the consumer, a running record) ends by `deadline - m/2`, and the settling calls by
    /// `deadline - m/settle_share`; the rest of the margin is for the answer, the summary and
    /// the metrics.
    pub fn before(deadline: Instant, margin: Duration, settle_share: u32, now: Instant) -> Self {
        let at = |d: Duration| deadline.checked_sub(d).unwrap_or(now.min(deadline));
        Self {
            start_by: at(margin),
            move_by: at(margin / 2),
            settle_by: at(margin / settle_share.max(1)),
        }
    }

    /// Every action by `at`.
    pub fn all_by(at: Instant) -> Self {
        Self {
            start_by: at,
            move_by: at,
            settle_by: at,
        }
    }
}

/// What became of one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Done. For a copy its new message id, for an archive entry or a keep list its key.
    Confirmed(Option<String>),
    /// Not done, or not known to be done.
    Failed(SettleError),
    /// Not attempted.
    NotAttempted(Unattempted),
}

impl Confirmation {
    /// It is done.
    pub fn is_confirmed(&self) -> bool {
        matches!(self, Confirmation::Confirmed(_))
    }
}

/// Why an action is not confirmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    /// SQS or S3 refused it, or its call failed: it did not take effect.
    #[error("{0}")]
    Refused(AwsError),
    /// No answer: the call broke, timed out or could not be read (its error, when it gave one),
    /// or its deadline came first (`None`). It may or may not have taken effect.
    #[error("{}", match .0 {
        Some(e) => format!("{e} (no answer: it may have taken effect)"),
        None => "not answered before the deadline margin".to_owned(),
    })]
    Unanswered(Option<AwsError>),
}

/// Why an action was not attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unattempted {
    /// An action before it in its lane was not confirmed.
    Blocked,
    /// Its deadline came before it could start (a copy still waiting for its pacer).
    OutOfTime,
}

/// What became of each action of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    results: Vec<Confirmation>,
    started: Vec<Option<Instant>>,
    /// How long the call carrying each action took to be answered (its last attempt).
    took: Vec<Option<Duration>>,
}

impl Report {
    /// The report [`Settler::settle`] gives for `plan` when `answer` says what became of each
    /// action it attempts, every call started at `at`: an action that waits for one not
    /// confirmed is not attempted (the lane rule), and an answer of `NotAttempted` leaves the
    /// action unstarted. For doubles of the executor, and tests of what a function does with a
    /// report.
    pub fn of(plan: &Plan, at: Instant, mut answer: impl FnMut(&Action) -> Confirmation) -> Self {
        let mut results: Vec<Confirmation> = Vec::with_capacity(plan.len());
        let mut started = Vec::with_capacity(plan.len());
        let mut took = Vec::with_capacity(plan.len());
        for (action, after) in &plan.steps {
            let blocked = after.is_some_and(|a| !results[a].is_confirmed());
            let result = match blocked {
                true => Confirmation::NotAttempted(Unattempted::Blocked),
                false => answer(action),
            };
            let attempted = !matches!(result, Confirmation::NotAttempted(_));
            started.push(attempted.then_some(at));
            took.push(attempted.then_some(Duration::ZERO));
            results.push(result);
        }
        Self {
            results,
            started,
            took,
        }
    }

    /// What became of action `id`.
    pub fn get(&self, id: ActionId) -> &Confirmation {
        &self.results[id.0]
    }

    /// When the call carrying action `id` started (none if it was not attempted).
    pub fn started_at(&self, id: ActionId) -> Option<Instant> {
        self.started[id.0]
    }

    /// How long the call carrying action `id` waited for its answer (none if it was not
    /// attempted, or never left the process: a copy whose body could not be stored): SQS's or
    /// S3's latency as the caller saw it.
    pub fn took(&self, id: ActionId) -> Option<Duration> {
        self.took[id.0]
    }

    /// Every action's confirmation, in plan order.
    pub fn iter(&self) -> impl Iterator<Item = (ActionId, &Confirmation)> {
        self.results
            .iter()
            .enumerate()
            .map(|(i, c)| (ActionId(i), c))
    }
}

/// Gives copies their turn: the redriver's rate.
pub trait Pacer: Sync {
    /// Waits until up to `n` more copies to `queue` may go, at most until `until`; how many
    /// may go.
    fn admit(&self, queue: &str, n: usize, until: Instant) -> impl Future<Output = usize> + Send;
}

/// No pace: every copy may go at once.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unpaced;

impl Pacer for Unpaced {
    async fn admit(&self, _queue: &str, n: usize, _until: Instant) -> usize {
        n
    }
}

/// One call's worth of ready actions: their places in the plan, and what each carries.
enum Call<'p> {
    Send(&'p str, Vec<(usize, &'p OutgoingMessage)>),
    Delete(&'p str, Vec<(usize, &'p str)>),
    ChangeVisibility(&'p str, Vec<(usize, (&'p str, i32))>),
    Keep(&'p str, Vec<(usize, &'p KeptMessage)>, usize),
    Archive(usize, &'p ArchiveEntry),
}

impl Call<'_> {
    /// An archive entry or a keep list: a call to S3.
    fn is_s3(&self) -> bool {
        matches!(self, Call::Archive(..) | Call::Keep(..))
    }
}

/// What a call reports: per action, what became of it, and when its call started and was
/// answered (none: it never reached SQS or S3, such as a copy whose body could not be stored).
type Outcomes = Vec<(usize, Confirmation, Option<(Instant, Option<Instant>)>)>;

/// Carries out plans against SQS and S3.
#[derive(Debug, Clone)]
pub struct Settler<Q, S> {
    queues: Q,
    archiver: Archiver<S>,
    calls_in_flight: usize,
}

impl<Q: Queues, S: ObjectStore> Settler<Q, S> {
    /// A settler whose archive entries are signed `archived_by`.
    pub fn new(queues: Q, store: S, archived_by: &str) -> Self {
        Self {
            queues,
            archiver: Archiver::new(store, archived_by),
            calls_in_flight: CALLS_IN_FLIGHT,
        }
    }

    /// At most `n` S3 calls at once (default `CALLS_IN_FLIGHT`); SQS calls, at most
    /// `CALLS_IN_FLIGHT` (or `n`, if fewer), have slots of their own.
    pub fn with_calls_in_flight(mut self, n: usize) -> Self {
        self.calls_in_flight = n.max(1);
        self
    }

    /// The queues it settles on.
    pub fn queues(&self) -> &Q {
        &self.queues
    }

    /// The store it archives to.
    pub fn store(&self) -> &S {
        self.archiver.store()
    }

    /// Carries `plan` out by `by`, copies paced by `pacer`, and reports each action. Each round
    /// starts what is ready (its lane's previous action confirmed) in as few calls as SQS
    /// allows; what an unconfirmed action holds is not attempted.
    pub async fn settle(&self, plan: &Plan, by: Deadlines, pacer: &impl Pacer) -> Report {
        let n = plan.len();
        let mut results: Vec<Option<Confirmation>> = vec![None; n];
        let mut started = vec![None; n];
        let mut took = vec![None; n];
        let mut retried = vec![false; n];
        let mut part = 0;
        let run = format!("{:016x}", rand::random::<u64>());
        loop {
            let ready = ready(plan, &mut results);
            if ready.is_empty() {
                break;
            }
            let (to_s3, to_sqs): (Vec<Call<'_>>, Vec<Call<'_>>) = calls(plan, &ready, &mut part)
                .into_iter()
                .partition(Call::is_s3);
            // each call is bounded by its own deadline, and one that could not start before it
            // is not attempted: the round ends by the settle deadline. SQS and S3 calls have
            // their own slots, so slow archive writes never keep a batch's DLQ copies waiting.
            let sqs_slots = CALLS_IN_FLIGHT.min(self.calls_in_flight);
            let (sqs_done, s3_done) = futures::join!(
                self.execute_all(to_sqs, sqs_slots, by, pacer, &run),
                self.execute_all(to_s3, self.calls_in_flight, by, pacer, &run),
            );
            let done = sqs_done.into_iter().chain(s3_done);
            let mut again = Vec::new();
            for (i, confirmation, at) in done.into_iter().flatten() {
                started[i] = started[i].or(at.map(|(at, _)| at));
                took[i] =
                    at.and_then(|(at, answered)| Some(answered?.saturating_duration_since(at)));
                let refused_delete = matches!(plan.steps[i].0, Action::Delete { .. })
                    && matches!(confirmation, Confirmation::Failed(SettleError::Refused(_)));
                if refused_delete && !retried[i] && Instant::now() < by.settle_by {
                    retried[i] = true;
                    again.push(i);
                } else {
                    results[i] = Some(confirmation);
                }
            }
            // every call answers for each action it carries; this is only a guard
            for &i in &ready {
                if results[i].is_none() && !again.contains(&i) {
                    results[i] = Some(Confirmation::Failed(SettleError::Unanswered(None)));
                }
            }
        }
        Report {
            results: results
                .into_iter()
                .map(|r| r.unwrap_or(Confirmation::Failed(SettleError::Unanswered(None))))
                .collect(),
            started,
            took,
        }
    }

    /// `calls`, up to `in_flight` at once.
    async fn execute_all(
        &self,
        calls: Vec<Call<'_>>,
        in_flight: usize,
        by: Deadlines,
        pacer: &impl Pacer,
        run: &str,
    ) -> Vec<Outcomes> {
        // collected first: a future holding the `map` adapter over `Call<'_>` is not proven
        // `Send` (rustc's higher-ranked lifetime limit), and the consumer's concurrent runtime
        // needs it to be
        let tasks: Vec<_> = calls
            .into_iter()
            .map(|c| self.execute(c, by, pacer, run))
            .collect();
        futures::stream::iter(tasks)
            .buffer_unordered(in_flight)
            .collect()
            .await
    }

    /// One call; every action it carries gets its confirmation.
    async fn execute(
        &self,
        call: Call<'_>,
        by: Deadlines,
        pacer: &impl Pacer,
        run: &str,
    ) -> Outcomes {
        match call {
            Call::Send(queue, copies) => self.send(queue, copies, by, pacer).await,
            Call::Delete(queue, entries) => {
                let (ids, handles): (Vec<usize>, Vec<&str>) = entries.into_iter().unzip();
                let answer = self.queues.delete(queue, &handles);
                answered(ids, by.settle_by, answer, |()| None).await
            }
            Call::ChangeVisibility(queue, entries) => {
                let (ids, changes): (Vec<usize>, Vec<(&str, i32)>) = entries.into_iter().unzip();
                let answer = self.queues.change_visibility(queue, &changes);
                answered(ids, by.settle_by, answer, |()| None).await
            }
            Call::Archive(i, entry) => {
                let write = async {
                    let (key, _) = self.archiver.write(entry, chrono::Utc::now()).await?;
                    Ok(vec![Ok(key)])
                };
                answered(vec![i], by.move_by, write, Some).await
            }
            Call::Keep(queue, entries, part) => {
                let (ids, kept): (Vec<usize>, Vec<KeptMessage>) =
                    entries.into_iter().map(|(i, k)| (i, k.clone())).unzip();
                let write = async {
                    let (store, at) = (self.archiver.store(), chrono::Utc::now());
                    let key = crate::keep::write_list(store, queue, run, part, at, &kept).await?;
                    Ok(vec![Ok(key); kept.len()])
                };
                answered(ids, by.move_by, write, Some).await
            }
        }
    }

    /// One `SendMessageBatch`, once its copies have their turn.
    async fn send(
        &self,
        queue: &str,
        copies: Vec<(usize, &OutgoingMessage)>,
        by: Deadlines,
        pacer: &impl Pacer,
    ) -> Outcomes {
        let start_by = by.start_by.min(by.move_by);
        let admitted = if Instant::now() < start_by {
            pacer
                .admit(queue, copies.len(), start_by)
                .await
                .min(copies.len())
        } else {
            0
        };
        let (go, wait) = copies.split_at(admitted);
        let mut out: Outcomes = wait
            .iter()
            .map(|&(i, _)| (i, out_of_time(), None))
            .collect();
        if go.is_empty() {
            return out;
        }
        let mut sendable = Vec::with_capacity(go.len());
        for &(i, message) in go {
            match self.offload(message, by.move_by).await {
                Ok(copy) => sendable.push((i, copy)),
                // started, so counted as attempted, but it never reached SQS: no latency
                Err(failed) => out.push((i, failed, Some((Instant::now(), None)))),
            }
        }
        let (ids, messages): (Vec<usize>, Vec<Cow<'_, OutgoingMessage>>) =
            sendable.into_iter().unzip();
        let messages: Vec<&OutgoingMessage> = messages.iter().map(AsRef::as_ref).collect();
        let answer = self.queues.send(queue, &messages);
        out.extend(answered(ids, by.move_by, answer, Some).await);
        out
    }

    /// A copy as it can travel: as it is, or, too large for SQS, as a pointer to its body,
    /// which is stored first under `payloads/` in the archive bucket (by `by`).
    async fn offload<'m>(
        &self,
        message: &'m OutgoingMessage,
        by: Instant,
    ) -> Result<Cow<'m, OutgoingMessage>, Confirmation> {
        let store = self.archiver.store();
        let Some((pointer, body, attributes)) = crate::payload::offload(
            &message.body,
            &message.attributes,
            store.bucket(),
            chrono::Utc::now(),
        ) else {
            return Ok(Cow::Borrowed(message));
        };
        let put = async {
            let stored = store.put_if_absent(&pointer.key, message.body.clone().into_bytes());
            stored.await.map(|_| vec![Ok(())])
        };
        match answered(vec![0], by, put, |()| None).await.pop() {
            Some((_, Confirmation::Confirmed(_), _)) => Ok(Cow::Owned(OutgoingMessage {
                body,
                attributes,
                group_id: message.group_id.clone(),
                deduplication_id: message.deduplication_id.clone(),
            })),
            Some((_, refused, _)) => Err(refused),
            None => Err(Confirmation::Failed(SettleError::Unanswered(None))),
        }
    }
}

fn out_of_time() -> Confirmation {
    Confirmation::NotAttempted(Unattempted::OutOfTime)
}

/// Waits for a call's per-entry answer until `by`; a call not started before `by` is not
/// attempted.
async fn answered<T>(
    ids: Vec<usize>,
    by: Instant,
    call: impl Future<Output = Result<Vec<Result<T, AwsError>>, AwsError>>,
    confirmed: impl Fn(T) -> Option<String>,
) -> Outcomes {
    let at = Instant::now();
    if at >= by {
        return ids.into_iter().map(|i| (i, out_of_time(), None)).collect();
    }
    let per_entry: Vec<Confirmation> = match tokio::time::timeout_at(by.into(), call).await {
        Ok(Ok(entries)) => entries
            .into_iter()
            .map(|e| match e {
                Ok(v) => Confirmation::Confirmed(confirmed(v)),
                Err(e) => Confirmation::Failed(SettleError::Refused(e)),
            })
            .collect(),
        // only the service's own answer is a refusal; a call that timed out (the SDK's
        // operation timeout), broke or could not be read may have been carried out
        Ok(Err(e)) if e.kind == crate::error::AwsErrorKind::Service => {
            vec![Confirmation::Failed(SettleError::Refused(e)); ids.len()]
        }
        Ok(Err(e)) => vec![Confirmation::Failed(SettleError::Unanswered(Some(e))); ids.len()],
        Err(_) => vec![Confirmation::Failed(SettleError::Unanswered(None)); ids.len()],
    };
    let answered = Instant::now();
    let missing = Confirmation::Failed(SettleError::Unanswered(None));
    let per_entry = per_entry.into_iter().chain(std::iter::repeat(missing));
    ids.into_iter()
        .zip(per_entry)
        .map(|(i, c)| (i, c, Some((at, Some(answered)))))
        .collect()
}

/// The actions to start now: not decided yet, and whatever they wait for confirmed. An action
/// behind one that was not confirmed is decided here as held.
fn ready(plan: &Plan, results: &mut [Option<Confirmation>]) -> Vec<usize> {
    let mut ready = Vec::new();
    for (i, (_, after)) in plan.steps.iter().enumerate() {
        if results[i].is_some() {
            continue;
        }
        match after.map(|a| &results[a]) {
            None | Some(Some(Confirmation::Confirmed(_))) => ready.push(i),
            Some(Some(_)) => results[i] = Some(Confirmation::NotAttempted(Unattempted::Blocked)),
            Some(None) => {}
        }
    }
    ready
}

/// The calls that carry `ready`: per kind and queue, in plan order, within SQS's limits.
fn calls<'p>(plan: &'p Plan, ready: &[usize], part: &mut usize) -> Vec<Call<'p>> {
    type ByQueue<'p, T> = BTreeMap<&'p str, Vec<(usize, T)>>;
    let mut sends: ByQueue<'p, &OutgoingMessage> = BTreeMap::new();
    let mut deletes: ByQueue<'p, &str> = BTreeMap::new();
    let mut changes: ByQueue<'p, (&str, i32)> = BTreeMap::new();
    let mut keeps: ByQueue<'p, &KeptMessage> = BTreeMap::new();
    let mut calls = Vec::new();
    for &i in ready {
        match &plan.steps[i].0 {
            Action::Copy { to, message } => sends.entry(to).or_default().push((i, message)),
            Action::Delete {
                from,
                receipt_handle,
            } => deletes.entry(from).or_default().push((i, receipt_handle)),
            Action::ChangeVisibility {
                of,
                receipt_handle,
                seconds,
            } => changes
                .entry(of)
                .or_default()
                .push((i, (receipt_handle, *seconds))),
            Action::Keep { queue, message } => keeps.entry(queue).or_default().push((i, message)),
            Action::Archive(entry) => calls.push(Call::Archive(i, entry)),
        }
    }
    for (queue, copies) in sends {
        let sizes: Vec<usize> = copies.iter().map(|(_, c)| c.size()).collect();
        for range in crate::sqs::pack(&sizes) {
            calls.push(Call::Send(queue, copies[range].to_vec()));
        }
    }
    for (queue, entries) in deletes {
        calls.extend(
            entries
                .chunks(MAX_BATCH)
                .map(|c| Call::Delete(queue, c.to_vec())),
        );
    }
    for (queue, entries) in changes {
        let chunks = entries.chunks(MAX_BATCH);
        calls.extend(chunks.map(|c| Call::ChangeVisibility(queue, c.to_vec())));
    }
    for (queue, entries) in keeps {
        for chunk in entries.chunks(MAX_ENTRIES_PER_LIST) {
            calls.push(Call::Keep(queue, chunk.to_vec(), *part));
            *part += 1;
        }
    }
    calls
}
