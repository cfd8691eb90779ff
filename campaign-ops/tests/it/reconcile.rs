//! Reconciliation reports drift injected by hand, stores it, exports it, and resolves
//! stale holds against the ledger.

use std::time::Duration;

use crate::common::*;
use shard_router::keys::ShardKeys;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_reports_a_slice_changed_by_hand() {
    let prom = campaign_ops::metrics::install().expect("recorder");
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
    let hold = format!("1|1000:{}|", shard_gen(&s.client, &k).await);
    let _: i64 = redis::cmd("HSET")
        .arg(k.holds())
        .arg("gina|1")
        .arg(&hold)
        .query(&mut conn)
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg(k.holds())
        .arg("gina|9")
        .arg(&hold)
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

/// A committed sale: `n` claims of 1 unit on a width-2 campaign, all in the ledger.
async fn sold(s: &Stack, sku: u64, stock: u64, n: usize) -> campaign_ops::campaign::Campaign {
    let c = campaign(s, sku, stock, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let ids = claim_all(&s.client, &c, users("d", n), 4).await;
    assert_eq!(ids.len(), n);
    wait_drained(s, c.sku, n as i64, Duration::from_secs(20)).await;
    consumer.stop().await;
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_lowered_by_hand_is_reported_exactly_and_never_refilled() {
    let s = Stack::start().await;
    let c = sold(&s, 9003, 20, 6).await;
    let shard = s.client.placement().shards_of(c.sku, 2)[0];
    let key = ShardKeys::new(s.client.placement(), shard, c.sku).stock();
    let mut conn = s.redis.connection();
    let before: i64 = redis::cmd("DECRBY")
        .arg(&key)
        .arg(2)
        .query(&mut conn)
        .unwrap();
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.excess_removed), (-2, 0), "{r:#?}");
    let want = format!("shard {shard}: slice {before} + in flight 0");
    assert!(
        r.details
            .iter()
            .any(|d| d.starts_with(&want) && d.ends_with("missing 2 unit(s)")),
        "{:#?}",
        r.details
    );
    // Missing units are never put back: the next run says the same.
    assert_eq!(s.reconcile(c.sku).await.drift, -2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_ledger_row_is_reported_exactly() {
    let s = Stack::start().await;
    let c = sold(&s, 9004, 20, 6).await;
    sqlx::query("DELETE FROM claims WHERE sku = ? ORDER BY claim_id LIMIT 1")
        .bind(c.sku)
        .execute(&s.pool)
        .await
        .unwrap();
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.excess_removed), (-1, 0), "{r:#?}");
    assert!(
        r.details
            .iter()
            .any(|d| d.contains("ledger: sku_stock counts 6 unit(s) as held, claim rows hold 5")),
        "{:#?}",
        r.details
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_slice_is_its_own_figure_never_zero() {
    let prom = campaign_ops::metrics::install().expect("recorder");
    let s = Stack::start().await;
    let c = sold(&s, 9005, 20, 6).await;
    let shard = s.client.placement().shards_of(c.sku, 2)[1];
    let key = ShardKeys::new(s.client.placement(), shard, c.sku).stock();
    let mut conn = s.redis.connection();
    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.missing_slices, vec![shard], "{r:#?}");
    // The other shard still closes on its own; the missing one is not counted as 0.
    assert_eq!((r.drift, r.shards.len()), (0, 1), "{r:#?}");
    assert!(r
        .details
        .iter()
        .any(|d| d.contains(&format!("shard {shard}: slice missing"))));
    let text = prom.render();
    assert!(
        text.contains("flashgate_reconcile_missing_slices{sku=\"9005\"} 1"),
        "{text}"
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'missing_slice' AND sku = 9005")
            .await,
        1
    );
}

/// Redis lost writes (a rollback gave sold units back to a slice): two reconcilers that
/// measure at once take the excess out once, record it, and the next run closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excess_is_removed_once_by_concurrent_reconcilers() {
    let s = Stack::start().await;
    let c = sold(&s, 9006, 20, 6).await;
    let shard = s.client.placement().shards_of(c.sku, 2)[0];
    let key = ShardKeys::new(s.client.placement(), shard, c.sku).stock();
    let mut conn = s.redis.connection();
    let slice: i64 = redis::cmd("INCRBY")
        .arg(&key)
        .arg(3)
        .query(&mut conn)
        .unwrap();
    let (a, b) = tokio::join!(s.reconcile(c.sku), s.reconcile(c.sku));
    assert_eq!(a.excess_removed + b.excess_removed, 3, "{a:#?} {b:#?}");
    let now: i64 = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    assert_eq!(now, slice - 3);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'excess_removed' AND sku = 9006")
            .await,
        1
    );
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.excess_removed), (0, 0), "{r:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_runs_keep_a_bounded_history() {
    let s = Stack::start().await;
    let c = campaign(&s, 9007, 4, 1, 1, 3600).await;
    let opts = campaign_ops::reconcile::Options {
        keep_runs: 3,
        ..Default::default()
    };
    for _ in 0..5 {
        campaign_ops::reconcile::run_with(
            &s.pool,
            &s.client,
            c.sku,
            shard_router::now_ms(),
            T,
            opts,
        )
        .await
        .unwrap();
    }
    assert_eq!(
        s.count("SELECT COUNT(*) FROM reconcile_runs WHERE sku = 9007")
            .await,
        3
    );
}

