//! The CI-sized chaos run (`make chaos` runs the full-sized one): the real `consumer` and
//! `redriver` binaries, 5 % of their SQS and S3 calls failing, both killed mid-invocation,
//! then every order looked for.

use std::time::Duration;

use std::collections::BTreeSet;

use resq_e2e::{
    emulator_kind, function_binary, installs, translated_template_file, workspace_root,
};
use resq_local::chaos::{self, ChaosOptions, MAX_REDRIVE_ATTEMPTS};
use resq_local::demo::{DemoOptions, Plan};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_with_500_orders_loses_nothing_and_doubles_nothing() {
    let dir = std::env::temp_dir().join(format!("resq-chaos-{}", std::process::id()));
    let template = translated_template_file(&dir);
    let opts = ChaosOptions {
        demo: DemoOptions {
            orders: 500,
            malformed_pct: 2.5,
            invalid_pct: 2.5,
            flaky_pct: 10.0,
            doomed_pct: 3.0,
            emulator: emulator_kind(),
            installs: installs(),
            template,
            max_duration: Duration::from_secs(600),
            seed: 11,
        },
        max_flaky_failures: 5,
        fault_pct: 5.0,
        consumer_kills: 2,
        redriver_kills: 2,
        consumer_bin: function_binary("consumer"),
        redriver_bin: function_binary("redriver"),
        log_dir: dir.clone(),
        sdk_attempts: 1,
        // the default: permanent failures wait in the DLQ for a human
        permanent_action: resq_redriver::config::PermanentAction::Keep,
    };
    let report = chaos::run(&opts).await.unwrap();
    println!("{}\n{}", report.details(), report.summary_line());
    assert_eq!(report.failures(&opts), Vec::<String>::new());
    assert!(report.settled, "the pipeline did not settle");
    assert_eq!(report.audit.sent, 500);
    assert!(report.audit.lost.is_empty());
    assert_eq!(report.duplicate_effects(), 0);
    assert!(report.max_redrives() <= MAX_REDRIVE_ATTEMPTS);
    assert!(report.consumer_kills >= 2 && report.redriver_kills >= 2);
    // dead letters without a reason come only from the run's kills (every dead letter says why, docs/guarantees.md):
    // what is left in the DLQ without x-failure-class, or as the redriver's INVOCATION_FAILED
    // copy of such, is within the kills the run made
    let kills = (report.consumer_kills + report.redriver_kills) as usize;
    assert!(
        report.audit.unexplained() <= kills,
        "{} unexplained dead letters left after {kills} kills: {}",
        report.audit.unexplained(),
        report.audit.dlq_reasons()
    );
    // over the whole run: the consumer dead-letters every failure it saw on its last allowed
    // receive, with its reason, so SQS moved without one only what a killed invocation held
    // (a batch of at most 10 records each), a record whose DLQ copy was not confirmed, and a
    // failure on its last receive left to SQS while the queue's limits could not be read
    // (a fault on the consumer's GetQueueAttributes): its retry line shows that receive (a
    // failure's, or a redelivery's held back by the retry budget)
    let consumer_log = std::fs::read_to_string(dir.join("consumer.log")).unwrap();
    let unconfirmed = consumer_log
        .lines()
        .filter(|l| l.contains("\"DLQ_SEND_FAILED\"") || l.contains("\"SETTLE_DEADLINE\""))
        .count() as u64;
    let blind = consumer_log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            // a failure, or a redelivery the retry budget held back without running
            (l["message"] == "failed; will be retried"
                || l["message"] == "record reported failed without running")
                && l["receive_count"].as_u64() >= Some(u64::from(chaos::MAX_RECEIVE_COUNT))
        })
        .count() as u64;
    assert!(
        report.unexplained_seen <= u64::from(report.consumer_kills) * 10 + unconfirmed + blind,
        "{} dead letters without a reason over the run, after {} consumer kills, {unconfirmed} unconfirmed DLQ copies and {blind} retries on a last receive while the queue's limits were unknown",
        report.unexplained_seen,
        report.consumer_kills
    );
    assert!(
        report.injected_faults > 0 && report.lost_responses > 0,
        "faults were injected"
    );
    // every call the real binaries made is one their roles grant (failures() above says which
    // not), and the run needed every permission their code lists but those it cannot reach:
    // the check saw each other kind of call it is meant to judge
    assert!(report.ungranted().is_empty());
    let unexercised = |function: &str| -> Vec<(&str, &str)> {
        report
            .unexercised(function)
            .iter()
            .map(|p| (p.action, p.resource))
            .collect()
    };
    assert_eq!(
        unexercised("consumer"),
        // the consumer archives only a count past the cap, which only a tool other than the
        // redriver produces (docs/design.md, "Record checks" step 1; tests/e2e/consumer.rs
        // covers it); no order of the run is a pointer or too large for a copy (both
        // functions' payload calls: tests/e2e/payloads.rs)
        [
            ("s3:GetObject", "ArchiveBucket/payloads/*"),
            ("s3:GetObject", "ProducerPayloadBucket/*"),
            ("s3:ListBucket", "ArchiveBucket if s3:prefix=payloads/*"),
            ("s3:ListBucket", "ProducerPayloadBucket"),
            ("s3:PutObject", "ArchiveBucket/archive/*"),
            ("s3:PutObject", "ArchiveBucket/payloads/*"),
        ]
    );
    assert_eq!(
        unexercised("redriver"),
        // the breakers' alarms: this run sets no PAUSE_ON_ALARMS and no consumer breaker (the
        // soak runs both, on LocalStack's CloudWatch and moto's Lambda API: the mapping, the
        // main queue's retention and depth, its oldest age), and so no paused run sends a dead
        // letter's explained copy back into the DLQ (the soak's crash phase does); every run
        // reads the keep lists (to count the kept messages hidden against KEPT_IN_FLIGHT_MAX)
        [
            ("cloudwatch:DescribeAlarmHistory", "alarm:consumer-errors"),
            (
                "cloudwatch:DescribeAlarmHistory",
                "alarm:dead-letters-unexplained"
            ),
            (
                "cloudwatch:DescribeAlarmHistory",
                "alarm:downstream-failing"
            ),
            ("cloudwatch:DescribeAlarmHistory", "alarm:replays-failing"),
            ("cloudwatch:DescribeAlarms", "alarm:consumer-errors"),
            (
                "cloudwatch:DescribeAlarms",
                "alarm:dead-letters-unexplained"
            ),
            ("cloudwatch:DescribeAlarms", "alarm:downstream-failing"),
            ("cloudwatch:DescribeAlarms", "alarm:replays-failing"),
            ("cloudwatch:GetMetricData", "*"),
            ("lambda:GetEventSourceMapping", "ConsumerEventSourceMapping"),
            (
                "lambda:UpdateEventSourceMapping",
                "ConsumerEventSourceMapping"
            ),
            ("s3:GetObject", "ArchiveBucket/payloads/*"),
            ("s3:GetObject", "ProducerPayloadBucket/*"),
            ("s3:ListBucket", "ArchiveBucket if s3:prefix=payloads/*"),
            ("s3:ListBucket", "ProducerPayloadBucket"),
            ("s3:PutObject", "ArchiveBucket/payloads/*"),
            ("sqs:GetQueueAttributes", "OrdersQueue"),
            ("sqs:SendMessage", "DeadLetterQueue"),
        ]
    );
    for plan in [Plan::Doomed, Plan::Malformed, Plan::Invalid] {
        assert_eq!(
            report.audit.table.get(&(plan, "processed")),
            None,
            "{plan:?} orders can never be processed"
        );
    }
    the_readmes_logs_query_follows_an_order_through_both_functions(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example order of the queries in the README and the docs (`ORD-1001`): the value a
/// query's order clause names, replaced by each order followed.
const EXAMPLE_ORDER: &str = "ORD-1001";

/// A CloudWatch Logs Insights query as far as these tests read one: the fields it shows and
/// its filter, a conjunction of `field = "value"` clauses (what the README's and the docs'
/// queries use).
struct Insights {
    fields: Vec<String>,
    filter: Vec<(String, String)>,
}

impl Insights {
    /// The query in the first fenced block after `marker` in `file` (from the workspace root).
    fn in_file(file: &str, marker: &str) -> Self {
        let text = std::fs::read_to_string(workspace_root().join(file)).unwrap();
        let from = text
            .find(marker)
            .unwrap_or_else(|| panic!("{file}: no {marker:?}"));
        let block = text[from..]
            .split("```")
            .nth(1)
            .unwrap_or_else(|| panic!("{file}: no query after {marker:?}"));
        let mut q = Insights {
            fields: Vec::new(),
            filter: Vec::new(),
        };
        for command in block
            .lines()
            .map(|l| l.trim().trim_start_matches('|').trim())
        {
            if let Some(fields) = command.strip_prefix("fields ") {
                q.fields = fields.split(',').map(|f| f.trim().to_owned()).collect();
            } else if let Some(filter) = command.strip_prefix("filter ") {
                for clause in filter.split(" and ") {
                    let (field, value) = clause
                        .split_once(" = ")
                        .unwrap_or_else(|| panic!("{file}: not FIELD = \"VALUE\": {clause}"));
                    let value = value.trim();
                    assert!(
                        value.len() >= 2 && value.starts_with('"') && value.ends_with('"'),
                        "{file}: {clause}"
                    );
                    q.filter.push((
                        field.trim().to_owned(),
                        value[1..value.len() - 1].to_owned(),
                    ));
                }
            }
        }
        assert!(!q.filter.is_empty(), "{file}: the query has no filter");
        q
    }

    /// The field of the clause naming the example order (exactly one).
    fn order_field(&self) -> &str {
        let order: Vec<&str> = self
            .filter
            .iter()
            .filter(|(_, v)| v == EXAMPLE_ORDER)
            .map(|(f, _)| f.as_str())
            .collect();
        assert_eq!(
            order.len(),
            1,
            "one clause names {EXAMPLE_ORDER}: {:?}",
            self.filter
        );
        order[0]
    }

    /// Whether the query keeps `line` when it looks for `order` instead of the example.
    fn keeps(&self, line: &Value, order: &str) -> bool {
        self.filter.iter().all(|(field, value)| {
            let wanted = if value == EXAMPLE_ORDER { order } else { value };
            line[field].as_str() == Some(wanted)
        })
    }
}

/// The chaos run's log lines that are JSON objects, with the function that wrote each.
fn run_lines(dir: &std::path::Path) -> Vec<(&'static str, Value)> {
    let mut lines = Vec::new();
    for function in ["consumer", "redriver"] {
        let text = std::fs::read_to_string(dir.join(format!("{function}.log"))).unwrap();
        lines.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| v.is_object())
                .map(|v| (function, v)),
        );
    }
    lines
}

