//! The consumer on a 3-master Redis Cluster: every command names keys of one shard, so the
//! whole path (read, ack, delete, recovery, reconcile) works there too.

mod common;

use std::time::{Duration, Instant};

use common::*;
use consumer::campaign::{self, Campaign};
use shard_router::{RedisTarget, StockClient};
use test_support::mariadb::TestDatabase;
use test_support::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_on_a_cluster_land_exactly_once() {
    let cluster = RedisCluster::start(3, 0);
    let db = TestDatabase::create();
    let mut cfg = config("redis://unused", &db.url());
    cfg.redis = RedisTarget::Cluster(cluster.urls());
    let client = StockClient::connect(cfg.stock()).await.unwrap();
    let pool = consumer::db::connect(&cfg.mysql_url, T).await.unwrap();
    consumer::db::migrate(&pool).await.unwrap();
    let now = shard_router::now_ms();
    let c = Campaign {
        sku: 11001,
        name: "cluster".into(),
        stock: 1500,
        width: SHARDS,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    };
    campaign::put(&pool, &c, SHARDS, T).await.unwrap();
    campaign::preheat(&pool, &client, c.sku, T).await.unwrap();

    let (stop, rx) = consumer::signal::channel();
    let task = tokio::spawn(consumer::service::run(cfg.clone(), None, rx));
    let ids = claim_all(&client, &c, users("c", 1600), 16).await;
    assert_eq!(ids.len(), 1500, "stock 1500, 1600 users: never oversold");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM claims")
            .fetch_one(&pool)
            .await
            .unwrap();
        if rows == 1500 {
            break;
        }
        assert!(Instant::now() < deadline, "{rows}/1500 rows");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    task.await.unwrap().unwrap();
    let r = consumer::reconcile::run(&pool, &client, &cfg.group, c.sku, shard_router::now_ms(), T)
        .await
        .unwrap();
    assert_eq!((r.drift, r.in_flight, r.slices), (0, 0, 0), "{r:?}");
    let available: i64 = sqlx::query_scalar("SELECT available FROM sku_stock")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(available, 0);
}
