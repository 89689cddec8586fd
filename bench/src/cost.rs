//! Cost per million orders: resq against the seed design (Powertools `BatchProcessor` consumer
//! and the send-each-and-sleep redriver) at given shares of permanent and transient failures,
//! from the bench's measured durations and request counts and the template's defaults. Pure
//! arithmetic; every count is an expected value per [`ORDERS`] orders.
//!
//! - **resq** (docs/design.md, "Consumer" to "Archive"; `consumer::decide`, the settle executor,
//!   `redriver::classify`): a transient failure
//!   is reported and backed off, one `ChangeMessageVisibilityBatch` per invocation that has any;
//!   a permanent one is copied to the DLQ on its first receive, one `SendMessageBatch` per
//!   invocation that has any, and acknowledged. The redriver (`PERMANENT_ACTION=keep`) lists
//!   it in the run's keep list (one S3 PUT) and hides it for at most SQS's 12 h at a time until
//!   its TTL (`ARCHIVE_AFTER_SECONDS`), then archives it (`TTL_EXPIRED`, one conditional S3 PUT)
//!   and deletes it from the DLQ. Nothing is redriven.
//! - **seed design**: failures are reported with no backoff; a permanent failure is received
//!   `maxReceiveCount` times before SQS moves it to the DLQ (not a request), then the redriver
//!   replays it (`SendMessage` and a 1/rate sleep each) and it fails `maxReceiveCount` times
//!   again. That loop has no end (a replay is a new message): [`Assumptions::seed_redrive_passes`]
//!   passes are charged. Re-deliveries ride in full batches: each takes one slot of ten.

use resq::keep::MAX_ENTRIES_PER_LIST;
use resq::sqs::MAX_BATCH;

/// Orders the figures are for.
pub const ORDERS: f64 = 1_000_000.0;
/// Lambda, arm64, us-east-1, per GB-second (AWS Lambda pricing page, first tier).
pub const LAMBDA_GB_SECOND: f64 = 0.0000133334;
/// Lambda, per request ($0.20 per million).
pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
/// SQS standard, per request ($0.40 per million; each 64 KiB chunk of a payload is one
/// request: a batch of ten ~300-byte orders is one).
pub const SQS_REQUEST: f64 = 0.40 / 1e6;
/// S3 Standard PUT ($0.005 per 1,000).
pub const S3_PUT: f64 = 0.005 / 1000.0;
/// S3 Standard GET ($0.0004 per 1,000): nothing here reads the bucket; stated in the line.
pub const S3_GET: f64 = 0.0004 / 1000.0;
/// The long poll that ends each resq redriver run on an empty DLQ (`receive_wait_seconds: 1`
/// in `redriver::engine::Redriver::new`), ms; the seed's receive does not wait.
pub const RESQ_RECEIVE_WAIT_MS: f64 = 1000.0;

/// What the bench measures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// resq's wall time for a 10-record batch with a 20 ms effect at its default
    /// `CONSUMER_CONCURRENCY` (10), ms.
    pub resq_batch_ms: f64,
    /// Powertools `BatchProcessor`'s wall time for that batch (sequential), ms.
    pub seed_batch_ms: f64,
    /// resq's SQS requests per redriven message, counted at the proxy.
    pub resq_requests_per_redrive: f64,
    /// The send-each-and-sleep redriver's SQS requests per redriven message.
    pub seed_requests_per_redrive: f64,
    /// resq's redriver wall time per DLQ message (redrive seconds ÷ messages), ms.
    pub resq_redrive_ms: f64,
    /// The seed redriver's wall time per message at the bench's non-binding rate, ms.
    pub seed_redrive_ms: f64,
}

