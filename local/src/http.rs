//! Just enough HTTP/1.1 for the local tools that sit between a client and the emulator (the
//! bench's counting proxy, the chaos run's fault proxy and its Lambda runtime API): reading
//! one request off a connection, and serving connections on a loopback port; and for the live
//! pipeline's own calls (watch's `Invoke`, LocalStack's message listing): one `POST`, read back.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Listens on a free 127.0.0.1 port and runs `serve` for each connection, on a thread (and
/// runtime) of its own so the caller may block.
pub fn serve_on_thread<F, Fut>(serve: F) -> Result<SocketAddr, String>
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(format!("server runtime: {e}")));
                return;
            }
        };
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let listener = match TcpListener::bind("127.0.0.1:0").await {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(format!("cannot listen on 127.0.0.1: {e}")));
                    return;
                }
            };
            let _ = tx.send(listener.local_addr().map_err(|e| e.to_string()));
            while let Ok((conn, _)) = listener.accept().await {
                let _ = conn.set_nodelay(true);
                tokio::task::spawn_local(serve(conn));
            }
        });
    });
    rx.recv().map_err(|_| "server thread died".to_owned())?
}

/// One HTTP/1.1 request at the start of a buffer.
pub struct HttpRequest {
    /// The request line and headers.
    pub head: String,
    head_end: usize,
    /// Where the request ends in the buffer.
    pub end: usize,
}

impl HttpRequest {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    /// The method and the target of the request line (`PUT`, `/bucket/key?x=1`).
    pub fn method_and_target(&self) -> (&str, &str) {
        let mut first = self
            .head
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace();
        (
            first.next().unwrap_or_default(),
            first.next().unwrap_or_default(),
        )
    }

    /// The body, out of the buffer it was read into.
    pub fn body<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        &buf[self.head_end..self.end]
    }
}

/// Reads until `buf` starts with a whole request (`Content-Length` bodies only: the SQS clients
/// measured here send no chunked bodies); `None` when the peer closed the connection.
pub async fn next_request<R: tokio::io::AsyncRead + Unpin>(
    from: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<HttpRequest>> {
    let Some(request) = read_head(from, buf).await? else {
        return Ok(None);
    };
    read_body(from, buf, &request).await?;
    Ok(Some(request))
}

/// [`next_request`] on a connection that also answers `Expect: 100-continue` (as the AWS
/// SDKs send with S3 uploads) before it waits for the body.
pub async fn next_request_continuing<S>(
    conn: &mut S,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<HttpRequest>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Some(request) = read_head(conn, buf).await? else {
        return Ok(None);
    };
    let expects = request
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if expects && buf.len() < request.end {
        conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    read_body(conn, buf, &request).await?;
    Ok(Some(request))
}

/// Reads until `buf` holds a request's head; the request, its end counted from its
/// `Content-Length`.
async fn read_head<R: tokio::io::AsyncRead + Unpin>(
    from: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<HttpRequest>> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let mut request = HttpRequest {
        head: String::from_utf8_lossy(&buf[..head_end]).into_owned(),
        head_end,
        end: head_end,
    };
    if request
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        return Err(std::io::Error::other(
            "chunked request bodies are not supported",
        ));
    }
    let len: usize = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    request.end = head_end + len;
    Ok(Some(request))
}

/// Reads until `buf` holds the whole of `request`.
async fn read_body<R: tokio::io::AsyncRead + Unpin>(
    from: &mut R,
    buf: &mut Vec<u8>,
    request: &HttpRequest,
) -> std::io::Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    while buf.len() < request.end {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One HTTP/1.1 `POST` to `addr` (`host:port`) with `headers` (each ending `\r\n`) and
/// `body`, on a connection of its own; the raw response, read to the end.
pub async fn post(addr: &str, path: &str, headers: &str, body: &str) -> std::io::Result<Vec<u8>> {
    let mut conn = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await?;
    Ok(raw)
}

/// A complete HTTP/1.1 response's status and body (by `Content-Length`, chunked, or to the
/// end of the connection).
pub fn http_response(raw: &[u8]) -> Option<(u16, String)> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            let start = eol + 2;
            out.extend_from_slice(rest.get(start..start + size)?);
            rest = rest.get(start + size + 2..).unwrap_or_default();
        }
        body = out;
    } else if let Some(len) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        body.truncate(len);
    }
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_responses_by_length_chunked_and_to_the_end() {
        let by_length = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}extra";
        assert_eq!(http_response(by_length), Some((200, "{}".into())));
        let chunked = b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(http_response(chunked), Some((500, "abcde".into())));
        let to_end = b"HTTP/1.1 404 Not Found\r\n\r\nmissing";
        assert_eq!(http_response(to_end), Some((404, "missing".into())));
        assert_eq!(http_response(b"garbage"), None);
    }
}
