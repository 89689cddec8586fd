//! Large payloads (docs/design.md, "Large payloads"): the pointers of AWS's SQS extended
//! client libraries, read and written. A body that is such a pointer names an S3 object that
//! holds the real payload; the consumer reads it before the handler runs, and a copy that would
//! not fit in an SQS message stores its body under [`PREFIX`] in the archive bucket and travels
//! as a pointer itself ([`offload`], carried out by the settle executor).

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::attributes::{
    self, AttributeValue, MAX_MESSAGE_ATTRIBUTES, MAX_MESSAGE_BYTES, MessageAttributes,
};

/// The class name the extended clients put first in a pointer body.
pub const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";
/// The class name of the Java extended client's first versions (read, never written).
pub const LEGACY_POINTER_CLASS: &str = "com.amazon.sqs.javamessaging.MessageS3Pointer";
/// The attribute an extended client sets on a pointer message: the payload's size in bytes.
pub const EXTENDED_PAYLOAD_SIZE: &str = "ExtendedPayloadSize";
/// Where resq stores the bodies of copies too large for SQS, in the archive bucket.
pub const PREFIX: &str = "payloads/";
/// The largest payload resq reads into memory (a pointer to a larger one is a permanent
/// failure, `PAYLOAD_TOO_LARGE`): an invocation runs up to 64 records at once in 256 MB.
pub const MAX_PAYLOAD_BYTES: u64 = 8 * 1_048_576;

/// Payload bytes a process reads at once, at most ([`reserve`]): what a 256 MB function spares
/// beside its records (four payloads of [`MAX_PAYLOAD_BYTES`]).
pub const READ_BUDGET_BYTES: u64 = 4 * MAX_PAYLOAD_BYTES;

static READ_BUDGET: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new((READ_BUDGET_BYTES / 1024) as usize);

/// Waits until the process may read the payload of a pointer message with `attrs` (its
/// `ExtendedPayloadSize`, or the most resq reads when it has none) and holds that share of
/// [`READ_BUDGET_BYTES`] until the permit is dropped: several records and archive entries
/// reading payloads at once cannot exhaust the function's memory.
pub async fn reserve(attrs: &MessageAttributes) -> tokio::sync::SemaphorePermit<'static> {
    let size = attrs
        .get(EXTENDED_PAYLOAD_SIZE)
        .and_then(|v| v.string_value.as_deref()?.trim().parse::<u64>().ok())
        .unwrap_or(MAX_PAYLOAD_BYTES)
        .clamp(1, MAX_PAYLOAD_BYTES);
    let kib = size.div_ceil(1024) as u32;
    READ_BUDGET
        .acquire_many(kib)
        .await
        .expect("the read budget is never closed")
}

/// A payload's bytes as text (an order's body is text; bytes that are not UTF-8 are replaced,
/// and its parsing refuses them).
pub fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Where a pointer body says the payload is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    /// `s3BucketName`.
    pub bucket: String,
    /// `s3Key`.
    pub key: String,
}

impl Pointer {
    /// The pointer `body` is, if it is one:
    /// `["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": …, "s3Key": …}]`.
    pub fn parse(body: &str) -> Option<Self> {
        // a cheap test first: most bodies are orders, not pointers
        let class_named = body.contains(POINTER_CLASS) || body.contains(LEGACY_POINTER_CLASS);
        if !body.trim_start().starts_with('[') || !class_named {
            return None;
        }
        let value: serde_json::Value = serde_json::from_str(body).ok()?;
        let [class, fields] = value.as_array()?.as_slice() else {
            return None;
        };
        if ![POINTER_CLASS, LEGACY_POINTER_CLASS].contains(&class.as_str()?) {
            return None;
        }
        let field = |name: &str| fields.get(name)?.as_str().map(str::to_owned);
        Some(Self {
            bucket: field("s3BucketName")?,
            key: field("s3Key")?,
        })
    }

    /// The pointer as a message body, in the extended clients' format.
    pub fn body(&self) -> String {
        json!([POINTER_CLASS, {"s3BucketName": self.bucket, "s3Key": self.key}]).to_string()
    }
}

