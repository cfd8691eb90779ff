//! Version 1 of the claim record: one stream field, `c1`, instead of nine name/value pairs.
//!
//! `<sku>,<qty>,<seq>,<shard>,<home>,<ts>,<gen>,<user length>,<user><request id>`
//!
//! The user's length in bytes comes before it, so neither the user nor the request id
//! needs escaping; the request id is the rest (empty when the claim had none). Why one
//! field: Redis stores, copies and replies each field as its own string, so nine pairs
//! cost it more to write (XADD) and far more to read back (every stream read reply carries
//! each entry's names and values); `bench/redis_record_read.sh` measures both shapes
//! (docs/BENCHMARKS.md, "The compact claim record"). The version rides in the field's
//! name, not in its value: a stream node stores the field names once for all its entries
//! that repeat its first entry's, so the version costs Redis nothing per entry stored
//! (one byte per entry in a read's reply) and the scripts nothing per claim.

use std::fmt::Write;

use super::ClaimRecord;

/// The layout's version, and the record field that carries it.
pub(super) const VERSION: u32 = 1;
pub(super) const FIELD: &str = "c1";

/// A record's parts, borrowed from its text.
pub(super) struct Parts<'a> {
    pub sku: &'a str,
    pub qty: &'a str,
    pub seq: &'a str,
    pub shard: &'a str,
    pub home: &'a str,
    pub ts: &'a str,
    pub gen: &'a str,
    pub user: &'a str,
    pub rid: &'a str,
}

/// Splits a record into its parts, or says what is wrong with it.
pub(super) fn split(text: &str) -> Result<Parts<'_>, String> {
    let mut it = text.splitn(9, ',');
    let mut next = |name: &str| {
        it.next()
            .ok_or_else(|| format!("claim record ends before {name}"))
    };
    let (sku, qty, seq, shard, home, ts, gen) = (
        next("sku")?,
        next("qty")?,
        next("seq")?,
        next("shard")?,
        next("home")?,
        next("ts")?,
        next("gen")?,
    );
    let len_text = next("user length")?;
    let rest = next("user")?;
    let len: usize = len_text
        .parse()
        .map_err(|_| format!("claim record's user length is not a number: {len_text:?}"))?;
    // `get` is None past the end and inside a character: either way not a record we wrote.
    let user = rest
        .get(..len)
        .ok_or_else(|| format!("claim record's user length {len} does not fit its text"))?;
    Ok(Parts {
        sku,
        qty,
        seq,
        shard,
        home,
        ts,
        gen,
        user,
        rid: &rest[len..],
    })
}

/// Writes the record the way `lua/claim.lua` and `lua/take.lua` do.
pub(super) fn pack(r: &ClaimRecord) -> String {
    let (user, rid) = (&r.user, r.request_id.as_deref().unwrap_or_default());
    let mut out = String::with_capacity(64 + user.len() + rid.len());
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{},{},{},{},{},{},{},{},{user}{rid}",
        r.sku,
        r.qty,
        r.user_seq,
        r.shard,
        r.home,
        r.ts_ms,
        r.gen,
        user.len()
    );
    out
}
