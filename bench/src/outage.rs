//! The bill of a downstream outage, resq against the seed design, as the code does it (issue
//! 34): every order fails transiently while the orders' downstream is down, then all succeed.
//! Pure arithmetic over expected values, except [`OutageProfile::read`] (the soak's measured
//! outage, when it wrote one) and the template's alarms (read when the bench is built).
//!
//! - **resq** (docs/redriver.md, "Consumer breaker", "Drain after recovery", "Archive sweep";
//!   docs/consumer.md, "Retry budget"), in phases ([`resq_outage`]):
//!   1. *detection*: the downstream-failing alarm goes to `ALARM` a period and a metric's lag
//!      after the outage starts; the orders of that time are received and fail, each backed
//!      off, and their redeliveries run only within the retry budget (the rest are reported
//!      failed with the longest backoff, unrun);
//!   2. *paused*: the alarm's action invokes the redriver, which disables the consumer's event
//!      source mapping; orders wait in the main queue (no request for them). Every
//!      `PROBE_EVERY` a scheduled run enables the mapping for `PROBE_WINDOW`: the consumer
//!      receives what it can in the window from the waiting orders (failing them again, their
//!      redeliveries within the budget; an order on its last allowed receive is dead-lettered).
//!      Paused runs read the breaker and stop: no DLQ receive, except the archive sweep when
//!      it is due (`ARCHIVE_SWEEP_SECONDS`);
//!   3. *recovery*: the first probe after the fix succeeds, the alarm goes `OK` and its action
//!      resumes the consumer; the backlog is received once each, successfully; the next run
//!      replays the DLQ at the climb from `REDRIVE_RATE_PER_SECOND` to `REDRIVE_RATE_MAX`.
//! - **seed design** ([`seed_outage`]): no breaker, no backoff, no budget: every order is
//!   received `maxReceiveCount` times a visibility timeout apart and SQS moves it to the DLQ;
//!   the send-each-and-sleep redriver replays `rate × its timeout` a run during the outage
//!   (each replay failing `maxReceiveCount` times again) and the whole DLQ after it.
//!
//! SQS bills each 64 KiB chunk of a request's payload as a request ([`sqs_chunks`]); fixed
//! monthly costs (alarms, the dashboard, the custom metrics EMF creates) are apart
//! ([`Fixed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use resq::sqs::MAX_BATCH;
use resq_redriver::consumer_breaker;

use crate::cost::{
    Assumptions, CLOUDWATCH_REQUEST, LAMBDA_GB_SECOND, LAMBDA_REQUEST, Measured,
    RESQ_RECEIVE_WAIT_MS, S3_GET, S3_PUT, SQS_REQUEST, Template, gb_s, grouped,
    invocations_with_any,
};

/// An SQS request is billed per 64 KiB chunk of its payload.
pub const SQS_CHUNK_BYTES: f64 = 65_536.0;
/// The payload of one order as SQS carries it, bytes (assumed): a ~300-byte body with its
/// message attributes (resq's `x-*` on a copy) and, on a receive, its system attributes,
/// rounded up to 1 KiB. A call of 10 is 10 KiB: one chunk.
pub const MESSAGE_BYTES: f64 = 1024.0;
/// S3 LIST ($0.005 per 1,000, as a PUT).
pub const S3_LIST: f64 = S3_PUT;
/// `GetMetricData`, per metric requested ($0.01 per 1,000).
pub const GET_METRIC_DATA: f64 = 0.01 / 1000.0;
/// How often a probe asks Lambda whether the mapping is enabled yet (`PROBE_POLL` in
/// `redriver/src/engine.rs`), s.
pub const PROBE_POLL_SECONDS: f64 = resq_redriver::engine::PROBE_POLL.as_secs_f64();
/// S3 LISTs of the keep lists a run makes: today's prefix, and yesterday's when the 13 h it
/// looks back cross midnight (13 h of 24: `keep::still_hidden`).
pub const KEEP_LIST_LISTS: f64 = 1.0 + 13.0 / 24.0;

/// CloudWatch, per alarm metric and month: standard resolution (a metric-math alarm counts each
/// metric it reads).
pub const ALARM_METRIC_MONTH: f64 = 0.10;
/// The same at high resolution (a period under 60 s).
pub const HIGH_RESOLUTION_ALARM_METRIC_MONTH: f64 = 0.30;
/// A composite alarm, a month.
pub const COMPOSITE_ALARM_MONTH: f64 = 0.50;
/// A dashboard, a month (no free tier).
pub const DASHBOARD_MONTH: f64 = 3.00;
/// A custom metric, a month (the first 10,000; prorated by the hour it receives data).
pub const CUSTOM_METRIC_MONTH: f64 = 0.30;

/// Requests (billed chunks) of an SQS call whose payload is `payload_bytes`: one per 64 KiB
/// started, at least one.
pub fn sqs_chunks(payload_bytes: f64) -> f64 {
    (payload_bytes.max(0.0) / SQS_CHUNK_BYTES).ceil().max(1.0)
}

/// An API action the outage bills (Lambda's control plane is counted, not billed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `sqs:ReceiveMessage`: Lambda's poller on the main queue, the redriver on the DLQ.
    Receive,
    /// `sqs:DeleteMessageBatch`.
    Delete,
    /// `sqs:ChangeMessageVisibilityBatch`: backoff, and a run's release of what it held.
    ChangeVisibility,
    /// `sqs:SendMessageBatch`: DLQ copies, resq's replays.
    SendBatch,
    /// `sqs:SendMessage`: the seed redriver's replays, one each.
    Send,
    /// `sqs:GetQueueAttributes`: the main queue's retention, for the pause's cap.
    QueueAttributes,
    /// `cloudwatch:DescribeAlarms`.
    DescribeAlarms,
    /// `cloudwatch:GetMetricData`: the main queue's oldest message's age.
    GetMetricData,
    /// `s3:PutObject`: pause records, sweep notes.
    S3Put,
    /// `s3:GetObject`: the newest pause record, the last sweep note.
    S3Get,
    /// `s3:ListObjectsV2`: the newest entry's key, the keep lists.
    S3List,
    /// `lambda:GetEventSourceMapping` (free).
    GetMapping,
    /// `lambda:UpdateEventSourceMapping` (free).
    UpdateMapping,
}

const ACTIONS: usize = 13;

impl Action {
    /// Every action, in the order of [`Tally::calls`].
    pub const ALL: [Action; ACTIONS] = [
        Action::Receive,
        Action::Delete,
        Action::ChangeVisibility,
        Action::SendBatch,
        Action::Send,
        Action::QueueAttributes,
        Action::DescribeAlarms,
        Action::GetMetricData,
        Action::S3Put,
        Action::S3Get,
        Action::S3List,
        Action::GetMapping,
        Action::UpdateMapping,
    ];

    /// `service:Action`, as the soak's profile names it.
    pub fn key(self) -> &'static str {
        match self {
            Action::Receive => "sqs:ReceiveMessage",
            Action::Delete => "sqs:DeleteMessageBatch",
            Action::ChangeVisibility => "sqs:ChangeMessageVisibilityBatch",
            Action::SendBatch => "sqs:SendMessageBatch",
            Action::Send => "sqs:SendMessage",
            Action::QueueAttributes => "sqs:GetQueueAttributes",
            Action::DescribeAlarms => "cloudwatch:DescribeAlarms",
            Action::GetMetricData => "cloudwatch:GetMetricData",
            Action::S3Put => "s3:PutObject",
            Action::S3Get => "s3:GetObject",
            Action::S3List => "s3:ListObjectsV2",
            Action::GetMapping => "lambda:GetEventSourceMapping",
            Action::UpdateMapping => "lambda:UpdateEventSourceMapping",
        }
    }

    /// The action a profile's key names: the batch and single forms of an SQS action are
    /// priced alike (`sqs:DeleteMessage` is a delete), as are CloudWatch's other reads.
    pub fn of_key(key: &str) -> Option<Self> {
        let a = match key {
            "sqs:ReceiveMessage" => Action::Receive,
            "sqs:DeleteMessage" | "sqs:DeleteMessageBatch" => Action::Delete,
            "sqs:ChangeMessageVisibility" | "sqs:ChangeMessageVisibilityBatch" => {
                Action::ChangeVisibility
            }
            "sqs:SendMessageBatch" => Action::SendBatch,
            "sqs:SendMessage" => Action::Send,
            "sqs:GetQueueAttributes" => Action::QueueAttributes,
            "cloudwatch:DescribeAlarms" | "cloudwatch:DescribeAlarmHistory" => {
                Action::DescribeAlarms
            }
            "cloudwatch:GetMetricData" => Action::GetMetricData,
            "s3:PutObject" => Action::S3Put,
            "s3:GetObject" | "s3:HeadObject" => Action::S3Get,
            "s3:ListObjectsV2" | "s3:ListObjects" => Action::S3List,
            "lambda:GetEventSourceMapping" => Action::GetMapping,
            "lambda:UpdateEventSourceMapping" => Action::UpdateMapping,
            _ => return None,
        };
        Some(a)
    }

    fn is_sqs(self) -> bool {
        self.key().starts_with("sqs:")
    }

    /// Messages one call carries at most (their bytes are its payload).
    fn messages_per_call(self) -> f64 {
        match self {
            Action::Receive | Action::SendBatch => MAX_BATCH as f64,
            Action::Send => 1.0,
            _ => 0.0,
        }
    }

    /// Requests billed for one call: SQS's chunks of its payload (a receipt handle, an
    /// attribute name: well under a chunk), one for the others.
    pub fn billed_per_call(self) -> f64 {
        match self.is_sqs() {
            true => sqs_chunks(self.messages_per_call() * MESSAGE_BYTES),
            false => 1.0,
        }
    }

    /// The price of one billed request, $.
    pub fn price(self) -> f64 {
        match self {
            a if a.is_sqs() => SQS_REQUEST,
            Action::DescribeAlarms => CLOUDWATCH_REQUEST,
            Action::GetMetricData => GET_METRIC_DATA,
            Action::S3Put => S3_PUT,
            Action::S3Get => S3_GET,
            Action::S3List => S3_LIST,
            _ => 0.0,
        }
    }
}

