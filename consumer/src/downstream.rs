//! The consumer's HTTPS client (docs/design.md, "Consumer"): resq's client behind gates, so
//! that every call, the handler's and the settle phase's, holds a turn: at most
//! `connections_per_host` requests at once to one host and `CONNECTIONS_MAX` to all, each
//! answer counted, throttled or not, for the records' limit ([`crate::concurrency::Limit`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use tokio::sync::Semaphore;

/// What every call of a client built over `Downstream::https_client` goes through: at most
/// `connections_per_host` requests at once to one host (so about that many connections: one
/// opens only for a request and goes back to the pool when its answer is read; hyper returns
/// it from a task of its own, so a request that starts meanwhile may briefly open one more),
/// and each answer counted in `throttling`, throttled or not (`CONSUMER_CONCURRENCY`).
#[derive(Debug, Clone)]
pub struct Downstream {
    /// Requests (connections) to one host at once, at most.
    pub connections_per_host: usize,
    /// Where the answers are counted.
    pub throttling: Throttling,
    /// Requests to all hosts at once, at most ([`CONNECTIONS_MAX`]).
    connections_max: usize,
    /// Idle connections a host keeps, at most ([`IDLE_PER_HOST_MAX`]).
    idle_per_host_max: usize,
}

impl Downstream {
    /// At most `connections_per_host` connections to a host; answers counted in a new
    /// [`Throttling`].
    pub fn new(connections_per_host: usize) -> Self {
        Self {
            connections_per_host: connections_per_host.max(1),
            throttling: Throttling::default(),
            connections_max: CONNECTIONS_MAX,
            idle_per_host_max: IDLE_PER_HOST_MAX,
        }
    }

    /// resq's HTTPS client with this cap and count. Besides the cap per
    /// host, all hosts together get at most [`CONNECTIONS_MAX`] requests at once, and each host
    /// keeps at most [`IDLE_PER_HOST_MAX`] idle connections: a handler that calls several hosts
    /// at a high fixed limit, then the settle phase's calls, stay within Lambda's 1,024 file
    /// descriptors.
    pub(crate) fn https_client(&self) -> SharedHttpClient {
        let inner = resq::aws::https_client_keeping(Some(
            self.connections_per_host.min(self.idle_per_host_max),
        ));
        SharedHttpClient::new(Gated {
            inner,
            gates: Arc::new(Gates {
                per_host: self.connections_per_host,
                all: Arc::new(Semaphore::new(self.connections_max.max(1))),
                hosts: Mutex::new(HashMap::new()),
                throttling: self.throttling.clone(),
            }),
        })
    }
}

/// Requests at once to all hosts together, at most (a request holds its turn until its
/// answer's headers are read; a body the caller streams afterwards is not counted): Lambda
/// allows a process 1,024 file descriptors. The other half is for the idle connections
/// (`IDLE_PER_HOST_MAX` a host: the handler's hosts, S3, SQS), the connections being closed
/// while a fixed limit above that closes and opens them as it goes (the bench saw about 130 at
/// 768 requests at once), the settle phase's calls (up to 64 to S3 and 16 to SQS, after the
/// records) and the process's own (standard streams, the runtime API, epoll, the log pipes:
/// about 15). At 900 the bench saw 1,006 descriptors open at once.
pub const CONNECTIONS_MAX: usize = 512;

/// Idle connections a host keeps, at most: a batch's burst of connections is not kept open
/// after it (a warm invocation opens again what it needs beyond these), and a handler that
/// calls several hosts keeps at most this many for each. Keeping as many as a host may have
/// requests at once (tried) spares a fixed limit above 64 its closing and opening, but lets
/// two busy hosts at 500 keep 1,000 open between them.
pub(crate) const IDLE_PER_HOST_MAX: usize = 64;

/// An HTTP client whose connectors go through the hosts' gates.
#[derive(Debug)]
struct Gated {
    inner: SharedHttpClient,
    gates: Arc<Gates>,
}

#[derive(Debug)]
struct Gates {
    per_host: usize,
    /// All hosts together ([`CONNECTIONS_MAX`]).
    all: Arc<Semaphore>,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    throttling: Throttling,
}

impl Gates {
    fn of(&self, host: &str) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts
            .entry(host.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_host)))
            .clone()
    }
}

impl HttpClient for Gated {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(GatedConnector {
            inner: self.inner.http_connector(settings, components),
            gates: self.gates.clone(),
        })
    }
}

