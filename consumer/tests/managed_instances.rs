//! Lambda Managed Instances: several invocations at once in one process. The consumer is served
//! by the real runtime in its concurrent mode (`AWS_LAMBDA_MAX_CONCURRENCY=3`, three pollers)
//! against a stand-in of Lambda's runtime API on 127.0.0.1, over resq's in-memory SQS and S3,
//! and what holds per execution environment holds across the invocations: the retry budget,
//! the records in flight and the queue's limits, each once, not once an invocation. Its own
//! test binary: the runtime reads its settings from the environment, set here before any
//! thread of the test's own starts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resq::config::Vars;
use resq_consumer::Consumer;
use resq_consumer::config::ConsumerConfig;
use resq_consumer::handler::{HandlerError, MessageHandler, RecordMeta, Rejection};
use resq_consumer::retry_budget::FLOOR_PER_MINUTE;
use resq_testing::{MemorySqs, MemoryStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

const INVOCATIONS: usize = 3;
/// Redeliveries an invocation: fewer than the budget's floor, so budgets of their own would
/// run them all.
const RECORDS: usize = 8;
/// `CONSUMER_CONCURRENCY`.
const IN_FLIGHT: u64 = 2;
const QUEUE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";

/// Holds every record until the runtime API handed out all the invocations (so they are in the
/// process at once), then fails it: a redelivery failing spends the retry budget.
struct Held(Arc<Seen>);

/// What the handler saw.
struct Seen {
    handed_out: watch::Receiver<usize>,
    /// Records in the handler now, and the most at once.
    running: Mutex<(u64, u64)>,
    ran: AtomicU64,
}

impl MessageHandler for Held {
    type Message = String;

    fn parse(&self, body: Option<&str>) -> Result<String, Rejection> {
        Ok(body.unwrap_or_default().to_owned())
    }

    fn business_id<'m>(&self, m: &'m String) -> &'m str {
        m
    }

    async fn handle(&self, _: &String, _: &RecordMeta<'_>) -> Result<(), HandlerError> {
        let seen = &self.0;
        {
            let mut r = seen.running.lock().unwrap();
            r.0 += 1;
            r.1 = r.1.max(r.0);
        }
        seen.ran.fetch_add(1, Ordering::SeqCst);
        let mut handed_out = seen.handed_out.clone();
        let _ = handed_out.wait_for(|n| *n >= INVOCATIONS).await;
        seen.running.lock().unwrap().0 -= 1;
        Err(HandlerError::transient(
            "DOWNSTREAM_DOWN",
            "the downstream is down",
        ))
    }
}

/// The stand-in runtime API: hands out the queued invocations, one for each `next`, and passes
/// on their answers.
struct RuntimeApi {
    events: Mutex<Vec<String>>,
    handed_out: watch::Sender<usize>,
    /// Invocations handed out and not answered yet, now and the most at once.
    outstanding: Mutex<(usize, usize)>,
    answers: mpsc::UnboundedSender<Result<String, String>>,
}

impl RuntimeApi {
    async fn serve(&self, mut conn: TcpStream) -> std::io::Result<()> {
        let mut buf = Vec::new();
        loop {
            let head_end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                if conn.read_buf(&mut buf).await? == 0 {
                    return Ok(());
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < head_end + length {
                if conn.read_buf(&mut buf).await? == 0 {
                    return Ok(());
                }
            }
            let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
            buf.drain(..head_end + length);
            let path = head
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            let answer = if path.ends_with("/invocation/next") {
                let Some(event) = self.events.lock().unwrap().pop() else {
                    std::future::pending::<()>().await;
                    return Ok(());
                };
                let mut handed_out = 0;
                self.handed_out.send_modify(|n| {
                    *n += 1;
                    handed_out = *n;
                });
                {
                    let mut o = self.outstanding.lock().unwrap();
                    o.0 += 1;
                    o.1 = o.1.max(o.0);
                }
                let deadline = chrono::Utc::now().timestamp_millis() + 60_000;
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nLambda-Runtime-Aws-Request-Id: inv-{handed_out}\r\nLambda-Runtime-Deadline-Ms: {deadline}\r\nLambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:123456789012:function:consumer\r\nContent-Length: {}\r\n\r\n{event}",
                    event.len()
                )
            } else {
                self.outstanding.lock().unwrap().0 -= 1;
                let answer = if path.ends_with("/response") {
                    Ok(body)
                } else {
                    Err(format!("{path}: {body}"))
                };
                let _ = self.answers.send(answer);
                "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".to_owned()
            };
            conn.write_all(answer.as_bytes()).await?;
        }
    }
}

