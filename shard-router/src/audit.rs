//! The Redis side of a reconciliation, one shard at a time: the atomic anchor
//! (`lua/reconcile.lua`), the release set and the streams read in pages, and the removal of
//! an excess (`lua/reconcile_fix.lua`). The consumer's `reconcile` module holds the
//! algorithm and why it is exact; this module owns the keys and the replies.

use std::collections::{HashMap, HashSet};

use redis::streams::StreamRangeReply;
use redis::Value;

use crate::client::StockClient;
use crate::codec::{parse_entry_id, ClaimId, EntryId};
use crate::error::StockError;
use crate::keys;
use crate::placement::ShardId;
use crate::record::ClaimRecord;
use crate::scripts::{self, code};

/// What the anchor read at one instant `T_s` (see `lua/reconcile.lua`).
#[derive(Debug, Clone)]
pub struct Anchor {
    /// `None`: the slice is missing.
    pub slice: Option<i64>,
    /// Every claim taken before `T_s` has an entry id `<=` this: the larger of the stream's
    /// last generated id and "just before Redis's clock".
    pub cutoff: EntryId,
    pub epoch: i64,
    /// The asked release ids that are in the release set.
    pub found: Vec<String>,
    /// The release set's size.
    pub set_size: usize,
    /// wave id → units this slice got from it.
    pub waves: HashMap<String, i64>,
    /// Units under holds.
    pub held: i64,
    pub debt: i64,
    /// The shard meta's rebuild generation (0 when absent).
    pub gen: u64,
    /// The asked late claims whose `late:` mark is set.
    pub marked: HashSet<String>,
}

/// What a removal of excess did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixed {
    /// `removed` units left the slice (now `left`); `owed` more were sold beyond it and
    /// went onto the shard's debt.
    Removed { removed: i64, left: i64, owed: i64 },
    /// Another removal ran since the snapshot: nothing done.
    Stale,
    /// The slice is missing: nothing done.
    NotPreheated,
}

const ANCHORED: i64 = 60;
const REMOVED: i64 = 50;
const STALE: i64 = 51;

impl StockClient {
    /// Runs the anchor on `shard` for `sku`, asking the membership of `released` (at most
    /// a page) and the marks of `late` (late claims the ledger lists unapplied).
    pub async fn reconcile_anchor(
        &self,
        shard: ShardId,
        sku: u64,
        released: &[String],
        late: &[String],
    ) -> Result<Anchor, StockError> {
        let k = self.keys(shard, sku);
        let mut inv = scripts::RECONCILE.prepare_invoke();
        inv.key(k.stock())
            .key(keys::claims_stream(self.placement(), shard))
            .key(k.released_stock())
            .key(k.holds())
            .key(k.waves())
            .key(k.fix_epoch())
            .key(k.debt())
            .key(k.meta());
        inv.arg(released.len());
        for id in released.iter().chain(late) {
            inv.arg(id);
        }
        let r = self.run("reconcile anchor", &inv).await?;
        if r.code != ANCHORED {
            return Err(r.unexpected());
        }
        let now_ms: u64 = r.num(2)?;
        let by_clock = (now_ms.saturating_sub(1), u64::MAX);
        let waves = r.texts(7)?;
        Ok(Anchor {
            slice: (r.int(0)? == 1).then_some(r.int(1)?),
            cutoff: parse_entry_id(&r.text(3)?).map_or(by_clock, |l| l.max(by_clock)),
            epoch: r.int(4)?,
            found: r.texts(5)?,
            set_size: r.num(6)?,
            waves: waves
                .chunks(2)
                .filter_map(|p| match p {
                    [id, n] => Some((id.clone(), n.parse().ok()?)),
                    _ => None,
                })
                .collect(),
            held: r.int(8)?,
            debt: r.int(9)?,
            gen: r.int(10)?.max(0).unsigned_abs(),
            marked: r.texts(11)?.into_iter().collect(),
        })
    }

