//! The operator tool's commands against moto.

use std::time::Duration;

use aws_sdk_cloudwatch::types::{ComparisonOperator, StateValue, Statistic};
use resq::archive::{ArchiveEntry, ArchiveFacts, Archiver, OriginalMessage};
use resq::attributes::{AttributeValue, MessageAttributes};
use resq::reason::ArchiveReason;
use resq_e2e::{Stack, StackOptions};
use resq_ops::{archive, dlq, orders, status};

use crate::helpers::*;

/// The consumer's default idempotency window (90 days) and the redriver's TTL (a day).
const WINDOW: archive::RestoreWindow = archive::RestoreWindow {
    window: Duration::from_secs(resq_consumer::config::DEFAULT_IDEMPOTENCY_WINDOW_SECONDS),
    ttl: Duration::from_secs(resq_redriver::config::DEFAULT_ARCHIVE_AFTER_SECONDS),
};

#[tokio::test]
async fn send_generated_and_from_a_file() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let generated = orders::generate("G-", 25, 0.0, 0.0, &mut rand::rng());
    let report = status::send(&ctx, &generated, |_| Default::default())
        .await
        .unwrap();
    assert_eq!((report.sent, report.failed.len()), (25, 0));
    let file = std::env::temp_dir().join(format!("resq-cli-orders-{}.jsonl", std::process::id()));
    std::fs::write(&file, format!("{}\nnot json\n", order_body("F-1"))).unwrap();
    let from_file = orders::from_file(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    assert_eq!(
        status::send(&ctx, &from_file, |_| Default::default())
            .await
            .unwrap()
            .sent,
        2
    );
    assert_eq!(stack.depth(&stack.main).await, (27, 0));
    let bodies: Vec<String> = stack
        .receive_n(&stack.main, 27)
        .await
        .iter()
        .map(|m| m.body().unwrap_or_default().to_owned())
        .collect();
    assert!(bodies.contains(&"not json".to_owned()));
    assert!(bodies.contains(&order_body("F-1")));
}

#[tokio::test]
async fn status_shows_depths_and_alarm_states() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    for i in 0..3 {
        send(
            &stack,
            &stack.main,
            &order_body(&format!("o-{i}")),
            &[],
            None,
        )
        .await;
    }
    send(&stack, &stack.dlq, "{", &[], None).await;
    stack.receive(&stack.main, 1).await;
    breach(
        &stack,
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        100.0,
    )
    .await;
    stack
        .cloudwatch
        .put_metric_alarm()
        .alarm_name("resq-dlq-depth")
        .namespace("AWS/SQS")
        .metric_name("ApproximateNumberOfMessagesVisible")
        .statistic(Statistic::Maximum)
        .period(60)
        .evaluation_periods(1)
        .threshold(50.0)
        .comparison_operator(ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .unwrap();
    stack
        .cloudwatch
        .set_alarm_state()
        .alarm_name("resq-dlq-depth")
        .state_value(StateValue::Alarm)
        .state_reason("test")
        .send()
        .await
        .unwrap();
    let s = status::status(&ctx, "resq-").await.unwrap();
    let depths: Vec<(&str, u64, u64)> = s
        .queues
        .iter()
        .map(|q| (q.label, q.visible, q.in_flight))
        .collect();
    assert_eq!(depths, vec![("main", 2, 1), ("dlq", 1, 0)]);
    assert_eq!(
        s.alarms,
        vec![("resq-dlq-depth".to_owned(), "ALARM".to_owned())]
    );
    // no event source mapping named: the consumer breaker is not configured
    assert_eq!(
        s.consumer,
        resq_ops::consumer::ConsumerStatus::NotConfigured
    );
    let table = resq_ops::render::status(&s, resq_ops::now_ms(), false);
    assert!(
        table.contains("resq-dlq-depth")
            && table.contains("ALARM")
            && table.contains("\nconsumer breaker: not configured"),
        "{table}"
    );
}

