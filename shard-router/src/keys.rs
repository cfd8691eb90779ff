//! Key naming for every Redis key flashgate uses. All per-shard keys carry the shard's hash
//! tag, so one Lua script can touch all of them on Redis Cluster.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::placement::{Placement, ShardId};

/// Pub/Sub channel for shard events (`empty <sku> <shard>`, `restock <sku> <shard>`) and
/// SKU events (`live <sku>` after a preheat).
/// Plain Pub/Sub is broadcast to every node of a cluster, so it needs no hash tag.
pub const EVENTS_CHANNEL: &str = "fg:events";
/// Set of every preheated SKU: gateways keep a copy and answer other SKUs from memory.
pub const SKU_SET: &str = "fg:skus";

/// SKU-wide metadata hash written at preheat and cached by gateways.
pub fn sku_meta(sku: u64) -> String {
    format!("fg:sku:{sku}")
}

/// The keys of one shard for one SKU.
#[derive(Debug, Clone)]
pub struct ShardKeys {
    tag: String,
    sku: u64,
}

impl ShardKeys {
    pub fn new(placement: &Placement, shard: ShardId, sku: u64) -> Self {
        Self {
            tag: placement.tag(shard).to_owned(),
            sku,
        }
    }

    /// Stock slice (integer). Missing means "not preheated".
    pub fn stock(&self) -> String {
        tagged(&self.tag, "stock", self.sku, 0)
    }
    /// Units sold beyond this slice (integer, absent = 0): a late claim that found its units
    /// sold again after a rebuild (`lua/rebuild_late.lua`), or what a rebuild counted sold
    /// past the shard's share (`lua/rebuild.lua`). Every script that grows the slice pays it
    /// first (`lua/release_stock.lua`, `lua/wave.lua`), so a unit sold twice is not offered
    /// a third time; while it is above 0 the slice is 0.
    pub fn debt(&self) -> String {
        tagged(&self.tag, "debt", self.sku, 0)
    }
    /// Per-shard copy of limit and window, so scripts never trust a gateway's cache.
    pub fn meta(&self) -> String {
        tagged(&self.tag, "meta", self.sku, 0)
    }
    /// user → units held (holds included); lives on the user's home shard only.
    pub fn users(&self) -> String {
        tagged(&self.tag, "users", self.sku, 0)
    }
    /// user → last user_seq handed out; never decreases, so ledger keys stay unique.
    pub fn user_seq(&self) -> String {
        tagged(&self.tag, "useq", self.sku, 0)
    }
    /// `user|seq` → `qty|expires_ms` for holds placed while a second chance runs.
    pub fn holds(&self) -> String {
        tagged(&self.tag, "holds", self.sku, 0)
    }
    /// Claim ids whose units went back to this slice (release idempotency, stock side).
    pub fn released_stock(&self) -> String {
        tagged(&self.tag, "relstock", self.sku, 0)
    }
    /// Claim ids whose units went back to the user's count (release idempotency, user side).
    pub fn released_user(&self) -> String {
        tagged(&self.tag, "reluser", self.sku, 0)
    }
    /// wave id → units this shard's slice got from that stock wave (wave idempotency).
    pub fn waves(&self) -> String {
        tagged(&self.tag, "waves", self.sku, 0)
    }
    /// Counter bumped by every excess removal: a removal measured before another one ran
    /// is refused (see `lua/reconcile_fix.lua`).
    pub fn fix_epoch(&self) -> String {
        tagged(&self.tag, "epoch", self.sku, 0)
    }
    /// A draw's state on this shard (campaign mode `draw`, `lua/draw_enter.lua`): state,
    /// entry window, k, stock and the seed's HMAC pads.
    pub fn draw_meta(&self) -> String {
        tagged(&self.tag, "draw", self.sku, 0)
    }
    /// user → `E|<entry id>`, `R|<rank>` or `W|<claim id>|<shard>`: every user who entered a
    /// draw on this (home) shard, and their standing once it ran.
    pub fn entrants(&self) -> String {
        tagged(&self.tag, "entrants", self.sku, 0)
    }
    /// The draw's best `k` entrants of this shard by priority (a sorted set).
    pub fn top_k(&self) -> String {
        tagged(&self.tag, "topk", self.sku, 0)
    }
    /// A closed-out draw's winners homed on this shard: user → `<claim id>|<shard>`, kept
    /// with the draw meta (state `over`) until they expire, so a winner asking after
    /// close-out is still told its claim (`lua/draw_enter.lua`).
    pub fn winners(&self) -> String {
        tagged(&self.tag, "winners", self.sku, 0)
    }
    /// Every key of the campaign on this shard but its stored answers, a draw's meta and
    /// its winners (they expire by their TTL): what close-out removes. A key added above
    /// belongs here too.
    pub fn campaign_keys(&self) -> [String; 12] {
        [
            self.entrants(),
            self.top_k(),
            self.meta(),
            self.users(),
            self.user_seq(),
            self.holds(),
            self.released_stock(),
            self.released_user(),
            self.waves(),
            self.fix_epoch(),
            self.debt(),
            self.stock(),
        ]
    }
    /// Pattern of every stored answer of this SKU on this shard (close-out removes them).
    pub fn request_pattern(&self) -> String {
        format!("{{{}}}:req:{}:*", self.tag, self.sku)
    }
    /// Stored answer for a request id of a user; `None` request ids use a fixed key the
    /// scripts never touch (Cluster needs every script key in the shard's slot).
    pub fn request(&self, user: &str, request_id: Option<&str>) -> String {
        match request_id {
            Some(rid) => {
                let key = tagged(&self.tag, "req", self.sku, user.len() + rid.len() + 24);
                with_request(key, user, rid)
            }
            None => format!("{{{}}}:req:-", self.tag),
        }
    }
}

