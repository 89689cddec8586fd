//! The archive writer against resq-testing's in-memory store: one entry per message, written
//! once, whole.

use std::collections::BTreeMap;

use chrono::{TimeZone, Utc};
use resq::archive::*;
use resq::attributes::{AttributeValue, MessageAttributes};
use resq::reason::ArchiveReason;
use resq::store::PutOutcome;

#[tokio::test]
async fn envelope_is_complete_and_never_overwritten() {
    let mem = resq_testing::MemoryStore::default();
    let archiver = Archiver::new(&mem, "consumer");
    let at = Utc.with_ymd_and_hms(2026, 11, 21, 10, 0, 0).unwrap();
    let message = OriginalMessage {
        message_id: "m-1".into(),
        body: "{\"orderId\":\"o-1\"}".into(),
        message_attributes: MessageAttributes::from([(
            "x-redrive-count".into(),
            AttributeValue::number(3),
        )]),
        attributes: BTreeMap::from([("ApproximateReceiveCount".into(), "2".into())]),
        raw_record: None,
    };
    let meta = ArchiveFacts {
        source_queue: "http://q/orders".into(),
        redrive_count: Some(3),
        receive_count: Some(2),
        first_sent_at: Some(1),
        last_error: None,
    };
    let (key, outcome) = archiver
        .write(
            &ArchiveEntry {
                reason: ArchiveReason::RedriveCap,
                message: message.clone(),
                facts: meta.clone(),
            },
            at,
        )
        .await
        .unwrap();
    assert_eq!(outcome, PutOutcome::Created);
    let stored: serde_json::Value = serde_json::from_slice(&mem.objects()[&key]).unwrap();
    assert_eq!(stored["originalMessage"]["body"], "{\"orderId\":\"o-1\"}");
    assert_eq!(
        stored["originalMessage"]["messageAttributes"]["x-redrive-count"]["stringValue"],
        "3"
    );
    assert_eq!(stored["metadata"]["reason"], "REDRIVE_CAP");
    assert_eq!(stored["metadata"]["archivedBy"], "consumer");
    assert_eq!(stored["metadata"]["archivedAt"], "2026-11-21T10:00:00.000Z");
    for field in [
        "sourceQueue",
        "redriveCount",
        "receiveCount",
        "firstSentAt",
        "lastError",
    ] {
        assert!(stored["metadata"].get(field).is_some(), "{field}");
    }
    let mut changed = message;
    changed.body = "other".into();
    let (_, again) = archiver
        .write(
            &ArchiveEntry {
                reason: ArchiveReason::RedriveCap,
                message: changed,
                facts: meta,
            },
            at,
        )
        .await
        .unwrap();
    assert_eq!(again, PutOutcome::AlreadyExists);
    let stored: ArchiveEnvelope = serde_json::from_slice(&mem.objects()[&key]).unwrap();
    assert_eq!(stored.original_message.body, "{\"orderId\":\"o-1\"}");
}

#[tokio::test]
async fn an_archive_retried_on_a_later_day_finds_its_own_entry() {
    // GIVEN a message first sent on 21 November, archived that evening …
    let mem = resq_testing::MemoryStore::default();
    let archiver = Archiver::new(&mem, "redriver");
    let sent = Utc.with_ymd_and_hms(2026, 11, 21, 8, 0, 0).unwrap();
    let message = OriginalMessage {
        message_id: "m-9".into(),
        body: "{}".into(),
        message_attributes: MessageAttributes::new(),
        attributes: BTreeMap::new(),
        raw_record: None,
    };
    let facts = ArchiveFacts {
        source_queue: "http://q/orders-dlq".into(),
        redrive_count: Some(3),
        receive_count: Some(1),
        first_sent_at: Some(sent.timestamp_millis() as u64),
        last_error: None,
    };
    let evening = Utc.with_ymd_and_hms(2026, 11, 21, 23, 59, 59).unwrap();
    let (key, first) = archiver
        .write(
            &ArchiveEntry {
                reason: ArchiveReason::RedriveCap,
                message: message.clone(),
                facts: facts.clone(),
            },
            evening,
        )
        .await
        .unwrap();
    // … and again after midnight, because its delete from the queue failed
    let next_day = Utc.with_ymd_and_hms(2026, 11, 22, 0, 0, 1).unwrap();
    let (again_key, again) = archiver
        .write(
            &ArchiveEntry {
                reason: ArchiveReason::RedriveCap,
                message: message.clone(),
                facts: facts.clone(),
            },
            next_day,
        )
        .await
        .unwrap();
    // THEN there is one entry, under the day it was sent
    assert_eq!(
        (first, again),
        (PutOutcome::Created, PutOutcome::AlreadyExists)
    );
    assert_eq!(key, again_key);
    assert_eq!(key, "archive/REDRIVE_CAP/2026/11/21/m-9.json");
    assert_eq!(mem.keys("archive/").len(), 1);
    // without a known send time, the day of archiving
    let unknown = ArchiveFacts {
        first_sent_at: None,
        ..facts
    };
    let (key, _) = archiver
        .write(
            &ArchiveEntry {
                reason: ArchiveReason::TtlExpired,
                message,
                facts: unknown,
            },
            next_day,
        )
        .await
        .unwrap();
    assert_eq!(key, "archive/TTL_EXPIRED/2026/11/22/m-9.json");
}
