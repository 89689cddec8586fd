//! A counting proxy on 127.0.0.1: forwards every byte to the emulator and logs each request's
//! arrival time, action (`X-Amz-Target` or the Query `Action`) and batch size, and how long it
//! waited for the first byte of its answer. Requests per redriven message and the achieved send
//! rate are read off this log: counted, not computed.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use resq_local::http::{next_request, serve_on_thread};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request seen by the proxy.
#[derive(Debug, Clone)]
pub struct Request {
    /// When its head arrived.
    pub at: Instant,
    /// `SendMessageBatch`, `ReceiveMessage`, … (`?` when it could not be told).
    pub action: String,
    /// Messages it carries: batch entries, or 1 for a single-message call.
    pub entries: usize,
    /// Whether it is an SQS call.
    pub sqs: bool,
    /// From its arrival to the first byte of its answer (the proxy's log only; `None` when no
    /// answer came): the emulator's time for the call, loopback included.
    pub waited: Option<Duration>,
}

/// The shared request log.
pub type Log = Arc<Mutex<Vec<Request>>>;

/// The running proxy; stops with the process. Clones share the log.
#[derive(Clone)]
pub struct CountingProxy {
    /// `http://127.0.0.1:{port}`.
    pub endpoint: String,
    log: Log,
}

impl CountingProxy {
    /// Starts forwarding a free loopback port to `upstream`, on a thread of its own.
    pub fn start(upstream: SocketAddr) -> Result<Self, String> {
        let log: Log = Arc::default();
        let task_log = log.clone();
        let addr = serve_on_thread(move |client| {
            let log = task_log.clone();
            async move {
                if let Err(e) = forward(client, upstream, log).await {
                    eprintln!("counting proxy: connection ended: {e}");
                }
            }
        })?;
        Ok(Self {
            endpoint: format!("http://{addr}"),
            log,
        })
    }

    /// A position in the log, to read what came after it.
    pub fn mark(&self) -> usize {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Messages deleted by `DeleteMessage(Batch)` requests since `mark`.
    pub fn deleted_since(&self, mark: usize) -> usize {
        self.log.lock().unwrap_or_else(|e| e.into_inner())[mark..]
            .iter()
            .filter(|r| r.sqs && r.action.starts_with("DeleteMessage"))
            .map(|r| r.entries)
            .sum()
    }

    /// The requests logged since `mark`.
    pub fn since(&self, mark: usize) -> Vec<Request> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())[mark..].to_vec()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Forwards one client connection. An HTTP/1.1 client sends its next request on a connection
/// only once the answer to the last one is complete (the SDK does not pipeline), so the first
/// bytes from the server after a request are its answer: that is when its wait ends.
async fn forward(client: TcpStream, upstream: SocketAddr, log: Log) -> std::io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // forwarded and not answered yet, oldest first: (place in the log, arrival)
    let unanswered: Arc<Mutex<VecDeque<(usize, Instant)>>> = Arc::default();
    let (answers_log, answering) = (log.clone(), unanswered.clone());
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 64 * 1024];
        while let Ok(n) = from_server.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            let now = Instant::now();
            if let Some((i, at)) = lock(&answering).pop_front()
                && let Some(r) = lock(&answers_log).get_mut(i)
            {
                r.waited = Some(now.duration_since(at));
            }
            if to_client.write_all(&chunk[..n]).await.is_err() {
                break;
            }
        }
        let _ = to_client.shutdown().await;
    });
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        let Some(request) = next_request(&mut from_client, &mut buf).await? else {
            let _ = to_server.shutdown().await;
            return Ok(());
        };
        let at = Instant::now();
        let place = {
            let mut log = lock(&log);
            log.push(classify(
                at,
                request.header("x-amz-target"),
                request.body(&buf),
            ));
            log.len() - 1
        };
        lock(&unanswered).push_back((place, at));
        to_server.write_all(&buf[..request.end]).await?;
        buf.drain(..request.end);
    }
}

