//! A team's own function as docs/own-function.md describes it: the crate the chapter shows
//! (its files, under docs/own-function/, are what the chapter includes), built outside resq's
//! workspace and run as a Lambda function against the emulator; a build that aborts on panic
//! refused; and infra/function.yaml, its role and its deployment beside a resq stack.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_cloudformation::types::{Capability, Parameter};
use resq_e2e::{REGION, Stack, StackOptions, translated, translated_template, workspace_root};
use resq_local::chaos::runtime::Function;
use resq_local::driver::Ended;
use resq_local::stack::Resolver;
use serde_json::{Value, json};

use crate::helpers::attr;

/// The chapter.
fn chapter() -> String {
    std::fs::read_to_string(workspace_root().join("docs/own-function.md"))
        .expect("docs/own-function.md")
}

/// The files the chapter includes (`{{#include own-function/…}}`), relative to docs/.
fn included(chapter: &str) -> BTreeSet<String> {
    chapter
        .match_indices("{{#include ")
        .map(|(i, m)| {
            let rest = &chapter[i + m.len()..];
            rest[..rest.find("}}").expect("an include ends with }}")]
                .trim()
                .to_owned()
        })
        .collect()
}

/// Every file under `dir`, relative to `base`.
fn files_under(base: &Path, dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("read the crate's directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(files_under(base, &path));
        } else if let Ok(relative) = path.strip_prefix(base) {
            out.insert(relative.to_string_lossy().into_owned());
        }
    }
    out
}

#[test]
fn the_chapter_shows_every_file_of_the_crate_the_test_builds() {
    let docs = workspace_root().join("docs");
    let shown = included(&chapter());
    let built = files_under(&docs, &docs.join("own-function"));
    assert_eq!(
        shown,
        BTreeSet::from([
            "own-function/Cargo.toml".to_owned(),
            "own-function/src/main.rs".to_owned()
        ])
    );
    assert_eq!(
        built, shown,
        "docs/own-function/ holds what the chapter shows"
    );
    // the crate inherits nothing from resq's workspace and keeps unwinding
    let manifest = std::fs::read_to_string(docs.join("own-function/Cargo.toml")).unwrap();
    assert!(!manifest.contains("workspace"), "{manifest}");
    let release: Vec<&str> = manifest
        .lines()
        .skip_while(|l| l.trim() != "[profile.release]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::trim)
        .collect();
    assert!(release.contains(&"panic = \"unwind\""), "{release:?}");
    // the deploy step names the templates' parameters, each one it has: resq's stack first,
    // then the function
    let text = chapter();
    for (command, template) in [
        ("sam deploy --stack-name payments", "infra/template.yaml"),
        (
            "sam deploy -t resq/infra/function.yaml",
            "infra/function.yaml",
        ),
    ] {
        let parameters = translated(template, "resq-artifacts");
        let deploy = &text[text.find(command).unwrap_or_else(|| panic!("{command}"))..];
        let end = [deploy.find(" && "), deploy.find("```")]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        let deploy = &deploy[..end];
        for (name, value) in deploy
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter(|(k, _)| k.chars().next().is_some_and(char::is_uppercase))
        {
            assert!(
                parameters["Parameters"].get(name).is_some(),
                "the chapter passes {name}={value}, which {template} does not take"
            );
        }
    }
}

/// Where the crate is laid out as the chapter's step 1 leaves it: `resq` (the workspace) and
/// the crate side by side, its Cargo.lock copied from resq's. Outside resq's directory (a crate
/// under it would be taken for a member of its workspace), at a place fixed for this checkout,
/// so that a second run reuses the first one's build.
fn laid_out() -> PathBuf {
    use std::hash::{Hash, Hasher};
    static ONCE: Mutex<()> = Mutex::new(());
    let _once = ONCE.lock().unwrap_or_else(|e| e.into_inner());
    let root = workspace_root().canonicalize().unwrap();
    let mut checkout = std::collections::hash_map::DefaultHasher::new();
    root.hash(&mut checkout);
    let place = std::env::temp_dir().join(format!("resq-own-function-{:016x}", checkout.finish()));
    let krate = place.join("settle-payments");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    let resq = place.join("resq");
    if std::fs::read_link(&resq).ok().as_deref() != Some(root.as_path()) {
        let _ = std::fs::remove_file(&resq);
        std::os::unix::fs::symlink(&root, &resq).expect("link resq next to the crate");
    }
    for file in ["Cargo.toml", "src/main.rs"] {
        let shown = std::fs::read(root.join("docs/own-function").join(file)).unwrap();
        // unchanged files keep their times: cargo then has nothing to rebuild
        if std::fs::read(krate.join(file)).ok().as_ref() != Some(&shown) {
            std::fs::write(krate.join(file), shown).unwrap();
        }
    }
    std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    krate
}

/// resq's target directory (the test binary is in its `debug/deps`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .nth(3)
        .expect("target/debug/deps/<test binary>")
        .to_owned()
}

