//! Where orders are: one look over the order records, the main queue, the DLQ, the keep lists
//! and the archive. `resq find` looks for one order ([`Wanted::Orders`]); the demo's, the
//! chaos run's and the soak's final audit for all of them at once ([`Wanted::All`]); a canary
//! replay follows its copies with it. Each source is read once per look, whatever the number
//! of orders wanted: the records by one version listing (of the whole `orders/` prefix, or of
//! each order's own key), the archive by one listing and one read per entry, each queue by one
//! pass of receives.
//!
//! Looking into a queue means receiving its messages (SQS has no peek). What that costs, and
//! how the look keeps it small:
//! - each message received has its `ApproximateReceiveCount` raised by one. In the main queue
//!   that counts toward `maxReceiveCount`: a message the look receives on its last allowed
//!   receive is moved to the DLQ by SQS, without a reason, on its next receive (the look counts
//!   those, [`QueueCoverage::last_receive_used`]). The DLQ has no redrive policy: there the
//!   count decides nothing (an archive entry's `receiveCount` includes it);
//! - a message received is hidden from its consumer until the look releases it: every message
//!   is released at once when the look of its queue ends (visibility 0), and the receive's own
//!   visibility timeout ([`MAIN_QUEUE_VISIBILITY`], [`DLQ_VISIBILITY`]) bounds the hide should
//!   the release fail;
//! - the main queue is looked into only when asked (`resq find --main-queue`), up to a bound
//!   ([`QueueLook::limit`], `--main-queue-limit`; 0 skips it), and not at all when it has
//!   nothing visible; otherwise only its approximate counts are read
//!   ([`LookOptions::count_main_queue`], no receive);
//! - messages in flight (held by a consumer, backed off, or hidden by a redriver run) cannot be
//!   received: they are counted, not seen ([`QueueCoverage::in_flight`]);
//! - kept permanent failures (hidden in the DLQ by the redriver until their TTL) are found in
//!   the keep lists, never received: their hide stays as it was. Each one a look names is
//!   checked to be still hidden by setting its visibility timeout to the time it has left
//!   (the same deadline: nothing changes), which fails for a message that is no longer hidden.
//!
//! A message names its order by its business id ([`Identity`]: a message attribute, or the
//! body's field of the stack's correlation key, `orderId` for orders). One whose id cannot be
//! read (a body that is not JSON, such as a `MALFORMED_JSON` dead letter, or one without the
//! field) is still reported for an order looked for when its raw body holds that order's id
//! as a JSON string value ([`mentions`]), marked as matched by text; the others are counted
//! ([`QueueCoverage::order_unknown`], [`Coverage::archive_order_unknown`]), so that an order
//! not found while such messages exist is not said to be nowhere.
//!
//! A look can be narrowed to one `MessageGroupId` (a fair queue's tenant, a FIFO group:
//! [`LookOptions::group`], `resq find --group`): in the queues it then sees that group's
//! messages only. The messages of the orders wanted that other groups hold (or no group) are
//! counted by group ([`QueueCoverage::other_groups`]), so that an order looked for under the
//! wrong group is not said to be nowhere. Order records, keep lists and archive entries are not
//! narrowed.
//!
//! Everything here is I/O except the pure parts: [`Wanted`], [`Identity`], [`mentions`],
//! [`remaining_hide`], [`Look::of`] and [`Look::unseen`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use resq::archive::{ARCHIVE_PREFIX, ArchiveEnvelope};
use resq::attributes::{MessageAttributes, X_FAILURE_CLASS, X_FAILURE_REASON, X_REDRIVE_COUNT};
use resq::correlation::CorrelationKey;
use resq::keep::KeptMessage;
use resq::settle::{Action, Plan, QueueUrl};
use resq::sqs::{Queues, ReceivedMessage};
use resq::store::ObjectStore;
use serde::Serialize;

use crate::context::Context;
use crate::dlq::NO_GROUP;
use crate::{CliError, now_ms};

/// Where order records live: `orders/{orderId}.json`.
pub const RECORD_PREFIX: &str = "orders/";
/// How long a look hides the main queue's messages at most (they are released at once when
/// the look of the queue ends; this bounds the hide should the release fail).
pub const MAIN_QUEUE_VISIBILITY: i32 = 30;
/// How long a look hides the DLQ's messages at most.
pub const DLQ_VISIBILITY: i32 = 120;
/// The main queue's messages a look asked to look into it receives at most (`resq find
/// --main-queue`).
pub const DEFAULT_MAIN_QUEUE_LIMIT: usize = 100;
/// The DLQ's messages a look receives at most by default.
pub const DEFAULT_DLQ_LIMIT: usize = 10_000;
/// Archive entries read at once.
const READS_IN_FLIGHT: usize = 16;

/// Which orders a look is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// Every order, and every message, also those whose order is not known.
    All,
    /// These orders only.
    Orders(BTreeSet<String>),
}

impl Wanted {
    /// One order.
    pub fn one(order_id: &str) -> Self {
        Self::Orders(BTreeSet::from([order_id.to_owned()]))
    }

    /// Whether a message of order `id` (`None`: not known) is wanted.
    pub fn wants(&self, id: Option<&str>) -> bool {
        match self {
            Self::All => true,
            Self::Orders(ids) => id.is_some_and(|id| ids.contains(id)),
        }
    }
}

/// How a message names its order: by its business id, the body's top-level field of the
/// correlation key (`orderId` for orders; a team's type names its own, the stack's
/// `CorrelationField`), or first by a message attribute that carries it (the demo tags every
/// message, malformed ones too, with `demo-order-id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// A string message attribute holding the order id, tried before the body.
    pub attribute: Option<String>,
    /// The business id's body field (`orderId`).
    pub correlation: CorrelationKey,
}

impl Default for Identity {
    fn default() -> Self {
        Self {
            attribute: None,
            correlation: CorrelationKey::ORDERS,
        }
    }
}

/// Whose a message (or an archive entry) is, as far as a look can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whose {
    /// The order it names: its id was read (the attribute, or the body's field).
    Read(String),
    /// Its id could not be read, but its raw body holds this wanted order's id as a JSON
    /// string value: reported as that order's, matched by text.
    ByText(String),
    /// Its id could not be read, and it holds no wanted order's id.
    Unknown,
}

