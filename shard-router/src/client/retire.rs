//! The end of a campaign in Redis: its shards stop selling, its keys go, and the SKU leaves
//! the live set. Each step is idempotent, so a close-out that crashed runs it again.

use std::collections::HashMap;

use redis::AsyncCommands;

use super::StockClient;
use crate::error::StockError;
use crate::keys;
use crate::placement::ShardId;

impl StockClient {
    /// Deletes every shard's meta: `claim.lua` and `take.lua` answer "not preheated"
    /// without it, whatever window the SKU metadata still shows.
    pub async fn stop_sales(&self, sku: u64, width: u16) -> Result<(), StockError> {
        for shard in self.placement.shards_of(sku, width) {
            self.del("stop sales", &self.keys(shard, sku).meta())
                .await?;
        }
        Ok(())
    }

    /// Deletes every key of the campaign on its shards but the stored answers, and its
    /// waiting room, one key at a time (a cluster may hold the shards on different nodes).
    pub async fn remove_campaign_keys(&self, sku: u64, width: u16) -> Result<(), StockError> {
        for shard in self.placement.shards_of(sku, width) {
            for key in self.keys(shard, sku).campaign_keys() {
                self.del("remove campaign key", &key).await?;
            }
        }
        // A queue campaign's waiting room (one entry per user in its tickets).
        for key in keys::queue_keys(sku) {
            self.del("remove campaign key", &key).await?;
        }
        Ok(())
    }

    /// Deletes the SKU metadata, then takes the SKU out of the live set. In this order, a
    /// crash in between leaves the SKU in the set, so retiring again finishes it.
    pub async fn forget_sku(&self, sku: u64) -> Result<(), StockError> {
        self.del("retire sku meta", &keys::sku_meta(sku)).await?;
        let mut conn = self.conn.clone();
        self.bounded::<i64>("retire sku", conn.srem(keys::SKU_SET, sku))
            .await?;
        Ok(())
    }

    /// user → units held on `shard` (the users' home counts, holds included).
    pub async fn user_counts(
        &self,
        sku: u64,
        shard: ShardId,
    ) -> Result<HashMap<String, u64>, StockError> {
        let mut conn = self.conn.clone();
        self.bounded("user counts", conn.hgetall(self.keys(shard, sku).users()))
            .await
    }

    async fn del(&self, op: &'static str, key: &str) -> Result<(), StockError> {
        let mut conn = self.conn.clone();
        self.bounded::<i64>(op, conn.del(key)).await?;
        Ok(())
    }
}
