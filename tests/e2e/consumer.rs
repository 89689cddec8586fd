//! The consumer against real queues and a real bucket.

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName as Sys};
use resq_e2e::{Stack, StackOptions};

use crate::helpers::*;

#[tokio::test]
async fn mixed_batch_reports_only_the_transient_record_and_homes_the_rest() {
    // GIVEN one message of each kind in the main queue
    let stack = Stack::start(StackOptions::default()).await;
    let valid = send(
        &stack,
        &stack.main,
        &order_body("o-valid"),
        &[("trace-id", string_attr("t-1"))],
        None,
    )
    .await;
    let malformed = send(
        &stack,
        &stack.main,
        "{not json",
        &[
            ("trace-id", string_attr("t-2")),
            ("source", number_attr("7")),
        ],
        None,
    )
    .await;
    let invalid = send(
        &stack,
        &stack.main,
        r#"{"orderId":"o-invalid","userId":"u","items":[]}"#,
        &[],
        None,
    )
    .await;
    let binary = MessageAttributeValue::builder()
        .data_type("Binary")
        .binary_value(Blob::new(vec![0u8, 159, 255]))
        .build()
        .unwrap();
    let capped = send(
        &stack,
        &stack.main,
        &order_body("o-capped"),
        // past the cap (3): only a tool other than the redriver writes this
        &[("x-redrive-count", number_attr("4")), ("blob", binary)],
        None,
    )
    .await;
    let transient = send(&stack, &stack.main, &order_body("transient-1"), &[], None).await;
    let received = stack.receive_n(&stack.main, 5).await;
    assert_eq!(received.len(), 5);

    // WHEN Lambda invokes the consumer with them
    let response = invoke(
        &stack,
        &consumer(&stack, &NO_BACKOFF),
        &stack.main,
        &received,
    )
    .await;

    // THEN only the transient record is reported failed
    assert_eq!(failed_ids(&response), vec![transient.clone()]);

    // the valid order is recorded once
    assert_eq!(
        stack.keys("orders/").await,
        vec!["orders/o-valid.json".to_owned()]
    );
    let record = stack.json_object("orders/o-valid.json").await;
    assert_eq!(record["messageId"], valid.as_str());
    assert_eq!(record["order"]["orderId"], "o-valid");

    // the malformed and the invalid ones are in the DLQ, marked permanent, attributes kept
    let dlq = stack.receive_n(&stack.dlq, 2).await;
    assert_eq!(dlq.len(), 2, "two permanent failures in the DLQ");
    let original = received
        .iter()
        .find(|m| m.message_id() == Some(malformed.as_str()))
        .unwrap();
    let copy = dlq
        .iter()
        .find(|m| m.body() == Some("{not json"))
        .expect("malformed copy in the DLQ");
    assert_eq!(attr(copy, "x-failure-class"), Some("permanent"));
    assert_eq!(attr(copy, "x-failure-reason"), Some("MALFORMED_JSON"));
    assert_eq!(attr(copy, "trace-id"), Some("t-2"));
    assert_eq!(attr(copy, "source"), Some("7"));
    assert_eq!(
        copy.message_attributes().unwrap()["source"].data_type(),
        "Number"
    );
    assert_eq!(
        attr(copy, "x-first-sent-at"),
        sys_attr(original, Sys::SentTimestamp)
    );
    let invalid_copy = dlq
        .iter()
        .find(|m| m.body().is_some_and(|b| b.contains("o-invalid")))
        .expect("invalid copy");
    assert_eq!(
        attr(invalid_copy, "x-failure-reason"),
        Some("VALIDATION_FAILED")
    );
    assert!(
        received
            .iter()
            .any(|m| m.message_id() == Some(invalid.as_str()))
    );

    // the over-cap one is archived with the full envelope
    let keys = stack.keys("archive/REDRIVE_CAP/").await;
    assert_eq!(keys.len(), 1);
    assert!(keys[0].ends_with(&format!("/{capped}.json")), "{}", keys[0]);
    let envelope = stack.json_object(&keys[0]).await;
    let om = &envelope["originalMessage"];
    assert_eq!(om["body"], order_body("o-capped"));
    assert_eq!(om["messageId"], capped.as_str());
    assert_eq!(
        om["messageAttributes"]["x-redrive-count"],
        serde_json::json!({"dataType": "Number", "stringValue": "4"})
    );
    assert_eq!(
        om["messageAttributes"]["blob"],
        serde_json::json!({"dataType": "Binary", "binaryValue": "AJ//"})
    );
    assert_eq!(om["attributes"]["ApproximateReceiveCount"], "1");
    assert!(om["attributes"]["SentTimestamp"].is_string());
    let meta = &envelope["metadata"];
    assert_eq!(meta["reason"], "REDRIVE_CAP");
    assert_eq!(meta["archivedBy"], "consumer");
    assert_eq!(meta["sourceQueue"], stack.main.url.as_str());
    assert_eq!(meta["redriveCount"], 4);
    assert_eq!(meta["receiveCount"], 1);
    assert_eq!(
        meta["firstSentAt"].to_string(),
        om["attributes"]["SentTimestamp"].as_str().unwrap()
    );
    assert!(meta["archivedAt"].as_str().unwrap().ends_with('Z'));

    // the transient one is still in the queue, and its visibility was changed (to 0 here):
    // it is receivable again at once although the queue's visibility timeout is 120 s
    let again = stack.receive(&stack.main, 10).await;
    assert_eq!(
        again.len(),
        1,
        "only the transient record is left in the main queue"
    );
    assert_eq!(again[0].message_id(), Some(transient.as_str()));
    assert_eq!(sys_attr(&again[0], Sys::ApproximateReceiveCount), Some("2"));
}

