//! A stand-in SQS on 127.0.0.1 for the rate-accuracy runs: in memory, answering the few JSON
//! protocol calls a redriver makes (receive, send, delete, visibility) in well under a
//! millisecond. What is measured there is each redriver's pacing, not the emulator: moto needs
//! tens of milliseconds per receive (it deep-copies every message), so at 200/s its round trips,
//! not the rate limiter, set the pace. Requests are logged like the counting proxy's. It also
//! accepts S3 puts (without keeping them), for the consumer function's order records when its
//! memory is measured ([`crate::function`]), and answers `GetQueueAttributes` with a redrive
//! policy and a retention (what the consumer reads of its source queue).
//!
//! [`FakeSqs::start_with_latency`] gives every call a fixed latency (the answer waits that
//! long, a timer per connection, so calls on other connections go on meanwhile): SQS's own
//! round trip, for the redriver's throughput rows. [`FakeSqs::start_with`] draws it from a
//! seeded log-normal ([`Latency`]) and can make it rise with the calls in flight: a slow SQS.
//! A call is carried out when its wait ends, whether or not its caller still waits: one the
//! caller timed out on has taken effect, and its answer is lost (as on moto).
//!
//! A receive that waits (`WaitTimeSeconds`) and finds nothing looks again every 2 ms until a
//! message comes or its wait ends, as SQS's long poll answers. A `.fifo` queue keeps each message's `MessageGroupId` and hands out no message of a group
//! while another of that group is in flight, as SQS does. A visibility change to 0 makes a
//! message visible again; a longer one keeps it hidden for the rest of the stand-in's life.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::proxy::{Log, Request, classify};
use resq_local::http::{next_request, serve_on_thread};

#[derive(Debug, Clone)]
struct Message {
    id: String,
    body: String,
    attributes: Value,
    group: Option<String>,
}

/// How long the stand-in takes to answer a call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// The median latency of a call alone.
    pub median: Duration,
    /// The spread: the standard deviation of its logarithm (0: every call `median`).
    pub sigma: f64,
    /// With `Some(k)`, a call arriving with `n` calls in flight (its own included, and those
    /// whose callers gave up) takes `1 + n / k` times as long: SQS slowing under load.
    pub load: Option<f64>,
    /// The random draws' seed.
    pub seed: u64,
}

impl Latency {
    /// Every call `d`, whatever the load.
    pub fn fixed(d: Duration) -> Self {
        Self {
            median: d,
            sigma: 0.0,
            load: None,
            seed: 0,
        }
    }

    /// A call's latency, `z` a standard normal draw, with `in_flight` calls in flight.
    pub fn of(&self, z: f64, in_flight: usize) -> Duration {
        let load = self.load.map_or(1.0, |k| 1.0 + in_flight as f64 / k);
        self.median.mul_f64((self.sigma * z).exp() * load)
    }
}

/// The draws of [`Latency`]: standard normal (Box–Muller), seeded.
struct Draws(rand::rngs::StdRng);

