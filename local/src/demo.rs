//! `resq demo`: the whole pipeline on the local emulator, faults included, then an audit of
//! every order: nothing may be lost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::MessageAttributeValue;
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use resq::config::CommonConfig;
use resq::store::S3Store;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::handler::{HandlerError, RecordMeta};
use resq_consumer::order::Order;
use resq_consumer::order::{OrderHandler, RecordOrder};
use resq_redriver::config::{PermanentAction, RedriverConfig};
use tokio::sync::watch;

use crate::CliError;
use crate::emulator::{Emulator, EmulatorKind, Installs};
use crate::pipeline::{Counters, Pipeline, PipelineSettings};
use crate::stack::{StackOutputs, deploy_stack};
use resq_ops::context::Context;
use resq_ops::orders::{self, Kind, Outgoing};

/// Every demo message carries its order id here, so the audit finds malformed ones too.
pub const DEMO_ORDER_ATTRIBUTE: &str = "demo-order-id";

/// What the demo does.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Orders to send.
    pub orders: usize,
    /// % not JSON.
    pub malformed_pct: f64,
    /// % invalid.
    pub invalid_pct: f64,
    /// % failing transiently 1–3 times, then succeeding.
    pub flaky_pct: f64,
    /// % failing every time (they end in the archive after the redrive cap).
    pub doomed_pct: f64,
    /// Which emulator.
    pub emulator: EmulatorKind,
    /// Where the emulators are installed.
    pub installs: Installs,
    /// The translated template (`infra/translate.py` output).
    pub template: PathBuf,
    /// Stop waiting for the pipeline to settle after this long.
    pub max_duration: Duration,
    /// Random seed (the same seed gives the same orders).
    pub seed: u64,
}

/// The intended fate of a demo order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Plan {
    /// Valid, succeeds first time.
    Valid,
    /// Valid, fails transiently a few times first.
    Flaky,
    /// Valid, always fails transiently.
    Doomed,
    /// Not JSON.
    Malformed,
    /// Not a valid order.
    Invalid,
}

/// Which orders' downstream fails, and how often: the flaky and doomed orders of a plan.
#[derive(Debug, Clone, Default)]
pub struct Downstream {
    /// Order id → failures left before its write goes through.
    pub flaky: HashMap<String, u32>,
    /// Orders whose write always fails.
    pub doomed: HashSet<String>,
    /// The downstream is down: every order write fails.
    pub outage: bool,
}

impl Downstream {
    /// The downstream failures `planned` (as from [`plan_orders`]) calls for.
    pub fn of(planned: &[(Outgoing, Plan, u32)]) -> Self {
        let ids = |plan: Plan| {
            planned
                .iter()
                .filter(move |(_, p, _)| *p == plan)
                .map(|(o, _, n)| (o.order_id.clone(), *n))
        };
        Self {
            flaky: ids(Plan::Flaky).collect(),
            doomed: ids(Plan::Doomed).map(|(id, _)| id).collect(),
            outage: false,
        }
    }
}

/// The demo's handler: the reference handler behind injected transient failures (a flaky
/// downstream). Production code has no such switch.
pub struct DemoFaults<H> {
    inner: H,
    flaky: Mutex<HashMap<String, u32>>,
    doomed: HashSet<String>,
}

impl<H: OrderHandler> OrderHandler for DemoFaults<H> {
    async fn handle(&self, order: &Order, meta: &RecordMeta<'_>) -> Result<(), HandlerError> {
        let id = order.order_id.as_str();
        if self.doomed.contains(id) {
            return Err(HandlerError::transient(
                "DEMO_DOWNSTREAM_DOWN",
                "the payment service rejects this order every time",
            ));
        }
        let fail = {
            let mut flaky = self.flaky.lock().unwrap_or_else(|e| e.into_inner());
            match flaky.get_mut(id) {
                Some(left) if *left > 0 => {
                    *left -= 1;
                    true
                }
                _ => false,
            }
        };
        if fail {
            return Err(HandlerError::transient(
                "DEMO_DOWNSTREAM_FLAKY",
                "503 from the payment service",
            ));
        }
        self.inner.handle(order, meta).await
    }
}

