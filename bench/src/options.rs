//! What to run, and where things are: the flags of `resq-bench run` (and of the parts run
//! alone).

use std::path::PathBuf;

/// What to run, and where things are (the flags of `resq-bench run`).
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Python of the bench venv (Powertools and boto3 installed).
    #[arg(long, default_value = ".venv-bench/bin/python")]
    pub python: PathBuf,
    /// The baselines' scripts.
    #[arg(long, default_value = "bench/python")]
    pub scripts: PathBuf,
    /// Node, for the Powertools for TypeScript peer.
    #[arg(long, default_value = "node")]
    pub node: PathBuf,
    /// The Powertools for TypeScript peer (its packages in `node_modules` beside it: `npm ci`).
    #[arg(long, default_value = "bench/node/peer.js")]
    pub node_peer: PathBuf,
    /// moto_server.
    #[arg(long = "moto-server", default_value = ".venv/bin/moto_server")]
    pub moto: PathBuf,
    /// LocalStack's Python (its venv), for the rate rows on a real SQS API.
    #[arg(long, default_value = ".venv-localstack/bin/python")]
    pub localstack_python: PathBuf,
    /// Host release build of the consumer (cold start).
    #[arg(long, default_value = "target/release/consumer")]
    pub consumer_bin: PathBuf,
    /// Host release build of the redriver (cold start).
    #[arg(long, default_value = "target/release/redriver")]
    pub redriver_bin: PathBuf,
    /// Where `cargo lambda build --output-format zip` left the zips.
    #[arg(long, default_value = "target/lambda")]
    pub zips: PathBuf,
    /// Scratch space.
    #[arg(long, default_value = "target/bench")]
    pub work: PathBuf,
    /// The soak's outage profile: resq's outage bill is counted from it when it exists.
    #[arg(long, default_value = crate::outage::PROFILE_PATH)]
    pub outage_profile: PathBuf,
    /// The results file (its generated section is replaced).
    #[arg(long, default_value = "bench/RESULTS.md")]
    pub results: PathBuf,
    /// Records in the consumer's event (0: as many ~300-byte orders as fit in 6 MB, Lambda's
    /// largest payload).
    #[arg(long, default_value_t = 0)]
    pub records: usize,
    /// Interleaved consumer rounds (one process per side each).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Invocations per consumer process: the first is a warm-up, the rest are measured.
    #[arg(long, default_value_t = 6)]
    pub consumer_invocations: usize,
    /// Messages each redriver replays.
    #[arg(long, default_value_t = 2_000)]
    pub redrive_messages: usize,
    /// Messages per segment of the redrive comparison; segments alternate between the two.
    #[arg(long, default_value_t = 500)]
    pub chunk: usize,
    /// Rates for the accuracy check.
    #[arg(long, value_delimiter = ',', default_value = "10,50,200")]
    pub rates: Vec<f64>,
    /// Seconds of traffic per rate.
    #[arg(long, default_value_t = 5.0)]
    pub rate_seconds: f64,
    /// Cold starts per function.
    #[arg(long, default_value_t = 20)]
    pub coldstart_runs: usize,
    /// Batch sizes of the I/O-bound comparison.
    #[arg(long, value_delimiter = ',', default_value = "10,100")]
    pub io_batches: Vec<usize>,
    /// The effect's latency per order in the I/O-bound comparison, ms.
    #[arg(long, default_value_t = 20)]
    pub io_latency_ms: u64,
    /// Interleaved rounds of the I/O-bound comparison.
    #[arg(long, default_value_t = 3)]
    pub io_rounds: usize,
    /// The redriver at scale: the stand-in SQS's latency per call, ms.
    #[arg(long, default_value_t = 10)]
    pub scale_latency_ms: u64,
    /// The redriver at scale: rates for the rate error on the stand-in with latency
    /// (`rate × rate_seconds` messages each).
    #[arg(long, value_delimiter = ',', default_value = "100,500,1000,3000")]
    pub scale_rates: Vec<f64>,
    /// The redriver at scale: the sequential design's messages per rate at most (it moves a
    /// few hundred a second, whatever the rate).
    #[arg(long, default_value_t = 2_000)]
    pub sequential_max_messages: usize,
    /// The redriver at scale: messages of the pipelined drain on the stand-in at 3,000/s
    /// (extrapolated to 1,000,000; 0: none).
    #[arg(long, default_value_t = 200_000)]
    pub drain_messages: usize,
    /// The redriver at scale: messages of the pipelined drain on LocalStack (0: none).
    #[arg(long, default_value_t = 100_000)]
    pub localstack_drain: usize,
    /// The redriver at scale: messages of the sequential drain on LocalStack (0: none).
    #[arg(long, default_value_t = 30_000)]
    pub localstack_drain_sequential: usize,
    /// FIFO rows of the I/O-bound comparison: a batch of 10 (Lambda's FIFO maximum) dealt over
    /// each of these numbers of message groups.
    #[arg(long, value_delimiter = ',', default_value = "10,2")]
    pub io_fifo_groups: Vec<usize>,
    /// Batch sizes of the real-client I/O comparison (the S3 stand-in; each within 6 MB).
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    pub io_real_batches: Vec<usize>,
    /// Warm rounds per side and batch size of the real-client comparison (after the cold
    /// invocation), and per batch size of resq's curves, from 100 records (ten times as many
    /// at 10).
    #[arg(long, default_value_t = 4)]
    pub io_real_rounds: usize,
    /// The largest batch Powertools' sequential `BatchProcessor` + boto3 runs (each record
    /// waits its put out: 5,000 would take about 2 minutes a round).
    #[arg(long, default_value_t = 100)]
    pub io_sync_max: usize,
    /// The throttling run: the stand-in answers `503 SlowDown` above this many PUT/s (0: no
    /// throttling run).
    #[arg(long, default_value_t = 1000.0)]
    pub io_throttle_rate: f64,
    /// The redriver against an SQS slowing under load (`slowsqs`): messages of the headline
    /// runs (each design; 0: none).
    #[arg(long, default_value_t = 20_000)]
    pub slow_sqs_messages: usize,
    /// The same: SQS's median latencies (alone) of the chart's points, ms.
    #[arg(long, value_delimiter = ',', default_value = "5,15,50")]
    pub slow_sqs_medians_ms: Vec<u64>,
    /// The same: messages of each chart point's runs.
    #[arg(long, default_value_t = 4_000)]
    pub slow_sqs_chart_messages: usize,
    /// The throttling run's batch.
    #[arg(long, default_value_t = 1000)]
    pub io_throttle_records: usize,
    /// The fleet against one S3 prefix: seconds each consumer is invoked back to back.
    #[arg(long, default_value_t = 60.0)]
    pub fleet_seconds: f64,
    /// The fleet's batch per invocation (default: the template's `ConsumerBatchSize`).
    #[arg(long)]
    pub fleet_batch: Option<usize>,
}
