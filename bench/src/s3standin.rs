//! A stand-in S3 on 127.0.0.1 for the real-client I/O comparison: in memory, HTTP/1.1, path-style
//! object calls only (`PUT`, `GET` and `HEAD` of `/bucket/key`; every bucket exists). What it
//! honours is what resq's reference handler and the peers' conditional puts rely on:
//!
//! - `PUT` with `If-None-Match: *` on an existing key → `412 PreconditionFailed` (S3's XML
//!   error), the object left as it was; otherwise the object is written, `200` with an ETag.
//!   A body sent `aws-chunked` (the SDKs' trailing checksums) is decoded before it is kept.
//! - `GET` → the object, or `404 NoSuchKey`; `HEAD` the same without a body.
//! - `Expect: 100-continue` is answered `100 Continue` before the body is read.
//!
//! Every `PUT` and `GET` is answered `latency` after its request arrived (a timer per request:
//! requests on other connections go on meanwhile; tokio's 1 ms timer makes 20 ms 20–21 ms), or,
//! started with [`Spread::LogNormal`], after a latency drawn per `PUT` from a log-normal
//! distribution whose median is `latency` (a seeded RNG: the same run draws the same latencies).
//! Started with a [`Tls`], it speaks HTTPS with a server certificate for `127.0.0.1` signed by a
//! CA made at run time, which the clients are told to trust as users would tell theirs.
//! With a rate limit ([`Config::slow_down_above`]), a `PUT` arriving when the token bucket
//! (that rate, a burst of a tenth of a second's worth) is empty is answered at once with
//! `503 SlowDown`, as S3 answers a prefix's request rate above what it allows.
//!
//! It records, between [`S3StandIn::begin`] and [`S3StandIn::end`]: each `PUT`'s arrival,
//! answer and status, and the peak of open connections. [`Window`] turns those into the
//! figures: total `PUT`s, 503s, the peak `PUT` rate and the timeline of `PUT`s in flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use resq_local::http::serve_on_thread;

/// How the stand-in answers.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Each `PUT` and `GET` is answered this long after it arrived.
    pub latency: Duration,
    /// Above this many `PUT`s a second (a token bucket holding a tenth of a second's worth),
    /// a `PUT` is answered `503 SlowDown` at once. `None`: never.
    pub slow_down_above: Option<f64>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            latency: Duration::from_millis(20),
            slow_down_above: None,
        }
    }
}

/// How each `PUT`'s latency is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spread {
    /// Every answer [`Config::latency`] after its request.
    Fixed,
    /// `latency × e^(sigma·Z)`, Z standard normal from an RNG seeded with `seed`: a log-normal
    /// whose median is [`Config::latency`].
    LogNormal { sigma: f64, seed: u64 },
}

/// The standard normal's 99th percentile.
pub const Z_P99: f64 = 2.326;

impl Spread {
    /// The log-normal whose p99 is `p99_over_median` × the median.
    pub fn log_normal(p99_over_median: f64, seed: u64) -> Self {
        Spread::LogNormal {
            sigma: p99_over_median.ln() / Z_P99,
            seed,
        }
    }
}

/// A latency of `median × e^(sigma·z)`.
pub fn log_normal_latency(median: Duration, sigma: f64, z: f64) -> Duration {
    median.mul_f64((sigma * z).exp())
}

/// A standard normal draw (Box–Muller).
fn standard_normal(rng: &mut impl Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The stand-in's TLS identity: a CA made at run time and a certificate for `127.0.0.1` (an IP
/// subject alternative name) and `localhost` it signed.
pub struct Tls {
    /// The CA's certificate, PEM: what a client must trust.
    pub ca_pem: String,
    config: Arc<tokio_rustls::rustls::ServerConfig>,
    #[cfg(test)]
    ca_der: tokio_rustls::rustls::pki_types::CertificateDer<'static>,
}

impl Tls {
    /// A new CA and server certificate (ECDSA P-256).
    pub fn new() -> Result<Self, String> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
        let e = |e: rcgen::Error| format!("the stand-in's certificates: {e}");
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "resq-bench stand-in CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().map_err(e)?;
        let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(e)?;
        server
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        server.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(e)?;
        let cert = server.signed_by(&key, &ca_cert, &ca_key).map_err(e)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_no_client_auth()
                    .with_single_cert(vec![cert.der().clone(), ca_cert.der().clone()], key)
            })
            .map_err(|e| format!("the stand-in's TLS configuration: {e}"))?;
        Ok(Self {
            ca_pem: ca_cert.pem(),
            config: Arc::new(config),
            #[cfg(test)]
            ca_der: ca_cert.der().clone(),
        })
    }

    /// Writes the CA's certificate to `path` (for `SSL_CERT_FILE`, `AWS_CA_BUNDLE`,
    /// `NODE_EXTRA_CA_CERTS`).
    pub fn write_ca(&self, path: &std::path::Path) -> Result<(), String> {
        std::fs::write(path, &self.ca_pem).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// One `PUT` as the stand-in saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Put {
    /// When its request (head and body) had arrived.
    pub arrived: Instant,
    /// When its answer was ready (just before it was written).
    pub answered: Instant,
    /// The answer's status: 200, 412 or 503.
    pub status: u16,
}

