//! The Redis connection's tasks run on a runtime of their own (`gateway/src/redis_runtime.rs`):
//! a saturated request runtime must not make Redis calls time out. Here the test runtime,
//! which also runs the gateway, is kept busy by tasks that hold a worker for a long slice
//! between yields; claims on a cluster still get their Redis answers (no 503), where each
//! hop of a connection task through that runtime would cost up to one slice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use serde_json::json;
use test_support::RedisCluster;

/// Tasks that each hold a worker for `slice`, then yield, until `stop`.
fn hog(tasks: usize, slice: Duration, stop: Arc<AtomicBool>) {
    for _ in 0..tasks {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                while t.elapsed() < slice {
                    std::hint::spin_loop();
                }
                tokio::task::yield_now().await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_request_runtime_does_not_time_out_redis_calls() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = cluster.urls().join(",");
    let stock = stock_client(&seeds, true).await;
    let meta = preheat(&stock, 8_801, 1_000_000, 8, 1).await;
    let gw = Gateway::start(config(&seeds, true)).await;
    let warm = gw
        .claim(json!({"sku": meta.sku, "user": "warm", "request_id": "w"}))
        .await;
    assert_eq!(warm.status, StatusCode::CREATED, "{}", warm.body);

    let stop = Arc::new(AtomicBool::new(false));
    hog(6, Duration::from_millis(150), stop.clone());
    let mut sent = tokio::task::JoinSet::new();
    for i in 0..100 {
        let api = gw.api;
        sent.spawn(async move {
            let body =
                json!({"sku": meta.sku, "user": format!("u{i}"), "request_id": format!("r{i}")});
            post_json(api, "/v1/claims", &body.to_string()).await
        });
    }
    let mut statuses = Vec::new();
    while let Some(a) = sent.join_next().await {
        let a = a.expect("claim task");
        statuses.push((
            a.status,
            a.body["message"].as_str().unwrap_or("").to_owned(),
        ));
    }
    stop.store(true, Ordering::Relaxed);
    let unavailable: Vec<_> = statuses
        .iter()
        .filter(|(s, _)| *s == StatusCode::SERVICE_UNAVAILABLE)
        .collect();
    println!(
        "claims={} created={} unavailable={}",
        statuses.len(),
        statuses
            .iter()
            .filter(|(s, _)| *s == StatusCode::CREATED)
            .count(),
        unavailable.len()
    );
    assert!(
        unavailable.is_empty(),
        "Redis calls timed out: {unavailable:?}"
    );
}

/// `--redis-runtime shared` (for measuring the hop) connects on the request runtime and
/// serves claims, replays and sold-out answers as the default does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_runtime_serves_claims() {
    let redis = test_support::RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 8_802, 1, 1, 1).await;
    let mut cfg = config(&redis.url(), false);
    cfg.redis_runtime = gateway::config::RedisRuntime::Shared;
    let gw = Gateway::start(cfg).await;
    let won = gw
        .claim(json!({"sku": meta.sku, "user": "ann", "request_id": "a1"}))
        .await;
    assert_eq!(won.status, StatusCode::CREATED, "{}", won.body);
    let again = gw
        .claim(json!({"sku": meta.sku, "user": "ann", "request_id": "a1"}))
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.body["claim_id"], won.body["claim_id"]);
    let late = gw
        .claim(json!({"sku": meta.sku, "user": "bob", "request_id": "b1"}))
        .await;
    assert_eq!(late.status, StatusCode::GONE, "{}", late.body);
}
