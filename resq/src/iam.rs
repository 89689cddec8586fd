//! What the functions may do in AWS. Each module that calls AWS lists the IAM permissions its
//! calls need next to them (`PERMISSIONS`); each function gathers its modules' lists and what
//! Lambda itself does with its role. The template's roles grant exactly those (a template test
//! compares them), and, with a customer managed key, the KMS actions they imply.

/// One IAM permission: an action on one of the stack's resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    /// The IAM action, e.g. `sqs:SendMessage` (a batch call authorizes as its single one).
    pub action: &'static str,
    /// The resource, by the template's logical id: a queue (`OrdersQueue`), objects under a
    /// prefix of the bucket (`ArchiveBucket/orders/*`), a log group's streams
    /// (`ConsumerLogGroup:*`), the bucket under a condition (`ArchiveBucket if s3:prefix=kept/*`),
    /// an alarm by its name after the stack's (`alarm:replays-failing`).
    pub resource: &'static str,
}

impl Permission {
    /// `action` on `resource`.
    pub const fn new(action: &'static str, resource: &'static str) -> Self {
        Self { action, resource }
    }

    /// Whether this permission allows `action` on the concrete `resource` (a queue, an object
    /// `ArchiveBucket/orders/o-1.json`, a listing `ArchiveBucket if s3:prefix=kept/2026/`), as
    /// IAM matches: a `*` ending the pattern matches any rest, and nothing else does.
    pub fn allows(&self, action: &str, resource: &str) -> bool {
        self.action == action
            && match self.resource.strip_suffix('*') {
                Some(prefix) => resource.starts_with(prefix),
                None => resource == self.resource,
            }
    }
}

/// Every permission in `lists`, once, in order.
pub fn all(lists: &[&[Permission]]) -> Vec<Permission> {
    let mut out: Vec<Permission> = lists.iter().flat_map(|l| l.iter().copied()).collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_each_permission_once_in_order() {
        let send = Permission::new("sqs:SendMessage", "DeadLetterQueue");
        let receive = Permission::new("sqs:ReceiveMessage", "OrdersQueue");
        assert_eq!(all(&[&[send, receive], &[send]]), [receive, send]);
    }

    #[test]
    fn a_pattern_allows_what_iam_would_and_no_more() {
        let put = Permission::new("s3:PutObject", "ArchiveBucket/kept/*");
        assert!(put.allows("s3:PutObject", "ArchiveBucket/kept/2026/11/23/x.json"));
        assert!(!put.allows("s3:PutObject", "ArchiveBucket/kept"));
        assert!(!put.allows("s3:PutObject", "ArchiveBucket/orders/o-1.json"));
        assert!(!put.allows("s3:GetObject", "ArchiveBucket/kept/x.json"));
        let list = Permission::new("s3:ListBucket", "ArchiveBucket if s3:prefix=kept/*");
        assert!(list.allows(
            "s3:ListBucket",
            "ArchiveBucket if s3:prefix=kept/2026/11/23/"
        ));
        assert!(!list.allows("s3:ListBucket", "ArchiveBucket if s3:prefix=kept"));
        assert!(!list.allows("s3:ListBucket", "ArchiveBucket if s3:prefix="));
        let queue = Permission::new("sqs:SendMessage", "DeadLetterQueue");
        assert!(queue.allows("sqs:SendMessage", "DeadLetterQueue"));
        assert!(!queue.allows("sqs:SendMessage", "DeadLetterQueue2"));
    }
}
