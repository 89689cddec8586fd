//! SQS calls both functions make the same way: attribute conversion, batched sends,
//! visibility changes and deletes with per-entry results, and one error type for a call that
//! failed.

use std::collections::HashMap;
use std::future::Future;
use std::ops::Range;

use aws_sdk_sqs::error::{ConnectorError, ErrorMetadata, ProvideErrorMetadata};
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};
use futures::StreamExt;

use crate::attributes::{MAX_MESSAGE_BYTES, MessageAttributes};

/// SQS takes at most 10 entries per batch call.
pub const MAX_BATCH: usize = 10;

/// Batch calls of one operation in flight at once (a settling step of a 10,000-record batch
/// makes up to 1,000 of them).
pub const CALLS_IN_FLIGHT: usize = 16;

/// A message to send: a consumer's DLQ copy or a redriver's replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// The body, unchanged from the original.
    pub body: String,
    /// The attributes of the copy (already within SQS's limits).
    pub attributes: MessageAttributes,
    /// `MessageGroupId` for a FIFO queue.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId` for a FIFO queue.
    pub deduplication_id: Option<String>,
}

impl OutgoingMessage {
    /// The size SQS counts (body plus attributes).
    pub fn size(&self) -> usize {
        crate::attributes::message_size(&self.body, &self.attributes)
    }
}

/// Splits messages (by size, in order) into `SendMessageBatch` calls of at most 10 entries and
/// 1 MiB.
pub fn pack(sizes: &[usize]) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && (i - start == MAX_BATCH || bytes + size > MAX_MESSAGE_BYTES) {
            batches.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < sizes.len() {
        batches.push(start..sizes.len());
    }
    batches
}

/// One `SendMessageBatch` call of up to 10 messages: per message `None` when SQS reported it
/// `Successful`, else why not (anything not listed as `Successful` counts as not sent). `Err`
/// when the call itself failed: nothing was confirmed.
pub async fn send_batch(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    messages: &[&OutgoingMessage],
) -> Result<Vec<Option<String>>, AwsError> {
    let mut entries = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let entry = SendMessageBatchRequestEntry::builder()
            .id(i.to_string())
            .message_body(&m.body)
            .set_message_attributes(Some(sdk_attributes(&m.attributes)?).filter(|a| !a.is_empty()))
            .set_message_group_id(m.group_id.clone())
            .set_message_deduplication_id(m.deduplication_id.clone())
            .build()
            .map_err(|e| AwsError::local(e.to_string()))?;
        entries.push(entry);
    }
    let out = client
        .send_message_batch()
        .queue_url(queue_url)
        .set_entries(Some(entries))
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    let lost = unconfirmed(
        messages.len(),
        out.successful().iter().map(|s| s.id().to_owned()),
        out.failed(),
        "SendMessageBatch",
    );
    let mut results = vec![None; messages.len()];
    for (i, why) in lost {
        results[i] = Some(why);
    }
    Ok(results)
}

/// The two queues of a resq stack on real SQS: the main queue and its DLQ. Each function
/// implements its own port (the consumer's `QueuePort`, the redriver's `RedriveQueues`) on
/// this one adapter; the calls themselves are the functions of this module.
#[derive(Debug, Clone)]
pub struct SqsQueues {
    /// The SQS client.
    pub client: aws_sdk_sqs::Client,
    /// `MAIN_QUEUE_URL`.
    pub main_queue_url: String,
    /// `DLQ_URL`.
    pub dlq_url: String,
}

impl SqsQueues {
    /// The adapter for a main queue and its DLQ.
    pub fn new(
        client: aws_sdk_sqs::Client,
        main_queue_url: impl Into<String>,
        dlq_url: impl Into<String>,
    ) -> Self {
        Self {
            client,
            main_queue_url: main_queue_url.into(),
            dlq_url: dlq_url.into(),
        }
    }
}

/// One `ReceiveMessage` call as Lambda's poller and the redriver make it: up to `max` (1–10)
/// messages with every message and system attribute, hidden for `visibility` seconds (`None`:
/// the queue's own visibility timeout), waiting up to `wait_seconds` for the first.
pub async fn receive(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    max: i32,
    visibility: Option<i32>,
    wait_seconds: i32,
) -> Result<Vec<aws_sdk_sqs::types::Message>, AwsError> {
    let out = client
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(max.clamp(1, MAX_BATCH as i32))
        .set_visibility_timeout(visibility)
        .wait_time_seconds(wait_seconds)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    Ok(out.messages.unwrap_or_default())
}