impl Whose {
    /// The order it is reported under (`None`: not known), and whether by text.
    pub fn order(self) -> (Option<String>, bool) {
        match self {
            Whose::Read(id) => (Some(id), false),
            Whose::ByText(id) => (Some(id), true),
            Whose::Unknown => (None, false),
        }
    }
}

impl Identity {
    /// The order a message belongs to, when it says.
    pub fn order_id(&self, body: &str, attributes: &MessageAttributes) -> Option<String> {
        self.attribute
            .as_deref()
            .and_then(|name| attributes.get(name))
            .and_then(|v| v.string_value.clone())
            .or_else(|| self.correlation.read(body))
    }

    /// Whose a message is, for a look at `wanted`: its order when its id can be read; else,
    /// looking for given orders, the first of them its body [`mentions`].
    pub fn whose(&self, wanted: &Wanted, body: &str, attributes: &MessageAttributes) -> Whose {
        if let Some(id) = self.order_id(body, attributes) {
            return Whose::Read(id);
        }
        match wanted {
            Wanted::All => Whose::Unknown,
            Wanted::Orders(ids) => ids
                .iter()
                .find(|id| mentions(body, id))
                .map_or(Whose::Unknown, |id| Whose::ByText(id.clone())),
        }
    }
}

/// Whether `body` holds `id` as a JSON string value (`"ORD-1"` after `:`, `[` or `,`, and not
/// followed by `:`, which would make it a key), read as text: the body need not be valid JSON
/// (a truncated `{"orderId":"ORD-1","items":[` holds it). An empty id is held by nothing.
pub fn mentions(body: &str, id: &str) -> bool {
    if id.is_empty() {
        return false;
    }
    let needle = serde_json::Value::from(id).to_string();
    body.match_indices(&needle).any(|(at, _)| {
        let before = body[..at].trim_end().chars().next_back();
        let after = body[at + needle.len()..].trim_start().chars().next();
        matches!(before, Some(':' | '[' | ',')) && after != Some(':')
    })
}

/// How far to look into one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLook {
    /// Receive at most this many messages (0: do not look).
    pub limit: usize,
    /// Hide each for at most this many seconds (released at once when the look ends).
    pub visibility: i32,
}

impl QueueLook {
    /// Not looked at.
    pub const SKIP: Self = Self {
        limit: 0,
        visibility: 0,
    };
}

/// What a look covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookOptions {
    /// The main queue.
    pub main_queue: QueueLook,
    /// When the main queue is not looked into, read its approximate counts (visible, in
    /// flight: `GetQueueAttributes`, no receive), if the context names it.
    pub count_main_queue: bool,
    /// The DLQ.
    pub dlq: QueueLook,
    /// Read the keep lists for kept messages (each named one checked to be still hidden).
    pub kept: bool,
    /// Read only the archive entries written since then (all when `None`).
    pub archive_since: Option<DateTime<Utc>>,
    /// How messages name their order.
    pub identity: Identity,
    /// In the queues, only the messages of this `MessageGroupId` (a tenant); all when `None`.
    pub group: Option<String>,
    /// `ReceiveMessage`'s wait: 1 s makes an empty answer mean empty on AWS (a short poll
    /// samples a few servers); 0 against an emulator.
    pub receive_wait: i32,
}

/// An order record (`orders/{orderId}.json`) and its writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    /// Its key.
    pub key: String,
    /// Stored versions: each is one write of the order's effect (the bucket is versioned).
    pub writes: usize,
    /// When each version was written, epoch millis, oldest first.
    pub written_at: Vec<u64>,
    /// The record is there now (its latest version is not a delete marker: the lifecycle has
    /// not expired it).
    pub current: bool,
}

/// A message seen in a queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Queued {
    /// Its id in the queue.
    pub message_id: String,
    /// `ApproximateReceiveCount`, this look's receive included.
    pub receive_count: Option<u32>,
    /// `x-redrive-count` as sent (absent: 0).
    pub redrive_count: Option<String>,
    /// `x-failure-class`.
    pub failure_class: Option<String>,
    /// `x-failure-reason`.
    pub failure_reason: Option<String>,
    /// `SentTimestamp` of this copy, epoch millis.
    pub sent_at: Option<u64>,
    /// The producer's send (`x-first-sent-at`, else `SentTimestamp`), epoch millis.
    pub first_sent_at: Option<u64>,
    /// Its `MessageGroupId` (a fair queue's tenant, a FIFO group), if any.
    pub group: Option<String>,
    /// Its order id could not be read: it was matched by its body's text holding the id.
    pub matched_by_text: bool,
}

impl Queued {
    fn of(m: &ReceivedMessage) -> Self {
        let attr = |n: &str| {
            m.message_attributes
                .get(n)
                .and_then(|v| v.string_value.clone())
        };
        let system = |n: &str| m.attributes.get(n).and_then(|v| v.trim().parse().ok());
        Self {
            message_id: m.message_id.clone(),
            receive_count: system("ApproximateReceiveCount").and_then(|n: u64| n.try_into().ok()),
            redrive_count: attr(X_REDRIVE_COUNT),
            failure_class: attr(X_FAILURE_CLASS),
            failure_reason: attr(X_FAILURE_REASON),
            sent_at: system("SentTimestamp"),
            first_sent_at: m.first_sent_at(),
            group: m.group_id().map(str::to_owned),
            matched_by_text: false,
        }
    }

    /// `x-redrive-count` read as a number (absent: 0; unreadable: `None`).
    pub fn redrives(&self) -> Option<u32> {
        match &self.redrive_count {
            None => Some(0),
            Some(raw) => raw.trim().parse().ok(),
        }
    }
}

/// A permanent failure the redriver kept and hid in the DLQ, found in a keep list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    /// Its id in the DLQ.
    pub message_id: String,
    /// Its `x-failure-reason`.
    pub failure_reason: Option<String>,
    /// When it becomes visible again by itself, epoch millis.
    pub hidden_until: u64,
}

/// An archive entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Archived {
    /// Its key.
    pub key: String,
    /// The archive reason.
    pub reason: String,
    /// Who archived it.
    pub archived_by: String,
    /// When (RFC 3339).
    pub archived_at: String,
    /// `x-redrive-count` when archived.
    pub redrive_count: Option<u32>,
    /// The last error seen.
    pub last_error: Option<String>,
    /// Operator restores recorded in it.
    pub restores: usize,
    /// When its latest version was written (S3's `LastModified`), epoch millis.
    pub written_at: Option<u64>,
    /// Its order id could not be read: it was matched by its body's text holding the id.
    pub matched_by_text: bool,
}

