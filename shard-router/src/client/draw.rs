//! The draw's calls (campaign mode `draw`): open it on a SKU's shards, enter, close and read
//! a shard's top-K, mark the ranks, record a win, restore what Redis lost, and read the
//! entries stream for the ledger. The scripts are `lua/draw_*.lua`; `crate::draw` says how
//! priorities are made.

use redis::Value;

use super::StockClient;
use crate::draw::{
    pads, BadEntry, ClosedShard, DrawSpec, DrawState, EntryOutcome, EntryRecord, MarkBatch,
};
use crate::error::StockError;
use crate::placement::ShardId;
use crate::replication::ReplicationInfo;
use crate::scripts::{self, code};
use crate::stream::ShardStream;
use crate::{keys, MAX_ID_LEN};

impl StockClient {
    /// Opens the draw on one shard (`draw_open.lua`); a shard that has one keeps its state.
    /// Returns the shard's state and whether this call created it.
    pub async fn draw_open(
        &self,
        shard: ShardId,
        spec: &DrawSpec,
        state: DrawState,
    ) -> Result<(DrawState, bool), StockError> {
        let r = self.open_draw(shard, spec, state.as_str(), None).await?;
        let created = r.code == code::PREHEATED;
        let state = DrawState::parse(&r.text(0)?).ok_or_else(|| r.unexpected())?;
        Ok((state, created))
    }

    /// A restore's first step on a shard that lost its draw: the window, k, stock and pads
    /// written but no state, so entrants are answered NOT_PREHEATED (and the restore loop
    /// still sees the shard as lost) until [`Self::draw_publish`] gives it its state, after
    /// the ledger's entrants and ranks are back. A shard that has a state keeps it:
    /// `false`, nothing for the restore to do (another restore published it, or close-out
    /// made it `over`). The hold is named by `token`, under which the restore's writes
    /// ([`Self::draw_restore`], [`MarkBatch::Held`]) count themselves.
    pub async fn draw_hold(
        &self,
        shard: ShardId,
        spec: &DrawSpec,
        token: u64,
    ) -> Result<bool, StockError> {
        let r = self
            .open_draw(shard, spec, "held", Some((token, None)))
            .await?;
        Ok(r.code == code::PREHEATED)
    }

    /// A restore's last step: the state for the shard held under `token`, only where the
    /// hold counts all `writes` of the restore's. `false`: lost again since
    /// [`Self::draw_hold`], failed over to a replica holding only part of the restore, or
    /// held by another restore since (the restore's next pass does it again).
    pub async fn draw_publish(
        &self,
        shard: ShardId,
        spec: &DrawSpec,
        state: DrawState,
        token: u64,
        writes: u32,
    ) -> Result<bool, StockError> {
        let r = self
            .open_draw(shard, spec, state.as_str(), Some((token, Some(writes))))
            .await?;
        Ok(r.code != code::NOT_PREHEATED)
    }

    /// `hold`: the restore's token, with its count of writes when publishing.
    async fn open_draw(
        &self,
        shard: ShardId,
        spec: &DrawSpec,
        state: &str,
        hold: Option<(u64, Option<u32>)>,
    ) -> Result<crate::reply::Reply, StockError> {
        let (inner, outer) = pads(&spec.seed);
        let mut inv = scripts::DRAW_OPEN.prepare_invoke();
        inv.key(self.keys(shard, spec.sku).draw_meta())
            .arg(spec.entries_open_ms)
            .arg(spec.draw_at_ms)
            .arg(spec.k())
            .arg(spec.stock)
            .arg(&inner[..])
            .arg(&outer[..])
            .arg(state);
        match hold {
            None => {}
            Some((token, None)) => {
                inv.arg("").arg(token);
            }
            Some((token, Some(writes))) => {
                inv.arg("publish").arg(token).arg(writes);
            }
        }
        let r = self.run("draw open", &inv).await?;
        match r.code {
            code::PREHEATED | code::LIVE | code::NOT_PREHEATED => Ok(r),
            code::BAD_ARGUMENT => Err(StockError::InvalidArgument("draw: bad window or k".into())),
            _ => Err(r.unexpected()),
        }
    }