/// An AWS call that did not go through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AwsError {
    /// The service's error code when there was one (`RequestThrottled`, `AccessDenied`, …).
    pub code: Option<String>,
    /// The error and its causes, each as its message (see [`error_chain`]).
    pub message: String,
    /// Why the call did not go through, as far as the SDK tells.
    pub kind: AwsErrorKind,
}

/// Why an AWS call did not go through, as far as the SDK tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AwsErrorKind {
    /// The service answered with an error: see [`AwsError::code`].
    Service,
    /// No credentials could be loaded (none configured, a profile that does not load, an
    /// expired SSO session): the request was not sent.
    Credentials,
    /// The endpoint could not be reached: connection refused, a name that does not resolve,
    /// a TLS failure, a connection that broke.
    Unreachable,
    /// The endpoint did not answer in time.
    Timeout,
    /// Anything else: a request that could not be built, a response that could not be read,
    /// a problem found before calling.
    #[default]
    Other,
}

impl AwsError {
    /// From any SDK error, keeping its code and its whole chain of causes.
    pub fn from_sdk<E: ProvideErrorMetadata + std::error::Error + 'static>(err: E) -> Self {
        let code = err.code().map(str::to_owned);
        let kind = kind_of(&err, code.is_some());
        Self {
            code,
            message: error_chain(&err),
            kind,
        }
    }

    /// An error the service answered with (fakes and tests).
    pub fn service(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: Some(code.into()),
            message: message.into(),
            kind: AwsErrorKind::Service,
        }
    }

    /// A problem found before calling.
    pub fn local(message: impl Into<String>) -> Self {
        Self {
            code: None,
            message: message.into(),
            kind: AwsErrorKind::Other,
        }
    }
}

/// An error and its causes (the [`std::error::Error::source`] chain), each as its message,
/// joined by ": ". A cause whose message the one before it already holds is left out, so
/// nothing repeats. Only messages: never Rust's debug form of the error (which the SDK's
/// `DisplayErrorContext` appends, struct fields and all), and a service's error metadata as
/// its code and message (its own Display is a struct: `Error { code: …, message: … }`).
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut previous = text.clone();
    let mut next = err.source();
    while let Some(cause) = next {
        let segment = match cause.downcast_ref::<ErrorMetadata>() {
            // the service's own code and message: its Display is a debug-style struct
            Some(meta) => match (meta.code(), meta.message()) {
                (Some(code), Some(message)) if !previous.contains(code) => {
                    format!("{code}: {message}")
                }
                (Some(code), None) if !previous.contains(code) => code.to_owned(),
                (_, message) => message.unwrap_or_default().to_owned(),
            },
            None => cause.to_string(),
        };
        if !segment.trim().is_empty() && !previous.contains(&segment) {
            text.push_str(": ");
            text.push_str(&segment);
        }
        previous = segment;
        next = cause.source();
    }
    text
}

