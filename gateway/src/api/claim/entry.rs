//! `POST /v1/claims` on a SKU in campaign mode `draw` (a verifiable raffle): an entry on
//! the user's home shard (`draw_enter.lua`), or, once entries closed, the user's standing.
//! Never the claim protocol and never the sold-out cache: units go to the draw's winners,
//! not to whoever comes first. The answer is per user, not per `request_id` (accepted and
//! ignored): a repeat gets the same answer and enters nothing more (`replay`).
//! Statuses: docs/API.md "Draws".

use std::time::Instant;

use hyper::StatusCode;
use shard_router::draw::EntryOutcome;
use shard_router::{ApiStatus, SkuDraw, SkuMeta, StockError};

use super::refusal::Refusal;
use super::Admitted;
use crate::app::App;
use crate::metrics::{claim_metrics, outcome};
use crate::reply::{Reply, Retry};

/// The answer to an entry request, with its `outcome` metric label.
pub(super) async fn enter(app: &App, admitted: Admitted<'_>) -> (&'static str, Reply) {
    let meta = &admitted.state.meta;
    let Some(draw) = meta.mode.draw() else {
        unreachable!("only a draw SKU's request is an entry");
    };
    match entry(app, &admitted).await {
        Ok(EntryOutcome::NotPreheated) => {
            // The home shard has no draw: lost with Redis, or the rebuild is restoring it.
            // Forget the cached metadata so the next request looks again; retryable.
            app.cache.invalidate(meta.sku);
            let reply = Reply::unavailable(format!(
                "the draw of sku {} is missing on a shard (lost, or being rebuilt from the ledger); nothing was entered",
                meta.sku
            ))
            .with("sku", meta.sku);
            (outcome::UNAVAILABLE, reply)
        }
        Ok(standing) => answer(&standing, meta, draw),
        Err(refusal) => (refusal.label(), Reply::from(refusal)),
    }
}

async fn entry(app: &App, admitted: &Admitted<'_>) -> Result<EntryOutcome, Refusal> {
    let (req, meta) = (&admitted.req, &admitted.state.meta);
    if req.qty != 1 {
        return Err(Refusal::BadArgument(format!(
            "sku {} is a draw: an entry is one unit, field `qty` must be 1 (it is {})",
            meta.sku, req.qty
        )));
    }
    let now = app.link.now_ms();
    if now < meta.start_ms {
        return Ok(EntryOutcome::NotStarted);
    }
    app.admission
        .check_user(&req.user)
        .map_err(Refusal::RateLimited)?;
    let started = Instant::now();
    let result = admitted
        .client
        .draw_enter(meta.sku, meta.width, &req.user, now)
        .await;
    claim_metrics()
        .redis_claim_seconds
        .record(started.elapsed().as_secs_f64());
    result.map_err(|e| match e {
        StockError::InvalidArgument(m) => Refusal::BadArgument(m),
        e => Refusal::Redis(e, Retry::Safe),
    })
}

/// An answer's body: `status`, `sku`, the draw's time and seed digest (and the seed once
/// revealed), and what the outcome knows. Fields in name order, as the other answers.
#[derive(serde::Serialize, Default)]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    claim_id: Option<&'a str>,
    draw_at_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    entry_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    qty: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<&'a str>,
    seed_sha256: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<u16>,
    sku: u64,
    status: &'static str,
}

/// Maps a standing to its answer (every outcome but `NotPreheated`, answered above).
fn answer(standing: &EntryOutcome, meta: &SkuMeta, draw: &SkuDraw) -> (&'static str, Reply) {
    let mut body = Body {
        draw_at_ms: draw.draw_at_ms,
        seed: draw.seed.as_deref(),
        seed_sha256: &draw.seed_sha256,
        sku: meta.sku,
        ..Body::default()
    };
    let (label, code, status) = match standing {
        EntryOutcome::Entered { entry_id, .. } => {
            body.entry_id = Some(entry_id);
            (outcome::ENTERED, StatusCode::ACCEPTED, ApiStatus::Entered)
        }
        EntryOutcome::Drawing { entry_id } => {
            body.entry_id = Some(entry_id);
            (outcome::DRAWING, StatusCode::ACCEPTED, ApiStatus::Drawing)
        }
        EntryOutcome::Won { claim_id, shard } => {
            body.claim_id = Some(claim_id);
            body.shard = Some(*shard);
            body.qty = Some(1);
            (outcome::WON, StatusCode::CREATED, ApiStatus::Won)
        }
        EntryOutcome::WonPending => (
            outcome::WON_PENDING,
            StatusCode::ACCEPTED,
            ApiStatus::WonPending,
        ),
        EntryOutcome::Waitlisted { position } => {
            body.position = Some(*position);
            (outcome::WAITLISTED, StatusCode::OK, ApiStatus::Waitlisted)
        }
        refused => {
            let (label, code, status, error) = refusal(refused, meta, draw);
            body.error = Some(error);
            (label, code, status)
        }
    };
    body.status = status.as_str();
    (label, Reply::rendered(code, &body))
}

/// A standing that enters nothing and wins nothing: its label, code, status and message.
fn refusal(
    standing: &EntryOutcome,
    meta: &SkuMeta,
    draw: &SkuDraw,
) -> (&'static str, StatusCode, ApiStatus, String) {
    let sku = meta.sku;
    let forbidden = |status, error| (outcome::REJECTED, StatusCode::FORBIDDEN, status, error);
    match standing {
        EntryOutcome::Lost => (
            outcome::LOST,
            StatusCode::GONE,
            ApiStatus::Lost,
            format!("the draw of sku {sku} did not pick this user"),
        ),
        EntryOutcome::NotStarted => forbidden(
            ApiStatus::NotStarted,
            format!(
                "entries to the draw of sku {sku} open at {} ms",
                meta.start_ms
            ),
        ),
        EntryOutcome::Closed => (
            outcome::ENTRIES_CLOSED,
            StatusCode::FORBIDDEN,
            ApiStatus::EntriesClosed,
            format!(
                "entries to the draw of sku {sku} closed at {} ms",
                draw.draw_at_ms
            ),
        ),
        EntryOutcome::Ended => forbidden(
            ApiStatus::Ended,
            format!("the draw of sku {sku} is over (the campaign closed); this user won nothing"),
        ),
        EntryOutcome::NotPreheated => unreachable!("answered by `enter`"),
        EntryOutcome::Entered { .. }
        | EntryOutcome::Drawing { .. }
        | EntryOutcome::Won { .. }
        | EntryOutcome::WonPending
        | EntryOutcome::Waitlisted { .. } => unreachable!("answered by `answer`"),
    }
}
