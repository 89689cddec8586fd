//! What an operator does about a failed AWS call: credentials, an endpoint that does not
//! answer, a missing permission.
//!
//! The SDK reports a missing credential and a refused connection the same way, as a "dispatch
//! failure" (the request was never answered); [`resq::error::AwsError::kind`] tells them apart
//! by the cause under it. Credentials are resolved before anything is sent, so without
//! credentials the credentials problem is the one reported, whatever the endpoint.

use resq::error::{AwsError, AwsErrorKind};

use crate::CliError;

/// A failed AWS call, in terms of what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No credentials could be loaded, or the service did not accept them (with its code).
    Credentials {
        /// The service's code when it rejected the credentials (`InvalidClientTokenId`, …);
        /// `None` when none could be loaded.
        rejected: Option<String>,
    },
    /// The endpoint did not answer: connection refused, a name that does not resolve, TLS,
    /// a time-out.
    Unreachable,
    /// The queue named does not exist (in this region).
    NoSuchQueue,
    /// The bucket named does not exist.
    NoSuchBucket,
    /// No object at the key named.
    NoSuchKey,
    /// The identity may not do this.
    AccessDenied {
        /// The IAM action, when the service's message names it (`sqs:receivemessage`).
        action: Option<String>,
        /// The resource, when the message names it.
        resource: Option<String>,
    },
}

/// Codes with which AWS services reject credentials (wrong, expired, of another partition).
const REJECTED_CREDENTIALS: [&str; 11] = [
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidSignatureException",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidToken",
    "AuthFailure",
];

/// Codes of a refused permission.
fn is_access_denied(code: &str) -> bool {
    code.starts_with("AccessDenied")
        || code.ends_with(".AccessDeniedException")
        || matches!(
            code,
            "UnauthorizedOperation" | "AuthorizationError" | "NotAuthorized"
        )
}

/// The problem behind a command's error, when it is one of those an operator can act on.
pub fn classify(err: &CliError) -> Option<Problem> {
    match err {
        CliError::Aws { source, .. } | CliError::Read(source) => classify_aws(source),
        _ => None,
    }
}

/// The problem behind a failed AWS call.
pub fn classify_aws(err: &AwsError) -> Option<Problem> {
    match err.kind {
        AwsErrorKind::Credentials => return Some(Problem::Credentials { rejected: None }),
        AwsErrorKind::Unreachable | AwsErrorKind::Timeout => return Some(Problem::Unreachable),
        AwsErrorKind::Service | AwsErrorKind::Other => {}
    }
    let code = err.code.as_deref()?;
    if REJECTED_CREDENTIALS.contains(&code) {
        Some(Problem::Credentials {
            rejected: Some(code.to_owned()),
        })
    } else if matches!(
        code,
        "QueueDoesNotExist" | "AWS.SimpleQueueService.NonExistentQueue"
    ) {
        Some(Problem::NoSuchQueue)
    } else if code == "NoSuchBucket" {
        Some(Problem::NoSuchBucket)
    } else if code == "NoSuchKey" {
        Some(Problem::NoSuchKey)
    } else if is_access_denied(code) {
        Some(Problem::AccessDenied {
            action: after(&err.message, "not authorized to perform: ")
                .or_else(|| after(&err.message, "because no identity-based policy allows the ")),
            resource: after(&err.message, " on resource: "),
        })
    } else {
        None
    }
}

/// The word that follows `marker` in `text`, without quotes or closing punctuation.
fn after(text: &str, marker: &str) -> Option<String> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let word = rest
        .split_whitespace()
        .next()?
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | ',' | ';' | ')' | '('))
        .trim_end_matches('.');
    (!word.is_empty()).then(|| word.to_owned())
}