/// Fields of a [`Tally`] as an array ([`Tally::to_array`]): the calls, then these.
const CONSUMER_INVOCATIONS: usize = ACTIONS;
const CONSUMER_MS: usize = ACTIONS + 1;
const REDRIVER_INVOCATIONS: usize = ACTIONS + 2;
const REDRIVER_MS: usize = ACTIONS + 3;
const ATTEMPTS: usize = ACTIONS + 4;
const DEAD_LETTERED: usize = ACTIONS + 5;
const REPLAYED: usize = ACTIONS + 6;
const FIELDS: usize = ACTIONS + 7;

/// What a part of an outage does: calls by action, the functions' invocations and billed
/// time, and what became of the orders.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    /// Calls by [`Action::ALL`] (SQS's chunks applied when billed).
    pub calls: [f64; ACTIONS],
    /// Consumer invocations.
    pub consumer_invocations: f64,
    /// Consumer billed time, ms.
    pub consumer_ms: f64,
    /// Redriver invocations (scheduled runs and the alarms' actions).
    pub redriver_invocations: f64,
    /// Redriver billed time, ms.
    pub redriver_ms: f64,
    /// Writes attempted at the downstream (failing and successful).
    pub attempts: f64,
    /// Orders that reached the DLQ.
    pub dead_lettered: f64,
    /// Replays.
    pub replayed: f64,
}

impl Tally {
    /// Calls of `a`.
    pub fn get(&self, a: Action) -> f64 {
        self.calls[a as usize]
    }

    fn add(&mut self, a: Action, n: f64) {
        self.calls[a as usize] += n;
    }

    /// SQS requests billed (chunks).
    pub fn sqs_requests(&self) -> f64 {
        Action::ALL
            .iter()
            .filter(|a| a.is_sqs())
            .map(|a| self.get(*a) * a.billed_per_call())
            .sum()
    }

    /// The bill, $: Lambda's requests and GB-s at `t`'s memory sizes, and every action.
    pub fn dollars(&self, t: &Template) -> f64 {
        let lambda = (self.consumer_invocations + self.redriver_invocations) * LAMBDA_REQUEST
            + (gb_s(self.consumer_ms, t.consumer_memory_mb)
                + gb_s(self.redriver_ms, t.redriver_memory_mb))
                * LAMBDA_GB_SECOND;
        let calls: f64 = Action::ALL
            .iter()
            .map(|a| self.get(*a) * a.billed_per_call() * a.price())
            .sum();
        lambda + calls
    }

    fn to_array(self) -> [f64; FIELDS] {
        let mut v = [0.0; FIELDS];
        v[..ACTIONS].copy_from_slice(&self.calls);
        v[CONSUMER_INVOCATIONS] = self.consumer_invocations;
        v[CONSUMER_MS] = self.consumer_ms;
        v[REDRIVER_INVOCATIONS] = self.redriver_invocations;
        v[REDRIVER_MS] = self.redriver_ms;
        v[ATTEMPTS] = self.attempts;
        v[DEAD_LETTERED] = self.dead_lettered;
        v[REPLAYED] = self.replayed;
        v
    }

    fn from_array(v: [f64; FIELDS]) -> Self {
        let mut calls = [0.0; ACTIONS];
        calls.copy_from_slice(&v[..ACTIONS]);
        Self {
            calls,
            consumer_invocations: v[CONSUMER_INVOCATIONS],
            consumer_ms: v[CONSUMER_MS],
            redriver_invocations: v[REDRIVER_INVOCATIONS],
            redriver_ms: v[REDRIVER_MS],
            attempts: v[ATTEMPTS],
            dead_lettered: v[DEAD_LETTERED],
            replayed: v[REPLAYED],
        }
    }
}

impl std::ops::Add for Tally {
    type Output = Tally;
    fn add(self, other: Tally) -> Tally {
        let (a, b) = (self.to_array(), other.to_array());
        Tally::from_array(std::array::from_fn(|i| a[i] + b[i]))
    }
}

/// An outage's bill by part. resq's parts are its phases; the seed design has no probe, no
/// paused run and no backlog in the main queue (every order goes through its DLQ).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    /// Failing deliveries: resq's until the pause (detection); the seed's, all of them.
    pub failing: Tally,
    /// resq's probes while paused: the consumer's records in each window.
    pub probes: Tally,
    /// resq's redriver while paused: scheduled runs (the probes' switching, the archive
    /// sweep) and the alarm's two actions.
    pub runs: Tally,
    /// Replays during the outage (they fail again): the seed's.
    pub replays_during: Tally,
    /// resq's main-queue backlog after recovery: one successful delivery each.
    pub backlog: Tally,
    /// The DLQ's drain after recovery: the replays and their successful deliveries.
    pub drain: Tally,
}

impl Phases {
    /// The parts with their labels, in the table's order.
    pub fn parts(&self) -> [&Tally; 6] {
        [
            &self.failing,
            &self.probes,
            &self.runs,
            &self.replays_during,
            &self.backlog,
            &self.drain,
        ]
    }

    fn parts_mut(&mut self) -> [&mut Tally; 6] {
        [
            &mut self.failing,
            &mut self.probes,
            &mut self.runs,
            &mut self.replays_during,
            &mut self.backlog,
            &mut self.drain,
        ]
    }

    /// Everything.
    pub fn total(&self) -> Tally {
        self.parts()
            .into_iter()
            .fold(Tally::default(), |a, b| a + *b)
    }

    /// What grows with the outage's length rather than its orders: the probes and the runs.
    fn by_time(&self) -> Tally {
        self.probes + self.runs
    }

    /// What grows with the orders.
    fn by_orders(&self) -> Tally {
        self.failing + self.replays_during + self.backlog + self.drain
    }

    /// The bill, $.
    pub fn dollars(&self, t: &Template) -> f64 {
        self.total().dollars(t)
    }
}

/// The outage and what resq's breaker, budget and drain are set to (the template's defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scenario {
    /// Orders a second, steady, before, during and after.
    pub orders_per_second: f64,
    /// How long the downstream is down, s.
    pub seconds: f64,
    /// The downstream-failing alarm's period, s (60).
    pub alarm_period_seconds: f64,
    /// How long an EMF data point takes to reach the alarm, s (assumed: a minute).
    pub metric_lag_seconds: f64,
    /// Records a second the consumer takes from a backlog (the template's 10 concurrent
    /// batches of 10 in about 0.1 s: `RedriveRateMax`'s note).
    pub consumer_records_per_second: f64,
    /// Consumer execution environments (Lambda's poller starts five batches at once), each
    /// with its own retry budget.
    pub environments: f64,
    /// `RETRY_BUDGET_PERCENT`.
    pub retry_budget_percent: f64,
    /// The budget's floor, redeliveries a minute per environment.
    pub retry_floor_per_minute: f64,
    /// `REDRIVE_RATE_MAX`.
    pub rate_max: f64,
    /// `ARCHIVE_SWEEP_SECONDS`.
    pub archive_sweep_seconds: f64,
    /// How long Lambda takes to report an enabled mapping `Enabled`, s (assumed).
    pub mapping_enabling_seconds: f64,
    /// A redriver run's reads of the breaker and the keep lists when it receives nothing,
    /// billed ms (assumed).
    pub breaker_run_ms: f64,
    /// How fast a sweep reads the DLQ, messages a second (the LocalStack drain read about
    /// 2,000/s).
    pub dlq_read_per_second: f64,
}

impl Scenario {
    /// Issue 34's: an hour at 100 orders/s at the template's defaults.
    pub const DEFAULT: Self = Self {
        orders_per_second: 100.0,
        seconds: 3600.0,
        alarm_period_seconds: 60.0,
        metric_lag_seconds: 60.0,
        consumer_records_per_second: 1000.0,
        environments: 5.0,
        retry_budget_percent: resq_consumer::config::DEFAULT_RETRY_BUDGET_PERCENT as f64,
        retry_floor_per_minute: resq_consumer::retry_budget::FLOOR_PER_MINUTE as f64,
        rate_max: 200.0,
        archive_sweep_seconds: resq_redriver::config::DEFAULT_ARCHIVE_SWEEP_SECONDS as f64,
        mapping_enabling_seconds: 5.0,
        breaker_run_ms: 500.0,
        dlq_read_per_second: 2000.0,
    };

    /// Orders that arrive during the outage.
    pub fn orders(&self) -> f64 {
        self.orders_per_second * self.seconds
    }

    /// From a change in the downstream to the alarm's action: a period and the metric's lag.
    pub fn alarm_delay(&self) -> f64 {
        self.alarm_period_seconds + self.metric_lag_seconds
    }

    fn period(&self) -> Duration {
        Duration::from_secs_f64(self.alarm_period_seconds.max(1.0))
    }

    /// How often a paused consumer is probed (`consumer_breaker::probe_every`), s.
    pub fn probe_every(&self) -> f64 {
        consumer_breaker::probe_every(self.period()).as_secs_f64()
    }

    /// How long a probe lets it run (`consumer_breaker::probe_window`), s.
    pub fn probe_window(&self) -> f64 {
        consumer_breaker::probe_window(self.period()).as_secs_f64()
    }
}

/// The step a run's rate climbs by at each breaker recheck: a quarter of the way from the
/// base to the ceiling, at least the base (`Pace::up` in redriver/src/run.rs).
fn climb_step(base: f64, max: f64) -> f64 {
    ((max - base) / 4.0).max(base)
}

fn recheck_seconds() -> f64 {
    resq_redriver::run::BREAKER_RECHECK.as_secs_f64()
}

