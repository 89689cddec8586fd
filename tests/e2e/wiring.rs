//! `resq check --function` against pipelines made by hand, outside resq's template (plain
//! CloudFormation on moto, whose Lambda API serves functions and event source mappings without
//! running them): the visibility mistake is found and named with its fix, a sound pipeline
//! passes, a function that does not exist is said so.

use resq_e2e::{Stack, StackOptions};
use serde_json::json;

use crate::ops::resq;

/// A team's pipeline: a queue with a DLQ (5 receives, 4 days against 14) and a 5 s function
/// reading it in batches gathered for up to a minute, reporting batch item failures, at most 5
/// at once; the queue hides a message `visibility` seconds.
async fn pipeline(stack: &Stack, name: &str, visibility: u32) {
    let config = stack.emulator.sdk_config().await;
    let template = json!({"Resources": {
        "Dlq": {"Type": "AWS::SQS::Queue", "Properties": {
            "QueueName": format!("{name}-dlq"), "MessageRetentionPeriod": 1_209_600}},
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {
            "QueueName": format!("{name}-jobs"), "VisibilityTimeout": visibility,
            "MessageRetentionPeriod": 345_600,
            "RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": ["Dlq", "Arn"]},
                              "maxReceiveCount": 5}}},
        "Role": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
                           "Action": "sts:AssumeRole"}]}}},
        "Worker": {"Type": "AWS::Lambda::Function", "Properties": {
            "FunctionName": name, "Runtime": "provided.al2023", "Handler": "bootstrap",
            "Timeout": 5, "Role": {"Fn::GetAtt": ["Role", "Arn"]},
            "Code": {"ZipFile": "placeholder"}}},
        "Trigger": {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {
            "EventSourceArn": {"Fn::GetAtt": ["Queue", "Arn"]}, "FunctionName": {"Ref": "Worker"},
            "BatchSize": 10, "MaximumBatchingWindowInSeconds": 60,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "ScalingConfig": {"MaximumConcurrency": 5}}}}});
    aws_sdk_cloudformation::Client::new(&config)
        .create_stack()
        .stack_name(name)
        .template_body(template.to_string())
        .send()
        .await
        .expect("create the pipeline");
}

#[tokio::test]
async fn check_function_names_the_visibility_mistake_and_its_fix_and_passes_a_sound_pipeline() {
    if resq_e2e::emulator_kind() != resq_e2e::EmulatorKind::Moto {
        eprintln!("skipped on LocalStack: it cannot create functions without Docker");
        return;
    }
    let stack = Stack::start(StackOptions::default()).await;
    // GIVEN a queue that hides a message 30 s (SQS's default) for a 5 s function that gathers
    // records for a minute
    pipeline(&stack, "hasty", 30).await;
    // WHEN its wiring is checked
    let (code, out, err) = resq(&stack, &["check", "--function", "hasty"], &[]);
    // THEN it is refused, naming the three settings, each side's number and the fix
    eprint!("{out}{err}");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(
            "conflict  visibility (could double): the queue's VisibilityTimeout, the function's Timeout, the mapping's MaximumBatchingWindowInSeconds: the queue's VisibilityTimeout 30 s < 6 × the function's Timeout 5 s + the mapping's MaximumBatchingWindowInSeconds 60 s = 90 s: "
        ) && out.contains("raise the queue's VisibilityTimeout to at least 90 s"),
        "{out}"
    );
    // AND only that: the rest of its wiring is sound
    assert_eq!(out.matches("conflict").count(), 1, "{out}");
    assert!(
        err.starts_with("resq: the wiring of hasty goes against AWS's guidance: the queue's VisibilityTimeout, the function's Timeout, the mapping's MaximumBatchingWindowInSeconds (above)"),
        "{err}"
    );

    // GIVEN the same pipeline with the queue's visibility at 90 s
    pipeline(&stack, "sound", 90).await;
    let (code, out, err) = resq(&stack, &["check", "--function", "sound"], &[]);
    // THEN it passes, each rule saying how
    assert_eq!(code, 0, "{out}{err}");
    for line in [
        "resq check --function sound: timeout 5 s, 1 event source mapping\n",
        "ok        visibility: the queue's VisibilityTimeout 90 s ≥ 6 × the function's Timeout 5 s + the mapping's MaximumBatchingWindowInSeconds 60 s = 90 s\n",
        "ok        receives before the DLQ: the queue's RedrivePolicy maxReceiveCount 5 ≥ 2\n",
        "ok        dead-letter retention: the DLQ's MessageRetentionPeriod 1,209,600 s > the queue's MessageRetentionPeriod 345,600 s\n",
        "ok        partial batch responses: FunctionResponseTypes has ReportBatchItemFailures\n",
    ] {
        assert!(out.contains(line), "{line}{out}");
    }
    assert!(
        !out.contains("conflict") && !out.contains("warning"),
        "{out}"
    );

    // AND a function that does not exist is said so, with its own exit status
    let (code, out, err) = resq(&stack, &["check", "--function", "nowhere"], &[]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.starts_with("resq: no function named nowhere"), "{err}");
}