/// What one request is: its action and how many messages it carries.
pub fn classify(at: Instant, target: Option<String>, body: &[u8]) -> Request {
    let (action, sqs) = match target {
        Some(t) => {
            let sqs = t.starts_with("AmazonSQS.");
            (t.rsplit('.').next().unwrap_or("?").to_owned(), sqs)
        }
        None => {
            let text = String::from_utf8_lossy(body);
            let action = text
                .split('&')
                .find_map(|kv| kv.strip_prefix("Action="))
                .unwrap_or("?")
                .to_owned();
            (action, false)
        }
    };
    let entries = if action.ends_with("Batch") {
        serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["Entries"].as_array().map(Vec::len))
            .unwrap_or(0)
    } else if action == "SendMessage" || action == "DeleteMessage" {
        1
    } else {
        0
    };
    Request {
        at,
        action,
        entries,
        sqs,
        waited: None,
    }
}

/// A counting proxy in front of the emulator at `endpoint` (what the redrivers talk to), and an
/// SQS client that talks to the emulator directly (set-up and checks are not counted).
pub fn counted(
    endpoint: &str,
    rt: &tokio::runtime::Runtime,
) -> Result<(CountingProxy, aws_sdk_sqs::Client), String> {
    let upstream = endpoint
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| format!("emulator endpoint {endpoint}: {e}"))?;
    let proxy = CountingProxy::start(upstream)?;
    let sqs = rt.block_on(async {
        aws_sdk_sqs::Client::new(&resq_local::emulator::local_sdk_config(endpoint).await)
    });
    Ok((proxy, sqs))
}

/// Messages sent after the first send request, over the time from the first send request to
/// the last: the rate between sends, the same measure for batched and single sends.
pub fn achieved(requests: &[Request]) -> Option<f64> {
    let sends: Vec<&Request> = requests
        .iter()
        .filter(|r| r.sqs && (r.action == "SendMessage" || r.action == "SendMessageBatch"))
        .collect();
    let (first, last) = (sends.first()?, sends.last()?);
    let span = last.at.duration_since(first.at).as_secs_f64();
    let after_first: usize = sends[1..].iter().map(|r| r.entries).sum();
    (span > 0.0).then(|| after_first as f64 / span)
}

/// The SQS calls of `log`, counted by action (`Action n, …`).
pub fn breakdown(log: &[Request]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in log.iter().filter(|r| r.sqs) {
        *counts.entry(&r.action).or_default() += 1;
    }
    counts
        .iter()
        .map(|(a, n)| format!("{a} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(at: Instant, ms: u64, action: &str, entries: usize) -> Request {
        Request {
            at: at + Duration::from_millis(ms),
            action: action.into(),
            entries,
            sqs: true,
            waited: None,
        }
    }

    #[test]
    fn the_rate_is_taken_between_sends_for_batches_and_singles_alike() {
        let t = Instant::now();
        // batches of 10 every second: 20 messages after the first send, over 2 s
        let batched = [
            send(t, 0, "SendMessageBatch", 10),
            send(t, 500, "ReceiveMessage", 0),
            send(t, 1000, "SendMessageBatch", 10),
            send(t, 2000, "SendMessageBatch", 10),
        ];
        assert!((achieved(&batched).unwrap() - 10.0).abs() < 1e-9);
        // single sends every 100 ms: 4 after the first, over 0.4 s
        let singles: Vec<_> = (0..5).map(|i| send(t, i * 100, "SendMessage", 1)).collect();
        assert!((achieved(&singles).unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(achieved(&singles[..1]), None);
    }

    #[test]
    fn batches_are_counted_by_their_entries() {
        let r = classify(
            Instant::now(),
            Some("AmazonSQS.SendMessageBatch".into()),
            br#"{"QueueUrl":"q","Entries":[{"Id":"0"},{"Id":"1"},{"Id":"2"}]}"#,
        );
        assert_eq!(
            (r.action.as_str(), r.entries, r.sqs),
            ("SendMessageBatch", 3, true)
        );
        let r = classify(Instant::now(), Some("AmazonSQS.SendMessage".into()), b"{}");
        assert_eq!((r.action.as_str(), r.entries), ("SendMessage", 1));
        let r = classify(
            Instant::now(),
            None,
            b"Action=DescribeAlarms&Version=2010-08-01",
        );
        assert_eq!((r.action.as_str(), r.sqs), ("DescribeAlarms", false));
    }
}
