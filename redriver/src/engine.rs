//! The redriver's shell (docs/design.md, "Run loop"): it carries out what a run
//! ([`crate::run::Run`]) asks for, against SQS, S3 and CloudWatch, and reports back what
//! happened and when. The run decides everything else; this file holds no rule of its own
//! but how each call is bounded by the deadline the run gives it.

use std::time::Instant;

use crate::config::RedriverConfig;
use futures::StreamExt;
use futures::future::LocalBoxFuture;
use futures::stream::FuturesUnordered;
use resq::keep::{self, KeptMessage};
use resq::reason::ErrorCode;
use resq::settle::{Deadlines, Plan, Report, Settler};
use resq::sqs::{Queues, ReceivedMessage};
use resq::store::ObjectStore;

use crate::breaker::AlarmState;
use crate::consumer_breaker::ConsumerView;
use crate::ports::Alarms;
use crate::ratelimit::ReplayPace;
use crate::request::RunRequest;
use crate::run::{Command, ConsumerAct, Now, Receive, Run, SettleId, Tuning};
use crate::summary::{Replayed, StopReason, Summary};
use crate::sweep::{self, SweepRecord};
use resq::mapping::{EventSourceMappings, Mapping, MappingState};
use resq::state::{PauseState, PausedBy};

/// Who archive entries are signed by.
pub const ARCHIVED_BY: &str = "redriver";

/// What the redriver's settling and receives need on SQS: receives, deletes and visibility
/// changes on the DLQ (batch calls authorize as their single ones), copies sent to the main
/// queue, a dead letter's explained copy sent back into the DLQ, and the main queue's
/// retention for the consumer's breaker (a pause ends before its oldest message could outlive
/// it).
pub const PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("sqs:GetQueueAttributes", "OrdersQueue"),
    resq::iam::Permission::new("sqs:ReceiveMessage", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:DeleteMessage", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:ChangeMessageVisibility", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:SendMessage", "DeadLetterQueue"),
    resq::iam::Permission::new("sqs:SendMessage", "OrdersQueue"),
];

/// The redriver over its ports: SQS, the archive store, CloudWatch's alarms and, for the
/// consumer's breaker, the consumer's event source mapping (none by default).
pub struct Redriver<Q, S, A, M = NoMapping> {
    settler: Settler<Q, S>,
    alarms: A,
    mappings: M,
    config: RedriverConfig,
    tuning: Tuning,
    emit_metrics: bool,
}

/// No event source mapping port: a redriver without a consumer breaker. A configured
/// `CONSUMER_EVENT_SOURCE_MAPPING` with it reads as a mapping that cannot be read (the breaker
/// then leaves the consumer as it is).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMapping;

impl EventSourceMappings for NoMapping {
    async fn get(&self, uuid: &str) -> Result<Mapping, resq::error::AwsError> {
        Err(resq::error::AwsError::local(format!(
            "no Lambda client to read event source mapping {uuid}"
        )))
    }

    async fn set_enabled(&self, uuid: &str, _: bool) -> Result<Mapping, resq::error::AwsError> {
        self.get(uuid).await
    }
}

/// What the shell woke up to.
// a temporary, moved once per event: boxing the event would only add an allocation
#[allow(clippy::large_enum_variant)]
enum Woke {
    /// What was under way reported (`None`: nothing was under way).
    Next(Option<Event>),
    /// The run's next wake-up came.
    Timer,
    /// The operator interrupted the run.
    Stop,
    /// The interrupted run's grace ran out.
    CutOff,
}

/// What the shell reports back to the run.
enum Event {
    Breaker(Result<Vec<AlarmState>, String>, Option<ConsumerView>),
    Consumer(ConsumerAct, Result<(), String>),
    KeepLists(
        Option<Vec<KeptMessage>>,
        Result<Option<SweepRecord>, String>,
    ),
    Noted,
    Received(Receive, Result<Vec<ReceivedMessage>, StopReason>),
    Settled(SettleId, Report),
}

/// The clock, read: only the shell reads it.
fn now() -> Now {
    Now {
        instant: Instant::now(),
        epoch_ms: chrono::Utc::now().timestamp_millis().max(0) as u64,
    }
}

impl<Q: Queues, S: ObjectStore, A: Alarms> Redriver<Q, S, A> {
    /// A redriver; `ReceiveMessage` long-polls 1 s so "empty" means empty.
    pub fn new(queues: Q, store: S, alarms: A, config: RedriverConfig) -> Self {
        Self {
            settler: Settler::new(queues, store, ARCHIVED_BY),
            alarms,
            mappings: NoMapping,
            config,
            tuning: Tuning::default(),
            emit_metrics: true,
        }
    }

    /// The consumer's breaker switches the consumer's event source mapping through
    /// `mappings` (`CONSUMER_EVENT_SOURCE_MAPPING` names which).
    pub fn with_mappings<M: EventSourceMappings>(self, mappings: M) -> Redriver<Q, S, A, M> {
        Redriver {
            settler: self.settler,
            alarms: self.alarms,
            mappings,
            config: self.config,
            tuning: self.tuning,
            emit_metrics: self.emit_metrics,
        }
    }
}

impl<Q: Queues, S: ObjectStore, A: Alarms, M: EventSourceMappings> Redriver<Q, S, A, M> {
    /// At most `n` (≥ 1) receive → settle cycles in flight (default
    /// [`crate::plan::MAX_CYCLES_IN_FLIGHT`]); 1 is the sequential design, for comparison.
    pub fn with_max_cycles_in_flight(mut self, n: usize) -> Self {
        self.tuning.max_cycles = n.max(1);
        self
    }

    /// Whether the cycles in flight adapt to SQS's answers (the default,
    /// [`crate::backoff::CycleLimit`]); `false` keeps them at what the rate needs, the fixed
    /// pipeline before it, for comparison.
    pub fn with_back_off(mut self, adapts: bool) -> Self {
        self.tuning.backs_off = adapts;
        self
    }

    /// The most replay candidates a run holds ahead to deal out by group (default
    /// [`crate::fair::MAX_CANDIDATES`]); 0 replays in the order received. An operator's run
    /// holds about what it replays.
    pub fn with_candidates_max(mut self, n: usize) -> Self {
        self.tuning.candidates_max = n;
        self
    }

    /// The most DLQ messages a run holds hidden, kept ones included (default
    /// [`crate::run::IN_FLIGHT_MAX`]); a stand-in with a smaller in-flight quota sets it below
    /// its quota.
    pub fn with_in_flight_max(mut self, n: u64) -> Self {
        self.tuning.in_flight_max = n;
        self
    }

    /// What a run reads once no replay is left is hidden `hold`, and it reads on for half of
    /// it ([`Tuning::read_on_hold`]): an operator's run.
    pub fn with_read_on_hold(mut self, hold: std::time::Duration) -> Self {
        self.tuning.read_on_hold = Some(hold);
        self
    }

    /// Whether runs print their EMF metric lines (on in Lambda; a local runner may turn it off).
    pub fn with_metrics(mut self, emit: bool) -> Self {
        self.emit_metrics = emit;
        self
    }

    /// Sets the long-poll wait of `ReceiveMessage` (0 for a local emulator).
    pub fn with_receive_wait(mut self, seconds: i32) -> Self {
        self.tuning.receive_wait_seconds = seconds.clamp(0, 20);
        self
    }

    /// One run; emits its metrics (not for a dry run) and returns its summary. Every phase is
    /// bounded by the deadline, so the summary and the metrics are written even when the run
    /// is cut short.
    pub async fn run(&self, request: &RunRequest, deadline: Instant) -> Summary {
        self.run_listed(request, deadline, false).await.0
    }

    /// [`Redriver::run`], and, with `list`, every replay it confirmed (DLQ message, copy,
    /// order): an operator's canary follows each to its outcome.
    pub async fn run_listed(
        &self,
        request: &RunRequest,
        deadline: Instant,
        list: bool,
    ) -> (Summary, Vec<Replayed>) {
        let never = std::future::pending();
        self.run_until(request, deadline, list, never, std::time::Duration::ZERO)
            .await
    }

