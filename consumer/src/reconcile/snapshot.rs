//! One shard's part of a reconciliation, read by `lua/reconcile.lua` in one atomic step.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use redis::{Script, Value};
use shard_router::keys::{self, ShardKeys};
use shard_router::{ShardId, StockClient, StockError};

use crate::error::ConsumerError;

static SNAPSHOT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/reconcile.lua")));

/// Most stream entries (and released ids) one snapshot reads. Above it the script refuses
/// (it would block Redis for too long) and the run says so instead of guessing.
pub const MAX_SNAPSHOT: usize = 200_000;

/// A stream entry id `<ms>-<seq>`, ordered as Redis orders them.
pub type EntryId = (u64, u64);

pub fn parse_entry_id(id: &str) -> Option<EntryId> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// The entry id part of a claim id `<shard>-<ms>-<seq>`.
pub fn claim_entry(claim_id: &str) -> Option<(ShardId, EntryId)> {
    let (shard, rest) = claim_id.split_once('-')?;
    Some((shard.parse().ok()?, parse_entry_id(rest)?))
}

/// What one shard held at the instant of its snapshot.
#[derive(Debug, Clone, Default)]
pub struct ShardSnap {
    pub shard: ShardId,
    /// `None`: the slice is missing (never preheated, or Redis lost it).
    pub slice: Option<i64>,
    /// Every claim taken on this shard before the snapshot has an entry id `<=` this, every
    /// later one a greater id: the larger of the stream's last generated id and "just
    /// before Redis's clock" (the clock keeps later ids above it even if the stream was
    /// rolled back to an older last id).
    pub cutoff: EntryId,
    pub epoch: i64,
    /// claim id → units of this SKU's entries in the claims and dead-letter streams.
    pub entries: HashMap<String, i64>,
    /// Claim ids whose units went back to this slice.
    pub released: HashSet<String>,
    /// wave id → units this slice got from it.
    pub waves: HashMap<String, i64>,
    /// Units under holds on this (home) shard; informative, holds take no stock.
    pub held: i64,
}

fn proto(detail: String) -> ConsumerError {
    ConsumerError::Redis(StockError::Protocol {
        op: "reconcile snapshot",
        detail,
    })
}

fn int(v: &Value) -> Result<i64, ConsumerError> {
    match v {
        Value::Int(i) => Ok(*i),
        other => text(other)?
            .parse()
            .map_err(|_| proto(format!("not an integer: {other:?}"))),
    }
}

fn text(v: &Value) -> Result<String, ConsumerError> {
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        other => Err(proto(format!("not a string: {other:?}"))),
    }
}

fn list(v: &Value) -> Result<&[Value], ConsumerError> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(proto(format!("not a list: {other:?}"))),
    }
}

fn pairs(v: &Value) -> Result<Vec<(String, i64)>, ConsumerError> {
    list(v)?
        .chunks(2)
        .map(|p| match p {
            [k, n] => Ok((text(k)?, int(n)?)),
            _ => Err(proto("odd list".into())),
        })
        .collect()
}

/// Takes `shard`'s snapshot for `sku`.
pub async fn take(
    client: &StockClient,
    sku: u64,
    shard: ShardId,
) -> Result<ShardSnap, ConsumerError> {
    let p = client.placement();
    let k = ShardKeys::new(p, shard, sku);
    let mut inv = SNAPSHOT.prepare_invoke();
    inv.key(k.stock())
        .key(keys::claims_stream(p, shard))
        .key(keys::dead_letter_stream(p, shard))
        .key(k.released_stock())
        .key(k.holds())
        .key(k.waves())
        .key(k.fix_epoch())
        .arg(sku)
        .arg(MAX_SNAPSHOT);
    let mut conn = client.conn();
    let v: Value = client
        .bounded("reconcile snapshot", inv.invoke_async(&mut conn))
        .await?;
    let r = list(&v)?;
    let code = r.first().map(int).transpose()?.unwrap_or(0);
    if code == 61 && r.len() == 3 {
        return Err(ConsumerError::Invalid(format!(
            "shard {shard}: the {} holds {} entries, more than one snapshot reads ({MAX_SNAPSHOT}); reconcile once the consumer caught up",
            text(&r[1])?,
            int(&r[2])?
        )));
    }
    if code != 60 || r.len() != 11 {
        return Err(proto(format!("unexpected reply {v:?}")));
    }
    let now_ms = int(&r[3])? as u64;
    let last = text(&r[4])?;
    let by_clock = (now_ms.saturating_sub(1), u64::MAX);
    let cutoff = parse_entry_id(&last).map_or(by_clock, |l| l.max(by_clock));
    let mut entries = HashMap::new();
    for (id, qty) in pairs(&r[6])?.into_iter().chain(pairs(&r[7])?) {
        entries.insert(format!("{shard}-{id}"), qty);
    }
    Ok(ShardSnap {
        shard,
        slice: (int(&r[1])? == 1).then_some(int(&r[2])?),
        cutoff,
        epoch: int(&r[5])?,
        entries,
        released: list(&r[8])?.iter().map(text).collect::<Result<_, _>>()?,
        waves: pairs(&r[9])?.into_iter().collect(),
        held: int(&r[10])?,
    })
}
