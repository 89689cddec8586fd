//! The `resq` binary's own behaviour: flags, exit codes and messages (no AWS needed).

use std::process::Command;

fn resq(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_resq"))
        .args(args)
        .env_remove("MAIN_QUEUE_URL")
        .env_remove("DLQ_URL")
        .env_remove("ARCHIVE_BUCKET")
        .env_remove("AWS_ENDPOINT_URL")
        .output()
        .expect("run resq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const LOCAL: [&str; 8] = [
    "--endpoint-url",
    "http://127.0.0.1:9",
    "--queue-url",
    "http://127.0.0.1:9/1/orders",
    "--dlq-url",
    "http://127.0.0.1:9/1/dlq",
    "--bucket",
    "b",
];

#[test]
fn bad_flags_are_usage_errors() {
    let (code, err) = resq(&["dlq", "replay", "--rate", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a rate above 0"), "{err}");
    let (code, err) = resq(&["send", "--count", "5", "--malformed-pct", "120"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a percentage"), "{err}");
    let (code, _) = resq(&["frobnicate"]);
    assert_eq!(code, 2);
}

#[test]
fn missing_queue_names_say_where_to_find_them() {
    let (code, err) = resq(&["status"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--queue-url (or MAIN_QUEUE_URL) is required"),
        "{err}"
    );
}

#[test]
fn an_unreachable_endpoint_is_a_clear_error() {
    let mut args = LOCAL.to_vec();
    args.push("status");
    let (code, err) = resq(&args);
    assert_eq!(code, 1);
    assert!(
        err.contains("Connection refused") && err.contains("is the emulator running?"),
        "{err}"
    );
}

#[test]
fn send_needs_a_source() {
    let mut args = LOCAL.to_vec();
    args.push("send");
    let (code, err) = resq(&args);
    assert_eq!(code, 1);
    assert!(err.contains("send needs --file PATH or --count N"), "{err}");
}