    /// [`Redriver::run_listed`], cut short when `stop` completes (an operator's Ctrl-C): the
    /// run then starts nothing new, ends what is under way and releases what it holds, all
    /// within `grace` ([`Run::interrupt`]); what is still under way then is left (it comes
    /// back by itself at its visibility timeout) and the summary says so far.
    pub async fn run_until(
        &self,
        request: &RunRequest,
        deadline: Instant,
        list: bool,
        stop: impl std::future::Future<Output = ()>,
        grace: std::time::Duration,
    ) -> (Summary, Vec<Replayed>) {
        let mut run = Run::new(request, &self.config, self.tuning, deadline, now());
        if list {
            run.list_replays();
        }
        let pacer = ReplayPace::new(request.rate_per_second, &self.config.common.main_queue_url);
        let mut under_way: FuturesUnordered<LocalBoxFuture<'_, Event>> = FuturesUnordered::new();
        let mut stop = std::pin::pin!(stop);
        let mut cut_off: Option<Instant> = None;
        loop {
            while let Some(command) = run.poll(now()) {
                match command {
                    Command::Finish => return self.finish(run),
                    Command::Pace(rate) => pacer.set_rate(rate),
                    command => under_way.push(self.carry_out(command, &pacer)),
                }
            }
            let at = run.poll_timeout();
            let next = async {
                match at {
                    // nothing under way: only the time (a probe's end) can move the run on
                    Some(at) if under_way.is_empty() => {
                        tokio::time::sleep_until(at.into()).await;
                        Woke::Timer
                    }
                    Some(at) => match tokio::time::timeout_at(at.into(), under_way.next()).await {
                        Ok(next) => Woke::Next(next),
                        // the breaker's next reading is due: poll again
                        Err(_) => Woke::Timer,
                    },
                    None => Woke::Next(under_way.next().await),
                }
            };
            let woke = tokio::select! {
                biased;
                () = &mut stop, if cut_off.is_none() => Woke::Stop,
                () = tokio::time::sleep_until(cut_off.unwrap_or(deadline).into()), if cut_off.is_some() => Woke::CutOff,
                woke = next => woke,
            };
            match woke {
                Woke::Next(Some(event)) => deliver(&mut run, event),
                Woke::Timer => {}
                Woke::Stop => {
                    tracing::warn!(
                        "interrupted: the run ends what is under way and releases what it holds"
                    );
                    run.interrupt(now(), grace);
                    cut_off = Some(Instant::now() + grace);
                }
                Woke::CutOff => {
                    tracing::error!(
                        "the interrupted run did not end within its grace: what it still holds comes back at its visibility timeout"
                    );
                    return self.finish(run);
                }
                // nothing under way and nothing to do: a run never gets here (what it holds
                // comes back by itself after the deadline), but a summary beats a loop
                Woke::Next(None) => {
                    tracing::error!("the run waits for nothing under way; it ends here");
                    debug_assert!(false, "a run that waits for nothing: {run:?}");
                    return self.finish(run);
                }
            }
        }
    }

    /// The run's summary, logged, and its metrics emitted (not for a dry run).
    fn finish(&self, run: Run) -> (Summary, Vec<Replayed>) {
        let (summary, listed) = run.finish(now());
        summary.log();
        if !summary.dry_run && self.emit_metrics {
            summary.metrics().emit();
        }
        (summary, listed)
    }

    /// One command, carried out, each call bounded by the deadline it carries.
    fn carry_out<'a>(
        &'a self,
        command: Command,
        pacer: &'a ReplayPace<'a>,
    ) -> LocalBoxFuture<'a, Event> {
        match command {
            Command::ReadBreaker { by } => Box::pin(async move {
                let (alarms, view) = futures::join!(self.alarms_by(by), self.consumer_view(by));
                Event::Breaker(alarms, view)
            }),
            Command::Consumer { act, seen, by } => Box::pin(async move {
                let done = self.act_on_consumer(&act, seen, by).await;
                Event::Consumer(act, done)
            }),
            Command::ReadKeepLists { by } => Box::pin(async move {
                let (hidden, sweep) = futures::join!(self.kept_hidden(by), self.last_sweep(by));
                Event::KeepLists(hidden, sweep)
            }),
            Command::NoteSweep { record, by } => Box::pin(async move {
                self.note_sweep(record, by).await;
                Event::Noted
            }),
            Command::Receive(r) => {
                Box::pin(async move { Event::Received(r, self.receive(r).await) })
            }
            Command::Settle { id, plan, by } => {
                Box::pin(async move { Event::Settled(id, self.settle(&plan, by, pacer).await) })
            }
            Command::Finish | Command::Pace(_) => Box::pin(std::future::pending()),
        }
    }

    async fn settle(&self, plan: &Plan, by: Deadlines, pacer: &ReplayPace<'_>) -> Report {
        self.settler.settle(plan, by, pacer).await
    }

    /// The states of `PAUSE_ON_ALARMS` and `PAUSE_CONSUMER_ON_ALARMS`, by `by`.
    async fn alarms_by(&self, by: Instant) -> Result<Vec<AlarmState>, String> {
        let c = &self.config;
        let mut names = c.pause_on_alarms.clone();
        names.extend(c.pause_consumer_on_alarms.iter().cloned());
        names.sort();
        names.dedup();
        let read = self.alarms.states(&names);
        match tokio::time::timeout_at(by.into(), read).await {
            Ok(Ok(states)) => Ok(states),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer in time".to_owned()),
        }
    }

    /// What the consumer's breaker reads besides the alarms, by `by`: the mapping, its pause
    /// log, the main queue's retention and its oldest message's age (none without a consumer
    /// breaker).
    async fn consumer_view(&self, by: Instant) -> Option<ConsumerView> {
        let uuid = self.config.consumer_mapping.as_deref()?;
        let main = &self.config.common.main_queue_url;
        let queue = main.rsplit('/').next().unwrap_or(main);
        let store = self.settler.store();
        let (mapping, record, limits, oldest) = futures::join!(
            within(by, self.mappings.get(uuid)),
            within(by, resq::state::current_pause(store, uuid)),
            within(by, self.settler.queues().limits(main)),
            within(by, self.alarms.oldest_age(queue)),
        );
        Some(ConsumerView {
            mapping,
            record,
            waiting: limits.as_ref().ok().and_then(|l| l.visible),
            retention: limits.map(|l| l.retention),
            oldest_age: oldest.ok().flatten(),
        })
    }

    /// Carries out `act` on the consumer's mapping by `by`, each step only after the one
    /// before went through: a pause is recorded before the mapping is disabled (so resq never
    /// holds a pause it has no record of), a resume recorded after it is enabled.
    async fn act_on_consumer(
        &self,
        act: &ConsumerAct,
        seen: Option<u64>,
        by: Instant,
    ) -> Result<(), String> {
        let Some(uuid) = self.config.consumer_mapping.as_deref() else {
            return Err("no CONSUMER_EVENT_SOURCE_MAPPING".into());
        };
        let store = self.settler.store();
        let record = |r| within(by, resq::state::record_pause(store, r));
        let switch = |on| within(by, self.mappings.set_enabled(uuid, on));
        // an operator who paused or resumed the consumer since this run read its log decides:
        // resq neither switches the mapping nor writes over their entry (a forced resume during
        // a probe stays resumed; a pause stays paused)
        let current = within(by, resq::state::current_pause(store, uuid)).await?;
        if let Some(c) = current.filter(|c| c.by == PausedBy::Operator && Some(c.at) != seen) {
            let what = match c.state {
                PauseState::Resumed => "resumed",
                _ => "paused",
            };
            return Err(format!(
                "an operator {what} the consumer meanwhile: left to them"
            ));
        }
        match act {
            ConsumerAct::Pause(r) => {
                record(r).await?;
                switch(false).await.map(drop)
            }
            ConsumerAct::Resume(r) => {
                switch(true).await?;
                record(r).await.map(drop)
            }
            ConsumerAct::Probe(r) => {
                record(r).await?;
                let mut mapping = switch(true).await?;
                // the window counts from Lambda reporting the mapping enabled
                while mapping.state != MappingState::Enabled {
                    tokio::time::sleep(
                        PROBE_POLL.min(by.saturating_duration_since(Instant::now())),
                    )
                    .await;
                    mapping = within(by, self.mappings.get(uuid)).await?;
                }
                Ok(())
            }
            ConsumerAct::EndProbe(r) => {
                switch(false).await?;
                record(r).await.map(drop)
            }
            ConsumerAct::Note(r) => record(r).await.map(drop),
        }
    }

    /// The last note of a read through the DLQ, by `by`.
    async fn last_sweep(&self, by: Instant) -> Result<Option<SweepRecord>, String> {
        let prefix = sweep::prefix(&self.config.common.dlq_url);
        within(by, resq::state::latest(self.settler.store(), &prefix)).await
    }

    /// Notes a read through the DLQ, by `by`; one not written makes the next run sweep.
    async fn note_sweep(&self, record: SweepRecord, by: Instant) {
        let prefix = sweep::prefix(&self.config.common.dlq_url);
        let store = self.settler.store();
        if let Err(e) = within(by, resq::state::append(store, &prefix, record.at, &record)).await {
            tracing::warn!(error_details = %e, "the archive sweep's note was not written: the next run sweeps again");
        }
    }

    /// The kept messages earlier runs hid that are still hidden, from the keep lists, by `by`;
    /// `None` when they cannot be read.
    async fn kept_hidden(&self, by: Instant) -> Option<Vec<KeptMessage>> {
        let (store, dlq) = (self.settler.store(), &self.config.common.dlq_url);
        let read = keep::still_hidden(store, dlq, chrono::Utc::now());
        match tokio::time::timeout_at(by.into(), read).await {
            Ok(Ok(hidden)) => Some(hidden),
            Ok(Err(e)) => {
                tracing::error!(error_code = ErrorCode::KeepListUnreadable.code(), error_details = %e, "the keep lists cannot be read: kept messages hidden by earlier runs stay hidden until their TTL; this run hides no more");
                None
            }
            Err(_) => {
                tracing::error!(error_code = ErrorCode::KeepListUnreadable.code(), error_details = %format!("not read within {} ms", crate::run::KEEP_LIST_WAIT.as_millis()), "the keep lists cannot be read: kept messages hidden by earlier runs stay hidden until their TTL; this run hides no more");
                None
            }
        }
    }

    /// One receive of up to 10, as the run asked for it.
    async fn receive(&self, r: Receive) -> Result<Vec<ReceivedMessage>, StopReason> {
        let (queues, dlq) = (self.settler.queues(), &self.config.common.dlq_url);
        let receive = queues.receive(dlq, 10, Some(r.visibility_seconds), r.wait_seconds);
        match tokio::time::timeout_at(r.by.into(), receive).await {
            Ok(Ok(batch)) => Ok(batch),
            Ok(Err(e)) => {
                tracing::error!(error_code = ErrorCode::ReceiveFailed.code(), error_details = %e, "cannot receive from the DLQ");
                Err(StopReason::ReceiveError)
            }
            Err(_) => Err(StopReason::Deadline),
        }
    }
}