/// The defaults of `infra/template.yaml` the cost depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Template {
    /// `ConsumerMemorySize`, MB; the seed's consumer gets the same.
    pub consumer_memory_mb: f64,
    /// The redriver's `MemorySize` (256, not a parameter), MB; the seed's redriver too.
    pub redriver_memory_mb: f64,
    /// `ConsumerBatchSize`.
    pub batch_size: f64,
    /// `MaxReceiveCount` (the main queue's `RedrivePolicy`).
    pub max_receive_count: f64,
    /// `RedriverSchedule` (`rate(5 minutes)`), minutes; the seed's redriver runs on it too.
    pub redriver_schedule_minutes: f64,
    /// `RedriveRatePerSecond`: the seed's redriver sleeps 1/rate after each send.
    pub redrive_rate_per_second: f64,
    /// `ArchiveAfterSeconds`: the TTL after which a kept permanent failure is archived.
    pub archive_after_seconds: f64,
}

impl Template {
    /// The template's defaults.
    pub const DEFAULT: Self = Self {
        consumer_memory_mb: 256.0,
        redriver_memory_mb: 256.0,
        batch_size: 10.0,
        max_receive_count: 5.0,
        redriver_schedule_minutes: 5.0,
        redrive_rate_per_second: 10.0,
        archive_after_seconds: 86_400.0,
    };
}

/// What is assumed, not measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Assumptions {
    /// Hours over which the orders arrive: the redriver's scheduled runs in that time.
    pub window_hours: f64,
    /// Redrive passes charged to the seed design (its loop has no end).
    pub seed_redrive_passes: f64,
    /// Round trip of one SQS call resq's consumer makes (DLQ copy, backoff), ms: the
    /// emulator's is not AWS's.
    pub sqs_call_ms: f64,
}

impl Assumptions {
    /// 24 h, one pass, 10 ms.
    pub const DEFAULT: Self = Self {
        window_hours: 24.0,
        seed_redrive_passes: 1.0,
        sqs_call_ms: 10.0,
    };
}

/// SQS requests by action.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SqsRequests {
    /// `ReceiveMessage` on the main queue by Lambda's poller (billed to the account).
    pub receive: f64,
    /// `DeleteMessageBatch` by the poller for what the consumer did not report failed.
    pub delete: f64,
    /// `ChangeMessageVisibilityBatch` by the consumer: backoff.
    pub backoff: f64,
    /// `SendMessageBatch` to the DLQ by the consumer: permanent failures fast-tracked.
    pub dlq_send: f64,
    /// `ReceiveMessage` on the DLQ by the redriver.
    pub redrive_receive: f64,
    /// Sends to the main queue by the redriver: the redrive itself.
    pub redrive_send: f64,
    /// `ChangeMessageVisibilityBatch` by the redriver: kept messages hidden.
    pub redrive_hide: f64,
    /// `DeleteMessageBatch` on the DLQ by the redriver.
    pub redrive_delete: f64,
}

impl SqsRequests {
    /// All requests.
    pub fn total(&self) -> f64 {
        self.receive
            + self.delete
            + self.backoff
            + self.dlq_send
            + self.redrive_receive
            + self.redrive_send
            + self.redrive_hide
            + self.redrive_delete
    }
}

/// One stack's bill.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StackCost {
    /// Records the consumer received, re-deliveries included.
    pub deliveries: f64,
    /// Consumer invocations.
    pub consumer_invocations: f64,
    /// Redriver invocations (scheduled runs).
    pub redriver_invocations: f64,
    /// Consumer GB-seconds (billed durations × memory).
    pub consumer_gb_s: f64,
    /// Redriver GB-seconds.
    pub redriver_gb_s: f64,
    /// SQS requests.
    pub sqs: SqsRequests,
    /// S3 PUTs of archive entries.
    pub archive_puts: f64,
    /// S3 PUTs of the redriver's keep lists.
    pub keep_list_puts: f64,
}

