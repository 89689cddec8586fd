//! SQS as resq uses it: the [`Queues`] port (one call each, with per-entry results) and its
//! adapter on the SDK's client, the messages sent and received, batch packing, and one error
//! type for a call that failed.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::ops::Range;

use aws_sdk_sqs::error::{ConnectorError, ErrorMetadata, ProvideErrorMetadata};
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry,
    DeleteMessageBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};

use crate::archive::{ArchiveEntry, OriginalMessage};
use crate::attributes::{
    AttributeValue, FAILURE_CLASS_PERMANENT, MAX_MESSAGE_BYTES, MessageAttributes, RedriveCount,
    X_FAILURE_CLASS, X_FAILURE_REASON,
};
use crate::reason::ArchiveReason;

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

/// A message as `ReceiveMessage` returns it, in resq's form (what the redriver reads from the
/// DLQ, what the operator tool peeks at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// Its id in the queue.
    pub message_id: String,
    /// The receipt handle of this receive.
    pub receipt_handle: String,
    /// The body.
    pub body: String,
    /// System attributes (`SentTimestamp`, `ApproximateReceiveCount`, `MessageGroupId`, …).
    pub attributes: BTreeMap<String, String>,
    /// Message attributes with scalar values.
    pub message_attributes: MessageAttributes,
    /// List-only attributes, which SQS cannot carry in a copy.
    pub dropped_attributes: Vec<String>,
}

impl ReceivedMessage {
    /// Reads an SDK message; list-valued attributes are named in
    /// [`ReceivedMessage::dropped_attributes`] instead of kept.
    pub fn from_sdk(m: aws_sdk_sqs::types::Message) -> Self {
        let mut message_attributes = MessageAttributes::new();
        let mut dropped_attributes = Vec::new();
        for (name, v) in m.message_attributes.unwrap_or_default() {
            match AttributeValue::from_sdk(&v) {
                Some(a) => {
                    message_attributes.insert(name, a);
                }
                None => dropped_attributes.push(name),
            }
        }
        Self {
            message_id: m.message_id.unwrap_or_default(),
            receipt_handle: m.receipt_handle.unwrap_or_default(),
            body: m.body.unwrap_or_default(),
            attributes: m
                .attributes
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k.as_str().to_owned(), v))
                .collect(),
            message_attributes,
            dropped_attributes,
        }
    }

    /// `x-redrive-count` as read.
    pub fn redrive_count(&self) -> RedriveCount {
        crate::attributes::parse_redrive_count(&self.message_attributes)
    }

    /// Epoch millis of the producer's send.
    pub fn first_sent_at(&self) -> Option<u64> {
        crate::attributes::first_sent_at(
            &self.message_attributes,
            self.attributes.get("SentTimestamp").map(String::as_str),
        )
    }

    /// `x-failure-reason`, if any.
    pub fn failure_reason(&self) -> Option<&str> {
        self.message_attributes
            .get(X_FAILURE_REASON)
            .and_then(|v| v.string_value.as_deref())
    }

    /// Marked `x-failure-class=permanent` by the consumer.
    pub fn is_permanent(&self) -> bool {
        self.message_attributes
            .get(X_FAILURE_CLASS)
            .and_then(|v| v.string_value.as_deref())
            == Some(FAILURE_CLASS_PERMANENT)
    }

    /// The FIFO message group, if any.
    pub fn group_id(&self) -> Option<&str> {
        self.attributes.get("MessageGroupId").map(String::as_str)
    }

    /// What the archive keeps of it: the message whole, and what resq knows about it.
    pub fn archive_entry(
        &self,
        reason: ArchiveReason,
        source_queue: &str,
        last_error: Option<String>,
    ) -> ArchiveEntry {
        ArchiveEntry::new(
            reason,
            source_queue,
            OriginalMessage {
                message_id: self.message_id.clone(),
                body: self.body.clone(),
                message_attributes: self.message_attributes.clone(),
                attributes: self.attributes.clone(),
                raw_record: None,
            },
            last_error,
        )
    }
}