impl Draws {
    fn normal(&mut self) -> f64 {
        use rand::Rng;
        let u1: f64 = self.0.random_range(f64::EPSILON..1.0);
        let u2: f64 = self.0.random();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// What a call waits: the model, the draws, the calls in flight.
struct Wait {
    latency: Latency,
    draws: Mutex<Draws>,
    in_flight: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct State {
    queues: HashMap<String, VecDeque<Message>>,
    in_flight: HashMap<String, (String, Message)>,
    next: u64,
}

impl State {
    fn id(&mut self) -> String {
        self.next += 1;
        format!("00000000-0000-4000-8000-{:012}", self.next)
    }
}

/// The running stand-in; stops with the process.
pub struct FakeSqs {
    /// `http://127.0.0.1:{port}`.
    pub endpoint: String,
    log: Log,
    state: Arc<Mutex<State>>,
}

impl FakeSqs {
    /// Starts it on a free loopback port, answering at once.
    pub fn start() -> Result<Self, String> {
        Self::start_with_latency(Duration::ZERO)
    }

    /// Starts it on a free loopback port; every call (receive, send, delete, visibility, S3
    /// put) is answered `latency` after it arrived. Each connection is served by a task of its
    /// own, so a call waiting out its latency never holds up the others.
    pub fn start_with_latency(latency: Duration) -> Result<Self, String> {
        Self::start_with(Latency::fixed(latency))
    }

    /// Starts it on a free loopback port; each call waits a latency drawn from `latency`
    /// after it arrived, then is carried out and answered.
    pub fn start_with(latency: Latency) -> Result<Self, String> {
        use rand::SeedableRng;
        let log: Log = Arc::default();
        let state: Arc<Mutex<State>> = Arc::default();
        let wait = Arc::new(Wait {
            latency,
            draws: Mutex::new(Draws(rand::rngs::StdRng::seed_from_u64(latency.seed))),
            in_flight: Default::default(),
        });
        let (l, s) = (log.clone(), state.clone());
        let addr = serve_on_thread(move |conn| {
            let (log, state, wait) = (l.clone(), s.clone(), wait.clone());
            async move {
                match serve(conn, log, state, &wait).await {
                    // a caller that gave up (its timeout) closed its connection
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                        ) => {}
                    Err(e) => eprintln!("stand-in SQS: connection ended: {e}"),
                    Ok(()) => {}
                }
            }
        })?;
        Ok(Self {
            endpoint: format!("http://{addr}"),
            log,
            state,
        })
    }

    /// The URL of a queue of this name (queues exist once named).
    pub fn queue_url(&self, name: &str) -> String {
        format!("{}/123456789012/{name}", self.endpoint)
    }

    /// Puts `bodies` in a queue, each with `attributes` (SQS JSON `MessageAttributes`).
    pub fn seed(&self, queue_url: &str, bodies: Vec<String>, attributes: &Value) {
        let messages = bodies.into_iter().map(|b| (b, attributes.clone(), None));
        self.seed_each(queue_url, messages);
    }

    /// Puts messages in a queue: each a body, its `MessageAttributes` and its group.
    pub fn seed_each(
        &self,
        queue_url: &str,
        messages: impl IntoIterator<Item = (String, Value, Option<String>)>,
    ) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (body, attributes, group) in messages {
            let id = st.id();
            st.queues
                .entry(queue_url.to_owned())
                .or_default()
                .push_back(Message {
                    id,
                    body,
                    attributes,
                    group,
                });
        }
    }

    /// Messages in a queue, visible plus in flight.
    pub fn depth(&self, queue_url: &str) -> usize {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.queues.get(queue_url).map_or(0, VecDeque::len)
            + st.in_flight
                .values()
                .filter(|(q, _)| q == queue_url)
                .count()
    }

    /// Empties a queue, its messages in flight included (frees a large run's memory).
    pub fn purge(&self, queue_url: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.queues.remove(queue_url);
        st.in_flight.retain(|_, (q, _)| q != queue_url);
    }

    /// A position in the log.
    pub fn mark(&self) -> usize {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The requests logged since `mark`.
    pub fn since(&self, mark: usize) -> Vec<Request> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())[mark..].to_vec()
    }
}

async fn serve(
    mut conn: TcpStream,
    log: Log,
    state: Arc<Mutex<State>>,
    wait: &Wait,
) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    let mut buf = Vec::with_capacity(16 * 1024);
    loop {
        let Some(request) = next_request(&mut conn, &mut buf).await? else {
            return Ok(());
        };
        let arrived = Instant::now();
        let in_flight = wait.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let z = match wait.latency.sigma {
            0.0 => 0.0,
            _ => wait
                .draws
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .normal(),
        };
        let latency = wait.latency.of(z, in_flight);
        if !latency.is_zero() {
            tokio::time::sleep_until((arrived + latency).into()).await;
        }
        // carried out now, whether or not its caller still waits for the answer
        wait.in_flight.fetch_sub(1, Ordering::SeqCst);
        let target = request.header("x-amz-target");
        if target.is_none() && request.head.starts_with("PUT ") {
            // an S3 put (the consumer's order record, path-style): accepted, not kept
            buf.drain(..request.end);
            conn.write_all(
                b"HTTP/1.1 200 OK\r\nETag: \"bench\"\r\nx-amz-request-id: bench\r\nContent-Length: 0\r\n\r\n",
            )
            .await?;
            continue;
        }
        let body = request.body(&buf);
        let logged = classify(arrived, target, body);
        let input: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let wait = Duration::from_secs(input["WaitTimeSeconds"].as_u64().unwrap_or(0));
        let until = Instant::now() + wait;
        let (status, output) = loop {
            let (status, output) = {
                let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                answer(&mut st, &logged.action, &input)
            };
            // a long poll that found nothing waits for a message, as SQS's does
            let empty = output["Messages"].as_array().is_some_and(Vec::is_empty);
            if !empty || Instant::now() >= until {
                break (status, output);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        log.lock().unwrap_or_else(|e| e.into_inner()).push(logged);
        buf.drain(..request.end);
        let payload = output.to_string();
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-RequestId: bench\r\nContent-Length: {}\r\n\r\n{payload}",
            payload.len()
        );
        conn.write_all(response.as_bytes()).await?;
    }
}

