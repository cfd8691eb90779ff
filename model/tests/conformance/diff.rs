//! A field-by-field difference of two shards, keyed entries only where they differ, so a
//! mismatch reads as "this key holds that here and this there".

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{Debug, Write};

use model::keyspace::Shard;

fn map<K: Ord + Debug, V: PartialEq + Debug>(
    out: &mut String,
    name: &str,
    redis: &BTreeMap<K, V>,
    model: &BTreeMap<K, V>,
) {
    let keys: BTreeSet<&K> = redis.keys().chain(model.keys()).collect();
    for k in keys {
        let (r, m) = (redis.get(k), model.get(k));
        if r != m {
            let _ = writeln!(out, "  {name}[{k:?}]: redis {r:?}, model {m:?}");
        }
    }
}

fn set<K: Ord + Debug>(out: &mut String, name: &str, redis: &BTreeSet<K>, model: &BTreeSet<K>) {
    for k in redis.difference(model) {
        let _ = writeln!(out, "  {name}: {k:?} only in redis");
    }
    for k in model.difference(redis) {
        let _ = writeln!(out, "  {name}: {k:?} only in the model");
    }
}

fn value<V: PartialEq + Debug>(out: &mut String, name: &str, redis: &V, model: &V) {
    if redis != model {
        let _ = writeln!(out, "  {name}: redis {redis:?}, model {model:?}");
    }
}

/// Empty when the shards are equal.
pub(crate) fn shards(redis: &Shard, model: &Shard) -> String {
    let mut out = String::new();
    value(&mut out, "stock", &redis.stock, &model.stock);
    value(&mut out, "debt", &redis.debt, &model.debt);
    value(&mut out, "meta", &redis.meta, &model.meta);
    map(&mut out, "users", &redis.users, &model.users);
    map(&mut out, "useq", &redis.useq, &model.useq);
    map(&mut out, "holds", &redis.holds, &model.holds);
    map(&mut out, "req", &redis.req, &model.req);
    set(&mut out, "relstock", &redis.relstock, &model.relstock);
    set(&mut out, "reluser", &redis.reluser, &model.reluser);
    map(&mut out, "waves", &redis.waves, &model.waves);
    map(&mut out, "stream", &redis.stream, &model.stream);
    value(&mut out, "last_id", &redis.last_id, &model.last_id);
    // A field added to Shard that this diff does not list still fails the comparison.
    if out.is_empty() && redis != model {
        let _ = writeln!(
            out,
            "  (a field this diff does not list)\n  redis {redis:#?}\n  model {model:#?}"
        );
    }
    out
}
