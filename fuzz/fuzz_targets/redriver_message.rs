//! The redriver's decisions on arbitrary DLQ messages, rules and clocks: classification, the
//! copy for the main queue, and batch packing.
#![no_main]

use std::collections::BTreeMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use resq::attributes::{
    AttributeValue, MAX_MESSAGE_ATTRIBUTES, MAX_MESSAGE_BYTES, RedriveCount, message_size,
};
use resq_redriver::config::PermanentAction;
use resq::sqs::{MAX_BATCH, pack};
use resq_redriver::classify::{ReceivedMessage, Rules, Verdict, classify, replay};

#[derive(Arbitrary, Debug)]
struct Attr {
    name: String,
    kind: u8,
    text: String,
    bytes: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    id: String,
    body: String,
    attrs: Vec<Attr>,
    sent: Option<String>,
    group: Option<String>,
    cap: u8,
    ttl_seconds: u32,
    archive_permanent: bool,
    reason: Option<String>,
    older_than_seconds: Option<u32>,
    now_ms: u64,
    fifo: bool,
    sizes: Vec<u32>,
}

fuzz_target!(|input: Input| {
    let mut message_attributes = BTreeMap::new();
    for a in input.attrs.into_iter().take(10) {
        let (data_type, string_value, binary_value) = match a.kind % 4 {
            0 => ("String", Some(a.text), None),
            1 => ("Number", Some(a.text), None),
            2 => ("Binary", None, Some(a.bytes)),
            _ => ("String.custom", Some(a.text), None),
        };
        message_attributes.insert(
            a.name,
            AttributeValue {
                data_type: data_type.to_owned(),
                string_value,
                binary_value,
            },
        );
    }
    let mut attributes = BTreeMap::new();
    if let Some(s) = input.sent {
        attributes.insert("SentTimestamp".to_owned(), s);
    }
    if let Some(g) = input.group {
        attributes.insert("MessageGroupId".to_owned(), g);
    }
    let m = ReceivedMessage {
        message_id: input.id,
        receipt_handle: "rh".into(),
        body: input.body,
        attributes,
        message_attributes,
        dropped_attributes: Vec::new(),
    };
    let rules = Rules {
        max_redrive_attempts: u32::from(input.cap % 8),
        archive_after: Duration::from_secs(u64::from(input.ttl_seconds)),
        permanent_action: if input.archive_permanent {
            PermanentAction::Archive
        } else {
            PermanentAction::Keep
        },
        reason: input.reason,
        older_than: input
            .older_than_seconds
            .map(|s| Duration::from_secs(u64::from(s))),
        paused: input.fifo && input.archive_permanent,
    };
    if classify(&m, &rules, input.now_ms) == Verdict::Redrive {
        assert!(
            matches!(m.redrive_count(), RedriveCount::Count(n) if n < rules.max_redrive_attempts),
            "replayed at or past the cap"
        );
    }
    if let Ok(copy) = replay(&m, input.fifo) {
        assert!(copy.attributes.len() <= MAX_MESSAGE_ATTRIBUTES);
        assert_eq!(copy.size(), message_size(&copy.body, &copy.attributes));
        assert!(copy.size() <= MAX_MESSAGE_BYTES);
    }
    let sizes: Vec<usize> = input
        .sizes
        .iter()
        .map(|s| (*s as usize) % (MAX_MESSAGE_BYTES + 1))
        .collect();
    let mut next = 0;
    for b in pack(&sizes) {
        assert_eq!(b.start, next);
        assert!(!b.is_empty() && b.len() <= MAX_BATCH);
        assert!(sizes[b.clone()].iter().sum::<usize>() <= MAX_MESSAGE_BYTES);
        next = b.end;
    }
    assert_eq!(next, sizes.len());
});
