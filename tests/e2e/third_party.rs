//! Events other projects wrote (`tests/fixtures/third-party/`: the Rust, Go, Java and .NET
//! runtimes' fixtures, Powertools', SAM CLI's), sent to the real function binaries behind the
//! local Lambda runtime API, against the emulator. Each file has its documented outcome below
//! (docs/consumer.md and docs/redriver.md); a file without one fails
//! `every_third_party_fixture_has_a_documented_outcome`. Each run prints one line per fixture.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use aws_sdk_sqs::types::Message;
use resq_e2e::{Stack, StackOptions, workspace_root};
use resq_local::chaos::runtime::Function;
use resq_local::driver::Ended;
use serde_json::{Value, json};

use crate::helpers::{attr, runtime_function};

/// Where the fixtures are, from the workspace root.
const DIR: &str = "tests/fixtures/third-party";

/// Where one record ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Home {
    /// A copy in the stack's DLQ: `x-failure-class=permanent`, this `x-failure-reason`, the
    /// body as delivered, the readable attributes kept, `x-first-sent-at` its `SentTimestamp`.
    Dlq(&'static str),
    /// An archive entry `archive/{reason}/…/{messageId}.json` holding the record.
    Archived(&'static str),
}

const MALFORMED: Home = Home::Dlq("MALFORMED_JSON");
const INVALID: Home = Home::Dlq("VALIDATION_FAILED");
const UNREADABLE: Home = Home::Dlq("UNREADABLE_RECORD");
/// A record whose body is empty or absent (SQS never delivers one; test tools do): not JSON,
/// and no DLQ copy can carry it, since SQS refuses an empty message body ("the minimum size is
/// one character"). Such a record can never succeed (docs/design.md, "Reading the event"), so
/// it is archived at once as a permanent failure no copy can carry (`PERMANENT_FAILURE`,
/// docs/reasons.md), never reported failed on every receive until SQS moves it without a
/// reason (every dead letter says why: docs/guarantees.md).
const NO_BODY: Home = Home::Archived("PERMANENT_FAILURE");

/// The error of lambda_runtime's own deserializer, for a payload that is not JSON (a UTF-8
/// byte-order mark before it): refused before resq's code runs, so resq cannot word it. Lambda's
/// Invoke API takes a JSON payload only; a local runtime API passes such bytes on.
const RUNTIME_REFUSAL: (&str, &str) = (
    "&lambda_runtime::deserializer::DeserializeError",
    "expected value at line 1 column 1",
);

/// How a fixture is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Byte for byte as published.
    AsPublished,
    /// Without its UTF-8 byte-order mark, as .NET's own tests read it (a `StreamReader`).
    WithoutBom,
    /// SAM CLI's template rendered with the defaults `sam local generate-event` fills in.
    SamDefaults,
}

/// What a fixture comes to.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The consumer answers `{"batchItemFailures": []}` and each record (by `messageId`) ends
    /// as given once its body is read (`IDEMPOTENCY_WINDOW_SECONDS` at its maximum). With the
    /// default window, every fixture being years old, a readable record is archived
    /// `IDEMPOTENCY_WINDOW` instead (the check comes before the body's).
    Records(&'static [(&'static str, Home)]),
    /// As [`Expect::Records`], every record of the file alike.
    EveryRecord(Home),
    /// The consumer fails the invocation: this `errorType`, its message saying this.
    ConsumerError(&'static str, &'static str),
    /// The redriver runs (an empty DLQ: nothing to do) and answers its JSON summary.
    Run,
    /// An alarm's action: the redriver reads the breakers only (it touches no message, and
    /// notes no read of the DLQ) and answers its summary.
    BreakersOnly,
    /// The redriver fails the invocation (`InvalidInput`), its message saying this.
    RedriverError(&'static str),
}

impl Expect {
    fn consumer(&self) -> bool {
        !matches!(
            self,
            Expect::Run | Expect::BreakersOnly | Expect::RedriverError(_)
        )
    }
}

