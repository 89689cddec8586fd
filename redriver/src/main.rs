//! The redriver Lambda: wiring only.
// The handler future nests the SDK clients' futures deeply; the release build needs the room.
#![recursion_limit = "256"]

// Many small allocations per record: mimalloc keeps them cheap where glibc malloc did not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use resq::lambda::InvocationError;
use resq::store::S3Store;
use resq_redriver::Redriver;
use resq_redriver::config::RedriverConfig;
use resq_redriver::ports::CloudWatchAlarms;
use resq_redriver::request::RunRequest;
use serde_json::Value;
use tracing::Instrument;

fn main() -> ExitCode {
    resq::lambda::main("redriver", serve)
}

async fn serve() -> Result<(), Error> {
    resq::telemetry::init(resq::telemetry::Names::ORDERS)?;
    let config = RedriverConfig::from_env()?;
    // one run at a time: sequential on purpose, so a process that would be sent more is refused
    resq_redriver::config::one_run_at_a_time(&resq::config::process_env())?;
    resq::config::lambda_environment(&resq::config::process_env())?;
    let aws = resq::aws::config_loader().load().await;
    let queues = aws_sdk_sqs::Client::new(&aws);
    let store = S3Store::new(resq::aws::s3_client(&aws), &config.common.archive_bucket);
    let alarms = CloudWatchAlarms::new(aws_sdk_cloudwatch::Client::new(&aws));
    let mappings = resq_redriver::ports::LambdaMappings::new(aws_sdk_lambda::Client::new(&aws));
    let redriver = Redriver::new(queues, store, alarms, config.clone()).with_mappings(mappings);
    let (redriver, config) = (&redriver, &config);
    run(service_fn(move |event: LambdaEvent<Value>| {
        let span = resq::lambda::invocation(&event.context);
        async move {
            let request = read_request(event.payload, config)?;
            let deadline = resq::lambda::deadline_instant(event.context.deadline);
            let summary = redriver.run(&request, deadline).await;
            serde_json::to_value(summary).map_err(|e| InvocationError::new("SummaryNotWritten", e))
        }
        .instrument(span)
    }))
    .await
}

/// The run an invocation asks for; input it cannot read is the invocation's error
/// (`InvalidInput`, with the message naming what is wrong).
fn read_request(payload: Value, config: &RedriverConfig) -> Result<RunRequest, InvocationError> {
    RunRequest::from_event(payload, config).map_err(|e| InvocationError::new("InvalidInput", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::Diagnostic;
    use resq::config::Vars;
    use resq_redriver::request::RequestError;
    use serde_json::json;

    fn config() -> RedriverConfig {
        RedriverConfig::from_vars(&Vars(|k: &str| match k {
            "MAIN_QUEUE_URL" => Some("http://127.0.0.1/1/orders".into()),
            "DLQ_URL" => Some("http://127.0.0.1/1/orders-dlq".into()),
            "ARCHIVE_BUCKET" => Some("b".into()),
            _ => None,
        }))
        .unwrap()
    }

    #[test]
    fn bad_input_is_the_function_error_naming_the_field() {
        for (payload, message) in [
            (
                json!({"maxMessages": "ten"}),
                "invalid redriver input: maxMessages: expected a whole number from 1 to 4294967295, got \"ten\"",
            ),
            (
                json!({"ratePerSecond": 0}),
                "invalid redriver input: ratePerSecond: expected a number above 0 and at most 3000, got 0",
            ),
            (
                json!({"dryRun": "yes"}),
                "invalid redriver input: dryRun: expected true or false, got \"yes\"",
            ),
            (
                json!({"olderThanSeconds": -1}),
                "invalid redriver input: olderThanSeconds: expected a whole number of seconds from 0 to 18446744073709551615, got -1",
            ),
            (
                json!({"reason": ""}),
                "invalid redriver input: reason: expected a failure reason, a non-empty string (e.g. VALIDATION_FAILED), got \"\"",
            ),
            (
                json!({"max_messages": 10}),
                "invalid redriver input: max_messages: not a field of a manual payload; a manual payload takes dryRun, maxMessages, ratePerSecond, reason, olderThanSeconds, group",
            ),
        ] {
            let Err(e) = read_request(payload.clone(), &config()) else {
                panic!("{payload} was read");
            };
            let d = Diagnostic::from(e);
            assert_eq!(
                (d.error_type.as_str(), d.error_message.as_str()),
                ("InvalidInput", message),
                "{payload}"
            );
        }
    }

    #[test]
    fn the_committed_scheduled_event_runs_with_the_configuration() {
        let event: Value =
            serde_json::from_str(include_str!("../../events/scheduled-event.json")).unwrap();
        let Ok(request) = read_request(event, &config()) else {
            panic!("the scheduled event fixture is refused");
        };
        assert_eq!(request, RunRequest::defaults(&config()));
    }

    #[test]
    fn an_invocation_error_is_logged_and_reported_as_its_message() {
        let said = "maxMessages: expected a whole number from 1 to 4294967295, got 0";
        let e = InvocationError::new("InvalidInput", RequestError(said.into()));
        assert_eq!(format!("{e:?}"), format!("invalid redriver input: {said}"));
        let d = Diagnostic::from(e);
        assert_eq!(d.error_type, "InvalidInput");
        assert_eq!(d.error_message, format!("invalid redriver input: {said}"));
    }
}
