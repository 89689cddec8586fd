//! The redriver's consumer breaker against moto's Lambda API (it serves event source mappings
//! without running anything), real queues, a real bucket and real alarm states: pause on
//! record, probe, resume only its own pause, and an alarm's action that acts at once.

use std::time::{Duration, Instant};

use aws_sdk_cloudwatch::types::{ComparisonOperator, StateValue, Statistic};
use resq::mapping::{EventSourceMappings, MappingState};
use resq::state::{PauseRecord, PauseState, PausedBy};
use resq::store::S3Store;
use resq_e2e::{Stack, StackOptions};
use resq_redriver::ports::LambdaMappings;
use serde_json::{Value, json};

use crate::helpers::*;

/// The consumer's function and its event source mapping on the main queue, made as
/// CloudFormation makes them (moto's Lambda wants a role from its IAM): the mapping's UUID.
async fn mapping(stack: &Stack) -> String {
    let config = stack.emulator.sdk_config().await;
    let cfn = aws_sdk_cloudformation::Client::new(&config);
    let template = json!({"Resources": {
        "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
                           "Action": "sts:AssumeRole"}]}}},
        "Consumer": {"Type": "AWS::Lambda::Function", "Properties": {
            "FunctionName": "stk-consumer", "Runtime": "provided.al2023", "Handler": "bootstrap",
            "Role": {"Fn::GetAtt": ["Role", "Arn"]}, "Code": {"ZipFile": "placeholder"}}},
        "Orders": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {
            "EventSourceArn": stack.main.arn, "FunctionName": {"Ref": "Consumer"},
            "BatchSize": 10, "FunctionResponseTypes": ["ReportBatchItemFailures"]}}},
        "Outputs": {"Mapping": {"Value": {"Ref": "Orders"}}}});
    cfn.create_stack()
        .stack_name("stk")
        .template_body(template.to_string())
        .send()
        .await
        .expect("create the consumer's stack");
    let stacks = cfn
        .describe_stacks()
        .stack_name("stk")
        .send()
        .await
        .unwrap();
    let outputs = stacks.stacks()[0].outputs();
    outputs[0]
        .output_value()
        .expect("the mapping's UUID")
        .to_owned()
}

/// The alarm `name` (a 10 s period, so a probe's window is short), in `state`.
async fn alarm(stack: &Stack, name: &str, state: StateValue) {
    let cw = &stack.cloudwatch;
    cw.put_metric_alarm()
        .alarm_name(name)
        .namespace("resq-test")
        .metric_name("TransientFailurePercent")
        .statistic(Statistic::Average)
        .period(10)
        .evaluation_periods(1)
        .threshold(50.0)
        .comparison_operator(ComparisonOperator::GreaterThanOrEqualToThreshold)
        .send()
        .await
        .expect("put alarm");
    cw.set_alarm_state()
        .alarm_name(name)
        .state_value(state)
        .state_reason("test")
        .send()
        .await
        .expect("set alarm state");
}

/// One run of the redriver with the consumer breaker on `uuid`, for `payload` (`{}`: the
/// schedule; an alarm event: the breakers only).
async fn run(stack: &Stack, uuid: &str, payload: Value) -> resq_redriver::Summary {
    let env = [
        ("CONSUMER_EVENT_SOURCE_MAPPING", uuid),
        ("PAUSE_CONSUMER_ON_ALARMS", "stk-downstream-failing"),
    ];
    let config = redriver_config(stack, &env);
    let store = S3Store::new(stack.s3.clone(), &stack.bucket);
    let alarms = resq_redriver::ports::CloudWatchAlarms::new(stack.cloudwatch.clone());
    let lambda = aws_sdk_lambda::Client::new(&stack.emulator.sdk_config().await);
    let request = resq_redriver::request::RunRequest::from_event(payload, &config).unwrap();
    resq_redriver::Redriver::new(stack.sqs.clone(), store, alarms, config)
        .with_receive_wait(0)
        .with_mappings(LambdaMappings::new(lambda))
        .run(&request, Instant::now() + Duration::from_secs(60))
        .await
}

async fn state_of(stack: &Stack, uuid: &str) -> (MappingState, Option<PauseRecord>) {
    let lambda = LambdaMappings::new(aws_sdk_lambda::Client::new(
        &stack.emulator.sdk_config().await,
    ));
    let store = S3Store::new(stack.s3.clone(), &stack.bucket);
    let mapping = lambda.get(uuid).await.expect("the mapping");
    let record = resq::state::current_pause(&store, uuid).await.unwrap();
    (mapping.state, record)
}

