//! `resq consumer pause` / `resq consumer resume`, and the consumer's line in `resq status`:
//! the operator's side of the consumer's breaker (docs/operate.md, "The consumer's breaker").
//!
//! The consumer's event source mapping is paused by the redriver's breaker while its alarms are
//! in ALARM, or by an operator. Who paused it is written in the archive bucket, under
//! `state/consumer/{uuid}/` ([`resq::state`]): the latest record says. An operator's pause is
//! recorded **before** the mapping is disabled, so that the breaker, which only ever resumes a
//! pause its own record names, never takes it for its own; an operator's resume enables the
//! mapping first, then records it.

use resq::error::AwsError;
use resq::mapping::{EventSourceMappings, Mapping, MappingState};
use resq::state::{PauseRecord, PauseState, PausedBy};
use resq::store::ObjectStore;
use resq_redriver::ports::LambdaMappings;
use serde::Serialize;

use crate::CliError;
use crate::context::Context;

/// Where the consumer stands: its mapping's state read with the latest pause record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Standing {
    /// Enabled, with no pause on record.
    Running,
    /// Enabled although the latest record says paused: enabled outside resq (the console, the
    /// AWS CLI), or a pause being made at this very moment.
    RunningDespiteRecord,
    /// Paused by resq's breaker, and enabled for one of its probes.
    Probing,
    /// Disabled by resq's breaker.
    PausedByResq,
    /// Disabled by an operator (`resq consumer pause`).
    PausedByHand,
    /// Disabled, and no record says by whom: disabled outside resq. resq's breaker never
    /// enables it.
    DisabledOutsideResq,
    /// In a state Lambda switches nothing from (creating, updating, deleting).
    Settling,
}

/// Where the consumer stands, from its mapping's `state` and the latest `record` of its pause
/// log.
pub fn standing(state: &MappingState, record: Option<&PauseRecord>) -> Standing {
    let pause = record
        .filter(|r| r.state != PauseState::Resumed)
        .map(|r| (r.by, r.state));
    match (state.is_on(), pause) {
        (None, _) => Standing::Settling,
        (Some(true), Some((PausedBy::Resq, PauseState::Probing))) => Standing::Probing,
        (Some(true), Some(_)) => Standing::RunningDespiteRecord,
        (Some(true), None) => Standing::Running,
        (Some(false), Some((PausedBy::Resq, _))) => Standing::PausedByResq,
        (Some(false), Some((PausedBy::Operator, _))) => Standing::PausedByHand,
        (Some(false), None) => Standing::DisabledOutsideResq,
    }
}

/// The consumer's part of `resq status`.
#[derive(Debug, Clone, PartialEq)]
pub enum ConsumerStatus {
    /// No event source mapping named (`--mapping`, `CONSUMER_EVENT_SOURCE_MAPPING`, the
    /// stack's `ConsumerEventSourceMapping`): the consumer breaker is not configured.
    NotConfigured,
    /// The mapping and its latest pause record.
    Known {
        /// The mapping's UUID.
        mapping: String,
        /// Its state, as Lambda reports it.
        state: MappingState,
        /// Where the consumer stands.
        standing: Standing,
        /// The latest record of its pause log, if any.
        record: Option<PauseRecord>,
    },
    /// Lambda knows no such mapping.
    NoSuchMapping {
        /// The UUID named.
        mapping: String,
    },
    /// The mapping or its pause record could not be read.
    Unreadable {
        /// The mapping's UUID.
        mapping: String,
        /// What was being read.
        what: String,
        /// Why not.
        source: AwsError,
    },
}

impl ConsumerStatus {
    /// The error `resq status` ends with when the consumer's state could not be told (after
    /// printing everything else).
    pub fn failure(&self) -> Option<CliError> {
        match self {
            Self::NotConfigured | Self::Known { .. } => None,
            Self::NoSuchMapping { mapping } => Some(CliError::NoSuchMapping {
                mapping: mapping.clone(),
            }),
            Self::Unreadable { what, source, .. } => Some(CliError::Aws {
                what: what.clone(),
                source: source.clone(),
            }),
        }
    }
}

