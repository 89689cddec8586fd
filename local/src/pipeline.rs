//! The demo's pipeline: the two functions in-process, wired to the stack, run by the driver
//! ([`crate::driver`]) as AWS runs them: Lambda's SQS event source mapping in front of the
//! consumer, the EventBridge schedule in front of the redriver.
//!
//! [`InProcessConsumer`] and [`InProcessRedriver`] are the only places in `local` that call the
//! consumer's and the redriver's Rust API: each takes the event as JSON text, as the binary
//! gets it from the Lambda runtime, and answers what the binary would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use resq::metrics::{self, Metrics};
use resq::store::S3Store;
use resq_consumer::Consumer;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::event::SqsInvocation;
use resq_consumer::order::OrderHandler;
use resq_redriver::Redriver;
use resq_redriver::config::RedriverConfig;
use resq_redriver::ports::CloudWatchAlarms;
use resq_redriver::request::RunRequest;
use tokio::sync::watch;

use crate::CliError;
use crate::driver::{
    Ended, EventSourceMapping, FirstRun, Invoke, Invoked, MappingHooks, Schedule, ScheduleHooks,
    Settled,
};
use crate::stack::StackOutputs;

/// Counts across the pipeline's invocations.
#[derive(Debug, Default)]
pub struct Counters {
    /// Consumer invocations.
    pub invocations: AtomicU64,
    /// Records processed.
    pub processed: AtomicU64,
    /// Records reported for retry.
    pub retried: AtomicU64,
    /// Records sent to the DLQ by the consumer.
    pub dead_lettered: AtomicU64,
    /// Messages archived by either function.
    pub archived: AtomicU64,
    /// Redriver runs.
    pub redrive_runs: AtomicU64,
    /// Messages replayed.
    pub redriven: AtomicU64,
    /// Messages the latest run replayed or archived (`u64::MAX` before the first run).
    pub last_run_moved: AtomicU64,
}

impl Counters {
    /// A counter's value.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one consumer invocation's metrics.
    fn add_batch(&self, m: &Metrics) {
        Self::add(&self.processed, m.get(resq_consumer::account::PROCESSED));
        Self::add(&self.retried, m.get(resq_consumer::account::RETRIED));
        Self::add(
            &self.dead_lettered,
            m.get(resq_consumer::account::DEAD_LETTERED),
        );
        Self::add(&self.archived, m.get(metrics::ARCHIVED));
    }

    /// Adds one redriver run.
    fn add_run(&self, s: &resq_redriver::Summary) {
        let archived: u64 = s.archived.values().sum();
        Self::add(&self.redrive_runs, 1);
        Self::add(&self.redriven, s.redriven);
        self.last_run_moved
            .store(s.redriven + archived, Ordering::Relaxed);
        Self::add(&self.archived, archived);
    }
}

/// How the emulated event source mapping and schedule behave.
#[derive(Debug, Clone)]
pub struct PipelineSettings {
    /// Records per consumer invocation (`BatchSize`).
    pub batch_size: i32,
    /// `MaximumBatchingWindowInSeconds`.
    pub batching_window: Duration,
    /// Concurrent consumer invocations (`ScalingConfig.MaximumConcurrency`).
    pub pollers: usize,
    /// The consumer's timeout (its invocation deadline).
    pub consumer_timeout: Duration,
    /// The redriver's schedule period.
    pub redrive_every: Duration,
    /// The redriver's timeout.
    pub redriver_timeout: Duration,
}

/// The consumer in-process, invoked as its binary is. Its metrics go to the pipeline's
/// counters, as the binary's metric lines go to CloudWatch.
pub struct InProcessConsumer<H> {
    consumer: Consumer<H, aws_sdk_sqs::Client, S3Store>,
    timeout: Duration,
    counters: Arc<Counters>,
}

impl<H: OrderHandler> InProcessConsumer<H> {
    /// The consumer over the stack's queues and bucket, with `handler` as its order handler.
    pub fn new(
        config: &aws_config::SdkConfig,
        outputs: &StackOutputs,
        handler: H,
        consumer_config: ConsumerConfig,
        timeout: Duration,
        counters: Arc<Counters>,
    ) -> Self {
        let consumer = Consumer::new(
            handler,
            aws_sdk_sqs::Client::new(config),
            S3Store::new(resq::aws::s3_client(config), &outputs.bucket),
            consumer_config,
        );
        Self {
            consumer,
            timeout,
            counters,
        }
    }
}

// Through a reference: every poller invokes the one consumer, as Lambda runs concurrent
// invocations of one function. In-process, nothing can be killed: `kill_after` is not taken.
impl<H: OrderHandler> Invoke for &InProcessConsumer<H> {
    async fn invoke(&mut self, event: &str, _: Option<Duration>) -> Result<Ended, CliError> {
        let deadline = Instant::now() + self.timeout;
        let invocation = match SqsInvocation::from_json(event) {
            Ok(invocation) => invocation,
            // the binary answers an event it cannot read with a function error
            Err(e) => return Ok(Ended::Error(e.to_string())),
        };
        let report = match self.consumer.handle(invocation, deadline).await {
            Ok(report) => report,
            Err(e) => return Ok(Ended::Error(e.to_string())),
        };
        self.counters.add_batch(&report.metrics);
        Ok(respond(&report.response))
    }
}

/// The redriver in-process, invoked as its binary is; it emits no metrics.
pub struct InProcessRedriver {
    redriver: Redriver<aws_sdk_sqs::Client, S3Store, CloudWatchAlarms>,
    config: RedriverConfig,
    timeout: Duration,
}

