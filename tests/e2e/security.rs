//! The template's security model under each `Encryption` value: the roles grant exactly what
//! the functions' code calls (the lists kept next to that code), the key and its policy, what
//! is encrypted with which key, TLS-only queues, and the orders topic, proven on the emulator:
//! an order published to it is processed, a malformed one dead-lettered as permanent.

use std::collections::{BTreeMap, BTreeSet};

use resq_e2e::translated_template;
use resq_local::stack::Resolver;
use serde_json::{Value, json};

use crate::helpers::{attr, queue_attributes, receive_until, stack_output};

const ENCRYPTIONS: [&str; 3] = ["sqs-managed", "aws-managed-key", "customer-managed-key"];
const QUEUES: [&str; 4] = [
    "OrdersQueue",
    "DeadLetterQueue",
    "RedriverFailureQueue",
    "OrdersTopicDeadLetterQueue",
];

/// A stack with `Encryption` `encryption` and the orders topic when it may have one.
fn stack<'a>(t: &'a Value, encryption: &'a str) -> Resolver<'a> {
    let topic = if encryption == "aws-managed-key" {
        "false"
    } else {
        "true"
    };
    Resolver::new(
        t,
        "stk",
        &[
            ("Encryption", encryption),
            ("CreateOrdersTopic", topic),
            ("ProducerPayloadBucket", "producer-payloads"),
        ],
    )
}

fn list(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        Value::Null => vec![],
        v => vec![v],
    }
}

fn strings(v: &Value) -> BTreeSet<&str> {
    list(v).into_iter().map(|a| a.as_str().unwrap()).collect()
}

/// The actions AWS scopes to no resource: a statement may grant them on `"*"` (and nothing else
/// on `"*"`); the functions' lists name that resource `*`.
const UNSCOPED_ACTIONS: [&str; 1] = ["cloudwatch:GetMetricData"];

/// A role statement's resource in the form the functions' lists use (`resq::iam::Permission`).
fn resource_name(r: &Value, condition: &Value) -> String {
    let base = if *r == "*" {
        "*".to_owned()
    } else if let Some(mapping) = r["Fn::Sub"]
        .as_array()
        .and_then(|sub| sub.first())
        .and_then(Value::as_str)
        .and_then(|arn| arn.strip_suffix(":event-source-mapping:${Mapping}"))
    {
        // the consumer's event source mapping, by the UUID the template picks for it
        assert_eq!(
            mapping, "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}",
            "{r}"
        );
        "ConsumerEventSourceMapping".to_owned()
    } else if let Some([id, attr]) = r
        .get("Fn::GetAtt")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    {
        assert_eq!(attr, "Arn", "{r}");
        id.as_str().unwrap().to_owned()
    } else {
        let sub = r["Fn::Sub"]
            .as_str()
            .unwrap_or_else(|| panic!("not one of this stack's resources: {r}"));
        if let Some((_, alarm)) = sub.split_once(":alarm:${AWS::StackName}-") {
            format!("alarm:{alarm}")
        } else if let Some(bucket) = sub.strip_prefix("arn:${AWS::Partition}:s3:::${") {
            // a bucket the stack is given by name (a parameter)
            bucket.replacen('}', "", 1)
        } else {
            let (reference, tail) = sub
                .strip_prefix("${")
                .and_then(|s| s.split_once('}'))
                .unwrap_or_else(|| panic!("not one of this stack's resources: {r}"));
            let id = reference.strip_suffix(".Arn").expect("an ARN");
            format!("{id}{tail}")
        }
    };
    let conditions: Vec<String> = condition
        .as_object()
        .into_iter()
        .flat_map(|c| c.values())
        .flat_map(|kv| kv.as_object().unwrap())
        .map(|(k, v)| format!(" if {k}={}", v.as_str().unwrap()))
        .collect();
    base + &conditions.concat()
}

