//! Redis's clock. Hold deadlines are checked by Redis's clock (`take.lua`), so whoever
//! resolves holds, and whoever compares claim times, reads the same clock: `TIME` on the
//! shard's master, never its own. [`StockClient::clock_skew_ms`] measures how far a
//! process's clock is from it, for the processes whose clock still matters (the gateway's
//! stamps the sale window and `claimed_ms`).

use std::time::Instant;

use crate::client::StockClient;
use crate::error::StockError;
use crate::placement::ShardId;

impl StockClient {
    /// `TIME` on the master that owns `shard`, in ms since the Unix epoch.
    pub async fn redis_time_ms(&self, shard: ShardId) -> Result<i64, StockError> {
        let (secs, micros): (i64, i64) = self.on_master("time", shard, redis::cmd("TIME")).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// `local_ms()` minus Redis's clock on `shard`'s master, taking Redis's reading as
    /// made halfway through the round trip (error at most half of it).
    pub async fn clock_skew_ms(
        &self,
        shard: ShardId,
        local_ms: impl Fn() -> i64,
    ) -> Result<i64, StockError> {
        let sent = Instant::now();
        let before = local_ms();
        let redis = self.redis_time_ms(shard).await?;
        let half_rtt = (sent.elapsed().as_millis() / 2) as i64;
        Ok(before + half_rtt - redis)
    }

    /// [`Self::clock_skew_ms`] as the best of `samples` readings (the one with the
    /// shortest round trip, whose midpoint guess errs least), with that half round trip:
    /// the true skew lies within `skew ± half_rtt`.
    pub async fn clock_skew_best_ms(
        &self,
        shard: ShardId,
        samples: u32,
        local_ms: impl Fn() -> i64,
    ) -> Result<(i64, i64), StockError> {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..samples.max(1) {
            let sent = Instant::now();
            let before = local_ms();
            let redis = self.redis_time_ms(shard).await?;
            let half_rtt = (sent.elapsed().as_micros() / 2000) as i64;
            let skew = before + half_rtt - redis;
            if best.is_none_or(|(_, h)| half_rtt < h) {
                best = Some((skew, half_rtt));
            }
        }
        Ok(best.unwrap_or_default())
    }
}
