//! A redriver run as a state machine over values (docs/design.md, "Run loop"), in the shape of
//! quinn-proto's connection: [`Run`] holds every bit of a run's state and its scheduling
//! policy, and does no I/O and reads no clock. It is handed what arrived and the time
//! (`handle_*`), says what to do next ([`Run::poll`], a [`Command`]) and when to wake it
//! ([`Run::poll_timeout`]); the shell ([`crate::engine`]) carries each command out and reports
//! back. What becomes of each message is judged by [`crate::classify`] and planned by
//! [`crate::plan`]; what the run did is its [`Summary`].
//!
//! A run goes through four stages:
//! 1. **breaker**: the alarms of `PAUSE_ON_ALARMS` ([`crate::breaker`]); open pauses replay for
//!    the run (archiving goes on), half-open lowers the budget to a probe;
//! 2. **keep lists**: how many kept messages earlier runs hid (counted against
//!    `KEPT_IN_FLIGHT_MAX`), and, in a run selected by reason, those of its reason made visible
//!    again;
//! 3. **cycles**: receive 10, classify and plan, settle (archive entries and copies, then the
//!    deletes of what they confirmed), several cycles in flight under one token bucket, until
//!    the DLQ, the time or the room in flight runs out. In a standard DLQ the replay candidates
//!    are held ([`crate::fair`], up to 1,000) and dealt out round-robin by group as the budget
//!    and the token bucket allow, each deal a cycle of its own. A spent budget does not stop receiving:
//!    what is past its TTL or the cap is archived whatever the budget, and the rest is held.
//!    The breaker is read again every [`BREAKER_RECHECK`];
//! 4. **end**: the kept messages listed, then hidden until their TTL; what the run held
//!    released; [`Command::Finish`].
//!
//! With deadline `D` and margin `m`: nothing new starts after `D - m`; receives, archive writes
//! and copies end by `D - m/2`; deletes, visibility changes and keep lists by `D - m/4`, done
//! or not. What was not confirmed is not deleted: it reappears by itself.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::config::RedriverConfig;
use resq::keep::{self, KeptMessage, MAX_ENTRIES_PER_LIST};
use resq::reason::{ArchiveReason, ErrorCode};
use resq::settle::{ActionId, Confirmation, Deadlines, Plan, Report, SettleError, Unattempted};
use resq::sqs::{MAX_BATCH, ReceivedMessage};

use crate::backoff::{Answer, Call, CycleLimit};
use crate::breaker::{self, AlarmState, Breaker};
use crate::classify::{self, Rules};
use crate::consumer_breaker::{self as consumer, ConsumerView, Holder, Verdict};
use crate::fair::{self, Candidates, Served};
use crate::plan::{self, Cycle, Fate, Held, Limits, PendingKeep, QueueUrls};
use crate::request::RunRequest;
use crate::summary::{Replayed, StopReason, Summary};
use crate::sweep::{self, SweepRecord};
use resq::state::PauseRecord;

/// How often a run reads the breaker's alarms again while it goes on.
pub const BREAKER_RECHECK: Duration = Duration::from_secs(30);
/// How long a run waits for the breaker's alarms before it pauses replay (and goes on
/// archiving): a slow CloudWatch must not eat the run.
pub const BREAKER_WAIT: Duration = Duration::from_secs(5);
/// The most DLQ messages a run holds hidden (kept ones, those held for the run and those in
/// its cycles): SQS hands out nothing past about 120,000 in flight in a standard queue, with
/// no error, so a run stays well below it.
pub const IN_FLIGHT_MAX: u64 = 110_000;
/// How long a run reads the keep lists at most before it counts the kept messages as unknown
/// (then it hides no more): a slow S3 must not eat the run.
pub const KEEP_LIST_WAIT: Duration = Duration::from_secs(5);
/// Receives in flight at most while a run first gathers its replay candidates.
pub const FILL_CYCLES: usize = 8;
/// Received messages stay hidden this long past the deadline, so one the run could not finish
/// (a crash, a call cut off) comes back soon after it.
pub const HOLD_PAST_DEADLINE: Duration = Duration::from_secs(30);

/// The time, as the shell read it: the monotonic instant (for deadlines and pacing) and the
/// wall clock in epoch millis (for TTLs and the alarms' history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// The monotonic instant.
    pub instant: Instant,
    /// Epoch millis.
    pub epoch_ms: u64,
}

impl Now {
    /// The same clock, `d` later.
    pub fn after(self, d: Duration) -> Self {
        Self {
            instant: self.instant + d,
            epoch_ms: self.epoch_ms + d.as_millis() as u64,
        }
    }
}

/// How a redriver runs, beyond its configuration: what a deployment never changes and a test,
/// a benchmark or a stand-in may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// `ReceiveMessage`'s long-poll wait, 0–20 s (1 s: "empty" means empty).
    pub receive_wait_seconds: i32,
    /// How often the breaker is read again ([`BREAKER_RECHECK`]).
    pub breaker_recheck: Duration,
    /// The most DLQ messages a run holds hidden, kept ones included ([`IN_FLIGHT_MAX`]).
    pub in_flight_max: u64,
    /// The most receive → settle cycles in flight ([`plan::MAX_CYCLES_IN_FLIGHT`]; 1 is the
    /// sequential design).
    pub max_cycles: usize,
    /// The cycles in flight adapt to SQS's answers ([`CycleLimit`]); `false` keeps them at
    /// what the rate needs, the fixed pipeline before it, for comparison.
    pub backs_off: bool,
    /// The most replay candidates a run holds ahead to deal out by group
    /// ([`fair::MAX_CANDIDATES`]; 0 replays in the order received, the design before fair
    /// replay).
    pub candidates_max: usize,
    /// What the run reads once no replay is left (its budget spent, or paused) is hidden this
    /// long, not until the deadline, and the run reads on for half of it (`None`: to the
    /// deadline, as a scheduled run does): an operator's run, which has an hour, holds
    /// little past its `--max-messages`, and what it strands when killed comes back soon.
    pub read_on_hold: Option<Duration>,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            receive_wait_seconds: 1,
            breaker_recheck: BREAKER_RECHECK,
            in_flight_max: IN_FLIGHT_MAX,
            max_cycles: plan::MAX_CYCLES_IN_FLIGHT,
            backs_off: true,
            candidates_max: fair::MAX_CANDIDATES,
            read_on_hold: None,
        }
    }
}

/// A settle the run asked for, to be reported back with its [`Report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SettleId(u64);

/// A receive the run asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receive {
    /// When it was asked for: its messages' 12 h of visibility count from here.
    pub at: Instant,
    /// Received messages stay hidden this long (until a little past the deadline).
    pub visibility_seconds: i32,
    /// The long-poll wait.
    pub wait_seconds: i32,
    /// Answered by this, or the run stops receiving ([`StopReason::Deadline`]).
    pub by: Instant,
}

/// What the run asks the shell to do next.
#[derive(Debug)]
pub enum Command {
    /// Read the states of the breakers' alarms (`PAUSE_ON_ALARMS` and
    /// `PAUSE_CONSUMER_ON_ALARMS`), and, with a consumer breaker, the consumer's mapping, its
    /// pause log and the main queue's retention, by `by` ([`Run::handle_breaker`]).
    ReadBreaker {
        /// The answer's deadline: no answer by then counts as unreadable.
        by: Instant,
    },
    /// Act on the consumer's event source mapping, by `by` ([`Run::handle_consumer`]).
    Consumer {
        /// What to do.
        act: ConsumerAct,
        /// The time of the pause log's newest entry when the run decided (`None`: it had
        /// none): an operator's entry written since then stops the act.
        seen: Option<u64>,
        /// The answer's deadline.
        by: Instant,
    },
    /// Replay at this rate from now on (the token bucket's new rate; no answer).
    Pace(f64),
    /// Note that the run read the DLQ to its end, or swept it, by `by`
    /// ([`Run::handle_noted`]; a note that is not written makes the next run sweep).
    NoteSweep {
        /// The note.
        record: SweepRecord,
        /// Its deadline.
        by: Instant,
    },
    /// Read the keep lists and the last sweep's note by `by` ([`Run::handle_keep_lists`]).
    ReadKeepLists {
        /// The answer's deadline: no answer by then counts as unknown.
        by: Instant,
    },
    /// Receive up to 10 from the DLQ ([`Run::handle_received`]).
    Receive(Receive),
    /// Carry `plan` out by `by`, copies to the main queue paced by the token bucket
    /// ([`Run::handle_settled`]).
    Settle {
        /// Which settle, for its report.
        id: SettleId,
        /// The actions.
        plan: Plan,
        /// Their deadlines.
        by: Deadlines,
    },
    /// The run is over: take its summary ([`Run::finish`]).
    Finish,
}

/// What the shell does to the consumer's event source mapping, in this order, each step only
/// after the one before went through.
#[derive(Debug, Clone, PartialEq)]
pub enum ConsumerAct {
    /// Record resq's pause, then disable the mapping.
    Pause(PauseRecord),
    /// Enable the mapping, then record the resume.
    Resume(PauseRecord),
    /// Record the probe, enable the mapping, then wait until Lambda reports it enabled.
    Probe(PauseRecord),
    /// Disable the mapping, then record the pause going on.
    EndProbe(PauseRecord),
    /// Record only (an operator's forced resume that the alarms have left).
    Note(PauseRecord),
}

impl ConsumerAct {
    /// The pause-log entry the act writes.
    pub fn record(&self) -> &PauseRecord {
        match self {
            Self::Pause(r)
            | Self::Resume(r)
            | Self::Probe(r)
            | Self::EndProbe(r)
            | Self::Note(r) => r,
        }
    }
}

/// The consumer's breaker in a run.
#[derive(Debug)]
struct ConsumerBreaker {
    /// `CONSUMER_EVENT_SOURCE_MAPPING`.
    mapping: String,
    /// `PAUSE_CONSUMER_ON_ALARMS`.
    names: Vec<String>,
    /// A [`Command::Consumer`] is under way.
    acting: bool,
    /// A probe: its record, how long it runs, and when it ends once the mapping is enabled.
    probe: Option<(PauseRecord, Duration, Option<Instant>)>,
    /// The time of the pause log's newest entry, as last read or written.
    seen: Option<u64>,
}

/// The replay rate: where it is, where it starts and how far it may climb.
#[derive(Debug, Clone)]
struct Pace {
    rate: f64,
    base: f64,
    max: f64,
    /// Each rate the run set and when, the first at its start.
    changes: Vec<(Instant, f64)>,
}

impl Pace {
    /// The mean rate the run paced at between `from` and `to`.
    fn mean(&self, from: Instant, to: Instant) -> f64 {
        let span = to.saturating_duration_since(from).as_secs_f64();
        let mut sum = 0.0;
        for (i, (at, rate)) in self.changes.iter().enumerate() {
            let until = self
                .changes
                .get(i + 1)
                .map_or(to, |(next, _)| *next)
                .min(to);
            sum += rate
                * until
                    .saturating_duration_since((*at).max(from))
                    .as_secs_f64();
        }
        match span > 0.0 {
            true => sum / span,
            false => self.rate,
        }
    }

    /// The next step up: a quarter of the way from the base to the ceiling (the ceiling in
    /// four rechecks, two minutes), at least the base.
    fn up(&self) -> f64 {
        (self.rate + ((self.max - self.base) / 4.0).max(self.base)).min(self.max)
    }
}

/// A received message's (message id, receipt handle).
pub type Receipt = (String, String);

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The breaker's first reading: asked for (`true`) or not yet.
    Breaker(bool),
    /// The keep lists: asked for (`true`) or not yet.
    KeepLists(bool),
    /// A selective run makes the kept messages of its reason visible.
    Unhide,
    /// Receive → plan → settle cycles.
    Cycles,
    /// The end: the kept messages listed and hidden (asked for: `true`).
    Keeping(bool),
    /// The end: what the run held released (asked for: `true`).
    Releasing(bool),
    /// Nothing more to do: [`Command::Finish`].
    Done,
    /// [`Command::Finish`] given.
    Finished,
}

/// Where a batch to plan comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batch {
    /// A receive.
    Received,
    /// The candidates held, dealt out.
    Dealt,
    /// The candidates no replay is left for.
    Left,
}

/// What a settle in flight is for: how its report is counted.
#[derive(Debug)]
enum Purpose {
    /// Kept messages of a selective run's reason made visible: how many earlier runs hid.
    Unhide(u64),
    /// A cycle's messages and their fates: a received batch's, or (`true`) candidates dealt.
    Cycle(Cycle, bool),
    /// Kept messages listed, then hidden: each with its listing and its hide.
    Keep(Vec<(KeptMessage, ActionId, ActionId)>),
    /// A release: of replays whose delete failed, while cycles go on (`true`), or of what the
    /// run held, at its end.
    Release(bool),
}

/// The cycles in flight and what governs them.
#[derive(Debug)]
struct Window {
    /// The most cycles in flight: what [`CycleLimit`] allows now, within what the rate needs
    /// ([`plan::cycles_in_flight`]).
    depth: usize,
    /// The cycles in flight, adapted to SQS's answers.
    limit: CycleLimit,
    /// The most replays planned ahead of the token bucket ([`plan::replays_ahead`]).
    ahead: u64,
    /// Cycles in flight now may number this many: it starts at 2 and doubles with each full
    /// batch, up to `depth`, and starts over at 2 on an empty receive, so that a shallow DLQ,
    /// or a FIFO group this run holds, costs a few receives, not `depth` empty ones.
    open: usize,
    /// Cycles in flight: receiving or settling.
    cycles: usize,
    /// Of those, receiving.
    receiving: usize,
    /// Of those, candidates dealt out (settling): they have slots of their own beside the
    /// receives' and their settles.
    dealt: usize,
    /// Releases of replays whose delete failed, under way: what they make visible is received
    /// again by this run.
    releasing: usize,
    /// Keep lists being written while cycles go on.
    keeping: usize,
    /// The breaker is being read again: no receive starts (its batch would be planned under
    /// the old verdict).
    checking: bool,
    /// The DLQ looked drained (a receive came back empty): one receive at a time until one
    /// brings messages, not a burst of empty ones.
    drained: bool,
    /// A settle or release ended since the last receive started: messages may have become
    /// receivable (a FIFO group unlocked, a release), so one receive may start although the
    /// DLQ looked drained.
    probe: bool,
    /// Why receiving stopped.
    stopped: Option<StopReason>,
    /// When the breaker is read again.
    recheck_at: Instant,
}

impl Window {
    /// Anything in flight: a cycle, a release, a keep list, a breaker reading.
    fn busy(&self) -> bool {
        self.cycles + self.releasing + self.keeping > 0 || self.checking
    }
}

/// What counts against the run's budgets.
#[derive(Debug)]
struct Budget {
    /// Replays at most: `maxMessages`, what the rate allows in the run's time, or a probe.
    max_messages: u64,
    /// Copies sent or attempted: what counts against `max_messages`. Archiving does not
    /// (expired messages must not starve replay, nor fresh ones their archiving), nor do kept
    /// or unselected messages.
    replays: u64,
    /// Replays planned by cycles in flight and not yet counted.
    planned_replays: u64,
    /// Kept messages to hide planned by cycles in flight.
    planned_kept: u64,
    /// `KEPT_IN_FLIGHT_MAX`.
    kept_max: u64,
    /// Kept messages hidden now (by earlier runs, from their keep lists, and by this one);
    /// `None` when the keep lists could not be read.
    kept_hidden: Option<u64>,
}

