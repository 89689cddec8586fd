//! Fair replay (docs/tenants.md): a run holds up to [`MAX_CANDIDATES`] replay candidates of a
//! standard DLQ ahead of its budget and deals them out round-robin by `MessageGroupId` (a fair
//! queue's tenant; messages without a group form one group), so one tenant's backlog cannot
//! take the budget from another tenant's dead letters the run received. No I/O here.
//!
//! A FIFO DLQ needs no pool: SQS hands out a group's next messages only once its last ones are
//! settled, so a run's receives already take turns between groups, batch by batch, and a
//! group's order is kept by its lane.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};

use resq::sqs::ReceivedMessage;

/// Replay candidates a run holds ahead at most (within its in-flight room).
pub const MAX_CANDIDATES: usize = 1_000;
/// Their bytes at most (bodies and attributes, as SQS counts them): 1,000 messages of up to
/// 1 MiB would not fit the redriver's 256 MB.
pub const MAX_CANDIDATE_BYTES: usize = 64 << 20;
/// The groups a run counts as served at most (`groupsServed` is then a lower bound): a
/// producer that gives every message its own group must not grow the run's memory.
pub const MAX_SERVED_COUNTED: usize = 100_000;

/// The replay candidates a run holds, by group, and whose turn is next.
#[derive(Debug, Default)]
pub struct Candidates {
    /// Each group's candidates, in the order received.
    by_group: HashMap<Option<String>, VecDeque<ReceivedMessage>>,
    /// The groups with candidates, in turn order.
    turns: VecDeque<Option<String>>,
    len: usize,
    bytes: usize,
}

impl Candidates {
    /// How many are held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `max` are held, or [`MAX_CANDIDATE_BYTES`].
    pub fn full(&self, max: usize) -> bool {
        self.len >= max || self.bytes >= MAX_CANDIDATE_BYTES
    }

    /// Holds `m`; when it is held already (a standard queue may hand a message out twice), its
    /// newer receipt handle replaces the older one (SQS deletes by the newest), and it is not
    /// held twice.
    pub fn push(&mut self, m: ReceivedMessage) {
        let group = m.group_id().map(str::to_owned);
        let queue = self.by_group.entry(group.clone()).or_default();
        if let Some(held) = queue.iter_mut().find(|h| h.message_id == m.message_id) {
            held.receipt_handle = m.receipt_handle;
            return;
        }
        if queue.is_empty() {
            self.turns.push_back(group);
        }
        self.bytes += size(&m);
        queue.push_back(m);
        self.len += 1;
    }

    /// Up to `n` candidates, one group at a time in turn, the oldest of each group first.
    pub fn deal(&mut self, n: usize) -> Vec<ReceivedMessage> {
        let mut dealt = Vec::with_capacity(n.min(self.len));
        while dealt.len() < n {
            let Some(group) = self.turns.pop_front() else {
                break;
            };
            let queue = self
                .by_group
                .get_mut(&group)
                .expect("a group in turn holds some");
            dealt.extend(queue.pop_front());
            match queue.is_empty() {
                true => _ = self.by_group.remove(&group),
                false => self.turns.push_back(group),
            }
        }
        self.len -= dealt.len();
        self.bytes -= dealt.iter().map(size).sum::<usize>();
        dealt
    }

    /// All that is held, in turn order: what a run does not replay (released, not archived).
    pub fn drain(&mut self) -> Vec<ReceivedMessage> {
        self.deal(self.len)
    }
}

/// A message's size as SQS counts it.
fn size(m: &ReceivedMessage) -> usize {
    resq::attributes::message_size(&m.body, &m.message_attributes)
}

/// The groups a run served (replayed at least one message of), counted by a hash of each, up
/// to [`MAX_SERVED_COUNTED`].
#[derive(Debug, Default)]
pub struct Served(HashSet<u64>);

impl Served {
    /// Notes a replay of `m`.
    pub fn note(&mut self, m: &ReceivedMessage) {
        let mut h = DefaultHasher::new();
        m.group_id().hash(&mut h);
        if self.0.len() < MAX_SERVED_COUNTED {
            self.0.insert(h.finish());
        }
    }

