//! Replay first, always: a request with a request_id reaches the replay check even when
//! the gateway would answer from memory (SKU known sold out, window closed), on the gateway
//! that answered first and on one that never saw it. Requests without a request_id are
//! still answered from memory, with no Redis call. Unknown SKUs never reach Redis once the
//! live SKU set is loaded.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use serde_json::{json, Value};
use shard_router::{now_ms, SkuMeta};
use test_support::RedisServer;

/// The claim answer fields a replay must repeat.
fn claim_fields(v: &Value) -> Value {
    json!([v["status"], v["claim_id"], v["sku"], v["shard"], v["qty"]])
}

/// Waits until the gateway's live SKU set is loaded: a never-seen SKU then costs no Redis
/// read (before, each unknown SKU is looked up once).
async fn wait_live_set(gw: &Gateway, redis: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for probe in 9_000_000u64.. {
        let before = claim_path_calls(redis);
        let (status, _, _) = get(gw.api, &format!("/v1/skus/{probe}")).await.unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
        if claim_path_calls(redis) == before {
            return;
        }
        assert!(Instant::now() < deadline, "live SKU set never loaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_after_sell_out_on_both_gateways() {
    let redis = RedisServer::start();
    let (stock, meta, gw, first) = sold_out_by_alice(&redis, 8101).await;

    // The lost-response retry: same body, status 200, no second unit.
    assert_replays_alice(&gw, &meta, &first).await;

    // A second gateway that never saw the first answer, and knows the SKU sold out from
    // its first load.
    let other = Gateway::start(config(&redis.url(), false)).await;
    wait_sold_out(other.api, meta.sku, true, "the second gateway's load").await;
    assert_replays_alice(&other, &meta, &first).await;

    // New requests are sold out: with a request_id after a replay read (or from the
    // replay filter once it is read, tests/it/replay_filter.rs)...
    let new = gw
        .claim(json!({"sku": meta.sku, "user": "bob", "request_id": "r2"}))
        .await;
    assert_eq!(new.status, StatusCode::GONE, "{}", new.body);
    // ...and with none, from memory: no Redis call at all. Bob's request started the filter's
    // read in a task of its own (its marks are GET and HMGET): let it finish first.
    let mut before = claim_path_calls(&redis);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = claim_path_calls(&redis);
        if now == before {
            break;
        }
        assert!(Instant::now() < deadline, "the filter read never settled");
        before = now;
    }
    for i in 0..20 {
        let a = gw
            .claim(json!({"sku": meta.sku, "user": format!("n{i}")}))
            .await;
        assert_eq!(a.status, StatusCode::GONE, "{}", a.body);
    }
    assert_eq!(
        claim_path_calls(&redis),
        before,
        "sold out without request_id is free"
    );
    assert_eq!(slices_left(&stock, &meta).await, 0);
    other.stop().await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_after_the_window_closed() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = SkuMeta {
        sku: 8201,
        stock: 10,
        width: 2,
        limit: 1,
        start_ms: now_ms() - 60_000,
        end_ms: now_ms() + 1_500,
        mode: shard_router::SkuMode::Fcfs,
    };
    stock.preheat(&meta).await.unwrap();
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let first = gw
        .claim(json!({"sku": meta.sku, "user": "carol", "request_id": "c1"}))
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    while now_ms() <= meta.end_ms {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let again = gw
        .claim(json!({"sku": meta.sku, "user": "carol", "request_id": "c1"}))
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(claim_fields(&again.body), claim_fields(&first.body));
    let late = gw
        .claim(json!({"sku": meta.sku, "user": "dave", "request_id": "d1"}))
        .await;
    assert_eq!(late.status, StatusCode::FORBIDDEN, "{}", late.body);
    assert_eq!(late.kind(), Some(ApiStatus::Ended));
    let before = claim_path_calls(&redis);
    let late = gw.claim(json!({"sku": meta.sku, "user": "dave"})).await;
    assert_eq!(late.status, StatusCode::FORBIDDEN, "{}", late.body);
    assert_eq!(
        claim_path_calls(&redis),
        before,
        "ended without request_id is free"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_skus_are_answered_from_memory() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 8301, 10, 2, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    wait_live_set(&gw, &redis).await;

    let before = claim_path_calls(&redis);
    for sku in 1_000_000..1_000_200u64 {
        let a = gw.claim(json!({"sku": sku, "user": "eve"})).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
        assert_eq!(a.kind(), Some(ApiStatus::UnknownSku));
        let (status, _, _) = get(gw.api, &format!("/v1/skus/{sku}")).await.unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    assert_eq!(
        claim_path_calls(&redis),
        before,
        "no Redis read per unknown SKU"
    );

    // A live SKU is still served, and one preheated now becomes visible through the
    // `live` event, without waiting for any TTL.
    let a = gw.claim(json!({"sku": 8301, "user": "eve"})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let fresh = 8302;
    let a = gw.claim(json!({"sku": fresh, "user": "eve"})).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "not preheated yet");
    preheat(&stock, fresh, 10, 2, 1).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let a = gw.claim(json!({"sku": fresh, "user": "eve"})).await;
        if a.status == StatusCode::CREATED {
            break;
        }
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
        assert!(Instant::now() < deadline, "the live event never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.stop().await;
}

/// Review finding: a SKU whose `live` event was lost (here: written without any PUBLISH)
/// must become visible within the cache TTL, not stay 404 until a resubscribe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_live_event_heals_within_the_cache_ttl() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 8701, 10, 2, 1).await;
    let mut cfg = config(&redis.url(), false);
    cfg.cache_ttl_ms = 500;
    let gw = Gateway::start(cfg).await;
    wait_live_set(&gw, &redis).await;
    // Campaign 8702 written by hand, the way preheat does but with no `live` PUBLISH (a
    // lost event): the gateway's subscription stays up, so only the timer can heal it.
    let meta = SkuMeta {
        sku: 8702,
        stock: 10,
        width: 2,
        limit: 1,
        start_ms: now_ms() - 60_000,
        end_ms: now_ms() + 3_600_000,
        mode: shard_router::SkuMode::Fcfs,
    };
    let mut conn = redis.connection();
    for (shard, slice) in stock
        .placement()
        .shards_of(8702, 2)
        .into_iter()
        .zip(meta.slices())
    {
        let k = shard_router::keys::ShardKeys::new(stock.placement(), shard, 8702);
        redis::pipe()
            .set(k.stock(), slice)
            .hset_multiple(
                k.meta(),
                &[("limit", 1), ("start", meta.start_ms), ("end", meta.end_ms)],
            )
            .query::<()>(&mut conn)
            .unwrap();
    }
    redis::pipe()
        .hset_multiple(
            shard_router::keys::sku_meta(8702),
            &[
                ("stock", 10),
                ("width", 2),
                ("limit", 1),
                ("start", meta.start_ms),
                ("end", meta.end_ms),
            ],
        )
        .sadd(shard_router::keys::SKU_SET, 8702)
        .query::<()>(&mut conn)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let a = gw.claim(json!({"sku": 8702, "user": "fay"})).await;
        if a.status == StatusCode::CREATED {
            break;
        }
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
        assert!(
            Instant::now() < deadline,
            "a missed live event hid the SKU past the TTL"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
}

/// Found by the model checker (model/, `replay`): a winner's retry that reaches Redis while
/// its shard's data is gone (lost, or fenced by a rebuild) and before the rebuild restored
/// its stored answer must not be told the SKU is unknown (a final 404 after its 201): the
/// answer is 503, retryable, and the retry after the rebuild gets its claim back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winners_retry_while_the_slice_is_missing_is_not_refused() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 8105, 2, 1, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let first = gw
        .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r1"}))
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);

    // The shard loses its keys (the SKU's metadata, which gateways cache, stays).
    lose_home_slice_and_answer(&redis, &stock, &meta, "alice", "r1");

    let again = gw
        .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r1"}))
        .await;
    assert_eq!(
        again.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a winner's retry while the slice is missing: {}",
        again.body
    );
    gw.stop().await;
}

/// Found by the model checker's deep form (model/, `replay`): a winner's retry through a
/// gateway that caches the SKU sold out, after the home shard lost its keys and before the
/// rebuild restored its stored answer, read no answer and was told 410. The sold-out path's
/// replay read sees the slice missing in the same read and answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winners_retry_after_a_loss_is_not_told_sold_out() {
    let redis = RedisServer::start();
    let (stock, meta, gw, _) = sold_out_by_alice(&redis, 8106).await;

    lose_home_slice_and_answer(&redis, &stock, &meta, "alice", "r1");

    let again = gw
        .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r1"}))
        .await;
    assert_eq!(
        again.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a winner's retry after a loss, SKU cached sold out: {}",
        again.body
    );
    gw.stop().await;
}

/// A SKU of stock 1 and limit 1 that alice's request `r1` sold out, cached sold out in a
/// gateway: its stock client, its metadata, the gateway and alice's answer.
async fn sold_out_by_alice(
    redis: &RedisServer,
    sku: u64,
) -> (shard_router::StockClient, SkuMeta, Gateway, Answer) {
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, sku, 1, 1, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let first = gw
        .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r1"}))
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    wait_sold_out(gw.api, meta.sku, true, "the sell-out event").await;
    (stock, meta, gw, first)
}

/// Alice's `r1` again through `gw`: 200 with her first answer's claim.
async fn assert_replays_alice(gw: &Gateway, meta: &SkuMeta, first: &Answer) {
    let again = gw
        .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r1"}))
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(claim_fields(&again.body), claim_fields(&first.body));
}

/// `user`'s home shard loses the SKU's slice and the stored answer of `rid`, as a shard that
/// lost its data before the rebuild (the SKU's metadata, which gateways cache, stays).
fn lose_home_slice_and_answer(
    redis: &RedisServer,
    stock: &shard_router::StockClient,
    meta: &shard_router::SkuMeta,
    user: &str,
    rid: &str,
) {
    let shard = stock.placement().home_shard(meta.sku, meta.width, user);
    let keys = shard_router::keys::ShardKeys::new(stock.placement(), shard, meta.sku);
    let _: () = redis::cmd("DEL")
        .arg(keys.stock())
        .arg(keys.request(user, Some(rid)))
        .query(&mut redis.connection())
        .expect("DEL");
}

/// Found by the model checker (model/, `ReplayReadIgnoresVouch`): after a restart from an
/// older snapshot (its slices there, the winner's stored answer not), a winner's retry
/// through a gateway that caches the SKU sold out read no answer over a slice and was told
/// 410 while its claim is in the ledger. A vouch naming another process (or `revoked`)
/// answers `restoring`, like the guard; once the rebuild restored the answer and vouched,
/// the retry gets its first claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winners_retry_on_an_older_process_is_not_told_sold_out() {
    let redis = RedisServer::start();
    let (stock, meta, gw, first) = sold_out_by_alice(&redis, 8107).await;

    let home = stock.placement().home_shard(meta.sku, meta.width, "alice");
    let keys = shard_router::keys::ShardKeys::new(stock.placement(), home, meta.sku);
    let answer_key = keys.request("alice", Some("r1"));
    let mut conn = redis.connection();
    let stored: String = redis::cmd("GET").arg(&answer_key).query(&mut conn).unwrap();
    let _: () = redis::cmd("DEL").arg(&answer_key).query(&mut conn).unwrap();
    let vouch = shard_router::keys::vouch(stock.placement(), home);
    // `revoked`, and the run_id of the process the older data came from.
    for older in ["revoked", "0123456789abcdef0123456789abcdef01234567"] {
        let _: () = redis::cmd("SET")
            .arg(&vouch)
            .arg(older)
            .query(&mut conn)
            .unwrap();
        let again = gw
            .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r1"}))
            .await;
        assert_eq!(
            again.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "a winner's retry under the vouch {older:?}: {}",
            again.body
        );
        assert_eq!(again.kind(), Some(ApiStatus::Restoring), "{}", again.body);
    }

    // The rebuild restores the answer from the ledger, then vouches for this process.
    let _: () = redis::cmd("SET")
        .arg(&answer_key)
        .arg(&stored)
        .query(&mut conn)
        .unwrap();
    shard_router::test_util::vouch_current(&stock, home).await;
    assert_replays_alice(&gw, &meta, &first).await;
    // A vouched shard's losers are still sold out (a request id of the winner's with no
    // answer: the replay filter passes her to the replay read).
    let lost = gw
        .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r2"}))
        .await;
    assert_eq!(lost.status, StatusCode::GONE, "{}", lost.body);
    gw.stop().await;
}
