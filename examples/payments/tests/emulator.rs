//! The payments consumer against a real SQS/S3 API (moto, or LocalStack with
//! `E2E_EMULATOR=localstack`): the team's own type runs on resq's engine with resq's outcomes.

use std::time::{Duration, Instant};

use payments::RecordPayment;
use resq::config::Vars;
use resq::store::S3Store;
use resq_consumer::Consumer;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::event::SqsInvocation;
use resq_e2e::{Stack, StackOptions};

fn payment(id: &str, currency: &str) -> String {
    serde_json::json!({"paymentId": id, "accountId": "acc-1", "amountCents": 1250, "currency": currency})
        .to_string()
}

#[tokio::test]
async fn payments_are_recorded_once_and_bad_ones_reach_the_dlq_marked_permanent() {
    let stack = Stack::start(StackOptions::default()).await;
    let env = stack.env();
    let config = ConsumerConfig::from_vars(&Vars(move |k: &str| env.get(k).cloned())).unwrap();
    let store = S3Store::new(stack.s3.clone(), &stack.bucket);
    let consumer = Consumer::new(
        RecordPayment::new(store.clone()),
        stack.sqs.clone(),
        store,
        config,
    );

    // GIVEN a good payment sent twice, a body that is not JSON, and a currency not settled
    for body in [
        payment("p-1", "EUR"),
        payment("p-1", "EUR"),
        "{not json".to_owned(),
        payment("p-2", "XTS"),
    ] {
        stack
            .sqs
            .send_message()
            .queue_url(&stack.main.url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let messages = stack.receive_n(&stack.main, 4).await;
    assert_eq!(messages.len(), 4);

    // WHEN Lambda delivers them as one batch
    let event = resq_local::event::lambda_event(&messages, &stack.main.arn, "us-east-1");
    let invocation = SqsInvocation::from_json(&event.to_string()).unwrap();
    let report = consumer
        .handle(invocation, Instant::now() + Duration::from_secs(30))
        .await
        .unwrap();
    let response = report.response;

    // THEN no record is reported failed, the payment is recorded once, and the two bad ones
    // are in the DLQ with resq's attributes and the team's own reason
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(stack.keys("payments/").await, vec!["payments/p-1.json"]);
    let dead = stack.receive_n(&stack.dlq, 2).await;
    let mut reasons: Vec<(String, String)> = dead
        .iter()
        .map(|m| {
            let attr = |n: &str| {
                m.message_attributes()
                    .and_then(|a| a.get(n))
                    .and_then(|v| v.string_value())
                    .unwrap_or_default()
                    .to_owned()
            };
            (attr("x-failure-class"), attr("x-failure-reason"))
        })
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        vec![
            ("permanent".to_owned(), "CURRENCY_UNSUPPORTED".to_owned()),
            ("permanent".to_owned(), "MALFORMED_JSON".to_owned()),
        ]
    );
}