/// Where each order ended, found by looking, not by arithmetic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    /// Orders sent.
    pub sent: usize,
    /// With an order record (`orders/{id}.json`).
    pub processed: usize,
    /// In the DLQ.
    pub dead_lettered: usize,
    /// In the archive.
    pub archived: usize,
    /// Still in the main queue or the DLQ.
    pub in_queues: usize,
    /// Found nowhere.
    pub lost: Vec<String>,
    /// Order records written more than once (stored versions beyond the first).
    pub duplicate_effects: usize,
    /// The highest `x-redrive-count` found in the archive or the queues.
    pub max_redrives: u32,
    /// Plan × where it ended → count.
    pub table: BTreeMap<(Plan, &'static str), usize>,
    /// Order id → where it ended (`processed`, `archived`, `DLQ`, `main queue`, `LOST`).
    pub places: HashMap<String, &'static str>,
    /// The messages left in the DLQ by (`x-failure-class`, `x-failure-reason`), `None` where
    /// a message has none: every message, not only one per order.
    pub dlq_by_reason: BTreeMap<(Option<String>, Option<String>), usize>,
    /// The emulator it ran on.
    pub emulator: Option<EmulatorKind>,
    /// Every message found in a queue: (in the DLQ, its `SentTimestamp`), for its age.
    pub queued: Vec<(bool, Option<u64>)>,
}

impl Audit {
    /// The lost orders in words; `None` when nothing was lost.
    pub fn lost_orders(&self) -> Option<String> {
        (!self.lost.is_empty())
            .then(|| format!("{} orders lost: {}", self.lost.len(), self.lost.join(", ")))
    }

    /// Notes a message left in the DLQ, with its `x-failure-class` and `x-failure-reason`.
    pub fn dead_letter(&mut self, class: Option<&str>, reason: Option<&str>) {
        let key = (class.map(str::to_owned), reason.map(str::to_owned));
        *self.dlq_by_reason.entry(key).or_default() += 1;
    }