/// Where a mapping's pause log is, in words.
fn log_in(bucket: &str, mapping: &str) -> String {
    format!("s3://{bucket}/{}", resq::state::pause_prefix(mapping))
}

/// Lambda's word for a mapping it does not know.
fn not_found(e: &AwsError) -> bool {
    e.code.as_deref() == Some("ResourceNotFoundException")
}

/// A failed call on the mapping `uuid` while `doing`: [`CliError::NoSuchMapping`] when Lambda
/// does not know it.
fn mapping_error(uuid: &str, doing: String, source: AwsError) -> CliError {
    if not_found(&source) {
        CliError::NoSuchMapping {
            mapping: uuid.to_owned(),
        }
    } else {
        CliError::Aws {
            what: doing,
            source,
        }
    }
}

/// Reads the consumer's standing: the mapping `uuid` (none: not configured) and its latest
/// pause record in `bucket`.
pub async fn read(
    mappings: &impl EventSourceMappings,
    store: &impl ObjectStore,
    uuid: Option<&str>,
    bucket: &str,
) -> ConsumerStatus {
    let Some(uuid) = uuid else {
        return ConsumerStatus::NotConfigured;
    };
    let unreadable = |what: String, source: AwsError| ConsumerStatus::Unreadable {
        mapping: uuid.to_owned(),
        what,
        source,
    };
    let mapping = match mappings.get(uuid).await {
        Ok(m) => m,
        Err(e) if not_found(&e) => {
            return ConsumerStatus::NoSuchMapping {
                mapping: uuid.to_owned(),
            };
        }
        Err(e) => return unreadable(format!("reading the event source mapping {uuid}"), e),
    };
    let record = match resq::state::current_pause(store, uuid).await {
        Ok(r) => r,
        Err(e) => {
            return unreadable(
                format!(
                    "reading the consumer's pause record in {}",
                    log_in(bucket, uuid)
                ),
                e,
            );
        }
    };
    ConsumerStatus::Known {
        mapping: uuid.to_owned(),
        standing: standing(&mapping.state, record.as_ref()),
        state: mapping.state,
        record,
    }
}

/// [`read`] for the context's mapping (none named: not configured) and bucket.
pub async fn read_in(ctx: &Context) -> Result<ConsumerStatus, CliError> {
    let Some(uuid) = ctx.mapping_named() else {
        return Ok(ConsumerStatus::NotConfigured);
    };
    let bucket = ctx.archive_bucket()?;
    Ok(read(&mappings(ctx), &ctx.store(), Some(uuid), bucket).await)
}

/// The context's event source mappings, on Lambda.
fn mappings(ctx: &Context) -> LambdaMappings {
    LambdaMappings::new(ctx.lambda.clone())
}

/// The pause log's latest record before a command changed it: `Err` (why) when it could not
/// be read (the command goes on: its own record supersedes it).
pub type Previous = Result<Option<PauseRecord>, String>;

/// Reads the latest record, or why not.
async fn previous(store: &impl ObjectStore, uuid: &str) -> Previous {
    resq::state::current_pause(store, uuid)
        .await
        .map_err(|e| e.to_string())
}

/// The mapping `uuid`, refused while it is in a state Lambda switches nothing from.
async fn switchable(mappings: &impl EventSourceMappings, uuid: &str) -> Result<Mapping, CliError> {
    let mapping = mappings
        .get(uuid)
        .await
        .map_err(|e| mapping_error(uuid, format!("reading the event source mapping {uuid}"), e))?;
    if mapping.state.is_on().is_none() {
        return Err(CliError::MappingBusy {
            mapping: uuid.to_owned(),
            state: mapping.state.as_str().to_owned(),
        });
    }
    Ok(mapping)
}

/// What `resq consumer pause` is asked.
#[derive(Debug, Clone)]
pub struct PauseRequest<'a> {
    /// The mapping's UUID.
    pub mapping: &'a str,
    /// The archive bucket (for the messages; the store is its).
    pub bucket: &'a str,
    /// `--reason`.
    pub reason: Option<String>,
    /// The caller's identity ([`crate::archive::caller`]).
    pub who: String,
    /// Now, epoch millis.
    pub now_ms: u64,
}