/// The width of the windows the peak rate and the in-flight timeline are taken over.
pub const WINDOW: Duration = Duration::from_millis(100);

/// What happened between [`S3StandIn::begin`] and [`S3StandIn::end`].
#[derive(Debug, Clone)]
pub struct Window {
    /// When it began.
    pub began: Instant,
    /// Every `PUT` answered meanwhile, in the order answered.
    pub puts: Vec<Put>,
    /// The most connections open at once (idle kept-alive ones included).
    pub peak_connections: usize,
}

impl Window {
    /// `PUT`s answered, whatever the answer.
    pub fn puts_total(&self) -> usize {
        self.puts.len()
    }
    /// `PUT`s answered with `status`.
    pub fn count(&self, status: u16) -> usize {
        self.puts.iter().filter(|p| p.status == status).count()
    }
    /// The peak rate of `PUT` requests (any answer), per second: the most that arrived within
    /// any [`WINDOW`] (sliding), × 10.
    pub fn peak_puts_per_s(&self) -> f64 {
        let mut arrivals: Vec<Instant> = self.puts.iter().map(|p| p.arrived).collect();
        arrivals.sort_unstable();
        peak_in_window(&arrivals, WINDOW) as f64 / WINDOW.as_secs_f64()
    }
    /// The most `PUT`s in flight at once (arrived, not yet answered) in each [`WINDOW`] from
    /// the window's beginning; 503s are answered at once, so they hardly count.
    pub fn in_flight_timeline(&self) -> Vec<usize> {
        in_flight_timeline(&self.puts, self.began, WINDOW)
    }
}

/// The most of the sorted `times` within any span of `width` (a span `[t, t + width)`).
pub fn peak_in_window(times: &[Instant], width: Duration) -> usize {
    let mut peak = 0;
    let mut start = 0;
    for (end, t) in times.iter().enumerate() {
        while t.duration_since(times[start]) >= width {
            start += 1;
        }
        peak = peak.max(end + 1 - start);
    }
    peak
}

/// For each `bucket`-wide span from `origin` up to the last answer, the most of `puts` in
/// flight at once (a `PUT` is in flight from its arrival until its answer).
pub fn in_flight_timeline(puts: &[Put], origin: Instant, bucket: Duration) -> Vec<usize> {
    let Some(last) = puts.iter().map(|p| p.answered).max() else {
        return Vec::new();
    };
    let index = |t: Instant| {
        (t.saturating_duration_since(origin).as_nanos() / bucket.as_nanos().max(1)) as usize
    };
    let mut timeline = vec![0; index(last) + 1];
    // +1 at each arrival, −1 at each answer; at equal times the answer first
    let mut events: Vec<(Instant, i64)> = puts
        .iter()
        .flat_map(|p| [(p.arrived, 1), (p.answered, -1)])
        .collect();
    events.sort_unstable_by_key(|&(t, d)| (t, d));
    let mut in_flight: i64 = 0;
    let mut current = 0;
    for (t, d) in events {
        let i = index(t);
        // the buckets after the last event's, up to this one's, held what was in flight then
        for slot in timeline.iter_mut().take(i + 1).skip(current + 1) {
            *slot = (*slot).max(in_flight.max(0) as usize);
        }
        current = current.max(i);
        in_flight += d;
        timeline[i] = timeline[i].max(in_flight.max(0) as usize);
    }
    timeline
}

