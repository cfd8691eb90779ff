//! One shard's keys read back from Redis into the model's [`Shard`], so the two compare
//! with `==` and differ field by field.
//!
//! Everything the scripts of this run write is read, in one pipeline: every string, hash
//! and set of the SKU, the stored answers of every (user, request id) of the run, the
//! no-request-id key (which must stay absent), and the claims stream from a given entry on
//! (the stream only grows, so the entries compared after earlier steps are not read again
//! but on the periodic full reads). A key in a shape the model has no word for (a meta
//! without `limit`, an unknown field, a record that does not parse) is an error, which the
//! runner reports like any other mismatch.

use std::collections::{BTreeMap, BTreeSet};

use model::keyspace::{Answer, ClaimId, HoldVal, Meta, Record, Shard, ShardId};
use redis::{Connection, Value};

use crate::ids::Ids;
use crate::keys::{self, Keys, RIDS, SKU, USERS};

/// A stream entry read this time, beyond the model's record: what the model does not
/// keep but the step decided.
#[derive(Debug)]
pub(crate) struct EntryExtra {
    pub(crate) entry: u32,
    pub(crate) ts: i64,
}

pub(crate) struct Observed {
    pub(crate) shard: Shard,
    pub(crate) new_entries: Vec<EntryExtra>,
    /// The last real entry id read, to read on from.
    pub(crate) last_real: Option<String>,
}

fn text(v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) => String::from_utf8(b.clone())
            .map(Some)
            .map_err(|e| e.to_string()),
        Value::SimpleString(s) => Ok(Some(s.clone())),
        other => Err(format!("not a string: {other:?}")),
    }
}

fn need(v: &Value) -> Result<String, String> {
    text(v)?.ok_or_else(|| "nil where a string was due".to_owned())
}

fn num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("{what} is not a number: {s:?}"))
}

fn items(v: &Value) -> Result<&[Value], String> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        other => Err(format!("not an array: {other:?}")),
    }
}

fn pairs(v: &Value) -> Result<Vec<(String, String)>, String> {
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| Ok((need(k)?, need(v)?))).collect(),
        v => items(v)?
            .chunks(2)
            .map(|c| match c {
                [k, v] => Ok((need(k)?, need(v)?)),
                _ => Err("odd hash reply".to_owned()),
            })
            .collect(),
    }
}

fn meta(v: &Value) -> Result<Option<Meta>, String> {
    let fields = pairs(v)?;
    if fields.is_empty() {
        return Ok(None);
    }
    let (mut limit, mut start, mut end, mut gen, mut fenced) = (None, None, None, 0, false);
    for (k, v) in &fields {
        match k.as_str() {
            "limit" => limit = Some(num(v, "limit")?),
            "start" => start = Some(num(v, "start")?),
            "end" => end = Some(num(v, "end")?),
            "gen" => gen = num(v, "gen")?,
            "rebuild" => fenced = true,
            other => return Err(format!("meta field the model does not know: {other:?}")),
        }
    }
    match (limit, start, end) {
        (Some(limit), Some(start), Some(end)) => Ok(Some(Meta {
            limit,
            start,
            end,
            gen,
            fenced,
        })),
        _ => Err(format!("meta without limit, start or end: {fields:?}")),
    }
}

fn hold(field: &str, value: &str) -> Result<((u8, u32), HoldVal), String> {
    let (u, seq) = field
        .split_once('|')
        .ok_or_else(|| format!("hold field {field:?}"))?;
    let mut it = value.splitn(3, '|');
    let (Some(q), Some(named), Some(rid)) = (it.next(), it.next(), it.next()) else {
        return Err(format!("hold value {value:?}"));
    };
    let (exp, gen) = named
        .split_once(':')
        .ok_or_else(|| format!("hold without its generation: {value:?}"))?;
    Ok((
        (keys::parse_user(u)?, num(seq, "hold seq")?),
        HoldVal {
            qty: num(q, "hold qty")?,
            expires: num(exp, "hold expiry")?,
            gen: num(gen, "hold generation")?,
            rid: keys::parse_rid(rid)?,
        },
    ))
}

fn answer(s: &str, ids: &mut Ids) -> Result<Answer, String> {
    if s == "P" {
        return Ok(Answer::Pending);
    }
    let (tentative, rest) = match s.strip_prefix('~') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let parts: Vec<&str> = rest.split('|').collect();
    let [claim, shard, qty] = parts[..] else {
        return Err(format!("stored answer {s:?}"));
    };
    Ok(Answer::Done {
        claim: ids.model_claim(claim)?,
        shard: num(shard, "answer shard")?,
        qty: num(qty, "answer qty")?,
        tentative,
    })
}

fn claim_set(v: &Value, ids: &mut Ids) -> Result<BTreeSet<ClaimId>, String> {
    items(v)?
        .iter()
        .map(|m| ids.model_claim(&need(m)?))
        .collect()
}

