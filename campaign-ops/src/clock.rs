//! Which clock the consumer's decisions use. A hold's deadline is enforced by Redis's clock
//! (`lua/take.lua`), so a consumer whose clock ran ahead would resolve a hold as "nothing
//! taken" while a take under it can still succeed. Holds and payment timeouts are
//! therefore decided by Redis's `TIME` (shard 0's master), never by this process's clock;
//! the skew from it is still measured and exported, because `claimed_ms` comes from the
//! gateways' clocks, which the gateways keep within `--max-clock-skew-ms` of Redis's.

use shard_router::{StockClient, StockError};

use crate::metrics as m;
use crate::Config;

/// Redis's clock, in ms since the epoch: `now` for hold resolution and payment timeouts.
pub async fn redis_now(client: &StockClient) -> Result<i64, StockError> {
    client.redis_time_ms(0).await
}

/// This process's clock (with the injected offset of a fault drill, if any).
pub fn local_now(cfg: &Config) -> i64 {
    shard_router::now_ms() + cfg.clock_offset_ms
}

/// Measures and exports this process's skew from Redis's clock; returns it in ms.
pub async fn observe_skew(cfg: &Config, client: &StockClient) -> Result<i64, StockError> {
    let skew = client.clock_skew_ms(0, || local_now(cfg)).await?;
    metrics::gauge!(m::CLOCK_SKEW_SECONDS).set(skew as f64 / 1000.0);
    if skew.abs() > 1000 {
        tracing::warn!(
            skew_ms = skew,
            "this clock is off Redis's; holds and payment timeouts use Redis's clock"
        );
    }
    Ok(skew)
}
