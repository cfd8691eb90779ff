//! The consumer on a 3-master Redis Cluster: every command names keys of one shard, so the
//! whole path (read, ack, delete, recovery, reconcile) works there too.

use std::time::Duration;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_on_a_cluster_land_exactly_once() {
    let s = ClusterStack::start(0).await;
    let c = open_campaign(&s.pool, &s.client, 11001, 1500, SHARDS, 1, 3600).await;

    let consumer = start_consumer(s.cfg.clone());
    let ids = claim_all(&s.client, &c, users("c", 1600), 16).await;
    assert_eq!(ids.len(), 1500, "stock 1500, 1600 users: never oversold");
    wait_rows(&s.pool, c.sku, 1500, Duration::from_secs(30)).await;
    consumer.stop().await;
    let r = campaign_ops::reconcile::run(&s.pool, &s.client, c.sku, shard_router::now_ms(), T)
        .await
        .unwrap();
    assert_eq!((r.drift, r.in_flight, r.slices), (0, 0, 0), "{r:?}");
    let available: i64 = sqlx::query_scalar("SELECT available FROM sku_stock")
        .fetch_one(&s.pool)
        .await
        .unwrap();
    assert_eq!(available, 0);
}