/// What to do about `problem`. `endpoint` is the `--endpoint-url` in use, if any.
pub fn hint(problem: &Problem, endpoint: Option<&str>) -> String {
    const SIGN_IN: &str = "sign in with a profile (`aws sso login --profile NAME`, then AWS_PROFILE=NAME), or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials)";
    const EMULATOR: &str = "against a local emulator any dummy values do (AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test)";
    match problem {
        Problem::Credentials { rejected: None } => format!(
            "no AWS credentials could be loaded: {SIGN_IN}; {EMULATOR}"
        ),
        Problem::Credentials {
            rejected: Some(code),
        } => format!(
            "AWS did not accept the credentials ({code}): they are wrong, expired or for another account; {SIGN_IN}"
        ),
        Problem::Unreachable => match endpoint {
            Some(url) => format!(
                "the endpoint {url} did not answer: is the emulator running? Check --endpoint-url (or AWS_ENDPOINT_URL)"
            ),
            None => "AWS did not answer: check your network (and HTTPS_PROXY, behind a proxy) and the region (--region or AWS_REGION)".to_owned(),
        },
        Problem::NoSuchQueue => "no such queue: check --main-queue-url and --dlq-url (the stack outputs OrdersQueueUrl and DeadLetterQueueUrl) and that the region (--region or AWS_REGION) is the stack's".to_owned(),
        Problem::NoSuchBucket => "no such bucket: check --archive-bucket (the stack output ArchiveBucketName) and the account you are signed in to".to_owned(),
        Problem::NoSuchKey => "no object at that key: `resq archive ls` lists the archive's keys".to_owned(),
        Problem::AccessDenied {
            action: Some(action),
            resource,
        } => format!(
            "your AWS identity may not call {action}{}: use a profile or role whose policy allows it, or ask for it to be granted",
            resource
                .as_ref()
                .map(|r| format!(" on {r}"))
                .unwrap_or_default()
        ),
        Problem::AccessDenied { action: None, .. } => {
            "your AWS identity lacks a permission this command needs (the message above may name it): use a profile or role whose policy allows it".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aws(code: Option<&str>, message: &str, kind: AwsErrorKind) -> CliError {
        CliError::Aws {
            what: "reading https://sqs.us-east-1.amazonaws.com/123456789012/orders".into(),
            source: AwsError {
                code: code.map(str::to_owned),
                message: message.into(),
                kind,
            },
        }
    }

    #[test]
    fn credentials_that_cannot_be_loaded() {
        let err = aws(
            None,
            "dispatch failure: other: the credential provider was not enabled: no credentials found in chain",
            AwsErrorKind::Credentials,
        );
        let problem = classify(&err).unwrap();
        assert_eq!(problem, Problem::Credentials { rejected: None });
        let hint = hint(&problem, Some("http://127.0.0.1:5000"));
        for needle in [
            "no AWS credentials",
            "aws sso login",
            "AWS_PROFILE",
            "AWS_ACCESS_KEY_ID",
            "any dummy values do",
        ] {
            assert!(hint.contains(needle), "{needle}: {hint}");
        }
    }

    #[test]
    fn credentials_the_service_rejects() {
        for code in [
            "InvalidClientTokenId",
            "ExpiredToken",
            "SignatureDoesNotMatch",
        ] {
            let err = aws(
                Some(code),
                "service error: unhandled error",
                AwsErrorKind::Service,
            );
            let problem = classify(&err).unwrap();
            assert_eq!(
                problem,
                Problem::Credentials {
                    rejected: Some(code.into())
                }
            );
            let hint = hint(&problem, None);
            assert!(
                hint.contains(&format!("did not accept the credentials ({code})"))
                    && hint.contains("aws sso login"),
                "{hint}"
            );
        }
    }

    #[test]
    fn an_endpoint_that_does_not_answer() {
        for kind in [AwsErrorKind::Unreachable, AwsErrorKind::Timeout] {
            let err = aws(
                None,
                "dispatch failure: io error: client error (Connect): tcp connect error: Connection refused (os error 111)",
                kind,
            );
            assert_eq!(classify(&err), Some(Problem::Unreachable));
        }
        let local = hint(&Problem::Unreachable, Some("http://127.0.0.1:5000"));
        assert!(
            local.contains("http://127.0.0.1:5000") && local.contains("is the emulator running?"),
            "{local}"
        );
        let remote = hint(&Problem::Unreachable, None);
        assert!(remote.contains("check your network"), "{remote}");
    }

    #[test]
    fn access_denied_names_the_action() {
        let err = aws(
            Some("AccessDenied"),
            "service error: unhandled error (AccessDenied): User: arn:aws:iam::123456789012:user/ops is not authorized to perform: sqs:receivemessage on resource: arn:aws:sqs:us-east-1:123456789012:orders-dlq because no identity-based policy allows the sqs:receivemessage action",
            AwsErrorKind::Service,
        );
        let problem = classify(&err).unwrap();
        assert_eq!(
            problem,
            Problem::AccessDenied {
                action: Some("sqs:receivemessage".into()),
                resource: Some("arn:aws:sqs:us-east-1:123456789012:orders-dlq".into()),
            }
        );
        assert_eq!(
            hint(&problem, None),
            "your AWS identity may not call sqs:receivemessage on arn:aws:sqs:us-east-1:123456789012:orders-dlq: use a profile or role whose policy allows it, or ask for it to be granted"
        );
        // S3 quotes the resource; CloudWatch names none
        let s3 = aws(
            Some("AccessDenied"),
            "service error: User: arn:aws:sts::1:assumed-role/ops/me is not authorized to perform: s3:ListBucket on resource: \"arn:aws:s3:::resq-archive\" because no identity-based policy allows the s3:ListBucket action",
            AwsErrorKind::Service,
        );
        assert_eq!(
            classify(&s3),
            Some(Problem::AccessDenied {
                action: Some("s3:ListBucket".into()),
                resource: Some("arn:aws:s3:::resq-archive".into()),
            })
        );
        let cw = aws(
            Some("AccessDenied"),
            "User: arn:aws:iam::1:user/ops is not authorized to perform: cloudwatch:DescribeAlarms because no identity-based policy allows the cloudwatch:DescribeAlarms action",
            AwsErrorKind::Service,
        );
        assert!(matches!(
            classify(&cw),
            Some(Problem::AccessDenied { action: Some(a), resource: None }) if a == "cloudwatch:DescribeAlarms"
        ));
        // a bare "Access Denied" (S3's older wording) still says what kind of problem it is
        let bare = aws(
            Some("AccessDenied"),
            "service error: unhandled error (AccessDenied): Access Denied",
            AwsErrorKind::Service,
        );
        let problem = classify(&bare).unwrap();
        assert_eq!(
            problem,
            Problem::AccessDenied {
                action: None,
                resource: None
            }
        );
        assert!(hint(&problem, None).contains("lacks a permission"));
        let kms = aws(
            Some("KMS.AccessDeniedException"),
            "x",
            AwsErrorKind::Service,
        );
        assert!(matches!(classify(&kms), Some(Problem::AccessDenied { .. })));
    }

    #[test]
    fn names_that_do_not_exist() {
        let missing_queue = aws(
            Some("QueueDoesNotExist"),
            "service error: QueueDoesNotExist: The specified queue does not exist.",
            AwsErrorKind::Service,
        );
        assert_eq!(classify(&missing_queue), Some(Problem::NoSuchQueue));
        assert!(hint(&Problem::NoSuchQueue, None).contains("check --main-queue-url and --dlq-url"));
        let bucket = aws(Some("NoSuchBucket"), "x", AwsErrorKind::Service);
        assert_eq!(classify(&bucket), Some(Problem::NoSuchBucket));
        assert!(hint(&Problem::NoSuchBucket, None).contains("check --archive-bucket"));
        let key = aws(Some("NoSuchKey"), "x", AwsErrorKind::Service);
        assert_eq!(classify(&key), Some(Problem::NoSuchKey));
        assert!(hint(&Problem::NoSuchKey, None).contains("resq archive ls"));
    }

    #[test]
    fn other_errors_have_no_hint() {
        let throttled = aws(
            Some("RequestThrottled"),
            "service error: RequestThrottled: slow down",
            AwsErrorKind::Service,
        );
        assert_eq!(classify(&throttled), None);
        assert_eq!(
            classify(&aws(
                None,
                "failed to construct request",
                AwsErrorKind::Other
            )),
            None
        );
        assert_eq!(
            classify(&CliError::NoOrders {
                path: "orders.json".into()
            }),
            None
        );
        assert_eq!(classify(&CliError::NotMoved { count: 1 }), None);
    }
}
