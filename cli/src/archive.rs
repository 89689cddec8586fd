//! `resq archive ls | show | restore`.

use std::time::Duration;

use std::future::Future;

use resq::archive::{ARCHIVE_PREFIX, ArchiveEnvelope, RestoreRecord, RestoreStatus};
use resq::attributes::{X_FAILURE_CLASS, X_FAILURE_REASON, X_FIRST_SENT_AT, X_REDRIVE_COUNT};
use resq::error::AwsError;
use resq::settle::{Action, Confirmation, Plan, QueueUrl, SettleError};
use resq::sqs::OutgoingMessage;
use resq::store::{ObjectStore, PutOutcome};
use serde_json::Value;

use crate::CliError;
use crate::context::Context;

/// Archive keys under `archive/{reason}/{date…}`, oldest first.
pub async fn list(
    ctx: &Context,
    reason: Option<&str>,
    date: Option<&str>,
) -> Result<Vec<String>, CliError> {
    let mut prefix = ARCHIVE_PREFIX.to_owned();
    if let Some(r) = reason {
        prefix.push_str(r);
        prefix.push('/');
        if let Some(d) = date {
            prefix.push_str(&d.replace('-', "/"));
        }
    }
    let mut keys = list_keys(ctx, &prefix).await?;
    if reason.is_none()
        && let Some(d) = date
    {
        let needle = format!("/{}/", d.replace('-', "/"));
        keys.retain(|k| k.contains(&needle));
    }
    Ok(keys)
}

/// Every key under `prefix` in the context's bucket, following continuation tokens.
pub async fn list_keys(ctx: &Context, prefix: &str) -> Result<Vec<String>, CliError> {
    Ok(list_objects(ctx, prefix)
        .await?
        .into_iter()
        .map(|(key, _)| key)
        .collect())
}

/// Every key under `prefix` in the context's bucket, with when it was last written (epoch
/// millis, S3's `LastModified`), following continuation tokens.
pub async fn list_objects(
    ctx: &Context,
    prefix: &str,
) -> Result<Vec<(String, Option<u64>)>, CliError> {
    let bucket = ctx.archive_bucket()?;
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let out = ctx
            .s3
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .map_err(|e| CliError::aws(format!("listing s3://{bucket}/{prefix}"), e))?;
        keys.extend(out.contents().iter().filter_map(|o| {
            let modified = o
                .last_modified()
                .and_then(|t| t.to_millis().ok())
                .and_then(|ms| u64::try_from(ms).ok());
            o.key().map(|k| (k.to_owned(), modified))
        }));
        match out.next_continuation_token() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    Ok(keys)
}