#[tokio::test]
async fn dlq_peek_filters_and_leaves_everything_in_place() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let permanent = |r: &str| {
        vec![
            ("x-failure-class", string_attr("permanent")),
            ("x-failure-reason", string_attr(r)),
        ]
    };
    send(
        &stack,
        &stack.dlq,
        "{bad",
        &permanent("MALFORMED_JSON"),
        None,
    )
    .await;
    send(
        &stack,
        &stack.dlq,
        &order_body("o-2"),
        &permanent("VALIDATION_FAILED"),
        None,
    )
    .await;
    send(&stack, &stack.dlq, &order_body("o-3"), &[], None).await;
    let all = dlq::peek(
        &ctx,
        &dlq::Filter {
            limit: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(all.len(), 3);
    let malformed = dlq::peek(
        &ctx,
        &dlq::Filter {
            reason: Some("MALFORMED_JSON".into()),
            limit: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(malformed.len(), 1);
    assert_eq!(malformed[0].body, "{bad");
    assert_eq!(malformed[0].failure_class.as_deref(), Some("permanent"));
    let old = dlq::peek(
        &ctx,
        &dlq::Filter {
            older_than: Some(Duration::from_secs(3600)),
            limit: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(old.is_empty());
    assert_eq!(
        stack.depth(&stack.dlq).await,
        (3, 0),
        "peeking removes nothing and hides nothing"
    );

    // a scheduled run keeps the two permanent failures and hides them until their TTL …
    let run = redrive(&stack, &redriver(&stack, &[]), serde_json::json!({}), &[]).await;
    assert_eq!((run.redriven, run.kept), (1, 2));
    assert_eq!(stack.depth(&stack.dlq).await, (0, 2));
    let none = dlq::peek(
        &ctx,
        &dlq::Filter {
            limit: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(none.is_empty());
    // … and the operator reaches them at once: `resq dlq peek --kept`
    assert_eq!(
        dlq::unhide_kept(&ctx, Some("VALIDATION_FAILED"))
            .await
            .unwrap(),
        1
    );
    let shown = dlq::peek(
        &ctx,
        &dlq::Filter {
            limit: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].reason.as_deref(), Some("VALIDATION_FAILED"));
    // (the keep list still names the one shown: its stale receipt handle is harmless)
    assert!(dlq::unhide_kept(&ctx, None).await.unwrap() >= 1);
    assert_eq!(stack.depth(&stack.dlq).await, (2, 0));
}

#[tokio::test]
async fn dlq_redrive_dry_run_first_then_selectively() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let permanent = |r: &str| {
        vec![
            ("x-failure-class", string_attr("permanent")),
            ("x-failure-reason", string_attr(r)),
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
    let request = |dry_run| resq_redriver::request::RunRequest {
        dry_run,
        max_messages: Some(100),
        rate_per_second: 100.0,
        reason: Some("VALIDATION_FAILED".into()),
        older_than: None,
        group: None,
        rate_max: 100.0,
        alarm: None,
    };
    let dry = dlq::redrive(
        &ctx,
        request(true),
        3,
        Duration::from_secs(86_400),
        resq_redriver::config::PermanentAction::Keep,
    )
    .await;
    assert_eq!((dry.dry_run, dry.redriven, dry.skipped), (true, 1, 1));
    assert_eq!(stack.depth(&stack.dlq).await, (2, 0));
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
    let real = dlq::redrive(
        &ctx,
        request(false),
        3,
        Duration::from_secs(86_400),
        resq_redriver::config::PermanentAction::Keep,
    )
    .await;
    assert_eq!((real.redriven, real.skipped, real.failed), (1, 1, 0));
    let main = stack.receive_n(&stack.main, 1).await;
    assert_eq!(main[0].body(), Some(order_body("o-fixed").as_str()));
    assert_eq!(stack.depth(&stack.dlq).await.0, 1);
}

#[tokio::test]
async fn archive_ls_show_and_restore() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let archiver = Archiver::new(
        resq::store::S3Store::new(stack.s3.clone(), &stack.bucket),
        "consumer",
    );
    let at = chrono::Utc::now();
    for (i, reason) in [ArchiveReason::RedriveCap, ArchiveReason::TtlExpired]
        .into_iter()
        .enumerate()
    {
        let message = OriginalMessage {
            message_id: format!("m-{i}"),
            body: order_body(&format!("o-{i}")),
            message_attributes: MessageAttributes::from([
                ("x-redrive-count".to_owned(), AttributeValue::number(3)),
                ("x-failure-reason".to_owned(), AttributeValue::string("X")),
                ("trace-id".to_owned(), AttributeValue::string("t-9")),
                // first sent two days ago: long past the redriver's 24 h TTL
                (
                    "x-first-sent-at".to_owned(),
                    AttributeValue::number(now_ms() - 48 * 3_600_000),
                ),
            ]),
            attributes: Default::default(),
            raw_record: None,
        };
        let meta = ArchiveFacts {
            source_queue: stack.main.url.clone(),
            redrive_count: Some(3),
            receive_count: Some(1),
            first_sent_at: None,
            last_error: None,
        };
        archiver
            .write(
                &ArchiveEntry {
                    reason,
                    message,
                    facts: meta,
                },
                at,
            )
            .await
            .unwrap();
    }
    assert_eq!(archive::list(&ctx, None, None).await.unwrap().len(), 2);
    // an entry archived on a later day after its message's first send day stays under that day
    let late = OriginalMessage {
        message_id: "m-late".into(),
        body: order_body("o-late"),
        message_attributes: MessageAttributes::new(),
        attributes: Default::default(),
        raw_record: None,
    };
    let facts = ArchiveFacts {
        source_queue: stack.dlq.url.clone(),
        redrive_count: Some(3),
        receive_count: Some(1),
        first_sent_at: Some((at - chrono::Duration::days(1)).timestamp_millis() as u64),
        last_error: None,
    };
    archiver
        .write(
            &ArchiveEntry {
                reason: ArchiveReason::RedriveCap,
                message: late.clone(),
                facts: facts.clone(),
            },
            at,
        )
        .await
        .unwrap();
    archiver
        .write(
            &ArchiveEntry {
                reason: ArchiveReason::RedriveCap,
                message: late,
                facts,
            },
            at + chrono::Duration::days(1),
        )
        .await
        .unwrap();
    let yesterday = (at - chrono::Duration::days(1))
        .format("%Y-%m-%d")
        .to_string();
    assert_eq!(
        archive::list(&ctx, Some("REDRIVE_CAP"), Some(&yesterday))
            .await
            .unwrap()
            .len(),
        1,
        "one entry, under the day the message was first sent"
    );
    let capped = archive::list(
        &ctx,
        Some("REDRIVE_CAP"),
        Some(&at.format("%Y-%m-%d").to_string()),
    )
    .await
    .unwrap();
    assert_eq!(capped.len(), 1);
    assert!(
        archive::list(&ctx, Some("REDRIVE_CAP"), Some("1999-01-01"))
            .await
            .unwrap()
            .is_empty()
    );
    let envelope = archive::show(&ctx, &capped[0]).await.unwrap();
    assert_eq!(envelope.metadata.reason, "REDRIVE_CAP");
    assert!(archive::show(&ctx, "archive/nope.json").await.is_err());

    assert_eq!(
        archive::restore(&ctx, &capped[0], "ops", true, Some(WINDOW), false)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        stack.depth(&stack.main).await,
        (0, 0),
        "a dry run sends nothing"
    );
    // past a four-day idempotency window (it was first sent two days ago, and restored it
    // could run for the queue's retention and the TTL): refused, saying why
    let four_days = archive::RestoreWindow {
        window: Duration::from_secs(4 * 86_400),
        ..WINDOW
    };
    let refused = archive::restore(&ctx, &capped[0], "ops", false, Some(four_days), false)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, resq_ops::CliError::PastIdempotencyWindow { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("--force"), "{refused}");
    assert_eq!(stack.depth(&stack.main).await, (0, 0), "nothing was sent");
    let id = archive::restore(&ctx, &capped[0], "ops", false, Some(WINDOW), false)
        .await
        .unwrap()
        .expect("message id");
    let restored = stack.receive_n(&stack.main, 1).await;
    assert_eq!(restored[0].message_id(), Some(id.as_str()));
    assert_eq!(restored[0].body(), Some(order_body("o-0").as_str()));
    assert_eq!(attr(&restored[0], "trace-id"), Some("t-9"));
    assert_eq!(
        attr(&restored[0], "x-redrive-count"),
        None,
        "a restore starts the count afresh"
    );
    assert_eq!(attr(&restored[0], "x-failure-reason"), None);
    assert_eq!(
        attr(&restored[0], "x-first-sent-at"),
        None,
        "a restore starts a fresh TTL"
    );
    assert_eq!(
        archive::list(&ctx, None, None).await.unwrap().len(),
        3,
        "the archive keeps its record"
    );
    // WHEN the restored message fails again and reaches the DLQ (as SQS moves it, attributes
    // and all), the next run redrives it: its TTL counts from the restore, not the first send
    let attrs = restored[0].message_attributes().cloned();
    stack
        .sqs
        .send_message()
        .queue_url(&stack.dlq.url)
        .message_body(order_body("o-0"))
        .set_message_attributes(attrs)
        .send()
        .await
        .unwrap();
    let summary = redrive(&stack, &redriver(&stack, &[]), serde_json::json!({}), &[]).await;
    assert_eq!(
        (summary.redriven, summary.archived.len()),
        (1, 0),
        "{summary:?}"
    );
}

#[tokio::test]
async fn two_restores_of_one_entry_send_it_once_and_a_failed_one_may_be_retried() {
    // GIVEN an archived order
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let archiver = Archiver::new(
        resq::store::S3Store::new(stack.s3.clone(), &stack.bucket),
        "consumer",
    );
    let message = OriginalMessage {
        message_id: "m-1".into(),
        body: order_body("o-1"),
        message_attributes: MessageAttributes::new(),
        attributes: Default::default(),
        raw_record: None,
    };
    let facts = ArchiveFacts {
        source_queue: stack.main.url.clone(),
        redrive_count: Some(3),
        receive_count: Some(1),
        first_sent_at: Some(now_ms()),
        last_error: None,
    };
    let entry = ArchiveEntry {
        reason: ArchiveReason::RedriveCap,
        message,
        facts,
    };
    archiver.write(&entry, chrono::Utc::now()).await.unwrap();
    let key = archive::list(&ctx, None, None).await.unwrap().remove(0);
    // WHEN alice's restore cannot send (a queue that does not exist)
    let gone = resq_ops::context::Context {
        main_queue_url: format!("{}-gone", stack.main.url),
        ..ctx.clone()
    };
    let failed = archive::restore(&gone, &key, "alice", false, None, false).await;
    assert!(
        matches!(failed, Err(resq_ops::CliError::Aws { .. })),
        "{failed:?}"
    );
    // THEN her retry goes on, and sends it
    let id = archive::restore(&ctx, &key, "alice", false, Some(WINDOW), false)
        .await
        .unwrap()
        .expect("sent");
    // AND bob's restore of the same entry is refused, naming her, and sends nothing
    let refused = archive::restore(&ctx, &key, "bob", false, Some(WINDOW), false)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, resq_ops::CliError::Claimed { .. })
            && refused.to_string().contains("was restored by alice at")
            && refused.to_string().contains(&id),
        "{refused}"
    );
    let main = stack.receive_n(&stack.main, 1).await;
    assert_eq!(main[0].message_id(), Some(id.as_str()));
    assert_eq!(stack.depth(&stack.main).await, (0, 1), "sent once");
    // AND the claims say so, in S3: the failed one, then the sent one
    assert_eq!(stack.keys(&archive::claim_prefix(&key)).await.len(), 2);
}

#[tokio::test]
async fn the_demo_audit_finds_every_order_or_reports_it_lost() {
    use resq::store::ObjectStore;
    use resq_local::demo::{DEMO_ORDER_ATTRIBUTE, Plan, audit};
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let tag = |id: &str| vec![(DEMO_ORDER_ATTRIBUTE, string_attr(id))];
    // A processed (and written twice: a doubled effect), B archived, C in the DLQ, D still in
    // the main queue, E nowhere
    resq::store::S3Store::new(stack.s3.clone(), &stack.bucket)
        .put_if_absent("orders/A.json", b"{}".to_vec())
        .await
        .unwrap();
    stack
        .s3
        .put_object()
        .bucket(&stack.bucket)
        .key("orders/A.json")
        .body(b"{}".to_vec().into())
        .send()
        .await
        .unwrap();
    let archiver = Archiver::new(
        resq::store::S3Store::new(stack.s3.clone(), &stack.bucket),
        "consumer",
    );
    let message = OriginalMessage {
        message_id: "m-b".into(),
        body: order_body("B"),
        message_attributes: MessageAttributes::from([(
            DEMO_ORDER_ATTRIBUTE.to_owned(),
            AttributeValue::string("B"),
        )]),
        attributes: Default::default(),
        raw_record: None,
    };
    let meta = ArchiveFacts {
        source_queue: stack.main.url.clone(),
        redrive_count: Some(3),
        receive_count: None,
        first_sent_at: None,
        last_error: None,
    };
    archiver
        .write(
            &ArchiveEntry {
                reason: ArchiveReason::RedriveCap,
                message,
                facts: meta,
            },
            chrono::Utc::now(),
        )
        .await
        .unwrap();
    send(&stack, &stack.dlq, "{bad", &tag("C"), None).await;
    send(&stack, &stack.main, &order_body("D"), &tag("D"), None).await;
    let plans = std::collections::HashMap::from([
        ("A".to_owned(), Plan::Valid),
        ("B".to_owned(), Plan::Doomed),
        ("C".to_owned(), Plan::Malformed),
        ("D".to_owned(), Plan::Valid),
        ("E".to_owned(), Plan::Valid),
    ]);
    let a = audit(&ctx, &plans, 5).await.unwrap();
    assert_eq!(
        (a.processed, a.archived, a.dead_lettered, a.in_queues),
        (1, 1, 1, 2)
    );
    assert_eq!(a.lost, vec!["E".to_owned()]);
    assert_eq!(
        a.summary_line(),
        "summary: sent=5 processed=1 dead_lettered=1 archived=1 in_queues=2 lost=1 duplicate_effects=1"
    );
    assert_eq!(a.max_redrives, 3, "B was archived at the cap");
    assert_eq!(a.table[&(Plan::Valid, "LOST")], 1);
}