    /// A user's entry on their home shard, or their standing once entries closed.
    pub async fn draw_enter(
        &self,
        sku: u64,
        width: u16,
        user: &str,
        now_ms: i64,
    ) -> Result<EntryOutcome, StockError> {
        if user.is_empty() || user.len() > MAX_ID_LEN {
            return Err(StockError::InvalidArgument(format!(
                "user must be 1..={MAX_ID_LEN} bytes"
            )));
        }
        let home = self.placement.home_shard(sku, width, user);
        let k = self.keys(home, sku);
        let mut inv = scripts::DRAW_ENTER.prepare_invoke();
        inv.key(k.draw_meta())
            .key(k.entrants())
            .key(k.top_k())
            .key(keys::entries_stream(&self.placement, home))
            .key(k.request(user, Some(GRANT_REQUEST)))
            .key(k.winners())
            .arg(sku)
            .arg(user)
            .arg(now_ms);
        let r = self.run("draw enter", &inv).await?;
        let public = |id: String| format!("{home}-{id}");
        Ok(match r.code {
            code::ENTERED => EntryOutcome::Entered {
                entry_id: public(r.text(0)?),
                fresh: r.int(1)? == 1,
            },
            code::DRAW_CLOSED => EntryOutcome::Drawing {
                entry_id: public(r.text(0)?),
            },
            code::WON => EntryOutcome::Won {
                claim_id: r.text(0)?,
                shard: r.num(1)?,
            },
            code::WON_PENDING => EntryOutcome::WonPending,
            code::WAITLISTED => EntryOutcome::Waitlisted {
                position: r.num(0)?,
            },
            code::LOST => EntryOutcome::Lost,
            code::NOT_STARTED => EntryOutcome::NotStarted,
            code::ENDED => EntryOutcome::Closed,
            code::DRAW_OVER => EntryOutcome::Ended,
            code::NOT_PREHEATED => EntryOutcome::NotPreheated,
            code::BAD_ARGUMENT => return Err(StockError::InvalidArgument("draw entry".into())),
            _ => return Err(r.unexpected()),
        })
    }

    /// A shard's draw state; `None` when the shard has no draw (never opened, or lost).
    pub async fn draw_state(
        &self,
        shard: ShardId,
        sku: u64,
    ) -> Result<Option<DrawState>, StockError> {
        let mut conn = self.conn.clone();
        let s: Option<String> = self
            .bounded(
                "draw state",
                redis::cmd("HGET")
                    .arg(self.keys(shard, sku).draw_meta())
                    .arg("state")
                    .query_async(&mut conn),
            )
            .await?;
        Ok(s.as_deref().and_then(DrawState::parse))
    }

    /// Closes a shard's entries and reads its top-K (`draw_close.lua`); `None` when the
    /// shard has no draw.
    pub async fn draw_close(
        &self,
        shard: ShardId,
        sku: u64,
    ) -> Result<Option<ClosedShard>, StockError> {
        let k = self.keys(shard, sku);
        let mut inv = scripts::DRAW_CLOSE.prepare_invoke();
        inv.key(k.draw_meta()).key(k.entrants()).key(k.top_k());
        let r = self.run("draw close", &inv).await?;
        match r.code {
            code::NOT_PREHEATED => return Ok(None),
            code::DRAW_LIST => {}
            _ => return Err(r.unexpected()),
        }
        let state = DrawState::parse(&r.text(0)?).ok_or_else(|| r.unexpected())?;
        let entrants = r.num(1)?;
        let mut top = Vec::new();
        let mut i = 2;
        while let Ok(user) = r.text(i) {
            let score = r.text(i + 1)?;
            let priority = score.parse::<u64>().map_err(|_| StockError::Protocol {
                op: "draw close",
                detail: format!("priority {score:?} of {user:?} is not an integer"),
            })?;
            top.push((user, priority));
            i += 2;
        }
        Ok(Some(ClosedShard {
            state,
            entrants,
            top,
        }))
    }

