//! `POST /v1/claims`: validate, answer from the sold-out cache when it can, run the claim
//! protocol otherwise, and map every outcome to the status table of docs/API.md "HTTP API".
//!
//! Order matters for cost: the cheap memory-only answers (unknown SKU, qty over the limit,
//! outside the window, sold out) come before the per-user rate limit, and the rate limit
//! before any Redis call. A sold-out SKU therefore costs no Redis call and no limiter entry
//! when the request has no request_id; with one, the replay check (one read) runs first,
//! so a retried success is never told it lost, unless the SKU's replay filter shows the
//! user has no stored answer at all (`crate::replay_filter`).
//!
//! A SKU in campaign mode `draw` takes entries here instead (`entry.rs`): the same checks
//! up to the SKU lookup ([`admit`]), then `draw_enter.lua`, never the claim protocol.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::Request;
use shard_router::decision::{self, Decision};
use shard_router::protocol::{self, EmptyShards};
use shard_router::{ClaimRequest, SkuMeta, SkuMode, StockClient, StockError};

use super::input::{read_claim, InputRules};
use crate::access;
use crate::admission::InFlight;
use crate::app::App;
use crate::cache::SkuState;
use crate::metrics::claim_metrics;
use crate::reply::{Reply, Retry};

mod entry;
mod finish;
mod queue;
mod refusal;

use refusal::{answer, Claimed, Refusal, Window};

pub(crate) async fn handle(app: &App, peer: SocketAddr, req: Request<Incoming>) -> Reply {
    let (outcome, reply) = match admit(app, peer, req).await {
        // A draw SKU's request is an entry: never claim.lua (that would sell first come,
        // first served), never the sold-out cache (`entry.rs`).
        Ok(admitted) if admitted.state.meta.mode.draw().is_some() => {
            entry::enter(app, admitted).await
        }
        // A queue SKU's request passes the waiting room first (`queue.rs`).
        Ok(admitted) if admitted.state.meta.mode == SkuMode::Queue => {
            match queue::gate(app, &admitted).await {
                queue::Gate::Claim => match claim(app, admitted).await {
                    Ok(claimed) => (claimed.label(), Reply::from(claimed)),
                    Err(refusal) => (refusal.label(), Reply::from(refusal)),
                },
                queue::Gate::Answer(label, reply) => (label, reply),
            }
        }
        Ok(admitted) => match claim(app, admitted).await {
            Ok(claimed) => (claimed.label(), Reply::from(claimed)),
            Err(refusal) => (refusal.label(), Reply::from(refusal)),
        },
        Err(refusal) => (refusal.label(), Reply::from(refusal)),
    };
    claim_metrics().claim(outcome);
    reply
}

/// A request past the checks a claim and a draw entry share: input and identity, an
/// in-flight slot (held until the answer), a connection, the clock, a known SKU.
struct Admitted<'a> {
    req: ClaimRequest,
    /// The `Queue-Token` header (a queue SKU's waiting room, `queue.rs`).
    queue_token: Option<String>,
    client: &'a StockClient,
    state: Arc<SkuState>,
    _slot: InFlight,
}

async fn admit<'a>(
    app: &'a App,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Admitted<'a>, Refusal> {
    let rules = InputRules {
        max_body: app.max_body,
        body_timeout: app.body_timeout,
        identity: &app.identity,
        peer: peer.ip(),
        stop: &app.stop,
    };
    // A header that is not text is no token this sale issued, not a missing one (which
    // would join the queue): read lossily, it fails verification (403, nothing changes).
    let queue_token = req
        .headers()
        .get("queue-token")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let req = read_claim(req, &rules).await.map_err(Refusal::Input)?;
    access::set_user(&req.user);
    // The in-flight slot is taken only once the body is in: a body that trickles in holds
    // a connection (bounded by --max-connections and the body timeout), never a slot, so
    // slow senders cannot shed everyone else's claims.
    let slot = app.admission.enter().ok_or(Refusal::Overloaded)?;
    let client = app.link.client().ok_or(Refusal::NotConnected)?;
    if !app.link.clock_ok() {
        return Err(Refusal::ClockSkew {
            max_ms: app.link.max_skew_ms(),
        });
    }
    let state = app
        .cache
        .get(client, req.sku)
        .await
        .map_err(|e| Refusal::Redis(e, Retry::Safe))?
        .ok_or(Refusal::UnknownSku(req.sku))?;
    Ok(Admitted {
        req,
        queue_token,
        client,
        state,
        _slot: slot,
    })
}