/// How often a probe asks Lambda whether the mapping is enabled yet.
pub const PROBE_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// `call`'s answer by `by`, its error or the lack of an answer in words.
async fn within<T>(
    by: Instant,
    call: impl std::future::Future<Output = Result<T, resq::error::AwsError>>,
) -> Result<T, String> {
    match tokio::time::timeout_at(by.into(), call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in time".to_owned()),
    }
}

/// Hands the run what arrived, at the time it arrived.
fn deliver(run: &mut Run, event: Event) {
    let now = now();
    match event {
        Event::Breaker(read, view) => run.handle_breaker(read, view, now),
        Event::Consumer(act, done) => run.handle_consumer(&act, done, now),
        Event::KeepLists(hidden, sweep) => run.handle_keep_lists(hidden, sweep, now),
        Event::Noted => run.handle_noted(),
        Event::Received(r, got) => run.handle_received(r, got, now),
        Event::Settled(id, report) => run.handle_settled(id, report, now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{
        DLQ, FixedAlarms, HOUR_MS, MAIN, config, dlq_message, permanent, unexplained,
    };
    use crate::ports::PortError;
    use resq::attributes::{AttributeValue, X_FIRST_SENT_AT, X_REDRIVE_COUNT};
    use resq::reason::ArchiveReason;
    use resq::sqs::ReceivedMessage;
    use resq_testing::{Call, MemorySqs, MemoryStore};
    use std::collections::HashSet;
    use std::time::Duration;

    fn now_ms() -> u64 {
        super::now().epoch_ms
    }

    async fn scheduled(
        dlq: &MemorySqs,
        store: &MemoryStore,
        alarms: &FixedAlarms,
        cfg: &RedriverConfig,
    ) -> Summary {
        let r = Redriver::new(dlq, store, alarms, cfg.clone()).with_receive_wait(0);
        r.run(
            &RunRequest::defaults(cfg),
            Instant::now() + Duration::from_secs(60),
        )
        .await
    }

    #[tokio::test]
    async fn kept_messages_a_hundred_times_the_budget_starve_nothing() {
        // GIVEN 2,000 kept permanent failures ahead of 20 replayable messages, and a budget of
        // 20 messages a run (kept : budget = 100 : 1)
        let (dlq, store, alarms) = doubles();
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "20")]);
        let sent = now_ms() - HOUR_MS;
        for i in 0..2000 {
            dlq.push(
                DLQ,
                dlq_message(&format!("kept-{i}"), sent, &permanent("MALFORMED_JSON")),
            );
        }
        for i in 0..20 {
            dlq.push(DLQ, dlq_message(&format!("replay-{i}"), sent, &[]));
        }
        // WHEN two scheduled runs happen
        let first = scheduled(&dlq, &store, &alarms, &cfg).await;
        let second = scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN every replayable message was replayed (by the first already), the kept ones did
        // not count against the budget, and the second run did not re-read them
        let replayed: HashSet<String> = dlq.sent(MAIN).iter().map(|c| c.body.clone()).collect();
        assert_eq!(replayed.len(), 20, "{first:?}");
        assert_eq!((first.redriven, first.kept), (20, 2000));
        // past its budget the run read on to the end of the DLQ (to archive what is due)
        assert_eq!(first.stopped_by, StopReason::Empty);
        assert_eq!((second.received, second.stopped_by), (0, StopReason::Empty));
        // the kept messages are all still in the DLQ, hidden until their TTL, and listed
        assert_eq!((dlq.len(DLQ), dlq.visible(DLQ)), (2000, 0));
        let listed = keep::still_hidden(&store, &cfg.common.dlq_url, chrono::Utc::now())
            .await
            .unwrap();
        assert_eq!(listed.len(), 2000);
        // each listed with its order, so that `resq find` locates it without receiving it
        assert!(
            listed
                .iter()
                .all(|k| k.order_id.as_deref() == Some(k.message_id.as_str()))
        );
        // nor does any run before SQS's 12 h limit ends their hide; then one run reads them
        // again and hides them for the rest of their TTL
        dlq.advance(Duration::from_secs(12 * 3600 - 60));
        let third = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!(third.received, 0);
        dlq.advance(Duration::from_secs(60));
        let fourth = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!((fourth.received, fourth.kept), (2000, 2000));
    }

    #[tokio::test]
    async fn a_run_that_reads_the_dlq_to_its_end_notes_it_before_it_ends() {
        // GIVEN an empty DLQ: the run has nothing to keep or release after its sweep
        let (dlq, store, alarms) = doubles();
        let cfg = config(&[]);
        // WHEN a scheduled run reads it to its end
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!(
            (summary.stopped_by, summary.swept),
            (StopReason::Empty, true)
        );
        // THEN its note is written (ended before it, every run would sweep the DLQ again)
        let note: Option<SweepRecord> =
            resq::state::latest(&store, &sweep::prefix(&cfg.common.dlq_url))
                .await
                .unwrap();
        assert!(note.is_some(), "{summary:?}");
    }

    #[tokio::test]
    async fn a_listed_run_names_each_replay_it_confirmed() {
        // GIVEN three replayable dead letters and a budget of two
        let (dlq, store, alarms) = doubles();
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "2")]);
        for i in 0..3 {
            dlq.push(DLQ, dlq_message(&format!("m{i}"), now_ms(), &[]));
        }
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone()).with_receive_wait(0);
        let request = RunRequest::defaults(&cfg);
        // WHEN a run is asked to list its replays (an operator's canary)
        let (summary, listed) = r
            .run_listed(&request, Instant::now() + Duration::from_secs(60), true)
            .await;
        // THEN each replay it confirmed is named: its DLQ message, its copy, its order
        assert_eq!(summary.redriven, 2);
        assert_eq!(listed.len(), 2);
        for replay in &listed {
            assert_eq!(
                replay.order_id.as_deref(),
                Some(replay.dlq_message_id.as_str())
            );
            assert_eq!(replay.redrive_count, Some(1));
            assert!(replay.message_id.is_some(), "{replay:?}");
            assert_eq!(
                replay.failure_reason.as_deref(),
                Some("DOWNSTREAM_UNAVAILABLE")
            );
        }
        // AND a run not asked lists nothing
        let (summary, none) = r
            .run_listed(&request, Instant::now() + Duration::from_secs(60), false)
            .await;
        assert_eq!((summary.redriven, none.len()), (1, 0));
    }

    #[tokio::test]
    async fn a_paused_run_archives_what_is_due_and_replays_nothing() {
        let (dlq, store, alarms) = doubles();
        alarms.set("replays-failing", true, Duration::from_secs(60), 10.0);
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let now = now_ms();
        dlq.push(DLQ, dlq_message("expired", now - 25 * HOUR_MS, &[]));
        dlq.push(
            DLQ,
            dlq_message(
                "capped",
                now,
                &[(X_REDRIVE_COUNT, AttributeValue::number(3))],
            ),
        );
        dlq.push(DLQ, dlq_message("waiting", now, &[]));
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert!(summary.paused, "{summary:?}");
        assert_eq!(summary.redriven, 0);
        assert_eq!(summary.archived.get(&ArchiveReason::TtlExpired), Some(&1));
        assert_eq!(summary.archived.get(&ArchiveReason::RedriveCap), Some(&1));
        assert_eq!(summary.skipped, 1);
        assert!(dlq.sent(MAIN).is_empty());
        assert_eq!(dlq.ids(DLQ), vec!["waiting"]);
        assert_eq!(
            dlq.visible(DLQ),
            1,
            "the held message is visible again for the next run"
        );
        let m = summary.metrics();
        assert_eq!(m.get(crate::summary::REDRIVE_PAUSED), 1);
    }

    /// A DLQ and main queue, a bucket and alarms, in memory.
    /// Replay paused by the consumer-errors alarm, and `n` dead letters SQS moved without a
    /// reason (`crashed-{i}`, first sent an hour ago): the doubles, the configuration and
    /// that time.
    fn paused_with_crashed(n: usize) -> (MemorySqs, MemoryStore, FixedAlarms, RedriverConfig, u64) {
        let (dlq, store, alarms) = doubles();
        alarms.set("consumer-errors", true, Duration::from_secs(60), 0.0);
        let paused = config(&[("PAUSE_ON_ALARMS", "consumer-errors")]);
        let sent = now_ms() - HOUR_MS;
        for i in 0..n {
            dlq.push(DLQ, unexplained(&format!("crashed-{i}"), sent, &[]));
        }
        (dlq, store, alarms, paused, sent)
    }

    fn doubles() -> (MemorySqs, MemoryStore, FixedAlarms) {
        (
            MemorySqs::default(),
            MemoryStore::default(),
            FixedAlarms::default(),
        )
    }

    const FIFO_MAIN: &str = "http://127.0.0.1/1/orders.fifo";
    const FIFO_DLQ: &str = "http://127.0.0.1/1/orders-dlq.fifo";

    /// The configuration of a FIFO pipeline.
    fn fifo_config() -> RedriverConfig {
        let mut cfg = config(&[]);
        cfg.common.main_queue_url = FIFO_MAIN.into();
        cfg.common.dlq_url = FIFO_DLQ.into();
        cfg
    }

    /// A DLQ message of FIFO group `group`.
    fn in_group(id: &str, group: &str) -> ReceivedMessage {
        let mut m = dlq_message(id, now_ms(), &[]);
        m.attributes.insert("MessageGroupId".into(), group.into());
        m
    }

    #[tokio::test]
    async fn a_slow_sqs_cannot_make_the_run_late() {
        // GIVEN an SQS that takes 2 s per call and a 3 s budget (margin 1 s)
        let (dlq, store, alarms) = doubles();
        for i in 0..30 {
            dlq.push(DLQ, dlq_message(&format!("m{i}"), now_ms(), &[]));
        }
        dlq.set_delay(Duration::from_secs(2));
        let cfg = config(&[]);
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone()).with_receive_wait(0);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(3);
        let summary = r.run(&RunRequest::defaults(&cfg), deadline).await;
        // THEN the summary comes before the deadline, whatever was left undone
        assert!(Instant::now() < deadline, "{:?}", started.elapsed());
        assert_eq!(summary.stopped_by, StopReason::Deadline, "{summary:?}");
        // nothing unconfirmed was deleted: every message is still in the DLQ or in the main queue
        assert_eq!(dlq.len(DLQ) + dlq.sent(MAIN).len(), 30);
    }

    #[tokio::test]
    async fn returned_replays_are_counted_once_by_the_run_that_moves_them() {
        let (dlq, store, alarms) = doubles();
        let cfg = config(&[]);
        let now = now_ms();
        let mut kept = permanent("VALIDATION_FAILED");
        kept.push((X_REDRIVE_COUNT, AttributeValue::number(1)));
        dlq.push(DLQ, dlq_message("kept-returned", now, &kept));
        dlq.push(
            DLQ,
            dlq_message(
                "returned",
                now,
                &[(X_REDRIVE_COUNT, AttributeValue::number(1))],
            ),
        );
        let first = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!(first.returned, 1, "only the one moved: {first:?}");
        // the kept one is seen again by later runs (when it reappears), never counted while kept
        dlq.advance(Duration::from_secs(13 * 3600));
        let second = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!((second.received, second.returned), (1, 0), "{second:?}");
    }

    #[tokio::test]
    async fn a_selective_run_brings_back_the_kept_messages_of_its_reason() {
        // GIVEN a scheduled run kept (and hid) two permanent failures of different reasons
        let (dlq, store, alarms) = doubles();
        let cfg = config(&[]);
        dlq.push(
            DLQ,
            dlq_message("fixed", now_ms(), &permanent("VALIDATION_FAILED")),
        );
        dlq.push(
            DLQ,
            dlq_message("other", now_ms(), &permanent("MALFORMED_JSON")),
        );
        let first = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert_eq!((first.kept, dlq.visible(DLQ)), (2, 0));
        // a dry run first says what it would bring back, and changes nothing
        let dry = RunRequest {
            dry_run: true,
            reason: Some("VALIDATION_FAILED".into()),
            ..RunRequest::defaults(&cfg)
        };
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone()).with_receive_wait(0);
        let summary = r.run(&dry, Instant::now() + Duration::from_secs(60)).await;
        assert_eq!((summary.unhidden, summary.redriven), (1, 0), "{summary:?}");
        assert_eq!(dlq.visible(DLQ), 0, "a dry run changes nothing");
        // WHEN an operator replays VALIDATION_FAILED after a fix
        let request = RunRequest {
            reason: Some("VALIDATION_FAILED".into()),
            ..RunRequest::defaults(&cfg)
        };
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone()).with_receive_wait(0);
        let summary = r
            .run(&request, Instant::now() + Duration::from_secs(60))
            .await;
        // THEN that one is made visible and replayed at once; the other stays hidden
        assert_eq!((summary.unhidden, summary.redriven), (1, 1), "{summary:?}");
        assert_eq!(dlq.ids(DLQ), vec!["other"]);
        assert_eq!(dlq.visible(DLQ), 0);
    }

    #[tokio::test]
    async fn no_message_is_hidden_that_the_keep_list_does_not_name() {
        // GIVEN a bucket that takes no writes
        let (dlq, store, alarms) = doubles();
        store.set_failing(true);
        let cfg = config(&[]);
        for i in 0..3 {
            dlq.push(
                DLQ,
                dlq_message(&format!("k{i}"), now_ms(), &permanent("MALFORMED_JSON")),
            );
        }
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN the kept messages are left visible (an operator can peek them), not hidden
        assert_eq!(summary.kept, 3);
        assert_eq!(dlq.visible(DLQ), 3);
    }

    #[tokio::test]
    async fn kept_hides_stay_within_twelve_hours_of_the_receive() {
        // GIVEN a TTL of 13 days: a kept message's TTL is far beyond SQS's 12 h
        let (dlq, store, alarms) = doubles();
        let cfg = config(&[("ARCHIVE_AFTER_SECONDS", "1123200")]);
        dlq.push(
            DLQ,
            dlq_message("k", now_ms(), &permanent("MALFORMED_JSON")),
        );
        scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN the hide was accepted (the double rejects more than 12 h from the receive)
        assert_eq!(dlq.visible(DLQ), 0);
        dlq.advance(Duration::from_secs(12 * 3600));
        assert_eq!(dlq.visible(DLQ), 1, "back after at most 12 h");
    }

    /// Messages `m0`, `m1`, … in the DLQ, the first `capped` of them at the redrive cap.
    fn fill(dlq: &MemorySqs, n: usize, capped: usize) {
        for i in 0..n {
            let attrs = match i < capped {
                true => vec![(X_REDRIVE_COUNT, AttributeValue::number(3))],
                false => vec![],
            };
            dlq.push(DLQ, dlq_message(&format!("m{i}"), now_ms(), &attrs));
        }
    }

    /// The message ids behind receipt handles (`rh-{id}-{n}`), sorted.
    fn ids_of(handles: Vec<String>) -> Vec<String> {
        let mut ids: Vec<String> = handles
            .into_iter()
            .map(|h| {
                let h = h.trim_start_matches("rh-");
                h.rsplit_once('-').map_or(h, |(id, _)| id).to_owned()
            })
            .collect();
        ids.sort();
        ids
    }

    /// What the run made visible again (visibility 0).
    fn released(dlq: &MemorySqs) -> Vec<String> {
        let changes = dlq.changes(DLQ).into_iter();
        ids_of(changes.filter(|(_, s)| *s == 0).map(|(h, _)| h).collect())
    }

    async fn run_with(
        dlq: &MemorySqs,
        store: &MemoryStore,
        alarms: &FixedAlarms,
        cfg: &RedriverConfig,
        rate: f64,
        deadline: Instant,
    ) -> Summary {
        let request = RunRequest {
            rate_per_second: rate,
            ..RunRequest::defaults(cfg)
        };
        let redriver = Redriver::new(dlq, store, alarms, cfg.clone()).with_receive_wait(0);
        redriver.run(&request, deadline).await
    }

    #[tokio::test]
    async fn only_successful_sends_are_deleted() {
        // GIVEN SQS refuses the copy of m1
        let (dlq, store, alarms) = doubles();
        fill(&dlq, 3, 0);
        dlq.fail_sends(|c| c.body.contains("\"m1\""));
        let summary = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        // THEN only m0 and m2 leave the DLQ; m1 stays, released for a later run
        assert_eq!((summary.redriven, summary.failed), (2, 1));
        assert_eq!(ids_of(dlq.deleted(DLQ)), vec!["m0", "m2"]);
        assert_eq!(released(&dlq), vec!["m1"]);
        assert_eq!(dlq.ids(DLQ), vec!["m1"]);
    }

    #[tokio::test]
    async fn a_failed_send_call_deletes_nothing() {
        let (dlq, store, alarms) = doubles();
        fill(&dlq, 3, 0);
        dlq.fail_calls(Call::Send, true);
        let summary = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        assert_eq!((summary.redriven, summary.failed), (0, 3));
        assert!(dlq.deleted(DLQ).is_empty());
        assert_eq!(released(&dlq), vec!["m0", "m1", "m2"]);
    }

    #[tokio::test]
    async fn a_partial_delete_failure_is_reported_and_loses_nothing() {
        let (dlq, store, alarms) = doubles();
        fill(&dlq, 3, 0);
        dlq.fail_deletes(|rh| rh.starts_with("rh-m0-"));
        let summary = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        // all three reached the main queue once; m0 stays in the DLQ too (seen again later):
        // its delete failed, it was made visible again, received again and, not sent twice,
        // its delete failed again
        assert_eq!(
            (summary.redriven, summary.delete_failed, summary.failed),
            (3, 2, 0)
        );
        assert_eq!(ids_of(dlq.deleted(DLQ)), vec!["m1", "m2"]);
        assert_eq!(
            (dlq.sent(MAIN).len(), dlq.ids(DLQ)),
            (3, vec!["m0".to_owned()])
        );
    }

    #[tokio::test]
    async fn a_replay_whose_delete_failed_is_not_sent_twice() {
        // GIVEN a FIFO pipeline whose DLQ refuses the first delete of a1 (and its retry)
        let (dlq, store, alarms) = doubles();
        let cfg = fifo_config();
        for (id, g) in [("a1", "A"), ("a2", "A"), ("b1", "B")] {
            dlq.push(FIFO_DLQ, in_group(id, g));
        }
        let first = std::sync::Mutex::new(None::<String>);
        dlq.fail_deletes(move |rh| {
            let mut first = first.lock().unwrap();
            rh.starts_with("rh-a1-") && first.get_or_insert_with(|| rh.to_owned()) == rh
        });
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        // THEN a1 was made visible again at once, received again by the same run and deleted
        // without a second send; its group followed in order; nothing is left
        let sent: Vec<String> = dlq.sent(FIFO_MAIN).into_iter().map(|c| c.body).collect();
        let of = |id: &str| sent.iter().filter(|b| b.contains(id)).count();
        assert_eq!((of("a1"), of("a2"), of("b1")), (1, 1, 1), "{summary:?}");
        let a: Vec<&String> = sent.iter().filter(|b| b.contains("\"a")).collect();
        assert!(a[0].contains("a1") && a[1].contains("a2"), "{sent:?}");
        assert!(dlq.is_empty(FIFO_DLQ), "{:?}", dlq.ids(FIFO_DLQ));
        assert_eq!((summary.redriven, summary.delete_failed), (3, 1));
    }

    #[tokio::test]
    async fn an_explained_dead_letter_whose_delete_failed_is_not_explained_twice() {
        // GIVEN five dead letters without a reason, replay paused, and the DLQ refusing the
        // first delete of crashed-0
        let (dlq, store, alarms, paused, _) = paused_with_crashed(5);
        let first = std::sync::Mutex::new(None::<String>);
        dlq.fail_deletes(move |rh| {
            let mut first = first.lock().unwrap();
            rh.starts_with("rh-crashed-0-") && first.get_or_insert_with(|| rh.to_owned()) == rh
        });
        let summary = scheduled(&dlq, &store, &alarms, &paused).await;
        // THEN crashed-0 was made visible again, received again by the run and only deleted:
        // five copies that say why, each counted once, and no original left
        assert_eq!(
            (summary.unexplained, summary.delete_failed),
            (5, 1),
            "{summary:?}"
        );
        assert_eq!(dlq.sent(DLQ).len(), 5);
        assert_eq!(dlq.len(DLQ), 5);
    }

    #[tokio::test]
    async fn a_failed_archive_write_keeps_the_message() {
        let (dlq, store, alarms) = doubles();
        store.set_failing(true);
        fill(&dlq, 2, 1);
        let summary = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        assert_eq!((summary.redriven, summary.failed), (1, 1));
        assert!(summary.archived.is_empty());
        assert_eq!(ids_of(dlq.deleted(DLQ)), vec!["m1"]);
        assert_eq!(released(&dlq), vec!["m0"]);
    }

    #[tokio::test]
    async fn replays_waiting_for_tokens_past_the_margin_are_released_not_sent() {
        // 1 token per second and a full bucket (one batch) at the start; the margin (1 s) is
        // reached 0.5 s in: the first batch goes, the next would wait past the margin
        let (dlq, store, alarms) = doubles();
        fill(&dlq, 13, 0);
        let deadline = Instant::now() + Duration::from_millis(1500);
        let summary = run_with(&dlq, &store, &alarms, &config(&[]), 1.0, deadline).await;
        assert_eq!(
            (summary.received, summary.redriven, summary.failed),
            (13, 10, 0)
        );
        assert_eq!(summary.stopped_by, StopReason::Deadline);
        assert_eq!(ids_of(dlq.deleted(DLQ)).len(), 10);
        assert_eq!(released(&dlq), vec!["m10", "m11", "m12"]);
        assert!(
            Instant::now() < deadline,
            "the run ends before the deadline"
        );
    }

    #[tokio::test]
    async fn unreadable_alarm_states_pause_replay() {
        let (dlq, store, alarms) = doubles();
        alarms.fail(PortError::service("AccessDenied", "not allowed"));
        fill(&dlq, 1, 0);
        let summary = scheduled(&dlq, &store, &alarms, &config(&[("PAUSE_ON_ALARMS", "a")])).await;
        assert!(summary.paused);
        assert!(
            summary
                .pause_reason
                .unwrap_or_default()
                .contains("not allowed")
        );
        // the run still reads the DLQ (to archive what must be), replays nothing, and
        // leaves the replayable message visible again
        assert_eq!(
            (summary.received, summary.redriven, summary.skipped),
            (1, 0, 1)
        );
        assert!(dlq.deleted(DLQ).is_empty());
        assert_eq!(released(&dlq), vec!["m0"]);
    }

    #[tokio::test]
    async fn several_cycles_are_in_flight_at_once() {
        // GIVEN an SQS that takes 5 ms per call and 300 replayable messages, at 3,000/s
        let (dlq, store, alarms) = doubles();
        fill(&dlq, 300, 0);
        dlq.set_delay(Duration::from_millis(5));
        let cfg = config(&[]);
        let deadline = Instant::now() + Duration::from_secs(60);
        let summary = run_with(&dlq, &store, &alarms, &cfg, 3000.0, deadline).await;
        // THEN all went, and receives, sends and deletes of several batches overlapped (one
        // batch at a time never has more than one call under way)
        assert_eq!(summary.redriven, 300, "{summary:?}");
        assert!(dlq.is_empty(DLQ));
        assert!(
            dlq.peak_concurrent_calls() >= 4,
            "{}",
            dlq.peak_concurrent_calls()
        );
        // the sequential design, for comparison
        let (dlq, store, alarms) = doubles();
        fill(&dlq, 30, 0);
        dlq.set_delay(Duration::from_millis(5));
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone())
            .with_receive_wait(0)
            .with_max_cycles_in_flight(1)
            .with_candidates_max(0);
        r.run(&RunRequest::defaults(&cfg), deadline).await;
        assert_eq!(dlq.peak_concurrent_calls(), 1);
    }

    #[tokio::test]
    async fn pipelined_fifo_groups_keep_their_order() {
        // GIVEN a FIFO DLQ of 5 groups of 30, interleaved, and an SQS that takes 2 ms per call
        let (dlq, store, alarms) = doubles();
        let cfg = fifo_config();
        for i in 0..30 {
            for g in ["A", "B", "C", "D", "E"] {
                dlq.push(FIFO_DLQ, in_group(&format!("{g}{i:02}"), g));
            }
        }
        dlq.set_delay(Duration::from_millis(2));
        let request = RunRequest {
            rate_per_second: 3000.0,
            ..RunRequest::defaults(&cfg)
        };
        let r = Redriver::new(&dlq, &store, &alarms, cfg.clone()).with_receive_wait(0);
        let summary = r
            .run(&request, Instant::now() + Duration::from_secs(60))
            .await;
        // THEN every message went, once, and each group in its order
        assert_eq!(summary.redriven, 150, "{summary:?}");
        let sent: Vec<String> = dlq.sent(FIFO_MAIN).into_iter().map(|c| c.body).collect();
        for g in ["A", "B", "C", "D", "E"] {
            let order: Vec<&String> = sent
                .iter()
                .filter(|b| b.contains(&format!("\"{g}")))
                .collect();
            let expected: Vec<String> = (0..30)
                .map(|i| format!("{{\"orderId\":\"{g}{i:02}\"}}"))
                .collect();
            assert_eq!(order, expected.iter().collect::<Vec<_>>(), "group {g}");
        }
        assert!(dlq.is_empty(FIFO_DLQ));
    }

    #[tokio::test]
    async fn kept_messages_never_push_the_dlq_past_its_in_flight_quota() {
        // GIVEN a DLQ that, like SQS, answers receives with nothing past 400 messages in
        // flight; 400 kept permanent failures ahead of 50 replayable ones; KEPT_IN_FLIGHT_MAX
        // 100 (a run holds at most 350 hidden)
        let (dlq, store, alarms) = doubles();
        dlq.set_in_flight_quota(400);
        let cfg = config(&[("KEPT_IN_FLIGHT_MAX", "100")]);
        let sent = now_ms() - HOUR_MS;
        let kept = |dlq: &MemorySqs, from: usize, n: usize| {
            for i in from..from + n {
                let m = dlq_message(&format!("kept-{i}"), sent, &permanent("MALFORMED_JSON"));
                dlq.push(DLQ, m);
            }
        };
        kept(&dlq, 0, 400);
        fill(&dlq, 50, 0);
        let run = || {
            Redriver::new(&dlq, &store, &alarms, cfg.clone())
                .with_receive_wait(0)
                .with_in_flight_max(350)
        };
        let request = RunRequest::defaults(&cfg);
        let deadline = || Instant::now() + Duration::from_secs(60);
        let first = run().run(&request, deadline()).await;
        // THEN 100 are kept hidden, the other 300 archived, and the replayable ones replayed
        assert_eq!(first.kept_in_flight, Some(100), "{first:?}");
        assert_eq!(
            first.archived.get(&ArchiveReason::PermanentFailure),
            Some(&300),
            "{first:?}"
        );
        assert_eq!(first.redriven, 50);
        assert_eq!(dlq.in_flight(DLQ), 100);
        assert_eq!(first.metrics().get(crate::summary::KEPT), 100);
        // AND later kept ones are archived while 100 are hidden; replay goes on
        kept(&dlq, 400, 20);
        fill(&dlq, 5, 0);
        let second = run().run(&request, deadline()).await;
        assert_eq!(
            second.archived.get(&ArchiveReason::PermanentFailure),
            Some(&20),
            "{second:?}"
        );
        assert_eq!((second.redriven, second.kept_in_flight), (5, Some(100)));
        assert!(dlq.in_flight(DLQ) <= 100);
    }

    #[tokio::test]
    async fn dead_letters_without_a_reason_are_counted_once() {
        // GIVEN five dead letters SQS moved without a reason, and replay paused
        let (dlq, store, alarms, paused, sent) = paused_with_crashed(5);
        let first = scheduled(&dlq, &store, &alarms, &paused).await;
        // THEN the run counts them, and leaves in their place copies that say why
        assert_eq!(first.unexplained, 5, "{first:?}");
        assert_eq!(
            first
                .metrics()
                .get(crate::summary::DEAD_LETTERED_UNEXPLAINED),
            5
        );
        assert_eq!((dlq.len(DLQ), dlq.visible(DLQ)), (5, 5));
        // AND a later paused run, its archive sweep an hour away, reads nothing; once replay
        // resumes they are replayed, and counted no more
        let second = scheduled(&dlq, &store, &alarms, &paused).await;
        assert_eq!(
            (second.received, second.stopped_by),
            (0, StopReason::MaxMessages),
            "{second:?}"
        );
        let third = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        assert_eq!((third.redriven, third.unexplained), (5, 0), "{third:?}");
        for copy in dlq.sent(MAIN) {
            assert_eq!(
                copy.attributes
                    .get(X_FIRST_SENT_AT)
                    .and_then(|v| v.string_value.clone()),
                Some(sent.to_string())
            );
        }
        // AND a run that replays one it sees first counts it then
        dlq.push(DLQ, unexplained("crashed-late", now_ms(), &[]));
        let fourth = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        assert_eq!((fourth.redriven, fourth.unexplained), (1, 1), "{fourth:?}");
    }

    #[tokio::test]
    async fn a_send_that_timed_out_does_not_end_the_run() {
        // GIVEN 200 replayable messages, and the run's first SendMessageBatch timing out (no
        // answer: SQS may have taken it)
        let (dlq, store, alarms) = doubles();
        fill(&dlq, 200, 0);
        dlq.time_out_calls(resq_testing::Call::Send, 1);
        let deadline = Instant::now() + Duration::from_secs(30);
        let summary = run_with(&dlq, &store, &alarms, &config(&[]), 3000.0, deadline).await;
        // THEN the run goes on to the end of the DLQ: the ten of that call stay hidden (they
        // reappear after the run and are sent again then), the other 190 are replayed
        assert_eq!(
            (summary.redriven, summary.failed, summary.stopped_by),
            (190, 10, StopReason::Empty),
            "{summary:?}"
        );
        assert_eq!(dlq.len(DLQ), 10);
        assert_eq!(dlq.visible(DLQ), 0);
    }

    #[tokio::test]
    async fn a_message_handed_to_two_receives_at_once_is_replayed_once() {
        // GIVEN 40 replayable messages in a standard DLQ that hands each in-flight message to a
        // second receive too, and calls slow enough for cycles to overlap
        let (dlq, store, alarms) = doubles();
        fill(&dlq, 40, 0);
        dlq.deliver_twice(true);
        dlq.set_delay(Duration::from_millis(5));
        let deadline = Instant::now() + Duration::from_secs(30);
        let summary = run_with(&dlq, &store, &alarms, &config(&[]), 3000.0, deadline).await;
        // THEN each is replayed exactly once, and the DLQ is empty
        let mut bodies: Vec<String> = dlq.sent(MAIN).iter().map(|c| c.body.clone()).collect();
        let sent = bodies.len();
        bodies.sort();
        bodies.dedup();
        assert_eq!((sent, bodies.len()), (40, 40), "{summary:?}");
        assert_eq!(summary.redriven, 40);
        assert!(dlq.is_empty(DLQ));
    }

    #[tokio::test]
    async fn a_paused_run_explains_dead_letters_at_sqs_speed_not_the_replay_rate() {
        // GIVEN 300 dead letters of crashed invocations, replay paused, a rate of 1 a second
        // and a run of a few seconds
        let (dlq, store, alarms, paused, _) = paused_with_crashed(300);
        let deadline = Instant::now() + Duration::from_secs(4);
        let summary = run_with(&dlq, &store, &alarms, &paused, 1.0, deadline).await;
        // THEN the one run gives every one its reason (copies into the DLQ are no replays:
        // the bucket paces only the main queue), and replays none
        assert_eq!(
            (summary.unexplained, summary.redriven),
            (300, 0),
            "{summary:?}"
        );
        assert!(dlq.sent(MAIN).is_empty());
        assert_eq!(dlq.len(DLQ), 300);
    }

    #[tokio::test]
    async fn a_pause_longer_than_its_hold_or_blind_is_reported() {
        let (dlq, store, alarms) = doubles();
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        // in ALARM for 10 minutes (the hold is 15): a pause, not yet too long
        alarms.set("replays-failing", true, Duration::from_secs(600), 10.0);
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert!(summary.paused && !summary.paused_too_long, "{summary:?}");
        assert_eq!(
            summary
                .metrics()
                .get(crate::summary::REDRIVE_PAUSED_TOO_LONG),
            0
        );
        // in ALARM for an hour: too long
        alarms.set("replays-failing", true, Duration::from_secs(3600), 10.0);
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert!(summary.paused_too_long, "{summary:?}");
        assert_eq!(
            summary
                .metrics()
                .get(crate::summary::REDRIVE_PAUSED_TOO_LONG),
            1
        );
        // an alarm that cannot be read: paused, and loudly
        alarms.fail(PortError::service("AccessDenied", "not allowed"));
        let summary = scheduled(&dlq, &store, &alarms, &cfg).await;
        assert!(summary.paused && summary.paused_too_long, "{summary:?}");
    }

    /// `m` with the body of order `order_id`.
    fn of_order(mut m: ReceivedMessage, order_id: &str) -> ReceivedMessage {
        m.body = serde_json::json!({"orderId": order_id, "userId": "u1", "items": [{"productId": "p1", "quantity": 1}]}).to_string();
        m
    }

    /// No line uses the old keys: one name for one thing in both functions' logs.
    /// One key style, snake_case: no camelCase key is left on any line.
    fn assert_no_old_keys(lines: &[serde_json::Value]) {
        for line in lines {
            for key in line.as_object().into_iter().flat_map(|o| o.keys()) {
                assert!(
                    !key.chars().any(|c| c.is_ascii_uppercase()),
                    "{key} in {line}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_replay_is_logged_with_the_old_and_new_message_id_and_the_order() {
        // GIVEN the JSON log lines the function writes in Lambda, and a DLQ message of order
        // ORD-7 replayed once before
        let (logs, _guard) = resq_testing::CapturedLogs::start();
        let (dlq, store, alarms) = doubles();
        let m = dlq_message(
            "dlq-7",
            now_ms(),
            &[(X_REDRIVE_COUNT, AttributeValue::number(1))],
        );
        dlq.push(DLQ, of_order(m, "ORD-7"));
        // WHEN a run replays it
        let summary = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        assert_eq!(summary.redriven, 1, "{summary:?}");
        // THEN one INFO line names the DLQ message, its copy in the main queue (the id
        // SendMessageBatch returned), the order, and the copy's x-redrive-count
        let copy_id = dlq.ids(MAIN).pop().unwrap();
        let lines = logs.with_message("redriven");
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["message_id"], "dlq-7");
        assert_eq!(line["new_message_id"], copy_id.as_str());
        assert_eq!(line["correlation_id"], "ORD-7");
        assert_eq!(line["order_id"], "ORD-7");
        assert_eq!(line["redrive_count"], 2);
        assert_no_old_keys(&logs.lines());
    }

    #[tokio::test]
    async fn an_archive_is_logged_with_its_message_and_order() {
        // GIVEN a message of order ORD-9 past its TTL, and one whose body is not an order
        let (logs, _guard) = resq_testing::CapturedLogs::start();
        let (dlq, store, alarms) = doubles();
        let old = now_ms() - 25 * HOUR_MS;
        dlq.push(DLQ, of_order(dlq_message("dlq-9", old, &[]), "ORD-9"));
        let mut broken = dlq_message("dlq-10", old, &[]);
        broken.body = "{not json".into();
        dlq.push(DLQ, broken);
        // WHEN a run archives them
        let summary = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        assert_eq!(summary.archived.get(&ArchiveReason::TtlExpired), Some(&2));
        // THEN each archive line names the message, and the order when the body names one
        let lines = logs.with_message("archived");
        let line = |id: &str| {
            lines
                .iter()
                .find(|l| l["message_id"] == id)
                .unwrap_or_else(|| panic!("no archive line of {id} in {lines:?}"))
        };
        assert_eq!(line("dlq-9")["correlation_id"], "ORD-9");
        assert_eq!(line("dlq-9")["order_id"], "ORD-9");
        assert_eq!(line("dlq-9")["reason"], "TTL_EXPIRED");
        assert!(line("dlq-10").get("correlation_id").is_none(), "{lines:?}");
        assert_no_old_keys(&logs.lines());
    }

    #[tokio::test]
    async fn an_explained_dead_letter_and_a_refused_replay_carry_the_same_keys() {
        // GIVEN a dead letter without a reason while replay is paused
        let (logs, _guard) = resq_testing::CapturedLogs::start();
        let (dlq, store, alarms, paused, _) = paused_with_crashed(1);
        scheduled(&dlq, &store, &alarms, &paused).await;
        // THEN the line of its explained copy names the old and the new message id, and the
        // order
        let copy_id = dlq.ids(DLQ).pop().unwrap();
        let explained =
            logs.with_message("dead letter without a reason: its copy in the DLQ now says why");
        assert_eq!(explained.len(), 1, "{:?}", logs.lines());
        assert_eq!(explained[0]["message_id"], "crashed-0");
        assert_eq!(explained[0]["new_message_id"], copy_id.as_str());
        assert_eq!(explained[0]["correlation_id"], "crashed-0");
        assert_eq!(explained[0]["order_id"], "crashed-0");
        // AND a replay SQS refuses is logged under the same keys
        let (dlq, store, alarms) = doubles();
        dlq.push(
            DLQ,
            of_order(dlq_message("dlq-11", now_ms(), &[]), "ORD-11"),
        );
        dlq.fail_sends(|_| true);
        scheduled(&dlq, &store, &alarms, &config(&[])).await;
        let refused = logs.with_message("not redriven; left in the DLQ");
        assert_eq!(refused.len(), 1, "{:?}", logs.lines());
        assert_eq!(refused[0]["message_id"], "dlq-11");
        assert_eq!(refused[0]["correlation_id"], "ORD-11");
        assert_eq!(refused[0]["order_id"], "ORD-11");
        assert_no_old_keys(&logs.lines());
    }

    #[tokio::test]
    async fn a_runs_summary_line_can_be_filtered_on_its_fields() {
        // GIVEN one replayable message and one past its TTL
        let (logs, _guard) = resq_testing::CapturedLogs::start();
        let (dlq, store, alarms) = doubles();
        dlq.push(DLQ, dlq_message("fresh", now_ms(), &[]));
        dlq.push(DLQ, dlq_message("old", now_ms() - 25 * HOUR_MS, &[]));
        // WHEN a run handles them
        let summary = scheduled(&dlq, &store, &alarms, &config(&[])).await;
        // THEN its summary line holds the summary's fields as JSON values of their own
        let lines = logs.with_message("redrive run done");
        assert_eq!(lines.len(), 1, "{:?}", logs.lines());
        let line = &lines[0];
        assert_eq!(line["level"], "INFO");
        assert_eq!(
            (
                &line["received"],
                &line["redriven"],
                &line["archived_ttl_expired"]
            ),
            (&2.into(), &1.into(), &1.into()),
            "{line}"
        );
        assert_eq!(line["dry_run"], false);
        assert_eq!(line["stopped_by"], "empty");
        assert_eq!(line["elapsed_ms"], summary.elapsed_ms);
        assert!(line.get("summary").is_none(), "{line}");
        assert_no_old_keys(&lines);
    }

    /// A scheduled run with a consumer breaker on `mapping`, the downstream-failing alarm its
    /// alarm.
    async fn with_breaker(
        dlq: &MemorySqs,
        store: &MemoryStore,
        alarms: &FixedAlarms,
        mapping: &resq_testing::MemoryMapping,
    ) -> Summary {
        let cfg = config(&[
            ("CONSUMER_EVENT_SOURCE_MAPPING", "esm-1"),
            ("PAUSE_CONSUMER_ON_ALARMS", "downstream-failing"),
        ]);
        let r = Redriver::new(dlq, store, alarms, cfg.clone())
            .with_receive_wait(0)
            .with_mappings(mapping);
        let deadline = Instant::now() + Duration::from_secs(60);
        r.run(&RunRequest::defaults(&cfg), deadline).await
    }

    #[tokio::test]
    async fn the_consumer_is_paused_on_record_and_resumed_only_by_whoever_paused_it() {
        use resq::mapping::MappingState;
        use resq::state::{PauseState, PausedBy};
        // GIVEN the downstream failing, the consumer's mapping enabled
        let (dlq, store, alarms) = doubles();
        let mapping = resq_testing::MemoryMapping::new("esm-1");
        alarms.set("downstream-failing", true, Duration::from_secs(60), 50.0);
        // WHEN a run goes THEN the pause is on record and the mapping disabled
        let first = with_breaker(&dlq, &store, &alarms, &mapping).await;
        assert_eq!(first.consumer_paused, Some(true), "{first:?}");
        assert_eq!(mapping.switches(), [false]);
        let record = resq::state::current_pause(&store, "esm-1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (record.state, record.by),
            (PauseState::Paused, PausedBy::Resq)
        );
        assert_eq!(record.alarms, ["downstream-failing"]);
        // AND once the alarm is OK the next run resumes it, and says so on record
        alarms.set("downstream-failing", false, Duration::from_secs(60), 50.0);
        let second = with_breaker(&dlq, &store, &alarms, &mapping).await;
        assert_eq!(second.consumer_paused, Some(false), "{second:?}");
        assert_eq!(mapping.switches(), [false, true]);
        let record = resq::state::current_pause(&store, "esm-1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.state, PauseState::Resumed);
        // AND a mapping disabled with no pause of resq's on record stays disabled
        mapping.set_state(MappingState::Disabled);
        let op = resq::state::PauseRecord::new(
            "esm-1",
            PauseState::Paused,
            PausedBy::Operator,
            now_ms(),
        );
        resq::state::record_pause(&store, &op).await.unwrap();
        let third = with_breaker(&dlq, &store, &alarms, &mapping).await;
        assert_eq!(mapping.switches(), [false, true], "{third:?}");
        assert_eq!(third.consumer_paused, Some(true));
    }

    #[tokio::test]
    async fn no_pause_without_its_record_and_no_pause_on_alarms_that_cannot_be_read() {
        // GIVEN the downstream failing, and a bucket that refuses writes
        let (dlq, store, alarms) = doubles();
        let mapping = resq_testing::MemoryMapping::new("esm-1");
        alarms.set("downstream-failing", true, Duration::from_secs(60), 50.0);
        store.set_failing(true);
        // THEN the mapping is left running: resq never holds a pause it has no record of
        let summary = with_breaker(&dlq, &store, &alarms, &mapping).await;
        assert!(mapping.switches().is_empty(), "{summary:?}");
        assert_eq!(mapping.state(), resq::mapping::MappingState::Enabled);
        assert_eq!(summary.consumer_paused, Some(false), "said as it is");
        // AND alarms that cannot be read never pause the consumer
        store.set_failing(false);
        alarms.fail(PortError::local("AccessDenied"));
        let summary = with_breaker(&dlq, &store, &alarms, &mapping).await;
        assert!(mapping.switches().is_empty(), "{summary:?}");
        assert_eq!(summary.consumer_paused, Some(false));
    }

    #[tokio::test]
    async fn an_operators_pause_written_meanwhile_stops_the_breakers_act() {
        use crate::run::ConsumerAct;
        use resq::state::{PauseRecord, PauseState, PausedBy};
        // GIVEN resq's pause of the consumer on record, then an operator's pause written after
        // the run read the log
        let (dlq, store, alarms) = doubles();
        let mapping = resq_testing::MemoryMapping::new("esm-1");
        mapping.set_state(resq::mapping::MappingState::Disabled);
        let cfg = config(&[("CONSUMER_EVENT_SOURCE_MAPPING", "esm-1")]);
        let r = Redriver::new(&dlq, &store, &alarms, cfg).with_mappings(&mapping);
        let t = now_ms();
        let ours = PauseRecord::new("esm-1", PauseState::Paused, PausedBy::Resq, t - 1000);
        resq::state::record_pause(&store, &ours).await.unwrap();
        let op = PauseRecord::new("esm-1", PauseState::Paused, PausedBy::Operator, t);
        resq::state::record_pause(&store, &op).await.unwrap();
        let by = Instant::now() + Duration::from_secs(5);
        // WHEN the run would resume what it saw as its own pause
        let resume = ConsumerAct::Resume(PauseRecord::new(
            "esm-1",
            PauseState::Resumed,
            PausedBy::Resq,
            t + 1,
        ));
        let done = r.act_on_consumer(&resume, Some(t - 1000), by).await;
        // THEN it does nothing: the mapping stays disabled, the operator's entry stays newest
        assert!(done.is_err_and(|e| e.contains("operator")));
        assert!(mapping.switches().is_empty());
        let current = resq::state::current_pause(&store, "esm-1").await.unwrap();
        assert_eq!(current, Some(op.clone()));
        // AND the operator's pause the run had seen does not stop a pause of its own
        let pause = ConsumerAct::Pause(PauseRecord::new(
            "esm-1",
            PauseState::Paused,
            PausedBy::Resq,
            t + 2,
        ));
        mapping.set_state(resq::mapping::MappingState::Enabled);
        assert_eq!(r.act_on_consumer(&pause, Some(t), by).await, Ok(()));
        assert_eq!(mapping.switches(), [false]);
        // AND an operator's forced resume written during a probe is not undone at its end
        let probing = PauseRecord::new("esm-1", PauseState::Probing, PausedBy::Resq, t + 10);
        resq::state::record_pause(&store, &probing).await.unwrap();
        let mut forced = PauseRecord::new("esm-1", PauseState::Resumed, PausedBy::Operator, t + 11);
        forced.forced = true;
        resq::state::record_pause(&store, &forced).await.unwrap();
        mapping.set_state(resq::mapping::MappingState::Enabled);
        let end = ConsumerAct::EndProbe(crate::consumer_breaker::probe_over(&probing, t + 12));
        let done = r.act_on_consumer(&end, Some(t + 10), by).await;
        assert!(done.is_err_and(|e| e.contains("operator resumed")));
        assert_eq!(mapping.switches(), [false], "the mapping left enabled");
        let current = resq::state::current_pause(&store, "esm-1").await.unwrap();
        assert_eq!(current, Some(forced));
    }
}
