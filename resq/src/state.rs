//! What resq remembers between runs, in the archive bucket under `state/`: the consumer's
//! pauses (who paused its event source mapping, when and why: the redriver's breaker or an
//! operator) and the redriver's archive sweeps. Each is a log of write-once entries, newest
//! first in key order (`{prefix}{u64::MAX - epoch ms, 20 digits}.json`), so the current state
//! is the first key under the prefix: one listing of one key, however long the log grows.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::AwsError;
use crate::store::{ObjectStore, PutOutcome};

/// Where state lives in the bucket.
pub const STATE_PREFIX: &str = "state/";

/// What a state log needs: written once, read back, and its newest key listed, under
/// `STATE_PREFIX`.
pub const PERMISSIONS: &[crate::iam::Permission] = &[
    crate::iam::Permission::new("s3:PutObject", "ArchiveBucket/state/*"),
    crate::iam::Permission::new("s3:GetObject", "ArchiveBucket/state/*"),
    crate::iam::Permission::new("s3:ListBucket", "ArchiveBucket if s3:prefix=state/*"),
];

/// The key of the entry written at `at_ms` under `prefix`: later entries sort first.
pub fn entry_key(prefix: &str, at_ms: u64) -> String {
    format!("{prefix}{:020}.json", u64::MAX - at_ms)
}

/// The millisecond a key of `prefix` was written at ([`entry_key`]'s inverse).
fn key_millis(prefix: &str, key: &str) -> Option<u64> {
    let n: u64 = key
        .strip_prefix(prefix)?
        .strip_suffix(".json")?
        .parse()
        .ok()?;
    Some(u64::MAX - n)
}

/// The newest entry under `prefix`, `None` when there is none. An entry that is not a `T`
/// is an error: state resq cannot read must not be taken for no state.
pub async fn latest<T: DeserializeOwned>(
    store: &impl ObjectStore,
    prefix: &str,
) -> Result<Option<T>, AwsError> {
    let Some(key) = store.first_key(prefix).await? else {
        return Ok(None);
    };
    let Some(bytes) = store.get(&key).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| AwsError::local(format!("{key} is not a state entry resq can read: {e}")))
}

/// Appends `entry` at `at_ms` under `prefix`; returns its key. The entry written last is the
/// current state whatever the writers' clocks say: its key is at least a millisecond after the
/// newest one's (an operator's laptop a minute ahead of Lambda's clock must not bury the
/// breaker's later pause under its resume), and two entries in the same millisecond take the
/// next free one.
pub async fn append<T: Serialize>(
    store: &impl ObjectStore,
    prefix: &str,
    at_ms: u64,
    entry: &T,
) -> Result<String, AwsError> {
    let body = serde_json::to_vec(entry).map_err(|e| AwsError::local(e.to_string()))?;
    let newest = store
        .first_key(prefix)
        .await?
        .and_then(|k| key_millis(prefix, &k));
    let at_ms = newest.map_or(at_ms, |n| at_ms.max(n.saturating_add(1)));
    for at in at_ms..at_ms.saturating_add(1000) {
        let key = entry_key(prefix, at);
        if store.put_if_absent(&key, body.clone()).await? == PutOutcome::Created {
            return Ok(key);
        }
    }
    Err(AwsError::local(format!(
        "no free key under {prefix} within a second of {at_ms}"
    )))
}

/// The log of one event source mapping's pauses.
pub fn pause_prefix(mapping: &str) -> String {
    format!("{STATE_PREFIX}consumer/{}/", safe(mapping))
}

/// A name safe in a key: letters, digits, `-` and `_` kept, anything else `_`.
pub fn safe(name: &str) -> String {
    name.chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '-' {
            true => c,
            false => '_',
        })
        .collect()
}

/// Who made a pause (or a resume).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PausedBy {
    /// The redriver's consumer breaker.
    Resq,
    /// An operator (`resq consumer pause` / `resume`).
    Operator,
}

/// Where a pause stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PauseState {
    /// The mapping is disabled (or being disabled).
    Paused,
    /// resq enabled its own pause's mapping for a probe; it disables it again at `probeUntil`.
    Probing,
    /// The mapping is enabled again.
    Resumed,
}

/// One entry of a mapping's pause log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseRecord {
    /// The event source mapping's UUID.
    pub mapping: String,
    /// Where the pause stands after this entry.
    pub state: PauseState,
    /// Who wrote it.
    pub by: PausedBy,
    /// Epoch millis of this entry.
    pub at: u64,
    /// Epoch millis the pause began (`state` paused or probing; for resumed, the pause it
    /// ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// The alarms that paused it (resq), or were in ALARM when an operator forced a resume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<String>,
    /// Why, in words: an operator's `--reason`, or what the breaker saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who (an operator's identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub who: Option<String>,
    /// Epoch millis of resq's last probe of this pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_at: Option<u64>,
    /// Probes of this pause so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub probes: u32,
    /// An operator resumed while the breaker's alarms were in ALARM: resq pauses it again only
    /// after they have left ALARM once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
    /// Epoch millis before which resq's breaker does not pause again (a resume at the main
    /// queue's retention cap gives the consumer time to run the oldest messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_off_until: Option<u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl PauseRecord {
    /// A record of `state` by `by` at `at`, for `mapping`, with nothing else said.
    pub fn new(mapping: &str, state: PauseState, by: PausedBy, at: u64) -> Self {
        Self {
            mapping: mapping.to_owned(),
            state,
            by,
            at,
            since: None,
            alarms: Vec::new(),
            reason: None,
            who: None,
            last_probe_at: None,
            probes: 0,
            forced: false,
            hold_off_until: None,
        }
    }
}

/// The current entry of `mapping`'s pause log.
pub async fn current_pause(
    store: &impl ObjectStore,
    mapping: &str,
) -> Result<Option<PauseRecord>, AwsError> {
    latest(store, &pause_prefix(mapping)).await
}

/// Appends `record` to its mapping's pause log.
pub async fn record_pause(
    store: &impl ObjectStore,
    record: &PauseRecord,
) -> Result<String, AwsError> {
    append(store, &pause_prefix(&record.mapping), record.at, record).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_entries_sort_first_and_keys_are_fixed_width() {
        let (a, b) = (entry_key("p/", 1_000), entry_key("p/", 1_001));
        assert!(b < a, "{b} sorts before {a}");
        assert_eq!(a.len(), b.len());
        assert_eq!(entry_key("p/", 0), format!("p/{}.json", u64::MAX));
        assert_eq!(pause_prefix("a1b2-c3/../x"), "state/consumer/a1b2-c3____x/");
    }

    #[test]
    fn a_record_reads_what_it_writes_and_leaves_out_what_it_does_not_say() {
        let mut r = PauseRecord::new("uuid-1", PauseState::Paused, PausedBy::Resq, 5);
        r.since = Some(5);
        r.alarms = vec!["stk-downstream-failing".into()];
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"mapping": "uuid-1", "state": "paused", "by": "resq", "at": 5,
                "since": 5, "alarms": ["stk-downstream-failing"]})
        );
        assert_eq!(serde_json::from_value::<PauseRecord>(json).unwrap(), r);
    }
}
