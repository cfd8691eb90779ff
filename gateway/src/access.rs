//! Request tracing: each API request's trace id and the rate-bounded access log.
//!
//! The trace id comes from the client's (or the balancer's) `X-Request-Id` when that is a
//! short token, else it is generated. It is echoed in the answer's `X-Request-Id` and put
//! on the log lines written while the request is served. It is not the claim's
//! idempotency `request_id` (a body field that decides replays); it only correlates logs.
//!
//! The id travels in a task-local rather than a tracing span: a span per request costs an
//! allocation and a formatting pass on the claim path even when nothing is logged, while
//! the task-local is one thread-local swap per poll. Log sites on the request path add
//! `trace_id = %access::trace_id()`.
//!
//! The access log (target `flashgate_access`, one line per request: method, route,
//! status, latency, hashed user, trace id) is off unless `--access-log-rate` is set, and
//! then bounded to that many lines per second: past the bound lines are dropped and
//! counted, so the opening rush of a sale cannot flood the log pipeline or the disk.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Response};
use metrics::Counter;

use crate::metrics::ACCESS_LOG_DROPPED;

/// The header the trace id is read from and echoed in.
pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Longest trace id taken from a client; longer ones are replaced by a generated id.
pub(crate) const MAX_TRACE_ID_LEN: usize = 64;

tokio::task_local! {
    static CURRENT: RequestCtx;
}

/// What the request's task knows about it for logging.
struct RequestCtx {
    trace_id: HeaderValue,
    /// `Some(key)` while the access log is on: the user is hashed with it.
    hash_key: Option<u64>,
    user: Cell<Option<u64>>,
}

/// The access log's bound and the generator of trace ids (one per API listener).
pub(crate) struct AccessLog {
    limiter: Option<DefaultDirectRateLimiter>,
    hash_key: u64,
    dropped: Counter,
    next_id: AtomicU64,
}

impl AccessLog {
    /// `rate` lines per second at most (0 = off). `key` seeds the user hash: the same key
    /// on every gateway makes a user's lines correlate across gateways; without one a
    /// random per-process key is used.
    pub(crate) fn new(rate: u32, key: Option<u64>) -> Self {
        let limiter =
            NonZeroU32::new(rate).map(|r| RateLimiter::direct(Quota::per_second(r).allow_burst(r)));
        Self {
            limiter,
            hash_key: key.unwrap_or_else(rand::random),
            dropped: metrics::counter!(ACCESS_LOG_DROPPED),
            // Random start: ids of two gateways (or two runs) do not collide in practice.
            next_id: AtomicU64::new(rand::random()),
        }
    }

    /// The trace id for a request with these headers.
    pub(crate) fn trace_id(&self, headers: &HeaderMap) -> HeaderValue {
        if let Some(v) = headers.get(&X_REQUEST_ID) {
            if is_token(v.as_bytes()) {
                return v.clone();
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut buf = [0u8; 16];
        hex(id, &mut buf);
        HeaderValue::from_bytes(&buf).unwrap_or_else(|_| HeaderValue::from_static("-"))
    }

    /// Serves one request under its trace id: `serve` runs with the id in scope, the
    /// answer gets the `X-Request-Id` header, and the access log gets a line if it is on
    /// and under its bound. Generic in the body (it reads only the status and sets a
    /// header), so this module needs nothing of `reply.rs`, which logs with its trace ids.
    pub(crate) async fn around<F, B>(
        &self,
        method: Method,
        trace_id: HeaderValue,
        started: Instant,
        serve: F,
    ) -> Response<B>
    where
        F: Future<Output = (&'static str, Response<B>)>,
    {
        let ctx = RequestCtx {
            trace_id,
            hash_key: self.limiter.as_ref().map(|_| self.hash_key),
            user: Cell::new(None),
        };
        // The scope hands its value back once done, so the id is not cloned for it (a
        // clone of a freshly made header value allocates, and both copies are dropped).
        let mut scope = std::pin::pin!(CURRENT.scope(ctx, serve));
        let (route, mut resp) = scope.as_mut().await;
        let Some(RequestCtx { trace_id, user, .. }) = scope.as_mut().take_value() else {
            unreachable!("a finished task-local scope gives its value back once")
        };
        let user = user.get();
        if let Some(limiter) = &self.limiter {
            if limiter.check().is_ok() {
                tracing::info!(
                    target: "flashgate_access",
                    method = %method,
                    route,
                    status = resp.status().as_u16(),
                    latency_us = started.elapsed().as_micros() as u64,
                    user = %UserHash(user),
                    trace_id = trace_id.to_str().unwrap_or("-"),
                    "request"
                );
            } else {
                self.dropped.increment(1);
            }
        }
        resp.headers_mut().insert(X_REQUEST_ID.clone(), trace_id);
        resp
    }
}

/// Records the request's user for the access log (hashed; a no-op while the log is off).
pub(crate) fn set_user(user: &str) {
    let _ = CURRENT.try_with(|c| {
        if let Some(key) = c.hash_key {
            c.user
                .set(Some(twox_hash::XxHash64::oneshot(key, user.as_bytes())));
        }
    });
}

/// The current request's trace id, for log lines on the request path ("-" outside one).
pub(crate) fn trace_id() -> TraceId {
    TraceId(
        CURRENT
            .try_with(|c| c.trace_id.clone())
            .unwrap_or_else(|_| HeaderValue::from_static("-")),
    )
}

/// A trace id as a log field.
pub(crate) struct TraceId(HeaderValue);

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.to_str().unwrap_or("-"))
    }
}

/// A hashed user as a log field: 16 hex digits, or "-" when the request named none.
struct UserHash(Option<u64>);

impl fmt::Display for UserHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(h) => write!(f, "{h:016x}"),
            None => f.write_str("-"),
        }
    }
}

/// A trace id taken as given: 1..=64 bytes of `[A-Za-z0-9._:-]`. Anything else (spaces,
/// quotes, control bytes) is replaced, so a client cannot forge log structure.
fn is_token(b: &[u8]) -> bool {
    !b.is_empty()
        && b.len() <= MAX_TRACE_ID_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

fn hex(mut v: u64, out: &mut [u8; 16]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
}

/// Seed of the user hash from a key file's contents (`--access-log-key-file`); trailing
/// whitespace (a newline from `echo`) does not change the key.
pub(crate) fn key_from(contents: &[u8]) -> u64 {
    twox_hash::XxHash64::oneshot(0, contents.trim_ascii_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_kept_only_when_they_are_short_tokens() {
        let log = AccessLog::new(0, Some(1));
        let mut h = HeaderMap::new();
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("abc-123_x.y:z"));
        assert_eq!(log.trace_id(&h), "abc-123_x.y:z");
        for bad in ["has space", "quote\"", &"x".repeat(65), ""] {
            h.insert(&X_REQUEST_ID, HeaderValue::from_str(bad).unwrap());
            let id = log.trace_id(&h);
            assert_eq!(id.len(), 16, "{bad:?} -> {id:?}");
            assert_ne!(id, bad);
        }
    }

    #[test]
    fn generated_ids_are_distinct_hex() {
        let log = AccessLog::new(0, None);
        let a = log.trace_id(&HeaderMap::new());
        let b = log.trace_id(&HeaderMap::new());
        assert_ne!(a, b);
        assert!(a.as_bytes().iter().all(|c| c.is_ascii_hexdigit()));
    }
}
