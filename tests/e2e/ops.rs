//! The operator's answers (docs/cli.md) against the emulator: `resq find`, the shadow and canary
//! replays, the patched restore, `--stack`, and the consumer's pause by hand
//! (`resq consumer pause` / `resume`, `resq status`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use resq::archive::{
    ArchiveEntry, ArchiveEnvelope, ArchiveFacts, Archiver, OriginalMessage, RestoreStatus,
};
use resq::attributes::{AttributeValue, MessageAttributes};
use resq::correlation::CorrelationKey;
use resq::reason::ArchiveReason;
use resq::store::{ObjectStore, S3Store};
use resq_e2e::{Stack, StackOptions};
use resq_ops::context::Context;
use resq_ops::find::{FindOptions, Verdict};
use resq_ops::locate::Place;
use resq_ops::{CliError, archive, canary, dlq, find, shadow};

use crate::helpers::*;

/// A staging queue for a shadow replay to copy into; its URL.
fn permanent(reason: &str) -> Vec<(&'static str, aws_sdk_sqs::types::MessageAttributeValue)> {
    vec![
        ("x-failure-class", string_attr("permanent")),
        ("x-failure-reason", string_attr(reason)),
    ]
}

fn invalid_order(id: &str) -> String {
    serde_json::json!({"orderId": id, "userId": "u-1", "items": []}).to_string()
}

/// `resq find`'s defaults: the main queue counted, not received from.
const FIND: FindOptions = FindOptions {
    main_queue_limit: 0,
    dlq_limit: find::DEFAULT_DLQ_LIMIT,
    order_id_attribute: None,
    archive_since: None,
    correlation: CorrelationKey::ORDERS,
    group: None,
};

/// `resq find --main-queue`.
const FIND_MAIN: FindOptions = FindOptions {
    main_queue_limit: find::DEFAULT_MAIN_QUEUE_LIMIT,
    dlq_limit: find::DEFAULT_DLQ_LIMIT,
    order_id_attribute: None,
    archive_since: None,
    correlation: CorrelationKey::ORDERS,
    group: None,
};

async fn versions(stack: &Stack, key: &str) -> usize {
    stack
        .s3
        .list_object_versions()
        .bucket(&stack.bucket)
        .prefix(key)
        .send()
        .await
        .unwrap()
        .versions()
        .iter()
        .filter(|v| v.key() == Some(key))
        .count()
}

async fn archive_entry(
    stack: &Stack,
    reason: ArchiveReason,
    message_id: &str,
    body: &str,
) -> String {
    archive_entry_in(stack, &stack.bucket, reason, message_id, body).await
}

async fn archive_entry_in(
    stack: &Stack,
    bucket: &str,
    reason: ArchiveReason,
    message_id: &str,
    body: &str,
) -> String {
    let archiver = Archiver::new(S3Store::new(stack.s3.clone(), bucket), "consumer");
    let message = OriginalMessage {
        message_id: message_id.into(),
        body: body.into(),
        message_attributes: MessageAttributes::from([(
            "trace-id".to_owned(),
            AttributeValue::string("t-1"),
        )]),
        attributes: Default::default(),
        raw_record: None,
    };
    let facts = ArchiveFacts {
        source_queue: stack.main.url.clone(),
        redrive_count: Some(0),
        receive_count: Some(1),
        first_sent_at: Some(now_ms() - 3_600_000),
        last_error: Some("VALIDATION_FAILED: items is empty".into()),
    };
    archiver
        .write(
            &ArchiveEntry {
                reason,
                message,
                facts,
            },
            chrono::Utc::now(),
        )
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn find_says_where_an_order_is_in_each_place_and_several_at_once() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let store = S3Store::new(stack.s3.clone(), &stack.bucket);
    // GIVEN A recorded (written twice: a doubled effect) with a duplicate copy in the DLQ …
    store
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
    // … C a permanent failure the redriver kept (hidden until its TTL), D archived, B waiting
    // in the main queue, E nowhere
    send(
        &stack,
        &stack.dlq,
        &invalid_order("C"),
        &permanent("VALIDATION_FAILED"),
        None,
    )
    .await;
    let run = redrive(&stack, &redriver(&stack, &[]), serde_json::json!({}), &[]).await;
    assert_eq!(run.kept, 1, "{run:?}");
    send(&stack, &stack.dlq, &order_body("A"), &transient(), None).await;
    let d_key = archive_entry(&stack, ArchiveReason::RedriveCap, "m-d", &order_body("D")).await;
    send(&stack, &stack.main, &order_body("B"), &[], None).await;
    assert_eq!(stack.depth(&stack.dlq).await, (1, 1));

    // WHEN each is looked for
    let a = find::find(&ctx, "A", &FIND).await.unwrap();
    // THEN A is in two places: recorded twice, and a copy in the DLQ with its reason
    assert_eq!(a.verdict(), Verdict::Found);
    assert_eq!(a.places.len(), 2, "{:?}", a.places);
    assert!(
        a.places
            .iter()
            .any(|p| matches!(p, Place::Recorded(r) if r.writes == 2 && r.current))
    );
    assert!(a.places.iter().any(|p| matches!(p, Place::Dlq(q)
        if q.failure_class.as_deref() == Some("transient")
            && q.failure_reason.as_deref() == Some("DOWNSTREAM_UNAVAILABLE")
            && q.redrives() == Some(0))));
    // AND C is kept, found in the keep list: its hide is left as it was
    let c = find::find(&ctx, "C", &FIND).await.unwrap();
    assert!(
        matches!(&c.places[..], [Place::Kept(k)] if k.failure_reason.as_deref() == Some("VALIDATION_FAILED")),
        "{:?}",
        c.places
    );
    assert_eq!(stack.depth(&stack.dlq).await, (1, 1), "C is still hidden");
    assert!(
        dlq::peek(
            &ctx,
            &dlq::Filter {
                limit: 10,
                ..Default::default()
            }
        )
        .await
        .unwrap()
        .iter()
        .all(|p| !p.body.contains("\"C\"")),
        "a peek does not reach it: it stays hidden"
    );
    // AND D is archived under its key, with its reason
    let d = find::find(&ctx, "D", &FIND).await.unwrap();
    assert!(
        matches!(&d.places[..], [Place::Archived(e)] if e.key == d_key && e.reason == "REDRIVE_CAP"),
        "{:?}",
        d.places
    );
    // AND a look at the archive since tomorrow reads no entry, and so does not see D: the
    // entries left out are said, and D is not seen, not nowhere
    let since = FindOptions {
        archive_since: Some(chrono::Utc::now() + chrono::Duration::days(1)),
        ..FIND
    };
    let later = find::find(&ctx, "D", &since).await.unwrap();
    assert!(later.places.is_empty() && later.look.coverage.archive_read == 0);
    assert_eq!(later.look.coverage.archive_not_read, 1);
    assert!(
        later
            .look
            .unseen()
            .contains(&"1 archive entries written before --archive-since were not read".into()),
        "{:?}",
        later.look.unseen()
    );
    assert_eq!(later.verdict(), Verdict::NotSeen);
    // AND by default B, waiting in the main queue, is not received: the main queue's counts
    // are given instead, and B is not seen (exit status 4), not nowhere
    let b = find::find(&ctx, "B", &FIND).await.unwrap();
    assert_eq!(b.verdict(), Verdict::NotSeen);
    assert_eq!(b.failure().unwrap().exit_code(), 4);
    let main = &b.look.coverage.main_queue;
    assert!(
        main.counted && !main.looked && main.received == 0,
        "{main:?}"
    );
    assert_eq!(main.visible_before, 1);
    assert!(
        b.look.unseen()[0].starts_with("the main queue was not looked into: it holds about 1 visible and 0 in flight (`resq find --main-queue`"),
        "{:?}",
        b.look.unseen()
    );
    // AND E, nowhere in the pipeline, is only not seen while the main queue holds something
    let e = find::find(&ctx, "E", &FIND).await.unwrap();
    assert_eq!(e.verdict(), Verdict::NotSeen, "{:?}", e.look.unseen());
    // AND with --main-queue, B is in the main queue, and released at once; only that look
    // received it (none of the five looks before did), and its receive count says so
    let b = find::find(&ctx, "B", &FIND_MAIN).await.unwrap();
    assert!(
        matches!(&b.places[..], [Place::MainQueue(q)] if q.receive_count == Some(1)),
        "{:?}",
        b.places
    );
    assert_eq!(b.look.coverage.main_queue.received, 1);
    assert_eq!(
        stack.depth(&stack.main).await,
        (1, 0),
        "visible again at once"
    );
    // AND E is nowhere once the main queue was looked into too: exit status 3
    let e = find::find(&ctx, "E", &FIND_MAIN).await.unwrap();
    assert_eq!(e.verdict(), Verdict::Nowhere, "{:?}", e.look.unseen());
    assert_eq!(e.failure().unwrap().exit_code(), 3);
    assert_eq!(stack.depth(&stack.main).await, (1, 0));
    // AND the answer reads as JSON too
    let json: serde_json::Value =
        serde_json::from_str(&resq_ops::render::find(&a, now_ms(), true)).unwrap();
    assert_eq!(json["verdict"], "found");
    let places: BTreeSet<&str> = json["places"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["place"].as_str())
        .collect();
    assert_eq!(places, BTreeSet::from(["dlq", "recorded"]));
}

