//! What a claim ends as: a [`Claimed`] or a [`Refusal`]. Each knows its `outcome` metric
//! label and turns into its answer, so the handler returns early with `?` and the mapping
//! to docs/API.md "HTTP API" sits in one place.

use std::time::Duration;

use hyper::StatusCode;
use shard_router::decision::{ClaimOrigin, Decision};
use shard_router::{ApiStatus, Claim, SkuMeta, StockError};

use crate::durability;
use crate::metrics::outcome;
use crate::reply::{Reply, Retry};

/// A claim to acknowledge.
#[derive(Debug)]
pub(super) struct Claimed {
    claim: Claim,
    origin: ClaimOrigin,
}

impl Claimed {
    pub(super) fn new(claim: Claim, origin: ClaimOrigin) -> Self {
        Self { claim, origin }
    }

    /// The value of the `outcome` label.
    pub(super) fn label(&self) -> &'static str {
        match self.origin {
            ClaimOrigin::Fresh => outcome::CLAIMED,
            ClaimOrigin::Rerouted => outcome::REROUTED,
            ClaimOrigin::Replay => outcome::REPLAY,
        }
    }
}

impl From<Claimed> for Reply {
    /// 201 for a new claim, 200 for its replay, the same body for both.
    fn from(c: Claimed) -> Self {
        let status = match c.origin {
            ClaimOrigin::Fresh | ClaimOrigin::Rerouted => StatusCode::CREATED,
            ClaimOrigin::Replay => StatusCode::OK,
        };
        Reply::raw(status, claim_body(&c.claim))
    }
}

/// The claim's answer, `{"status":"claimed","claim_id":..,"sku":..,"shard":..,"qty":..}`,
/// written straight into its bytes: this is the answer of the claim path, and serde's
/// serializer cost more than the writing (docs/BENCHMARKS.md "Counted per answer"). The
/// bytes are serde_json's for the same fields in this order (`refusal/tests.rs` pins them).
fn claim_body(claim: &Claim) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + claim.claim_id.len());
    out.extend_from_slice(b"{\"status\":\"");
    out.extend_from_slice(ApiStatus::Claimed.as_str().as_bytes());
    out.extend_from_slice(b"\",\"claim_id\":");
    json_string(&mut out, &claim.claim_id);
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(b",\"sku\":");
    out.extend_from_slice(num.format(claim.sku).as_bytes());
    out.extend_from_slice(b",\"shard\":");
    out.extend_from_slice(num.format(claim.shard).as_bytes());
    out.extend_from_slice(b",\"qty\":");
    out.extend_from_slice(num.format(claim.qty).as_bytes());
    out.push(b'}');
    out
}

/// `s` as a JSON string. Claim ids need no escaping (digits and dashes); anything that
/// would is left to serde_json, so the bytes stay its own.
fn json_string(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

/// Which side of the sale window a request fell on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Window {
    NotStarted,
    Ended,
}

/// What a decision of shard-router's is answered with. An unconfirmed claim (replica
/// durability on, no replica confirmed it) could be lost by a failover now, so it is not
/// acknowledged (see `durability.rs`); `retry` says how the client learns whether it
/// lasted (a replay's request id always can).
pub(super) fn answer(decision: Decision, meta: &SkuMeta, retry: Retry) -> Result<Claimed, Refusal> {
    match decision {
        Decision::Claimed { claim, origin } => Ok(Claimed::new(claim, origin)),
        Decision::Unconfirmed { claim, origin } => {
            durability::count_unconfirmed();
            let retry = if origin == ClaimOrigin::Replay {
                Retry::SameRequestId
            } else {
                retry
            };
            Err(Refusal::Unconfirmed {
                claim_id: claim.claim_id,
                retry,
            })
        }
        Decision::SoldOut => Err(Refusal::SoldOut {
            sku: meta.sku,
            from_cache: false,
        }),
        Decision::LimitReached { held } => Err(Refusal::LimitReached {
            held,
            sku: meta.sku,
            limit: meta.limit,
        }),
        Decision::NotStarted => Err(Refusal::window(Window::NotStarted, meta)),
        Decision::Ended => Err(Refusal::window(Window::Ended, meta)),
        Decision::NotPreheated => Err(Refusal::Restoring(meta.sku)),
        Decision::InProgress => Err(Refusal::InProgress),
    }
}

/// Why a claim took nothing (or, for [`Refusal::Unconfirmed`] and an ambiguous
/// [`Refusal::Redis`], is not acknowledged).
#[derive(Debug)]
pub(super) enum Refusal {
    /// The request as read: content type, size, identity, JSON. Its answer is built there.
    Input(Reply),
    /// No in-flight slot free.
    Overloaded,
    /// No Redis connection yet.
    NotConnected,
    /// This gateway's clock is off Redis's by more than `max_ms`.
    ClockSkew {
        max_ms: u64,
    },
    UnknownSku(u64),
    /// The SKU is known (its metadata is cached) but a slice is missing: Redis lost it, or
    /// a rebuild from the ledger holds the shard. Retryable: the rebuild restores it, and a
    /// winner's retry its stored answer (a 404 here told a winner its SKU does not exist).
    Restoring(u64),
    /// `qty` over the SKU's per-user limit.
    OverLimit {
        qty: u32,
        sku: u64,
        limit: u32,
    },
    /// Outside the window; `at_ms` is the edge passed (start or end).
    Window {
        window: Window,
        sku: u64,
        at_ms: i64,
    },
    /// `from_cache`: answered from this gateway's sold-out cache, no Redis call.
    SoldOut {
        sku: u64,
        from_cache: bool,
    },
    /// The user's rate; back after the wait.
    RateLimited(Duration),
    /// The user already holds `held`.
    LimitReached {
        held: u32,
        sku: u64,
        limit: u32,
    },
    /// Another request with this request id holds the user's count right now.
    InProgress,
    /// Replica mode: taken, but no replica confirmed it yet.
    Unconfirmed {
        claim_id: String,
        retry: Retry,
    },
    /// The claim protocol refused the request's arguments.
    BadArgument(String),
    /// With how the client learns the outcome if Redis may have run the call.
    Redis(StockError, Retry),
}