    /// How many groups were served.
    pub fn count(&self) -> u64 {
        self.0.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::dlq_message;

    fn of(group: Option<&str>, id: &str) -> ReceivedMessage {
        let mut m = dlq_message(id, 1_800_000_000_000, &[]);
        match group {
            Some(g) => _ = m.attributes.insert("MessageGroupId".into(), g.into()),
            None => _ = m.attributes.remove("MessageGroupId"),
        }
        m
    }

    fn ids(dealt: &[ReceivedMessage]) -> Vec<&str> {
        dealt.iter().map(|m| m.message_id.as_str()).collect()
    }

    #[test]
    fn a_quiet_group_behind_a_backlog_gets_every_other_turn() {
        // GIVEN 600 of tenant A received before 30 of tenant B
        let mut c = Candidates::default();
        (0..600).for_each(|i| c.push(of(Some("A"), &format!("a{i}"))));
        (0..30).for_each(|i| c.push(of(Some("B"), &format!("b{i}"))));
        assert_eq!(c.len(), 630);
        // WHEN a budget of 60 is dealt, ten at a time
        let dealt: Vec<ReceivedMessage> = (0..6).flat_map(|_| c.deal(10)).collect();
        // THEN all 30 of B and the oldest 30 of A, taking turns, each group in its own order
        let b: Vec<&str> = ids(&dealt)
            .into_iter()
            .filter(|i| i.starts_with('b'))
            .collect();
        let a: Vec<&str> = ids(&dealt)
            .into_iter()
            .filter(|i| i.starts_with('a'))
            .collect();
        assert_eq!(b, (0..30).map(|i| format!("b{i}")).collect::<Vec<_>>());
        assert_eq!(a, (0..30).map(|i| format!("a{i}")).collect::<Vec<_>>());
        assert_eq!(ids(&dealt[..4]), ["a0", "b0", "a1", "b1"]);
        // AND the other 570 of A are still held, for the run to release
        assert_eq!(c.len(), 570);
        assert_eq!(c.drain().len(), 570);
        assert!(c.is_empty() && c.deal(10).is_empty());
    }

    #[test]
    fn messages_without_a_group_are_one_group() {
        let mut c = Candidates::default();
        (0..5).for_each(|i| c.push(of(None, &format!("n{i}"))));
        c.push(of(Some("B"), "b0"));
        assert_eq!(ids(&c.deal(4)), ["n0", "b0", "n1", "n2"]);
    }

    #[test]
    fn a_message_received_twice_is_held_once_with_its_newest_receipt() {
        let mut c = Candidates::default();
        c.push(of(Some("A"), "a0"));
        let mut again = of(Some("A"), "a0");
        again.receipt_handle = "newer".into();
        c.push(again);
        assert_eq!(c.len(), 1);
        assert_eq!(c.deal(10)[0].receipt_handle, "newer");
    }

    #[test]
    fn large_candidates_fill_the_pool_by_their_bytes() {
        let mut c = Candidates::default();
        let mut big = of(Some("A"), "big");
        big.body = "x".repeat(900 << 10);
        let per = size(&big);
        let fits = MAX_CANDIDATE_BYTES.div_ceil(per);
        for i in 0..fits {
            assert!(!c.full(MAX_CANDIDATES), "{i} of {per} bytes");
            let mut m = big.clone();
            m.message_id = format!("big{i}");
            c.push(m);
        }
        assert!(c.full(MAX_CANDIDATES) && c.len() < MAX_CANDIDATES);
        c.deal(1);
        assert!(!c.full(MAX_CANDIDATES), "dealt: room again");
    }

    #[test]
    fn served_counts_groups_not_messages() {
        let mut s = Served::default();
        for m in [
            of(Some("A"), "1"),
            of(Some("A"), "2"),
            of(None, "3"),
            of(Some("B"), "4"),
        ] {
            s.note(&m);
        }
        assert_eq!(s.count(), 3);
    }
}
