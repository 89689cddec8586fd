//! AWS client construction shared by the functions and the tools.

use aws_config::SdkConfig;

/// Loads the SDK configuration from the environment (region, credentials and the SDK's own
/// `AWS_ENDPOINT_URL`, which points everything at a local emulator).
pub async fn load_config() -> SdkConfig {
    config_loader().load().await
}

/// The SDK's configuration loader with resq's HTTPS client: every client resq builds (the
/// functions, the CLI, the tests) goes through here.
pub fn config_loader() -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(https_client())
}

/// HTTPS (and plain HTTP, for a local emulator) over rustls with ring: one TLS stack, and a
/// much smaller one than the SDK's default (aws-lc).
pub fn https_client() -> aws_sdk_sqs::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
    aws_smithy_http_client::Builder::new()
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