impl Refusal {
    /// Outside `meta`'s window, on the `window` side.
    pub(super) fn window(window: Window, meta: &SkuMeta) -> Self {
        let at_ms = match window {
            Window::NotStarted => meta.start_ms,
            Window::Ended => meta.end_ms,
        };
        Self::Window {
            window,
            sku: meta.sku,
            at_ms,
        }
    }

    /// The value of the `outcome` label.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Self::Input(_)
            | Self::Overloaded
            | Self::UnknownSku(_)
            | Self::OverLimit { .. }
            | Self::Window { .. }
            | Self::RateLimited(_)
            | Self::BadArgument(_) => outcome::REJECTED,
            Self::NotConnected
            | Self::ClockSkew { .. }
            | Self::Restoring(_)
            | Self::Unconfirmed { .. }
            | Self::Redis(..) => outcome::UNAVAILABLE,
            Self::SoldOut {
                from_cache: true, ..
            } => outcome::SOLD_OUT_CACHE,
            Self::SoldOut {
                from_cache: false, ..
            } => outcome::SOLD_OUT_REDIS,
            Self::LimitReached { .. } => outcome::LIMIT_REACHED,
            Self::InProgress => outcome::IN_PROGRESS,
        }
    }
}

/// The sold-out answer's body, `{"error":"sku N is sold out","sku":N,"status":"sold_out"}`
/// (fields sorted, as every other answer has them). It answers nearly every request of a
/// sale, so it is written straight into its buffer: through `format!` and serde it cost
/// 1.4k user-space instructions per answer (callgrind, docs/BENCHMARKS.md). The test
/// `sold_out_renders_the_bytes_of_the_generic_error_shape` pins the bytes.
fn sold_out_body(sku: u64) -> Vec<u8> {
    let mut digits = itoa::Buffer::new();
    let sku = digits.format(sku).as_bytes();
    // Room for the newline `Reply::into_response` appends.
    let mut body = Vec::with_capacity(96);
    body.extend_from_slice(br#"{"error":"sku "#);
    body.extend_from_slice(sku);
    body.extend_from_slice(br#" is sold out","sku":"#);
    body.extend_from_slice(sku);
    body.extend_from_slice(br#","status":""#);
    body.extend_from_slice(ApiStatus::SoldOut.as_str().as_bytes());
    body.extend_from_slice(br#""}"#);
    body
}

impl From<Refusal> for Reply {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Input(reply) => reply,
            Refusal::Overloaded => Reply::overloaded(),
            Refusal::NotConnected => {
                Reply::unavailable("not connected to redis yet; nothing was taken")
            }
            Refusal::ClockSkew { max_ms } => Reply::unavailable(format!(
                "this gateway's clock is off redis's by more than {max_ms} ms; nothing was taken"
            )),
            Refusal::UnknownSku(sku) => Reply::unknown_sku(sku),
            Refusal::Restoring(sku) => Reply::unavailable(format!(
                "sku {sku} has a stock slice missing (lost, or being rebuilt from the ledger); nothing was taken"
            ))
            .with("sku", sku),
            Refusal::OverLimit { qty, sku, limit } => Reply::bad_request(format!(
                "field `qty` is {qty}, the limit of sku {sku} is {limit}"
            ))
            .with("limit", limit),
            Refusal::Window { window, sku, at_ms } => {
                let (kind, msg) = match window {
                    Window::NotStarted => (
                        ApiStatus::NotStarted,
                        format!("the sale of sku {sku} starts at {at_ms} ms"),
                    ),
                    Window::Ended => (
                        ApiStatus::Ended,
                        format!("the sale of sku {sku} ended at {at_ms} ms"),
                    ),
                };
                Reply::error(StatusCode::FORBIDDEN, kind, msg).with("sku", sku)
            }
            // The answer to nearly every request once a sale is over: written directly
            // (`sold_out_body`), the same bytes as `Reply::error(..).with("sku", ..)`.
            Refusal::SoldOut { sku, .. } => Reply::raw(StatusCode::GONE, sold_out_body(sku)),
            Refusal::RateLimited(wait) => {
                Reply::rate_limited("too many claims from this user; retry later", wait)
            }
            Refusal::LimitReached { held, sku, limit } => Reply::error(
                StatusCode::CONFLICT,
                ApiStatus::LimitReached,
                format!("user already holds {held} of sku {sku}, the limit is {limit}"),
            )
            .with("held", held)
            .with("limit", limit),
            // 409 (a conflict with a concurrent request) with Retry-After: retrying the
            // same request id returns that request's answer, stored for replay.
            Refusal::InProgress => Reply::error(
                StatusCode::CONFLICT,
                ApiStatus::InProgress,
                "a request with this request_id is being served; retry with the same request_id",
            )
            .retry_after(1),
            // A retry with the same request_id replays the claim once it is safe, or claims
            // afresh if it was lost; without one, the client can only look the claim up.
            Refusal::Unconfirmed { claim_id, retry } => Reply::unavailable(format!(
                "the claim is taken but no replica confirmed it yet; {}",
                retry.hint()
            ))
            .with("claim_id", claim_id)
            .with("unconfirmed", true),
            Refusal::BadArgument(m) => Reply::bad_request(m),
            Refusal::Redis(e, retry) => Reply::redis_trouble(&e, retry),
        }
    }
}

#[cfg(test)]
mod tests;