/// The bill's lines, in the order of [`StackCost::quantities`], with their unit prices.
const ITEMS: [(&str, f64); 13] = [
    ("Lambda requests (both functions)", LAMBDA_REQUEST),
    ("Lambda GB-s, consumer", LAMBDA_GB_SECOND),
    ("Lambda GB-s, redriver", LAMBDA_GB_SECOND),
    ("SQS ReceiveMessage, main queue (poller)", SQS_REQUEST),
    ("SQS DeleteMessageBatch, main queue (poller)", SQS_REQUEST),
    ("SQS ChangeMessageVisibilityBatch, backoff", SQS_REQUEST),
    ("SQS SendMessageBatch to the DLQ (consumer)", SQS_REQUEST),
    ("SQS ReceiveMessage, DLQ (redriver)", SQS_REQUEST),
    ("SQS redrive sends to the main queue", SQS_REQUEST),
    ("SQS ChangeMessageVisibilityBatch, hide kept", SQS_REQUEST),
    ("SQS DeleteMessageBatch, DLQ (redriver)", SQS_REQUEST),
    ("S3 PUT, archive entries", S3_PUT),
    ("S3 PUT, keep lists", S3_PUT),
];

impl StackCost {
    /// Lambda requests and GB-seconds, $.
    pub fn lambda_dollars(&self) -> f64 {
        (self.consumer_invocations + self.redriver_invocations) * LAMBDA_REQUEST
            + (self.consumer_gb_s + self.redriver_gb_s) * LAMBDA_GB_SECOND
    }

    /// SQS requests, $.
    pub fn sqs_dollars(&self) -> f64 {
        self.sqs.total() * SQS_REQUEST
    }

    /// S3 requests, $.
    pub fn s3_dollars(&self) -> f64 {
        (self.archive_puts + self.keep_list_puts) * S3_PUT
    }

    /// The whole bill, $.
    pub fn dollars(&self) -> f64 {
        self.lambda_dollars() + self.sqs_dollars() + self.s3_dollars()
    }

    /// How many of each of [`ITEMS`].
    fn quantities(&self) -> [f64; 13] {
        let q = &self.sqs;
        [
            self.consumer_invocations + self.redriver_invocations,
            self.consumer_gb_s,
            self.redriver_gb_s,
            q.receive,
            q.delete,
            q.backoff,
            q.dlq_send,
            q.redrive_receive,
            q.redrive_send,
            q.redrive_hide,
            q.redrive_delete,
            self.archive_puts,
            self.keep_list_puts,
        ]
    }
}

/// Both stacks at one pair of failure shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Share of orders that fail permanently (invalid content).
    pub permanent_share: f64,
    /// Share of orders that fail once, transiently.
    pub transient_share: f64,
    /// resq.
    pub resq: StackCost,
    /// The seed design.
    pub seed: StackCost,
    /// The template defaults used.
    pub template: Template,
    /// The assumptions used.
    pub assumptions: Assumptions,
}

/// Invocations with at least one of `records` whose share is `share`: each batch holds
/// `batch` records drawn independently; at least one call per 10 such records.
fn invocations_with_any(invocations: f64, batch: f64, share: f64, records: f64) -> f64 {
    (invocations * (1.0 - (1.0 - share).powf(batch))).max(records / MAX_BATCH as f64)
}

/// `share` within `0..=max` (`max` in `0..=1`); a NaN share is none.
fn share_within(share: f64, max: f64) -> f64 {
    if share.is_nan() {
        0.0
    } else {
        share.clamp(0.0, max)
    }
}

