//! The settle executor against resq-testing's in-memory SQS and store: lanes, batches, pace,
//! deadlines, the per-action report.

use std::time::Instant;

use resq::archive::{ArchiveEntry, OriginalMessage};
use resq::attributes::MessageAttributes;
use resq::keep::{KeptMessage, MAX_ENTRIES_PER_LIST};
use resq::reason::ArchiveReason;
use resq::settle::*;
use resq::sqs::ReceivedMessage;
use resq::sqs::{MAX_BATCH, OutgoingMessage, Queues};
use resq_testing::{Call, MemorySqs, MemoryStore};
use std::collections::BTreeMap;
use std::time::Duration;

const MAIN: &str = "http://127.0.0.1/1/orders";
const DLQ: &str = "http://127.0.0.1/1/orders-dlq";

fn later() -> Deadlines {
    Deadlines::all_by(Instant::now() + Duration::from_secs(30))
}

fn copy(body: &str, group: Option<&str>) -> Action {
    Action::Copy {
        to: QueueUrl::from(MAIN),
        message: OutgoingMessage {
            body: body.to_owned(),
            attributes: MessageAttributes::new(),
            group_id: group.map(str::to_owned),
            deduplication_id: group.map(|_| format!("d-{body}")),
        },
    }
}

fn delete(receipt_handle: &str) -> Action {
    Action::Delete {
        from: QueueUrl::from(DLQ),
        receipt_handle: receipt_handle.to_owned(),
    }
}

/// `n` messages received from the DLQ (their receipt handles).
async fn received(sqs: &MemorySqs, n: usize) -> Vec<String> {
    for i in 0..n {
        sqs.push(
            DLQ,
            ReceivedMessage {
                message_id: format!("d{i}"),
                receipt_handle: String::new(),
                body: format!("b{i}"),
                attributes: BTreeMap::new(),
                message_attributes: MessageAttributes::new(),
                dropped_attributes: Vec::new(),
            },
        );
    }
    let mut handles = Vec::new();
    while handles.len() < n {
        let batch = sqs.receive(DLQ, 10, Some(60), 0).await.unwrap();
        handles.extend(batch.into_iter().map(|m| m.receipt_handle));
    }
    handles
}

#[test]
fn the_cut_offs_before_a_lambda_deadline() {
    let now = Instant::now();
    let deadline = now + Duration::from_secs(10);
    // the consumer's (settling ends at an eighth of the margin) and the redriver's (a
    // quarter)
    for (share, settle_by) in [(8, 250), (4, 500)] {
        let by = Deadlines::before(deadline, Duration::from_secs(2), share, now);
        assert_eq!(by.start_by, deadline - Duration::from_secs(2));
        assert_eq!(by.move_by, deadline - Duration::from_secs(1));
        assert_eq!(by.settle_by, deadline - Duration::from_millis(settle_by));
    }
    // a margin larger than the time left: nothing may start
    let by = Deadlines::before(
        now + Duration::from_millis(500),
        Duration::from_secs(2),
        8,
        now,
    );
    assert!(by.start_by <= now);
}

#[tokio::test]
async fn a_delete_waits_for_its_copy_and_an_unconfirmed_copy_holds_its_lane() {
    // GIVEN three DLQ messages, two replayed in FIFO group g, one alone; SQS refuses the
    // first copy of g
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let handles = received(&sqs, 3).await;
    sqs.fail_sends(|m| m.body == "b0");
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    let mut ids = Vec::new();
    for (i, (body, group)) in [("b0", Some("g")), ("b1", Some("g")), ("b2", None)]
        .into_iter()
        .enumerate()
    {
        let c = match group {
            Some(g) => plan.push_to(g, copy(body, group)),
            None => plan.push(copy(body, group)),
        };
        ids.push((c, plan.then(c, delete(&handles[i]))));
    }
    // WHEN it settles
    let report = settler.settle(&plan, later(), &Unpaced).await;
    // THEN the refused copy is reported with SQS's reason, and what waits on it is not
    // attempted: its delete, the rest of its group and that one's delete
    assert!(
        matches!(report.get(ids[0].0), Confirmation::Failed(SettleError::Refused(e)) if e.message.contains("InternalError"))
    );
    for held in [ids[0].1, ids[1].0, ids[1].1] {
        assert_eq!(
            report.get(held),
            &Confirmation::NotAttempted(Unattempted::Blocked)
        );
    }
    // the other lane went on: copied (with its new id), then deleted
    assert!(matches!(
        report.get(ids[2].0),
        Confirmation::Confirmed(Some(_))
    ));
    assert!(report.get(ids[2].1).is_confirmed());
    assert_eq!(sqs.sent(MAIN).len(), 1);
    assert_eq!(sqs.deleted(DLQ), vec![handles[2].clone()]);
    assert_eq!(
        sqs.len(DLQ),
        2,
        "nothing left the DLQ before its copy was confirmed"
    );
}