impl InProcessRedriver {
    /// The redriver over the stack's queues, bucket and alarms.
    pub fn new(
        config: &aws_config::SdkConfig,
        outputs: &StackOutputs,
        redriver_config: RedriverConfig,
        timeout: Duration,
    ) -> Self {
        let redriver = Redriver::new(
            aws_sdk_sqs::Client::new(config),
            S3Store::new(resq::aws::s3_client(config), &outputs.bucket),
            CloudWatchAlarms::new(aws_sdk_cloudwatch::Client::new(config)),
            redriver_config.clone(),
        )
        .with_receive_wait(0)
        .with_metrics(false);
        Self {
            redriver,
            config: redriver_config,
            timeout,
        }
    }
}

impl Invoke for &InProcessRedriver {
    async fn invoke(&mut self, event: &str, _: Option<Duration>) -> Result<Ended, CliError> {
        let deadline = Instant::now() + self.timeout;
        let request = serde_json::from_str(event)
            .map_err(|e| e.to_string())
            .and_then(|event| {
                RunRequest::from_event(event, &self.config).map_err(|e| e.to_string())
            });
        let request = match request {
            Ok(request) => request,
            Err(e) => return Ok(Ended::Error(e)),
        };
        let summary = self.redriver.run(&request, deadline).await;
        Ok(respond(&summary))
    }
}

/// A response as the runtime would send it: the value as JSON.
fn respond(value: &impl serde::Serialize) -> Ended {
    serde_json::to_string(value).map_or_else(|e| Ended::Error(e.to_string()), Ended::Response)
}

/// The redriver's response read back: its run's summary.
pub fn read_summary(body: &str) -> Result<resq_redriver::Summary, serde_json::Error> {
    serde_json::from_str(body)
}

/// The demo's hooks on the event source mapping: counts the invocations.
struct CountBatches<'a>(&'a Counters);

impl<F> MappingHooks<F> for CountBatches<'_> {
    fn invoking(&mut self) -> Option<Duration> {
        Counters::add(&self.0.invocations, 1);
        None
    }

    fn answered(&mut self, _: &F, invoked: Invoked<'_>) {
        // not settled: Lambda retries the whole batch after the visibility timeout
        match invoked.settled {
            Settled::Deleted(_) => {}
            Settled::BatchFailed(e) => tracing::error!(error = %e, "the consumer's answer"),
            other => tracing::error!(outcome = ?other, "consumer invocation failed"),
        }
    }
}

/// The demo's hooks on the schedule: counts the runs and what they moved.
struct CountRuns<'a>(&'a Counters);

impl<F> ScheduleHooks<F> for CountRuns<'_> {
    fn answered(&mut self, _: &F, ended: Ended, _: Duration) {
        let summary = match &ended {
            Ended::Response(body) => read_summary(body).map_err(|e| e.to_string()),
            other => Err(format!("{other:?}")),
        };
        match summary {
            Ok(s) => self.0.add_run(&s),
            Err(e) => tracing::error!(error = %e, "redriver run failed"),
        }
    }
}

/// The two functions, wired to the stack, run the way AWS runs them.
pub struct Pipeline<H> {
    sqs: aws_sdk_sqs::Client,
    outputs: StackOutputs,
    consumer: InProcessConsumer<H>,
    redriver: InProcessRedriver,
    settings: PipelineSettings,
    /// What happened so far.
    pub counters: Arc<Counters>,
}

impl<H: OrderHandler> Pipeline<H> {
    /// The pipeline over the stack, with `handler` as the consumer's order handler.
    pub fn new(
        config: &aws_config::SdkConfig,
        outputs: StackOutputs,
        handler: H,
        consumer_config: ConsumerConfig,
        redriver_config: RedriverConfig,
        settings: PipelineSettings,
    ) -> Self {
        let counters = Arc::new(Counters {
            last_run_moved: AtomicU64::new(u64::MAX),
            ..Default::default()
        });
        let consumer = InProcessConsumer::new(
            config,
            &outputs,
            handler,
            consumer_config,
            settings.consumer_timeout,
            counters.clone(),
        );
        let redriver =
            InProcessRedriver::new(config, &outputs, redriver_config, settings.redriver_timeout);
        Self {
            sqs: aws_sdk_sqs::Client::new(config),
            outputs,
            consumer,
            redriver,
            settings,
            counters,
        }
    }

    /// Runs pollers and the schedule until `stop` turns true.
    pub async fn run(&self, stop: watch::Receiver<bool>) {
        let mapping = EventSourceMapping {
            sqs: &self.sqs,
            queue_url: &self.outputs.main_queue_url,
            queue_arn: &self.outputs.main_queue_arn,
            batch_size: self.settings.batch_size,
            batching_window: self.settings.batching_window,
            switch: None,
        };
        let schedule = Schedule {
            every: self.settings.redrive_every,
            first: FirstRun::AtOnce,
            rule: "resq-demo-schedule",
        };
        let pollers = (0..self.settings.pollers.max(1)).map(|_| {
            let stop = stop.clone();
            async move {
                let (mut consumer, mut hooks) = (&self.consumer, CountBatches(&self.counters));
                mapping.run(&mut consumer, &mut hooks, stop).await
            }
        });
        let (mut redriver, mut hooks) = (&self.redriver, CountRuns(&self.counters));
        let (polled, scheduled) = tokio::join!(
            futures::future::join_all(pollers),
            schedule.run(&mut redriver, &mut hooks, stop.clone())
        );
        // in-process, a function always runs: the driver has no error to pass on
        for e in polled
            .into_iter()
            .chain([scheduled])
            .filter_map(Result::err)
        {
            tracing::error!(error = %e, "the pipeline stopped");
        }
    }
}