/// A role's statements as the stack `r` gets them.
fn statements<'t>(r: &Resolver<'_>, role: &'t Value) -> Vec<&'t Value> {
    role["Properties"]["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap())
        .filter_map(|st| r.decided(st))
        .collect()
}

/// What a role grants for the stack `r`: its (action, resource) pairs outside KMS, in the form
/// of the functions' lists, and its KMS statements apart.
fn granted<'t>(r: &Resolver<'_>, role: &'t Value) -> (BTreeSet<(String, String)>, Vec<&'t Value>) {
    let mut pairs = BTreeSet::new();
    let mut key_statements = vec![];
    for st in statements(r, role) {
        assert_eq!(st["Effect"], "Allow", "{st}");
        let actions = strings(&st["Action"]);
        assert!(
            actions.iter().all(|a| !a.contains('*')),
            "wildcard action in {st}"
        );
        if actions.iter().all(|a| a.starts_with("kms:")) {
            key_statements.push(st);
            continue;
        }
        for resource in list(&st["Resource"]) {
            assert!(
                *resource != "*" || actions.iter().all(|a| UNSCOPED_ACTIONS.contains(a)),
                "wildcard resource for an action AWS can scope in {st}"
            );
            let name = resource_name(resource, &st["Condition"]);
            for a in &actions {
                pairs.insert(((*a).to_owned(), name.clone()));
            }
        }
    }
    (pairs, key_statements)
}

fn called(permissions: &[resq::iam::Permission]) -> BTreeSet<(String, String)> {
    permissions
        .iter()
        .map(|p| (p.action.to_owned(), p.resource.to_owned()))
        .collect()
}

#[test]
fn each_role_grants_exactly_what_its_functions_code_calls_under_every_encryption() {
    let t = translated_template("resq-artifacts");
    let roles: Vec<&String> = t["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::IAM::Role")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(
        roles,
        ["ConsumerRole", "RedriverRole"],
        "one role per function, no SAM-generated ones"
    );
    for (function, role, permissions) in [
        (
            "ConsumerFunction",
            "ConsumerRole",
            resq_consumer::permissions(),
        ),
        (
            "RedriverFunction",
            "RedriverRole",
            resq_redriver::permissions(),
        ),
    ] {
        assert_eq!(
            t["Resources"][function]["Properties"]["Role"],
            json!({"Fn::GetAtt": [role, "Arn"]})
        );
        let role_value = &t["Resources"][role];
        assert!(
            role_value["Properties"]
                .get("ManagedPolicyArns")
                .is_none_or(|m| m.as_array().is_some_and(Vec::is_empty)),
            "{role}: no managed policies"
        );
        let called = called(&permissions);
        for encryption in ENCRYPTIONS {
            let r = stack(&t, encryption);
            let (granted, key_statements) = granted(&r, role_value);
            assert!(
                granted == called,
                "{role} under {encryption} drifted from its function's code:\n  granted, called by no code: {:?}\n  called, not granted: {:?}",
                granted.difference(&called).collect::<Vec<_>>(),
                called.difference(&granted).collect::<Vec<_>>()
            );
            // the key: only when the stack has one, exactly the KMS actions the calls above
            // imply on its queues and bucket, and only through SQS and S3
            if encryption == "customer-managed-key" {
                assert_eq!(key_statements.len(), 1, "{role}: one key statement");
                let st = key_statements[0];
                assert_eq!(
                    strings(&st["Action"]),
                    resq_e2e::kms_actions(&permissions).into_iter().collect(),
                    "{role}"
                );
                assert_eq!(
                    st["Resource"],
                    json!({"Fn::GetAtt": ["EncryptionKey", "Arn"]})
                );
                assert_eq!(
                    st["Condition"]["StringEquals"]["kms:ViaService"],
                    json!([
                        {"Fn::Sub": "sqs.${AWS::Region}.${AWS::URLSuffix}"},
                        {"Fn::Sub": "s3.${AWS::Region}.${AWS::URLSuffix}"}
                    ])
                );
            } else {
                assert!(
                    key_statements.is_empty(),
                    "{role}: no KMS permission under {encryption}"
                );
            }
        }
    }
}

#[test]
fn a_role_statement_the_code_does_not_need_is_caught() {
    // the check above on a role with one action too many (the redriver's old
    // sqs:GetQueueAttributes) and one too few
    let t = translated_template("resq-artifacts");
    let r = stack(&t, "sqs-managed");
    let mut role = t["Resources"]["RedriverRole"].clone();
    let doc = &mut role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"];
    let drain = doc
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|s| s["Sid"] == "DrainDeadLetterQueue")
        .unwrap();
    drain["Action"]
        .as_array_mut()
        .unwrap()
        .push(json!("sqs:GetQueueAttributes"));
    drain["Action"]
        .as_array_mut()
        .unwrap()
        .retain(|a| a != "sqs:DeleteMessage");
    let (granted, _) = granted(&r, &role);
    let called = called(&resq_redriver::permissions());
    let extra: Vec<_> = granted.difference(&called).collect();
    let missing: Vec<_> = called.difference(&granted).collect();
    let pair = |a: &str| (a.to_owned(), "DeadLetterQueue".to_owned());
    assert_eq!(extra, [&pair("sqs:GetQueueAttributes")]);
    assert_eq!(missing, [&pair("sqs:DeleteMessage")]);
}

