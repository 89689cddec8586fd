//! The consumer Lambda: wiring only.
// The handler future nests the SDK clients' futures deeply; the release build needs the room.
#![recursion_limit = "256"]

// Many small allocations per record: mimalloc keeps them cheap where glibc malloc did not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use consumer::Consumer;
use consumer::decision::SqsInvocation;
use consumer::handler::RecordOrder;
use consumer::queues::SqsQueues;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use resq::config::ConsumerConfig;
use resq::store::S3Store;

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
    // The runtime reads the payload's `Records` (no JSON tree); each record is then read on
    // its own, so one that does not decode fails alone. A payload that is not an SQS event
    // fails the invocation with "not an SQS event: …", naming the offending field.
    run(service_fn(
        move |event: LambdaEvent<SqsInvocation>| async move {
            let deadline = resq::lambda::deadline_instant(event.context.deadline);
            consumer
                .handle_invocation(event.payload, deadline)
                .await
                .map_err(Error::from)
        },
    ))
    .await
}
