//! The claims stream of one shard, as typed operations: reads after a place (XREAD, no
//! consumer group: the consumer keeps its place in the ledger, `ledger/src/places.rs`),
//! the trim of what the ledger committed (`stream/trim.rs`), paging, depth. Every command
//! names keys of that one shard only (they share the hash tag), so it runs on a cluster. The
//! consumer, the rebuild and reconciliation use these instead of raw commands on
//! shard-router's keys.

use std::time::Duration;

use crate::{keys, ClaimRecord, ReplicationInfo, ShardId, StockClient, StockError};
use redis::streams::{StreamId, StreamRangeReply};
use redis::Value;

/// One entry read from a shard stream.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub shard: ShardId,
    pub entry_id: String,
    pub record: ClaimRecord,
}

/// An entry that does not decode into a claim record.
#[derive(Debug, Clone)]
pub struct Poison {
    pub shard: ShardId,
    pub entry_id: String,
    pub reason: String,
    pub fields: Vec<(String, Vec<u8>)>,
}

/// The stream key of one shard.
#[derive(Debug, Clone)]
pub struct ShardStream {
    pub shard: ShardId,
    pub key: String,
}

impl ShardStream {
    pub fn new(client: &StockClient, shard: ShardId) -> Self {
        Self {
            shard,
            key: keys::claims_stream(client.placement(), shard),
        }
    }

    /// The entries after entry id `after` (at most `count`, waiting up to `block` for one),
    /// decoded as they come off the reply (`stream/read.rs`), poison ones named, with
    /// `INFO replication` of the same node in the same pipeline: the replication id the
    /// entries were read under (on a replica, its master's). XREAD writes nothing, so it
    /// runs on a replica too.
    pub async fn read_after_under(
        &self,
        client: &StockClient,
        after: &str,
        count: usize,
        block: Duration,
    ) -> Result<(Vec<Result<Delivered, Poison>>, ReplicationInfo), StockError> {
        let mut pipe = redis::pipe();
        pipe.cmd("XREAD")
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(after);
        pipe.cmd("INFO").arg("replication");
        let mut conn = client.conn();
        let (reply, info): (Value, String) =
            client.bounded("xread", pipe.query_async(&mut conn)).await?;
        Ok((
            read::decode_reply(self.shard, reply),
            ReplicationInfo::parse(&info),
        ))
    }

    /// The time part (ms) of the first entry after `after`, `None` when there is none: how
    /// long the oldest claim not committed yet has waited.
    pub async fn first_after_ms(
        &self,
        client: &StockClient,
        after: &str,
    ) -> Result<Option<i64>, StockError> {
        let mut conn = client.conn();
        let r: StreamRangeReply = client
            .bounded(
                "xrange",
                redis::cmd("XRANGE")
                    .arg(&self.key)
                    .arg(format!("({after}"))
                    .arg("+")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut conn),
            )
            .await?;
        Ok(r.ids
            .first()
            .and_then(|e| e.id.split_once('-'))
            .and_then(|(ms, _)| ms.parse().ok()))
    }

    /// One page of entries after `after` (from the start when `None`) up to `through`
    /// included: at most `count`, oldest first. For walking the committed part of a stream
    /// without reading what lies past it.
    pub async fn page_through(
        &self,
        client: &StockClient,
        after: Option<&str>,
        through: &str,
        count: usize,
    ) -> Result<Vec<StreamId>, StockError> {
        let start = after.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        let mut conn = client.conn();
        let r: StreamRangeReply = client
            .bounded(
                "xrange",
                redis::cmd("XRANGE")
                    .arg(&self.key)
                    .arg(start)
                    .arg(through)
                    .arg("COUNT")
                    .arg(count)
                    .query_async(&mut conn),
            )
            .await?;
        Ok(r.ids)
    }

    /// Every entry still in the stream (committed ones stay until a trim, so callers skip
    /// what the ledger has), read in pages of `page`.
    pub async fn all_entries(
        &self,
        client: &StockClient,
        page: usize,
    ) -> Result<Vec<StreamId>, StockError> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let r = range_page(client, &self.key, after.as_deref(), page).await?;
            let n = r.len();
            after = r.last().map(|e| e.id.clone());
            out.extend(r);
            if n < page {
                return Ok(out);
            }
        }
    }

    /// Stream length (committed entries not trimmed yet included).
    pub async fn len(&self, client: &StockClient) -> Result<u64, StockError> {
        let mut conn = client.conn();
        client
            .bounded(
                "xlen",
                redis::cmd("XLEN").arg(&self.key).query_async(&mut conn),
            )
            .await
    }
}

/// Decodes an entry, or says why it is poison. Borrows the field bytes; they are copied
/// only for a poison entry (kept in the ledger with its fields, `ledger/src/poison.rs`).
pub fn decode(shard: ShardId, entry: &StreamId) -> Result<Delivered, Poison> {
    let borrowed = entry.map.iter().filter_map(|(k, v)| match v {
        Value::BulkString(b) => Some((k.as_str(), b.as_slice())),
        Value::SimpleString(s) => Some((k.as_str(), s.as_bytes())),
        _ => None,
    });
    let poison = |reason: String| Poison {
        shard,
        entry_id: entry.id.clone(),
        reason,
        fields: fields_of(entry),
    };
    match ClaimRecord::decode(&entry.id, borrowed) {
        Ok(record) if record.shard == shard => Ok(Delivered {
            shard,
            entry_id: entry.id.clone(),
            record,
        }),
        Ok(record) => Err(poison(format!(
            "record names shard {} but sits in shard {shard}",
            record.shard
        ))),
        Err(e) => Err(poison(e.reason)),
    }
}

/// An entry's fields as they are, for a copy that must keep them (a poison entry kept in
/// the ledger, `ledger/src/poison.rs`): whatever they hold, a later reader sees it as
/// written.
pub fn fields_of(entry: &StreamId) -> Vec<(String, Vec<u8>)> {
    entry
        .map
        .iter()
        .map(|(k, v)| {
            let bytes = match v {
                Value::BulkString(b) => b.clone(),
                Value::SimpleString(s) => s.clone().into_bytes(),
                Value::Int(i) => i.to_string().into_bytes(),
                other => format!("{other:?}").into_bytes(),
            };
            (k.clone(), bytes)
        })
        .collect()
}

/// One XRANGE page of `key` after entry id `after` (from the start when `None`).
async fn range_page(
    client: &StockClient,
    key: &str,
    after: Option<&str>,
    count: usize,
) -> Result<Vec<StreamId>, StockError> {
    let start = after.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
    let mut conn = client.conn();
    let r: StreamRangeReply = client
        .bounded(
            "xrange",
            redis::cmd("XRANGE")
                .arg(key)
                .arg(start)
                .arg("+")
                .arg("COUNT")
                .arg(count)
                .query_async(&mut conn),
        )
        .await?;
    Ok(r.ids)
}

mod read;
mod trim;

/// A script's body without its comment lines and blank lines: sent as EVAL, Redis hashes
/// the body on each call (once per trim, not per claim), a restarted or promoted master
/// never answers NOSCRIPT, and commandstats keep the step in a row of its own
/// (`campaign-ops/tests/it/redis_cost.rs` reads them).
pub(crate) fn body(script: &str) -> String {
    script
        .lines()
        .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}
