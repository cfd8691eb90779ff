//! A gateway started before its Redis: it stays up, answers `/healthz`, reports
//! not ready on `/readyz`, retries, and serves once Redis answers.

use std::time::{Duration, Instant};

use crate::common::*;
use gateway::Listeners;
use hyper::StatusCode;
use serde_json::json;
use test_support::RedisServer;
use tokio::net::TcpListener;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_started_before_redis_waits_for_it() {
    let mut redis = RedisServer::start();
    redis.kill();
    let api = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = api.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(gateway::run(
        config(&redis.url(), false),
        Listeners { api, admin },
        async {
            let _ = rx.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        !task.is_finished(),
        "connection refused must not end the gateway"
    );
    assert_eq!(get(api_addr, "/healthz").await.unwrap().0, StatusCode::OK);
    assert_eq!(
        get(api_addr, "/readyz").await.unwrap().0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    while get(api_addr, "/readyz").await.unwrap().0 != StatusCode::OK {
        assert!(Instant::now() < deadline, "never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 12_101, 5, 1, 1).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await; // unknown-SKU memory
    let a = post_json(
        api_addr,
        "/v1/claims",
        &json!({"sku": 12_101, "user": "a"}).to_string(),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let _ = tx.send(());
    tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
}
