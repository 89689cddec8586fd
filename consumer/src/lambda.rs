//! The consumer function as Lambda runs it, for any [`MessageHandler`]: configuration from the
//! environment, the AWS clients built once, and the runtime loop. resq's consumer and a team's
//! own function (`examples/payments`, docs/own-function.md) are each a one-line `main` over
//! [`serve`].

use crate::config::ConsumerConfig;
use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, run_concurrent, service_fn};
use resq::lambda::InvocationError;
use resq::sqs::Queues;
use resq::store::{ObjectStore, S3Store};
use tracing::Instrument;

use crate::Consumer;
use crate::event::{EventError, Invocation};
use crate::handler::MessageHandler;

/// What Lambda itself does with the consumer's role: write its logs, and poll the main queue
/// for it (the event source mapping receives, deletes what the function did not report
/// failed, and reads the queue's attributes).
pub const PERMISSIONS: &[resq::iam::Permission] = &[
    resq::iam::Permission::new("logs:CreateLogStream", "ConsumerLogGroup:*"),
    resq::iam::Permission::new("logs:PutLogEvents", "ConsumerLogGroup:*"),
    resq::iam::Permission::new("sqs:ReceiveMessage", "OrdersQueue"),
    resq::iam::Permission::new("sqs:DeleteMessage", "OrdersQueue"),
    resq::iam::Permission::new("sqs:GetQueueAttributes", "OrdersQueue"),
];

/// What [`serve`] hands the handler factory: what the function's own clients are built from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Resources {
    /// The AWS configuration every client of the function shares: resq's HTTPS client, whose
    /// gate holds at most `CONSUMER_CONCURRENCY`'s connections per host and counts throttled
    /// answers (so the records in flight follow a throttling downstream, the handler's own
    /// included), and resq's timeouts on every call. Build the handler's own clients from it,
    /// e.g. `aws_sdk_dynamodb::Client::new(&resources.aws)`.
    pub aws: aws_config::SdkConfig,
    /// The archive bucket (`ARCHIVE_BUCKET`) as an [`ObjectStore`]:
    /// where the reference handler records orders.
    pub store: S3Store,
}

/// Serves invocations with the handler `make_handler` builds from the function's
/// [`Resources`]. Missing or invalid configuration ends it before the first invocation,
/// naming the variable.
///
/// A binary that calls it does not build under `panic = "abort"` (cargo lambda's release
/// default when the profile does not set `panic`): a handler's panic must unwind to be caught
/// and fail its record alone, where aborting would kill the function with its whole batch. The
/// error says to set `[profile.release] panic = "unwind"`.
pub async fn serve<H: MessageHandler + 'static>(
    make_handler: impl FnOnce(Resources) -> H,
) -> Result<(), Error> {
    resq::telemetry::init(H::NAMES)?;
    let config = ConsumerConfig::from_env()?;
    resq::config::lambda_environment(&resq::config::process_env())?;
    // every call the clients make goes through one gate per host (at most the limit's cap of
    // connections, or the settle executor's calls in flight if more) and is counted, so the limit can follow the downstream's throttling
    let downstream = crate::downstream::Downstream::new(config.concurrency.connections_per_host());
    let aws = crate::downstream::config_loader_for(&downstream)
        .load()
        .await;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let store = S3Store::new(resq::aws::s3_client(&aws), &config.common.archive_bucket);
    let handler = make_handler(Resources {
        aws,
        store: store.clone(),
    });
    let consumer =
        Consumer::new(handler, sqs, store, config).with_throttling(downstream.throttling);
    consumer.read_main_queue_limits().await;
    serve_consumer(consumer).await
}

/// Serves Lambda's invocations with `consumer` until the process ends: one at a time on
/// Lambda's default compute, and under Lambda Managed Instances as many at once as
/// `AWS_LAMBDA_MAX_CONCURRENCY` says (the runtime's concurrent mode, one poller each). Every
/// invocation runs on the one consumer, so what holds per execution environment is the
/// process's, not doubled by the invocations at once: the retry budget, the source queues'
/// limits, the records in flight (`CONSUMER_CONCURRENCY`), the HTTPS client's connections (its
/// gates) and the `ColdStart` metric.
///
/// The runtime reads the payload's `Records` one record at a time into resq's own compact
/// records (no JSON tree, no copy of the payload kept), so one that does not decode fails
/// alone. A payload that is not an SQS event fails the invocation with "not an SQS event: …",
/// naming the offending field.
pub async fn serve_consumer<H, Q, S>(consumer: Consumer<H, Q, S>) -> Result<(), Error>
where
    H: MessageHandler + 'static,
    Q: Queues + 'static,
    S: ObjectStore + 'static,
{
    let () = Unwinding::<H>::REQUIRED;
    let consumer = Arc::new(consumer);
    run_concurrent(service_fn(move |event: LambdaEvent<Invocation>| {
        let span = resq::lambda::invocation(&event.context);
        let consumer = consumer.clone();
        async move {
            let deadline = resq::lambda::deadline_instant(event.context.deadline);
            let invocation = event.payload.0.map_err(invocation_error)?;
            let report = consumer
                .handle(invocation, deadline)
                .await
                .map_err(invocation_error)?;
            report.metrics.emit();
            Ok::<_, InvocationError>(report.response)
        }
        .instrument(span)
    }))
    .await
}

/// The build-time check of [`serve_consumer`] (and so of [`serve`]): evaluated when a binary
/// instantiates `serve_consumer::<H, …>` (a
/// post-monomorphization error), so the library itself still builds under `panic = "abort"`
/// (fuzzing, tools that never run a handler) and only a function that would run one is refused.
/// `cfg!(panic)` is the strategy this crate, and with it the whole build, is compiled with.
struct Unwinding<H>(std::marker::PhantomData<H>);

impl<H> Unwinding<H> {
    const REQUIRED: () = if cfg!(panic = "abort") {
        panic!(
            "resq-consumer: this build aborts on panic (panic = \"abort\", cargo lambda's release default when the profile does not set `panic`): a panicking handler would kill the function and its whole batch instead of failing its record alone. Set `[profile.release] panic = \"unwind\"` in your Cargo.toml (the workspace root's, in a workspace)."
        )
    };
}

/// mimalloc's `mi_option_purge_delay`: the 16th option of `mi_option_e` in both of the
/// headers libmimalloc-sys builds from (v2 and v3), which the crate names no constant for (a
/// test checks it is the option whose default, in the v3 mimalloc built here, is 1,000 ms).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Has mimalloc (the consumer's allocator) return freed memory to the system at once instead
/// of a second later. A batch's memory is freed in bursts (the payload once parsed, the DLQ copies
/// once sent): returned at once, the next burst reuses pages instead of adding to them. On a
/// 6 MB batch whose every record is rejected the peak fell from 96–113 MB to 68–81 MB
/// (bench/RESULTS.md). Call it first thing in `main`.
pub fn return_freed_memory_at_once() {
    // SAFETY: sets one of mimalloc's options, which it reads atomically.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

/// The invocation's error, typed by what went wrong (`NotAnSqsEvent`, …).
fn invocation_error(e: EventError) -> InvocationError {
    InvocationError::new(e.error_type(), e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::Diagnostic;

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // the purge delay's default in mimalloc v3's options.c is 1,000 ms: the option at this
        // index is it
        // SAFETY: reads one of mimalloc's options.
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(get(), 1000);
        return_freed_memory_at_once();
        assert_eq!(get(), 0);
        // SAFETY: sets it back, as above.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1000) };
    }

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
