//! The chaos run's fault proxy: the functions' only way to the emulator. It sits on 127.0.0.1
//! and, for a share of the SQS and S3 calls, answers with a throttling or 5xx error instead of
//! forwarding, or forwards and then loses the answer (the call took effect; the caller is told
//! it failed). It also plays the orders' flaky downstream (the reference handler's conditional
//! put of `orders/{id}.json` fails for a planned number of attempts, or always), and it keeps
//! the evidence the audit needs: each successful order write, and the `x-redrive-count` of
//! every copy sent. Production code has no fault switch: the faults come from outside.
//!
//! It also counts what passes (for the soak's outage profile): every call by caller and action
//! (`sqs:ReceiveMessage`, `s3:PutObject`, `cloudwatch:DescribeAlarms`,
//! `lambda:GetEventSourceMapping`, …), every attempt at an order write, the copies of each order
//! sent to the queues it was told of, and the messages received from those queues past their
//! retention.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use resq::attributes::X_REDRIVE_COUNT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::demo::{DEMO_ORDER_ATTRIBUTE, Downstream};
use crate::http::{HttpRequest, next_request, serve_on_thread};
use crate::{CliError, lock};

/// Which API a call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// SQS (JSON protocol, `X-Amz-Target: AmazonSQS.*`).
    Sqs,
    /// S3 (REST, path-style against the emulator).
    S3,
    /// CloudWatch (the Query protocol: a form body naming its `Action`); never faulted.
    CloudWatch,
    /// Lambda (REST under `/2015-03-31/`: the event source mapping calls); never faulted.
    Lambda,
}

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Throttling, not forwarded (SQS `ThrottlingException` 400, S3 `SlowDown` 503).
    Throttle,
    /// A 5xx, not forwarded (`InternalError` 500 / `ServiceUnavailable` 503).
    ServerError,
    /// Forwarded and done, but the caller gets a 500: the ambiguous failure.
    LostResponse,
}

/// What the proxy reads off one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The API.
    pub service: Service,
    /// `SendMessageBatch`, `PutObject`, …
    pub action: String,
    /// For a `PutObject` of `orders/{id}.json`: the order id (an order handler's effect).
    pub order_write: Option<String>,
}

/// Reads what a request is from its request line and `X-Amz-Target` header (SQS and S3); see
/// [`call_of_body`] for the APIs told by their body.
pub fn call_of(head: &str, target: Option<&str>) -> Call {
    call_of_body(head, target, &[])
}

/// Reads what a request is from its request line, `X-Amz-Target` header and body: SQS by its
/// target, Lambda by its path, CloudWatch's Query protocol by the `Action` of its form body,
/// anything else as S3.
pub fn call_of_body(head: &str, target: Option<&str>, body: &[u8]) -> Call {
    if let Some(t) = target.filter(|t| t.starts_with("AmazonSQS.")) {
        return Call {
            service: Service::Sqs,
            action: t.trim_start_matches("AmazonSQS.").to_owned(),
            order_write: None,
        };
    }
    let mut parts = head.lines().next().unwrap_or_default().split_whitespace();
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    if let Some(rest) = path.strip_prefix("/2015-03-31/") {
        return Call {
            service: Service::Lambda,
            action: lambda_action(method, rest).to_owned(),
            order_write: None,
        };
    }
    if method == "POST"
        && path == "/"
        && let Some(action) = form_action(body)
    {
        return Call {
            service: Service::CloudWatch,
            action,
            order_write: None,
        };
    }
    // path-style: /{bucket}/{key}
    let key = path.trim_start_matches('/').split_once('/').map(|(_, k)| k);
    let order_write = (method == "PUT")
        .then(|| key?.strip_prefix("orders/")?.strip_suffix(".json"))
        .flatten()
        .map(str::to_owned);
    let action = match (method, key) {
        ("PUT", Some(_)) => "PutObject",
        ("GET", Some(_)) => "GetObject",
        ("HEAD", Some(_)) => "HeadObject",
        ("DELETE", Some(_)) => "DeleteObject",
        (_, None) => "Bucket",
        _ => "?",
    };
    Call {
        service: Service::S3,
        action: action.to_owned(),
        order_write,
    }
}