#[test]
fn the_key_exists_only_when_chosen_and_its_policy_grants_the_account_and_aws_producers() {
    let t = translated_template("resq-artifacts");
    let res = &t["Resources"];
    assert_eq!(t["Parameters"]["Encryption"]["Default"], "sqs-managed");
    assert_eq!(
        t["Parameters"]["Encryption"]["AllowedValues"],
        json!(ENCRYPTIONS)
    );
    let key = &res["EncryptionKey"];
    for id in ["EncryptionKey", "EncryptionKeyAlias"] {
        assert_eq!(res[id]["Condition"], "CustomerManagedKey", "{id}");
    }
    assert_eq!(
        t["Outputs"]["EncryptionKeyArn"]["Condition"],
        "CustomerManagedKey"
    );
    for e in ENCRYPTIONS {
        assert_eq!(
            stack(&t, e).condition("CustomerManagedKey"),
            Some(e == "customer-managed-key"),
            "{e}"
        );
    }
    assert_eq!(key["Properties"]["EnableKeyRotation"], true);
    // the retained queues and archive stay readable after the stack is deleted
    assert_eq!(key["DeletionPolicy"], "Retain");
    assert_eq!(key["UpdateReplacePolicy"], "Retain");
    assert_eq!(
        res["EncryptionKeyAlias"]["Properties"]["TargetKeyId"],
        json!({"Ref": "EncryptionKey"})
    );
    let policy = &key["Properties"]["KeyPolicy"];
    let by_sid: BTreeMap<&str, &Value> = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["Sid"].as_str().unwrap(), s))
        .collect();
    assert_eq!(
        by_sid.keys().copied().collect::<Vec<_>>(),
        [
            "AccountAdministersTheKey",
            "AwsServicesOfThisAccountDeliver"
        ],
        "nobody else: the functions' roles get their use through IAM"
    );
    for st in by_sid.values() {
        assert_eq!(st["Effect"], "Allow");
        assert_eq!(st["Resource"], "*", "in a key policy: this key");
    }
    let account = by_sid["AccountAdministersTheKey"];
    assert_eq!(
        account["Principal"]["AWS"],
        json!({"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"})
    );
    let services = by_sid["AwsServicesOfThisAccountDeliver"];
    assert_eq!(
        strings(&services["Principal"]["Service"]),
        BTreeSet::from([
            "sns.amazonaws.com",
            "events.amazonaws.com",
            "s3.amazonaws.com"
        ])
    );
    assert_eq!(
        strings(&services["Action"]),
        BTreeSet::from(["kms:GenerateDataKey*", "kms:Decrypt"])
    );
    assert_eq!(
        services["Condition"],
        json!({"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}),
        "only this account's topics, rules and buckets"
    );
}

#[test]
fn queues_bucket_and_topic_are_encrypted_as_the_encryption_parameter_says() {
    let t = translated_template("resq-artifacts");
    let res = &t["Resources"];
    let key_arn = json!({"Fn::GetAtt": ["EncryptionKey", "Arn"]});
    let sns_key = json!("alias/aws/sns");
    for e in ENCRYPTIONS {
        let r = stack(&t, e);
        for q in QUEUES {
            let p = &res[q]["Properties"];
            let sse_sqs = r.value(&p["SqsManagedSseEnabled"]);
            let kms = r.decided(&p["KmsMasterKeyId"]);
            match e {
                "sqs-managed" => {
                    assert_eq!(sse_sqs.as_deref(), Some("true"), "{e}: {q}");
                    assert_eq!(kms, None, "{e}: {q}: one kind of SSE");
                }
                "aws-managed-key" => {
                    assert_eq!(sse_sqs.as_deref(), Some("false"), "{e}: {q}");
                    assert_eq!(kms, Some(&json!("alias/aws/sqs")), "{e}: {q}");
                }
                _ => {
                    assert_eq!(sse_sqs.as_deref(), Some("false"), "{e}: {q}");
                    assert_eq!(kms, Some(&key_arn), "{e}: {q}");
                }
            }
        }
        let sse = &res["ArchiveBucket"]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
            [0];
        // one literal rule per Encryption (checkov reads the raw template's bucket as encrypted
        // only so: make lint)
        let by_default = r
            .decided(&sse["ServerSideEncryptionByDefault"])
            .expect("a default encryption rule under every Encryption");
        assert!(by_default.get("Fn::If").is_none(), "{e}: {by_default}");
        let cmk = e == "customer-managed-key";
        assert_eq!(
            r.value(&by_default["SSEAlgorithm"]).as_deref(),
            Some(if cmk { "aws:kms" } else { "AES256" }),
            "{e}"
        );
        assert_eq!(
            by_default.get("KMSMasterKeyID"),
            cmk.then_some(&key_arn),
            "{e}"
        );
        assert_eq!(sse["BucketKeyEnabled"], true);
        let topic = r.decided(&res["OrdersTopic"]["Properties"]["KmsMasterKeyId"]);
        assert_eq!(
            topic,
            Some(if cmk { &key_arn } else { &sns_key }),
            "{e}: the orders topic keeps orders too"
        );
    }
}

#[test]
fn only_tls_reaches_the_queues_and_only_the_orders_topic_may_send_to_them() {
    let t = translated_template("resq-artifacts");
    let res = &t["Resources"];
    for topic in ["false", "true"] {
        let r = Resolver::new(&t, "stk", &[("CreateOrdersTopic", topic)]);
        for q in QUEUES {
            if q == "OrdersTopicDeadLetterQueue" && topic == "false" {
                assert_eq!(res[q]["Condition"], "HasOrdersTopic");
                continue;
            }
            let (_, policy) = res
                .as_object()
                .unwrap()
                .iter()
                .find(|(_, p)| {
                    p["Type"] == "AWS::SQS::QueuePolicy"
                        && p["Properties"]["Queues"] == json!([{"Ref": q}])
                })
                .unwrap_or_else(|| panic!("{q} has no queue policy"));
            let sts: Vec<&Value> = policy["Properties"]["PolicyDocument"]["Statement"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| r.decided(s))
                .collect();
            let arn = json!({"Fn::GetAtt": [q, "Arn"]});
            assert_eq!(
                *sts[0],
                json!({
                    "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*",
                    "Action": "sqs:*", "Resource": arn,
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}}
                }),
                "{q}"
            );
            if q == "OrdersQueue" && topic == "true" || q == "OrdersTopicDeadLetterQueue" {
                assert_eq!(sts.len(), 2);
                assert_eq!(
                    *sts[1],
                    json!({
                        "Sid": "AllowOrdersTopic", "Effect": "Allow",
                        "Principal": {"Service": "sns.amazonaws.com"},
                        "Action": "sqs:SendMessage", "Resource": arn,
                        "Condition": {"ArnEquals": {"aws:SourceArn": {"Ref": "OrdersTopic"}}}
                    })
                );
            } else {
                assert_eq!(sts.len(), 1, "{q}: nothing but the TLS rule");
            }
        }
        assert_eq!(
            r.condition("HasOrdersTopic"),
            Some(topic == "true"),
            "{topic}"
        );
    }
    for id in [
        "OrdersTopic",
        "OrdersTopicSubscription",
        "OrdersTopicDeadLetterQueue",
        "OrdersTopicDeadLetterQueuePolicy",
        "OrdersTopicUndeliveredAlarm",
        "OrdersTopicLostAlarm",
    ] {
        assert_eq!(res[id]["Condition"], "HasOrdersTopic", "{id}");
    }
    assert_eq!(
        t["Outputs"]["OrdersTopicArn"]["Condition"],
        "HasOrdersTopic"
    );
    let sub = &res["OrdersTopicSubscription"];
    assert_eq!(
        sub["Properties"],
        json!({
            "TopicArn": {"Ref": "OrdersTopic"}, "Protocol": "sqs",
            "Endpoint": {"Fn::GetAtt": ["OrdersQueue", "Arn"]}, "RawMessageDelivery": true,
            // what SQS refuses (SNS does not retry it) is kept, not dropped
            "RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": ["OrdersTopicDeadLetterQueue", "Arn"]}}
        })
    );
    assert_eq!(
        sub["DependsOn"],
        json!(["OrdersQueuePolicy", "OrdersTopicDeadLetterQueuePolicy"]),
        "both queues let the topic in before it subscribes"
    );
    let undelivered = &res["OrdersTopicUndeliveredAlarm"]["Properties"];
    assert_eq!(
        undelivered["Dimensions"][0]["Value"],
        json!({"Fn::GetAtt": ["OrdersTopicDeadLetterQueue", "QueueName"]})
    );
    assert_eq!(undelivered["AlarmActions"], json!([{"Ref": "AlertTopic"}]));
    // … and when SNS cannot put it there either (the key refuses both queues), the loss alarms
    let lost = &res["OrdersTopicLostAlarm"]["Properties"];
    assert_eq!(
        (lost["Namespace"].as_str(), lost["MetricName"].as_str()),
        (
            Some("AWS/SNS"),
            Some("NumberOfNotificationsFailedToRedriveToDlq")
        )
    );
    assert_eq!(
        lost["Dimensions"][0]["Value"],
        json!({"Fn::GetAtt": ["OrdersTopic", "TopicName"]})
    );
    // a FIFO queue takes deliveries from a FIFO topic only
    let p = &res["OrdersTopic"]["Properties"];
    for (queue_type, name, fifo) in [
        ("standard", "stk-orders", None),
        ("fifo", "stk-orders.fifo", Some("true")),
    ] {
        let r = Resolver::new(
            &t,
            "stk",
            &[("QueueType", queue_type), ("CreateOrdersTopic", "true")],
        );
        assert_eq!(r.value(&p["TopicName"]).as_deref(), Some(name));
        assert_eq!(r.value(&p["FifoTopic"]).as_deref(), fifo);
        assert_eq!(r.value(&p["ContentBasedDeduplication"]).as_deref(), fifo);
        assert_eq!(
            r.value(&p["FifoThroughputScope"]).as_deref(),
            fifo.map(|_| "MessageGroup")
        );
        let dlq = &res["OrdersTopicDeadLetterQueue"]["Properties"];
        assert_eq!(r.value(&dlq["FifoQueue"]).as_deref(), fifo);
        assert_eq!(
            r.value(&dlq["QueueName"]),
            Some(name.replace("orders", "orders-topic-dlq"))
        );
    }
    // SNS cannot use the AWS managed SQS key: refused before anything is created
    let accepts = |e: &str| {
        crate::template::rules_accept(&t, &[("Encryption", e), ("CreateOrdersTopic", "true")])
    };
    assert!(!accepts("aws-managed-key"));
    assert!(accepts("sqs-managed") && accepts("customer-managed-key"));
    assert!(crate::template::rules_accept(
        &t,
        &[("Encryption", "aws-managed-key")]
    ));
}