fn answer(st: &mut State, action: &str, input: &Value) -> (&'static str, Value) {
    let queue = input["QueueUrl"].as_str().unwrap_or("").to_owned();
    let entries = || input["Entries"].as_array().cloned().unwrap_or_default();
    match action {
        "ReceiveMessage" => {
            let max = input["MaxNumberOfMessages"]
                .as_u64()
                .unwrap_or(1)
                .clamp(1, 10) as usize;
            let mut out = Vec::new();
            for m in take(st, &queue, max) {
                let receipt = format!("rh-{}", st.id());
                let mut attributes = json!({
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": chrono::Utc::now().timestamp_millis().to_string(),
                });
                if let Some(g) = &m.group {
                    attributes["MessageGroupId"] = json!(g);
                    attributes["MessageDeduplicationId"] = json!(m.id);
                }
                out.push(json!({
                    "MessageId": m.id,
                    "ReceiptHandle": receipt,
                    "MD5OfBody": "",
                    "Body": m.body,
                    "Attributes": attributes,
                    "MessageAttributes": m.attributes,
                }));
                st.in_flight.insert(receipt, (queue.clone(), m));
            }
            ("200 OK", json!({ "Messages": out }))
        }
        "SendMessage" => {
            let id = st.id();
            st.queues.entry(queue).or_default().push_back(Message {
                id: id.clone(),
                body: input["MessageBody"].as_str().unwrap_or("").to_owned(),
                attributes: input["MessageAttributes"].clone(),
                group: input["MessageGroupId"].as_str().map(str::to_owned),
            });
            ("200 OK", json!({ "MessageId": id, "MD5OfMessageBody": "" }))
        }
        "SendMessageBatch" => {
            let mut ok = Vec::new();
            for e in entries() {
                let id = st.id();
                st.queues
                    .entry(queue.clone())
                    .or_default()
                    .push_back(Message {
                        id: id.clone(),
                        body: e["MessageBody"].as_str().unwrap_or("").to_owned(),
                        attributes: e["MessageAttributes"].clone(),
                        group: e["MessageGroupId"].as_str().map(str::to_owned),
                    });
                ok.push(json!({ "Id": e["Id"], "MessageId": id, "MD5OfMessageBody": "" }));
            }
            ("200 OK", json!({ "Successful": ok, "Failed": [] }))
        }
        "DeleteMessageBatch" | "ChangeMessageVisibilityBatch" => {
            let mut ok = Vec::new();
            for e in entries() {
                let receipt = e["ReceiptHandle"].as_str().unwrap_or("");
                let hide = e["VisibilityTimeout"].as_i64().unwrap_or(0) > 0;
                match action {
                    // hidden on: it stays in flight
                    "ChangeMessageVisibilityBatch" if hide => {}
                    "ChangeMessageVisibilityBatch" => {
                        if let Some((q, m)) = st.in_flight.remove(receipt) {
                            st.queues.entry(q).or_default().push_front(m);
                        }
                    }
                    _ => _ = st.in_flight.remove(receipt),
                }
                ok.push(json!({ "Id": e["Id"] }));
            }
            ("200 OK", json!({ "Successful": ok, "Failed": [] }))
        }
        "GetQueueAttributes" => {
            // what a consumer reads of its source queue: the template's redrive policy (a
            // DLQ beside it, 5 receives) and SQS's default retention (4 days)
            let name = queue.rsplit('/').next().unwrap_or_default();
            let arn = |n: &str| format!("arn:aws:sqs:us-east-1:123456789012:{n}");
            let mut attributes = json!({
                "QueueArn": arn(name),
                "MessageRetentionPeriod": "345600",
                "VisibilityTimeout": "30",
                "ApproximateNumberOfMessages": st.queues.get(&queue).map_or(0, VecDeque::len).to_string(),
                "ApproximateNumberOfMessagesNotVisible": st.in_flight.values().filter(|(q, _)| *q == queue).count().to_string(),
            });
            if !name.ends_with("-dlq") {
                attributes["RedrivePolicy"] = json!(
                    json!({"deadLetterTargetArn": arn(&format!("{name}-dlq")), "maxReceiveCount": 5})
                        .to_string()
                );
            }
            ("200 OK", json!({ "Attributes": attributes }))
        }
        other => (
            "400 Bad Request",
            json!({
                "__type": "com.amazonaws.sqs#UnsupportedOperation",
                "message": format!("the bench's stand-in SQS does not serve {other}"),
            }),
        ),
    }
}