/// Replays a run makes in `seconds` while its alarms stay `OK`: `base` a second until the
/// first recheck, then a step up at each recheck until `max`.
pub fn climb_replays(base: f64, max: f64, seconds: f64) -> f64 {
    let (max, recheck) = (max.max(base), recheck_seconds());
    let (mut rate, mut at, mut sum) = (base, 0.0, 0.0);
    while at < seconds {
        let span = match rate < max {
            true => (seconds - at).min(recheck),
            false => seconds - at,
        };
        sum += rate * span;
        at += span;
        rate = (rate + climb_step(base, max)).min(max);
    }
    sum
}

/// Seconds a run takes to replay `k` at the climb ([`climb_replays`]'s inverse).
pub fn climb_seconds(base: f64, max: f64, k: f64) -> f64 {
    let (max, recheck) = (max.max(base), recheck_seconds());
    let (mut rate, mut at, mut left) = (base.max(f64::MIN_POSITIVE), 0.0, k);
    while left > 0.0 {
        if rate >= max || rate * recheck >= left {
            return at + left / rate;
        }
        left -= rate * recheck;
        at += recheck;
        rate = (rate + climb_step(base, max)).min(max);
    }
    at
}

/// The reads of a breaker: `DescribeAlarms` (both lists at once), the mapping, the pause
/// log's newest entry (its key, then the entry), the main queue's retention and its oldest
/// message's age.
fn breaker_read(x: &mut Tally) {
    for a in [
        Action::DescribeAlarms,
        Action::GetMapping,
        Action::S3List,
        Action::S3Get,
        Action::QueueAttributes,
        Action::GetMetricData,
    ] {
        x.add(a, 1.0);
    }
}

/// A scheduled run's reads before it receives: the breaker, the keep lists, the last sweep
/// note (its key, then the note); an invocation billed `ms`.
fn scheduled_run(x: &mut Tally, ms: f64) {
    breaker_read(x);
    x.add(Action::S3List, KEEP_LIST_LISTS + 1.0);
    x.add(Action::S3Get, 1.0);
    x.redriver_invocations += 1.0;
    x.redriver_ms += ms;
}

/// One act of the consumer's breaker (pause, resume, a probe's start or end): the pause log's
/// newest entry read again (an operator's pause written meanwhile stops it), the switch
/// (`UpdateEventSourceMapping`) and its record.
fn consumer_act(x: &mut Tally) {
    // the log's newest key and entry read again, and its newest key once more as the record
    // is appended (its key follows the newest's, whatever the clocks)
    x.add(Action::S3List, 2.0);
    x.add(Action::S3Get, 1.0);
    x.add(Action::UpdateMapping, 1.0);
    x.add(Action::S3Put, 1.0);
}

/// An alarm action's run of the breakers only: an invocation, the breaker's reads and its act.
fn alarm_action(x: &mut Tally, ms: f64) {
    breaker_read(x);
    consumer_act(x);
    x.redriver_invocations += 1.0;
    x.redriver_ms += ms;
}

/// resq's outage: its phases, and how the pause went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ResqOutage {
    /// The bill by phase.
    pub phases: Phases,
    /// Orders received until the pause.
    pub detection_orders: f64,
    /// Probes that failed (during the outage); one more succeeds after it.
    pub failing_probes: f64,
    /// Scheduled runs while the consumer was paused.
    pub paused_runs: f64,
    /// Archive sweeps while paused.
    pub sweeps: f64,
    /// From the outage's end until the consumer resumes, s.
    pub resumed_after: f64,
    /// Runs that drained the DLQ.
    pub drain_runs: f64,
}

/// resq's outage at `s`, by phase (the module's doc says how).
///
/// Expected values; the orders waiting in the main queue are a vector of how many times each
/// was received, a probe receiving the same share of each (it takes what the consumer takes
/// in its window from all that is visible, each message at most once: a backoff of seconds
/// against a backlog of tens of thousands). The redriver's runs fall half a schedule period
/// after the outage's start (the mean phase); the run before it found the DLQ empty and noted
/// a sweep.
pub fn resq_outage(m: &Measured, t: &Template, s: &Scenario) -> ResqOutage {
    let mrc = (t.max_receive_count.max(1.0)) as usize;
    let b = t.batch_size.max(1.0);
    let per_call = MAX_BATCH as f64;
    let (batch_ms, call_ms) = (m.resq_batch_ms.ceil(), Assumptions::DEFAULT.sqs_call_ms);
    let pct = s.retry_budget_percent / 100.0;
    let mut out = ResqOutage::default();

    // Records received and failing: an invocation of `b`, its poller's receives of 10, a
    // backoff call for each (every one has a failure), and for what is dead-lettered on its
    // last allowed receive, a DLQ copy and the poller's delete of it.
    let failing = |x: &mut Tally, records: f64, attempts: f64, dead: f64| {
        let invocations = records / b;
        let backoff = invocations.max((records - dead) / per_call);
        let copies = match dead > 0.0 {
            true => invocations_with_any(invocations, b, dead / records, dead),
            false => 0.0,
        };
        x.consumer_invocations += invocations;
        x.consumer_ms += invocations * batch_ms + (backoff + copies) * call_ms;
        x.add(Action::Receive, records / per_call);
        x.add(Action::ChangeVisibility, backoff);
        x.add(Action::SendBatch, copies);
        x.add(Action::Delete, copies);
        x.attempts += attempts;
        x.dead_lettered += dead;
    };
    // Records received and succeeding: invocations, receives and the poller's deletes.
    let succeeding = |x: &mut Tally, records: f64| {
        x.consumer_invocations += records / b;
        x.consumer_ms += records / b * batch_ms;
        x.add(Action::Receive, records / per_call);
        x.add(Action::Delete, records / per_call);
        x.attempts += records;
    };

    // 1. detection: each order's first delivery fails; its redelivery a second or two later
    // runs within the budget (10 % of the first deliveries and the floor), else is held with
    // the longest backoff (300 s: past the pause); one that ran fails and is held on its
    // third receive.
    let d = s.alarm_delay().min(s.seconds);
    let n_d = s.orders_per_second * d;
    let floor = s.retry_floor_per_minute * s.environments;
    let ran_again = (pct * n_d + floor * d / 60.0).min(n_d);
    // waiting[c]: orders in the main queue received c times
    let mut waiting = vec![0.0; mrc];
    let (records, dead) = match mrc {
        1 => (n_d, n_d),
        2 => (2.0 * n_d, n_d),
        _ => {
            waiting[2] = n_d - ran_again;
            match mrc {
                3 => (2.0 * n_d + ran_again, ran_again),
                _ => {
                    waiting[3] = ran_again;
                    (2.0 * n_d + ran_again, 0.0)
                }
            }
        }
    };
    let attempts = if mrc == 1 { n_d } else { n_d + ran_again };
    failing(&mut out.phases.failing, records, attempts, dead);
    out.detection_orders = n_d;

    // 2. paused, from the alarm's action at `d`
    let schedule = t.redriver_schedule_minutes * 60.0;
    let (every, window) = (s.probe_every(), s.probe_window());
    let per_probe = s.consumer_records_per_second * window;
    let (mut run_at, mut last_note) = (schedule / 2.0, -schedule / 2.0);
    let runs = &mut out.phases.runs;
    // runs before the pause find the DLQ empty, as on any day
    while run_at < d {
        scheduled_run(runs, s.breaker_run_ms + RESQ_RECEIVE_WAIT_MS);
        runs.add(Action::Receive, 1.0);
        runs.add(Action::S3Put, 1.0);
        (last_note, run_at) = (run_at, run_at + schedule);
    }
    alarm_action(runs, s.breaker_run_ms);
    let (mut last_probe, mut arrived_until) = (d, d);
    let mut resume_at = f64::INFINITY;
    while run_at < resume_at {
        let dead_so_far = out.phases.failing.dead_lettered + out.phases.probes.dead_lettered;
        let runs = &mut out.phases.runs;
        scheduled_run(runs, s.breaker_run_ms);
        out.paused_runs += 1.0;
        if run_at - last_note >= s.archive_sweep_seconds {
            // a sweep: the DLQ read through (held for the run, released at its end), the
            // last receive empty after its long poll, then the note
            runs.add(Action::Receive, dead_so_far / per_call + 1.0);
            runs.add(Action::ChangeVisibility, dead_so_far / per_call);
            runs.add(Action::S3Put, 1.0);
            runs.redriver_ms += dead_so_far / s.dlq_read_per_second * 1000.0 + RESQ_RECEIVE_WAIT_MS;
            out.sweeps += 1.0;
            last_note = run_at;
        }
        if run_at - last_probe >= every {
            // record the probe, enable, ask until Lambda says Enabled, the window, disable,
            // record the pause again
            consumer_act(runs);
            consumer_act(runs);
            runs.add(
                Action::GetMapping,
                (s.mapping_enabling_seconds / PROBE_POLL_SECONDS).ceil(),
            );
            runs.redriver_ms += (s.mapping_enabling_seconds + window) * 1000.0;
            last_probe = run_at;
            if run_at < s.seconds {
                waiting[0] += s.orders_per_second * (run_at - arrived_until);
                arrived_until = run_at;
                let visible: f64 = waiting.iter().sum();
                let received = per_probe.min(visible);
                let p = if visible > 0.0 {
                    received / visible
                } else {
                    0.0
                };
                let first = p * waiting[0];
                let again =
                    (received - first).min(pct * first + s.retry_floor_per_minute * s.environments);
                let dead = p * waiting[mrc - 1];
                for c in (0..mrc).rev() {
                    let moved = p * waiting[c];
                    waiting[c] -= moved;
                    if c + 1 < mrc {
                        waiting[c + 1] += moved;
                    }
                }
                failing(&mut out.phases.probes, received, first + again, dead);
                out.failing_probes += 1.0;
            } else {
                // the downstream is back: this probe's records succeed (they are the
                // backlog's), the alarm goes OK a period and the metric's lag later, and its
                // action resumes the consumer
                resume_at = run_at + window + s.alarm_delay();
            }
        }
        run_at += schedule;
    }
    alarm_action(&mut out.phases.runs, s.breaker_run_ms);
    out.resumed_after = resume_at - s.seconds;

    // 3. recovery: the backlog once each, then the DLQ at the climb
    waiting[0] += s.orders_per_second * (s.seconds - arrived_until).max(0.0);
    succeeding(&mut out.phases.backlog, waiting.iter().sum());
    let base = t.redrive_rate_per_second;
    let margin = resq::config::DEFAULT_DEADLINE_MARGIN_MS as f64 / 1000.0;
    let per_run = climb_replays(base, s.rate_max, t.redriver_timeout_seconds - margin);
    let receive_share = (m.resq_requests_per_redrive - 2.0 / per_call).max(0.0);
    let mut left = out.phases.failing.dead_lettered + out.phases.probes.dead_lettered;
    let x = &mut out.phases.drain;
    while left > 0.0 {
        let k = left.min(per_run);
        let seconds = climb_seconds(base, s.rate_max, k);
        scheduled_run(
            x,
            s.breaker_run_ms + seconds * 1000.0 + RESQ_RECEIVE_WAIT_MS,
        );
        for _ in 0..(seconds / recheck_seconds()) as usize {
            breaker_read(x);
        }
        x.add(Action::Receive, k * receive_share);
        x.add(Action::SendBatch, k / per_call);
        x.add(Action::Delete, k / per_call);
        x.replayed += k;
        succeeding(x, k);
        left -= k;
        out.drain_runs += 1.0;
    }
    if out.drain_runs > 0.0 {
        // the last drain run reached the end of the DLQ: its note
        x.add(Action::S3Put, 1.0);
    }
    out
}