/// Reads the kind off the chain: the SDK wraps both a credentials failure and a failed
/// connection in a dispatch failure ([`ConnectorError`]); the connector error's kind, or the
/// credentials error under it, tells them apart.
pub(crate) fn kind_of(err: &(dyn std::error::Error + 'static), has_code: bool) -> AwsErrorKind {
    let mut next = Some(err);
    while let Some(e) = next {
        if is_credentials_error(e) {
            return AwsErrorKind::Credentials;
        }
        if let Some(c) = e.downcast_ref::<ConnectorError>() {
            if c.is_timeout() {
                return AwsErrorKind::Timeout;
            }
            if c.is_io() {
                return AwsErrorKind::Unreachable;
            }
        }
        next = e.source();
    }
    if has_code {
        AwsErrorKind::Service
    } else {
        AwsErrorKind::Other
    }
}

/// Whether `e` is the SDK's credentials error (`aws_credential_types`' `CredentialsError`).
/// None of resq's dependencies re-exports that type; it is reached as the error a credentials
/// provider's future resolves to (the future is made, never polled).
fn is_credentials_error(e: &(dyn std::error::Error + 'static)) -> bool {
    use aws_sdk_sqs::config::{Credentials, ProvideCredentials};
    fn is_error_of<T, E: std::error::Error + 'static>(
        _: &impl Future<Output = Result<T, E>>,
        e: &(dyn std::error::Error + 'static),
    ) -> bool {
        e.is::<E>()
    }
    let probe = Credentials::new("", "", None, None, "resq");
    is_error_of(&probe.provide_credentials(), e)
}

/// The SDK form of a message's attributes.
pub fn sdk_attributes(
    attrs: &MessageAttributes,
) -> Result<HashMap<String, MessageAttributeValue>, AwsError> {
    attrs
        .iter()
        .map(|(name, v)| {
            v.to_sdk()
                .map(|v| (name.clone(), v))
                .map_err(|e| AwsError::local(format!("attribute {name}: {e}")))
        })
        .collect()
}

fn entry_error(e: &BatchResultErrorEntry) -> String {
    format!("{}: {}", e.code(), e.message().unwrap_or(""))
}

/// Per-chunk outcome: the positions (within the chunk) not reported `Successful`, with why.
fn unconfirmed(
    len: usize,
    successful: impl Iterator<Item = String>,
    failed: &[BatchResultErrorEntry],
    call: &str,
) -> Vec<(usize, String)> {
    let mut done = vec![false; len];
    for id in successful {
        if let Some(d) = id.parse::<usize>().ok().and_then(|i| done.get_mut(i)) {
            *d = true;
        }
    }
    (0..len)
        .filter(|i| !done[*i])
        .map(|i| {
            let why = failed
                .iter()
                .find(|f| f.id() == i.to_string())
                .map_or(format!("not reported by {call}"), entry_error);
            (i, why)
        })
        .collect()
}

/// Runs one batch call per chunk of 10 positions, up to [`CALLS_IN_FLIGHT`] at once; `call`
/// returns the ids SQS reported `Successful` and its `Failed` entries. Returns the positions
/// not confirmed, with why, in order.
async fn in_batches<F, Fut>(len: usize, name: &str, call: F) -> Vec<(usize, String)>
where
    F: Fn(Range<usize>) -> Fut,
    Fut: Future<Output = Result<(Vec<String>, Vec<BatchResultErrorEntry>), AwsError>>,
{
    let chunks = (0..len)
        .step_by(MAX_BATCH)
        .map(|start| start..(start + MAX_BATCH).min(len));
    let call = &call;
    let mut failed: Vec<(usize, String)> = futures::stream::iter(chunks)
        .map(|range| async move {
            let start = range.start;
            let lost = match call(range.clone()).await {
                Ok((successful, errors)) => {
                    unconfirmed(range.len(), successful.into_iter(), &errors, name)
                }
                Err(e) => range
                    .clone()
                    .map(|i| (i - start, e.message.clone()))
                    .collect(),
            };
            lost.into_iter()
                .map(|(i, why)| (start + i, why))
                .collect::<Vec<_>>()
        })
        .buffer_unordered(CALLS_IN_FLIGHT)
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    failed.sort_by_key(|(i, _)| *i);
    failed
}

/// Sets visibility timeouts, 10 per call, calls in parallel. Returns the positions in `changes`
/// that did not change, with why.
pub async fn change_visibility(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    changes: &[(&str, i32)],
) -> Vec<(usize, String)> {
    in_batches(
        changes.len(),
        "ChangeMessageVisibilityBatch",
        |range| async move {
            let entries = changes[range]
                .iter()
                .enumerate()
                .filter_map(|(i, (receipt, timeout))| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(*receipt)
                        .visibility_timeout(*timeout)
                        .build()
                        .ok()
                })
                .collect();
            let out = client
                .change_message_visibility_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(AwsError::from_sdk)?;
            Ok((
                out.successful().iter().map(|s| s.id().to_owned()).collect(),
                out.failed().to_vec(),
            ))
        },
    )
    .await
}

/// Deletes messages, 10 per call, calls in parallel. Returns the positions in `receipts` not
/// deleted, with why.
pub async fn delete(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    receipts: &[&str],
) -> Vec<(usize, String)> {
    in_batches(receipts.len(), "DeleteMessageBatch", |range| async move {
        let entries = receipts[range]
            .iter()
            .enumerate()
            .filter_map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*receipt)
                    .build()
                    .ok()
            })
            .collect();
        let out = client
            .delete_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(AwsError::from_sdk)?;
        Ok((
            out.successful().iter().map(|s| s.id().to_owned()).collect(),
            out.failed().to_vec(),
        ))
    })
    .await
}