/// Invocation `k`'s event: `RECORDS` main-queue redeliveries.
fn event(k: usize) -> String {
    let sent = chrono::Utc::now().timestamp_millis().to_string();
    let records: Vec<_> = (0..RECORDS)
        .map(|i| {
            serde_json::json!({
                "messageId": format!("m-{k}-{i}"), "receiptHandle": format!("rh-{k}-{i}"),
                "body": format!("order-{k}-{i}"),
                "attributes": {"ApproximateReceiveCount": "2", "SentTimestamp": sent},
                "messageAttributes": {}, "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders", "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

#[test]
fn invocations_at_once_in_one_process_share_the_retry_budget_and_the_records_in_flight() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    for (k, v) in [
        ("AWS_LAMBDA_RUNTIME_API", addr.as_str()),
        ("AWS_LAMBDA_MAX_CONCURRENCY", "3"),
        ("AWS_LAMBDA_FUNCTION_NAME", "consumer"),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
    ] {
        // SAFETY: this binary's only test, before it starts a thread of its own; nothing else
        // reads the environment meanwhile.
        unsafe { std::env::set_var(k, v) };
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        // GIVEN a stand-in runtime API holding three invocations of 8 failing redeliveries
        let (answers, mut answered) = mpsc::unbounded_channel();
        let (handed_out, watching) = watch::channel(0);
        let api: &'static RuntimeApi = Box::leak(Box::new(RuntimeApi {
            events: Mutex::new((0..INVOCATIONS).map(event).collect()),
            handed_out,
            outstanding: Mutex::default(),
            answers,
        }));
        listener.set_nonblocking(true).unwrap();
        let listener = TcpListener::from_std(listener).unwrap();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(api.serve(conn));
            }
        });
        // AND the consumer as `serve` builds it, at 2 records in flight
        let held = Arc::new(Seen {
            handed_out: watching,
            running: Mutex::default(),
            ran: AtomicU64::new(0),
        });
        let sqs: &'static MemorySqs = Box::leak(Box::default());
        let vars = [
            ("MAIN_QUEUE_URL", QUEUE),
            (
                "DLQ_URL",
                "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq",
            ),
            ("ARCHIVE_BUCKET", "archive"),
            ("CONSUMER_CONCURRENCY", "2"),
        ];
        let config = ConsumerConfig::from_vars(&Vars(|name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }))
        .unwrap();
        let consumer = Consumer::new(Held(held.clone()), sqs, MemoryStore::default(), config);
        consumer.read_main_queue_limits().await;

        // WHEN the runtime serves it in its concurrent mode
        let serving = tokio::spawn(resq_consumer::lambda::serve_consumer(consumer));
        let mut failures = 0;
        for _ in 0..INVOCATIONS {
            let answer = tokio::time::timeout(Duration::from_secs(60), answered.recv())
                .await
                .expect("every invocation is answered")
                .unwrap()
                .expect("the invocation succeeds");
            let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
            failures += answer["batchItemFailures"].as_array().unwrap().len();
        }
        serving.abort();

        // THEN the three invocations were in the process at once
        assert_eq!(api.outstanding.lock().unwrap().1, INVOCATIONS);
        // AND every record of theirs was reported failed, to be received again
        assert_eq!(failures, INVOCATIONS * RECORDS);
        // AND the process ran no more redeliveries than one budget allows (its floor, plus
        // those in flight when it ran out), not each invocation's 8 (24)
        let ran = held.ran.load(Ordering::SeqCst);
        assert!(
            (FLOOR_PER_MINUTE..=FLOOR_PER_MINUTE + IN_FLIGHT).contains(&ran),
            "{ran} redeliveries ran"
        );
        // AND at most 2 records were in flight in the process, not 2 an invocation (6); that
        // the records of invocations at once would exceed it unshared, tests/engine.rs shows
        // (`invocations_at_once_share_the_records_in_flight_of_the_process`)
        let most = held.running.lock().unwrap().1;
        assert!((1..=IN_FLIGHT).contains(&most), "{most} records at once");
        // AND the queue's limits were read once, at start-up
        assert_eq!(sqs.limits_read(), 1);
    });
}
