//! The `resq` binary's own behaviour: flags, exit codes and messages (no AWS needed: the
//! endpoints are closed ports on this machine, and nothing reaches the internet).

use std::process::Command;

/// Runs `resq` with `args` and `env`, in an environment of its own: no names, no region, no
/// credentials or AWS config files of the machine's, no instance metadata.
fn resq_with<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_resq"));
    command.args(args);
    for var in [
        "MAIN_QUEUE_URL",
        "DLQ_URL",
        "ARCHIVE_BUCKET",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "MAX_REDRIVE_ATTEMPTS",
        "ARCHIVE_AFTER_SECONDS",
        "IDEMPOTENCY_WINDOW_SECONDS",
        "RESQ_STACK",
        "CONSUMER_EVENT_SOURCE_MAPPING",
        "PAUSE_CONSUMER_ON_ALARMS",
        "RUST_LOG",
    ] {
        command.env_remove(var);
    }
    command
        .env("AWS_CONFIG_FILE", "/nonexistent/resq-test/config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/resq-test/credentials",
        )
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("run resq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn resq<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, String) {
    resq_with(args, &[])
}

/// What a person reads carries no Rust debug formatting.
fn assert_readable(err: &str) {
    for debug in [
        "DispatchFailure(",
        "Some(",
        "None)",
        "ConnectorError",
        " { ",
        "Error {",
    ] {
        assert!(!err.contains(debug), "{debug} in: {err}");
    }
}

/// A local emulator's endpoint where nothing listens.
const CLOSED: &str = "http://127.0.0.1:9";

const LOCAL: [&str; 8] = [
    "--endpoint-url",
    CLOSED,
    "--main-queue-url",
    "http://127.0.0.1:9/1/orders",
    "--dlq-url",
    "http://127.0.0.1:9/1/dlq",
    "--archive-bucket",
    "b",
];

/// `LOCAL`, then `tail`.
fn local(tail: &[&str]) -> Vec<String> {
    LOCAL.iter().chain(tail).map(|s| s.to_string()).collect()
}

