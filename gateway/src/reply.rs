//! Every answer is built here: one JSON shape (`status` + a human `error` for rejections),
//! `Retry-After` where the client should come back, `Allow` on 405. Handlers return a
//! [`Reply`]; nothing else writes a response.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use identity::Refusal;
use serde_json::{Map, Value};
use shard_router::{ApiStatus, StockError};

use crate::access;

pub(crate) type Body = Full<Bytes>;

/// How a client learns the outcome of a request Redis may or may not have run (a timeout,
/// a dropped connection): what the ambiguous 503 tells it to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A retry repeats nothing it should not: a read, or a draw entry or queue join (both
    /// per user, not per request).
    Safe,
    /// A claim with a `request_id`: a retry with the same id gets the stored answer.
    SameRequestId,
    /// A claim without one: no retry can learn the outcome (a retry claims afresh).
    Blind,
}

impl Retry {
    /// The hint for a claim, which depends on whether it carried a `request_id`.
    pub(crate) fn for_claim(request_id: Option<&str>) -> Self {
        match request_id {
            Some(_) => Self::SameRequestId,
            None => Self::Blind,
        }
    }

    /// What the answer's `error` tells the client to do next.
    pub(crate) fn hint(self) -> &'static str {
        match self {
            Self::Safe => "retry to learn the outcome",
            Self::SameRequestId => "retry with the same request_id to learn the outcome",
            Self::Blind => {
                "the outcome is unknown, and without a request_id no retry can learn it (a retry \
                 may claim again): check the user's claims before retrying, and send a \
                 request_id next time"
            }
        }
    }
}

/// An answer on its way out.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    body: Content,
    retry_after: Option<u64>,
    allow: Option<&'static str>,
    /// 401s say how to authenticate (`WWW-Authenticate: Bearer`).
    challenge: bool,
    /// `Connection: close`: the request's body is left unread (a 413), so the connection
    /// cannot carry another request, and the client should know before it tries.
    close: bool,
}

/// A body still to be rendered, or one already rendered (the claim answers, which are
/// built straight from a struct to spare the map and its allocations).
#[derive(Debug)]
enum Content {
    Value(Value),
    Rendered(Vec<u8>),
}

