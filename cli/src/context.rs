//! Where the commands act: clients and the stack's queue URLs and bucket.

use crate::CliError;

/// The resources a command works on.
#[derive(Debug, Clone)]
pub struct Context {
    /// SQS client.
    pub sqs: aws_sdk_sqs::Client,
    /// S3 client.
    pub s3: aws_sdk_s3::Client,
    /// CloudWatch client.
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// The orders queue.
    pub main_queue_url: String,
    /// Its DLQ.
    pub dlq_url: String,
    /// The archive bucket.
    pub bucket: String,
}

/// Connection settings from the command line.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    /// `--endpoint-url`: a local emulator; otherwise AWS.
    pub endpoint_url: Option<String>,
    /// `--region`, else the SDK's own lookup.
    pub region: Option<String>,
}

impl Endpoint {
    /// The SDK configuration. Against an emulator without credentials configured, dummy
    /// credentials are used (emulators do not check them).
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        let mut loader = resq::aws::config_loader();
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
            if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
                && std::env::var_os("AWS_PROFILE").is_none()
            {
                loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
                    "local",
                    "local",
                    None,
                    None,
                    "resq-local",
                ));
            }
        }
        if let Some(region) = self
            .region
            .clone()
            .or_else(|| self.endpoint_url.as_ref().map(|_| "us-east-1".to_owned()))
        {
            loader = loader.region(aws_config::Region::new(region));
        }
        loader.load().await
    }
}

impl Context {
    /// Builds the context; every name must be given.
    pub async fn new(
        endpoint: &Endpoint,
        main_queue_url: Option<String>,
        dlq_url: Option<String>,
        bucket: Option<String>,
    ) -> Result<Self, CliError> {
        let need = |v: Option<String>, flag: &str, var: &str| {
            v.filter(|s| !s.trim().is_empty()).ok_or_else(|| {
                CliError::Usage(format!(
                    "{flag} (or {var}) is required: the stack's outputs list it"
                ))
            })
        };
        let main_queue_url = need(main_queue_url, "--queue-url", "MAIN_QUEUE_URL")?;
        let dlq_url = need(dlq_url, "--dlq-url", "DLQ_URL")?;
        let bucket = need(bucket, "--bucket", "ARCHIVE_BUCKET")?;
        let config = endpoint.sdk_config().await;
        Ok(Self::from_config(&config, main_queue_url, dlq_url, bucket))
    }

    /// The context over an SDK configuration already loaded.
    pub fn from_config(
        config: &aws_config::SdkConfig,
        main_queue_url: String,
        dlq_url: String,
        bucket: String,
    ) -> Self {
        Self {
            sqs: aws_sdk_sqs::Client::new(config),
            s3: resq::aws::s3_client(config),
            cloudwatch: aws_sdk_cloudwatch::Client::new(config),
            main_queue_url,
            dlq_url,
            bucket,
        }
    }
}