#[tokio::test]
async fn no_call_carries_two_messages_of_one_lane_and_the_lane_keeps_its_order() {
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    for (body, g) in [
        ("a1", "a"),
        ("a2", "a"),
        ("b1", "b"),
        ("a3", "a"),
        ("b2", "b"),
    ] {
        plan.push_to(g, copy(body, Some(g)));
    }
    let report = settler.settle(&plan, later(), &Unpaced).await;
    assert!(report.iter().all(|(_, c)| c.is_confirmed()));
    let bodies: Vec<String> = sqs.sent(MAIN).into_iter().map(|m| m.body).collect();
    assert_eq!(bodies, vec!["a1", "b1", "a2", "b2", "a3"]);
    assert_eq!(sqs.calls(), 3, "one call per round: a1+b1, a2+b2, a3");
}

#[tokio::test]
async fn what_is_ready_goes_out_in_as_few_calls_as_sqs_allows() {
    // GIVEN 23 copies (one of them near 1 MiB), 23 deletes and 12 visibility changes
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let handles = received(&sqs, 35).await;
    let calls_before = sqs.calls();
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    for i in 0..23 {
        let body = if i == 5 {
            "x".repeat(resq::attributes::MAX_MESSAGE_BYTES - 1)
        } else {
            format!("c{i}")
        };
        plan.push(copy(&body, None));
    }
    for h in &handles[..23] {
        plan.push(delete(h));
    }
    for h in &handles[23..] {
        plan.push(Action::ChangeVisibility {
            of: QueueUrl::from(DLQ),
            receipt_handle: h.clone(),
            seconds: 0,
        });
    }
    let report = settler.settle(&plan, later(), &Unpaced).await;
    assert!(report.iter().all(|(_, c)| c.is_confirmed()), "{report:?}");
    // copies: 0..5, 5 alone (1 MiB), 6..16, 16..23 → 4 calls; deletes 3; changes 2
    assert_eq!(sqs.calls() - calls_before, 4 + 3 + 2);
    assert_eq!(sqs.sent(MAIN).len(), 23);
}