/// `cargo build` of the crate with `config` (`--config` values), as the chapter's step 4 runs
/// it, offline and in resq's target directory with the workspace's dev profile settings, so that
/// the dependencies resq's own build compiled are reused where their features match.
fn cargo_build(krate: &Path, config: &[&str]) -> (Output, Duration) {
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .current_dir(krate)
        .args(["build", "--offline", "--target-dir"])
        .arg(target_dir())
        .args([
            "--config",
            "profile.dev.debug=\"line-tables-only\"",
            "--config",
            "profile.dev.package.\"*\".debug=false",
        ])
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS");
    for c in config {
        cargo.args(["--config", c]);
    }
    let started = Instant::now();
    let out = cargo.output().expect("cargo runs");
    (out, started.elapsed())
}

/// The function binary, built (each test process builds it once).
fn settle_payments() -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(bin) = built.as_ref() {
        return bin.clone();
    }
    let krate = laid_out();
    let (out, took) = cargo_build(&krate, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo build failed:\n{stderr}");
    println!(
        "own function: cargo build outside the workspace took {:.1} s",
        took.as_secs_f64()
    );
    let bin = target_dir().join("debug/settle-payments");
    *built = Some(bin.clone());
    bin
}

fn payment(id: &str, currency: &str) -> String {
    json!({"paymentId": id, "accountId": "acc-1", "amountCents": 1250, "currency": currency})
        .to_string()
}

