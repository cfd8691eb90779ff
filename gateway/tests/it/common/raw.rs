//! A raw-TCP HTTP/1.1 client for tests that must send what no well-behaved client would
//! (trickled heads, oversized or pipelined requests) and read whatever comes back.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use shard_router::ApiStatus;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on any single exchange in these tests.
pub(crate) const EXCHANGE_LIMIT: Duration = Duration::from_secs(5);

/// What came back on a raw connection.
#[derive(Debug)]
pub(crate) struct RawAnswer {
    /// HTTP status, `None` when the server closed without answering.
    pub(crate) status: Option<u16>,
    /// JSON body (`Null` when none or not JSON).
    pub(crate) body: Value,
}

impl RawAnswer {
    /// The `status` field, when it names a known status.
    pub(crate) fn kind(&self) -> Option<ApiStatus> {
        self.body["status"].as_str()?.parse().ok()
    }
}

pub(crate) fn parse_answer(buf: &[u8]) -> RawAnswer {
    let text = String::from_utf8_lossy(buf);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok());
    let body = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b.trim()).ok())
        .unwrap_or(Value::Null);
    RawAnswer { status, body }
}

/// Sends `request` (in pieces, ignoring write errors: the server may refuse and close
/// before it has read everything) while reading the answer until the server closes.
pub(crate) async fn raw_exchange(addr: SocketAddr, request: Vec<u8>) -> RawAnswer {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        for piece in request.chunks(16 * 1024) {
            if wr.write_all(piece).await.is_err() {
                return;
            }
        }
        // Keep the write half open: closing it could end the exchange early.
        tokio::time::sleep(EXCHANGE_LIMIT).await;
    });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + EXCHANGE_LIMIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rd.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => {
                buf.extend_from_slice(&chunk[..n]);
                if complete(&buf) {
                    break;
                }
            }
        }
    }
    writer.abort();
    parse_answer(&buf)
}

/// A full response head plus `content-length` bytes of body has arrived.
pub(crate) fn complete(buf: &[u8]) -> bool {
    let text = String::from_utf8_lossy(buf);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(usize::MAX);
    body.len() >= len
}

/// A well-formed claim on its own connection.
pub(crate) fn claim_request(sku: u64, user: &str) -> Vec<u8> {
    let body = format!(r#"{{"sku":{sku},"user":"{user}"}}"#);
    format!(
        "POST /v1/claims HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One normal claim; returns its answer and latency.
pub(crate) async fn normal_claim(addr: SocketAddr, sku: u64, user: &str) -> (RawAnswer, Duration) {
    let started = Instant::now();
    let a = raw_exchange(addr, claim_request(sku, user)).await;
    (a, started.elapsed())
}
