//! The consumer Lambda: wiring only.
// The handler future nests the SDK clients' futures deeply; the release build needs the room.
#![recursion_limit = "256"]

// Many small allocations per record: mimalloc keeps them cheap where glibc malloc did not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use consumer::Consumer;
use consumer::decision::{EventError, Invocation};
use consumer::handler::RecordOrder;
use consumer::queues::SqsQueues;
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use resq::config::ConsumerConfig;
use resq::lambda::InvocationError;
use resq::store::S3Store;

fn main() -> ExitCode {
    resq::lambda::main("consumer", serve)
}

async fn serve() -> Result<(), Error> {
    resq::telemetry::init_tracing();
    let config = ConsumerConfig::from_env()?;
    resq::config::lambda_environment(&resq::config::process_env())?;
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

/// The invocation's error, typed by what went wrong.
fn invocation_error(e: EventError) -> InvocationError {
    InvocationError::new(e.error_type(), e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::Diagnostic;

    #[test]
    fn an_invocation_error_is_logged_and_reported_as_its_message() {
        let e = invocation_error(EventError::NotSqs("missing field `Records`".into()));
        let message = "not an SQS event: missing field `Records`; the consumer must be invoked by an SQS event source mapping";
        assert_eq!(format!("{e:?}"), message);
        let d = Diagnostic::from(e);
        assert_eq!(
            (d.error_type.as_str(), d.error_message.as_str()),
            ("NotAnSqsEvent", message)
        );
        let d = Diagnostic::from(invocation_error(EventError::MissingMessageId { index: 2 }));
        assert_eq!(d.error_type, "RecordWithoutMessageId");
        assert!(
            d.error_message.starts_with("SQS record 2 has no messageId"),
            "{}",
            d.error_message
        );
    }
}
