//! The one type of a failed AWS call, [`AwsError`], whichever port made it (SQS, S3,
//! CloudWatch): its service code when there was one, its whole chain of causes as sentences,
//! and why it did not go through (docs/design.md, "Errors").

use std::future::Future;

use aws_sdk_sqs::error::{ConnectorError, ErrorMetadata, ProvideErrorMetadata};

/// An AWS call that did not go through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AwsError {
    /// The service's error code when there was one (`RequestThrottled`, `AccessDenied`, …).
    pub code: Option<String>,
    /// The error and its causes, each as its message (see `error_chain`).
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
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// One SQS call through `client`, its error as resq reads it.
    async fn queue_arn(client: &aws_sdk_sqs::Client, queue_url: &str) -> Result<(), AwsError> {
        let call = client.get_queue_attributes().queue_url(queue_url).send();
        call.await.map(|_| ()).map_err(AwsError::from_sdk)
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
