//! The JSON log lines, captured as Lambda would ship them (resq-testing's CapturedLogs).

use resq::telemetry::*;
use serde_json::json;

fn context(request_id: &str, trace: Option<&str>) -> lambda_runtime::Context {
    let mut c = lambda_runtime::Context::default();
    c.request_id = request_id.into();
    c.invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:pay".into();
    c.xray_trace_id = trace.map(str::to_owned);
    c
}

#[test]
fn span_and_event_fields_are_top_level_keys_of_one_json_line() {
    let (logs, _guard) = resq_testing::CapturedLogs::start();
    let span = tracing::error_span!(
        "record",
        message_id = "m-1",
        correlation_id = tracing::field::Empty
    );
    span.record("correlation_id", "o-1");
    span.in_scope(|| tracing::warn!(new_message_id = "m-2", count = 3_u64, ok = true, "copied"));
    tracing::info!(message_id = "m-9", "outside any span");
    let lines = logs.lines();
    let copied = &lines[0];
    assert_eq!(copied["message"], "copied");
    assert_eq!(copied["level"], "WARN");
    // the business id under Powertools' key and under the message type's own
    assert_eq!(
        (
            &copied["message_id"],
            &copied["correlation_id"],
            &copied["order_id"],
            &copied["new_message_id"]
        ),
        (&"m-1".into(), &"o-1".into(), &"o-1".into(), &"m-2".into())
    );
    assert_eq!((&copied["count"], &copied["ok"]), (&3.into(), &true.into()));
    assert!(copied.get("span").is_none(), "{copied}");
    let stamp = copied["timestamp"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(stamp).is_ok(),
        "{stamp}"
    );
    assert_eq!(lines[1]["message_id"], "m-9");
    assert!(lines[1].get("correlation_id").is_none());
    assert!(lines[1].get("order_id").is_none());
}

#[test]
fn every_line_carries_powertools_standard_keys() {
    // GIVEN a payments function's logs: its own names, 512 MB
    let names = Names {
        service: "payments",
        correlation_key: "payment_id",
        correlation_field: "paymentId",
        ..Names::ORDERS
    };
    let t = Telemetry::of(names, "pay", Some(512)).unwrap();
    let (logs, _guard) = resq_testing::CapturedLogs::start_for(&t);
    // WHEN it logs at start-up, then in two invocations
    tracing::info!("init");
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    for (id, trace) in [("r-1", Some(trace)), ("r-2", None)] {
        let span = resq::lambda::invocation(&context(id, trace));
        span.in_scope(|| {
            let record = tracing::error_span!("record", message_id = "m", correlation_id = "p-9");
            record.in_scope(|| {
                tracing::warn!(service = "mine", level = "x", cold_start = "y", "failed")
            });
        });
    }
    let lines = logs.lines();
    // THEN every line has the process's keys, as Powertools writes them
    for l in &lines {
        assert_eq!(l["service"], "payments", "{l}");
        assert_eq!(l["function_name"], "pay", "{l}");
        assert_eq!(l["function_memory_size"], 512, "{l}");
    }
    assert!(lines[0].get("function_request_id").is_none());
    // the invocations' keys on theirs; an event's field cannot override them
    let (first, second) = (&lines[1], &lines[2]);
    assert_eq!(first["level"], "WARN");
    assert_eq!(first["function_request_id"], "r-1");
    assert_eq!(
        first["function_arn"],
        "arn:aws:lambda:us-east-1:123456789012:function:pay"
    );
    assert_eq!(
        first["xray_trace_id"],
        "1-5759e988-bd862e3fe1be46a994272793"
    );
    assert!(first["cold_start"].is_boolean());
    assert_eq!(
        second["cold_start"], false,
        "only a process's first is cold"
    );
    assert_eq!(second["function_request_id"], "r-2");
    assert!(second.get("xray_trace_id").is_none(), "{second}");
    // the type's own key beside correlation_id
    assert_eq!(
        (&first["correlation_id"], &first["payment_id"]),
        (&json!("p-9"), &json!("p-9"))
    );
    assert!(first.get("order_id").is_none());
    // one key each, no duplicates: the line is the object it parses to
    let text = logs.text();
    let first_line = text.lines().nth(1).unwrap();
    assert_eq!(first_line.matches("\"service\"").count(), 1, "{first_line}");
    assert_eq!(first_line.matches("\"level\"").count(), 1, "{first_line}");
}
