//! `POST /v1/claims`: validate, answer from the sold-out cache when it can, run the claim
//! protocol otherwise, and map every outcome to the status table of README.md "HTTP API".
//!
//! Order matters for cost: the cheap memory-only answers (unknown SKU, qty over the limit,
//! outside the window, sold out) come before the per-user rate limit, and the rate limit
//! before any Redis call. A sold-out SKU therefore costs no Redis call and no limiter entry
//! when the request has no request_id; with one, the replay check (one read) runs first,
//! so a retried success is never told it lost.

use std::net::SocketAddr;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use shard_router::protocol::{self, Confirmation, EmptyShards};
use shard_router::{Claim, ClaimOutcome, StockError, StoredAnswer};

use super::input::{read_claim, InputRules};
use super::reply::Reply;
use crate::access;
use crate::app::App;
use crate::durability;
use crate::metrics::{hot, outcome};

pub(crate) async fn handle(app: &App, peer: SocketAddr, req: Request<Incoming>) -> Reply {
    let (outcome, reply) = claim(app, peer, req).await;
    hot().claim(outcome);
    reply
}

async fn claim(app: &App, peer: SocketAddr, req: Request<Incoming>) -> (&'static str, Reply) {
    let rules = InputRules {
        max_body: app.max_body,
        body_timeout: app.body_timeout,
        identity: &app.identity,
        peer: peer.ip(),
    };
    let req = match read_claim(req, &rules).await {
        Ok(r) => r,
        Err(reply) => return (outcome::REJECTED, reply),
    };
    access::set_user(&req.user);
    // The in-flight slot is taken only once the body is in: a body that trickles in holds
    // a connection (bounded by --max-connections and the body timeout), never a slot, so
    // slow senders cannot shed everyone else's claims.
    let Some(_slot) = app.admission.enter() else {
        return (outcome::REJECTED, Reply::overloaded());
    };
    let Some(client) = app.link.client() else {
        return (
            outcome::UNAVAILABLE,
            Reply::unavailable("not connected to redis yet; nothing was taken"),
        );
    };
    if !app.link.clock_ok() {
        let msg = format!(
            "this gateway's clock is off redis's by more than {} ms; nothing was taken",
            app.link.max_skew_ms()
        );
        return (outcome::UNAVAILABLE, Reply::unavailable(msg));
    }
    let state = match app.cache.get(client, req.sku).await {
        Ok(Some(s)) => s,
        Ok(None) => return (outcome::REJECTED, unknown_sku(req.sku)),
        Err(e) => return (outcome::UNAVAILABLE, redis_trouble(&e)),
    };
    let meta = &state.meta;
    if req.qty > meta.limit {
        let msg = format!(
            "field `qty` is {}, the limit of sku {} is {}",
            req.qty, meta.sku, meta.limit
        );
        return (
            outcome::REJECTED,
            Reply::bad_request(msg).with("limit", meta.limit),
        );
    }
    let now = app.link.now_ms();
    if now < meta.start_ms {
        return (
            outcome::REJECTED,
            window("not_started", meta.sku, meta.start_ms),
        );
    }
    // The answers memory can give once the sale is over for this gateway. A request with a
    // request_id may be the retry of a success, whose first answer it must get (invariant
    // `replay`, docs/DESIGN.md), so it reaches the replay check first; one without is
    // answered here.
    let from_memory = if now >= meta.end_ms {
        Some((outcome::REJECTED, window("ended", meta.sku, meta.end_ms)))
    } else if app.sold_out_cache && state.all_empty() {
        Some((outcome::SOLD_OUT_CACHE, sold_out(meta.sku)))
    } else {
        None
    };
    if let Some(answer) = from_memory {
        let Some(rid) = req.request_id.as_deref() else {
            return answer;
        };
        // Replay checks cost a Redis read, so they count against the user's rate.
        if let Err(wait) = app.admission.check_user(&req.user) {
            return (outcome::REJECTED, rate_limited(wait));
        }
        return replay_or(app, client, meta, &req.user, rid, answer).await;
    }
    if let Err(wait) = app.admission.check_user(&req.user) {
        return (outcome::REJECTED, rate_limited(wait));
    }

    let started = Instant::now();
    let result = run_detached(app, client, &state, &req, now).await;
    hot()
        .redis_claim_seconds
        .record(started.elapsed().as_secs_f64());
    let (result, confirmation) = match result {
        Ok((o, c)) => (Ok(o), c),
        Err(e) => (Err(e), Confirmation::NotAsked),
    };
    match result {
        Ok(ClaimOutcome::Claimed { claim, rerouted }) => {
            if let Some(reply) = unconfirmed(confirmation, &claim) {
                return (outcome::UNAVAILABLE, reply);
            }
            let kind = if rerouted {
                outcome::REROUTED
            } else {
                outcome::CLAIMED
            };
            (kind, claimed(StatusCode::CREATED, &claim))
        }
        Ok(ClaimOutcome::Replay(claim)) => {
            let confirmation = rerouted_replay(client, meta, &req, &claim, confirmation).await;
            if let Some(reply) = unconfirmed(confirmation, &claim) {
                return (outcome::UNAVAILABLE, reply);
            }
            (outcome::REPLAY, claimed(StatusCode::OK, &claim))
        }
        Ok(ClaimOutcome::SoldOut) => (outcome::SOLD_OUT_REDIS, sold_out(meta.sku)),
        Ok(ClaimOutcome::LimitReached { held }) => {
            let reply = Reply::error(
                StatusCode::CONFLICT,
                "limit_reached",
                format!(
                    "user already holds {held} of sku {}, the limit is {}",
                    meta.sku, meta.limit
                ),
            )
            .with("held", held)
            .with("limit", meta.limit);
            (outcome::LIMIT_REACHED, reply)
        }
        Ok(ClaimOutcome::NotStarted) => (
            outcome::REJECTED,
            window("not_started", meta.sku, meta.start_ms),
        ),
        Ok(ClaimOutcome::Ended) => (outcome::REJECTED, window("ended", meta.sku, meta.end_ms)),
        Ok(ClaimOutcome::NotPreheated) => {
            // Metadata without slices: the campaign is gone or Redis lost it. Forget the
            // cached metadata so the next request looks again.
            app.cache.invalidate(meta.sku);
            // Close-out keeps the metadata while stored answers last and runs only after
            // the end plus a payment timeout (consumer/src/closeout.rs): this near the end,
            // this gateway's clock is behind (within its skew bound) and the sale is over.
            // The script stopped before its replay check, so it runs here (`replay`).
            let answer = if now.saturating_add(app.link.max_skew_ms() as i64) >= meta.end_ms {
                (outcome::REJECTED, window("ended", meta.sku, meta.end_ms))
            } else {
                (outcome::REJECTED, unknown_sku(meta.sku))
            };
            match req.request_id.as_deref() {
                Some(rid) => replay_or(app, client, meta, &req.user, rid, answer).await,
                None => answer,
            }
        }
        Ok(ClaimOutcome::InProgress) => (outcome::IN_PROGRESS, in_progress()),
        Err(StockError::InvalidArgument(m)) => (outcome::REJECTED, Reply::bad_request(m)),
        Err(e) => (outcome::UNAVAILABLE, redis_trouble(&e)),
    }
}

