//! The CI-sized soak (`make soak` runs a longer one): the pipeline over time on LocalStack,
//! whose CloudWatch evaluates the template's breaker alarms from the functions' metric lines
//! (and Lambda's `Errors`). A burst of permanent failures a hundred times the replayable
//! messages behind it; a consumer that crashes on every invocation, then is fixed (nothing
//! archived unrun, the DLQ drained at the configured rate); a downstream outage that makes
//! replays fail, then recovery.

use std::time::Duration;

use resq_e2e::{function_binary, localstack_python, moto_binary, translated_template_file};
use resq_local::soak::{self, MAX_REDRIVE_ATTEMPTS, SoakOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_time_nothing_is_lost_starved_or_replayed_past_the_cap_and_the_breaker_holds() {
    if resq_e2e::emulator_kind() == resq_e2e::EmulatorKind::Localstack {
        eprintln!("skipped: the soak runs on LocalStack in the suite's first run already");
        return;
    }
    let dir = std::env::temp_dir().join(format!("resq-soak-{}", std::process::id()));
    let template = translated_template_file(&dir);
    let opts = SoakOptions {
        localstack_python: localstack_python(),
        moto_server: moto_binary(),
        template,
        consumer_bin: function_binary("consumer"),
        redriver_bin: function_binary("redriver"),
        log_dir: dir.clone(),
        schedule_every: Duration::from_secs(2),
        max_messages_per_run: None,
        rate_per_second: 10,
        probes: 5,
        burst_factor: 100,
        crash_orders: 500,
        warmup_orders: 10,
        outage_rate: 20.0,
        outage_periods: 12,
        recovery_orders: 500,
        ttl: Duration::from_secs(300),
        alarm_period: Duration::from_secs(10),
        hold_periods: 3,
        threshold: 2,
        max_duration: Duration::from_secs(600),
        seed: 5,
    };
    let report = soak::run(&opts).await.unwrap();
    println!(
        "alarm states: {:?}\n{}",
        report.alarm_states,
        report.summary_line()
    );
    assert_eq!(report.failures(), Vec::<String>::new());
    assert!(report.settled, "the pipeline did not drain");
    assert_eq!(report.probes, 5);
    assert_eq!(report.starved, 0);
    assert!(report.audit.lost.is_empty());
    assert_eq!(report.audit.duplicate_effects, 0);
    assert!(report.max_replays <= MAX_REDRIVE_ATTEMPTS);
    assert!(report.paused_runs > 0 && report.resumed);
    assert!(report.archived_while_paused > 0);
    // the consumer's crash paused replay, archived nothing unrun, and the drain after the fix
    // ran at the configured rate
    assert!(report.consumer_errors_fired && report.crash_paused_runs > 0);
    assert_eq!(report.unrun_archived, 0);
    let error = report
        .drain_rate_error_pct()
        .expect("the drain rate was measured");
    assert!(
        error.abs() <= soak::DRAIN_RATE_TOLERANCE_PCT,
        "full runs (achieved, paced): {:?}",
        report
            .full_runs
            .iter()
            .map(|r| (r.achieved, r.paced))
            .collect::<Vec<_>>()
    );
    // the kept burst ended in the archive (its TTL passed), not lost and not replayed
    assert_eq!(
        report
            .audit
            .table
            .get(&(resq_local::demo::Plan::Malformed, "archived")),
        Some(&500),
        "{:?}",
        report.audit.table
    );
    let _ = std::fs::remove_dir_all(&dir);
}