/// What `resq consumer pause` did.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseReport {
    /// The mapping's UUID.
    pub mapping: String,
    /// Its state before.
    pub was: MappingState,
    /// Its state after (Lambda may still be `Disabling`).
    pub now: MappingState,
    /// The record before this one.
    pub previous: Previous,
    /// The record written.
    pub record: PauseRecord,
    /// Where: `s3://bucket/key`.
    pub written_to: String,
}

impl PauseReport {
    /// Where the consumer stood before.
    pub fn standing_before(&self) -> Option<Standing> {
        self.previous
            .as_ref()
            .ok()
            .map(|r| standing(&self.was, r.as_ref()))
    }
}

/// `resq consumer pause`: records the operator's pause (`paused`, by `operator`, since now,
/// with the reason and who), then disables the mapping (unless it is off already). Nothing is
/// changed when the mapping cannot be read or is settling, nor when the record cannot be
/// written.
pub async fn pause(
    mappings: &impl EventSourceMappings,
    store: &impl ObjectStore,
    request: &PauseRequest<'_>,
) -> Result<PauseReport, CliError> {
    let uuid = request.mapping;
    let mapping = switchable(mappings, uuid).await?;
    let previous = previous(store, uuid).await;
    let mut record = PauseRecord::new(uuid, PauseState::Paused, PausedBy::Operator, request.now_ms);
    record.since = Some(request.now_ms);
    record.reason = request.reason.clone().filter(|r| !r.trim().is_empty());
    record.who = Some(request.who.clone());
    let log = log_in(request.bucket, uuid);
    let key = resq::state::record_pause(store, &record)
        .await
        .map_err(|source| CliError::Aws {
            what: format!(
                "writing the pause record in {log} (nothing was changed: the mapping is still {})",
                mapping.state.as_str()
            ),
            source,
        })?;
    let written_to = format!("s3://{}/{key}", request.bucket);
    let now = if mapping.state.is_on() == Some(false) {
        mapping.state.clone()
    } else {
        let disabled = mappings.set_enabled(uuid, false).await.map_err(|e| {
            mapping_error(
                uuid,
                format!(
                    "disabling the event source mapping {uuid} (the pause is recorded in {written_to}, so resq's breaker will not resume it, but the mapping is still {}: run `resq consumer pause` again)",
                    mapping.state.as_str()
                ),
                e,
            )
        })?;
        disabled.state
    };
    Ok(PauseReport {
        mapping: uuid.to_owned(),
        was: mapping.state,
        now,
        previous,
        record,
        written_to,
    })
}

/// [`pause`] on the context's mapping and bucket.
pub async fn pause_in(
    ctx: &Context,
    reason: Option<String>,
    who: String,
) -> Result<PauseReport, CliError> {
    let request = PauseRequest {
        mapping: ctx.mapping()?,
        bucket: ctx.archive_bucket()?,
        reason,
        who,
        now_ms: crate::now_ms(),
    };
    pause(&mappings(ctx), &ctx.store(), &request).await
}

/// The consumer breaker's alarms, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlarmReading {
    /// Those in ALARM.
    pub in_alarm: Vec<String>,
    /// Those that do not exist (not checked).
    pub missing: Vec<String>,
}

/// Reads the states of the alarms `names` (metric or composite), through the redriver's
/// CloudWatch adapter: the states its breaker reads. `refused` says, when they cannot be read,
/// what is refused then.
pub async fn read_alarms(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    names: &[String],
    refused: &str,
) -> Result<AlarmReading, CliError> {
    use resq_redriver::ports::{Alarms, CloudWatchAlarms};
    if names.is_empty() {
        return Ok(AlarmReading::default());
    }
    let states = CloudWatchAlarms::new(cloudwatch.clone())
        .states(names)
        .await
        .map_err(|source| CliError::Aws {
            what: format!(
                "reading the breaker's alarms {} ({refused})",
                names.join(", ")
            ),
            source,
        })?;
    let found = |n: &String, in_alarm: bool| {
        states
            .iter()
            .any(|s| &s.name == n && (!in_alarm || s.in_alarm))
    };
    Ok(AlarmReading {
        in_alarm: names.iter().filter(|n| found(n, true)).cloned().collect(),
        missing: names.iter().filter(|n| !found(n, false)).cloned().collect(),
    })
}