/// Where a message or record of an order was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "place", rename_all = "camelCase")]
pub enum Place {
    /// Its order record: the order's effect was written.
    Recorded(Recorded),
    /// A copy waiting in the main queue.
    MainQueue(Queued),
    /// A copy in the DLQ.
    Dlq(Queued),
    /// A copy kept in the DLQ for a human, hidden by the redriver.
    Kept(Kept),
    /// An archive entry.
    Archived(Archived),
}

/// One place an order (or a message of unknown order) was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sighting {
    /// The order, when the message names it.
    pub order_id: Option<String>,
    /// Where.
    #[serde(flatten)]
    pub place: Place,
}

/// How far a look into one queue reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueCoverage {
    /// It was looked into (not skipped).
    pub looked: bool,
    /// Not looked into, but its approximate counts were read (`visible_before`, `in_flight`),
    /// without receiving anything.
    pub counted: bool,
    /// Messages received (each once).
    pub received: usize,
    /// The look stopped at its limit: there may be more.
    pub limit_reached: bool,
    /// Messages in flight when the look ended (being processed, backed off, hidden by a run,
    /// or kept): they could not be received.
    pub in_flight: u64,
    /// Messages visible when the look started.
    pub visible_before: u64,
    /// The queue's `maxReceiveCount` (main queue).
    pub max_receive_count: Option<u32>,
    /// Messages this look received on their last allowed receive: SQS moves them to the DLQ,
    /// without a reason, on their next receive.
    pub last_receive_used: usize,
    /// Seconds each message was hidden at most (released at once after the look).
    pub hidden_for_seconds: i32,
    /// Messages whose release failed: they come back by themselves after
    /// `hidden_for_seconds`.
    pub not_released: usize,
    /// Messages received whose order id could not be read (a body that is not JSON, or
    /// without the field), matched by text or not.
    pub order_unknown: usize,
    /// Of those, matched by text to an order looked for.
    pub matched_by_text: usize,
    /// Narrowed to a group: messages of the orders looked for that another group holds, left
    /// out, by group ([`NO_GROUP`] for those without one).
    pub other_groups: BTreeMap<String, usize>,
}

/// How far a look reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Coverage {
    /// The main queue.
    pub main_queue: QueueCoverage,
    /// The DLQ.
    pub dlq: QueueCoverage,
    /// The keep lists were read.
    pub kept_read: bool,
    /// Kept messages the keep lists say are still hidden.
    pub kept_listed: usize,
    /// Of those, listed without an order id (by a redriver that did not record it): their
    /// order is not known without making them visible (`resq dlq peek --kept`).
    pub kept_unknown_order: usize,
    /// Listed as kept, but no longer hidden (made visible, replayed or archived since).
    pub kept_not_hidden: usize,
    /// Archive entries read.
    pub archive_read: usize,
    /// Objects under `archive/` that are not archive entries.
    pub archive_unreadable: usize,
    /// Archive entries read whose order id could not be read, matched by text or not.
    pub archive_order_unknown: usize,
    /// Of those, matched by text to an order looked for.
    pub archive_matched_by_text: usize,
    /// Archive entries not read: written before `--archive-since`.
    pub archive_not_read: usize,
    /// The body field an order id is read from (`orderId`).
    pub id_field: String,
    /// The `MessageGroupId` the look into the queues was narrowed to, if any.
    pub group: Option<String>,
}

/// What a look saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Look {
    /// Every place seen, of the orders wanted (with [`Wanted::All`], also messages whose order
    /// is not known).
    pub sightings: Vec<Sighting>,
    /// How far it reached.
    pub coverage: Coverage,
}

impl Look {
    /// A look that saw `places`, each of order `order_id` (for tests).
    #[cfg(test)]
    pub(crate) fn of_one(order_id: &str, places: &[Place]) -> Self {
        let sightings = places.iter().map(|place| Sighting {
            order_id: Some(order_id.to_owned()),
            place: place.clone(),
        });
        Self {
            sightings: sightings.collect(),
            ..Self::default()
        }
    }

    /// The places of order `id`.
    pub fn of<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Place> + 'a {
        self.sightings
            .iter()
            .filter(move |s| s.order_id.as_deref() == Some(id))
            .map(|s| &s.place)
    }

    /// What the look could not see, in words (empty: it saw everything there was).
    pub fn unseen(&self) -> Vec<String> {
        let mut out = self.coverage.queues_unseen();
        out.extend(self.coverage.orders_unseen());
        out
    }
}

