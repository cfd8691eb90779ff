//! The dead letters of an earlier release, adopted once at start. Releases before the
//! offset consumer moved entries they could not commit to a per-shard dead-letter stream
//! (`{T}:dead`: the record's own fields, `dead_entry` its original id, `dead_reason`)
//! for `consumer redrive`. This release has neither: its rebuild and reconciliation read
//! only the claims streams, so a letter left there would be an acknowledged claim nobody
//! counts (a rebuild would give its unit back). So the consumer commits every decodable
//! letter to the ledger (idempotent by claim id), keeps the rest in `stream_poison`, makes
//! rerouted answers final, and only then deletes the letters it handled; before the
//! rebuild watch starts (`service.rs`).
//!
//! A letter is an entry no consumer committed, so no replica fence covered it: a page goes
//! to the ledger only once a replica holds it under `--replica-wait` (as the reader's
//! entries do); unconfirmed, the shard's letters stay for the next start.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;
use shard_router::stream::ShardStream;
use shard_router::{ClaimRecord, ShardId, StockClient};
use sqlx::MySqlPool;

use consumer::replica::{self, ReplicaWait};
use consumer::{commit, ConsumerError};

/// Letters read per page (and written per ledger batch).
const PAGE: usize = 500;
/// Reads of a page before its shard is left for the next start.
const CONFIRM_ATTEMPTS: u32 = 5;

/// What the adoption did, summed over the shards.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Adopted {
    /// Letters committed (or found in the ledger already) and deleted.
    pub committed: u64,
    /// Letters that are not claim records: kept in `stream_poison`, then deleted.
    pub poison: u64,
    /// Letters left because no replica confirmed them.
    pub unconfirmed: u64,
}

/// Adopts every shard's dead letters.
pub async fn dead_letters(
    pool: &MySqlPool,
    client: &StockClient,
    replicas: ReplicaWait,
    t: Duration,
) -> Result<Adopted, ConsumerError> {
    let mut out = Adopted::default();
    for shard in 0..client.placement().shard_count() {
        let stream = ShardStream::new(client, shard);
        let key = stream.dead_key(client);
        loop {
            let Some(page) = confirmed_page(client, &stream, replicas).await? else {
                tracing::warn!(shard, "dead letters of an earlier release no replica confirmed; left for the next start");
                out.unconfirmed += 1;
                break;
            };
            if page.is_empty() {
                break;
            }
            let mut records = Vec::new();
            let mut poison = Vec::new();
            for e in &page {
                match decode(shard, &e.map) {
                    Some(r) => records.push(r),
                    None => poison.push(ledger::poison::Poison {
                        stream: key.clone(),
                        entry_id: e.id.clone(),
                        reason: "dead letter of an earlier release: not a claim record".into(),
                        fields: fields_json(&e.map),
                    }),
                }
            }
            if let Err(e) = commit::write_batch(pool, &records, t).await {
                // Not the letters' fault (the server's state, a bug): the next start again.
                if e.cause() != ledger::Cause::RowFault {
                    return Err(e);
                }
                // One letter MySQL refuses (the earlier release dead-lettered such rows)
                // must not hold back the rest: row by row, the refused ones kept as poison.
                let mut kept = Vec::new();
                for r in records.drain(..) {
                    match commit::write_batch(pool, std::slice::from_ref(&r), t).await {
                        Ok(_) => kept.push(r),
                        Err(e) if e.cause() != ledger::Cause::RowFault => return Err(e),
                        Err(e) => poison.push(ledger::poison::Poison {
                            stream: key.clone(),
                            entry_id: r.claim_id.clone(),
                            reason: format!("dead letter of an earlier release refused: {e}"),
                            fields: ledger::poison::fields_json(r.encode_pairs()),
                        }),
                    }
                }
                records = kept;
            }
            consumer::final_answers::finalize_records(client, records.iter()).await;
            ledger::poison::keep_now(pool, &poison, t).await?;
            let ids: Vec<&str> = page.iter().map(|e| e.id.as_str()).collect();
            stream.delete_dead_letters(client, &ids).await?;
            out.committed += records.len() as u64;
            out.poison += poison.len() as u64;
        }
    }
    if out != Adopted::default() {
        tracing::info!(?out, "dead letters of an earlier release adopted");
    }
    Ok(out)
}

/// The first page of `key` that a replica holds (or that needs none); `None` when no
/// attempt was confirmed.
async fn confirmed_page(
    client: &StockClient,
    stream: &ShardStream,
    replicas: ReplicaWait,
) -> Result<Option<Vec<redis::streams::StreamId>>, ConsumerError> {
    let shard = stream.shard;
    for attempt in 0..CONFIRM_ATTEMPTS {
        if attempt > 0 {
            if let Some(wait) = replicas.bound() {
                tokio::time::sleep(wait).await;
            }
        }
        // Read again on every attempt: after a failover the page may differ.
        let before = client.replication(shard).await?;
        let page = stream.dead_letters(client, PAGE).await?;
        if page.is_empty() || replica::write_confirmed(client, shard, replicas, &before).await {
            return Ok(Some(page));
        }
    }
    Ok(None)
}

fn text(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

/// The claim record of a letter: its original fields under its original entry id
/// (`dead_entry`), which the claim id is made of.
pub(crate) fn decode(shard: ShardId, map: &HashMap<String, Value>) -> Option<ClaimRecord> {
    let entry_id = String::from_utf8(text(map.get("dead_entry")?)?).ok()?;
    let fields: Vec<(&str, Vec<u8>)> = map
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), text(v)?)))
        .collect();
    let record =
        ClaimRecord::decode(&entry_id, fields.iter().map(|(k, v)| (*k, v.as_slice()))).ok()?;
    (record.shard == shard).then_some(record)
}

fn fields_json(map: &HashMap<String, Value>) -> String {
    ledger::poison::fields_json(map.iter().filter_map(|(k, v)| Some((k, text(v)?))))
}