#[derive(Debug)]
struct GatedConnector {
    inner: SharedHttpConnector,
    gates: Arc<Gates>,
}

impl HttpConnector for GatedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let gate = self.gates.of(host_of(request.uri()));
        let all = self.gates.all.clone();
        let first = first_attempt(request.headers().get("amz-sdk-request"));
        let (inner, gates) = (self.inner.clone(), self.gates.clone());
        HttpConnectorFuture::new(async move {
            // the host's turn first, then one of all hosts' (in this order everywhere: no
            // request holds one while another waits for it the other way round); the
            // semaphores are never closed
            let _turn = gate.acquire_owned().await.ok();
            let _any = all.acquire_owned().await.ok();
            let sent = Instant::now();
            let answer = inner.call(request).await;
            let throttled = match &answer {
                Ok(r) => {
                    let header = |h: &str| r.headers().get(h).map(str::to_owned);
                    is_throttling(r.status().as_u16(), header)
                }
                // no answer in time: the downstream is as overwhelmed as one that says so
                Err(e) => e.is_timeout(),
            };
            match (throttled, first, &answer) {
                (true, true, _) => gates.throttling.throttled(sent),
                (true, false, _) => gates.throttling.throttled_retry(),
                (false, _, Ok(_)) => gates.throttling.went_through(),
                (false, _, Err(_)) => {}
            }
            answer
        })
    }
}

/// Whether a request is a call's first attempt, from the SDK's `amz-sdk-request` header
/// (`attempt=2; max=3` on a retry); a request without it counts as a first attempt.
fn first_attempt(header: Option<&str>) -> bool {
    let attempt = header.and_then(|h| {
        h.split(';')
            .find_map(|kv| kv.trim().strip_prefix("attempt="))
            .and_then(|n| n.trim().parse::<u32>().ok())
    });
    attempt.is_none_or(|n| n <= 1)
}

/// `scheme://host[:port]` of a URI (the whole of it when it has no path).
fn host_of(uri: &str) -> &str {
    let after_scheme = uri.find("://").map_or(0, |i| i + 3);
    match uri[after_scheme..].find('/') {
        Some(i) => &uri[..after_scheme + i],
        None => uri,
    }
}

/// The SDK's configuration loader of a function whose calls go through [`Downstream`]: the
/// consumer's, whose records run at `CONSUMER_CONCURRENCY`.
pub fn config_loader_for(downstream: &Downstream) -> aws_config::ConfigLoader {
    resq::aws::config_loader().http_client(downstream.https_client())
}

/// What the downstream answered so far, as [`Throttling::seen`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// Responses that went through (not throttled).
    pub ok: u64,
    /// Throttled responses.
    pub throttled: u64,
    /// When the latest call that was throttled was sent, if any was.
    pub last_throttled_sent: Option<Instant>,
}

/// The downstream's answers as the HTTPS client reads them: shared between the client (which
/// counts) and the consumer (which adapts its limit of records in flight). Cloning shares the counts.
#[derive(Debug, Clone)]
pub struct Throttling(Arc<Counts>);

#[derive(Debug)]
struct Counts {
    ok: AtomicU64,
    throttled: AtomicU64,
    /// Nanoseconds after `epoch` at which the latest throttled call was sent (0: none).
    last_throttled_sent_ns: AtomicU64,
    epoch: Instant,
}

impl Default for Throttling {
    fn default() -> Self {
        Self(Arc::new(Counts {
            ok: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            last_throttled_sent_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        }))
    }
}

impl Throttling {
    /// A response that went through.
    pub fn went_through(&self) {
        self.0.ok.fetch_add(1, Ordering::Relaxed);
    }

    /// A throttled answer to a retry of a call (the SDK's attempt 2 or later): counted, but it
    /// says nothing about the limit now (the call was first sent at an earlier limit).
    pub fn throttled_retry(&self) {
        self.0.throttled.fetch_add(1, Ordering::Relaxed);
    }