#[tokio::test]
async fn archive_entries_and_keep_lists_are_confirmed_with_their_keys() {
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let handles = received(&sqs, 1).await;
    let settler = Settler::new(&sqs, &store, "redriver");
    let message = OriginalMessage {
        message_id: "d0".into(),
        body: "b0".into(),
        message_attributes: MessageAttributes::new(),
        attributes: BTreeMap::from([("SentTimestamp".into(), "1700000000000".into())]),
        raw_record: None,
    };
    let entry = ArchiveEntry::new(ArchiveReason::TtlExpired, DLQ, message, None);
    let kept = KeptMessage {
        message_id: "d0".into(),
        receipt_handle: handles[0].clone(),
        failure_reason: Some("MALFORMED_JSON".into()),
        first_sent_at: None,
        hidden_until: 1,
        order_id: None,
    };
    let mut plan = Plan::new();
    let archive = plan.push(Action::Archive(Box::new(entry)));
    let keep = plan.push(Action::Keep {
        queue: QueueUrl::from(DLQ),
        message: kept,
    });
    let report = settler.settle(&plan, later(), &Unpaced).await;
    let key = |id| match report.get(id) {
        Confirmation::Confirmed(Some(key)) => key.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(key(archive), "archive/TTL_EXPIRED/2023/11/14/d0.json");
    assert!(key(keep).starts_with("kept/"));
    assert_eq!(store.keys("").len(), 2);
    // an entry already there is confirmed too: a retried archive finds its entry
    let report = settler.settle(&plan, later(), &Unpaced).await;
    assert!(report.get(archive).is_confirmed());
}

#[tokio::test]
async fn kept_messages_past_one_list_go_in_several_and_all_read_back() {
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let settler = Settler::new(&sqs, &store, "redriver");
    let hidden_until = chrono::Utc::now().timestamp_millis() as u64 + 3_600_000;
    let mut plan = Plan::new();
    for i in 0..=MAX_ENTRIES_PER_LIST {
        let message = KeptMessage {
            message_id: format!("m{i}"),
            receipt_handle: format!("rh{i}"),
            failure_reason: None,
            first_sent_at: None,
            hidden_until,
            order_id: None,
        };
        plan.push(Action::Keep {
            queue: QueueUrl::from(DLQ),
            message,
        });
    }
    let report = settler.settle(&plan, later(), &Unpaced).await;
    assert!(report.iter().all(|(_, c)| c.is_confirmed()));
    assert_eq!(store.keys(resq::keep::KEEP_PREFIX).len(), 2);
    let hidden = resq::keep::still_hidden(&store, DLQ, chrono::Utc::now()).await;
    assert_eq!(hidden.unwrap().len(), MAX_ENTRIES_PER_LIST + 1);
}

#[tokio::test]
async fn a_refused_delete_is_tried_once_more() {
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let handles = received(&sqs, 2).await;
    let first = handles[0].clone();
    let tries = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = tries.clone();
    // the first attempt at handles[0] fails, the second goes through
    sqs.fail_deletes(move |rh| {
        rh == first && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0
    });
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    let ids: Vec<ActionId> = handles.iter().map(|h| plan.push(delete(h))).collect();
    let report = settler.settle(&plan, later(), &Unpaced).await;
    assert!(report.get(ids[0]).is_confirmed() && report.get(ids[1]).is_confirmed());
    assert_eq!(sqs.len(DLQ), 0);
    // one that keeps failing is reported refused after its second try
    let handles = received(&sqs, 1).await;
    sqs.fail_deletes(|_| true);
    let mut plan = Plan::new();
    let id = plan.push(delete(&handles[0]));
    let calls = sqs.calls();
    let report = settler.settle(&plan, later(), &Unpaced).await;
    assert!(matches!(
        report.get(id),
        Confirmation::Failed(SettleError::Refused(_))
    ));
    assert_eq!(sqs.calls() - calls, 2);
}

#[tokio::test]
async fn a_slow_sqs_cannot_make_a_settle_late_and_nothing_unanswered_is_followed_up() {
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let handles = received(&sqs, 2).await;
    sqs.set_delay(Duration::from_secs(5));
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    let c = plan.push(copy("b0", None));
    let d = plan.then(c, delete(&handles[0]));
    let started = Instant::now();
    let by = Deadlines::all_by(started + Duration::from_millis(300));
    let report = settler.settle(&plan, by, &Unpaced).await;
    assert!(
        Instant::now() < started + Duration::from_secs(2),
        "settled late"
    );
    assert_eq!(
        report.get(c),
        &Confirmation::Failed(SettleError::Unanswered(None))
    );
    assert_eq!(
        report.get(d),
        &Confirmation::NotAttempted(Unattempted::Blocked)
    );
    assert_eq!(report.started_at(d), None);
    // past the deadline nothing starts at all
    let report = settler.settle(&plan, by, &Unpaced).await;
    assert_eq!(
        report.get(c),
        &Confirmation::NotAttempted(Unattempted::OutOfTime)
    );
    let _ = handles;
}

#[tokio::test]
async fn slow_archive_writes_never_keep_copies_waiting() {
    // GIVEN 40 archive entries ahead of a copy in the plan, and an S3 that takes 5 s a put
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    store.set_delay(Duration::from_secs(5));
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    for i in 0..40 {
        let message = OriginalMessage {
            message_id: format!("a{i}"),
            body: "{}".into(),
            message_attributes: MessageAttributes::new(),
            attributes: BTreeMap::new(),
            raw_record: None,
        };
        let entry = ArchiveEntry::new(ArchiveReason::RedriveCap, MAIN, message, None);
        plan.push(Action::Archive(Box::new(entry)));
    }
    let c = plan.push(copy("dead letter", None));
    // WHEN it settles within 1 s
    let by = Deadlines::all_by(Instant::now() + Duration::from_secs(1));
    let report = settler.settle(&plan, by, &Unpaced).await;
    // THEN the copy went (SQS calls have their own slots); the writes were not answered
    assert!(report.get(c).is_confirmed(), "{:?}", report.get(c));
    assert!(
        report
            .iter()
            .filter(|(id, _)| *id != c)
            .all(|(_, c)| !c.is_confirmed())
    );
}

#[tokio::test]
async fn the_double_hands_out_nothing_of_a_fifo_group_while_one_is_in_flight() {
    let (sqs, fifo) = (MemorySqs::default(), "http://127.0.0.1/1/q.fifo");
    for (id, g) in [("a1", "A"), ("a2", "A"), ("b1", "B")] {
        let attributes = BTreeMap::from([("MessageGroupId".to_owned(), g.to_owned())]);
        sqs.push(
            fifo,
            ReceivedMessage {
                message_id: id.into(),
                receipt_handle: String::new(),
                body: id.into(),
                attributes,
                message_attributes: MessageAttributes::new(),
                dropped_attributes: Vec::new(),
            },
        );
    }
    let ids = |batch: Vec<ReceivedMessage>| -> Vec<String> {
        batch.into_iter().map(|m| m.message_id).collect()
    };
    let first = sqs.receive(fifo, 1, Some(60), 0).await.unwrap();
    assert_eq!(ids(first), vec!["a1"]);
    // a1 in flight: A waits, B does not
    let next = sqs.receive(fifo, 10, Some(60), 0).await.unwrap();
    assert_eq!(ids(next), vec!["b1"]);
    sqs.advance(Duration::from_secs(61));
    let again = sqs.receive(fifo, 10, Some(60), 0).await.unwrap();
    assert_eq!(ids(again), vec!["a1", "a2", "b1"]);
}

/// Lets `n` copies go, then none.
struct Allow(std::sync::atomic::AtomicUsize);

impl Pacer for Allow {
    async fn admit(&self, _queue: &str, n: usize, _until: Instant) -> usize {
        let left = self.0.load(std::sync::atomic::Ordering::SeqCst);
        let go = n.min(left);
        self.0.fetch_sub(go, std::sync::atomic::Ordering::SeqCst);
        go
    }
}

#[tokio::test]
async fn copies_go_only_as_the_pacer_admits_them() {
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    let ids: Vec<ActionId> = (0..5)
        .map(|i| plan.push(copy(&format!("c{i}"), None)))
        .collect();
    let pacer = Allow(std::sync::atomic::AtomicUsize::new(3));
    let report = settler.settle(&plan, later(), &pacer).await;
    assert!(ids[..3].iter().all(|&i| report.get(i).is_confirmed()));
    for &i in &ids[3..] {
        assert_eq!(
            report.get(i),
            &Confirmation::NotAttempted(Unattempted::OutOfTime)
        );
    }
    assert_eq!(sqs.sent(MAIN).len(), 3);
}

#[tokio::test]
async fn a_failed_call_fails_every_action_it_carries() {
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    sqs.fail_calls(Call::Send, true);
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    let ids: Vec<ActionId> = (0..3)
        .map(|i| plan.push(copy(&format!("c{i}"), None)))
        .collect();
    let report = settler.settle(&plan, later(), &Unpaced).await;
    for id in ids {
        assert!(matches!(
            report.get(id),
            Confirmation::Failed(SettleError::Refused(_))
        ));
    }
}

#[tokio::test]
async fn a_call_that_broke_is_unanswered_and_keeps_its_error() {
    // GIVEN a send whose call times out (the SDK's operation timeout: SQS may have taken it)
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    sqs.time_out_calls(Call::Send, 1);
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    let id = plan.push(copy("c0", None));
    let report = settler.settle(&plan, later(), &Unpaced).await;
    // THEN it is not a refusal, and the call's own error says why (an operator's tool shows it)
    let Confirmation::Failed(SettleError::Unanswered(Some(e))) = report.get(id) else {
        panic!("{:?}", report.get(id));
    };
    assert_eq!(e.kind, resq::error::AwsErrorKind::Timeout);
    let said = report.get(id).clone();
    assert!(
        matches!(said, Confirmation::Failed(ref f) if f.to_string().ends_with("(no answer: it may have taken effect)")),
        "{said:?}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Whatever the sizes and the lanes, every copy goes in exactly one call, no call
    /// breaks SQS's limits or carries two messages of one lane, and each lane keeps its
    /// order.
    #[test]
    fn calls_keep_the_limits_and_each_lanes_order(
        sizes in proptest::collection::vec(
            proptest::prop_oneof![1usize..300_000, proptest::strategy::Just(resq::attributes::MAX_MESSAGE_BYTES)],
            0..40,
        ),
        lanes in proptest::collection::vec(proptest::option::of(0u8..4), 40),
    ) {
        let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
        let settler = Settler::new(&sqs, &store, "test");
        let mut plan = Plan::new();
        for (i, (size, lane)) in sizes.iter().zip(&lanes).enumerate() {
            let mut body = format!("{i:03}");
            body.push_str(&"x".repeat(size.saturating_sub(3)));
            let group = lane.map(|g| format!("g{g}"));
            let action = copy(&body, group.as_deref());
            match &group {
                Some(g) => plan.push_to(g, action),
                None => plan.push(action),
            };
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let report = rt.block_on(settler.settle(&plan, later(), &Unpaced));
        proptest::prop_assert!(report.iter().all(|(_, c)| c.is_confirmed()));
        let calls = sqs.send_calls(MAIN);
        let mut seen = 0;
        for call in &calls {
            proptest::prop_assert!(!call.is_empty() && call.len() <= MAX_BATCH);
            let bytes: usize = call.iter().map(OutgoingMessage::size).sum();
            proptest::prop_assert!(bytes <= resq::attributes::MAX_MESSAGE_BYTES);
            let mut groups = std::collections::HashSet::new();
            proptest::prop_assert!(
                call.iter().filter_map(|m| m.group_id.clone()).all(|g| groups.insert(g)),
                "a call carries one message of a lane at most"
            );
            seen += call.len();
        }
        proptest::prop_assert_eq!(seen, sizes.len());
        for g in 0..4u8 {
            let group = Some(format!("g{g}"));
            let order: Vec<String> = sqs
                .sent(MAIN)
                .into_iter()
                .filter(|m| m.group_id == group)
                .map(|m| m.body[..3].to_owned())
                .collect();
            let mut sorted = order.clone();
            sorted.sort();
            proptest::prop_assert_eq!(order, sorted, "lane g{} out of order", g);
        }
    }
}

#[tokio::test]
async fn a_copy_too_large_for_sqs_is_stored_first_and_sent_as_a_pointer() {
    use resq::payload::{EXTENDED_PAYLOAD_SIZE, Pointer};
    // GIVEN a copy a byte over SQS's limit, and a small one
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    let settler = Settler::new(&sqs, &store, "test");
    let big = "x".repeat(resq::attributes::MAX_MESSAGE_BYTES + 1);
    let mut plan = Plan::new();
    let sent = plan.push(copy(&big, Some("tenant-a")));
    plan.push(copy("small", None));
    // WHEN it settles (twice: a retried copy finds its payload stored)
    for _ in 0..2 {
        let report = settler.settle(&plan, later(), &Unpaced).await;
        assert!(report.get(sent).is_confirmed(), "{report:?}");
    }
    // THEN the body is in the store, named by its content, and the copy is its pointer
    let copies = sqs.sent(MAIN);
    let pointers: Vec<_> = copies
        .iter()
        .filter_map(|m| Pointer::parse(&m.body))
        .collect();
    assert_eq!(
        pointers.len(),
        2,
        "{:?}",
        copies.iter().map(|m| m.body.len()).collect::<Vec<_>>()
    );
    let pointer = &pointers[0];
    assert_eq!(
        (pointer.bucket.as_str(), pointer.key.as_str()),
        (
            resq_testing::MEMORY_BUCKET,
            resq::payload::key_of(&big, chrono::Utc::now()).as_str()
        )
    );
    assert_eq!(store.keys("payloads/"), vec![pointer.key.clone()]);
    let copy = copies.iter().find(|m| m.body == pointer.body()).unwrap();
    assert_eq!(copy.group_id.as_deref(), Some("tenant-a"));
    assert_eq!(
        copy.attributes[EXTENDED_PAYLOAD_SIZE].string_value,
        Some(big.len().to_string())
    );
    assert!(copies.iter().any(|m| m.body == "small"));
}

#[tokio::test]
async fn a_copy_whose_payload_cannot_be_stored_is_not_sent() {
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    store.set_failing(true);
    let settler = Settler::new(&sqs, &store, "test");
    let mut plan = Plan::new();
    let big = plan.push(copy(
        &"x".repeat(resq::attributes::MAX_MESSAGE_BYTES + 1),
        None,
    ));
    let after = plan.then(big, delete("never"));
    let report = settler.settle(&plan, later(), &Unpaced).await;
    assert!(
        matches!(
            report.get(big),
            Confirmation::Failed(SettleError::Refused(_))
        ),
        "{report:?}"
    );
    assert!(matches!(
        report.get(after),
        Confirmation::NotAttempted(Unattempted::Blocked)
    ));
    assert!(sqs.sent(MAIN).is_empty());
}

#[tokio::test]
async fn an_archived_pointer_keeps_its_payload_beside_it() {
    use resq::payload::Pointer;
    use resq::store::ObjectStore;
    // GIVEN two pointer messages: one whose payload is stored, one whose object is gone
    let (sqs, store) = (MemorySqs::default(), MemoryStore::default());
    store
        .put_if_absent("payloads/p1", b"{\"orderId\":\"o-1\"}".to_vec())
        .await
        .unwrap();
    let settler = Settler::new(&sqs, &store, "redriver");
    let mut plan = Plan::new();
    let entries: Vec<ActionId> = ["payloads/p1", "payloads/gone"]
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let pointer = Pointer {
                bucket: resq_testing::MEMORY_BUCKET.into(),
                key: (*key).into(),
            };
            let message = OriginalMessage {
                message_id: format!("m{i}"),
                body: pointer.body(),
                message_attributes: MessageAttributes::new(),
                attributes: BTreeMap::new(),
                raw_record: None,
            };
            plan.push(Action::Archive(Box::new(ArchiveEntry::new(
                ArchiveReason::TtlExpired,
                DLQ,
                message,
                None,
            ))))
        })
        .collect();
    // WHEN they are archived
    let report = settler.settle(&plan, later(), &Unpaced).await;
    // THEN each entry keeps the pointer, and the payload or why it is not there
    let entry = |id| match report.get(id) {
        Confirmation::Confirmed(Some(key)) => {
            let bytes = futures::executor::block_on(store.get(key))
                .unwrap()
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["originalMessage"].clone()
        }
        other => panic!("{other:?}"),
    };
    let (kept, gone) = (entry(entries[0]), entry(entries[1]));
    assert!(Pointer::parse(kept["body"].as_str().unwrap()).is_some());
    assert_eq!(kept["payload"], "{\"orderId\":\"o-1\"}");
    assert!(gone["payload"].is_null());
    assert!(
        gone["payloadUnread"]
            .as_str()
            .unwrap()
            .contains("no such object"),
        "{gone}"
    );
}

#[tokio::test]
async fn a_day_of_keep_lists_reads_back_the_newest_entry_of_each_message() {
    use chrono::{Duration as Days, Utc};
    // GIVEN a run every minute for 14 hours, each hiding one message again (m0..m9 in turn),
    // the newest list of each message the one that counts
    let store = MemoryStore::default();
    let now = Utc::now();
    for minute in 0..14 * 60 {
        let at = now - Days::minutes(minute);
        let message = KeptMessage {
            message_id: format!("m{}", minute % 10),
            receipt_handle: format!("rh-{minute}"),
            failure_reason: None,
            first_sent_at: None,
            hidden_until: (now + Days::hours(1)).timestamp_millis() as u64,
            order_id: None,
        };
        let run = format!("run-{minute}");
        resq::keep::write_list(&store, DLQ, &run, 0, at, &[message])
            .await
            .unwrap();
    }
    // WHEN a run reads them
    let hidden = resq::keep::still_hidden(&store, DLQ, now).await.unwrap();
    // THEN each message once, with its newest receipt handle (the list of the lowest minute)
    let handles: Vec<&str> = hidden.iter().map(|k| k.receipt_handle.as_str()).collect();
    let newest: Vec<String> = (0..10).map(|m| format!("rh-{m}")).collect();
    assert_eq!(handles, newest);
}
