//! Reconciliation reports drift injected by hand, stores it, exports it, and resolves
//! stale holds against the ledger.

mod common;

use std::time::Duration;

use common::*;
use shard_router::keys::ShardKeys;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_reports_a_slice_changed_by_hand() {
    let prom = consumer::metrics::install().expect("recorder");
    let s = Stack::start().await;
    let c = campaign(&s, 9001, 40, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let ids = claim_all(&s.client, &c, users("r", 10), 4).await;
    assert_eq!(ids.len(), 10);
    wait_drained(&s, c.sku, 10, Duration::from_secs(20)).await;

    let clean = s.reconcile(c.sku).await;
    assert_eq!(
        (
            clean.slices + clean.in_flight + clean.active_ledger,
            clean.drift
        ),
        (40, 0),
        "{clean:?}"
    );

    let shard = s.client.placement().shards_of(c.sku, 2)[1];
    let key = ShardKeys::new(s.client.placement(), shard, c.sku).stock();
    let mut conn = s.redis.connection();
    let _: i64 = redis::cmd("INCRBY")
        .arg(&key)
        .arg(3)
        .query(&mut conn)
        .unwrap();

    let r = s.reconcile(c.sku).await;
    consumer.stop().await;
    assert_eq!(r.drift, 3, "{r:?}");
    assert_eq!(
        s.count("SELECT drift FROM reconcile_runs ORDER BY id DESC LIMIT 1")
            .await,
        3
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM reconcile_runs").await, 2);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'drift' AND sku = 9001")
            .await,
        1
    );
    let text = prom.render();
    assert!(
        text.contains("flashgate_reconcile_drift{sku=\"9001\"} 3"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_holds_are_kept_or_undone_by_the_ledger() {
    let s = Stack::start().await;
    let c = campaign(&s, 9002, 4, 1, 2, 3600).await;
    let ids = claim_all(&s.client, &c, vec!["gina".into()], 1).await;
    assert_eq!(ids.len(), 1);
    let home = s.client.placement().home_shard(c.sku, 1, "gina");
    let k = ShardKeys::new(s.client.placement(), home, c.sku);
    let mut conn = s.redis.connection();
    // Two holds a crashed gateway left: seq 1 has its claim (already written by claim.lua
    // under seq 1), seq 9 never took anything. Both expired long ago.
    let _: i64 = redis::cmd("HSET")
        .arg(k.holds())
        .arg("gina|1")
        .arg("1|1000")
        .query(&mut conn)
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg(k.holds())
        .arg("gina|9")
        .arg("1|1000")
        .query(&mut conn)
        .unwrap();
    let _: i64 = redis::cmd("HINCRBY")
        .arg(k.users())
        .arg("gina")
        .arg(2)
        .query(&mut conn)
        .unwrap();
    assert_eq!(s.client.user_count(c.sku, 1, "gina").await.unwrap(), 3);

    // Before the consumer runs, the seq-1 claim is only in the stream: still found.
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.stale_holds, 2);
    assert_eq!(r.drift, 0, "{r:?}");
    // Keep left the count, undo took its unit back.
    assert_eq!(s.client.user_count(c.sku, 1, "gina").await.unwrap(), 2);
    assert!(s.client.holds(c.sku, home).await.unwrap().is_empty());
}
