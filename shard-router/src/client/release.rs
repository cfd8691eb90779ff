//! After the claim: standing holds, releases of stock and of the user's count, and a
//! user's count.

use redis::AsyncCommands;

use super::StockClient;
use crate::codec::HoldEntry;
use crate::error::StockError;
use crate::keys;
use crate::outcome::*;
use crate::placement::ShardId;
use crate::reply::Reply;
use crate::scripts::{self, code};

impl StockClient {
    /// Holds standing on a shard for a SKU.
    pub async fn holds(&self, sku: u64, shard: ShardId) -> Result<Vec<Hold>, StockError> {
        let mut conn = self.conn.clone();
        let raw: Vec<(String, String)> = self
            .bounded("holds", conn.hgetall(self.keys(shard, sku).holds()))
            .await?;
        Ok(raw
            .into_iter()
            .filter_map(|(field, value)| {
                let h = HoldEntry::parse(&field, &value)?;
                Some(Hold {
                    sku,
                    home: shard,
                    user: h.user,
                    user_seq: h.user_seq,
                    qty: h.qty,
                    expires_ms: h.expires_ms,
                    gen: h.gen,
                    request_id: h.request_id,
                })
            })
            .collect())
    }

    /// Returns a claim's units to its slice and to the user's count, each exactly once.
    pub async fn release(&self, rel: &ReleaseRequest) -> Result<ReleaseOutcome, StockError> {
        let ks = self.keys(rel.shard, rel.sku);
        let mut inv = scripts::RELEASE_STOCK.prepare_invoke();
        inv.key(ks.stock())
            .key(ks.released_stock())
            .key(ks.debt())
            .arg(&rel.claim_id)
            .arg(rel.qty)
            .arg(rel.sku)
            .arg(rel.shard)
            .arg(keys::EVENTS_CHANNEL);
        let stock = release_step(self.run("release stock", &inv).await?)?;
        if stock == ReleaseStep::NotPreheated {
            // The slice is gone (Redis lost it): leave the user's count alone too, so a
            // retry after re-preheat does both halves.
            return Ok(ReleaseOutcome {
                stock,
                user: ReleaseStep::NotPreheated,
            });
        }
        let kh = self.keys(rel.home, rel.sku);
        let mut inv = scripts::RELEASE_USER.prepare_invoke();
        inv.key(kh.users())
            .key(kh.released_user())
            .key(kh.meta())
            .arg(&rel.claim_id)
            .arg(&rel.user)
            .arg(rel.qty);
        let user = release_step(self.run("release user", &inv).await?)?;
        Ok(ReleaseOutcome { stock, user })
    }

    /// Units the user holds of a SKU (holds included), read from the home shard.
    pub async fn user_count(&self, sku: u64, width: u16, user: &str) -> Result<u32, StockError> {
        let home = self.placement.home_shard(sku, width, user);
        let mut conn = self.conn.clone();
        let v: Option<u32> = self
            .bounded("user count", conn.hget(self.keys(home, sku).users(), user))
            .await?;
        Ok(v.unwrap_or(0))
    }
}

fn release_step(r: Reply) -> Result<ReleaseStep, StockError> {
    match r.code {
        code::RELEASED => Ok(ReleaseStep::Released),
        code::ALREADY_RELEASED => Ok(ReleaseStep::AlreadyReleased),
        code::NOT_PREHEATED => Ok(ReleaseStep::NotPreheated),
        _ => Err(r.unexpected()),
    }
}
