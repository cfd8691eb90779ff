//! Stock-core scenarios on a private single Redis.

mod common;
mod scenarios;

use common::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency() {
    scenarios::concurrency(Env::single()).await;
}

#[tokio::test]
async fn uneven_drain() {
    scenarios::uneven_drain(Env::single()).await;
}

#[tokio::test]
async fn limit_across_reroutes() {
    scenarios::limit_across_reroutes(Env::single()).await;
}

#[tokio::test]
async fn replay() {
    scenarios::replay(Env::single()).await;
}

#[tokio::test]
async fn release_twice() {
    scenarios::release_twice(Env::single()).await;
}

#[tokio::test]
async fn script_flush() {
    scenarios::script_flush(Env::single()).await;
}

#[tokio::test]
async fn not_preheated() {
    scenarios::not_preheated(Env::single()).await;
}

#[tokio::test]
async fn hold_left_behind() {
    scenarios::hold_left_behind(Env::single()).await;
}

#[tokio::test]
async fn window() {
    scenarios::window(Env::single()).await;
}

/// Without replicas, `WAIT` reports 0 confirmations after its timeout instead of hanging.
#[tokio::test]
async fn wait_replicas_without_replicas() {
    let env = Env::single();
    let client = env.client().await;
    let t = std::time::Instant::now();
    let n = client
        .wait_replicas(0, 1, std::time::Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(n, 0);
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
}
