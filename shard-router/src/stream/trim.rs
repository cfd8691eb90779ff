//! Removing what the ledger has committed from a shard's stream: one XTRIM MINID to the
//! consumer's committed place, behind a guard against a master whose history is not the
//! one that place was read in (`lua/stream_trim.lua` says why).

use std::sync::LazyLock;

use super::ShardStream;
use crate::{StockClient, StockError};

/// Sent as EVAL with its body (as `settle.rs` says why: no NOSCRIPT after a restart, and a
/// commandstats row of its own).
static BODY: LazyLock<String> =
    LazyLock::new(|| crate::stream::body(include_str!("../../../lua/stream_trim.lua")));

impl ShardStream {
    /// Removes the entries below `committed` (an entry id whose record, and every older
    /// one's, is in the ledger). Returns how many went; 0 when the guard held.
    pub async fn trim_committed(
        &self,
        client: &StockClient,
        committed: &str,
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
                    .query_async(&mut conn),
            )
            .await
    }
}