/// `key` (a request key's `{tag}:req:<sku>`) followed by `:<user's length>:<user>:<rid>`.
fn with_request(mut key: String, user: &str, rid: &str) -> String {
    key.push(':');
    push_u64(&mut key, user.len() as u64);
    key.push(':');
    key.push_str(user);
    key.push(':');
    key.push_str(rid);
    key
}

/// A key's name built once and shared: a clone counts a reference instead of copying it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyName(Arc<str>);

impl KeyName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for KeyName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<String> for KeyName {
    fn from(name: String) -> Self {
        Self(name.into())
    }
}

impl redis::ToRedisArgs for KeyName {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        out.write_arg(self.0.as_bytes())
    }
}

impl redis::ToSingleRedisArg for KeyName {}

/// The fixed key names of one shard for one SKU, as [`ShardKeys`] names them, built once
/// per (SKU, shard) by [`KeyCache`] and shared by every call that names them: a claim
/// names eight keys, and building them per claim was a tenth of the claim path's
/// instructions in the gateway (docs/BENCHMARKS.md "Counted per answer").
#[derive(Debug)]
pub struct CachedKeys {
    names: [KeyName; 14],
    /// `{tag}:req:<sku>`, what every request key of the pair starts with.
    request_prefix: String,
    no_request: String,
}

/// The accessors of [`CachedKeys`], each named as the [`ShardKeys`] method it caches.
macro_rules! cached_names {
    ($($i:literal $name:ident),* $(,)?) => {
        impl CachedKeys {
            fn new(keys: &ShardKeys) -> Self {
                Self {
                    names: [$(keys.$name().into()),*],
                    request_prefix: tagged(&keys.tag, "req", keys.sku, 0),
                    no_request: keys.request("", None),
                }
            }
            $(
                #[doc = concat!("[`ShardKeys::", stringify!($name), "`], shared.")]
                pub fn $name(&self) -> KeyName {
                    self.names[$i].clone()
                }
            )*
        }
    };
}

cached_names! {
    0 stock, 1 debt, 2 meta, 3 users, 4 user_seq, 5 holds, 6 released_stock,
    7 released_user, 8 waves, 9 fix_epoch, 10 draw_meta, 11 entrants, 12 top_k, 13 winners,
}