impl Coverage {
    /// What the look could not see of the queues: those not looked into or past its limit,
    /// and their messages in flight.
    fn queues_unseen(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, q) in [("main queue", &self.main_queue), ("DLQ", &self.dlq)] {
            if q.counted {
                // not looked into, but counted: an empty queue holds no copy of anything
                if q.visible_before + q.in_flight > 0 {
                    out.push(format!(
                        "the {name} was not looked into: it holds about {} visible and {} in flight (`resq find --main-queue` receives up to {} of the visible ones; each receive raises a message's ApproximateReceiveCount toward maxReceiveCount)",
                        q.visible_before,
                        q.in_flight,
                        DEFAULT_MAIN_QUEUE_LIMIT
                    ));
                }
                continue;
            }
            if !q.looked {
                out.push(format!("the {name} was not looked into"));
                continue;
            }
            if q.limit_reached {
                out.push(format!(
                    "the {name} holds more than the {} messages looked at",
                    q.received
                ));
            }
        }
        let main_in_flight = self.main_queue.in_flight;
        if self.main_queue.looked && main_in_flight > 0 {
            out.push(format!(
                "{main_in_flight} messages in flight in the main queue (being processed or backed off) cannot be received"
            ));
        }
        // the DLQ's in-flight messages the keep lists account for are not unseen
        let kept = if self.kept_read {
            self.kept_listed as u64
        } else {
            0
        };
        let dlq_in_flight = self.dlq.in_flight.saturating_sub(kept);
        if self.dlq.looked && dlq_in_flight > 0 {
            out.push(format!(
                "{dlq_in_flight} messages in flight in the DLQ (held by a redriver run, or kept) cannot be received"
            ));
        }
        for (name, q) in [("main-queue", &self.main_queue), ("DLQ", &self.dlq)] {
            if q.other_groups.is_empty() {
                continue;
            }
            let mut groups: Vec<(&String, &usize)> = q.other_groups.iter().collect();
            groups.sort_by_key(|&(group, n)| (std::cmp::Reverse(*n), group == NO_GROUP));
            let by_group: Vec<String> = groups
                .iter()
                .map(|(group, n)| format!("{group} {n}"))
                .collect();
            out.push(format!(
                "{} {name} messages of the order are of other groups, left out by --group {}: {}",
                q.other_groups.values().sum::<usize>(),
                self.group.as_deref().unwrap_or_default(),
                by_group.join(", ")
            ));
        }
        out
    }

    /// What the look could not see of the orders: kept messages listed without theirs,
    /// messages and entries whose order could not be read, archive entries not read.
    fn orders_unseen(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.kept_unknown_order > 0 {
            out.push(format!(
                "{} kept messages are listed without their order (`resq dlq peek --kept` shows them)",
                self.kept_unknown_order
            ));
        }
        let field = if self.id_field.is_empty() {
            "its order id field"
        } else {
            self.id_field.as_str()
        };
        for (what, unknown, by_text) in [
            (
                "main-queue messages",
                self.main_queue.order_unknown,
                self.main_queue.matched_by_text,
            ),
            (
                "DLQ messages",
                self.dlq.order_unknown,
                self.dlq.matched_by_text,
            ),
            (
                "archive entries",
                self.archive_order_unknown,
                self.archive_matched_by_text,
            ),
        ] {
            let n = unknown.saturating_sub(by_text);
            if n > 0 {
                out.push(format!(
                    "{n} {what} name no order that could be read (a body that is not JSON, or without `{field}`) and do not hold the order's id as text"
                ));
            }
        }
        if self.archive_unreadable > 0 {
            out.push(format!(
                "{} objects under archive/ are not archive entries that could be read",
                self.archive_unreadable
            ));
        }
        if self.archive_not_read > 0 {
            out.push(format!(
                "{} archive entries written before --archive-since were not read",
                self.archive_not_read
            ));
        }
        out
    }
}

/// The visibility timeout that keeps a kept message hidden until `hidden_until` (epoch millis)
/// as it is, from `now_ms`: the seconds it has left, rounded up, within SQS's 12 h; `None`
/// when its hide is over.
pub fn remaining_hide(hidden_until: u64, now_ms: u64) -> Option<i32> {
    let left = hidden_until.checked_sub(now_ms).filter(|&ms| ms > 0)?;
    let secs = left.div_ceil(1000);
    Some(secs.min(resq::sqs::MAX_VISIBILITY_TIMEOUT.as_secs()) as i32)
}

fn aws(what: String) -> impl FnOnce(resq::error::AwsError) -> CliError {
    move |source| CliError::Aws { what, source }
}

/// Looks for the orders `wanted` as `options` say (see the module's notes for what a look
/// costs). The context must name the main queue when it is looked into, the DLQ when it or the
/// keep lists are, and the bucket.
pub async fn locate(
    ctx: &Context,
    wanted: &Wanted,
    options: &LookOptions,
) -> Result<Look, CliError> {
    let bucket = ctx.archive_bucket()?.to_owned();
    let main_url = match options.main_queue.limit {
        0 => None,
        _ => Some(ctx.main_queue()?.to_owned()),
    };
    let dlq_url = match (options.dlq.limit, options.kept) {
        (0, false) => None,
        _ => Some(ctx.dlq()?.to_owned()),
    };
    let mut look = Look::default();
    look.coverage.id_field = options.identity.correlation.body_field().to_owned();
    look.coverage.group = options.group.clone();
    records(ctx, &bucket, wanted, &mut look).await?;
    archive(ctx, wanted, options, &mut look).await?;
    if let Some(url) = &main_url {
        let limits = resq::sqs::read_limits(&ctx.sqs, url)
            .await
            .map_err(aws(format!("reading the redrive policy of {url}")))?;
        let cover = &mut look.coverage.main_queue;
        cover.max_receive_count = limits.max_receive_count;
        let seen = scan(ctx, url, options.main_queue, options.receive_wait, cover).await?;
        for m in &seen {
            let q = Queued::of(m);
            if let (Some(n), Some(max)) = (q.receive_count, limits.max_receive_count)
                && n >= max
            {
                look.coverage.main_queue.last_receive_used += 1;
            }
            sight(&mut look, wanted, options, m, q, Place::MainQueue, |c| {
                &mut c.main_queue
            });
        }
    } else if options.count_main_queue
        && let Ok(url) = ctx.main_queue()
    {
        // not looked into: its counts say whether it holds anything, without a receive
        let (visible, in_flight) = crate::status::depth(&ctx.sqs, url)
            .await
            .map_err(aws(format!("reading {url}")))?;
        let cover = &mut look.coverage.main_queue;
        (cover.counted, cover.visible_before, cover.in_flight) = (true, visible, in_flight);
    }
    let mut seen_in_dlq = HashSet::new();
    if let Some(url) = &dlq_url {
        let cover = &mut look.coverage.dlq;
        let seen = scan(ctx, url, options.dlq, options.receive_wait, cover).await?;
        for m in &seen {
            seen_in_dlq.insert(m.message_id.clone());
            sight(
                &mut look,
                wanted,
                options,
                m,
                Queued::of(m),
                Place::Dlq,
                |c| &mut c.dlq,
            );
        }
    }
    if options.kept
        && let Some(url) = &dlq_url
    {
        kept(ctx, url, wanted, &seen_in_dlq, &mut look).await?;
    }
    Ok(look)
}

/// Notes a message received from a queue (`place` and `cover` say which): a sighting when it
/// is of an order wanted (by its id, or by text), and counted when its order is not known. In
/// a look narrowed to a group, a message of another group (or of none) is only counted, by its
/// group, when it is of an order wanted ([`other_group`]).
fn sight(
    look: &mut Look,
    wanted: &Wanted,
    options: &LookOptions,
    m: &ReceivedMessage,
    mut q: Queued,
    place: fn(Queued) -> Place,
    cover: fn(&mut Coverage) -> &mut QueueCoverage,
) {
    let (order_id, by_text) = options
        .identity
        .whose(wanted, &m.body, &m.message_attributes)
        .order();
    if let Some(group) = other_group(options.group.as_deref(), m.group_id()) {
        if wanted.wants(order_id.as_deref()) {
            let c = cover(&mut look.coverage);
            *c.other_groups.entry(group.to_owned()).or_default() += 1;
        }
        return;
    }
    if order_id.is_none() || by_text {
        let c = cover(&mut look.coverage);
        c.order_unknown += 1;
        c.matched_by_text += usize::from(by_text);
    }
    if wanted.wants(order_id.as_deref()) {
        q.matched_by_text = by_text;
        look.sightings.push(Sighting {
            order_id,
            place: place(q),
        });
    }
}

