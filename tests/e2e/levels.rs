//! Metrics at every log level the template allows: the real consumer and redriver binaries
//! run behind the local runtime, whose log pipeline drops what Lambda's log-level filter drops
//! (JSON lines below `AWS_LAMBDA_LOG_LEVEL`; a line without a valid level and timestamp counts
//! as INFO). Whatever the level, every metric line must get through; the other lines follow
//! the level.

use resq::telemetry::LogLevel;
use resq_e2e::{REGION, Stack, StackOptions, translated_template};
use resq_local::chaos::runtime::Function;
use resq_local::driver::Ended;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::helpers::{order_body, runtime_function, send};

fn function(
    stack: &Stack,
    name: &str,
    level: &str,
    log: &std::path::Path,
    metrics: mpsc::UnboundedSender<Value>,
) -> Function {
    runtime_function(stack, name, &[("AWS_LAMBDA_LOG_LEVEL", level)], log).forward_metrics(metrics)
}

#[tokio::test]
async fn every_metric_line_survives_every_log_level_the_template_allows() {
    let template = translated_template("resq-artifacts");
    let allowed: Vec<String> = template["Parameters"]["LogLevel"]["AllowedValues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert!(allowed.len() >= 3, "{allowed:?}");
    let stack = Stack::start(StackOptions::default()).await;
    for level_name in &allowed {
        let level = LogLevel::parse(level_name)
            .unwrap_or_else(|| panic!("LogLevel allows {level_name}, which Lambda does not know"));
        // GIVEN the functions at this level, a valid order and a malformed one
        let log = std::env::temp_dir().join(format!(
            "resq-levels-{}-{level_name}.log",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&log);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut consumer = function(&stack, "consumer", level_name, &log, tx.clone());
        send(
            &stack,
            &stack.main,
            &order_body(&format!("o-{level_name}")),
            &[],
            None,
        )
        .await;
        send(&stack, &stack.main, "{not json", &[], None).await;
        let received = stack.receive_n(&stack.main, 2).await;
        let event = resq_local::event::lambda_event(&received, &stack.main.arn, REGION);
        // WHEN the consumer and a redriver run are invoked
        let outcome = consumer.invoke(&event.to_string(), None).await.unwrap();
        assert!(matches!(outcome, Ended::Response(_)), "{outcome:?}");
        let mut redriver = function(&stack, "redriver", level_name, &log, tx);
        let outcome = redriver
            .invoke(
                &json!({"dryRun": false, "maxMessages": 1}).to_string(),
                None,
            )
            .await
            .unwrap();
        assert!(matches!(outcome, Ended::Response(_)), "{outcome:?}");
        consumer.kill().await;
        redriver.kill().await;
        // THEN both functions' metric documents got through
        let mut docs = Vec::new();
        while let Ok(doc) = rx.try_recv() {
            docs.push(doc);
        }
        let consumer_doc = docs
            .iter()
            .find(|d| d["Processed"].is_u64())
            .unwrap_or_else(|| {
                panic!("{level_name}: the consumer's metrics were dropped: {docs:?}")
            });
        assert_eq!(
            (&consumer_doc["Processed"], &consumer_doc["DeadLettered"]),
            (&json!(1), &json!(1)),
            "{level_name}"
        );
        assert!(
            docs.iter().any(|d| d["Redriven"].is_u64()),
            "{level_name}: the redriver's metrics were dropped"
        );
        // AND the other lines follow the level: the dead-letter warning only at WARN or below,
        // the INFO summary only at INFO or below
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let warned = text.contains("sent to the DLQ as a permanent failure");
        let informed = text.contains("batch done");
        assert_eq!(warned, level <= LogLevel::Warn, "{level_name}: {text}");
        // a warning names its record whatever the level (the Logs Insights query needs it)
        for line in text.lines().filter(|l| l.contains("sent to the DLQ")) {
            let v: Value = serde_json::from_str(line).unwrap();
            assert!(v["message_id"].is_string(), "{level_name}: {line}");
            // and the invocation it is in, whatever the level
            assert!(v["function_request_id"].is_string(), "{level_name}: {line}");
        }
        assert_eq!(informed, level <= LogLevel::Info, "{level_name}: {text}");
        let _ = std::fs::remove_file(&log);
    }
}
