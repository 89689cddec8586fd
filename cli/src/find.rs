//! `resq find ORDER_ID`: where one order is, found by [`crate::locate`] (the look the demo's
//! and the chaos run's audit make for every order), and an exit status a script can use.
//!
//! The main queue is not looked into unless asked (`--main-queue`): looking means receiving,
//! and each receive raises a message's `ApproximateReceiveCount` toward the queue's
//! `maxReceiveCount`. A message find receives on its last allowed receive is moved to the DLQ
//! by SQS, without a reason, on the consumer's next receive (an unexplained dead letter, which
//! counts against the redriver's breaker), and operators run `find` during incidents, when
//! many messages are near their last receive. By default the answer gives the main queue's
//! approximate counts instead (no receive), and an order seen nowhere else is "not seen".

use resq::correlation::CorrelationKey;

use crate::CliError;
use crate::context::Context;
pub use crate::locate::{DEFAULT_DLQ_LIMIT, DEFAULT_MAIN_QUEUE_LIMIT};
use crate::locate::{
    DLQ_VISIBILITY, Identity, Look, LookOptions, MAIN_QUEUE_VISIBILITY, Place, QueueLook, Wanted,
};

/// `resq find`'s flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindOptions {
    /// Main-queue messages to receive at most (0, the default: do not look into the main
    /// queue, read its counts only; see [`main_queue_limit`]).
    pub main_queue_limit: usize,
    /// DLQ messages to receive at most.
    pub dlq_limit: usize,
    /// A message attribute that names the order, tried before the body's field.
    pub order_id_attribute: Option<String>,
    /// The business id's body field (`orderId`; the stack's `CorrelationField`).
    pub correlation: CorrelationKey,
    /// Read only the archive entries written since then (the archive is keyed by message, not
    /// by order: without it every entry is read).
    pub archive_since: Option<chrono::DateTime<chrono::Utc>>,
    /// In the queues, only the messages of this `MessageGroupId` (a tenant: `--group`).
    pub group: Option<String>,
}

impl FindOptions {
    /// The look these flags ask for.
    pub fn look(&self) -> LookOptions {
        LookOptions {
            main_queue: QueueLook {
                limit: self.main_queue_limit,
                visibility: MAIN_QUEUE_VISIBILITY,
            },
            count_main_queue: true,
            dlq: QueueLook {
                limit: self.dlq_limit,
                visibility: DLQ_VISIBILITY,
            },
            kept: true,
            archive_since: self.archive_since,
            identity: Identity {
                attribute: self.order_id_attribute.clone(),
                correlation: self.correlation.clone(),
            },
            group: self.group.clone(),
            receive_wait: 1,
        }
    }
}

/// The main-queue messages to receive, from `--main-queue` (`look`) and `--main-queue-limit`
/// (`limit`, as typed): the limit when given (0 skips the queue), else
/// [`DEFAULT_MAIN_QUEUE_LIMIT`] when asked to look, else none.
pub fn main_queue_limit(look: bool, limit: Option<usize>) -> usize {
    match (look, limit) {
        (_, Some(n)) => n,
        (true, None) => DEFAULT_MAIN_QUEUE_LIMIT,
        (false, None) => 0,
    }
}

/// Where one order is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The order.
    pub order_id: String,
    /// Every place it was seen (several at once is a real answer: recorded, and a duplicate
    /// copy in the DLQ).
    pub places: Vec<Place>,
    /// The look it was found by (what it covered, what it cost).
    pub look: Look,
}

/// What `resq find` answers, as its exit status says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Seen somewhere (exit 0).
    Found,
    /// Seen nowhere, and the look covered everything: no record, no message, no entry
    /// (exit 3).
    Nowhere,
    /// Seen nowhere, but part of the pipeline could not be looked at, or holds messages
    /// whose order could not be read (exit 4).
    NotSeen,
}

impl Finding {
    /// The answer.
    pub fn verdict(&self) -> Verdict {
        if !self.places.is_empty() {
            Verdict::Found
        } else if self.look.unseen().is_empty() {
            Verdict::Nowhere
        } else {
            Verdict::NotSeen
        }
    }

    /// The error the command ends with when the order was not found.
    pub fn failure(&self) -> Option<CliError> {
        match self.verdict() {
            Verdict::Found => None,
            Verdict::Nowhere => Some(CliError::Nowhere {
                order_id: self.order_id.clone(),
            }),
            Verdict::NotSeen => Some(CliError::NotSeen {
                order_id: self.order_id.clone(),
                unseen: self.look.unseen().len(),
            }),
        }
    }
}