#[tokio::test]
async fn without_a_visibility_change_a_failed_record_waits_for_the_queue_timeout() {
    // The control for the test above: with backoff the message is hidden for a while.
    let stack = Stack::start(StackOptions::default()).await;
    send(&stack, &stack.main, &order_body("transient-2"), &[], None).await;
    let received = stack.receive_n(&stack.main, 1).await;
    let c = consumer(
        &stack,
        &[
            ("BACKOFF_BASE_SECONDS", "300"),
            ("BACKOFF_MAX_SECONDS", "300"),
        ],
    );
    let response = invoke(&stack, &c, &stack.main, &received).await;
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(
        stack.depth(&stack.main).await,
        (0, 1),
        "still in the queue, in flight"
    );
}

#[tokio::test]
async fn the_same_order_delivered_twice_is_recorded_once() {
    let stack = Stack::start(StackOptions::default()).await;
    let c = consumer(&stack, &[]);
    let first = send(&stack, &stack.main, &order_body("o-dup"), &[], None).await;
    let batch = stack.receive_n(&stack.main, 1).await;
    assert!(
        invoke(&stack, &c, &stack.main, &batch)
            .await
            .batch_item_failures
            .is_empty()
    );
    // a redelivery with a new message id (as after a redrive), and a different body
    let second_body = serde_json::json!({"orderId": "o-dup", "userId": "u-2", "items": [{"productId": "p-9", "quantity": 1}]}).to_string();
    send(&stack, &stack.main, &second_body, &[], None).await;
    let batch = stack.receive_n(&stack.main, 1).await;
    assert!(
        invoke(&stack, &c, &stack.main, &batch)
            .await
            .batch_item_failures
            .is_empty(),
        "already done is success"
    );
    assert_eq!(
        stack.keys("orders/").await,
        vec!["orders/o-dup.json".to_owned()]
    );
    let record = stack.json_object("orders/o-dup.json").await;
    assert_eq!(
        record["messageId"],
        first.as_str(),
        "the first effect is never overwritten"
    );
    assert_eq!(record["order"]["userId"], "u-1");
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
}

#[tokio::test]
async fn a_missing_archive_bucket_keeps_the_records_in_the_queue() {
    let stack = Stack::start(StackOptions::default()).await;
    let capped = send(
        &stack,
        &stack.main,
        &order_body("o-1"),
        &[("x-redrive-count", number_attr("5"))],
        None,
    )
    .await;
    let valid = send(&stack, &stack.main, &order_body("o-2"), &[], None).await;
    let received = stack.receive_n(&stack.main, 2).await;
    let mut extra = NO_BACKOFF.to_vec();
    extra.push(("ARCHIVE_BUCKET", "no-such-bucket"));
    let response = invoke(&stack, &consumer(&stack, &extra), &stack.main, &received).await;
    let mut failed = failed_ids(&response);
    failed.sort();
    let mut expected = vec![capped, valid];
    expected.sort();
    assert_eq!(failed, expected, "neither record may be acknowledged");
    assert_eq!(
        stack.depth(&stack.main).await.0 + stack.depth(&stack.main).await.1,
        2
    );
    assert!(stack.receive(&stack.dlq, 10).await.is_empty());
    assert!(stack.keys("").await.is_empty());
}

#[tokio::test]
async fn fifo_failure_mid_group_skips_the_rest_of_that_group_only() {
    let stack = Stack::start(StackOptions {
        fifo: true,
        ..Default::default()
    })
    .await;
    let mut ids = std::collections::HashMap::new();
    for (name, body, group) in [
        ("a1", order_body("a-1"), "A"),
        ("b1", order_body("b-1"), "B"),
        ("a2", order_body("transient-a2"), "A"),
        ("c1", "{broken".to_owned(), "C"),
        ("a3", order_body("a-3"), "A"),
        ("b2", order_body("b-2"), "B"),
        ("c2", order_body("c-2"), "C"),
    ] {
        ids.insert(
            name,
            send(&stack, &stack.main, &body, &[], Some(group)).await,
        );
    }
    let received = stack.receive_n(&stack.main, 7).await;
    assert_eq!(received.len(), 7);
    let response = invoke(
        &stack,
        &consumer(&stack, &NO_BACKOFF),
        &stack.main,
        &received,
    )
    .await;

    assert_eq!(
        failed_ids(&response),
        vec![ids["a2"].clone(), ids["a3"].clone()]
    );
    let mut recorded = stack.keys("orders/").await;
    recorded.sort();
    assert_eq!(
        recorded,
        vec![
            "orders/a-1.json",
            "orders/b-1.json",
            "orders/b-2.json",
            "orders/c-2.json"
        ]
    );
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].body(), Some("{broken"));
    assert_eq!(sys_attr(&dlq[0], Sys::MessageGroupId), Some("C"));
    assert_eq!(attr(&dlq[0], "x-failure-reason"), Some("MALFORMED_JSON"));
    // group A comes back in order
    let again = stack.receive_n(&stack.main, 2).await;
    let again_ids: Vec<_> = again.iter().filter_map(|m| m.message_id()).collect();
    assert_eq!(again_ids, vec![ids["a2"].as_str(), ids["a3"].as_str()]);
}

