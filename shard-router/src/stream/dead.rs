//! The dead letters of one shard: entries the consumer gave up on (they decode into no
//! claim, or failed too often). A valid claim there has no other copy, so letters leave
//! only once `consumer redrive` has put their claims in the ledger.

use std::sync::LazyLock;

use redis::streams::StreamId;

use super::{range_page, ShardStream};
use crate::{StockClient, StockError};

/// Sent as EVAL with its body, like `settle.rs` (rare: no script cache to keep loaded).
static BODY: LazyLock<String> =
    LazyLock::new(|| super::settle::body(include_str!("../../../lua/dead_letter.lua")));

impl ShardStream {
    /// Copies an entry to the dead-letter stream (with why), then acks and deletes it, in
    /// one script (`lua/dead_letter.lua`): if Redis refuses the copy, the entry stays.
    pub async fn dead_letter(
        &self,
        client: &StockClient,
        entry_id: &str,
        fields: &[(String, Vec<u8>)],
        reason: &str,
    ) -> Result<(), StockError> {
        let mut conn = client.conn();
        // Not trimmed: valid claim records can be dead-lettered (too many deliveries), and
        // then this entry is their only copy until redriven.
        let mut eval = redis::cmd("EVAL");
        eval.arg(BODY.as_str())
            .arg(2)
            .arg(&self.key)
            .arg(&self.dead_key)
            .arg(&self.group)
            .arg(entry_id)
            .arg(reason);
        for (k, v) in fields {
            eval.arg(k).arg(v.as_slice());
        }
        client
            .bounded("dead letter", eval.query_async::<i64>(&mut conn))
            .await
            .map(drop)
    }
    /// Up to `count` dead letters after entry id `after` (from the start when `None`).
    pub async fn dead_page(
        &self,
        client: &StockClient,
        after: Option<&str>,
        count: usize,
    ) -> Result<Vec<StreamId>, StockError> {
        range_page(client, &self.dead_key, after, count).await
    }
    /// Removes dead letters whose claims the ledger holds now; returns how many went.
    pub async fn delete_dead(
        &self,
        client: &StockClient,
        ids: &[String],
    ) -> Result<u64, StockError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut conn = client.conn();
        client
            .bounded(
                "xdel dead letters",
                redis::cmd("XDEL")
                    .arg(&self.dead_key)
                    .arg(ids)
                    .query_async(&mut conn),
            )
            .await
    }
    /// How many dead letters wait.
    pub async fn dead_len(&self, client: &StockClient) -> Result<u64, StockError> {
        let mut conn = client.conn();
        client
            .bounded(
                "xlen dead letters",
                redis::cmd("XLEN")
                    .arg(&self.dead_key)
                    .query_async(&mut conn),
            )
            .await
    }
}
