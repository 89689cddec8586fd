//! The redriver Lambda: wiring only.
// The handler future nests the SDK clients' futures deeply; the release build needs the room.
#![recursion_limit = "256"]

// Many small allocations per record: mimalloc keeps them cheap where glibc malloc did not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use redriver::Redriver;
use redriver::ports::CloudWatchAlarms;
use redriver::request::RunRequest;
use resq::config::RedriverConfig;
use resq::lambda::InvocationError;
use resq::store::S3Store;
use serde_json::Value;

fn main() -> ExitCode {
    resq::lambda::main("redriver", serve)
}

async fn serve() -> Result<(), Error> {
    resq::telemetry::init_tracing();
    let config = RedriverConfig::from_env()?;
    resq::config::lambda_environment(&resq::config::process_env())?;
    let aws = resq::aws::load_config().await;
    let queues = aws_sdk_sqs::Client::new(&aws);
    let store = S3Store::new(resq::aws::s3_client(&aws), &config.common.archive_bucket);
    let alarms = CloudWatchAlarms::new(aws_sdk_cloudwatch::Client::new(&aws));
    let redriver = Redriver::new(queues, store, alarms, config.clone());
    let (redriver, config) = (&redriver, &config);
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let request = RunRequest::from_event(event.payload, config)
            .map_err(|e| InvocationError::new("InvalidInput", e))?;
        let deadline = resq::lambda::deadline_instant(event.context.deadline);
        let summary = redriver.run(&request, deadline).await;
        serde_json::to_value(summary).map_err(|e| InvocationError::new("SummaryNotWritten", e))
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::Diagnostic;
    use redriver::request::RequestError;

    #[test]
    fn an_invocation_error_is_logged_and_reported_as_its_message() {
        let e = InvocationError::new(
            "InvalidInput",
            RequestError("maxMessages must be at least 1".into()),
        );
        assert_eq!(
            format!("{e:?}"),
            "invalid redriver input: maxMessages must be at least 1"
        );
        let d = Diagnostic::from(e);
        assert_eq!(d.error_type, "InvalidInput");
        assert_eq!(
            d.error_message,
            "invalid redriver input: maxMessages must be at least 1"
        );
    }
}