struct Case {
    file: &'static str,
    form: Form,
    expect: Expect,
}

impl Case {
    /// The file, and how it is sent when not as published.
    fn name(&self) -> String {
        let form = match self.form {
            Form::AsPublished => "",
            Form::WithoutBom => " (byte-order mark dropped)",
            Form::SamDefaults => " (SAM's defaults filled in)",
        };
        format!("{}{form}", self.file)
    }
}

const fn case(file: &'static str, expect: Expect) -> Case {
    Case {
        file,
        form: Form::AsPublished,
        expect,
    }
}

/// Every fixture, with its outcome. Bodies: `"Message Body"`, `"Hello from SQS!"` and the like
/// are not JSON; JSON that is not an order (`{"a":"Test","b":123}`, a product, an SNS
/// envelope) is invalid; a `binaryValue` that is not base64 (`"base64Str"`) makes the record
/// unreadable. The fixtures' `eventSourceARN`s name queues the stack does not have (backoff
/// there would fail harmlessly; none of these records is transient), none of them its DLQ.
const CASES: &[Case] = &[
    case(
        "aws-lambda-rust-runtime/example-sqs-event.json",
        Expect::Records(&[("MessageID_1", MALFORMED)]),
    ),
    case(
        "aws-lambda-rust-runtime/example-sqs-event-obj.json",
        Expect::Records(&[("MessageID_1", INVALID)]),
    ),
    // SQS's ReceiveMessage output, not a Lambda event
    case(
        "aws-lambda-rust-runtime/example-sqs-api-event-obj.json",
        Expect::ConsumerError("NotAnSqsEvent", "missing field `Records`"),
    ),
    case(
        "aws-lambda-rust-runtime/example-eventbridge-schedule.json",
        Expect::Run,
    ),
    case(
        "aws-lambda-rust-runtime/example-eventbridge-event-obj.json",
        Expect::RedriverError("\"aws.ec2\""),
    ),
    // what CloudWatch sends a function named in an alarm's actions
    case(
        "aws-lambda-rust-runtime/example-cloudwatch-alarm-metric.json",
        Expect::BreakersOnly,
    ),
    case(
        "aws-lambda-go/sqs-event.json",
        Expect::Records(&[("MessageID_1", MALFORMED)]),
    ),
    // a body that is the empty string
    case(
        "aws-lambda-java-libs/sqs_event_nobody.json",
        Expect::Records(&[("d9144555-9a4f-4ec3-99a0-fc4e625a8db2", NO_BODY)]),
    ),
    case(
        "aws-lambda-java-libs/sqs_event_product.json",
        Expect::Records(&[("d9144555-9a4f-4ec3-99a0-34ce359b4b54", INVALID)]),
    ),
    case("aws-lambda-java-libs/cloudwatch_event.json", Expect::Run),
    // published with a UTF-8 byte-order mark: not JSON, refused whole by the runtime's
    // deserializer before resq's code runs (nothing copied, archived or lost)
    case(
        "aws-lambda-dotnet/EventsTests.Shared/sqs-event.json",
        Expect::ConsumerError(RUNTIME_REFUSAL.0, RUNTIME_REFUSAL.1),
    ),
    Case {
        file: "aws-lambda-dotnet/EventsTests.Shared/sqs-event.json",
        form: Form::WithoutBom,
        expect: Expect::Records(&[("MessageID", MALFORMED)]),
    },
    case(
        "aws-lambda-dotnet/EventsTests.Shared/scheduled-event.json",
        Expect::Run,
    ),
    // `arn:{partition}:sqs:{region}:…`: the test tool sends its placeholders as they are
    case(
        "aws-lambda-dotnet/LambdaTestTool-v2/sqs.json",
        Expect::Records(&[("19dd0b57-b21e-4ac1-bd88-01bbb068cb78", MALFORMED)]),
    ),
    case(
        "aws-lambda-dotnet/LambdaTestTool-v2/scheduled-event.json",
        Expect::Run,
    ),
    case(
        "powertools-lambda-python/sqsEvent.json",
        Expect::Records(&[
            ("059f36b4-87a3-44ab-83d2-661975830a7d", UNREADABLE),
            ("2e1424d4-f796-459a-8184-9c92662be6da", INVALID),
        ]),
    ),
    // from a DLQ, but not this stack's
    case(
        "powertools-lambda-python/sqsDlqTriggerEvent.json",
        Expect::Records(&[("db37cc61-1bb0-4e77-b6f3-7cf87f44a72a", MALFORMED)]),
    ),
    case(
        "powertools-lambda-python/snsSqsFifoEvent.json",
        Expect::Records(&[("69bc4bbd-ed69-4325-a434-85c3b428ceab", INVALID)]),
    ),
    case(
        "powertools-lambda-python/eventBridgeEvent.json",
        Expect::RedriverError("\"aws.ec2\""),
    ),
    // `arn:aws:sqs:us-east-2: 123456789012:my-queue` (a space in the account)
    case(
        "powertools-lambda-python/getting_started_sqs_event.json",
        Expect::Records(&[
            ("059f36b4-87a3-44ab-83d2-661975830a7d", INVALID),
            ("244fc6b4-87a3-44ab-83d2-361172410c3a", MALFORMED),
        ]),
    ),
    case(
        "powertools-lambda-typescript/sns-body.json",
        Expect::Records(&[("79406a00-bf15-46ca-978c-22c3613fcb30", INVALID)]),
    ),
    // a MessageGroupId on a standard queue's records
    case(
        "powertools-lambda-java/sqs_fifo_event.json",
        Expect::EveryRecord(INVALID),
    ),
    // 25 records, 9 of them a second delivery of another in the same batch
    case(
        "powertools-lambda-java/sqs_event_big.json",
        Expect::EveryRecord(INVALID),
    ),
    // a record without a `body` field
    case(
        "powertools-lambda-java/sqs_event_no_body.json",
        Expect::Records(&[("d9144555-9a4f-4ec3-99a0-34ce359b4b54", NO_BODY)]),
    ),
    case("powertools-lambda-java/scheduled_event.json", Expect::Run),
    case(
        "powertools-lambda-java/sqs_invalid_messages.json",
        Expect::EveryRecord(INVALID),
    ),
    Case {
        file: "aws-sam-cli/Sqs.json",
        form: Form::SamDefaults,
        expect: Expect::Records(&[("19dd0b57-b21e-4ac1-bd88-01bbb068cb78", MALFORMED)]),
    },
    Case {
        file: "aws-sam-cli/ScheduledEvent.json",
        form: Form::SamDefaults,
        expect: Expect::Run,
    },
];

