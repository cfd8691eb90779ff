//! The replay filter after a read that found the SKU moving (`gateway/src/replay_filter.rs`
//! `MOVING_RETRY`): at a sell-out the first read meets claims still in flight, and the
//! next one must come within milliseconds, not a second later, or the rest of the rush
//! pays a replay read per request id.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use serde_json::json;
use shard_router::keys::ShardKeys;
use test_support::{slack, RedisServer};

/// The filter's reads: only its marks ask a `useq` for its length.
fn filter_reads(redis: &RedisServer) -> u64 {
    command_calls(redis, &["hlen"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_found_the_sku_moving_is_tried_again_within_milliseconds() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 8311, 1, 1, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let a = gw
        .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r1"}))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    wait_sold_out(gw.api, meta.sku, true, "the sell-out").await;

    // A unit on the slice that no event announced: the gateway still answers sold out
    // from memory, and its filter read finds the slice above 0 (the marks read the slice
    // and the `useq` length in one pipeline, so once Redis counted the HLEN that read
    // has seen the unit).
    restock_silently(&redis, &stock, &meta);
    let probe = |n: u32| json!({"sku": meta.sku, "user": format!("probe-{n}"), "request_id": "p"});
    let deadline = Instant::now() + slack(Duration::from_secs(5));
    let mut n = 0;
    while filter_reads(&redis) == 0 {
        assert!(Instant::now() < deadline, "the filter was never read");
        assert_eq!(gw.claim(probe(n)).await.status, StatusCode::GONE);
        n += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // The slice is back to 0, still without an event: the next read loads the set, and a
    // new user's request id costs no Redis call from then on.
    let shard = stock.placement().shards_of(meta.sku, meta.width)[0];
    let key = ShardKeys::new(stock.placement(), shard, meta.sku).stock();
    redis::cmd("SET")
        .arg(&key)
        .arg(0)
        .query::<()>(&mut redis.connection())
        .unwrap();
    let settled = Instant::now();
    loop {
        assert!(Instant::now() < deadline, "the filter was never loaded");
        let before = claim_path_calls(&redis);
        assert_eq!(gw.claim(probe(n)).await.status, StatusCode::GONE);
        n += 1;
        if claim_path_calls(&redis) == before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A filter that waited the full second (`RETRY_AFTER`) after a moving read would be
    // past this bound: the first waits after one are milliseconds (`MOVING_RETRY`).
    let took = settled.elapsed();
    assert!(
        took < slack(Duration::from_millis(600)),
        "the filter was loaded {took:?} after the SKU settled"
    );
    // The winner's retry still replays.
    let r = gw
        .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r1"}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}
