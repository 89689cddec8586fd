//! The state log over an object store: newest entry first, write-once, unreadable is an error.

use resq::state::{self, PauseRecord, PauseState, PausedBy};
use resq::store::ObjectStore;
use resq_testing::MemoryStore;

#[tokio::test]
async fn the_newest_entry_is_the_current_state_and_a_clash_takes_the_next_millisecond() {
    let store = MemoryStore::default();
    assert_eq!(state::current_pause(&store, "m-1").await.unwrap(), None);
    let paused = PauseRecord::new("m-1", PauseState::Paused, PausedBy::Resq, 1_000);
    let resumed = PauseRecord::new("m-1", PauseState::Resumed, PausedBy::Resq, 2_000);
    state::record_pause(&store, &paused).await.unwrap();
    state::record_pause(&store, &resumed).await.unwrap();
    assert_eq!(
        state::current_pause(&store, "m-1").await.unwrap(),
        Some(resumed.clone())
    );
    // another mapping's log is its own
    assert_eq!(state::current_pause(&store, "m-2").await.unwrap(), None);
    // two entries in one millisecond: both kept, neither overwritten
    let again = PauseRecord::new("m-1", PauseState::Paused, PausedBy::Operator, 2_000);
    let key = state::record_pause(&store, &again).await.unwrap();
    assert_eq!(key, state::entry_key(&state::pause_prefix("m-1"), 2_001));
    assert_eq!(store.list("state/consumer/m-1/").await.unwrap().len(), 3);
    assert_eq!(
        state::current_pause(&store, "m-1").await.unwrap(),
        Some(again)
    );
}

#[tokio::test]
async fn an_entry_resq_cannot_read_is_an_error_not_no_state() {
    let store = MemoryStore::default();
    let key = state::entry_key(&state::pause_prefix("m-1"), 5);
    store
        .put_if_absent(&key, b"not json".to_vec())
        .await
        .unwrap();
    let err = state::current_pause(&store, "m-1").await.unwrap_err();
    assert!(err.to_string().contains("not a state entry"), "{err}");
    store.set_failing(true);
    assert!(state::current_pause(&store, "m-1").await.is_err());
}

#[tokio::test]
async fn the_entry_written_last_is_current_whatever_the_writers_clocks_say() {
    // GIVEN an operator's resume stamped by a laptop a minute ahead of Lambda's clock
    let store = MemoryStore::default();
    let resumed = PauseRecord::new("m-1", PauseState::Resumed, PausedBy::Operator, 61_000);
    state::record_pause(&store, &resumed).await.unwrap();
    // WHEN the breaker pauses the consumer 5 s later by Lambda's clock (stamped 6 s)
    let paused = PauseRecord::new("m-1", PauseState::Paused, PausedBy::Resq, 6_000);
    let key = state::record_pause(&store, &paused).await.unwrap();
    // THEN its entry sorts first: the pause is the current state, and the breaker owns it
    assert_eq!(key, state::entry_key(&state::pause_prefix("m-1"), 61_001));
    assert_eq!(
        state::current_pause(&store, "m-1").await.unwrap(),
        Some(paused)
    );
}
