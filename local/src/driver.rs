//! The one driver every local run uses: what AWS does around a function. Lambda's SQS event
//! source mapping in front of the consumer (receive a batch, build the event, invoke, delete
//! what the response did not report failed) and the EventBridge schedule in front of the
//! redriver (a run every period, never two at once).
//!
//! Two things of AWS are optional, for the runs that need them (the soak): the poller honours
//! the mapping's enabled state as Lambda's does ([`MappingSwitch`]: it does not receive while the
//! mapping is `Disabled` or `Disabling` in the Lambda API), and the schedule's function is also
//! invoked by alarm actions ([`Schedule::run_with_alarms`]: a CloudWatch alarm state-change
//! event, one invocation at a time with the schedule's, as a function of reserved concurrency 1
//! throttles and Lambda retries it).
//!
//! The function is anything that can be invoked with an event ([`Invoke`]): the real binary
//! under the local runtime API ([`crate::chaos::runtime::Function`]), `cargo lambda watch` or
//! the binary ([`crate::live`]), or the functions in-process ([`crate::pipeline`]). What a run
//! does around each invocation (count, print, plan a kill, hold the schedule) is its own, in a
//! small set of hooks ([`MappingHooks`], [`ScheduleHooks`]); the loops are the same for all.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use resq::mapping::EventSourceMappings;
use resq_redriver::ports::LambdaMappings;

use aws_sdk_sqs::types::Message;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::emulator::REGION;
use crate::{CliError, lock};

/// A function that can be invoked with an event, as Lambda invokes it.
// The futures carry no `Send` bound: rustc cannot prove one through the trait for the
// consumer's in-process engine (its closures over borrowed records), and where a run needs it
// (the live pipeline is spawned) it holds for that run's concrete function.
pub trait Invoke {
    /// Invokes the function with `event` (JSON text) and waits for how it ended. With
    /// `kill_after`, a function that can be killed is killed that long into the invocation if
    /// it has not answered by then. `Err` only when the function could not be run at all.
    fn invoke(
        &mut self,
        event: &str,
        kill_after: Option<Duration>,
    ) -> impl Future<Output = Result<Ended, CliError>>;

    /// The run is over: stops whatever process the function holds.
    fn stop(&mut self) -> impl Future<Output = ()> {
        async {}
    }
}

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The function's response body.
    Response(String),
    /// The function reported an error (body of its error report).
    Error(String),
    /// Killed before it answered.
    Killed,
    /// No answer within the function's timeout.
    TimedOut,
}

/// One invocation of the event source mapping, as the run's hooks see it.
#[derive(Debug)]
pub struct Invoked<'a> {
    /// The batch the event was built from.
    pub batch: &'a [Message],
    /// How long the invocation took.
    pub took: Duration,
    /// How it ended, and what the poller deleted.
    pub settled: Settled,
}

/// How an invocation of the event source mapping ended, as Lambda's poller settles it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The function answered: these are the message ids it reported failed; the other records
    /// were deleted.
    Deleted(HashSet<String>),
    /// The function answered something Lambda reads as the whole batch failed (why): nothing
    /// deleted.
    BatchFailed(String),
    /// A function error (its error document): nothing deleted.
    Error(String),
    /// Killed before it answered: nothing deleted.
    Killed,
    /// No answer within the timeout: nothing deleted.
    TimedOut,
}

impl Settled {
    /// Whether the function answered (with whatever response).
    pub fn answered(&self) -> bool {
        matches!(self, Self::Deleted(_) | Self::BatchFailed(_))
    }
}

/// What a run does around the event source mapping's invocations.
pub trait MappingHooks<F> {
    /// Before each receive (the live pipeline waits there for `cargo lambda watch`'s turn).
    fn receiving(&mut self) -> impl Future<Output = ()> {
        async {}
    }

    /// A batch is about to be invoked: when to kill the function during it, if at all.
    fn invoking(&mut self) -> Option<Duration> {
        None
    }

    /// What came of an invocation, once its records are settled (`function`: the live
    /// pipeline reads where it ran).
    fn answered(&mut self, function: &F, invoked: Invoked<'_>);
}

/// What a run does around the schedule's invocations.
pub trait ScheduleHooks<F> {
    /// Whether this tick's run is held back (the tick passes without an invocation).
    fn held(&self) -> bool {
        false
    }

