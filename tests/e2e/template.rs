//! The SAM template: its translation checked resource by resource (alarms and the dashboard,
//! which the emulator does not create), then deployed into moto's CloudFormation and used.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_cloudformation::types::{Capability, Parameter};
use resq_e2e::{REGION, translated, translated_template};
use serde_json::{Value, json};

fn resources_of<'a>(t: &'a Value, kind: &str) -> Vec<(&'a String, &'a Value)> {
    t["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .collect()
}

/// A property that may be a literal or a `Ref` to a parameter: its default.
fn resolve<'a>(t: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("Ref").and_then(Value::as_str) {
        Some(p) if t["Parameters"].get(p).is_some() => &t["Parameters"][p]["Default"],
        _ => v,
    }
}

/// A metric of resq's (an alarm's properties, or a metric-math query's `Metric`): in the
/// `MetricsNamespace` parameter's namespace, by the dimensions the functions write (`service`
/// from `ServiceName`, then `function_name`, as Powertools names them); the function it is of.
fn resq_function(m: &Value) -> &Value {
    assert_eq!(m["Namespace"], json!({"Ref": "MetricsNamespace"}), "{m}");
    let dims = m["Dimensions"].as_array().unwrap_or_else(|| panic!("{m}"));
    assert_eq!(dims.len(), 2, "{m}");
    assert_eq!(
        dims[0],
        json!({"Name": resq::metrics::DIMENSION_SERVICE, "Value": {"Ref": "ServiceName"}}),
        "{m}"
    );
    assert_eq!(dims[1]["Name"], resq::metrics::DIMENSION_FUNCTION, "{m}");
    &dims[1]["Value"]
}

/// The UUID a deployment gives the consumer's event source mapping (`Ref` of
/// `ConsumerFunctionOrders`), where a test resolves the template for a stack.
const MAPPING: &str = "0f1e2d3c-4b5a-4978-8a9b-acbdcedf0123";
/// A team's function's mapping, given as the `ConsumerEventSourceMapping` parameter.
const TEAM_MAPPING: &str = "11111111-2222-4333-8444-555555555555";

fn number(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn every_alarm_watches_the_right_metric_and_notifies_both_ways() {
    let t = translated_template("resq-artifacts");
    let alarms: HashMap<String, &Value> = resources_of(&t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .map(|(_, a)| {
            let name = a["Properties"]["AlarmName"]["Fn::Sub"]
                .as_str()
                .unwrap()
                .replace("${AWS::StackName}-", "");
            (name, &a["Properties"])
        })
        .collect();
    // name → (namespace, metric, threshold, period, evaluation periods)
    let expected: [(&str, &str, &str, f64, f64, f64); 9] = [
        (
            "dlq-oldest-age",
            "AWS/SQS",
            "ApproximateAgeOfOldestMessage",
            3600.0,
            300.0,
            1.0,
        ),
        (
            "orders-oldest-age",
            "AWS/SQS",
            "ApproximateAgeOfOldestMessage",
            900.0,
            60.0,
            5.0,
        ),
        (
            "consumer-throttles",
            "AWS/Lambda",
            "Throttles",
            0.0,
            60.0,
            1.0,
        ),
        ("redriver-errors", "AWS/Lambda", "Errors", 0.0, 300.0, 1.0),
        (
            "redriver-throttles",
            "AWS/Lambda",
            "Throttles",
            0.0,
            300.0,
            1.0,
        ),
        (
            "redriver-failures",
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
            0.0,
            60.0,
            1.0,
        ),
        // (with CreateOrdersTopic only)
        (
            "orders-topic-undelivered",
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
            0.0,
            60.0,
            1.0,
        ),
        (
            "orders-topic-lost",
            "AWS/SNS",
            "NumberOfNotificationsFailedToRedriveToDlq",
            0.0,
            60.0,
            1.0,
        ),
        // a run paused longer than its alarm's hold, or by an alarm it cannot read (a gauge:
        // 1 or 0 per run)
        (
            "redrive-paused-too-long",
            "resq",
            "RedrivePausedTooLong",
            0.0,
            300.0,
            1.0,
        ),
    ];
    assert_eq!(
        alarms.len(),
        expected.len() + 8,
        "the nine above plus dlq-depth, poison-archived, redriver-heartbeat, replays-failing, dead-letters-unexplained, kept, and the consumer breaker's consumer-errors and downstream-failing (tests below): {:?}",
        alarms.keys()
    );
    let topic = json!([{"Ref": "AlertTopic"}]);
    for (name, namespace, metric, threshold, period, evaluations) in expected {
        let a = alarms
            .get(name)
            .unwrap_or_else(|| panic!("alarm {name} missing"));
        assert_eq!(*resolve(&t, &a["Namespace"]), namespace, "{name}");
        assert_eq!(a["MetricName"], metric, "{name}");
        assert_eq!(number(resolve(&t, &a["Threshold"])), threshold, "{name}");
        assert_eq!(number(&a["Period"]), period, "{name}");
        assert_eq!(
            number(resolve(&t, &a["EvaluationPeriods"])),
            evaluations,
            "{name}"
        );
        assert_eq!(a["ComparisonOperator"], "GreaterThanThreshold", "{name}");
        assert_eq!(a["AlarmActions"], topic, "{name}");
        assert_eq!(a["OKActions"], topic, "{name}");
        assert_eq!(a["TreatMissingData"], "notBreaching", "{name}");
    }
    // the breaker's alarm: failed replays (tests below), in ALARM as soon as one minute is
    // over the threshold, and until ReplaysFailingHoldMinutes minutes in a row were not (so a
    // paused redriver stays paused that long after the last failed replay)
    let replays = alarms["replays-failing"];
    assert_eq!(number(&replays["DatapointsToAlarm"]), 1.0);
    assert_eq!(
        replays["EvaluationPeriods"],
        json!({"Ref": "ReplaysFailingHoldMinutes"})
    );
    assert_eq!(number(resolve(&t, &replays["Threshold"])), 10.0);
    assert_eq!(replays["ComparisonOperator"], "GreaterThanThreshold");
    assert_eq!(replays["TreatMissingData"], "notBreaching");
    assert_eq!(
        (&replays["AlarmActions"], &replays["OKActions"]),
        (&topic, &topic)
    );
    // DLQ depth: what waits for replay (tests below)
    let depth = alarms["dlq-depth"];
    assert_eq!(number(resolve(&t, &depth["Threshold"])), 50.0);
    assert_eq!(number(&depth["EvaluationPeriods"]), 2.0);
    assert_eq!(
        (&depth["AlarmActions"], &depth["OKActions"]),
        (&topic, &topic)
    );
    // the heartbeat: no redriver invocation for RedriverHeartbeatMinutes minutes (3 schedule
    // periods by default); no data at all is the case to catch
    let heartbeat = alarms["redriver-heartbeat"];
    assert_eq!(
        (
            heartbeat["Namespace"].as_str(),
            heartbeat["MetricName"].as_str()
        ),
        (Some("AWS/Lambda"), Some("Invocations"))
    );
    assert_eq!(heartbeat["ComparisonOperator"], "LessThanThreshold");
    assert_eq!(number(&heartbeat["Threshold"]), 1.0);
    assert_eq!(heartbeat["TreatMissingData"], "breaching");
    assert_eq!(number(&heartbeat["Period"]), 60.0);
    assert_eq!(
        number(resolve(&t, &heartbeat["EvaluationPeriods"])),
        3.0 * 5.0,
        "three periods of the default schedule, rate(5 minutes)"
    );
    assert_eq!(
        heartbeat["DatapointsToAlarm"],
        heartbeat["EvaluationPeriods"]
    );
    assert_eq!(
        (&heartbeat["AlarmActions"], &heartbeat["OKActions"]),
        (&topic, &topic)
    );
    // poison archived: the sum of both functions' Archived metric, any at all
    let poison = alarms["poison-archived"];
    assert_eq!(number(&poison["Threshold"]), 0.0);
    assert_eq!(
        (&poison["AlarmActions"], &poison["OKActions"]),
        (&topic, &topic)
    );
    let metrics = poison["Metrics"].as_array().unwrap();
    let archived: Vec<&Value> = metrics
        .iter()
        .filter(|m| m["MetricStat"]["Metric"]["MetricName"] == "Archived")
        .collect();
    assert_eq!(archived.len(), 2);
    assert!(
        archived.iter().all(
            |m| *resolve(&t, &m["MetricStat"]["Metric"]["Namespace"]) == "resq"
                && m["MetricStat"]["Stat"] == "Sum"
        )
    );
    assert!(metrics.iter().any(|m| {
        m["ReturnData"] == true
            && m["Expression"]
                .as_str()
                .is_some_and(|e| e.contains("consumer") && e.contains("redriver"))
    }));
    // the dimension values name the functions the template creates
    let consumer_name = &t["Resources"]["ConsumerFunction"]["Properties"]["FunctionName"];
    assert_eq!(
        resq_function(&archived[0]["MetricStat"]["Metric"]),
        consumer_name
    );
}

/// The alarm resource whose `AlarmName` is the stack's name followed by `-{name}`.
fn alarm<'a>(t: &'a Value, name: &str) -> &'a Value {
    let wanted = format!("${{AWS::StackName}}-{name}");
    resources_of(t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .map(|(_, a)| &a["Properties"])
        .find(|p| p["AlarmName"]["Fn::Sub"] == wanted.as_str())
        .unwrap_or_else(|| panic!("alarm {name} missing"))
}

/// A metric-math alarm's query `id`.
fn query<'a>(alarm: &'a Value, id: &str) -> &'a Value {
    alarm["Metrics"]
        .as_array()
        .unwrap_or_else(|| panic!("not a metric-math alarm: {alarm}"))
        .iter()
        .find(|m| m["Id"] == id)
        .unwrap_or_else(|| panic!("no query {id} in {alarm}"))
}

/// The one query a metric-math alarm watches (`ReturnData` true).
fn watched(alarm: &Value) -> &Value {
    let returned: Vec<&Value> = alarm["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["ReturnData"] == true)
        .collect();
    assert_eq!(returned.len(), 1, "{alarm}");
    returned[0]
}

/// A metric-math query's metric of resq's as (namespace as deployed by default, name, the
/// `function_name` it is of, stat, period).
fn metric_of<'a>(t: &'a Value, q: &'a Value) -> (&'a str, &'a str, &'a Value, &'a str, f64) {
    let stat = &q["MetricStat"];
    let m = &stat["Metric"];
    let function = resq_function(m);
    (
        resolve(t, &m["Namespace"]).as_str().unwrap(),
        m["MetricName"].as_str().unwrap(),
        function,
        stat["Stat"].as_str().unwrap(),
        number(&stat["Period"]),
    )
}

fn function_name<'a>(t: &'a Value, function: &str) -> &'a Value {
    &t["Resources"][function]["Properties"]["FunctionName"]
}

#[test]
fn failed_replays_count_the_consumers_returned_replays_and_the_redrivers_unexplained_dead_letters()
{
    let t = translated_template("resq-artifacts");
    // per minute: a replay that failed again (the consumer), and a dead letter SQS moved without
    // a reason after invocations that crashed or timed out (the redriver, once each): each a
    // simple metric alarm with the same threshold and hold, both in PAUSE_ON_ALARMS
    let (returned, unexplained) = (
        alarm(&t, "replays-failing"),
        alarm(&t, "dead-letters-unexplained"),
    );
    for (a, metric, function) in [
        (returned, "RedriveReturned", "ConsumerFunction"),
        (unexplained, "DeadLetteredUnexplained", "RedriverFunction"),
    ] {
        assert_eq!(
            (
                resolve(&t, &a["Namespace"]).as_str(),
                a["MetricName"].as_str(),
                a["Statistic"].as_str(),
                number(&a["Period"]),
            ),
            (Some("resq"), Some(metric), Some("Sum"), 60.0),
            "{a}"
        );
        assert_eq!(resq_function(a), function_name(&t, function), "{a}");
        for key in [
            "Threshold",
            "EvaluationPeriods",
            "DatapointsToAlarm",
            "TreatMissingData",
        ] {
            assert_eq!(a[key], returned[key], "{key}: the same threshold and hold");
        }
        assert_eq!(a["OKActions"], json!([{"Ref": "AlertTopic"}]));
    }
    assert!(
        unexplained["AlarmDescription"]
            .as_str()
            .is_some_and(|d| d.contains("DeadLetteredUnexplained")),
        "the description says what it counts"
    );
}

