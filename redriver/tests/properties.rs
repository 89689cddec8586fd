//! Property tests of the redriver's decisions: classification and copy building over arbitrary
//! DLQ messages (bodies up to and past 1 MiB, 0–10 attributes of every type including list
//! values, the resq attributes with hostile values, any timestamps), any rules, any clock.
//! Invariants: nothing panics, nothing at or past the cap (or with an unreadable count) is
//! ever replayed, and no copy breaks SQS's limits. (Batches: resq's settle executor.)

use std::time::Duration;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use proptest::prelude::*;
use resq::attributes::{
    MAX_MESSAGE_ATTRIBUTES, MAX_MESSAGE_BYTES, RedriveCount, X_FAILURE_CLASS, X_FAILURE_REASON,
    X_FIRST_SENT_AT, X_REDRIVE_COUNT, message_size, parse_count_value,
};
use resq::reason::ArchiveReason;
use resq_redriver::classify::{ReceivedMessage, Rules, Verdict, classify, replay};
use resq_redriver::config::PermanentAction;

fn attribute_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            X_REDRIVE_COUNT,
            X_FAILURE_CLASS,
            X_FAILURE_REASON,
            X_FIRST_SENT_AT,
            "trace-id",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9_.-]{1,20}",
    ]
}

fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "-1",
            "1e309",
            " 3",
            "3",
            "0",
            "2",
            "NaN",
            "",
            "permanent",
            "99999999999999999999",
            "3.0",
            "+3",
            "0x3",
            "MALFORMED_JSON",
            "1700000000000",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,30}",
        (200usize..5000).prop_map(|n| "9".repeat(n)),
    ]
}

fn attribute_value() -> impl Strategy<Value = MessageAttributeValue> {
    let build = |b: aws_sdk_sqs::types::builders::MessageAttributeValueBuilder| {
        b.build().expect("data type set")
    };
    prop_oneof![
        (
            prop::sample::select(vec!["String", "Number", "String.custom", "Number.int"]),
            hostile_text()
        )
            .prop_map(move |(t, v)| build(
                MessageAttributeValue::builder()
                    .data_type(t)
                    .string_value(v)
            )),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(move |b| build(
            MessageAttributeValue::builder()
                .data_type("Binary")
                .binary_value(Blob::new(b))
        )),
        Just(build(
            MessageAttributeValue::builder()
                .data_type("StringList")
                .string_list_values("a")
        )),
        Just(build(MessageAttributeValue::builder().data_type("String"))),
    ]
}

fn body() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "\\PC{0,200}",
        1 => prop::sample::select(vec![MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES - 30, 500_000])
            .prop_map(|n| "x".repeat(n)),
    ]
}

fn timestamp() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        any::<u64>().prop_map(|n| Some(n.to_string())),
        (1_600_000_000_000u64..1_900_000_000_000).prop_map(|n| Some(n.to_string())),
        prop::sample::select(vec!["-1", "abc", "", "1e3"]).prop_map(|s| Some(s.to_owned())),
    ]
}

/// A message as the SDK hands it over, converted the way the redriver converts it.
fn dlq() -> impl Strategy<Value = ReceivedMessage> {
    (
        "[a-f0-9]{8}-[a-f0-9]{4}",
        body(),
        prop::collection::hash_map(attribute_name(), attribute_value(), 0..=10),
        timestamp(),
        prop::option::of(prop::sample::select(vec!["g1", "g2"])),
    )
        .prop_map(|(id, body, attrs, sent, group)| {
            let mut m = Message::builder()
                .message_id(id)
                .receipt_handle("rh")
                .body(body)
                .set_message_attributes(Some(attrs));
            if let Some(s) = sent {
                m = m.attributes(MessageSystemAttributeName::SentTimestamp, s);
            }
            if let Some(g) = group {
                m = m.attributes(MessageSystemAttributeName::MessageGroupId, g);
            }
            ReceivedMessage::from_sdk(m.build())
        })
}

fn rules() -> impl Strategy<Value = Rules> {
    (
        0u32..6,
        prop_oneof![
            Just(Duration::ZERO),
            (0u64..200_000).prop_map(Duration::from_secs)
        ],
        prop::sample::select(vec![PermanentAction::Keep, PermanentAction::Archive]),
        prop::option::of(prop::sample::select(vec![
            "MALFORMED_JSON",
            "VALIDATION_FAILED",
        ])),
        prop::option::of((0u64..100_000).prop_map(Duration::from_secs)),
        prop::option::of(prop::sample::select(vec!["tenant-a", "tenant-b"])),
    )
        .prop_map(|(cap, ttl, action, reason, older, group)| Rules {
            max_redrive_attempts: cap,
            archive_after: ttl,
            permanent_action: action,
            reason: reason.map(str::to_owned),
            older_than: older,
            group: group.map(str::to_owned),
            paused: false,
        })
}