    /// A run is about to be invoked: when to kill the function during it, if at all.
    fn invoking(&mut self) -> Option<Duration> {
        None
    }

    /// How a run ended and how long it took (`function`: the live pipeline reads where it
    /// ran).
    fn answered(&mut self, function: &F, ended: Ended, took: Duration);

    /// How an invocation by an alarm's action ([`Schedule::run_with_alarms`]) ended: counted
    /// as a run unless the hooks say otherwise.
    fn alarm_answered(&mut self, function: &F, alarm: &AlarmAction, ended: Ended, took: Duration) {
        let _ = alarm;
        self.answered(function, ended, took);
    }
}

/// An alarm's state change whose action invokes the function (CloudWatch invokes Lambda with
/// a state-change event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlarmAction {
    /// The alarm.
    pub alarm: String,
    /// Its new state (`ALARM`, `OK`).
    pub state: String,
    /// Its state before.
    pub previous: String,
    /// When the change was seen.
    pub at: Instant,
}

/// Lambda's SQS event source mapping: one poller of a queue in front of a function.
#[derive(Debug, Clone, Copy)]
pub struct EventSourceMapping<'a> {
    /// The client the poller receives and deletes with.
    pub sqs: &'a aws_sdk_sqs::Client,
    /// The queue polled.
    pub queue_url: &'a str,
    /// Its ARN (the records' `eventSourceARN`).
    pub queue_arn: &'a str,
    /// Records per invocation (`BatchSize`).
    pub batch_size: i32,
    /// `MaximumBatchingWindowInSeconds`.
    pub batching_window: Duration,
    /// The mapping in the Lambda API whose enabled state the poller honours; `None`: always
    /// enabled.
    pub switch: Option<&'a MappingSwitch>,
}

/// An event source mapping's enabled state as Lambda's poller honours it: read from the Lambda
/// API (`GetEventSourceMapping`) at most every `every`; while it is `Disabled` or `Disabling`
/// the poller receives nothing. What cannot be read keeps the last state read (enabled before
/// the first reading), as Lambda's pollers go on with the configuration they have.
#[derive(Debug)]
pub struct MappingSwitch {
    mappings: LambdaMappings,
    uuid: String,
    every: Duration,
    last: Mutex<Option<(Instant, bool)>>,
}

impl MappingSwitch {
    /// The mapping `uuid` of `lambda`'s API, read at most every `every`.
    pub fn new(lambda: aws_sdk_lambda::Client, uuid: &str, every: Duration) -> Self {
        Self {
            mappings: LambdaMappings::new(lambda),
            uuid: uuid.to_owned(),
            every,
            last: Mutex::new(None),
        }
    }

    /// The mapping's UUID.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// Whether the poller may receive now: the state read within `every`, else read again.
    pub async fn enabled(&self) -> bool {
        let cached = *lock(&self.last);
        if let Some((at, on)) = cached
            && at.elapsed() < self.every
        {
            return on;
        }
        let on = match self.mappings.get(&self.uuid).await {
            Ok(m) => m.state.is_on().unwrap_or(true),
            Err(e) => {
                tracing::warn!(error = %e, uuid = %self.uuid, "poller: the mapping cannot be read; its last state holds");
                cached.is_none_or(|(_, on)| on)
            }
        };
        *lock(&self.last) = Some((Instant::now(), on));
        on
    }

    /// How long the poller waits before it asks again while the mapping is disabled.
    pub fn every(&self) -> Duration {
        self.every
    }
}