/// Runs the README's query over the chaos run's real log lines: each order the run doomed
/// (archived at the redrive cap) is followed from its failures in the consumer through its
/// trips to the DLQ and its replays to its archive, and the ids link up. Then a Powertools
/// query (the docs') over the same lines finds the same order with Powertools' keys.
fn the_readmes_logs_query_follows_an_order_through_both_functions(dir: &std::path::Path) {
    let query = Insights::in_file("README.md", "Why did a given order fail");
    let field = query.order_field().to_owned();
    let lines = run_lines(dir);
    // every line about a copy names the message it copies; every line naming an order names
    // its message, and the order under the type's own key too
    for (function, l) in &lines {
        if l.get("new_message_id").is_some() || l.get(&field).is_some() {
            assert!(l["message_id"].is_string(), "{function}: {l}");
        }
        if l.get("correlation_id").is_some() {
            assert_eq!(l["correlation_id"], l["order_id"], "{function}: {l}");
        }
    }
    let doomed: BTreeSet<&str> = lines
        .iter()
        .filter(|(f, l)| {
            *f == "redriver" && l["message"] == "archived" && l["reason"] == "REDRIVE_CAP"
        })
        .filter_map(|(_, l)| l[&field].as_str())
        .collect();
    assert!(
        !doomed.is_empty(),
        "no order archived at the cap names its {field}"
    );
    for order in &doomed {
        let found: Vec<&(&str, Value)> = lines
            .iter()
            .filter(|(_, l)| query.keeps(l, order))
            .collect();
        let of = |function: &str, message: &str| -> Vec<&Value> {
            found
                .iter()
                .filter(|(f, l)| *f == function && l["message"] == message)
                .map(|(_, l)| l)
                .collect()
        };
        let failed_in_consumer = found
            .iter()
            .filter(|(f, l)| *f == "consumer" && l["level"] == "WARN")
            .count();
        assert!(
            failed_in_consumer > 0,
            "{order}: no consumer failure in {found:?}"
        );
        let replays = of("redriver", "redriven");
        assert!(!replays.is_empty(), "{order}: no replay in {found:?}");
        // (at least one: a DLQ copy whose send took effect but whose answer was lost leaves the
        // original to be moved too, and the order goes on as two messages; its effect is still
        // recorded once, by orderId)
        assert!(!of("redriver", "archived").is_empty(), "{order}: {found:?}");
        // a replay's new id is the id the consumer then logs the order under
        let consumer_ids: BTreeSet<&str> = found
            .iter()
            .filter(|(f, _)| *f == "consumer")
            .filter_map(|(_, l)| l["message_id"].as_str())
            .collect();
        assert!(
            replays
                .iter()
                .filter_map(|l| l["new_message_id"].as_str())
                .any(|id| consumer_ids.contains(id)),
            "{order}: no replay's new_message_id is a message_id of the consumer's lines: {found:?}"
        );
        // the fields the README shows are on the lines it finds (its own and Powertools')
        for f in query.fields.iter().filter(|f| {
            [
                "message_id",
                "correlation_id",
                "function_request_id",
                "level",
                "message",
            ]
            .contains(&f.as_str())
        }) {
            assert!(
                found.iter().all(|(_, l)| l.get(f).is_some()),
                "{order}: a line without {f}: {found:?}"
            );
        }
    }
    a_powertools_query_reads_the_same_lines(&lines, &doomed);
}