/// What the function answered, as Lambda's poller settles it: deletes what was not reported
/// failed, returns the message ids reported failed.
async fn invoke(
    stack: &Stack,
    function: &mut Function,
    batch: &[aws_sdk_sqs::types::Message],
) -> BTreeSet<String> {
    let event = resq_local::event::lambda_event(batch, &stack.main.arn, REGION);
    let outcome = function
        .invoke(&event.to_string(), None)
        .await
        .expect("the function runs");
    let Ended::Response(body) = outcome else {
        panic!("the function did not answer: {outcome:?}");
    };
    resq_local::driver::settle_answer(&stack.sqs, &stack.main.url, batch, &body)
        .await
        .unwrap_or_else(|e| panic!("the whole batch failed: {e}"))
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_crate_built_outside_the_workspace_runs_on_the_emulator() {
    // GIVEN the chapter's crate, built outside resq's workspace, as a Lambda function on a resq
    // stack's queues, its ledger bucket not created yet
    let binary = settle_payments();
    let stack = Stack::start(StackOptions::default()).await;
    let dir = std::env::temp_dir().join(format!("resq-own-function-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ledger = "payments-ledger";
    let mut env: Vec<(String, String)> = stack.env().into_iter().collect();
    env.extend(
        [
            ("AWS_ENDPOINT_URL", stack.emulator.endpoint()),
            ("AWS_REGION", REGION),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
            // a retried record is visible again at once
            ("BACKOFF_BASE_SECONDS", "0"),
            ("BACKOFF_MAX_SECONDS", "0"),
            ("HANDLER_CONFIG", ledger),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let log = dir.join("settle-payments.log");
    let mut function = Function::new(
        "settle-payments",
        &binary,
        env,
        &log,
        Duration::from_secs(60),
    )
    .unwrap();
    for body in [
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
    let batch = stack.receive_n(&stack.main, 3).await;
    assert_eq!(batch.len(), 3);
    let id_of = |body: &str| -> String {
        batch
            .iter()
            .find(|m| m.body() == Some(body))
            .and_then(|m| m.message_id())
            .unwrap()
            .to_owned()
    };

    // WHEN Lambda invokes it with the three
    let failed = invoke(&stack, &mut function, &batch).await;

    // THEN the good payment, whose ledger is unreachable, is reported failed (retried), and the
    // two bad ones are in the DLQ with resq's attributes and their reasons, the team's own too
    assert_eq!(failed, BTreeSet::from([id_of(&payment("p-1", "EUR"))]));
    let dead = stack.receive_n(&stack.dlq, 2).await;
    let mut homes: Vec<(String, &str, &str)> = dead
        .iter()
        .map(|m| {
            (
                m.body().unwrap_or_default().to_owned(),
                attr(m, resq::attributes::X_FAILURE_CLASS).unwrap_or_default(),
                attr(m, resq::attributes::X_FAILURE_REASON).unwrap_or_default(),
            )
        })
        .collect();
    homes.sort();
    assert_eq!(
        homes,
        vec![
            (payment("p-2", "XTS"), "permanent", "CURRENCY_UNSUPPORTED"),
            ("{not json".to_owned(), "permanent", "MALFORMED_JSON"),
        ]
    );

    // WHEN the ledger is there and the retried payment comes again
    stack
        .s3
        .create_bucket()
        .bucket(ledger)
        .send()
        .await
        .unwrap();
    let again = stack.receive_n(&stack.main, 1).await;
    assert_eq!(again.len(), 1, "the retried payment is back in the queue");
    assert_eq!(
        again[0]
            .attributes()
            .and_then(
                |a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
            )
            .map(String::as_str),
        Some("2")
    );
    let failed = invoke(&stack, &mut function, &again).await;

    // THEN it is recorded once, under its business id, and nothing is left in the queue
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(stack.keys_in(ledger, "").await, vec!["payments/p-1.json"]);
    let record = stack.json_object_in(ledger, "payments/p-1.json").await;
    assert_eq!(
        (record["paymentId"].as_str(), record["currency"].as_str()),
        (Some("p-1"), Some("EUR"))
    );
    assert_eq!(stack.depth(&stack.main).await, (0, 0));
    // one process served both invocations: resq's start-up (configuration, clients) held
    assert_eq!(function.starts, 1);
    function.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_build_that_aborts_on_panic_is_refused_with_the_fix() {
    // GIVEN the chapter's crate WHEN it is built with panics aborting (cargo lambda's release
    // default when the profile does not set `panic`; the debug profile here, to reuse resq's
    // build, the same check)
    let krate = laid_out();
    let (out, took) = cargo_build(&krate, &["profile.dev.panic=\"abort\""]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "own function: the panic=abort build took {:.1} s to be refused",
        took.as_secs_f64()
    );
    // THEN it fails, naming the fix, at the binary that serves a handler
    assert!(!out.status.success(), "a panic=abort build went through");
    assert!(
        stderr.contains("resq-consumer: this build aborts on panic")
            && stderr.contains("Set `[profile.release] panic = \"unwind\"`"),
        "{stderr}"
    );
    assert!(stderr.contains("settle-payments"), "{stderr}");
}

/// A role statement's resource in function.yaml, in the form resq's lists use.
fn function_resource_name(r: &Value) -> String {
    let import = |v: &Value| -> Option<String> {
        let sub = v.get("Fn::ImportValue")?.get("Fn::Sub")?.as_str()?;
        Some(sub.strip_prefix("${ResqStackName}-")?.to_owned())
    };
    if let Some(export) = import(r) {
        return match export.as_str() {
            "OrdersQueueArn" => "OrdersQueue".into(),
            "DeadLetterQueueArn" => "DeadLetterQueue".into(),
            other => panic!("a role resource from the export {other}"),
        };
    }
    match &r["Fn::Sub"] {
        // a bucket the stack is given by name (a parameter)
        Value::String(s) if s.starts_with("arn:${AWS::Partition}:s3:::${") => s
            .trim_start_matches("arn:${AWS::Partition}:s3:::${")
            .replacen('}', "", 1),
        Value::String(s) => {
            let (reference, tail) = s
                .strip_prefix("${")
                .and_then(|s| s.split_once('}'))
                .unwrap_or_else(|| panic!("{r}"));
            format!("{}{tail}", reference.strip_suffix(".Arn").expect("an ARN"))
        }
        Value::Array(a) => {
            let pattern = a[0].as_str().unwrap();
            let bucket = import(&a[1]["Bucket"]).expect("the bucket from its export");
            assert_eq!(bucket, "ArchiveBucketName");
            let tail = pattern
                .strip_prefix("arn:${AWS::Partition}:s3:::${Bucket}")
                .unwrap_or_else(|| panic!("{r}"));
            format!("ArchiveBucket{tail}")
        }
        _ => panic!("not a resource of the resq stack's: {r}"),
    }
}

#[test]
fn function_yaml_grants_what_the_engine_calls_and_the_handler_brings_its_own() {
    let t = translated("infra/function.yaml", "resq-artifacts");
    let key = "arn:aws:kms:us-east-1:123456789012:key/k";
    let policy = "arn:aws:iam::123456789012:policy/settle-payments-ledger";
    for (params, with_key, with_policy) in [
        (
            vec![("ProducerPayloadBucket", "producer-payloads")],
            false,
            false,
        ),
        (
            vec![
                ("EncryptionKeyArn", key),
                ("HandlerPolicyArns", policy),
                ("ProducerPayloadBucket", "producer-payloads"),
            ],
            true,
            true,
        ),
    ] {
        let r = Resolver::new(&t, "payments-settle", &params);
        let role = &t["Resources"]["ConsumerRole"]["Properties"];
        let mut granted = BTreeSet::new();
        let mut key_statements = vec![];
        for st in role["Policies"][0]["PolicyDocument"]["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|st| r.decided(st))
        {
            assert_eq!(st["Effect"], "Allow");
            let actions: Vec<&str> = match &st["Action"] {
                Value::Array(a) => a.iter().map(|a| a.as_str().unwrap()).collect(),
                a => vec![a.as_str().unwrap()],
            };
            if actions.iter().all(|a| a.starts_with("kms:")) {
                key_statements.push(st);
                continue;
            }
            let condition = st["Condition"]["StringLike"]["s3:prefix"].as_str();
            let resource = function_resource_name(&st["Resource"])
                + &condition.map_or(String::new(), |p| format!(" if s3:prefix={p}"));
            for a in actions {
                assert!(!a.contains('*'), "{st}");
                granted.insert((a.to_owned(), resource.clone()));
            }
        }
        let engine = resq_consumer::engine_permissions();
        let called: BTreeSet<(String, String)> = engine
            .iter()
            .map(|p| (p.action.to_owned(), p.resource.to_owned()))
            .collect();
        assert_eq!(granted, called, "{params:?}");
        // the reference handler's order records are not the team's
        assert!(!granted.iter().any(|(_, r)| r.contains("orders/")));
        if with_key {
            assert_eq!(key_statements.len(), 1);
            let st = key_statements[0];
            let actions: BTreeSet<&str> = st["Action"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert_eq!(
                actions,
                resq_e2e::kms_actions(&engine).into_iter().collect()
            );
            assert_eq!(r.value(&st["Resource"]).as_deref(), Some(key));
        } else {
            assert!(key_statements.is_empty());
        }
        let managed = r.decided(&role["ManagedPolicyArns"]);
        assert_eq!(
            managed.and_then(|m| r.value(m)).as_deref(),
            with_policy.then_some(policy),
            "{params:?}"
        );
    }
}

/// Deploys resq's stack without its consumer, then function.yaml's translation beside it, on
/// moto's CloudFormation (moto stores functions and event source mappings without running them;
/// LocalStack cannot create functions without Docker).
#[tokio::test]
async fn function_yaml_deploys_a_teams_function_on_a_resq_stack() {
    if resq_e2e::emulator_kind() != resq_e2e::EmulatorKind::Moto {
        eprintln!("skipped on LocalStack: it cannot create the functions");
        return;
    }
    let moto = resq_e2e::moto();
    let config = moto.sdk_config().await;
    let s3 = resq::aws::s3_client(&config);
    let artifacts = "resq-artifacts";
    s3.create_bucket().bucket(artifacts).send().await.unwrap();
    for key in ["RedriverFunction.zip", "settle-payments/v1.zip"] {
        s3.put_object()
            .bucket(artifacts)
            .key(key)
            .body(b"placeholder".to_vec().into())
            .send()
            .await
            .unwrap();
    }
    let cfn = aws_sdk_cloudformation::Client::new(&config);
    let parameter = |k: &str, v: &str| {
        Parameter::builder()
            .parameter_key(k)
            .parameter_value(v)
            .build()
    };
    let created = async |name: &str, template: Value, parameters: Vec<Parameter>| {
        cfn.create_stack()
            .stack_name(name)
            .template_body(template.to_string())
            .capabilities(Capability::CapabilityIam)
            .set_parameters(Some(parameters))
            .send()
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e:?}"));
        let stack = cfn
            .describe_stacks()
            .stack_name(name)
            .send()
            .await
            .unwrap()
            .stacks
            .unwrap()
            .remove(0);
        assert_eq!(
            stack.stack_status().map(|s| s.as_str()),
            Some("CREATE_COMPLETE"),
            "{name}: {:?}",
            stack.stack_status_reason()
        );
        stack
            .outputs()
            .iter()
            .map(|o| {
                (
                    o.output_key().unwrap_or_default().to_owned(),
                    o.output_value().unwrap_or_default().to_owned(),
                )
            })
            .collect::<HashMap<String, String>>()
    };

    // GIVEN resq's stack without its reference consumer (and a redrive cap of its own)
    let resq = created(
        "payments",
        translated_template(artifacts),
        vec![
            parameter("ReferenceConsumer", "false"),
            parameter("MaxRedriveAttempts", "4"),
        ],
    )
    .await;
    assert!(!resq.contains_key("ConsumerFunctionName"), "{resq:?}");
    let lambda = aws_sdk_lambda::Client::new(&config);
    assert!(
        lambda
            .get_function()
            .function_name("payments-consumer")
            .send()
            .await
            .is_err(),
        "no reference consumer"
    );

    // WHEN function.yaml deploys the team's function on it
    let function = created(
        "payments-settle",
        translated("infra/function.yaml", artifacts),
        vec![
            parameter("ResqStackName", "payments"),
            parameter("CodeBucket", artifacts),
            parameter("CodeKey", "settle-payments/v1.zip"),
            parameter("HandlerConfig", "payments-ledger"),
        ],
    )
    .await;

    // THEN it is the stack's consumer: its name, the stack's timeout, queues, bucket and cap in
    // its environment, and an event source on the stack's queue reporting batch item failures
    assert_eq!(function["ConsumerFunctionName"], "payments-consumer");
    // (read raw: moto leaves numbers unquoted in the environment, which the SDK refuses)
    let f = moto.get_json("/2015-03-31/functions/payments-consumer/configuration");
    assert_eq!(f["Runtime"], "provided.al2023");
    assert_eq!(f["Handler"], "bootstrap");
    assert_eq!(
        f["Timeout"].to_string(),
        "30",
        "the resq stack's ConsumerTimeout"
    );
    let env = &f["Environment"]["Variables"];
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    for (var, expected) in [
        ("MAIN_QUEUE_URL", resq["OrdersQueueUrl"].as_str()),
        ("DLQ_URL", resq["DeadLetterQueueUrl"].as_str()),
        ("ARCHIVE_BUCKET", resq["ArchiveBucketName"].as_str()),
        ("MAX_REDRIVE_ATTEMPTS", "4"),
        ("HANDLER_CONFIG", "payments-ledger"),
    ] {
        assert_eq!(text(&env[var]), expected, "{var}");
    }
    // what it reads is a configuration the consumer accepts
    let vars: HashMap<String, String> = env
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), text(v)))
        .collect();
    let consumer =
        resq_consumer::config::ConsumerConfig::from_vars(&resq::config::Vars(|k: &str| {
            vars.get(k).cloned()
        }))
        .expect("the consumer's configuration");
    assert_eq!(consumer.common.max_redrive_attempts, 4);
    crate::helpers::assert_reports_batch_item_failures(
        &lambda,
        "payments-consumer",
        &resq["OrdersQueueArn"],
    )
    .await;
    // AND its output names that mapping, for the resq stack's ConsumerEventSourceMapping (the
    // consumer breaker), which the resq stack has none of until then
    let mappings = lambda
        .list_event_source_mappings()
        .function_name("payments-consumer")
        .send()
        .await
        .unwrap();
    assert_eq!(
        function["ConsumerEventSourceMapping"],
        mappings.event_source_mappings()[0].uuid().unwrap()
    );
    assert!(!resq.contains_key("ConsumerEventSourceMapping"), "{resq:?}");
}