/// The Lambda API operation of a request under `/2015-03-31/` (`rest`: the path after it).
fn lambda_action(method: &str, rest: &str) -> &'static str {
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        ("GET", ["event-source-mappings", _]) => "GetEventSourceMapping",
        ("PUT", ["event-source-mappings", _]) => "UpdateEventSourceMapping",
        ("GET", ["event-source-mappings"]) => "ListEventSourceMappings",
        ("POST", ["event-source-mappings"]) => "CreateEventSourceMapping",
        ("DELETE", ["event-source-mappings", _]) => "DeleteEventSourceMapping",
        ("GET", ["functions", _]) => "GetFunction",
        ("POST", ["functions", _, "invocations"]) => "Invoke",
        _ => "Other",
    }
}

/// The `Action` of a Query-protocol form body (`Action=DescribeAlarms&Version=…`).
fn form_action(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&')
        .find_map(|p| p.strip_prefix("Action="))
        .filter(|a| !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(str::to_owned)
}

/// A call's name in the outage profile: `sqs:ReceiveMessage`, `s3:PutObject`, `s3:GetObject`,
/// `s3:ListBucket`, `cloudwatch:DescribeAlarms`, `lambda:GetEventSourceMapping`, … (an S3 listing
/// is `s3:ListBucket`, what S3 bills as a LIST request).
pub fn action_name(call: &Call) -> String {
    match call.service {
        Service::Sqs => format!("sqs:{}", call.action),
        Service::S3 if call.action == "Bucket" => "s3:ListBucket".to_owned(),
        Service::S3 => format!("s3:{}", call.action),
        Service::CloudWatch => format!("cloudwatch:{}", call.action),
        Service::Lambda => format!("lambda:{}", call.action),
    }
}

/// The IAM action a call is authorized as, and its resource (see [`FaultStats::calls`]): the
/// queue URL, or the object's whole key, or a listing's whole prefix. What this cannot map (an
/// SQS call without a queue, an S3 subresource such as `?versionId` or `?tagging`, a copy, an
/// ACL or tags sent along, another API) comes back as an action no role has, so that the run
/// reports it rather than letting it pass.
pub fn permission_of(head: &str, call: &Call, body: &[u8]) -> (String, String) {
    let unmapped = |what: &str| (format!("unmapped: {what}"), String::new());
    let request_line = head.lines().next().unwrap_or_default();
    match call.service {
        Service::CloudWatch => (format!("cloudwatch:{}", call.action), "*".into()),
        Service::Lambda => {
            let path = request_line.split_whitespace().nth(1).unwrap_or_default();
            let resource = path
                .split('?')
                .next()
                .unwrap_or_default()
                .trim_start_matches("/2015-03-31/")
                .to_owned();
            (format!("lambda:{}", call.action), resource)
        }
        Service::Sqs => {
            // a batch call authorizes as its single one
            let action = format!("sqs:{}", call.action.trim_end_matches("Batch"));
            let queue = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["QueueUrl"].as_str().map(str::to_owned));
            match queue {
                Some(q) => (action, q),
                None => (action, "(no QueueUrl)".into()),
            }
        }
        Service::S3 => {
            let mut parts = request_line.split_whitespace();
            let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
                return unmapped(request_line);
            };
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let params: Vec<(&str, &str)> = query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split_once('=').unwrap_or((p, "")))
                .collect();
            // query parameters that do not change what a call authorizes as
            const PLAIN: [&str; 12] = [
                "x-id",
                "list-type",
                "prefix",
                "continuation-token",
                "max-keys",
                "delimiter",
                "encoding-type",
                "start-after",
                "fetch-owner",
                "versions",
                "key-marker",
                "version-id-marker",
            ];
            if let Some((k, _)) = params.iter().find(|(k, _)| !PLAIN.contains(k)) {
                return unmapped(&format!("{method} ?{k}"));
            }
            let special = head.lines().skip(1).find_map(|l| {
                let name = l.split(':').next()?.trim().to_ascii_lowercase();
                (name == "x-amz-copy-source"
                    || name == "x-amz-tagging"
                    || name == "x-amz-acl"
                    || name.starts_with("x-amz-grant-"))
                .then_some(name)
            });
            if let Some(h) = special {
                return unmapped(&format!("{method} with {h}"));
            }
            let (bucket, key) = match path.trim_start_matches('/').split_once('/') {
                Some((b, k)) if !k.is_empty() => (b, Some(percent_decoded(k))),
                Some((b, _)) => (b, None),
                None => (path.trim_start_matches('/'), None),
            };
            let param = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
            match (method, key) {
                ("PUT", Some(k)) => ("s3:PutObject".into(), format!("{bucket}/{k}")),
                // HeadObject authorizes as GetObject
                ("GET" | "HEAD", Some(k)) => ("s3:GetObject".into(), format!("{bucket}/{k}")),
                ("DELETE", Some(k)) => ("s3:DeleteObject".into(), format!("{bucket}/{k}")),
                ("GET", None) => {
                    let action = if param("versions").is_some() {
                        "s3:ListBucketVersions"
                    } else {
                        "s3:ListBucket"
                    };
                    let prefix = percent_decoded(param("prefix").unwrap_or_default());
                    (action.into(), format!("{bucket} if s3:prefix={prefix}"))
                }
                _ => unmapped(request_line),
            }
        }
    }
}

