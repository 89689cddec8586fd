//! The live local pipeline (`make local`) on this run's emulator: orders sent with the
//! operator's tool are processed within seconds, malformed ones land in the DLQ marked
//! permanent, the functions' metrics reach the emulator's CloudWatch, and the template's alarms
//! exist. Invocations go to the built binaries while `cargo lambda watch` is away, and to watch
//! once it listens (a stand-in here that serves the same binaries the way watch does:
//! Lambda's `Invoke` path, 200 with the response, 500 with a function error).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_cloudwatch::types::{Dimension, Statistic};
use resq_e2e::{emulator_kind, function_binary, installs, translated_template_file};
use resq_local::chaos::runtime::Function;
use resq_local::driver::Ended;
use resq_local::live::{UpOptions, env_file_var, up};
use resq_ops::context::Context;
use resq_ops::orders;
use tokio::io::AsyncWriteExt;

const STACK: &str = "resq-live";

fn env_vars(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, _)| Some((k.to_owned(), env_file_var(text, k)?)))
        .collect()
}

/// What `cargo lambda watch` does for an invoke, over the same binaries, with `make watch`'s
/// log pipe (metric lines renamed to the stack's functions, into CloudWatch); counts
/// invocations.
async fn watch_stand_in(
    port: u16,
    env: Vec<(String, String)>,
    dir: std::path::PathBuf,
    served: Arc<AtomicU64>,
    fail_next: Arc<AtomicU64>,
    cloudwatch: aws_sdk_cloudwatch::Client,
) {
    let renames = env_file_var(
        &env.iter()
            .map(|(k, v)| format!("{k}='{v}'\n"))
            .collect::<String>(),
        resq_local::live::FUNCTIONS_VAR,
    )
    .unwrap_or_default();
    let forwarder = resq_local::emf::MetricForwarder::start(cloudwatch);
    let to_cloudwatch = forwarder.sender();
    let (log_pipe, mut lines) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
    tokio::spawn(async move {
        let _forwarder = forwarder;
        let renames: Vec<(&str, &str)> = renames
            .split(',')
            .filter_map(|p| p.split_once('='))
            .collect();
        while let Some(mut doc) = lines.recv().await {
            resq_local::live::rename_function(&mut doc, &renames);
            let _ = to_cloudwatch.send(doc);
        }
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the watch port is free");
    let functions: Arc<tokio::sync::Mutex<HashMap<String, Function>>> = Arc::default();
    while let Ok((mut conn, _)) = listener.accept().await {
        let (env, dir, served, functions, log_pipe, fail_next) = (
            env.clone(),
            dir.clone(),
            served.clone(),
            functions.clone(),
            log_pipe.clone(),
            fail_next.clone(),
        );
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let Ok(Some(request)) = resq_local::http::next_request(&mut conn, &mut buf).await
            else {
                return; // a probe: connected and closed
            };
            let path = request.head.split_whitespace().nth(1).unwrap_or_default();
            let name = path
                .strip_prefix("/2015-03-31/functions/")
                .and_then(|p| p.strip_suffix("/invocations"))
                .unwrap_or_default()
                .to_owned();
            let event = String::from_utf8_lossy(request.body(&buf)).into_owned();
            served.fetch_add(1, Ordering::Relaxed);
            if name == "consumer"
                && fail_next
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                // a function error, as watch reports one
                let body =
                    r#"{"errorType":"Injected","errorMessage":"the test failed this invocation"}"#;
                let response = format!(
                    "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(response.as_bytes()).await;
                return;
            }
            let mut functions = functions.lock().await;
            let f = functions.entry(name.clone()).or_insert_with(|| {
                Function::new(
                    &name,
                    &function_binary(&name),
                    env.clone(),
                    &dir.join(format!("watch-{name}.log")),
                    Duration::from_secs(30),
                )
                .expect("function binary")
                .forward_metrics(log_pipe)
            });
            let (status, body) = match f.invoke(&event, None).await.expect("invoke") {
                Ended::Response(body) => ("200 OK", body),
                other => ("500 Internal Server Error", format!("{other:?}")),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(response.as_bytes()).await;
        });
    }
}

async fn wait_for<F: std::future::Future<Output = bool>>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> F,
) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every one of `ids` has its order record.
async fn processed(ctx: &Context, ids: &[String]) -> bool {
    let keys = resq_ops::archive::list_keys(ctx, "orders/")
        .await
        .unwrap_or_default();
    ids.iter()
        .all(|id| keys.contains(&format!("orders/{id}.json")))
}

