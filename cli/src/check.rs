//! `resq check --function NAME`: AWS's wiring guidance, the rules `resq stack check` holds the
//! template to ([`stack::wiring`], their one home), applied read-only to any deployed function:
//! its timeout, each event source mapping that feeds it, each SQS queue they read and that
//! queue's DLQ. Reading is here ([`read`]); the rules are pure.

use aws_sdk_lambda::error::ProvideErrorMetadata;
use aws_sdk_lambda::types::{EventSourceMappingConfiguration, FunctionResponseType};

use crate::CliError;
use crate::stack::{self, Verdict, Wiring, WiringNames};

/// A deployed pipeline's settings, as the wiring rules name them (each with the resource it
/// belongs to, so that the fix is found where it is set).
pub const DEPLOYED_NAMES: WiringNames = WiringNames {
    timeout: "the function's Timeout",
    window: "the mapping's MaximumBatchingWindowInSeconds",
    visibility: Some("the queue's VisibilityTimeout"),
    max_receive_count: "the queue's RedrivePolicy maxReceiveCount",
    retention: "the queue's MessageRetentionPeriod",
    dlq_retention: Some("the DLQ's MessageRetentionPeriod"),
    maximum_concurrency: "the mapping's ScalingConfig.MaximumConcurrency",
    pollers: "the mapping's ProvisionedPollerConfig",
};

/// What `resq check --function` found.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCheck {
    /// The function, as named.
    pub function: String,
    /// Its timeout, seconds.
    pub timeout: f64,
    /// Its event source mappings, in Lambda's order.
    pub sources: Vec<Source>,
}

/// One event source mapping of the function and what the rules say of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// The mapping's UUID.
    pub mapping: String,
    /// Its state (`Enabled`, `Disabled`, …).
    pub state: String,
    /// The ARN it reads.
    pub source_arn: String,
    /// The rules' verdicts; empty for a source that is not an SQS queue (not checked).
    pub verdicts: Vec<Verdict>,
}

impl FunctionCheck {
    /// The settings in conflict, each once, in the order found.
    pub fn in_conflict(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for v in self.sources.iter().flat_map(|s| &s.verdicts) {
            if let Verdict::Conflict(c) = v {
                for p in &c.parameters {
                    if !out.contains(p) {
                        out.push(p);
                    }
                }
            }
        }
        out
    }

    /// The error the command ends with when a rule is broken.
    pub fn failure(&self) -> Option<CliError> {
        let settings = self.in_conflict();
        (!settings.is_empty()).then(|| CliError::Miswired {
            function: self.function.clone(),
            settings: settings.into_iter().map(str::to_owned).collect(),
        })
    }
}

/// The wiring of one SQS source, from what was read: the function's timeout, its mapping and
/// the queue's (and its DLQ's) limits.
pub fn wiring(
    timeout: f64,
    mapping: &EventSourceMappingConfiguration,
    queue: &resq::sqs::QueueLimits,
    dlq_retention: Option<f64>,
) -> Wiring {
    let pollers = mapping.provisioned_poller_config().map(|p| {
        // Lambda's defaults for SQS when a bound is left out
        (
            f64::from(p.minimum_pollers().unwrap_or(2)),
            f64::from(p.maximum_pollers().unwrap_or(200)),
        )
    });
    Wiring {
        timeout,
        window: f64::from(mapping.maximum_batching_window_in_seconds().unwrap_or(0)),
        visibility: queue.visibility_timeout.as_secs_f64(),
        max_receive_count: queue.max_receive_count.map(f64::from),
        retention: queue.retention.as_secs_f64(),
        dlq_retention,
        maximum_concurrency: mapping
            .scaling_config()
            .and_then(|s| s.maximum_concurrency())
            .map(f64::from),
        pollers,
        reports_batch_item_failures: mapping
            .function_response_types()
            .contains(&FunctionResponseType::ReportBatchItemFailures),
    }
}

/// Reads `function`'s timeout, its event source mappings and, for each SQS one, its queue and
/// DLQ, and applies the rules. Read-only.
pub async fn read(
    lambda: &aws_sdk_lambda::Client,
    sqs: &aws_sdk_sqs::Client,
    function: &str,
) -> Result<FunctionCheck, CliError> {
    let configuration = match lambda
        .get_function_configuration()
        .function_name(function)
        .send()
        .await
    {
        Ok(c) => c,
        Err(e) if e.code() == Some("ResourceNotFoundException") => {
            return Err(CliError::NoSuchFunction {
                function: function.to_owned(),
            });
        }
        Err(e) => return Err(CliError::aws(format!("reading the function {function}"), e)),
    };
    let timeout = f64::from(configuration.timeout().unwrap_or(3));
    let mut mappings = Vec::new();
    let mut marker = None;
    loop {
        let page = lambda
            .list_event_source_mappings()
            .function_name(function)
            .set_marker(marker)
            .send()
            .await
            .map_err(|e| {
                CliError::aws(
                    format!("listing the event source mappings of {function}"),
                    e,
                )
            })?;
        mappings.extend(page.event_source_mappings.unwrap_or_default());
        marker = page.next_marker;
        if marker.is_none() {
            break;
        }
    }
    let mut sources = Vec::with_capacity(mappings.len());
    for mapping in mappings {
        let source_arn = mapping.event_source_arn().unwrap_or_default().to_owned();
        let verdicts = match queue_url(sqs, &source_arn).await? {
            None => Vec::new(),
            Some(url) => {
                let queue = limits(sqs, &url).await?;
                let dlq_retention = match &queue.dead_letter_target {
                    Some(dlq) => match queue_url(sqs, dlq).await? {
                        Some(url) => Some(limits(sqs, &url).await?.retention.as_secs_f64()),
                        None => None,
                    },
                    None => None,
                };
                let w = wiring(timeout, &mapping, &queue, dlq_retention);
                stack::wiring(&w, &DEPLOYED_NAMES)
            }
        };
        sources.push(Source {
            mapping: mapping.uuid().unwrap_or_default().to_owned(),
            state: mapping.state().unwrap_or("unknown").to_owned(),
            source_arn,
            verdicts,
        });
    }
    Ok(FunctionCheck {
        function: function.to_owned(),
        timeout,
        sources,
    })
}

/// The URL of the SQS queue `arn` names (`arn:PARTITION:sqs:REGION:ACCOUNT:NAME`); `None` when
/// it names no SQS queue.
async fn queue_url(sqs: &aws_sdk_sqs::Client, arn: &str) -> Result<Option<String>, CliError> {
    let [_, _, service, _, account, name] = arn.splitn(6, ':').collect::<Vec<_>>()[..] else {
        return Ok(None);
    };
    if service != "sqs" {
        return Ok(None);
    }
    let out = sqs
        .get_queue_url()
        .queue_name(name)
        .queue_owner_aws_account_id(account)
        .send()
        .await
        .map_err(|e| CliError::aws(format!("finding the queue {arn}"), e))?;
    Ok(out.queue_url)
}

async fn limits(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<resq::sqs::QueueLimits, CliError> {
    resq::sqs::read_limits(sqs, url)
        .await
        .map_err(|source| CliError::Aws {
            what: format!("reading the attributes of {url}"),
            source,
        })
}
