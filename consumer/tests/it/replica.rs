//! Durability `replica` on the consumer side: an entry reaches the ledger only once a
//! replica holds it, so a failover cannot take back a decrement the ledger already shows.

use std::time::Duration;

use crate::common::*;
use consumer::replica::ReplicaWait;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_nothing_reaches_the_ledger() {
    let s = Stack::start().await;
    let c = campaign(&s, 12001, 50, SHARDS, 1, 3600).await;
    let mut cfg = s.cfg.clone();
    cfg.replica_wait = ReplicaWait::Always(Duration::from_millis(50));
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
    let s = ClusterStack::start(1).await;
    let c = open_campaign(&s.pool, &s.client, 12002, 300, SHARDS, 1, 3600).await;
    let mut cfg = s.cfg.clone();
    cfg.replica_wait = ReplicaWait::Always(Duration::from_millis(200));
    let consumer = start_consumer(cfg);
    let ids = claim_all(&s.client, &c, users("q", 300), 8).await;
    assert_eq!(ids.len(), 300);
    wait_rows(&s.pool, c.sku, 300, Duration::from_secs(30)).await;
    consumer.stop().await;
}
