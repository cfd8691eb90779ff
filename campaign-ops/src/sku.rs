//! A campaign as the Redis side knows it: the metadata a preheat or a rebuild writes.

use std::time::Duration;

use crate::OpsError;
use ledger::campaigns::Campaign;
use ledger::draws::{self, DrawState};
use shard_router::{SkuDraw, SkuMeta, SkuMode};
use sqlx::MySqlPool;

/// The SKU metadata of `c`.
pub fn meta(c: &Campaign) -> SkuMeta {
    SkuMeta {
        sku: c.sku,
        stock: c.stock,
        width: c.width,
        limit: c.limit,
        start_ms: c.start_ms,
        end_ms: c.end_ms,
        mode: SkuMode::Fcfs,
    }
}

/// [`meta`] with its draw, for a draw campaign: what a preheat and a rebuild write, so a
/// gateway never sees the campaign without its mode. The seed is in it once drawn.
pub async fn meta_of(pool: &MySqlPool, c: &Campaign, t: Duration) -> Result<SkuMeta, OpsError> {
    let mut m = meta(c);
    if let Some(d) = draws::get(pool, c.sku, t).await? {
        m.mode = SkuMode::Draw(SkuDraw {
            draw_at_ms: d.draw_at_ms,
            seed: (d.state == DrawState::Drawn).then(|| hex::encode(&d.seed)),
            seed_sha256: d.seed_sha256,
        });
    } else if draws::mode(pool, c.sku, t).await? == Some(draws::Mode::Queue) {
        m.mode = SkuMode::Queue;
    }
    Ok(m)
}
