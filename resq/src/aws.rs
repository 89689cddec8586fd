//! AWS client construction shared by the functions and the tools.

use aws_config::SdkConfig;

/// Loads the SDK configuration from the environment (region, credentials and the SDK's own
/// `AWS_ENDPOINT_URL`, which points everything at a local emulator).
pub async fn load_config() -> SdkConfig {
    aws_config::load_from_env().await
}

/// An S3 client. Against a custom endpoint (a local emulator) it addresses buckets by path,
/// since `bucket.127.0.0.1` does not resolve.
pub fn s3_client(config: &SdkConfig) -> aws_sdk_s3::Client {
    let builder =
        aws_sdk_s3::config::Builder::from(config).force_path_style(config.endpoint_url().is_some());
    aws_sdk_s3::Client::from_conf(builder.build())
}