/// The claim protocol, first come first served: what memory can answer, else one call to
/// shard-router's decision, and the reply to it.
async fn claim(app: &App, admitted: Admitted<'_>) -> Result<Claimed, Refusal> {
    let Admitted {
        req,
        client,
        state,
        _slot,
        ..
    } = admitted;
    let meta = &state.meta;
    let now = app.link.now_ms();
    if req.qty > meta.limit {
        return Err(Refusal::OverLimit {
            qty: req.qty,
            sku: meta.sku,
            limit: meta.limit,
        });
    }
    if now < meta.start_ms {
        return Err(Refusal::window(Window::NotStarted, meta));
    }
    if let Some(memory) = over_for_now(app, &state, now) {
        return memory_or_replay(app, client, &state, &req, memory).await;
    }
    app.admission
        .check_user(&req.user)
        .map_err(Refusal::RateLimited)?;
    let started = Instant::now();
    let decision = run_to_end(app, client, &state, &req, now).await;
    claim_metrics()
        .redis_claim_seconds
        .record(started.elapsed().as_secs_f64());
    let retry = Retry::for_claim(req.request_id.as_deref());
    match decision {
        Ok(Decision::NotPreheated) => {
            // Metadata without slices, and no stored answer: the campaign is gone or Redis
            // lost it. Forget the cached metadata so the next request looks again; this one
            // is 503, not 404: a winner's retry gets its answer once the rebuild restores it.
            // Close-out keeps the metadata while stored answers last and runs only after
            // the end plus a payment timeout (campaign-ops/src/closeout.rs): this near the
            // end, this gateway's clock is behind (within its skew bound) and the sale is over.
            app.cache.invalidate(meta.sku);
            if now.saturating_add(app.link.max_skew_ms() as i64) >= meta.end_ms {
                Err(Refusal::window(Window::Ended, meta))
            } else {
                Err(Refusal::Restoring(meta.sku))
            }
        }
        Ok(decision) => answer(decision, meta, retry),
        Err(StockError::InvalidArgument(m)) => Err(Refusal::BadArgument(m)),
        Err(e) => Err(Refusal::Redis(e, retry)),
    }
}

/// The answer memory gives once the sale is over for this gateway: the window closed, or
/// sold out on every shard.
fn over_for_now(app: &App, state: &SkuState, now: i64) -> Option<Refusal> {
    let meta = &state.meta;
    if now >= meta.end_ms {
        Some(Refusal::window(Window::Ended, meta))
    } else if app.sold_out_cache && state.all_empty() {
        Some(Refusal::SoldOut {
            sku: meta.sku,
            from_cache: true,
        })
    } else {
        None
    }
}

/// Memory's answer, unless the request may be the retry of a success: one with a
/// request_id gets its first answer (invariant `replay`, docs/DESIGN.md), read first.
async fn memory_or_replay(
    app: &App,
    client: &StockClient,
    state: &Arc<SkuState>,
    req: &ClaimRequest,
    memory: Refusal,
) -> Result<Claimed, Refusal> {
    let Some(rid) = req.request_id.as_deref() else {
        return Err(memory);
    };
    // Sold out on every shard: a user the replay filter read and did not find has no
    // stored answer under any request id, so memory answers (`replay_filter.rs`).
    if app.sold_out_cache
        && app.replay_limits.per_sku > 0
        && state.all_empty()
        && app.cache.subscribed()
        && state
            .replay
            .never_won(state, client, &app.replay_limits, &req.user)
    {
        return Err(memory);
    }
    // Replay checks cost a Redis read, so they count against the user's rate.
    app.admission
        .check_user(&req.user)
        .map_err(Refusal::RateLimited)?;
    replay_or(client, &state.meta, &req.user, rid, memory).await
}

/// The replay check alone (one read on the user's home shard, no script): the stored answer
/// of `rid` when it has one, else `otherwise`, the answer memory gave.
async fn replay_or(
    client: &StockClient,
    meta: &SkuMeta,
    user: &str,
    rid: &str,
    otherwise: Refusal,
) -> Result<Claimed, Refusal> {
    // Sold out from memory: no answer means "sold out" only while the home slice is
    // there and the ledger vouched for the process (or no vouch is set, as the guard
    // sells); a slice lost with the answer, or data older than the ledger, is 503 until
    // the rebuild (`replay`, found by the model checker, model/). After the window,
    // close-out deletes the slices.
    let read = if matches!(otherwise, Refusal::SoldOut { .. }) {
        decision::Replay::Live
    } else {
        decision::Replay::Plain
    };
    match decision::replay(client, meta, user, rid, read).await {
        Ok(None) => Err(otherwise),
        Ok(Some(d)) => answer(d, meta, Retry::SameRequestId),
        // Not the memory answer: a lost success would be told it lost.
        Err(e) => Err(Refusal::Redis(e, Retry::SameRequestId)),
    }
}

/// Runs the claim protocol to its end even if hyper drops this handler (its client went
/// away): a protocol dropped between hold and settle would leave the user's count held
/// until the consumer resolves it. It runs in the handler's task and moves to a task of
/// its own only if the handler is dropped first (`finish::FinishOnDrop`); each step is
/// bounded.
async fn run_to_end(
    app: &App,
    client: &shard_router::StockClient,
    state: &std::sync::Arc<crate::cache::SkuState>,
    req: &shard_router::ClaimRequest,
    now: i64,
) -> Result<Decision, StockError> {
    let (client, state, req) = (client.clone(), state.clone(), req.clone());
    let (cache_on, second_chance) = (app.sold_out_cache, app.second_chance);
    let cache = app.cache.clone();
    let run = finish::FinishOnDrop::new(async move {
        let blind = protocol::LocalEmptyShards::default();
        let cached = cache.claim_view(&state);
        let empties: &dyn EmptyShards = if cache_on { &cached } else { &blind };
        let opts = protocol::ClaimOptions::new(empties, now).second_chance(second_chance);
        decision::decide(&client, &state.meta, &req, opts).await
    });
    run.await.unwrap_or_else(|_panic| {
        Err(StockError::Protocol {
            op: "claim",
            detail: "claim task failed: it panicked".to_owned(),
        })
    })
}