/// The values `sam local generate-event sqs receive-message` and `… cloudwatch
/// scheduled-event` fill in by default (`samcli/lib/generated_sample_events/event-mapping.json`;
/// `md5_of_body` is the MD5 of the default body).
const SAM_DEFAULTS: &[(&str, &str)] = &[
    ("partition", "aws"),
    ("region", "us-east-1"),
    ("account_id", "123456789012"),
    ("queue_name", "MyQueue"),
    ("body", "Hello from SQS!"),
    ("md5_of_body", "7b270e59b47ff90a553787216d55d91d"),
    ("rule", "ExampleRule"),
];

fn fixture_path(file: &str) -> PathBuf {
    workspace_root().join(DIR).join(file)
}

/// The invocation payload of `case`.
fn payload(case: &Case) -> String {
    let path = fixture_path(case.file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match case.form {
        Form::AsPublished => text,
        Form::WithoutBom => text.trim_start_matches('\u{feff}').to_owned(),
        Form::SamDefaults => SAM_DEFAULTS.iter().fold(text, |t, (name, value)| {
            t.replace(&format!("{{{{{{{name}}}}}}}"), value)
        }),
    }
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            files_under(&path, base, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            let rel = path.strip_prefix(base).expect("under the base");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn every_third_party_fixture_has_a_documented_outcome() {
    let base = workspace_root().join(DIR);
    let mut files = Vec::new();
    files_under(&base, &base, &mut files);
    files.sort();
    let covered: BTreeSet<&str> = CASES.iter().map(|c| c.file).collect();
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !covered.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "fixtures without an outcome: {missing:?}"
    );
    let gone: Vec<&&str> = covered
        .iter()
        .filter(|c| !files.iter().any(|f| f == *c))
        .collect();
    assert!(gone.is_empty(), "outcomes without a fixture: {gone:?}");
    assert!(files.len() >= 15, "{} fixtures", files.len());
    // each record-level outcome names exactly the records the file holds
    for case in CASES {
        if let Expect::Records(expected) = case.expect {
            let event: Value = serde_json::from_str(&payload(case)).expect("JSON");
            let mut ids: Vec<&str> = records(&event)
                .iter()
                .filter_map(|r| r["messageId"].as_str())
                .collect();
            ids.dedup();
            let named: Vec<&str> = expected.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, named, "{}", case.file);
        }
    }
}

fn records(event: &Value) -> &[Value] {
    event["Records"].as_array().map_or(&[], Vec::as_slice)
}

/// The configuration a consumer run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    /// `IDEMPOTENCY_WINDOW_SECONDS` unset: 90 days, as deployed.
    Default,
    /// `IDEMPOTENCY_WINDOW_SECONDS` at its maximum (100 years), so that every body is read.
    Widest,
}

