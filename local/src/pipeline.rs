//! The local pipeline: the stack deployed into the emulator, and what AWS does around the two
//! functions: Lambda's SQS event source mapping for the consumer (receive, build the event,
//! invoke, delete what was not reported failed) and the EventBridge schedule for the redriver.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::Message;
use consumer::Consumer;
use consumer::handler::OrderHandler;
use consumer::queues::SqsQueues;
use redriver::Redriver;
use redriver::ports::CloudWatchAlarms;
use redriver::request::RunRequest;
use resq::config::{ConsumerConfig, RedriverConfig};
use resq::metrics;
use resq::store::S3Store;
use tokio::sync::watch;

use crate::driver::{delete_done, gather_batch, next_tick, schedule_ticks};
use crate::emulator::REGION;
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

/// The two functions, wired to the stack, run the way AWS runs them.
pub struct Pipeline<H> {
    sqs: aws_sdk_sqs::Client,
    outputs: StackOutputs,
    consumer: Consumer<H, SqsQueues, S3Store>,
    redriver: Redriver<SqsQueues, S3Store, CloudWatchAlarms>,
    redriver_config: RedriverConfig,
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
        let sqs = aws_sdk_sqs::Client::new(config);
        let s3 = resq::aws::s3_client(config);
        let store = S3Store::new(s3, &outputs.bucket);
        let consumer = Consumer::new(
            handler,
            SqsQueues::new(sqs.clone(), &outputs.main_queue_url, &outputs.dlq_url),
            store.clone(),
            consumer_config,
        );
        let redriver = Redriver::new(
            SqsQueues::new(sqs.clone(), &outputs.main_queue_url, &outputs.dlq_url),
            store,
            CloudWatchAlarms::new(aws_sdk_cloudwatch::Client::new(config)),
            redriver_config.clone(),
        )
        .with_receive_wait(0)
        .with_metrics(false);
        let counters = Arc::new(Counters {
            last_run_moved: AtomicU64::new(u64::MAX),
            ..Default::default()
        });
        Self {
            sqs,
            outputs,
            consumer,
            redriver,
            redriver_config,
            settings,
            counters,
        }
    }

    /// Runs pollers and the schedule until `stop` turns true.
    pub async fn run(&self, stop: watch::Receiver<bool>) {
        let pollers = (0..self.settings.pollers.max(1)).map(|_| self.poll(stop.clone()));
        tokio::join!(
            futures::future::join_all(pollers),
            self.schedule(stop.clone())
        );
    }

    /// One event source mapping poller: receive, batch, invoke, delete the successes.
    async fn poll(&self, stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            let batch = gather_batch(
                &self.sqs,
                &self.outputs.main_queue_url,
                self.settings.batch_size,
                self.settings.batching_window,
            )
            .await;
            if !batch.is_empty() {
                self.invoke(&batch).await;
            }
        }
    }

    async fn invoke(&self, batch: &[Message]) {
        let event = resq::sqs_event::lambda_event(batch, &self.outputs.main_queue_arn, REGION);
        let deadline = Instant::now() + self.settings.consumer_timeout;
        let c = &self.counters;
        c.invocations.fetch_add(1, Ordering::Relaxed);
        let report = match self.consumer.process(event, deadline).await {
            Ok(r) => r,
            Err(e) => {
                // a function error: Lambda retries the whole batch after the visibility timeout
                tracing::error!(error = %e, "consumer invocation failed");
                return;
            }
        };
        c.processed
            .fetch_add(report.metrics.get(metrics::PROCESSED), Ordering::Relaxed);
        c.retried
            .fetch_add(report.metrics.get(metrics::RETRIED), Ordering::Relaxed);
        c.dead_lettered.fetch_add(
            report.metrics.get(metrics::DEAD_LETTERED),
            Ordering::Relaxed,
        );
        c.archived
            .fetch_add(report.metrics.get(metrics::ARCHIVED), Ordering::Relaxed);
        let failed = report
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        delete_done(&self.sqs, &self.outputs.main_queue_url, batch, &failed).await;
    }

    /// The EventBridge schedule: one redriver run per period, never two at once.
    async fn schedule(&self, mut stop: watch::Receiver<bool>) {
        let mut ticks = schedule_ticks(self.settings.redrive_every);
        while next_tick(&mut ticks, &mut stop).await {
            let request = RunRequest::defaults(&self.redriver_config);
            let summary = self
                .redriver
                .run(&request, Instant::now() + self.settings.redriver_timeout)
                .await;
            let c = &self.counters;
            c.redrive_runs.fetch_add(1, Ordering::Relaxed);
            c.redriven.fetch_add(summary.redriven, Ordering::Relaxed);
            c.last_run_moved.store(
                summary.redriven + summary.archived.values().sum::<u64>(),
                Ordering::Relaxed,
            );
            c.archived
                .fetch_add(summary.archived.values().sum(), Ordering::Relaxed);
        }
    }
}