#[tokio::test]
async fn find_leaves_the_main_queue_alone_unless_asked() {
    // GIVEN a main queue that dead-letters after one receive, and an order waiting in it
    let stack = Stack::start(StackOptions {
        max_receive_count: 1,
        ..StackOptions::default()
    })
    .await;
    let ctx = context(&stack).await;
    send(&stack, &stack.main, &order_body("O-1"), &[], None).await;
    // WHEN it is looked for, as an operator does during an incident: `resq find O-1`
    let (code, out, notes) = resq(
        &stack,
        &[
            "--main-queue-url",
            &stack.main.url,
            "--dlq-url",
            &stack.dlq.url,
            "--archive-bucket",
            &stack.bucket,
            "find",
            "O-1",
        ],
        &[],
    );
    // THEN it is not seen (exit 4): the main queue was counted, not received from, and the
    // notes say how to look and what it costs
    assert_eq!(code, 4, "{out}{notes}");
    assert!(
        notes.contains("the main queue: not looked into (about 1 visible, 0 in flight"),
        "{notes}"
    );
    assert!(
        notes.contains("not seen: the main queue was not looked into: it holds about 1 visible"),
        "{notes}"
    );
    let not_seen = find::find(&ctx, "O-1", &FIND).await.unwrap();
    let main = &not_seen.look.coverage.main_queue;
    assert_eq!(
        (main.counted, main.received, main.visible_before),
        (true, 0, 1)
    );
    // AND the consumer's next receive gets it on its first receive: the look used none of
    // its receives (it is not moved to the DLQ without a reason)
    let batch = stack.receive(&stack.main, 10).await;
    assert_eq!(batch.len(), 1);
    assert_eq!(
        sys_attr(
            &batch[0],
            aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount
        ),
        Some("1")
    );
    // (the consumer processed it)
    stack
        .sqs
        .delete_message()
        .queue_url(&stack.main.url)
        .receipt_handle(batch[0].receipt_handle().unwrap_or_default())
        .send()
        .await
        .unwrap();
    assert_eq!(stack.depth(&stack.dlq).await, (0, 0));

    // GIVEN another order waiting
    send(&stack, &stack.main, &order_body("O-2"), &[], None).await;
    // WHEN it is looked for with --main-queue
    let found = find::find(&ctx, "O-2", &FIND_MAIN).await.unwrap();
    // THEN it is found, and the look says it used the message's last allowed receive
    assert_eq!(found.verdict(), Verdict::Found);
    let main = &found.look.coverage.main_queue;
    assert_eq!(
        (main.max_receive_count, main.last_receive_used),
        (Some(1), 1)
    );
    let notes = resq_ops::render::find_notes(&found, false);
    assert!(
        notes.contains("used the last allowed receive of 1 main-queue message"),
        "{notes}"
    );
    // AND that is what happens: the consumer's next receive finds nothing, SQS moved it to
    // the DLQ without a reason
    assert!(stack.receive(&stack.main, 10).await.is_empty());
    let moved = receive_until(&stack.sqs, &stack.dlq.url, 1).await;
    assert_eq!(moved.len(), 1);
    assert_eq!(attr(&moved[0], "x-failure-class"), None);
}

