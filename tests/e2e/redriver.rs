//! The redriver against real queues, a real bucket and real alarm states.

use aws_sdk_cloudwatch::types::{ComparisonOperator, StateValue, Statistic};
use aws_sdk_sqs::types::MessageSystemAttributeName as Sys;
use resq_e2e::{Stack, StackOptions};
use serde_json::json;

use crate::helpers::*;

fn body_of(m: &aws_sdk_sqs::types::Message) -> &str {
    m.body().unwrap_or_default()
}

#[tokio::test]
async fn a_seeded_dlq_ends_in_exactly_the_documented_state() {
    // GIVEN a DLQ with one message of each kind
    let stack = Stack::start(StackOptions::default()).await;
    let dlq = &stack.dlq;
    let two_days_ago = (now_ms() - 48 * 3_600_000).to_string();
    send(
        &stack,
        dlq,
        &order_body("o-fresh"),
        &[("trace-id", string_attr("t-1"))],
        None,
    )
    .await;
    send(
        &stack,
        dlq,
        &order_body("o-returned"),
        &[("x-redrive-count", number_attr("1"))],
        None,
    )
    .await;
    send(
        &stack,
        dlq,
        &order_body("o-expired"),
        &[("x-first-sent-at", number_attr(&two_days_ago))],
        None,
    )
    .await;
    send(
        &stack,
        dlq,
        &order_body("o-capped"),
        &[("x-redrive-count", number_attr("3"))],
        None,
    )
    .await;
    send(
        &stack,
        dlq,
        &order_body("o-badcount"),
        &[("x-redrive-count", string_attr("abc"))],
        None,
    )
    .await;
    send(
        &stack,
        dlq,
        "{oops",
        &[
            ("x-failure-class", string_attr("permanent")),
            ("x-failure-reason", string_attr("MALFORMED_JSON")),
        ],
        None,
    )
    .await;
    let ten: Vec<(String, aws_sdk_sqs::types::MessageAttributeValue)> = (0..10)
        .map(|i| (format!("a{i}"), string_attr("v")))
        .collect();
    let ten: Vec<(&str, _)> = ten.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    send(&stack, dlq, &order_body("o-ten"), &ten, None).await;
    let near_limit = format!(
        "{{\"orderId\":\"o-huge\",\"pad\":\"{}\"}}",
        "x".repeat(resq::attributes::MAX_MESSAGE_BYTES - 40)
    );
    send(&stack, dlq, &near_limit, &[], None).await;
    let big_a = format!(
        "{{\"orderId\":\"o-big-a\",\"pad\":\"{}\"}}",
        "a".repeat(600_000)
    );
    let big_b = format!(
        "{{\"orderId\":\"o-big-b\",\"pad\":\"{}\"}}",
        "b".repeat(600_000)
    );
    send(&stack, dlq, &big_a, &[], None).await;
    send(&stack, dlq, &big_b, &[], None).await;
    assert_eq!(stack.depth(dlq).await.0, 10);

    // WHEN the scheduled run happens
    let summary = redrive(&stack, &redriver(&stack, &[]), json!({}), &[]).await;

    // THEN the summary says what happened …
    assert_eq!(summary.received, 10);
    assert_eq!(summary.redriven, 5, "{summary:?}");
    assert_eq!(summary.skipped, 1);
    assert_eq!(summary.failed, 0);
    assert_eq!(
        summary.returned, 3,
        "count 1, count 3 and the unreadable count"
    );
    let mut archived: Vec<(&str, u64)> = summary
        .archived
        .iter()
        .map(|(k, v)| (k.code(), *v))
        .collect();
    archived.sort();
    assert_eq!(
        archived,
        vec![
            ("ATTRIBUTE_LIMIT", 1),
            ("INVALID_REDRIVE_COUNT", 1),
            ("REDRIVE_CAP", 1),
            ("TTL_EXPIRED", 1)
        ]
    );
    assert!(!summary.paused && !summary.dry_run);

    // … the main queue holds exactly the five replays, counted up and stamped; the one that
    // no longer fits with its count travels as a pointer to its body, stored in the bucket …
    let main = drain_view(&stack, &stack.main).await;
    let pointer = main
        .iter()
        .find_map(|m| resq::payload::Pointer::parse(body_of(m)).map(|p| (m, p)));
    let (huge, pointer) = pointer.expect("a replay sent as a pointer");
    assert_eq!(pointer.bucket, stack.bucket);
    assert!(pointer.key.starts_with("payloads/"), "{pointer:?}");
    let stored = stack.object(&pointer.key).await;
    assert_eq!(attr(huge, "x-redrive-count"), Some("1"));
    let size = near_limit.len().to_string();
    assert_eq!(attr(huge, "ExtendedPayloadSize"), Some(size.as_str()));
    let mut bodies: Vec<&str> = main.iter().map(body_of).collect();
    bodies.retain(|b| *b != pointer.body());
    bodies.push(std::str::from_utf8(&stored).unwrap());
    bodies.sort();
    let mut expected = vec![
        big_a.as_str(),
        big_b.as_str(),
        near_limit.as_str(),
        &order_body("o-fresh")[..],
        &order_body("o-returned")[..],
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    expected.sort();
    assert_eq!(bodies, expected);
    let fresh = main
        .iter()
        .find(|m| body_of(m).contains("o-fresh"))
        .unwrap();
    assert_eq!(attr(fresh, "x-redrive-count"), Some("1"));
    assert_eq!(attr(fresh, "trace-id"), Some("t-1"));
    assert!(
        attr(fresh, "x-first-sent-at")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|t| t <= now_ms())
    );
    let returned = main
        .iter()
        .find(|m| body_of(m).contains("o-returned"))
        .unwrap();
    assert_eq!(attr(returned, "x-redrive-count"), Some("2"));

    // … the DLQ keeps only the permanent failure, hidden until its TTL so that later runs do
    // not re-read it, and named in the keep list so that an operator can reach it …
    assert_eq!(stack.depth(dlq).await, (0, 1));
    let store = resq::store::S3Store::new(stack.s3.clone(), &stack.bucket);
    let listed = resq::keep::still_hidden(&store, &dlq.url, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].failure_reason.as_deref(), Some("MALFORMED_JSON"));
    let hidden_for = listed[0].hidden_until.saturating_sub(now_ms()) / 1000;
    assert!(
        (43_000..=43_200).contains(&hidden_for),
        "hidden until its TTL (24 h away), within SQS's 12 h: {hidden_for} s"
    );
    let ctx = resq_ops::context::Context::from_config(
        &stack.emulator.sdk_config().await,
        stack.main.url.clone(),
        dlq.url.clone(),
        stack.bucket.clone(),
    );
    assert_eq!(resq_ops::dlq::unhide_kept(&ctx, None).await.unwrap(), 1);
    let left = drain_view(&stack, dlq).await;
    assert_eq!(left.iter().map(body_of).collect::<Vec<_>>(), vec!["{oops"]);
    assert_eq!(attr(&left[0], "x-failure-reason"), Some("MALFORMED_JSON"));

    // … and the archive holds the other four whole.
    for (reason, needle) in [
        ("TTL_EXPIRED", "o-expired"),
        ("REDRIVE_CAP", "o-capped"),
        ("INVALID_REDRIVE_COUNT", "o-badcount"),
        ("ATTRIBUTE_LIMIT", "o-ten"),
    ] {
        let keys = stack.keys(&format!("archive/{reason}/")).await;
        assert_eq!(keys.len(), 1, "{reason}");
        let envelope = stack.json_object(&keys[0]).await;
        assert!(
            envelope["originalMessage"]["body"]
                .as_str()
                .unwrap()
                .contains(needle),
            "{reason}"
        );
        assert_eq!(envelope["metadata"]["archivedBy"], "redriver");
        assert_eq!(envelope["metadata"]["sourceQueue"], dlq.url.as_str());
    }
    let ten_env = stack
        .json_object(&stack.keys("archive/ATTRIBUTE_LIMIT/").await[0])
        .await;
    assert_eq!(
        ten_env["originalMessage"]["messageAttributes"]
            .as_object()
            .unwrap()
            .len(),
        10
    );
}

