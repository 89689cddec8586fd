//! The keep list: where the redriver notes the permanent failures it kept for a human and
//! hid in the DLQ until their TTL (so that later runs do not re-read them), with the receipt
//! handle that can bring each back at once. A selective redrive by reason, and an operator's
//! `resq dlq peek --kept`, read it to make those messages visible again.
//!
//! `kept/{yyyy}/{mm}/{dd}/{HHMMSSmmm}-{run}.json` in the archive bucket, one object per run
//! that hid something (at most [`MAX_ENTRIES_PER_LIST`] entries each), written once. A message
//! hidden again by a later run appears in a later list with a fresh receipt handle; the newest
//! entry counts. Lists older than SQS's 12 h visibility limit hold nothing still hidden.

use std::collections::HashMap;

use chrono::{DateTime, Duration as ChronoDuration, TimeZone, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::error::AwsError;
use crate::store::ObjectStore;

/// Where keep lists live in the bucket.
pub const KEEP_PREFIX: &str = "kept/";

/// What keep lists need: written once, read back, and listed by day, under `KEEP_PREFIX`.
pub const PERMISSIONS: &[crate::iam::Permission] = &[
    crate::iam::Permission::new("s3:PutObject", "ArchiveBucket/kept/*"),
    crate::iam::Permission::new("s3:GetObject", "ArchiveBucket/kept/*"),
    crate::iam::Permission::new("s3:ListBucket", "ArchiveBucket if s3:prefix=kept/*"),
];
/// Entries per list object; a run that hides more writes several.
pub const MAX_ENTRIES_PER_LIST: usize = 2000;

/// One hidden message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptMessage {
    /// Its id in the DLQ.
    pub message_id: String,
    /// The receipt handle of the receive that hid it.
    pub receipt_handle: String,
    /// Its `x-failure-reason`.
    pub failure_reason: Option<String>,
    /// Epoch millis of the producer's send, when known.
    pub first_sent_at: Option<u64>,
    /// Epoch millis when it becomes visible again by itself.
    pub hidden_until: u64,
    /// Its body's `orderId`, when it has one (`resq find` locates a kept order without
    /// touching the DLQ); absent from lists written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
}

/// One run's list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeepList {
    /// The DLQ the messages are in.
    pub queue_url: String,
    /// Epoch millis of writing.
    pub written_at: u64,
    /// The messages.
    pub messages: Vec<KeptMessage>,
}

/// The key of a run's `part`-th list written at `at`.
pub(crate) fn keep_key(at: DateTime<Utc>, run: &str, part: usize) -> String {
    let safe: String = run
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{KEEP_PREFIX}{}-{safe}-{part}.json",
        at.format("%Y/%m/%d/%H%M%S%3f")
    )
}

/// Writes one list, the `part`-th of run `run` (at most [`MAX_ENTRIES_PER_LIST`] messages:
/// the settle executor splits a run's kept messages into lists); returns its key.
pub async fn write_list(
    store: &impl ObjectStore,
    queue_url: &str,
    run: &str,
    part: usize,
    at: DateTime<Utc>,
    messages: &[KeptMessage],
) -> Result<String, AwsError> {
    let list = KeepList {
        queue_url: queue_url.to_owned(),
        written_at: at.timestamp_millis().max(0) as u64,
        messages: messages.to_vec(),
    };
    let body = serde_json::to_vec(&list).map_err(|e| AwsError::local(e.to_string()))?;
    let key = keep_key(at, run, part);
    store.put_if_absent(&key, body).await?;
    Ok(key)
}

/// The receipt handles of the `hidden` kept messages of `reason` (all of them without one):
/// what a redriver run selected by reason, or an operator's `resq dlq peek --kept`, makes
/// visible again. A receipt handle that no longer works belongs to a message already visible,
/// replayed or archived.
pub fn handles(hidden: Vec<KeptMessage>, reason: Option<&str>) -> impl Iterator<Item = String> {
    let selected = hidden
        .into_iter()
        .filter(move |k| reason.is_none_or(|r| k.failure_reason.as_deref() == Some(r)));
    selected.map(|k| k.receipt_handle)
}

/// Keep lists read at once.
pub const LISTS_READ_AT_ONCE: usize = 32;

/// The messages of `queue_url` that keep lists say are hidden at `now`: the newest entry per
/// message, from the lists of the last 13 hours (nothing stays hidden longer than 12 h). A
/// list's key carries when it was written, so older lists of the same days are not read; the
/// rest are read [`LISTS_READ_AT_ONCE`] at a time (a run every minute leaves about 800).
pub async fn still_hidden(
    store: &impl ObjectStore,
    queue_url: &str,
    now: DateTime<Utc>,
) -> Result<Vec<KeptMessage>, AwsError> {
    let since = now - ChronoDuration::hours(13);
    let mut days = vec![since.date_naive()];
    if now.date_naive() != since.date_naive() {
        days.push(now.date_naive());
    }
    let now_ms = now.timestamp_millis().max(0) as u64;
    let oldest = keep_key(since, "", 0);
    let mut keys = Vec::new();
    for day in days {
        let prefix = format!("{KEEP_PREFIX}{}/", day.format("%Y/%m/%d"));
        // keys sort by their time: one written before `since` sorts before `oldest`
        keys.extend(
            store
                .list(&prefix)
                .await?
                .into_iter()
                .filter(|k| *k >= oldest),
        );
    }
    let reads = keys.into_iter().map(|key| async move {
        let bytes = store.get(&key).await?;
        Ok::<_, AwsError>((key, bytes))
    });
    let mut lists = futures::stream::iter(reads).buffer_unordered(LISTS_READ_AT_ONCE);
    let mut newest: HashMap<String, (u64, KeptMessage)> = HashMap::new();
    while let Some(read) = lists.next().await {
        let (key, Some(bytes)) = read? else {
            continue;
        };
        let Ok(list) = serde_json::from_slice::<KeepList>(&bytes) else {
            tracing::warn!(key = %key, "not a keep list; skipped");
            continue;
        };
        let written = Utc.timestamp_millis_opt(list.written_at as i64).single();
        if list.queue_url != queue_url || written.is_none_or(|w| w < since) {
            continue;
        }
        for m in list.messages {
            match newest.get(&m.message_id) {
                Some((at, _)) if *at >= list.written_at => {}
                _ => {
                    newest.insert(m.message_id.clone(), (list.written_at, m));
                }
            }
        }
    }
    let mut hidden: Vec<KeptMessage> = newest
        .into_values()
        .map(|(_, m)| m)
        .filter(|m| m.hidden_until > now_ms)
        .collect();
    hidden.sort_by(|a, b| a.message_id.cmp(&b.message_id));
    Ok(hidden)
}