/// A metric's sum over the last minutes: Lambda's own by `FunctionName`, resq's by the
/// dimensions the functions write (`service`, `function_name`; the template's defaults).
async fn metric_sum(ctx: &Context, namespace: &str, metric: &str, function: &str) -> f64 {
    let now = chrono::Utc::now().timestamp();
    let dimension = |name: &str, value: &str| Dimension::builder().name(name).value(value).build();
    let dimensions = if namespace.starts_with("AWS/") {
        vec![dimension("FunctionName", function)]
    } else {
        let names = resq::telemetry::Names::ORDERS;
        vec![
            dimension(resq::metrics::DIMENSION_SERVICE, names.service),
            dimension(resq::metrics::DIMENSION_FUNCTION, function),
        ]
    };
    ctx.cloudwatch
        .get_metric_statistics()
        .namespace(namespace)
        .metric_name(metric)
        .set_dimensions(Some(dimensions))
        .start_time(aws_sdk_cloudwatch::primitives::DateTime::from_secs(
            now - 600,
        ))
        .end_time(aws_sdk_cloudwatch::primitives::DateTime::from_secs(
            now + 60,
        ))
        .period(60)
        .statistics(Statistic::Sum)
        .send()
        .await
        .map(|o| o.datapoints().iter().filter_map(|d| d.sum()).sum())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_pipeline_processes_orders_dead_letters_bad_ones_and_follows_watch() {
    let dir = std::env::temp_dir().join(format!("resq-live-{}", std::process::id()));
    let env_file = dir.join("local.env");
    let watch_port = resq_local::emulator::free_port().unwrap();
    let opts = UpOptions {
        emulator: emulator_kind(),
        installs: installs(),
        template: translated_template_file(&dir),
        stack_name: STACK.into(),
        env_file: env_file.clone(),
        watch_port,
        consumer_bin: function_binary("consumer"),
        redriver_bin: function_binary("redriver"),
        log_dir: dir.clone(),
        schedule: Some(Duration::from_secs(2)),
        metrics_every: Duration::from_secs(2),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let pipeline = tokio::spawn(async move {
        up(&opts, async {
            let _ = stop_rx.await;
        })
        .await
    });
    let started = Instant::now();
    while !env_file.exists() {
        if pipeline.is_finished() {
            panic!("the pipeline stopped: {:?}", pipeline.await);
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the env file");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = std::fs::read_to_string(&env_file).unwrap();
    let var = |k: &str| env_file_var(&text, k).unwrap_or_else(|| panic!("{k} in the env file"));
    let config = resq_local::emulator::local_sdk_config(&var("AWS_ENDPOINT_URL")).await;
    let ctx = Context::from_config(
        &config,
        var("MAIN_QUEUE_URL"),
        var("DLQ_URL"),
        var("ARCHIVE_BUCKET"),
    );

    // watch is away: the binaries serve; 20 orders, 10 % malformed (exactly 2)
    let first = orders::generate("LIVE-A-", 20, 10.0, 0.0, &mut rand::rng());
    resq_ops::status::send(&ctx, &first, |_| HashMap::new())
        .await
        .unwrap();
    let good: Vec<String> = first
        .iter()
        .filter(|o| o.kind == orders::Kind::Valid)
        .map(|o| o.order_id.clone())
        .collect();
    assert_eq!(good.len(), 18);
    wait_for("18 orders processed", Duration::from_secs(60), || {
        processed(&ctx, &good)
    })
    .await;

    // watch comes up: the next orders go to it
    let served = Arc::new(AtomicU64::new(0));
    let fail_next = Arc::new(AtomicU64::new(0));
    tokio::spawn(watch_stand_in(
        watch_port,
        env_vars(&text),
        dir.clone(),
        served.clone(),
        fail_next.clone(),
        ctx.cloudwatch.clone(),
    ));
    let second = orders::generate("LIVE-B-", 10, 0.0, 10.0, &mut rand::rng());
    resq_ops::status::send(&ctx, &second, |_| HashMap::new())
        .await
        .unwrap();
    let good_b: Vec<String> = second
        .iter()
        .filter(|o| o.kind == orders::Kind::Valid)
        .map(|o| o.order_id.clone())
        .collect();
    wait_for("9 more orders processed", Duration::from_secs(60), || {
        processed(&ctx, &good_b)
    })
    .await;
    assert!(
        served.load(Ordering::Relaxed) >= 1,
        "watch served the invocations once it listened"
    );

    // the three bad ones are in the DLQ, marked permanent (the redriver keeps them hidden)
    wait_for("3 messages in the DLQ", Duration::from_secs(30), || async {
        resq_ops::status::depth(&ctx.sqs, &ctx.dlq_url)
            .await
            .is_ok_and(|(v, h)| v + h == 3)
    })
    .await;
    // as an operator would look (the next scheduled run may hide them again first: retried)
    let permanent = |r: &str| (Some(r.to_owned()), Some("permanent".to_owned()));
    let expected = vec![
        permanent("MALFORMED_JSON"),
        permanent("MALFORMED_JSON"),
        permanent("VALIDATION_FAILED"),
    ];
    let mut seen = Vec::new();
    let started = Instant::now();
    while seen != expected && started.elapsed() < Duration::from_secs(30) {
        resq_ops::dlq::unhide_kept(&ctx, None).await.unwrap();
        let peeked = resq_ops::dlq::peek(
            &ctx,
            &resq_ops::dlq::Filter {
                reason: None,
                older_than: None,
                group: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
        seen = peeked
            .iter()
            .map(|p| (p.reason.clone(), p.failure_class.clone()))
            .collect();
        seen.sort();
    }
    assert_eq!(seen, expected);

    // Lambda's log pipeline: the consumer's own metrics, and Lambda's, under the stack's names
    let consumer = format!("{STACK}-consumer");
    let redriver = format!("{STACK}-redriver");
    let mut sums = (0.0, 0.0, 0.0);
    let started = Instant::now();
    while sums.0 != 27.0 || sums.1 != 3.0 || sums.2 < 1.0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "processed, dead-lettered and redriver invocations in CloudWatch: {sums:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        sums = (
            metric_sum(&ctx, "resq", "Processed", &consumer).await,
            metric_sum(&ctx, "resq", "DeadLettered", &consumer).await,
            metric_sum(&ctx, "AWS/Lambda", "Invocations", &redriver).await,
        );
    }
    // the template's alarms are there (on LocalStack they evaluate)
    let alarms = ctx
        .cloudwatch
        .describe_alarms()
        .alarm_name_prefix(STACK)
        .send()
        .await
        .unwrap();
    let names: Vec<&str> = alarms
        .metric_alarms()
        .iter()
        .filter_map(|a| a.alarm_name())
        .collect();
    assert!(
        names.contains(&format!("{STACK}-replays-failing").as_str()),
        "{names:?}"
    );
    assert!(
        names.contains(&format!("{STACK}-consumer-errors").as_str()),
        "{names:?}"
    );

    // a function error: nothing of the batch is deleted (it waits out the visibility timeout),
    // Lambda's Errors metric counts it, and on LocalStack the consumer-errors alarm goes off
    fail_next.store(1, Ordering::SeqCst);
    let third = orders::generate("LIVE-C-", 1, 0.0, 0.0, &mut rand::rng());
    resq_ops::status::send(&ctx, &third, |_| HashMap::new())
        .await
        .unwrap();
    wait_for("the failed invocation", Duration::from_secs(30), || async {
        fail_next.load(Ordering::SeqCst) == 0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        resq_ops::status::depth(&ctx.sqs, &ctx.main_queue_url)
            .await
            .unwrap(),
        (0, 1),
        "the failed batch stays in the queue, in flight"
    );
    wait_for(
        "Lambda's Errors metric",
        Duration::from_secs(30),
        || async { metric_sum(&ctx, "AWS/Lambda", "Errors", &consumer).await == 1.0 },
    )
    .await;
    if emulator_kind() == resq_e2e::EmulatorKind::Localstack {
        // LocalStack evaluates a 1 × 60 s alarm every minute
        wait_for(
            "the consumer-errors alarm in ALARM",
            Duration::from_secs(150),
            || async {
                ctx.cloudwatch
                    .describe_alarms()
                    .alarm_names(format!("{STACK}-consumer-errors"))
                    .send()
                    .await
                    .ok()
                    .and_then(|o| {
                        o.metric_alarms()
                            .first()
                            .and_then(|a| a.state_value().cloned())
                    })
                    == Some(aws_sdk_cloudwatch::types::StateValue::Alarm)
            },
        )
        .await;
    }

    let _ = stop_tx.send(());
    pipeline.await.unwrap().unwrap();
    assert!(!env_file.exists(), "the env file goes with the stack");
    let _ = std::fs::remove_dir_all(&dir);
}