/// The seed design's outage at `s`.
pub fn seed_outage(m: &Measured, t: &Template, s: &Scenario) -> Phases {
    let n = s.orders();
    let (b, per_call, mrc) = (t.batch_size.max(1.0), MAX_BATCH as f64, t.max_receive_count);
    let rate = t.redrive_rate_per_second;
    let schedule = t.redriver_schedule_minutes * 60.0;
    let runs_during = s.seconds / schedule;
    let during = (rate * t.redriver_timeout_seconds * runs_during).min(n);
    let drain_runs = (n / rate / schedule).ceil();
    let sleep_ms = 1000.0 / rate;
    let receive_share = (m.seed_requests_per_redrive - 1.0 - 1.0 / per_call).max(0.0);
    let replay = |x: &mut Tally, k: f64| {
        x.redriver_ms += k * (m.seed_redrive_ms + sleep_ms);
        x.add(Action::Send, k);
        x.add(Action::Receive, k * receive_share);
        x.add(Action::Delete, k / per_call);
        x.replayed += k;
    };
    let mut p = Phases::default();
    let deliveries = (n + during) * mrc;
    let x = &mut p.failing;
    x.consumer_invocations += deliveries / b;
    x.consumer_ms += deliveries / b * m.seed_batch_ms.ceil();
    x.add(Action::Receive, deliveries / per_call);
    x.attempts += deliveries;
    x.dead_lettered += n + during;
    replay(&mut p.replays_during, during);
    p.replays_during.redriver_invocations += runs_during;
    replay(&mut p.drain, n);
    p.drain.redriver_invocations += drain_runs;
    let x = &mut p.drain;
    x.consumer_invocations += n / b;
    x.consumer_ms += n / b * m.seed_batch_ms.ceil();
    x.add(Action::Receive, n / per_call);
    x.add(Action::Delete, n / per_call);
    x.attempts += n;
    p
}

/// What the soak measured of its outage (`bench/outage-profile.json`, written by the soak's
/// outage phase): requests by action, the functions' invocations and time, over the orders
/// sent during its outage.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutageProfile {
    /// The soak's order rate.
    pub orders_per_second: f64,
    /// Its outage's length, s.
    pub outage_seconds: f64,
    /// Orders sent during its outage.
    pub orders: f64,
    /// The functions' requests by `service:Action`.
    pub requests: BTreeMap<String, f64>,
    /// The requests of the soak's stand-in for Lambda's SQS poller (receives and deletes; it
    /// long-polls 1 s where Lambda's pollers wait up to 20 s, and not at all while the mapping
    /// is disabled): billed to the queue's owner like the functions' own.
    #[serde(default)]
    pub poller_requests: BTreeMap<String, f64>,
    /// Consumer invocations.
    pub consumer_invocations: f64,
    /// Consumer time, ms.
    pub consumer_millis: f64,
    /// Redriver invocations.
    pub redriver_invocations: f64,
    /// Redriver time, ms.
    pub redriver_millis: f64,
    /// Orders that reached the DLQ.
    pub dead_lettered: f64,
    /// Replays.
    pub replayed: f64,
}

/// Where the soak writes its outage's profile, from the repository's root.
pub const PROFILE_PATH: &str = "bench/outage-profile.json";

impl OutageProfile {
    /// A profile from its JSON.
    pub fn parse(text: &str) -> Result<Self, String> {
        let p: Self = serde_json::from_str(text).map_err(|e| format!("outage profile: {e}"))?;
        if !(p.orders > 0.0 && p.outage_seconds > 0.0 && p.orders_per_second > 0.0) {
            return Err(
                "outage profile: orders, outageSeconds and ordersPerSecond must be positive".into(),
            );
        }
        Ok(p)
    }

    /// The profile at `path`, `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Self>, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// As a tally (no attempts: the profile does not say), and the keys no action prices.
    fn tally(&self) -> (Tally, Vec<String>) {
        let mut x = Tally::default();
        let mut unknown = Vec::new();
        for (key, n) in self.requests.iter().chain(&self.poller_requests) {
            match Action::of_key(key) {
                Some(a) => x.add(a, *n),
                None => unknown.push(key.clone()),
            }
        }
        x.consumer_invocations = self.consumer_invocations;
        x.consumer_ms = self.consumer_millis;
        x.redriver_invocations = self.redriver_invocations;
        x.redriver_ms = self.redriver_millis;
        x.dead_lettered = self.dead_lettered;
        x.replayed = self.replayed;
        (x, unknown)
    }

    /// The scenario at the soak's own shape (its rate and length, the rest as `s`).
    pub fn shape(&self, s: &Scenario) -> Scenario {
        Scenario {
            orders_per_second: self.orders_per_second,
            seconds: self.outage_seconds,
            ..*s
        }
    }
}

/// resq's outage at `s` from a soak's measured profile, by phase, and the keys it had that no
/// action prices.
///
/// Each measured figure (requests of an action, invocations, time, dead letters, replays) is
/// split as the model splits it at the soak's own shape ([`OutageProfile::shape`]): the part
/// the probes and the runs make (they grow with the outage's length) is scaled by the
/// scenario's seconds ÷ the soak's, the rest (detection, backlog, drain: they grow with the
/// orders) by the scenario's orders ÷ the soak's. The scaled figure is then shared among the
/// phases as the model at `s` shares it (all to the runs when the model has none). The
/// downstream attempts are the model's (the profile does not count them).
pub fn from_profile(
    p: &OutageProfile,
    m: &Measured,
    t: &Template,
    s: &Scenario,
) -> (Phases, Vec<String>) {
    let (measured, unknown) = p.tally();
    let measured = measured.to_array();
    let soak = resq_outage(m, t, &p.shape(s)).phases;
    let (by_time, by_orders) = (soak.by_time().to_array(), soak.by_orders().to_array());
    let mut out = resq_outage(m, t, s).phases;
    let total = out.total().to_array();
    let (orders_ratio, time_ratio) = (s.orders() / p.orders, s.seconds / p.outage_seconds);
    let mut parts: Vec<[f64; FIELDS]> = out.parts().iter().map(|x| x.to_array()).collect();
    for i in (0..FIELDS).filter(|i| *i != ATTEMPTS) {
        let whole = by_time[i] + by_orders[i];
        let share = if whole > 0.0 { by_time[i] / whole } else { 0.0 };
        let scaled = measured[i] * ((1.0 - share) * orders_ratio + share * time_ratio);
        for (k, part) in parts.iter_mut().enumerate() {
            part[i] = match total[i] > 0.0 {
                true => scaled * part[i] / total[i],
                // the runs' part (index 2) takes what the model has nowhere
                false if k == 2 => scaled,
                false => 0.0,
            };
        }
    }
    for (x, v) in out.parts_mut().into_iter().zip(parts) {
        *x = Tally::from_array(v);
    }
    (out, unknown)
}

/// One figure of the soak's profile against the model at the soak's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    /// What.
    pub name: &'static str,
    /// The profile's.
    pub measured: f64,
    /// The model's.
    pub modelled: f64,
}

impl Agreement {
    /// |measured − modelled| ÷ modelled.
    pub fn error(&self) -> f64 {
        (self.measured - self.modelled).abs() / self.modelled.abs().max(f64::MIN_POSITIVE)
    }

    /// Within [`AGREEMENT_TOLERANCE`].
    pub fn holds(&self) -> bool {
        self.error() <= AGREEMENT_TOLERANCE
    }
}

/// How far the profile and the model may differ on what makes the bill (SQS requests and
/// consumer invocations per order, the bill per order): 25 %.
pub const AGREEMENT_TOLERANCE: f64 = 0.25;

/// The profile against the model at the soak's shape: SQS requests per order, consumer
/// invocations per order, the bill per order ($ per million orders).
pub fn agreement(p: &OutageProfile, m: &Measured, t: &Template, s: &Scenario) -> [Agreement; 3] {
    let (measured, _) = p.tally();
    let model = resq_outage(m, t, &p.shape(s)).phases.total();
    let orders = p.orders;
    [
        Agreement {
            name: "SQS requests per order",
            measured: measured.sqs_requests() / orders,
            modelled: model.sqs_requests() / orders,
        },
        Agreement {
            name: "consumer invocations per order",
            measured: measured.consumer_invocations / orders,
            modelled: model.consumer_invocations / orders,
        },
        Agreement {
            name: "bill per million orders, $",
            measured: measured.dollars(t) / orders * 1e6,
            modelled: model.dollars(t) / orders * 1e6,
        },
    ]
}

