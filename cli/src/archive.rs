//! `resq archive ls | show | restore`.

use std::time::Duration;

use resq::archive::{ARCHIVE_PREFIX, ArchiveEnvelope};
use resq::attributes::{X_FAILURE_CLASS, X_FAILURE_REASON, X_FIRST_SENT_AT, X_REDRIVE_COUNT};

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
        keys.extend(
            out.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_owned)),
        );
        match out.next_continuation_token() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    Ok(keys)
}

/// Every stored version under `prefix` (one key per version: a key written twice is listed
/// twice). The bucket is versioned, so this counts writes, not only objects.
pub async fn list_versions(ctx: &Context, prefix: &str) -> Result<Vec<String>, CliError> {
    let bucket = ctx.archive_bucket()?;
    let mut keys = Vec::new();
    let (mut key_marker, mut version_marker) = (None, None);
    loop {
        let out = ctx
            .s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(prefix)
            .set_key_marker(key_marker)
            .set_version_id_marker(version_marker)
            .send()
            .await
            .map_err(|e| CliError::aws(format!("listing versions of s3://{bucket}/{prefix}"), e))?;
        keys.extend(
            out.versions()
                .iter()
                .filter_map(|v| v.key().map(str::to_owned)),
        );
        if out.is_truncated() != Some(true) {
            break;
        }
        key_marker = out.next_key_marker().map(str::to_owned);
        version_marker = out.next_version_id_marker().map(str::to_owned);
    }
    Ok(keys)
}

/// One archive entry.
pub async fn show(ctx: &Context, key: &str) -> Result<ArchiveEnvelope, CliError> {
    let bucket = ctx.archive_bucket()?;
    let out = ctx
        .s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| CliError::aws(format!("reading s3://{bucket}/{key}"), e))?;
    let bytes = out
        .body
        .collect()
        .await
        .map_err(|e| CliError::Download {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            message: e.to_string(),
        })?
        .into_bytes();
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
            original.attributes.get("SentTimestamp").map(String::as_str),
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

/// Sends an archived message back to the main queue for a fresh start: body and attributes
/// as archived, without `x-redrive-count`, the failure marks and `x-first-sent-at` (a restore
/// starts a fresh TTL: with the old send time, a restored message that failed again would be
/// archived as `TTL_EXPIRED` at once). The entry stays in the archive as the record of what
/// happened. Returns the new message id. Refused past `window` (see
/// [`within_idempotency_window`]); `None` restores whatever the age (`--force`).
pub async fn restore(
    ctx: &Context,
    key: &str,
    dry_run: bool,
    window: Option<RestoreWindow>,
) -> Result<Option<String>, CliError> {
    let queue_url = ctx.main_queue()?;
    let envelope = show(ctx, key).await?;
    if let Some(w) = window {
        let now_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
        let retention = resq::source::read_limits(&ctx.sqs, queue_url)
            .await
            .map_err(|source| CliError::Aws {
                what: format!("reading the retention of {queue_url}"),
                source,
            })?
            .retention;
        within_idempotency_window(&envelope, now_ms, w.window, w.ttl + retention).map_err(
            |why| CliError::PastIdempotencyWindow {
                key: key.to_owned(),
                why,
            },
        )?;
    }
    let mut attrs = envelope.original_message.message_attributes.clone();
    for name in [
        X_REDRIVE_COUNT,
        X_FAILURE_CLASS,
        X_FAILURE_REASON,
        X_FIRST_SENT_AT,
    ] {
        attrs.remove(name);
    }
    if dry_run {
        return Ok(None);
    }
    let sdk_attrs = resq::sqs::sdk_attributes(&attrs).map_err(|source| CliError::Aws {
        what: format!("restoring {key}"),
        source,
    })?;
    let send = ctx
        .sqs
        .send_message()
        .queue_url(queue_url)
        .message_body(&envelope.original_message.body)
        .set_message_attributes(Some(sdk_attrs).filter(|a| !a.is_empty()));
    let (group_id, deduplication_id) = resq::fifo::copy_ids(
        resq::fifo::is_fifo(queue_url),
        envelope
            .original_message
            .attributes
            .get("MessageGroupId")
            .map(String::as_str),
        resq::fifo::Copy::Restore,
        &envelope.original_message.message_id,
    );
    let out = send
        .set_message_group_id(group_id)
        .set_message_deduplication_id(deduplication_id)
        .send()
        .await
        .map_err(|e| CliError::aws(format!("restoring {key} to {queue_url}"), e))?;
    Ok(out.message_id)
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
}
