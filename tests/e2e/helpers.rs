//! What the tests share: the consumer wired to the stack, and Lambda's side of an invocation.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::SqsBatchResponse;
use aws_sdk_sqs::types::{Message, MessageAttributeValue};
use resq::config::Vars;
use resq::store::S3Store;
use resq_consumer::Consumer;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::event::SqsInvocation;
use resq_consumer::handler::{HandlerError, MessageHandler, RecordMeta};
use resq_consumer::order::Order;
use resq_consumer::order::{OrderHandler, RecordOrder};
use resq_e2e::{Queue, REGION, Stack};

/// The reference handler, except that orders whose id starts with `transient-` fail
/// transiently (as a flaky downstream would).
pub struct FlakyDownstream<H>(pub H);

impl<H: OrderHandler> OrderHandler for FlakyDownstream<H> {
    async fn handle(&self, order: &Order, meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
        if order.order_id.as_str().starts_with("transient-") {
            return Err(HandlerError::transient(
                "DOWNSTREAM_UNAVAILABLE",
                "503 from the payment service",
            ));
        }
        self.0.handle(order, meta).await
    }
}

/// The consumer as `main.rs` wires it, configured from the stack's environment plus `extra`.
pub type StackConsumer =
    Consumer<FlakyDownstream<RecordOrder<S3Store>>, aws_sdk_sqs::Client, S3Store>;

pub fn consumer(stack: &Stack, extra: &[(&str, &str)]) -> StackConsumer {
    let mut env = stack.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config =
        ConsumerConfig::from_vars(&Vars(move |k: &str| env.get(k).cloned())).expect("config");
    let store = S3Store::new(stack.s3.clone(), &config.common.archive_bucket);
    Consumer::new(
        FlakyDownstream(RecordOrder::new(store.clone())),
        stack.sqs.clone(),
        store,
        config,
    )
}

/// A consumer's answer to `event` as Lambda invokes it: the payload read as the runtime reads
/// it, the batch handled with 30 s to go, its metrics emitted.
pub async fn answer<H: MessageHandler>(
    consumer: &Consumer<H, aws_sdk_sqs::Client, S3Store>,
    event: &serde_json::Value,
) -> SqsBatchResponse {
    let invocation =
        SqsInvocation::from_json(&event.to_string()).expect("an SQS event is never an error");
    let report = consumer
        .handle(invocation, Instant::now() + Duration::from_secs(30))
        .await
        .expect("an event from the main queue");
    report.metrics.emit();
    report.response
}

/// Backoff of zero: a backed-off message is visible again at once, which proves the
/// visibility change reached SQS (the queue's own timeout is 120 s).
pub const NO_BACKOFF: [(&str, &str); 2] =
    [("BACKOFF_BASE_SECONDS", "0"), ("BACKOFF_MAX_SECONDS", "0")];

/// One invocation as Lambda does it: event from the received messages, call, then delete the
/// records not reported in `batchItemFailures`.
pub async fn invoke<H: MessageHandler>(
    stack: &Stack,
    consumer: &Consumer<H, aws_sdk_sqs::Client, S3Store>,
    queue: &Queue,
    messages: &[Message],
) -> SqsBatchResponse {
    let event = resq_local::event::lambda_event(messages, &queue.arn, REGION);
    let response = answer(consumer, &event).await;
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    let done: Vec<&Message> = messages
        .iter()
        .filter(|m| !failed.contains(&m.message_id().unwrap_or_default()))
        .collect();
    stack.delete(queue, &done).await;
    response
}

pub fn failed_ids(r: &SqsBatchResponse) -> Vec<String> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

pub fn order_body(id: &str) -> String {
    serde_json::json!({"orderId": id, "userId": "u-1", "items": [{"productId": "p-1", "quantity": 2}]}).to_string()
}

pub fn string_attr(v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
        .expect("attribute")
}

pub fn number_attr(v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("Number")
        .string_value(v)
        .build()
        .expect("attribute")
}

