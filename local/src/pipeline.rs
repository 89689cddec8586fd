//! The local pipeline: the stack deployed into the emulator, and what AWS does around the two
//! functions: Lambda's SQS event source mapping for the consumer (receive, build the event,
//! invoke, delete what was not reported failed) and the EventBridge schedule for the redriver.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::Message;
use consumer::Consumer;
use consumer::event::SqsInvocation;
use consumer::handler::OrderHandler;
use redriver::Redriver;
use redriver::ports::CloudWatchAlarms;
use redriver::request::RunRequest;
use resq::config::{ConsumerConfig, RedriverConfig};
use resq::metrics;
use resq::store::S3Store;
use tokio::sync::watch;

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
        let results = resq::sqs::Queues::delete(sqs, url, chunk).await;
        let failed = match results {
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
    let mut ticks = tokio::time::interval(period);
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

/// The two functions, wired to the stack, run the way AWS runs them.
pub struct Pipeline<H> {
    sqs: aws_sdk_sqs::Client,
    outputs: StackOutputs,
    consumer: Consumer<H, aws_sdk_sqs::Client, S3Store>,
    redriver: Redriver<aws_sdk_sqs::Client, S3Store, CloudWatchAlarms>,
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
        let consumer = Consumer::new(handler, sqs.clone(), store.clone(), consumer_config);
        let redriver = Redriver::new(
            sqs.clone(),
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
        let report = match SqsInvocation::from_json(&event.to_string()) {
            Ok(invocation) => self.consumer.handle(invocation, deadline).await,
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

#[cfg(test)]
mod tests {
    use super::*;

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
