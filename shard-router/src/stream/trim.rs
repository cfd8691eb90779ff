//! Removing what the ledger has committed from a shard's stream: one XTRIM MINID to the
//! consumer's committed place, behind a guard against a master whose history is not the
//! one that place was read in (`lua/stream_trim.lua` says why).

use std::sync::LazyLock;

use super::ShardStream;
use crate::{StockClient, StockError};

/// Sent as EVAL with its body ([`crate::stream::body`] says why: no NOSCRIPT after a
/// restart, and a commandstats row of its own).
static BODY: LazyLock<String> =
    LazyLock::new(|| crate::stream::body(include_str!("../../../lua/stream_trim.lua")));

impl ShardStream {
    /// Removes the entries up to `committed` (an entry id whose record, and every older
    /// one's, is in the ledger, read under the master whose replication id is
    /// `repl_id`). Returns how many went; 0 when a guard held (another master now, or a
    /// history below the place).
    pub async fn trim_committed(
        &self,
        client: &StockClient,
        committed: &str,
        repl_id: &str,
    ) -> Result<u64, StockError> {
        let mut conn = client.conn();
        client
            .bounded(
                "stream trim",
                redis::cmd("EVAL")
                    .arg(BODY.as_str())
                    .arg(1)
                    .arg(&self.key)
                    .arg(committed)
                    .arg(repl_id)
                    .query_async(&mut conn),
            )
            .await
    }
}
