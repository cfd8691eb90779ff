//! Settling committed entries: acknowledge them and remove them from the stream in one
//! call per shard (`lua/stream_ack.lua`, which says why its trim removes only committed
//! entries). The stream keeps only work that is not in the ledger yet.

use std::sync::LazyLock;

use super::ShardStream;
use crate::{StockClient, StockError};

/// Sent as EVAL with its body (its comments left out: Redis hashes the body on each call,
/// once per batch, not per claim): a restarted or promoted master never answers NOSCRIPT,
/// and Redis's commandstats keep this step in a row of its own, apart from the claim
/// script's EVALSHA (`campaign-ops/tests/it/redis_cost.rs` reads them).
static BODY: LazyLock<String> = LazyLock::new(|| body(include_str!("../../../lua/stream_ack.lua")));

/// A script's body without its comment lines and blank lines.
pub(super) fn body(script: &str) -> String {
    script
        .lines()
        .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}
/// Ids per call: bounds one script run (and Lua's unpacking of its arguments).
const CHUNK: usize = 1000;

/// What settling a batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// Entries that were pending and are acknowledged now.
    pub acked: u64,
    /// Entries removed by the trim (whole nodes at once).
    pub trimmed: u64,
    /// Entries removed by id (acknowledged while an older entry is still pending).
    pub deleted: u64,
}

impl ShardStream {
    /// Acknowledges entries whose records the ledger has committed and removes them from
    /// the stream. Idempotent: ids already settled are skipped.
    pub async fn ack_and_delete(
        &self,
        client: &StockClient,
        ids: &[String],
    ) -> Result<Settled, StockError> {
        let mut total = Settled::default();
        // Oldest first, as the script expects (it then parses only the newest id).
        let mut ids = ids.to_vec();
        ids.sort_by_cached_key(|id| entry_id(id));
        for chunk in ids.chunks(CHUNK) {
            let mut conn = client.conn();
            let (acked, trimmed, deleted): (u64, u64, u64) = client
                .bounded(
                    "xack+trim",
                    redis::cmd("EVAL")
                        .arg(BODY.as_str())
                        .arg(1)
                        .arg(&self.key)
                        .arg(&self.group)
                        .arg(chunk)
                        .query_async(&mut conn),
                )
                .await?;
            total.acked += acked;
            total.trimmed += trimmed;
            total.deleted += deleted;
        }
        Ok(total)
    }
}

/// `<ms>-<seq>` as Redis orders entry ids (`None`, first, for anything else).
fn entry_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}