/// Per entry of a batch call: `Ok` when SQS reported it `Successful` (for a send, with the
/// copy's new message id), else why not.
pub type EntryResults<T> = Vec<Result<T, AwsError>>;

/// The SQS calls resq makes, one call each (the batch calls take at most [`MAX_BATCH`]
/// entries; [`crate::settle`] splits and paces them). Implemented on the SDK's client, and on
/// an in-memory double for tests (`test-util`).
pub trait Queues: Send + Sync {
    /// One `ReceiveMessage`: up to `max` (1–10) messages with every message and system
    /// attribute, hidden for `visibility` seconds (`None`: the queue's own timeout), waiting up
    /// to `wait_seconds` for the first.
    fn receive(
        &self,
        queue: &str,
        max: i32,
        visibility: Option<i32>,
        wait_seconds: i32,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, AwsError>> + Send;

    /// One `SendMessageBatch`. `Err` when the call itself failed: nothing was confirmed.
    fn send(
        &self,
        queue: &str,
        messages: &[&OutgoingMessage],
    ) -> impl Future<Output = Result<EntryResults<String>, AwsError>> + Send;

    /// One `DeleteMessageBatch` of receipt handles.
    fn delete(
        &self,
        queue: &str,
        receipt_handles: &[&str],
    ) -> impl Future<Output = Result<EntryResults<()>, AwsError>> + Send;

    /// One `ChangeMessageVisibilityBatch` of (receipt handle, seconds).
    fn change_visibility(
        &self,
        queue: &str,
        changes: &[(&str, i32)],
    ) -> impl Future<Output = Result<EntryResults<()>, AwsError>> + Send;

    /// One `GetQueueAttributes`: the queue's redrive policy, retention and visibility timeout.
    fn limits(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<crate::source::QueueLimits, AwsError>> + Send;
}

/// One `ReceiveMessage` call as Lambda's poller and the redriver make it: up to `max` (1–10)
/// messages with every message and system attribute, hidden for `visibility` seconds (`None`:
/// the queue's own visibility timeout), waiting up to `wait_seconds` for the first; as the SDK
/// gives them (the local event source mapping builds Lambda's event from them).
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
        .customize()
        .config_override(
            aws_sdk_sqs::config::Builder::default()
                .timeout_config(crate::aws::long_poll_timeouts(wait_seconds)),
        )
        .send()
        .await
        .map_err(AwsError::from_sdk)?;
    Ok(out.messages.unwrap_or_default())
}

/// [`Queues`] on SQS.
impl Queues for aws_sdk_sqs::Client {
    async fn receive(
        &self,
        queue: &str,
        max: i32,
        visibility: Option<i32>,
        wait_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, AwsError> {
        let messages = receive(self, queue, max, visibility, wait_seconds).await?;
        Ok(messages
            .into_iter()
            .map(ReceivedMessage::from_sdk)
            .collect())
    }

    async fn send(
        &self,
        queue: &str,
        messages: &[&OutgoingMessage],
    ) -> Result<EntryResults<String>, AwsError> {
        let mut entries = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(&m.body)
                .set_message_attributes(
                    Some(sdk_attributes(&m.attributes)?).filter(|a| !a.is_empty()),
                )
                .set_message_group_id(m.group_id.clone())
                .set_message_deduplication_id(m.deduplication_id.clone())
                .build()
                .map_err(|e| AwsError::local(e.to_string()))?;
            entries.push(entry);
        }
        let out = self
            .send_message_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(AwsError::from_sdk)?;
        let successful = out
            .successful()
            .iter()
            .map(|s| (s.id().to_owned(), s.message_id().to_owned()));
        Ok(entry_results(
            messages.len(),
            successful,
            out.failed(),
            "SendMessageBatch",
        ))
    }