/// `%XX` escapes decoded (a key or prefix as S3 sees it).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The HTTP response a fault puts in place of the emulator's.
pub fn error_response(service: Service, fault: Fault) -> Vec<u8> {
    let (status, reason, code) = match (service, fault) {
        (Service::Sqs, Fault::Throttle) => (400, "Bad Request", "ThrottlingException"),
        (Service::S3, Fault::Throttle) => (503, "Slow Down", "SlowDown"),
        (Service::Sqs, Fault::ServerError) => (503, "Service Unavailable", "ServiceUnavailable"),
        (_, _) => (500, "Internal Server Error", "InternalError"),
    };
    let (content_type, body) = match service {
        Service::Sqs | Service::Lambda => (
            "application/x-amz-json-1.0",
            format!(
                r#"{{"__type":"com.amazonaws.sqs#{code}","message":"injected by resq chaos"}}"#
            ),
        ),
        Service::S3 | Service::CloudWatch => (
            "application/xml",
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected by resq chaos</Message><RequestId>chaos</RequestId></Error>"#
            ),
        ),
    };
    let query_error = if service == Service::Sqs {
        format!("x-amzn-query-error: {code};Sender\r\n")
    } else {
        String::new()
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n{query_error}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What the proxy saw and did.
#[derive(Debug, Default)]
pub struct FaultStats {
    /// Requests seen.
    pub requests: AtomicU64,
    /// Random faults injected (throttling, 5xx, lost responses).
    pub injected: AtomicU64,
    /// Of those, calls that took effect but were reported failed.
    pub lost_responses: AtomicU64,
    /// Order writes failed on purpose (flaky and doomed orders).
    pub downstream_failures: AtomicU64,
    /// Order id → successful writes of `orders/{id}.json` (2xx from the emulator).
    pub order_writes: Mutex<HashMap<String, u32>>,
    /// Order id → the highest `x-redrive-count` of any copy sent to a queue.
    pub redrive_counts: Mutex<HashMap<String, u32>>,
    /// Every call as IAM authorizes it: (the caller's access key id, the IAM action, the
    /// resource: a queue URL, `{bucket}/{key}` for an object, `{bucket} if s3:prefix={prefix}`
    /// for a listing; see [`permission_of`]).
    pub calls: Mutex<BTreeSet<(String, String, String)>>,
    /// (the caller's access key id, [`action_name`]) → requests: what each caller asked for,
    /// faulted or not.
    pub actions: Mutex<BTreeMap<(String, String), u64>>,
    /// Order id → attempts at its write (`PutObject` of `orders/{id}.json`), failed or not.
    pub order_attempts: Mutex<HashMap<String, u32>>,
    /// (queue label, order id) → copies sent to that queue (`SendMessage(Batch)` entries), for
    /// the queues told with [`FaultProxy::watch_queue`].
    pub sent_to: Mutex<HashMap<(&'static str, String), u32>>,
    /// Copies carrying `x-redrive-count` ≥ 1 sent to a queue labelled [`MAIN`]: replays.
    pub replays: AtomicU64,
    /// Copies sent to a queue labelled [`DLQ`].
    pub dead_lettered: AtomicU64,
    /// Message ids received from a watched queue past that queue's retention (counted from
    /// their `SentTimestamp`): in AWS, SQS would have deleted them unarchived.
    pub aged_out: Mutex<BTreeSet<String>>,
}

/// The label of the main queue ([`FaultProxy::watch_queue`]).
pub const MAIN: &str = "main";
/// The label of the DLQ ([`FaultProxy::watch_queue`]).
pub const DLQ: &str = "dlq";

/// A queue the proxy is told of: its label and retention.
#[derive(Debug, Clone)]
struct Watched {
    label: &'static str,
    retention_ms: u64,
}

impl FaultStats {
    fn count(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// The requests so far by caller and action ([`FaultStats::actions`]).
    pub fn actions(&self) -> BTreeMap<(String, String), u64> {
        lock(&self.actions).clone()
    }
}

struct Shared {
    upstream: SocketAddr,
    rate: f64,
    rng: Mutex<StdRng>,
    downstream: Mutex<Downstream>,
    stats: Arc<FaultStats>,
    /// Queue URL → what the proxy counts of it.
    watched: Mutex<HashMap<String, Watched>>,
}

/// The running proxy (stops with the process).
pub struct FaultProxy {
    /// `http://127.0.0.1:{port}`: the functions' `AWS_ENDPOINT_URL`.
    pub endpoint: String,
    /// What it saw and did.
    pub stats: Arc<FaultStats>,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Forwards a free loopback port to `upstream`, failing `rate` (0–1) of the calls.
    pub fn start(
        upstream: SocketAddr,
        rate: f64,
        downstream: Downstream,
        seed: u64,
    ) -> Result<Self, CliError> {
        let stats = Arc::new(FaultStats::default());
        let shared = Arc::new(Shared {
            upstream,
            rate,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            downstream: Mutex::new(downstream),
            stats: stats.clone(),
            watched: Mutex::default(),
        });
        let served = shared.clone();
        let addr = serve_on_thread(move |client| {
            let shared = served.clone();
            async move {
                if let Err(e) = serve(client, &shared).await {
                    tracing::debug!(error = %e, "fault proxy: connection ended");
                }
            }
        })
        .map_err(CliError::Usage)?;
        Ok(Self {
            endpoint: format!("http://{addr}"),
            stats,
            shared,
        })
    }

    /// Takes the orders' downstream down (every order write fails) or brings it back.
    pub fn set_outage(&self, down: bool) {
        lock(&self.shared.downstream).outage = down;
    }

    /// Counts the copies sent to the queue at `url` under `label` ([`MAIN`], [`DLQ`]), and the
    /// messages received from it past `retention`.
    pub fn watch_queue(&self, url: &str, label: &'static str, retention: std::time::Duration) {
        lock(&self.shared.watched).insert(
            url.to_owned(),
            Watched {
                label,
                retention_ms: retention.as_millis() as u64,
            },
        );
    }

    /// Makes `order`'s write fail `failures` more times before it goes through.
    pub fn add_flaky(&self, order: &str, failures: u32) {
        lock(&self.shared.downstream)
            .flaky
            .insert(order.to_owned(), failures);
    }
}

/// One request per connection: answered, then closed (`Connection: close` both ways), so a
/// fault never leaves a half-read response on a pooled connection.
async fn serve(mut client: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(16 * 1024);
    let Some(request) = next_request(&mut client, &mut buf).await? else {
        return Ok(());
    };
    let stats = &shared.stats;
    FaultStats::count(&stats.requests);
    let target = request.header("x-amz-target");
    let body = request.body(&buf);
    let call = call_of_body(&request.head, target.as_deref(), body);
    if call.service == Service::Sqs && call.action.starts_with("SendMessage") {
        note_redrive_counts(body, stats);
        note_sends(body, stats, &lock(&shared.watched));
    }
    let (action, resource) = permission_of(&request.head, &call, body);
    let caller = request
        .header("authorization")
        .and_then(|a| {
            let key = a.split_once("Credential=")?.1;
            Some(key.split('/').next()?.to_owned())
        })
        .unwrap_or_default();
    *lock(&stats.actions)
        .entry((caller.clone(), action_name(&call)))
        .or_default() += 1;
    lock(&stats.calls).insert((caller, action, resource));
    if let Some(id) = &call.order_write {
        *lock(&stats.order_attempts).entry(id.clone()).or_default() += 1;
    }
    let receive_from = (call.service == Service::Sqs && call.action == "ReceiveMessage")
        .then(|| queue_url_of(body))
        .flatten()
        .and_then(|url| lock(&shared.watched).get(&url).cloned());
    let downstream_fails = call.order_write.as_ref().is_some_and(|id| {
        let mut d = lock(&shared.downstream);
        if d.outage || d.doomed.contains(id) {
            return true;
        }
        match d.flaky.get_mut(id) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    });
    if downstream_fails {
        FaultStats::count(&stats.downstream_failures);
        client
            .write_all(&error_response(call.service, Fault::ServerError))
            .await?;
        return client.shutdown().await;
    }
    let faultable = matches!(call.service, Service::Sqs | Service::S3);
    let fault = {
        let mut rng = lock(&shared.rng);
        (faultable && rng.random::<f64>() < shared.rate).then(|| match rng.random_range(0..3) {
            0 => Fault::Throttle,
            1 => Fault::ServerError,
            _ => Fault::LostResponse,
        })
    };
    if let Some(f) = fault {
        FaultStats::count(&stats.injected);
        if f != Fault::LostResponse {
            client.write_all(&error_response(call.service, f)).await?;
            return client.shutdown().await;
        }
        FaultStats::count(&stats.lost_responses);
    }
    let response = forward(shared.upstream, &request, &buf).await?;
    if let Some(watched) = receive_from {
        note_aged_out(&response, &watched, stats);
    }
    if let Some(id) = &call.order_write
        && status_of(&response).is_some_and(|s| (200..300).contains(&s))
    {
        *lock(&stats.order_writes).entry(id.clone()).or_default() += 1;
    }
    if fault == Some(Fault::LostResponse) {
        client
            .write_all(&error_response(call.service, Fault::LostResponse))
            .await?;
    } else {
        client.write_all(&response).await?;
    }
    client.shutdown().await
}

/// Sends the request upstream on a connection of its own and reads the whole answer.
async fn forward(
    upstream: SocketAddr,
    request: &HttpRequest,
    buf: &[u8],
) -> std::io::Result<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    server
        .write_all(close_head(&request.head).as_bytes())
        .await?;
    server.write_all(request.body(buf)).await?;
    let mut response = Vec::new();
    server.read_to_end(&mut response).await?;
    Ok(response)
}

/// The request head with `Connection: close` (and no `Expect`: the body is sent at once).
fn close_head(head: &str) -> String {
    let mut out = String::with_capacity(head.len() + 20);
    for line in head.split("\r\n").filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("connection") || name.eq_ignore_ascii_case("expect") {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// The final status code of a response (after any `100 Continue`).
fn status_of(response: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(&response[..response.len().min(4096)]);
    text.split("\r\n")
        .filter(|l| l.starts_with("HTTP/"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u16>().ok())
        .find(|s| *s >= 200)
}

/// Records the `x-redrive-count` of every message a `SendMessage(Batch)` carries, by order.
fn note_redrive_counts(body: &[u8], stats: &FaultStats) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let entries: Vec<&serde_json::Value> = match v.get("Entries").and_then(|e| e.as_array()) {
        Some(entries) => entries.iter().collect(),
        None => vec![&v],
    };
    let mut counts = lock(&stats.redrive_counts);
    for e in entries {
        let attrs = &e["MessageAttributes"];
        let (Some(order), Some(count)) = (
            attrs[DEMO_ORDER_ATTRIBUTE]["StringValue"].as_str(),
            attrs[X_REDRIVE_COUNT]["StringValue"].as_str(),
        ) else {
            continue;
        };
        // an unreadable count is the consumer's and redriver's problem to archive, not a loop
        if let Ok(n) = count.trim().parse::<u32>() {
            let max = counts.entry(order.to_owned()).or_default();
            *max = (*max).max(n);
        }
    }
}

/// The `QueueUrl` of an SQS JSON request body.
fn queue_url_of(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("QueueUrl")?
        .as_str()
        .map(str::to_owned)
}

/// Counts the copies a `SendMessage(Batch)` to a watched queue carries, by order, and among
/// them the replays into the main queue and the dead letters.
fn note_sends(body: &[u8], stats: &FaultStats, watched: &HashMap<String, Watched>) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let Some(queue) = v["QueueUrl"].as_str().and_then(|u| watched.get(u)) else {
        return;
    };
    let entries: Vec<&serde_json::Value> = match v.get("Entries").and_then(|e| e.as_array()) {
        Some(entries) => entries.iter().collect(),
        None => vec![&v],
    };
    let mut sent = lock(&stats.sent_to);
    for e in entries {
        let attrs = &e["MessageAttributes"];
        let replay = attrs[X_REDRIVE_COUNT]["StringValue"]
            .as_str()
            .and_then(|c| c.trim().parse::<u32>().ok())
            .is_some_and(|n| n >= 1);
        match queue.label {
            MAIN if replay => FaultStats::count(&stats.replays),
            DLQ => FaultStats::count(&stats.dead_lettered),
            _ => {}
        }
        if let Some(order) = attrs[DEMO_ORDER_ATTRIBUTE]["StringValue"].as_str() {
            *sent.entry((queue.label, order.to_owned())).or_default() += 1;
        }
    }
}

/// Notes the messages of a `ReceiveMessage` response from a watched queue that were past its
/// retention when received (by their `SentTimestamp`, when the caller asked for it).
fn note_aged_out(response: &[u8], queue: &Watched, stats: &FaultStats) {
    let Some((200, body)) = crate::http::http_response(response) else {
        return;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
        return;
    };
    let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
    for m in v["Messages"].as_array().into_iter().flatten() {
        let sent = m["Attributes"]["SentTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<u64>().ok());
        if let (Some(sent), Some(id)) = (sent, m["MessageId"].as_str())
            && now.saturating_sub(sent) > queue.retention_ms
        {
            lock(&stats.aged_out).insert(id.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_read_as_the_iam_action_and_resource_they_need() {
        let of = |head: &str, target: Option<&str>, body: &str| {
            let call = call_of(head, target);
            permission_of(head, &call, body.as_bytes())
        };
        let pair = |a: &str, r: &str| (a.to_owned(), r.to_owned());
        assert_eq!(
            of(
                "POST / HTTP/1.1\r\n",
                Some("AmazonSQS.ChangeMessageVisibilityBatch"),
                r#"{"QueueUrl":"http://q/1/orders","Entries":[]}"#
            ),
            pair("sqs:ChangeMessageVisibility", "http://q/1/orders")
        );
        assert_eq!(
            of("POST / HTTP/1.1\r\n", Some("AmazonSQS.ListQueues"), "{}"),
            pair("sqs:ListQueues", "(no QueueUrl)")
        );
        assert_eq!(
            of(
                "PUT /bkt/archive/TTL_EXPIRED/2026/x%3Ay.json?x-id=PutObject HTTP/1.1\r\n",
                None,
                ""
            ),
            pair("s3:PutObject", "bkt/archive/TTL_EXPIRED/2026/x:y.json")
        );
        assert_eq!(
            of("HEAD /bkt/kept/2026/a.json HTTP/1.1\r\n", None, ""),
            pair("s3:GetObject", "bkt/kept/2026/a.json")
        );
        assert_eq!(
            of(
                "GET /bkt?list-type=2&prefix=kept%2F2026%2F11%2F23%2F HTTP/1.1\r\n",
                None,
                ""
            ),
            pair("s3:ListBucket", "bkt if s3:prefix=kept/2026/11/23/")
        );
        assert_eq!(
            of("GET /bkt/?versions&prefix=orders%2F HTTP/1.1\r\n", None, ""),
            pair("s3:ListBucketVersions", "bkt if s3:prefix=orders/")
        );
        // what would need another permission is never read as the plain one
        for head in [
            "GET /bkt/kept/a.json?versionId=3 HTTP/1.1\r\n",
            "PUT /bkt/kept/a.json?tagging HTTP/1.1\r\n",
            "PUT /bkt/kept/a.json HTTP/1.1\r\nx-amz-copy-source: /bkt/orders/o.json\r\n",
            "PUT /bkt/kept/a.json HTTP/1.1\r\nX-Amz-Tagging: a=b\r\n",
            "POST / HTTP/1.1\r\n",
        ] {
            let (action, _) = of(head, None, "Action=DescribeAlarms");
            assert!(action.starts_with("unmapped: "), "{head}: {action}");
        }
    }

    #[test]
    fn order_writes_are_told_from_other_calls() {
        let put = call_of(
            "PUT /resq-archive/orders/DEMO-000007.json?x-id=PutObject HTTP/1.1\r\nHost: x\r\n",
            None,
        );
        assert_eq!(
            (put.service, put.action.as_str(), put.order_write.as_deref()),
            (Service::S3, "PutObject", Some("DEMO-000007"))
        );
        let archive = call_of(
            "PUT /b/archive/REDRIVE_CAP/2026/11/22/m.json HTTP/1.1\r\n",
            None,
        );
        assert_eq!(archive.order_write, None);
        let get = call_of("GET /b/orders/DEMO-1.json HTTP/1.1\r\n", None);
        assert_eq!((get.action.as_str(), get.order_write), ("GetObject", None));
        let sqs = call_of(
            "POST / HTTP/1.1\r\n",
            Some("AmazonSQS.ChangeMessageVisibilityBatch"),
        );
        assert_eq!(
            (sqs.service, sqs.action.as_str()),
            (Service::Sqs, "ChangeMessageVisibilityBatch")
        );
    }

    #[test]
    fn injected_errors_are_well_formed_http() {
        for service in [Service::Sqs, Service::S3] {
            for fault in [Fault::Throttle, Fault::ServerError, Fault::LostResponse] {
                let r = String::from_utf8(error_response(service, fault)).unwrap();
                let (head, body) = r.split_once("\r\n\r\n").unwrap();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(len, body.len());
                let status = status_of(r.as_bytes()).unwrap();
                assert!(status >= 400, "{service:?} {fault:?}: {status}");
            }
        }
    }

    #[test]
    fn the_forwarded_head_closes_and_drops_expect() {
        let head = "PUT /b/k HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(
            close_head(head),
            "PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            status_of(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 412 Precondition Failed\r\n\r\n"),
            Some(412)
        );
    }

    #[test]
    fn redrive_counts_are_kept_per_order_at_their_highest() {
        let stats = FaultStats::default();
        let entry = |order: &str, count: &str| {
            serde_json::json!({"Id": "0", "MessageBody": "{}", "MessageAttributes": {
                DEMO_ORDER_ATTRIBUTE: {"DataType": "String", "StringValue": order},
                X_REDRIVE_COUNT: {"DataType": "Number", "StringValue": count}}})
        };
        let batch =
            serde_json::json!({"QueueUrl": "q", "Entries": [entry("A", "2"), entry("B", "1")]});
        note_redrive_counts(batch.to_string().as_bytes(), &stats);
        note_redrive_counts(entry("A", "1").to_string().as_bytes(), &stats);
        note_redrive_counts(entry("B", "nonsense").to_string().as_bytes(), &stats);
        let counts = lock(&stats.redrive_counts).clone();
        assert_eq!(
            counts,
            HashMap::from([("A".to_owned(), 2), ("B".to_owned(), 1)])
        );
    }
}
