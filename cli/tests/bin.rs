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