/// A query written for Powertools functions (docs/logs-and-metrics.md) runs unchanged over
/// resq's lines: it finds each order in both functions, and each line it finds carries every
/// field it shows, Powertools Logger's standard keys among them.
fn a_powertools_query_reads_the_same_lines(lines: &[(&str, Value)], orders: &BTreeSet<&str>) {
    let query = Insights::in_file("docs/logs-and-metrics.md", "Powertools' own query");
    assert_eq!(query.order_field(), "correlation_id");
    for key in [
        "service",
        "cold_start",
        "function_request_id",
        "xray_trace_id",
    ] {
        assert!(
            query.fields.iter().any(|f| f == key),
            "the query shows {key}"
        );
    }
    for order in orders {
        let found: Vec<&(&str, Value)> = lines
            .iter()
            .filter(|(_, l)| query.keeps(l, order))
            .collect();
        for function in ["consumer", "redriver"] {
            assert!(
                found.iter().any(|(f, _)| *f == function),
                "{order}: no {function} line: {found:?}"
            );
        }
        for (function, l) in &found {
            for field in query.fields.iter().filter(|f| !f.starts_with('@')) {
                assert!(l.get(field).is_some(), "{function}: no {field} in {l}");
            }
            assert!(l["cold_start"].is_boolean(), "{l}");
            assert!(l["function_memory_size"].is_u64(), "{l}");
            let trace = l["xray_trace_id"].as_str().unwrap_or_default();
            assert!(
                trace.starts_with("1-") && trace.len() == 35,
                "an X-Ray trace id as Powertools logs it: {l}"
            );
        }
    }
    // a process's first invocation is its cold start, and only that one: each trace has one
    // value of cold_start, and the consumer (killed and restarted) had warm invocations too
    let mut by_request: std::collections::BTreeMap<&str, BTreeSet<bool>> = Default::default();
    for (_, l) in lines {
        if let (Some(id), Some(cold)) =
            (l["function_request_id"].as_str(), l["cold_start"].as_bool())
        {
            by_request.entry(id).or_default().insert(cold);
        }
    }
    assert!(
        by_request.values().all(|c| c.len() == 1),
        "an invocation both cold and warm"
    );
    let cold = by_request.values().filter(|c| c.contains(&true)).count();
    assert!(
        cold >= 1 && cold < by_request.len(),
        "{cold} cold of {}",
        by_request.len()
    );
}