/// Up to `max` messages off the front of `queue`; of a `.fifo` queue, none of a group with a
/// message in flight (several of one group may go in one receive, in order).
fn take(st: &mut State, queue: &str, max: usize) -> Vec<Message> {
    let Some(q) = st.queues.get_mut(queue) else {
        return Vec::new();
    };
    if !queue.ends_with(".fifo") {
        let n = max.min(q.len());
        return q.drain(..n).collect();
    }
    let locked: std::collections::HashSet<&str> = st
        .in_flight
        .values()
        .filter(|(q, _)| q == queue)
        .filter_map(|(_, m)| m.group.as_deref())
        .collect();
    // in queue order, so a group's messages go in order
    let picked: Vec<usize> = (q.iter().enumerate())
        .filter(|(_, m)| !locked.contains(m.group.as_deref().unwrap_or_default()))
        .map(|(i, _)| i)
        .take(max)
        .collect();
    let mut out: Vec<Message> = picked
        .into_iter()
        .rev()
        .filter_map(|i| q.remove(i))
        .collect();
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::CountingProxy;

    #[test]
    fn resqs_redriver_moves_everything_through_the_stand_in_and_the_proxy_counts_it() {
        // GIVEN 25 DLQ messages on the stand-in, and the counting proxy in front of it
        let sqs = FakeSqs::start().unwrap();
        let (dlq, main) = (sqs.queue_url("t-dlq"), sqs.queue_url("t"));
        let attrs = json!({"x-failure-class": {"DataType": "String", "StringValue": "transient"}});
        sqs.seed(&dlq, (0..25).map(|i| format!("body-{i}")).collect(), &attrs);
        let upstream = sqs.endpoint.trim_start_matches("http://").parse().unwrap();
        let proxy = CountingProxy::start(upstream).unwrap();
        let mark = proxy.mark();
        // WHEN resq's redriver runs against the proxy
        let out = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(crate::child::redrive(
                &proxy.endpoint,
                &dlq,
                &main,
                1000.0,
                crate::child::Design::Pipelined,
                None,
            ))
            .unwrap();
        // THEN every message moved, in three batches, and both logs saw the same requests
        assert_eq!(out["redriven"], 25, "{out}");
        assert_eq!((sqs.depth(&main), sqs.depth(&dlq)), (25, 0));
        let counted = proxy.since(mark);
        // (the batches' cycles are in flight side by side: their sends go in any order)
        let mut sends: Vec<usize> = counted
            .iter()
            .filter(|r| r.action == "SendMessageBatch")
            .map(|r| r.entries)
            .collect();
        sends.sort_unstable();
        assert_eq!(sends, vec![5, 10, 10]);
        assert_eq!(proxy.deleted_since(mark), 25);
        assert_eq!(counted.len(), sqs.since(0).len());
    }

    #[test]
    fn with_latency_every_call_waits_it_and_connections_are_served_side_by_side() {
        // GIVEN a stand-in answering each call 300 ms after it arrived, behind the counting
        // proxy, with 40 DLQ messages
        let latency = Duration::from_millis(300);
        let sqs = FakeSqs::start_with_latency(latency).unwrap();
        let dlq = sqs.queue_url("lat-dlq");
        sqs.seed(
            &dlq,
            (0..40).map(|i| format!("body-{i}")).collect(),
            &json!({}),
        );
        let upstream = sqs.endpoint.trim_start_matches("http://").parse().unwrap();
        let proxy = CountingProxy::start(upstream).unwrap();
        // WHEN four receives go at once (the SDK opens a connection for each)
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (mark, proxy_mark) = (sqs.mark(), proxy.mark());
        let received = rt.block_on(async {
            let sdk = resq_local::emulator::local_sdk_config(&proxy.endpoint).await;
            let client = aws_sdk_sqs::Client::new(&sdk);
            let mut calls = tokio::task::JoinSet::new();
            for _ in 0..4 {
                let (client, dlq) = (client.clone(), dlq.clone());
                calls.spawn(async move {
                    let out = client
                        .receive_message()
                        .queue_url(dlq)
                        .max_number_of_messages(10)
                        .send()
                        .await
                        .unwrap();
                    out.messages.unwrap_or_default().len()
                });
            }
            let mut n = 0;
            while let Some(r) = calls.join_next().await {
                n += r.unwrap();
            }
            n
        });
        // THEN every message came, each call waited its latency at the proxy, and each arrived
        // before the first was answered: none waited for another connection's call
        assert_eq!(received, 40);
        let counted = proxy.since(proxy_mark);
        assert_eq!(counted.len(), 4);
        assert!(
            counted.iter().all(|r| r.waited >= Some(latency)),
            "{counted:?}"
        );
        let arrivals: Vec<Instant> = sqs.since(mark).iter().map(|r| r.at).collect();
        let (first, last) = (
            arrivals.iter().min().unwrap(),
            arrivals.iter().max().unwrap(),
        );
        assert!(last.duration_since(*first) < latency, "{arrivals:?}");
    }
}
