//! The compact claim record: one stream field, `c`, instead of nine name/value pairs.
//!
//! `<sku>,<qty>,<seq>,<shard>,<home>,<ts>,<gen>,<user length>,<user><request id>`
//!
//! The user's length in bytes comes before it, so neither the user nor the request id
//! needs escaping; the request id is the rest (empty when the claim had none). Why one
//! field: Redis stores, copies and replies each field as its own string, so nine pairs
//! cost it more to write (XADD) and far more to read back (every XREADGROUP reply carries
//! each entry's names and values); `bench/redis_record_read.sh` measures both forms
//! (docs/BENCHMARKS.md, "The compact claim record"). Written only under
//! `--stream-records compact` (`RecordForm`); every reader takes both forms.

use std::fmt::Write;

use super::ClaimRecord;

/// The field name of a compact record.
pub(super) const FIELD: &str = "c";

/// A compact record's parts, borrowed from its text.
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

/// Splits a compact record into its parts, or says what is wrong with it.
pub(super) fn split(text: &str) -> Result<Parts<'_>, String> {
    let mut it = text.splitn(9, ',');
    let mut next = |name: &str| {
        it.next()
            .ok_or_else(|| format!("compact record ends before {name}"))
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
        .map_err(|_| format!("compact record's user length is not a number: {len_text:?}"))?;
    // `get` is None past the end and inside a character: either way not a record we wrote.
    let user = rest
        .get(..len)
        .ok_or_else(|| format!("compact record's user length {len} does not fit its text"))?;
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

/// Writes the record the way `lua/claim.lua` and `lua/take.lua` do in the compact form.
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