impl Window {
    fn label(self) -> &'static str {
        match self {
            Window::Default => "window 90 days",
            Window::Widest => "bodies read",
        }
    }
}

/// The expected home of `record` (its expectation once its body is read: `read`), under
/// `window`: the order of checks (docs/consumer.md) puts "cannot be read" first, then the redrive cap
/// (no fixture carries `x-redrive-count`), then the idempotency window, then the body.
fn home_under(window: Window, record: &Value, read: Home) -> Home {
    let unreadable = read == UNREADABLE;
    if window == Window::Widest || unreadable {
        return read;
    }
    let sent = record["attributes"]["SentTimestamp"]
        .as_str()
        .and_then(|t| t.trim().parse::<u64>().ok());
    let window_ms = resq_consumer::config::DEFAULT_IDEMPOTENCY_WINDOW_SECONDS * 1000;
    match sent {
        Some(sent) if crate::helpers::now_ms().saturating_sub(sent) > window_ms => {
            Home::Archived("IDEMPOTENCY_WINDOW")
        }
        _ => read,
    }
}

fn function(stack: &Stack, name: &str, tag: &str, extra: &[(&str, &str)]) -> (Function, PathBuf) {
    let log = std::env::temp_dir().join(format!(
        "resq-third-party-{name}-{tag}-{}.log",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&log);
    (runtime_function(stack, name, extra, &log), log)
}

/// The function error's `errorType` and `errorMessage`.
fn function_error(body: &str) -> (String, String) {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    (
        v["errorType"].as_str().unwrap_or_default().to_owned(),
        v["errorMessage"]
            .as_str()
            .unwrap_or(body)
            .trim_end()
            .to_owned(),
    )
}

/// `account:name` of an SQS ARN.
fn queue_of(arn: &str) -> Option<String> {
    resq_consumer::event::QueueArn::parse(arn).map(|q| format!("{}:{}", q.account, q.name))
}

/// Every message in the DLQ now, received and deleted (so the next fixture starts from an
/// empty DLQ).
async fn take_dlq(stack: &Stack) -> Vec<Message> {
    let mut all = Vec::new();
    let mut empty = 0;
    while empty < 2 {
        let got = stack.receive(&stack.dlq, 10).await;
        if got.is_empty() {
            empty += 1;
        }
        all.extend(got);
    }
    let refs: Vec<&Message> = all.iter().collect();
    stack.delete(&stack.dlq, &refs).await;
    all
}

/// A record's body as its DLQ copy or archive entry carries it: the string, or the JSON text of
/// a body that is not a string.
fn body_of(record: &Value) -> Option<String> {
    match &record["body"] {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// What is wrong with `copy` as the DLQ copy of `record` (empty: nothing).
fn copy_problems(copy: &Message, record: &Value, reason: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let id = record["messageId"].as_str().unwrap_or_default();
    if attr(copy, "x-failure-class") != Some("permanent") {
        wrong.push(format!(
            "{id}: x-failure-class {:?}",
            attr(copy, "x-failure-class")
        ));
    }
    if let Some(sent) = record["attributes"]["SentTimestamp"].as_str()
        && attr(copy, "x-first-sent-at") != Some(sent)
    {
        wrong.push(format!(
            "{id}: x-first-sent-at {:?}, its SentTimestamp is {sent}",
            attr(copy, "x-first-sent-at")
        ));
    }
    if reason == "UNREADABLE_RECORD" {
        return wrong;
    }
    // the original attributes are kept: strings and numbers as they were, binary byte for byte
    let attributes = record["messageAttributes"].as_object();
    for (name, value) in attributes.into_iter().flatten() {
        let kept = copy.message_attributes().and_then(|a| a.get(name));
        let expected_string = value["stringValue"].as_str();
        let expected_binary = value["binaryValue"].as_str().map(|b| {
            serde_json::from_value::<aws_lambda_events::encodings::Base64Data>(json!(b))
                .map(|d| d.0)
                .unwrap_or_default()
        });
        let ok = match (kept, value["dataType"].as_str()) {
            (Some(k), Some(t)) if t.starts_with("Binary") => {
                k.binary_value().map(|b| b.as_ref().to_vec()) == expected_binary
            }
            (Some(k), _) => k.string_value() == expected_string,
            (None, _) => false,
        };
        if !ok {
            wrong.push(format!("{id}: attribute {name} not kept: {kept:?}"));
        }
    }
    wrong
}

/// Runs every SQS fixture through the consumer binary under `window`; returns what went wrong.
async fn consumer_run(stack: &Stack, window: Window) -> Vec<String> {
    let mut problems = Vec::new();
    let dlq_queue = queue_of(&stack.dlq.arn);
    for (n, case) in CASES
        .iter()
        .enumerate()
        .filter(|(_, c)| c.expect.consumer())
    {
        // a bucket of its own: fixtures share message ids, and an archive entry is written once
        let bucket = format!(
            "resq-third-party-{}-{n}",
            if window == Window::Default { "d" } else { "w" }
        );
        stack
            .s3
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("create bucket");
        let mut extra = vec![("ARCHIVE_BUCKET", bucket.as_str())];
        if window == Window::Widest {
            extra.push(("IDEMPOTENCY_WINDOW_SECONDS", "3153600000"));
        }
        let tag = format!("{}-{n}", if window == Window::Default { "d" } else { "w" });
        let (mut consumer, log) = function(stack, "consumer", &tag, &extra);
        let text = payload(case);
        let outcome = consumer.invoke(&text, None).await.expect("invoke");
        let event: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let label = format!("[{}] {}", window.label(), case.name());
        let mut wrong = Vec::new();
        // a fixture whose eventSourceARN names this stack's DLQ is refused
        let from_dlq = records(&event).iter().any(|r| {
            r["eventSourceARN"].as_str().and_then(queue_of).as_ref() == dlq_queue.as_ref()
        });
        let expected: Vec<(&Value, Home)> = match case.expect {
            Expect::Records(homes) => records(&event)
                .iter()
                .filter_map(|r| {
                    let id = r["messageId"].as_str()?;
                    let read = homes.iter().find(|(h, _)| *h == id)?.1;
                    Some((r, home_under(window, r, read)))
                })
                .collect(),
            Expect::EveryRecord(read) => records(&event)
                .iter()
                .map(|r| (r, home_under(window, r, read)))
                .collect(),
            _ => Vec::new(),
        };
        let line = match (&outcome, case.expect, from_dlq) {
            (Ended::Error(body), _, true) => {
                let (error_type, message) = function_error(body);
                if error_type != "EventFromDeadLetterQueue" {
                    wrong.push(format!("from the DLQ, but: {error_type}: {message}"));
                }
                format!("refused: {error_type}")
            }
            (Ended::Error(body), Expect::ConsumerError(want_type, says), false) => {
                let (error_type, message) = function_error(body);
                if error_type != want_type || !message.contains(says) {
                    wrong.push(format!(
                        "expected {want_type} saying {says:?}, got {error_type}: {message}"
                    ));
                }
                let copied = take_dlq(stack).await.len();
                let archived = stack.keys_in(&bucket, "archive/").await;
                if copied != 0 || !archived.is_empty() {
                    wrong.push(format!(
                        "{copied} DLQ copies and archive entries {archived:?} of a refused event"
                    ));
                }
                format!("function error {error_type}: {message}")
            }
            (Ended::Response(body), Expect::Records(_) | Expect::EveryRecord(_), false) => {
                let response: Value = serde_json::from_str(body).unwrap_or(Value::Null);
                if response != json!({"batchItemFailures": []}) {
                    wrong.push(format!("response {body}"));
                }
                let found = settle_check(stack, &bucket, &expected, &mut wrong).await;
                format!("{found}; response {body}")
            }
            (other, expect, _) => {
                wrong.push(format!("expected {expect:?}, got {other:?}"));
                format!("{other:?}")
            }
        };
        consumer.kill().await;
        if wrong.is_empty() {
            println!("third-party {label} → {line}");
        } else {
            println!(
                "third-party {label} → {line} — WRONG: {} (log: {})",
                wrong.join("; "),
                log.display()
            );
            problems.push(format!("{label}: {}", wrong.join("; ")));
        }
    }
    problems
}

/// Checks that each record of `expected` is at its home, and that nothing else was written
/// (every record is a DLQ copy or an archive entry; no fixture is an order); returns the
/// outcome line.
async fn settle_check(
    stack: &Stack,
    bucket: &str,
    expected: &[(&Value, Home)],
    wrong: &mut Vec<String>,
) -> String {
    let copies = take_dlq(stack).await;
    let archived = stack.keys_in(bucket, "archive/").await;
    let orders = stack.keys_in(bucket, "orders/").await;
    if !orders.is_empty() {
        wrong.push(format!("recorded as orders: {orders:?}"));
    }
    let mut used = vec![false; copies.len()];
    // each message's home as found (its first delivery's, when the batch holds it twice)
    let mut per_record: BTreeMap<&str, String> = BTreeMap::new();
    let mut archived_ids = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (record, home) in expected {
        let id = record["messageId"].as_str().unwrap_or_default();
        let first = seen.insert(id);
        match home {
            Home::Dlq(reason) => {
                let body = body_of(record);
                let copy = (0..copies.len()).find(|&i| {
                    !used[i]
                        && copies[i].body().map(str::to_owned) == body
                        && attr(&copies[i], "x-failure-reason") == Some(*reason)
                });
                match copy {
                    Some(i) => {
                        used[i] = true;
                        wrong.extend(copy_problems(&copies[i], record, reason));
                        per_record.entry(id).or_insert(format!("DLQ {reason}"));
                    }
                    None if first => {
                        wrong.push(format!("{id}: no DLQ copy ({reason})"));
                        per_record.insert(id, format!("NOT in the DLQ ({reason} expected)"));
                    }
                    // a second delivery of a message already copied: one copy is its home
                    None => {}
                }
            }
            Home::Archived(reason) => {
                let key = archived.iter().find(|k| {
                    k.starts_with(&format!("archive/{reason}/"))
                        && k.ends_with(&format!("/{id}.json"))
                });
                archived_ids.insert(id);
                match key {
                    None => {
                        wrong.push(format!(
                            "{id}: no archive entry under archive/{reason}/ (archive: {archived:?})"
                        ));
                        per_record.insert(id, format!("NOT archived ({reason} expected)"));
                    }
                    Some(key) => {
                        per_record.entry(id).or_insert(format!("archived {reason}"));
                        let entry = stack.json_object_in(bucket, key).await;
                        if entry["metadata"]["reason"] != json!(reason) {
                            wrong.push(format!(
                                "{key}: metadata.reason {}",
                                entry["metadata"]["reason"]
                            ));
                        }
                        let kept = entry["originalMessage"]["body"].as_str();
                        if let Some(body) = body_of(record)
                            && kept != Some(body.as_str())
                        {
                            wrong.push(format!("{key}: body {kept:?}, the record's is {body:?}"));
                        }
                    }
                }
            }
        }
    }
    // nothing else: no copy or entry that is not one of these records'
    let stray: Vec<String> = copies
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(c, _)| format!("{:?} ({:?})", c.body(), attr(c, "x-failure-reason")))
        .collect();
    if !stray.is_empty() {
        wrong.push(format!("DLQ copies of no record: {stray:?}"));
    }
    let expected_keys = archived_ids.len();
    if archived.len() != expected_keys {
        wrong.push(format!(
            "archive entries {archived:?}, expected {expected_keys}"
        ));
    }
    let homes: Vec<String> = if per_record.len() <= 4 {
        per_record
            .iter()
            .map(|(id, h)| format!("{id}: {h}"))
            .collect()
    } else {
        let mut by_home: BTreeMap<&str, usize> = BTreeMap::new();
        for h in per_record.values() {
            *by_home.entry(h).or_default() += 1;
        }
        by_home
            .iter()
            .map(|(h, n)| format!("{n} messages: {h}"))
            .collect()
    };
    format!(
        "records: {}, messages: {}; DLQ copies: {}, archive entries: {}, orders: {} [{}]",
        expected.len(),
        per_record.len(),
        copies.len(),
        archived.len(),
        orders.len(),
        homes.join(", ")
    )
}

#[tokio::test]
async fn third_party_sqs_fixtures_through_the_consumer() {
    let stack = Stack::start(StackOptions::default()).await;
    let mut problems = consumer_run(&stack, Window::Default).await;
    problems.extend(consumer_run(&stack, Window::Widest).await);

    // a consumer wired to its own DLQ: Powertools' DLQ-trigger event, from this stack's DLQ
    let case = CASES
        .iter()
        .find(|c| c.file == "powertools-lambda-python/sqsDlqTriggerEvent.json")
        .expect("the DLQ-trigger fixture");
    let mut event: Value = serde_json::from_str(&payload(case)).expect("JSON");
    for r in event["Records"].as_array_mut().into_iter().flatten() {
        r["eventSourceARN"] = json!(stack.dlq.arn);
    }
    let (mut consumer, _) = function(&stack, "consumer", "from-dlq", &[]);
    let outcome = consumer
        .invoke(&event.to_string(), None)
        .await
        .expect("invoke");
    consumer.kill().await;
    let line = match &outcome {
        Ended::Error(body) => {
            let (error_type, message) = function_error(body);
            if error_type != "EventFromDeadLetterQueue" || !message.contains(&stack.dlq.arn) {
                problems.push(format!("from the DLQ: {error_type}: {message}"));
            }
            format!("function error {error_type}: {message}")
        }
        other => {
            problems.push(format!(
                "from the DLQ: expected EventFromDeadLetterQueue, got {other:?}"
            ));
            format!("{other:?}")
        }
    };
    let copied = take_dlq(&stack).await.len();
    let archived = stack.keys("archive/").await;
    if copied != 0 || !archived.is_empty() {
        problems.push(format!(
            "from the DLQ: {copied} copied back into the DLQ, archived {archived:?}"
        ));
    }
    println!(
        "third-party {} with eventSourceARN = the stack's DLQ → {line}",
        case.name()
    );
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[tokio::test]
async fn third_party_eventbridge_fixtures_through_the_redriver() {
    let stack = Stack::start(StackOptions::default()).await;
    let (mut redriver, log) = function(&stack, "redriver", "eventbridge", &[]);
    let mut problems = Vec::new();
    for case in CASES.iter().filter(|c| !c.expect.consumer()) {
        let outcome = redriver.invoke(&payload(case), None).await.expect("invoke");
        let mut wrong = Vec::new();
        let line = match (&outcome, case.expect) {
            (Ended::Response(body), Expect::Run) => {
                let s: Value = serde_json::from_str(body).unwrap_or(Value::Null);
                let ran = s["dryRun"] == json!(false)
                    && s["paused"] == json!(false)
                    && s["received"] == json!(0)
                    && s["redriven"] == json!(0)
                    && s["failed"] == json!(0)
                    && s["archived"] == json!({})
                    && s["stoppedBy"] == json!("empty");
                if !ran {
                    wrong.push(format!("not a normal run of an empty DLQ: {body}"));
                }
                format!("ran: {body}")
            }
            (Ended::Response(body), Expect::BreakersOnly) => {
                let s: Value = serde_json::from_str(body).unwrap_or(Value::Null);
                let breakers_only = s["received"] == json!(0)
                    && s["redriven"] == json!(0)
                    && s["swept"] == json!(false);
                if !breakers_only {
                    wrong.push(format!("not a run of the breakers only: {body}"));
                }
                format!("breakers only: {body}")
            }
            (Ended::Error(body), Expect::RedriverError(says)) => {
                let (error_type, message) = function_error(body);
                if error_type != "InvalidInput"
                    || !message.contains(says)
                    || !message.contains("scheduled")
                {
                    wrong.push(format!("expected InvalidInput saying {says:?}"));
                }
                format!("function error {error_type}: {message}")
            }
            (other, expect) => {
                wrong.push(format!("expected {expect:?}"));
                format!("{other:?}")
            }
        };
        let label = case.name();
        if wrong.is_empty() {
            println!("third-party [redriver] {label} → {line}");
        } else {
            println!(
                "third-party [redriver] {label} → {line} — WRONG: {} (log: {})",
                wrong.join("; "),
                log.display()
            );
            problems.push(format!("{label}: {}", wrong.join("; ")));
        }
    }
    // the SQS fixtures, sent to the redriver by mistake: neither a scheduled event nor a manual
    // payload, so a clear function error (the one a bad manual payload gets)
    for case in CASES.iter().filter(|c| c.expect.consumer()) {
        let outcome = redriver.invoke(&payload(case), None).await.expect("invoke");
        let (line, clear) = match &outcome {
            Ended::Error(body) => {
                let (error_type, message) = function_error(body);
                let clear = (error_type == "InvalidInput"
                    && message.starts_with("invalid redriver input"))
                    || (error_type == RUNTIME_REFUSAL.0 && message.contains(RUNTIME_REFUSAL.1));
                (format!("function error {error_type}: {message}"), clear)
            }
            other => (format!("{other:?}"), false),
        };
        let label = format!("{} (an SQS event)", case.name());
        if clear {
            println!("third-party [redriver] {label} → {line}");
        } else {
            println!(
                "third-party [redriver] {label} → {line} — WRONG: expected InvalidInput (log: {})",
                log.display()
            );
            problems.push(format!("{label}: {line}"));
        }
    }
    // a scheduled run of an empty DLQ changes nothing
    assert_eq!(stack.depth(&stack.dlq).await, (0, 0));
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
    redriver.kill().await;
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
