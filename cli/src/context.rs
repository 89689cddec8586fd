//! Where the commands act: clients and the stack's queue URLs, bucket and the consumer's event
//! source mapping.

use std::time::{Duration, Instant};

use resq::keep::KeptMessage;
use resq::settle::{Deadlines, Pacer, Plan, Report, Settler, Unpaced};
use resq::store::S3Store;

use crate::CliError;

/// How long an operator's settle may take: a command has no Lambda deadline, a minute bounds
/// each of its plans.
const SETTLE_WITHIN: Duration = Duration::from_secs(60);

/// The resources a command works on. A command asks for the names it uses through
/// [`Context::main_queue`], [`Context::dlq`], [`Context::archive_bucket`] and
/// [`Context::mapping`], which say which flag is missing; the fields hold them as given, empty
/// when not given.
#[derive(Debug, Clone)]
pub struct Context {
    /// SQS client.
    pub sqs: aws_sdk_sqs::Client,
    /// S3 client.
    pub s3: aws_sdk_s3::Client,
    /// CloudWatch client.
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// Lambda client (the consumer's event source mapping).
    pub lambda: aws_sdk_lambda::Client,
    /// The main queue; empty when not given.
    pub main_queue_url: String,
    /// Its DLQ; empty when not given.
    pub dlq_url: String,
    /// The archive bucket; empty when not given.
    pub bucket: String,
    /// The consumer's event source mapping (its UUID); empty when not given.
    pub mapping: String,
    /// The stack the names were read from (`--stack`), when one was named: a name it lacks is
    /// said to be missing from it.
    pub stack: Option<String>,
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

    /// [`Endpoint::sdk_config`], which must know its region.
    pub async fn regional_config(&self) -> Result<aws_config::SdkConfig, CliError> {
        let config = self.sdk_config().await;
        match config.region() {
            Some(_) => Ok(config),
            None => Err(CliError::Missing {
                flag: "--region",
                var: "AWS_REGION",
                hint: "the region the stack is deployed in (or a region in your AWS profile)",
            }),
        }
    }
}

/// Where to find a name: the stack output that holds it.
macro_rules! from_output {
    ($output:literal) => {
        concat!(
            "the stack output ",
            $output,
            " has it (`sam list stack-outputs --stack-name STACK` lists them)"
        )
    };
}

