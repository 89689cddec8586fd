//! Doubles for the redriver's unit tests: alarms whose states a test sets.

use std::sync::Mutex;
use std::time::Duration;

use crate::ports::{AlarmState, Alarms, PortError};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Alarm states a test sets. An alarm not set does not exist.
#[derive(Debug)]
pub struct FixedAlarms {
    state: Mutex<Result<Vec<AlarmState>, PortError>>,
    reads: Mutex<u64>,
}

impl Default for FixedAlarms {
    fn default() -> Self {
        Self {
            state: Mutex::new(Ok(Vec::new())),
            reads: Mutex::default(),
        }
    }
}

impl FixedAlarms {
    /// Sets one alarm: in `ALARM` or not (then it left `ALARM`), its last change `changed_ago`
    /// before now, its threshold per 60 s period, held 15 periods.
    pub fn set(&self, name: &str, in_alarm: bool, changed_ago: Duration, threshold: f64) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let state = AlarmState {
            name: name.to_owned(),
            in_alarm,
            changed_at_ms: Some(now.saturating_sub(changed_ago).as_millis() as u64),
            period: Some(Duration::from_secs(60)),
            evaluation_periods: Some(15),
            threshold: Some(threshold),
            left_alarm: Some(!in_alarm),
        };
        let mut all = lock(&self.state);
        let mut list = all.as_ref().cloned().unwrap_or_default();
        list.retain(|s| s.name != name);
        list.push(state);
        *all = Ok(list);
    }

    /// Makes the states unreadable: every read fails with `e`.
    pub fn fail(&self, e: PortError) {
        *lock(&self.state) = Err(e);
    }

    /// How often the states were read.
    pub fn reads(&self) -> u64 {
        *lock(&self.reads)
    }
}

impl Alarms for FixedAlarms {
    async fn states(&self, names: &[String]) -> Result<Vec<AlarmState>, PortError> {
        *lock(&self.reads) += 1;
        lock(&self.state).clone().map(|all| {
            all.into_iter()
                .filter(|s| names.contains(&s.name))
                .collect()
        })
    }
}