/// One archive entry.
pub async fn show(ctx: &Context, key: &str) -> Result<ArchiveEnvelope, CliError> {
    let bytes = AwsRestore(ctx).read(key).await?;
    let bucket = ctx.archive_bucket()?;
    serde_json::from_slice(&bytes).map_err(|e| CliError::NotAnArchiveEntry {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// What a restore is checked against: the consumer's idempotency window and the redriver's TTL
/// (their `IDEMPOTENCY_WINDOW_SECONDS` and `ARCHIVE_AFTER_SECONDS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreWindow {
    /// `IDEMPOTENCY_WINDOW_SECONDS`.
    pub window: Duration,
    /// `ARCHIVE_AFTER_SECONDS`.
    pub ttl: Duration,
}

/// Whether an archived message may be restored: its whole life, from its first send to the
/// latest its restored copy could still run (`life_after`: the main queue's retention and the
/// redriver's TTL, counted afresh from the restore), within the consumer's idempotency window
/// (`IDEMPOTENCY_WINDOW_SECONDS`, the order records' lifetime). A restore starts a fresh TTL and
/// a fresh window, so the consumer could not tell that an older one's order record may be
/// gone: it would run the order again. `Err` says why not.
pub fn within_idempotency_window(
    envelope: &ArchiveEnvelope,
    now_ms: u64,
    window: Duration,
    life_after: Duration,
) -> Result<(), String> {
    let original = &envelope.original_message;
    let sent = envelope.metadata.first_sent_at.or_else(|| {
        resq::attributes::first_sent_at(
            &original.message_attributes,
            original
                .attributes
                .get("SentTimestamp")
                .and_then(|s| s.trim().parse().ok()),
        )
    });
    let Some(sent) = sent else {
        return Err(
            "has no first send time (firstSentAt), so it cannot be shown to be inside the idempotency window"
                .to_owned(),
        );
    };
    let age = Duration::from_millis(now_ms.saturating_sub(sent));
    if age + life_after > window {
        return Err(format!(
            "was first sent {:.1} days ago; restored, it could still run {:.1} days from now (the main queue's retention and the TTL), {:.1} days after its first send, past the idempotency window of {:.1} days (IDEMPOTENCY_WINDOW_SECONDS={})",
            age.as_secs_f64() / 86_400.0,
            life_after.as_secs_f64() / 86_400.0,
            (age + life_after).as_secs_f64() / 86_400.0,
            window.as_secs_f64() / 86_400.0,
            window.as_secs()
        ));
    }
    Ok(())
}

/// A JSON merge patch (RFC 7396) from a file: any JSON document. What cannot be read, or is
/// not JSON, is refused before anything is read from AWS.
pub fn read_patch(path: &std::path::Path) -> Result<Value, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::UnreadableFile {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| {
        CliError::Usage(format!(
            "{} is not JSON ({e}): a JSON merge patch (RFC 7396) is a JSON document, e.g. {{\"items\": [{{\"productId\": \"p-1\", \"quantity\": 1}}]}}",
            path.display()
        ))
    })
}

/// Applies a JSON merge patch to `target` (RFC 7396): an object patch merges member by member,
/// `null` removing a member; anything else replaces the target whole.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (name, value) in members {
            if value.is_null() {
                t.remove(name);
            } else {
                merge_patch(t.entry(name.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// `body` with `patch` applied, as compact JSON; `Err` says why a body
/// cannot be patched (it is not JSON).
pub fn patch_body(body: &str, patch: &Value) -> Result<String, String> {
    let mut doc: Value = serde_json::from_str(body).map_err(|e| {
        format!("its body is not JSON ({e}), and a JSON merge patch applies to a JSON body")
    })?;
    merge_patch(&mut doc, patch);
    Ok(doc.to_string())
}

/// The message restoring `envelope` to `queue_url`, its body patched by `patch` when given;
/// `Err` says why it cannot be (a body that is not JSON cannot be patched; the patched
/// message must fit in SQS). Its attributes are those archived, without `x-redrive-count`,
/// the failure marks and `x-first-sent-at` (a restore starts afresh: with the old send time,
/// a restored message that failed again would be archived as `TTL_EXPIRED` at once).
pub fn restore_message(
    envelope: &ArchiveEnvelope,
    queue_url: &str,
    patch: Option<&Value>,
) -> Result<OutgoingMessage, String> {
    let original = &envelope.original_message;
    if patch.is_some() && resq::payload::Pointer::parse(&original.body).is_some() {
        return Err("its body is an SQS extended client's pointer, not the order: a patch would replace it; restore it unpatched, or send the fixed order (its payload is in the entry's originalMessage.payload)".to_owned());
    }
    let body = match patch {
        Some(p) => patch_body(&original.body, p)?,
        None => original.body.clone(),
    };
    let mut attributes = original.message_attributes.clone();
    for name in [
        X_REDRIVE_COUNT,
        X_FAILURE_CLASS,
        X_FAILURE_REASON,
        X_FIRST_SENT_AT,
    ] {
        attributes.remove(name);
    }
    let size = resq::attributes::message_size(&body, &attributes);
    if size > resq::attributes::MAX_MESSAGE_BYTES {
        return Err(format!(
            "the restored message would be {size} bytes, over SQS's limit of {}",
            resq::attributes::MAX_MESSAGE_BYTES
        ));
    }
    let (group_id, deduplication_id) = resq::sqs::copy_ids(
        resq::sqs::is_fifo(queue_url),
        original
            .attributes
            .get("MessageGroupId")
            .map(String::as_str),
        resq::sqs::Copy::Restore,
        &original.message_id,
    );
    // A FIFO queue drops a second send of one deduplication id within 5 minutes, answering
    // it as sent: a second patch of the same entry (the first one was wrong) must not be
    // dropped so, while a retry of the same restore still is.
    let deduplication_id = match patch {
        Some(_) => deduplication_id.map(|id| format!("{id}-patch-{:016x}", fnv1a(body.as_bytes()))),
        None => deduplication_id,
    };
    Ok(OutgoingMessage {
        body,
        attributes,
        group_id,
        deduplication_id,
    })
}

/// FNV-1a, 64 bits: the same patched body gives the same deduplication id in any run.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What a restore does with AWS: read and write the archive entry, send to the main queue,
/// read the queue's retention (for the idempotency-window check). A port, so that what
/// happens when one of them fails is shown without AWS.
pub trait RestorePort {
    /// The entry's bytes.
    fn read(&self, key: &str) -> impl Future<Output = Result<Vec<u8>, CliError>>;
    /// Writes the entry (a new version: the bucket is versioned).
    fn write(&self, key: &str, body: Vec<u8>) -> impl Future<Output = Result<(), CliError>>;
    /// Sends the restored message; its new id.
    fn send(
        &self,
        queue_url: &str,
        message: &OutgoingMessage,
    ) -> impl Future<Output = Result<String, CliError>>;
    /// The queue's retention.
    fn retention(&self, queue_url: &str) -> impl Future<Output = Result<Duration, CliError>>;
    /// The first key under `prefix` in key order (a claim log's newest), with its bytes.
    fn newest(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Option<(String, Vec<u8>)>, CliError>>;
    /// Writes `body` at `key` unless an object is there (`If-None-Match: *`): whether it did.
    fn write_new(&self, key: &str, body: Vec<u8>) -> impl Future<Output = Result<bool, CliError>>;
}

/// [`RestorePort`] on the context's S3 and SQS clients.
pub struct AwsRestore<'a>(pub &'a Context);

impl RestorePort for AwsRestore<'_> {
    async fn read(&self, key: &str) -> Result<Vec<u8>, CliError> {
        self.0.archive_bucket()?;
        self.0.store().read(key).await.map_err(CliError::Read)
    }

    async fn write(&self, key: &str, body: Vec<u8>) -> Result<(), CliError> {
        let bucket = self.0.archive_bucket()?;
        self.0
            .s3
            .put_object()
            .bucket(bucket)
            .key(key)
            .content_type("application/json")
            .body(body.into())
            .send()
            .await
            .map_err(|e| CliError::aws(format!("writing s3://{bucket}/{key}"), e))?;
        Ok(())
    }

    async fn send(&self, queue_url: &str, message: &OutgoingMessage) -> Result<String, CliError> {
        let mut plan = Plan::new();
        let id = plan.push(Action::Copy {
            to: QueueUrl::from(queue_url),
            message: message.clone(),
        });
        let source = match self.0.settle(&plan).await.get(id) {
            Confirmation::Confirmed(sent) => return Ok(sent.clone().unwrap_or_default()),
            // the call's own error (its kind says unreachable, credentials, …); SQS may have
            // taken a copy whose call broke
            Confirmation::Failed(SettleError::Refused(e) | SettleError::Unanswered(Some(e))) => {
                e.clone()
            }
            Confirmation::Failed(e) => AwsError::local(e.to_string()),
            Confirmation::NotAttempted(_) => AwsError::local("not attempted"),
        };
        Err(CliError::Aws {
            what: format!("sending to {queue_url}"),
            source,
        })
    }

    async fn newest(&self, prefix: &str) -> Result<Option<(String, Vec<u8>)>, CliError> {
        let store = self.0.store();
        let Some(key) = store.first_key(prefix).await.map_err(CliError::Read)? else {
            return Ok(None);
        };
        let bytes = store.get(&key).await.map_err(CliError::Read)?;
        Ok(bytes.map(|b| (key, b)))
    }

    async fn write_new(&self, key: &str, body: Vec<u8>) -> Result<bool, CliError> {
        let bucket = self.0.archive_bucket()?;
        match self.0.store().put_if_absent(key, body).await {
            Ok(outcome) => Ok(outcome == PutOutcome::Created),
            Err(source) => Err(CliError::Aws {
                what: format!("claiming s3://{bucket}/{key}"),
                source,
            }),
        }
    }

    async fn retention(&self, queue_url: &str) -> Result<Duration, CliError> {
        Ok(resq::sqs::read_limits(&self.0.sqs, queue_url)
            .await
            .map_err(|source| CliError::Aws {
                what: format!("reading the retention of {queue_url}"),
                source,
            })?
            .retention)
    }
}

/// The entry at `key`: its JSON (kept whole, so that a rewrite loses nothing) and the envelope
/// in it.
async fn entry(
    port: &impl RestorePort,
    bucket: &str,
    key: &str,
) -> Result<(Value, ArchiveEnvelope), CliError> {
    let bytes = port.read(key).await?;
    let not_entry = |e: serde_json::Error| CliError::NotAnArchiveEntry {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        reason: e.to_string(),
    };
    let doc: Value = serde_json::from_slice(&bytes).map_err(not_entry)?;
    let envelope = serde_json::from_value(doc.clone()).map_err(not_entry)?;
    Ok((doc, envelope))
}

/// Refuses a restore past the idempotency window (`window`; `None`: `--force`).
async fn check_window(
    port: &impl RestorePort,
    key: &str,
    queue_url: &str,
    envelope: &ArchiveEnvelope,
    window: Option<RestoreWindow>,
    now_ms: u64,
) -> Result<(), CliError> {
    let Some(w) = window else {
        return Ok(());
    };
    let retention = port.retention(queue_url).await?;
    within_idempotency_window(envelope, now_ms, w.window, w.ttl + retention).map_err(|why| {
        CliError::PastIdempotencyWindow {
            key: key.to_owned(),
            why,
        }
    })
}

/// Sends an archived message back to the main queue for a fresh start (see
/// [`restore_message`]), under its claim ([`restore_entry`]), `by` whom. The entry stays in
/// the archive as the record of what happened. Returns the new message id (`None`: a dry run).
/// Refused past `window` (see [`within_idempotency_window`]); `None` restores whatever the
/// age (`--force`).
pub async fn restore(
    ctx: &Context,
    key: &str,
    by: &str,
    dry_run: bool,
    window: Option<RestoreWindow>,
    again: bool,
) -> Result<Option<String>, CliError> {
    let request = RestoreRequest {
        key,
        bucket: ctx.archive_bucket()?,
        queue_url: ctx.main_queue()?,
        patch: None,
        by,
        dry_run,
        window,
        again,
        now: chrono::Utc::now(),
        id: restore_id(),
    };
    let done = restore_entry(&AwsRestore(ctx), &request).await?;
    if let Audit::Incomplete(why) = &done.audit {
        tracing::warn!(key, error = %why, "restored, but its claim still says sending: a later restore of it needs --again");
    }
    Ok(done.message_id)
}

/// Where the claims of the restores of the entry `key` are kept: a log of write-once keys,
/// the newest first ([`claim_key`]).
pub fn claim_prefix(key: &str) -> String {
    format!("{CLAIM_PREFIX}{key}/")
}

/// Claims of restores live under this prefix of the archive bucket.
pub const CLAIM_PREFIX: &str = "restores/";

/// The key of a restore's `attempt`-th claim (from 1) under `prefix`: later ones sort first.
pub fn claim_key(prefix: &str, attempt: u32) -> String {
    format!("{prefix}{:010}.json", u32::MAX - attempt)
}

/// The attempt a claim key holds ([`claim_key`]'s inverse).
fn claim_attempt(prefix: &str, key: &str) -> Option<u32> {
    let n: u32 = key
        .strip_prefix(prefix)?
        .strip_suffix(".json")?
        .parse()
        .ok()?;
    Some(u32::MAX - n)
}

/// A claim still `sending` this long after it was made is taken for a restore that died: a
/// restore sends within a minute of its claim.
pub const CLAIM_STALE: Duration = Duration::from_secs(300);

/// Whether a restore may claim an entry whose newest claim is `current` (`again`: the
/// operator asks to restore it once more): none, or one whose send failed, may be claimed;
/// one sent only `again`; one being sent never before [`CLAIM_STALE`], then only `again` (it
/// may have been sent before its restore died). `Err` says why not, and what to do.
pub fn may_claim(current: Option<&RestoreRecord>, again: bool, now_ms: u64) -> Result<(), String> {
    let Some(c) = current else {
        return Ok(());
    };
    let at_ms = chrono::DateTime::parse_from_rfc3339(&c.at)
        .map_or(0, |t| t.timestamp_millis().max(0) as u64);
    let age = Duration::from_millis(now_ms.saturating_sub(at_ms));
    match c.status {
        RestoreStatus::Failed => Ok(()),
        RestoreStatus::Sent if again => Ok(()),
        RestoreStatus::Sent => Err(format!(
            "was restored by {} at {} (message {}): restored again, its order would run twice; --again restores it once more on purpose",
            c.by,
            c.at,
            c.message_id.as_deref().unwrap_or("unknown")
        )),
        RestoreStatus::Sending if age < CLAIM_STALE => Err(format!(
            "is being restored by {} (claimed at {}): wait for that restore; a claim that never records its send may be taken over with --again {} s after it was made",
            c.by,
            c.at,
            CLAIM_STALE.as_secs()
        )),
        RestoreStatus::Sending if again => Ok(()),
        RestoreStatus::Sending => Err(format!(
            "was claimed by {} at {}, whose restore never recorded its send (it may have died before or after sending): check whether its order reached the main queue or ran (`resq find ORDER_ID`), then restore with --again",
            c.by, c.at
        )),
    }
}

/// The newest claim under `prefix`: its attempt and record.
async fn newest_claim(
    port: &impl RestorePort,
    prefix: &str,
) -> Result<Option<(u32, RestoreRecord)>, CliError> {
    let Some((key, bytes)) = port.newest(prefix).await? else {
        return Ok(None);
    };
    let record = serde_json::from_slice(&bytes).map_err(|e| {
        CliError::Usage(format!(
            "{key} is not a restore claim resq can read ({e}): look at it before restoring"
        ))
    })?;
    Ok(Some((claim_attempt(prefix, &key).unwrap_or(0), record)))
}

/// Claims the entry `key` for `record` with a conditional write (two restores of it never both
/// send): the claim's key, or why not ([`may_claim`]); with `dry_run`, the check only.
async fn claim(
    port: &impl RestorePort,
    key: &str,
    record: &RestoreRecord,
    again: bool,
    dry_run: bool,
    now_ms: u64,
) -> Result<String, CliError> {
    let prefix = claim_prefix(key);
    let refused = |why| CliError::Claimed {
        key: key.to_owned(),
        why,
    };
    let current = newest_claim(port, &prefix).await?;
    may_claim(current.as_ref().map(|(_, r)| r), again, now_ms).map_err(refused)?;
    let next = claim_key(&prefix, current.map_or(1, |(n, _)| n + 1));
    let body = serde_json::to_vec(record).map_err(|e| CliError::Usage(e.to_string()))?;
    if dry_run || port.write_new(&next, body).await? {
        return Ok(next);
    }
    // another restore claimed it between the read and the write: it goes on, this one not
    let theirs = newest_claim(port, &prefix).await?;
    Err(refused(
        may_claim(theirs.as_ref().map(|(_, r)| r), false, now_ms)
            .err()
            .unwrap_or_else(|| "was claimed by another restore meanwhile".to_owned()),
    ))
}

/// Whether the audit record of a patched restore is complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audit {
    /// A dry run: nothing written.
    NotWritten,
    /// The claim (and, patched, the entry) records the restore: who, when, the patch, and the
    /// new message id.
    Complete,
    /// The claim (and, patched, the entry) records who, when and the patch (written before
    /// the send), but the update with the new message id could not be written: why.
    Incomplete(String),
}

/// What a patched restore did.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchedRestore {
    /// The archive key.
    pub key: String,
    /// The restored message's id (`None`: a dry run).
    pub message_id: Option<String>,
    /// The body sent (or that would be).
    pub body: String,
    /// The record in the entry.
    pub record: RestoreRecord,
    /// How far the record got.
    pub audit: Audit,
}

/// `record` in the entry's `metadata.restores`: in place of the record with its id, else
/// added at the end.
pub fn with_record(mut doc: Value, record: &RestoreRecord) -> Result<Value, String> {
    let value = serde_json::to_value(record).map_err(|e| e.to_string())?;
    let metadata = doc
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or("the entry has no metadata object")?;
    let restores = metadata
        .entry("restores")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !restores.is_array() {
        *restores = Value::Array(Vec::new());
    }
    if let Value::Array(list) = restores {
        match list.iter_mut().find(|r| r["id"] == value["id"]) {
            Some(r) => *r = value,
            None => list.push(value),
        }
    }
    Ok(doc)
}

/// Writes `record` into the entry at `key` as it is now (read again, so that a restore
/// recorded meanwhile is kept), up to [`AUDIT_ATTEMPTS`] times.
async fn record_restore(
    port: &impl RestorePort,
    bucket: &str,
    key: &str,
    record: &RestoreRecord,
) -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..AUDIT_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
        }
        let written = async {
            let (doc, _) = entry(port, bucket, key).await?;
            let doc = with_record(doc, record).map_err(|why| CliError::NotAnArchiveEntry {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                reason: why,
            })?;
            port.write(key, doc.to_string().into_bytes()).await
        };
        match written.await {
            Ok(()) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// Writes of a restore's audit record tried at most.
pub const AUDIT_ATTEMPTS: u32 = 3;

/// The restore's inputs besides the port.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreRequest<'a> {
    /// The archive key.
    pub key: &'a str,
    /// The bucket (for messages).
    pub bucket: &'a str,
    /// The main queue.
    pub queue_url: &'a str,
    /// The JSON merge patch (`--patch`), recorded in the entry; none: restored as archived.
    pub patch: Option<&'a Value>,
    /// Who restores it (STS ARN, else the OS user).
    pub by: &'a str,
    /// Check and show; write and send nothing.
    pub dry_run: bool,
    /// The idempotency-window check (`None`: `--force`).
    pub window: Option<RestoreWindow>,
    /// Restore it again, past an earlier restore's claim (`--again`, see [`may_claim`]).
    pub again: bool,
    /// Now.
    pub now: chrono::DateTime<chrono::Utc>,
    /// This restore's id.
    pub id: String,
}

