//! The CI-sized chaos run (`make chaos` runs the full-sized one): the real `consumer` and
//! `redriver` binaries, 5 % of their SQS and S3 calls failing, both killed mid-invocation,
//! then every order looked for.

use std::time::Duration;

use resq_e2e::{emulator_kind, function_binary, installs, translated_template_file};
use resq_local::chaos::{self, ChaosOptions, MAX_REDRIVE_ATTEMPTS};
use resq_local::demo::{DemoOptions, Plan};

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
        permanent_action: resq::config::PermanentAction::Keep,
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
    // dead letters without a reason come only from the run's kills (SPEC §1, invariant 8):
    // what is left in the DLQ without x-failure-class, or as the redriver's INVOCATION_FAILED
    // copy of such, is within the kills the run made
    let kills = (report.consumer_kills + report.redriver_kills) as usize;
    assert!(
        report.audit.unexplained() <= kills,
        "{} unexplained dead letters left after {kills} kills: {}",
        report.audit.unexplained(),
        report.audit.dlq_reasons()
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
        // covers it)
        [("s3:PutObject", "ArchiveBucket/archive/*")]
    );
    assert_eq!(
        unexercised("redriver"),
        // the breaker's alarms: this run sets no PAUSE_ON_ALARMS (the soak runs the breaker, on
        // LocalStack's CloudWatch), and so no paused run sends a dead letter's explained copy
        // back into the DLQ (the soak's crash phase does); every run reads the keep lists (to
        // count the kept messages hidden against KEPT_IN_FLIGHT_MAX)
        [
            ("cloudwatch:DescribeAlarmHistory", "alarm:consumer-errors"),
            (
                "cloudwatch:DescribeAlarmHistory",
                "alarm:dead-letters-unexplained"
            ),
            ("cloudwatch:DescribeAlarmHistory", "alarm:replays-failing"),
            ("cloudwatch:DescribeAlarms", "alarm:consumer-errors"),
            (
                "cloudwatch:DescribeAlarms",
                "alarm:dead-letters-unexplained"
            ),
            ("cloudwatch:DescribeAlarms", "alarm:replays-failing"),
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
    let _ = std::fs::remove_dir_all(&dir);
}