/// Two reconcilers (the service's timer and an operator, or two consumers) store their runs
/// at once. Trimming the history used to range-lock the SKU's runs, and a concurrent insert
/// into that range deadlocked (MySQL 1213), failing a reconciliation under load in CI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reconcilers_store_their_runs_without_deadlock() {
    let s = Stack::start().await;
    let c = campaign(&s, 9009, 4, 1, 1, 3600).await;
    let opts = campaign_ops::reconcile::Options {
        keep_runs: 2,
        ..Default::default()
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (pool, client) = (s.pool.clone(), s.client.clone());
        tasks.spawn(async move {
            for _ in 0..40 {
                campaign_ops::reconcile::run_with(
                    &pool,
                    &client,
                    9009,
                    shard_router::now_ms(),
                    T,
                    opts,
                )
                .await
                .expect("reconcile");
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("reconciler");
    }
    let kept = s
        .count("SELECT COUNT(*) FROM reconcile_runs WHERE sku = 9009")
        .await;
    assert!((2..=5).contains(&kept), "kept {kept} runs");
    let _ = c;
}

/// The anomaly row comes before the removal: when it cannot be written, nothing is removed,
/// and the next run (MySQL back) removes the excess with its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excess_is_never_removed_without_its_anomaly_row() {
    let s = Stack::start().await;
    let c = sold(&s, 9008, 20, 4).await;
    let shard = s.client.placement().shards_of(c.sku, 2)[0];
    let key = ShardKeys::new(s.client.placement(), shard, c.sku).stock();
    let mut conn = s.redis.connection();
    let slice: i64 = redis::cmd("INCRBY")
        .arg(&key)
        .arg(2)
        .query(&mut conn)
        .unwrap();
    sqlx::query("RENAME TABLE anomalies TO anomalies_away")
        .execute(&s.pool)
        .await
        .unwrap();
    let failed = campaign_ops::reconcile::run(&s.pool, &s.client, c.sku, 0, T).await;
    assert!(failed.is_err(), "{failed:?}");
    let now: i64 = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    assert_eq!(now, slice, "removed without a record");
    sqlx::query("RENAME TABLE anomalies_away TO anomalies")
        .execute(&s.pool)
        .await
        .unwrap();
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.excess_removed, 2, "{r:#?}");
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'excess_removed' AND sku = 9008")
            .await,
        1
    );
}
