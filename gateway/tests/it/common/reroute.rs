//! Setting up a reroute: a SKU whose shards live on different masters, users homed on a
//! shard, and that shard's slice emptied so their next claim holds there and takes
//! elsewhere.

use shard_router::placement::slot_of_tag;
use shard_router::{now_ms, ClaimRequest, SkuMeta, StockClient};
use test_support::RedisCluster;

/// A SKU of width 2, from `from` on, whose two shards live on different masters.
pub(crate) fn split_sku(stock: &StockClient, cluster: &RedisCluster, from: u64) -> u64 {
    (from..from + 1000)
        .find(|&sku| {
            let s = stock.placement().shards_of(sku, 2);
            let slot = |i: usize| slot_of_tag(stock.placement().tag(s[i]));
            cluster.master_of(slot(0)) != cluster.master_of(slot(1))
        })
        .expect("some SKU spans two masters")
}

/// Three users whose home is `home`, named `<prefix><n>`.
pub(crate) fn users_homed(
    stock: &StockClient,
    meta: &SkuMeta,
    home: u16,
    prefix: &str,
) -> Vec<String> {
    (0..)
        .map(|n| format!("{prefix}{n}"))
        .filter(|u| stock.placement().home_shard(meta.sku, meta.width, u) == home)
        .take(3)
        .collect()
}

/// Empties `home`'s slice with claims of other users homed there.
pub(crate) async fn drain(stock: &StockClient, meta: &SkuMeta, home: u16) {
    for user in (0..).map(|n| format!("drain{n}")) {
        let left = stock.slices(meta.sku, meta.width).await.expect("slices");
        if left.iter().any(|(s, v)| *s == home && *v == Some(0)) {
            return;
        }
        if stock.placement().home_shard(meta.sku, meta.width, &user) != home {
            continue;
        }
        let req = ClaimRequest {
            sku: meta.sku,
            user,
            qty: 1,
            request_id: None,
        };
        stock
            .claim_home(&req, home, now_ms(), false)
            .await
            .expect("drain claim");
    }
}