impl EventSourceMapping<'_> {
    /// Polls until `stop` turns true: receive a batch, invoke `function` with it, delete what
    /// the response did not report failed; after an error, a kill or a timeout, delete
    /// nothing. Stops the function at the end.
    pub async fn run<F: Invoke, H: MappingHooks<F>>(
        &self,
        function: &mut F,
        hooks: &mut H,
        stop: watch::Receiver<bool>,
    ) -> Result<(), CliError> {
        let mut polled = Ok(());
        while polled.is_ok() && !*stop.borrow() {
            polled = self.poll(function, hooks).await;
        }
        function.stop().await;
        polled
    }

    /// One poll: a batch (none when the queue was empty), its invocation, its settlement.
    async fn poll<F: Invoke, H: MappingHooks<F>>(
        &self,
        function: &mut F,
        hooks: &mut H,
    ) -> Result<(), CliError> {
        if let Some(switch) = self.switch
            && !switch.enabled().await
        {
            tokio::time::sleep(switch.every()).await;
            return Ok(());
        }
        hooks.receiving().await;
        let (sqs, url) = (self.sqs, self.queue_url);
        let batch = gather_batch(sqs, url, self.batch_size, self.batching_window).await;
        if batch.is_empty() {
            return Ok(());
        }
        let event = crate::event::lambda_event(&batch, self.queue_arn, REGION).to_string();
        let kill_after = hooks.invoking();
        let began = Instant::now();
        let ended = function.invoke(&event, kill_after).await?;
        let took = began.elapsed();
        let settled = match ended {
            Ended::Response(body) => match settle_answer(sqs, url, &batch, &body).await {
                Ok(failed) => Settled::Deleted(failed),
                Err(why) => Settled::BatchFailed(why),
            },
            Ended::Error(body) => Settled::Error(body),
            Ended::Killed => Settled::Killed,
            Ended::TimedOut => Settled::TimedOut,
        };
        let invoked = Invoked {
            batch: &batch,
            took,
            settled,
        };
        hooks.answered(function, invoked);
        Ok(())
    }
}

/// When a schedule's first run comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstRun {
    /// At the start.
    AtOnce,
    /// One period after the start, as EventBridge's `rate()` does.
    AfterOnePeriod,
}

/// An EventBridge schedule in front of a function: a run every period, never two at once.
#[derive(Debug, Clone, Copy)]
pub struct Schedule<'a> {
    /// The period.
    pub every: Duration,
    /// When the first run comes.
    pub first: FirstRun,
    /// The rule's name (the scheduled events name it in `resources`).
    pub rule: &'a str,
}

impl Schedule<'_> {
    /// Invokes `function` with a scheduled event on every tick until `stop` turns true; a late
    /// run delays the next tick rather than doubling it. Stops the function at the end.
    pub async fn run<F: Invoke, H: ScheduleHooks<F>>(
        &self,
        function: &mut F,
        hooks: &mut H,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), CliError> {
        let mut ticks = self.ticks();
        let mut fired = Ok(());
        while fired.is_ok() && next_tick(&mut ticks, &mut stop).await {
            if !hooks.held() {
                fired = self.fire(function, hooks).await;
            }
        }
        function.stop().await;
        fired
    }

    /// As [`Schedule::run`], and between runs the invocations of alarm actions sent to
    /// `alarms`, each with a CloudWatch alarm state-change event ([`alarm_event`]): one at a
    /// time with the schedule's runs (an action that comes during a run waits until it ends, as
    /// Lambda throttles a function of reserved concurrency 1 and retries the alarm's
    /// asynchronous invocation), in the order they came; a tick that comes while actions wait
    /// runs after them.
    pub async fn run_with_alarms<F: Invoke, H: ScheduleHooks<F>>(
        &self,
        function: &mut F,
        hooks: &mut H,
        mut alarms: mpsc::UnboundedReceiver<AlarmAction>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), CliError> {
        let mut ticks = self.ticks();
        let mut waiting: VecDeque<AlarmAction> = VecDeque::new();
        let mut fired = Ok(());
        while fired.is_ok() && !*stop.borrow() {
            while let Ok(a) = alarms.try_recv() {
                waiting.push_back(a);
            }
            if let Some(action) = waiting.pop_front() {
                fired = self.fire_alarm(function, hooks, &action).await;
                continue;
            }
            tokio::select! {
                _ = ticks.tick() => {
                    if !hooks.held() {
                        fired = self.fire(function, hooks).await;
                    }
                }
                Some(a) = alarms.recv() => waiting.push_back(a),
                _ = stop.changed() => {}
            }
        }
        function.stop().await;
        fired
    }

    /// One invocation by an alarm's action.
    async fn fire_alarm<F: Invoke, H: ScheduleHooks<F>>(
        &self,
        function: &mut F,
        hooks: &mut H,
        action: &AlarmAction,
    ) -> Result<(), CliError> {
        let kill_after = hooks.invoking();
        let event = alarm_event(&action.alarm, &action.state, &action.previous).to_string();
        let began = Instant::now();
        let ended = function.invoke(&event, kill_after).await?;
        hooks.alarm_answered(function, action, ended, began.elapsed());
        Ok(())
    }

    fn ticks(&self) -> tokio::time::Interval {
        let now = tokio::time::Instant::now();
        match self.first {
            FirstRun::AtOnce => ticks_from(now, self.every),
            FirstRun::AfterOnePeriod => ticks_from(now + self.every, self.every),
        }
    }

    /// One run: a scheduled event, its invocation.
    async fn fire<F: Invoke, H: ScheduleHooks<F>>(
        &self,
        function: &mut F,
        hooks: &mut H,
    ) -> Result<(), CliError> {
        let kill_after = hooks.invoking();
        let event = scheduled_event(self.rule).to_string();
        let began = Instant::now();
        let ended = function.invoke(&event, kill_after).await?;
        hooks.answered(function, ended, began.elapsed());
        Ok(())
    }
}