/// One redriver run: its state, its scheduling and its summary so far.
#[derive(Debug)]
pub struct Run {
    summary: Summary,
    rules: Rules,
    queues: QueueUrls,
    /// `PAUSE_ON_ALARMS`.
    alarms: Vec<String>,
    tuning: Tuning,
    deadline: Instant,
    by: Deadlines,
    started: Instant,
    stage: Stage,
    window: Window,
    budget: Budget,
    /// Commands decided while handling what arrived, given by the next polls.
    ready: VecDeque<Command>,
    settling: HashMap<SettleId, Purpose>,
    next_id: u64,
    /// DLQ message ids whose replay (or explained copy) this run confirmed and whose delete
    /// did not go through (only those: a run at 3,000/s confirms millions of replays).
    replayed: HashSet<String>,
    /// DLQ message ids planned by cycles in flight: a standard queue may hand one message to
    /// two receives at once, and a second receipt must not be planned again.
    in_cycles: HashSet<String>,
    /// Replayed messages whose delete failed, to make visible again at once.
    release_now: Vec<Receipt>,
    /// Held for the run: released at its end.
    held: Vec<Receipt>,
    /// Kept messages waiting to be listed and hidden.
    pending: Vec<PendingKeep>,
    /// The first send call and how many it confirmed, and the last send call.
    sends: Option<((Instant, u64), Instant)>,
    /// The replays confirmed, when the run lists them (`None`: it does not; a scheduled run at
    /// 3,000/s would hold millions).
    listed: Option<Vec<Replayed>>,
    /// The consumer's breaker, with `CONSUMER_EVENT_SOURCE_MAPPING`.
    consumer: Option<ConsumerBreaker>,
    /// The replay rate.
    pace: Pace,
    /// The budget is what the rate allows in the run's time (`auto`): it grows as the rate
    /// climbs.
    auto_budget: bool,
    /// A sweep is due: a run paused or past its budget reads on through the DLQ to archive.
    sweep_due: bool,
    /// Its sweep note is being written: the run ends after it ([`Run::handle_noted`]).
    noting: bool,
    /// `ARCHIVE_SWEEP_SECONDS`.
    sweep_every: Duration,
    /// When the run started, epoch ms (its sweep note's time).
    started_ms: u64,
    /// Invoked by an alarm's action: the breakers only, no message touched.
    breakers_only: bool,
    /// The replay candidates held (a standard DLQ: `pooled`), dealt out fairly once `dealing`
    /// (enough were received, or no more come).
    candidates: Candidates,
    pooled: bool,
    dealing: bool,
    /// Messages received by the run, of any kind: dealing begins once `candidates_max` came,
    /// whatever they were (kept, outside the selection, due for the archive).
    gathered: usize,
    /// The groups this run's replays were of.
    served: Served,
    /// When the run began reading on with no replay left, under [`Tuning::read_on_hold`].
    read_on_since: Option<Instant>,
}

impl Run {
    /// A run of `request` under `config`, ending by `deadline`, started `now`.
    pub fn new(
        request: &RunRequest,
        config: &RedriverConfig,
        tuning: Tuning,
        deadline: Instant,
        now: Now,
    ) -> Self {
        let by = Deadlines::before(deadline, config.common.deadline_margin, 4, now.instant);
        let rate = request.rate_per_second;
        let time = by.start_by.saturating_duration_since(now.instant);
        let max_messages = request
            .max_messages
            .map_or_else(|| plan::auto_budget(rate, time), u64::from);
        let limit = CycleLimit::new(
            plan::cycles_in_flight(rate).min(tuning.max_cycles),
            tuning.backs_off,
            now.instant,
        );
        let depth = limit.current();
        Self {
            summary: Summary::new(request.dry_run, rate),
            rules: Rules::of(request, config),
            queues: QueueUrls::new(&config.common.main_queue_url, &config.common.dlq_url),
            alarms: config.pause_on_alarms.clone(),
            tuning,
            deadline,
            by,
            started: now.instant,
            stage: Stage::Breaker(false),
            window: Window {
                depth,
                limit,
                ahead: plan::replays_ahead(rate),
                open: depth.min(2),
                cycles: 0,
                receiving: 0,
                dealt: 0,
                releasing: 0,
                keeping: 0,
                checking: false,
                drained: false,
                probe: false,
                stopped: None,
                recheck_at: now.instant,
            },
            budget: Budget {
                max_messages,
                replays: 0,
                planned_replays: 0,
                planned_kept: 0,
                kept_max: config.kept_in_flight_max,
                kept_hidden: None,
            },
            ready: VecDeque::new(),
            settling: HashMap::new(),
            next_id: 0,
            replayed: HashSet::new(),
            in_cycles: HashSet::new(),
            release_now: Vec::new(),
            held: Vec::new(),
            pending: Vec::new(),
            sends: None,
            listed: None,
            consumer: config.consumer_mapping.as_ref().map(|m| ConsumerBreaker {
                mapping: m.clone(),
                names: config.pause_consumer_on_alarms.clone(),
                acting: false,
                probe: None,
                seen: None,
            }),
            pace: Pace {
                rate,
                base: rate,
                max: request.rate_max.max(rate),
                changes: vec![(now.instant, rate)],
            },
            auto_budget: request.max_messages.is_none(),
            sweep_due: true,
            noting: false,
            sweep_every: config.archive_sweep,
            started_ms: now.epoch_ms,
            breakers_only: request.alarm.is_some(),
            candidates: Candidates::default(),
            pooled: !resq::sqs::is_fifo(&config.common.dlq_url) && tuning.candidates_max > 0,
            gathered: 0,
            dealing: false,
            served: Served::default(),
            read_on_since: None,
        }
    }

    /// Cuts the run short at `now` (an operator's Ctrl-C): nothing new starts, what is under
    /// way ends, and the candidates held are released with the rest of what the run holds,
    /// all within `grace`.
    pub fn interrupt(&mut self, now: Now, grace: Duration) {
        self.window.stopped = Some(StopReason::Interrupted);
        self.summary.stopped_by = StopReason::Interrupted;
        self.deadline = self.deadline.min(now.instant + grace);
        self.by = Deadlines::before(self.deadline, grace, 4, now.instant);
    }

    /// Lists every replay this run confirms ([`Run::finish`] hands them over): an operator's
    /// canary follows each to its outcome.
    pub fn list_replays(&mut self) {
        self.listed.get_or_insert_with(Vec::new);
    }

    /// What to do next at `now`, or `None` until something arrives or [`Run::poll_timeout`]
    /// passes. The shell calls it until `None` after each `handle_*`.
    pub fn poll(&mut self, now: Now) -> Option<Command> {
        if let Some(command) = self.ready.pop_front() {
            return Some(command);
        }
        if let Some(command) = self.end_probe(now) {
            return Some(command);
        }
        loop {
            match self.stage {
                Stage::Breaker(false) if self.alarms.is_empty() && self.consumer.is_none() => {
                    self.stage = self.after_breaker()
                }
                Stage::Breaker(false) => {
                    self.stage = Stage::Breaker(true);
                    let by = self.by.start_by.min(now.instant + BREAKER_WAIT);
                    return Some(Command::ReadBreaker { by });
                }
                Stage::KeepLists(false) => {
                    self.stage = Stage::KeepLists(true);
                    let by = self.by.start_by.min(now.instant + KEEP_LIST_WAIT);
                    return Some(Command::ReadKeepLists { by });
                }
                Stage::Cycles => match self.poll_cycles(now) {
                    Some(command) => return Some(command),
                    None if self.window.busy() => return None,
                    None => {
                        let stopped = self.window.stopped.unwrap_or(StopReason::Empty);
                        self.summary.stopped_by = stopped;
                        self.stage = Stage::Keeping(false);
                        if let Some(note) = self.sweep_note() {
                            return Some(note);
                        }
                    }
                },
                Stage::Keeping(false) => {
                    self.stage = Stage::Keeping(true);
                    match self.keep_plan(now) {
                        Some(command) => return Some(command),
                        None => self.stage = Stage::Releasing(false),
                    }
                }
                Stage::Releasing(false) => {
                    self.stage = Stage::Releasing(true);
                    let held = std::mem::take(&mut self.held);
                    match held.is_empty() {
                        true => self.stage = Stage::Done,
                        false => return Some(self.release(held, self.by.settle_by, false)),
                    }
                }
                // a probe under way ends first: the mapping is never left running for it
                // so does the sweep note: a run that ends before it is written sweeps again
                // next time, and the time after
                Stage::Done if self.consumer_busy() || self.noting => return None,
                Stage::Done => {
                    self.stage = Stage::Finished;
                    return Some(Command::Finish);
                }
                Stage::Breaker(true)
                | Stage::KeepLists(true)
                | Stage::Unhide
                | Stage::Keeping(true)
                | Stage::Releasing(true)
                | Stage::Finished => return None,
            }
        }
    }

