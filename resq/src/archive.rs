//! The archive (docs/design.md, "Archive"): the envelope that keeps a message whole, its key, and the writer.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::attributes::{MessageAttributes, RedriveCount, first_sent_at, parse_redrive_count};
use crate::error::AwsError;
use crate::payload::{MAX_PAYLOAD_BYTES, Payload, Pointer};
use crate::reason::ArchiveReason;
use crate::store::{ObjectStore, PutOutcome};

/// Where archive entries live in the bucket.
pub const ARCHIVE_PREFIX: &str = "archive/";

/// What writing archive entries needs (both functions archive): conditional puts under
/// [`ARCHIVE_PREFIX`].
pub const PERMISSIONS: &[crate::iam::Permission] = &[crate::iam::Permission::new(
    "s3:PutObject",
    "ArchiveBucket/archive/*",
)];

/// The message exactly as it was received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginalMessage {
    /// The SQS message id of the archived copy.
    pub message_id: String,
    /// The body, byte for byte.
    pub body: String,
    /// All message attributes (scalar values).
    pub message_attributes: MessageAttributes,
    /// The system attributes (`SentTimestamp`, `ApproximateReceiveCount`, `MessageGroupId`, …).
    pub attributes: BTreeMap<String, String>,
    /// The record as Lambda delivered it, when the consumer could not read it whole
    /// (`UNREADABLE_RECORD`): what [`OriginalMessage::body`] and the attributes could not hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_record: Option<String>,
}

/// Why, when and by whom a message was archived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveMetadata {
    /// URL of the queue the message was taken from.
    pub source_queue: String,
    /// The reason code (`REDRIVE_CAP`, …).
    pub reason: String,
    /// `consumer`, `redriver` or the operator tool.
    pub archived_by: String,
    /// RFC 3339 UTC time of archiving.
    pub archived_at: String,
    /// `x-redrive-count` when readable.
    pub redrive_count: Option<u32>,
    /// `ApproximateReceiveCount` when known.
    pub receive_count: Option<u32>,
    /// Epoch millis of the producer's send when known.
    pub first_sent_at: Option<u64>,
    /// The last error seen for this message, if any.
    pub last_error: Option<String>,
    /// The operator's restores of this entry (`resq archive restore --patch`), oldest first:
    /// who, when, with which patch, and what became of the send. The bucket is versioned, so
    /// the entry as archived stays as an earlier version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restores: Vec<RestoreRecord>,
}

/// One operator's restore of an archived message, as the entry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreRecord {
    /// This restore's id: its record is written before the send and completed after it.
    pub id: String,
    /// RFC 3339 UTC time the restore started.
    pub at: String,
    /// Who restored it: the caller's AWS identity (STS `GetCallerIdentity`'s ARN), else the
    /// OS user.
    pub by: String,
    /// The JSON merge patch (RFC 7396) applied to the body; none: restored as archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<serde_json::Value>,
    /// The queue the restored message was sent to.
    pub queue: String,
    /// What became of the send.
    pub status: RestoreStatus,
    /// The restored message's id, once sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Why the send failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a restore stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RestoreStatus {
    /// Recorded before the send; not (yet) known to be sent.
    Sending,
    /// SQS accepted the restored message.
    Sent,
    /// The send failed: nothing was restored.
    Failed,
}

/// What the caller knows about an archived message; [`Archiver::write`] adds the reason,
/// who archived it and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveFacts {
    /// URL of the queue the message was taken from.
    pub source_queue: String,
    /// `x-redrive-count` when readable.
    pub redrive_count: Option<u32>,
    /// `ApproximateReceiveCount` when known.
    pub receive_count: Option<u32>,
    /// Epoch millis of the producer's send when known.
    pub first_sent_at: Option<u64>,
    /// The last error seen for this message, if any.
    pub last_error: Option<String>,
}

/// One archive entry: `{"originalMessage": …, "metadata": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveEnvelope {
    /// The message.
    pub original_message: OriginalMessage,
    /// Why it is here.
    pub metadata: ArchiveMetadata,
}

/// `archive/{reason}/{yyyy}/{mm}/{dd}/{messageId}.json`, where the day is the one given: the
/// day the message was first sent (see [`Archiver::write`]). Characters outside
/// `[A-Za-z0-9._-]` in the message id are replaced so an id can never reach outside its folder.
pub fn archive_key(reason: ArchiveReason, day: DateTime<Utc>, message_id: &str) -> String {
    let safe: String = message_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = if safe.is_empty() || safe.chars().all(|c| c == '.') {
        "_".to_owned()
    } else {
        safe
    };
    format!(
        "{ARCHIVE_PREFIX}{}/{}/{safe}.json",
        reason.code(),
        day.format("%Y/%m/%d")
    )
}

/// RFC 3339 form used in envelopes.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Writes envelopes with a conditional put, so a retried archive never overwrites.
#[derive(Debug, Clone)]
pub struct Archiver<S> {
    store: S,
    archived_by: String,
}

impl<S: ObjectStore> Archiver<S> {
    /// An archiver that signs its entries as `archived_by`.
    pub fn new(store: S, archived_by: impl Into<String>) -> Self {
        Self {
            store,
            archived_by: archived_by.into(),
        }
    }

    /// The store written to.
    pub(crate) fn store(&self) -> &S {
        &self.store
    }

