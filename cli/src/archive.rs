//! `resq archive ls | show | restore`.

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

/// Sends an archived message back to the main queue for a fresh start: body and attributes
/// as archived, without `x-redrive-count`, the failure marks and `x-first-sent-at` (a restore
/// starts a fresh TTL: with the old send time, a restored message that failed again would be
/// archived as `TTL_EXPIRED` at once). The entry stays in the archive as the record of what
/// happened. Returns the new message id.
pub async fn restore(ctx: &Context, key: &str, dry_run: bool) -> Result<Option<String>, CliError> {
    let queue_url = ctx.main_queue()?;
    let envelope = show(ctx, key).await?;
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
