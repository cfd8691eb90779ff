//! Drill `redis_frozen` (docs/DESIGN.md) through HTTP: redis-server frozen with SIGSTOP. A claim gets a clear 503
//! `unavailable` with Retry-After within the Redis timeout (it may or may not have been
//! taken, so the answer says to retry with the same request_id); after SIGCONT the retry
//! learns the outcome, and slices plus stream records still add up to the stock.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use serde_json::json;
use test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_redis_gives_a_clear_503_and_the_books_close() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 7301, 10, 2, 2).await;
    let mut cfg = config(&redis.url(), false);
    cfg.redis_timeout_ms = 300;
    let gw = Gateway::start(cfg).await;
    let ok = gw.claim(json!({"sku": meta.sku, "user": "before"})).await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.body);

    let pid = redis.pid().expect("pid");
    drills::signal(pid, "STOP");
    let t = Instant::now();
    let frozen = gw
        .claim(json!({"sku": meta.sku, "user": "frozen", "request_id": "f1"}))
        .await;
    let waited = t.elapsed();
    drills::signal(pid, "CONT");
    println!(
        "drill=redis-sigstop-http status={} answer_ms={} retry_after={:?}",
        frozen.status.as_u16(),
        waited.as_millis(),
        frozen.headers.get("retry-after")
    );
    assert_eq!(
        frozen.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        frozen.body
    );
    assert_eq!(frozen.kind(), Some(ApiStatus::Unavailable));
    assert!(frozen.headers.contains_key("retry-after"));
    assert!(waited < Duration::from_secs(2), "answered after {waited:?}");

    // The frozen request may have run once Redis woke up: the retry with the same
    // request_id tells (201 if it had not, 200 replay if it had) and never takes twice.
    let deadline = Instant::now() + Duration::from_secs(10);
    let retry = loop {
        let a = gw
            .claim(json!({"sku": meta.sku, "user": "frozen", "request_id": "f1"}))
            .await;
        if a.status != StatusCode::SERVICE_UNAVAILABLE || Instant::now() > deadline {
            break a;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        retry.status == StatusCode::CREATED || retry.status == StatusCode::OK,
        "{} {}",
        retry.status,
        retry.body
    );
    let left = slices_left(&stock, &meta).await;
    let records: i64 = {
        let mut conn = redis.connection();
        stock
            .placement()
            .shards_of(meta.sku, meta.width)
            .into_iter()
            .map(|s| {
                redis::cmd("XLEN")
                    .arg(shard_router::keys::claims_stream(stock.placement(), s))
                    .query::<i64>(&mut conn)
                    .unwrap()
            })
            .sum()
    };
    assert_eq!(left + records, 10, "every unit taken has its record");
    assert_eq!(records, 2, "'before' and one claim of 'frozen', never two");
    gw.stop().await;
}
