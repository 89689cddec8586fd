//! The redriver Lambda: wiring only.
// The handler future nests the SDK clients' futures deeply; the release build needs the room.
#![recursion_limit = "256"]

// Many small allocations per record: mimalloc keeps them cheap where glibc malloc did not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use redriver::Redriver;
use redriver::ports::{CloudWatchAlarms, SqsRedriveQueues};
use redriver::request::RunRequest;
use resq::config::RedriverConfig;
use resq::store::S3Store;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    resq::telemetry::init_tracing();
    let config = RedriverConfig::from_env()?;
    let aws = resq::aws::load_config().await;
    let queues = SqsRedriveQueues::new(
        aws_sdk_sqs::Client::new(&aws),
        &config.common.main_queue_url,
        &config.common.dlq_url,
    );
    let store = S3Store::new(resq::aws::s3_client(&aws), &config.common.archive_bucket);
    let alarms = CloudWatchAlarms::new(aws_sdk_cloudwatch::Client::new(&aws));
    let redriver = Redriver::new(queues, store, alarms, config.clone());
    let (redriver, config) = (&redriver, &config);
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let request = RunRequest::from_event(event.payload, config)?;
        let deadline = resq::lambda::deadline_instant(event.context.deadline);
        let summary = redriver.run(&request, deadline).await;
        Ok::<_, Error>(serde_json::to_value(summary)?)
    }))
    .await
}