#[test]
fn producers_named_by_arn_may_send_to_the_orders_queue_and_nobody_else() {
    let t = translated_template("resq-artifacts");
    let orders_policy = &t["Resources"]["OrdersQueuePolicy"]["Properties"]["PolicyDocument"];
    let producers =
        "arn:aws:sns:us-east-1:000000000000:shop,arn:aws:events:us-east-1:000000000000:rule/shop";
    for (arns, present) in [("", false), (producers, true)] {
        let r = Resolver::new(&t, "stk", &[("OrdersProducerArns", arns)]);
        assert_eq!(r.condition("HasOrdersProducers"), Some(present), "{arns:?}");
        let allow: Vec<&Value> = orders_policy["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| r.decided(s))
            .filter(|s| s["Sid"] == "AllowOrdersProducers")
            .collect();
        assert_eq!(allow.len(), usize::from(present), "{arns:?}");
        if present {
            assert_eq!(
                *allow[0],
                json!({
                    "Sid": "AllowOrdersProducers", "Effect": "Allow",
                    "Principal": {"Service": ["sns.amazonaws.com", "events.amazonaws.com", "s3.amazonaws.com"]},
                    "Action": "sqs:SendMessage",
                    "Resource": {"Fn::GetAtt": ["OrdersQueue", "Arn"]},
                    "Condition": {
                        "ArnLike": {"aws:SourceArn": {"Ref": "OrdersProducerArns"}},
                        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
                    }
                })
            );
        }
    }
    // they cannot use the AWS managed SQS key either
    let accepts = |e: &str, arns: &str| {
        crate::template::rules_accept(&t, &[("Encryption", e), ("OrdersProducerArns", arns)])
    };
    assert!(!accepts("aws-managed-key", producers));
    assert!(accepts("aws-managed-key", ""));
    assert!(accepts("sqs-managed", producers) && accepts("customer-managed-key", producers));
}

/// CreateOrdersTopic deployed into the emulator's CloudFormation: what a producer publishes to
/// the topic reaches the orders queue raw (body and message attributes), and the stack's
/// consumer processes it: a valid order is recorded, a malformed one goes to the DLQ marked
/// permanent, and neither is reported failed. On LocalStack only: moto's CloudFormation skips
/// `AWS::SNS::Subscription` without a word (its SNS would deliver).
#[tokio::test]
async fn an_order_published_to_the_orders_topic_is_processed_and_a_malformed_one_is_dead_lettered()
{
    let kind = resq_e2e::emulator_kind();
    if kind != resq_e2e::EmulatorKind::Localstack {
        eprintln!("skipped on moto: its CloudFormation does not create the topic's subscription");
        return;
    }
    let emulator = resq_e2e::emulator();
    let config = emulator.sdk_config().await;
    let template = translated_template(resq_local::stack::ARTIFACT_BUCKET);
    let outputs = resq_local::stack::deploy_stack(
        kind,
        &config,
        &template.to_string(),
        "resq-sns",
        &[("CreateOrdersTopic", "true")],
    )
    .await
    .unwrap();
    let topic_arn = stack_output(&config, "resq-sns", "OrdersTopicArn")
        .await
        .expect("OrdersTopicArn output");
    assert!(topic_arn.ends_with(":resq-sns-orders"), "{topic_arn}");

    // GIVEN an order and a malformed message published to the topic, with a message attribute
    let sns = aws_sdk_sns::Client::new(&config);
    let order =
        json!({"orderId": "o-sns-1", "userId": "u", "items": [{"productId": "p", "quantity": 1}]})
            .to_string();
    for body in [order.as_str(), "{not json"] {
        sns.publish()
            .topic_arn(&topic_arn)
            .message(body)
            .message_attributes(
                "trace-id",
                aws_sdk_sns::types::MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value("t-sns")
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }

    // THEN both reach the orders queue as they were published (no SNS envelope) …
    let sqs = aws_sdk_sqs::Client::new(&config);
    let received = receive_until(&sqs, &outputs.main_queue_url, 2).await;
    let mut bodies: Vec<&str> = received.iter().filter_map(|m| m.body()).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, [order.as_str(), "{not json"], "raw delivery");
    assert!(
        received
            .iter()
            .all(|m| attr(m, "trace-id") == Some("t-sns")),
        "message attributes arrive as SQS message attributes"
    );

    // WHEN the stack's consumer gets them as Lambda would pass them
    let response = crate::template::consume_as_the_stack(&config, &outputs, &received).await;

    // THEN neither is reported failed: the order is recorded …
    assert!(response.batch_item_failures.is_empty());
    let s3 = resq::aws::s3_client(&config);
    let record = s3
        .get_object()
        .bucket(&outputs.bucket)
        .key("orders/o-sns-1.json")
        .send()
        .await
        .expect("order recorded");
    let record: Value =
        serde_json::from_slice(&record.body.collect().await.unwrap().into_bytes()).unwrap();
    assert_eq!(record["order"]["orderId"], "o-sns-1");
    // … and the malformed one waits in the DLQ, marked permanent, its attribute kept
    let dlq = sqs
        .receive_message()
        .queue_url(&outputs.dlq_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].body(), Some("{not json"));
    assert_eq!(attr(&dlq[0], "x-failure-class"), Some("permanent"));
    assert_eq!(attr(&dlq[0], "x-failure-reason"), Some("MALFORMED_JSON"));
    assert_eq!(attr(&dlq[0], "trace-id"), Some("t-sns"));
}