    /// Writes ranks of a shard's entrants (`draw_mark.lua`); [`MarkBatch::Last`] also sets
    /// the shard's state to drawn. `false`: the shard has no draw (or is held, and the
    /// batch is not the restore's).
    pub async fn draw_mark(
        &self,
        shard: ShardId,
        sku: u64,
        ranks: &[(String, u32)],
        batch: MarkBatch,
    ) -> Result<bool, StockError> {
        let k = self.keys(shard, sku);
        let mut inv = scripts::DRAW_MARK.prepare_invoke();
        inv.key(k.draw_meta()).key(k.entrants()).arg(batch.arg());
        for (user, rank) in ranks {
            inv.arg(user).arg(rank);
        }
        let r = self.run("draw mark", &inv).await?;
        match r.code {
            code::DRAW_MARKED => Ok(true),
            code::NOT_PREHEATED => Ok(false),
            _ => Err(r.unexpected()),
        }
    }

    /// Records a winner's claim where draw_enter.lua answers it (the user's home shard).
    pub async fn draw_won(
        &self,
        sku: u64,
        width: u16,
        user: &str,
        claim_id: &str,
        claim_shard: ShardId,
    ) -> Result<(), StockError> {
        let home = self.placement.home_shard(sku, width, user);
        let mut conn = self.conn.clone();
        self.bounded(
            "draw won",
            redis::cmd("HSET")
                .arg(self.keys(home, sku).entrants())
                .arg(user)
                .arg(format!("W|{claim_id}|{claim_shard}"))
                .query_async::<()>(&mut conn),
        )
        .await
    }

    /// Ends a closed-out draw on one shard: its winners (`(user, claim id, shard the unit
    /// came from)`, users homed here) written, then the meta replaced by state `over`, both
    /// expiring after `ttl`. Idempotent; the entrants and the top-K are close-out's to
    /// remove after this (`remove_campaign_keys`), so a winner is never without an answer.
    pub async fn draw_over(
        &self,
        shard: ShardId,
        sku: u64,
        winners: &[(String, String, ShardId)],
        ttl: std::time::Duration,
    ) -> Result<(), StockError> {
        let k = self.keys(shard, sku);
        let ms = ttl.as_millis() as u64;
        let mut conn = self.conn.clone();
        for chunk in winners.chunks(500) {
            let mut pipe = redis::pipe();
            let mut hset = redis::cmd("HSET");
            hset.arg(k.winners());
            for (user, claim_id, from) in chunk {
                hset.arg(user).arg(format!("{claim_id}|{from}"));
            }
            pipe.add_command(hset).ignore();
            pipe.cmd("PEXPIRE").arg(k.winners()).arg(ms).ignore();
            self.bounded("draw winners", pipe.query_async::<()>(&mut conn))
                .await?;
        }
        // State first: from then on the script reads nothing else of the meta, so each
        // step leaves an answer (and a shard that lost its draw gets one).
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(k.draw_meta())
            .arg("state")
            .arg(DrawState::Over.as_str())
            .ignore()
            .cmd("HDEL")
            .arg(k.draw_meta())
            .arg(&["estart", "draw_at", "k", "ik", "ok", "stock"])
            .ignore()
            .cmd("PEXPIRE")
            .arg(k.draw_meta())
            .arg(ms)
            .ignore();
        self.bounded("draw over", pipe.query_async::<()>(&mut conn))
            .await
    }