    /// When to call [`Run::poll`] again if nothing arrives before: the breaker's next reading
    /// while cycles go on. None once receiving has ended (the deadline margin, or why it
    /// stopped): a verdict then would plan nothing, and a reading cut short by the deadline
    /// would only report the run paused, and the pause too long.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let w = &self.window;
        // replay's breaker while replay goes on; the consumer's while anything does
        let rechecks = self.stage == Stage::Cycles
            && ((!self.alarms.is_empty() && !self.rules.paused) || self.consumer.is_some())
            && !w.checking
            && (w.stopped.is_none() || !self.candidates.is_empty());
        let recheck = rechecks
            .then_some(w.recheck_at)
            .filter(|at| *at < self.by.start_by);
        let probe_ends = self.probe_ends();
        recheck.into_iter().chain(probe_ends).min()
    }

    /// When the probe under way ends (by the deadline margin at the latest), once the mapping
    /// is enabled.
    fn probe_ends(&self) -> Option<Instant> {
        let c = self.consumer.as_ref()?;
        let (_, _, ends) = c.probe.as_ref()?;
        ends.map(|at| at.min(self.by.move_by)).filter(|_| !c.acting)
    }

    /// The probe's end, when it has come: the mapping disabled again, the pause going on.
    fn end_probe(&mut self, now: Now) -> Option<Command> {
        let ends = self.probe_ends()?;
        if now.instant < ends {
            return None;
        }
        let c = self.consumer.as_mut()?;
        let (probing, _, _) = c.probe.as_ref()?;
        let record = consumer::probe_over(probing, now.epoch_ms);
        c.acting = true;
        let by = self.by.settle_by;
        Some(Command::Consumer {
            act: ConsumerAct::EndProbe(record),
            seen: c.seen,
            by,
        })
    }

    /// The note of this run's read through the DLQ, when it got to the end (none for a dry
    /// run, or a run that stopped before: the last note stands, and the next sweep comes when
    /// it is due).
    fn sweep_note(&mut self) -> Option<Command> {
        if self.summary.dry_run || self.summary.stopped_by != StopReason::Empty {
            return None;
        }
        self.summary.swept = true;
        self.noting = true;
        Some(Command::NoteSweep {
            record: SweepRecord {
                at: self.started_ms,
            },
            by: self.by.settle_by,
        })
    }

    /// The sweep note was written, or not (a note not written makes the next run sweep).
    pub fn handle_noted(&mut self) {
        self.noting = false;
    }

    /// A consumer action or a probe under way.
    fn consumer_busy(&self) -> bool {
        self.consumer
            .as_ref()
            .is_some_and(|c| c.acting || c.probe.is_some())
    }

    /// Where a run goes after the breakers: the keep lists, or the end for an alarm's run.
    fn after_breaker(&self) -> Stage {
        match self.breakers_only {
            true => Stage::Done,
            false => Stage::KeepLists(false),
        }
    }

    /// The states of the breakers' alarms, or why they could not be read, and what was read
    /// of the consumer (with a consumer breaker), by the deadline of [`Command::ReadBreaker`].
    pub fn handle_breaker(
        &mut self,
        read: Result<Vec<AlarmState>, String>,
        view: Option<ConsumerView>,
        now: Now,
    ) {
        let read = read.as_deref().map_err(String::as_str);
        if !self.rules.paused {
            self.apply(breaker::decide(&self.alarms, read, now.epoch_ms));
        }
        if let Some(view) = view {
            self.decide_consumer(read, &view, now);
        }
        match self.stage {
            Stage::Breaker(_) => self.stage = self.after_breaker(),
            _ => {
                self.window.checking = false;
                self.window.recheck_at = now.instant + self.tuning.breaker_recheck;
                self.climb(read, now);
            }
        }
    }

    /// The consumer's breaker's verdict, taken: an action for the shell, or what the summary
    /// says. While the consumer is paused (by anyone) replay pauses too: a replay into a queue
    /// nobody consumes only spends its redrive count.
    fn decide_consumer(
        &mut self,
        read: Result<&[AlarmState], &str>,
        view: &ConsumerView,
        now: Now,
    ) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        if c.acting || c.probe.is_some() {
            return;
        }
        if let Err(e) = read {
            tracing::warn!(error_code = ErrorCode::BreakerUnreadable.code(), error_details = %e, alarms = %c.names.join(","), "the consumer breaker's alarms cannot be read: the consumer is not paused for them (the main flow fails open)");
        }
        let verdict = consumer::decide(&c.mapping, &c.names, read, view, now.epoch_ms);
        c.seen = view
            .record
            .as_ref()
            .ok()
            .and_then(|r| r.as_ref().map(|r| r.at));
        let firing = read
            .unwrap_or_default()
            .iter()
            .any(|s| s.in_alarm && c.names.contains(&s.name));
        let record = view.record.as_ref().ok().and_then(Option::as_ref);
        let (paused, act) = match verdict {
            Verdict::Running => {
                let note = consumer::clear_forced(&c.mapping, record, firing, now.epoch_ms);
                (false, note.map(ConsumerAct::Note))
            }
            Verdict::Held(holder) => {
                self.summary.consumer = Some(match holder {
                    Holder::Resq { alarms, .. } => {
                        format!("paused by resq ({})", alarms.join(", "))
                    }
                    Holder::Operator { reason } => format!("paused by hand: {reason}"),
                });
                (true, None)
            }
            Verdict::Pause(r) => {
                tracing::warn!(alarms = %r.alarms.join(","), "pausing the consumer: its event source mapping is disabled while an alarm is in ALARM; orders wait in the main queue");
                self.summary.consumer = r.reason.clone();
                (true, Some(ConsumerAct::Pause(r)))
            }
            Verdict::Resume(r, why) => {
                tracing::warn!(why = why.as_str(), "resuming the consumer resq paused");
                self.summary.consumer = Some(format!("resumed: {}", why.as_str()));
                (false, Some(ConsumerAct::Resume(r)))
            }
            Verdict::Probe(r, window) => {
                tracing::warn!(
                    probe = r.probes,
                    window_ms = window.as_millis() as u64,
                    "probing the downstream: the consumer runs for a window, then pauses again"
                );
                self.summary.consumer = Some(format!("probed (probe {})", r.probes));
                c.probe = Some((r.clone(), window, None));
                (true, Some(ConsumerAct::Probe(r)))
            }
            Verdict::Unknown(why) => {
                tracing::warn!(error_details = %why, "the consumer breaker leaves the mapping as it is");
                self.summary.consumer = Some(why);
                (
                    view.mapping
                        .as_ref()
                        .is_ok_and(|m| m.state.is_on() == Some(false)),
                    None,
                )
            }
        };
        self.summary.consumer_paused = Some(paused);
        if let Some(act) = act {
            c.acting = true;
            let by = self.by.settle_by;
            let seen = c.seen;
            self.ready.push_back(Command::Consumer { act, seen, by });
        }
        if paused && !self.rules.paused {
            let reason = self.summary.consumer.clone().unwrap_or_default();
            self.apply(Breaker::Open {
                reason: format!("the consumer is paused ({reason}): replay waits for it"),
                too_long: false,
            });
        }
    }

    /// What the shell reported of a [`Command::Consumer`]: done, or why not.
    pub fn handle_consumer(&mut self, act: &ConsumerAct, done: Result<(), String>, now: Now) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        c.acting = false;
        if done.is_ok() {
            c.seen = Some(act.record().at);
        }
        // the mapping is off after a pause or a probe's end that went through, and after a
        // resume or a probe that did not
        let off = match (act, &done) {
            (ConsumerAct::Note(_), _) => self.summary.consumer_paused,
            (ConsumerAct::Pause(_) | ConsumerAct::EndProbe(_), ok) => Some(ok.is_ok()),
            (ConsumerAct::Resume(_) | ConsumerAct::Probe(_), ok) => Some(ok.is_err()),
        };
        self.summary.consumer_paused = off;
        match (act, done) {
            (ConsumerAct::Probe(_), Ok(())) => {
                if let Some((_, window, ends)) = c.probe.as_mut() {
                    *ends = Some(now.instant + *window);
                }
            }
            (ConsumerAct::EndProbe(_), Ok(())) => c.probe = None,
            (_, Ok(())) => {}
            (act, Err(e)) => {
                // what did not go through is left for the next reading (a probe whose end
                // failed is found enabled with resq's probe on record, and paused again)
                c.probe = None;
                tracing::error!(error_code = ErrorCode::ConsumerBreakerFailed.code(), error_details = %e, act = ?act, "the consumer breaker could not act on the event source mapping");
                self.summary.consumer =
                    Some(format!("could not act on the consumer's mapping: {e}"));
            }
        }
    }

    /// A recheck's verdict on the rate: a quarter of the way up while nothing is in ALARM, the
    /// consumer runs and the run is no probe; back to the base when an alarm is in ALARM.
    fn climb(&mut self, read: Result<&[AlarmState], &str>, now: Now) {
        let consumer_names = self
            .consumer
            .as_ref()
            .map(|c| c.names.clone())
            .unwrap_or_default();
        let firing = read.map_or(true, |states| {
            states.iter().any(|s| {
                s.in_alarm && (self.alarms.contains(&s.name) || consumer_names.contains(&s.name))
            })
        });
        let calm = !firing
            && !self.rules.paused
            && self.summary.probe.is_none()
            && self.summary.consumer_paused != Some(true);
        let rate = match (calm, firing) {
            (true, _) => self.pace.up(),
            (false, true) => self.pace.base,
            (false, false) => self.pace.rate,
        };
        if rate == self.pace.rate {
            return;
        }
        if self.auto_budget {
            let left = self.by.start_by.saturating_duration_since(now.instant);
            let more = plan::auto_budget(rate, left) as i64
                - plan::auto_budget(self.pace.rate, left) as i64;
            self.budget.max_messages = self.budget.max_messages.saturating_add_signed(more);
        }
        self.pace.rate = rate;
        self.pace.changes.push((now.instant, rate));
        let w = &mut self.window;
        w.limit
            .set_cap(plan::cycles_in_flight(rate).min(self.tuning.max_cycles));
        w.ahead = plan::replays_ahead(rate);
        self.resize();
        let peak = self.summary.ramped_to.unwrap_or(self.pace.base).max(rate);
        self.summary.ramped_to = (peak > self.pace.base).then_some(peak);
        tracing::info!(rate_per_second = rate, "replay rate");
        self.ready.push_back(Command::Pace(rate));
    }

    /// The kept messages earlier runs hid that are still hidden, from the keep lists (`None`:
    /// they could not be read; then this run hides no more: it cannot count them against
    /// `KEPT_IN_FLIGHT_MAX`). A run selected by reason makes those of its reason visible again
    /// (a dry run counts them and changes nothing).
    pub fn handle_keep_lists(
        &mut self,
        hidden: Option<Vec<KeptMessage>>,
        last_sweep: Result<Option<SweepRecord>, String>,
        now: Now,
    ) {
        let last = last_sweep.as_ref().map(|s| *s).map_err(String::as_str);
        self.sweep_due = sweep::due(last, self.sweep_every, now.epoch_ms);
        let count = hidden.as_ref().map(|h| h.len() as u64);
        self.summary.keep_lists_unread = hidden.is_none();
        let unhide = match (&self.rules.reason, hidden) {
            (Some(reason), Some(hidden)) if !self.rules.paused => {
                Plan::release(&self.queues.dlq, keep::handles(hidden, Some(reason)))
            }
            _ => Plan::new(),
        };
        if self.summary.dry_run || unhide.is_empty() {
            return self.start_cycles(count, unhide.len() as u64, now);
        }
        self.stage = Stage::Unhide;
        let by = Deadlines::all_by(self.by.settle_by);
        let command = self.settle(unhide, by, Purpose::Unhide(count.unwrap_or(0)));
        self.ready.push_back(command);
    }

    /// What a receive brought, or why receiving stops.
    pub fn handle_received(
        &mut self,
        receive: Receive,
        got: Result<Vec<ReceivedMessage>, StopReason>,
        now: Now,
    ) {
        let w = &mut self.window;
        w.receiving -= 1;
        let batch = match got {
            Ok(batch) if !batch.is_empty() => batch,
            Ok(_) => {
                // empty while other cycles hold messages (a FIFO group they lock, the last of
                // a standard queue) or candidates wait to be dealt: receive again once one of
                // them settled; else the end
                w.cycles -= 1;
                w.open = w.depth.min(2);
                match w.cycles + w.releasing + self.candidates.len() {
                    0 if !w.probe => _ = w.stopped.get_or_insert(StopReason::Empty),
                    _ => w.drained = true,
                }
                return;
            }
            Err(stop) => {
                w.cycles -= 1;
                w.stopped.get_or_insert(stop);
                return;
            }
        };
        // a short batch is common in a standard queue: only an empty one says drained
        w.drained = false;
        // a full batch did not wait on its long poll for messages to arrive: SQS's latency;
        // and more may follow, so the window opens wider
        if batch.len() == MAX_BATCH {
            let call = Call {
                sent: receive.at,
                latency: now.instant.saturating_duration_since(receive.at),
                answer: Answer::Through,
            };
            w.limit.observe(call, now.instant);
            self.resize();
            self.window.open = (self.window.open * 2).min(self.receive_depth());
        }
        self.gathered += batch.len();
        let (plan, cycle) = self.plan(batch, now.epoch_ms, receive.at, Batch::Received);
        // nothing to settle (a dry run; a batch of candidates, all held)
        if self.summary.dry_run || plan.is_empty() {
            self.window.cycles -= 1;
            self.account(cycle, None);
        } else {
            let command = self.settle(plan, self.by, Purpose::Cycle(cycle, false));
            self.ready.push_back(command);
        }
    }

    /// What the executor reported of settle `id`.
    pub fn handle_settled(&mut self, id: SettleId, report: Report, now: Now) {
        let Some(settling) = self.settling.remove(&id) else {
            return;
        };
        match settling {
            Purpose::Unhide(hidden) => {
                let unhidden = report.iter().filter(|(_, c)| c.is_confirmed()).count() as u64;
                let reason = self.rules.reason.as_deref().unwrap_or_default();
                tracing::info!(reason, unhidden, "kept messages made visible for this run");
                self.start_cycles(Some(hidden), unhidden, now);
            }
            Purpose::Cycle(cycle, dealt) => {
                let w = &mut self.window;
                (w.cycles, w.probe) = (w.cycles - 1, true);
                w.dealt -= usize::from(dealt);
                for call in cycle.calls(&report) {
                    w.limit.observe(call, now.instant);
                }
                self.resize();
                // a copy that could not start or was not answered stops receiving only at the
                // deadline margin: one call the SDK timed out earlier (its messages reappear
                // by themselves after the run) ends nothing
                if self.account(cycle, Some(&report)) && now.instant >= self.by.start_by {
                    self.window.stopped = Some(StopReason::Deadline);
                }
            }
            Purpose::Keep(entries) => {
                self.account_keeps(&entries, &report);
                match self.stage {
                    Stage::Keeping(_) => self.stage = Stage::Releasing(false),
                    _ => self.window.keeping -= 1,
                }
            }
            Purpose::Release(during_cycles) => {
                let failed = report.iter().filter(|(_, c)| !c.is_confirmed()).count();
                if failed > 0 {
                    tracing::warn!(
                        count = failed,
                        "could not release DLQ messages; they return after their visibility timeout"
                    );
                }
                match during_cycles {
                    true => {
                        let w = &mut self.window;
                        (w.releasing, w.probe) = (w.releasing - 1, true);
                    }
                    false => self.stage = Stage::Done,
                }
            }
        }
    }

    /// The summary, at `now`, and the replays listed (none when the run does not list them).
    pub fn finish(mut self, now: Now) -> (Summary, Vec<Replayed>) {
        if let Some(((first, in_first), last)) = self.sends {
            let secs = last.duration_since(first).as_secs_f64();
            if secs > 0.0 {
                // What the first send carried was paid for before it; the rest after it.
                let after_first = self.summary.redriven.saturating_sub(in_first);
                self.summary.achieved_rate_per_second = Some(after_first as f64 / secs);
                self.summary.paced_rate_per_second = Some(self.pace.mean(first, last));
            }
        }
        let elapsed = now.instant.saturating_duration_since(self.started);
        self.summary.elapsed_ms = elapsed.as_millis() as u64;
        self.summary.groups_served = self.served.count();
        let limit = &self.window.limit;
        self.summary.cycles_in_flight_lowest = (limit.halvings() > 0).then(|| limit.lowest());
        (self.summary, self.listed.unwrap_or_default())
    }

    /// The window at what its limit allows now.
    fn resize(&mut self) {
        let w = &mut self.window;
        w.depth = w.limit.current();
        w.open = w.open.min(w.depth);
    }

    /// The cycles start, with `hidden` kept messages hidden by earlier runs (`None`: not
    /// known), `unhidden` of them made visible again for this run.
    fn start_cycles(&mut self, hidden: Option<u64>, unhidden: u64, now: Now) {
        self.summary.unhidden = unhidden;
        self.budget.kept_hidden = hidden.map(|h| h.saturating_sub(unhidden));
        self.summary.kept_in_flight = self.budget.kept_hidden;
        self.window.recheck_at = now.instant + self.tuning.breaker_recheck;
        self.stage = Stage::Cycles;
    }

    /// The next command while cycles go on: the breaker's reading when due, a release of
    /// replays whose delete failed, a full keep list, a receive.
    fn poll_cycles(&mut self, now: Now) -> Option<Command> {
        if self.poll_timeout().is_some_and(|at| now.instant >= at) {
            self.window.checking = true;
            let by = self.by.move_by.min(now.instant + BREAKER_WAIT);
            return Some(Command::ReadBreaker { by });
        }
        if !self.release_now.is_empty() {
            self.window.releasing += 1;
            let release = std::mem::take(&mut self.release_now);
            return Some(self.release(release, self.by.move_by, true));
        }
        if self.pending.len() >= MAX_ENTRIES_PER_LIST {
            self.window.keeping += 1;
            return self.keep_plan(now);
        }
        if let Some(deal) = self.deal(now) {
            return Some(deal);
        }
        // a receive, or, when that stopped receiving, the candidates held are dealt now
        match self.next_receive(now) {
            Some(receive) => Some(Command::Receive(receive)),
            None => self.deal(now),
        }
    }

    /// The next deal of the candidates held, round-robin by group, as a cycle of its own: up to
    /// a batch, when the budget and the token bucket have room and enough are held (or no more
    /// come). Once no replay can go (paused, the budget spent, the start margin passed) all
    /// of them at once, to be held (and released at the end) or given their reason.
    fn deal(&mut self, now: Now) -> Option<Command> {
        loop {
            let w = &self.window;
            if self.candidates.is_empty() || w.checking || w.dealt >= w.depth {
                return None;
            }
            let budget = self.replay_budget();
            let left = self.rules.paused || budget == 0 || now.instant >= self.by.start_by;
            let (dealt, of) = if left {
                (self.candidates.drain(), Batch::Left)
            } else {
                self.dealing |= self.gathered >= self.tuning.candidates_max
                    || self.candidates.full(self.tuning.candidates_max)
                    || w.drained
                    || w.stopped.is_some();
                if !self.dealing || self.budget.planned_replays > w.ahead {
                    return None;
                }
                let n = MAX_BATCH.min(budget as usize);
                (self.candidates.deal(n), Batch::Dealt)
            };
            let (plan, cycle) = self.plan(dealt, now.epoch_ms, now.instant, of);
            if !plan.is_empty() {
                (self.window.cycles, self.window.dealt) =
                    (self.window.cycles + 1, self.window.dealt + 1);
                return Some(self.settle(plan, self.by, Purpose::Cycle(cycle, true)));
            }
            // nothing to settle (a dry run's): counted at once
            self.account(cycle, None);
        }
    }

    /// A receive, when one may start: no breaker reading under way, the DLQ not looked
    /// drained (or a probe), room in the window, few replays waiting for tokens; else none,
    /// and maybe receiving stops (the deadline margin, the in-flight limit).
    fn next_receive(&mut self, now: Now) -> Option<Receive> {
        let w = &self.window;
        // while candidates are held, receives go on beside the deals (which have slots of their
        // own), for as many as the pool has room for; else no receive starts while more
        // replays wait for tokens than `ahead`
        let holding = self.holding();
        let may = !w.checking
            && (!w.drained || (w.probe && w.receiving == 0))
            && w.stopped.is_none()
            && w.cycles - w.dealt < w.open.min(self.receive_depth())
            && match holding {
                true => self.room_for_candidates(),
                false => self.budget.planned_replays <= w.ahead,
            };
        if !may {
            return None;
        }
        if let Some(stop) = self.stops_receiving(now) {
            self.window.stopped = Some(stop);
            return None;
        }
        let w = &mut self.window;
        (w.cycles, w.receiving, w.probe) = (w.cycles + 1, w.receiving + 1, false);
        let left = self
            .by
            .start_by
            .saturating_duration_since(now.instant)
            .as_secs();
        let until_deadline = self.deadline.saturating_duration_since(now.instant);
        let visibility_seconds = match self.read_on_hold(now) {
            Some(hold) => {
                hold.as_secs()
                    .clamp(1, resq::sqs::MAX_VISIBILITY_TIMEOUT.as_secs()) as i32
            }
            None => plan::receive_visibility(until_deadline, HOLD_PAST_DEADLINE),
        };
        Some(Receive {
            at: now.instant,
            visibility_seconds,
            wait_seconds: (self.tuning.receive_wait_seconds.max(0) as u64).min(left) as i32,
            by: self.by.move_by,
        })
    }

    /// How long a receive's messages are hidden when the run reads on with no replay left,
    /// under [`Tuning::read_on_hold`] (from the first such receive on); `None`: until the
    /// deadline.
    fn read_on_hold(&mut self, now: Now) -> Option<Duration> {
        let hold = self.tuning.read_on_hold?;
        if !self.rules.paused && self.replay_budget() > 0 {
            return None;
        }
        self.read_on_since.get_or_insert(now.instant);
        Some(hold)
    }

    /// Whether a receive may bring more candidates: fewer than `candidates_max` are held
    /// (the first 1,000 a run receives are shared round-robin), and, once dealing began, fewer
    /// than the budget left can use (more would only be released at the end). No bound once
    /// nothing is held any more (paused, the budget spent): receiving then is for archiving.
    fn room_for_candidates(&self) -> bool {
        let max = match self.dealing {
            false => self.tuning.candidates_max,
            true => self
                .tuning
                .candidates_max
                .min(self.replay_budget() as usize),
        };
        !self.candidates.full(max)
    }

    /// Whether a received batch's candidates are held: a standard DLQ, replay going on.
    fn holding(&self) -> bool {
        self.pooled && !self.rules.paused && self.replay_budget() > 0
    }

    /// The most cycles in flight for receives: what the rate needs, or, while the candidates
    /// are first gathered (nothing is dealt before), [`FILL_CYCLES`], so that a slow rate does
    /// not also make a slow start.
    fn receive_depth(&self) -> usize {
        match self.pooled && !self.dealing {
            true => self
                .window
                .depth
                .max(FILL_CYCLES)
                .min(self.tuning.max_cycles),
            false => self.window.depth,
        }
    }

    /// Why another receive may not start: the deadline margin, a dry run's budget counted, or
    /// the messages the run holds hidden (and those of its cycles in flight) at its in-flight
    /// limit.
    fn stops_receiving(&self, now: Now) -> Option<StopReason> {
        if now.instant >= self.by.start_by {
            return Some(StopReason::Deadline);
        }
        // a dry run changes nothing: it does not hold the DLQ hidden past its budget; nor does
        // a run paused or past its budget when no archive sweep is due
        let spent = self.rules.paused || self.replay_budget() == 0;
        if spent && (self.summary.dry_run || !self.sweep_due) {
            return Some(StopReason::MaxMessages);
        }
        // what it read on holds hidden only briefly: it reads no more once half of that hold
        // is gone, so nothing it read comes around to it again
        if let (Some(hold), Some(since)) = (self.tuning.read_on_hold, self.read_on_since)
            && now.instant >= since + hold / 2
        {
            return Some(StopReason::MaxMessages);
        }
        let in_hand = self.hidden() + (self.window.cycles * MAX_BATCH) as u64;
        if in_hand + MAX_BATCH as u64 > self.tuning.in_flight_max {
            tracing::warn!(
                hidden = in_hand,
                limit = self.tuning.in_flight_max,
                "the run holds as many DLQ messages hidden as it may: it stops receiving (SQS hands out nothing past its in-flight quota)"
            );
            return Some(StopReason::InFlightLimit);
        }
        None
    }

    /// A settle to ask for, remembered until its report comes.
    fn settle(&mut self, plan: Plan, by: Deadlines, settling: Purpose) -> Command {
        let id = SettleId(self.next_id);
        self.next_id += 1;
        self.settling.insert(id, settling);
        Command::Settle { id, plan, by }
    }

    /// Makes `receipts` visible again, by `until`.
    fn release(&mut self, receipts: Vec<Receipt>, until: Instant, during_cycles: bool) -> Command {
        let plan = Plan::release(&self.queues.dlq, receipts.into_iter().map(|(_, rh)| rh));
        self.settle(
            plan,
            Deadlines::all_by(until),
            Purpose::Release(during_cycles),
        )
    }

    /// Lists the kept messages waiting, then hides them until their TTL, by the settle
    /// deadline; none waiting: nothing to do.
    fn keep_plan(&mut self, now: Now) -> Option<Command> {
        if self.pending.is_empty() {
            return None;
        }
        let pending = std::mem::take(&mut self.pending);
        let (plan, entries) = plan::keep(pending, &self.queues.dlq, now.epoch_ms, now.instant);
        let by = Deadlines::all_by(self.by.settle_by);
        Some(self.settle(plan, by, Purpose::Keep(entries)))
    }

    /// Takes the breaker's verdict: open pauses replay (archiving goes on), half-open lowers
    /// the budget to a probe.
    fn apply(&mut self, verdict: Breaker) {
        match verdict {
            Breaker::Closed => {}
            Breaker::Open { reason, too_long } => {
                match too_long {
                    true => {
                        tracing::error!(error_code = ErrorCode::BreakerUnreadable.code(), reason = %reason, "replay paused longer than the alarm's hold, or by an alarm that cannot be read; archiving goes on")
                    }
                    false => {
                        tracing::warn!(reason = %reason, "replay paused by the circuit breaker; archiving goes on")
                    }
                }
                self.summary.paused = true;
                self.summary.paused_too_long |= too_long;
                self.summary.pause_reason = Some(reason);
                self.rules.paused = true;
            }
            Breaker::HalfOpen { budget, reason }
                if u64::from(budget) < self.budget.max_messages =>
            {
                tracing::warn!(reason = %reason, budget, "replaying a probe only");
                self.budget.max_messages = u64::from(budget);
                self.summary.probe = Some(budget);
            }
            Breaker::HalfOpen { .. } => {}
        }
    }

    /// Replays left in the budget (less those planned by cycles in flight).
    fn replay_budget(&self) -> u64 {
        let b = &self.budget;
        b.max_messages
            .saturating_sub(b.replays)
            .saturating_sub(b.planned_replays)
    }

    /// Messages the run holds hidden in the DLQ: held for the run, kept (hidden or waiting to
    /// be; `KEPT_IN_FLIGHT_MAX` when not known). Those in cycles in flight are not counted
    /// here.
    fn hidden(&self) -> u64 {
        let kept = self.budget.kept_hidden.unwrap_or(self.budget.kept_max);
        (self.held.len() + self.pending.len() + self.candidates.len()) as u64 + kept
    }

    /// The plan of a batch, under the run's rules, budget and room for kept messages; what it
    /// plans is reserved until [`Run::account`] counts it. Of a received batch in a pooled
    /// run, the replay candidates are held, not planned; candidates left over are planned
    /// with no budget (held, or given their reason).
    fn plan(
        &mut self,
        mut batch: Vec<ReceivedMessage>,
        now_ms: u64,
        at: Instant,
        of: Batch,
    ) -> (Plan, Cycle) {
        let budget = self.replay_budget();
        if of == Batch::Received && self.holding() {
            let (candidates, rest): (Vec<_>, Vec<_>) = batch.into_iter().partition(|m| {
                !self.in_cycles.contains(&m.message_id)
                    && !self.replayed.contains(&m.message_id)
                    && classify::classify(m, &self.rules, now_ms) == classify::Verdict::Redrive
            });
            for m in candidates {
                self.candidates.push(m);
            }
            batch = rest;
        }
        let b = &self.budget;
        let kept_room = b.kept_hidden.map(|hidden| {
            let planned = hidden + self.pending.len() as u64 + b.planned_kept;
            b.kept_max.saturating_sub(planned)
        });
        let limits = Limits {
            budget: if of == Batch::Left { 0 } else { budget },
            dry_run: self.summary.dry_run,
            now_ms,
            kept_room,
        };
        let seen = (&self.replayed, &self.in_cycles);
        let (plan, cycle) = plan::cycle(batch, &self.rules, &self.queues, limits, at, seen);
        for (m, fate) in &cycle.items {
            if *fate != Fate::Held(Held::InFlight) {
                self.in_cycles.insert(m.message_id.clone());
            }
        }
        let (replays, kept) = cycle.reserved();
        self.budget.planned_replays += replays;
        self.budget.planned_kept += kept;
        (plan, cycle)
    }

    /// Counts a cycle from what the executor reported (`None`: a dry run, nothing settled).
    /// Returns whether the cycle ran out of time (a copy that could not start, or was not
    /// answered, before its deadline).
    fn account(&mut self, cycle: Cycle, report: Option<&Report>) -> bool {
        let (replays, kept) = cycle.reserved();
        let b = &mut self.budget;
        b.planned_replays = b.planned_replays.saturating_sub(replays);
        b.planned_kept = b.planned_kept.saturating_sub(kept);
        self.summary.received += cycle.items.len() as u64;
        let refused = report.map(|r| cycle.refused_groups(r)).unwrap_or_default();
        for (m, fate) in &cycle.items {
            if *fate != Fate::Held(Held::InFlight) {
                self.in_cycles.remove(&m.message_id);
            }
        }
        let mut out_of_time = false;
        for (m, fate) in cycle.items {
            if !m.dropped_attributes.is_empty() {
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(&m), dropped = %m.dropped_attributes.join(", "), "list-valued attributes are not supported by SQS and are not copied");
            }
            match (fate, report) {
                (Fate::Held(held), _) => self.held(m, held),
                (Fate::Kept(until), _) => self.kept(m, until, cycle.received_at),
                (Fate::Redrive { copy, delete }, Some(r)) => {
                    let behind_refused = m.group_id().is_some_and(|g| refused.contains(g));
                    out_of_time |= self.redriven(&m, r, copy, delete, behind_refused);
                }
                (
                    Fate::Archive {
                        reason,
                        write,
                        delete,
                    },
                    Some(r),
                ) => self.archived(&m, r, reason, write, delete),
                (Fate::Explain { copy, delete }, Some(r)) => self.explained(&m, r, copy, delete),
                (Fate::ReplayedBefore { delete }, Some(r)) => {
                    self.deleted(&m, r.get(delete), false)
                }
                (_, None) => self.hold(&m),
            }
        }
        out_of_time
    }

    fn held(&mut self, m: ReceivedMessage, held: Held) {
        match held {
            Held::NotSelected | Held::Paused => {
                tracing::debug!(message_id = %m.message_id, correlation_id = correlation_id(&m), held = ?held, "left in the DLQ");
                self.summary.skipped += 1;
            }
            Held::OverBudget => {}
            Held::InFlight => {
                tracing::debug!(message_id = %m.message_id, correlation_id = correlation_id(&m), "received again while this run settles it; released");
            }
            Held::WouldRedrive => {
                self.budget.replays += 1;
                self.summary.redriven += 1;
                self.served.note(&m);
            }
            Held::WouldArchive(reason) => *self.summary.archived.entry(reason).or_default() += 1,
        }
        self.hold(&m);
    }

    fn kept(&mut self, m: ReceivedMessage, until: Option<u64>, received_at: Instant) {
        self.summary.skipped += 1;
        self.summary.kept += 1;
        match until {
            Some(until_ms) if !self.summary.dry_run => self.pending.push(PendingKeep {
                kept: KeptMessage {
                    order_id: correlation_id(&m),
                    failure_reason: m.failure_reason().map(str::to_owned),
                    first_sent_at: m.first_sent_at(),
                    message_id: m.message_id,
                    receipt_handle: m.receipt_handle,
                    hidden_until: until_ms,
                },
                until_ms,
                received_at,
            }),
            _ => self.hold(&m),
        }
    }

    /// A redrive: its replay confirmed, refused (held for the run), unanswered (it reappears
    /// by itself) or not attempted. Returns whether it ran out of time.
    fn redriven(
        &mut self,
        m: &ReceivedMessage,
        r: &Report,
        copy: ActionId,
        delete: ActionId,
        behind_refused: bool,
    ) -> bool {
        if let Some(at) = r.started_at(copy) {
            self.budget.replays += 1;
            self.note_send(at, r.get(copy).is_confirmed());
        }
        match r.get(copy) {
            Confirmation::Confirmed(new_id) => {
                self.confirmed_replay(m, new_id.as_deref());
                if !r.get(delete).is_confirmed() {
                    self.replayed.insert(m.message_id.clone());
                }
                self.deleted(m, r.get(delete), true);
                false
            }
            Confirmation::Failed(SettleError::Refused(why)) => {
                self.summary.failed += 1;
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(m), error_code = ErrorCode::RedriveSendFailed.code(), error_details = %why, "not redriven; left in the DLQ");
                self.hold(m);
                false
            }
            // unknown whether SQS took it: neither deleted nor released; it reappears after
            // its visibility timeout and a later run sends it again (a FIFO main queue
            // deduplicates that within its 5-minute interval; the consumer is idempotent by
            // orderId in any case)
            Confirmation::Failed(SettleError::Unanswered(_)) => {
                self.summary.failed += 1;
                true
            }
            // behind a send of its FIFO group that did not go: it waits for a later run (left
            // on purpose, and so skipped, when SQS refused that send; behind one not answered
            // in time it is only held)
            Confirmation::NotAttempted(Unattempted::Blocked) => {
                self.summary.skipped += u64::from(behind_refused);
                self.hold(m);
                false
            }
            Confirmation::NotAttempted(Unattempted::OutOfTime) => {
                self.hold(m);
                true
            }
        }
    }

    /// A replay SQS confirmed (`new_id`: its copy's id): logged, counted, listed.
    fn confirmed_replay(&mut self, m: &ReceivedMessage, new_id: Option<&str>) {
        let redrive_count = classify::next_redrive_count(m).ok();
        tracing::info!(message_id = %m.message_id, new_message_id = new_id, correlation_id = correlation_id(m), group = m.group_id(), redrive_count, "redriven");
        self.summary.redriven += 1;
        self.served.note(m);
        self.summary.returned += u64::from(classify::is_returned_replay(m));
        self.summary.unexplained += u64::from(classify::is_unexplained(m));
        if let Some(listed) = &mut self.listed {
            listed.push(Replayed {
                dlq_message_id: m.message_id.clone(),
                message_id: new_id.map(str::to_owned),
                order_id: correlation_id(m),
                redrive_count,
                failure_reason: m.failure_reason().map(str::to_owned),
            });
        }
    }

    /// An archive entry: written (then deleted), refused (held for the run), or not written in
    /// time (it reappears by itself).
    fn archived(
        &mut self,
        m: &ReceivedMessage,
        r: &Report,
        reason: ArchiveReason,
        write: ActionId,
        delete: ActionId,
    ) {
        match r.get(write) {
            Confirmation::Confirmed(key) => {
                tracing::info!(message_id = %m.message_id, correlation_id = correlation_id(m), reason = reason.code(), key = key.as_deref(), "archived");
                *self.summary.archived.entry(reason).or_default() += 1;
                self.summary.returned += u64::from(classify::is_returned_replay(m));
                self.summary.unexplained += u64::from(classify::is_unexplained(m));
                self.deleted(m, r.get(delete), false);
            }
            Confirmation::Failed(SettleError::Refused(why)) => {
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(m), error_code = ErrorCode::ArchiveFailed.code(), error_details = %why, "not archived; left in the DLQ");
                self.summary.failed += 1;
                self.hold(m);
            }
            _ => self.summary.failed += 1,
        }
    }

    /// An unexplained dead letter held by the run: counted once its copy with a reason is in
    /// the DLQ (then it is deleted); left as it is, and held, when that copy did not go.
    fn explained(&mut self, m: &ReceivedMessage, r: &Report, copy: ActionId, delete: ActionId) {
        self.summary.skipped += 1;
        match r.get(copy) {
            Confirmation::Confirmed(id) => {
                tracing::info!(message_id = %m.message_id, new_message_id = id.as_deref(), correlation_id = correlation_id(m), reason = resq::reason::FailureReason::InvocationFailed.code(), "dead letter without a reason: its copy in the DLQ now says why");
                self.summary.unexplained += 1;
                // like a replay: one whose delete failed is made visible again at once, and
                // when this run receives it again it is only deleted (not explained twice)
                if !r.get(delete).is_confirmed() {
                    self.replayed.insert(m.message_id.clone());
                }
                self.deleted(m, r.get(delete), true);
            }
            Confirmation::Failed(SettleError::Unanswered(_)) => {}
            _ => self.hold(m),
        }
    }

    /// A moved message's delete. One not confirmed leaves it to be seen again: an archive
    /// finds its entry; a replay (or an explained dead letter) is made visible again at once
    /// (`replay`), and when this run receives it again it is only deleted.
    fn deleted(&mut self, m: &ReceivedMessage, delete: &Confirmation, replay: bool) {
        if replay && !delete.is_confirmed() {
            self.release_now
                .push((m.message_id.clone(), m.receipt_handle.clone()));
        }
        match delete {
            Confirmation::Confirmed(_) => {}
            Confirmation::Failed(SettleError::Refused(why)) => {
                self.summary.delete_failed += 1;
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(m), error_code = ErrorCode::DlqDeleteFailed.code(), error_details = %why, "moved but not deleted from the DLQ; it will be seen again (an archive finds its entry; a replay is sent again)");
            }
            _ => {
                self.summary.delete_failed += 1;
                tracing::warn!(message_id = %m.message_id, correlation_id = correlation_id(m), error_code = ErrorCode::DlqDeleteDeadline.code(), "delete not confirmed before the deadline margin; it will be seen again (an archive finds its entry; a replay is sent again)");
            }
        }
    }

    fn note_send(&mut self, at: Instant, confirmed: bool) {
        let confirmed = u64::from(confirmed);
        self.sends = Some(match self.sends {
            None => ((at, confirmed), at),
            Some(((first, n), last)) if at == first => ((first, n + confirmed), last.max(at)),
            Some(((first, _), last)) if at < first => ((at, confirmed), last.max(first)),
            Some((first, last)) => (first, last.max(at)),
        });
    }

    fn hold(&mut self, m: &ReceivedMessage) {
        self.held
            .push((m.message_id.clone(), m.receipt_handle.clone()));
    }

    /// Counts a keep plan from what the executor reported: a message whose listing was not
    /// confirmed is not hidden either, and is released at the end of the run (released
    /// earlier, the run would read it again).
    fn account_keeps(&mut self, entries: &[(KeptMessage, ActionId, ActionId)], r: &Report) {
        let unlisted: Vec<&KeptMessage> = entries
            .iter()
            .filter(|(_, listed, _)| !r.get(*listed).is_confirmed())
            .map(|(k, _, _)| k)
            .collect();
        if let Some((_, listed, _)) = entries.iter().find(|(_, l, _)| !r.get(*l).is_confirmed()) {
            tracing::warn!(error_code = ErrorCode::KeepListFailed.code(), error_details = %describe(r.get(*listed)), count = unlisted.len(), "keep list not written: kept messages are released after the run, not hidden (a hidden message must be reachable)");
        }
        for k in unlisted {
            self.held
                .push((k.message_id.clone(), k.receipt_handle.clone()));
        }
        let hidden = entries
            .iter()
            .filter(|(_, _, h)| r.get(*h).is_confirmed())
            .count() as u64;
        if let Some(before) = self.budget.kept_hidden {
            self.budget.kept_hidden = Some(before + hidden);
            self.summary.kept_in_flight = self.budget.kept_hidden;
        }
        let not_hidden = entries
            .iter()
            .filter(|(_, l, h)| r.get(*l).is_confirmed() && !r.get(*h).is_confirmed())
            .count();
        if not_hidden > 0 {
            tracing::warn!(
                error_code = ErrorCode::KeepHideDeadline.code(),
                count = not_hidden,
                "kept messages not hidden; they come back after the run"
            );
        }
    }
}

