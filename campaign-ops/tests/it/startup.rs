//! Startup rides out a Redis that is still coming up: the consumer started
//! before its Redis, or before its cluster is formed (`CLUSTERDOWN`, the `xgroup create`
//! case of the issue), waits with backoff instead of exiting, then works.

use std::process::Command;
use std::time::Duration;

use crate::common::*;
use shard_router::{RedisTarget, StockClient};
use test_support::mariadb::TestDatabase;
use test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_started_before_redis_waits_for_it() {
    let mut redis = RedisServer::start();
    redis.kill();
    let db = TestDatabase::create();
    let cfg = config(&redis.url(), &db.url());
    let consumer = start_consumer(cfg.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !consumer.is_finished(),
        "connection refused must not end the consumer"
    );

    redis.restart();
    let client = StockClient::connect(cfg.datapath.stock()).await.unwrap();
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .unwrap();
    let c = open_campaign(&pool, &client, 12_001, 10, 2, 1, 3600).await;
    assert_eq!(claim_all(&client, &c, users("s", 4), 2).await.len(), 4);
    wait_rows(&pool, c.sku, 4, Duration::from_secs(20)).await;
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_started_before_its_cluster_is_formed_waits_for_it() {
    // Three cluster-enabled nodes that are not joined yet: every slot is unserved.
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
            ])
        })
        .collect();
    let db = TestDatabase::create();
    let mut cfg = config("redis://unused", &db.url());
    cfg.datapath.redis = RedisTarget::Cluster(nodes.iter().map(|n| n.url()).collect());
    let consumer = start_consumer(cfg.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !consumer.is_finished(),
        "CLUSTERDOWN must not end the consumer"
    );

    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let client = loop {
        if let Ok(c) = StockClient::connect(cfg.datapath.stock()).await {
            if c.ping().await.is_ok() && c.load_scripts().await.is_ok() {
                break c;
            }
        }
        assert!(std::time::Instant::now() < deadline, "cluster never served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .unwrap();
    let c = loop {
        // The slots may still be settling on the nodes.
        let now = shard_router::now_ms();
        let camp = campaign_ops::campaign::Campaign {
            sku: 12_002,
            name: String::new(),
            stock: 10,
            width: SHARDS,
            limit: 1,
            start_ms: now - 1000,
            end_ms: now + 3_600_000,
            payment_timeout_s: 3600,
        };
        campaign_ops::campaign::put(&pool, &camp, SHARDS, T)
            .await
            .unwrap();
        if campaign_ops::campaign::preheat(&pool, &client, camp.sku, T)
            .await
            .is_ok()
        {
            break camp;
        }
        assert!(std::time::Instant::now() < deadline, "preheat never worked");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(claim_all(&client, &c, users("k", 4), 2).await.len(), 4);
    wait_rows(&pool, c.sku, 4, Duration::from_secs(30)).await;
    assert!(!consumer.is_finished());
    consumer.stop().await;
}