/// A template's CloudWatch alarms and dashboards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Monitoring {
    /// Alarms (`AWS::CloudWatch::Alarm`) in the template.
    pub alarms: usize,
    /// Of those, behind a resource condition (created only when it holds).
    pub conditional_alarms: usize,
    /// Alarm metrics at standard resolution of the unconditional alarms.
    pub standard_metrics: usize,
    /// Alarm metrics at high resolution (a period under 60 s) of the unconditional alarms.
    pub high_resolution_metrics: usize,
    /// Alarm metrics of the conditional alarms.
    pub conditional_metrics: usize,
    /// Composite alarms.
    pub composite_alarms: usize,
    /// Dashboards.
    pub dashboards: usize,
}

impl Monitoring {
    /// The unconditional alarms and the dashboards, $ a month.
    pub fn dollars(&self) -> f64 {
        self.standard_metrics as f64 * ALARM_METRIC_MONTH
            + self.high_resolution_metrics as f64 * HIGH_RESOLUTION_ALARM_METRIC_MONTH
            + self.composite_alarms as f64 * COMPOSITE_ALARM_MONTH
            + self.dashboards as f64 * DASHBOARD_MONTH
    }
}

/// The alarms and dashboards of a CloudFormation template in YAML, read line by line: a
/// resource is a key indented two spaces under `Resources:`; an alarm reads one metric, or
/// each `MetricStat` of its metric math; a `Period:` under 60 makes it high resolution.
pub fn monitoring(template: &str) -> Monitoring {
    let mut out = Monitoring::default();
    let mut in_resources = false;
    let mut block: Vec<&str> = Vec::new();
    let flush = |block: &mut Vec<&str>, out: &mut Monitoring| {
        let has = |s: &str| block.iter().any(|l| l.trim() == s);
        if has("Type: AWS::CloudWatch::Dashboard") {
            out.dashboards += 1;
        } else if has("Type: AWS::CloudWatch::CompositeAlarm") {
            out.composite_alarms += 1;
        } else if has("Type: AWS::CloudWatch::Alarm") {
            out.alarms += 1;
            let stats = block.iter().filter(|l| l.trim() == "MetricStat:").count();
            let metrics = stats.max(1);
            let high = block.iter().any(|l| {
                l.trim()
                    .strip_prefix("Period:")
                    .and_then(|v| v.trim().parse::<u32>().ok())
                    .is_some_and(|p| p < 60)
            });
            // a resource's own condition sits four spaces in
            if block.iter().any(|l| l.starts_with("    Condition:")) {
                out.conditional_alarms += 1;
                out.conditional_metrics += metrics;
            } else if high {
                out.high_resolution_metrics += metrics;
            } else {
                out.standard_metrics += metrics;
            }
        }
        block.clear();
    };
    for line in template.lines() {
        let top = !line.starts_with(' ') && !line.trim().is_empty() && !line.starts_with('#');
        if top {
            flush(&mut block, &mut out);
            in_resources = line.trim_end() == "Resources:";
            continue;
        }
        if !in_resources {
            continue;
        }
        let key = line.len() > 2
            && line.starts_with("  ")
            && !line[2..].starts_with(' ')
            && !line[2..].starts_with('#')
            && line.trim_end().ends_with(':');
        if key {
            flush(&mut block, &mut out);
        }
        block.push(line);
    }
    flush(&mut block, &mut out);
    out
}

/// The custom metrics the functions' EMF lines create: each metric name with each set of
/// dimension values is one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CustomMetrics {
    /// Written on every invocation (or cold start, or run).
    pub always: usize,
    /// `Archived` by reason, one per reason a function can archive for (created in the hours
    /// such an archive happens).
    pub by_reason: usize,
    /// Names the contract (docs/design.md) gives that the code does not write yet, counted.
    pub named_only: Vec<&'static str>,
}

impl CustomMetrics {
    /// The ones always written, $ a month.
    pub fn dollars(&self) -> f64 {
        self.always as f64 * CUSTOM_METRIC_MONTH
    }

    /// Every one, every hour, $ a month (an upper bound).
    pub fn most_dollars(&self) -> f64 {
        (self.always + self.by_reason) as f64 * CUSTOM_METRIC_MONTH
    }
}

/// The consumer's metrics of issue 34's contract, counted even if the code stops writing them
/// (`TransientFailurePercent` is written only by an invocation whose handler ran a record).
pub const CONSUMER_CONTRACT_METRICS: [&str; 2] = [
    resq_consumer::account::RETRY_BUDGET_EXCEEDED,
    resq_consumer::account::TRANSIENT_FAILURE_PERCENT,
];

/// (name, dimension values) of every metric in EMF `lines`.
fn emf_metrics(lines: &[String], into: &mut BTreeSet<(String, String)>) {
    for line in lines {
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let blocks = doc["_aws"]["CloudWatchMetrics"].as_array().cloned();
        for block in blocks.unwrap_or_default() {
            for dims in block["Dimensions"].as_array().cloned().unwrap_or_default() {
                let mut values: Vec<String> = dims
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|k| k.as_str())
                    .map(|k| format!("{k}={}", doc[k]))
                    .collect();
                values.sort();
                for metric in block["Metrics"].as_array().cloned().unwrap_or_default() {
                    if let Some(name) = metric["Name"].as_str() {
                        into.insert((name.to_owned(), values.join(",")));
                    }
                }
            }
        }
    }
}

/// The custom metrics the consumer and the redriver write, counted from their own EMF lines:
/// an invocation's (every count the consumer reports even at 0), a run's (its counts, `Kept`
/// and `ConsumerPaused` with a consumer breaker), each function's `ColdStart`, and `Archived`
/// by each reason.
pub fn custom_metrics() -> CustomMetrics {
    use resq::metrics::{Metrics, cold_start_line};
    use resq::telemetry::{LogLevel, Names, Telemetry};
    use resq_consumer::account::{Tally as Ran, answer};
    let at = chrono::Utc::now();
    let level = LogLevel::Info;
    let (mut always, mut by_reason) = (BTreeSet::new(), BTreeSet::new());
    let mut named_only = Vec::new();
    let mut run = resq_redriver::Summary::new(false, 10.0);
    run.kept_in_flight = Some(0);
    run.consumer_paused = Some(false);
    let functions = [
        ("consumer", answer(&[], Vec::new(), &[Ran::Ran]).metrics),
        ("redriver", run.metrics()),
    ];
    for (function, metrics) in functions {
        let Ok(t) = Telemetry::of(Names::ORDERS, &format!("stk-{function}"), Some(256)) else {
            continue;
        };
        let mut lines = metrics.to_lines(&t, at, level);
        lines.push(cold_start_line(&t, at, level));
        emf_metrics(&lines, &mut always);
        let mut archived = Metrics::new(&[]);
        for reason in resq::reason::ArchiveReason::ALL {
            archived.add_archived(reason, 1);
        }
        let mut reasons = BTreeSet::new();
        emf_metrics(&archived.to_lines(&t, at, level), &mut reasons);
        by_reason.extend(
            reasons
                .into_iter()
                .filter(|(_, dims)| dims.contains("reason=")),
        );
        if function == "consumer" {
            let dims = format!(
                "function_name=\"{}\",service=\"{}\"",
                t.function_name, t.service
            );
            for name in CONSUMER_CONTRACT_METRICS {
                if always.insert((name.to_owned(), dims.clone())) {
                    named_only.push(name);
                }
            }
        }
    }
    CustomMetrics {
        always: always.len(),
        by_reason: by_reason.len(),
        named_only,
    }
}

/// The template the bench is built with.
pub const TEMPLATE: &str = include_str!("../../infra/template.yaml");

/// resq's fixed monthly cost: the template's alarms and dashboard, the custom metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Fixed {
    /// Alarms and dashboards.
    pub monitoring: Monitoring,
    /// Custom metrics.
    pub metrics: CustomMetrics,
}

impl Fixed {
    /// From the template the bench was built with and the functions' EMF lines.
    pub fn of_code() -> Self {
        Self {
            monitoring: monitoring(TEMPLATE),
            metrics: custom_metrics(),
        }
    }

    /// A month at the template's defaults (the metrics always written), $.
    pub fn dollars(&self) -> f64 {
        self.monitoring.dollars() + self.metrics.dollars()
    }
}

/// The outage's bills, both stacks, and resq's fixed monthly cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Bills {
    /// The outage.
    pub scenario: Scenario,
    /// resq as the model has it (its pause, probes and runs).
    pub model: ResqOutage,
    /// resq's bill by phase: the model's, or the profile's scaled.
    pub resq: Phases,
    /// The seed design's.
    pub seed: Phases,
    /// The soak's profile, when the bill is from it, and its keys no action prices.
    pub profile: Option<(OutageProfile, Vec<String>)>,
    /// Fixed monthly costs.
    pub fixed: Fixed,
    /// The template's defaults used.
    pub template: Template,
    /// The measured figures used.
    pub measured: Measured,
}

impl Bills {
    /// The bills at `s`, resq's from `profile` when there is one.
    pub fn new(m: &Measured, t: &Template, s: &Scenario, profile: Option<&OutageProfile>) -> Self {
        let model = resq_outage(m, t, s);
        let (resq, profile) = match profile {
            Some(p) => {
                let (resq, unknown) = from_profile(p, m, t, s);
                (resq, Some((p.clone(), unknown)))
            }
            None => (model.phases, None),
        };
        Self {
            scenario: *s,
            model,
            resq,
            seed: seed_outage(m, t, s),
            profile,
            fixed: Fixed::of_code(),
            template: *t,
            measured: *m,
        }
    }

    /// resq's outage bill ÷ the seed design's.
    pub fn ratio(&self) -> f64 {
        self.resq.dollars(&self.template) / self.seed.dollars(&self.template.seed())
    }