/// A DLQ message's business id (`correlation_id`): the body field of this process's
/// correlation key (`orderId`, or `RESQ_CORRELATION_KEY` / `RESQ_CORRELATION_FIELD`'s), when
/// it has one (read only for a line that is written).
fn correlation_id(m: &ReceivedMessage) -> Option<String> {
    resq::telemetry::current().correlation.read(&m.body)
}

fn describe(c: &Confirmation) -> String {
    match c {
        Confirmation::Failed(e) => e.to_string(),
        _ => "not attempted before the deadline margin".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    //! The scheduling rules, as a run is driven by hand: a fake clock, commands answered at
    //! once by a small model of the DLQ ([`World`]), no tokio, no in-memory SQS.
    use super::*;
    use crate::fixtures::{DLQ, HOUR_MS, MAIN, config, dlq_message, permanent, unexplained};
    use resq::attributes::{AttributeValue, X_REDRIVE_COUNT};
    use resq::error::AwsError;
    use resq::settle::Action;
    use resq::sqs::OutgoingMessage;

    /// The fake clock's start: epoch millis of 2027-01-15.
    const EPOCH_MS: u64 = 1_800_000_000_000;

    fn start() -> Now {
        Now {
            instant: Instant::now(),
            epoch_ms: EPOCH_MS,
        }
    }

    /// A run of `request` under `cfg`, started at `now`, with a minute to its deadline.
    fn run_of(request: &RunRequest, cfg: &RedriverConfig, tuning: Tuning, now: Now) -> Run {
        let deadline = now.instant + Duration::from_secs(60);
        Run::new(request, cfg, tuning, deadline, now)
    }

    /// A scheduled run under `cfg` at `now`.
    fn scheduled(cfg: &RedriverConfig, now: Now) -> Run {
        run_of(&RunRequest::defaults(cfg), cfg, Tuning::default(), now)
    }

    /// Replays in the order received, no candidates held: for the tests that step a batch
    /// from its receive to its settle by hand.
    fn in_order() -> Tuning {
        Tuning {
            candidates_max: 0,
            ..Tuning::default()
        }
    }

    /// The DLQ and main queue as a run sees them through its commands, each answered at once:
    /// a FIFO group is not handed out while one of its messages is in flight; every receive
    /// gives a new receipt handle; `refuse` says which actions SQS or S3 refuses.
    struct World {
        main_url: String,
        visible: VecDeque<ReceivedMessage>,
        in_flight: HashMap<String, ReceivedMessage>,
        hidden: Vec<(ReceivedMessage, i32)>,
        main: Vec<OutgoingMessage>,
        archived: Vec<ArchiveReason>,
        alarms: Result<Vec<AlarmState>, String>,
        kept_lists: Option<Vec<KeptMessage>>,
        /// The last sweep's note, and the notes this world was given.
        sweep: Result<Option<SweepRecord>, String>,
        notes: Vec<SweepRecord>,
        /// What the consumer's breaker reads (with a consumer breaker), and the acts it was
        /// asked for, each answered `consumer_answer`.
        consumer: Option<ConsumerView>,
        acts: Vec<ConsumerAct>,
        consumer_answer: Result<(), String>,
        paces: Vec<f64>,
        refuse: Box<dyn Fn(&Action) -> bool>,
        receipts: u64,
        /// How many receipts were handed out when the first replay went.
        receipts_at_first_replay: Option<u64>,
        commands: Vec<&'static str>,
    }

    impl World {
        fn new(messages: impl IntoIterator<Item = ReceivedMessage>) -> Self {
            Self {
                main_url: MAIN.to_owned(),
                visible: messages.into_iter().collect(),
                in_flight: HashMap::new(),
                hidden: Vec::new(),
                main: Vec::new(),
                archived: Vec::new(),
                alarms: Ok(Vec::new()),
                kept_lists: Some(Vec::new()),
                sweep: Ok(None),
                notes: Vec::new(),
                consumer: None,
                acts: Vec::new(),
                consumer_answer: Ok(()),
                paces: Vec::new(),
                refuse: Box::new(|_| false),
                receipts: 0,
                receipts_at_first_replay: None,
                commands: Vec::new(),
            }
        }

        fn receive(&mut self) -> Vec<ReceivedMessage> {
            // a FIFO group with a message in flight is handed out to no other receive (a
            // standard queue's groups, a fair queue's tenants, lock nothing)
            let fifo = resq::sqs::is_fifo(&self.main_url);
            let locked: HashSet<String> = self
                .in_flight
                .values()
                .filter(|_| fifo)
                .filter_map(|m| m.group_id().map(str::to_owned))
                .collect();
            let mut batch = Vec::new();
            let mut i = 0;
            while batch.len() < MAX_BATCH && i < self.visible.len() {
                if self.visible[i]
                    .group_id()
                    .is_some_and(|g| locked.contains(g))
                {
                    i += 1;
                    continue;
                }
                let Some(mut m) = self.visible.remove(i) else {
                    break;
                };
                self.receipts += 1;
                m.receipt_handle = format!("rh-{}-{}", m.message_id, self.receipts);
                self.in_flight.insert(m.receipt_handle.clone(), m.clone());
                batch.push(m);
            }
            batch
        }

        fn settle(&mut self, action: &Action) -> Confirmation {
            if (self.refuse)(action) {
                let e = AwsError::service("InternalError", "refused");
                return Confirmation::Failed(SettleError::Refused(e));
            }
            match action {
                Action::Copy { to, message } if **to == *self.main_url => {
                    self.receipts_at_first_replay.get_or_insert(self.receipts);
                    self.main.push(message.clone())
                }
                Action::Copy { message, .. } => {
                    let copy = unexplained(&format!("copy-{}", self.receipts), EPOCH_MS, &[]);
                    let attributes = message.attributes.clone();
                    self.visible.push_back(ReceivedMessage {
                        message_attributes: attributes,
                        ..copy
                    });
                }
                Action::Archive(entry) => self.archived.push(entry.reason),
                Action::Keep { .. } => {}
                Action::Delete { receipt_handle, .. } => {
                    self.in_flight.remove(receipt_handle);
                }
                Action::ChangeVisibility {
                    receipt_handle,
                    seconds,
                    ..
                } => match (self.in_flight.remove(receipt_handle), *seconds) {
                    (Some(m), 0) => {
                        // back in its place by message id: the FIFO tests name their messages
                        // in the order of their send
                        let at = self
                            .visible
                            .partition_point(|v| v.message_id < m.message_id);
                        self.visible.insert(at, m)
                    }
                    (Some(m), s) => self.hidden.push((m, s)),
                    (None, _) => {}
                },
            }
            Confirmation::Confirmed(Some(format!("id-{}", self.main.len())))
        }

        /// Carries `command` out at `now` and hands the run what came of it.
        fn answer(&mut self, run: &mut Run, command: Command, now: Now) {
            match command {
                Command::ReadBreaker { .. } => {
                    self.commands.push("breaker");
                    run.handle_breaker(self.alarms.clone(), self.consumer.clone(), now)
                }
                Command::Consumer { act, .. } => {
                    self.commands.push("consumer");
                    self.acts.push(act.clone());
                    run.handle_consumer(&act, self.consumer_answer.clone(), now)
                }
                Command::Pace(rate) => self.paces.push(rate),
                Command::NoteSweep { record, .. } => {
                    self.commands.push("sweep note");
                    self.notes.push(record);
                    run.handle_noted();
                }
                Command::ReadKeepLists { .. } => {
                    self.commands.push("keep lists");
                    run.handle_keep_lists(self.kept_lists.clone(), self.sweep.clone(), now)
                }
                Command::Receive(r) => {
                    self.commands.push("receive");
                    let batch = self.receive();
                    run.handle_received(r, Ok(batch), now)
                }
                Command::Settle { id, plan, .. } => {
                    let keeps = plan.actions().any(|a| matches!(a, Action::Keep { .. }));
                    self.commands
                        .push(if keeps { "keep list" } else { "settle" });
                    let report = Report::of(&plan, now.instant, |a| self.settle(a));
                    run.handle_settled(id, report, now)
                }
                Command::Finish => unreachable!("finish is the driver's"),
            }
        }

        /// Drives `run` to its end, each command answered at once, the clock moved on only to
        /// the run's next wake-up when it has nothing to do; returns the summary and the time.
        fn drive_timed(&mut self, mut run: Run, mut now: Now) -> (Summary, Now) {
            loop {
                let commands: Vec<Command> = std::iter::from_fn(|| run.poll(now)).collect();
                if commands.is_empty() {
                    let at = run
                        .poll_timeout()
                        .unwrap_or_else(|| panic!("stalled: {run:?}"));
                    now = now.after(at.saturating_duration_since(now.instant));
                    continue;
                }
                for command in commands {
                    match command {
                        Command::Finish => return (run.finish(now).0, now),
                        command => self.answer(&mut run, command, now),
                    }
                }
            }
        }

        /// Drives `run` to its end, each command answered at once, the clock still.
        fn drive(&mut self, mut run: Run, now: Now) -> Summary {
            loop {
                let commands: Vec<Command> = std::iter::from_fn(|| run.poll(now)).collect();
                assert!(!commands.is_empty(), "the run stalled: {run:?}");
                for command in commands {
                    match command {
                        Command::Finish => return run.finish(now).0,
                        command => self.answer(&mut run, command, now),
                    }
                }
            }
        }
    }

    fn fresh(n: usize, prefix: &str) -> Vec<ReceivedMessage> {
        (0..n)
            .map(|i| dlq_message(&format!("{prefix}{i}"), EPOCH_MS - HOUR_MS, &[]))
            .collect()
    }

    fn expired(n: usize) -> Vec<ReceivedMessage> {
        (0..n)
            .map(|i| dlq_message(&format!("old{i}"), EPOCH_MS - 25 * HOUR_MS, &[]))
            .collect()
    }

    fn alarm(name: &str, in_alarm: bool, changed_ago: Duration, threshold: f64) -> AlarmState {
        AlarmState {
            name: name.to_owned(),
            in_alarm,
            changed_at_ms: Some(EPOCH_MS - changed_ago.as_millis() as u64),
            period: Some(Duration::from_secs(60)),
            evaluation_periods: Some(15),
            threshold: Some(threshold),
            left_alarm: Some(!in_alarm),
        }
    }

    #[test]
    fn a_run_reads_the_breaker_then_the_keep_lists_then_receives_and_finishes() {
        // GIVEN a run with an alarm to read and one message
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let mut world = World::new(fresh(1, "m"));
        world.alarms = Ok(vec![alarm(
            "replays-failing",
            false,
            Duration::from_secs(7200),
            10.0,
        )]);
        // WHEN it runs
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN it read the breaker, then the keep lists; the cycles opened two receives (the
        // second found nothing while the first settled), and one more once it had settled
        // found the end of the DLQ
        let expected = [
            "breaker",
            "keep lists",
            "receive",
            "receive",
            "settle",
            "receive",
            "sweep note",
        ];
        assert_eq!(world.commands, expected);
        assert_eq!(
            (summary.redriven, summary.stopped_by),
            (1, StopReason::Empty)
        );
        // AND without alarms there is no breaker to read
        let mut world = World::new(fresh(1, "m"));
        world.drive(scheduled(&config(&[]), start()), start());
        assert_eq!(world.commands[..2], ["keep lists", "receive"]);
    }

    #[test]
    fn the_budget_bounds_replays_and_archiving_goes_on_past_it() {
        // GIVEN 20 replayable messages ahead of 30 past their TTL, and a budget of 5 replays
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "5")]);
        let mut world = World::new(fresh(20, "new").into_iter().chain(expired(30)));
        // WHEN a run goes
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN it replayed 5, read on to archive the 30, released the other 15
        assert_eq!(world.main.len(), 5);
        assert_eq!(summary.redriven, 5, "{summary:?}");
        assert_eq!(summary.archived.get(&ArchiveReason::TtlExpired), Some(&30));
        assert_eq!((world.visible.len(), world.in_flight.len()), (15, 0));
        assert_eq!(summary.stopped_by, StopReason::Empty);
    }

    /// Drives `run` from `now`, the clock a second on per round of commands, `interrupt`ing
    /// it at that round when given; every receive's time and visibility, the summary.
    fn drive_by_rounds(
        world: &mut World,
        mut run: Run,
        mut now: Now,
        interrupt: Option<usize>,
    ) -> (Vec<(Instant, i32)>, Summary) {
        let mut receives = Vec::new();
        for round in 0.. {
            if interrupt == Some(round) {
                run.interrupt(now, Duration::from_secs(5));
            }
            let commands: Vec<Command> = std::iter::from_fn(|| run.poll(now)).collect();
            for command in commands {
                match command {
                    Command::Finish => return (receives, run.finish(now).0),
                    Command::Receive(r) => {
                        receives.push((now.instant, r.visibility_seconds));
                        world.answer(&mut run, Command::Receive(r), now);
                    }
                    command => world.answer(&mut run, command, now),
                }
            }
            now = now.after(Duration::from_secs(1));
        }
        unreachable!()
    }

    #[test]
    fn an_operators_run_hides_what_it_reads_past_its_budget_briefly() {
        // GIVEN 20,000 replayable messages, a budget of 5, an hour to the deadline, and a hold
        // of 60 s for what is read past the budget (an operator's run)
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "5")]);
        let tuning = Tuning {
            candidates_max: 10,
            read_on_hold: Some(Duration::from_secs(60)),
            ..Tuning::default()
        };
        let mut world = World::new(fresh(20_000, "m"));
        let deadline = start().instant + Duration::from_secs(3600);
        let run = Run::new(&RunRequest::defaults(&cfg), &cfg, tuning, deadline, start());
        // WHEN it runs, a second passing per round
        let (receives, summary) = drive_by_rounds(&mut world, run, start(), None);
        // THEN it replayed 5; what it read for them was hidden until the deadline
        assert_eq!(summary.redriven, 5, "{summary:?}");
        let (before, past): (Vec<_>, Vec<_>) = receives.iter().partition(|(_, v)| *v > 60);
        assert!(!before.is_empty() && before.iter().all(|(_, v)| *v >= 3600));
        // AND it read on hiding each batch 60 s, for 30 s, then stopped with the DLQ unread
        assert!(past.iter().all(|(_, v)| *v == 60), "{past:?}");
        let (first, last) = (past[0].0, past[past.len() - 1].0);
        assert!(last.duration_since(first) < Duration::from_secs(30));
        assert_eq!(summary.stopped_by, StopReason::MaxMessages);
        assert!(!world.visible.is_empty());
        // AND it released all it held at its end
        assert!(world.in_flight.is_empty());
        assert_eq!(world.visible.len() + world.main.len(), 20_000);
    }

    #[test]
    fn an_interrupted_run_starts_nothing_new_and_releases_what_it_holds() {
        // GIVEN a run of 2,000 replays under way, holding candidates
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "2000")]);
        let mut world = World::new(fresh(2000, "m"));
        let deadline = start().instant + Duration::from_secs(3600);
        let run = Run::new(
            &RunRequest::defaults(&cfg),
            &cfg,
            Tuning::default(),
            deadline,
            start(),
        );
        // WHEN it is interrupted at its third round
        let (receives, summary) = drive_by_rounds(&mut world, run, start(), Some(3));
        // THEN it received nothing after, replayed part, and released all the rest
        assert!(
            receives
                .iter()
                .all(|(at, _)| *at < start().instant + Duration::from_secs(3))
        );
        assert_eq!(summary.stopped_by, StopReason::Interrupted);
        assert!(summary.redriven < 2000, "{summary:?}");
        assert!(world.in_flight.is_empty());
        assert_eq!(world.visible.len() + world.main.len(), 2000);
    }

    #[test]
    fn expired_messages_do_not_use_up_the_budget() {
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "5")]);
        let mut world = World::new(expired(100).into_iter().chain(fresh(5, "new")));
        let summary = world.drive(scheduled(&cfg, start()), start());
        assert_eq!(summary.archived.get(&ArchiveReason::TtlExpired), Some(&100));
        assert_eq!(summary.redriven, 5);
        assert!(world.visible.is_empty() && world.in_flight.is_empty());
    }

    #[test]
    fn auto_is_what_the_rate_allows_in_the_time_before_the_margin() {
        // GIVEN 10 replays a second, a minute to the deadline, a margin of a second
        let cfg = config(&[("REDRIVE_RATE_PER_SECOND", "10")]);
        let mut world = World::new(fresh(700, "m"));
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN the run replays what 59 s allow, and the bucket's first batch
        assert_eq!(summary.redriven, 600, "{summary:?}");
        assert_eq!(world.visible.len(), 100);
    }

    #[test]
    fn kept_messages_a_hundred_times_the_budget_starve_nothing() {
        // GIVEN 2,000 kept permanent failures ahead of 20 replayable ones, a budget of 20
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "20")]);
        let kept = (0..2000).map(|i| {
            let attrs = permanent("MALFORMED_JSON");
            dlq_message(&format!("kept{i}"), EPOCH_MS - HOUR_MS, &attrs)
        });
        let mut world = World::new(kept.chain(fresh(20, "m")));
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN all 20 were replayed, the kept ones counted apart, listed and hidden toward
        // their TTL (23 h away): as long as SQS allows from the receive, 12 h
        assert_eq!((summary.redriven, summary.kept), (20, 2000), "{summary:?}");
        assert_eq!(summary.kept_in_flight, Some(2000));
        assert_eq!(world.hidden.len(), 2000);
        let twelve_hours = resq::sqs::visibility_left(Duration::ZERO);
        assert!(world.hidden.iter().all(|(_, s)| *s == twelve_hours));
        // the full keep list (2,000) was written while the cycles went on, not at the end
        let list = world.commands.iter().position(|c| *c == "keep list");
        let last_receive = world.commands.iter().rposition(|c| *c == "receive");
        assert!(list < last_receive, "{list:?} {last_receive:?}");
    }

    #[test]
    fn kept_messages_past_kept_in_flight_max_are_archived() {
        // GIVEN 90 kept messages hidden by earlier runs, KEPT_IN_FLIGHT_MAX 100, 30 more kept
        let cfg = config(&[("KEPT_IN_FLIGHT_MAX", "100")]);
        let attrs = permanent("VALIDATION_FAILED");
        let kept = (0..30).map(|i| dlq_message(&format!("k{i}"), EPOCH_MS, &attrs));
        let mut world = World::new(kept);
        let earlier = KeptMessage {
            message_id: String::new(),
            receipt_handle: String::new(),
            failure_reason: None,
            first_sent_at: None,
            hidden_until: EPOCH_MS + HOUR_MS,
            order_id: None,
        };
        world.kept_lists = Some(vec![earlier; 90]);
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN 10 are hidden, 20 archived: never more than 100 hidden
        assert_eq!(summary.kept_in_flight, Some(100), "{summary:?}");
        let archived = summary.archived.get(&ArchiveReason::PermanentFailure);
        assert_eq!((world.hidden.len(), archived), (10, Some(&20)));
    }

    #[test]
    fn keep_lists_that_cannot_be_read_hide_nothing() {
        let cfg = config(&[]);
        let attrs = permanent("MALFORMED_JSON");
        let kept = (0..3).map(|i| dlq_message(&format!("k{i}"), EPOCH_MS, &attrs));
        let mut world = World::new(kept);
        world.kept_lists = None;
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN kept, but released at the end of the run, unlisted, visible for an operator;
        // the summary says hiding stopped
        assert_eq!((summary.kept, summary.kept_in_flight), (3, None));
        assert_eq!((world.hidden.len(), world.visible.len()), (0, 3));
        assert!(summary.keep_lists_unread);
        let read = World::new(std::iter::empty()).drive(scheduled(&cfg, start()), start());
        assert!(!read.keep_lists_unread);
    }

    #[test]
    fn a_kept_message_whose_listing_failed_is_released_not_hidden() {
        let cfg = config(&[]);
        let attrs = permanent("MALFORMED_JSON");
        let mut world = World::new([dlq_message("k", EPOCH_MS, &attrs)]);
        world.refuse = Box::new(|a| matches!(a, Action::Keep { .. }));
        let summary = world.drive(scheduled(&cfg, start()), start());
        assert_eq!(summary.kept_in_flight, Some(0), "{summary:?}");
        assert_eq!((world.hidden.len(), world.visible.len()), (0, 1));
    }

    #[test]
    fn a_paused_run_archives_what_is_due_and_replays_nothing() {
        // GIVEN the breaker's alarm in ALARM; one message past its TTL, one at the cap, one
        // waiting
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let capped = [(X_REDRIVE_COUNT, AttributeValue::number(3))];
        let messages = [
            expired(1).remove(0),
            dlq_message("capped", EPOCH_MS, &capped),
            dlq_message("waiting", EPOCH_MS, &[]),
        ];
        let mut world = World::new(messages);
        world.alarms = Ok(vec![alarm(
            "replays-failing",
            true,
            Duration::from_secs(60),
            10.0,
        )]);
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN two archived, nothing replayed, the waiting one visible again
        assert!(summary.paused, "{summary:?}");
        assert_eq!((summary.redriven, summary.skipped), (0, 1));
        assert_eq!(
            world.archived,
            [ArchiveReason::TtlExpired, ArchiveReason::RedriveCap]
        );
        assert_eq!(world.visible[0].message_id, "waiting");
        // AND an alarm that cannot be read pauses too, and loudly
        let mut world = World::new(fresh(1, "m"));
        world.alarms = Err("AccessDenied: not allowed".into());
        let summary = world.drive(scheduled(&cfg, start()), start());
        assert!(summary.paused && summary.paused_too_long, "{summary:?}");
        assert!(world.main.is_empty());
    }

    #[test]
    fn after_the_alarm_clears_a_run_replays_a_probe_not_its_budget() {
        // GIVEN 100 replayable messages, the alarm back in OK two minutes ago (threshold 4)
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let mut world = World::new(fresh(100, "m"));
        world.alarms = Ok(vec![alarm(
            "replays-failing",
            false,
            Duration::from_secs(120),
            4.0,
        )]);
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN a probe of twice what trips the alarm again: 10
        assert_eq!(
            (summary.redriven, summary.probe),
            (10, Some(10)),
            "{summary:?}"
        );
        // AND once it has been OK for its hold, the full budget
        world.alarms = Ok(vec![alarm(
            "replays-failing",
            false,
            Duration::from_secs(3600),
            4.0,
        )]);
        let summary = world.drive(scheduled(&cfg, start()), start());
        assert_eq!((summary.redriven, summary.probe), (90, None));
    }

    #[test]
    fn the_breaker_is_read_again_at_its_recheck_and_no_receive_starts_meanwhile() {
        // GIVEN a run with the alarm OK and a recheck every 30 s
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let ok = alarm("replays-failing", false, Duration::from_secs(7200), 10.0);
        let mut world = World::new(fresh(40, "m"));
        world.alarms = Ok(vec![ok]);
        let t0 = start();
        let mut run = run_of(&RunRequest::defaults(&cfg), &cfg, in_order(), t0);
        for _ in 0..2 {
            let command = run.poll(t0).unwrap();
            world.answer(&mut run, command, t0);
        }
        // the cycles start: a first receive, and a wake-up at the recheck
        let Some(Command::Receive(first)) = run.poll(t0) else {
            panic!("{run:?}")
        };
        assert_eq!(run.poll_timeout(), Some(t0.instant + BREAKER_RECHECK));
        // WHEN the recheck comes (30 s later on the fake clock) with the first receive out
        let later = t0.after(BREAKER_RECHECK);
        assert!(matches!(run.poll(later), Some(Command::ReadBreaker { .. })));
        // THEN no receive starts while it is read, and no second reading is asked for
        let batch = world.receive();
        run.handle_received(first, Ok(batch), later);
        let Some(Command::Settle { id, plan, .. }) = run.poll(later) else {
            panic!()
        };
        assert!(run.poll(later).is_none(), "{run:?}");
        assert_eq!(run.poll_timeout(), None);
        // AND a reading of ALARM pauses what comes next: the settled batch went, the rest is
        // held, not replayed
        world.alarms = Ok(vec![alarm("replays-failing", true, Duration::ZERO, 10.0)]);
        run.handle_settled(
            id,
            Report::of(&plan, later.instant, |a| world.settle(a)),
            later,
        );
        run.handle_breaker(world.alarms.clone(), None, later);
        let summary = world.drive(run, later);
        assert!(summary.paused, "{summary:?}");
        assert_eq!((summary.redriven, world.main.len()), (10, 10));
        assert_eq!(world.visible.len(), 30);
    }

    #[test]
    fn no_breaker_reading_starts_once_receiving_has_ended() {
        // GIVEN a run whose last cycle settles inside the deadline margin, its breaker's
        // recheck due then
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let ok = alarm("replays-failing", false, Duration::from_secs(7200), 10.0);
        let mut world = World::new(fresh(10, "m"));
        world.alarms = Ok(vec![ok]);
        let t0 = start();
        let deadline = t0.instant + BREAKER_RECHECK + Duration::from_millis(500);
        let mut run = Run::new(&RunRequest::defaults(&cfg), &cfg, in_order(), deadline, t0);
        for _ in 0..2 {
            let command = run.poll(t0).unwrap();
            world.answer(&mut run, command, t0);
        }
        let Some(Command::Receive(r)) = run.poll(t0) else {
            panic!("{run:?}")
        };
        run.handle_received(r, Ok(world.receive()), t0);
        // WHEN the recheck's time comes after the margin began, the batch still settling
        assert_eq!(run.poll_timeout(), None, "the recheck falls in the margin");
        let late = t0.after(BREAKER_RECHECK);
        let commands: Vec<Command> = std::iter::from_fn(|| run.poll(late)).collect();
        // THEN no reading is asked for: the run settles, ends, and is not reported paused
        assert!(
            !commands
                .iter()
                .any(|c| matches!(c, Command::ReadBreaker { .. }))
        );
        for command in commands {
            world.answer(&mut run, command, late);
        }
        let summary = world.drive(run, late);
        assert!(!summary.paused && !summary.paused_too_long, "{summary:?}");
        assert_eq!(summary.redriven, 10);
    }

    /// `id` in FIFO group `group`.
    fn in_group(id: &str, group: &str) -> ReceivedMessage {
        let mut m = dlq_message(id, EPOCH_MS, &[]);
        m.attributes.insert("MessageGroupId".into(), group.into());
        m
    }

    #[test]
    fn a_quiet_tenant_behind_a_backlog_gets_its_share_of_a_small_budget() {
        // GIVEN a standard DLQ: 600 of tenant A received before 30 of tenant B, a budget of 60
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "60")]);
        let a = (0..600).map(|i| in_group(&format!("a{i:03}"), "A"));
        let b = (0..30).map(|i| in_group(&format!("b{i:02}"), "B"));
        let mut world = World::new(a.chain(b));
        // WHEN one run goes
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN it replayed all 30 of B and 30 of A, each copy in its tenant's group
        let of = |g: &str| {
            let copies = world.main.iter();
            copies.filter(|c| c.group_id.as_deref() == Some(g)).count()
        };
        assert_eq!((of("A"), of("B")), (30, 30), "{summary:?}");
        assert_eq!((summary.redriven, summary.groups_served), (60, 2));
        // AND the other 570 of A are back in the DLQ, released, none archived
        assert_eq!(world.visible.len(), 570);
        assert!(world.visible.iter().all(|m| m.group_id() == Some("A")));
        assert!(world.archived.is_empty() && world.in_flight.is_empty());
        // AND without candidates held (the order received) B would have had nothing
        let mut world = World::new(
            (0..600)
                .map(|i| in_group(&format!("a{i:03}"), "A"))
                .chain((0..30).map(|i| in_group(&format!("b{i:02}"), "B"))),
        );
        let run = run_of(&RunRequest::defaults(&cfg), &cfg, in_order(), start());
        let summary = world.drive(run, start());
        assert_eq!((summary.redriven, summary.groups_served), (60, 1));
    }

    #[test]
    fn a_run_reads_ahead_its_first_thousand_candidates_then_only_what_its_budget_needs() {
        // GIVEN 3,000 dead letters and no archive sweep due
        let recent = || {
            Ok(Some(SweepRecord {
                at: EPOCH_MS - 60_000,
            }))
        };
        let slack = (FILL_CYCLES * MAX_BATCH) as u64; // what the receives in flight bring
        for (budget, read_at_most) in [
            // a budget of 60: the first 1,000 are read and shared, no more
            (60, fair::MAX_CANDIDATES as u64 + slack),
            // a budget of 1,500: once dealing began, no more held than the budget can use
            (1500, 1500 + slack),
        ] {
            let cfg = config(&[("MAX_MESSAGES_PER_RUN", &budget.to_string())]);
            let mut world = World::new(fresh(3000, "m"));
            world.sweep = recent();
            let summary = world.drive(scheduled(&cfg, start()), start());
            // THEN it read no more, and released all it did not replay
            assert!(summary.received <= read_at_most, "{summary:?}");
            assert_eq!(summary.redriven, budget);
            let left = 3000 - budget as usize;
            assert_eq!((world.visible.len(), world.in_flight.len()), (left, 0));
        }
        // AND a budget for all of them replays all of them
        let mut world = World::new(fresh(3000, "m"));
        let summary = world.drive(scheduled(&config(&[]), start()), start());
        assert_eq!(
            (summary.redriven, world.main.len()),
            (3000, 3000),
            "{summary:?}"
        );
    }

    #[test]
    fn replay_begins_once_the_run_received_its_read_ahead_whatever_the_messages_were() {
        // GIVEN a read-ahead of 100, and the quiet tenant's 30 dead letters between 300 and 300
        // permanent failures to keep (a producer's bug flooding the DLQ)
        let kept = |from: usize| {
            (from..from + 300)
                .map(|i| dlq_message(&format!("p{i}"), EPOCH_MS, &permanent("VALIDATION_FAILED")))
        };
        let b = (0..30).map(|i| in_group(&format!("b{i:02}"), "B"));
        let mut world = World::new(kept(0).chain(b).chain(kept(300)));
        let hundred = Tuning {
            candidates_max: 100,
            ..Tuning::default()
        };
        let cfg = config(&[]);
        let run = run_of(&RunRequest::defaults(&cfg), &cfg, hundred, start());
        let summary = world.drive(run, start());
        // THEN the 30 were replayed, the first of them before the DLQ was read to its end:
        // the kept messages counted towards the read-ahead although none was a candidate
        assert_eq!(summary.redriven, 30, "{summary:?}");
        let at = world.receipts_at_first_replay.unwrap();
        assert!(at < 630, "the first replay waited for {at} receipts");
    }

    #[test]
    fn candidates_held_when_the_breaker_opens_are_released_or_given_their_reason() {
        // GIVEN a run holding 20 candidates of two tenants, 5 of them without a reason
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let crashed = (0..5).map(|i| {
            let mut m = unexplained(&format!("crashed{i}"), EPOCH_MS, &[]);
            m.attributes.insert("MessageGroupId".into(), "B".into());
            m
        });
        let a = (0..15).map(|i| in_group(&format!("a{i:02}"), "A"));
        let mut world = World::new(a.chain(crashed));
        world.alarms = Ok(vec![alarm(
            "replays-failing",
            false,
            Duration::from_secs(7200),
            10.0,
        )]);
        let now = start();
        let mut run = scheduled(&cfg, now);
        for _ in 0..2 {
            let command = run.poll(now).unwrap();
            world.answer(&mut run, command, now);
        }
        let Some(Command::Receive(r)) = run.poll(now) else {
            panic!("{run:?}")
        };
        run.handle_received(r, Ok(world.receive()), now);
        let Some(Command::Receive(r)) = run.poll(now) else {
            panic!("{run:?}")
        };
        run.handle_received(r, Ok(world.receive()), now);
        assert_eq!(run.candidates.len(), 20);
        // WHEN the breaker's next reading finds the alarm in ALARM, before any was dealt
        world.alarms = Ok(vec![alarm("replays-failing", true, Duration::ZERO, 10.0)]);
        run.handle_breaker(world.alarms.clone(), None, now);
        let summary = world.drive(run, now);
        // THEN none is replayed or archived: the 15 are released, the 5 without a reason have
        // their copies that say why (in their tenant's group) in the DLQ instead
        assert!(summary.paused && world.main.is_empty() && world.archived.is_empty());
        assert_eq!((summary.unexplained, world.visible.len()), (5, 20));
        let explained = world
            .visible
            .iter()
            .filter(|m| m.failure_reason() == Some("INVOCATION_FAILED"));
        assert_eq!(explained.count(), 5);
        assert!(world.in_flight.is_empty());
    }

    #[test]
    fn candidates_left_at_the_start_margin_are_released_not_sent() {
        // GIVEN a run holding 30 candidates, none dealt yet
        let cfg = config(&[]);
        let mut world = World::new(fresh(30, "m"));
        let now = start();
        let mut run = scheduled(&cfg, now);
        let command = run.poll(now).unwrap();
        world.answer(&mut run, command, now);
        while let Some(Command::Receive(r)) = run.poll(now) {
            let batch = world.receive();
            run.handle_received(r, Ok(batch), now);
            if run.candidates.len() == 30 {
                break;
            }
        }
        assert_eq!(run.candidates.len(), 30);
        // WHEN the clock reaches the start margin
        let late = now.after(Duration::from_secs(59));
        let summary = world.drive(run, late);
        // THEN nothing is sent and all 30 are released
        assert_eq!((summary.redriven, world.main.len()), (0, 0), "{summary:?}");
        assert_eq!((world.visible.len(), world.in_flight.len()), (30, 0));
    }

    fn fifo_config() -> RedriverConfig {
        let mut cfg = config(&[]);
        cfg.common.main_queue_url = format!("{MAIN}.fifo");
        cfg.common.dlq_url = format!("{DLQ}.fifo");
        cfg
    }

    #[test]
    fn a_fifo_group_behind_a_refused_send_waits_across_cycles_and_follows_in_order() {
        // GIVEN a FIFO DLQ: group A (a01…a12, more than a receive) then b1; a01's send refused
        let cfg = fifo_config();
        let ids: Vec<String> = (1..=12).map(|i| format!("a{i:02}")).collect();
        let messages = ids.iter().map(|id| in_group(id, "A"));
        let mut world = World::new(messages.chain([in_group("b1", "B")]));
        world.main_url = cfg.common.main_queue_url.clone();
        world.refuse =
            Box::new(|a| matches!(a, Action::Copy { message, .. } if message.body.contains("a01")));
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN B went; A waited behind a01 in both cycles, its held ones skipped
        let sent = |w: &World| -> Vec<String> {
            w.main
                .iter()
                .map(|c| c.body[12..c.body.len() - 2].to_owned())
                .collect()
        };
        assert_eq!(sent(&world), ["b1"], "{summary:?}");
        let counts = (summary.redriven, summary.failed, summary.skipped);
        assert_eq!(counts, (1, 1, 9), "{summary:?}");
        // AND once sends go through, the group follows in its order
        world.refuse = Box::new(|_| false);
        world.drive(scheduled(&cfg, start()), start());
        assert_eq!(sent(&world)[1..], ids[..]);
    }

    #[test]
    fn a_shallow_dlq_costs_a_few_receives_not_a_burst() {
        // GIVEN 25 messages at 3,000/s (up to 46 cycles in flight)
        let cfg = config(&[("REDRIVE_RATE_PER_SECOND", "3000")]);
        assert!(plan::cycles_in_flight(3000.0) > 40);
        let mut world = World::new(fresh(25, "m"));
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN a handful of receives: the window opened to 8 with the two full batches, not
        // to 46, and closed again at the first empty one; one more once the
        // candidates held were dealt
        let receives = world.commands.iter().filter(|c| **c == "receive").count();
        assert_eq!(summary.redriven, 25);
        assert!(receives <= 12, "{receives} receives: {:?}", world.commands);
    }

    #[test]
    fn the_window_opens_with_full_batches_up_to_what_the_rate_needs() {
        // GIVEN a deep DLQ at 3,000/s (of messages to archive: replay candidates would be
        // held, and settle nothing yet)
        let cfg = config(&[("REDRIVE_RATE_PER_SECOND", "3000")]);
        let mut world = World::new(expired(500));
        let now = start();
        let mut run = scheduled(&cfg, now);
        let command = run.poll(now).unwrap();
        world.answer(&mut run, command, now);
        // THEN two receives start; each full batch doubles the window
        let receives = |run: &mut Run| -> Vec<Receive> {
            std::iter::from_fn(|| match run.poll(now) {
                Some(Command::Receive(r)) => Some(r),
                _ => None,
            })
            .collect()
        };
        let first = receives(&mut run);
        assert_eq!(first.len(), 2);
        for r in first {
            run.handle_received(r, Ok(world.receive()), now);
        }
        // two settles queued, and the window is 8 now: 6 more receives
        let settles: Vec<Command> = (0..2).filter_map(|_| run.poll(now)).collect();
        assert!(settles.iter().all(|c| matches!(c, Command::Settle { .. })));
        assert_eq!(receives(&mut run).len(), 6);
    }

    #[test]
    fn the_in_flight_limit_stops_receiving() {
        // GIVEN replay paused (every message held for the run) and room for 100 in flight
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let tuning = Tuning {
            in_flight_max: 100,
            ..Tuning::default()
        };
        let mut world = World::new(fresh(300, "m"));
        world.alarms = Ok(vec![alarm(
            "replays-failing",
            true,
            Duration::from_secs(60),
            10.0,
        )]);
        let kept = KeptMessage {
            message_id: String::new(),
            receipt_handle: String::new(),
            failure_reason: None,
            first_sent_at: None,
            hidden_until: EPOCH_MS,
            order_id: None,
        };
        world.kept_lists = Some(vec![kept; 40]);
        let request = RunRequest::defaults(&cfg);
        let summary = world.drive(run_of(&request, &cfg, tuning, start()), start());
        // THEN it stopped before holding more than 100, kept ones included, and released
        // what it held
        assert_eq!(summary.stopped_by, StopReason::InFlightLimit, "{summary:?}");
        assert!(summary.received + 40 <= 100, "{summary:?}");
        assert_eq!(world.visible.len(), 300);
    }

    #[test]
    fn a_message_received_twice_at_once_is_replayed_once() {
        // GIVEN a standard DLQ that hands m0 to a second receive while a cycle holds it
        let cfg = config(&[("REDRIVE_RATE_PER_SECOND", "3000")]);
        let now = start();
        let mut run = run_of(&RunRequest::defaults(&cfg), &cfg, in_order(), now);
        let mut world = World::new(fresh(1, "m"));
        let command = run.poll(now).unwrap();
        world.answer(&mut run, command, now);
        let (Some(Command::Receive(a)), Some(Command::Receive(b))) = (run.poll(now), run.poll(now))
        else {
            panic!("{run:?}")
        };
        let batch = world.receive();
        let mut twice = batch[0].clone();
        twice.receipt_handle = "rh-m0-again".into();
        world
            .in_flight
            .insert(twice.receipt_handle.clone(), twice.clone());
        run.handle_received(a, Ok(batch), now);
        run.handle_received(b, Ok(vec![twice]), now);
        // THEN the first cycle replays it; the second receipt is only released
        let summary = world.drive(run, now);
        assert_eq!((world.main.len(), summary.redriven), (1, 1), "{summary:?}");
        assert_eq!(summary.received, 2);
    }

    #[test]
    fn a_replay_whose_delete_failed_is_released_at_once_and_only_deleted_when_seen_again() {
        // GIVEN the first delete of m0 refused
        let cfg = config(&[]);
        let mut world = World::new(fresh(3, "m"));
        world.refuse = Box::new(
            |a| matches!(a, Action::Delete { receipt_handle, .. } if receipt_handle == "rh-m0-1"),
        );
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN m0 was released during the cycles, received again and deleted, not sent twice
        let copies_of_m0 = world.main.iter().filter(|c| c.body.contains("m0")).count();
        assert_eq!((copies_of_m0, world.main.len()), (1, 3));
        assert_eq!(
            (summary.redriven, summary.delete_failed),
            (3, 1),
            "{summary:?}"
        );
        assert!(world.visible.is_empty() && world.in_flight.is_empty());
    }

    #[test]
    fn a_dry_run_settles_nothing_and_counts_what_the_run_would_do() {
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "15")]);
        let request = RunRequest {
            dry_run: true,
            ..RunRequest::defaults(&cfg)
        };
        let mut world = World::new(fresh(30, "m").into_iter().chain(expired(5)));
        let summary = world.drive(run_of(&request, &cfg, Tuning::default(), start()), start());
        // THEN it read ahead as the run it stands for would (all 35: fewer than 1,000), counted
        // what it would replay up to its budget, as that run would deal them out, and what it
        // would archive, and its only settle released what it held
        assert_eq!(summary.stopped_by, StopReason::Empty, "{summary:?}");
        assert_eq!(
            (summary.received, summary.redriven),
            (35, 15),
            "{summary:?}"
        );
        assert_eq!(summary.archived.values().sum::<u64>(), 5);
        assert!(world.main.is_empty() && world.archived.is_empty());
        assert_eq!(world.commands.iter().filter(|c| **c == "settle").count(), 1);
        assert_eq!(world.visible.len(), 35);
    }

    #[test]
    fn nothing_starts_inside_the_deadline_margin() {
        let cfg = config(&[]);
        let now = start();
        let request = RunRequest::defaults(&cfg);
        let run = Run::new(&request, &cfg, Tuning::default(), now.instant, now);
        let mut world = World::new(fresh(1, "m"));
        let summary = world.drive(run, now);
        assert_eq!(
            (summary.received, summary.stopped_by),
            (0, StopReason::Deadline)
        );
        assert_eq!(world.commands, ["keep lists"]);
    }

    #[test]
    fn a_copy_not_answered_past_the_margin_stops_receiving() {
        // GIVEN a run whose first cycle settles after the deadline margin, its copies unanswered
        let cfg = config(&[("REDRIVE_RATE_PER_SECOND", "10")]);
        let now = start();
        let mut run = run_of(&RunRequest::defaults(&cfg), &cfg, in_order(), now);
        let mut world = World::new(fresh(30, "m"));
        let command = run.poll(now).unwrap();
        world.answer(&mut run, command, now);
        let Some(Command::Receive(r)) = run.poll(now) else {
            panic!()
        };
        run.handle_received(r, Ok(world.receive()), now);
        let Some(Command::Settle { id, plan, .. }) = run.poll(now) else {
            panic!()
        };
        let late = now.after(Duration::from_secs(59));
        let unanswered = Confirmation::Failed(SettleError::Unanswered(None));
        run.handle_settled(
            id,
            Report::of(&plan, late.instant, |_| unanswered.clone()),
            late,
        );
        // THEN no receive starts; what was not confirmed is neither deleted nor released
        let summary = world.drive(run, late);
        assert_eq!(summary.stopped_by, StopReason::Deadline, "{summary:?}");
        assert_eq!((summary.failed, world.in_flight.len()), (10, 10));
    }

    #[test]
    fn a_send_that_times_out_halves_the_cycles_in_flight_and_stays_unconfirmed() {
        // GIVEN a run at 3,000/s (46 cycles in flight) whose first cycle's send times out
        let cfg = config(&[("REDRIVE_RATE_PER_SECOND", "3000")]);
        let now = start();
        let mut run = run_of(&RunRequest::defaults(&cfg), &cfg, in_order(), now);
        assert_eq!(run.window.depth, plan::cycles_in_flight(3000.0));
        let mut world = World::new(fresh(30, "m"));
        let command = run.poll(now).unwrap();
        world.answer(&mut run, command, now);
        let Some(Command::Receive(r)) = run.poll(now) else {
            panic!()
        };
        run.handle_received(r, Ok(world.receive()), now);
        let Some(Command::Settle { id, plan, .. }) = run.poll(now) else {
            panic!()
        };
        let timeout = resq::error::AwsError {
            kind: resq::error::AwsErrorKind::Timeout,
            ..resq::error::AwsError::local("operation attempt timed out")
        };
        let unanswered = Confirmation::Failed(SettleError::Unanswered(Some(timeout)));
        let later = now.after(Duration::from_secs(1));
        run.handle_settled(
            id,
            Report::of(&plan, now.instant, |_| unanswered.clone()),
            later,
        );
        // THEN fewer cycles go at once, not more
        assert_eq!(run.window.depth, plan::cycles_in_flight(3000.0) / 2);
        // AND the rest goes as before, while the 10 unconfirmed are neither deleted, nor
        // released, nor sent again by this run: they reappear after it, once each
        let summary = world.drive(run, later);
        assert_eq!((summary.redriven, summary.failed), (20, 10), "{summary:?}");
        assert_eq!((world.main.len(), world.in_flight.len()), (20, 10));
    }

    #[test]
    fn a_selective_run_makes_the_kept_messages_of_its_reason_visible_first() {
        // GIVEN two kept messages hidden by earlier runs, of two reasons
        let cfg = config(&[]);
        let kept = |id: &str, reason: &str| KeptMessage {
            message_id: id.into(),
            receipt_handle: format!("rh-{id}"),
            failure_reason: Some(reason.into()),
            first_sent_at: Some(EPOCH_MS),
            hidden_until: EPOCH_MS + HOUR_MS,
            order_id: None,
        };
        let mut world = World::new([]);
        world.kept_lists = Some(vec![
            kept("fixed", "VALIDATION_FAILED"),
            kept("other", "MALFORMED_JSON"),
        ]);
        for (id, reason) in [("fixed", "VALIDATION_FAILED"), ("other", "MALFORMED_JSON")] {
            let m = dlq_message(id, EPOCH_MS, &permanent(reason));
            world.in_flight.insert(format!("rh-{id}"), m);
        }
        // WHEN an operator replays VALIDATION_FAILED
        let request = RunRequest {
            reason: Some("VALIDATION_FAILED".into()),
            ..RunRequest::defaults(&cfg)
        };
        let summary = world.drive(run_of(&request, &cfg, Tuning::default(), start()), start());
        // THEN that one is made visible before the cycles, and replayed; the other stays
        assert_eq!(world.commands[..3], ["keep lists", "settle", "receive"]);
        assert_eq!((summary.unhidden, summary.redriven), (1, 1), "{summary:?}");
        assert_eq!(summary.kept_in_flight, Some(1));
        assert!(world.in_flight.contains_key("rh-other"));
    }

    #[test]
    fn dead_letters_without_a_reason_are_given_one_while_paused() {
        let cfg = config(&[("PAUSE_ON_ALARMS", "consumer-errors")]);
        let crashed = (0..5).map(|i| unexplained(&format!("crashed{i}"), EPOCH_MS, &[]));
        let mut world = World::new(crashed);
        world.alarms = Ok(vec![alarm(
            "consumer-errors",
            true,
            Duration::from_secs(60),
            0.0,
        )]);
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN each has a copy in the DLQ that says why, counted once; none replayed
        assert_eq!(
            (summary.unexplained, summary.redriven),
            (5, 0),
            "{summary:?}"
        );
        assert_eq!(world.visible.len(), 5);
        assert!(
            world
                .visible
                .iter()
                .all(|m| m.failure_reason() == Some("INVOCATION_FAILED"))
        );
    }

    /// A consumer breaker on mapping `esm-1`, the downstream-failing alarm its alarm.
    fn consumer_config(extra: &[(&str, &str)]) -> RedriverConfig {
        let mut vars = vec![
            ("CONSUMER_EVENT_SOURCE_MAPPING", "esm-1"),
            ("PAUSE_CONSUMER_ON_ALARMS", "downstream-failing"),
        ];
        vars.extend_from_slice(extra);
        config(&vars)
    }

    /// What the consumer's breaker reads: the mapping in `state`, `record` the newest entry of
    /// its pause log, four days' retention.
    fn consumer_view(
        state: resq::mapping::MappingState,
        record: Option<PauseRecord>,
    ) -> ConsumerView {
        ConsumerView {
            mapping: Ok(resq::mapping::Mapping {
                uuid: "esm-1".into(),
                state,
                event_source_arn: None,
                function_arn: None,
            }),
            record: Ok(record),
            retention: Ok(Duration::from_secs(345_600)),
            waiting: Some(1000),
            oldest_age: None,
        }
    }

    fn downstream(in_alarm: bool) -> AlarmState {
        let mut a = alarm(
            "downstream-failing",
            in_alarm,
            Duration::from_secs(60),
            50.0,
        );
        a.evaluation_periods = Some(1);
        a
    }

    #[test]
    fn an_alarm_in_alarm_pauses_the_consumer_and_replay_waits_for_it() {
        // GIVEN the downstream-failing alarm in ALARM, the consumer running, one dead letter
        let cfg = consumer_config(&[]);
        let mut world = World::new(fresh(1, "m"));
        world.alarms = Ok(vec![downstream(true)]);
        world.consumer = Some(consumer_view(resq::mapping::MappingState::Enabled, None));
        // WHEN a scheduled run goes
        let summary = world.drive(scheduled(&cfg, start()), start());
        // THEN it recorded resq's pause and disabled the mapping, before anything else
        assert_eq!(world.commands[..2], ["breaker", "consumer"]);
        let [ConsumerAct::Pause(r)] = &world.acts[..] else {
            panic!("{:?}", world.acts);
        };
        assert_eq!(r.alarms, ["downstream-failing"]);
        // AND replayed nothing into a queue nobody consumes
        assert_eq!(summary.consumer_paused, Some(true), "{summary:?}");
        assert!(summary.paused && world.main.is_empty(), "{summary:?}");
        assert_eq!(summary.metrics().get(crate::summary::CONSUMER_PAUSED), 1);
        // AND a run without a consumer breaker says nothing of it
        let summary = World::new([]).drive(scheduled(&config(&[]), start()), start());
        assert_eq!(summary.consumer_paused, None);
    }

    #[test]
    fn a_probe_runs_the_consumer_for_its_window_then_pauses_it_again_before_the_run_ends() {
        // GIVEN resq's pause of five minutes, its alarm still in ALARM (a minute's period)
        let cfg = consumer_config(&[]);
        let t0 = start();
        let mut paused = PauseRecord::new(
            "esm-1",
            resq::state::PauseState::Paused,
            resq::state::PausedBy::Resq,
            EPOCH_MS - 300_000,
        );
        paused.since = Some(EPOCH_MS - 300_000);
        let mut world = World::new([]);
        world.alarms = Ok(vec![downstream(true)]);
        world.consumer = Some(consumer_view(
            resq::mapping::MappingState::Disabled,
            Some(paused),
        ));
        // WHEN an alarm's action invokes the redriver
        let mut request = RunRequest::defaults(&cfg);
        request.alarm = Some("downstream-failing".into());
        let (summary, end) = world.drive_timed(run_of(&request, &cfg, Tuning::default(), t0), t0);
        // THEN the run probed: enabled, then 5 s later (a twelfth of the minute) disabled again;
        // it touched no message and ended only after the probe did
        assert_eq!(world.commands, ["breaker", "consumer", "consumer"]);
        let [ConsumerAct::Probe(p), ConsumerAct::EndProbe(e)] = &world.acts[..] else {
            panic!("{:?}", world.acts);
        };
        assert_eq!(
            (p.probes, e.probes, e.state),
            (1, 1, resq::state::PauseState::Paused)
        );
        assert_eq!(end.instant - t0.instant, Duration::from_secs(5));
        assert_eq!(summary.received, 0);
        // AND a probe whose mapping could not be enabled ends the run at once, said
        let mut world = World::new([]);
        world.alarms = Ok(vec![downstream(true)]);
        world.consumer = Some(consumer_view(
            resq::mapping::MappingState::Disabled,
            Some(PauseRecord {
                since: Some(EPOCH_MS - 300_000),
                ..PauseRecord::new(
                    "esm-1",
                    resq::state::PauseState::Paused,
                    resq::state::PausedBy::Resq,
                    EPOCH_MS - 300_000,
                )
            }),
        ));
        world.consumer_answer = Err("AccessDeniedException".into());
        let (summary, end) = world.drive_timed(run_of(&request, &cfg, Tuning::default(), t0), t0);
        assert_eq!(end, t0);
        assert!(
            summary
                .consumer
                .unwrap_or_default()
                .contains("AccessDenied")
        );
    }

    #[test]
    fn a_calm_run_climbs_to_the_ceiling_and_an_alarm_brings_it_back() {
        // GIVEN 10 replays/s, a ceiling of 50, an alarm to read every 30 s
        let cfg = config(&[
            ("PAUSE_ON_ALARMS", "replays-failing"),
            ("REDRIVE_RATE_PER_SECOND", "10"),
            ("REDRIVE_RATE_MAX", "50"),
        ]);
        let ok = alarm("replays-failing", false, Duration::from_secs(7200), 10.0);
        let mut world = World::new(fresh(5, "m"));
        world.alarms = Ok(vec![ok.clone()]);
        let t0 = start();
        let mut run = scheduled(&cfg, t0);
        for _ in 0..2 {
            let command = run.poll(t0).unwrap();
            world.answer(&mut run, command, t0);
        }
        let budget = run.budget.max_messages;
        // WHEN four rechecks find the alarm OK, then one finds it in ALARM
        let mut now = t0;
        for _ in 0..4 {
            now = now.after(BREAKER_RECHECK);
            run.handle_breaker(Ok(vec![ok.clone()]), None, now);
        }
        let climbed = run.budget.max_messages;
        now = now.after(BREAKER_RECHECK);
        run.handle_breaker(
            Ok(vec![alarm("replays-failing", true, Duration::ZERO, 10.0)]),
            None,
            now,
        );
        let paces: Vec<f64> = std::iter::from_fn(|| run.poll(now))
            .filter_map(|c| match c {
                Command::Pace(r) => Some(r),
                _ => None,
            })
            .collect();
        // THEN the rate rose a quarter of the way each time (10 a step), and went back to 10
        assert_eq!(paces, [20.0, 30.0, 40.0, 50.0, 10.0]);
        // AND the budget (auto) grew by what the higher rates allow in the time left
        let left = |k: u64| 59u64.saturating_sub(30 * k);
        let grown: u64 = (1..=4).map(|k| 10 * left(k)).sum();
        assert_eq!(climbed - budget, grown, "{budget} → {climbed}");
        let summary = run.finish(now).0;
        assert_eq!(summary.ramped_to, Some(50.0));
        // AND the mean paced rate integrates the steps: 30 s at 10, 30 at 20, … 30 at 50
        let pace = Pace {
            rate: 10.0,
            base: 10.0,
            max: 50.0,
            changes: vec![
                (t0.instant, 10.0),
                (t0.after(BREAKER_RECHECK).instant, 20.0),
            ],
        };
        let mean = pace.mean(t0.instant, t0.after(BREAKER_RECHECK * 2).instant);
        assert!((mean - 15.0).abs() < 1e-9, "{mean}");
        // AND a manual rate is held
        let manual =
            RunRequest::from_event(serde_json::json!({"ratePerSecond": 10}), &cfg).unwrap();
        let mut run = run_of(&manual, &cfg, Tuning::default(), t0);
        for _ in 0..2 {
            let command = run.poll(t0).unwrap();
            world.answer(&mut run, command, t0);
        }
        run.handle_breaker(Ok(vec![ok]), None, t0.after(BREAKER_RECHECK));
        assert!(
            std::iter::from_fn(|| run.poll(t0.after(BREAKER_RECHECK)))
                .all(|c| !matches!(c, Command::Pace(_)))
        );
    }

    #[test]
    fn a_paused_or_spent_run_reads_the_dlq_through_only_when_a_sweep_is_due() {
        // GIVEN replay paused, one message past its TTL, and a read-through noted a minute ago
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        let alarms = Ok(vec![alarm(
            "replays-failing",
            true,
            Duration::from_secs(60),
            10.0,
        )]);
        let recent = Ok(Some(SweepRecord {
            at: EPOCH_MS - 60_000,
        }));
        let mut world = World::new(expired(1));
        (world.alarms, world.sweep) = (alarms.clone(), recent.clone());
        // WHEN a paused run goes, THEN it reads nothing
        let summary = world.drive(scheduled(&cfg, start()), start());
        assert_eq!(
            (summary.received, summary.stopped_by),
            (0, StopReason::MaxMessages)
        );
        assert!(world.archived.is_empty() && world.notes.is_empty());
        // AND an hour after the note it sweeps: archives, reads to the end, notes it
        world.sweep = Ok(Some(SweepRecord {
            at: EPOCH_MS - HOUR_MS,
        }));
        let summary = world.drive(scheduled(&cfg, start()), start());
        assert_eq!(world.archived, [ArchiveReason::TtlExpired]);
        assert!(summary.swept, "{summary:?}");
        assert_eq!(world.notes, [SweepRecord { at: EPOCH_MS }]);
        // AND a run past its budget stops receiving once it is spent, when no sweep is due
        // (having read ahead the candidates it holds: 10 here)
        let cfg = config(&[("MAX_MESSAGES_PER_RUN", "5")]);
        let mut world = World::new(fresh(20, "new").into_iter().chain(expired(3)));
        world.sweep = recent;
        let ten = Tuning {
            candidates_max: 10,
            ..Tuning::default()
        };
        let run = run_of(&RunRequest::defaults(&cfg), &cfg, ten, start());
        let summary = world.drive(run, start());
        assert_eq!(summary.redriven, 5);
        assert_eq!(summary.stopped_by, StopReason::MaxMessages, "{summary:?}");
        assert!(summary.received < 23, "{summary:?}");
        // AND a note that cannot be read makes the run sweep: archiving never waits on it
        let mut world = World::new(expired(2));
        (world.alarms, world.sweep) = (alarms, Err("AccessDenied".into()));
        let cfg = config(&[("PAUSE_ON_ALARMS", "replays-failing")]);
        world.drive(scheduled(&cfg, start()), start());
        assert_eq!(world.archived.len(), 2);
    }
}