/// Sends one message; returns its id.
pub async fn send(
    stack: &Stack,
    queue: &Queue,
    body: &str,
    attrs: &[(&str, MessageAttributeValue)],
    group: Option<&str>,
) -> String {
    let attrs: HashMap<String, MessageAttributeValue> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let mut req = stack
        .sqs
        .send_message()
        .queue_url(&queue.url)
        .message_body(body)
        .set_message_attributes(Some(attrs));
    // a standard queue takes the group alone (a fair queue's tenant)
    if let Some(g) = group {
        req = req.message_group_id(g);
    }
    if let Some(g) = group.filter(|_| resq::sqs::is_fifo(&queue.url)) {
        req = req.message_deduplication_id(format!("{g}-{}", uuid_like(body)));
    }
    req.send()
        .await
        .expect("send")
        .message_id
        .expect("message id")
}

fn uuid_like(s: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    format!("{:x}", h.finish())
}

/// A message's string attribute.
pub fn attr<'a>(m: &'a Message, name: &str) -> Option<&'a str> {
    m.message_attributes()
        .and_then(|a| a.get(name))
        .and_then(|v| v.string_value())
}

/// A message's system attribute.
pub fn sys_attr(m: &Message, name: aws_sdk_sqs::types::MessageSystemAttributeName) -> Option<&str> {
    m.attributes()
        .and_then(|a| a.get(&name))
        .map(String::as_str)
}

/// The redriver as `main.rs` wires it, configured from the stack's environment plus `extra`.
pub type StackRedriver =
    resq_redriver::Redriver<aws_sdk_sqs::Client, S3Store, resq_redriver::ports::CloudWatchAlarms>;

pub fn redriver_config(
    stack: &Stack,
    extra: &[(&str, &str)],
) -> resq_redriver::config::RedriverConfig {
    let mut env = stack.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    resq_redriver::config::RedriverConfig::from_vars(&Vars(move |k: &str| env.get(k).cloned()))
        .expect("config")
}

pub fn redriver(stack: &Stack, extra: &[(&str, &str)]) -> StackRedriver {
    let config = redriver_config(stack, extra);
    let store = S3Store::new(stack.s3.clone(), &config.common.archive_bucket);
    let alarms = resq_redriver::ports::CloudWatchAlarms::new(stack.cloudwatch.clone());
    resq_redriver::Redriver::new(stack.sqs.clone(), store, alarms, config).with_receive_wait(0)
}

/// One redriver invocation with `payload` (a manual payload, or `{}` for the schedule).
pub async fn redrive(
    stack: &Stack,
    r: &StackRedriver,
    payload: serde_json::Value,
    extra: &[(&str, &str)],
) -> resq_redriver::Summary {
    let request =
        resq_redriver::request::RunRequest::from_event(payload, &redriver_config(stack, extra))
            .expect("request");
    r.run(&request, Instant::now() + Duration::from_secs(60))
        .await
}

/// Now, in epoch millis.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// All messages of a queue (received, then released so they stay).
pub async fn drain_view(stack: &Stack, queue: &Queue) -> Vec<Message> {
    let all = stack.receive_n(queue, 1000).await;
    for m in &all {
        let _ = stack
            .sqs
            .change_message_visibility()
            .queue_url(&queue.url)
            .receipt_handle(m.receipt_handle().unwrap_or_default())
            .visibility_timeout(0)
            .send()
            .await;
    }
    all
}

