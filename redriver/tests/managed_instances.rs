//! Lambda Managed Instances: the redriver's binary, sent several invocations at once
//! (`AWS_LAMBDA_MAX_CONCURRENCY` > 1), refuses to start, naming the setting that lets it run.

use std::process::Command;

fn start(max_concurrency: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_redriver"))
        .env_clear()
        .envs(resq_testing::REQUIRED_VARS)
        .env("AWS_LAMBDA_MAX_CONCURRENCY", max_concurrency)
        .output()
        .unwrap()
}

#[test]
fn the_redriver_refuses_to_run_several_invocations_at_once() {
    // WHEN Lambda would send it 8 invocations at once
    let out = start("8");
    // THEN it ends at start-up, saying why and what to set
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("redriver: AWS_LAMBDA_MAX_CONCURRENCY=\"8\" is invalid: expected 1: the redriver runs one run at a time")
            && stderr.contains("set its PerExecutionEnvironmentMaxConcurrency to 1"),
        "{stderr}"
    );
    // AND one at a time it goes on to its next check (it is not on Lambda here)
    let out = start("1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("AWS_LAMBDA_RUNTIME_API is not set"),
        "{stderr}"
    );
}
