//! The payments consumer Lambda: wiring only, as resq's own consumer is wired.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use consumer::Consumer;
use consumer::decision::{EventError, Invocation};
use consumer::queues::SqsQueues;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use payments::RecordPayment;
use resq::config::ConsumerConfig;
use resq::lambda::InvocationError;
use resq::store::S3Store;

fn main() -> ExitCode {
    resq::lambda::main("payments", serve)
}

async fn serve() -> Result<(), Error> {
    resq::telemetry::init_tracing();
    // the same environment as resq's consumer: MAIN_QUEUE_URL, DLQ_URL, ARCHIVE_BUCKET, …
    let config = ConsumerConfig::from_env()?;
    resq::config::lambda_environment(&resq::config::process_env())?;
    let aws = resq::aws::load_config().await;
    let store = S3Store::new(resq::aws::s3_client(&aws), &config.common.archive_bucket);
    let queues = SqsQueues::new(
        aws_sdk_sqs::Client::new(&aws),
        &config.common.main_queue_url,
        &config.common.dlq_url,
    );
    let consumer = Consumer::new(RecordPayment::new(store.clone()), queues, store, config);
    let consumer = &consumer;
    run(service_fn(
        move |event: LambdaEvent<Invocation>| async move {
            let deadline = resq::lambda::deadline_instant(event.context.deadline);
            let invocation = event.payload.0.map_err(invocation_error)?;
            consumer
                .handle_invocation(invocation, deadline)
                .await
                .map_err(invocation_error)
        },
    ))
    .await
}

/// The invocation's error as Lambda reports it (`NotAnSqsEvent`, …).
fn invocation_error(e: EventError) -> InvocationError {
    InvocationError::new(e.error_type(), e)
}