/// The replay check alone (one read on the user's home shard, no script): the stored answer
/// of `rid` when it has one, else `otherwise`, the answer memory gave.
async fn replay_or(
    _app: &App,
    client: &shard_router::StockClient,
    meta: &shard_router::SkuMeta,
    user: &str,
    rid: &str,
    otherwise: (&'static str, Reply),
) -> (&'static str, Reply) {
    // Read without a script, so no claim pipeline carried a WAIT: in replica mode the
    // answer is read again under a fence on the home shard, and a reroute's take checked
    // on its own shard (`shard-router/src/replay.rs`).
    match client
        .replay_confirmed(meta.sku, meta.width, user, rid)
        .await
    {
        Ok(None) => otherwise,
        Ok(Some((StoredAnswer::Claimed(claim), confirmation))) => {
            if let Some(reply) = unconfirmed(confirmation, &claim) {
                return (outcome::UNAVAILABLE, reply);
            }
            (outcome::REPLAY, claimed(StatusCode::OK, &claim))
        }
        Ok(Some((StoredAnswer::InProgress, _))) => (outcome::IN_PROGRESS, in_progress()),
        // Not the memory answer: a lost success would be told it lost.
        Err(e) => (outcome::UNAVAILABLE, redis_trouble(&e)),
    }
}

/// `claim.lua`'s replay confirmed by the home shard's WAIT covers only what the home shard
/// wrote. A rerouted claim's units and record are on another shard: in replica mode its
/// replay is acknowledged only once that shard's part is confirmed too (the stored answer
/// read again, and the take checked there when the answer is still tentative).
async fn rerouted_replay(
    client: &shard_router::StockClient,
    meta: &shard_router::SkuMeta,
    req: &shard_router::ClaimRequest,
    claim: &Claim,
    confirmation: Confirmation,
) -> Confirmation {
    let home = client
        .placement()
        .home_shard(meta.sku, meta.width, &req.user);
    let (Confirmation::Confirmed, Some(rid)) = (confirmation, req.request_id.as_deref()) else {
        return confirmation;
    };
    if claim.shard == home {
        return confirmation;
    }
    match client
        .replay_confirmed(meta.sku, meta.width, &req.user, rid)
        .await
    {
        Ok(Some((StoredAnswer::Claimed(c), confirmed))) if c.claim_id == claim.claim_id => {
            confirmed
        }
        Ok(_) => Confirmation::Unconfirmed,
        Err(e) => {
            tracing::debug!(error = %e, trace_id = %access::trace_id(), "rerouted replay unconfirmed");
            Confirmation::Unconfirmed
        }
    }
}

/// Another request with this request id holds the user's count right now; its answer will
/// be stored for replay. 409 (a conflict with a concurrent request) with Retry-After:
/// retrying the same request id returns that answer.
fn in_progress() -> Reply {
    Reply::error(
        StatusCode::CONFLICT,
        "in_progress",
        "a request with this request_id is being served; retry with the same request_id",
    )
    .retry_after(1)
}

fn rate_limited(wait: std::time::Duration) -> Reply {
    Reply::error(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "too many claims from this user; retry later",
    )
    .retry_after(wait.as_secs_f64().ceil() as u64)
}

/// Runs the claim protocol in its own task: hyper drops a handler whose client went away,
/// and a protocol dropped between hold and settle would leave the user's count held until
/// the consumer resolves it. The task always runs to the end (each step is bounded).
async fn run_detached(
    app: &App,
    client: &shard_router::StockClient,
    state: &std::sync::Arc<crate::cache::SkuState>,
    req: &shard_router::ClaimRequest,
    now: i64,
) -> Result<(ClaimOutcome, Confirmation), StockError> {
    let (client, state, req) = (client.clone(), state.clone(), req.clone());
    let (cache_on, second_chance) = (app.sold_out_cache, app.second_chance);
    let task = tokio::spawn(async move {
        let blind = protocol::LocalEmptyShards::default();
        let empties: &dyn EmptyShards = if cache_on { &*state } else { &blind };
        protocol::claim_confirmed(&client, &state.meta, &req, empties, now, second_chance).await
    });
    task.await.unwrap_or_else(|e| {
        Err(StockError::Protocol {
            op: "claim",
            detail: format!("claim task failed: {e}"),
        })
    })
}

/// In replica mode, the 503 for a claim no replica confirmed. Taken and recorded on the
/// primary, but a failover now could lose it, so it is not acknowledged: a retry with the
/// same request_id replays it once it is safe, or claims afresh if it was lost. A rerouted
/// claim is confirmed only when its hold, take and settle all were (see `durability.rs`).
fn unconfirmed(confirmation: Confirmation, claim: &Claim) -> Option<Reply> {
    if durability::acknowledgeable(confirmation) {
        return None;
    }
    Some(
        Reply::unavailable(
            "the claim is taken but no replica confirmed it yet; retry with the same request_id to learn the outcome",
        )
        .with("claim_id", claim.claim_id.as_str())
        .with("unconfirmed", true),
    )
}

fn claimed(status: StatusCode, c: &Claim) -> Reply {
    #[derive(serde::Serialize)]
    struct Claimed<'a> {
        status: &'static str,
        claim_id: &'a str,
        sku: u64,
        shard: u16,
        qty: u32,
    }
    Reply::rendered(
        status,
        &Claimed {
            status: "claimed",
            claim_id: &c.claim_id,
            sku: c.sku,
            shard: c.shard,
            qty: c.qty,
        },
    )
}