    /// The payload a pointer body names, to keep beside the pointer (so the entry stays whole
    /// when the object is gone), or why it could not be kept; `(None, None)` for any other body.
    async fn payload(
        &self,
        body: &str,
        attributes: &MessageAttributes,
    ) -> (Option<String>, Option<String>) {
        let Some(pointer) = Pointer::parse(body) else {
            return (None, None);
        };
        let at = format!("s3://{}/{}", pointer.bucket, pointer.key);
        let _reserved = crate::payload::reserve(attributes).await;
        match self.store.payload(&pointer).await {
            Ok(Payload::Found(bytes)) => (Some(crate::payload::text(bytes)), None),
            Ok(Payload::Missing) => (None, Some(format!("{at}: no such object"))),
            Ok(Payload::TooLarge(size)) => (
                None,
                Some(format!(
                    "{at}: {size} bytes, over the {MAX_PAYLOAD_BYTES} resq reads"
                )),
            ),
            Err(e) => (None, Some(e.to_string())),
        }
    }

    /// Writes `entry` as archived at `at`; returns its key. An entry already there counts as written.
    ///
    /// The key's day is the day the message was first sent (`facts.first_sent_at`), not the
    /// day of archiving: a message whose archive is retried later (its delete failed, the
    /// function died before acknowledging) finds its own entry again, on any later day, and
    /// gets one entry. Without a known send time, the day of archiving is used.
    pub async fn write(
        &self,
        entry: &ArchiveEntry,
        at: DateTime<Utc>,
    ) -> Result<(String, PutOutcome), AwsError> {
        let facts = &entry.facts;
        let metadata = ArchiveMetadata {
            source_queue: facts.source_queue.clone(),
            reason: entry.reason.code().to_owned(),
            archived_by: self.archived_by.clone(),
            archived_at: timestamp(at),
            redrive_count: facts.redrive_count,
            receive_count: facts.receive_count,
            first_sent_at: facts.first_sent_at,
            last_error: facts.last_error.clone(),
            restores: Vec::new(),
        };
        let day = facts
            .first_sent_at
            .and_then(|ms| i64::try_from(ms).ok())
            .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
            .unwrap_or(at);
        let key = archive_key(entry.reason, day, &entry.message.message_id);
        let message = &entry.message;
        let (payload, payload_unread) = self
            .payload(&message.body, &message.message_attributes)
            .await;
        let envelope = EnvelopeRef {
            original_message: OriginalRef {
                message: &entry.message,
                payload,
                payload_unread,
            },
            metadata,
        };
        let body = serde_json::to_vec(&envelope).map_err(|e| AwsError::local(e.to_string()))?;
        let outcome = self.store.put_if_absent(&key, body).await?;
        Ok((key, outcome))
    }
}

/// [`ArchiveEnvelope`] over a borrowed message, for writing.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeRef<'a> {
    original_message: OriginalRef<'a>,
    metadata: ArchiveMetadata,
}

/// The message as archived: with the payload its body points to, when it is a pointer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OriginalRef<'a> {
    #[serde(flatten)]
    message: &'a OriginalMessage,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_unread: Option<String>,
}

/// One message to archive, with why: what the settle executor's archive action writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveEntry {
    /// Why it is archived.
    pub reason: ArchiveReason,
    /// The message, whole.
    pub message: OriginalMessage,
    /// What resq knows about it.
    pub facts: ArchiveFacts,
}

impl ArchiveEntry {
    /// The entry of `message`, taken from `source_queue`. What resq knows about a message is
    /// read off its attributes here, for both functions: its `x-redrive-count` (none when
    /// unreadable), its `ApproximateReceiveCount` and its producer's send (the earlier of
    /// `x-first-sent-at` and `SentTimestamp`).
    pub fn new(
        reason: ArchiveReason,
        source_queue: &str,
        message: OriginalMessage,
        last_error: Option<String>,
    ) -> Self {
        let attributes = &message.attributes;
        let facts = ArchiveFacts {
            source_queue: source_queue.to_owned(),
            redrive_count: match parse_redrive_count(&message.message_attributes) {
                RedriveCount::Count(n) => Some(n),
                RedriveCount::Invalid => None,
            },
            receive_count: attributes
                .get("ApproximateReceiveCount")
                .and_then(|c| c.trim().parse().ok()),
            first_sent_at: first_sent_at(
                &message.message_attributes,
                attributes
                    .get("SentTimestamp")
                    .and_then(|s| s.trim().parse().ok()),
            ),
            last_error,
        };
        Self {
            reason,
            message,
            facts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn key_layout() {
        let at = Utc.with_ymd_and_hms(2026, 3, 7, 23, 59, 59).unwrap();
        assert_eq!(
            archive_key(
                ArchiveReason::RedriveCap,
                at,
                "059f36b4-87a3-44ab-83d2-661975830a7d"
            ),
            "archive/REDRIVE_CAP/2026/03/07/059f36b4-87a3-44ab-83d2-661975830a7d.json"
        );
        assert_eq!(
            archive_key(ArchiveReason::TtlExpired, at, "../../x"),
            "archive/TTL_EXPIRED/2026/03/07/.._.._x.json"
        );
        assert_eq!(
            archive_key(ArchiveReason::TtlExpired, at, ".."),
            "archive/TTL_EXPIRED/2026/03/07/_.json"
        );
        assert_eq!(
            archive_key(ArchiveReason::TtlExpired, at, ""),
            "archive/TTL_EXPIRED/2026/03/07/_.json"
        );
    }
}
