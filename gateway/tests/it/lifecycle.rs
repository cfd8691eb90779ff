//! Process lifecycle: graceful shutdown with claims in flight, and Redis going away and
//! coming back.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use serde_json::json;
use test_support::RedisServer;
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_claims_and_refuses_new_connections() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 6001, 100, 4, 1).await;
    let mut cfg = config(&redis.url(), false);
    cfg.redis_timeout_ms = 3_000;
    cfg.drain_delay_ms = 300;
    let mut gw = Gateway::start(cfg).await;
    get(gw.api, "/v1/skus/6001").await.unwrap();

    // Park every script in Redis so the claims are in flight when the signal comes.
    let mut conn = redis.connection();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_200)
        .arg("WRITE")
        .query::<()>(&mut conn)
        .unwrap();
    let api = gw.api;
    let claims: Vec<_> = (0..10)
        .map(|u| {
            tokio::spawn(async move {
                post_json(
                    api,
                    "/v1/claims",
                    &json!({"sku": 6001, "user": format!("s{u}")}).to_string(),
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let signalled = Instant::now();
    gw.signal_stop();
    let run = gw.task();

    // Draining: not ready, still listening. The signal reaches `run` asynchronously, so
    // poll briefly (well inside the 300 ms drain delay) instead of racing it.
    let (status, v) = loop {
        let (status, _, v) = get(gw.api, "/readyz").await.unwrap();
        if status == StatusCode::SERVICE_UNAVAILABLE
            || signalled.elapsed() > Duration::from_millis(250)
        {
            break (status, v);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"], "draining");
    // Then the listener closes while the claims are still parked.
    loop {
        if TcpStream::connect(gw.api).await.is_err() {
            break;
        }
        assert!(
            signalled.elapsed() < test_support::slack(Duration::from_millis(900)),
            "listener still open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        claims.iter().all(|c| !c.is_finished()),
        "claims were in flight at refusal"
    );

    for c in claims {
        let a = c.await.unwrap();
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    }
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(slices_left(&stock, &meta).await, 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_answers_503_then_recovers() {
    let mut redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 6101, 10, 2, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    assert_eq!(
        gw.claim(json!({"sku": 6101, "user": "a"})).await.status,
        StatusCode::CREATED
    );

    redis.kill();
    let started = Instant::now();
    let a = gw.claim(json!({"sku": 6101, "user": "b"})).await;
    assert_unavailable(&a);
    assert!(a.headers.contains_key("retry-after"));
    assert!(
        started.elapsed() < test_support::slack(Duration::from_secs(2)),
        "bounded: {:?}",
        started.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(gw.api, "/readyz").await.unwrap().0 != StatusCode::SERVICE_UNAVAILABLE {
        assert!(Instant::now() < deadline, "readiness never dropped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Back, empty: the gateway reconnects by itself; the campaign must be preheated again.
    redis.restart();
    gw.wait_ready().await;
    let stock = stock_client(&redis.url(), false).await;
    // The SKU's metadata went with Redis's data while its window runs: that is a loss, not
    // a SKU that never existed, so the gateway keeps what it loaded and answers 503 (it may
    // be a winner's retry waiting for the rebuild), never 404, until the SKU is back.
    for _ in 0..2 {
        let a = gw.claim(json!({"sku": 6101, "user": "c"})).await;
        assert_unavailable(&a);
    }
    preheat(&stock, 6101, 10, 2, 1).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await; // unknown-SKU memory
    let a = gw.claim(json!({"sku": 6101, "user": "c"})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    gw.stop().await;
}

/// 503 `unavailable`: Redis down, or a SKU's shard waiting for its rebuild.
fn assert_unavailable(a: &Answer) {
    assert_eq!(
        (a.status, a.kind()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some(ApiStatus::Unavailable)
        ),
        "{}",
        a.body
    );
}
