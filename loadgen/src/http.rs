//! One keep-alive HTTP/1.1 connection of the load generator. Each worker owns exactly one,
//! so "N connections" means N sockets, as a fleet of clients would open. A failed or
//! timed-out exchange drops the socket (its state is unknown) and the next send reconnects.

use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper::header::HeaderValue;
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::outcome::Outcome;

/// Bound on connecting, so a dead target shows up as errors, not as a hang.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Answers larger than this are cut: a claim answer is a few hundred bytes.
const MAX_ANSWER: usize = 64 * 1024;

/// Where requests go: a socket address plus the Host header and path.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

impl Target {
    /// Parses `http://host:port[/path]`; `default_path` is used when the URL has none. A
    /// host name is resolved here, once (the system resolver's own timeout bounds it), so
    /// every connection of the run goes to the same address.
    pub fn parse(url: &str, default_path: &str) -> Result<Self, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("{url}: only http:// targets are supported"));
        }
        let auth = uri.authority().ok_or(format!("{url}: no host"))?;
        let port = auth.port_u16().unwrap_or(80);
        let host = auth.host().trim_start_matches('[').trim_end_matches(']');
        let addr = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) => resolve(host, port).map_err(|e| format!("{url}: {e}"))?,
        };
        let path = match uri.path() {
            "" | "/" => default_path.to_owned(),
            p => p.to_owned(),
        };
        Ok(Self {
            addr,
            host: auth.as_str().to_owned(),
            path,
        })
    }
}

/// The first address of `host` (IPv4 first: `localhost` may also name `::1`, which the
/// gateway need not listen on).
fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{host} has no address"))
}

/// The answer to one request, as far as the bench cares.
#[derive(Debug)]
pub struct Answer {
    pub outcome: Outcome,
    /// Body of a 200/201 (claim id for the invariant check); empty otherwise.
    pub body: Bytes,
}

type Io = TokioIo<TcpStream>;
/// The hyper connection future, pinned so the worker can poll it beside its request.
type Driver = Pin<Box<Connection<Io, Full<Bytes>>>>;

/// A lazily (re)connected HTTP/1.1 connection. Its hyper connection is driven inside the
/// worker's own task, beside the request: a separate connection task would cost two
/// cross-task wake-ups per answer, which at 1 000 connections was most of the load
/// generator's CPU.
pub struct Conn {
    target: Target,
    uri: Uri,
    host: HeaderValue,
    sender: Option<SendRequest<Full<Bytes>>>,
    conn: Option<Driver>,
    timeout: Duration,
}

impl Conn {
    pub fn new(target: Target, timeout: Duration) -> Self {
        // The target was parsed from a URL, so its path and host are valid; fall back to
        // "/" and an empty Host rather than panic.
        let uri = target
            .path
            .parse()
            .unwrap_or_else(|_| Uri::from_static("/"));
        let host = HeaderValue::from_str(&target.host).unwrap_or(HeaderValue::from_static(""));
        Self {
            target,
            uri,
            host,
            sender: None,
            conn: None,
            timeout,
        }
    }

    /// Opens the socket ahead of the first request.
    pub async fn warm(&mut self) {
        let _ = self.connect().await;
    }

    /// Whether the open connection is still usable: the peer may have closed it since the
    /// last answer (nothing polled it in between).
    fn usable(&mut self) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        if conn.as_mut().now_or_never().is_some() {
            return false;
        }
        self.sender.as_ref().is_some_and(|s| !s.is_closed())
    }

    async fn connect(&mut self) -> Result<(), Outcome> {
        if !self.usable() {
            self.drop_conn();
            let stream =
                tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(self.target.addr))
                    .await
                    .map_err(|_| Outcome::Timeout)?
                    .map_err(|_| Outcome::TransportError)?;
            let _ = stream.set_nodelay(true);
            let (sender, conn) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|_| Outcome::TransportError)?;
            self.sender = Some(sender);
            self.conn = Some(Box::pin(conn));
        }
        Ok(())
    }

    fn drop_conn(&mut self) {
        self.sender = None;
        self.conn = None;
    }

    /// POSTs `body` as JSON (with `Authorization: <auth>` when given) and classifies the
    /// answer; never panics on network data.
    pub async fn post(&mut self, body: Bytes, auth: Option<hyper::header::HeaderValue>) -> Answer {
        self.post_with(body, auth, &[]).await
    }

    /// [`Conn::post`] with extra request headers (a `Queue-Token`, say).
    pub async fn post_with(
        &mut self,
        body: Bytes,
        auth: Option<HeaderValue>,
        extra: &[(hyper::header::HeaderName, HeaderValue)],
    ) -> Answer {
        let timeout = self.timeout;
        let outcome = match tokio::time::timeout(timeout, self.exchange(body, auth, extra)).await {
            Ok(Ok(a)) => return a,
            Ok(Err(outcome)) => outcome,
            Err(_) => Outcome::Timeout,
        };
        // The connection's state is unknown: the next send reconnects.
        self.drop_conn();
        Answer {
            outcome,
            body: Bytes::new(),
        }
    }

    async fn exchange(
        &mut self,
        body: Bytes,
        auth: Option<HeaderValue>,
        extra: &[(hyper::header::HeaderName, HeaderValue)],
    ) -> Result<Answer, Outcome> {
        self.connect().await?;
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(hyper::header::HOST, self.host.clone())
            .header(
                hyper::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        if let Some(auth) = auth {
            req = req.header(hyper::header::AUTHORIZATION, auth);
        }
        for (name, value) in extra {
            req = req.header(name, value.clone());
        }
        let req = req
            .body(Full::new(body))
            .map_err(|_| Outcome::TransportError)?;
        let (Some(sender), Some(conn)) = (self.sender.as_mut(), self.conn.as_mut()) else {
            return Err(Outcome::TransportError);
        };
        let work = async {
            sender.ready().await.map_err(|_| Outcome::TransportError)?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(|_| Outcome::TransportError)?;
            let status = resp.status().as_u16();
            let body = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|_| Outcome::TransportError)?
                .to_bytes();
            Ok(Answer {
                outcome: Outcome::classify(status, &body),
                body,
            })
        };
        tokio::select! {
            r = work => r,
            // The connection ended (peer closed, I/O error) before the answer was whole.
            _ = conn.as_mut() => Err(Outcome::TransportError),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        let t = Target::parse("http://127.0.0.1:8080", "/v1/claims").unwrap();
        assert_eq!(t.addr.port(), 8080);
        assert_eq!(t.path, "/v1/claims");
        let t = Target::parse("http://localhost:9/x", "/v1/claims").unwrap();
        assert_eq!(t.path, "/x");
        assert!(Target::parse("https://127.0.0.1:1", "/").is_err());
        assert_eq!(
            Target::parse("http://localhost:7", "/").unwrap().addr,
            "127.0.0.1:7".parse().unwrap()
        );
    }
}