#[derive(Default)]
struct Recording {
    began: Option<Instant>,
    puts: Vec<Put>,
    open: usize,
    peak_open: usize,
}

struct TokenBucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    fn new(rate: f64) -> Self {
        let capacity = (rate * WINDOW.as_secs_f64()).max(1.0);
        Self {
            rate,
            capacity,
            tokens: capacity,
            at: Instant::now(),
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.capacity);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Shared {
    config: Config,
    /// The log-normal's sigma and its RNG (`None`: fixed latency).
    spread: Option<(f64, Mutex<rand::rngs::StdRng>)>,
    objects: Mutex<HashMap<String, Vec<u8>>>,
    recording: Mutex<Recording>,
    bucket: Option<Mutex<TokenBucket>>,
    requests: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// This `PUT`'s latency.
    fn put_latency(&self) -> Duration {
        match &self.spread {
            None => self.config.latency,
            Some((sigma, rng)) => log_normal_latency(
                self.config.latency,
                *sigma,
                standard_normal(&mut *lock(rng)),
            ),
        }
    }
}

/// The running stand-in; it stops with the process.
pub struct S3StandIn {
    /// `http://127.0.0.1:{port}`.
    pub endpoint: String,
    shared: Arc<Shared>,
}

/// Counts a connection as open for as long as it lives.
struct OpenConnection(Arc<Shared>);

impl OpenConnection {
    fn new(shared: Arc<Shared>) -> Self {
        {
            let mut r = lock(&shared.recording);
            r.open += 1;
            r.peak_open = r.peak_open.max(r.open);
        }
        Self(shared)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        lock(&self.0.recording).open -= 1;
    }
}

impl S3StandIn {
    /// Starts it on a free loopback port: plain HTTP, a fixed latency.
    pub fn start(config: Config) -> Result<Self, String> {
        Self::start_with(config, Spread::Fixed, None)
    }

    /// Starts it on a free loopback port, each `PUT`'s latency drawn as `spread` says, over
    /// HTTPS with `tls` (`https://127.0.0.1:{port}`), else plain HTTP.
    pub fn start_with(config: Config, spread: Spread, tls: Option<&Tls>) -> Result<Self, String> {
        let shared = Arc::new(Shared {
            config,
            spread: match spread {
                Spread::Fixed => None,
                Spread::LogNormal { sigma, seed } => {
                    Some((sigma, Mutex::new(rand::rngs::StdRng::seed_from_u64(seed))))
                }
            },
            objects: Mutex::default(),
            recording: Mutex::default(),
            bucket: config
                .slow_down_above
                .map(|rate| Mutex::new(TokenBucket::new(rate))),
            requests: AtomicU64::new(0),
        });
        let s = shared.clone();
        let acceptor = tls.map(|t| tokio_rustls::TlsAcceptor::from(t.config.clone()));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let addr = serve_on_thread(move |conn| {
            let shared = s.clone();
            let acceptor = acceptor.clone();
            async move {
                let _open = OpenConnection::new(shared.clone());
                let served = match acceptor {
                    None => serve(conn, &shared).await,
                    Some(a) => match a.accept(conn).await {
                        Ok(tls) => serve(tls, &shared).await,
                        Err(e) => Err(e),
                    },
                };
                if let Err(e) = served
                    && !matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
                    )
                {
                    eprintln!("stand-in S3: connection ended: {e}");
                }
            }
        })?;
        Ok(Self {
            endpoint: format!("{scheme}://{addr}"),
            shared,
        })
    }

    /// Starts recording (and forgets what was recorded before): from now, each `PUT`, and the
    /// peak of open connections, counting those open now.
    pub fn begin(&self) {
        let mut r = lock(&self.shared.recording);
        r.began = Some(Instant::now());
        r.puts.clear();
        r.peak_open = r.open;
    }

    /// What was recorded since [`Self::begin`].
    pub fn end(&self) -> Window {
        let mut r = lock(&self.shared.recording);
        Window {
            began: r.began.take().unwrap_or_else(Instant::now),
            puts: std::mem::take(&mut r.puts),
            peak_connections: r.peak_open,
        }
    }

    /// Objects held.
    #[cfg(test)]
    pub fn objects(&self) -> usize {
        lock(&self.shared.objects).len()
    }

    /// An object's body, as written (`bucket/key`).
    #[cfg(test)]
    pub fn object(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        lock(&self.shared.objects)
            .get(&format!("{bucket}/{key}"))
            .cloned()
    }