    /// The table's rows: (label, resq, seed design).
    pub fn rows(&self) -> Vec<[String; 3]> {
        let (t, s, r, q) = (&self.template, &self.scenario, &self.model, &self.seed);
        // the seed design's column at its own redriver's memory
        let ts = &self.template.seed();
        let usd = |x: &Tally, t: &Template| format!("${:.4}", x.dollars(t));
        let none = |x: &Tally, t: &Template| match x.dollars(t) > 0.0 {
            true => usd(x, t),
            false => "–".to_owned(),
        };
        let from = match &self.profile {
            Some((p, _)) => format!(
                "from the soak's profile ({} orders in {:.0} s, scaled)",
                grouped(p.orders),
                p.outage_seconds
            ),
            None => "from the code-derived model".to_owned(),
        };
        let (rt, st) = (self.resq.total(), q.total());
        let per_order = |x: &Tally| x.attempts / s.orders();
        vec![
            [
                format!(
                    "**one-hour downstream outage at {:.0} orders/s** ({} orders fail for an hour, then recover; resq {from}): `outage_cost_ratio` {:.2}",
                    s.orders_per_second,
                    grouped(s.orders()),
                    self.ratio()
                ),
                format!("**${:.4}**", rt.dollars(t)),
                format!("**${:.4}**", st.dollars(ts)),
            ],
            [
                format!(
                    "  failing deliveries: resq's until the pause ({:.0} s, {} orders, redeliveries within the retry budget); the seed's, {:.0} receives an order and each failing replay's",
                    s.alarm_delay(),
                    grouped(r.detection_orders),
                    t.max_receive_count
                ),
                usd(&self.resq.failing, t),
                usd(&q.failing, ts),
            ],
            [
                format!(
                    "  probes while paused: {:.0} windows of {:.0} s at {} records/s, failing",
                    r.failing_probes,
                    s.probe_window(),
                    grouped(s.consumer_records_per_second)
                ),
                usd(&self.resq.probes, t),
                none(&q.probes, ts),
            ],
            [
                format!(
                    "  redriver while paused: {:.0} scheduled runs (breaker reads, the probes' switching, {:.0} archive sweep(s)) and the alarm's 2 actions",
                    r.paused_runs, r.sweeps
                ),
                usd(&self.resq.runs, t),
                none(&q.runs, ts),
            ],
            [
                "  replays during the outage (they fail again)".into(),
                none(&self.resq.replays_during, t),
                usd(&q.replays_during, ts),
            ],
            [
                format!(
                    "  the main queue's backlog after recovery (resumed {:.0} s after the fix), one successful delivery an order",
                    r.resumed_after
                ),
                usd(&self.resq.backlog, t),
                none(&q.backlog, ts),
            ],
            [
                format!(
                    "  the DLQ's drain (replays and their deliveries): resq in {:.0} run(s) at the climb to {:.0}/s; the seed at {:.0}/s",
                    r.drain_runs, s.rate_max, t.redrive_rate_per_second
                ),
                usd(&self.resq.drain, t),
                usd(&q.drain, ts),
            ],
            [
                "  orders dead-lettered; replays; SQS requests billed; downstream attempts per order".into(),
                format!(
                    "{}; {}; {}; {:.2}",
                    grouped(rt.dead_lettered),
                    grouped(rt.replayed),
                    grouped(rt.sqs_requests()),
                    per_order(&rt)
                ),
                format!(
                    "{}; {}; {}; {:.2}",
                    grouped(st.dead_lettered),
                    grouped(st.replayed),
                    grouped(st.sqs_requests()),
                    per_order(&st)
                ),
            ],
            [
                "  resq's requests by action".into(),
                Action::ALL
                    .iter()
                    .filter(|a| rt.get(**a) > 0.0)
                    .map(|a| format!("{} {}", a.key(), grouped(rt.get(*a))))
                    .collect::<Vec<_>>()
                    .join(", "),
                "".into(),
            ],
            [
                format!(
                    "**fixed monthly cost**, not in the outage: {} alarms at the template's defaults ({} alarm metrics; {} more alarms behind a condition), {} dashboard(s), {} custom metrics from EMF ({} more: `Archived` by reason, in the hours it has data)",
                    self.fixed.monitoring.alarms - self.fixed.monitoring.conditional_alarms,
                    self.fixed.monitoring.standard_metrics
                        + self.fixed.monitoring.high_resolution_metrics,
                    self.fixed.monitoring.conditional_alarms,
                    self.fixed.monitoring.dashboards,
                    self.fixed.metrics.always,
                    self.fixed.metrics.by_reason,
                ),
                format!(
                    "**${:.2} a month** (up to ${:.2})",
                    self.fixed.dollars(),
                    self.fixed.monitoring.dollars() + self.fixed.metrics.most_dollars()
                ),
                "– (none built)".into(),
            ],
        ]
    }

    /// The assumptions, in words: the outage's and the fixed costs' lines.
    pub fn statement(&self) -> String {
        let (t, s) = (&self.template, &self.scenario);
        let mut out = vec![format!(
            "- Outage ({}): resq: the downstream-failing alarm acts a period ({:.0} s) and an assumed {:.0} s of metric lag after the outage starts; until then each order is received and fails, backed off, and its redeliveries run within the retry budget ({:.0} % of first deliveries + {:.0} a minute in each of {:.0} environments), the rest held {:.0} s unrun. The alarm's action pauses the consumer: orders wait in the main queue, no request for them. Scheduled runs (half a period after the outage's start, every {:.0} min) read the breaker (DescribeAlarms, the mapping, the pause log's newest key and entry, the main queue's retention and oldest age) and the keep lists and last sweep note, and stop: no DLQ receive, except the archive sweep every {:.0} s (a receive and a release per 10). A run at least {:.0} s after the pause's start or the last probe probes ({}): the mapping enabled (Lambda assumed to report it Enabled after {:.0} s, asked every {PROBE_POLL_SECONDS} s), {:.0} s at {} records/s, each probe taking the same share of every waiting order (first deliveries run and fail, redeliveries within the budget; an order on its {:.0}th receive is dead-lettered), then disabled, each switch recorded (an S3 PUT). The first probe after the fix succeeds, the alarm goes OK a period and the lag later and its action resumes the consumer; the backlog is received once each and succeeds; the next run replays the DLQ from {:.0}/s climbing by a quarter of the way to {:.0}/s every {:.0} s. The seed design: every order received {:.0} times and failing, moved to the DLQ by SQS; its redriver replays {:.0}/s (send each, sleep 1/rate) for its {:.0} s each run during the outage (each replay failing {:.0} times again) and the whole DLQ after it ({:.1} h). Each failing batch is billed the measured batch time (resq {:.1} ms plus {:.0} ms per SQS call its consumer makes, BatchProcessor {:.1} ms) whether or not its records ran (an upper bound for resq's held records); a redriver run that receives nothing is billed {:.0} ms (assumed), a probe its wait and window, a sweep its reads at {} messages/s. SQS: each request billed per 64 KiB chunk of its payload, an order assumed {MESSAGE_BYTES:.0} bytes with its attributes (a call of 10: {:.0} chunk); S3 LIST ${:.3} and GET ${:.4} per 1,000; GetMetricData ${:.2} per 1,000 metrics; Lambda's GetEventSourceMapping and UpdateEventSourceMapping free; log bytes left out (the EMF and log lines of the runs are a few KB each).",
            match &self.profile {
                Some(_) => "resq's counts from the soak's profile, scaled: see below",
                None => "the code-derived model, `bench/src/outage.rs`",
            },
            s.alarm_period_seconds,
            s.metric_lag_seconds,
            s.retry_budget_percent,
            s.retry_floor_per_minute,
            s.environments,
            resq_consumer::backoff::Backoff::default().cap.as_secs_f64(),
            t.redriver_schedule_minutes,
            s.archive_sweep_seconds,
            s.probe_every(),
            match s.probe_every() <= t.redriver_schedule_minutes * 60.0 {
                true => "each scheduled run, once the pause is that old".to_owned(),
                false => format!(
                    "every {:.0} s at most",
                    (s.probe_every() / (t.redriver_schedule_minutes * 60.0)).ceil()
                        * t.redriver_schedule_minutes
                        * 60.0
                ),
            },
            s.mapping_enabling_seconds,
            s.probe_window(),
            grouped(s.consumer_records_per_second),
            t.max_receive_count,
            t.redrive_rate_per_second,
            s.rate_max,
            recheck_seconds(),
            t.max_receive_count,
            t.redrive_rate_per_second,
            t.redriver_timeout_seconds,
            t.max_receive_count,
            s.orders() / t.redrive_rate_per_second / 3600.0,
            self.measured_batch_ms().0,
            Assumptions::DEFAULT.sqs_call_ms,
            self.measured_batch_ms().1,
            s.breaker_run_ms,
            grouped(s.dlq_read_per_second),
            sqs_chunks(MAX_BATCH as f64 * MESSAGE_BYTES),
            S3_LIST * 1000.0,
            S3_GET * 1000.0,
            GET_METRIC_DATA * 1000.0,
        )];
        if let Some((p, unknown)) = &self.profile {
            out.push(format!(
                "- The soak's profile ({PROFILE_PATH}: {} orders at {:.0}/s in a {:.0} s outage): each of its figures is split as the model splits it at the soak's shape, the probes' and runs' part scaled by {:.0} s ÷ {:.0} s and the rest by {} ÷ {} orders, then shared among the phases as the model shares it at {:.0} orders/s for {:.0} s; downstream attempts are the model's.{}",
                grouped(p.orders),
                p.orders_per_second,
                p.outage_seconds,
                s.seconds,
                p.outage_seconds,
                grouped(s.orders()),
                grouped(p.orders),
                s.orders_per_second,
                s.seconds,
                match unknown.is_empty() {
                    true => String::new(),
                    false => format!(" Not priced (no action here): {}.", unknown.join(", ")),
                }
            ));
        }
        let (mo, me) = (&self.fixed.monitoring, &self.fixed.metrics);
        out.push(format!(
            "- Fixed monthly cost (infra/template.yaml as built, the functions' EMF lines): {} alarms ({} behind a resource condition, off at the defaults), {} alarm metrics at standard resolution at ${ALARM_METRIC_MONTH:.2} each (a metric-math alarm counts each metric it reads), {} at high resolution, {} composite; {} dashboard(s) at ${DASHBOARD_MONTH:.2}; {} custom metrics always written (metric names × dimension values of both functions' counts and ColdStart{}) at ${CUSTOM_METRIC_MONTH:.2}, and up to {} more (`Archived` by reason, prorated by the hours it has data). No free tier.",
            mo.alarms,
            mo.conditional_alarms,
            mo.standard_metrics,
            mo.high_resolution_metrics,
            mo.composite_alarms,
            mo.dashboards,
            me.always,
            match me.named_only.is_empty() {
                true => String::new(),
                false => format!(
                    "; {} named by the contract and not written by this code yet",
                    me.named_only.join(" and ")
                ),
            },
            me.by_reason,
        ));
        out.join("\n")
    }