impl CachedKeys {
    /// [`ShardKeys::campaign_keys`], shared.
    pub fn campaign_keys(&self) -> [KeyName; 12] {
        [
            self.entrants(),
            self.top_k(),
            self.meta(),
            self.users(),
            self.user_seq(),
            self.holds(),
            self.released_stock(),
            self.released_user(),
            self.waves(),
            self.fix_epoch(),
            self.debt(),
            self.stock(),
        ]
    }

    /// [`ShardKeys::request`], from the pair's prefix.
    pub fn request(&self, user: &str, request_id: Option<&str>) -> String {
        match request_id {
            Some(rid) => {
                let cap = self.request_prefix.len() + user.len() + rid.len() + 24;
                let mut key = String::with_capacity(cap);
                key.push_str(&self.request_prefix);
                with_request(key, user, rid)
            }
            None => self.no_request.clone(),
        }
    }
}

/// Bound on the (SKU, shard) pairs a [`KeyCache`] keeps: past it, it starts again empty.
/// Claims name the pairs of the preheated SKUs; other calls (audits, rebuilds) may name
/// many more, once each.
const CACHED_PAIRS: usize = 4096;

/// The [`CachedKeys`] of the (SKU, shard) pairs a client named lately, at most
/// [`CACHED_PAIRS`] of them.
#[derive(Debug, Default)]
pub struct KeyCache(RwLock<HashMap<(u64, ShardId), Arc<CachedKeys>>>);

impl KeyCache {
    /// The names of `shard`'s keys for `sku`, built on the first call for the pair.
    pub fn get(&self, placement: &Placement, shard: ShardId, sku: u64) -> Arc<CachedKeys> {
        let read = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = read.get(&(sku, shard)) {
            return keys.clone();
        }
        drop(read);
        let keys = Arc::new(CachedKeys::new(&ShardKeys::new(placement, shard, sku)));
        let mut map = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= CACHED_PAIRS {
            map.clear();
        }
        map.insert((sku, shard), keys.clone());
        keys
    }
}

/// The claims stream of a shard (one of a claim's keys, so appended like [`tagged`]).
pub fn claims_stream(placement: &Placement, shard: ShardId) -> String {
    let tag = placement.tag(shard);
    let mut key = String::with_capacity(tag.len() + 9);
    key.push('{');
    key.push_str(tag);
    key.push_str("}:claims");
    key
}

/// A SKU's waiting room (campaign mode `queue`, `lua/queue_join.lua`): its state hash,
/// pre-queue HyperLogLog and tickets hash, under one hash tag of their own so one script
/// names them all on a cluster.
pub fn queue_keys(sku: u64) -> [String; 3] {
    ["state", "pre", "tickets"].map(|k| format!("{{fgq:{sku}}}:{k}"))
}

/// The draw entries stream of a shard: one entry per accepted draw entry, of every SKU on
/// the shard, read into the ledger by `campaign-ops/src/draw/entries.rs`.
pub fn entries_stream(placement: &Placement, shard: ShardId) -> String {
    format!("{{{}}}:entries", placement.tag(shard))
}

/// A counter per shard that replication checks write before their `WAIT`, so the WAIT
/// covers every earlier write of the master whatever connection made them (see
/// `replication.rs`).
/// The run_id of the Redis process the ledger last vouched for on this shard
/// (`lua/guard.lua`, `lua/vouch.lua`).
pub fn vouch(placement: &Placement, shard: ShardId) -> String {
    format!("{{{}}}:vouch", placement.tag(shard))
}

pub fn fence(placement: &Placement, shard: ShardId) -> String {
    format!("{{{}}}:fence", placement.tag(shard))
}

/// `{tag}:kind:sku`, appended into one allocation with `extra` bytes to spare for what the
/// caller appends. A claim names eight keys, and `format!` built each at several times
/// this cost (the claim path's largest user-space cost after the bearer token check,
/// docs/BENCHMARKS.md).
fn tagged(tag: &str, kind: &str, sku: u64, extra: usize) -> String {
    let mut key = String::with_capacity(tag.len() + kind.len() + 24 + extra);
    key.push('{');
    key.push_str(tag);
    key.push_str("}:");
    key.push_str(kind);
    key.push(':');
    push_u64(&mut key, sku);
    key
}