pub(crate) fn sold_out(sku: u64) -> Reply {
    Reply::error(
        StatusCode::GONE,
        "sold_out",
        format!("sku {sku} is sold out"),
    )
    .with("sku", sku)
}

pub(crate) fn unknown_sku(sku: u64) -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        "unknown_sku",
        format!("sku {sku} has no campaign or is not preheated"),
    )
    .with("sku", sku)
}

fn window(kind: &str, sku: u64, at_ms: i64) -> Reply {
    let msg = match kind {
        "not_started" => format!("the sale of sku {sku} starts at {at_ms} ms"),
        _ => format!("the sale of sku {sku} ended at {at_ms} ms"),
    };
    Reply::error(StatusCode::FORBIDDEN, kind, msg).with("sku", sku)
}

/// Redis trouble. Internals stay in the log; the client learns whether anything may have
/// been taken. Any Redis-side failure (connection, timeout, an error reply such as OOM)
/// is 503; a script reply this build does not understand is a deployment bug, so 500.
pub(crate) fn redis_trouble(e: &StockError) -> Reply {
    match e {
        StockError::Protocol { .. } | StockError::InvalidArgument(_) => {
            tracing::error!(error = %e, trace_id = %access::trace_id(), "stock protocol failure");
            Reply::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            )
        }
        _ if e.is_ambiguous() => {
            tracing::debug!(error = %e, trace_id = %access::trace_id(), "redis did not answer");
            Reply::unavailable(
                "stock service did not answer in time; retry with the same request_id to learn the outcome",
            )
        }
        _ => {
            tracing::debug!(error = %e, trace_id = %access::trace_id(), "redis unavailable");
            Reply::unavailable("stock service unavailable; nothing was taken")
        }
    }
}