/// CloudWatch's alarm state-change event (the Rust runtime's fixture) for `name`.
fn alarm_event(name: &str) -> Value {
    let mut event: Value = serde_json::from_str(include_str!(
        "../fixtures/third-party/aws-lambda-rust-runtime/example-cloudwatch-alarm-metric.json"
    ))
    .unwrap();
    event["alarmData"]["alarmName"] = json!(name);
    event
}

#[tokio::test]
async fn the_consumer_breaker_pauses_probes_and_resumes_its_own_pause_on_moto() {
    if resq_e2e::emulator_kind() != resq_e2e::EmulatorKind::Moto {
        eprintln!("skipped on LocalStack: it cannot create the function the mapping invokes");
        return;
    }
    // GIVEN the consumer's mapping enabled, a dead letter waiting, the downstream failing
    let stack = Stack::start(StackOptions::default()).await;
    let uuid = mapping(&stack).await;
    assert_eq!(state_of(&stack, &uuid).await.0, MappingState::Enabled);
    send(&stack, &stack.dlq, &order_body("o-1"), &[], None).await;
    alarm(&stack, "stk-downstream-failing", StateValue::Alarm).await;

    // WHEN a scheduled run goes THEN the mapping is disabled, with resq's pause on record, and
    // nothing was replayed into a queue nobody consumes
    let paused = run(&stack, &uuid, json!({})).await;
    assert_eq!(paused.consumer_paused, Some(true), "{paused:?}");
    let (state, record) = state_of(&stack, &uuid).await;
    let record = record.expect("resq's pause on record");
    assert_eq!(state, MappingState::Disabled);
    assert_eq!(
        (record.by, record.state),
        (PausedBy::Resq, PauseState::Paused)
    );
    assert_eq!(record.alarms, ["stk-downstream-failing"]);
    assert_eq!(
        (paused.redriven, stack.depth(&stack.main).await),
        (0, (0, 0))
    );

    // AND once the pause has held four of the alarm's periods (a minute, on record), with
    // orders waiting in the main queue, a run probes: the mapping runs for a twelfth of a
    // period, then is disabled again, the probe counted on record
    send(&stack, &stack.main, &order_body("o-2"), &[], None).await;
    let store = S3Store::new(stack.s3.clone(), &stack.bucket);
    let mut older = record.clone();
    (older.at, older.since) = (now_ms(), Some(now_ms() - 60_000));
    resq::state::record_pause(&store, &older).await.unwrap();
    let probed = run(&stack, &uuid, alarm_event("stk-downstream-failing")).await;
    let (state, record) = state_of(&stack, &uuid).await;
    let record = record.unwrap();
    assert_eq!(state, MappingState::Disabled, "{probed:?}");
    assert_eq!((record.state, record.probes), (PauseState::Paused, 1));
    assert!(record.last_probe_at.is_some());

    // AND the alarm's OK action resumes it at once, touching no message
    alarm(&stack, "stk-downstream-failing", StateValue::Ok).await;
    let resumed = run(&stack, &uuid, alarm_event("stk-downstream-failing")).await;
    let (state, record) = state_of(&stack, &uuid).await;
    assert_eq!(state, MappingState::Enabled, "{resumed:?}");
    assert_eq!(record.unwrap().state, PauseState::Resumed);
    assert_eq!(
        (resumed.received, stack.depth(&stack.dlq).await),
        (0, (1, 0))
    );

    // AND a pause resq did not make is never undone, whatever the alarm says
    let lambda = LambdaMappings::new(aws_sdk_lambda::Client::new(
        &stack.emulator.sdk_config().await,
    ));
    let mut by_hand = PauseRecord::new(&uuid, PauseState::Paused, PausedBy::Operator, now_ms());
    by_hand.reason = Some("deploying the fix".into());
    resq::state::record_pause(&store, &by_hand).await.unwrap();
    lambda.set_enabled(&uuid, false).await.unwrap();
    for state in [StateValue::Ok, StateValue::Alarm] {
        alarm(&stack, "stk-downstream-failing", state).await;
        let held = run(&stack, &uuid, json!({})).await;
        assert_eq!(
            state_of(&stack, &uuid).await.0,
            MappingState::Disabled,
            "{held:?}"
        );
        assert!(
            held.consumer
                .unwrap_or_default()
                .contains("deploying the fix")
        );
    }
}