/// `resq archive restore KEY [--patch FILE]`: sends the archived message (repaired with a JSON
/// merge patch, when given) to the main queue under a claim, so that two restores of one entry
/// never both send it; a patched restore also records the patch, who and when in the entry.
///
/// Nothing is sent before the entry is read, the patch applies (the body is JSON), the message
/// fits and the idempotency window allows it, nor before the restore has claimed the entry
/// (its claim, status `sending`, written with `If-None-Match: *` under [`claim_prefix`]; see
/// [`may_claim`] for what an earlier claim allows), nor, patched, before its record (status
/// `sending`) is written into the entry: an operator who may not write restores nothing. After
/// the send the claim (and the record) say `sent` and the new message id, tried
/// [`AUDIT_ATTEMPTS`] times; if that still fails, the order is restored and the claim already
/// says who restored it and when: the restore is reported done with its audit incomplete
/// ([`Audit::Incomplete`]), not as a failure, since running it again would restore the order
/// twice. A send that fails (or a record that cannot be written before it) marks the claim
/// `failed`, so that a retry goes on, and is reported as the error.
pub async fn restore_entry(
    port: &impl RestorePort,
    request: &RestoreRequest<'_>,
) -> Result<PatchedRestore, CliError> {
    let RestoreRequest {
        key,
        bucket,
        queue_url,
        ..
    } = *request;
    let (doc, envelope) = entry(port, bucket, key).await?;
    let message = restore_message(&envelope, queue_url, request.patch).map_err(|why| {
        CliError::NotPatchable {
            key: key.to_owned(),
            why,
        }
    })?;
    let now_ms = request.now.timestamp_millis().max(0) as u64;
    check_window(port, key, queue_url, &envelope, request.window, now_ms).await?;
    let mut record = RestoreRecord {
        id: request.id.clone(),
        at: resq::archive::timestamp(request.now),
        by: request.by.to_owned(),
        patch: request.patch.cloned(),
        queue: queue_url.to_owned(),
        status: RestoreStatus::Sending,
        message_id: None,
        error: None,
    };
    let mut done = PatchedRestore {
        key: key.to_owned(),
        message_id: None,
        body: message.body.clone(),
        record: record.clone(),
        audit: Audit::NotWritten,
    };
    let claimed = claim(port, key, &record, request.again, request.dry_run, now_ms).await?;
    if request.dry_run {
        return Ok(done);
    }
    // patched, the record first: no send that the entry could not say who made
    let ahead = match request.patch {
        Some(_) => match with_record(doc, &record) {
            Ok(ahead) => port.write(key, ahead.to_string().into_bytes()).await,
            Err(why) => Err(CliError::NotAnArchiveEntry {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                reason: why,
            }),
        },
        None => Ok(()),
    };
    let sent = match ahead {
        Ok(()) => port.send(queue_url, &message).await,
        Err(e) => Err(e),
    };
    match sent {
        Ok(id) => {
            record.status = RestoreStatus::Sent;
            record.message_id = Some(id.clone());
            done.message_id = Some(id);
            done.audit = match record_everywhere(port, bucket, key, &claimed, &record).await {
                Ok(()) => Audit::Complete,
                Err(why) => Audit::Incomplete(why),
            };
            done.record = record;
            Ok(done)
        }
        // a call that broke or timed out may have been taken by SQS: the claim stays
        // `sending`, so that no plain retry sends the message twice
        Err(e @ CliError::Aws { .. }) if maybe_sent(&e) => {
            tracing::error!(key, error = %e, "the send was not answered and may have been taken: check the main queue (resq find) before restoring again with --again, 5 minutes from now");
            Err(e)
        }
        Err(e) => {
            record.status = RestoreStatus::Failed;
            record.error = Some(e.to_string());
            if let Err(why) = record_everywhere(port, bucket, key, &claimed, &record).await {
                tracing::error!(key, error = %why, "nothing was sent, but the claim still says sending: a retry of this restore needs --again, 5 minutes from now");
            }
            Err(e)
        }
    }
}