/// Shrunk failures would print bodies of up to 1 MiB: the message's id, body length and
/// attributes instead.
fn describe(m: &ReceivedMessage) -> String {
    format!(
        "{} body {} bytes, attributes {:?}, system {:?}",
        m.message_id,
        m.body.len(),
        m.message_attributes,
        m.attributes
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn nothing_at_the_cap_is_replayed_and_no_copy_breaks_the_limits(
        m in dlq(),
        rules in rules(),
        now_ms in prop_oneof![any::<u64>(), 1_700_000_000_000u64..1_900_000_000_000],
        fifo in any::<bool>(),
    ) {
        let what = describe(&m);
        let decision = classify(&m, &rules, now_ms);
        let count = m.redrive_count();
        match decision {
            Verdict::Redrive => {
                prop_assert!(
                    matches!(count, RedriveCount::Count(n) if n < rules.max_redrive_attempts),
                    "replayed at {count:?}, cap {}: {what}", rules.max_redrive_attempts
                );
                prop_assert!(!m.is_permanent() || rules.reason.is_some(), "a permanent failure replayed unasked");
            }
            Verdict::Archive(ArchiveReason::RedriveCap) => {
                prop_assert!(matches!(count, RedriveCount::Count(n) if n >= rules.max_redrive_attempts));
            }
            Verdict::Archive(ArchiveReason::InvalidRedriveCount) => {
                prop_assert_eq!(count, RedriveCount::Invalid);
            }
            Verdict::NotSelected => {
                prop_assert!(rules.reason.is_some() || rules.older_than.is_some() || rules.group.is_some());
            }
            _ => {}
        }

        match replay(&m, fifo) {
            Ok(copy) => {
                let RedriveCount::Count(n) = count else {
                    return Err(TestCaseError::fail(format!("a copy of an unreadable count: {what}")));
                };
                prop_assert!(copy.attributes.len() <= MAX_MESSAGE_ATTRIBUTES);
                prop_assert_eq!(copy.size(), message_size(&copy.body, &copy.attributes));
                // as it travels: whole, or (too large for SQS) as a pointer to its stored body
                let bucket = "b".repeat(63);
                let (body, attrs) = resq::payload::offload(&copy.body, &copy.attributes, &bucket, chrono::Utc::now())
                    .map_or((copy.body.clone(), copy.attributes.clone()), |(_, b, a)| (b, a));
                prop_assert!(attrs.len() <= MAX_MESSAGE_ATTRIBUTES);
                prop_assert!(message_size(&body, &attrs) <= MAX_MESSAGE_BYTES, "a copy of {} bytes", message_size(&body, &attrs));
                prop_assert!(copy.body == m.body, "the body changed");
                let next = copy.attributes[X_REDRIVE_COUNT].string_value.as_deref().unwrap_or_default();
                prop_assert_eq!(parse_count_value(next), RedriveCount::Count(n.saturating_add(1)));
                prop_assert!(!copy.attributes.contains_key(X_FAILURE_CLASS));
                prop_assert!(!copy.attributes.contains_key(X_FAILURE_REASON));
                // FIFO: a group always (the original's, or resq's); standard: the original's
                // alone (a fair queue's tenant)
                match fifo {
                    true => prop_assert!(copy.group_id.is_some()),
                    false => prop_assert_eq!(copy.group_id.as_deref(), m.group_id()),
                }
                prop_assert_eq!(copy.deduplication_id.is_some(), fifo);
                prop_assert!(copy.deduplication_id.as_ref().is_none_or(|d| !d.is_empty() && d.chars().count() <= 128));
                if let Some(sent) = m.first_sent_at() {
                    let carried = copy.attributes[X_FIRST_SENT_AT].string_value.clone();
                    prop_assert_eq!(carried, Some(sent.to_string()));
                }
            }
            Err(reason) => prop_assert!(
                matches!(
                    reason,
                    ArchiveReason::AttributeLimit | ArchiveReason::SizeLimit | ArchiveReason::InvalidRedriveCount
                ),
                "refused with {reason:?}: {what}"
            ),
        }
    }

    #[test]
    fn a_paused_run_replays_nothing_and_archives_the_same(
        m in dlq(),
        rules in rules(),
        now_ms in 1_700_000_000_000u64..1_900_000_000_000,
    ) {
        let paused = Rules { paused: true, ..rules.clone() };
        match (classify(&m, &rules, now_ms), classify(&m, &paused, now_ms)) {
            (Verdict::Redrive, after) => prop_assert_eq!(after, Verdict::Paused),
            (before, after) => prop_assert_eq!(before, after),
        }
    }
}
