//! AWS client construction shared by the functions and the tools.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_config::timeout::TimeoutConfig;
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// How long a connection may take to open.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one attempt of an AWS call may take (a long poll gets its wait on top, see
/// [`long_poll_timeouts`]): a call that hangs fails and is retried, or gives up, instead of
/// holding a run until its deadline.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an AWS call may take, its retries included.
pub(crate) const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The timeouts of every AWS call resq makes (both functions, the CLI, the tools).
pub fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(ATTEMPT_TIMEOUT)
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
}

/// The timeouts of a long poll that waits up to `wait_seconds` for its first message: the
/// wait on top of [`timeouts`].
pub(crate) fn long_poll_timeouts(wait_seconds: i32) -> TimeoutConfig {
    let wait = Duration::from_secs(wait_seconds.max(0) as u64);
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(ATTEMPT_TIMEOUT + wait)
        .operation_timeout(OPERATION_TIMEOUT + wait)
        .build()
}

/// The SDK's configuration loader with resq's HTTPS client: every client resq builds (the
/// functions, the CLI, the tests) goes through here. It reads the region, the credentials and
/// the SDK's own `AWS_ENDPOINT_URL` (which points everything at a local emulator) from the
/// environment.
pub fn config_loader() -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
        .timeout_config(timeouts())
}

/// HTTPS (and plain HTTP, for a local emulator) over rustls with ring: one TLS stack, and a
/// much smaller one than the SDK's default (aws-lc).
pub(crate) fn https_client() -> SharedHttpClient {
    https_client_keeping(None)
}

/// resq's HTTPS client, keeping at most `idle_per_host` idle connections to a host (hyper's
/// default when `None`: no limit): what the consumer's gated client wraps.
pub fn https_client_keeping(idle_per_host: Option<usize>) -> SharedHttpClient {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
    let mut builder = aws_smithy_http_client::Builder::new();
    builder.set_pool_max_idle_per_host(idle_per_host);
    builder
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// An S3 client. Against a custom endpoint (a local emulator) it addresses buckets by path,
/// since `bucket.127.0.0.1` does not resolve.
pub fn s3_client(config: &SdkConfig) -> aws_sdk_s3::Client {
    let builder =
        aws_sdk_s3::config::Builder::from(config).force_path_style(config.endpoint_url().is_some());
    aws_sdk_s3::Client::from_conf(builder.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server that accepts connections and never answers.
    fn silent_server() -> (std::net::TcpListener, String) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        (listener, url)
    }

    #[tokio::test]
    async fn every_call_has_an_operation_timeout() {
        let config = config_loader()
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:1")
            .test_credentials()
            .load()
            .await;
        let t = config.timeout_config().expect("a timeout config");
        assert_eq!(t.operation_attempt_timeout(), Some(ATTEMPT_TIMEOUT));
        assert_eq!(t.operation_timeout(), Some(OPERATION_TIMEOUT));
        assert_eq!(t.connect_timeout(), Some(CONNECT_TIMEOUT));
        let poll = long_poll_timeouts(20);
        assert_eq!(
            poll.operation_attempt_timeout(),
            Some(ATTEMPT_TIMEOUT + Duration::from_secs(20))
        );
    }

    #[tokio::test]
    async fn a_call_that_hangs_fails_instead_of_holding_the_run() {
        // GIVEN an SQS endpoint that accepts the connection and never answers, and the
        // timeouts of resq's loader made short
        let (_listener, url) = silent_server();
        let short = TimeoutConfig::builder()
            .operation_attempt_timeout(Duration::from_millis(200))
            .operation_timeout(Duration::from_millis(700))
            .build();
        let config = config_loader()
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(&url)
            .test_credentials()
            .timeout_config(short)
            .load()
            .await;
        let sqs = aws_sdk_sqs::Client::new(&config);
        // WHEN a call is made (wrapped in a much longer guard, which must not be what ends it)
        let call = sqs
            .delete_message()
            .queue_url(format!("{url}/1/q"))
            .receipt_handle("rh")
            .send();
        let out = tokio::time::timeout(Duration::from_secs(60), call).await;
        // THEN the SDK gives up with a timeout error of its own
        let err = out
            .expect("the SDK's own timeout ended the call")
            .unwrap_err();
        assert!(
            format!("{err:?}").to_lowercase().contains("timeout"),
            "{err:?}"
        );
    }
}