/// Each `Encryption` value deployed into the emulator's CloudFormation: the three queues
/// report the encryption the template asked for (SSE-SQS, or SSE-KMS under the AWS managed
/// key or the stack's key, which the stack exports).
#[tokio::test]
async fn each_encryption_deploys_and_every_queue_reports_it() {
    let kind = resq_e2e::emulator_kind();
    let emulator = resq_e2e::emulator();
    let config = emulator.sdk_config().await;
    let template = translated_template(resq_local::stack::ARTIFACT_BUCKET).to_string();
    let sqs = aws_sdk_sqs::Client::new(&config);
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    for (i, e) in ENCRYPTIONS.into_iter().enumerate() {
        let name = format!("resq-enc-{i}");
        let outputs =
            resq_local::stack::deploy_stack(kind, &config, &template, &name, &[("Encryption", e)])
                .await
                .unwrap_or_else(|err| panic!("{e}: {err}"));
        let key_arn = stack_output(&config, &name, "EncryptionKeyArn").await;
        assert_eq!(key_arn.is_some(), e == "customer-managed-key", "{e}");
        for url in [
            &outputs.main_queue_url,
            &outputs.dlq_url,
            &outputs.failure_queue_url,
        ] {
            let attrs = queue_attributes(&sqs, url).await;
            let sse = attrs.get(&Q::SqsManagedSseEnabled).map(String::as_str);
            let kms = attrs.get(&Q::KmsMasterKeyId).map(String::as_str);
            match e {
                "sqs-managed" => assert_eq!((sse, kms), (Some("true"), None), "{e}: {url}"),
                "aws-managed-key" => {
                    assert_eq!(kms, Some("alias/aws/sqs"), "{e}: {url}");
                    assert_ne!(sse, Some("true"), "{e}: {url}: one kind of SSE");
                }
                _ => assert_eq!(kms, key_arn.as_deref(), "{e}: {url}"),
            }
        }
    }
}