/// A send that failed without SQS's own answer (it timed out, its connection broke): SQS may
/// have taken it. Refused by SQS, or never sent (no credentials), it was not.
fn maybe_sent(e: &CliError) -> bool {
    use resq::error::AwsErrorKind::{Credentials, Service};
    matches!(e, CliError::Aws { source, .. } if !matches!(source.kind, Service | Credentials))
}

/// Writes `record` over its claim, and, patched, into the entry, each tried
/// [`AUDIT_ATTEMPTS`] times; why not.
async fn record_everywhere(
    port: &impl RestorePort,
    bucket: &str,
    key: &str,
    claimed: &str,
    record: &RestoreRecord,
) -> Result<(), String> {
    let body = serde_json::to_vec(record).map_err(|e| e.to_string())?;
    let mut claim = Err(String::new());
    for attempt in 0..AUDIT_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
        }
        claim = port
            .write(claimed, body.clone())
            .await
            .map_err(|e| e.to_string());
        if claim.is_ok() {
            break;
        }
    }
    let entry = match &record.patch {
        Some(_) => record_restore(port, bucket, key, record).await,
        None => Ok(()),
    };
    claim.and(entry)
}

/// Who is restoring: the caller's AWS identity (STS `GetCallerIdentity`'s ARN), else the OS
/// user (`os-user:NAME`).
pub async fn caller(config: &aws_config::SdkConfig) -> String {
    let sts = aws_sdk_sts::Client::new(config);
    match sts.get_caller_identity().send().await {
        Ok(out) if out.arn().is_some_and(|a| !a.is_empty()) => {
            out.arn().unwrap_or_default().to_owned()
        }
        _ => os_user(|name| std::env::var(name).ok()),
    }
}