/// A function binary behind the local Lambda runtime, configured for the stack (plus `extra`,
/// JSON logs), its output in `log`.
pub fn runtime_function(
    stack: &Stack,
    name: &str,
    extra: &[(&str, &str)],
    log: &std::path::Path,
) -> resq_local::chaos::runtime::Function {
    let mut env: Vec<(String, String)> = stack.env().into_iter().collect();
    env.extend(
        [
            ("AWS_ENDPOINT_URL", stack.emulator.endpoint()),
            ("AWS_REGION", REGION),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    resq_local::chaos::runtime::Function::new(
        name,
        &resq_e2e::function_binary(name),
        env,
        log,
        Duration::from_secs(20),
    )
    .expect("the function binary")
}

/// Every attribute of the queue at `url`.
pub async fn queue_attributes(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> std::collections::HashMap<aws_sdk_sqs::types::QueueAttributeName, String> {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default()
}

/// Receives from `url` (all attributes) until `count` messages came or 20 s passed.
pub async fn receive_until(sqs: &aws_sdk_sqs::Client, url: &str, count: usize) -> Vec<Message> {
    let mut received = vec![];
    let started = std::time::Instant::now();
    while received.len() < count && started.elapsed() < std::time::Duration::from_secs(20) {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        received.extend(out.messages.unwrap_or_default());
    }
    received
}

/// The stack output `key` of the stack `name`, if it has it.
pub async fn stack_output(config: &aws_config::SdkConfig, name: &str, key: &str) -> Option<String> {
    let cfn = aws_sdk_cloudformation::Client::new(config);
    let stacks = cfn.describe_stacks().stack_name(name).send().await.unwrap();
    stacks.stacks()[0]
        .outputs()
        .iter()
        .find(|o| o.output_key() == Some(key))
        .and_then(|o| o.output_value())
        .map(str::to_owned)
}

/// The operator tool's context for `stack` (its queues and bucket, on its emulator).
pub async fn context(stack: &Stack) -> resq_ops::context::Context {
    let endpoint = resq_ops::context::Endpoint {
        endpoint_url: Some(stack.emulator.endpoint().to_owned()),
        region: Some(REGION.into()),
    };
    resq_ops::context::Context::new(
        &endpoint,
        Some(stack.main.url.clone()),
        Some(stack.dlq.url.clone()),
        Some(stack.bucket.clone()),
    )
    .await
    .expect("context")
}

/// Asserts that `function`'s event source mapping reads `queue_arn` as the template sets it:
/// reporting batch item failures, 10 records at most, a batching window of a second.
pub async fn assert_reports_batch_item_failures(
    lambda: &aws_sdk_lambda::Client,
    function: &str,
    queue_arn: &str,
) {
    let mappings = lambda
        .list_event_source_mappings()
        .function_name(function)
        .send()
        .await
        .unwrap();
    let esm = &mappings.event_source_mappings()[0];
    assert_eq!(esm.event_source_arn(), Some(queue_arn));
    assert_eq!(
        esm.function_response_types()
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>(),
        vec!["ReportBatchItemFailures"]
    );
    assert_eq!(esm.batch_size(), Some(10));
    assert_eq!(esm.maximum_batching_window_in_seconds(), Some(1));
}

/// A staging queue for shadow replays.
pub async fn staging_queue(stack: &Stack) -> String {
    stack
        .sqs
        .create_queue()
        .queue_name("orders-staging")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// The attributes of a transient dead letter the consumer wrote.
pub fn transient() -> Vec<(&'static str, aws_sdk_sqs::types::MessageAttributeValue)> {
    vec![
        ("x-failure-class", string_attr("transient")),
        ("x-failure-reason", string_attr("DOWNSTREAM_UNAVAILABLE")),
    ]
}

/// Sends `count` transient dead letters (of the group `group`, if any), ten to a call.
pub async fn dead_letters(stack: &Stack, group: Option<&str>, count: usize) {
    for first in (0..count).step_by(10) {
        let entries = (first..count.min(first + 10)).map(|i| {
            let mut e = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(order_body(&format!("{}-{i:03}", group.unwrap_or("dl"))))
                .set_message_group_id(group.map(str::to_owned));
            for (name, value) in transient() {
                e = e.message_attributes(name, value);
            }
            e.build().unwrap()
        });
        let sent = stack
            .sqs
            .send_message_batch()
            .queue_url(&stack.dlq.url)
            .set_entries(Some(entries.collect()))
            .send()
            .await
            .unwrap();
        assert!(sent.failed().is_empty(), "{:?}", sent.failed());
    }
}

/// Puts a datapoint of `value` for `metric` a few seconds ago: an alarm on it is really in
/// breach (an emulator that evaluates alarms, LocalStack as AWS does, moves a merely set state
/// back to what its data say).
pub async fn breach(stack: &Stack, namespace: &str, metric: &str, value: f64) {
    let at = chrono::Utc::now().timestamp() - 5;
    let datum = aws_sdk_cloudwatch::types::MetricDatum::builder()
        .metric_name(metric)
        .value(value)
        .timestamp(aws_sdk_cloudwatch::primitives::DateTime::from_secs(at))
        .build();
    let put = stack.cloudwatch.put_metric_data().namespace(namespace);
    put.metric_data(datum).send().await.unwrap();
}
