//! The consumer's event source mapping, in a moto server beside LocalStack: LocalStack cannot
//! run a Lambda function or keep its mapping (both need Docker), and moto serves the Lambda
//! API's event source mappings without either. The redriver's breaker switches the mapping
//! there (`AWS_ENDPOINT_URL_LAMBDA`), and the soak's poller reads its state there
//! ([`crate::driver::MappingSwitch`]) as Lambda's poller would.

use std::path::Path;
use std::time::Duration;

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{FunctionResponseType, Runtime};

use crate::CliError;
use crate::driver::MappingSwitch;
use crate::emulator::MotoServer;

/// The smallest zip archive (an empty one): moto keeps a function's code without reading it.
const EMPTY_ZIP: [u8; 22] = [
    0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// The consumer's mapping in moto.
pub struct ConsumerMapping {
    /// The moto server (stopped when this is dropped).
    pub moto: MotoServer,
    /// The mapping's UUID (`CONSUMER_EVENT_SOURCE_MAPPING`).
    pub uuid: String,
    /// A Lambda client on moto (the soak's own: the mapping's state for the picture).
    pub lambda: aws_sdk_lambda::Client,
}

impl ConsumerMapping {
    /// Starts moto and makes the consumer's function and its mapping of the main queue whose
    /// ARN (in LocalStack) is `queue_arn`.
    ///
    /// moto accepts a mapping only for a queue it holds itself, found by ARN: so moto runs in
    /// LocalStack's account (`MOTO_ACCOUNT_ID`, read off the ARN) and holds an empty queue of the
    /// same name, whose ARN is then the LocalStack queue's. Nothing is ever sent to it: the
    /// orders are in LocalStack, where the soak's poller receives them.
    pub async fn start(
        moto_server: &Path,
        queue_arn: &str,
        function_name: &str,
        batch_size: i32,
        batching_window: Duration,
    ) -> Result<Self, CliError> {
        let parts: Vec<&str> = queue_arn.split(':').collect();
        let (Some(account), Some(queue)) = (parts.get(4), parts.get(5)) else {
            return Err(CliError::Usage(format!("not a queue ARN: {queue_arn}")));
        };
        let moto = MotoServer::start_with(moto_server, &[("MOTO_ACCOUNT_ID", account)])?;
        let config = moto.sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&config);
        let url = sqs
            .create_queue()
            .queue_name(*queue)
            .send()
            .await
            .map_err(|e| CliError::aws("creating the mapping's queue in moto", e))?
            .queue_url
            .unwrap_or_default();
        let twin = resq_ops::status::queue_arn(&sqs, &url)
            .await
            .map_err(|source| CliError::Aws {
                what: "reading the mapping's queue in moto".into(),
                source,
            })?;
        if twin != queue_arn {
            return Err(CliError::Usage(format!(
                "moto's queue is {twin}, not {queue_arn}: the mapping would name another queue"
            )));
        }
        let role = format!("{function_name}-role");
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        let form = format!(
            "Action=CreateRole&Version=2010-05-08&RoleName={role}&AssumeRolePolicyDocument={}",
            form_encoded(trust)
        );
        match moto.post_form("iam", &form).await? {
            (200, _) => {}
            (status, body) => {
                return Err(CliError::Usage(format!(
                    "moto refused the consumer's role ({status}): {body}"
                )));
            }
        }
        let lambda = aws_sdk_lambda::Client::new(&config);
        lambda
            .create_function()
            .function_name(function_name)
            .runtime(Runtime::Providedal2023)
            .handler("bootstrap")
            .role(format!("arn:aws:iam::{account}:role/{role}"))
            .code(
                aws_sdk_lambda::types::FunctionCode::builder()
                    .zip_file(Blob::new(EMPTY_ZIP.to_vec()))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| CliError::aws("creating the consumer function in moto", e))?;
        let uuid = lambda
            .create_event_source_mapping()
            .function_name(function_name)
            .event_source_arn(queue_arn)
            .batch_size(batch_size)
            .maximum_batching_window_in_seconds(batching_window.as_secs() as i32)
            .function_response_types(FunctionResponseType::ReportBatchItemFailures)
            .enabled(true)
            .send()
            .await
            .map_err(|e| CliError::aws("creating the consumer's event source mapping in moto", e))?
            .uuid
            .ok_or_else(|| CliError::Usage("moto gave the mapping no UUID".into()))?;
        Ok(Self { moto, uuid, lambda })
    }

    /// The mapping's switch as the poller honours it, read every `every`.
    pub fn switch(&self, every: Duration) -> MappingSwitch {
        MappingSwitch::new(self.lambda.clone(), &self.uuid, every)
    }

    /// Whether the mapping is off now (`Disabled`, `Disabling`); `None` when it cannot be read.
    pub async fn paused(&self) -> Option<bool> {
        let out = self
            .lambda
            .get_event_source_mapping()
            .uuid(&self.uuid)
            .send()
            .await
            .ok()?;
        resq::mapping::MappingState::parse(out.state()?)
            .is_on()
            .map(|on| !on)
    }
}

/// `text` as a form value (`application/x-www-form-urlencoded`).
fn form_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(
            form_encoded(r#"{"a": "b/c"}"#),
            "%7B%22a%22%3A%20%22b%2Fc%22%7D"
        );
        assert_eq!(form_encoded("plain-1_2.3~"), "plain-1_2.3~");
    }
}