    /// A throttled answer to a call first sent at `sent`.
    pub fn throttled(&self, sent: Instant) {
        let ns = sent.saturating_duration_since(self.0.epoch).as_nanos() as u64;
        self.0
            .last_throttled_sent_ns
            .fetch_max(ns.max(1), Ordering::Relaxed);
        self.0.throttled.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn seen(&self) -> Seen {
        let ns = self.0.last_throttled_sent_ns.load(Ordering::Relaxed);
        Seen {
            ok: self.0.ok.load(Ordering::Relaxed),
            throttled: self.0.throttled.load(Ordering::Relaxed),
            last_throttled_sent: (ns > 0)
                .then(|| self.0.epoch + std::time::Duration::from_nanos(ns)),
        }
    }
}

/// Whether a response says the caller is going too fast: HTTP 503 (S3's `SlowDown`, a
/// service's `ServiceUnavailable`) or 429, or an error code naming throttling in the headers
/// the AWS protocols carry it in (`x-amzn-query-error` for SQS's JSON protocol,
/// `x-amzn-errortype` for the other JSON protocols).
pub(crate) fn is_throttling(status: u16, header: impl Fn(&str) -> Option<String>) -> bool {
    const CODES: &[&str] = &[
        "throttl",
        "slowdown",
        "requestlimitexceeded",
        "toomanyrequests",
        "provisionedthroughputexceeded",
    ];
    if status == 503 || status == 429 {
        return true;
    }
    ["x-amzn-query-error", "x-amzn-errortype"]
        .iter()
        .filter_map(|h| header(h))
        .any(|v| {
            let v = v.to_ascii_lowercase();
            CODES.iter().any(|c| v.contains(c))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A loopback HTTP/1.1 server with keep-alive: answers each request with `answer(n)` (the
    /// status and body of the `n`th request, from 0) after `hold`, and counts the connections
    /// open at once and the requests it holds at once (their peaks).
    struct Loopback {
        url: String,
        counts: Counts,
        /// When each request had arrived whole, in order.
        arrivals: Arc<Mutex<Vec<Instant>>>,
    }

    /// What one or several loopback servers count together.
    #[derive(Clone, Default)]
    struct Counts {
        /// Connections open now, and at most at once.
        open: Arc<std::sync::atomic::AtomicUsize>,
        peak: Arc<std::sync::atomic::AtomicUsize>,
        /// Requests received whole and not yet answered, now and at most at once. A client
        /// lets a request go only while it holds a turn, and takes the turn back only once the
        /// answer is read, so this peak is at most its turns, whatever the timing. Connections
        /// are not held to it as exactly: one on its way back to the pool (hyper returns it
        /// from a task of its own) may make a request that starts meanwhile open another.
        busy: Arc<std::sync::atomic::AtomicUsize>,
        busy_peak: Arc<std::sync::atomic::AtomicUsize>,
        /// Connections accepted in all: a client that closes connections it could have kept
        /// opens new ones.
        accepted: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Counts {
        fn peaks(&self) -> (usize, usize) {
            use std::sync::atomic::Ordering;
            (
                self.peak.load(Ordering::SeqCst),
                self.busy_peak.load(Ordering::SeqCst),
            )
        }
    }

    async fn loopback(
        hold: Duration,
        answer: impl Fn(usize) -> (u16, &'static str) + Send + Sync + 'static,
    ) -> Loopback {
        loopback_counting(hold, answer, Counts::default()).await
    }

    /// [`loopback`], counting in `counts`, which several servers may share.
    async fn loopback_counting(
        hold: Duration,
        answer: impl Fn(usize) -> (u16, &'static str) + Send + Sync + 'static,
        counts: Counts,
    ) -> Loopback {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let n = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(answer);
        let seen = counts.clone();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let arrived = arrivals.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (counts, n, answer) = (seen.clone(), n.clone(), answer.clone());
                let arrived = arrived.clone();
                let open = counts.open.clone();
                counts.accepted.fetch_add(1, Ordering::SeqCst);
                counts
                    .peak
                    .fetch_max(open.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut socket = BufReader::new(socket);
                    loop {
                        let (mut line, mut length) = (String::new(), 0usize);
                        let mut headers = 0;
                        loop {
                            line.clear();
                            match socket.read_line(&mut line).await {
                                Ok(0) | Err(_) => {
                                    open.fetch_sub(1, Ordering::SeqCst);
                                    return;
                                }
                                Ok(_) => {}
                            }
                            headers += 1;
                            let lower = line.to_ascii_lowercase();
                            if let Some(v) = lower.strip_prefix("content-length:") {
                                length = v.trim().parse().unwrap_or(0);
                            }
                            if line == "\r\n" && headers > 1 {
                                break;
                            }
                        }
                        let mut body = vec![0; length];
                        let _ = socket.read_exact(&mut body).await;
                        arrived.lock().unwrap().push(Instant::now());
                        let busy = counts.busy.fetch_add(1, Ordering::SeqCst) + 1;
                        counts.busy_peak.fetch_max(busy, Ordering::SeqCst);
                        tokio::time::sleep(hold).await;
                        let (status, text) = answer(n.fetch_add(1, Ordering::SeqCst));
                        // no longer held before the answer goes: never counted after its turn
                        counts.busy.fetch_sub(1, Ordering::SeqCst);
                        let out = format!(
                            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\ncontent-type: application/xml\r\n\r\n{text}",
                            text.len()
                        );
                        if socket.get_mut().write_all(out.as_bytes()).await.is_err() {
                            open.fetch_sub(1, Ordering::SeqCst);
                            return;
                        }
                    }
                });
            }
        });
        Loopback {
            url,
            counts,
            arrivals,
        }
    }

    async fn s3_over(http: SharedHttpClient, url: &str) -> aws_sdk_s3::Client {
        let config = resq::aws::config_loader()
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(url)
            .test_credentials()
            .http_client(http)
            .retry_config(
                aws_config::retry::RetryConfig::standard()
                    .with_initial_backoff(Duration::from_millis(1)),
            )
            .load()
            .await;
        resq::aws::s3_client(&config)
    }

    async fn puts(s3: &aws_sdk_s3::Client, n: usize) -> usize {
        let calls = (0..n).map(|i| {
            s3.put_object()
                .bucket("b")
                .key(format!("k{i}"))
                .body(b"x".to_vec().into())
                .send()
        });
        futures::future::join_all(calls)
            .await
            .into_iter()
            .filter(|r| r.is_ok())
            .count()
    }

    #[tokio::test]
    async fn the_consumers_client_opens_at_most_its_cap_of_connections_to_a_host() {
        // GIVEN a server that holds each request 30 ms
        let hold = Duration::from_millis(30);
        let capped = loopback(hold, |_| (200, "")).await;
        let open = loopback(hold, |_| (200, "")).await;
        // WHEN 24 puts are made at once through a client capped at 4, and through resq's
        // client without a cap
        let downstream = Downstream::new(4);
        let s3 = s3_over(downstream.https_client(), &capped.url).await;
        assert_eq!(puts(&s3, 24).await, 24);
        let s3 = s3_over(resq::aws::https_client_keeping(None), &open.url).await;
        assert_eq!(puts(&s3, 24).await, 24);
        // THEN the capped one never had more than 4 requests at the server, while the other
        // had more
        let ((capped_open, capped_busy), (open_open, open_busy)) =
            (capped.counts.peaks(), open.counts.peaks());
        assert!(capped_busy <= 4, "{capped_busy} requests at once");
        assert!(open_busy > 4, "{open_busy} requests at once without a cap");
        // AND its connections follow its requests: at most one more for each, on its way back
        // to the pool, where the uncapped client opened one for each of the 24; and it keeps
        // the ones it has (as many idle as its cap) instead of closing and opening them
        assert!(
            capped_open <= 2 * 4,
            "{capped_open} connections at once (the other opened {open_open})"
        );
        let accepted = capped
            .counts
            .accepted
            .load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            accepted <= 2 * 4,
            "{accepted} connections opened for 24 puts"
        );
        assert_eq!(downstream.throttling.seen().ok, 24);
    }

    #[tokio::test]
    async fn all_hosts_together_get_at_most_the_clients_total_and_keep_few_idle() {
        // GIVEN two hosts that hold each request 30 ms, counting together, and a client that
        // lets 8 requests go to each host but 6 to both together, keeping 2 idle connections a
        // host
        use std::sync::atomic::Ordering;
        let hold = Duration::from_millis(30);
        let both = Counts::default();
        let (a, b) = (
            loopback_counting(hold, |_| (200, ""), both.clone()).await,
            loopback_counting(hold, |_| (200, ""), both.clone()).await,
        );
        let mut downstream = Downstream::new(8);
        downstream.connections_max = 6;
        downstream.idle_per_host_max = 2;
        let client = downstream.https_client();
        let (s3a, s3b) = (
            s3_over(client.clone(), &a.url).await,
            s3_over(client, &b.url).await,
        );
        // WHEN 24 puts go to each host at once
        let (done_a, done_b) = tokio::join!(puts(&s3a, 24), puts(&s3b, 24));
        assert_eq!((done_a, done_b), (24, 24));
        // THEN the two hosts together never held more than the total's 6 requests at once (a
        // per-host cap alone lets 16 through), and the total was reached
        let (connections, busy) = both.peaks();
        assert!(busy <= 6, "{busy} requests at once to the two hosts");
        assert!(
            connections >= 6,
            "{connections} connections: the requests never filled the total"
        );
        assert_eq!(downstream.throttling.seen().ok, 48);
        // AND once they are done at most 2 a host stay open: the others are closed as they
        // come back to the pool (the server sees each close shortly after)
        let open = || both.open.load(Ordering::SeqCst);
        for _ in 0..200 {
            if open() <= 2 * 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(open() <= 2 * 2, "{} still open", open());
    }

    #[tokio::test]
    async fn the_consumers_client_counts_throttled_answers() {
        // GIVEN an S3 that answers the first two requests 503 SlowDown
        const SLOW_DOWN: &str = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
        let s3 = loopback(Duration::ZERO, |n| match n < 2 {
            true => (503, SLOW_DOWN),
            false => (200, ""),
        })
        .await;
        let downstream = Downstream::new(8);
        let client = s3_over(downstream.https_client(), &s3.url).await;
        let before = std::time::Instant::now();
        // WHEN one put is made (the SDK retries it)
        assert_eq!(puts(&client, 1).await, 1);
        // THEN both throttled attempts were counted and the one that went through; the
        // first attempt's send time is kept, the retry's is not (it says nothing new)
        let seen = downstream.throttling.seen();
        assert_eq!((seen.throttled, seen.ok), (2, 1));
        let sent = seen.last_throttled_sent.expect("the first attempt's send");
        let first_arrived = s3.arrivals.lock().unwrap()[0];
        assert!(sent >= before && sent <= first_arrived, "{sent:?}");
    }

    #[test]
    fn a_retry_is_told_by_the_sdks_attempt_header() {
        assert!(first_attempt(Some("attempt=1; max=3")));
        assert!(!first_attempt(Some("attempt=2; max=3")));
        assert!(!first_attempt(Some(
            "ttl=20241125T000000Z; attempt=3; max=3"
        )));
        assert!(first_attempt(None));
        assert!(first_attempt(Some("nonsense")));
    }

    #[test]
    fn a_host_is_its_scheme_and_authority() {
        assert_eq!(
            host_of("https://s3.us-east-1.amazonaws.com/b/k?x=1"),
            "https://s3.us-east-1.amazonaws.com"
        );
        assert_eq!(host_of("http://127.0.0.1:4566"), "http://127.0.0.1:4566");
        assert_eq!(host_of("http://127.0.0.1:4566/"), "http://127.0.0.1:4566");
    }

    #[test]
    fn throttling_is_read_off_the_status_and_the_error_headers() {
        let none = |_: &str| None;
        assert!(is_throttling(503, none));
        assert!(is_throttling(429, none));
        assert!(!is_throttling(200, none));
        assert!(!is_throttling(500, none));
        assert!(!is_throttling(412, none));
        let sqs = |h: &str| {
            (h == "x-amzn-query-error")
                .then(|| "AWS.SimpleQueueService.RequestThrottled;Sender".into())
        };
        assert!(is_throttling(400, sqs));
        let json = |h: &str| {
            (h == "x-amzn-errortype").then(|| "ThrottlingException:http://internal".into())
        };
        assert!(is_throttling(400, json));
        let other = |h: &str| (h == "x-amzn-errortype").then(|| "AccessDeniedException".into());
        assert!(!is_throttling(400, other));
    }

    #[test]
    fn the_signal_counts_and_keeps_the_latest_throttled_send() {
        let t = Throttling::default();
        assert_eq!(t.seen(), Seen::default());
        let shared = t.clone();
        let t0 = Instant::now();
        shared.went_through();
        shared.throttled(t0 + Duration::from_millis(30));
        shared.throttled(t0 + Duration::from_millis(10));
        let seen = t.seen();
        assert_eq!((seen.ok, seen.throttled), (1, 2));
        let sent = seen.last_throttled_sent.unwrap();
        let ms = |n| t0 + Duration::from_millis(n);
        assert!(sent >= ms(29) && sent <= ms(31), "{sent:?}");
        // a retry's throttle is counted, and moves nothing else
        shared.throttled_retry();
        assert_eq!(
            t.seen(),
            Seen {
                throttled: 3,
                ..seen
            }
        );
    }
}