/// A claim record (`shard-router/src/record/v1.rs`: one field, `c1`), with its `ts`.
fn record(fields: &[(String, String)]) -> Result<(Record, i64), String> {
    let [(c, text)] = fields else {
        return Err(format!("record fields {fields:?}, not one"));
    };
    if c != "c1" {
        return Err(format!("record field {c:?}, not \"c1\""));
    }
    let p: Vec<&str> = text.splitn(9, ',').collect();
    let [sku, qty, seq, shard, home, ts, gen, len, rest] = p[..] else {
        return Err(format!("record {text:?}"));
    };
    let len: usize = num(len, "user length")?;
    let (user, rid) = (
        rest.get(..len).ok_or("user length past the text")?,
        &rest[len..],
    );
    if sku != SKU.to_string() {
        return Err(format!("record of sku {sku:?}"));
    }
    Ok((
        Record {
            user: keys::parse_user(user)?,
            qty: num(qty, "record qty")?,
            seq: num(seq, "record seq")?,
            shard: num(shard, "record shard")?,
            home: num(home, "record home")?,
            rid: keys::parse_rid(rid)?,
            gen: num(gen, "record gen")?,
        },
        num(ts, "record ts")?,
    ))
}

/// Reads shard `s`. `since`: the last entry id already compared (`None`: the whole
/// stream); entries up to it are taken from `model`, which matched them then.
pub(crate) fn read_shard(
    con: &mut Connection,
    s: ShardId,
    ids: &mut Ids,
    since: Option<&str>,
    model: &Shard,
) -> Result<Observed, String> {
    let k = Keys::new(s);
    let mut p = redis::pipe();
    p.cmd("GET").arg(k.stock());
    p.cmd("GET").arg(k.debt());
    p.cmd("HGETALL").arg(k.meta());
    p.cmd("HGETALL").arg(k.users());
    p.cmd("HGETALL").arg(k.useq());
    p.cmd("HGETALL").arg(k.holds());
    p.cmd("SMEMBERS").arg(k.relstock());
    p.cmd("SMEMBERS").arg(k.reluser());
    p.cmd("HGETALL").arg(k.waves());
    p.cmd("GET").arg(k.req(0, None));
    let from = since.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
    p.cmd("XRANGE").arg(k.claims()).arg(from).arg("+");
    for u in 0..USERS {
        for r in 0..RIDS {
            p.cmd("GET").arg(k.req(u, Some(r)));
        }
    }
    let v: Vec<Value> = p.query(con).map_err(|e| format!("state read: {e}"))?;

    let mut sh = Shard {
        stock: text(&v[0])?.map(|s| num(&s, "stock")).transpose()?,
        debt: text(&v[1])?.map_or(Ok(0), |s| num(&s, "debt"))?,
        meta: meta(&v[2])?,
        ..Shard::default()
    };
    for (u, n) in pairs(&v[3])? {
        sh.users
            .insert(keys::parse_user(&u)?, num(&n, "user count")?);
    }
    for (u, n) in pairs(&v[4])? {
        sh.useq.insert(keys::parse_user(&u)?, num(&n, "useq")?);
    }
    for (f, h) in pairs(&v[5])? {
        let (key, val) = hold(&f, &h)?;
        sh.holds.insert(key, val);
    }
    sh.relstock = claim_set(&v[6], ids)?;
    sh.reluser = claim_set(&v[7], ids)?;
    for (w, n) in pairs(&v[8])? {
        sh.waves
            .insert(keys::parse_wave(&w)?, num(&n, "wave units")?);
    }
    if let Some(x) = text(&v[9])? {
        return Err(format!("the no-request-id key holds {x:?}"));
    }
    let mut last_real = since.map(str::to_owned);
    let mut new_entries = Vec::new();
    if let Some(prev) = since {
        let upto = ids.entry_to_model(s, prev)?;
        sh.stream = model.stream.range(..=upto).map(|(&e, &r)| (e, r)).collect();
    }
    for e in items(&v[10])? {
        let [id, fields] = items(e)? else {
            return Err(format!("stream entry {e:?}"));
        };
        let id = need(id)?;
        let entry = ids.entry_to_model(s, &id)?;
        let (rec, ts) = record(&pairs(fields)?).map_err(|e| format!("entry {id}: {e}"))?;
        sh.stream.insert(entry, rec);
        new_entries.push(EntryExtra { entry, ts });
        last_real = Some(id);
    }
    sh.last_id = ids.count(s);
    let mut i = 11;
    let mut req = BTreeMap::new();
    for u in 0..USERS {
        for r in 0..RIDS {
            if let Some(a) = text(&v[i])? {
                req.insert((u, r), answer(&a, ids)?);
            }
            i += 1;
        }
    }
    sh.req = req;
    Ok(Observed {
        shard: sh,
        new_entries,
        last_real,
    })
}