/// What `resq consumer resume` is asked.
#[derive(Debug, Clone)]
pub struct ResumeRequest<'a> {
    /// The mapping's UUID.
    pub mapping: &'a str,
    /// The archive bucket.
    pub bucket: &'a str,
    /// `--force`: resume while the breaker's alarms are in ALARM (or cannot be read).
    pub force: bool,
    /// The caller's identity.
    pub who: String,
    /// Now, epoch millis.
    pub now_ms: u64,
}

/// What `resq consumer resume` did.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeReport {
    /// The mapping's UUID.
    pub mapping: String,
    /// Its state before.
    pub was: MappingState,
    /// Its state after (Lambda may still be `Enabling`).
    pub now: MappingState,
    /// The record before.
    pub previous: Previous,
    /// The record written, and where (`s3://bucket/key`); `None` when the consumer was running
    /// with no pause on record: nothing to resume.
    pub record: Option<(PauseRecord, String)>,
    /// The breaker's alarms that do not exist (not checked).
    pub unchecked: Vec<String>,
    /// Why the alarms could not be read, when `--force` resumed without them.
    pub alarms_unread: Option<String>,
}

/// `resq consumer resume`: a consumer running with no pause on record is left alone, said so.
/// Otherwise refused (before anything changes) while an alarm of the consumer breaker is in
/// ALARM, or they cannot be read, unless `force`; then enables the mapping and records the
/// resume (`resumed`, by `operator`; `forced` and the alarms when it was forced past them).
pub async fn resume(
    mappings: &impl EventSourceMappings,
    store: &impl ObjectStore,
    alarms: Result<AlarmReading, CliError>,
    request: &ResumeRequest<'_>,
) -> Result<ResumeReport, CliError> {
    let uuid = request.mapping;
    let mapping = switchable(mappings, uuid).await?;
    let previous = previous(store, uuid).await;
    let paused_on_record = matches!(&previous, Ok(Some(r)) if r.state != PauseState::Resumed);
    let on = mapping.state.is_on() == Some(true);
    let report = |now: MappingState, record, unchecked, alarms_unread| ResumeReport {
        mapping: uuid.to_owned(),
        was: mapping.state.clone(),
        now,
        previous: previous.clone(),
        record,
        unchecked,
        alarms_unread,
    };
    if on && !paused_on_record {
        let unchecked = alarms.map(|r| r.missing).unwrap_or_default();
        return Ok(report(mapping.state.clone(), None, unchecked, None));
    }
    let (reading, alarms_unread) = match (alarms, request.force) {
        (Ok(r), false) if !r.in_alarm.is_empty() => {
            return Err(CliError::BreakerInAlarm { alarms: r.in_alarm });
        }
        (Ok(r), _) => (r, None),
        (Err(e), false) => return Err(e),
        (Err(e), true) => (AlarmReading::default(), Some(e.to_string())),
    };
    let now = if on {
        mapping.state.clone()
    } else {
        let enabled = mappings.set_enabled(uuid, true).await.map_err(|e| {
            mapping_error(
                uuid,
                format!(
                    "enabling the event source mapping {uuid} (nothing was recorded; it is still {})",
                    mapping.state.as_str()
                ),
                e,
            )
        })?;
        enabled.state
    };
    let mut record = PauseRecord::new(
        uuid,
        PauseState::Resumed,
        PausedBy::Operator,
        request.now_ms,
    );
    record.since = previous
        .as_ref()
        .ok()
        .and_then(Option::as_ref)
        .filter(|r| r.state != PauseState::Resumed)
        .and_then(|r| r.since);
    record.who = Some(request.who.clone());
    let forced = !reading.in_alarm.is_empty() || alarms_unread.is_some();
    if forced {
        record.forced = true;
        record.alarms = reading.in_alarm.clone();
    }
    let key = resq::state::record_pause(store, &record)
        .await
        .map_err(|source| CliError::Aws {
            what: format!(
                "recording the resume in {} (the consumer is running again, but its record still says paused: run `resq consumer resume` again)",
                log_in(request.bucket, uuid)
            ),
            source,
        })?;
    let written_to = format!("s3://{}/{key}", request.bucket);
    Ok(report(
        now,
        Some((record, written_to)),
        reading.missing,
        alarms_unread,
    ))
}