/// A producer named in `OrdersProducerArns`, on LocalStack: an EventBridge rule that targets
/// the orders queue with `InputPath: $.detail` (as docs/producers.md says) puts the order itself on the
/// queue, and the stack's consumer records it.
#[tokio::test]
async fn an_order_put_on_an_eventbridge_rule_named_as_a_producer_is_processed() {
    let kind = resq_e2e::emulator_kind();
    if kind != resq_e2e::EmulatorKind::Localstack {
        eprintln!("skipped on moto: its CloudFormation does not apply AWS::SQS::QueuePolicy");
        return;
    }
    let emulator = resq_e2e::emulator();
    let config = emulator.sdk_config().await;
    let template = translated_template(resq_local::stack::ARTIFACT_BUCKET);
    let rule_arn = format!(
        "arn:aws:events:{}:000000000000:rule/shop-orders",
        resq_e2e::REGION
    );
    let outputs = resq_local::stack::deploy_stack(
        kind,
        &config,
        &template.to_string(),
        "resq-events",
        &[("OrdersProducerArns", &rule_arn)],
    )
    .await
    .unwrap();
    // GIVEN the queue's policy names the rule …
    let sqs = aws_sdk_sqs::Client::new(&config);
    let attrs = queue_attributes(&sqs, &outputs.main_queue_url).await;
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let policy: Value = serde_json::from_str(&attrs[&Q::Policy]).unwrap();
    let allow = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Sid"] == "AllowOrdersProducers")
        .expect("the producers' statement");
    assert_eq!(
        list(&allow["Condition"]["ArnLike"]["aws:SourceArn"]),
        [&json!(rule_arn)]
    );
    // … and the rule sends each order's detail to the queue
    let events = aws_sdk_eventbridge::Client::new(&config);
    let created = events
        .put_rule()
        .name("shop-orders")
        .event_pattern(r#"{"source": ["shop"], "detail-type": ["order"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(created.rule_arn(), Some(rule_arn.as_str()));
    events
        .put_targets()
        .rule("shop-orders")
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("orders")
                .arn(&outputs.main_queue_arn)
                .input_path("$.detail")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();

    // WHEN an order is put on the bus
    let order =
        json!({"orderId": "o-eb-1", "userId": "u", "items": [{"productId": "p", "quantity": 2}]});
    let put = events
        .put_events()
        .entries(
            aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .source("shop")
                .detail_type("order")
                .detail(order.to_string())
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(put.failed_entry_count(), 0);

    // THEN the order itself (no event envelope) reaches the queue, and the consumer records it
    let received = receive_until(&sqs, &outputs.main_queue_url, 1).await;
    assert_eq!(received.len(), 1, "the order, once");
    let body: Value = serde_json::from_str(received[0].body().unwrap()).unwrap();
    assert_eq!(body, order, "InputPath $.detail: the order alone");
    let response = crate::template::consume_as_the_stack(&config, &outputs, &received).await;
    assert!(response.batch_item_failures.is_empty());
    let s3 = resq::aws::s3_client(&config);
    s3.head_object()
        .bucket(&outputs.bucket)
        .key("orders/o-eb-1.json")
        .send()
        .await
        .expect("order recorded");
}