impl Context {
    /// Builds the context. The names are optional here: each command asks for those it uses
    /// (see [`Context::main_queue`]). The region must be known (`--region`, `AWS_REGION` or the
    /// profile's), unless an endpoint is given.
    pub async fn new(
        endpoint: &Endpoint,
        main_queue_url: Option<String>,
        dlq_url: Option<String>,
        bucket: Option<String>,
    ) -> Result<Self, CliError> {
        let given = |v: Option<String>| v.map(|s| s.trim().to_owned()).unwrap_or_default();
        let config = endpoint.regional_config().await?;
        Ok(Self::from_config(
            &config,
            given(main_queue_url),
            given(dlq_url),
            given(bucket),
        ))
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
            lambda: aws_sdk_lambda::Client::new(config),
            main_queue_url,
            dlq_url,
            bucket,
            mapping: String::new(),
            stack: None,
        }
    }

    /// The context with the stack its names came from.
    pub fn from_stack(mut self, stack: Option<String>) -> Self {
        self.stack = stack;
        self
    }

    /// The context with the consumer's event source mapping (`--mapping`, the stack's, or
    /// `CONSUMER_EVENT_SOURCE_MAPPING`).
    pub fn with_mapping(mut self, mapping: Option<String>) -> Self {
        self.mapping = mapping.map(|m| m.trim().to_owned()).unwrap_or_default();
        self
    }

    /// The consumer's event source mapping's UUID, or which flag gives it.
    pub fn mapping(&self) -> Result<&str, CliError> {
        self.need(
            &self.mapping,
            ("--mapping", "CONSUMER_EVENT_SOURCE_MAPPING"),
            "ConsumerEventSourceMapping",
            from_output!("ConsumerEventSourceMapping"),
        )
    }

    /// The consumer's event source mapping, when one is named.
    pub fn mapping_named(&self) -> Option<&str> {
        Some(self.mapping.trim()).filter(|m| !m.is_empty())
    }

    /// The main queue's URL, or which flag gives it.
    pub fn main_queue(&self) -> Result<&str, CliError> {
        self.need(
            &self.main_queue_url,
            ("--main-queue-url", "MAIN_QUEUE_URL"),
            "OrdersQueueUrl",
            from_output!("OrdersQueueUrl"),
        )
    }

    /// The DLQ's URL, or which flag gives it.
    pub fn dlq(&self) -> Result<&str, CliError> {
        self.need(
            &self.dlq_url,
            ("--dlq-url", "DLQ_URL"),
            "DeadLetterQueueUrl",
            from_output!("DeadLetterQueueUrl"),
        )
    }

    /// The archive bucket, or which flag gives it.
    pub fn archive_bucket(&self) -> Result<&str, CliError> {
        self.need(
            &self.bucket,
            ("--archive-bucket", "ARCHIVE_BUCKET"),
            "ArchiveBucketName",
            from_output!("ArchiveBucketName"),
        )
    }

    /// The archive bucket as resq's object store.
    pub(crate) fn store(&self) -> S3Store {
        S3Store::new(self.s3.clone(), &self.bucket)
    }

    /// The kept messages the DLQ's keep lists (in the bucket) name as still hidden.
    pub(crate) async fn kept(&self) -> Result<Vec<KeptMessage>, CliError> {
        let (dlq_url, bucket) = (self.dlq()?, self.archive_bucket()?);
        resq::keep::still_hidden(&self.store(), dlq_url, chrono::Utc::now())
            .await
            .map_err(|source| CliError::Aws {
                what: format!("reading the keep lists in s3://{bucket}/kept/"),
                source,
            })
    }

    /// Carries out an operator's plan through resq's settle executor, within
    /// [`SETTLE_WITHIN`]; archive entries it writes are signed `resq`.
    pub(crate) async fn settle(&self, plan: &Plan) -> Report {
        self.settle_paced(plan, &Unpaced).await
    }

    /// [`Context::settle`], its copies paced by `pacer`.
    pub(crate) async fn settle_paced(&self, plan: &Plan, pacer: &impl Pacer) -> Report {
        let store = self.store();
        let by = Deadlines::all_by(Instant::now() + SETTLE_WITHIN);
        Settler::new(&self.sqs, &store, "resq")
            .settle(plan, by, pacer)
            .await
    }

    fn need<'a>(
        &self,
        value: &'a str,
        (flag, var): (&'static str, &'static str),
        output: &'static str,
        hint: &'static str,
    ) -> Result<&'a str, CliError> {
        let value = value.trim();
        match (value.is_empty(), &self.stack) {
            (false, _) => Ok(value),
            (true, Some(stack)) => Err(CliError::MissingFromStack {
                stack: stack.clone(),
                output,
                flag,
            }),
            (true, None) => Err(CliError::Missing { flag, var, hint }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(main: &str, dlq: &str, bucket: &str) -> Context {
        let config = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        Context::from_config(&config, main.into(), dlq.into(), bucket.into())
    }

    #[test]
    fn a_name_is_asked_for_only_when_used() {
        let ctx = context("", "", "resq-archive");
        assert_eq!(ctx.archive_bucket().unwrap(), "resq-archive");
        let err = ctx.main_queue().unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert_eq!(
            err.to_string(),
            "--main-queue-url (or MAIN_QUEUE_URL) is required: the stack output OrdersQueueUrl has it (`sam list stack-outputs --stack-name STACK` lists them)"
        );
        assert!(ctx.dlq().unwrap_err().to_string().starts_with(
            "--dlq-url (or DLQ_URL) is required: the stack output DeadLetterQueueUrl has it"
        ));
        let ctx = context("http://q/1/orders", " ", "");
        assert_eq!(ctx.main_queue().unwrap(), "http://q/1/orders");
        assert!(ctx.dlq().is_err());
        assert!(ctx.archive_bucket().unwrap_err().to_string().starts_with(
            "--archive-bucket (or ARCHIVE_BUCKET) is required: the stack output ArchiveBucketName has it"
        ));
        // the consumer's mapping: none named is not configured, and asked for, said where
        assert_eq!(ctx.mapping_named(), None);
        assert!(ctx.mapping().unwrap_err().to_string().starts_with(
            "--mapping (or CONSUMER_EVENT_SOURCE_MAPPING) is required: the stack output ConsumerEventSourceMapping has it"
        ));
        let ctx = ctx.with_mapping(Some(" 7c1f0d2e ".into()));
        assert_eq!(
            (ctx.mapping_named(), ctx.mapping().ok()),
            (Some("7c1f0d2e"), Some("7c1f0d2e"))
        );
        assert_eq!(ctx.with_mapping(Some(" ".into())).mapping_named(), None);
        // read from a stack that lacks the output: said so
        let ctx = context("", "", "").from_stack(Some("resq-old".into()));
        let err = ctx.dlq().unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert_eq!(
            err.to_string(),
            "the stack resq-old has no output DeadLetterQueueUrl (deployed from an older template?): pass --dlq-url, or deploy the current template"
        );
    }
}