#[tokio::test]
async fn a_transient_failure_on_its_last_allowed_receive_reaches_the_dlq_with_its_reason() {
    // GIVEN a main queue whose redrive policy allows two receives, read by the consumer from
    // the queue itself, and an order whose downstream keeps failing
    let stack = Stack::start(StackOptions {
        max_receive_count: 2,
        ..StackOptions::default()
    })
    .await;
    let consumer = consumer(&stack, &NO_BACKOFF);
    let id = send(
        &stack,
        &stack.main,
        &order_body("transient-last"),
        &[("trace-id", string_attr("t-7"))],
        None,
    )
    .await;
    // WHEN it fails on its first receive
    let first = stack.receive_n(&stack.main, 1).await;
    assert_eq!(
        failed_ids(&invoke(&stack, &consumer, &stack.main, &first).await),
        vec![id.clone()]
    );
    // AND again on its second, its last allowed one
    let second = stack.receive_n(&stack.main, 1).await;
    assert_eq!(
        sys_attr(&second[0], Sys::ApproximateReceiveCount),
        Some("2")
    );
    let response = invoke(&stack, &consumer, &stack.main, &second).await;
    // THEN the consumer dead-letters it itself, saying why, instead of leaving SQS to move it
    // without a reason on the next receive
    assert!(failed_ids(&response).is_empty());
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].body(), Some(order_body("transient-last").as_str()));
    assert_eq!(attr(&dlq[0], "x-failure-class"), Some("transient"));
    assert_eq!(
        attr(&dlq[0], "x-failure-reason"),
        Some("DOWNSTREAM_UNAVAILABLE")
    );
    assert_eq!(attr(&dlq[0], "trace-id"), Some("t-7"));
    assert_eq!(
        stack.depth(&stack.main).await,
        (0, 0),
        "acknowledged: gone from the main queue"
    );
}

#[tokio::test]
async fn a_consumer_wired_to_its_own_dlq_is_refused() {
    // GIVEN a malformed message in the DLQ, delivered as if the DLQ were the event source
    let stack = Stack::start(StackOptions::default()).await;
    send(&stack, &stack.dlq, "{not json", &[], None).await;
    let messages = stack.receive_n(&stack.dlq, 1).await;
    let event = resq_local::event::lambda_event(&messages, &stack.dlq.arn, "us-east-1");
    let invocation = resq_consumer::event::SqsInvocation::from_json(&event.to_string()).unwrap();
    // WHEN the consumer is invoked THEN the invocation fails, naming the DLQ
    let err = consumer(&stack, &NO_BACKOFF)
        .handle(
            invocation,
            std::time::Instant::now() + std::time::Duration::from_secs(30),
        )
        .await
        .unwrap_err();
    assert_eq!(err.error_type(), "EventFromDeadLetterQueue");
    assert!(err.to_string().contains(&stack.dlq.arn), "{err}");
    // AND nothing was copied back into the DLQ
    assert_eq!(stack.depth(&stack.dlq).await, (0, 1));
}

#[tokio::test]
async fn a_different_order_under_a_recorded_order_id_goes_to_the_dlq() {
    let stack = Stack::start(StackOptions::default()).await;
    let consumer = consumer(&stack, &NO_BACKOFF);
    send(&stack, &stack.main, &order_body("o-dup"), &[], None).await;
    let first = stack.receive_n(&stack.main, 1).await;
    assert!(failed_ids(&invoke(&stack, &consumer, &stack.main, &first).await).is_empty());
    // a producer reusing the id for another user's order
    let other = serde_json::json!({"orderId": "o-dup", "userId": "someone-else", "items": [{"productId": "p1", "quantity": 1}]});
    send(&stack, &stack.main, &other.to_string(), &[], None).await;
    // and retrying the first one
    send(&stack, &stack.main, &order_body("o-dup"), &[], None).await;
    let both = stack.receive_n(&stack.main, 2).await;
    assert!(failed_ids(&invoke(&stack, &consumer, &stack.main, &both).await).is_empty());
    let dlq = stack.receive_n(&stack.dlq, 1).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(attr(&dlq[0], "x-failure-reason"), Some("ORDER_ID_CONFLICT"));
    assert!(dlq[0].body().unwrap().contains("someone-else"));
    assert_eq!(
        stack.keys("orders/").await,
        vec!["orders/o-dup.json".to_owned()]
    );
}