/// What reading a pointer's object found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// The payload.
    Found(Vec<u8>),
    /// No object at the pointer (`NoSuchKey`, `NoSuchBucket`).
    Missing,
    /// An object larger than [`MAX_PAYLOAD_BYTES`], of this many bytes: not read.
    TooLarge(u64),
}

/// Why a copy cannot be sent, even as a pointer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    /// Too large for SQS, and a pointer needs an attribute more than SQS allows.
    #[error("a copy would be {size} bytes, and its pointer needs an 11th attribute")]
    AttributeLimit {
        /// The size SQS would count.
        size: usize,
    },
    /// Too large even as a pointer (its attributes alone).
    #[error(
        "a copy would be {size} bytes, and its attributes alone fill SQS's {MAX_MESSAGE_BYTES}"
    )]
    SizeLimit {
        /// The size SQS would count.
        size: usize,
    },
}

impl Unfit {
    /// The archive reason of a message whose copy cannot be sent.
    pub fn reason(&self) -> crate::reason::ArchiveReason {
        match self {
            Unfit::AttributeLimit { .. } => crate::reason::ArchiveReason::AttributeLimit,
            Unfit::SizeLimit { .. } => crate::reason::ArchiveReason::SizeLimit,
        }
    }
}

/// `Ok` when a copy of `body` with `attrs` can be sent: as it is, or as a pointer (the settle
/// executor stores the body then, [`offload`]).
pub fn fits(body: &str, attrs: &MessageAttributes) -> Result<(), Unfit> {
    let size = attributes::message_size(body, attrs);
    if size <= MAX_MESSAGE_BYTES {
        return Ok(());
    }
    if attrs.len() >= MAX_MESSAGE_ATTRIBUTES {
        return Err(Unfit::AttributeLimit { size });
    }
    // the longest pointer: a bucket name's 63 characters, a key as long as `key_of`'s (no
    // need to hash the body to know its length)
    let pointer = Pointer {
        bucket: "b".repeat(63),
        key: format!("{PREFIX}yyyy/mm/dd/{}", "0".repeat(64)),
    };
    let (body, attrs) = pointer_copy(&pointer, body, attrs);
    match attributes::message_size(&body, &attrs) <= MAX_MESSAGE_BYTES {
        true => Ok(()),
        false => Err(Unfit::SizeLimit { size }),
    }
}

/// The key a body too large for SQS is stored under on day `at`: named by its content, so a
/// retried copy writes the same object (a conditional put that finds it is done), and by the
/// day, so an object found is never older than the day it is reused (the bucket's lifecycle
/// expires `payloads/` with the order records, counted from each object's creation).
pub fn key_of(body: &str, at: DateTime<Utc>) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(body.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{}/{hex}", at.format("%Y/%m/%d"))
}

/// A copy that does not fit in SQS, as it travels on day `at`: its body stored at
/// `(bucket, key_of(body, at))` and replaced by the pointer, with `ExtendedPayloadSize`; `None`
/// when it fits as it is.
pub fn offload(
    body: &str,
    attrs: &MessageAttributes,
    bucket: &str,
    at: DateTime<Utc>,
) -> Option<(Pointer, String, MessageAttributes)> {
    if attributes::message_size(body, attrs) <= MAX_MESSAGE_BYTES {
        return None;
    }
    let pointer = Pointer {
        bucket: bucket.to_owned(),
        key: key_of(body, at),
    };
    let (pointer_body, attrs) = pointer_copy(&pointer, body, attrs);
    Some((pointer, pointer_body, attrs))
}

fn pointer_copy(
    pointer: &Pointer,
    body: &str,
    attrs: &MessageAttributes,
) -> (String, MessageAttributes) {
    let mut attrs = attrs.clone();
    attrs.insert(
        EXTENDED_PAYLOAD_SIZE.to_owned(),
        AttributeValue::number(body.len() as u64),
    );
    (pointer.body(), attrs)
}