/// `v` in decimal, as `Display` writes it.
fn push_u64(out: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The appended keys are the bytes `format!` wrote before (Lua scripts, the consumer
    /// and stored data name the same keys).
    #[test]
    fn keys_are_the_formatted_names() {
        for sku in [0, 7, 10, 4_000_000, u64::MAX] {
            let k = ShardKeys {
                tag: "fg:3".into(),
                sku,
            };
            let f = |kind: &str| format!("{{fg:3}}:{kind}:{sku}");
            assert_eq!(k.stock(), f("stock"));
            assert_eq!(k.debt(), f("debt"));
            assert_eq!(k.meta(), f("meta"));
            assert_eq!(k.users(), f("users"));
            assert_eq!(k.user_seq(), f("useq"));
            assert_eq!(k.holds(), f("holds"));
            assert_eq!(k.released_stock(), f("relstock"));
            assert_eq!(k.released_user(), f("reluser"));
            assert_eq!(k.waves(), f("waves"));
            assert_eq!(k.fix_epoch(), f("epoch"));
            assert_eq!(k.draw_meta(), f("draw"));
            assert_eq!(k.entrants(), f("entrants"));
            assert_eq!(k.top_k(), f("topk"));
            assert_eq!(k.winners(), f("winners"));
            for user in ["", "u", "ü-名"] {
                assert_eq!(
                    k.request(user, Some("r-1")),
                    format!("{{fg:3}}:req:{sku}:{}:{user}:r-1", user.len())
                );
            }
            assert_eq!(k.request("u", None), "{fg:3}:req:-");
            // The cached names are the same bytes.
            let c = CachedKeys::new(&k);
            let pairs = [
                (c.stock(), k.stock()),
                (c.debt(), k.debt()),
                (c.meta(), k.meta()),
                (c.users(), k.users()),
                (c.user_seq(), k.user_seq()),
                (c.holds(), k.holds()),
                (c.released_stock(), k.released_stock()),
                (c.released_user(), k.released_user()),
                (c.waves(), k.waves()),
                (c.fix_epoch(), k.fix_epoch()),
                (c.draw_meta(), k.draw_meta()),
                (c.entrants(), k.entrants()),
                (c.top_k(), k.top_k()),
                (c.winners(), k.winners()),
            ];
            for (cached, built) in pairs {
                assert_eq!(cached.as_str(), built);
            }
            let campaign = c.campaign_keys().map(|n| n.as_str().to_owned());
            assert_eq!(campaign, k.campaign_keys());
            for (user, rid) in [("", Some("r-1")), ("ü-名", Some("")), ("u", None)] {
                assert_eq!(c.request(user, rid), k.request(user, rid));
            }
        }
        let p = Placement::new(16).unwrap();
        for shard in 0..16 {
            let want = format!("{{{}}}:claims", p.tag(shard));
            assert_eq!(claims_stream(&p, shard), want);
        }
    }

    /// A pair's names are built once and shared; other pairs get their own; the cache
    /// stays within its bound.
    #[test]
    fn the_cache_shares_a_pairs_names_within_its_bound() {
        let p = Placement::new(16).unwrap();
        let cache = KeyCache::default();
        let a = cache.get(&p, 3, 7);
        assert!(Arc::ptr_eq(&a, &cache.get(&p, 3, 7)));
        assert_eq!(a.stock().as_str(), ShardKeys::new(&p, 3, 7).stock());
        assert_eq!(
            cache.get(&p, 4, 7).stock().as_str(),
            ShardKeys::new(&p, 4, 7).stock()
        );
        assert_eq!(
            cache.get(&p, 3, 8).meta().as_str(),
            ShardKeys::new(&p, 3, 8).meta()
        );
        for sku in 0..2 * CACHED_PAIRS as u64 {
            cache.get(&p, 0, sku);
        }
        assert!(cache.0.read().unwrap().len() <= CACHED_PAIRS);
    }
}
