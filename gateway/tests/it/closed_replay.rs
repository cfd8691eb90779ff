//! Invariant `replay` (docs/DESIGN.md) after close-out: a retried success gets its first
//! answer through the gateway for as long as close-out keeps it (its TTL), while new claims
//! are refused `ended`; only once the last answer expired does the SKU's metadata go.
//! Real gateway, real Redis, real MariaDB, the consumer's own close-out.

use std::time::Duration;

use crate::common::ledger::*;
use crate::common::*;
use campaign_ops::campaign::Campaign;
use campaign_ops::closeout;
use hyper::StatusCode;
use serde_json::json;
use shard_router::{keys, now_ms};
use test_support::RedisServer;

fn assert_refused_ended(a: &Answer, what: &str) {
    assert_eq!(
        (a.status, a.kind()),
        (StatusCode::FORBIDDEN, Some(ApiStatus::Ended)),
        "{what}: {}",
        a.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_success_is_replayed_after_close_out_and_new_claims_are_ended() {
    let redis = RedisServer::start();
    let l = ledger(&redis).await;
    let now = now_ms();
    let c = Campaign {
        sku: 7701,
        name: "closed-replay".into(),
        stock: 4,
        width: 2,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 1500,
        payment_timeout_s: 1,
    };
    l.open(&c).await;
    let mut cfg = config(&redis.url(), false);
    // Short, so this gateway rereads the metadata and the live set after close-out.
    cfg.cache_ttl_ms = 300;
    let gw = Gateway::start(cfg).await;
    let first = gw
        .claim(json!({"sku": 7701, "user": "u1", "request_id": "r1"}))
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let claim_id = first.body["claim_id"].as_str().unwrap().to_owned();
    ingest_and_confirm(&l, c.sku, 1).await;

    let over = c.end_ms + 1000;
    while now_ms() <= over {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    closeout::close(&l.pool, &l.client, c.sku, now_ms(), T)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await; // past the cache TTL
                                                          // A gateway started after close-out has never seen the SKU live.
    let fresh = Gateway::start(config(&redis.url(), false)).await;

    for (api, who) in [(&gw, "the running gateway"), (&fresh, "a fresh gateway")] {
        let again = api
            .claim(json!({"sku": 7701, "user": "u1", "request_id": "r1"}))
            .await;
        assert_eq!(
            (again.status, again.body["claim_id"].as_str()),
            (StatusCode::OK, Some(claim_id.as_str())),
            "{who}: the retry gets its first answer: {}",
            again.body
        );
        let new = api
            .claim(json!({"sku": 7701, "user": "u2", "request_id": "r2"}))
            .await;
        assert_refused_ended(&new, who);
        let plain = api.claim(json!({"sku": 7701, "user": "u3"})).await;
        assert_refused_ended(&plain, who);
        assert_eq!(view(api.api, 7701).await["hint"], "ended", "{who}");
    }

    // Only once the last answer's TTL is over does the metadata go, exactly once.
    let ttl = l.client.config().request_ttl.as_millis() as i64;
    let early = closeout::retire(&l.pool, &l.client, now_ms() + ttl / 2, T)
        .await
        .unwrap();
    assert!(early.is_empty(), "retired too early: {early:?}");
    let later = now_ms() + ttl + closeout::RETIRE_MARGIN.as_millis() as i64 + 1000;
    let retired = closeout::retire(&l.pool, &l.client, later, T)
        .await
        .unwrap();
    assert_eq!(retired, vec![c.sku]);
    let mut conn = redis.connection();
    let meta: bool = redis::cmd("EXISTS")
        .arg(keys::sku_meta(c.sku))
        .query(&mut conn)
        .unwrap();
    let member: bool = redis::cmd("SISMEMBER")
        .arg(keys::SKU_SET)
        .arg(c.sku)
        .query(&mut conn)
        .unwrap();
    assert!(!meta && !member, "metadata {meta}, live set {member}");
    let again = closeout::retire(&l.pool, &l.client, later, T)
        .await
        .unwrap();
    assert!(again.is_empty(), "idempotent: {again:?}");
    let after = Gateway::start(config(&redis.url(), false)).await;
    let gone = after.claim(json!({"sku": 7701, "user": "u4"})).await;
    assert_eq!(
        (gone.status, gone.kind()),
        (StatusCode::NOT_FOUND, Some(ApiStatus::UnknownSku)),
        "{}",
        gone.body
    );
    for g in [gw, fresh, after] {
        g.stop().await;
    }
}

/// A gateway whose clock is behind (within its skew bound) still thinks the sale is open and
/// runs the claim script, which finds the shard metas gone: a retried success still gets its
/// first answer, and a new claim is refused `ended`, never a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_clock_gateway_replays_and_refuses_a_closed_campaign() {
    let redis = RedisServer::start();
    let l = ledger(&redis).await;
    let now = now_ms();
    let c = Campaign {
        sku: 7702,
        name: "closed-slow".into(),
        stock: 4,
        width: 1,
        limit: 1,
        // Open for the gateway 5 s behind too.
        start_ms: now - 60_000,
        end_ms: now + 1000,
        // Measured from the claim's time, which this gateway stamps 5 s early: long enough
        // that the claim is confirmed, not released, before close-out.
        payment_timeout_s: 10,
    };
    l.open(&c).await;
    let mut cfg = config(&redis.url(), false);
    cfg.max_clock_skew_ms = 10_000;
    cfg.clock_offset_ms = -5_000;
    let gw = Gateway::start(cfg).await;
    let first = gw
        .claim(json!({"sku": 7702, "user": "u1", "request_id": "r1"}))
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let claim_id = first.body["claim_id"].as_str().unwrap().to_owned();
    ingest_and_confirm(&l, c.sku, 1).await;
    // Closed as by a consumer whose clock says the payment timeout is over.
    let over = c.end_ms + 10_001;
    closeout::close(&l.pool, &l.client, c.sku, over, T)
        .await
        .unwrap();

    let again = gw
        .claim(json!({"sku": 7702, "user": "u1", "request_id": "r1"}))
        .await;
    assert_eq!(
        (again.status, again.body["claim_id"].as_str()),
        (StatusCode::OK, Some(claim_id.as_str())),
        "{}",
        again.body
    );
    for body in [
        json!({"sku": 7702, "user": "u2", "request_id": "r2"}),
        json!({"sku": 7702, "user": "u3"}),
    ] {
        let a = gw.claim(body).await;
        assert_refused_ended(&a, "slow clock");
    }
    let slices = l.client.slices(c.sku, c.width).await.unwrap();
    assert!(
        slices.iter().all(|(_, v)| v.is_none()),
        "no slice came back: {slices:?}"
    );
    gw.stop().await;
}
