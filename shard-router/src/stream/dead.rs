//! The dead letters of one shard: entries the consumer gave up on (they decode into no
//! claim, or failed too often). A valid claim there has no other copy, so letters leave
//! only once `consumer redrive` has put their claims in the ledger.

use redis::streams::StreamId;

use super::{range_page, ShardStream};
use crate::{StockClient, StockError};

impl ShardStream {
    /// Copies a poison entry to the dead-letter stream (with why), then acks and deletes it.
    pub async fn dead_letter(
        &self,
        client: &StockClient,
        entry_id: &str,
        fields: &[(String, Vec<u8>)],
        reason: &str,
    ) -> Result<(), StockError> {
        let mut conn = client.conn();
        let mut add = redis::cmd("XADD");
        // Not trimmed: valid claim records can be dead-lettered (too many deliveries), and
        // then this entry is their only copy until redriven.
        add.arg(&self.dead_key).arg("*");
        for (k, v) in fields {
            add.arg(k).arg(v.as_slice());
        }
        add.arg("dead_entry")
            .arg(entry_id)
            .arg("dead_reason")
            .arg(reason);
        let mut pipe = redis::pipe();
        pipe.add_command(add).ignore();
        pipe.cmd("XACK")
            .arg(&self.key)
            .arg(&self.group)
            .arg(entry_id)
            .ignore();
        pipe.cmd("XDEL").arg(&self.key).arg(entry_id).ignore();
        client
            .bounded("dead letter", pipe.query_async::<()>(&mut conn))
            .await
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