/// In a look narrowed to group `wanted`, the group of a message of group `group` that is not
/// `wanted` ([`NO_GROUP`] for a message without one); `None` when the message is looked at.
pub fn other_group<'a>(wanted: Option<&str>, group: Option<&'a str>) -> Option<&'a str> {
    match wanted {
        Some(w) if group != Some(w) => Some(group.unwrap_or(NO_GROUP)),
        _ => None,
    }
}

/// The order records and their versions: of the whole prefix for every order, else of each
/// order's own key.
async fn records(
    ctx: &Context,
    bucket: &str,
    wanted: &Wanted,
    look: &mut Look,
) -> Result<(), CliError> {
    let prefixes: Vec<String> = match wanted {
        Wanted::All => vec![RECORD_PREFIX.to_owned()],
        Wanted::Orders(ids) => ids
            .iter()
            .map(|id| format!("{RECORD_PREFIX}{id}.json"))
            .collect(),
    };
    let listed: Vec<Result<Vec<Version>, CliError>> = futures::stream::iter(prefixes)
        .map(|prefix| async move { versions(ctx, bucket, &prefix).await })
        .buffer_unordered(READS_IN_FLIGHT)
        .collect()
        .await;
    let mut by_key: BTreeMap<String, Vec<Version>> = BTreeMap::new();
    for versions in listed {
        for v in versions? {
            by_key.entry(v.key.clone()).or_default().push(v);
        }
    }
    for (key, versions) in by_key {
        let Some(id) = key
            .strip_prefix(RECORD_PREFIX)
            .and_then(|k| k.strip_suffix(".json"))
        else {
            continue;
        };
        if !wanted.wants(Some(id)) {
            continue;
        }
        let mut written_at: Vec<u64> = versions
            .iter()
            .filter(|v| !v.delete_marker)
            .filter_map(|v| v.modified_ms)
            .collect();
        written_at.sort_unstable();
        let writes = versions.iter().filter(|v| !v.delete_marker).count();
        if writes == 0 {
            continue;
        }
        let current = versions.iter().any(|v| v.latest && !v.delete_marker);
        look.sightings.push(Sighting {
            order_id: Some(id.to_owned()),
            place: Place::Recorded(Recorded {
                key,
                writes,
                written_at,
                current,
            }),
        });
    }
    Ok(())
}

/// One stored version (or delete marker) of a key.
struct Version {
    key: String,
    modified_ms: Option<u64>,
    latest: bool,
    delete_marker: bool,
}

fn millis(t: Option<&aws_sdk_s3::primitives::DateTime>) -> Option<u64> {
    t.and_then(|t| t.to_millis().ok())
        .and_then(|ms| u64::try_from(ms).ok())
}