#[tokio::test]
async fn find_sees_orders_whose_id_cannot_be_read_and_never_calls_them_nowhere() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    // GIVEN a MALFORMED_JSON dead letter of ORD-1 (a truncated body) in the DLQ, and one of
    // ORD-2 archived
    let truncated =
        |id: &str| format!(r#"{{"orderId":"{id}","userId":"u-1","items":[{{"productId":"#);
    send(
        &stack,
        &stack.dlq,
        &truncated("ORD-1"),
        &permanent("MALFORMED_JSON"),
        None,
    )
    .await;
    let key = archive_entry(
        &stack,
        ArchiveReason::PermanentFailure,
        "m-2",
        &truncated("ORD-2"),
    )
    .await;
    // WHEN each is looked for
    let one = find::find(&ctx, "ORD-1", &FIND).await.unwrap();
    let two = find::find(&ctx, "ORD-2", &FIND).await.unwrap();
    // THEN each is found where it is, marked as matched by its text
    assert_eq!(one.verdict(), Verdict::Found, "{:?}", one.look.unseen());
    assert!(
        matches!(&one.places[..], [Place::Dlq(q)]
            if q.matched_by_text && q.failure_reason.as_deref() == Some("MALFORMED_JSON")),
        "{:?}",
        one.places
    );
    assert!(
        matches!(&two.places[..], [Place::Archived(a)] if a.matched_by_text && a.key == key),
        "{:?}",
        two.places
    );
    // AND the answer says so
    let text = resq_ops::render::find(&one, now_ms(), false);
    assert!(
        text.contains("(matched by text: its order id could not be read"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&resq_ops::render::find(&two, now_ms(), true)).unwrap();
    assert_eq!(json["places"][0]["matchedByText"], true);
    // AND an order seen nowhere while such messages exist is not seen (exit 4), not nowhere
    let three = find::find(&ctx, "ORD-3", &FIND).await.unwrap();
    assert_eq!(three.verdict(), Verdict::NotSeen);
    assert_eq!(three.failure().unwrap().exit_code(), 4);
    let unseen = three.look.unseen();
    assert!(
        unseen
            .iter()
            .any(|u| u.starts_with("1 DLQ messages name no order that could be read"))
            && unseen
                .iter()
                .any(|u| u.starts_with("1 archive entries name no order that could be read")),
        "{unseen:?}"
    );

    // GIVEN a team's message, which names its business id paymentId
    send(
        &stack,
        &stack.dlq,
        r#"{"paymentId":"PAY-7","amount":3}"#,
        &transient(),
        None,
    )
    .await;
    // WHEN it is looked for by its type's field (the stack's CorrelationField)
    let payments = FindOptions {
        correlation: CorrelationKey::new("payment_id", "paymentId"),
        ..FIND
    };
    let pay = find::find(&ctx, "PAY-7", &payments).await.unwrap();
    // THEN its id is read: found, not by text
    assert!(
        matches!(&pay.places[..], [Place::Dlq(q)] if !q.matched_by_text),
        "{:?}",
        pay.places
    );
    // AND by orders' field it is still found, by its text
    let by_text = find::find(&ctx, "PAY-7", &FIND).await.unwrap();
    assert!(
        matches!(&by_text.places[..], [Place::Dlq(q)] if q.matched_by_text),
        "{:?}",
        by_text.places
    );
    // AND the DLQ is as it was: every message released
    assert_eq!(stack.depth(&stack.dlq).await, (2, 0));
}

#[tokio::test]
async fn a_shadow_replay_copies_to_staging_and_leaves_the_dlq_as_it_was() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let staging = staging_queue(&stack).await;
    // GIVEN a permanent failure the redriver kept and hid, two transient dead letters (one
    // replayed once already) and one past the cap
    send(
        &stack,
        &stack.dlq,
        &invalid_order("S-4"),
        &permanent("VALIDATION_FAILED"),
        None,
    )
    .await;
    let run = redrive(&stack, &redriver(&stack, &[]), serde_json::json!({}), &[]).await;
    assert_eq!(run.kept, 1);
    send(&stack, &stack.dlq, &order_body("S-1"), &transient(), None).await;
    let mut again = transient();
    again.push(("x-redrive-count", number_attr("1")));
    send(&stack, &stack.dlq, &order_body("S-2"), &again, None).await;
    let mut capped = transient();
    capped.push(("x-redrive-count", number_attr("3")));
    send(&stack, &stack.dlq, &order_body("S-3"), &capped, None).await;
    let before = drain_view(&stack, &stack.dlq).await;
    assert_eq!(before.len(), 3);
    let options = dlq::RedriveOptions {
        dry_run: false,
        failure_reason: None,
        older_than: None,
        group: None,
        max_messages: 100,
        rate_per_second: 100.0,
        max_redrive_attempts: 3,
        archive_after: Duration::from_secs(86_400),
        permanent_action: resq_redriver::config::PermanentAction::Keep,
        kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
    };

    // WHEN the DLQ is shadow-replayed to the staging queue
    let report = shadow::shadow(&ctx, &options, &staging).await.unwrap();

    // THEN the two a replay would send were copied, as the replay would send them
    assert_eq!(report.copied, 2, "{report:?}");
    assert_eq!(report.skipped.get("REDRIVE_CAP"), Some(&1));
    assert!(report.failure().is_none());
    let copies = receive_until(&stack.sqs, &staging, 2).await;
    assert_eq!(copies.len(), 2);
    let mut counts: Vec<(String, Option<String>)> = copies
        .iter()
        .map(|m| {
            (
                resq::correlation::CorrelationKey::ORDERS
                    .read(m.body().unwrap_or_default())
                    .unwrap_or_default(),
                attr(m, "x-redrive-count").map(str::to_owned),
            )
        })
        .collect();
    counts.sort();
    assert_eq!(
        counts,
        vec![
            ("S-1".to_owned(), Some("1".to_owned())),
            ("S-2".to_owned(), Some("2".to_owned()))
        ]
    );
    assert!(copies.iter().all(|m| attr(m, "x-failure-reason").is_none()));
    // AND the DLQ is as it was: the same messages, released, their counts untouched, the kept
    // one still hidden
    assert_eq!(stack.depth(&stack.dlq).await, (3, 1));
    let after = drain_view(&stack, &stack.dlq).await;
    let view = |ms: &[aws_sdk_sqs::types::Message]| {
        let mut v: Vec<(String, Option<String>)> = ms
            .iter()
            .map(|m| {
                (
                    m.message_id().unwrap_or_default().to_owned(),
                    attr(m, "x-redrive-count").map(str::to_owned),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(view(&after), view(&before));
    assert!(
        stack.depth(&stack.main).await == (0, 0),
        "nothing reached production"
    );

    // WHEN the permanent failures of a reason are shadow-replayed (as after a fix)
    let by_reason = dlq::RedriveOptions {
        failure_reason: Some("VALIDATION_FAILED".into()),
        ..options.clone()
    };
    let report = shadow::shadow(&ctx, &by_reason, &staging).await.unwrap();
    // THEN the kept one was brought back for the copy, copied, and hidden again
    assert_eq!(
        (report.unhidden, report.copied, report.hidden_again),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(stack.depth(&stack.dlq).await, (3, 1));
    let found = find::find(&ctx, "S-4", &FIND).await.unwrap();
    assert!(
        matches!(&found.places[..], [Place::Kept(_)]),
        "still kept, listed with its new receipt: {:?}",
        found.places
    );

    // AND a staging queue that is production is refused, before anything is received
    for to in [&stack.main.url, &stack.dlq.url] {
        let refused = shadow::shadow(&ctx, &options, to).await.unwrap_err();
        assert_eq!(refused.exit_code(), 2, "{refused}");
    }
    let no_main = Context {
        main_queue_url: String::new(),
        ..ctx.clone()
    };
    let refused = shadow::shadow(&no_main, &options, &stack.main.url)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("production source queue"),
        "{refused}"
    );
    assert_eq!(stack.depth(&stack.dlq).await, (3, 1));
}

#[tokio::test]
async fn a_shadow_replay_on_a_small_budget_leaves_every_kept_message_hidden() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let staging = staging_queue(&stack).await;
    // GIVEN three VALIDATION_FAILED failures the redriver kept and hid, and one more of that
    // reason dead-lettered since (visible)
    for i in 0..3 {
        send(
            &stack,
            &stack.dlq,
            &invalid_order(&format!("K-{i}")),
            &permanent("VALIDATION_FAILED"),
            None,
        )
        .await;
    }
    let run = redrive(&stack, &redriver(&stack, &[]), serde_json::json!({}), &[]).await;
    assert_eq!(run.kept, 3, "{run:?}");
    send(
        &stack,
        &stack.dlq,
        &invalid_order("V-1"),
        &permanent("VALIDATION_FAILED"),
        None,
    )
    .await;
    assert_eq!(stack.depth(&stack.dlq).await, (1, 3));
    // WHEN they are shadow-replayed by reason with a budget of one copy
    let options = dlq::RedriveOptions {
        dry_run: false,
        failure_reason: Some("VALIDATION_FAILED".into()),
        older_than: None,
        group: None,
        max_messages: 1,
        rate_per_second: 100.0,
        max_redrive_attempts: 3,
        archive_after: Duration::from_secs(86_400),
        permanent_action: resq_redriver::config::PermanentAction::Keep,
        kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
    };
    let report = shadow::shadow(&ctx, &options, &staging).await.unwrap();
    // THEN one copy was made, and only as many kept messages as it could copy were made
    // visible, then hidden again
    assert_eq!(report.copied, 1, "{report:?}");
    assert_eq!((report.kept_listed, report.unhidden), (3, 1), "{report:?}");
    assert_eq!(
        report.hidden_again + report.hidden_again_by_keep_list,
        1,
        "{report:?}"
    );
    assert!(report.kept_left_visible.is_empty(), "{report:?}");
    // AND the DLQ is as it was: the visible one visible, the three kept hidden, each still
    // found as kept
    assert_eq!(stack.depth(&stack.dlq).await, (1, 3));
    for i in 0..3 {
        let found = find::find(&ctx, &format!("K-{i}"), &FIND).await.unwrap();
        assert!(
            matches!(&found.places[..], [Place::Kept(_)]),
            "K-{i}: {:?}",
            found.places
        );
    }
    assert_eq!(receive_until(&stack.sqs, &staging, 1).await.len(), 1);
}

/// Runs `work` while a poller plays Lambda's event source mapping for the consumer.
async fn with_consumer<F: std::future::Future>(stack: &Stack, work: F) -> F::Output {
    let consumer = consumer(stack, &NO_BACKOFF);
    let done = AtomicBool::new(false);
    let (out, ()) = tokio::join!(
        async {
            let out = work.await;
            done.store(true, Ordering::SeqCst);
            out
        },
        async {
            while !done.load(Ordering::SeqCst) {
                let batch = stack.receive(&stack.main, 10).await;
                if batch.is_empty() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                } else {
                    invoke(stack, &consumer, &stack.main, &batch).await;
                }
            }
        }
    );
    out
}

fn canary_options(reason: &str) -> dlq::RedriveOptions {
    dlq::RedriveOptions {
        dry_run: false,
        failure_reason: Some(reason.into()),
        older_than: None,
        group: None,
        max_messages: 100,
        rate_per_second: 100.0,
        max_redrive_attempts: 3,
        archive_after: Duration::from_secs(86_400),
        permanent_action: resq_redriver::config::PermanentAction::Keep,
        kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
    }
}

const TWO_CANARIES: canary::CanaryOptions = canary::CanaryOptions {
    count: 2,
    min_success: 100.0,
    timeout: Duration::from_secs(60),
};

#[tokio::test]
async fn a_canary_replay_stops_when_the_fix_is_not_in() {
    // GIVEN four orders that failed validation, and a consumer that still rejects them
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    for i in 0..4 {
        send(
            &stack,
            &stack.dlq,
            &invalid_order(&format!("V-{i}")),
            &permanent("VALIDATION_FAILED"),
            None,
        )
        .await;
    }
    let before: BTreeSet<String> = drain_view(&stack, &stack.dlq)
        .await
        .iter()
        .filter_map(|m| m.message_id().map(str::to_owned))
        .collect();
    // … which the scheduled redriver kept (and hid) for a human
    let run = redrive(&stack, &redriver(&stack, &[]), serde_json::json!({}), &[]).await;
    assert_eq!(run.kept, 4, "{run:?}");
    assert_eq!(stack.depth(&stack.dlq).await, (0, 4));
    // WHEN two canaries are replayed, all of which must succeed
    let mut lines = Vec::new();
    let report = with_consumer(
        &stack,
        canary::run(
            &ctx,
            &canary_options("VALIDATION_FAILED"),
            &TWO_CANARIES,
            |l| lines.push(l),
        ),
    )
    .await
    .unwrap();
    // THEN both failed again, back in the DLQ with their reason, and the replay stopped
    assert_eq!(report.decision, "stop", "{report:#?}");
    assert_eq!((report.canaries.len(), report.succeeded), (2, 0));
    for c in &report.canaries {
        assert!(
            matches!(&c.outcome, canary::Outcome::Failed { place, failure_class, reason, .. }
                if place == "DLQ" && failure_class.as_deref() == Some("permanent")
                    && reason.as_deref() == Some("VALIDATION_FAILED")),
            "{c:?}"
        );
    }
    assert!(report.rest.is_none());
    let e = report.failure().unwrap();
    assert!(matches!(
        e,
        CliError::CanaryStopped {
            succeeded: 0,
            total: 2,
            ..
        }
    ));
    assert_eq!(e.exit_code(), 5);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("failed again: back in the DLQ")),
        "{lines:?}"
    );
    // AND the rest stays in the DLQ untouched: the two never replayed are the same messages,
    // and the two canaries are back as copies that count their replay
    let after = drain_view(&stack, &stack.dlq).await;
    assert_eq!(after.len(), 4);
    let untouched: Vec<_> = after
        .iter()
        .filter(|m| before.contains(m.message_id().unwrap_or_default()))
        .collect();
    assert_eq!(untouched.len(), 2);
    assert!(
        untouched
            .iter()
            .all(|m| attr(m, "x-redrive-count").is_none())
    );
    // AND the report says exactly which kept messages the selective run made visible and
    // left so (the redriver's own selective run: the next scheduled run hides them again)
    assert_eq!(report.kept_made_visible, 4, "{report:#?}");
    let left: BTreeSet<&str> = report
        .kept_left_visible
        .iter()
        .map(String::as_str)
        .collect();
    let untouched_ids: BTreeSet<&str> = untouched.iter().filter_map(|m| m.message_id()).collect();
    assert_eq!(left, untouched_ids);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("canary: 2 kept VALIDATION_FAILED messages made visible")),
        "{lines:?}"
    );
    let returned: Vec<_> = after
        .iter()
        .filter(|m| !before.contains(m.message_id().unwrap_or_default()))
        .collect();
    assert!(
        returned
            .iter()
            .all(|m| attr(m, "x-redrive-count") == Some("1"))
    );
    assert!(stack.keys("orders/").await.is_empty());
}