    /// Forgets every object (frees a large run's memory).
    pub fn clear(&self) {
        lock(&self.shared.objects).clear();
    }
}

/// One request's head: its request line and headers.
struct Head(String);

impl Head {
    /// A header's value (case-insensitive name).
    fn header(&self, name: &str) -> Option<String> {
        self.0.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    /// The method and the target of the request line (`PUT`, `/bucket/key?x=1`).
    fn method_and_target(&self) -> (&str, &str) {
        let mut first = self.0.lines().next().unwrap_or_default().split_whitespace();
        (
            first.next().unwrap_or_default(),
            first.next().unwrap_or_default(),
        )
    }
}

/// The next request off `conn` (`buf` holds what was read past the last one): its head and
/// body, a `Content-Length` body or a `Transfer-Encoding: chunked` one (botocore sends its
/// trailing checksums so over HTTPS), `Expect: 100-continue` answered before the body is
/// read; `None` when the client closed the connection.
async fn next_request<S>(
    conn: &mut S,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<(Head, Vec<u8>)>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = Head(String::from_utf8_lossy(&buf[..head_end]).into_owned());
    buf.drain(..head_end);
    let chunked = head
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"));
    let len: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let expects = head
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if expects && (chunked || buf.len() < len) {
        conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        conn.flush().await?;
    }
    loop {
        let whole = if chunked {
            chunked_body(buf)
        } else {
            (buf.len() >= len).then(|| (len, buf[..len].to_vec()))
        };
        if let Some((end, body)) = whole {
            buf.drain(..end);
            return Ok(Some((head, body)));
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A whole `Transfer-Encoding: chunked` body at the start of `buf`: where it ends (its
/// trailers included) and its data; `None` while it is incomplete.
pub fn chunked_body(buf: &[u8]) -> Option<(usize, Vec<u8>)> {
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        let eol = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&buf[at..eol]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        at = eol + 2;
        if size == 0 {
            // trailers, each a line, then an empty line
            let rest = &buf[at..];
            if rest.starts_with(b"\r\n") {
                return Some((at + 2, data));
            }
            let end = rest.windows(4).position(|w| w == b"\r\n\r\n")?;
            return Some((at + end + 4, data));
        }
        data.extend_from_slice(buf.get(at..at + size)?);
        buf.get(at + size..at + size + 2)?;
        at += size + 2;
    }
}

/// An `aws-chunked` body's data: `hex-size[;extensions]\r\n data \r\n`, … up to a chunk of
/// size 0, then trailers (checksums), which are dropped.
pub fn decode_aws_chunked(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&rest[..eol]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

fn error_xml(code: &str, message: &str, resource: &str, id: u64) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message><Resource>{resource}</Resource><RequestId>STANDIN{id:012}</RequestId><HostId>resq-bench</HostId></Error>"
    )
}

/// A response: status line, headers, body (none for `HEAD`, its length still given).
fn response(status: &str, id: u64, headers: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nx-amz-request-id: STANDIN{id:012}\r\nx-amz-id-2: resq-bench\r\nServer: AmazonS3\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

fn error(
    status: &str,
    code: &str,
    message: &str,
    resource: &str,
    id: u64,
    head_only: bool,
) -> Vec<u8> {
    response(
        status,
        id,
        "Content-Type: application/xml\r\n",
        error_xml(code, message, resource, id).as_bytes(),
        head_only,
    )
}

async fn serve<S>(mut conn: S, shared: &Shared) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(16 * 1024);
    while let Some((head, body)) = next_request(&mut conn, &mut buf).await? {
        let arrived = Instant::now();
        let id = shared.requests.fetch_add(1, Ordering::Relaxed);
        let (method, target) = head.method_and_target();
        let method = method.to_owned();
        let path = target.split('?').next().unwrap_or_default().to_owned();
        let key = path.trim_start_matches('/').to_owned();
        let has_key = key
            .split_once('/')
            .is_some_and(|(b, k)| !b.is_empty() && !k.is_empty());
        let head_only = method == "HEAD";
        let answer = match method.as_str() {
            "PUT" if has_key => {
                let allowed = shared.bucket.as_ref().is_none_or(|b| lock(b).take(arrived));
                if !allowed {
                    let out = error(
                        "503 Slow Down",
                        "SlowDown",
                        "Please reduce your request rate.",
                        &path,
                        id,
                        false,
                    );
                    // recorded before it is written: once the client has its answer, the
                    // window may end
                    record(shared, arrived, 503);
                    conn.write_all(&out).await?;
                    conn.flush().await?;
                    continue;
                }
                tokio::time::sleep_until((arrived + shared.put_latency()).into()).await;
                let data = match head.header("content-encoding") {
                    Some(e) if e.contains("aws-chunked") => {
                        decode_aws_chunked(&body).unwrap_or(body)
                    }
                    _ => body,
                };
                let conditional = head
                    .header("if-none-match")
                    .is_some_and(|v| v.trim() == "*");
                let created = {
                    let mut objects = lock(&shared.objects);
                    if conditional && objects.contains_key(&key) {
                        false
                    } else {
                        objects.insert(key.clone(), data);
                        true
                    }
                };
                let (out, status) = if created {
                    let headers = format!("ETag: \"{id:032x}\"\r\n");
                    (response("200 OK", id, &headers, b"", false), 200)
                } else {
                    let out = error(
                        "412 Precondition Failed",
                        "PreconditionFailed",
                        "At least one of the pre-conditions you specified did not hold",
                        &path,
                        id,
                        false,
                    );
                    (out, 412)
                };
                record(shared, arrived, status);
                conn.write_all(&out).await?;
                conn.flush().await?;
                continue;
            }
            "GET" | "HEAD" if has_key => {
                tokio::time::sleep_until((arrived + shared.config.latency).into()).await;
                let object = lock(&shared.objects).get(&key).cloned();
                match object {
                    Some(data) => {
                        let headers = format!(
                            "ETag: \"{:032x}\"\r\nContent-Type: application/json\r\nLast-Modified: Wed, 25 Nov 2026 00:00:00 GMT\r\n",
                            data.len()
                        );
                        response("200 OK", id, &headers, &data, head_only)
                    }
                    None => error(
                        "404 Not Found",
                        "NoSuchKey",
                        "The specified key does not exist.",
                        &path,
                        id,
                        head_only,
                    ),
                }
            }
            _ => error(
                "501 Not Implemented",
                "NotImplemented",
                "The bench's stand-in S3 serves only PUT, GET and HEAD of path-style objects.",
                &path,
                id,
                head_only,
            ),
        };
        conn.write_all(&answer).await?;
        conn.flush().await?;
    }
    Ok(())
}

fn record(shared: &Shared, arrived: Instant, status: u16) {
    let mut r = lock(&shared.recording);
    if r.began.is_some() {
        r.puts.push(Put {
            arrived,
            answered: Instant::now(),
            status,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// One raw HTTP/1.1 request on a connection of its own; the status and body.
    async fn raw(endpoint: &str, request: &str) -> (u16, String) {
        let addr = endpoint.trim_start_matches("http://");
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        // the stand-in keeps the connection open: read until the whole answer is in
        let mut chunk = [0u8; 4096];
        loop {
            let n = conn.read(&mut chunk).await.unwrap();
            out.extend_from_slice(&chunk[..n]);
            if n == 0 {
                break;
            }
            if let Some((status, body)) = resq_local::http::http_response(&out) {
                let len = String::from_utf8_lossy(&out)
                    .to_ascii_lowercase()
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    return (status, body);
                }
            }
        }
        resq_local::http::http_response(&out).unwrap()
    }

    fn put(key: &str, body: &str, conditional: bool) -> String {
        format!(
            "PUT /b/{key} HTTP/1.1\r\nHost: x\r\n{}Content-Length: {}\r\n\r\n{body}",
            if conditional {
                "If-None-Match: *\r\n"
            } else {
                ""
            },
            body.len()
        )
    }

    fn s3_client(endpoint: &str) -> aws_sdk_s3::Client {
        rt().block_on(async {
            let sdk = resq_local::emulator::local_sdk_config(endpoint).await;
            let conf = aws_sdk_s3::config::Builder::from(&sdk)
                .force_path_style(true)
                .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
                .build();
            aws_sdk_s3::Client::from_conf(conf)
        })
    }

    #[test]
    fn a_second_conditional_put_is_refused_and_the_first_object_kept() {
        // GIVEN the stand-in, and resq's own S3 store over the SDK's client
        let s3 = S3StandIn::start(Config {
            latency: Duration::from_millis(1),
            slow_down_above: None,
        })
        .unwrap();
        let store = resq::store::S3Store::new(s3_client(&s3.endpoint), "orders-bucket");
        use resq::store::{ObjectStore, PutOutcome};
        rt().block_on(async {
            // WHEN the same key is put twice with If-None-Match: *
            s3.begin();
            let first = store
                .put_if_absent("orders/o-1.json", b"{\"n\":1}".to_vec())
                .await;
            let second = store
                .put_if_absent("orders/o-1.json", b"{\"n\":2}".to_vec())
                .await;
            let window = s3.end();
            // THEN the first is written, the second finds it (412), and the first stays
            assert_eq!(first.unwrap(), PutOutcome::Created);
            assert_eq!(second.unwrap(), PutOutcome::AlreadyExists);
            assert_eq!(
                store.get("orders/o-1.json").await.unwrap().as_deref(),
                Some(&b"{\"n\":1}"[..])
            );
            assert_eq!(store.get("orders/none.json").await.unwrap(), None);
            assert_eq!((window.count(200), window.count(412)), (1, 1));
            assert_eq!(window.puts_total(), 2);
            assert!(window.peak_connections >= 1);
        });
        // a plain put overwrites; raw HTTP sees S3's error body for a conditional one
        rt().block_on(async {
            let (status, _) = raw(&s3.endpoint, &put("k", "one", false)).await;
            assert_eq!(status, 200);
            let (status, body) = raw(&s3.endpoint, &put("k", "two", true)).await;
            assert_eq!(status, 412);
            assert!(body.contains("<Code>PreconditionFailed</Code>"), "{body}");
            let (status, body) = raw(&s3.endpoint, "GET /b/k HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert_eq!((status, body.as_str()), (200, "one"));
            let (status, body) =
                raw(&s3.endpoint, "GET /b/missing HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert_eq!(status, 404);
            assert!(body.contains("<Code>NoSuchKey</Code>"), "{body}");
        });
        assert_eq!(s3.objects(), 2);
        assert_eq!(
            s3.object("orders-bucket", "orders/o-1.json").unwrap(),
            b"{\"n\":1}"
        );
    }

    #[test]
    fn above_the_rate_puts_are_answered_slow_down_at_once() {
        // GIVEN a stand-in allowing one PUT per 1,000 s (a bucket of one token)
        let latency = Duration::from_millis(50);
        let s3 = S3StandIn::start(Config {
            latency,
            slow_down_above: Some(0.001),
        })
        .unwrap();
        // WHEN 20 PUTs arrive, each on its own connection
        s3.begin();
        let statuses = rt().block_on(async {
            let mut calls = tokio::task::JoinSet::new();
            for i in 0..20 {
                let endpoint = s3.endpoint.clone();
                calls.spawn(async move { raw(&endpoint, &put(&format!("k{i}"), "x", true)).await });
            }
            let mut out = Vec::new();
            while let Some(r) = calls.join_next().await {
                out.push(r.unwrap());
            }
            out
        });
        let window = s3.end();
        // THEN one got through and the rest were refused with S3's SlowDown
        let ok = statuses.iter().filter(|(s, _)| *s == 200).count();
        let slow: Vec<_> = statuses.iter().filter(|(s, _)| *s == 503).collect();
        assert_eq!((ok, slow.len()), (1, 19), "{statuses:?}");
        assert!(
            slow.iter().all(|(_, b)| b.contains("<Code>SlowDown</Code>")
                && b.contains("<Message>Please reduce your request rate.</Message>")),
            "{slow:?}"
        );
        assert_eq!((window.count(200), window.count(503)), (1, 19));
        assert_eq!(s3.objects(), 1);
        // the one written waited out the latency
        let written = window.puts.iter().find(|p| p.status == 200).unwrap();
        assert!(written.answered.duration_since(written.arrived) >= latency);
        // 20 arrivals: at least one in any window, all of them at most
        let peak = window.peak_puts_per_s();
        assert!((10.0..=200.0).contains(&peak), "{peak}");
    }

    #[test]
    fn over_tls_a_client_trusting_the_ca_puts_to_127_0_0_1() {
        use tokio_rustls::rustls;
        // GIVEN the stand-in over TLS, and a client that trusts only its CA
        let tls = Tls::new().unwrap();
        assert!(tls.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let s3 = S3StandIn::start_with(Config::default(), Spread::Fixed, Some(&tls)).unwrap();
        let addr = s3.endpoint.strip_prefix("https://").unwrap().to_owned();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(tls.ca_der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let answer = rt().block_on(async {
            // WHEN it connects to the IP address (the certificate's IP SAN) and puts
            let tcp = TcpStream::connect(&addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let mut conn = connector.connect(name, tcp).await.unwrap();
            conn.write_all(put("k", "one", true).as_bytes())
                .await
                .unwrap();
            conn.flush().await.unwrap();
            let mut out = vec![0u8; 4096];
            let n = conn.read(&mut out).await.unwrap();
            String::from_utf8_lossy(&out[..n]).into_owned()
        });
        // THEN the handshake verified and the object was written
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert_eq!(s3.object("b", "k").unwrap(), b"one");
    }

    #[test]
    fn log_normal_latencies_have_the_median_and_the_p99_asked_for() {
        let median = Duration::from_millis(20);
        let Spread::LogNormal { sigma, seed } = Spread::log_normal(7.5, 37) else {
            unreachable!()
        };
        // the p99 of the normal maps to 150 ms, its median to 20 ms
        let p99 = log_normal_latency(median, sigma, Z_P99);
        assert!((p99.as_secs_f64() - 0.150).abs() < 1e-6, "{p99:?}");
        assert_eq!(log_normal_latency(median, sigma, 0.0), median);
        // seeded draws: the same sequence each time, their quantiles near the asked-for ones
        let draws = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut v: Vec<f64> = (0..20_000)
                .map(|_| log_normal_latency(median, sigma, standard_normal(&mut rng)).as_secs_f64())
                .collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let v = draws(seed);
        assert_eq!(v, draws(seed));
        let (p50, p99) = (v[10_000], v[19_800]);
        assert!((0.019..0.021).contains(&p50), "{p50}");
        assert!((0.135..0.165).contains(&p99), "{p99}");
    }

    #[test]
    fn chunked_bodies_are_read_once_whole() {
        let body =
            b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\nNEXT";
        let (end, data) = chunked_body(body).unwrap();
        assert_eq!(data, b"hello world");
        assert_eq!(&body[end..], b"NEXT");
        // no trailers
        assert_eq!(
            chunked_body(b"2\r\nab\r\n0\r\n\r\n"),
            Some((12, b"ab".to_vec()))
        );
        // incomplete anywhere: not yet
        for cut in 1..body.len() - 4 {
            assert_eq!(chunked_body(&body[..cut]), None, "{cut}");
        }
    }

    #[test]
    fn aws_chunked_bodies_are_decoded() {
        let body = b"5;chunk-signature=abc\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n";
        assert_eq!(decode_aws_chunked(body).unwrap(), b"hello world");
        assert_eq!(decode_aws_chunked(b"zz\r\n"), None);
    }

    #[test]
    fn the_peak_rate_is_the_most_in_any_sliding_window() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        // 3 in [0, 100), then 4 in [150, 250): the sliding window finds 4 (not aligned to 100)
        let times = [at(0), at(10), at(90), at(150), at(160), at(200), at(249)];
        assert_eq!(peak_in_window(&times, WINDOW), 4);
        assert_eq!(peak_in_window(&[], WINDOW), 0);
        // a span is [t, t + width): 100 ms apart are in two windows
        assert_eq!(peak_in_window(&[at(0), at(100)], WINDOW), 1);
    }

    #[test]
    fn the_in_flight_timeline_holds_the_peak_of_each_window() {
        let t = Instant::now();
        let put = |from: u64, to: u64| Put {
            arrived: t + Duration::from_millis(from),
            answered: t + Duration::from_millis(to),
            status: 200,
        };
        // two overlap in the first window; one spans the second and third; none after
        let puts = [put(0, 20), put(10, 30), put(50, 60), put(120, 290)];
        assert_eq!(in_flight_timeline(&puts, t, WINDOW), vec![2, 1, 1]);
        // back to back (one answered as the next arrives) is one at a time
        let chain = [put(0, 20), put(20, 40), put(40, 60)];
        assert_eq!(in_flight_timeline(&chain, t, WINDOW), vec![1]);
        assert!(in_flight_timeline(&[], t, WINDOW).is_empty());
    }
}