#[test]
fn the_redriver_pauses_on_failing_replays_and_on_a_consumer_that_fails_whole_invocations() {
    let t = translated_template("resq-artifacts");
    let r = resq_local::stack::Resolver::new(&t, "stk", &[]);
    let env = &t["Resources"]["RedriverFunction"]["Properties"]["Environment"]["Variables"];
    let pause_on = r.value(&env["PAUSE_ON_ALARMS"]).unwrap();
    let names: BTreeSet<&str> = pause_on.split(',').collect();
    let replays = r.value(&alarm(&t, "replays-failing")["AlarmName"]).unwrap();
    let unexplained = r
        .value(&alarm(&t, "dead-letters-unexplained")["AlarmName"])
        .unwrap();
    let errors = alarm(&t, "consumer-errors");
    let errors_name = r.value(&errors["AlarmName"]).unwrap();
    assert_eq!(
        names,
        BTreeSet::from([replays.as_str(), errors_name.as_str(), unexplained.as_str()]),
        "PAUSE_ON_ALARMS names the three alarms, comma-separated"
    );
    // the consumer's errors: Lambda's count of failed invocations of the consumer, any at all
    assert_eq!(
        (errors["Namespace"].as_str(), errors["MetricName"].as_str()),
        (Some("AWS/Lambda"), Some("Errors"))
    );
    // by name: resq's consumer, or a team's function in its place (ReferenceConsumer false)
    assert_eq!(
        errors["Dimensions"][0]["Value"],
        t["Resources"]["ConsumerFunction"]["Properties"]["FunctionName"]
    );
    assert_eq!(number(&errors["Threshold"]), 0.0);
    // the redriver may read each of them (its state and its history), and no other alarm
    let statement = t["Resources"]["RedriverRole"]["Properties"]["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap())
        .find(|st| st["Sid"] == "CircuitBreaker")
        .expect("the breaker's statement");
    assert_eq!(
        statement["Action"],
        json!([
            "cloudwatch:DescribeAlarms",
            "cloudwatch:DescribeAlarmHistory"
        ])
    );
    let readable: BTreeSet<String> = statement["Resource"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arn| r.value(arn).unwrap())
        .collect();
    let expected: BTreeSet<String> = names
        .iter()
        .map(|n| format!("arn:aws:cloudwatch:{REGION}:000000000000:alarm:{n}"))
        .collect();
    assert_eq!(readable, expected);
}

#[test]
fn kept_permanent_failures_and_a_long_pause_have_alarms_of_their_own() {
    let t = translated_template("resq-artifacts");
    let topic = json!([{"Ref": "AlertTopic"}]);
    let redriver = function_name(&t, "RedriverFunction");
    for (name, metric, threshold) in [
        ("kept", "Kept", json!({"Ref": "KeptThreshold"})),
        ("redrive-paused-too-long", "RedrivePausedTooLong", json!(0)),
    ] {
        let a = alarm(&t, name);
        assert_eq!(
            (
                resolve(&t, &a["Namespace"]).as_str(),
                a["MetricName"].as_str()
            ),
            (Some("resq"), Some(metric)),
            "{name}"
        );
        assert_eq!(resq_function(a), redriver, "{name}");
        // gauges, one data point per run: the run's value, not a sum of runs
        assert_eq!(a["Statistic"], "Maximum", "{name}");
        assert_eq!(number(&a["Period"]), 300.0, "{name}");
        assert_eq!(number(&a["EvaluationPeriods"]), 1.0, "{name}");
        assert_eq!(a["Threshold"], threshold, "{name}");
        assert_eq!(a["ComparisonOperator"], "GreaterThanThreshold", "{name}");
        assert_eq!(
            (&a["AlarmActions"], &a["OKActions"]),
            (&topic, &topic),
            "{name}"
        );
    }
    // any kept permanent failure waits for a human, by default
    let param = &t["Parameters"]["KeptThreshold"];
    assert_eq!(
        (number(&param["Default"]), number(&param["MinValue"])),
        (0.0, 0.0)
    );
    // a 5 minutes without a run keeps the kept alarm's state: it does not flap between runs
    assert_eq!(alarm(&t, "kept")["TreatMissingData"], "ignore");
    assert_eq!(
        alarm(&t, "redrive-paused-too-long")["TreatMissingData"],
        "notBreaching"
    );
}

#[test]
fn dlq_depth_counts_what_waits_for_replay_not_the_kept_permanent_failures() {
    let t = translated_template("resq-artifacts");
    let a = alarm(&t, "dlq-depth");
    for (id, metric) in [
        ("visible", "ApproximateNumberOfMessagesVisible"),
        ("hidden", "ApproximateNumberOfMessagesNotVisible"),
    ] {
        let m = &query(a, id)["MetricStat"];
        assert_eq!(m["Metric"]["Namespace"], "AWS/SQS", "{id}");
        assert_eq!(m["Metric"]["MetricName"], metric, "{id}");
        assert_eq!(
            m["Metric"]["Dimensions"][0]["Value"],
            json!({"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}),
            "{id}"
        );
        assert_eq!(number(&m["Period"]), 60.0, "{id}");
    }
    // the redriver's gauge of kept messages, per minute like the queue's metrics
    assert_eq!(
        metric_of(&t, query(a, "kept")),
        (
            "resq",
            "Kept",
            function_name(&t, "RedriverFunction"),
            "Maximum",
            60.0
        )
    );
    // visible + hidden - kept, the gauge carried forward between runs, never below 0
    let waiting = query(a, "waiting")["Expression"].as_str().unwrap();
    assert_eq!(
        waiting.replace(' ', ""),
        "FILL(visible,0)+FILL(hidden,0)-FILL(kept,REPEAT)"
    );
    let depth = watched(a);
    assert_eq!(
        depth["Expression"].as_str().map(|e| e.replace(' ', "")),
        Some("IF(waiting>0,waiting,0)".to_owned())
    );
    assert!(
        a["AlarmDescription"]
            .as_str()
            .is_some_and(|d| d.contains("waiting for replay") && d.contains("kept")),
        "the description says what it counts"
    );
    // until a run's Kept is in the alarm's window the depth is unknown: the state stays
    assert_eq!(a["TreatMissingData"], "ignore");
}

#[test]
fn the_redriver_gets_its_budget_auto_by_default_and_at_most_kept_in_flight_max_kept_messages() {
    let t = translated_template("resq-artifacts");
    let env = &t["Resources"]["RedriverFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        env["MAX_MESSAGES_PER_RUN"],
        json!({"Ref": "MaxMessagesPerRun"})
    );
    assert_eq!(env["KEPT_IN_FLIGHT_MAX"], json!({"Ref": "KeptInFlightMax"}));
    let budget = &t["Parameters"]["MaxMessagesPerRun"];
    assert_eq!(
        (budget["Type"].as_str(), budget["Default"].as_str()),
        (Some("String"), Some("auto")),
        "auto: the schedule drains at the configured rate"
    );
    let kept = &t["Parameters"]["KeptInFlightMax"];
    assert_eq!(number(&kept["Default"]), 50_000.0);
    assert_eq!(number(&kept["MinValue"]), 0.0);
    // SQS's in-flight quota (about 120,000 per standard queue) is shared with the redriver's
    // own in-flight messages: kept ones stay well below it
    let max = number(&kept["MaxValue"]);
    assert!(max <= 100_000.0, "KeptInFlightMax may reach {max}");
}

/// The redriver's configuration as the template sets its environment for a stack with
/// `params` (the rest default).
fn redriver_config(
    t: &Value,
    params: &[(&str, &str)],
) -> Result<resq_redriver::config::RedriverConfig, resq::config::ConfigError> {
    let r = resq_local::stack::Resolver::new(t, "stk", params)
        .with_resource("OrdersQueue", "https://sqs.example/stk-orders")
        .with_resource("DeadLetterQueue", "https://sqs.example/stk-orders-dlq")
        .with_resource("ArchiveBucket", "stk-archive")
        .with_resource("ConsumerFunctionOrders", MAPPING);
    let env: HashMap<String, String> =
        t["Resources"]["RedriverFunction"]["Properties"]["Environment"]["Variables"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), r.value(v).unwrap_or_else(|| panic!("{k}: {v}"))))
            .collect();
    resq_redriver::config::RedriverConfig::from_vars(&resq::config::Vars(move |k: &str| {
        env.get(k).cloned()
    }))
}

#[test]
fn the_redriver_accepts_its_environment_at_the_defaults_and_at_the_ends_of_each_range() {
    let t = translated_template("resq-artifacts");
    let p = &t["Parameters"];
    let end = |name: &str, key: &str| p[name][key].to_string().trim_matches('"').to_owned();
    let defaults = redriver_config(&t, &[]).unwrap_or_else(|e| panic!("the defaults: {e}"));
    assert_eq!(defaults.pause_on_alarms.len(), 3);
    let (rate_min, rate_max) = (
        end("RedriveRatePerSecond", "MinValue"),
        end("RedriveRatePerSecond", "MaxValue"),
    );
    let (kept_min, kept_max) = (
        end("KeptInFlightMax", "MinValue"),
        end("KeptInFlightMax", "MaxValue"),
    );
    let margin_max = end("DeadlineMarginMs", "MaxValue");
    let budget = numeric_budgets(&p["MaxMessagesPerRun"]);
    let (budget_min, budget_max) = (budget.start().to_string(), budget.end().to_string());
    for params in [
        [
            ("RedriveRatePerSecond", rate_min.as_str()),
            ("KeptInFlightMax", kept_min.as_str()),
            ("MaxMessagesPerRun", budget_min.as_str()),
        ],
        [
            ("RedriveRatePerSecond", rate_max.as_str()),
            ("KeptInFlightMax", kept_max.as_str()),
            ("MaxMessagesPerRun", budget_max.as_str()),
        ],
        [
            ("DeadlineMarginMs", margin_max.as_str()),
            ("KeptInFlightMax", kept_max.as_str()),
            ("MaxMessagesPerRun", "auto"),
        ],
    ] {
        if let Err(e) = redriver_config(&t, &params) {
            panic!("{params:?}: {e}");
        }
    }
}

/// What `pattern`, a parameter's AllowedPattern (CloudFormation matches it against the whole
/// value), accepts among the whole numbers 0 to 2,000,000, as a range (it must be one), and
/// whether it accepts `auto`.
fn accepted_by_pattern(pattern: &str) -> (std::ops::RangeInclusive<u64>, bool) {
    const SCRIPT: &str = "import re, sys
p = re.compile(sys.argv[1])
ok = [n for n in range(2000001) if p.fullmatch(str(n))]
print(ok[0] if ok else -1, ok[-1] if ok else -1, len(ok), int(p.fullmatch('auto') is not None))";
    let out = std::process::Command::new(resq_e2e::tools_python())
        .args(["-c", SCRIPT, pattern])
        .output()
        .expect("the tool venv's python (make setup)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let f: Vec<i64> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(f[0] >= 0, "{pattern} accepts no number");
    let (lo, hi) = (f[0] as u64, f[1] as u64);
    assert_eq!(
        f[2] as u64,
        hi - lo + 1,
        "{pattern}: the numbers it accepts have gaps"
    );
    (lo..=hi, f[3] == 1)
}

/// Which of `values` the `AllowedPattern` `pattern` accepts (Python's `re`, as cfn-lint
/// matches it).
fn pattern_matches(pattern: &str, values: &[&str]) -> BTreeSet<String> {
    const SCRIPT: &str = "import json, re, sys
p = re.compile(sys.argv[1])
print(json.dumps([v for v in json.loads(sys.argv[2]) if p.fullmatch(v)]))";
    let out = std::process::Command::new(resq_e2e::tools_python())
        .args(["-c", SCRIPT, pattern, &json!(values).to_string()])
        .output()
        .expect("the tool venv's python (make setup)");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The numbers `MaxMessagesPerRun` accepts (`auto` apart).
fn numeric_budgets(param: &Value) -> std::ops::RangeInclusive<u64> {
    match param["AllowedPattern"].as_str() {
        Some(pattern) => accepted_by_pattern(pattern).0,
        None => number(&param["MinValue"]) as u64..=number(&param["MaxValue"]) as u64,
    }
}

/// Why the breaker could not trip under some parameter set the template accepts (docs/design.md,
/// "Breaker"), empty when it can under all. The replays-failing alarm trips when more than
/// `ReplaysFailingThreshold` replays fail within one of its periods; after it clears, a run
/// replays a probe of `probe_budget(threshold)`. A run's replays, spread over two periods,
/// leave at least half in one of them, and a run long enough to cover a whole period fills it
/// at the rate: so the breaker can trip when the slowest rate fills a period with more than the
/// largest threshold, and the smallest budget and the shortest run each allow a probe.
/// The breaker rules of `resq stack check` (their one home, `cli/src/stack.rs`) at the corners
/// of the template's ranges that make tripping hardest: the largest threshold, the slowest
/// rate, the smallest numeric budget, the shortest run.
fn breaker_conflicts(t: &Value) -> Vec<String> {
    use resq_ops::stack::{ALARM_PERIOD_SECONDS, Assumptions, Rule, Settings};
    let p = &t["Parameters"];
    let bound = |name: &str, key: &str| p[name].get(key).map(number);
    let default = |name: &str| number(&p[name]["Default"]);
    let periods: BTreeSet<u64> = ["replays-failing", "dead-letters-unexplained"]
        .iter()
        .map(|name| number(&alarm(t, name)["Period"]) as u64)
        .collect();
    assert_eq!(
        periods.into_iter().collect::<Vec<_>>(),
        vec![ALARM_PERIOD_SECONDS as u64],
        "both alarms of failed replays have the period the stack check assumes"
    );
    let Some(threshold) = bound("ReplaysFailingThreshold", "MaxValue") else {
        return vec![
            "ReplaysFailingThreshold has no MaxValue: no budget or rate exceeds every threshold"
                .into(),
        ];
    };
    let settings = Settings {
        fifo: false,
        max_receive_count: default("MaxReceiveCount"),
        backoff_max_seconds: default("BackoffMaxSeconds"),
        consumer_timeout: default("ConsumerTimeout"),
        batching_window_seconds: default("ConsumerBatchingWindowSeconds"),
        batch_size: default("ConsumerBatchSize"),
        maximum_concurrency: None,
        pollers: None,
        concurrency: p["ConsumerConcurrency"]["Default"]
            .as_str()
            .expect("ConsumerConcurrency's default is text: auto or a number")
            .parse()
            .unwrap(),
        orders_retention_seconds: default("OrdersRetentionSeconds"),
        archive_after_seconds: default("ArchiveAfterSeconds"),
        order_record_retention_days: default("OrderRecordRetentionDays"),
        schedule: p["RedriverSchedule"]["Default"]
            .as_str()
            .unwrap()
            .to_owned(),
        replays_failing_threshold: threshold,
        max_messages_per_run: Some(*numeric_budgets(&p["MaxMessagesPerRun"]).start() as f64),
        rate_per_second: bound("RedriveRatePerSecond", "MinValue").unwrap_or(0.0),
        archive_sweep_seconds: default("ArchiveSweepSeconds"),
        // Lambda's least timeout is 1 s
        redriver_timeout: bound("RedriverTimeout", "MinValue").unwrap_or(1.0),
        deadline_margin_ms: bound("DeadlineMarginMs", "MaxValue").unwrap_or(f64::INFINITY),
    };
    resq_ops::stack::conflicts(&settings, &Assumptions::default())
        .into_iter()
        .filter(|c| {
            matches!(
                c.rule,
                Rule::ReplayBudget | Rule::ReplayRate | Rule::ReplayRun
            )
        })
        .map(|c| format!("{}: {}", c.parameters.join(", "), c.figures))
        .collect()
}

#[test]
fn the_consumers_idempotency_window_is_the_order_records_lifetime_for_every_accepted_value() {
    let t = translated_template("resq-artifacts");
    let days = &t["Parameters"]["OrderRecordRetentionDays"];
    let allowed: Vec<&str> = days["AllowedValues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(allowed.contains(&days["Default"].as_str().unwrap()));
    let lifetimes = &t["Mappings"]["OrderRecordLifetimes"];
    for d in &allowed {
        assert_eq!(
            number(&lifetimes[*d]["Seconds"]),
            number(&json!(d)) * 86_400.0,
            "{d} days"
        );
    }
    assert_eq!(lifetimes.as_object().unwrap().len(), allowed.len());
    let env = &t["Resources"]["ConsumerFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        env["IDEMPOTENCY_WINDOW_SECONDS"],
        json!({"Fn::FindInMap": ["OrderRecordLifetimes", {"Ref": "OrderRecordRetentionDays"}, "Seconds"]})
    );
    // the records' lifecycle is the same parameter
    let bucket = &t["Resources"]["ArchiveBucket"]["Properties"];
    let rules = bucket["LifecycleConfiguration"]["Rules"]
        .as_array()
        .unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r["ExpirationInDays"] == json!({"Ref": "OrderRecordRetentionDays"})),
        "{rules:?}"
    );
}

#[test]
fn the_breaker_can_trip_under_every_parameter_set_the_template_accepts() {
    let t = translated_template("resq-artifacts");
    assert_eq!(breaker_conflicts(&t), Vec::<String>::new());
    // auto is accepted, and the default
    let budget = &t["Parameters"]["MaxMessagesPerRun"];
    let (numbers, auto) = accepted_by_pattern(budget["AllowedPattern"].as_str().unwrap());
    assert!(auto, "MaxMessagesPerRun accepts auto");
    assert_eq!(budget["Default"], "auto");
    assert_eq!(numbers, 102..=1_000_000);
    // a range widened later is caught, each by the parameters in conflict
    for (param, key, value, named) in [
        (
            "ReplaysFailingThreshold",
            "MaxValue",
            json!(51),
            "MaxMessagesPerRun",
        ),
        (
            "RedriveRatePerSecond",
            "MinValue",
            json!(0.5),
            "RedriveRatePerSecond",
        ),
        ("RedriverTimeout", "MinValue", json!(120), "RedriverTimeout"),
        (
            "DeadlineMarginMs",
            "MaxValue",
            json!(900_000),
            "DeadlineMarginMs",
        ),
        (
            "MaxMessagesPerRun",
            "AllowedPattern",
            json!("^(auto|[1-9][0-9]{0,5}|1000000)$"),
            "MaxMessagesPerRun",
        ),
    ] {
        let mut wider = t.clone();
        wider["Parameters"][param][key] = value.clone();
        let conflicts = breaker_conflicts(&wider);
        assert!(
            conflicts.iter().any(|c| c.contains(named)),
            "{param} {key} {value}: {conflicts:?}"
        );
    }
    let mut unbounded = t.clone();
    unbounded["Parameters"]["ReplaysFailingThreshold"]
        .as_object_mut()
        .unwrap()
        .remove("MaxValue");
    assert_eq!(breaker_conflicts(&unbounded).len(), 1);
}

#[test]
fn the_dashboard_shows_depths_ages_outcomes_and_errors() {
    let t = translated_template("resq-artifacts");
    let dashboards = resources_of(&t, "AWS::CloudWatch::Dashboard");
    assert_eq!(dashboards.len(), 1);
    let sub = &dashboards[0].1["Properties"]["DashboardBody"]["Fn::Sub"];
    let body: Value = serde_json::from_str(sub[0].as_str().unwrap())
        .expect("dashboard body is JSON before substitution");
    let metrics: BTreeSet<String> = body["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["properties"]["metrics"].as_array().unwrap().iter())
        .map(|m| format!("{}/{}", m[0].as_str().unwrap(), m[1].as_str().unwrap()))
        .map(|m| m.replace("${MetricsNamespace}", "resq"))
        .collect();
    for m in [
        "AWS/SQS/ApproximateNumberOfMessagesVisible",
        "AWS/SQS/ApproximateAgeOfOldestMessage",
        "resq/Processed",
        "resq/Retried",
        "resq/DeadLettered",
        "resq/Archived",
        "resq/Redriven",
        "resq/RedriveReturned",
        "resq/Kept",
        "resq/DeadLetteredUnexplained",
        "resq/RedrivePausedTooLong",
        "resq/TransientFailurePercent",
        "resq/RetryBudgetExceeded",
        "resq/ConsumerPaused",
        "AWS/Lambda/Errors",
        "AWS/Lambda/Throttles",
    ] {
        assert!(metrics.contains(m), "{m} not on the dashboard");
    }
    // the redriver's own metrics, under its name; its gauges by their maximum (a sum over a
    // widget's period would add two runs up)
    let redriver: Vec<&Value> = body["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["properties"]["metrics"].as_array().unwrap().iter())
        .filter(|m| m[5] == "${Redriver}")
        .collect();
    // resq's metrics in the namespace and by the dimensions the functions write them
    for m in body["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["properties"]["metrics"].as_array().unwrap().iter())
        .filter(|m| !m[0].as_str().unwrap().starts_with("AWS/"))
    {
        assert_eq!(
            (&m[0], &m[2], &m[3], &m[4]),
            (
                &json!("${MetricsNamespace}"),
                &json!("service"),
                &json!("${ServiceName}"),
                &json!("function_name")
            ),
            "{m}"
        );
    }
    for (metric, stat) in [
        ("Kept", Some("Maximum")),
        ("RedrivePausedTooLong", Some("Maximum")),
        ("DeadLetteredUnexplained", None),
        // a gauge per run: 1 while the consumer's mapping is paused
        ("ConsumerPaused", Some("Maximum")),
    ] {
        let m = redriver
            .iter()
            .find(|m| m[1] == metric)
            .unwrap_or_else(|| panic!("{metric} of the redriver not on the dashboard"));
        assert_eq!(m[6]["stat"].as_str(), stat, "{metric}");
    }
    // the consumer breaker's row: the consumer's share of transient failures averaged (a sum of
    // percentages means nothing), the redeliveries its retry budget held back counted
    for (metric, stat) in [
        ("TransientFailurePercent", "Average"),
        ("RetryBudgetExceeded", "Sum"),
    ] {
        let m = body["widgets"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|w| w["properties"]["metrics"].as_array().unwrap().iter())
            .find(|m| m[1] == metric && m[5] == "${Consumer}")
            .unwrap_or_else(|| panic!("{metric} of the consumer not on the dashboard"));
        assert_eq!(m[6]["stat"], stat, "{metric}");
    }
    let vars = sub[1].as_object().unwrap();
    assert_eq!(
        vars["Consumer"],
        t["Resources"]["ConsumerFunction"]["Properties"]["FunctionName"]
    );
    assert_eq!(
        vars["Dlq"],
        json!({"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]})
    );
}

#[test]
fn every_alarm_on_resqs_metrics_reads_them_as_the_functions_write_them() {
    let t = translated_template("resq-artifacts");
    // GIVEN every metric the template's alarms watch outside AWS's own namespaces
    let mut watched = 0;
    for (id, a) in resources_of(&t, "AWS::CloudWatch::Alarm") {
        let p = &a["Properties"];
        let metrics: Vec<&Value> = match p["Metrics"].as_array() {
            Some(queries) => queries
                .iter()
                .filter(|q| q["MetricStat"].is_object())
                .map(|q| &q["MetricStat"]["Metric"])
                .collect(),
            None => vec![p],
        };
        for m in metrics {
            let namespace = &m["Namespace"];
            if namespace.as_str().is_some_and(|n| n.starts_with("AWS/")) {
                continue;
            }
            // THEN each is in MetricsNamespace, by service and function_name
            let function = resq_function(m);
            assert!(
                [
                    function_name(&t, "ConsumerFunction"),
                    function_name(&t, "RedriverFunction")
                ]
                .contains(&function),
                "{id}: {m}"
            );
            watched += 1;
        }
    }
    assert!(watched >= 7, "{watched}");
    // AND the parameters' defaults are the functions' own defaults, which their patterns
    // accept
    let default = |p: &str| t["Parameters"][p]["Default"].as_str().unwrap();
    let names = resq::telemetry::Names::ORDERS;
    assert_eq!(
        (
            default("ServiceName"),
            default("MetricsNamespace"),
            default("CorrelationKey"),
            default("CorrelationField")
        ),
        (
            names.service,
            names.namespace,
            names.correlation_key,
            names.correlation_field
        )
    );
    for (param, accepted, refused) in [
        (
            "ServiceName",
            ["orders", "checkout-api", "Team A/orders"],
            &["", " x", "a\"b", "orders ", " orders"][..],
        ),
        (
            "MetricsNamespace",
            ["resq", "Acme/Orders", "a.b_c#d:e"],
            &["", "a;b", "ns\"", "AWS/Orders", "resq ", " resq"][..],
        ),
        (
            "CorrelationKey",
            ["order_id", "payment_id", "k9"],
            &["", "OrderId", "order-id"][..],
        ),
        (
            "CorrelationField",
            ["orderId", "payment_id", "Order.Id"],
            &["", "order id", " x"][..],
        ),
    ] {
        let pattern = t["Parameters"][param]["AllowedPattern"].as_str().unwrap();
        let matched = pattern_matches(pattern, &[&accepted[..], refused].concat());
        for v in accepted {
            assert!(matched.contains(v), "{param} refuses {v:?}");
            let var = match param {
                "ServiceName" => "POWERTOOLS_SERVICE_NAME",
                "MetricsNamespace" => "POWERTOOLS_METRICS_NAMESPACE",
                "CorrelationKey" => "RESQ_CORRELATION_KEY",
                _ => "RESQ_CORRELATION_FIELD",
            };
            let vars = resq::config::Vars(move |k: &str| (k == var).then(|| v.to_owned()));
            assert!(
                resq::telemetry::Telemetry::from_vars(names, &vars).is_ok(),
                "the functions refuse {var}={v:?}, which the template accepts"
            );
        }
        for &v in refused {
            assert!(!matched.contains(v), "{param} accepts {v:?}");
        }
    }
    // AND no key resq writes itself can be the type's own correlation key: the template refuses
    // each one, as the functions do at start-up
    let own: Vec<&str> = resq::correlation::RESERVED_KEYS
        .iter()
        .chain(&resq::correlation::MESSAGE_KEYS)
        .copied()
        .collect();
    let pattern = t["Parameters"]["CorrelationKey"]["AllowedPattern"]
        .as_str()
        .unwrap();
    let matched = pattern_matches(pattern, &own);
    assert!(matched.is_empty(), "CorrelationKey accepts {matched:?}");
    for key in own {
        let vars = resq::config::Vars(move |k: &str| {
            (k == "RESQ_CORRELATION_KEY").then(|| key.to_owned())
        });
        assert!(
            resq::telemetry::Telemetry::from_vars(names, &vars).is_err(),
            "the functions take {key} as a correlation key"
        );
    }
}

#[test]
fn functions_are_rust_on_arm64_with_json_logs_and_the_spec_environment() {
    let t = translated_template("resq-artifacts");
    let spec: BTreeSet<&str> = [
        "MAIN_QUEUE_URL",
        "DLQ_URL",
        "ARCHIVE_BUCKET",
        "MAX_REDRIVE_ATTEMPTS",
        "CONSUMER_CONCURRENCY",
        "BACKOFF_BASE_SECONDS",
        "BACKOFF_MAX_SECONDS",
        "DEADLINE_MARGIN_MS",
        "IDEMPOTENCY_WINDOW_SECONDS",
        "REDRIVE_RATE_PER_SECOND",
        "MAX_MESSAGES_PER_RUN",
        "KEPT_IN_FLIGHT_MAX",
        "ARCHIVE_AFTER_SECONDS",
        "PERMANENT_ACTION",
        "PAUSE_ON_ALARMS",
        "PAUSE_CONSUMER_ON_ALARMS",
        "CONSUMER_EVENT_SOURCE_MAPPING",
        "REDRIVE_RATE_MAX",
        "ARCHIVE_SWEEP_SECONDS",
        "RETRY_BUDGET_PERCENT",
        // not resq's own: the CA bundle rustls-native-certs reads (docs/design.md)
        "SSL_CERT_FILE",
        // Powertools' (docs/logs-and-metrics.md)
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
        // the business id's log key and body field (docs/logs-and-metrics.md)
        "RESQ_CORRELATION_KEY",
        "RESQ_CORRELATION_FIELD",
    ]
    .into();
    for (name, binary) in [
        ("ConsumerFunction", "consumer"),
        ("RedriverFunction", "redriver"),
    ] {
        let f = &t["Resources"][name];
        let p = &f["Properties"];
        assert_eq!(p["Runtime"], "provided.al2023");
        assert_eq!(p["Architectures"], json!(["arm64"]));
        assert_eq!(p["Handler"], "bootstrap");
        assert_eq!(f["Metadata"]["BuildMethod"], "rust-cargolambda");
        assert_eq!(f["Metadata"]["BuildProperties"]["Binary"], binary);
        assert_eq!(p["LoggingConfig"]["LogFormat"], "JSON");
        let env: BTreeSet<&str> = p["Environment"]["Variables"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert!(
            env.is_subset(&spec),
            "{name}: {:?} not in docs/design.md, \"Configuration\"",
            env.difference(&spec).collect::<Vec<_>>()
        );
        for required in [
            "MAIN_QUEUE_URL",
            "DLQ_URL",
            "ARCHIVE_BUCKET",
            "MAX_REDRIVE_ATTEMPTS",
            "POWERTOOLS_SERVICE_NAME",
            "POWERTOOLS_METRICS_NAMESPACE",
        ] {
            assert!(env.contains(required), "{name} lacks {required}");
        }
        // the names the alarms and the dashboard read the metrics by
        let vars = &p["Environment"]["Variables"];
        assert_eq!(
            vars["POWERTOOLS_SERVICE_NAME"],
            json!({"Ref": "ServiceName"})
        );
        assert_eq!(
            vars["POWERTOOLS_METRICS_NAMESPACE"],
            json!({"Ref": "MetricsNamespace"})
        );
    }
    let redriver = &t["Resources"]["RedriverFunction"]["Properties"];
    assert_eq!(
        redriver["ReservedConcurrentExecutions"], 1,
        "at most one redriver run at a time"
    );
    assert_eq!(
        number(&t["Parameters"]["DeadlineMarginMs"]["MinValue"]),
        resq::config::MIN_DEADLINE_MARGIN_MS as f64,
        "the template and the functions accept the same margins"
    );
    let invoke = resources_of(&t, "AWS::Lambda::EventInvokeConfig");
    assert_eq!(
        invoke[0].1["Properties"]["DestinationConfig"]["OnFailure"]["Destination"],
        json!({"Fn::GetAtt": ["RedriverFailureQueue", "Arn"]})
    );
    let esm = resources_of(&t, "AWS::Lambda::EventSourceMapping");
    assert_eq!(esm.len(), 1);
    let esm = &esm[0].1["Properties"];
    assert_eq!(
        esm["FunctionResponseTypes"],
        json!(["ReportBatchItemFailures"])
    );
    assert_eq!(
        esm["EventSourceArn"],
        json!({"Fn::GetAtt": ["OrdersQueue", "Arn"]})
    );
    // (ScalingConfig or ProvisionedPollerConfig, as the stack is deployed: see
    // the_consumers_mapping_counts_its_events_and_takes_provisioned_pollers_or_a_cap_never_both)
    assert!(esm["ScalingConfig"]["Fn::If"].is_array());
    assert!(esm["MaximumBatchingWindowInSeconds"].is_object());
}

#[test]
fn queue_settings_follow_the_rules() {
    let t = translated_template("resq-artifacts");
    // visibility ≥ 6 × the consumer timeout, for every allowed timeout
    let map = &t["Mappings"]["ConsumerTimeouts"];
    for allowed in t["Parameters"]["ConsumerTimeout"]["AllowedValues"]
        .as_array()
        .unwrap()
    {
        let row = &map[allowed.as_str().unwrap()];
        let timeout = number(&row["Timeout"]);
        assert_eq!(timeout, number(allowed));
        let visibility = number(&row["Visibility"]);
        assert!(
            visibility >= 6.0 * timeout,
            "timeout {timeout}: visibility {visibility}"
        );
        assert!(visibility <= 43_200.0);
    }
    let orders = &t["Resources"]["OrdersQueue"]["Properties"];
    let dlq = &t["Resources"]["DeadLetterQueue"]["Properties"];
    assert_eq!(number(&dlq["MessageRetentionPeriod"]), 1_209_600.0);
    // nothing ages out of the DLQ unarchived: the longest TTL ends a day before its retention
    let ttl = &t["Parameters"]["ArchiveAfterSeconds"];
    assert!(
        number(&ttl["MaxValue"]) + 86_400.0 <= number(&dlq["MessageRetentionPeriod"]),
        "ArchiveAfterSeconds may reach {} s: too close to the DLQ's retention",
        number(&ttl["MaxValue"])
    );
    assert_eq!(
        number(&ttl["MaxValue"]),
        resq_redriver::config::MAX_ARCHIVE_AFTER_SECONDS as f64,
        "the template and the function accept the same TTLs"
    );
    // deleting the stack, or replacing a queue (a QueueType switch), keeps the orders waiting
    // in the main queue and the DLQ, and the record of failed redriver runs
    for q in ["OrdersQueue", "DeadLetterQueue", "RedriverFailureQueue"] {
        assert_eq!(t["Resources"][q]["DeletionPolicy"], "Retain", "{q}");
        assert_eq!(t["Resources"][q]["UpdateReplacePolicy"], "Retain", "{q}");
    }
    assert!(
        number(&t["Parameters"]["OrdersRetentionSeconds"]["MaxValue"]) < 1_209_600.0,
        "the DLQ must outlive the main queue"
    );
    assert_eq!(
        number(resolve(&t, &orders["RedrivePolicy"]["maxReceiveCount"])),
        5.0
    );
    assert_eq!(
        orders["RedrivePolicy"]["deadLetterTargetArn"],
        json!({"Fn::GetAtt": ["DeadLetterQueue", "Arn"]})
    );
    // (their encryption: tests/e2e/security.rs)
    for q in [orders, dlq] {
        assert_eq!(number(&q["MaximumMessageSize"]), 1_048_576.0);
    }
    assert_eq!(dlq["RedriveAllowPolicy"]["redrivePermission"], "byQueue");
    let bucket = &t["Resources"]["ArchiveBucket"]["Properties"];
    assert_eq!(bucket["VersioningConfiguration"]["Status"], "Enabled");
    assert!(
        bucket["PublicAccessBlockConfiguration"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| *v == true)
    );
    let policy =
        &t["Resources"]["ArchiveBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"][0];
    assert_eq!(
        (
            policy["Effect"].as_str(),
            policy["Condition"]["Bool"]["aws:SecureTransport"].as_str()
        ),
        (Some("Deny"), Some("false"))
    );
}

/// On LocalStack (`E2E_EMULATOR=localstack`), the stack as the local pipeline deploys it there:
/// without the Lambda resources (they need Docker), every other resource created by its
/// CloudFormation, which moto's skips: each alarm of the template (the metric-math ones too),
/// the bucket's versioning, the DLQ's retention. The functions' names stand where they were
/// referred to.
#[tokio::test]
async fn on_localstack_the_stack_without_functions_has_every_alarm() {
    if resq_e2e::emulator_kind() != resq_e2e::EmulatorKind::Localstack {
        eprintln!("skipped on moto: the next test deploys the whole template there");
        return;
    }
    let emulator = resq_e2e::emulator();
    let config = emulator.sdk_config().await;
    let template = translated_template("resq-artifacts");
    let outputs = resq_local::stack::deploy_stack(
        resq_e2e::EmulatorKind::Localstack,
        &config,
        &template.to_string(),
        "resq-ls",
        &[("MaxReceiveCount", "4")],
    )
    .await
    .unwrap();
    assert_eq!(outputs.consumer_function, "resq-ls-consumer");
    assert_eq!(outputs.redriver_function, "resq-ls-redriver");
    let resolver = resq_local::stack::Resolver::new(&template, "resq-ls", &[]);
    let mut expected: Vec<String> = template["Resources"]
        .as_object()
        .unwrap()
        .values()
        .filter(|r| r["Type"] == "AWS::CloudWatch::Alarm")
        .filter(|r| {
            r["Condition"]
                .as_str()
                .is_none_or(|c| resolver.condition(c) == Some(true))
        })
        .map(|r| resolver.value(&r["Properties"]["AlarmName"]).unwrap())
        .collect();
    expected.sort();
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
    let alarms = cloudwatch
        .describe_alarms()
        .alarm_name_prefix("resq-ls-")
        .send()
        .await
        .unwrap();
    let mut created: Vec<String> = alarms
        .metric_alarms()
        .iter()
        .filter_map(|a| a.alarm_name().map(str::to_owned))
        .collect();
    created.sort();
    assert_eq!(created, expected);
    for math in ["resq-ls-dlq-depth", "resq-ls-poison-archived"] {
        assert!(created.iter().any(|a| a == math), "{math} in {created:?}");
    }
    // an alarm on a function watches the name the local functions publish under
    let errors = alarms
        .metric_alarms()
        .iter()
        .find(|a| a.alarm_name() == Some("resq-ls-consumer-errors"))
        .unwrap();
    assert_eq!(errors.dimensions()[0].value(), Some("resq-ls-consumer"));
    let s3 = resq::aws::s3_client(&config);
    let versioning = s3
        .get_bucket_versioning()
        .bucket(&outputs.bucket)
        .send()
        .await
        .unwrap();
    assert_eq!(versioning.status().map(|s| s.as_str()), Some("Enabled"));
    let sqs = aws_sdk_sqs::Client::new(&config);
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&outputs.main_queue_url)
        .attribute_names(Q::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    let redrive: Value = serde_json::from_str(&attrs[&Q::RedrivePolicy]).unwrap();
    assert_eq!(number(&redrive["maxReceiveCount"]), 4.0);
    let dlq = sqs
        .get_queue_attributes()
        .queue_url(&outputs.dlq_url)
        .attribute_names(Q::MessageRetentionPeriod)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(dlq[&Q::MessageRetentionPeriod], "1209600");
}

/// Deploys the translated template into moto's CloudFormation. moto skips what it cannot
/// create (alarms, the dashboard, topic and bucket policies, the invoke config); those are
/// checked on the translation above.
#[tokio::test]
async fn the_stack_deploys_into_the_emulator_and_its_consumer_processes_an_order() {
    if resq_e2e::emulator_kind() != resq_e2e::EmulatorKind::Moto {
        eprintln!("skipped on LocalStack: it cannot create the functions (the test above instead)");
        return;
    }
    let moto = resq_e2e::moto();
    let config = moto.sdk_config().await;
    let s3 = resq::aws::s3_client(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let artifacts = "resq-artifacts";
    s3.create_bucket().bucket(artifacts).send().await.unwrap();
    for f in ["ConsumerFunction", "RedriverFunction"] {
        // moto stores the code; it never runs it
        s3.put_object()
            .bucket(artifacts)
            .key(format!("{f}.zip"))
            .body(b"placeholder".to_vec().into())
            .send()
            .await
            .unwrap();
    }
    let template = translated_template(artifacts);

    // GIVEN the stack, created as `sam deploy` would (with a non-default parameter)
    let cfn = aws_sdk_cloudformation::Client::new(&config);
    cfn.create_stack()
        .stack_name("resq-test")
        .template_body(template.to_string())
        .capabilities(Capability::CapabilityIam)
        .parameters(
            Parameter::builder()
                .parameter_key("MaxReceiveCount")
                .parameter_value("4")
                .build(),
        )
        .send()
        .await
        .expect("create stack");
    let stack = cfn
        .describe_stacks()
        .stack_name("resq-test")
        .send()
        .await
        .unwrap()
        .stacks
        .unwrap()
        .remove(0);
    assert_eq!(
        stack.stack_status().map(|s| s.as_str()),
        Some("CREATE_COMPLETE"),
        "{:?}",
        stack.stack_status_reason()
    );
    // what `resq stack check --deployed` reads: the values sam deploy keeps
    let deployed = resq_ops::stack::deployed_parameters(&cfn, "resq-test")
        .await
        .unwrap();
    assert!(
        deployed.contains(&("MaxReceiveCount".to_owned(), "4".to_owned())),
        "{deployed:?}"
    );
    assert_eq!(
        resq_ops::stack::deployed_parameters(&cfn, "no-such-stack")
            .await
            .unwrap(),
        vec![],
        "a first deploy starts from the template's defaults"
    );
    let outputs: HashMap<String, String> = stack
        .outputs()
        .iter()
        .map(|o| {
            (
                o.output_key().unwrap_or_default().to_owned(),
                o.output_value().unwrap_or_default().to_owned(),
            )
        })
        .collect();

    // THEN the queues exist with the redrive policy …
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&outputs["OrdersQueueUrl"])
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let redrive: Value = serde_json::from_str(&attrs[&Q::RedrivePolicy]).unwrap();
    assert_eq!(number(&redrive["maxReceiveCount"]), 4.0);
    assert!(
        redrive["deadLetterTargetArn"]
            .as_str()
            .unwrap()
            .ends_with("resq-test-orders-dlq")
    );
    // 7 × ConsumerTimeout 30 s: AWS's 6 × 30 s and room for the batching window
    assert_eq!(attrs[&Q::VisibilityTimeout], "210");
    let dlq_attrs = sqs
        .get_queue_attributes()
        .queue_url(&outputs["DeadLetterQueueUrl"])
        .attribute_names(Q::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(dlq_attrs[&Q::MessageRetentionPeriod], "1209600");

    // … the bucket (its versioning, policy and lifecycle are checked on the translation: moto's
    // CloudFormation does not apply them) …
    s3.head_bucket()
        .bucket(&outputs["ArchiveBucketName"])
        .send()
        .await
        .expect("archive bucket");

    // … both functions, wired to the stack's resources …
    let lambda = aws_sdk_lambda::Client::new(&config);
    // (read raw: moto's CloudFormation leaves numbers unquoted in the environment, which the
    // SDK rightly refuses; the architecture it ignores is checked on the translation)
    for (output, timeout, other_env) in [
        ("ConsumerFunctionName", 30, "CONSUMER_CONCURRENCY"),
        ("RedriverFunctionName", 300, "REDRIVE_RATE_PER_SECOND"),
    ] {
        let f = moto.get_json(&format!(
            "/2015-03-31/functions/{}/configuration",
            outputs[output]
        ));
        assert_eq!(f["Runtime"], "provided.al2023");
        assert_eq!(f["Handler"], "bootstrap");
        assert_eq!(number(&f["Timeout"]), f64::from(timeout));
        let env = &f["Environment"]["Variables"];
        assert_eq!(env["MAIN_QUEUE_URL"], outputs["OrdersQueueUrl"].as_str());
        assert_eq!(env["DLQ_URL"], outputs["DeadLetterQueueUrl"].as_str());
        assert_eq!(env["ARCHIVE_BUCKET"], outputs["ArchiveBucketName"].as_str());
        assert!(env.get(other_env).is_some(), "{output}: {other_env}");
    }

    // … the event source mapping reporting batch item failures …
    crate::helpers::assert_reports_batch_item_failures(
        &lambda,
        &outputs["ConsumerFunctionName"],
        &outputs["OrdersQueueArn"],
    )
    .await;

    // … the consumer breaker: the redriver told the consumer's mapping (the stack's output says
    // it too) and the breaker's alarms, which may invoke it by their ARNs …
    let mappings = lambda
        .list_event_source_mappings()
        .function_name(&outputs["ConsumerFunctionName"])
        .send()
        .await
        .unwrap();
    let mapping = mappings.event_source_mappings()[0].uuid().unwrap();
    assert_eq!(outputs["ConsumerEventSourceMapping"], mapping);
    let redriver = moto.get_json(&format!(
        "/2015-03-31/functions/{}/configuration",
        outputs["RedriverFunctionName"]
    ));
    let env = &redriver["Environment"]["Variables"];
    assert_eq!(env["CONSUMER_EVENT_SOURCE_MAPPING"], mapping);
    assert_eq!(
        env["PAUSE_CONSUMER_ON_ALARMS"],
        "resq-test-downstream-failing,resq-test-consumer-errors"
    );
    let policy: Value = serde_json::from_str(
        lambda
            .get_policy()
            .function_name(&outputs["RedriverFunctionName"])
            .send()
            .await
            .unwrap()
            .policy()
            .unwrap(),
    )
    .unwrap();
    let by_alarms: BTreeSet<&str> = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|st| st["Principal"]["Service"] == "lambda.alarms.cloudwatch.amazonaws.com")
        .map(|st| {
            assert_eq!(
                st["Condition"]["StringEquals"]["AWS:SourceAccount"],
                "123456789012"
            );
            st["Condition"]["ArnLike"]["AWS:SourceArn"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(
        by_alarms,
        BTreeSet::from([
            "arn:aws:cloudwatch:us-east-1:123456789012:alarm:resq-test-downstream-failing",
            "arn:aws:cloudwatch:us-east-1:123456789012:alarm:resq-test-consumer-errors"
        ])
    );

    // … and the redriver's schedule.
    let events = aws_sdk_eventbridge::Client::new(&config);
    let rules = events.list_rules().send().await.unwrap();
    let rule = rules
        .rules()
        .iter()
        .find(|r| r.schedule_expression() == Some("rate(5 minutes)"))
        .expect("schedule rule");
    let targets = events
        .list_targets_by_rule()
        .rule(rule.name().unwrap())
        .send()
        .await
        .unwrap();
    assert!(
        targets.targets()[0]
            .arn()
            .ends_with(&format!(":function:{}", outputs["RedriverFunctionName"]))
    );

    // (the emulator would "run" the mapping itself, in Docker, which is not here)
    resq_local::stack::disable_emulator_mappings(&config)
        .await
        .unwrap();

    // WHEN an order is sent to the stack's queue and the consumer, configured from the stack's
    // outputs, gets it THEN it is recorded in the stack's bucket
    let stack = resq_local::stack::StackOutputs {
        stack_name: "resq-test".into(),
        main_queue_url: outputs["OrdersQueueUrl"].clone(),
        main_queue_arn: outputs["OrdersQueueArn"].clone(),
        dlq_url: outputs["DeadLetterQueueUrl"].clone(),
        bucket: outputs["ArchiveBucketName"].clone(),
        failure_queue_url: outputs["RedriverFailureQueueUrl"].clone(),
        consumer_function: outputs["ConsumerFunctionName"].clone(),
        redriver_function: outputs["RedriverFunctionName"].clone(),
    };
    the_stacks_consumer_processes_an_order(&config, &stack, "o-stack-1", None, 1).await;
}

/// Sends order `order_id` to the stack's queue `sends` times (the same body; in `group`, for a
/// FIFO queue), has the consumer, configured from the stack's outputs, handle what it receives
/// as Lambda would pass it (one message: a FIFO queue deduplicates the resends), and checks the
/// order is recorded in the stack's bucket.
async fn the_stacks_consumer_processes_an_order(
    config: &aws_config::SdkConfig,
    outputs: &resq_local::stack::StackOutputs,
    order_id: &str,
    group: Option<&str>,
    sends: usize,
) {
    let sqs = aws_sdk_sqs::Client::new(config);
    let s3 = resq::aws::s3_client(config);
    let order =
        json!({"orderId": order_id, "userId": "u", "items": [{"productId": "p", "quantity": 1}]})
            .to_string();
    for _ in 0..sends {
        sqs.send_message()
            .queue_url(&outputs.main_queue_url)
            .message_body(&order)
            .set_message_group_id(group.map(str::to_owned))
            .send()
            .await
            .unwrap();
    }
    let received = sqs
        .receive_message()
        .queue_url(&outputs.main_queue_url)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap();
    assert_eq!(received.len(), 1, "the order, once");
    let response = consume_as_the_stack(config, outputs, &received).await;

    assert!(response.batch_item_failures.is_empty());
    let record = s3
        .get_object()
        .bucket(&outputs.bucket)
        .key(format!("orders/{order_id}.json"))
        .send()
        .await
        .expect("order recorded");
    let record: Value =
        serde_json::from_slice(&record.body.collect().await.unwrap().into_bytes()).unwrap();
    assert_eq!(record["order"]["orderId"], order_id);
}

/// Has the consumer, configured from the stack's outputs as the template configures it (the
/// reference handler over the stack's bucket), handle `received` as Lambda would pass it.
pub(crate) async fn consume_as_the_stack(
    config: &aws_config::SdkConfig,
    outputs: &resq_local::stack::StackOutputs,
    received: &[aws_sdk_sqs::types::Message],
) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    let sqs = aws_sdk_sqs::Client::new(config);
    let s3 = resq::aws::s3_client(config);
    let env: HashMap<&str, String> = HashMap::from([
        ("MAIN_QUEUE_URL", outputs.main_queue_url.clone()),
        ("DLQ_URL", outputs.dlq_url.clone()),
        ("ARCHIVE_BUCKET", outputs.bucket.clone()),
    ]);
    let cfg =
        resq_consumer::config::ConsumerConfig::from_vars(&resq::config::Vars(move |k: &str| {
            env.get(k).cloned()
        }))
        .unwrap();
    let store = resq::store::S3Store::new(s3, &cfg.common.archive_bucket);
    let consumer = resq_consumer::Consumer::new(
        resq_consumer::order::RecordOrder::new(store.clone()),
        sqs,
        store,
        cfg,
    );
    let event = resq_local::event::lambda_event(received, &outputs.main_queue_arn, REGION);
    crate::helpers::answer(&consumer, &event).await
}

/// The parameters of a stack deployed with QueueType `queue_type` (the rest default), as
/// CloudFormation resolves the template's conditions for it.
fn resolver_for<'a>(t: &'a Value, queue_type: &str) -> resq_local::stack::Resolver<'a> {
    resq_local::stack::Resolver::new(t, "stk", &[("QueueType", queue_type)])
}

#[test]
fn queue_type_fifo_makes_both_queues_fifo_and_standard_leaves_them_as_they_were() {
    let t = translated_template("resq-artifacts");
    let param = &t["Parameters"]["QueueType"];
    assert_eq!(
        param["Default"], "standard",
        "existing stacks stay standard"
    );
    assert_eq!(param["AllowedValues"], json!(["standard", "fifo"]));
    let res = &t["Resources"];
    let fifo_props = [
        "FifoQueue",
        "ContentBasedDeduplication",
        "DeduplicationScope",
        "FifoThroughputLimit",
    ];
    for (queue_type, suffix) in [("standard", ""), ("fifo", ".fifo")] {
        let r = resolver_for(&t, queue_type);
        let orders = &res["OrdersQueue"]["Properties"];
        let dlq = &res["DeadLetterQueue"]["Properties"];
        assert_eq!(
            r.value(&orders["QueueName"]),
            Some(format!("stk-orders{suffix}")),
            "{queue_type}"
        );
        assert_eq!(
            r.value(&dlq["QueueName"]),
            Some(format!("stk-orders-dlq{suffix}")),
            "{queue_type}"
        );
        // only the main queue may dead-letter into the DLQ: the ARN of its name for this type
        assert_eq!(
            r.value(&dlq["RedriveAllowPolicy"]["sourceQueueArns"][0]),
            Some(format!(
                "arn:aws:sqs:{REGION}:000000000000:stk-orders{suffix}"
            )),
            "{queue_type}"
        );
        // the redrive wiring is the same for both types
        assert_eq!(
            orders["RedrivePolicy"]["deadLetterTargetArn"],
            json!({"Fn::GetAtt": ["DeadLetterQueue", "Arn"]})
        );
        let fifo: Vec<(Option<String>, Option<String>)> = fifo_props
            .iter()
            .map(|p| (r.value(&orders[p]), r.value(&dlq[p])))
            .collect();
        if queue_type == "standard" {
            // AWS::NoValue: the properties are left out, as before the parameter existed
            for (p, v) in fifo_props.iter().zip(&fifo) {
                assert_eq!(*v, (None, None), "standard: {p} must be left out");
                for q in ["OrdersQueue", "DeadLetterQueue"] {
                    assert_eq!(
                        res[q]["Properties"][p]["Fn::If"][2],
                        json!({"Ref": "AWS::NoValue"}),
                        "standard: {q}.{p} must be left out"
                    );
                }
            }
        } else {
            let s = |v: &str| Some(v.to_owned());
            assert_eq!(
                fifo,
                vec![
                    (s("true"), s("true")),
                    // producers need only a MessageGroupId; the consumer's DLQ copies carry
                    // explicit deduplication ids
                    (s("true"), s("false")),
                    (s("messageGroup"), s("messageGroup")),
                    (s("perMessageGroupId"), s("perMessageGroupId")),
                ]
            );
        }
        // the redriver's failure destination stays standard: Lambda cannot deliver to FIFO
        let failures = &res["RedriverFailureQueue"]["Properties"];
        assert!(failures.get("FifoQueue").is_none());
        assert_eq!(
            r.value(&failures["QueueName"]).as_deref(),
            Some("stk-redriver-failures")
        );
        // Lambda has no batching window for FIFO queues: left out under fifo
        let esm = &res["ConsumerFunctionOrders"]["Properties"];
        let window = r
            .number_or(&esm["MaximumBatchingWindowInSeconds"], "window", -1.0)
            .unwrap();
        assert_eq!(
            window,
            if queue_type == "fifo" { -1.0 } else { 1.0 },
            "{queue_type}: batching window"
        );
        assert_eq!(r.value(&esm["BatchSize"]).as_deref(), Some("10"));
    }
    // alarms and the dashboard name the queues by their attribute, so a .fifo name follows
    for (id, a) in resources_of(&t, "AWS::CloudWatch::Alarm") {
        let p = &a["Properties"];
        let dims = p["Dimensions"].as_array().into_iter().flatten().chain(
            p["Metrics"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["MetricStat"]["Metric"]["Dimensions"].as_array())
                .flatten(),
        );
        for d in dims.filter(|d| d["Name"] == "QueueName") {
            assert_eq!(d["Value"]["Fn::GetAtt"][1], "QueueName", "{id}: {d}");
        }
    }
}

/// A CloudFormation rule expression for a stack with `params` (the rest default): the
/// functions rules use here (Ref, Fn::Equals, Fn::Contains, Fn::EachMemberEquals, Fn::Not,
/// Fn::And, Fn::Or).
fn rule_holds(t: &Value, e: &Value, params: &[(&str, &str)]) -> bool {
    let r = resq_local::stack::Resolver::new(t, "stk", params);
    let args = |f: &str| e.get(f).and_then(Value::as_array);
    if let Some(a) = args("Fn::Equals") {
        return r.value(&a[0]).unwrap() == r.value(&a[1]).unwrap();
    }
    if let Some(a) = args("Fn::Contains") {
        let needle = r.value(&a[1]).unwrap();
        return a[0]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| r.value(x).unwrap() == needle);
    }
    if let Some(a) = args("Fn::Not") {
        return !rule_holds(t, &a[0], params);
    }
    if let Some(a) = args("Fn::EachMemberEquals") {
        // a list parameter's members (its value as given, "a,b")
        let value = r.value(&a[1]).unwrap();
        return r.value(&a[0]).unwrap().split(',').all(|m| m == value);
    }
    if let Some(a) = args("Fn::And") {
        return a.iter().all(|x| rule_holds(t, x, params));
    }
    if let Some(a) = args("Fn::Or") {
        return a.iter().any(|x| rule_holds(t, x, params));
    }
    panic!("not a rule function: {e}")
}

/// Whether CloudFormation would accept `params`: every rule whose condition holds, holds.
pub(crate) fn rules_accept(t: &Value, params: &[(&str, &str)]) -> bool {
    t["Rules"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(_, rule)| {
            rule.get("RuleCondition")
                .is_some_and(|c| !rule_holds(t, c, params))
                || rule["Assertions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|a| rule_holds(t, &a["Assert"], params))
        })
}

#[test]
fn a_fifo_stack_with_a_batch_over_ten_is_refused_before_anything_is_created() {
    // (neither emulator evaluates template rules: evaluated here as CloudFormation does)
    let t = translated_template("resq-artifacts");
    let rule = &t["Rules"]["FifoBatchSize"];
    assert!(
        rule["Assertions"][0]["AssertDescription"]
            .as_str()
            .is_some_and(|d| d.contains("ConsumerBatchSize") && d.contains("10")),
        "the refusal says what to change: {rule}"
    );
    assert!(rules_accept(&t, &[]), "the defaults deploy");
    const FIFO: [(&str, &str); 2] = [("QueueType", "fifo"), ("PermanentAction", "archive")];
    assert!(rules_accept(&t, &FIFO), "fifo with the default batch size");
    for n in 1..=10 {
        let n = n.to_string();
        assert!(
            rules_accept(&t, &[FIFO[0], FIFO[1], ("ConsumerBatchSize", &n)]),
            "fifo, batch {n}"
        );
    }
    for n in ["11", "100", "10000"] {
        assert!(
            !rules_accept(&t, &[FIFO[0], FIFO[1], ("ConsumerBatchSize", n)]),
            "fifo, batch {n} must be refused"
        );
        assert!(
            rules_accept(&t, &[("QueueType", "standard"), ("ConsumerBatchSize", n)]),
            "standard, batch {n}"
        );
    }
}

#[test]
fn a_fifo_stack_must_archive_permanent_failures() {
    // a kept (hidden) permanent failure in a FIFO DLQ would hold back the rest of its group
    let t = translated_template("resq-artifacts");
    let rule = &t["Rules"]["FifoPermanentAction"];
    assert!(
        rule["Assertions"][0]["AssertDescription"]
            .as_str()
            .is_some_and(|d| d.contains("PermanentAction must be archive")),
        "the refusal says what to change: {rule}"
    );
    assert!(
        !rules_accept(&t, &[("QueueType", "fifo")]),
        "fifo, keep (the default)"
    );
    assert!(!rules_accept(
        &t,
        &[("QueueType", "fifo"), ("PermanentAction", "keep")]
    ));
    assert!(rules_accept(
        &t,
        &[("QueueType", "fifo"), ("PermanentAction", "archive")]
    ));
    assert!(rules_accept(
        &t,
        &[("QueueType", "standard"), ("PermanentAction", "keep")]
    ));
}

/// QueueType=fifo deployed into the emulator's CloudFormation (moto's with the functions,
/// LocalStack's without): FIFO queues with their settings and redrive wiring, and an order sent
/// with a MessageGroupId (twice: deduplicated by content) processed by the stack's consumer.
#[tokio::test]
async fn a_fifo_stack_deploys_into_the_emulator_and_its_consumer_processes_an_order_of_a_group() {
    let kind = resq_e2e::emulator_kind();
    let emulator = resq_e2e::emulator();
    let config = emulator.sdk_config().await;
    let template = translated_template(resq_local::stack::ARTIFACT_BUCKET);

    // GIVEN the stack, deployed as `sam deploy --parameter-overrides QueueType=fifo` would
    let outputs = resq_local::stack::deploy_stack(
        kind,
        &config,
        &template.to_string(),
        "resq-fifo",
        &[
            ("QueueType", "fifo"),
            ("PermanentAction", "archive"),
            ("MaxReceiveCount", "4"),
        ],
    )
    .await
    .unwrap();

    // THEN both queues are FIFO, with .fifo names and the template's settings …
    let sqs = aws_sdk_sqs::Client::new(&config);
    use aws_sdk_sqs::types::QueueAttributeName as Q;
    let attributes = |url: String| {
        let sqs = sqs.clone();
        async move {
            sqs.get_queue_attributes()
                .queue_url(url)
                .attribute_names(Q::All)
                .send()
                .await
                .unwrap()
                .attributes
                .unwrap()
        }
    };
    let orders = attributes(outputs.main_queue_url.clone()).await;
    let dlq = attributes(outputs.dlq_url.clone()).await;
    assert!(outputs.main_queue_url.ends_with("/resq-fifo-orders.fifo"));
    assert!(outputs.dlq_url.ends_with("/resq-fifo-orders-dlq.fifo"));
    assert!(outputs.main_queue_arn.ends_with(":resq-fifo-orders.fifo"));
    for (name, q, content) in [("orders", &orders, "true"), ("DLQ", &dlq, "false")] {
        assert_eq!(q[&Q::FifoQueue], "true", "{name}");
        assert_eq!(q[&Q::ContentBasedDeduplication], content, "{name}");
        assert_eq!(q[&Q::DeduplicationScope], "messageGroup", "{name}");
        assert_eq!(q[&Q::FifoThroughputLimit], "perMessageGroupId", "{name}");
    }
    // … the main queue dead-letters into the FIFO DLQ …
    let redrive: Value = serde_json::from_str(&orders[&Q::RedrivePolicy]).unwrap();
    assert_eq!(number(&redrive["maxReceiveCount"]), 4.0);
    assert_eq!(redrive["deadLetterTargetArn"], dlq[&Q::QueueArn].as_str());
    if let Some(allow) = dlq.get(&Q::RedriveAllowPolicy) {
        // (LocalStack keeps it; moto does not return it)
        let allow: Value = serde_json::from_str(allow).unwrap();
        assert_eq!(allow["sourceQueueArns"], json!([outputs.main_queue_arn]));
    } else {
        assert_eq!(
            kind,
            resq_e2e::EmulatorKind::Moto,
            "RedriveAllowPolicy missing"
        );
    }
    // … the redriver's failure destination stays standard …
    let failures = attributes(outputs.failure_queue_url.clone()).await;
    assert!(failures.get(&Q::FifoQueue).is_none_or(|f| f == "false"));
    // … and (moto creates it) the event source mapping has no batching window.
    if kind == resq_e2e::EmulatorKind::Moto {
        let lambda = aws_sdk_lambda::Client::new(&config);
        let mappings = lambda
            .list_event_source_mappings()
            .function_name(&outputs.consumer_function)
            .send()
            .await
            .unwrap();
        let esm = &mappings.event_source_mappings()[0];
        assert_eq!(
            esm.event_source_arn(),
            Some(outputs.main_queue_arn.as_str())
        );
        assert_eq!(esm.batch_size(), Some(10));
        assert_eq!(esm.maximum_batching_window_in_seconds(), None);
    }

    // WHEN an order is sent with a MessageGroupId (twice: a producer's retry) THEN the
    // consumer gets it once and records it
    the_stacks_consumer_processes_an_order(&config, &outputs, "o-fifo-1", Some("customer-7"), 2)
        .await;
}

// ---------------------------------------------------------------- the consumer breaker

/// A stack's name in messages, its parameters, and the mapping its redriver is told.
type BreakerStack = (
    &'static str,
    &'static [(&'static str, &'static str)],
    Option<&'static str>,
);

/// The stacks whose consumer breaker the tests below compare: resq's own consumer (the
/// breaker on, on the mapping SAM generates), a team's function without its mapping given (the
/// breaker off) and with it (on, on that mapping); each with the mapping the redriver is told.
const BREAKER_STACKS: [BreakerStack; 3] = [
    ("resq's consumer", &[], Some(MAPPING)),
    (
        "a team's function, no mapping given",
        &[("ReferenceConsumer", "false")],
        None,
    ),
    (
        "a team's function and its mapping",
        &[
            ("ReferenceConsumer", "false"),
            ("ConsumerEventSourceMapping", TEAM_MAPPING),
        ],
        Some(TEAM_MAPPING),
    ),
];

/// The template as the stack `stk` with `params` gets it, its consumer's mapping as a
/// deployment names it.
fn breaker_stack<'a>(t: &'a Value, params: &[(&str, &str)]) -> resq_local::stack::Resolver<'a> {
    resq_local::stack::Resolver::new(t, "stk", params)
        .with_resource("ConsumerFunctionOrders", MAPPING)
        .with_resource("ArchiveBucket.Arn", "arn:aws:s3:::stk-archive")
        .with_resource(
            "OrdersQueue.Arn",
            "arn:aws:sqs:us-east-1:000000000000:stk-orders",
        )
}

/// An alarm's ARN in the stack `r` resolves, by its `AlarmName`.
fn alarm_arn(r: &resq_local::stack::Resolver<'_>, alarm: &Value) -> String {
    let name = r.value(&alarm["AlarmName"]).unwrap();
    format!("arn:aws:cloudwatch:{REGION}:000000000000:alarm:{name}")
}

/// The names in a comma-separated alarm list (empty: none).
fn alarm_names(list: &str) -> BTreeSet<String> {
    list.split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

fn redriver_env(t: &Value) -> &Value {
    &t["Resources"]["RedriverFunction"]["Properties"]["Environment"]["Variables"]
}

#[test]
fn the_downstream_failing_alarm_reads_the_consumers_share_of_transient_failures() {
    let t = translated_template("resq-artifacts");
    let a = alarm(&t, "downstream-failing");
    // the consumer's TransientFailurePercent (per invocation that ran records), in resq's
    // namespace and by its dimensions, averaged over a minute: a simple metric alarm, which
    // LocalStack evaluates too (it does not evaluate metric math)
    assert_eq!(resq_function(a), function_name(&t, "ConsumerFunction"));
    assert!(a.get("Metrics").is_none(), "not metric math: {a}");
    assert_eq!(
        (
            a["MetricName"].as_str(),
            a["Statistic"].as_str(),
            number(&a["Period"]),
            number(&a["EvaluationPeriods"])
        ),
        (Some("TransientFailurePercent"), Some("Average"), 60.0, 1.0)
    );
    // at or over DownstreamFailingPercent (50 % by default) of the records run
    assert_eq!(a["Threshold"], json!({"Ref": "DownstreamFailingPercent"}));
    assert_eq!(a["ComparisonOperator"], "GreaterThanOrEqualToThreshold");
    let p = &t["Parameters"]["DownstreamFailingPercent"];
    assert_eq!(
        (
            number(&p["Default"]),
            number(&p["MinValue"]),
            number(&p["MaxValue"])
        ),
        (50.0, 1.0, 100.0)
    );
    // a paused consumer runs nothing: no data keeps the alarm's state (a probe's records
    // decide), never reads as OK
    assert_eq!(a["TreatMissingData"], "ignore");
    // its output names it
    assert_eq!(
        t["Outputs"]["DownstreamFailingAlarmName"]["Value"],
        json!({"Ref": "DownstreamFailingAlarm"})
    );
    assert_eq!(t["Resources"]["DownstreamFailingAlarm"]["Properties"], *a);
}

#[test]
fn the_breakers_alarms_invoke_the_redriver_which_they_alone_may_when_the_breaker_is_on() {
    let t = translated_template("resq-artifacts");
    let topic = json!({"Ref": "AlertTopic"});
    let redriver = json!({"Fn::GetAtt": ["RedriverFunction", "Arn"]});
    let errors = alarm(&t, "consumer-errors");
    for (stack, params, mapping) in BREAKER_STACKS {
        let r = breaker_stack(&t, params);
        let on = mapping.is_some();
        assert_eq!(r.condition("ConsumerBreakerOn"), Some(on), "{stack}");
        // GIVEN the alarms whose actions invoke the redriver in this stack
        let mut invoking = BTreeSet::new();
        for (id, a) in resources_of(&t, "AWS::CloudWatch::Alarm") {
            let p = &a["Properties"];
            let actions = r.decided(&p["AlarmActions"]).unwrap();
            // every alarm notifies the alert topic both ways, with the same actions
            assert!(
                actions.as_array().unwrap().contains(&topic),
                "{stack}: {id}"
            );
            assert_eq!(
                Some(actions),
                r.decided(&p["OKActions"]),
                "{stack}: {id}: the same actions on OK"
            );
            if actions.as_array().unwrap().contains(&redriver) {
                invoking.insert(r.value(&p["AlarmName"]).unwrap());
            }
        }
        // THEN they are the alarms of PAUSE_CONSUMER_ON_ALARMS: downstream-failing and
        // consumer-errors with the breaker on, none without
        let pause = r
            .value(&redriver_env(&t)["PAUSE_CONSUMER_ON_ALARMS"])
            .unwrap();
        assert_eq!(invoking, alarm_names(&pause), "{stack}");
        let expected: BTreeSet<String> = if on {
            ["downstream-failing", "consumer-errors"]
                .iter()
                .map(|n| r.value(&alarm(&t, n)["AlarmName"]).unwrap())
                .collect()
        } else {
            BTreeSet::new()
        };
        assert_eq!(invoking, expected, "{stack}");
        // AND CloudWatch may invoke the redriver for exactly those alarms, by their ARN, from
        // this account
        let allowed: BTreeSet<String> = resources_of(&t, "AWS::Lambda::Permission")
            .into_iter()
            .filter(|(_, p)| {
                p["Condition"]
                    .as_str()
                    .is_none_or(|c| r.condition(c) == Some(true))
            })
            .map(|(_, p)| &p["Properties"])
            .filter(|p| p["Principal"] == "lambda.alarms.cloudwatch.amazonaws.com")
            .map(|p| {
                assert_eq!(p["Action"], "lambda:InvokeFunction", "{p}");
                assert_eq!(p["FunctionName"], json!({"Ref": "RedriverFunction"}), "{p}");
                assert_eq!(p["SourceAccount"], json!({"Ref": "AWS::AccountId"}), "{p}");
                r.value(&p["SourceArn"]).unwrap()
            })
            .collect();
        let arns: BTreeSet<String> = resources_of(&t, "AWS::CloudWatch::Alarm")
            .into_iter()
            .map(|(_, a)| &a["Properties"])
            .filter(|p| invoking.contains(&r.value(&p["AlarmName"]).unwrap()))
            .map(|p| alarm_arn(&r, p))
            .collect();
        assert_eq!(allowed, arns, "{stack}");
        // AND the consumer-errors alarm keeps its state without data only when a pause can
        // take its data away; otherwise a quiet consumer reads OK (it also pauses replay)
        assert_eq!(
            r.decided(&errors["TreatMissingData"]),
            Some(&json!(if on { "ignore" } else { "notBreaching" })),
            "{stack}"
        );
    }
}

#[test]
fn the_redriver_is_told_the_consumers_mapping_and_may_switch_that_one_only() {
    let t = translated_template("resq-artifacts");
    // resq's consumer's mapping is SAM's for its event Orders: the consumer on the main queue
    let esm = &t["Resources"]["ConsumerFunctionOrders"];
    assert_eq!(esm["Type"], "AWS::Lambda::EventSourceMapping");
    assert_eq!(esm["Condition"], "HasReferenceConsumer");
    assert_eq!(
        esm["Properties"]["FunctionName"],
        json!({"Ref": "ConsumerFunction"})
    );
    assert_eq!(
        esm["Properties"]["EventSourceArn"],
        json!({"Fn::GetAtt": ["OrdersQueue", "Arn"]})
    );
    let env = redriver_env(&t);
    assert_eq!(env["REDRIVE_RATE_MAX"], json!({"Ref": "RedriveRateMax"}));
    assert_eq!(
        env["ARCHIVE_SWEEP_SECONDS"],
        json!({"Ref": "ArchiveSweepSeconds"})
    );
    assert_eq!(
        t["Resources"]["ConsumerFunction"]["Properties"]["Environment"]["Variables"]["RETRY_BUDGET_PERCENT"],
        json!({"Ref": "RetryBudgetPercent"})
    );
    let role = &t["Resources"]["RedriverRole"];
    let state = resq::state::STATE_PREFIX;
    for (stack, params, mapping) in BREAKER_STACKS {
        let r = breaker_stack(&t, params);
        // GIVEN the mapping the redriver is told (none: no consumer breaker)
        assert_eq!(
            r.value(&env["CONSUMER_EVENT_SOURCE_MAPPING"]).as_deref(),
            Some(mapping.unwrap_or("")),
            "{stack}"
        );
        let statements: Vec<&Value> =
            role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|st| r.decided(st))
                .collect();
        let actions = |st: &Value| -> BTreeSet<String> {
            match &st["Action"] {
                Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_owned()).collect(),
                a => BTreeSet::from([a.as_str().unwrap().to_owned()]),
            }
        };
        let granting = |action: &str| -> Vec<&Value> {
            statements
                .iter()
                .copied()
                .filter(|st| actions(st).contains(action))
                .collect()
        };
        // THEN Lambda: reading and switching that one mapping, by its ARN, and nothing else
        let lambda: Vec<&Value> = statements
            .iter()
            .copied()
            .filter(|st| actions(st).iter().any(|a| a.starts_with("lambda:")))
            .collect();
        match mapping {
            Some(m) => {
                assert_eq!(lambda.len(), 1, "{stack}");
                assert_eq!(
                    actions(lambda[0]),
                    BTreeSet::from([
                        "lambda:GetEventSourceMapping".to_owned(),
                        "lambda:UpdateEventSourceMapping".to_owned()
                    ]),
                    "{stack}"
                );
                assert_eq!(
                    r.value(&lambda[0]["Resource"]),
                    Some(format!(
                        "arn:aws:lambda:{REGION}:000000000000:event-source-mapping:{m}"
                    )),
                    "{stack}"
                );
            }
            None => assert!(lambda.is_empty(), "{stack}: {lambda:?}"),
        }
        // AND the breaker's reads only with the breaker: the downstream-failing alarm (its
        // state and history), the main queue's retention, and its oldest message's age
        // (GetMetricData, which AWS scopes to no resource: "*", and nothing else on "*")
        let downstream = alarm_arn(&r, alarm(&t, "downstream-failing"));
        let reading_downstream: Vec<&Value> = statements
            .iter()
            .copied()
            .filter(|st| r.value(&st["Resource"]).as_deref() == Some(downstream.as_str()))
            .collect();
        let star: Vec<&Value> = statements
            .iter()
            .copied()
            .filter(|st| st["Resource"] == "*")
            .collect();
        let retention = granting("sqs:GetQueueAttributes");
        if mapping.is_some() {
            assert_eq!(reading_downstream.len(), 1, "{stack}");
            assert_eq!(
                actions(reading_downstream[0]),
                BTreeSet::from([
                    "cloudwatch:DescribeAlarms".to_owned(),
                    "cloudwatch:DescribeAlarmHistory".to_owned()
                ])
            );
            assert_eq!(star.len(), 1, "{stack}: {star:?}");
            assert_eq!(
                actions(star[0]),
                BTreeSet::from(["cloudwatch:GetMetricData".to_owned()])
            );
            assert_eq!(retention.len(), 1, "{stack}");
            assert_eq!(
                retention[0]["Resource"],
                json!({"Fn::GetAtt": ["OrdersQueue", "Arn"]})
            );
            assert_eq!(actions(retention[0]).len(), 1);
        } else {
            assert!(reading_downstream.is_empty(), "{stack}");
            assert!(star.is_empty(), "{stack}: {star:?}");
            assert!(retention.is_empty(), "{stack}");
        }
        // AND the state log under state/ in any case (the archive sweeps keep theirs there):
        // written and read there, listed there only
        let objects = format!("arn:aws:s3:::stk-archive/{state}*");
        for action in ["s3:PutObject", "s3:GetObject"] {
            assert!(
                granting(action)
                    .iter()
                    .any(|st| r.value(&st["Resource"]).as_deref() == Some(objects.as_str())),
                "{stack}: {action} on {objects}"
            );
        }
        let listing: Vec<&Value> = granting("s3:ListBucket")
            .into_iter()
            .filter(|st| st["Condition"]["StringLike"]["s3:prefix"] == format!("{state}*"))
            .collect();
        assert_eq!(listing.len(), 1, "{stack}");
        assert_eq!(
            listing[0]["Resource"],
            json!({"Fn::GetAtt": ["ArchiveBucket", "Arn"]})
        );
    }
}

#[test]
fn the_stack_outputs_the_mapping_its_breaker_pauses_and_a_teams_function_outputs_its_own() {
    let t = translated_template("resq-artifacts");
    let output = &t["Outputs"]["ConsumerEventSourceMapping"];
    assert_eq!(output["Condition"], "ConsumerBreakerOn");
    for (stack, params, mapping) in BREAKER_STACKS {
        let r = breaker_stack(&t, params);
        // the output is there exactly when the breaker is on, and says what the redriver is told
        assert_eq!(
            r.condition("ConsumerBreakerOn"),
            Some(mapping.is_some()),
            "{stack}"
        );
        if let Some(m) = mapping {
            assert_eq!(r.value(&output["Value"]).as_deref(), Some(m), "{stack}");
            assert_eq!(
                r.value(&output["Value"]),
                r.value(&redriver_env(&t)["CONSUMER_EVENT_SOURCE_MAPPING"])
            );
        }
    }
    // the parameter takes a mapping's UUID as Lambda writes it, or nothing
    let pattern = t["Parameters"]["ConsumerEventSourceMapping"]["AllowedPattern"]
        .as_str()
        .unwrap();
    let arn = format!("arn:aws:lambda:{REGION}:000000000000:event-source-mapping:{MAPPING}");
    let upper = MAPPING.to_uppercase();
    let matched = pattern_matches(
        pattern,
        &["", MAPPING, TEAM_MAPPING, "mapping", &arn, &upper, " "],
    );
    assert_eq!(
        matched,
        BTreeSet::from(["".to_owned(), MAPPING.to_owned(), TEAM_MAPPING.to_owned()])
    );
    assert_eq!(t["Parameters"]["ConsumerEventSourceMapping"]["Default"], "");
    // infra/function.yaml: its output is its own mapping's (for the parameter above), and its
    // engine gets the retry budget as resq's consumer does
    let f = translated("infra/function.yaml", "resq-artifacts");
    let mappings = resources_of(&f, "AWS::Lambda::EventSourceMapping");
    assert_eq!(mappings.len(), 1);
    let (id, esm) = mappings[0];
    assert_eq!(
        esm["Properties"]["FunctionName"],
        json!({"Ref": "ConsumerFunction"})
    );
    assert_eq!(
        f["Outputs"]["ConsumerEventSourceMapping"]["Value"],
        json!({"Ref": id})
    );
    assert_eq!(
        f["Resources"]["ConsumerFunction"]["Properties"]["Environment"]["Variables"]["RETRY_BUDGET_PERCENT"],
        json!({"Ref": "RetryBudgetPercent"})
    );
    for key in ["Type", "Default", "AllowedPattern"] {
        assert_eq!(
            f["Parameters"]["RetryBudgetPercent"][key], t["Parameters"]["RetryBudgetPercent"][key],
            "function.yaml's RetryBudgetPercent {key}: as the stack's"
        );
    }
}

/// The consumer's configuration as the template sets its environment for a stack with
/// `params` (the rest default); the error's text when it refuses it.
fn consumer_config(t: &Value, params: &[(&str, &str)]) -> Result<(), String> {
    let r = resq_local::stack::Resolver::new(t, "stk", params)
        .with_resource("OrdersQueue", "https://sqs.example/stk-orders")
        .with_resource("DeadLetterQueue", "https://sqs.example/stk-orders-dlq")
        .with_resource("ArchiveBucket", "stk-archive");
    let env: HashMap<String, String> =
        t["Resources"]["ConsumerFunction"]["Properties"]["Environment"]["Variables"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), r.value(v).unwrap_or_else(|| panic!("{k}: {v}"))))
            .collect();
    resq_consumer::config::ConsumerConfig::from_vars(&resq::config::Vars(move |k: &str| {
        env.get(k).cloned()
    }))
    .map(|_| ())
    .map_err(|e| e.to_string())
}

#[test]
fn the_new_parameters_take_what_the_functions_take() {
    let t = translated_template("resq-artifacts");
    let p = &t["Parameters"];
    // the retry budget: off or 1 to 100, 10 by default; the consumer takes each
    let budget = p["RetryBudgetPercent"]["AllowedPattern"].as_str().unwrap();
    let accepted = ["off", "1", "10", "99", "100"];
    let matched = pattern_matches(
        budget,
        &[&accepted[..], &["", "0", "101", "010", "auto", "10%", "-1"]].concat(),
    );
    assert_eq!(
        matched,
        accepted
            .iter()
            .map(|v| (*v).to_owned())
            .collect::<BTreeSet<_>>()
    );
    assert_eq!(p["RetryBudgetPercent"]["Default"], "10");
    assert!(accepted.contains(&p["RetryBudgetPercent"]["Default"].as_str().unwrap()));
    for v in accepted {
        if let Err(e) = consumer_config(&t, &[("RetryBudgetPercent", v)]) {
            panic!("RetryBudgetPercent {v}: the consumer refuses it: {e}");
        }
    }
    // the drain's ceiling: from the base rate's least to its most, 200 by default; the sweep
    // every hour, from a minute to 12 hours; the redriver takes the ends
    for (name, default, min, max) in [
        ("RedriveRateMax", 200.0, 1.0, 3000.0),
        ("ArchiveSweepSeconds", 3600.0, 60.0, 43_200.0),
    ] {
        assert_eq!(
            (
                number(&p[name]["Default"]),
                number(&p[name]["MinValue"]),
                number(&p[name]["MaxValue"])
            ),
            (default, min, max),
            "{name}"
        );
    }
    for key in ["MinValue", "MaxValue"] {
        assert_eq!(
            p["RedriveRateMax"][key], p["RedriveRatePerSecond"][key],
            "RedriveRateMax {key}: the base rate's"
        );
    }
    let end = |name: &str, key: &str| p[name][key].to_string().trim_matches('"').to_owned();
    for params in [
        [
            (
                "RedriveRatePerSecond",
                end("RedriveRatePerSecond", "MinValue"),
            ),
            ("RedriveRateMax", end("RedriveRateMax", "MinValue")),
            (
                "ArchiveSweepSeconds",
                end("ArchiveSweepSeconds", "MinValue"),
            ),
        ],
        [
            (
                "RedriveRatePerSecond",
                end("RedriveRatePerSecond", "MaxValue"),
            ),
            ("RedriveRateMax", end("RedriveRateMax", "MaxValue")),
            (
                "ArchiveSweepSeconds",
                end("ArchiveSweepSeconds", "MaxValue"),
            ),
        ],
    ] {
        let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if let Err(e) = redriver_config(&t, &params) {
            panic!("{params:?}: {e}");
        }
    }
}

#[test]
fn the_default_drain_ceiling_leaves_the_consumer_room_and_drains_an_hours_outage_within_the_hour() {
    let t = translated_template("resq-artifacts");
    let p = &t["Parameters"];
    let default = |name: &str| number(&p[name]["Default"]);
    let (base, ceiling) = (default("RedriveRatePerSecond"), default("RedriveRateMax"));
    assert!(ceiling >= base);
    // GIVEN what the consumer takes at its defaults: ConsumerMaximumConcurrency invocations of
    // ConsumerBatchSize records, a batch's records together (auto concurrency) in about a
    // record's time (resq stack check's assumption, --record-ms)
    let record = resq_ops::stack::DEFAULT_RECORD_MS as f64 / 1000.0;
    let consumer = default("ConsumerMaximumConcurrency") * default("ConsumerBatchSize") / record;
    // THEN the ceiling takes at most a fifth of it: the rest is new orders' (100/s in issue
    // 34's outage)
    assert!(
        ceiling * 5.0 <= consumer,
        "RedriveRateMax {ceiling}/s against a consumer taking {consumer}/s"
    );
    // WHEN runs come every schedule period and each ramps from the base rate every 30 s by
    // max(base, (ceiling - base) / 4) up to the ceiling, for its time less the margin
    let period = resq_ops::stack::schedule_period_seconds(
        p["RedriverSchedule"]["Default"].as_str().unwrap(),
    )
    .unwrap();
    let run = default("RedriverTimeout") - default("DeadlineMarginMs") / 1000.0;
    let step = ((ceiling - base) / 4.0).max(base);
    let (mut at, mut rate, mut replays) = (0.0, base, 0.0);
    while at < run {
        let span = (run - at).min(30.0);
        replays += rate * span;
        at += span;
        rate = (rate + step).min(ceiling);
    }
    let drain = replays / period;
    // THEN the DLQ of a one-hour outage at 100 orders/s (360,000) drains within the hour
    let outage = 100.0 * 3600.0;
    assert!(
        outage / drain <= 3600.0,
        "{drain}/s drains {outage} in {} s",
        outage / drain
    );
}

#[test]
fn the_state_log_expires_after_30_days_as_do_its_old_versions() {
    let t = translated_template("resq-artifacts");
    let rules = t["Resources"]["ArchiveBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
        .as_array()
        .unwrap();
    let state: Vec<&Value> = rules
        .iter()
        .filter(|r| r["Prefix"] == resq::state::STATE_PREFIX)
        .collect();
    assert_eq!(state.len(), 1, "{rules:?}");
    assert_eq!(state[0]["Status"], "Enabled");
    let days = number(&state[0]["ExpirationInDays"]);
    assert_eq!(days, 30.0);
    // a pause resq holds ends before the main queue's longest retention: its record outlives it
    assert!(
        days * 86_400.0 > number(&t["Parameters"]["OrdersRetentionSeconds"]["MaxValue"]),
        "a pause record may expire while its pause holds"
    );
    // the bucket is versioned: an expired entry's old version goes too, by the bucket-wide rule
    let tidy: Vec<&Value> = rules
        .iter()
        .filter(|r| r.get("Prefix").is_none() && r["NoncurrentVersionExpiration"].is_object())
        .collect();
    assert_eq!(tidy.len(), 1, "{rules:?}");
    assert_eq!(
        number(&tidy[0]["NoncurrentVersionExpiration"]["NoncurrentDays"]),
        30.0
    );
}

#[test]
fn the_consumers_mapping_counts_its_events_and_takes_provisioned_pollers_or_a_cap_never_both() {
    let t = translated_template("resq-artifacts");
    let esm = &t["Resources"]["ConsumerFunctionOrders"]["Properties"];
    // the mapping's event counts (AWS/Lambda PolledEventCount, ...) under every parameter set
    assert_eq!(esm["MetricsConfig"], json!({"Metrics": ["EventCount"]}));
    let deployed = |params: &[(&str, &str)]| {
        let r = resq_local::stack::Resolver::new(&t, "stk", params);
        let cap = r
            .decided(&esm["ScalingConfig"])
            .and_then(|s| r.value(&s["MaximumConcurrency"]));
        let pollers = r.decided(&esm["ProvisionedPollerConfig"]).map(|p| {
            (
                r.value(&p["MinimumPollers"]).unwrap(),
                r.value(&p["MaximumPollers"]).unwrap(),
            )
        });
        (cap, pollers)
    };
    // GIVEN the defaults THEN on-demand pollers, capped by ConsumerMaximumConcurrency
    assert_eq!(deployed(&[]), (Some("10".to_owned()), None));
    // GIVEN provisioned mode THEN the pollers, and no MaximumConcurrency (Lambda refuses both)
    assert_eq!(
        deployed(&[
            ("ConsumerMinimumPollers", "2"),
            ("ConsumerMaximumPollers", "20")
        ]),
        (None, Some(("2".to_owned(), "20".to_owned())))
    );
    // AND the redriver's memory is a parameter, 1,024 MB by default (its CPU share drains at
    // 2,500/s and more: bench/RESULTS.md)
    let redriver = &t["Resources"]["RedriverFunction"]["Properties"];
    assert_eq!(redriver["MemorySize"], json!({"Ref": "RedriverMemorySize"}));
    assert_eq!(
        number(&t["Parameters"]["RedriverMemorySize"]["Default"]),
        1024.0
    );
}