/// The OS user, from the environment (`USER`, `LOGNAME`, `USERNAME`), as `os-user:NAME`.
pub fn os_user(var: impl Fn(&str) -> Option<String>) -> String {
    let name = ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|n| var(n).filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "unknown".to_owned());
    format!("os-user:{name}")
}

/// A new restore id.
pub fn restore_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::archive::{ArchiveMetadata, OriginalMessage};

    fn entry(first_sent_at: Option<u64>, sent_timestamp: Option<&str>) -> ArchiveEnvelope {
        ArchiveEnvelope {
            original_message: OriginalMessage {
                message_id: "m".into(),
                body: "{}".into(),
                message_attributes: Default::default(),
                attributes: sent_timestamp
                    .map(|t| [("SentTimestamp".to_owned(), t.to_owned())].into())
                    .unwrap_or_default(),
                raw_record: None,
            },
            metadata: ArchiveMetadata {
                source_queue: "q".into(),
                reason: "REDRIVE_CAP".into(),
                archived_by: "consumer".into(),
                archived_at: "2026-01-01T00:00:00Z".into(),
                redrive_count: Some(3),
                receive_count: Some(1),
                first_sent_at,
                last_error: None,
                restores: Vec::new(),
            },
        }
    }

    #[test]
    fn a_restore_is_allowed_only_inside_the_idempotency_window() {
        let day = 86_400_000;
        let now = 100 * day;
        let window = Duration::from_secs(90 * 86_400);
        // restored, a copy may run up to 5 days later (4 days' retention, a day's TTL)
        let life = Duration::from_secs(5 * 86_400);
        let check = |e: &ArchiveEnvelope| within_idempotency_window(e, now, window, life);
        // on both sides of the edge: first sent 85 days ago, the copy's life ends at 90
        assert!(check(&entry(Some(now - 85 * day), None)).is_ok());
        let past = check(&entry(Some(now - 85 * day - 1), None)).unwrap_err();
        assert!(
            past.contains("past the idempotency window of 90.0 days"),
            "{past}"
        );
        // the send time from the message when the metadata has none
        assert!(check(&entry(None, Some(&(now - 86 * day).to_string()))).is_err());
        assert!(check(&entry(None, Some(&(now - day).to_string()))).is_ok());
        // unknown: refused, saying so
        let unknown = check(&entry(None, None)).unwrap_err();
        assert!(unknown.contains("no first send time"), "{unknown}");
    }

    #[test]
    fn merge_patch_follows_rfc_7396() {
        // the examples of RFC 7396, appendix A
        let cases = [
            (r#"{"a":"b"}"#, r#"{"a":"c"}"#, r#"{"a":"c"}"#),
            (r#"{"a":"b"}"#, r#"{"b":"c"}"#, r#"{"a":"b","b":"c"}"#),
            (r#"{"a":"b"}"#, r#"{"a":null}"#, r#"{}"#),
            (r#"{"a":"b","b":"c"}"#, r#"{"a":null}"#, r#"{"b":"c"}"#),
            (r#"{"a":["b"]}"#, r#"{"a":"c"}"#, r#"{"a":"c"}"#),
            (r#"{"a":"c"}"#, r#"{"a":["b"]}"#, r#"{"a":["b"]}"#),
            (
                r#"{"a":{"b":"c"}}"#,
                r#"{"a":{"b":"d","c":null}}"#,
                r#"{"a":{"b":"d"}}"#,
            ),
            (r#"{"a":[{"b":"c"}]}"#, r#"{"a":[1]}"#, r#"{"a":[1]}"#),
            (r#"["a","b"]"#, r#"["c","d"]"#, r#"["c","d"]"#),
            (r#"{"a":"b"}"#, r#"["c"]"#, r#"["c"]"#),
            (r#"{"a":"foo"}"#, "null", "null"),
            (r#"{"a":"foo"}"#, r#""bar""#, r#""bar""#),
            (r#"{"e":null}"#, r#"{"a":1}"#, r#"{"e":null,"a":1}"#),
            (r#"[1,2]"#, r#"{"a":"b","c":null}"#, r#"{"a":"b"}"#),
            (
                r#"{}"#,
                r#"{"a":{"bb":{"ccc":null}}}"#,
                r#"{"a":{"bb":{}}}"#,
            ),
        ];
        for (target, patch, result) in cases {
            let mut t: Value = serde_json::from_str(target).unwrap();
            merge_patch(&mut t, &serde_json::from_str(patch).unwrap());
            assert_eq!(
                t,
                serde_json::from_str::<Value>(result).unwrap(),
                "{target} + {patch}"
            );
        }
        let body = patch_body(
            r#"{"orderId":"o-1","items":[]}"#,
            &serde_json::json!({"items": [{"productId": "p", "quantity": 1}]}),
        )
        .unwrap();
        // compact JSON (the members' order is serde_json's map's: name order, or insertion
        // order where a dependency turns on its preserve_order feature, as the tests' do)
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            serde_json::json!({"orderId": "o-1", "items": [{"productId": "p", "quantity": 1}]})
        );
        assert!(!body.contains(' ') && !body.contains('\n'), "{body}");
        let not_json = patch_body("{not json", &serde_json::json!({})).unwrap_err();
        assert!(not_json.starts_with("its body is not JSON"), "{not_json}");
    }

    #[test]
    fn a_restored_message_starts_afresh_and_must_fit() {
        let mut e = entry(Some(1), None);
        e.original_message.message_attributes = resq::attributes::MessageAttributes::from([
            (
                X_REDRIVE_COUNT.to_owned(),
                resq::attributes::AttributeValue::number(3),
            ),
            (
                X_FAILURE_REASON.to_owned(),
                resq::attributes::AttributeValue::string("X"),
            ),
            (
                "trace-id".to_owned(),
                resq::attributes::AttributeValue::string("t"),
            ),
        ]);
        let m = restore_message(&e, "http://q/1/orders", None).unwrap();
        assert_eq!(m.body, "{}");
        assert_eq!(m.attributes.keys().collect::<Vec<_>>(), ["trace-id"]);
        assert_eq!((m.group_id, m.deduplication_id), (None, None));
        let fifo = restore_message(&e, "http://q/1/orders.fifo", None).unwrap();
        assert!(fifo.group_id.is_some() && fifo.deduplication_id.is_some());
        // on a FIFO queue: a retried restore keeps its deduplication id, a second patch of the
        // same entry gets its own (SQS would drop it as a duplicate for 5 minutes otherwise)
        let patched = |p: serde_json::Value| {
            restore_message(&e, "http://q/1/orders.fifo", Some(&p))
                .unwrap()
                .deduplication_id
                .unwrap()
        };
        let first = patched(serde_json::json!({"quantity": 1}));
        assert_eq!(first, patched(serde_json::json!({"quantity": 1})));
        assert_ne!(first, patched(serde_json::json!({"quantity": 2})));
        assert_ne!(Some(first.clone()), fifo.deduplication_id);
        assert!(first.len() <= 128, "{first}");
        let huge = serde_json::json!({"pad": "x".repeat(resq::attributes::MAX_MESSAGE_BYTES)});
        let too_big = restore_message(&e, "http://q/1/orders", Some(&huge)).unwrap_err();
        assert!(too_big.contains("over SQS's limit"), "{too_big}");
    }

    /// An archive entry and a queue in memory, whose writes and sends can be made to fail.
    #[derive(Default)]
    struct Memory {
        entry: std::sync::Mutex<Vec<u8>>,
        versions: std::sync::Mutex<Vec<Vec<u8>>>,
        sent: std::sync::Mutex<Vec<OutgoingMessage>>,
        /// Claims, by key.
        claims: std::sync::Mutex<std::collections::BTreeMap<String, Vec<u8>>>,
        /// Writes that succeed before the rest fail (`None`: all succeed).
        writes_ok: Option<usize>,
        send_fails: bool,
        /// The send's call times out (SQS may have taken it).
        send_times_out: bool,
    }

    impl Memory {
        fn with(envelope: &ArchiveEnvelope) -> Self {
            Self {
                entry: std::sync::Mutex::new(serde_json::to_vec(envelope).unwrap()),
                ..Self::default()
            }
        }

        fn stored(&self) -> ArchiveEnvelope {
            serde_json::from_slice(&self.entry.lock().unwrap()).unwrap()
        }
    }

    impl RestorePort for Memory {
        async fn read(&self, _key: &str) -> Result<Vec<u8>, CliError> {
            Ok(self.entry.lock().unwrap().clone())
        }
        async fn write(&self, key: &str, body: Vec<u8>) -> Result<(), CliError> {
            if key.starts_with(CLAIM_PREFIX) {
                self.claims.lock().unwrap().insert(key.to_owned(), body);
                return Ok(());
            }
            let mut versions = self.versions.lock().unwrap();
            if self.writes_ok.is_some_and(|n| versions.len() >= n) {
                return Err(CliError::Aws {
                    what: "writing s3://b/k".into(),
                    source: resq::error::AwsError::service(
                        "SlowDown",
                        "please reduce your request rate",
                    ),
                });
            }
            versions.push(body.clone());
            *self.entry.lock().unwrap() = body;
            Ok(())
        }
        async fn send(&self, _queue: &str, message: &OutgoingMessage) -> Result<String, CliError> {
            if self.send_fails {
                return Err(CliError::Aws {
                    what: "sending to q".into(),
                    source: resq::error::AwsError::service("AccessDenied", "no"),
                });
            }
            if self.send_times_out {
                let mut source = resq::error::AwsError::local("operation timed out");
                source.kind = resq::error::AwsErrorKind::Timeout;
                let what = "sending to q".into();
                return Err(CliError::Aws { what, source });
            }
            self.sent.lock().unwrap().push(message.clone());
            Ok("m-new".into())
        }
        async fn retention(&self, _queue: &str) -> Result<Duration, CliError> {
            Ok(Duration::from_secs(345_600))
        }
        async fn newest(&self, prefix: &str) -> Result<Option<(String, Vec<u8>)>, CliError> {
            let claims = self.claims.lock().unwrap();
            let mut under = claims.iter().filter(|(k, _)| k.starts_with(prefix));
            Ok(under.next().map(|(k, v)| (k.clone(), v.clone())))
        }
        async fn write_new(&self, key: &str, body: Vec<u8>) -> Result<bool, CliError> {
            let mut claims = self.claims.lock().unwrap();
            let fresh = !claims.contains_key(key);
            if fresh {
                claims.insert(key.to_owned(), body);
            }
            Ok(fresh)
        }
    }

    fn request<'a>(patch: &'a Value, dry_run: bool) -> RestoreRequest<'a> {
        RestoreRequest {
            key: "archive/PERMANENT_FAILURE/2026/11/26/m.json",
            bucket: "b",
            queue_url: "http://q/1/orders",
            patch: Some(patch),
            by: "arn:aws:iam::123456789012:user/ops",
            dry_run,
            window: None,
            again: false,
            now: chrono::Utc::now(),
            id: "r-1".into(),
        }
    }

    fn invalid_order() -> ArchiveEnvelope {
        let mut e = entry(Some(1), None);
        e.original_message.body = r#"{"orderId":"o-1","userId":"u","items":[]}"#.into();
        e
    }

    #[tokio::test]
    async fn a_patched_restore_records_who_when_and_the_patch_before_it_sends() {
        // GIVEN an archived order that failed validation, and a patch that fixes it
        let port = Memory::with(&invalid_order());
        let patch = serde_json::json!({"items": [{"productId": "p-1", "quantity": 2}]});
        // WHEN it is restored with the patch
        let done = restore_entry(&port, &request(&patch, false)).await.unwrap();
        // THEN the patched body went to the queue, as the restore sends it
        let sent = port.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 1);
        assert_eq!(
            serde_json::from_str::<Value>(&sent[0].body).unwrap(),
            serde_json::json!({"orderId": "o-1", "userId": "u", "items": [{"productId": "p-1", "quantity": 2}]})
        );
        assert_eq!(
            (done.message_id.as_deref(), &done.audit),
            (Some("m-new"), &Audit::Complete)
        );
        // AND the entry was written twice: the record before the send, completed after it
        let versions = port.versions.lock().unwrap().clone();
        assert_eq!(versions.len(), 2);
        let ahead: ArchiveEnvelope = serde_json::from_slice(&versions[0]).unwrap();
        assert_eq!(ahead.metadata.restores[0].status, RestoreStatus::Sending);
        let stored = port.stored();
        let r = &stored.metadata.restores[0];
        assert_eq!(stored.metadata.restores.len(), 1);
        assert_eq!(
            (r.status, r.message_id.as_deref()),
            (RestoreStatus::Sent, Some("m-new"))
        );
        assert_eq!(r.by, "arn:aws:iam::123456789012:user/ops");
        assert_eq!(r.patch.as_ref(), Some(&patch));
        // AND the message as archived is kept: only the metadata grew
        assert_eq!(stored.original_message, invalid_order().original_message);
    }

    #[tokio::test]
    async fn nothing_is_sent_when_the_body_is_not_json_the_record_cannot_be_written_or_a_dry_run() {
        let patch = serde_json::json!({"items": []});
        let mut malformed = entry(Some(1), None);
        malformed.original_message.body = "{not json".into();
        let port = Memory::with(&malformed);
        let e = restore_entry(&port, &request(&patch, false))
            .await
            .unwrap_err();
        assert!(matches!(e, CliError::NotPatchable { .. }), "{e}");
        assert!(e.to_string().contains("its body is not JSON"), "{e}");
        let unwritable = Memory {
            writes_ok: Some(0),
            ..Memory::with(&invalid_order())
        };
        let e = restore_entry(&unwritable, &request(&patch, false))
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("writing s3://b/k"), "{e}");
        let dry = Memory::with(&invalid_order());
        let done = restore_entry(&dry, &request(&patch, true)).await.unwrap();
        assert_eq!((done.message_id, done.audit), (None, Audit::NotWritten));
        for port in [&port, &unwritable, &dry] {
            assert!(port.sent.lock().unwrap().is_empty());
        }
        assert!(dry.versions.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_restore_sent_whose_record_cannot_be_completed_is_done_with_its_audit_incomplete() {
        // GIVEN a bucket that takes the record ahead of the send, then refuses every write
        let port = Memory {
            writes_ok: Some(1),
            ..Memory::with(&invalid_order())
        };
        let patch = serde_json::json!({"items": [{"productId": "p-1", "quantity": 1}]});
        // WHEN the restore runs
        let done = restore_entry(&port, &request(&patch, false)).await.unwrap();
        // THEN the order is restored, once, and the result says the audit is incomplete
        assert_eq!(port.sent.lock().unwrap().len(), 1);
        assert_eq!(done.message_id.as_deref(), Some("m-new"));
        assert!(
            matches!(&done.audit, Audit::Incomplete(why) if why.contains("please reduce")),
            "{:?}",
            done.audit
        );
        // AND the entry still names who, when and the patch (status sending)
        let r = &port.stored().metadata.restores[0];
        assert_eq!(
            (r.status, r.by.as_str()),
            (RestoreStatus::Sending, "arn:aws:iam::123456789012:user/ops")
        );
    }

    #[tokio::test]
    async fn a_send_that_fails_is_recorded_as_failed_and_reported() {
        let port = Memory {
            send_fails: true,
            ..Memory::with(&invalid_order())
        };
        let patch = serde_json::json!({"userId": "u-2"});
        let e = restore_entry(&port, &request(&patch, false))
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("sending to q"), "{e}");
        let r = &port.stored().metadata.restores[0];
        assert_eq!(r.status, RestoreStatus::Failed);
        assert!(r.error.as_deref().is_some_and(|e| e.contains("no")));
    }

    /// The claims the port holds: (attempt, status, by).
    fn claims(port: &Memory) -> Vec<(u32, RestoreStatus, String)> {
        let prefix = claim_prefix("archive/PERMANENT_FAILURE/2026/11/26/m.json");
        let claims = port.claims.lock().unwrap();
        claims
            .iter()
            .map(|(k, v)| {
                let r: RestoreRecord = serde_json::from_slice(v).unwrap();
                (claim_attempt(&prefix, k).unwrap(), r.status, r.by)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_second_restore_of_an_entry_refuses_naming_the_first() {
        // GIVEN an entry restored once, by ops
        let port = Memory::with(&invalid_order());
        let unpatched = RestoreRequest {
            patch: None,
            ..request(&Value::Null, false)
        };
        restore_entry(&port, &unpatched).await.unwrap();
        // WHEN another operator restores it
        let other = RestoreRequest {
            by: "arn:aws:iam::123456789012:user/other",
            ..unpatched.clone()
        };
        let e = restore_entry(&port, &other).await.unwrap_err();
        // THEN refused, naming who restored it, when and the message; nothing sent twice
        assert!(matches!(e, CliError::Claimed { .. }), "{e}");
        let said = e.to_string();
        assert!(
            said.contains("was restored by arn:aws:iam::123456789012:user/ops at")
                && said.contains("(message m-new)")
                && said.contains("--again"),
            "{said}"
        );
        assert_eq!(port.sent.lock().unwrap().len(), 1);
        // AND a dry run says so too
        let dry = RestoreRequest {
            dry_run: true,
            ..other.clone()
        };
        assert!(restore_entry(&port, &dry).await.is_err());
        // AND --again restores it once more, under a claim of its own
        let again = RestoreRequest {
            again: true,
            ..other
        };
        restore_entry(&port, &again).await.unwrap();
        assert_eq!(port.sent.lock().unwrap().len(), 2);
        let who = |s: &str| s.to_owned();
        assert_eq!(
            claims(&port),
            [
                (
                    2,
                    RestoreStatus::Sent,
                    who("arn:aws:iam::123456789012:user/other")
                ),
                (
                    1,
                    RestoreStatus::Sent,
                    who("arn:aws:iam::123456789012:user/ops")
                )
            ]
        );
    }

    #[tokio::test]
    async fn a_restore_whose_send_failed_can_be_retried() {
        // GIVEN a restore whose send failed
        let failing = Memory {
            send_fails: true,
            ..Memory::with(&invalid_order())
        };
        let unpatched = RestoreRequest {
            patch: None,
            ..request(&Value::Null, false)
        };
        assert!(restore_entry(&failing, &unpatched).await.is_err());
        assert_eq!(claims(&failing)[0].1, RestoreStatus::Failed);
        // WHEN it is retried once SQS takes it
        let port = Memory {
            send_fails: false,
            claims: std::sync::Mutex::new(failing.claims.lock().unwrap().clone()),
            ..Memory::with(&invalid_order())
        };
        let done = restore_entry(&port, &unpatched).await.unwrap();
        // THEN it goes on: sent once, its claim the second
        assert_eq!(done.message_id.as_deref(), Some("m-new"));
        assert_eq!(claims(&port)[0].0, 2);
        assert_eq!(port.sent.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_restore_whose_send_was_not_answered_is_not_sent_again_by_a_plain_retry() {
        // GIVEN a restore whose send timed out: SQS may have taken it
        let port = Memory {
            send_times_out: true,
            ..Memory::with(&invalid_order())
        };
        let unpatched = RestoreRequest {
            patch: None,
            ..request(&Value::Null, false)
        };
        assert!(restore_entry(&port, &unpatched).await.is_err());
        // THEN its claim still says sending, and a plain retry is refused
        assert_eq!(claims(&port)[0].1, RestoreStatus::Sending);
        let retry = Memory {
            claims: std::sync::Mutex::new(port.claims.lock().unwrap().clone()),
            ..Memory::with(&invalid_order())
        };
        assert!(restore_entry(&retry, &unpatched).await.is_err());
        assert!(retry.sent.lock().unwrap().is_empty());
    }

    #[test]
    fn a_claim_being_sent_blocks_until_it_is_stale_then_only_again() {
        let at = chrono::Utc::now();
        let claim = |status| RestoreRecord {
            id: "r".into(),
            at: resq::archive::timestamp(at),
            by: "os-user:alice".into(),
            patch: None,
            queue: "q".into(),
            status,
            message_id: None,
            error: None,
        };
        let sending = claim(RestoreStatus::Sending);
        let now = at.timestamp_millis() as u64;
        let stale = now + CLAIM_STALE.as_millis() as u64;
        // fresh: refused, --again or not (a restore is sending it now)
        for again in [false, true] {
            let e = may_claim(Some(&sending), again, now + 1000).unwrap_err();
            assert!(e.starts_with("is being restored by os-user:alice"), "{e}");
        }
        // stale: refused, telling to check the main queue, then --again takes it over
        let e = may_claim(Some(&sending), false, stale).unwrap_err();
        assert!(
            e.contains("never recorded its send") && e.contains("resq find"),
            "{e}"
        );
        assert!(may_claim(Some(&sending), true, stale).is_ok());
        // none, or a failed send: go on
        assert!(may_claim(None, false, now).is_ok());
        assert!(may_claim(Some(&claim(RestoreStatus::Failed)), false, now).is_ok());
    }

    #[test]
    fn a_record_replaces_its_own_and_keeps_the_others() {
        let mut e = invalid_order();
        let record = |id: &str, status| RestoreRecord {
            id: id.into(),
            at: "2026-11-26T00:00:00.000Z".into(),
            by: "os-user:ops".into(),
            patch: None,
            queue: "q".into(),
            status,
            message_id: None,
            error: None,
        };
        e.metadata.restores.push(record("r-0", RestoreStatus::Sent));
        let doc = serde_json::to_value(&e).unwrap();
        let doc = with_record(doc, &record("r-1", RestoreStatus::Sending)).unwrap();
        let doc = with_record(doc, &record("r-1", RestoreStatus::Sent)).unwrap();
        let back: ArchiveEnvelope = serde_json::from_value(doc).unwrap();
        let ids: Vec<_> = back
            .metadata
            .restores
            .iter()
            .map(|r| (r.id.as_str(), r.status))
            .collect();
        assert_eq!(
            ids,
            [("r-0", RestoreStatus::Sent), ("r-1", RestoreStatus::Sent)]
        );
        assert_eq!(
            os_user(|n| (n == "LOGNAME").then(|| "alice".to_owned())),
            "os-user:alice"
        );
        assert_eq!(os_user(|_| None), "os-user:unknown");
    }
}