    /// The messages left in the DLQ whose failure is not explained: those without
    /// `x-failure-class` (SQS moved them after invocations that crashed or timed out), and the
    /// redriver's copies of such dead letters, which say only that (`INVOCATION_FAILED`; the
    /// consumer never writes that reason).
    pub fn unexplained(&self) -> usize {
        let invocation_failed = resq::reason::FailureReason::InvocationFailed.code();
        self.dlq_by_reason
            .iter()
            .filter(|((class, reason), _)| {
                class.is_none() || reason.as_deref() == Some(invocation_failed)
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// What is left in the DLQ by class and reason, in words (`none` when it is empty).
    pub fn dlq_reasons(&self) -> String {
        if self.dlq_by_reason.is_empty() {
            return "none".to_owned();
        }
        let named = |v: &Option<String>| v.clone().unwrap_or_else(|| "(none)".to_owned());
        self.dlq_by_reason
            .iter()
            .map(|((class, reason), n)| format!("{}/{} {n}", named(class), named(reason)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The demo's last line.
    pub fn summary_line(&self) -> String {
        format!(
            "summary: sent={} processed={} dead_lettered={} archived={} in_queues={} lost={} duplicate_effects={}{}",
            self.sent,
            self.processed,
            self.dead_lettered,
            self.archived,
            self.in_queues,
            self.lost.len(),
            self.duplicate_effects,
            self.emulator
                .map(|e| format!(" emulator={e}"))
                .unwrap_or_default()
        )
    }
}

/// The orders of a run and their intended fates: each order, its plan, and for a flaky order
/// how many times it fails first (1 to `max_failures`).
pub fn plan_orders(
    opts: &DemoOptions,
    max_failures: u32,
    rng: &mut StdRng,
) -> Vec<(Outgoing, Plan, u32)> {
    // spread over tenants as a fair queue sees them: a third under one noisy tenant
    let orders = orders::generate(
        "DEMO-",
        opts.orders,
        opts.malformed_pct,
        opts.invalid_pct,
        rng,
    );
    orders::with_tenants(orders, rng)
        .into_iter()
        .map(|o| {
            let plan = match o.kind {
                Kind::Malformed => Plan::Malformed,
                Kind::Invalid => Plan::Invalid,
                Kind::Valid => {
                    let roll: f64 = rng.random_range(0.0..100.0);
                    let scale = 100.0 / (100.0 - opts.malformed_pct - opts.invalid_pct).max(1.0);
                    if roll < opts.doomed_pct * scale {
                        Plan::Doomed
                    } else if roll < (opts.doomed_pct + opts.flaky_pct) * scale {
                        Plan::Flaky
                    } else {
                        Plan::Valid
                    }
                }
            };
            let failures = if plan == Plan::Flaky {
                rng.random_range(1..=max_failures.max(1))
            } else {
                0
            };
            (o, plan, failures)
        })
        .collect()
}

/// The attribute every demo (and chaos) message carries: its order id.
pub fn order_tag(o: &Outgoing) -> HashMap<String, MessageAttributeValue> {
    HashMap::from([(
        DEMO_ORDER_ATTRIBUTE.to_owned(),
        MessageAttributeValue::builder()
            .data_type("String")
            .string_value(&o.order_id)
            .build()
            .expect("a string attribute with a value builds"),
    )])
}

async fn depth(sqs: &aws_sdk_sqs::Client, url: &str) -> (u64, u64) {
    resq_ops::status::depth(sqs, url).await.unwrap_or((0, 0))
}

/// Runs the demo and returns its audit. The emulator stops when this returns (or is dropped
/// on Ctrl-C).
pub async fn run(opts: &DemoOptions) -> Result<Audit, CliError> {
    let template = std::fs::read_to_string(&opts.template).map_err(|e| {
        CliError::Usage(format!(
            "cannot read the translated template {}: {e} (make demo translates it first)",
            opts.template.display()
        ))
    })?;
    println!("starting {} …", opts.emulator);
    let emulator = Emulator::start(opts.emulator, &opts.installs)?;
    println!("{} on {}", opts.emulator, emulator.endpoint());
    let config = emulator.sdk_config().await;
    // short timeouts so the demo settles in about two minutes
    let outputs = deploy_stack(
        opts.emulator,
        &config,
        &template,
        "resq-demo",
        &[
            ("MaxReceiveCount", "2"),
            ("ConsumerTimeout", "10"),
            ("RedriverSchedule", "rate(1 minute)"),
        ],
    )
    .await?;
    println!(
        "stack resq-demo created: {} → {}",
        outputs.main_queue_url, outputs.dlq_url
    );

    let mut rng = StdRng::seed_from_u64(opts.seed);
    let planned = plan_orders(opts, 3, &mut rng);
    let plans: HashMap<String, Plan> = planned
        .iter()
        .map(|(o, p, _)| (o.order_id.clone(), *p))
        .collect();
    let downstream = Downstream::of(&planned);
    let handler = DemoFaults {
        inner: RecordOrder::new(S3Store::new(resq::aws::s3_client(&config), &outputs.bucket)),
        flaky: Mutex::new(downstream.flaky),
        doomed: downstream.doomed,
    };
    let (consumer_config, redriver_config) = configs(&outputs, PermanentAction::Keep);
    let settings = PipelineSettings {
        batch_size: 10,
        batching_window: Duration::from_millis(500),
        // moto's SQS is not safe under concurrent receives of one queue (it answers 500 now
        // and then, with the messages already hidden): one poller at a time
        pollers: 1,
        consumer_timeout: Duration::from_secs(5),
        redrive_every: Duration::from_secs(5),
        redriver_timeout: Duration::from_secs(60),
    };
    let pipeline = Pipeline::new(
        &config,
        outputs.clone(),
        handler,
        consumer_config,
        redriver_config,
        settings,
    );
    let ctx = outputs.context(&config);

    let (stop_tx, stop_rx) = watch::channel(false);
    let driver = drive(
        &ctx,
        &planned,
        &pipeline.counters,
        opts.max_duration,
        stop_tx,
    );
    let ((), sent) = tokio::join!(pipeline.run(stop_rx), driver);
    let sent = sent?;
    println!("pipeline stopped; auditing every order …");
    let mut audit = audit(&ctx, &plans, sent).await?;
    audit.emulator = Some(opts.emulator);
    drop(emulator);
    Ok(audit)
}

/// Feeds the queue progressively (moto slows down with depth), shows progress, and stops the
/// pipeline once it has settled.
async fn drive(
    ctx: &Context,
    planned: &[(Outgoing, Plan, u32)],
    counters: &Counters,
    max: Duration,
    stop: watch::Sender<bool>,
) -> Result<usize, CliError> {
    let started = Instant::now();
    let mut next = 0;
    // redriver runs counted when the main queue went quiet; settled once a later run
    // (started after that moment) found nothing to move
    let mut quiet_since_runs: Option<u64> = None;
    let mut last_print = Instant::now() - Duration::from_secs(10);
    let result = loop {
        let (visible, in_flight) = depth(&ctx.sqs, &ctx.main_queue_url).await;
        let (dlq_visible, dlq_in_flight) = depth(&ctx.sqs, &ctx.dlq_url).await;
        if next < planned.len() && visible + in_flight < 150 {
            let chunk: Vec<Outgoing> = planned[next..(next + 50).min(planned.len())]
                .iter()
                .map(|(o, _, _)| o.clone())
                .collect();
            match resq_ops::status::send(ctx, &chunk, order_tag).await {
                Ok(report) if report.failed.is_empty() => next += chunk.len(),
                Ok(report) => {
                    break Err(CliError::Usage(format!(
                        "the emulator refused {} orders",
                        report.failed.len()
                    )));
                }
                Err(e) => break Err(e),
            }
        }
        if last_print.elapsed() >= Duration::from_secs(2) {
            last_print = Instant::now();
            println!(
                "[{:>4}s] sent {}/{}  processed {}  retried {}  dead-lettered {}  in DLQ {}  redriven {}  archived {}  main queue {}+{} in flight  redrive runs {}",
                started.elapsed().as_secs(),
                next,
                planned.len(),
                Counters::get(&counters.processed),
                Counters::get(&counters.retried),
                Counters::get(&counters.dead_lettered),
                dlq_visible + dlq_in_flight,
                Counters::get(&counters.redriven),
                Counters::get(&counters.archived),
                visible,
                in_flight,
                Counters::get(&counters.redrive_runs),
            );
        }
        // settled: everything sent, the main queue empty, and a redriver run that started
        // after that found nothing to move (the DLQ holds only what waits for a human)
        // (the DLQ's in-flight messages are the redriver's own, hidden during its run)
        let quiet = next == planned.len() && visible + in_flight == 0;
        let runs = Counters::get(&counters.redrive_runs);
        quiet_since_runs = if quiet {
            Some(quiet_since_runs.unwrap_or(runs))
        } else {
            None
        };
        if quiet_since_runs.is_some_and(|at| runs >= at + 2)
            && counters.last_run_moved.load(Ordering::Relaxed) == 0
        {
            break Ok(next);
        }
        if started.elapsed() > max {
            println!(
                "not settled after {}s; stopping and auditing what is there",
                max.as_secs()
            );
            break Ok(next);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = stop.send(true);
    result
}

/// How long the audit hides the messages it receives at most (it releases them at once).
const AUDIT_VISIBILITY: i32 = 600;

/// Looks for every sent order: order records, archive entries, both queues, each read once by
/// the operator tool's locator (`resq find`'s, [`resq_ops::locate`]). The first `sent` order
/// ids of `plans`, in sorted order (the order they were sent in), count as sent.
pub async fn audit(
    ctx: &Context,
    plans: &HashMap<String, Plan>,
    sent: usize,
) -> Result<Audit, CliError> {
    use resq_ops::locate::{Identity, LookOptions, QueueLook, Wanted, locate};
    // the permanent failures the redriver kept are hidden in the DLQ until their TTL: made
    // visible first, as an operator would (`resq dlq peek --kept`), so that the look receives
    // them with their failure class and reason
    resq_ops::dlq::unhide_kept(ctx, None).await?;
    let everything = QueueLook {
        limit: usize::MAX,
        visibility: AUDIT_VISIBILITY,
    };
    let options = LookOptions {
        main_queue: everything,
        count_main_queue: false,
        dlq: everything,
        kept: false,
        archive_since: None,
        identity: Identity {
            attribute: Some(DEMO_ORDER_ATTRIBUTE.to_owned()),
            ..Identity::default()
        },
        group: None,
        receive_wait: 0,
    };
    let look = locate(ctx, &Wanted::All, &options).await?;
    Ok(Audit::of(&look, plans, sent))
}

impl Audit {
    /// Where each of the first `sent` orders of `plans` (sorted) ended, from a look at
    /// everything: its order record if it has one (each stored version one effect write), else
    /// its archive entry, else its copy in the main queue, else in the DLQ; lost when none.
    pub fn of(look: &resq_ops::locate::Look, plans: &HashMap<String, Plan>, sent: usize) -> Self {
        use resq_ops::locate::Place;
        let mut audit = Audit {
            sent,
            ..Default::default()
        };
        let mut found: HashMap<&str, (u8, &'static str)> = HashMap::new();
        for s in &look.sightings {
            let (rank, place) = match &s.place {
                Place::Recorded(r) => {
                    audit.duplicate_effects += r.writes.saturating_sub(1);
                    (0, "processed")
                }
                Place::Archived(a) => {
                    audit.max_redrives = audit.max_redrives.max(a.redrive_count.unwrap_or(0));
                    (1, "archived")
                }
                Place::MainQueue(q) => {
                    audit.queued.push((false, q.sent_at));
                    audit.max_redrives = audit.max_redrives.max(q.redrives().unwrap_or(0));
                    (2, "main queue")
                }
                Place::Dlq(q) => {
                    audit.queued.push((true, q.sent_at));
                    audit.max_redrives = audit.max_redrives.max(q.redrives().unwrap_or(0));
                    audit.dead_letter(q.failure_class.as_deref(), q.failure_reason.as_deref());
                    (3, "DLQ")
                }
                Place::Kept(k) => {
                    audit.dead_letter(
                        Some(resq::attributes::FAILURE_CLASS_PERMANENT),
                        k.failure_reason.as_deref(),
                    );
                    (3, "DLQ")
                }
            };
            if let Some(id) = s.order_id.as_deref() {
                let best = found.entry(id).or_insert((rank, place));
                if rank < best.0 {
                    *best = (rank, place);
                }
            }
        }
        let mut sent_ids: Vec<(&String, &Plan)> = plans.iter().collect();
        sent_ids.sort();
        for (id, plan) in sent_ids.into_iter().take(sent) {
            let place = found.get(id.as_str()).map_or("LOST", |(_, p)| *p);
            *audit.table.entry((*plan, place)).or_default() += 1;
            audit.places.insert(id.clone(), place);
            match place {
                "processed" => audit.processed += 1,
                "archived" => audit.archived += 1,
                "DLQ" => {
                    audit.dead_lettered += 1;
                    audit.in_queues += 1;
                }
                "main queue" => audit.in_queues += 1,
                _ => audit.lost.push(id.clone()),
            }
        }
        audit
    }
}

/// The final table: where each kind of order ended.
pub fn table(audit: &Audit) -> String {
    let places = ["processed", "archived", "DLQ", "main queue", "LOST"];
    let mut out = format!("{:<10}", "order");
    for p in places {
        out.push_str(&format!(" {p:>13}"));
    }
    out.push('\n');
    for plan in [
        Plan::Valid,
        Plan::Flaky,
        Plan::Doomed,
        Plan::Malformed,
        Plan::Invalid,
    ] {
        out.push_str(&format!("{:<10}", format!("{plan:?}").to_lowercase()));
        for p in places {
            out.push_str(&format!(
                " {:>13}",
                audit.table.get(&(plan, p)).copied().unwrap_or(0)
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "left in the DLQ by class/reason: {} (unexplained: {})\n",
        audit.dlq_reasons(),
        audit.unexplained()
    ));
    out
}
/// The two functions' configurations on `outputs`' stack, as the demo and the chaos run set
/// them: a redrive cap of 3, a second's deadline margin, a backoff of 1–2 s, 200 replays a
/// second, a day's TTL, permanent failures kept or archived as `permanent_action` says.
pub fn configs(
    outputs: &StackOutputs,
    permanent_action: PermanentAction,
) -> (ConsumerConfig, RedriverConfig) {
    let common = CommonConfig {
        main_queue_url: outputs.main_queue_url.clone(),
        dlq_url: outputs.dlq_url.clone(),
        archive_bucket: outputs.bucket.clone(),
        max_redrive_attempts: resq::config::DEFAULT_MAX_REDRIVE_ATTEMPTS,
        deadline_margin: Duration::from_millis(resq::config::DEFAULT_DEADLINE_MARGIN_MS),
    };
    let consumer = ConsumerConfig {
        common: common.clone(),
        concurrency: resq_consumer::concurrency::Concurrency::Auto,
        backoff: resq_consumer::backoff::Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(2),
        },
        idempotency_window: Duration::from_secs(
            resq_consumer::config::DEFAULT_IDEMPOTENCY_WINDOW_SECONDS,
        ),
        retry_budget_percent: Some(resq_consumer::config::DEFAULT_RETRY_BUDGET_PERCENT),
    };
    let redriver = RedriverConfig {
        common,
        rate_per_second: 200.0,
        max_messages_per_run: None,
        kept_in_flight_max: resq_redriver::config::DEFAULT_KEPT_IN_FLIGHT_MAX,
        archive_after: Duration::from_secs(resq_redriver::config::DEFAULT_ARCHIVE_AFTER_SECONDS),
        permanent_action,
        pause_on_alarms: Vec::new(),
        pause_consumer_on_alarms: Vec::new(),
        consumer_mapping: None,
        rate_max: 200.0,
        archive_sweep: Duration::from_secs(resq_redriver::config::DEFAULT_ARCHIVE_SWEEP_SECONDS),
    };
    (consumer, redriver)
}