    async fn delete(
        &self,
        queue: &str,
        receipt_handles: &[&str],
    ) -> Result<EntryResults<()>, AwsError> {
        let entries = receipt_handles
            .iter()
            .enumerate()
            .map(|(i, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*receipt)
                    .build()
                    .map_err(|e| AwsError::local(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .delete_message_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(AwsError::from_sdk)?;
        let successful = out.successful().iter().map(|s| (s.id().to_owned(), ()));
        Ok(entry_results(
            receipt_handles.len(),
            successful,
            out.failed(),
            "DeleteMessageBatch",
        ))
    }

    async fn change_visibility(
        &self,
        queue: &str,
        changes: &[(&str, i32)],
    ) -> Result<EntryResults<()>, AwsError> {
        let entries = changes
            .iter()
            .enumerate()
            .map(|(i, (receipt, seconds))| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*receipt)
                    .visibility_timeout(*seconds)
                    .build()
                    .map_err(|e| AwsError::local(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .change_message_visibility_batch()
            .queue_url(queue)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(AwsError::from_sdk)?;
        let successful = out.successful().iter().map(|s| (s.id().to_owned(), ()));
        let call = "ChangeMessageVisibilityBatch";
        Ok(entry_results(changes.len(), successful, out.failed(), call))
    }

    async fn limits(&self, queue: &str) -> Result<crate::source::QueueLimits, AwsError> {
        crate::source::read_limits(self, queue).await
    }
}

impl<T: Queues> Queues for &T {
    fn receive(
        &self,
        queue: &str,
        max: i32,
        visibility: Option<i32>,
        wait_seconds: i32,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, AwsError>> + Send {
        (**self).receive(queue, max, visibility, wait_seconds)
    }

    fn send(
        &self,
        queue: &str,
        messages: &[&OutgoingMessage],
    ) -> impl Future<Output = Result<EntryResults<String>, AwsError>> + Send {
        (**self).send(queue, messages)
    }

    fn delete(
        &self,
        queue: &str,
        receipt_handles: &[&str],
    ) -> impl Future<Output = Result<EntryResults<()>, AwsError>> + Send {
        (**self).delete(queue, receipt_handles)
    }

    fn change_visibility(
        &self,
        queue: &str,
        changes: &[(&str, i32)],
    ) -> impl Future<Output = Result<EntryResults<()>, AwsError>> + Send {
        (**self).change_visibility(queue, changes)
    }

    fn limits(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<crate::source::QueueLimits, AwsError>> + Send {
        (**self).limits(queue)
    }
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

/// Per entry of a call of `len`: `Ok` for the ids SQS listed `Successful`, else its `Failed`
/// entry as an error (an entry listed nowhere counts as not done).
fn entry_results<T>(
    len: usize,
    successful: impl Iterator<Item = (String, T)>,
    failed: &[BatchResultErrorEntry],
    call: &str,
) -> EntryResults<T> {
    let mut results: EntryResults<T> = (0..len)
        .map(|i| {
            Err(match failed.iter().find(|f| f.id() == i.to_string()) {
                Some(f) => AwsError::service(
                    f.code(),
                    format!("{}: {}", f.code(), f.message().unwrap_or_default()),
                ),
                None => AwsError::local(format!("not reported by {call}")),
            })
        })
        .collect();
    for (id, value) in successful {
        if let Some(r) = id.parse::<usize>().ok().and_then(|i| results.get_mut(i)) {
            *r = Ok(value);
        }
    }
    results
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
    fn entries_not_reported_successful_carry_their_reason() {
        let failed = [BatchResultErrorEntry::builder()
            .id("1")
            .sender_fault(false)
            .code("InternalError")
            .message("boom")
            .build()
            .unwrap()];
        let successful = [("0".to_owned(), "new-0".to_owned())].into_iter();
        let results = entry_results(3, successful, &failed, "SendMessageBatch");
        assert_eq!(results[0], Ok("new-0".to_owned()));
        let failed = results[1].as_ref().unwrap_err();
        assert_eq!(
            (failed.code.as_deref(), failed.message.as_str()),
            (Some("InternalError"), "InternalError: boom")
        );
        assert_eq!(
            results[2].as_ref().unwrap_err().message,
            "not reported by SendMessageBatch"
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

    /// The adapter on the SDK's client, against faults the emulators cannot produce (partial
    /// batch failures, throttling), through aws-smithy-mocks.
    mod adapter {
        use super::super::*;
        use aws_sdk_sqs::Client;
        use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
        use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
        use aws_sdk_sqs::types::ChangeMessageVisibilityBatchResultEntry;
        use aws_sdk_sqs::types::error::RequestThrottled;
        use aws_smithy_mocks::{RuleMode, mock, mock_client};

        fn throttled() -> RequestThrottled {
            let meta = aws_sdk_sqs::error::ErrorMetadata::builder()
                .code("RequestThrottled")
                .message("Rate exceeded")
                .build();
            RequestThrottled::builder()
                .message("Rate exceeded")
                .meta(meta)
                .build()
        }

        #[tokio::test]
        async fn a_partly_failed_visibility_call_is_reported_per_entry() {
            // GIVEN SQS accepts entries 0 and 2 but not entry 1
            let rule = mock!(Client::change_message_visibility_batch)
                .match_requests(|r| r.queue_url() == Some("main"))
                .then_compute_output(|req| {
                    let mut out = ChangeMessageVisibilityBatchOutput::builder();
                    for e in req.entries() {
                        if e.id() == "1" {
                            out = out.failed(
                                BatchResultErrorEntry::builder()
                                    .id("1")
                                    .sender_fault(true)
                                    .code("ReceiptHandleIsInvalid")
                                    .message("expired")
                                    .build()
                                    .unwrap(),
                            );
                        } else {
                            out = out.successful(
                                ChangeMessageVisibilityBatchResultEntry::builder()
                                    .id(e.id())
                                    .build()
                                    .unwrap(),
                            );
                        }
                    }
                    out.build().unwrap()
                });
            let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
            // WHEN three changes are made in one call
            let results = client
                .change_visibility("main", &[("rh0", 5), ("rh1", 5), ("rh2", 5)])
                .await
                .unwrap();
            // THEN entry 1 is reported, with the reason
            assert_eq!(rule.num_calls(), 1);
            assert!(results[0].is_ok() && results[2].is_ok());
            let failed = results[1].as_ref().unwrap_err();
            assert_eq!(failed.code.as_deref(), Some("ReceiptHandleIsInvalid"));
            assert_eq!(failed.message, "ReceiptHandleIsInvalid: expired");
        }

        #[tokio::test]
        async fn a_failed_visibility_call_is_the_calls_error() {
            let rule = mock!(Client::change_message_visibility_batch)
                .sequence()
                .http_status(500, None)
                .repeatedly()
                .build();
            let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
            let result = client.change_visibility("main", &[("rh0", 5)]).await;
            assert!(result.is_err(), "{result:?}");
        }

        #[tokio::test]
        async fn a_throttled_send_is_an_error_not_a_drop() {
            // the rule answers only the call that carries the copy as built (one entry, body and
            // attributes unchanged, no FIFO ids): any other request would find no rule and fail
            // with a different error
            let rule = mock!(Client::send_message_batch)
                .match_requests(|r| {
                    let [entry] = r.entries() else { return false };
                    entry.message_body() == "{"
                        && entry
                            .message_attributes()
                            .and_then(|a| a.get("x-failure-class"))
                            .and_then(|v| v.string_value())
                            == Some("permanent")
                        && entry.message_group_id().is_none()
                        && entry.message_deduplication_id().is_none()
                        && r.queue_url() == Some("dlq")
                })
                .then_error(|| SendMessageBatchError::RequestThrottled(throttled()));
            let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
            let message = OutgoingMessage {
                body: "{".into(),
                attributes: MessageAttributes::from([(
                    "x-failure-class".into(),
                    AttributeValue::string("permanent"),
                )]),
                group_id: None,
                deduplication_id: None,
            };
            let err = client.send("dlq", &[&message]).await.unwrap_err();
            // THEN the throttle is the call's error (nothing counted as sent), as the service said
            assert_eq!(err.code.as_deref(), Some("RequestThrottled"));
            assert_eq!(err.kind, AwsErrorKind::Service);
            assert!(err.message.contains("Rate exceeded"), "{err}");
            assert!(rule.num_calls() >= 1, "the copy reached SQS as built");
        }
    }
}