    fn measured_batch_ms(&self) -> (f64, f64) {
        (self.measured.resq_batch_ms, self.measured.seed_batch_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Measured = Measured::LATEST;
    const T: Template = Template::DEFAULT;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    fn lasting(seconds: f64) -> Scenario {
        Scenario {
            seconds,
            ..Scenario::DEFAULT
        }
    }

    #[test]
    fn an_sqs_request_is_billed_per_64_kib_chunk_of_its_payload() {
        assert_eq!(sqs_chunks(0.0), 1.0);
        assert_eq!(sqs_chunks(10.0 * 300.0), 1.0); // ten ~300-byte orders
        assert_eq!(sqs_chunks(65_536.0), 1.0);
        assert_eq!(sqs_chunks(65_537.0), 2.0);
        assert_eq!(sqs_chunks(262_144.0), 4.0); // 256 KiB, SQS's own example
        assert_eq!(sqs_chunks(10.0 * 7.0 * 1024.0), 2.0); // ten 7 KiB messages
        // at 1 KiB an order, a call of ten is one request; calls without messages are one
        assert_eq!(Action::Receive.billed_per_call(), 1.0);
        assert_eq!(Action::SendBatch.billed_per_call(), 1.0);
        assert_eq!(Action::Delete.billed_per_call(), 1.0);
        let mut x = Tally::default();
        x.add(Action::Receive, 3.0);
        x.add(Action::DescribeAlarms, 5.0);
        assert_eq!(x.sqs_requests(), 3.0);
        assert!(close(x.dollars(&T), 3.0 * 0.4e-6 + 5.0 * 0.01e-3));
    }

    #[test]
    fn the_climb_replays_by_hand() {
        // 10/s for 30 s, then 57.5, 105, 152.5, then 200
        assert!(close(climb_replays(10.0, 200.0, 30.0), 300.0));
        assert!(close(
            climb_replays(10.0, 200.0, 120.0),
            300.0 + 1725.0 + 3150.0 + 4575.0
        ));
        // a five-minute run averages 152.5/s
        assert!(close(climb_replays(10.0, 200.0, 300.0), 45_750.0));
        // no ceiling above the base: no climb
        assert!(close(climb_replays(10.0, 10.0, 100.0), 1000.0));
        assert!(close(climb_seconds(10.0, 200.0, 300.0), 30.0));
        assert!(close(climb_seconds(10.0, 200.0, 2025.0), 60.0));
        assert!(close(
            climb_seconds(10.0, 200.0, 683.0),
            30.0 + 383.0 / 57.5
        ));
        assert!(close(climb_seconds(10.0, 200.0, 45_750.0), 300.0));
        assert!(close(
            climb_seconds(10.0, 200.0, climb_replays(10.0, 200.0, 77.0)),
            77.0
        ));
    }

    #[test]
    fn detection_runs_each_order_once_and_its_retries_within_the_budget_by_hand() {
        let r = resq_outage(&M, &T, &Scenario::DEFAULT);
        let x = &r.phases.failing;
        // 120 s at 100/s; retries: 10 % of 12,000 and 10 a minute in 5 environments for 2 min
        assert!(close(r.detection_orders, 12_000.0));
        let records = 2.0 * 12_000.0 + 1_300.0;
        assert!(close(x.consumer_invocations, records / 10.0));
        assert!(close(x.get(Action::Receive), 2_530.0));
        assert!(close(x.get(Action::ChangeVisibility), 2_530.0));
        assert!(close(x.attempts, 13_300.0));
        assert_eq!(
            x.dead_lettered + x.get(Action::SendBatch) + x.get(Action::Delete),
            0.0
        );
        // 22 ms a batch (21.4 rounded up) and 10 ms for its backoff call
        assert!(close(x.consumer_ms, 2_530.0 * 32.0));
    }

    #[test]
    fn a_ten_minute_outage_has_one_failing_probe_by_hand() {
        let r = resq_outage(&M, &T, &lasting(600.0));
        // runs at 150 (paused 30 s: no probe), 450 (probe, failing), 750 (probe, the fix is
        // in: the alarm goes OK at 750 + 5 + 120)
        assert_eq!((r.paused_runs, r.failing_probes, r.sweeps), (3.0, 1.0, 0.0));
        assert!(close(r.resumed_after, 275.0));
        // at 450: 33,000 fresh orders and the 12,000 held since detection; 5,000 received
        // (1/9 of each): 3,666.7 first deliveries, of the 1,333.3 redeliveries 366.7 + 50 run
        let p = &r.phases.probes;
        assert!(close(p.consumer_invocations, 500.0));
        assert!(close(p.get(Action::Receive), 500.0));
        assert!(close(p.get(Action::ChangeVisibility), 500.0));
        assert!(close(
            p.attempts,
            33_000.0 / 9.0 + 33_000.0 * 0.1 / 9.0 + 50.0
        ));
        assert_eq!(p.dead_lettered, 0.0);
        assert!(close(p.consumer_ms, 500.0 * 32.0));
        // the runs: 3 scheduled, 2 alarm actions; 2 probes each enabled (10 asks at 0.5 s
        // for 5 s), 5 s, disabled. Six acts (pause, resume, each probe's start and end),
        // each reading the pause log again, switching the mapping and recording it
        let x = &r.phases.runs;
        assert_eq!(x.redriver_invocations, 5.0);
        assert!(close(x.redriver_ms, 5.0 * 500.0 + 2.0 * 10_000.0));
        assert_eq!(x.get(Action::DescribeAlarms), 5.0);
        assert_eq!(x.get(Action::GetMetricData), 5.0);
        assert_eq!(x.get(Action::QueueAttributes), 5.0);
        assert_eq!(x.get(Action::GetMapping), 5.0 + 2.0 * 10.0);
        assert_eq!(x.get(Action::UpdateMapping), 6.0);
        assert_eq!(x.get(Action::S3Put), 6.0);
        // the breaker's reads (5), the runs' sweep notes (3), the acts' (6)
        assert_eq!(x.get(Action::S3Get), 5.0 + 3.0 + 6.0);
        assert!(close(
            x.get(Action::S3List),
            5.0 + 3.0 * (2.0 + 13.0 / 24.0) + 2.0 * 6.0
        ));
        // paused runs do not receive from the DLQ (no sweep due)
        assert_eq!(x.get(Action::Receive), 0.0);
        // the backlog: every order of the outage once, successfully; nothing to drain
        let b = &r.phases.backlog;
        assert!(close(b.attempts, 60_000.0));
        assert!(close(b.get(Action::Receive), 6_000.0));
        assert!(close(b.get(Action::Delete), 6_000.0));
        assert_eq!((r.drain_runs, r.phases.drain), (0.0, Tally::default()));
    }

    #[test]
    fn an_order_on_its_last_receive_in_a_probe_is_dead_lettered_and_drained_by_hand() {
        let r = resq_outage(&M, &T, &lasting(900.0));
        assert_eq!(r.failing_probes, 2.0);
        // the 1,300 received three times in detection: 1/9 of them a fourth time at 450,
        // 1/15 of those (75,000 waiting at 750) a fifth: dead-lettered
        let dead = 1_300.0 / 9.0 / 15.0;
        assert!(close(r.phases.probes.dead_lettered, dead));
        // each copy is a SendMessageBatch of an invocation that has one, the poller's delete
        // of it another
        let with = 500.0 * (1.0 - (1.0 - dead / 5_000.0).powi(10));
        assert!(close(r.phases.probes.get(Action::SendBatch), with));
        assert!(close(r.phases.probes.get(Action::Delete), with));
        // the drain: one run replays them at 10/s (under 30 s: no climb, no recheck)
        let x = &r.phases.drain;
        assert_eq!(r.drain_runs, 1.0);
        assert!(close(x.replayed, dead));
        assert!(close(x.redriver_ms, 500.0 + dead / 10.0 * 1000.0 + 1000.0));
        assert!(close(
            x.get(Action::Receive),
            dead * (M.resq_requests_per_redrive - 0.2) + dead / 10.0
        ));
        assert!(close(x.get(Action::SendBatch), dead / 10.0));
        assert!(close(x.get(Action::Delete), 2.0 * dead / 10.0));
        assert_eq!(x.get(Action::S3Put), 1.0); // the sweep note: it read the DLQ to its end
        assert!(close(x.attempts, dead));
        // every order succeeds once in the end: the backlog's and the replays'
        assert!(close(r.phases.backlog.attempts + x.attempts, 90_000.0));
    }

    #[test]
    fn the_seed_design_by_hand() {
        let p = seed_outage(&M, &T, &Scenario::DEFAULT);
        // 12 runs replay 10/s for 300 s: 36,000, failing 5 times again; after the outage
        // 360,000 replays in 120 runs
        let t = p.total();
        assert!(close(p.failing.attempts, 396_000.0 * 5.0));
        assert!(close(t.dead_lettered, 396_000.0));
        assert!(close(t.replayed, 396_000.0));
        // receives: 1.98M failing deliveries and 360,000 successful, in tens; the redriver's
        // 0.102 a replay; sends one each; deletes a tenth each, and the poller's
        let sqs = 198_000.0 + 36_000.0 + 396_000.0 * (0.102 + 1.0 + 0.1) + 36_000.0;
        assert!(close(t.sqs_requests(), sqs));
        assert!(close(sqs.round(), 745_992.0));
        let gb = |ms: f64| ms / 1000.0 * 0.25 * 0.0000133334;
        let dollars = (234_000.0 + 12.0 + 120.0) * 0.2e-6
            + gb(234_000.0 * 202.0)
            + gb(396_000.0 * (10.36 + 100.0))
            + sqs * 0.4e-6;
        assert!(
            close(p.dollars(&T), dollars),
            "{} vs {dollars}",
            p.dollars(&T)
        );
        assert_eq!(
            p.probes.dollars(&T) + p.runs.dollars(&T) + p.backlog.dollars(&T),
            0.0
        );
    }

    #[test]
    fn at_the_issues_scenario_resq_costs_less_than_the_seed_design() {
        let r = resq_outage(&M, &T, &Scenario::DEFAULT);
        let b = Bills::new(&M, &T, &Scenario::DEFAULT, None);
        // probes at 450, 750, …, 3450 fail; 3750 succeeds; runs 150 … 3750
        assert_eq!(
            (r.failing_probes, r.paused_runs, r.sweeps),
            (11.0, 13.0, 1.0)
        );
        // the one sweep (at 3450, an hour after the note of the run at -150) is the only DLQ
        // read while paused: a receive and a release per 10 of what was dead-lettered by then
        let x = &r.phases.runs;
        let dead = r.phases.probes.dead_lettered;
        assert!(x.get(Action::Receive) >= 1.0 && x.get(Action::Receive) <= dead / 10.0 + 1.0);
        assert!(close(
            x.get(Action::Receive) - 1.0,
            x.get(Action::ChangeVisibility)
        ));
        assert_eq!(r.phases.replays_during, Tally::default());
        assert!(dead < 0.01 * 360_000.0, "{dead}");
        assert!(r.phases.total().attempts / 360_000.0 <= 1.5);
        assert!(b.ratio() <= 1.0, "{}", b.ratio());
        assert!(close(
            b.ratio(),
            r.phases.dollars(&T) / seed_outage(&M, &T, &Scenario::DEFAULT).dollars(&T)
        ));
        // the table: one row per part, the total first
        let rows = b.rows();
        assert!(rows[0][0].contains("`outage_cost_ratio`"));
        assert!(rows.iter().all(|r| r.iter().all(|c| !c.contains('|'))));
        assert!(b.statement().contains("- Fixed monthly cost"));
    }

    fn profile(orders_per_second: f64, seconds: f64, x: &Tally) -> OutageProfile {
        OutageProfile {
            orders_per_second,
            outage_seconds: seconds,
            orders: orders_per_second * seconds,
            requests: Action::ALL
                .iter()
                .map(|a| (a.key().to_owned(), x.get(*a)))
                .collect(),
            poller_requests: BTreeMap::new(),
            consumer_invocations: x.consumer_invocations,
            consumer_millis: x.consumer_ms,
            redriver_invocations: x.redriver_invocations,
            redriver_millis: x.redriver_ms,
            dead_lettered: x.dead_lettered,
            replayed: x.replayed,
        }
    }

    const FIXTURE: &str = include_str!("testdata/outage-profile.json");

    #[test]
    fn a_profile_is_scaled_by_orders_and_its_probes_and_runs_by_time_by_hand() {
        let s = Scenario::DEFAULT;
        // at the scenario's own shape the profile is the bill
        let own = profile(
            100.0,
            3600.0,
            &Tally {
                attempts: 0.0,
                ..resq_outage(&M, &T, &s).phases.total()
            },
        );
        let (p, _) = from_profile(&own, &M, &T, &s);
        let (got, want) = (p.total().to_array(), own.tally().0.to_array());
        for i in (0..FIELDS).filter(|i| *i != ATTEMPTS) {
            assert!(
                close(got[i], want[i]),
                "field {i}: {} vs {}",
                got[i],
                want[i]
            );
        }
        // half as long at the same rate: twice the orders and twice the time, so twice each
        let fixture = OutageProfile::parse(FIXTURE).unwrap();
        let half = OutageProfile {
            orders_per_second: 100.0,
            outage_seconds: 1800.0,
            orders: 180_000.0,
            ..fixture.clone()
        };
        let (p, unknown) = from_profile(&half, &M, &T, &s);
        assert_eq!(unknown, vec!["sts:GetCallerIdentity".to_owned()]);
        assert!(close(p.total().get(Action::Receive), 2.0 * 3500.0));
        assert!(close(p.total().consumer_ms, 2.0 * 92_000.0));
        // half the rate for the hour: twice the orders, the same time. The mapping's switches
        // are the probes' and the alarm's only (time): as measured; a send the model never
        // makes is scaled by the orders and put with the runs
        let mut slow = OutageProfile {
            orders_per_second: 50.0,
            outage_seconds: 3600.0,
            orders: 180_000.0,
            ..fixture
        };
        slow.requests.insert("sqs:SendMessage".into(), 10.0);
        let (p, _) = from_profile(&slow, &M, &T, &s);
        assert!(close(p.total().get(Action::UpdateMapping), 8.0));
        assert!(close(p.runs.get(Action::Send), 20.0));
        assert!(close(p.total().get(Action::Send), 20.0));
        // the attempts are the model's
        assert!(close(
            p.total().attempts,
            resq_outage(&M, &T, &s).phases.total().attempts
        ));
    }

    #[test]
    fn the_profile_and_the_model_agree_within_the_tolerance() {
        // a hand-written profile of a soak at 20 orders/s for 15 minutes
        let p = OutageProfile::parse(FIXTURE).unwrap();
        let rows = agreement(&p, &M, &T, &Scenario::DEFAULT);
        for a in &rows {
            assert!(a.holds(), "{}: {} vs {}", a.name, a.measured, a.modelled);
        }
        // three times the receives the model has is not within it
        let mut off = p.clone();
        *off.requests.get_mut("sqs:ReceiveMessage").unwrap() *= 3.0;
        let rows = agreement(&off, &M, &T, &Scenario::DEFAULT);
        assert!(!rows[0].holds(), "{:?}", rows[0]);
        assert!(OutageProfile::parse(r#"{"ordersPerSecond": 0}"#).is_err());
    }

    #[test]
    fn the_soaks_profile_agrees_with_the_model_when_there_is_one() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("outage-profile.json");
        let Some(p) = OutageProfile::read(&path).unwrap() else {
            eprintln!(
                "{}: none yet; the fixture's test stands for it",
                path.display()
            );
            return;
        };
        for a in agreement(&p, &M, &T, &Scenario::DEFAULT) {
            assert!(
                a.holds(),
                "{}: measured {} vs modelled {}",
                a.name,
                a.measured,
                a.modelled
            );
        }
    }

    #[test]
    fn alarms_and_dashboards_are_counted_by_hand() {
        let template = "\
Parameters:
  Period:
    Type: Number
    Default: 10
Resources:
  Simple:
    Type: AWS::CloudWatch::Alarm
    Properties:
      Period: 60
  Math:
    Type: AWS::CloudWatch::Alarm
    Properties:
      Metrics:
        - Id: a
          MetricStat:
            Period: 60
        - Id: b
          MetricStat:
            Period: 60
        - Id: c
          Expression: a + b
  # a comment
  Fast:
    Type: AWS::CloudWatch::Alarm
    Properties:
      Period: 10
  Topic:
    Type: AWS::CloudWatch::Alarm
    Condition: HasTopic
    Properties:
      Metrics:
        - Id: a
          MetricStat:
            Period: 60
  Both:
    Type: AWS::CloudWatch::CompositeAlarm
  Board:
    Type: AWS::CloudWatch::Dashboard
  Queue:
    Type: AWS::SQS::Queue
Outputs:
  Period:
    Value: 1
";
        let m = monitoring(template);
        assert_eq!(
            m,
            Monitoring {
                alarms: 4,
                conditional_alarms: 1,
                standard_metrics: 3,
                high_resolution_metrics: 1,
                conditional_metrics: 1,
                composite_alarms: 1,
                dashboards: 1,
            }
        );
        assert!(close(m.dollars(), 3.0 * 0.10 + 0.30 + 0.50 + 3.00));
        // the template the bench is built with: every alarm found
        let t = monitoring(TEMPLATE);
        assert_eq!(
            t.alarms,
            TEMPLATE.matches("Type: AWS::CloudWatch::Alarm").count()
        );
        assert_eq!(
            t.dashboards,
            TEMPLATE.matches("Type: AWS::CloudWatch::Dashboard").count()
        );
        assert!(t.standard_metrics + t.high_resolution_metrics >= t.alarms - t.conditional_alarms);
    }

    #[test]
    fn custom_metrics_are_counted_from_the_functions_emf_lines() {
        let c = custom_metrics();
        // consumer: Processed, Retried, DeadLettered, Archived, RedriveReturned, ColdStart,
        // RetryBudgetExceeded, TransientFailurePercent; redriver: Redriven, RedriveSkipped,
        // RedriveFailed, RedrivePaused, Archived, DeadLetteredUnexplained,
        // RedrivePausedTooLong, KeepListsUnread, Kept, ConsumerPaused, ColdStart
        assert_eq!(c.always, 8 + 11, "{c:?}");
        assert_eq!(c.by_reason, 2 * resq::reason::ArchiveReason::ALL.len());
        assert!(close(c.dollars(), 19.0 * 0.30));
    }
}
