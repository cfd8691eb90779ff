//! Drill `pubsub_loss` (docs/DESIGN.md), short form: Pub/Sub trouble leaves a gateway wrong about a SKU only
//! within the documented bound.

use std::time::Instant;

use crate::common::*;
use hyper::StatusCode;
use serde_json::json;
use test_support::RedisServer;

/// Drill `pubsub_loss`: how long a gateway can be wrong about a SKU. A restock it never hears
/// (no event at all) heals by the cache TTL; a killed subscriber heals by its resync. Both
/// are measured against the documented bound (`--cache-ttl-ms`) and printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_pubsub_staleness_is_bounded() {
    const TTL_MS: u64 = 1_000;
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 4002, 2, 1, 1).await;
    let mut cfg = config(&redis.url(), false);
    cfg.cache_ttl_ms = TTL_MS;
    let b = Gateway::start(cfg).await;
    for u in ["s0", "s1"] {
        let ans = b.claim(json!({"sku": meta.sku, "user": u})).await;
        assert_eq!(ans.status, StatusCode::CREATED, "{}", ans.body);
    }
    wait_sold_out(b.api, meta.sku, true, "B to see the sell-out").await;

    // A unit comes back with no event at all: only the TTL can heal it.
    restock_silently(&redis, &stock, &meta);
    let t = Instant::now();
    wait_sold_out(b.api, meta.sku, false, "the TTL to reopen the SKU").await;
    let stale_closed_ms = t.elapsed().as_millis();

    // Sell it out again, then kill the subscriber while a silent restock happens.
    let ans = b.claim(json!({"sku": meta.sku, "user": "s2"})).await;
    assert_eq!(ans.status, StatusCode::CREATED, "{}", ans.body);
    wait_sold_out(b.api, meta.sku, true, "B to see its own sell-out").await;
    restock_silently(&redis, &stock, &meta);
    let t = Instant::now();
    kill_pubsub(&redis);
    wait_sold_out(b.api, meta.sku, false, "the resync to reopen the SKU").await;
    let resync_ms = t.elapsed().as_millis();
    println!(
        "drill=pubsub-kill bound_ms={TTL_MS} stale_closed_by_ttl_ms={stale_closed_ms} stale_closed_after_kill_ms={resync_ms}"
    );
    // 20 ms polling and one round trip of slack over the bound.
    assert!(
        stale_closed_ms <= u128::from(TTL_MS) + 500,
        "{stale_closed_ms} ms"
    );
    assert!(resync_ms <= u128::from(TTL_MS) + 500, "{resync_ms} ms");
    b.stop().await;
}
