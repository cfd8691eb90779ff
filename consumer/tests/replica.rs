//! Durability `replica` on the consumer side: an entry reaches the ledger only once a
//! replica holds it, so a failover cannot take back a decrement the ledger already shows.

mod common;

use std::time::{Duration, Instant};

use common::*;
use consumer::campaign::{self, Campaign};
use shard_router::{RedisTarget, StockClient};
use test_support::mariadb::TestDatabase;
use test_support::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_nothing_reaches_the_ledger() {
    let s = Stack::start().await;
    let c = campaign(&s, 12001, 50, SHARDS, 1, 3600).await;
    let mut cfg = s.cfg.clone();
    cfg.replica_wait = Some(Duration::from_millis(50));
    let consumer = start_consumer(cfg);
    let ids = claim_all(&s.client, &c, users("r", 50), 8).await;
    assert_eq!(ids.len(), 50);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims").await,
        0,
        "unreplicated entries must not be committed"
    );
    let (_, pending) = stream_depth(&s).await;
    assert!(pending > 0, "read, held back, still pending");
    // Shutdown is not blocked by the wait; the entries stay pending for recovery.
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replicas_every_claim_lands_once() {
    let cluster = RedisCluster::start(3, 1);
    let db = TestDatabase::create();
    let mut cfg = config("redis://unused", &db.url());
    cfg.redis = RedisTarget::Cluster(cluster.urls());
    cfg.replica_wait = Some(Duration::from_millis(200));
    let client = StockClient::connect(cfg.stock()).await.unwrap();
    let pool = consumer::db::connect(&cfg.mysql_url, T).await.unwrap();
    consumer::db::migrate(&pool).await.unwrap();
    let now = shard_router::now_ms();
    let c = Campaign {
        sku: 12002,
        name: "replica".into(),
        stock: 300,
        width: SHARDS,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    };
    campaign::put(&pool, &c, SHARDS, T).await.unwrap();
    campaign::preheat(&pool, &client, c.sku, T).await.unwrap();
    let consumer = start_consumer(cfg);
    let ids = claim_all(&client, &c, users("q", 300), 8).await;
    assert_eq!(ids.len(), 300);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT claim_id) FROM claims")
            .fetch_one(&pool)
            .await
            .unwrap();
        if rows == 300 {
            break;
        }
        assert!(Instant::now() < deadline, "{rows}/300 rows");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.stop().await;
}
