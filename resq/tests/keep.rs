//! Keep lists against resq-testing's in-memory store: written once, read back, the newest
//! entry of each message counting.

use chrono::{DateTime, Duration as ChronoDuration, TimeZone, Utc};
use resq::keep::*;
use resq_testing::MemoryStore;

fn kept(id: &str, handle: &str, until: DateTime<Utc>) -> KeptMessage {
    KeptMessage {
        message_id: id.into(),
        receipt_handle: handle.into(),
        failure_reason: Some("MALFORMED_JSON".into()),
        first_sent_at: Some(1),
        hidden_until: until.timestamp_millis() as u64,
        order_id: None,
    }
}

#[tokio::test]
async fn the_newest_entry_of_each_still_hidden_message_counts() {
    // GIVEN three runs' lists, across midnight
    let store = MemoryStore::default();
    let q = "http://q/dlq";
    let t0 = Utc.with_ymd_and_hms(2026, 11, 22, 20, 0, 0).unwrap();
    let t1 = t0 + ChronoDuration::hours(5); // 01:00 the next day
    let now = t1 + ChronoDuration::hours(1);
    write_list(
        &store,
        q,
        "run-a",
        0,
        t0,
        &[
            kept("m1", "rh-a1", t0 + ChronoDuration::hours(12)),
            kept("m2", "rh-a2", t0 + ChronoDuration::hours(3)),
        ],
    )
    .await
    .unwrap();
    write_list(
        &store,
        q,
        "run-b",
        0,
        t1,
        &[kept("m1", "rh-b1", t1 + ChronoDuration::hours(12))],
    )
    .await
    .unwrap();
    write_list(
        &store,
        "http://q/other",
        "run-c",
        0,
        t1,
        &[kept("m9", "rh-c9", t1 + ChronoDuration::hours(12))],
    )
    .await
    .unwrap();
    // WHEN read six hours after the last
    let hidden = still_hidden(&store, q, now).await.unwrap();
    // THEN m1 with its newest handle; m2 is visible again by itself; other queues ignored
    assert_eq!(hidden.len(), 1);
    assert_eq!(hidden[0].receipt_handle, "rh-b1");
    assert_eq!(store.keys(KEEP_PREFIX).len(), 3);
    assert!(store.keys("kept/2026/11/22/200000000-run-a-0.json").len() == 1);
}