/// Every version and delete marker under `prefix`.
async fn versions(ctx: &Context, bucket: &str, prefix: &str) -> Result<Vec<Version>, CliError> {
    let mut out = Vec::new();
    let (mut key_marker, mut version_marker) = (None, None);
    loop {
        let page = ctx
            .s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(prefix)
            .set_key_marker(key_marker)
            .set_version_id_marker(version_marker)
            .send()
            .await
            .map_err(|e| CliError::aws(format!("listing versions of s3://{bucket}/{prefix}"), e))?;
        out.extend(page.versions().iter().filter_map(|v| {
            Some(Version {
                key: v.key()?.to_owned(),
                modified_ms: millis(v.last_modified()),
                latest: v.is_latest() == Some(true),
                delete_marker: false,
            })
        }));
        out.extend(page.delete_markers().iter().filter_map(|d| {
            Some(Version {
                key: d.key()?.to_owned(),
                modified_ms: millis(d.last_modified()),
                latest: d.is_latest() == Some(true),
                delete_marker: true,
            })
        }));
        if page.is_truncated() != Some(true) {
            break;
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        version_marker = page.next_version_id_marker().map(str::to_owned);
    }
    Ok(out)
}

/// An archive object read: its key, when it was written, and the envelope (`None`: it is not
/// one).
type EntryRead = (String, Option<u64>, Option<ArchiveEnvelope>);

/// Every archive entry (written since `options.archive_since`), read [`READS_IN_FLIGHT`] at a
/// time.
async fn archive(
    ctx: &Context,
    wanted: &Wanted,
    options: &LookOptions,
    look: &mut Look,
) -> Result<(), CliError> {
    let since = options
        .archive_since
        .map(|t| t.timestamp_millis().max(0) as u64);
    let (keys, before): (Vec<(String, Option<u64>)>, Vec<_>) =
        crate::archive::list_objects(ctx, ARCHIVE_PREFIX)
            .await?
            .into_iter()
            .partition(|(_, modified)| since.is_none_or(|s| modified.is_none_or(|m| m >= s)));
    look.coverage.archive_not_read = before.len();
    let store = &ctx.store();
    // an entry gone between the listing and the read expired meanwhile
    let read: Vec<Result<Option<EntryRead>, CliError>> = futures::stream::iter(keys)
        .map(|(key, modified)| async move {
            let bytes = store.get(&key).await.map_err(CliError::Read)?;
            Ok(bytes.map(|b| {
                let envelope = serde_json::from_slice::<ArchiveEnvelope>(&b).ok();
                (key, modified, envelope)
            }))
        })
        .buffer_unordered(READS_IN_FLIGHT)
        .collect()
        .await;
    let mut entries = Vec::new();
    for r in read {
        if let Some(entry) = r? {
            entries.push(entry);
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, modified, envelope) in entries {
        let Some(e) = envelope else {
            look.coverage.archive_unreadable += 1;
            continue;
        };
        look.coverage.archive_read += 1;
        let original = &e.original_message;
        let (order_id, by_text) = options
            .identity
            .whose(wanted, &original.body, &original.message_attributes)
            .order();
        if order_id.is_none() || by_text {
            look.coverage.archive_order_unknown += 1;
            look.coverage.archive_matched_by_text += usize::from(by_text);
        }
        if !wanted.wants(order_id.as_deref()) {
            continue;
        }
        look.sightings.push(Sighting {
            order_id,
            place: Place::Archived(Archived {
                key,
                reason: e.metadata.reason,
                archived_by: e.metadata.archived_by,
                archived_at: e.metadata.archived_at,
                redrive_count: e.metadata.redrive_count,
                last_error: e.metadata.last_error,
                restores: e.metadata.restores.len(),
                written_at: modified,
                matched_by_text: by_text,
            }),
        });
    }
    Ok(())
}

/// Receives up to `how.limit` messages of `url`, each once, hidden for `how.visibility`
/// seconds, then releases them all; fills `cover`.
async fn scan(
    ctx: &Context,
    url: &str,
    how: QueueLook,
    wait: i32,
    cover: &mut QueueCoverage,
) -> Result<Vec<ReceivedMessage>, CliError> {
    if how.limit == 0 {
        return Ok(Vec::new());
    }
    cover.looked = true;
    cover.hidden_for_seconds = how.visibility;
    let (visible, _) = crate::status::depth(&ctx.sqs, url)
        .await
        .map_err(aws(format!("reading {url}")))?;
    cover.visible_before = visible;
    let mut seen: Vec<ReceivedMessage> = Vec::new();
    let mut ids = HashSet::new();
    let mut handles = Vec::new();
    // nothing visible: nothing to receive, and nothing is touched
    if visible > 0 {
        let received = loop {
            let want = (how.limit - seen.len()).min(resq::sqs::MAX_BATCH) as i32;
            let batch = match ctx.sqs.receive(url, want, Some(how.visibility), wait).await {
                Ok(batch) => batch,
                Err(source) => {
                    break Err(CliError::Aws {
                        what: format!("receiving from {url}"),
                        source,
                    });
                }
            };
            let mut new = 0;
            for m in batch {
                handles.push(m.receipt_handle.clone());
                if ids.insert(m.message_id.clone()) {
                    new += 1;
                    seen.push(m);
                }
            }
            // empty, or only messages seen already (their hide ran out): the end
            if new == 0 {
                break Ok(());
            }
            if seen.len() >= how.limit {
                cover.limit_reached = true;
                break Ok(());
            }
        };
        cover.not_released = release(ctx, url, handles).await;
        received?;
    }
    cover.received = seen.len();
    let (_, in_flight) = crate::status::depth(&ctx.sqs, url)
        .await
        .map_err(aws(format!("reading {url}")))?;
    cover.in_flight = in_flight;
    Ok(seen)
}

/// Makes received messages visible again at once; how many were not.
async fn release(ctx: &Context, url: &str, handles: Vec<String>) -> usize {
    if handles.is_empty() {
        return 0;
    }
    let plan = Plan::release(&QueueUrl::from(url), handles);
    let report = ctx.settle(&plan).await;
    report.iter().filter(|(_, c)| !c.is_confirmed()).count()
}

/// The kept messages of the orders wanted, from the keep lists: those seen visible in the DLQ
/// are not hidden; each other one is checked to be still hidden by setting its visibility to
/// the time its hide has left.
async fn kept(
    ctx: &Context,
    dlq_url: &str,
    wanted: &Wanted,
    seen_in_dlq: &HashSet<String>,
    look: &mut Look,
) -> Result<(), CliError> {
    let listed = ctx.kept().await?;
    let c = &mut look.coverage;
    c.kept_read = true;
    c.kept_listed = listed.len();
    let mut candidates: Vec<KeptMessage> = Vec::new();
    for k in listed {
        if k.order_id.is_none() && *wanted != Wanted::All {
            c.kept_unknown_order += 1;
            continue;
        }
        if !wanted.wants(k.order_id.as_deref()) {
            continue;
        }
        if seen_in_dlq.contains(&k.message_id) {
            c.kept_not_hidden += 1;
            continue;
        }
        candidates.push(k);
    }
    let now = now_ms();
    let queue = QueueUrl::from(dlq_url);
    let mut plan = Plan::new();
    let mut checks = Vec::new();
    for k in candidates {
        let Some(seconds) = remaining_hide(k.hidden_until, now) else {
            look.coverage.kept_not_hidden += 1;
            continue;
        };
        let id = plan.push(Action::ChangeVisibility {
            of: queue.clone(),
            receipt_handle: k.receipt_handle.clone(),
            seconds,
        });
        checks.push((id, k));
    }
    if plan.is_empty() {
        return Ok(());
    }
    let report = ctx.settle(&plan).await;
    for (id, k) in checks {
        if !report.get(id).is_confirmed() {
            // its handle no longer holds it: visible again, replayed or archived since
            look.coverage.kept_not_hidden += 1;
            continue;
        }
        look.sightings.push(Sighting {
            order_id: k.order_id,
            place: Place::Kept(Kept {
                message_id: k.message_id,
                failure_reason: k.failure_reason,
                hidden_until: k.hidden_until,
            }),
        });
    }
    Ok(())
}

/// The records, copies and entries of each order seen, by order (the messages whose order is
/// not known under `None`).
pub fn by_order(look: &Look) -> HashMap<Option<&str>, Vec<&Place>> {
    let mut out: HashMap<Option<&str>, Vec<&Place>> = HashMap::new();
    for s in &look.sightings {
        out.entry(s.order_id.as_deref()).or_default().push(&s.place);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use resq::attributes::AttributeValue;

    #[test]
    fn a_look_wants_the_orders_named_or_everything() {
        let one = Wanted::one("ORD-1");
        assert!(one.wants(Some("ORD-1")));
        assert!(!one.wants(Some("ORD-2")));
        assert!(
            !one.wants(None),
            "a message of unknown order is not ORD-1's"
        );
        assert!(Wanted::All.wants(None) && Wanted::All.wants(Some("x")));
    }

    #[test]
    fn a_message_names_its_order_by_its_attribute_first_then_its_body() {
        let tagged = MessageAttributes::from([(
            "demo-order-id".to_owned(),
            AttributeValue::string("DEMO-7"),
        )]);
        let by_attribute = Identity {
            attribute: Some("demo-order-id".into()),
            ..Identity::default()
        };
        // GIVEN a malformed body: only the attribute names the order
        assert_eq!(
            by_attribute.order_id("{\"orderId\":", &tagged),
            Some("DEMO-7".into())
        );
        // WHEN there is no attribute: the body's orderId
        let body = r#"{"orderId":"ORD-9","items":[]}"#;
        assert_eq!(
            by_attribute.order_id(body, &MessageAttributes::new()),
            Some("ORD-9".into())
        );
        // AND without an attribute configured, an attribute is not read
        assert_eq!(Identity::default().order_id("{", &tagged), None);
        assert_eq!(
            Identity::default().order_id(body, &tagged),
            Some("ORD-9".into())
        );
    }

    #[test]
    fn a_message_is_read_by_the_field_of_its_type() {
        // GIVEN a team's messages, which name their business id paymentId
        let payments = Identity {
            correlation: CorrelationKey::new("payment_id", "paymentId"),
            ..Identity::default()
        };
        let body = r#"{"paymentId":"PAY-7","orderId":"ORD-7"}"#;
        // THEN the type's field is read, not orders'
        assert_eq!(
            payments.order_id(body, &MessageAttributes::new()),
            Some("PAY-7".into())
        );
        assert_eq!(
            payments.order_id(r#"{"orderId":"ORD-7"}"#, &MessageAttributes::new()),
            None
        );
    }

    #[test]
    fn a_body_holds_an_id_as_a_json_string_value() {
        // a truncated body (a MALFORMED_JSON dead letter) still holds it
        assert!(mentions(r#"{"orderId":"ORD-1","items":["#, "ORD-1"));
        assert!(mentions(r#"{"orderId" : "ORD-1" }"#, "ORD-1"));
        assert!(mentions(r#"{"refs":["x", "ORD-1"]"#, "ORD-1"));
        assert!(mentions(r#"{"a":1,"b":"ORD-1"}"#, "ORD-1"));
        // ids that need escaping are looked for as JSON writes them
        assert!(mentions(r#"{"orderId":"O\"1"}"#, "O\"1"));
        // not a longer or shorter id, a key, a part of another string, or an escaped quote
        for body in [
            r#"{"orderId":"ORD-10"}"#,
            r#"{"orderId":"XORD-1"}"#,
            r#"{"ORD-1":true}"#,
            r#"{"ORD-1" : 1}"#,
            r#"{"note":"see \"ORD-1\" later"}"#,
            r#"{"orderId":"ORD-1"#,
            "ORD-1",
        ] {
            assert!(!mentions(body, "ORD-1"), "{body}");
        }
        assert!(
            !mentions(r#"{"orderId":""}"#, ""),
            "an empty id is held by nothing"
        );
    }

    #[test]
    fn a_message_whose_id_cannot_be_read_is_an_orders_by_its_text() {
        let orders = Identity::default();
        let none = MessageAttributes::new();
        let wanted = Wanted::Orders(BTreeSet::from(["ORD-1".to_owned(), "ORD-2".to_owned()]));
        // GIVEN a readable id: read, whatever the text holds
        assert_eq!(
            orders.whose(&wanted, r#"{"orderId":"ORD-3","ref":"ORD-1"}"#, &none),
            Whose::Read("ORD-3".into())
        );
        // WHEN the body is truncated JSON holding ORD-1: matched by text
        let truncated = r#"{"orderId":"ORD-1","userId":"u","items":[{"productId":"#;
        assert_eq!(
            orders.whose(&wanted, truncated, &none),
            Whose::ByText("ORD-1".into())
        );
        assert_eq!(
            orders.whose(&wanted, truncated, &none).order(),
            (Some("ORD-1".to_owned()), true)
        );
        // AND one holding no wanted id is of an unknown order
        assert_eq!(
            orders.whose(&Wanted::one("ORD-9"), truncated, &none),
            Whose::Unknown
        );
        // AND looking at everything (the audit) matches nothing by text
        assert_eq!(orders.whose(&Wanted::All, truncated, &none), Whose::Unknown);
        assert_eq!(Whose::Unknown.order(), (None, false));
    }

    #[test]
    fn a_kept_message_is_hidden_again_until_the_same_moment() {
        // 90.2 s left: 91 s (rounded up, never shorter than it was)
        assert_eq!(remaining_hide(1_090_200, 1_000_000), Some(91));
        assert_eq!(remaining_hide(1_000_001, 1_000_000), Some(1));
        // over: nothing to keep hidden
        assert_eq!(remaining_hide(1_000_000, 1_000_000), None);
        assert_eq!(remaining_hide(999_000, 1_000_000), None);
        // never past SQS's 12 h
        assert_eq!(remaining_hide(u64::MAX, 0), Some(43_200));
    }

    fn queued(id: &str) -> Queued {
        Queued {
            message_id: id.into(),
            receive_count: Some(1),
            redrive_count: None,
            failure_class: None,
            failure_reason: None,
            sent_at: None,
            first_sent_at: None,
            group: None,
            matched_by_text: false,
        }
    }

    #[test]
    fn a_look_narrowed_to_a_group_looks_at_that_groups_messages_only() {
        // GIVEN no group asked for: every message is looked at
        assert_eq!(other_group(None, Some("tenant-a")), None);
        assert_eq!(other_group(None, None), None);
        // WHEN a group is asked for THEN its messages are looked at, the others are not
        assert_eq!(other_group(Some("tenant-b"), Some("tenant-b")), None);
        assert_eq!(
            other_group(Some("tenant-b"), Some("tenant-a")),
            Some("tenant-a")
        );
        assert_eq!(other_group(Some("tenant-b"), None), Some(NO_GROUP));
    }

    fn options(group: Option<&str>) -> LookOptions {
        LookOptions {
            main_queue: QueueLook::SKIP,
            count_main_queue: false,
            dlq: QueueLook::SKIP,
            kept: false,
            archive_since: None,
            identity: Identity::default(),
            group: group.map(str::to_owned),
            receive_wait: 0,
        }
    }

    #[test]
    fn messages_of_other_groups_are_left_out_and_counted_when_they_are_the_orders() {
        // GIVEN DLQ messages of ORD-1 in tenant-a, tenant-b and no group, one of ORD-2 in
        // tenant-a, and one of unknown order in tenant-a
        let message = |id: &str, body: &str, group: Option<&str>| {
            let mut m = resq_testing::received(id, body, 1, &[]);
            if let Some(g) = group {
                m.attributes.insert("MessageGroupId".into(), g.into());
            }
            m
        };
        let ord1 = r#"{"orderId":"ORD-1"}"#;
        let messages = [
            message("a-1", ord1, Some("tenant-a")),
            message("b-1", ord1, Some("tenant-b")),
            message("n-1", ord1, None),
            message("a-2", r#"{"orderId":"ORD-2"}"#, Some("tenant-a")),
            message("a-3", "{not json", Some("tenant-a")),
        ];
        let look_for = |group: Option<&str>| {
            let mut look = Look::default();
            let options = options(group);
            for m in &messages {
                sight(
                    &mut look,
                    &Wanted::one("ORD-1"),
                    &options,
                    m,
                    Queued::of(m),
                    Place::Dlq,
                    |c| &mut c.dlq,
                );
            }
            look
        };
        // WHEN ORD-1 is looked for in tenant-b
        let narrowed = look_for(Some("tenant-b"));
        // THEN only tenant-b's copy is seen, with its group
        let seen: Vec<&Place> = narrowed.of("ORD-1").collect();
        assert!(
            matches!(seen.as_slice(), [Place::Dlq(q)] if q.message_id == "b-1" && q.group.as_deref() == Some("tenant-b")),
            "{seen:?}"
        );
        // AND the order's copies in other groups are counted by group, other orders' not
        assert_eq!(
            narrowed.coverage.dlq.other_groups,
            BTreeMap::from([("tenant-a".to_owned(), 1), (NO_GROUP.to_owned(), 1)])
        );
        // AND a message of another group whose order cannot be read is not the order's
        assert_eq!(narrowed.coverage.dlq.order_unknown, 0);
        // AND without a group every copy is seen, and nothing is left out
        let all = look_for(None);
        assert_eq!(all.of("ORD-1").count(), 3);
        assert!(all.coverage.dlq.other_groups.is_empty());
        assert_eq!(all.coverage.dlq.order_unknown, 1);
    }

    #[test]
    fn copies_left_out_by_a_group_are_said_so_the_order_is_not_nowhere() {
        // GIVEN a look narrowed to tenant-b that saw everything, and left out the order's
        // copies in other groups
        let mut look = Look::default();
        look.coverage.main_queue.looked = true;
        look.coverage.dlq.looked = true;
        look.coverage.kept_read = true;
        look.coverage.group = Some("tenant-b".into());
        assert!(look.unseen().is_empty());
        look.coverage.dlq.other_groups =
            BTreeMap::from([("tenant-a".to_owned(), 2), (NO_GROUP.to_owned(), 1)]);
        // THEN they are said, by group, and how to see them
        assert_eq!(
            look.unseen(),
            vec![
                "3 DLQ messages of the order are of other groups, left out by --group tenant-b: tenant-a 2, (no group) 1"
            ]
        );
    }

    #[test]
    fn what_a_look_could_not_see_is_said() {
        // GIVEN a look that saw everything
        let mut look = Look::default();
        look.coverage.main_queue.looked = true;
        look.coverage.dlq.looked = true;
        look.coverage.kept_read = true;
        assert!(look.unseen().is_empty());
        // WHEN the main queue was cut at its limit, had messages in flight, and the DLQ had
        // more in flight than the kept ones listed
        look.coverage.main_queue.limit_reached = true;
        look.coverage.main_queue.received = 100;
        look.coverage.main_queue.in_flight = 3;
        look.coverage.dlq.in_flight = 5;
        look.coverage.kept_listed = 2;
        look.coverage.kept_unknown_order = 1;
        let unseen = look.unseen();
        // THEN each is said
        assert_eq!(
            unseen,
            vec![
                "the main queue holds more than the 100 messages looked at",
                "3 messages in flight in the main queue (being processed or backed off) cannot be received",
                "3 messages in flight in the DLQ (held by a redriver run, or kept) cannot be received",
                "1 kept messages are listed without their order (`resq dlq peek --kept` shows them)",
            ]
        );
        // AND a queue skipped is said as such
        look.coverage.main_queue = QueueCoverage::default();
        assert_eq!(look.unseen()[0], "the main queue was not looked into");
    }

    #[test]
    fn messages_of_unknown_order_and_entries_not_read_are_said() {
        // GIVEN a look that saw everything
        let mut look = Look::default();
        look.coverage.main_queue.looked = true;
        look.coverage.dlq.looked = true;
        look.coverage.kept_read = true;
        look.coverage.id_field = "paymentId".into();
        // WHEN two DLQ messages' ids could not be read (one matched by text), an archive
        // entry's neither, and three entries were left out by --archive-since
        (
            look.coverage.dlq.order_unknown,
            look.coverage.dlq.matched_by_text,
        ) = (2, 1);
        look.coverage.archive_order_unknown = 1;
        look.coverage.archive_not_read = 3;
        look.coverage.archive_unreadable = 2;
        // THEN those not matched are said, and the entries not read
        assert_eq!(
            look.unseen(),
            vec![
                "1 DLQ messages name no order that could be read (a body that is not JSON, or without `paymentId`) and do not hold the order's id as text",
                "1 archive entries name no order that could be read (a body that is not JSON, or without `paymentId`) and do not hold the order's id as text",
                "2 objects under archive/ are not archive entries that could be read",
                "3 archive entries written before --archive-since were not read",
            ]
        );
    }

    #[test]
    fn the_places_of_one_order() {
        let look = Look {
            sightings: vec![
                Sighting {
                    order_id: Some("A".into()),
                    place: Place::Dlq(queued("m1")),
                },
                Sighting {
                    order_id: None,
                    place: Place::Dlq(queued("m2")),
                },
                Sighting {
                    order_id: Some("A".into()),
                    place: Place::MainQueue(queued("m3")),
                },
            ],
            coverage: Coverage::default(),
        };
        assert_eq!(look.of("A").count(), 2);
        assert_eq!(look.of("B").count(), 0);
        let grouped = by_order(&look);
        assert_eq!(grouped[&None].len(), 1);
        assert_eq!(grouped[&Some("A")].len(), 2);
        assert_eq!(queued("x").redrives(), Some(0));
        let bad = Queued {
            redrive_count: Some("lots".into()),
            ..queued("x")
        };
        assert_eq!(bad.redrives(), None);
    }
}