/// Looks for `order_id` everywhere.
pub async fn find(
    ctx: &Context,
    order_id: &str,
    options: &FindOptions,
) -> Result<Finding, CliError> {
    let order_id = order_id.trim();
    if order_id.is_empty() {
        return Err(CliError::Usage(
            "the order id is empty: `resq find ORDER_ID`".into(),
        ));
    }
    let look = crate::locate::locate(ctx, &Wanted::one(order_id), &options.look()).await?;
    let places = look.of(order_id).cloned().collect();
    Ok(Finding {
        order_id: order_id.to_owned(),
        places,
        look,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locate::{Coverage, Recorded};

    fn finding(places: Vec<Place>, coverage: Coverage) -> Finding {
        Finding {
            order_id: "ORD-1".into(),
            look: Look {
                coverage,
                ..Look::of_one("ORD-1", &places)
            },
            places,
        }
    }

    fn everything_seen() -> Coverage {
        let mut c = Coverage::default();
        c.main_queue.looked = true;
        c.dlq.looked = true;
        c.kept_read = true;
        c
    }

    #[test]
    fn found_somewhere_nowhere_or_not_seen_each_has_its_exit_status() {
        let recorded = Place::Recorded(Recorded {
            key: "orders/ORD-1.json".into(),
            writes: 1,
            written_at: vec![1],
            current: true,
        });
        let found = finding(vec![recorded], everything_seen());
        assert_eq!(found.verdict(), Verdict::Found);
        assert!(found.failure().is_none());
        let nowhere = finding(vec![], everything_seen());
        assert_eq!(nowhere.verdict(), Verdict::Nowhere);
        let e = nowhere.failure().unwrap();
        assert_eq!(e.exit_code(), 3);
        assert_eq!(e.to_string(), "ORD-1 was found nowhere");
        // the main queue skipped: not seen, which is not nowhere
        let mut skipped = everything_seen();
        skipped.main_queue.looked = false;
        let not_seen = finding(vec![], skipped);
        assert_eq!(not_seen.verdict(), Verdict::NotSeen);
        let e = not_seen.failure().unwrap();
        assert_eq!(e.exit_code(), 4);
        assert!(e.to_string().starts_with("ORD-1 was not seen"), "{e}");
    }

    #[test]
    fn the_flags_make_the_look() {
        let look = FindOptions {
            main_queue_limit: 0,
            dlq_limit: 50,
            order_id_attribute: Some("demo-order-id".into()),
            archive_since: None,
            correlation: CorrelationKey::new("payment_id", "paymentId"),
            group: Some("tenant-b".into()),
        }
        .look();
        assert_eq!(look.main_queue.limit, 0);
        assert!(
            look.count_main_queue,
            "not looked into, its counts are read"
        );
        assert_eq!(look.identity.correlation.body_field(), "paymentId");
        assert_eq!(look.dlq.limit, 50);
        assert!(look.kept, "kept messages are found in the keep lists");
        assert_eq!(look.identity.attribute.as_deref(), Some("demo-order-id"));
        assert_eq!(
            look.group.as_deref(),
            Some("tenant-b"),
            "the queues narrowed to the group"
        );
    }

    #[test]
    fn the_main_queue_is_looked_into_only_when_asked() {
        // GIVEN no flag: the main queue is not received from
        assert_eq!(main_queue_limit(false, None), 0);
        // WHEN --main-queue: up to the default
        assert_eq!(main_queue_limit(true, None), DEFAULT_MAIN_QUEUE_LIMIT);
        // AND --main-queue-limit N means what it always did: N, 0 skips
        assert_eq!(main_queue_limit(false, Some(20)), 20);
        assert_eq!(main_queue_limit(true, Some(0)), 0);
    }

    #[test]
    fn an_order_not_seen_while_messages_of_unknown_order_exist_is_not_nowhere() {
        // GIVEN a look that saw everything, but a DLQ message and an archive entry whose
        // order id could not be read (a MALFORMED_JSON dead letter), and archive entries
        // left out by --archive-since
        let sets: [fn(&mut Coverage); 4] = [
            |c: &mut Coverage| c.dlq.order_unknown = 1,
            |c: &mut Coverage| c.archive_order_unknown = 2,
            |c: &mut Coverage| c.main_queue.order_unknown = 1,
            |c: &mut Coverage| c.archive_not_read = 5,
        ];
        for set in sets {
            let mut coverage = everything_seen();
            set(&mut coverage);
            // THEN the order is not seen (exit 4), not nowhere
            let f = finding(vec![], coverage);
            assert_eq!(f.verdict(), Verdict::NotSeen, "{:?}", f.look.unseen());
            assert_eq!(f.failure().unwrap().exit_code(), 4);
        }
        // AND one matched by text is no longer unknown: the order was found by it
        let mut c = everything_seen();
        (c.dlq.order_unknown, c.dlq.matched_by_text) = (1, 1);
        assert_eq!(finding(vec![], c).verdict(), Verdict::Nowhere);
    }

    #[test]
    fn the_main_queue_not_looked_into_is_not_seen_unless_its_counts_say_it_is_empty() {
        // GIVEN the default look: the main queue counted, not received from
        let mut c = everything_seen();
        c.main_queue = crate::locate::QueueCoverage {
            counted: true,
            visible_before: 3,
            in_flight: 2,
            ..Default::default()
        };
        let f = finding(vec![], c.clone());
        // THEN an order seen nowhere else is not seen, and the reason says how to look
        assert_eq!(f.verdict(), Verdict::NotSeen);
        let unseen = f.look.unseen();
        assert!(
            unseen[0].starts_with("the main queue was not looked into: it holds about 3 visible and 2 in flight (`resq find --main-queue`"),
            "{unseen:?}"
        );
        // AND an empty main queue holds no copy: nowhere
        (c.main_queue.visible_before, c.main_queue.in_flight) = (0, 0);
        assert_eq!(finding(vec![], c).verdict(), Verdict::Nowhere);
    }
}