#[tokio::test]
async fn a_canary_replay_goes_on_when_its_canaries_succeed() {
    // GIVEN four orders dead-lettered while the downstream was down, now back
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    for i in 0..4 {
        send(
            &stack,
            &stack.dlq,
            &order_body(&format!("T-{i}")),
            &transient(),
            None,
        )
        .await;
    }
    // WHEN two canaries are replayed first
    let report = with_consumer(&stack, async {
        let report = canary::run(
            &ctx,
            &canary_options("DOWNSTREAM_UNAVAILABLE"),
            &TWO_CANARIES,
            |_| {},
        )
        .await
        .unwrap();
        // (the rest's records are written once the consumer has had them)
        for _ in 0..300 {
            if stack.keys("orders/").await.len() == 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        report
    })
    .await;
    // THEN both succeeded, their records written, and the rest was replayed
    assert_eq!(report.decision, "go", "{report:#?}");
    assert_eq!(report.succeeded, 2);
    assert!(report.failure().is_none());
    assert_eq!(report.rest.as_ref().map(|r| r.redriven), Some(2));
    assert_eq!(stack.keys("orders/").await.len(), 4);
    assert_eq!(stack.depth(&stack.dlq).await, (0, 0));
}

#[tokio::test]
async fn a_patched_restore_repairs_the_message_and_records_who_when_and_the_patch() {
    let stack = Stack::start(StackOptions::default()).await;
    let ctx = context(&stack).await;
    let config = stack.emulator.sdk_config().await;
    // GIVEN an order archived because it failed validation (no items), and a patch
    let key = archive_entry(
        &stack,
        ArchiveReason::PermanentFailure,
        "m-p",
        &invalid_order("P-1"),
    )
    .await;
    let patch = serde_json::json!({"items": [{"productId": "p-7", "quantity": 2}]});
    let by = archive::caller(&config).await;
    assert!(
        by.starts_with("arn:aws:"),
        "the emulator's STS answers: {by}"
    );
    let request = |dry_run| archive::RestoreRequest {
        key: &key,
        bucket: &stack.bucket,
        queue_url: &stack.main.url,
        patch: Some(&patch),
        by: &by,
        dry_run,
        again: false,
        window: Some(archive::RestoreWindow {
            window: Duration::from_secs(resq_consumer::config::DEFAULT_IDEMPOTENCY_WINDOW_SECONDS),
            ttl: Duration::from_secs(resq_redriver::config::DEFAULT_ARCHIVE_AFTER_SECONDS),
        }),
        now: chrono::Utc::now(),
        id: archive::restore_id(),
    };
    let port = archive::AwsRestore(&ctx);
    // WHEN it is restored with the patch, after a dry run
    let dry = archive::restore_entry(&port, &request(true)).await.unwrap();
    assert_eq!(dry.message_id, None);
    assert_eq!(
        (stack.depth(&stack.main).await, versions(&stack, &key).await),
        ((0, 0), 1)
    );
    let done = archive::restore_entry(&port, &request(false))
        .await
        .unwrap();
    // THEN the repaired order is in the main queue, and the consumer records it
    assert_eq!(done.audit, archive::Audit::Complete);
    let restored = stack.receive_n(&stack.main, 1).await;
    assert_eq!(restored[0].message_id(), done.message_id.as_deref());
    let body: serde_json::Value = serde_json::from_str(restored[0].body().unwrap()).unwrap();
    assert_eq!(body["items"][0]["productId"], "p-7");
    assert_eq!(attr(&restored[0], "trace-id"), Some("t-1"));
    let consumer = consumer(&stack, &[]);
    let response = invoke(&stack, &consumer, &stack.main, &restored).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(stack.keys("orders/P-1.json").await.len(), 1);
    // AND the entry records who, when and the patch; the versions keep the entry as it was
    let entry: ArchiveEnvelope = serde_json::from_value(stack.json_object(&key).await).unwrap();
    let r = &entry.metadata.restores[..];
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].status, r[0].by.as_str()),
        (RestoreStatus::Sent, by.as_str())
    );
    assert_eq!(r[0].message_id, done.message_id);
    assert_eq!(r[0].patch.as_ref(), Some(&patch));
    assert_eq!(entry.original_message.body, invalid_order("P-1"));
    assert_eq!(
        versions(&stack, &key).await,
        3,
        "as archived, before the send, after it"
    );
    assert!(
        archive::show(&ctx, &key)
            .await
            .unwrap()
            .metadata
            .restores
            .len()
            == 1,
        "`resq archive show` shows the record"
    );

    // AND a body that is not JSON cannot be patched: nothing is sent, nothing written
    let bad = archive_entry(
        &stack,
        ArchiveReason::PermanentFailure,
        "m-bad",
        "{not json",
    )
    .await;
    let refused = archive::restore_entry(
        &port,
        &archive::RestoreRequest {
            key: &bad,
            ..request(false)
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, CliError::NotPatchable { .. }),
        "{refused}"
    );
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
    assert_eq!(versions(&stack, &bad).await, 1);
}