fn share_of(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

fn gb_s(ms: f64, memory_mb: f64) -> f64 {
    ms / 1000.0 * memory_mb / 1024.0
}

/// Both stacks' bills for [`ORDERS`] orders, `permanent_share` of them failing permanently and
/// `transient_share` failing once (each succeeds on its second delivery in both stacks).
pub fn per_million(
    m: &Measured,
    t: &Template,
    a: &Assumptions,
    permanent_share: f64,
    transient_share: f64,
) -> Comparison {
    let permanent_share = share_within(permanent_share, 1.0);
    let transient_share = share_within(transient_share, 1.0 - permanent_share);
    let (p, tr) = (ORDERS * permanent_share, ORDERS * transient_share);
    let effect_runs = ORDERS - p + tr; // successes, and transient failures twice
    let (b, entries) = (t.batch_size.max(1.0), MAX_BATCH as f64);
    let runs = a.window_hours * 60.0 / t.redriver_schedule_minutes;

    // resq: a permanent failure is received once; the batch waits for its slowest record.
    let deliveries = effect_runs + p;
    let invocations = deliveries / b;
    let backoff = invocations_with_any(invocations, b, share_of(tr, deliveries), tr);
    let dlq_send = invocations_with_any(invocations, b, share_of(p, deliveries), p);
    let consumer_ms = invocations * m.resq_batch_ms.ceil() + (backoff + dlq_send) * a.sqs_call_ms;
    let max_hide = resq::backoff::MAX_VISIBILITY_TIMEOUT.as_secs_f64();
    let hides = (t.archive_after_seconds / max_hide).ceil().max(1.0);
    let visits = hides + 1.0; // each hide, then the archive
    // The measured requests less a SendMessageBatch and a DeleteMessageBatch per ten; every
    // scheduled run also makes the receive that finds the DLQ empty (the measured share holds
    // one per 500 messages of it already: a double count of 0.002 a message).
    let receive_share = (m.resq_requests_per_redrive - 2.0 / entries).max(0.0);
    let lists_per_round = runs.min(p).max((p / MAX_ENTRIES_PER_LIST as f64).ceil());
    let resq = StackCost {
        deliveries,
        consumer_invocations: invocations,
        redriver_invocations: runs,
        consumer_gb_s: gb_s(consumer_ms, t.consumer_memory_mb),
        redriver_gb_s: gb_s(
            p * visits * m.resq_redrive_ms + runs * RESQ_RECEIVE_WAIT_MS,
            t.redriver_memory_mb,
        ),
        sqs: SqsRequests {
            receive: invocations,
            delete: invocations,
            backoff,
            dlq_send,
            redrive_receive: p * visits * receive_share + runs,
            redrive_send: 0.0,
            redrive_hide: p * hides / entries,
            redrive_delete: p / entries,
        },
        archive_puts: p,
        keep_list_puts: if p > 0.0 {
            hides * lists_per_round
        } else {
            0.0
        },
    };

    // seed design: maxReceiveCount receives per trip; sequential, a rejected record is instant.
    let passes = a.seed_redrive_passes.max(0.0);
    let deliveries = effect_runs + t.max_receive_count * p * (1.0 + passes);
    let invocations = deliveries / b;
    let billed_ms = (m.seed_batch_ms * share_of(effect_runs, deliveries)).ceil();
    let receive_share = (m.seed_requests_per_redrive - 1.0 - 1.0 / entries).max(0.0);
    let sleep_ms = 1000.0 / t.redrive_rate_per_second;
    let seed = StackCost {
        deliveries,
        consumer_invocations: invocations,
        redriver_invocations: runs,
        consumer_gb_s: gb_s(invocations * billed_ms, t.consumer_memory_mb),
        redriver_gb_s: gb_s(
            p * passes * (m.seed_redrive_ms + sleep_ms),
            t.redriver_memory_mb,
        ),
        sqs: SqsRequests {
            receive: invocations,
            delete: invocations,
            redrive_receive: p * passes * receive_share + runs,
            redrive_send: p * passes,
            redrive_delete: p * passes / entries,
            ..SqsRequests::default()
        },
        ..StackCost::default()
    };
    Comparison {
        permanent_share,
        transient_share,
        resq,
        seed,
        template: *t,
        assumptions: *a,
    }
}

/// `12345.6` as `12,346`.
fn grouped(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count grouped by thousands; a small fractional figure (GB-s) with one decimal.
fn quantity(x: f64) -> String {
    if x < 1000.0 && x.fract() != 0.0 {
        format!("{x:.1}")
    } else {
        grouped(x)
    }
}

fn ratio_cell(seed: f64, resq: f64) -> String {
    if resq > 0.0 {
        format!("{:.2}×", seed / resq)
    } else {
        "–".to_owned()
    }
}

impl Comparison {
    /// The seed design's bill ÷ resq's.
    pub fn cost_ratio(&self) -> f64 {
        self.seed.dollars() / self.resq.dollars()
    }

    /// A markdown table: one row per cost item, columns resq, seed design, ratio.
    pub fn table(&self) -> String {
        let mut out = format!(
            "| per {} orders, {} % permanent, {} % transient failures | resq | seed design | seed ÷ resq |\n|---|---:|---:|---:|\n",
            grouped(ORDERS),
            (self.permanent_share * 1000.0).round() / 10.0,
            (self.transient_share * 1000.0).round() / 10.0
        );
        let (r, s) = (self.resq.deliveries, self.seed.deliveries);
        out += &format!(
            "| records the consumer receives (re-deliveries included) | {} | {} | {:.2}× |\n",
            grouped(r),
            grouped(s),
            share_of(s, r)
        );
        let (resq, seed) = (self.resq.quantities(), self.seed.quantities());
        for ((label, price), (r, s)) in ITEMS.iter().zip(resq.into_iter().zip(seed)) {
            let (rd, sd) = (r * price, s * price);
            let (r, s) = (quantity(r), quantity(s));
            out += &format!(
                "| {label} | {r} · ${rd:.4} | {s} · ${sd:.4} | {} |\n",
                ratio_cell(sd, rd)
            );
        }
        let (r, s) = (self.resq.dollars(), self.seed.dollars());
        out += &format!(
            "| **total** | **${r:.4}** | **${s:.4}** | **{}** |\n",
            ratio_cell(s, r)
        );
        out
    }

    /// One line: the prices used and the assumptions.
    pub fn statement(&self) -> String {
        let (t, a) = (&self.template, &self.assumptions);
        format!(
            "Prices: AWS list prices, us-east-1 (Lambda, SQS and S3 pricing pages), no free tier: Lambda arm64 ${:.10} per GB-s and ${:.2} per million requests; SQS standard ${:.2} per million requests (one per 64 KiB: every call here is one); S3 Standard PUT ${:.3} and GET ${:.4} per 1,000 (nothing here reads the bucket). Assumptions: a transient failure succeeds on its second delivery in both stacks; each poller ReceiveMessage returns a full batch of {:.0}, is one invocation and is settled by one DeleteMessageBatch; billed time per invocation is the measured batch time rounded up to 1 ms (BatchProcessor's scaled to the records that run the effect: a rejected record takes no effect time) plus {:.0} ms per SQS call resq's consumer makes; consumers at {:.0} MB, redrivers at {:.0} MB, both redrivers run every {:.0} min over {:.0} h; resq keeps permanent failures (PERMANENT_ACTION=keep), hides them 12 h at a time and archives them at the TTL ({:.0} h); the seed design's endless redrive loop is charged {:.0} pass(es) of the DLQ; the orders' own effect, CloudWatch, KMS and S3 storage are left out (the effect is the same in both).",
            LAMBDA_GB_SECOND,
            LAMBDA_REQUEST * 1e6,
            SQS_REQUEST * 1e6,
            S3_PUT * 1000.0,
            S3_GET * 1000.0,
            t.batch_size,
            a.sqs_call_ms,
            t.consumer_memory_mb,
            t.redriver_memory_mb,
            t.redriver_schedule_minutes,
            a.window_hours,
            t.archive_after_seconds / 3600.0,
            a.seed_redrive_passes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The latest run's figures (bench/RESULTS.md).
    const MEASURED: Measured = Measured {
        resq_batch_ms: 21.6,
        seed_batch_ms: 203.0,
        resq_requests_per_redrive: 0.302,
        seed_requests_per_redrive: 1.202,
        resq_redrive_ms: 23_300.0 / 2000.0,
        seed_redrive_ms: 35_540.0 / 2000.0,
    };

    fn at(permanent: f64, transient: f64, a: &Assumptions) -> Comparison {
        per_million(&MEASURED, &Template::DEFAULT, a, permanent, transient)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn without_failures_both_stacks_receive_and_delete_alike() {
        let c = at(0.0, 0.0, &Assumptions::DEFAULT);
        assert!(close(c.resq.sqs.receive, c.seed.sqs.receive));
        assert!(close(c.resq.sqs.delete, c.seed.sqs.delete));
        assert!(close(c.resq.sqs.receive, ORDERS / 10.0));
        // no backoff, no DLQ copy; the redrivers only make each run's empty receive
        let idle = 24.0 * 60.0 / 5.0;
        assert!(close(c.resq.sqs.total(), 2.0 * ORDERS / 10.0 + idle));
        assert!(close(c.seed.sqs.total(), c.resq.sqs.total()));
        assert_eq!(c.resq.archive_puts + c.resq.keep_list_puts, 0.0);
    }

    #[test]
    fn each_permanent_order_costs_the_seed_max_receive_count_less_one_more_receives() {
        for passes in [0.0, 1.0, 3.0] {
            let a = Assumptions {
                seed_redrive_passes: passes,
                ..Assumptions::DEFAULT
            };
            let (low, high) = (at(0.01, 0.0, &a), at(0.02, 0.0, &a));
            let added = 0.01 * ORDERS;
            let m = Template::DEFAULT.max_receive_count;
            let per_order = (high.seed.deliveries - low.seed.deliveries) / added;
            assert!(
                close(per_order, m - 1.0 + m * passes),
                "passes {passes}: {per_order}"
            );
            let receives = (high.seed.sqs.receive - low.seed.sqs.receive) / added;
            assert!(close(receives, (m - 1.0 + m * passes) / 10.0));
            // resq receives a permanent failure once, like a success
            assert!(close(high.resq.deliveries, low.resq.deliveries));
        }
    }

    #[test]
    fn at_the_issues_shares_the_seed_design_costs_more_and_the_counts_are_the_hand_computed_ones() {
        let c = at(0.01, 0.05, &Assumptions::DEFAULT);
        assert!(c.cost_ratio() > 1.0, "{}", c.cost_ratio());
        assert!(close(c.resq.sqs.receive, 105_000.0));
        assert!(close(c.seed.sqs.receive, 114_000.0));
        assert!(
            (c.resq.sqs.backoff - 40_539.1).abs() < 0.1,
            "{}",
            c.resq.sqs.backoff
        );
        assert!(
            (c.resq.sqs.dlq_send - 9_582.1).abs() < 0.1,
            "{}",
            c.resq.sqs.dlq_send
        );
        assert!(close(c.resq.sqs.redrive_hide, 2_000.0)); // two 12 h hides before a 24 h TTL
        assert!(close(c.resq.archive_puts, 10_000.0));
        assert!(close(c.resq.keep_list_puts, 576.0));
        assert!(close(c.seed.sqs.redrive_send, 10_000.0));
        assert_eq!(c.seed.sqs.backoff + c.seed.sqs.dlq_send, 0.0);
    }

    #[test]
    fn totals_are_the_sum_of_their_items() {
        let c = at(0.01, 0.05, &Assumptions::DEFAULT);
        for s in [c.resq, c.seed] {
            let items: f64 = s
                .quantities()
                .iter()
                .zip(ITEMS)
                .map(|(q, (_, p))| q * p)
                .sum();
            assert!(close(items, s.dollars()), "{items} vs {}", s.dollars());
        }
        let table = c.table();
        assert_eq!(table.lines().count(), 3 + ITEMS.len() + 1);
        assert!(
            table.lines().all(|l| l.matches('|').count() == 5),
            "{table}"
        );
    }

    #[test]
    fn a_ttl_within_twelve_hours_is_one_hide() {
        let t = Template {
            archive_after_seconds: 43_200.0,
            ..Template::DEFAULT
        };
        let c = per_million(&MEASURED, &t, &Assumptions::DEFAULT, 0.01, 0.0);
        assert!(close(c.resq.sqs.redrive_hide, 1_000.0));
        let runs = 24.0 * 60.0 / 5.0; // one empty receive each
        assert!(close(
            c.resq.sqs.redrive_receive,
            10_000.0 * 2.0 * 0.102 + runs
        ));
    }
}