/// A queue's ARN.
pub async fn queue_arn(client: &aws_sdk_sqs::Client, queue_url: &str) -> Result<String, AwsError> {
    client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(AwsError::from_sdk)?
        .attributes
        .and_then(|mut a| a.remove(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .ok_or_else(|| AwsError::local(format!("{queue_url} has no QueueArn")))
}

/// A queue's depth: (`ApproximateNumberOfMessages`, `ApproximateNumberOfMessagesNotVisible`).
pub async fn depth(client: &aws_sdk_sqs::Client, queue_url: &str) -> Result<(u64, u64), AwsError> {
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let out = client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(Q::ApproximateNumberOfMessages)
        .attribute_names(Q::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    let get = |n: Q| {
        out.attributes()
            .and_then(|a| a.get(&n))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((
        get(Q::ApproximateNumberOfMessages),
        get(Q::ApproximateNumberOfMessagesNotVisible),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_respects_count_and_bytes() {
        assert_eq!(pack(&[]), Vec::<Range<usize>>::new());
        assert_eq!(pack(&[10; 23]), vec![0..10, 10..20, 20..23]);
        let half = MAX_MESSAGE_BYTES / 2;
        assert_eq!(pack(&[half, half, 1, half]), vec![0..2, 2..4]);
        assert_eq!(
            pack(&[MAX_MESSAGE_BYTES, 5, MAX_MESSAGE_BYTES]),
            vec![0..1, 1..2, 2..3]
        );
        for batch in pack(&[700_000, 400_000, 300_000, 300_000, 300_000, 200]) {
            assert!(batch.len() <= MAX_BATCH);
        }
    }

    #[test]
    fn unconfirmed_entries_carry_their_reason() {
        let failed = [BatchResultErrorEntry::builder()
            .id("1")
            .sender_fault(false)
            .code("InternalError")
            .message("boom")
            .build()
            .unwrap()];
        let lost = unconfirmed(3, ["0".to_owned()].into_iter(), &failed, "SendMessageBatch");
        assert_eq!(
            lost,
            vec![
                (1, "InternalError: boom".to_owned()),
                (2, "not reported by SendMessageBatch".to_owned())
            ]
        );
    }

    /// Rust's debug form of an SDK error shows struct names and fields: none of it may reach a
    /// message.
    fn assert_readable(message: &str) {
        for debug in ["{", "DispatchFailure(", "Some(", "ConnectorError", "kind: "] {
            assert!(!message.contains(debug), "{debug} in {message}");
        }
    }

    /// A port nothing listens on.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    fn client(
        endpoint: &str,
        credentials: impl aws_sdk_sqs::config::ProvideCredentials + 'static,
    ) -> aws_sdk_sqs::Client {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .endpoint_url(endpoint)
            .credentials_provider(credentials)
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .http_client(crate::aws::https_client())
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_reads_as_a_sentence() {
        let url = format!("http://127.0.0.1:{}", closed_port());
        let creds = aws_sdk_sqs::config::Credentials::new("a", "b", None, None, "test");
        let err = queue_arn(&client(&url, creds), &format!("{url}/1/q"))
            .await
            .unwrap_err();
        assert_eq!(err.kind, AwsErrorKind::Unreachable);
        assert_eq!(err.code, None);
        assert!(
            err.message.starts_with("dispatch failure: io error: ")
                && err.message.contains("Connection refused"),
            "{}",
            err.message
        );
        assert_readable(&err.message);
    }

    #[tokio::test]
    #[allow(deprecated)] // the profile file types' new home (aws-runtime) is no dependency
    async fn missing_credentials_are_told_apart_and_read_as_a_sentence() {
        use aws_config::profile::profile_file::{ProfileFileKind, ProfileFiles};
        let files = ProfileFiles::builder()
            .with_file(ProfileFileKind::Config, "/nonexistent/resq/config")
            .with_file(
                ProfileFileKind::Credentials,
                "/nonexistent/resq/credentials",
            )
            .build();
        let provider_config = aws_config::provider_config::ProviderConfig::empty()
            .with_http_client(crate::aws::https_client());
        let profile = aws_config::profile::ProfileFileCredentialsProvider::builder()
            .configure(&provider_config)
            .profile_files(files)
            .profile_name("resq-no-such-profile")
            .build();
        // an endpoint that does not answer either: the credentials are looked up first
        let url = format!("http://127.0.0.1:{}", closed_port());
        let err = queue_arn(&client(&url, profile), &format!("{url}/1/q"))
            .await
            .unwrap_err();
        assert_eq!(err.kind, AwsErrorKind::Credentials, "{}", err.message);
        assert!(err.message.contains("credential"), "{}", err.message);
        assert_readable(&err.message);
    }

    #[test]
    fn a_service_error_keeps_its_code_and_reads_as_a_sentence() {
        use aws_sdk_sqs::error::{ErrorMetadata, SdkError};
        use aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesError;
        let denied = "User: arn:aws:iam::123456789012:user/ops is not authorized to perform: sqs:getqueueattributes on resource: arn:aws:sqs:us-east-1:123456789012:orders";
        let service = GetQueueAttributesError::generic(
            ErrorMetadata::builder()
                .code("AccessDenied")
                .message(denied)
                .build(),
        );
        let err = AwsError::from_sdk(SdkError::<_, ()>::service_error(service, ()));
        assert_eq!(err.kind, AwsErrorKind::Service);
        assert_eq!(err.code.as_deref(), Some("AccessDenied"));
        assert_eq!(
            err.message,
            format!("service error: unhandled error (AccessDenied): {denied}")
        );
        assert_readable(&err.message);
        // a modelled error, and one without a code
        let missing = GetQueueAttributesError::QueueDoesNotExist(
            aws_sdk_sqs::types::error::QueueDoesNotExist::builder()
                .message("The specified queue does not exist.")
                .build(),
        );
        let err = AwsError::from_sdk(SdkError::<_, ()>::service_error(missing, ()));
        assert_eq!(
            err.message,
            "service error: QueueDoesNotExist: The specified queue does not exist."
        );
        let bare = GetQueueAttributesError::generic(ErrorMetadata::builder().build());
        let err = AwsError::from_sdk(SdkError::<_, ()>::service_error(bare, ()));
        assert_eq!(err.message, "service error: unhandled error");
    }

    #[test]
    fn connector_errors_say_which_kind() {
        use aws_sdk_sqs::error::SdkError;
        use aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesError;
        let timeout = ConnectorError::timeout("HTTP connect timeout occurred after 3.1s".into());
        let err = AwsError::from_sdk(SdkError::<GetQueueAttributesError, ()>::dispatch_failure(
            timeout,
        ));
        assert_eq!(err.kind, AwsErrorKind::Timeout);
        assert_eq!(
            err.message,
            "dispatch failure: timeout: HTTP connect timeout occurred after 3.1s"
        );
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = AwsError::from_sdk(SdkError::<GetQueueAttributesError, ()>::dispatch_failure(
            ConnectorError::io(refused.into()),
        ));
        assert_eq!(err.kind, AwsErrorKind::Unreachable);
        assert_eq!(err.message, "dispatch failure: io error: refused");
        assert_eq!(AwsError::local("x").kind, AwsErrorKind::Other);
    }

    #[test]
    fn a_chain_does_not_repeat_itself() {
        #[derive(Debug)]
        struct Layer(&'static str, Option<Box<Layer>>);
        impl std::fmt::Display for Layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Layer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|l| l as _)
            }
        }
        let chain = Layer(
            "service error",
            Some(Box::new(Layer(
                "QueueDoesNotExist: no such queue",
                Some(Box::new(Layer(
                    "no such queue",
                    Some(Box::new(Layer("", Some(Box::new(Layer("root", None)))))),
                ))),
            ))),
        );
        assert_eq!(
            error_chain(&chain),
            "service error: QueueDoesNotExist: no such queue: root"
        );
    }
}
