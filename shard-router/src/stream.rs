//! The claims stream of one shard, as typed operations: consumer group (its consumers in
//! `stream/consumers.rs`), reads, settling (ack + removal, `stream/settle.rs`), XAUTOCLAIM,
//! dead letters, paging, depth. Every command names keys of that one shard only (they
//! share the hash tag), so it runs on a cluster. The consumer, the rebuild and
//! reconciliation use these instead of raw commands on shard-router's keys.

use std::collections::HashMap;
use std::time::Duration;

use crate::error::has_code;
use crate::{keys, ClaimRecord, ReplicationInfo, ShardId, StockClient, StockError};
use redis::streams::{StreamAutoClaimReply, StreamId, StreamRangeReply, StreamReadReply};
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

/// The stream key and group of one shard.
#[derive(Debug, Clone)]
pub struct ShardStream {
    pub shard: ShardId,
    pub key: String,
    pub dead_key: String,
    pub group: String,
}

impl ShardStream {
    pub fn new(client: &StockClient, shard: ShardId, group: &str) -> Self {
        Self {
            shard,
            key: keys::claims_stream(client.placement(), shard),
            dead_key: keys::dead_letter_stream(client.placement(), shard),
            group: group.to_owned(),
        }
    }

    /// Creates the group (and the stream) if missing. From id 0, so claims written before
    /// the first consumer ever started are read too.
    pub async fn ensure_group(&self, client: &StockClient) -> Result<(), StockError> {
        let mut conn = client.conn();
        let r: Result<(), StockError> = client
            .bounded(
                "xgroup create",
                redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(&self.key)
                    .arg(&self.group)
                    .arg("0")
                    .arg("MKSTREAM")
                    .query_async(&mut conn),
            )
            .await;
        match r {
            Err(StockError::Redis { source, .. }) if has_code(&source, "BUSYGROUP") => Ok(()),
            other => other,
        }
    }

    /// XREADGROUP of new entries, blocking up to `block`.
    pub async fn read_new(
        &self,
        client: &StockClient,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Vec<StreamId>, StockError> {
        Ok(self.read_new_under(client, consumer, count, block).await?.0)
    }

    /// [`Self::read_new`] with `INFO replication` of the same master in the same pipeline:
    /// the replication id under which the entries were read (see `replica.rs`).
    pub async fn read_new_under(
        &self,
        client: &StockClient,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<(Vec<StreamId>, ReplicationInfo), StockError> {
        let mut conn = client.conn();
        let (reply, info): (Option<StreamReadReply>, String) = client
            .bounded(
                "xreadgroup",
                self.read_pipe(consumer, count, block)
                    .query_async(&mut conn),
            )
            .await?;
        let entries = reply
            .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
            .unwrap_or_default();
        Ok((entries, ReplicationInfo::parse(&info)))
    }

    /// [`Self::read_new_under`] with the entries decoded as they come off the reply
    /// (`stream/read.rs`), poison ones named: what the consumer's readers use.
    pub async fn read_decoded_under(
        &self,
        client: &StockClient,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<(Vec<Result<Delivered, Poison>>, ReplicationInfo), StockError> {
        let mut conn = client.conn();
        let (reply, info): (Value, String) = client
            .bounded(
                "xreadgroup",
                self.read_pipe(consumer, count, block)
                    .query_async(&mut conn),
            )
            .await?;
        Ok((
            read::decode_reply(self.shard, reply),
            ReplicationInfo::parse(&info),
        ))
    }

    /// XREADGROUP of new entries and `INFO replication`, in one pipeline.
    fn read_pipe(&self, consumer: &str, count: usize, block: Duration) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&self.group)
            .arg(consumer)
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(">");
        pipe.cmd("INFO").arg("replication");
        pipe
    }

    /// Resets the idle time of entries this process still works on (JUSTID does not count
    /// as a delivery), so no other consumer's XAUTOCLAIM takes them.
    pub async fn refresh(
        &self,
        client: &StockClient,
        consumer: &str,
        ids: &[String],
    ) -> Result<(), StockError> {
        for chunk in ids.chunks(500) {
            let mut conn = client.conn();
            client
                .bounded(
                    "xclaim refresh",
                    redis::cmd("XCLAIM")
                        .arg(&self.key)
                        .arg(&self.group)
                        .arg(consumer)
                        .arg(0)
                        .arg(chunk)
                        .arg("JUSTID")
                        .query_async::<Value>(&mut conn),
                )
                .await?;
        }
        Ok(())
    }

    /// Delivery counts of entries idle for at least `idle` (XPENDING extended form).
    pub async fn idle_deliveries(
        &self,
        client: &StockClient,
        idle: Duration,
        count: usize,
    ) -> Result<HashMap<String, u64>, StockError> {
        let mut conn = client.conn();
        let rows: Vec<(String, String, u64, u64)> = client
            .bounded(
                "xpending",
                redis::cmd("XPENDING")
                    .arg(&self.key)
                    .arg(&self.group)
                    .arg("IDLE")
                    .arg(idle.as_millis() as u64)
                    .arg("-")
                    .arg("+")
                    .arg(count)
                    .query_async(&mut conn),
            )
            .await?;
        Ok(rows.into_iter().map(|(id, _, _, n)| (id, n)).collect())
    }

    /// XAUTOCLAIM of entries idle for at least `idle`, from `start`.
    pub async fn autoclaim(
        &self,
        client: &StockClient,
        consumer: &str,
        idle: Duration,
        start: &str,
        count: usize,
    ) -> Result<StreamAutoClaimReply, StockError> {
        let mut conn = client.conn();
        client
            .bounded(
                "xautoclaim",
                redis::cmd("XAUTOCLAIM")
                    .arg(&self.key)
                    .arg(&self.group)
                    .arg(consumer)
                    .arg(idle.as_millis() as u64)
                    .arg(start)
                    .arg("COUNT")
                    .arg(count)
                    .query_async(&mut conn),
            )
            .await
    }

    /// Every entry still in the stream (committed entries are deleted, so this is the
    /// in-flight work), read in pages of `page`.
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

    /// Stream length, the group's pending count, and when the oldest pending entry was
    /// added (ms, from its id).
    pub async fn depth(&self, client: &StockClient) -> Result<Depth, StockError> {
        let mut conn = client.conn();
        let len: u64 = client
            .bounded(
                "xlen",
                redis::cmd("XLEN").arg(&self.key).query_async(&mut conn),
            )
            .await?;
        let summary: Value = client
            .bounded(
                "xpending",
                redis::cmd("XPENDING")
                    .arg(&self.key)
                    .arg(&self.group)
                    .query_async(&mut conn),
            )
            .await?;
        let (pending, oldest_ms) = pending_summary(&summary);
        Ok(Depth {
            len,
            pending,
            oldest_ms,
        })
    }
}

/// Decodes an entry, or says why it is poison. Borrows the field bytes; they are copied
/// only for a poison entry (which goes to the dead letters with its fields).
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

/// An entry's fields as they are, for a copy that must keep them (a dead letter): a record
/// moved in the form it was written in stays readable by whatever could read it before.
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

mod consumers;
mod dead;
mod depth;
mod read;
mod settle;
use depth::pending_summary;
pub use depth::Depth;
pub use settle::Settled;
