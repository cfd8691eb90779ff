//! The dead-letter stream an earlier release kept per shard (`{T}:dead`), read and emptied
//! by this release's adoption at start (`campaign-ops/src/adopt.rs`).

use redis::streams::{StreamId, StreamRangeReply};

use super::ShardStream;
use crate::{keys, StockClient, StockError};

impl ShardStream {
    /// The shard's dead-letter stream key.
    pub fn dead_key(&self, client: &StockClient) -> String {
        keys::dead_letter_stream(client.placement(), self.shard)
    }

    /// The first `count` dead letters.
    pub async fn dead_letters(
        &self,
        client: &StockClient,
        count: usize,
    ) -> Result<Vec<StreamId>, StockError> {
        let mut conn = client.conn();
        let r: StreamRangeReply = client
            .bounded(
                "xrange dead letters",
                redis::cmd("XRANGE")
                    .arg(self.dead_key(client))
                    .arg("-")
                    .arg("+")
                    .arg("COUNT")
                    .arg(count)
                    .query_async(&mut conn),
            )
            .await?;
        Ok(r.ids)
    }

    /// Deletes the dead letters `ids` (handled); returns how many went.
    pub async fn delete_dead_letters(
        &self,
        client: &StockClient,
        ids: &[&str],
    ) -> Result<u64, StockError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut conn = client.conn();
        client
            .bounded(
                "xdel dead letters",
                redis::cmd("XDEL")
                    .arg(self.dead_key(client))
                    .arg(ids)
                    .query_async(&mut conn),
            )
            .await
    }
}