/// What storing and reading payloads needs (both functions copy and archive): objects under
/// [`PREFIX`] in the archive bucket, and, when the stack names one, the producers' payload
/// bucket (`ProducerPayloadBucket`), read only.
pub const PERMISSIONS: &[crate::iam::Permission] = &[
    crate::iam::Permission::new("s3:PutObject", "ArchiveBucket/payloads/*"),
    crate::iam::Permission::new("s3:GetObject", "ArchiveBucket/payloads/*"),
    crate::iam::Permission::new("s3:GetObject", "ProducerPayloadBucket/*"),
    // without it S3 answers a missing key 403, not 404: `PAYLOAD_NOT_FOUND` needs to know
    crate::iam::Permission::new("s3:ListBucket", "ArchiveBucket if s3:prefix=payloads/*"),
    crate::iam::Permission::new("s3:ListBucket", "ProducerPayloadBucket"),
];

#[cfg(test)]
mod tests {
    use super::*;

    // GIVEN the body the Java and Python extended clients send
    const JAVA: &str = r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"orders-payloads","s3Key":"4b0b8a0e-5d2c-4a2e-9a38-2f0c1e0d7b11"}]"#;

    #[test]
    fn reads_the_extended_clients_pointer_and_writes_it_back() {
        let p = Pointer::parse(JAVA).expect("a pointer");
        assert_eq!(p.bucket, "orders-payloads");
        assert_eq!(p.key, "4b0b8a0e-5d2c-4a2e-9a38-2f0c1e0d7b11");
        assert_eq!(Pointer::parse(&p.body()), Some(p.clone()));
        let legacy = JAVA.replace(POINTER_CLASS, LEGACY_POINTER_CLASS);
        assert_eq!(Pointer::parse(&legacy), Some(p));
    }

    #[test]
    fn an_order_or_a_lookalike_is_no_pointer() {
        for body in [
            r#"{"orderId":"o-1"}"#,
            r#"["software.amazon.payloadoffloading.PayloadS3Pointer"]"#,
            r#"["other.Class",{"s3BucketName":"b","s3Key":"k"}]"#,
            r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b"}]"#,
            "[software.amazon.payloadoffloading.PayloadS3Pointer",
        ] {
            assert_eq!(Pointer::parse(body), None, "{body}");
        }
    }

    #[test]
    fn a_copy_over_sqs_limit_travels_as_a_pointer_that_fits() {
        let body = "x".repeat(MAX_MESSAGE_BYTES);
        let mut attrs = MessageAttributes::new();
        attrs.insert("x-failure-reason".into(), AttributeValue::string("R"));
        assert_eq!(fits(&body, &attrs), Ok(()));
        let at = Utc::now();
        let (pointer, sent, sent_attrs) = offload(&body, &attrs, "archive", at).expect("offloaded");
        assert_eq!(pointer.key, key_of(&body, at));
        // `fits` sizes a pointer by a key of this length without hashing
        assert_eq!(pointer.key.len(), PREFIX.len() + "yyyy/mm/dd/".len() + 64);
        assert!(
            pointer
                .key
                .starts_with(&format!("{PREFIX}{}/", at.format("%Y/%m/%d")))
        );
        assert_eq!(Pointer::parse(&sent), Some(pointer));
        assert_eq!(
            sent_attrs[EXTENDED_PAYLOAD_SIZE].string_value.as_deref(),
            Some(body.len().to_string().as_str())
        );
        assert!(attributes::message_size(&sent, &sent_attrs) <= MAX_MESSAGE_BYTES);
        // what fits is sent as it is
        assert_eq!(offload("{}", &attrs, "archive", at), None);
    }

    #[test]
    fn a_pointer_needs_a_free_attribute() {
        let body = "x".repeat(MAX_MESSAGE_BYTES);
        let attrs: MessageAttributes = (0..MAX_MESSAGE_ATTRIBUTES)
            .map(|i| (format!("a{i}"), AttributeValue::string("v")))
            .collect();
        assert!(matches!(
            fits(&body, &attrs),
            Err(Unfit::AttributeLimit { .. })
        ));
        assert_eq!(fits("{}", &attrs), Ok(()));
    }
}