    /// Adds every member of `shard`'s release set for `sku` to `into`, scanned in pages of
    /// about `page`.
    pub async fn scan_released(
        &self,
        shard: ShardId,
        sku: u64,
        page: usize,
        into: &mut HashSet<String>,
    ) -> Result<(), StockError> {
        let key = self.keys(shard, sku).released_stock();
        let mut cursor = 0u64;
        loop {
            let mut conn = self.conn();
            let (next, members): (u64, Vec<String>) = self
                .bounded(
                    "reconcile sscan",
                    redis::cmd("SSCAN")
                        .arg(&key)
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(page)
                        .query_async(&mut conn),
                )
                .await?;
            into.extend(members);
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Adds to `into` the ids of `ids` that are in `shard`'s release set now, a page per
    /// call.
    pub async fn released_now(
        &self,
        shard: ShardId,
        sku: u64,
        ids: &[String],
        page: usize,
        into: &mut HashSet<String>,
    ) -> Result<(), StockError> {
        let key = self.keys(shard, sku).released_stock();
        for chunk in ids.chunks(page.max(1)) {
            let mut conn = self.conn();
            let is: Vec<bool> = self
                .bounded(
                    "reconcile smismember",
                    redis::cmd("SMISMEMBER")
                        .arg(&key)
                        .arg(chunk)
                        .query_async(&mut conn),
                )
                .await?;
            into.extend(
                chunk
                    .iter()
                    .zip(is)
                    .filter(|(_, m)| *m)
                    .map(|(id, _)| id.clone()),
            );
        }
        Ok(())
    }

    /// claim id → units of `sku`'s records taken on `shard` up to `cutoff`: those still in
    /// the claims stream (committed ones not trimmed yet too), in XRANGE pages of `page`.
    pub async fn units_taken(
        &self,
        shard: ShardId,
        sku: u64,
        cutoff: EntryId,
        page: usize,
    ) -> Result<HashMap<String, i64>, StockError> {
        let sku_text = sku.to_string();
        let mut out = HashMap::new();
        let stream = keys::claims_stream(self.placement(), shard);
        let end = format!("{}-{}", cutoff.0, cutoff.1);
        self.pages(&stream, &end, page, |id, map| {
            if let Some(q) = units_of(map, sku_text.as_bytes()) {
                out.insert(ClaimId::new(shard, id).into(), q);
            }
        })
        .await?;
        Ok(out)
    }

    /// Every record of `sku` still in `shard`'s claims stream, in XRANGE pages of `page`
    /// (drills and tests compare them with what clients were told). An entry that is not a
    /// claim record is a protocol error.
    pub async fn stream_records(
        &self,
        shard: ShardId,
        sku: u64,
        page: usize,
    ) -> Result<Vec<ClaimRecord>, StockError> {
        let stream = keys::claims_stream(self.placement(), shard);
        let mut out = Vec::new();
        let mut bad = None;
        self.pages(&stream, "+", page, |id, map| {
            match ClaimRecord::decode(id, pairs(map)) {
                Ok(r) if r.sku == sku => out.push(r),
                Ok(_) => {}
                Err(e) => bad = Some(format!("entry {id}: {e}")),
            }
        })
        .await?;
        match bad {
            Some(detail) => Err(StockError::Protocol {
                op: "stream records",
                detail,
            }),
            None => Ok(out),
        }
    }

    /// Takes `excess` units out of `shard`'s slice if no removal ran since the snapshot
    /// that saw fix epoch `epoch`; what the slice cannot give goes onto the debt
    /// (`lua/reconcile_fix.lua`).
    pub async fn remove_excess(
        &self,
        shard: ShardId,
        sku: u64,
        epoch: i64,
        excess: i64,
    ) -> Result<Fixed, StockError> {
        let k = self.keys(shard, sku);
        let mut inv = scripts::RECONCILE_FIX.prepare_invoke();
        inv.key(k.stock())
            .key(k.fix_epoch())
            .key(k.debt())
            .arg(epoch)
            .arg(excess)
            .arg(sku)
            .arg(shard)
            .arg(keys::EVENTS_CHANNEL);
        let r = self.run("remove excess", &inv).await?;
        match r.code {
            REMOVED => Ok(Fixed::Removed {
                removed: r.int(0)?,
                left: r.int(1)?,
                owed: r.int(3)?,
            }),
            STALE => Ok(Fixed::Stale),
            code::NOT_PREHEATED => Ok(Fixed::NotPreheated),
            _ => Err(r.unexpected()),
        }
    }

    /// XRANGE of `key` from its first entry to `end`, a page per call, each entry given to
    /// `each`.
    async fn pages(
        &self,
        key: &str,
        end: &str,
        page: usize,
        mut each: impl FnMut(&str, &HashMap<String, Value>),
    ) -> Result<(), StockError> {
        let page = page.max(1);
        let mut start = "-".to_owned();
        loop {
            let mut conn = self.conn();
            let r: StreamRangeReply = self
                .bounded(
                    "reconcile xrange",
                    redis::cmd("XRANGE")
                        .arg(key)
                        .arg(&start)
                        .arg(end)
                        .arg("COUNT")
                        .arg(page)
                        .query_async(&mut conn),
                )
                .await?;
            for e in &r.ids {
                each(&e.id, &e.map);
            }
            match r.ids.last() {
                Some(last) if r.ids.len() == page => start = format!("({}", last.id),
                _ => return Ok(()),
            }
        }
    }
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// An entry's text fields as name/value pairs, for the record decoders.
fn pairs(map: &HashMap<String, Value>) -> impl Iterator<Item = (&str, &[u8])> {
    map.iter()
        .filter_map(|(k, v)| Some((k.as_str(), bytes(v)?)))
}

/// Units of an entry if it is a record of `sku` (`record.rs`: none for an unknown version).
fn units_of(map: &HashMap<String, Value>, sku: &[u8]) -> Option<i64> {
    let (of, units) = ClaimRecord::sku_and_units(pairs(map))?;
    (of == sku).then_some(units)
}