impl Reply {
    /// An answer rendered from `body`, which must serialize to a JSON object with a
    /// `status` field.
    pub(crate) fn rendered(status: StatusCode, body: &impl serde::Serialize) -> Self {
        Self::raw(
            status,
            serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec()),
        )
    }

    /// An answer whose JSON object (with its `status` field) is already written.
    pub(crate) fn raw(status: StatusCode, body: Vec<u8>) -> Self {
        Self {
            status,
            body: Content::Rendered(body),
            retry_after: None,
            allow: None,
            challenge: false,
            close: false,
        }
    }

    /// A JSON answer; `body` must be an object (it gets the `status` field).
    pub(crate) fn json(status: StatusCode, kind: ApiStatus, mut body: Map<String, Value>) -> Self {
        body.insert("status".into(), kind.as_str().into());
        Self {
            status,
            body: Content::Value(Value::Object(body)),
            retry_after: None,
            allow: None,
            challenge: false,
            close: false,
        }
    }

    /// A rejection: `{"status": kind, "error": message}`.
    pub(crate) fn error(status: StatusCode, kind: ApiStatus, message: impl Into<String>) -> Self {
        let mut body = Map::new();
        body.insert("error".into(), message.into().into());
        Self::json(status, kind, body)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::error(StatusCode::BAD_REQUEST, ApiStatus::BadRequest, message)
    }

    pub(crate) fn not_found(path: &str) -> Self {
        Self::error(
            StatusCode::NOT_FOUND,
            ApiStatus::NotFound,
            format!("no route for {path}"),
        )
    }

    pub(crate) fn method_not_allowed(allow: &'static str) -> Self {
        let mut r = Self::error(
            StatusCode::METHOD_NOT_ALLOWED,
            ApiStatus::MethodNotAllowed,
            format!("only {allow} is allowed here"),
        );
        r.allow = Some(allow);
        r
    }

    pub(crate) fn overloaded() -> Self {
        Self::error(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiStatus::Overloaded,
            "too many requests in flight; nothing was taken, retry shortly",
        )
        .retry_after(1)
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::error(
            StatusCode::SERVICE_UNAVAILABLE,
            ApiStatus::Unavailable,
            message,
        )
        .retry_after(1)
    }

    /// 429 for a client address or a user over its rate, back after `wait`.
    pub(crate) fn rate_limited(message: &str, wait: std::time::Duration) -> Self {
        Self::error(
            StatusCode::TOO_MANY_REQUESTS,
            ApiStatus::RateLimited,
            message,
        )
        .retry_after(wait.as_secs_f64().ceil() as u64)
    }

    pub(crate) fn unknown_sku(sku: u64) -> Self {
        Self::error(
            StatusCode::NOT_FOUND,
            ApiStatus::UnknownSku,
            format!("sku {sku} has no campaign or is not preheated"),
        )
        .with("sku", sku)
    }

    /// Redis trouble. Internals stay in the log; the client learns whether anything may
    /// have been taken. Any Redis-side failure (connection, timeout, an error reply such as
    /// OOM) is 503; a script reply this build does not understand is a deployment bug, so
    /// 500.
    ///
    /// `retry` says how the client learns the outcome when Redis may have run the call.
    pub(crate) fn redis_trouble(e: &StockError, retry: Retry) -> Self {
        match e {
            StockError::Protocol { .. } | StockError::InvalidArgument(_) => {
                tracing::error!(error = %e, trace_id = %access::trace_id(), "stock protocol failure");
                Self::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ApiStatus::Internal,
                    "internal error",
                )
            }
            StockError::Restoring { .. } => Self::error(
                StatusCode::SERVICE_UNAVAILABLE,
                ApiStatus::Restoring,
                "stock shard restarted and is being checked against the ledger; nothing was taken, retry shortly",
            )
            .retry_after(1),
            _ if e.is_ambiguous() => {
                tracing::debug!(error = %e, trace_id = %access::trace_id(), "redis did not answer");
                Self::unavailable(format!(
                    "stock service did not answer in time; {}",
                    retry.hint()
                ))
            }
            _ => {
                tracing::debug!(error = %e, trace_id = %access::trace_id(), "redis unavailable");
                Self::unavailable("stock service unavailable; nothing was taken")
            }
        }
    }

    /// Adds a field to the body.
    pub(crate) fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        if let Content::Value(Value::Object(m)) = &mut self.body {
            m.insert(key.into(), value.into());
        }
        self
    }

    pub(crate) fn challenge(mut self) -> Self {
        self.challenge = true;
        self
    }

    pub(crate) fn close(mut self) -> Self {
        self.close = true;
        self
    }

    pub(crate) fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }

    pub(crate) fn into_response(self) -> Response<Body> {
        let mut bytes = match self.body {
            Content::Value(v) => serde_json::to_vec(&v).unwrap_or_else(|_| b"{}".to_vec()),
            Content::Rendered(b) => b,
        };
        #[cfg(debug_assertions)]
        assert_declared(self.status, &bytes);
        bytes.push(b'\n');
        let mut resp = Response::new(Full::new(Bytes::from(bytes)));
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(secs) = self.retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(allow) = self.allow {
            h.insert(ALLOW, HeaderValue::from_static(allow));
        }
        if self.challenge {
            h.insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer realm="flashgate""#),
            );
        }
        if self.close {
            h.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// Every answer's pair of HTTP code and `status` is one that `ApiStatus::codes` declares:
/// docs/API.md's status tables are held to that list (gateway/tests/docs.rs), so an answer
/// outside it is a bug, caught in debug builds by whichever test produces it.
#[cfg(debug_assertions)]
fn assert_declared(code: StatusCode, body: &[u8]) {
    let value: Value = serde_json::from_slice(body).unwrap_or_default();
    let status = value.get("status").and_then(Value::as_str);
    match status.map(str::parse::<ApiStatus>) {
        Some(Ok(kind)) => assert!(
            kind.codes().contains(&code.as_u16()),
            "an answer {code} with status {kind}: add the pair to shard-router/src/status.rs and docs/API.md"
        ),
        _ => panic!("an answer {code} without a known status: {value}"),
    }
}

/// The identity crate's refusals: 401 with the Bearer challenge, or 400.
impl From<Refusal> for Reply {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Unauthorized(message) => {
                Self::error(StatusCode::UNAUTHORIZED, ApiStatus::Unauthorized, message).challenge()
            }
            Refusal::BadRequest(message) => Self::bad_request(message),
        }
    }
}

/// Plain text (the Prometheus page).
pub(crate) fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// `{"status": "ok"}`-style small answers.
pub(crate) fn status_only(status: StatusCode, kind: ApiStatus) -> Reply {
    Reply::json(status, kind, Map::new())
}