/// Runs the `resq` binary against the emulator; (exit status, stdout, stderr).
pub(crate) fn resq(stack: &Stack, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = resq_command(stack, args, env).output().expect("run resq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `resq` binary against the emulator, its environment cleared of the stack's settings.
fn resq_command(stack: &Stack, args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
    let mut command = std::process::Command::new(resq_e2e::function_binary("resq"));
    command
        .arg("--endpoint-url")
        .arg(stack.emulator.endpoint())
        .args(args);
    for var in [
        "MAIN_QUEUE_URL",
        "DLQ_URL",
        "ARCHIVE_BUCKET",
        "RESQ_STACK",
        "AWS_PROFILE",
        "IDEMPOTENCY_WINDOW_SECONDS",
        "ARCHIVE_AFTER_SECONDS",
        "MAX_REDRIVE_ATTEMPTS",
        "CONSUMER_EVENT_SOURCE_MAPPING",
        "PAUSE_CONSUMER_ON_ALARMS",
        "PAUSE_ON_ALARMS",
        "KEPT_IN_FLIGHT_MAX",
    ] {
        command.env_remove(var);
    }
    command
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", "/nonexistent/resq-test/config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/resq-test/credentials",
        );
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// The flags that name the stack's queues and bucket.
fn names(stack: &Stack) -> Vec<String> {
    [
        ("--main-queue-url", &stack.main.url),
        ("--dlq-url", &stack.dlq.url),
        ("--archive-bucket", &stack.bucket),
    ]
    .iter()
    .flat_map(|(f, v)| [f.to_string(), v.to_string()])
    .collect()
}

#[tokio::test]
async fn a_redrive_interrupted_while_it_reads_on_leaves_nothing_hidden() {
    // GIVEN 600 dead letters to replay
    let stack = Stack::start(StackOptions::default()).await;
    dead_letters(&stack, None, 600).await;
    // WHEN `resq dlq redrive --max-messages 5` runs: it replays 5, then reads on (a fresh
    // bucket: an archive sweep is due) to archive what is due
    let mut args = names(&stack);
    args.extend(
        [
            "dlq",
            "redrive",
            "--max-messages",
            "5",
            "--rate-per-second",
            "5",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = resq_command(&stack, &args, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start resq");
    // (its 5 replays are in the main queue, and it holds more of the DLQ hidden than it did
    // then: it is reading on; an emulator reads 600 through in well under a second, so it is
    // frozen (SIGSTOP) the moment that is seen, and the Ctrl-C lands there)
    let pid = child.id().to_string();
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([name, &pid])
            .status();
        assert!(sent.unwrap().success(), "kill {name}");
    };
    let mut at_budget = None;
    let reading_on = loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it read on"
        );
        let (_, hidden) = stack.depth(&stack.dlq).await;
        match (stack.depth(&stack.main).await.0, at_budget) {
            (5, None) => at_budget = Some(hidden),
            (5, Some(then)) if hidden > then + 10 => {
                signal("-STOP");
                break hidden;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // AND the operator presses Ctrl-C while it reads on (nothing in between can leave it frozen)
    signal("-INT");
    signal("-CONT");
    // (it ends within its 5 s grace and 5 s of release; a hang fails here, not CI's clock)
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("the interrupted run ended")
    .unwrap()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // THEN it ends at once, saying it was interrupted and what it released
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted: the redrive stopped") && err.contains("it released the"),
        "{err}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (summary["stoppedBy"].as_str(), summary["redriven"].as_u64()),
        (Some("interrupted"), Some(5))
    );
    // AND nothing of the DLQ is hidden any more (it held {reading_on} when interrupted, each
    // for a minute or more): every message can be received now. Only a receive it gave up
    // before SQS answered (a machine so loaded that the run's 5 s grace passed) may have
    // taken some it never saw: it says so, and they come back within their minute
    if err.contains("given up before SQS answered") {
        let back = err
            .rsplit("within ")
            .next()
            .and_then(|s| s.split(' ').next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("when they come back: {err}"));
        assert!(back <= 60, "read on, held for a minute: {err}");
        tokio::time::sleep(Duration::from_secs(back + 1)).await;
    }
    assert_eq!(
        stack.depth(&stack.dlq).await,
        (595, 0),
        "it held {reading_on}; its log: {err}"
    );
    // (received until none comes, not for a fixed time: a loaded machine answers slowly)
    let received = stack.receive_n(&stack.dlq, 595).await.len();
    assert_eq!(
        received,
        595,
        "it held {reading_on}; then {:?}; its log: {err}",
        stack.depth(&stack.dlq).await
    );
}

#[tokio::test]
async fn a_redrive_waits_for_the_breakers_alarms_unless_forced() {
    // GIVEN two dead letters, and the replays-failing alarm in ALARM
    let stack = Stack::start(StackOptions::default()).await;
    dead_letters(&stack, None, 2).await;
    let alarm = "resq-replays-failing";
    breach(&stack, "resq", "RedriveReturned", 100.0).await;
    stack
        .cloudwatch
        .put_metric_alarm()
        .alarm_name(alarm)
        .namespace("resq")
        .metric_name("RedriveReturned")
        .statistic(aws_sdk_cloudwatch::types::Statistic::Sum)
        .period(60)
        .evaluation_periods(1)
        .threshold(5.0)
        .comparison_operator(aws_sdk_cloudwatch::types::ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .unwrap();
    stack
        .cloudwatch
        .set_alarm_state()
        .alarm_name(alarm)
        .state_value(aws_sdk_cloudwatch::types::StateValue::Alarm)
        .state_reason("test")
        .send()
        .await
        .unwrap();
    let redrive = |extra: &[&str]| {
        let mut args = names(&stack);
        args.extend(["dlq", "redrive"].map(String::from));
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        resq(&stack, &args, &[])
    };
    // WHEN an operator redrives: refused, naming the alarm, nothing replayed
    let (code, _, err) = redrive(&[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not replayed: the breaker's alarm resq-replays-failing is in ALARM")
            && err.contains("--force"),
        "{err}"
    );
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
    // AND a dry run is not refused: it says a replay would be
    let (code, _, err) = redrive(&["--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("resq-replays-failing in ALARM: a replay would be refused"),
        "{err}"
    );
    // AND --force replays, saying past which alarm
    let (code, _, err) = redrive(&["--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("replaying although resq-replays-failing in ALARM (--force)"),
        "{err}"
    );
    assert_eq!(stack.depth(&stack.main).await, (2, 0));
}

#[tokio::test]
async fn the_stack_name_is_all_an_operator_needs() {
    // GIVEN the template deployed as stack resq-ops, with a two-day order-record lifetime
    let stack = Stack::start(StackOptions::default()).await;
    let config = stack.emulator.sdk_config().await;
    let template = resq_e2e::translated_template(resq_local::stack::ARTIFACT_BUCKET).to_string();
    let outputs = resq_local::stack::deploy_stack(
        stack.emulator.kind(),
        &config,
        &template,
        "resq-ops",
        &[
            ("OrderRecordRetentionDays", "2"),
            // a team's message type: the business id is the body's paymentId
            ("CorrelationKey", "payment_id"),
            ("CorrelationField", "paymentId"),
        ],
    )
    .await
    .unwrap();
    // moto's CloudFormation skips alarms: one the stack would have, and one of another stack
    for name in ["resq-ops-dlq-depth", "other-dlq-depth"] {
        stack
            .cloudwatch
            .put_metric_alarm()
            .alarm_name(name)
            .namespace("AWS/SQS")
            .metric_name("ApproximateNumberOfMessagesVisible")
            .statistic(aws_sdk_cloudwatch::types::Statistic::Maximum)
            .period(60)
            .evaluation_periods(1)
            .threshold(50.0)
            .comparison_operator(
                aws_sdk_cloudwatch::types::ComparisonOperator::GreaterThanThreshold,
            )
            .send()
            .await
            .unwrap();
    }
    send_to(&stack, &outputs.main_queue_url, r#"{"paymentId":"K-1"}"#).await;

    // WHEN status is asked with the stack's name only
    let (code, out, err) = resq(&stack, &["--stack", "resq-ops", "--json", "status"], &[]);
    // THEN the queues and the alarms are the stack's
    assert_eq!(code, 0, "{err}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["queues"][0]["url"], outputs.main_queue_url.as_str());
    assert_eq!(status["queues"][0]["waiting"], 1);
    assert_eq!(status["queues"][1]["url"], outputs.dlq_url.as_str());
    let alarms: Vec<&str> = status["alarms"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert!(alarms.contains(&"resq-ops-dlq-depth"), "{alarms:?}");
    assert!(
        alarms.iter().all(|a| a.starts_with("resq-ops-")),
        "{alarms:?}"
    );
    // AND RESQ_STACK does the same; the stack wins over a variable left in the shell, and
    // the order is read by the stack's CorrelationField
    let (code, out, err) = resq(
        &stack,
        &["find", "K-1", "--main-queue", "--json"],
        &[
            ("RESQ_STACK", "resq-ops"),
            ("MAIN_QUEUE_URL", "http://127.0.0.1:9/1/stale"),
            ("RESQ_CORRELATION_FIELD", "orderId"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let found = serde_json::from_str::<serde_json::Value>(&out).unwrap();
    assert_eq!(found["verdict"], "found");
    assert_eq!(found["places"][0]["place"], "mainQueue");
    assert_eq!(
        found["places"][0]["matchedByText"], false,
        "its paymentId was read: {found}"
    );
    // AND without --main-queue the main queue is counted, not received from: not seen
    let (code, out, err) = resq(&stack, &["--stack", "resq-ops", "find", "K-1"], &[]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("not seen: the main queue was not looked into: it holds about 1 visible"),
        "{err}"
    );
    // AND a flag typed on the command line wins over the stack
    let (code, _, err) = resq(
        &stack,
        &[
            "--stack",
            "resq-ops",
            "--dlq-url",
            &stack.dlq.url,
            "find",
            "K-1",
            "--no-main-queue",
        ],
        &[],
    );
    assert_eq!(
        code, 4,
        "not seen: the DLQ looked into is the flag's, the main queue skipped (--no-main-queue is still accepted): {err}"
    );
    // AND a restore is checked against the stack's idempotency window (two days: shorter than
    // a restored copy's life of the TTL and the main queue's retention)
    let key = archive_entry_in(
        &stack,
        &outputs.bucket,
        ArchiveReason::RedriveCap,
        "m-k",
        &order_body("K-2"),
    )
    .await;
    let (code, _, err) = resq(
        &stack,
        &["--stack", "resq-ops", "archive", "restore", &key],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("IDEMPOTENCY_WINDOW_SECONDS=172800"), "{err}");
    // AND an unknown stack is a clear error
    let (code, _, err) = resq(&stack, &["--stack", "no-such-stack", "status"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no stack named no-such-stack"), "{err}");
}

async fn send_to(stack: &Stack, url: &str, body: &str) {
    stack
        .sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap();
}

/// The records of `mapping`'s pause log in `bucket`, newest first.
async fn pause_log(stack: &Stack, bucket: &str, mapping: &str) -> Vec<serde_json::Value> {
    let mut records = Vec::new();
    for key in stack
        .keys_in(bucket, &resq::state::pause_prefix(mapping))
        .await
    {
        records.push(stack.json_object_in(bucket, &key).await);
    }
    records
}

/// The state Lambda reports for the event source mapping `uuid`.
async fn mapping_state(lambda: &aws_sdk_lambda::Client, uuid: &str) -> String {
    let out = lambda
        .get_event_source_mapping()
        .uuid(uuid)
        .send()
        .await
        .unwrap();
    out.state().unwrap_or_default().to_owned()
}

/// Deploys the template on moto (which stores functions and their event source mappings
/// without running them; LocalStack cannot create functions without Docker), then pauses and
/// resumes the consumer's mapping as an operator would, with the `resq` binary.
#[tokio::test]
async fn an_operators_pause_is_recorded_resq_status_says_whose_and_a_resume_waits_for_the_alarms() {
    if resq_e2e::emulator_kind() != resq_e2e::EmulatorKind::Moto {
        eprintln!("skipped on LocalStack: it cannot create the consumer's function");
        return;
    }
    // GIVEN the template deployed as stack resq-brk, its consumer's event source mapping
    // disabled as the local stack leaves it (moto would otherwise invoke the function), with
    // no pause record, and the breaker's downstream-failing alarm OK (moto's CloudFormation
    // skips alarms)
    let stack = Stack::start(StackOptions::default()).await;
    let config = stack.emulator.sdk_config().await;
    let template = resq_e2e::translated_template(resq_local::stack::ARTIFACT_BUCKET).to_string();
    let name = "resq-brk";
    let outputs =
        resq_local::stack::deploy_stack(stack.emulator.kind(), &config, &template, name, &[])
            .await
            .unwrap();
    let lambda = aws_sdk_lambda::Client::new(&config);
    let mappings = lambda
        .list_event_source_mappings()
        .function_name(&outputs.consumer_function)
        .send()
        .await
        .unwrap();
    let uuid = mappings.event_source_mappings()[0]
        .uuid()
        .expect("the mapping's UUID")
        .to_owned();
    assert_eq!(mapping_state(&lambda, &uuid).await, "Disabled");
    let alarm = format!("{name}-downstream-failing");
    stack
        .cloudwatch
        .put_metric_alarm()
        .alarm_name(&alarm)
        .namespace("resq")
        .metric_name("TransientFailurePercent")
        .statistic(aws_sdk_cloudwatch::types::Statistic::Average)
        .period(60)
        .evaluation_periods(1)
        .threshold(50.0)
        .comparison_operator(
            aws_sdk_cloudwatch::types::ComparisonOperator::GreaterThanOrEqualToThreshold,
        )
        .send()
        .await
        .unwrap();
    let set_alarm = async |state: aws_sdk_cloudwatch::types::StateValue| {
        stack
            .cloudwatch
            .set_alarm_state()
            .alarm_name(&alarm)
            .state_value(state)
            .state_reason("test")
            .send()
            .await
            .unwrap();
    };
    let on_stack = |tail: &[&str]| -> Vec<String> {
        ["--stack", name, "--mapping", &uuid]
            .iter()
            .chain(tail)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        resq(&stack, &args, &[])
    };

    // WHEN status is asked before anything: disabled, and no record says by whom
    let (code, out, err) = run(on_stack(&["status"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "consumer: paused by hand (no record: disabled outside resq)\n  event source mapping {uuid}: Disabled"
        )),
        "{out}"
    );
    // AND a resume (the breaker's alarm OK) enables it and records it: there was no pause to end
    let (code, out, err) = run(on_stack(&["consumer", "resume"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(mapping_state(&lambda, &uuid).await, "Enabled");
    assert!(
        out.contains("it was disabled outside resq (no record)"),
        "{out}"
    );
    let log = pause_log(&stack, &outputs.bucket, &uuid).await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (
            &log[0]["state"],
            &log[0]["by"],
            &log[0]["since"],
            &log[0]["forced"]
        ),
        (
            &"resumed".into(),
            &"operator".into(),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        )
    );
    let (code, out, err) = run(on_stack(&["status"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "consumer: running\n  event source mapping {uuid}: Enabled"
        )),
        "{out}"
    );

    // WHEN an operator pauses it, with a reason
    let (code, out, err) = run(on_stack(&[
        "consumer",
        "pause",
        "--reason",
        "payments DB failover",
    ]));
    // THEN the mapping is disabled
    assert_eq!(code, 0, "{err}");
    assert_eq!(mapping_state(&lambda, &uuid).await, "Disabled");
    assert!(
        out.starts_with(&format!(
            "paused the consumer: event source mapping {uuid} is Disabled (was Enabled)\n"
        )) && out.contains("resq's breaker never resumes a pause made by hand"),
        "{out}"
    );
    // AND the pause is recorded as the operator's: why, who (the caller's STS identity), since
    let log = pause_log(&stack, &outputs.bucket, &uuid).await;
    assert_eq!(log.len(), 2, "{log:?}");
    let paused = &log[0];
    assert_eq!(
        (&paused["mapping"], &paused["state"], &paused["by"]),
        (&uuid.as_str().into(), &"paused".into(), &"operator".into())
    );
    assert_eq!(paused["reason"], "payments DB failover");
    assert!(
        paused["who"]
            .as_str()
            .is_some_and(|w| w.starts_with("arn:aws:")),
        "{paused}"
    );
    assert_eq!(paused["since"], paused["at"]);

    // AND status says paused by hand: since when, by whom, why
    let (code, out, err) = run(on_stack(&["status"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("consumer: paused by hand since ")
            && out.contains(&format!(
                "by {}, reason: payments DB failover",
                paused["who"].as_str().unwrap_or_default()
            ))
            && out.contains(&format!("\n  event source mapping {uuid}: Disabled;")),
        "{out}"
    );
    let (_, out, _) = run(on_stack(&["--json", "status"]));
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["consumer"]["standing"], "pausedByHand");
    assert_eq!(&status["consumer"]["record"], paused);

    // WHEN the breaker's alarm is in ALARM, a resume is refused, naming it, and changes nothing
    set_alarm(aws_sdk_cloudwatch::types::StateValue::Alarm).await;
    let (code, _, err) = run(on_stack(&["consumer", "resume"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "not resumed: the consumer breaker's alarm {alarm} is in ALARM"
        )) && err.contains("--force"),
        "{err}"
    );
    assert_eq!(mapping_state(&lambda, &uuid).await, "Disabled");
    assert_eq!(pause_log(&stack, &outputs.bucket, &uuid).await.len(), 2);

    // WHEN it is forced: enabled, and the record says forced past the alarm
    let (code, out, err) = run(on_stack(&["consumer", "resume", "--force"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(mapping_state(&lambda, &uuid).await, "Enabled");
    assert!(
        out.starts_with(&format!(
            "resumed the consumer: event source mapping {uuid} is Enabled (was Disabled)\n"
        )) && out.contains(&format!(
            "forced past the breaker's alarm in ALARM: {alarm}"
        )),
        "{out}"
    );
    // (the stack's consumer-errors alarm, which moto did not create, is said unchecked)
    assert!(
        err.contains(&format!(
            "the consumer breaker's alarm {name}-consumer-errors does not exist: not checked"
        )),
        "{err}"
    );
    let log = pause_log(&stack, &outputs.bucket, &uuid).await;
    assert_eq!(log.len(), 3, "{log:?}");
    let resumed = &log[0];
    assert_eq!(
        (&resumed["state"], &resumed["by"], &resumed["forced"]),
        (&"resumed".into(), &"operator".into(), &true.into())
    );
    assert_eq!(resumed["alarms"], serde_json::json!([alarm]));
    assert_eq!(resumed["since"], paused["since"], "the pause it ended");

    // WHEN the alarm is OK again: a pause and a plain resume go through, unforced
    set_alarm(aws_sdk_cloudwatch::types::StateValue::Ok).await;
    let (code, _, err) = run(on_stack(&["consumer", "pause"]));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(on_stack(&["consumer", "resume"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(mapping_state(&lambda, &uuid).await, "Enabled");
    let log = pause_log(&stack, &outputs.bucket, &uuid).await;
    assert_eq!(log.len(), 5, "{log:?}");
    assert_eq!(
        (&log[0]["state"], &log[0]["forced"]),
        (&"resumed".into(), &serde_json::Value::Null)
    );
    assert_eq!(
        log[1]["reason"],
        serde_json::Value::Null,
        "paused without a reason"
    );

    // WHEN the mapping is disabled outside resq: status says so, with no record to name
    lambda
        .update_event_source_mapping()
        .uuid(&uuid)
        .enabled(false)
        .send()
        .await
        .unwrap();
    let (code, out, err) = run(on_stack(&["status"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "consumer: paused by hand (no record: disabled outside resq)\n  event source mapping {uuid}: Disabled"
        )),
        "{out}"
    );

    // AND a mapping Lambda does not know is said so (status still prints the rest, exit 1)
    let (code, out, err) = resq(
        &stack,
        &[
            "--stack",
            name,
            "--mapping",
            "00000000-0000-0000-0000-000000000000",
            "status",
        ],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        out.contains("queue ") && out.contains("consumer: unknown: no event source mapping"),
        "{out}"
    );
    assert!(err.contains("no event source mapping 00000000-0000-0000-0000-000000000000 in this region and account"), "{err}");
    let (code, _, err) = resq(
        &stack,
        &[
            "--stack",
            name,
            "--mapping",
            "00000000-0000-0000-0000-000000000000",
            "consumer",
            "pause",
        ],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no event source mapping 00000000"), "{err}");

    // AND the stack alone names the mapping once its template has the output; before, status
    // says the breaker is not configured
    let (code, out, err) = resq(&stack, &["--stack", name, "status"], &[]);
    assert_eq!(code, 0, "{err}");
    match stack_output(&config, name, "ConsumerEventSourceMapping").await {
        Some(output) => {
            assert_eq!(output, uuid);
            assert!(out.contains("consumer: paused by hand (no record"), "{out}");
        }
        None => assert!(out.contains("consumer breaker: not configured"), "{out}"),
    }
}

/// Sends a dead letter of order `order` to the stack's standard DLQ, as the consumer's copy of
/// a transient failure is: with its tenant's group alone (`None`: a message without a group).
async fn tenants_dead_letter(stack: &Stack, order: &str, group: Option<&str>) {
    let mut request = stack
        .sqs
        .send_message()
        .queue_url(&stack.dlq.url)
        .message_body(order_body(order))
        .set_message_group_id(group.map(str::to_owned));
    for (name, value) in transient() {
        request = request.message_attributes(name, value);
    }
    request.send().await.unwrap();
}

/// The groups of `messages`, each group with its orders (`None`: without a group).
fn orders_by_group(
    messages: &[aws_sdk_sqs::types::Message],
) -> std::collections::BTreeMap<Option<String>, BTreeSet<String>> {
    let mut out = std::collections::BTreeMap::<Option<String>, BTreeSet<String>>::new();
    for m in messages {
        let group = sys_attr(
            m,
            aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId,
        );
        let order: serde_json::Value = serde_json::from_str(m.body().unwrap_or_default()).unwrap();
        out.entry(group.map(str::to_owned))
            .or_default()
            .insert(order["orderId"].as_str().unwrap_or_default().to_owned());
    }
    out
}

#[tokio::test]
async fn one_tenant_is_peeked_counted_replayed_and_found_by_its_group() {
    // GIVEN a standard queue's DLQ holding dead letters of two tenants (a fair queue's
    // groups) and one without a group
    let stack = Stack::start(StackOptions::default()).await;
    let tenants = [("tenant-a", 3), ("tenant-b", 2)];
    let (noisy, quiet) = (tenants[0].0, tenants[1].0);
    let mut expected: std::collections::BTreeMap<Option<String>, BTreeSet<String>> =
        Default::default();
    for (group, n) in tenants {
        for i in 0..n {
            let order = format!("{group}-ORD-{i}");
            tenants_dead_letter(&stack, &order, Some(group)).await;
            expected
                .entry(Some(group.to_owned()))
                .or_default()
                .insert(order);
        }
    }
    tenants_dead_letter(&stack, "ORD-NO-GROUP", None).await;
    expected
        .entry(None)
        .or_default()
        .insert("ORD-NO-GROUP".to_owned());
    let dead_letters: usize = expected.values().map(BTreeSet::len).sum();
    let named = [
        "--main-queue-url",
        stack.main.url.as_str(),
        "--dlq-url",
        stack.dlq.url.as_str(),
        "--archive-bucket",
        stack.bucket.as_str(),
    ];
    let cli = |args: &[&str]| {
        let all: Vec<&str> = named.iter().chain(args).copied().collect();
        resq(&stack, &all, &[])
    };
    let json = |out: &str| serde_json::from_str::<serde_json::Value>(out).unwrap();

    // WHEN the operator peeks at the DLQ
    let (code, out, err) = cli(&["--json", "dlq", "peek"]);
    assert_eq!(code, 0, "{err}");
    // THEN its counts by group are each tenant's, the largest first, those without a group
    // counted apart
    let mut by_group: Vec<serde_json::Value> = expected
        .iter()
        .map(|(group, orders)| serde_json::json!({"group": group, "messages": orders.len()}))
        .collect();
    by_group.sort_by_key(|t| {
        (
            std::cmp::Reverse(t["messages"].as_u64()),
            t["group"].is_null(),
        )
    });
    let peek = json(&out);
    assert_eq!(
        peek["counts"]["byGroup"],
        serde_json::json!(by_group),
        "{peek}"
    );
    assert_eq!(peek["counts"]["matching"], dead_letters);
    assert_eq!(
        peek["counts"]["byReason"],
        serde_json::json!([{"reason": "DOWNSTREAM_UNAVAILABLE", "messages": dead_letters}])
    );
    // AND the plain answer names them too
    let (_, plain, _) = cli(&["dlq", "peek"]);
    assert!(
        plain.contains(&format!("by group:\n  {:>7}  {noisy}\n", tenants[0].1))
            && plain.contains("  (no group)\n"),
        "{plain}"
    );

    // WHEN the operator peeks at the quiet tenant
    let (code, out, err) = cli(&["--json", "dlq", "peek", "--group", quiet]);
    assert_eq!(code, 0, "{err}");
    // THEN only its dead letters are shown and counted
    let peek = json(&out);
    let shown: BTreeSet<&str> = peek["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["group"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(shown, BTreeSet::from([quiet]), "{peek}");
    assert_eq!(
        peek["messages"].as_array().unwrap().len(),
        expected[&Some(quiet.to_owned())].len()
    );
    assert_eq!(
        peek["counts"]["byGroup"],
        serde_json::json!([{"group": quiet, "messages": expected[&Some(quiet.to_owned())].len()}])
    );
    // AND peeking removed and hid nothing
    assert_eq!(stack.depth(&stack.dlq).await, (dead_letters as u64, 0));

    // WHEN the quiet tenant's replay is tried dry first
    let replay = [
        "dlq",
        "redrive",
        "--group",
        quiet,
        "--rate-per-second",
        "100",
    ];
    let (code, out, err) = cli(&[&replay[..], &["--dry-run"][..]].concat());
    assert_eq!(code, 0, "{err}");
    // THEN it would replay that tenant's only, and changed nothing
    let dry = json(&out);
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["redriven"], expected[&Some(quiet.to_owned())].len());
    assert_eq!(stack.depth(&stack.dlq).await, (dead_letters as u64, 0));
    assert_eq!(stack.depth(&stack.main).await, (0, 0));

    // WHEN it is replayed
    let (code, out, err) = cli(&replay);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&out)["redriven"],
        expected[&Some(quiet.to_owned())].len()
    );
    // THEN its orders are in the main queue, each copy keeping its group
    let mut replayed = expected.clone();
    replayed.retain(|group, _| group.as_deref() == Some(quiet));
    let mut left = expected.clone();
    left.retain(|group, _| group.as_deref() != Some(quiet));
    assert_eq!(
        orders_by_group(&drain_view(&stack, &stack.main).await),
        replayed
    );
    // AND the other tenant's and the one without a group wait in the DLQ as they were
    assert_eq!(orders_by_group(&drain_view(&stack, &stack.dlq).await), left);

    // WHEN the noisy tenant's order is looked for in its group
    let order = expected[&Some(noisy.to_owned())].first().unwrap().clone();
    let (code, out, err) = cli(&["--json", "find", &order, "--group", noisy]);
    // THEN it is found in the DLQ, with its group
    assert_eq!(code, 0, "{out}{err}");
    let found = json(&out);
    assert_eq!(found["places"][0]["place"], "dlq", "{found}");
    assert_eq!(found["places"][0]["group"], noisy);
    // AND looked for under the other tenant's group it is not seen there, and its copy in
    // the noisy tenant's group is named (exit 4, not nowhere)
    let (code, out, err) = cli(&["find", &order, "--group", quiet]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains(&format!(
            "not seen: 1 DLQ messages of the order are of other groups, left out by --group {quiet}: {noisy} 1"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("narrowed to group {quiet} (--group)")),
        "{err}"
    );
    // AND a replayed order is found in the main queue under its group
    let order = expected[&Some(quiet.to_owned())].first().unwrap().clone();
    let (code, out, err) = cli(&["--json", "find", &order, "--group", quiet, "--main-queue"]);
    assert_eq!(code, 0, "{out}{err}");
    let found = json(&out);
    assert_eq!(found["places"][0]["place"], "mainQueue", "{found}");
    assert_eq!(found["places"][0]["group"], quiet);
}