#[test]
fn bad_flags_are_usage_errors() {
    let (code, err) = resq(&["dlq", "redrive", "--rate-per-second", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"0\" is not a rate above 0"), "{err}");
    let (code, err) = resq(&["send", "--count", "5", "--malformed-pct", "120"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"120\" is not a percentage"), "{err}");
    let (code, _) = resq(&["frobnicate"]);
    assert_eq!(code, 2);
    let (code, err) = resq(&["send", "--count", "0"]);
    assert_eq!(code, 2, "{err}");
    let (code, err) = resq(&["send", "--count", "3", "--file", "orders.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, err) = resq(&["archive", "ls", "--archive-reason", "REDRIVE_CAPP"]);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "\"REDRIVE_CAPP\" is not an archive reason; one of REDRIVE_CAP, INVALID_REDRIVE_COUNT"
        ),
        "{err}"
    );
    let (code, err) = resq(&["archive", "ls", "--date", "2026/11/21"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("\"2026/11/21\" is not a day written YYYY-MM-DD"),
        "{err}"
    );
}

#[test]
fn missing_queue_names_say_where_to_find_them() {
    let (code, err) = resq(&["--endpoint-url", CLOSED, "status"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim(),
        "resq: --main-queue-url (or MAIN_QUEUE_URL) is required: the stack output OrdersQueueUrl has it (`sam list stack-outputs --stack-name STACK` lists them)"
    );
    let (code, err) = resq(&[
        "--endpoint-url",
        CLOSED,
        "--main-queue-url",
        "http://127.0.0.1:9/1/orders",
        "status",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "--dlq-url (or DLQ_URL) is required: the stack output DeadLetterQueueUrl has it"
        ),
        "{err}"
    );
    // restore sends to the main queue: it asks for it before reading anything
    let (code, err) = resq(&[
        "--endpoint-url",
        CLOSED,
        "--archive-bucket",
        "b",
        "archive",
        "restore",
        "archive/REDRIVE_CAP/2026/11/21/m.json",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--main-queue-url (or MAIN_QUEUE_URL) is required"),
        "{err}"
    );
    let (code, err) = resq(&["--endpoint-url", CLOSED, "archive", "ls"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "--archive-bucket (or ARCHIVE_BUCKET) is required: the stack output ArchiveBucketName has it"
        ),
        "{err}"
    );
}

#[test]
fn the_consumer_commands_ask_for_the_mapping_and_the_bucket_before_any_call() {
    // GIVEN no mapping named: each command says which flag, variable and output give it
    for command in [
        &["consumer", "pause"][..],
        &["consumer", "resume", "--force"],
    ] {
        let (code, err) = resq(&local(command));
        assert_eq!(code, 2, "{err}");
        assert_eq!(
            err.trim(),
            "resq: --mapping (or CONSUMER_EVENT_SOURCE_MAPPING) is required: the stack output ConsumerEventSourceMapping has it (`sam list stack-outputs --stack-name STACK` lists them)"
        );
    }
    // AND the pause record's bucket, from the variable too
    let (code, err) = resq_with(
        &[
            "--endpoint-url",
            CLOSED,
            "consumer",
            "pause",
            "--reason",
            "x",
        ],
        &[("CONSUMER_EVENT_SOURCE_MAPPING", "7c1f0d2e")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--archive-bucket (or ARCHIVE_BUCKET) is required"),
        "{err}"
    );
    // AND status, told of a mapping, needs the bucket for its record (before any queue)
    let (code, err) = resq(&[
        "--endpoint-url",
        CLOSED,
        "--main-queue-url",
        "http://127.0.0.1:9/1/orders",
        "--dlq-url",
        "http://127.0.0.1:9/1/dlq",
        "--mapping",
        "7c1f0d2e",
        "status",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--archive-bucket (or ARCHIVE_BUCKET) is required"),
        "{err}"
    );
    // AND with everything named, an endpoint that does not answer is said so (exit 1)
    let (code, err) = resq(&local(&["--mapping", "7c1f0d2e", "consumer", "pause"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("reading the event source mapping 7c1f0d2e")
            && err.contains("is the emulator running?"),
        "{err}"
    );
    assert_readable(&err);
}

#[test]
fn a_missing_region_is_a_usage_error() {
    let (code, err) = resq(&[
        "--main-queue-url",
        "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
        "send",
        "--count",
        "1",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--region (or AWS_REGION) is required: the region the stack is deployed in"),
        "{err}"
    );
}

#[test]
fn each_command_asks_only_for_the_names_it_uses() {
    // archive ls with only --archive-bucket gets past the names to the (closed) endpoint
    let (code, err) = resq(&[
        "--endpoint-url",
        CLOSED,
        "--archive-bucket",
        "b",
        "archive",
        "ls",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("resq: listing s3://b/archive/: dispatch failure: io error")
            && err.contains(&format!(
                "resq: the endpoint {CLOSED} did not answer: is the emulator running?"
            )),
        "{err}"
    );
    assert!(!err.contains("is required"), "{err}");
    assert_readable(&err);
    let (code, err) = resq(&[
        "--endpoint-url",
        CLOSED,
        "--archive-bucket",
        "b",
        "archive",
        "show",
        "k",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("reading s3://b/k") && err.contains("did not answer"),
        "{err}"
    );
    // peek reads the DLQ only
    let (code, err) = resq(&[
        "--endpoint-url",
        CLOSED,
        "--dlq-url",
        "http://127.0.0.1:9/1/dlq",
        "dlq",
        "peek",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("did not answer"), "{err}");
    // send uses the main queue only
    let (code, err) = resq(&[
        "--endpoint-url",
        CLOSED,
        "--main-queue-url",
        "http://127.0.0.1:9/1/orders",
        "send",
        "--count",
        "2",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("sending to http://127.0.0.1:9/1/orders"),
        "{err}"
    );
}

#[test]
fn an_unreachable_endpoint_is_a_clear_error() {
    let (code, err) = resq(&local(&["status"]));
    assert_eq!(code, 1);
    assert!(
        err.contains("Connection refused")
            && err.contains("is the emulator running?")
            && err.contains(CLOSED),
        "{err}"
    );
    assert_readable(&err);
    // redrive checks the DLQ answers before it starts
    let (code, err) = resq(&local(&["dlq", "redrive", "--dry-run"]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("reading http://127.0.0.1:9/1/dlq") && err.contains("did not answer"),
        "{err}"
    );
    assert_readable(&err);
}

#[test]
fn missing_credentials_are_told_apart_from_an_unreachable_endpoint() {
    // Against AWS (no --endpoint-url) with no credentials anywhere. The SDK's own
    // service-specific endpoint variable points SQS at a closed port so that nothing could
    // reach the internet; credentials are looked up before anything is sent, so their absence
    // is what is reported.
    let (code, err) = resq_with(
        &[
            "--region",
            "us-east-1",
            "--main-queue-url",
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
            "--dlq-url",
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq",
            "status",
        ],
        &[("AWS_ENDPOINT_URL_SQS", CLOSED)],
    );
    assert_eq!(code, 1, "{err}");
    for needle in [
        "credential",
        "resq: no AWS credentials could be loaded",
        "aws sso login",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "any dummy values do",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(!err.contains("did not answer"), "{err}");
    assert_readable(&err);
    // a local emulator with a profile that does not exist: no dummy credentials are made up
    // for a profile the user named
    let (code, err) = resq_with(
        &local(&["status"]),
        &[("AWS_PROFILE", "resq-no-such-profile")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no AWS credentials could be loaded") && !err.contains("did not answer"),
        "{err}"
    );
    assert_readable(&err);
}

#[test]
fn send_needs_a_source() {
    let (code, err) = resq(&local(&["send"]));
    assert_eq!(code, 2);
    assert!(
        err.contains("--file <PATH>") && err.contains("--count <N>"),
        "{err}"
    );
    let (code, err) = resq(&local(&["send", "--file", "/nonexistent/orders.json"]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot read /nonexistent/orders.json"),
        "{err}"
    );
}

#[test]
fn the_operators_answers_refuse_what_does_not_go_together_before_any_call() {
    // a shadow replay needs both --to and --keep-source (exit 2, before the DLQ is read)
    let (code, err) = resq(&local(&[
        "dlq",
        "redrive",
        "--to",
        "http://127.0.0.1:9/1/staging",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--to copies to a staging queue and needs --keep-source"),
        "{err}"
    );
    let (code, err) = resq(&local(&["dlq", "redrive", "--keep-source"]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("needs a staging queue: --to QUEUE_URL"),
        "{err}"
    );
    let (code, err) = resq(&local(&["dlq", "redrive", "--canary", "2", "--dry-run"]));
    assert_eq!(code, 2, "{err}");
    let (code, err) = resq(&local(&["dlq", "redrive", "--min-success", "90"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--min-success goes with --canary N"), "{err}");
    let (code, err) = resq(&local(&[
        "dlq",
        "redrive",
        "--canary",
        "2",
        "--min-success",
        "101",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a percentage"), "{err}");
    // a patch repairs one message, and must be JSON: refused before anything is read
    let dir = scratch("patch");
    let patch = dir.join("patch.json");
    std::fs::write(&patch, "{\"items\": [").unwrap();
    let patch = patch.to_string_lossy().into_owned();
    let (code, err) = resq(&local(&[
        "archive", "restore", "k1", "k2", "--patch", &patch,
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--patch repairs one archived message: give one key, not 2"),
        "{err}"
    );
    let (code, err) = resq(&local(&["archive", "restore", "k1", "--patch", &patch]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not JSON") && err.contains("RFC 7396"),
        "{err}"
    );
    assert!(!err.contains("did not answer"), "nothing was called: {err}");
    let (code, err) = resq(&local(&[
        "archive",
        "restore",
        "k1",
        "--patch",
        "/nonexistent/p.json",
    ]));
    assert_eq!(code, 2, "{err}");
    // find needs an order id that is not empty
    let (code, err) = resq(&local(&["find", " "]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the order id is empty"), "{err}");
    let (code, _) = resq(&local(&["find"]));
    assert_eq!(code, 2);
}

#[test]
fn a_stack_is_read_from_cloudformation_before_anything_else() {
    // --stack (or RESQ_STACK) reads the stack first: against a closed endpoint, that is the
    // call that fails, naming the stack
    for (args, env) in [
        (
            vec!["--endpoint-url", CLOSED, "--stack", "resq-prod", "status"],
            vec![],
        ),
        (
            vec!["--endpoint-url", CLOSED, "status"],
            vec![("RESQ_STACK", "resq-prod")],
        ),
    ] {
        let (code, err) = resq_with(&args, &env);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("reading the stack resq-prod") && err.contains("did not answer"),
            "{err}"
        );
        assert_readable(&err);
    }
    let (code, err) = resq(&["--stack", "resq-prod", "status"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--region (or AWS_REGION) is required"),
        "{err}"
    );
    let (code, err) = resq(&["--endpoint-url", CLOSED, "--stack", " ", "status"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--stack (or RESQ_STACK) is empty"), "{err}");
}

/// `resq` with `args`: exit status and stdout (for help texts).
fn resq_stdout(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_resq"))
        .args(args)
        .env_remove("MAX_REDRIVE_ATTEMPTS")
        .env_remove("ARCHIVE_AFTER_SECONDS")
        .output()
        .expect("run resq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn the_old_spellings_still_parse() {
    // old flags and the old subcommand, as hidden aliases: the command gets past parsing to
    // the (closed) endpoint, exit 1, instead of a usage error, exit 2
    let old = [
        "--endpoint-url",
        CLOSED,
        "--queue-url",
        "http://127.0.0.1:9/1/orders",
        "--dlq-url",
        "http://127.0.0.1:9/1/dlq",
        "--bucket",
        "b",
    ];
    let with =
        |tail: &[&'static str]| -> Vec<&'static str> { old.iter().chain(tail).copied().collect() };
    let (code, err) = resq(&with(&[
        "dlq",
        "replay",
        "--dry-run",
        "--reason",
        "VALIDATION_FAILED",
        "--older-than",
        "60",
        "--max",
        "5",
        "--rate",
        "2",
        "--cap",
        "4",
        "--archive-after",
        "600",
        "--archive-permanent",
    ]));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("reading http://127.0.0.1:9/1/dlq") && err.contains("did not answer"),
        "{err}"
    );
    let (code, err) = resq(&with(&[
        "dlq",
        "peek",
        "--reason",
        "X",
        "--older-than",
        "5",
    ]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("did not answer"), "{err}");
    let (code, err) = resq(&with(&["archive", "ls", "--reason", "REDRIVE_CAP"]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("listing s3://b/archive/REDRIVE_CAP/"), "{err}");
    // an old and a new spelling of one setting together are refused
    let (code, err) = resq(&local(&[
        "dlq",
        "redrive",
        "--permanent-action",
        "keep",
        "--archive-permanent",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn the_new_flags_are_the_ones_shown() {
    let (code, help) = resq_stdout(&["dlq", "redrive", "--help"]);
    assert_eq!(code, 0, "{help}");
    for flag in [
        "--failure-reason",
        "--older-than-seconds",
        "--max-messages",
        "--rate-per-second",
        "--max-redrive-attempts",
        "--archive-after-seconds",
        "--permanent-action",
        "--main-queue-url",
        "--archive-bucket",
        "[default: 1000]",
        "[default: 10]",
        "[default: 3]",
        "[default: 86400]",
        "[default: keep]",
    ] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
    for old in [
        "--reason ",
        "--older-than ",
        "--max ",
        "--rate ",
        "--cap",
        "--archive-after ",
        "--archive-permanent",
        "--queue-url",
        "--bucket",
    ] {
        assert!(!help.contains(old), "{old}: {help}");
    }
    let (_, help) = resq_stdout(&["dlq", "--help"]);
    assert!(
        help.contains("redrive") && !help.contains("replay"),
        "{help}"
    );
    let (_, help) = resq_stdout(&["archive", "ls", "--help"]);
    assert!(
        help.contains("--archive-reason") && !help.contains("--reason "),
        "{help}"
    );
    // a permanent action is keep or archive
    let (code, err) = resq(&["dlq", "redrive", "--permanent-action", "delete"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("\"delete\" is not a permanent action: keep or archive"),
        "{err}"
    );
}

// ---- resq stack check: no AWS at all (the environment has no region and no credentials)

/// The workspace's root, where `make deploy` runs `resq stack check`.
fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// A fresh directory of its own (tests run in parallel).
fn scratch(name: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("resq-stack-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `resq stack check` with `args`, run in `dir`: exit status, stdout, stderr.
fn stack_check(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_resq"))
        .current_dir(dir)
        .args(["stack", "check"])
        .args(args)
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent/resq-test/config")
        .output()
        .expect("run resq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `resq stack check` in the workspace against its template, with no samconfig overrides (an
/// empty samconfig, so that one saved by `sam deploy --guided` changes nothing here).
fn stack_check_workspace(overrides: &str) -> (i32, String, String) {
    let dir = scratch("empty-samconfig");
    let samconfig = dir.join("samconfig.toml");
    std::fs::write(&samconfig, "version = 0.1\n").unwrap();
    let samconfig = samconfig.to_str().unwrap().to_owned();
    let found = stack_check(
        &workspace(),
        &[
            "--samconfig",
            &samconfig,
            "--parameter-overrides",
            overrides,
        ],
    );
    let _ = std::fs::remove_dir_all(dir);
    found
}

#[test]
fn stack_check_passes_the_templates_defaults() {
    let (code, out, err) = stack_check_workspace("");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err, "");
    assert!(
        out.starts_with(
            "resq stack check: infra/template.yaml\n  values: the template's defaults\n"
        ),
        "{out}"
    );
    for line in [
        "ok        retry horizon: MaxReceiveCount 5 × 301 s (BackoffMaxSeconds 300 s + ConsumerBatchingWindowSeconds 1 s) = 1,505 s ≤ OrdersRetentionSeconds 345,600 s",
        "ok        order-record lifetime: OrderRecordRetentionDays 90 = 7,776,000 s ≥ ArchiveAfterSeconds 86,400 s + OrdersRetentionSeconds 345,600 s = 432,000 s",
        "ok        replay rate: RedriveRatePerSecond 10 × 60 s = 600 replays a period > ReplaysFailingThreshold 10",
        "ok        archive sweep: ArchiveAfterSeconds 86,400 s + ArchiveSweepSeconds 3,600 s + RedriverSchedule rate(5 minutes) = 300 s + RedriverTimeout 300 s = 90,600 s < the DLQ's retention 1,209,600 s (14 days)",
        "ok        batch before the deadline: ⌈ConsumerBatchSize 10 ÷ ConsumerConcurrency auto = 10⌉ = 1 round × 100 ms a record (assumed: --record-ms)",
        "ok        visibility: the main queue's visibility 7 × ConsumerTimeout 30 s = 210 s ≥ 6 × ConsumerTimeout 30 s + ConsumerBatchingWindowSeconds 1 s = 181 s",
        "ok        receives before the DLQ: MaxReceiveCount 5 ≥ 2",
        "ok        redriver run within its period: RedriverTimeout 300 s ≤ RedriverSchedule rate(5 minutes) = 300 s",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        14,
        "{out}"
    );
    assert!(!out.contains("conflict"), "{out}");
}

#[test]
fn stack_check_refuses_the_issues_examples_naming_the_parameters() {
    for (overrides, rule, named) in [
        (
            "MaxReceiveCount=20 BackoffMaxSeconds=300 OrdersRetentionSeconds=3600",
            "conflict  retry horizon (could lose): MaxReceiveCount, BackoffMaxSeconds, ConsumerBatchingWindowSeconds, OrdersRetentionSeconds: ",
            "MaxReceiveCount, BackoffMaxSeconds, ConsumerBatchingWindowSeconds, OrdersRetentionSeconds (above)",
        ),
        (
            "ConsumerTimeout=900 OrdersRetentionSeconds=3600",
            "conflict  retry horizon (could lose): ConsumerTimeout, ConsumerBatchingWindowSeconds, OrdersRetentionSeconds: ",
            "ConsumerTimeout, ConsumerBatchingWindowSeconds, OrdersRetentionSeconds (above)",
        ),
        (
            "OrderRecordRetentionDays=2",
            "conflict  order-record lifetime (could double): OrderRecordRetentionDays, ArchiveAfterSeconds, OrdersRetentionSeconds: ",
            "OrderRecordRetentionDays, ArchiveAfterSeconds, OrdersRetentionSeconds (above)",
        ),
        (
            "ParameterKey=ConsumerBatchSize,ParameterValue=10000 ParameterKey=ConsumerConcurrency,ParameterValue=1",
            "conflict  batch before the deadline (could stall): ConsumerBatchSize, ConsumerConcurrency, ConsumerTimeout, DeadlineMarginMs: ",
            "ConsumerBatchSize, ConsumerConcurrency, ConsumerTimeout, DeadlineMarginMs (above)",
        ),
        (
            "ConsumerTimeout=5 DeadlineMarginMs=5000",
            "conflict  deadline margin (could stall): DeadlineMarginMs, ConsumerTimeout: ",
            "DeadlineMarginMs, ConsumerTimeout (above)",
        ),
        (
            "ConsumerTimeout=5 ConsumerBatchingWindowSeconds=60",
            "conflict  visibility (could double): ConsumerTimeout, ConsumerBatchingWindowSeconds: the main queue's visibility 7 × ConsumerTimeout 5 s = 35 s < 6 × ConsumerTimeout 5 s + ConsumerBatchingWindowSeconds 60 s = 90 s: ",
            "ConsumerTimeout, ConsumerBatchingWindowSeconds (above)",
        ),
        (
            "RedriverTimeout=600",
            "conflict  redriver run within its period (could stall): RedriverTimeout, RedriverSchedule: RedriverTimeout 600 s > RedriverSchedule rate(5 minutes) = 300 s: ",
            "RedriverTimeout, RedriverSchedule (above)",
        ),
        (
            "ConsumerMinimumPollers=2 ConsumerMaximumConcurrency=10",
            "conflict  provisioned pollers (could overrun its cap): ConsumerMaximumConcurrency, ConsumerMinimumPollers: ",
            "ConsumerMaximumConcurrency, ConsumerMinimumPollers (above)",
        ),
        (
            "ArchiveAfterSeconds=1123200 ArchiveSweepSeconds=43200 RedriverTimeout=900 RedriverSchedule=\"rate(12 hours)\"",
            "conflict  archive sweep (could lose): ArchiveSweepSeconds, ArchiveAfterSeconds, RedriverSchedule, RedriverTimeout: ",
            "ArchiveSweepSeconds, ArchiveAfterSeconds, RedriverSchedule, RedriverTimeout (above)",
        ),
    ] {
        let (code, out, err) = stack_check_workspace(overrides);
        assert_eq!(code, 1, "{overrides}: {out}{err}");
        assert!(out.contains(rule), "{overrides}: {out}");
        assert_eq!(
            out.lines().filter(|l| l.starts_with("conflict")).count(),
            1,
            "{out}"
        );
        assert!(
            err.starts_with("resq: the parameter set is refused, in conflict: ")
                && err.contains(named)
                && err.contains("make deploy PARAMS="),
            "{overrides}: {err}"
        );
    }
    // the per-record time is an assumption the operator may change
    let (code, out, _) = stack_check_workspace("ConsumerBatchSize=290 ConsumerConcurrency=1");
    assert_eq!(code, 0, "{out}");
}

#[test]
fn stack_check_names_values_cloudformation_would_refuse_and_unknown_parameters() {
    // AWS: never a single receive before the DLQ (the template's own minimum says why)
    let (code, out, err) = stack_check_workspace("MaxReceiveCount=1");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("refused   MaxReceiveCount=1 (--parameter-overrides): CloudFormation refuses it: 2 to 1000 (AWS advises against 1: a single throttled or failed receive would move a message to the DLQ)"),
        "{out}"
    );
    assert!(
        err.starts_with("resq: CloudFormation would refuse MaxReceiveCount (above)"),
        "{err}"
    );
    let (code, out, err) = stack_check_workspace("MaxMessagesPerRun=50");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("refused   MaxMessagesPerRun=50 (--parameter-overrides): CloudFormation refuses it: auto, or a whole number from 102 to 1000000\n  the rules were not evaluated"),
        "{out}"
    );
    assert!(!out.contains("ok "), "{out}");
    assert!(
        err.starts_with("resq: CloudFormation would refuse MaxMessagesPerRun (above)"),
        "{err}"
    );
    // a parameter the template does not have: a usage error naming it
    let (code, out, err) = stack_check_workspace("MaxRecieveCount=5");
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(out, "");
    assert_eq!(
        err.trim(),
        "resq: --parameter-overrides sets MaxRecieveCount, which is not a parameter of the template"
    );
    let (code, _, err) = stack_check_workspace("MaxReceiveCount");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--parameter-overrides: \"MaxReceiveCount\" is not KEY=VALUE"),
        "{err}"
    );
    // run elsewhere than the repository's root, without --template
    let dir = scratch("no-template");
    let (code, _, err) = stack_check(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("resq: cannot read the template infra/template.yaml: ")
            && err.contains(
                "run resq stack check from the repository's root, or pass --template PATH"
            ),
        "{err}"
    );
    let (code, _, err) = stack_check(&dir, &["--record-ms", "0"]);
    assert_eq!(code, 2, "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stack_check_reads_samconfig_then_the_command_line_and_hands_sam_the_set_checked() {
    // GIVEN a stack directory whose samconfig.toml sets a record lifetime too short
    let dir = scratch("samconfig");
    std::fs::create_dir_all(dir.join("infra")).unwrap();
    std::fs::copy(
        workspace().join("infra/template.yaml"),
        dir.join("infra/template.yaml"),
    )
    .unwrap();
    std::fs::write(
        dir.join("infra/samconfig.toml"),
        "version = 0.1\n[default.deploy.parameters]\nstack_name = \"resq\"\nparameter_overrides = \"OrderRecordRetentionDays=\\\"2\\\" RedriverSchedule=\\\"rate(5 minutes)\\\"\"\n",
    )
    .unwrap();
    // WHEN checked there with the default paths, THEN samconfig's value is refused
    let (code, out, err) = stack_check(&dir, &["--write-overrides", "target/overrides"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("  values: RedriverSchedule=rate(5 minutes) OrderRecordRetentionDays=2 (samconfig.toml's parameter_overrides); the rest at the template's defaults"),
        "{out}"
    );
    assert!(err.contains("OrderRecordRetentionDays"), "{err}");
    assert!(
        !dir.join("target/overrides").exists(),
        "nothing written for a refused set"
    );
    // WHEN the command line sets it over samconfig's, THEN the set passes, and what sam is
    // handed is samconfig's values with the command line's over them
    let (code, out, err) = stack_check(
        &dir,
        &[
            "--parameter-overrides",
            "OrderRecordRetentionDays=30",
            "--parameter-overrides",
            "MaxReceiveCount=6",
            "--write-overrides",
            "target/overrides",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("target/overrides")).unwrap(),
        r#"MaxReceiveCount="6" RedriverSchedule="rate(5 minutes)" OrderRecordRetentionDays="30""#
    );
    // a warning is no refusal: a run shorter than the schedule's period drains slower
    let (code, out, err) = stack_check(
        &dir,
        &[
            "--parameter-overrides",
            "OrderRecordRetentionDays=30 RedriverTimeout=180",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("warning   scheduled drain: RedriverSchedule rate(5 minutes) = 300 s > RedriverTimeout 180 s: MaxMessagesPerRun auto drains at RedriveRatePerSecond 10 × 180 ÷ 300 = 6/s, below the configured 10/s"),
        "{out}"
    );
    // an explicit --samconfig that does not exist is an error, not silence
    let (code, _, err) = stack_check(&dir, &["--samconfig", "infra/nope.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot read the samconfig infra/nope.toml"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