/// An EventBridge scheduled event from the rule named `rule`, now.
pub fn scheduled_event(rule: &str) -> Value {
    json!({
        "version": "0",
        "id": format!("{:032x}", rand::random::<u128>()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": REGION,
        "resources": [format!("arn:aws:events:{REGION}:123456789012:rule/{rule}")],
        "detail": {}
    })
}

/// The event CloudWatch invokes a Lambda function with when alarm `alarm` (a metric alarm of
/// this region's account) changes from `previous` to `state`, now: shaped as AWS documents it
/// ("Lambda alarm actions"; the aws-lambda-rust-runtime's `example-cloudwatch-alarm-metric.json`).
pub fn alarm_event(alarm: &str, state: &str, previous: &str) -> Value {
    let now = chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3f+0000")
        .to_string();
    json!({
        "source": "aws.cloudwatch",
        "alarmArn": format!("arn:aws:cloudwatch:{REGION}:123456789012:alarm:{alarm}"),
        "accountId": "123456789012",
        "time": now,
        "region": REGION,
        "alarmData": {
            "alarmName": alarm,
            "state": {
                "value": state,
                "reason": format!("the alarm's metric moved it to {state}"),
                "timestamp": now
            },
            "previousState": {
                "value": previous,
                "reason": format!("the alarm was {previous}"),
                "timestamp": now
            },
            "configuration": {
                "description": format!("{alarm} (resq-local)"),
                "metrics": []
            }
        }
    })
}

async fn receive(sqs: &aws_sdk_sqs::Client, url: &str, max: i32, wait: i32) -> Vec<Message> {
    match resq::sqs::receive(sqs, url, max, None, wait).await {
        Ok(messages) => messages,
        Err(e) => {
            tracing::warn!(error = %e, "poller: receive failed");
            // as Lambda's pollers do: back off instead of spinning on a failing queue
            tokio::time::sleep(Duration::from_secs(1)).await;
            Vec::new()
        }
    }
}

/// What Lambda's SQS poller does before an invocation: a long poll of up to one second, then
/// more receives until `batch_size` records or the batching window closes. Empty when the
/// queue was.
pub async fn gather_batch(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    batch_size: i32,
    batching_window: Duration,
) -> Vec<Message> {
    let mut batch = receive(sqs, url, batch_size.min(10), 1).await;
    if batch.is_empty() {
        return batch;
    }
    let window_ends = Instant::now() + batching_window;
    while (batch.len() as i32) < batch_size && Instant::now() < window_ends {
        let more = receive(sqs, url, batch_size - batch.len() as i32, 0).await;
        if more.is_empty() {
            tokio::time::sleep(
                Duration::from_millis(100)
                    .min(window_ends.saturating_duration_since(Instant::now())),
            )
            .await;
        }
        batch.extend(more);
    }
    batch
}

/// What Lambda's SQS poller makes of a function's response for a batch whose message ids are
/// `batch_ids`, as AWS documents it ("Reporting batch item failures"): the ids reported failed,
/// or `Err` when the whole batch counts as failed.
///
/// - complete success: an empty or `null` response, no or a `null` or empty
///   `batchItemFailures`;
/// - the listed records failed: each `itemIdentifier` a message id of the batch;
/// - complete failure: a response that is not JSON, or an `itemIdentifier` that is empty,
///   `null`, missing or not a message id of the batch.
pub fn batch_failures(body: &str, batch_ids: &[&str]) -> Result<HashSet<String>, String> {
    let body = body.trim();
    if body.is_empty() || body == "null" {
        return Ok(HashSet::new());
    }
    let doc: serde_json::Value = serde_json::from_str(body)
        .map_err(|e| format!("the response is not JSON ({e}): {body}"))?;
    let failures = match &doc {
        serde_json::Value::Object(o) => o.get("batchItemFailures"),
        _ => None,
    };
    let Some(failures) = failures.filter(|f| !f.is_null()) else {
        return Ok(HashSet::new());
    };
    let failures = failures
        .as_array()
        .ok_or_else(|| format!("batchItemFailures is not a list: {body}"))?;
    failures
        .iter()
        .map(|f| match f.get("itemIdentifier").and_then(|v| v.as_str()) {
            Some(id) if !id.is_empty() && batch_ids.contains(&id) => Ok(id.to_owned()),
            _ => Err(format!(
                "an itemIdentifier that is not a message id of the batch: {f}"
            )),
        })
        .collect()
}

/// Deletes every record of the batch not in `failed` (by message id).
pub async fn delete_done(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    batch: &[Message],
    failed: &HashSet<String>,
) {
    let done: Vec<&str> = batch
        .iter()
        .filter(|m| !failed.contains(m.message_id().unwrap_or_default()))
        .filter_map(|m| m.receipt_handle())
        .collect();
    for chunk in done.chunks(resq::sqs::MAX_BATCH) {
        let failed = match resq::sqs::Queues::delete(sqs, url, chunk).await {
            Ok(entries) => entries.into_iter().filter_map(Result::err).collect(),
            Err(e) => vec![e],
        };
        for why in failed {
            tracing::warn!(error = %why, "event source mapping: delete failed; the record will be delivered again");
        }
    }
}

/// What Lambda's SQS poller does with a function's response ([`batch_failures`]): deletes what
/// it did not report failed and returns the failed ids; when the whole batch counts as failed,
/// deletes nothing and says why.
pub async fn settle_answer(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    batch: &[Message],
    body: &str,
) -> Result<HashSet<String>, String> {
    let ids: Vec<&str> = batch.iter().filter_map(|m| m.message_id()).collect();
    let failed = batch_failures(body, &ids)?;
    delete_done(sqs, url, batch, &failed).await;
    Ok(failed)
}

/// An EventBridge-like schedule: a tick every `period`, a late one delayed rather than doubled
/// (a run never overlaps the next).
pub fn schedule_ticks(period: Duration) -> tokio::time::Interval {
    ticks_from(tokio::time::Instant::now(), period)
}

fn ticks_from(start: tokio::time::Instant, period: Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval_at(start, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

/// Waits for the next tick; `false` once `stop` turned true.
pub async fn next_tick(
    ticks: &mut tokio::time::Interval,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    tokio::select! {
        _ = ticks.tick() => {}
        _ = stop.changed() => {}
    }
    !*stop.borrow()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function that answers at once, or after `takes` (virtual time), and stops the
    /// schedule after `runs` invocations; records when each came and its event.
    struct Recorder {
        began: tokio::time::Instant,
        takes: Duration,
        runs: usize,
        stop: watch::Sender<bool>,
        calls: Vec<(Duration, Value)>,
        stopped: bool,
    }

    impl Recorder {
        fn new(runs: usize, takes: Duration) -> Self {
            Self {
                began: tokio::time::Instant::now(),
                takes,
                runs,
                stop: watch::channel(false).0,
                calls: Vec::new(),
                stopped: false,
            }
        }

        fn seconds(&self) -> Vec<u64> {
            self.calls.iter().map(|(at, _)| at.as_secs()).collect()
        }
    }

    impl Invoke for Recorder {
        async fn invoke(&mut self, event: &str, _: Option<Duration>) -> Result<Ended, CliError> {
            let event = serde_json::from_str(event).map_err(|e| CliError::Usage(e.to_string()))?;
            self.calls.push((self.began.elapsed(), event));
            tokio::time::sleep(self.takes).await;
            if self.calls.len() >= self.runs {
                let _ = self.stop.send(true);
            }
            Ok(Ended::Response("{}".into()))
        }

        async fn stop(&mut self) {
            self.stopped = true;
        }
    }

    /// Holds the first `hold` ticks; counts the answers.
    #[derive(Default)]
    struct Hold {
        hold: usize,
        ticks: std::cell::Cell<usize>,
        answered: usize,
    }

    impl ScheduleHooks<Recorder> for Hold {
        fn held(&self) -> bool {
            self.ticks.set(self.ticks.get() + 1);
            self.ticks.get() <= self.hold
        }

        fn answered(&mut self, _: &Recorder, ended: Ended, _: Duration) {
            assert_eq!(ended, Ended::Response("{}".into()));
            self.answered += 1;
        }
    }

    async fn run_schedule(first: FirstRun, recorder: &mut Recorder, hooks: &mut Hold) {
        let stop = recorder.stop.subscribe();
        let schedule = Schedule {
            every: Duration::from_secs(60),
            first,
            rule: "stk-schedule",
        };
        schedule.run(recorder, hooks, stop).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_schedule_at_once_runs_at_the_start_then_every_period_and_stops_the_function() {
        // GIVEN a function that answers at once
        let mut f = Recorder::new(3, Duration::ZERO);
        let mut hooks = Hold::default();
        // WHEN the schedule runs it from the start
        run_schedule(FirstRun::AtOnce, &mut f, &mut hooks).await;
        // THEN it ran at 0, 60 and 120 s (virtual time), answered each time, and was stopped
        assert_eq!(f.seconds(), [0, 60, 120]);
        assert_eq!(hooks.answered, 3);
        assert!(f.stopped);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_schedule_runs_first_one_period_after_the_start() {
        let mut f = Recorder::new(2, Duration::ZERO);
        run_schedule(FirstRun::AfterOnePeriod, &mut f, &mut Hold::default()).await;
        assert_eq!(f.seconds(), [60, 120]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_tick_passes_without_a_run() {
        let mut f = Recorder::new(2, Duration::ZERO);
        let mut hooks = Hold {
            hold: 2,
            ..Default::default()
        };
        run_schedule(FirstRun::AtOnce, &mut f, &mut hooks).await;
        assert_eq!(f.seconds(), [120, 180]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_run_delays_the_next_tick_rather_than_doubling_it() {
        // GIVEN runs that take two and a half periods
        let mut f = Recorder::new(3, Duration::from_secs(150));
        run_schedule(FirstRun::AtOnce, &mut f, &mut Hold::default()).await;
        // THEN each run starts when the one before ended: never two at once, no catching up
        assert_eq!(f.seconds(), [0, 150, 300]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_schedule_invokes_with_a_scheduled_event_from_its_rule() {
        let mut f = Recorder::new(1, Duration::ZERO);
        run_schedule(FirstRun::AtOnce, &mut f, &mut Hold::default()).await;
        let event = &f.calls[0].1;
        assert_eq!(event["source"], "aws.events");
        assert_eq!(event["detail-type"], "Scheduled Event");
        assert_eq!(
            event["resources"][0],
            "arn:aws:events:us-east-1:123456789012:rule/stk-schedule"
        );
    }

    #[test]
    fn only_a_response_counts_as_answered() {
        assert!(Settled::Deleted(HashSet::new()).answered());
        assert!(Settled::BatchFailed("not JSON".into()).answered());
        for unanswered in [
            Settled::Error("boom".into()),
            Settled::Killed,
            Settled::TimedOut,
        ] {
            assert!(!unanswered.answered(), "{unanswered:?}");
        }
    }

    const IDS: [&str; 3] = ["a", "b", "c"];

    fn failed(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn complete_success_as_lambda_reads_it() {
        for body in [
            "",
            "null",
            "{}",
            r#"{"batchItemFailures": null}"#,
            r#"{"batchItemFailures": []}"#,
        ] {
            assert_eq!(batch_failures(body, &IDS), Ok(failed(&[])), "{body:?}");
        }
    }

    #[test]
    fn listed_records_fail_alone() {
        let body = r#"{"batchItemFailures": [{"itemIdentifier": "b"}, {"itemIdentifier": "c"}]}"#;
        assert_eq!(batch_failures(body, &IDS), Ok(failed(&["b", "c"])));
    }

    #[test]
    fn a_bad_identifier_or_a_bad_response_fails_the_whole_batch() {
        for body in [
            "not json",
            r#"{"batchItemFailures": [{"itemIdentifier": ""}]}"#,
            r#"{"batchItemFailures": [{"itemIdentifier": null}]}"#,
            r#"{"batchItemFailures": [{"itemId": "a"}]}"#,
            r#"{"batchItemFailures": [{"itemIdentifier": "a"}, {"itemIdentifier": "zz"}]}"#,
            r#"{"batchItemFailures": "a"}"#,
        ] {
            assert!(batch_failures(body, &IDS).is_err(), "{body}");
        }
    }
}
