//! A rebuild that runs longer than its lease keeps its shards (the lease is renewed, and a
//! second rebuild is refused meanwhile), and the ledger is read by bounded pages.

use std::time::Duration;

use crate::common::rebuild::*;
use crate::common::*;
use campaign_ops::rebuild::{self, Options};

/// Lease 300 ms, rebuild ≥ 1.2 s (its pause). Before the renewal the second rebuild took
/// the shards over once the lease ran out and the first one failed at its write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_longer_than_its_lease_keeps_its_shards() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_001, 8, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    assert_eq!(claim_all(&s.client, &c, users("u", 3), 2).await.len(), 3);
    wait_drained(&s, c.sku, 3, Duration::from_secs(20)).await;
    consumer.stop().await;
    flushall(&s);

    let mut slow = Options::new(T);
    slow.lease = Duration::from_millis(300);
    slow.quiesce = Duration::from_millis(1200);
    let first = {
        let (pool, client, o) = (s.pool.clone(), s.client.clone(), slow.clone());
        tokio::spawn(async move { rebuild::rebuild(&pool, &client, 13_001, &o).await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut quick = Options::new(T);
    quick.quiesce = Duration::ZERO;
    let second = rebuild::rebuild(&s.pool, &s.client, c.sku, &quick).await;
    assert!(
        second
            .as_ref()
            .is_err_and(|e| e.to_string().contains("is being rebuilt by")),
        "the second rebuild must find the fence held: {second:?}"
    );
    let r = first.await.unwrap().expect("the first rebuild completes");
    assert_eq!(r.active_units, 3);
    let left: i64 = s
        .client
        .slices(c.sku, c.width)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, v)| v.expect("written back"))
        .sum();
    assert_eq!(left, 5);
    // Once written back, the renewal is gone: nothing holds the shards any more.
    tokio::time::sleep(Duration::from_millis(400)).await;
    for shard in s.client.placement().shards_of(c.sku, c.width) {
        assert_eq!(s.client.rebuild_fence(c.sku, shard).await.unwrap(), None);
    }
}

/// Pages of 2 rows over 7 claims (and one released): every claim counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_is_read_by_pages() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_002, 20, SHARDS, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let ids = claim_all(&s.client, &c, users("p", 7), 3).await;
    assert_eq!(ids.len(), 7);
    wait_drained(&s, c.sku, 7, Duration::from_secs(20)).await;
    consumer.stop().await;
    campaign_ops::release::release(
        &s.pool,
        &s.client,
        &ids[0],
        campaign_ops::release::Reason::Cancelled,
        T,
    )
    .await
    .unwrap();
    flushall(&s);
    let mut o = Options::new(T);
    o.quiesce = Duration::ZERO;
    o.ledger_page = 2;
    let r = rebuild::rebuild(&s.pool, &s.client, c.sku, &o)
        .await
        .unwrap();
    assert_eq!((r.active_units, r.released), (6, 1));
    assert_eq!(r.slices.iter().map(|x| x.1).sum::<i64>(), 14);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}