/// [`resume`] on the context's mapping and bucket, checking the breaker's `alarms`.
pub async fn resume_in(
    ctx: &Context,
    alarms: &[String],
    force: bool,
    who: String,
) -> Result<ResumeReport, CliError> {
    let request = ResumeRequest {
        mapping: ctx.mapping()?,
        bucket: ctx.archive_bucket()?,
        force,
        who,
        now_ms: crate::now_ms(),
    };
    let refused = "a resume is refused while they cannot be read; --force resumes anyway";
    let reading = read_alarms(&ctx.cloudwatch, alarms, refused).await;
    resume(&mappings(ctx), &ctx.store(), reading, &request).await
}

#[cfg(test)]
mod tests {
    use resq_testing::{MemoryMapping, MemoryStore};

    use super::*;

    const UUID: &str = "7c1f0d2e-0000-4000-8000-00000000abcd";
    const T0: u64 = 1_800_000_000_000;

    fn record(state: PauseState, by: PausedBy, at: u64) -> PauseRecord {
        let mut r = PauseRecord::new(UUID, state, by, at);
        r.since = Some(at);
        r
    }

    fn pause_request(reason: Option<&str>, now_ms: u64) -> PauseRequest<'static> {
        PauseRequest {
            mapping: UUID,
            bucket: "b",
            reason: reason.map(str::to_owned),
            who: "arn:aws:iam::123456789012:user/alice".into(),
            now_ms,
        }
    }

    fn resume_request(force: bool, now_ms: u64) -> ResumeRequest<'static> {
        ResumeRequest {
            mapping: UUID,
            bucket: "b",
            force,
            who: "arn:aws:iam::123456789012:user/bob".into(),
            now_ms,
        }
    }

    fn in_alarm(names: &[&str]) -> Result<AlarmReading, CliError> {
        Ok(AlarmReading {
            in_alarm: names.iter().map(|n| (*n).to_owned()).collect(),
            missing: vec![],
        })
    }

    async fn latest(store: &MemoryStore) -> PauseRecord {
        resq::state::current_pause(store, UUID)
            .await
            .unwrap()
            .expect("a record")
    }

    #[test]
    fn the_standing_is_the_mappings_state_read_with_the_latest_record() {
        use MappingState::*;
        let resq = record(PauseState::Paused, PausedBy::Resq, T0);
        let probing = record(PauseState::Probing, PausedBy::Resq, T0);
        let hand = record(PauseState::Paused, PausedBy::Operator, T0);
        let resumed = record(PauseState::Resumed, PausedBy::Operator, T0);
        let other = Other("Updating".into());
        for (state, record, expected) in [
            (Enabled, None, Standing::Running),
            (Enabling, Some(&resumed), Standing::Running),
            (Enabled, Some(&probing), Standing::Probing),
            (Enabled, Some(&hand), Standing::RunningDespiteRecord),
            (Enabled, Some(&resq), Standing::RunningDespiteRecord),
            (Disabled, Some(&resq), Standing::PausedByResq),
            (Disabling, Some(&probing), Standing::PausedByResq),
            (Disabled, Some(&hand), Standing::PausedByHand),
            (Disabled, None, Standing::DisabledOutsideResq),
            (Disabled, Some(&resumed), Standing::DisabledOutsideResq),
            (other, Some(&hand), Standing::Settling),
        ] {
            assert_eq!(
                standing(&state, record),
                expected,
                "{state:?} with {record:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_pause_is_recorded_as_the_operators_before_the_mapping_is_disabled() {
        // GIVEN a running consumer
        let (mapping, store) = (MemoryMapping::new(UUID), MemoryStore::default());
        // WHEN an operator pauses it
        let report = pause(&mapping, &store, &pause_request(Some("DB failover"), T0))
            .await
            .unwrap();
        // THEN the mapping was disabled, once
        assert_eq!(mapping.switches(), [false]);
        assert_eq!(
            (report.was, report.now),
            (MappingState::Enabled, MappingState::Disabled)
        );
        // AND the record says paused, by the operator, who, why and since when
        let r = latest(&store).await;
        assert_eq!(
            (r.state, r.by, r.at, r.since),
            (PauseState::Paused, PausedBy::Operator, T0, Some(T0))
        );
        assert_eq!(r.reason.as_deref(), Some("DB failover"));
        assert_eq!(
            r.who.as_deref(),
            Some("arn:aws:iam::123456789012:user/alice")
        );
        assert_eq!(report.record, r);
        assert_eq!(report.previous, Ok(None));
        assert!(
            report
                .written_to
                .starts_with(&format!("s3://b/state/consumer/{UUID}/")),
            "{}",
            report.written_to
        );
        assert_eq!(
            read(&mapping, &store, Some(UUID), "b").await,
            ConsumerStatus::Known {
                mapping: UUID.into(),
                state: MappingState::Disabled,
                standing: Standing::PausedByHand,
                record: Some(r),
            }
        );
    }

    #[tokio::test]
    async fn a_pause_that_cannot_be_recorded_changes_nothing() {
        // GIVEN a bucket that refuses writes
        let (mapping, store) = (MemoryMapping::new(UUID), MemoryStore::default());
        store.set_failing(true);
        // WHEN an operator pauses
        let err = pause(&mapping, &store, &pause_request(None, T0))
            .await
            .unwrap_err();
        // THEN the mapping was not touched: without the record, resq's breaker could take the
        // pause for its own and resume it
        assert!(mapping.switches().is_empty());
        assert_eq!(err.exit_code(), 1);
        assert!(
            err.to_string().starts_with(&format!(
                "writing the pause record in s3://b/state/consumer/{UUID}/ (nothing was changed: the mapping is still Enabled)"
            )),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_pause_takes_over_one_of_resqs_and_keeps_a_disabled_mapping_as_it_is() {
        // GIVEN a consumer resq's breaker paused
        let (mapping, store) = (MemoryMapping::new(UUID), MemoryStore::default());
        let mut by_resq = record(PauseState::Paused, PausedBy::Resq, T0);
        by_resq.alarms = vec!["resq-downstream-failing".into()];
        resq::state::record_pause(&store, &by_resq).await.unwrap();
        mapping.set_state(MappingState::Disabled);
        // WHEN an operator pauses it
        let report = pause(&mapping, &store, &pause_request(None, T0 + 60_000))
            .await
            .unwrap();
        // THEN the pause is the operator's now, and the mapping is left disabled, unswitched
        assert_eq!(report.standing_before(), Some(Standing::PausedByResq));
        assert_eq!(report.previous, Ok(Some(by_resq)));
        assert!(mapping.switches().is_empty());
        let r = latest(&store).await;
        assert_eq!((r.by, r.since), (PausedBy::Operator, Some(T0 + 60_000)));
        assert_eq!(r.reason, None);
    }

    #[tokio::test]
    async fn a_mapping_that_does_not_exist_or_is_settling_is_said_so_and_left_alone() {
        let (mapping, store) = (MemoryMapping::new("another"), MemoryStore::default());
        let err = pause(&mapping, &store, &pause_request(None, T0))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, CliError::NoSuchMapping { mapping } if mapping == UUID),
            "{err}"
        );
        assert!(store.keys("").is_empty(), "nothing recorded");
        assert_eq!(
            read(&mapping, &store, Some(UUID), "b").await,
            ConsumerStatus::NoSuchMapping {
                mapping: UUID.into()
            }
        );
        let mapping = MemoryMapping::new(UUID);
        mapping.set_state(MappingState::Other("Updating".into()));
        let err = resume(&mapping, &store, in_alarm(&[]), &resume_request(false, T0))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the event source mapping {UUID} is Updating: Lambda switches it only once that is over; nothing was changed: try again in a few seconds"
            )
        );
        assert!(mapping.switches().is_empty() && store.keys("").is_empty());
    }

    #[tokio::test]
    async fn a_resume_enables_then_records_and_ends_the_pause_on_record() {
        // GIVEN a consumer paused by hand
        let (mapping, store) = (MemoryMapping::new(UUID), MemoryStore::default());
        pause(&mapping, &store, &pause_request(Some("deploy"), T0))
            .await
            .unwrap();
        // WHEN an operator resumes it, the breaker's alarms OK
        let report = resume(
            &mapping,
            &store,
            in_alarm(&[]),
            &resume_request(false, T0 + 5_000),
        )
        .await
        .unwrap();
        // THEN it was enabled, and the record says resumed by the operator, of the pause since T0
        assert_eq!(mapping.switches(), [false, true]);
        assert_eq!(report.now, MappingState::Enabled);
        let r = latest(&store).await;
        assert_eq!(
            (r.state, r.by, r.at, r.since, r.forced),
            (
                PauseState::Resumed,
                PausedBy::Operator,
                T0 + 5_000,
                Some(T0),
                false
            )
        );
        assert_eq!(r.who.as_deref(), Some("arn:aws:iam::123456789012:user/bob"));
        assert!(r.alarms.is_empty());
        assert_eq!(report.record.as_ref().map(|(r, _)| r), Some(&r));
        // AND a consumer running with no pause on record is left alone, said so (not refused,
        // whatever the alarms say: there is nothing to resume)
        let again = resume(
            &mapping,
            &store,
            in_alarm(&["resq-downstream-failing"]),
            &resume_request(false, T0 + 9_000),
        )
        .await
        .unwrap();
        assert_eq!(again.record, None);
        assert_eq!(mapping.switches(), [false, true]);
        assert_eq!(latest(&store).await, r);
    }

    #[tokio::test]
    async fn a_resume_is_refused_while_a_breaker_alarm_is_in_alarm_unless_forced() {
        // GIVEN a consumer resq paused, its alarm still in ALARM
        let (mapping, store) = (MemoryMapping::new(UUID), MemoryStore::default());
        resq::state::record_pause(&store, &record(PauseState::Paused, PausedBy::Resq, T0))
            .await
            .unwrap();
        mapping.set_state(MappingState::Disabled);
        // WHEN an operator resumes it
        let err = resume(
            &mapping,
            &store,
            in_alarm(&["resq-downstream-failing"]),
            &resume_request(false, T0 + 1),
        )
        .await
        .unwrap_err();
        // THEN it is refused, naming the alarm, and nothing changed
        assert_eq!(err.exit_code(), 1);
        assert!(
            err.to_string().starts_with(
                "not resumed: the consumer breaker's alarm resq-downstream-failing is in ALARM"
            ),
            "{err}"
        );
        assert!(mapping.switches().is_empty());
        assert_eq!(latest(&store).await.by, PausedBy::Resq);
        // AND with --force it resumes, the record saying forced past which alarm
        let report = resume(
            &mapping,
            &store,
            in_alarm(&["resq-downstream-failing"]),
            &resume_request(true, T0 + 2),
        )
        .await
        .unwrap();
        assert_eq!(mapping.switches(), [true]);
        let r = latest(&store).await;
        assert_eq!(
            (r.state, r.by, r.forced),
            (PauseState::Resumed, PausedBy::Operator, true)
        );
        assert_eq!(r.alarms, ["resq-downstream-failing"]);
        assert_eq!(r.since, Some(T0), "the pause it ended");
        assert_eq!(report.alarms_unread, None);
    }

    #[tokio::test]
    async fn alarms_that_cannot_be_read_refuse_a_resume_unless_forced() {
        let (mapping, store) = (MemoryMapping::new(UUID), MemoryStore::default());
        mapping.set_state(MappingState::Disabled);
        let unreadable = || {
            Err(CliError::Aws {
                what: "reading the consumer breaker's alarms".into(),
                source: AwsError::service("AccessDenied", "not authorized"),
            })
        };
        let err = resume(&mapping, &store, unreadable(), &resume_request(false, T0))
            .await
            .unwrap_err();
        assert!(matches!(err, CliError::Aws { .. }), "{err}");
        assert!(mapping.switches().is_empty());
        let report = resume(&mapping, &store, unreadable(), &resume_request(true, T0))
            .await
            .unwrap();
        assert_eq!(mapping.switches(), [true]);
        assert!(
            report
                .alarms_unread
                .as_deref()
                .is_some_and(|w| w.contains("not authorized"))
        );
        let r = latest(&store).await;
        assert!(r.forced && r.alarms.is_empty(), "{r:?}");
        // a mapping disabled outside resq (no record) is resumed without a pause to end
        assert_eq!(r.since, None);
    }

    /// A mapping the caller may read but not switch (IAM without
    /// `lambda:UpdateEventSourceMapping`).
    struct ReadOnly(MemoryMapping);

    impl EventSourceMappings for ReadOnly {
        async fn get(&self, uuid: &str) -> Result<Mapping, AwsError> {
            self.0.get(uuid).await
        }

        async fn set_enabled(&self, uuid: &str, _: bool) -> Result<Mapping, AwsError> {
            Err(AwsError::service(
                "AccessDeniedException",
                format!(
                    "User: arn:aws:sts::123456789012:assumed-role/ops/alice is not authorized to perform: lambda:UpdateEventSourceMapping on resource: arn:aws:lambda:us-east-1:123456789012:event-source-mapping:{uuid} because no identity-based policy allows the lambda:UpdateEventSourceMapping action"
                ),
            ))
        }
    }

    #[tokio::test]
    async fn a_switch_refused_says_which_permission_and_what_is_recorded() {
        // GIVEN an operator who may not switch the mapping
        let (mapping, store) = (ReadOnly(MemoryMapping::new(UUID)), MemoryStore::default());
        // WHEN they pause it
        let err = pause(&mapping, &store, &pause_request(None, T0))
            .await
            .unwrap_err();
        // THEN the error says the pause is recorded, the mapping still enabled, and the action
        // their identity lacks
        let said = crate::render::error(&err, None);
        assert!(
            said.starts_with(&format!(
                "resq: disabling the event source mapping {UUID} (the pause is recorded in s3://b/state/consumer/{UUID}/"
            )) && said.contains("but the mapping is still Enabled: run `resq consumer pause` again)"),
            "{said}"
        );
        assert!(
            said.contains(&format!(
                "\nresq: your AWS identity may not call lambda:UpdateEventSourceMapping on arn:aws:lambda:us-east-1:123456789012:event-source-mapping:{UUID}"
            )),
            "{said}"
        );
        assert_eq!(latest(&store).await.by, PausedBy::Operator);
        // AND a resume refused is said the same way, nothing recorded
        mapping.0.set_state(MappingState::Disabled);
        let err = resume(
            &mapping,
            &store,
            in_alarm(&[]),
            &resume_request(false, T0 + 1),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "enabling the event source mapping {UUID} (nothing was recorded; it is still Disabled)"
            )),
            "{err}"
        );
        assert_eq!(latest(&store).await.state, PauseState::Paused);
    }

    #[tokio::test]
    async fn a_pause_log_that_cannot_be_read_is_reported_not_taken_for_no_pause() {
        let (mapping, store) = (MemoryMapping::new(UUID), MemoryStore::default());
        store
            .put_if_absent(
                &resq::state::entry_key(&resq::state::pause_prefix(UUID), T0),
                b"not json".to_vec(),
            )
            .await
            .unwrap();
        let status = read(&mapping, &store, Some(UUID), "b").await;
        let err = status.failure().expect("a failure");
        assert_eq!(err.exit_code(), 1);
        assert!(
            err.to_string().starts_with(&format!(
                "reading the consumer's pause record in s3://b/state/consumer/{UUID}/: state/consumer/{UUID}/"
            )) && err.to_string().contains("is not a state entry resq can read"),
            "{err}"
        );
        // AND a pause still goes on (the operator's record supersedes it), saying so
        let report = pause(&mapping, &store, &pause_request(None, T0 + 1))
            .await
            .unwrap();
        assert!(report.previous.is_err());
        assert_eq!(mapping.switches(), [false]);
        assert_eq!(latest(&store).await.by, PausedBy::Operator);
        // AND an unreadable mapping is said so
        mapping.set_failing(true);
        let status = read(&mapping, &store, Some(UUID), "b").await;
        assert!(
            status
                .failure()
                .is_some_and(|e| e.to_string().starts_with(&format!(
                    "reading the event source mapping {UUID}: injected Lambda failure"
                ))),
            "{status:?}"
        );
        assert_eq!(
            read(&mapping, &store, None, "b").await,
            ConsumerStatus::NotConfigured
        );
    }
}