    /// Puts entries the ledger holds back on a shard held under `token`
    /// (`draw_restore.lua`, one of the restore's counted writes): `(user, priority, stream
    /// entry id)`. `None`: the shard is not held under that token (lost again, or held by
    /// another restore since).
    pub async fn draw_restore(
        &self,
        shard: ShardId,
        sku: u64,
        token: u64,
        entries: &[(String, u64, String)],
    ) -> Result<Option<u64>, StockError> {
        let k = self.keys(shard, sku);
        let mut inv = scripts::DRAW_RESTORE.prepare_invoke();
        inv.key(k.draw_meta()).key(k.entrants()).key(k.top_k());
        inv.arg(token);
        for (user, priority, id) in entries {
            inv.arg(user).arg(priority).arg(id);
        }
        let r = self.run("draw restore", &inv).await?;
        match r.code {
            code::DRAW_RESTORED => Ok(Some(r.num(0)?)),
            code::NOT_PREHEATED => Ok(None),
            _ => Err(r.unexpected()),
        }
    }

    /// The shard's entries stream, as a stream the claims stream's trim runs on.
    pub fn entries_stream(&self, shard: ShardId) -> ShardStream {
        ShardStream {
            shard,
            key: keys::entries_stream(&self.placement, shard),
        }
    }

    /// Entries after `after` on `shard`'s entries stream (at most `count`), with the
    /// replication id they were read under (the same pipeline on the same node, as the
    /// claims reader does: `stream.rs`).
    pub async fn read_entries(
        &self,
        shard: ShardId,
        after: &str,
        count: usize,
    ) -> Result<(Vec<Result<EntryRecord, BadEntry>>, ReplicationInfo), StockError> {
        let key = keys::entries_stream(&self.placement, shard);
        let mut pipe = redis::pipe();
        pipe.cmd("XRANGE")
            .arg(&key)
            .arg(format!("({after}"))
            .arg("+")
            .arg("COUNT")
            .arg(count);
        pipe.cmd("INFO").arg("replication");
        let mut conn = self.conn.clone();
        let (reply, info): (RawEntries, String) = self
            .bounded("draw entries", pipe.query_async(&mut conn))
            .await?;
        let entries = reply
            .into_iter()
            .map(|(id, fields)| decode_entry(id, &fields))
            .collect();
        Ok((entries, ReplicationInfo::parse(&info)))
    }
}

/// XRANGE's reply: `(entry id, field/value pairs)` per entry.
type RawEntries = Vec<(String, Vec<(String, Value)>)>;

impl StockClient {
    /// The last id `shard`'s entries stream holds ("0-0" when it holds none), with the
    /// replication id it was read under (one pipeline on one node). Read after a draw's
    /// close, it bounds every entry of that draw on the shard: the draw waits until the
    /// entries reader's place passes it under the same master.
    pub async fn entries_last(
        &self,
        shard: ShardId,
    ) -> Result<(String, ReplicationInfo), StockError> {
        let key = keys::entries_stream(&self.placement, shard);
        let mut pipe = redis::pipe();
        pipe.cmd("XREVRANGE")
            .arg(&key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1);
        pipe.cmd("INFO").arg("replication");
        let mut conn = self.conn.clone();
        let (reply, info): (RawEntries, String) = self
            .bounded("draw entries last", pipe.query_async(&mut conn))
            .await?;
        let last = reply
            .into_iter()
            .next()
            .map_or_else(|| "0-0".to_owned(), |(id, _)| id);
        Ok((last, ReplicationInfo::parse(&info)))
    }
}

/// The request id a grant claims under: one grant per user and SKU, replayed on a retry.
pub const GRANT_REQUEST: &str = "draw";

fn decode_entry(id: String, fields: &[(String, Value)]) -> Result<EntryRecord, BadEntry> {
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| match v {
                Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                Value::SimpleString(s) => Some(s.clone()),
                _ => None,
            })
    };
    let bad = |what: &str| (id.clone(), format!("entry field {what} missing or invalid"));
    let sku = get("sku")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad("sku"))?;
    let user = get("user")
        .filter(|u| !u.is_empty() && u.len() <= MAX_ID_LEN)
        .ok_or_else(|| bad("user"))?;
    let priority = get("prio")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad("prio"))?;
    let ts_ms = get("ts")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad("ts"))?;
    Ok(EntryRecord {
        stream_id: id,
        sku,
        user,
        priority,
        ts_ms,
    })
}