#[tokio::test]
async fn a_dry_run_changes_nothing() {
    let stack = Stack::start(StackOptions::default()).await;
    send(&stack, &stack.dlq, &order_body("o-1"), &[], None).await;
    send(
        &stack,
        &stack.dlq,
        &order_body("o-2"),
        &[("x-redrive-count", number_attr("3"))],
        None,
    )
    .await;
    send(
        &stack,
        &stack.dlq,
        "{",
        &[("x-failure-class", string_attr("permanent"))],
        None,
    )
    .await;
    let summary = redrive(&stack, &redriver(&stack, &[]), json!({"dryRun": true}), &[]).await;
    assert!(summary.dry_run);
    assert_eq!(
        (summary.received, summary.redriven, summary.skipped),
        (3, 1, 1)
    );
    assert_eq!(
        summary
            .archived
            .get(&resq::reason::ArchiveReason::RedriveCap),
        Some(&1)
    );
    assert_eq!(
        stack.depth(&stack.dlq).await,
        (3, 0),
        "all three still in the DLQ and visible"
    );
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
    assert!(stack.keys("").await.is_empty());
}

/// Puts alarm `name` into `state` so that it stays there when evaluated: an emulator that
/// evaluates alarms (LocalStack, as AWS does) moves a merely set state back to what the
/// alarm's data say, so the data (10 in the last minute of the alarm's own metric) and the
/// threshold (5 for `ALARM`, 1,000 for `OK`) agree with the state that is set.
async fn alarm(stack: &Stack, name: &str, state: StateValue) {
    let threshold = if state == StateValue::Alarm {
        5.0
    } else {
        1000.0
    };
    stack
        .cloudwatch
        .put_metric_data()
        .namespace("resq-test")
        .metric_data(
            aws_sdk_cloudwatch::types::MetricDatum::builder()
                .metric_name(name)
                .value(10.0)
                .timestamp(aws_sdk_cloudwatch::primitives::DateTime::from_secs(
                    chrono::Utc::now().timestamp() - 5,
                ))
                .build(),
        )
        .send()
        .await
        .expect("put metric data");
    stack
        .cloudwatch
        .put_metric_alarm()
        .alarm_name(name)
        .namespace("resq-test")
        .metric_name(name)
        .statistic(Statistic::Sum)
        .period(60)
        .evaluation_periods(1)
        .threshold(threshold)
        .comparison_operator(ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .expect("put alarm");
    stack
        .cloudwatch
        .set_alarm_state()
        .alarm_name(name)
        .state_value(state)
        .state_reason("test")
        .send()
        .await
        .expect("set alarm state");
}

#[tokio::test]
async fn an_alarm_in_alarm_pauses_replay() {
    let stack = Stack::start(StackOptions::default()).await;
    send(&stack, &stack.dlq, &order_body("o-1"), &[], None).await;
    alarm(&stack, "replays-failing", StateValue::Alarm).await;
    alarm(&stack, "dlq-depth", StateValue::Ok).await;
    let env = [("PAUSE_ON_ALARMS", "dlq-depth,replays-failing")];
    let summary = redrive(&stack, &redriver(&stack, &env), json!({}), &env).await;
    assert!(summary.paused);
    assert!(
        summary
            .pause_reason
            .as_deref()
            .unwrap()
            .contains("replays-failing"),
        "{summary:?}"
    );
    // a paused run still reads the DLQ (to archive what is past its TTL or the cap) and leaves
    // the replayable message visible; moved by SQS without a reason, it is counted once and
    // replaced by a copy that says why (which the run reads again and holds too)
    assert_eq!(
        (summary.redriven, summary.unexplained, summary.received),
        (0, 1, summary.skipped),
        "{summary:?}"
    );
    assert_eq!(stack.depth(&stack.dlq).await, (1, 0));

    // once the alarm clears, redrive resumes
    alarm(&stack, "replays-failing", StateValue::Ok).await;
    let summary = redrive(&stack, &redriver(&stack, &env), json!({}), &env).await;
    assert!(!summary.paused);
    assert_eq!(summary.redriven, 1);

    // an alarm that does not exist holds redrive too (a typo must not disable the breaker)
    send(&stack, &stack.dlq, &order_body("o-2"), &[], None).await;
    let typo = [("PAUSE_ON_ALARMS", "replays-fialing")];
    let summary = redrive(&stack, &redriver(&stack, &typo), json!({}), &typo).await;
    assert!(
        summary.paused
            && summary
                .pause_reason
                .as_deref()
                .unwrap()
                .contains("does not exist"),
        "{summary:?}"
    );
    assert_eq!(stack.depth(&stack.dlq).await, (1, 0));
}

#[tokio::test]
async fn replay_is_selective_by_reason() {
    let stack = Stack::start(StackOptions::default()).await;
    let permanent = |reason: &str| {
        vec![
            ("x-failure-class", string_attr("permanent")),
            ("x-failure-reason", string_attr(reason)),
        ]
    };
    send(
        &stack,
        &stack.dlq,
        &order_body("o-fixed"),
        &permanent("VALIDATION_FAILED"),
        None,
    )
    .await;
    send(
        &stack,
        &stack.dlq,
        "{bad",
        &permanent("MALFORMED_JSON"),
        None,
    )
    .await;
    send(&stack, &stack.dlq, &order_body("o-other"), &[], None).await;
    let summary = redrive(
        &stack,
        &redriver(&stack, &[]),
        json!({"reason": "VALIDATION_FAILED"}),
        &[],
    )
    .await;
    assert_eq!((summary.redriven, summary.skipped), (1, 2));
    let main = drain_view(&stack, &stack.main).await;
    assert_eq!(main.len(), 1);
    assert!(body_of(&main[0]).contains("o-fixed"));
    assert_eq!(
        attr(&main[0], "x-failure-class"),
        None,
        "a replay is a fresh attempt"
    );
    assert_eq!(attr(&main[0], "x-redrive-count"), Some("1"));
    assert_eq!(stack.depth(&stack.dlq).await.0, 2);
}

#[tokio::test]
async fn fifo_replays_keep_group_and_order() {
    let stack = Stack::start(StackOptions {
        fifo: true,
        ..Default::default()
    })
    .await;
    for (i, g) in [("1", "A"), ("2", "B"), ("3", "A"), ("4", "A")] {
        send(
            &stack,
            &stack.dlq,
            &order_body(&format!("o-{g}{i}")),
            &[],
            Some(g),
        )
        .await;
    }
    let summary = redrive(&stack, &redriver(&stack, &[]), json!({}), &[]).await;
    assert_eq!(summary.redriven, 4, "{summary:?}");
    let main = stack.receive_n(&stack.main, 4).await;
    let a: Vec<&str> = main
        .iter()
        .filter(|m| sys_attr(m, Sys::MessageGroupId) == Some("A"))
        .map(body_of)
        .collect();
    assert_eq!(
        a,
        vec![order_body("o-A1"), order_body("o-A3"), order_body("o-A4")]
    );
    assert!(
        main.iter()
            .any(|m| sys_attr(m, Sys::MessageGroupId) == Some("B"))
    );
    assert!(main.iter().all(|m| {
        sys_attr(m, Sys::MessageDeduplicationId).is_some_and(|d| d.starts_with("redrive-1-"))
    }));
}

#[tokio::test]
async fn the_rate_limit_holds_over_sixty_messages() {
    let stack = Stack::start(StackOptions::default()).await;
    for chunk in 0..6 {
        let entries: Vec<_> = (0..10)
            .map(|i| {
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(format!("e{i}"))
                    .message_body(order_body(&format!("o-{chunk}-{i}")))
                    .build()
                    .unwrap()
            })
            .collect();
        stack
            .sqs
            .send_message_batch()
            .queue_url(&stack.dlq.url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
    }
    let rate = 20.0;
    let started = std::time::Instant::now();
    let summary = redrive(
        &stack,
        &redriver(&stack, &[]),
        json!({"ratePerSecond": rate}),
        &[],
    )
    .await;
    let wall = started.elapsed().as_secs_f64();
    assert_eq!(summary.redriven, 60);
    let achieved = summary.achieved_rate_per_second.expect("achieved rate");
    let error_pct = (achieved - rate).abs() / rate * 100.0;
    println!(
        "rate: configured {rate}/s, achieved {achieved:.2}/s ({error_pct:.2} % off), 60 messages in {wall:.2} s"
    );
    // A token bucket can only be late, never early: the upper bound is firm. The lower bound is
    // loose so a loaded machine does not fail the test; the benchmark reports the precise error.
    assert!(
        achieved <= rate * 1.05,
        "faster than the limit: {achieved}/s"
    );
    assert!(
        achieved >= rate * 0.5,
        "far slower than the limit: {achieved}/s"
    );
    // The bucket starts full with one batch (10 tokens); the other 50 each wait an interval.
    assert!(
        wall >= (60 - resq::sqs::MAX_BATCH) as f64 / rate,
        "60 replays cannot take less than 50 token intervals"
    );
}

#[tokio::test]
async fn max_messages_bounds_a_run() {
    let stack = Stack::start(StackOptions::default()).await;
    for i in 0..15 {
        send(
            &stack,
            &stack.dlq,
            &order_body(&format!("o-{i}")),
            &[],
            None,
        )
        .await;
    }
    let summary = redrive(
        &stack,
        &redriver(&stack, &[]),
        json!({"maxMessages": 12, "ratePerSecond": 500}),
        &[],
    )
    .await;
    assert_eq!(summary.redriven, 12);
    // past its budget the run reads on to the end of the DLQ (to archive what is due)
    assert_eq!(summary.stopped_by, resq_redriver::StopReason::Empty);
    assert_eq!(
        stack.depth(&stack.dlq).await,
        (3, 0),
        "the rest is visible again for the next run"
    );
}

#[tokio::test]
async fn round_trip_consumer_dlq_redriver_until_the_cap_archives_it() {
    // GIVEN an order that always fails transiently, and a queue that dead-letters after one receive
    let stack = Stack::start(StackOptions {
        max_receive_count: 1,
        ..Default::default()
    })
    .await;
    let consumer = consumer(&stack, &NO_BACKOFF);
    let redriver = redriver(&stack, &[("REDRIVE_RATE_PER_SECOND", "500")]);
    send(
        &stack,
        &stack.main,
        &order_body("transient-forever"),
        &[],
        None,
    )
    .await;
    let mut trips = 0;
    let mut redriven = 0;
    // WHEN the pipeline runs: consumer, SQS's own dead-lettering, redriver, again and again
    for _ in 0..10 {
        let batch = stack.receive(&stack.main, 10).await;
        if !batch.is_empty() {
            trips += 1;
            invoke(&stack, &consumer, &stack.main, &batch).await;
            continue;
        }
        let summary = redrive(&stack, &redriver, json!({}), &[]).await;
        redriven += summary.redriven;
        if summary.received == 0 && stack.depth(&stack.main).await == (0, 0) {
            break;
        }
    }
    // THEN it really ran MAX_REDRIVE_ATTEMPTS replays (the last one too), and the redriver
    // archived it when it came back from the last one
    assert_eq!(redriven, 3);
    assert_eq!(
        trips, 4,
        "the first delivery plus three replays, each one processed"
    );
    let keys = stack.keys("archive/REDRIVE_CAP/").await;
    assert_eq!(keys.len(), 1);
    let envelope = stack.json_object(&keys[0]).await;
    assert_eq!(
        envelope["originalMessage"]["body"],
        order_body("transient-forever")
    );
    assert_eq!(envelope["metadata"]["archivedBy"], "redriver");
    assert_eq!(envelope["metadata"]["redriveCount"], 3);
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
    assert_eq!(stack.depth(&stack.dlq).await, (0, 0));
    assert!(stack.keys("orders/").await.is_empty());
}
