//! The consumer Lambda: wiring only.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use consumer::Consumer;
use consumer::decision::deadline_instant;
use consumer::handler::RecordOrder;
use consumer::queues::SqsQueues;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use resq::config::ConsumerConfig;
use resq::store::S3Store;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    resq::telemetry::init_tracing();
    let config = ConsumerConfig::from_env()?;
    let aws = resq::aws::load_config().await;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let s3 = resq::aws::s3_client(&aws);
    let store = S3Store::new(s3, &config.common.archive_bucket);
    let queues = SqsQueues::new(sqs, &config.common.main_queue_url, &config.common.dlq_url);
    let consumer = Consumer::new(RecordOrder::new(store.clone()), queues, store, config);
    let consumer = &consumer;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let deadline = deadline_instant(event.context.deadline, now_ms, Instant::now());
        consumer
            .handle_event(event.payload, deadline)
            .await
            .map_err(Error::from)
    }))
    .await
}
