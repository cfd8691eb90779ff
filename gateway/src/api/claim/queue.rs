//! `POST /v1/claims` on a SKU in campaign mode `queue`: the waiting room in front of the
//! claim protocol. A request without a queue token joins (`queue_join.lua`) and gets one
//! (header `Queue-Token` on the next request); a request whose token's position is
//! admitted goes on to the claim, the rest are told their position, an estimated wait and
//! when to come back. The token is signed with the gateways' shared queue secret and bound
//! to the verified user and the SKU, so a waiting client's refresh is checked in memory
//! (the queue's state is cached briefly, `crate::waiting_room`). Once the SKU is sold out the claim path
//! answers from the sold-out cache, which the `empty` events fill: every waiting client
//! hears "sold out" on its next request, without Redis. `shard_router::queue` says how
//! places are made. Statuses: docs/API.md "Queues".

use hyper::StatusCode;
use shard_router::queue::{Place, QueueKey, QueueState, QueueToken};
use shard_router::{ApiStatus, Joined, StockError};

use super::refusal::Refusal;
use super::Admitted;
use crate::app::App;
use crate::metrics::outcome;
use crate::reply::{Reply, Retry};

/// What the waiting room decided.
pub(super) enum Gate {
    /// Admitted (or the claim path answers from memory: sold out, ended): claim.
    Claim,
    /// Still waiting, or refused: this answer, with its metric label.
    Answer(&'static str, Reply),
}

pub(super) async fn gate(app: &App, admitted: &Admitted<'_>) -> Gate {
    match decide(app, admitted).await {
        Ok(g) => g,
        Err(refusal) => Gate::Answer(refusal.label(), Reply::from(refusal)),
    }
}

async fn decide(app: &App, admitted: &Admitted<'_>) -> Result<Gate, Refusal> {
    let (req, meta) = (&admitted.req, &admitted.state.meta);
    let now = app.link.now_ms();
    // The answers the claim path gives from memory need no place in the queue.
    if now >= meta.end_ms || (app.sold_out_cache && admitted.state.all_empty()) {
        return Ok(Gate::Claim);
    }
    let Some(key) = &app.queue.key() else {
        return Ok(Gate::Answer(
            outcome::UNAVAILABLE,
            Reply::unavailable(format!(
                "sku {} sells through a waiting room and this gateway has no --queue-secret-file; nothing was taken",
                meta.sku
            )),
        ));
    };
    let token = match &admitted.queue_token {
        Some(text) => match key.verify(text) {
            Some(t) if t.sku == meta.sku && t.user == req.user => t,
            _ => {
                return Ok(Gate::Answer(
                    outcome::REJECTED,
                    Reply::error(
                        StatusCode::FORBIDDEN,
                        ApiStatus::InvalidQueueToken,
                        format!(
                            "the Queue-Token is not one this sale issued to this user for sku {}; send none to join the queue",
                            meta.sku
                        ),
                    ),
                ));
            }
        },
        None => match join(app, admitted, key, now).await? {
            Some(token) => token,
            None => {
                return Ok(Gate::Answer(
                    outcome::UNAVAILABLE,
                    Reply::unavailable(format!(
                        "the waiting room of sku {} is opening (or being restored after a loss); nothing was taken, join again",
                        meta.sku
                    ))
                    .with("sku", meta.sku),
                ));
            }
        },
    };
    let state = app
        .queue
        .state(admitted.client, admitted.req.sku)
        .await
        .map_err(|e| Refusal::Redis(e, Retry::Safe))?;
    let ahead = if now < meta.start_ms {
        None
    } else {
        state.ahead(token.place)
    };
    if ahead == Some(0) {
        return Ok(Gate::Claim);
    }
    Ok(Gate::Answer(
        outcome::QUEUED,
        queued(key, &token, ahead, &state, meta.start_ms, now),
    ))
}

/// Joins the queue (`queue_join.lua`): the new token, or `None` while the queue is not
/// open for places.
async fn join(
    app: &App,
    admitted: &Admitted<'_>,
    key: &QueueKey,
    now: i64,
) -> Result<Option<QueueToken>, Refusal> {
    let (req, meta) = (&admitted.req, &admitted.state.meta);
    // Joining costs a Redis call: it counts against the user's rate.
    app.admission
        .check_user(&req.user)
        .map_err(Refusal::RateLimited)?;
    let joined = admitted
        .client
        .queue_join(meta.sku, &req.user, now, meta.start_ms)
        .await
        .map_err(|e| match e {
            StockError::InvalidArgument(m) => Refusal::BadArgument(m),
            e => Refusal::Redis(e, Retry::Safe),
        })?;
    let place = match joined {
        Joined::Pre => Place::Pre(key.shuffle(meta.sku, &req.user)),
        Joined::Ticket(n) => Place::Ticket(n),
        Joined::NotOpen => return Ok(None),
    };
    Ok(Some(QueueToken {
        sku: meta.sku,
        user: req.user.clone(),
        place,
        issued_ms: now,
    }))
}

/// 202 `queued`: the token to send back, the position (absent before the start: the
/// pre-queue is shuffled then), the estimated wait and when to ask again.
fn queued(
    key: &QueueKey,
    token: &QueueToken,
    ahead: Option<u64>,
    state: &QueueState,
    start_ms: i64,
    now: i64,
) -> Reply {
    let wait_s = match ahead {
        None => Some(((start_ms - now).max(0) as u64).div_ceil(1000)),
        Some(n) if state.rate > 0 => Some(n.div_ceil(state.rate)),
        // The watermark has not moved for a while (the admitted still have their grace
        // to claim): no estimate.
        Some(_) => None,
    };
    // Ask again a quarter of the wait from now, between 1 and 10 s: near the front
    // often, far back rarely, so the polls stay a small share of the gateway's work.
    // With no estimate, half the longest: nobody moves up before the admitted have had
    // their grace (campaign-ops/src/queue.rs).
    let refresh_ms = wait_s.map_or(shard_router::queue::MAX_REFRESH_MS / 2, |w| {
        (w * 250).clamp(
            shard_router::queue::MIN_REFRESH_MS,
            shard_router::queue::MAX_REFRESH_MS,
        )
    });
    let mut body = serde_json::Map::new();
    body.insert("sku".into(), token.sku.into());
    body.insert("queue_token".into(), key.sign(token).into());
    body.insert(
        "position".into(),
        ahead.map_or(serde_json::Value::Null, Into::into),
    );
    body.insert(
        "estimated_wait_s".into(),
        wait_s.map_or(serde_json::Value::Null, Into::into),
    );
    body.insert("refresh_ms".into(), refresh_ms.into());
    Reply::json(StatusCode::ACCEPTED, ApiStatus::Queued, body).retry_after(refresh_ms / 1000)
}
