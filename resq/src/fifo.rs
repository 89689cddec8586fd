//! FIFO queues: how resq recognises them and the message group and deduplication ids of the
//! copies it sends (a DLQ copy of a permanent failure, a replay, a restored archive entry).
//! See docs/design.md, "FIFO".
//!
//! A copy keeps the original's `MessageGroupId`, so a group's order survives the trip. Its
//! deduplication id is derived from the original's message id and what the copy is, so a
//! retried send of the same copy (an entry SQS did not confirm, a run that ended before its
//! delete) is dropped by SQS as a duplicate inside its five-minute window, while a later,
//! different copy of the same message (the next replay) is not.

/// SQS's limit on `MessageGroupId` and `MessageDeduplicationId`.
pub const MAX_ID_LEN: usize = 128;

/// The group of a copy whose original had none (a message moved from a standard queue).
pub const DEFAULT_GROUP: &str = "resq";

/// A queue URL or ARN names a FIFO queue (its name ends `.fifo`).
pub fn is_fifo(queue: &str) -> bool {
    queue.ends_with(".fifo")
}

/// What a copy is, for its deduplication id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copy {
    /// The consumer's DLQ copy of a permanent failure.
    DeadLetter,
    /// The redriver's replay carrying this `x-redrive-count`.
    Replay {
        /// The replay's `x-redrive-count`.
        redrive_count: u64,
    },
    /// An archive entry restored by the operator tool.
    Restore,
}

/// The `(MessageGroupId, MessageDeduplicationId)` of a copy of message `message_id` (whose
/// group was `group`) sent to a FIFO queue; `(None, None)` for a standard queue.
pub fn copy_ids(
    to_fifo: bool,
    group: Option<&str>,
    copy: Copy,
    message_id: &str,
) -> (Option<String>, Option<String>) {
    if !to_fifo {
        return (None, None);
    }
    let deduplication_id = match copy {
        Copy::DeadLetter => format!("permanent-{message_id}"),
        Copy::Replay { redrive_count } => format!("redrive-{redrive_count}-{message_id}"),
        Copy::Restore => format!("restore-{message_id}"),
    };
    (
        Some(group.unwrap_or(DEFAULT_GROUP).to_owned()),
        Some(deduplication_id.chars().take(MAX_ID_LEN).collect()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standard_queue_gets_no_ids() {
        assert_eq!(copy_ids(false, Some("g"), Copy::Restore, "m"), (None, None));
    }

    #[test]
    fn each_copy_keeps_the_group_and_gets_its_own_deduplication_id() {
        let ids = |copy| copy_ids(true, Some("g-1"), copy, "m-1");
        assert_eq!(
            ids(Copy::DeadLetter),
            (Some("g-1".into()), Some("permanent-m-1".into()))
        );
        assert_eq!(
            ids(Copy::Replay { redrive_count: 2 }),
            (Some("g-1".into()), Some("redrive-2-m-1".into()))
        );
        assert_eq!(
            ids(Copy::Restore),
            (Some("g-1".into()), Some("restore-m-1".into()))
        );
        // the next replay of the same message is a different copy
        assert_ne!(
            ids(Copy::Replay { redrive_count: 2 }),
            ids(Copy::Replay { redrive_count: 3 })
        );
    }

    #[test]
    fn ids_stay_within_sqs_limits() {
        let long = "x".repeat(300);
        let (group, dedup) = copy_ids(true, None, Copy::Replay { redrive_count: 9 }, &long);
        assert_eq!(group.as_deref(), Some(DEFAULT_GROUP));
        assert_eq!(dedup.unwrap().len(), MAX_ID_LEN);
    }

    #[test]
    fn fifo_is_the_name_suffix() {
        assert!(is_fifo("https://sqs.eu-west-1.amazonaws.com/1/orders.fifo"));
        assert!(is_fifo("arn:aws:sqs:eu-west-1:1:orders.fifo"));
        assert!(!is_fifo(
            "https://sqs.eu-west-1.amazonaws.com/1/orders-fifo"
        ));
    }
}
