//! The gateway's clock stamps the sale window and `claimed_ms` (payment timeouts are
//! measured from it by Redis's clock): past `--max-clock-skew-ms` from Redis's `TIME` it
//! refuses claims and is not ready. The skew is injected with the drill-only offset.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use serde_json::json;
use test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_off_redis_past_the_bound_refuses_claims() {
    let _one = crate::common::one_at_a_time().await;
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 7301, 5, 1, 1).await;

    let mut cfg = config(&redis.url(), false);
    cfg.max_clock_skew_ms = 1_000;
    cfg.clock_offset_ms = -5_000;
    let gw = Gateway::start_unready(cfg).await;
    // The first probe measures the clock; until then, and after, claims are refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    let ready = loop {
        let (status, _, body) = get(gw.api, "/readyz").await.expect("readyz");
        if body.to_string().contains("clock") || Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ready.0, StatusCode::SERVICE_UNAVAILABLE, "{}", ready.1);
    assert!(ready.1.to_string().contains("clock"), "{}", ready.1);
    let a = gw.claim(json!({"sku": 7301, "user": "skewed"})).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    assert!(
        a.body["error"].as_str().unwrap_or("").contains("clock"),
        "{}",
        a.body
    );
    assert!(
        metric(&gw.metrics().await, "flashgate_clock_skew_seconds") < -4.0,
        "the skew is exported"
    );
    gw.stop().await;
    assert_eq!(slices_left(&stock, &meta).await, 5, "nothing was taken");

    // Within the bound the same gateway serves.
    let mut cfg = config(&redis.url(), false);
    cfg.max_clock_skew_ms = 1_000;
    cfg.clock_offset_ms = 300;
    let gw = Gateway::start(cfg).await;
    let a = gw.claim(json!({"sku": 7301, "user": "fine"})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    gw.stop().await;
}
