//! Reconciliation is exact while a sale runs at full speed: claims (with holds and second
//! chances as slices empty), payment-timeout releases, cancels, confirms and stock waves run
//! concurrently with 100 reconciliations from two reconcilers at once, and every one of them
//! must report drift 0, no missing slice and no excess removed. Sized for 2 cores; longer:
//! `FG_RECONCILE_RUNS=1000 cargo test -p campaign-ops --test it reconcile_load:: -- --test-threads=1`.
//! Fails on the old five-reads measurement (it reported −1270 … −4666 under wrk load).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use campaign_ops::reconcile::{Options, Report};
use campaign_ops::Config;
use campaign_ops::{release, wave};
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::{ClaimOutcome, ClaimRequest, StockClient};
use sqlx::MySqlPool;
use tokio::task::JoinSet;

#[derive(Debug, Default)]
struct Counts {
    claimed: AtomicU64,
    rerouted: AtomicU64,
    sold_out: AtomicU64,
    cancelled: AtomicU64,
    confirmed: AtomicU64,
    waves: AtomicU64,
}

fn runs() -> usize {
    std::env::var("FG_RECONCILE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// Drives the sale on `sku` until the reconcilers are done; returns every report.
async fn sale_with_reconciliations(
    _cfg: &Config,
    client: &StockClient,
    pool: &MySqlPool,
    c: &campaign_ops::campaign::Campaign,
    page: usize,
) -> (Vec<Report>, Arc<Counts>) {
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut load = JoinSet::new();
    let meta = Arc::new(campaign_ops::sku::meta(c));
    for worker in 0..6u64 {
        let (client, meta, stop, counts, tx) = (
            client.clone(),
            meta.clone(),
            stop.clone(),
            counts.clone(),
            tx.clone(),
        );
        load.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let req = ClaimRequest {
                    sku: meta.sku,
                    user: format!("u{}", (n * 7 + worker * 131) % 600),
                    qty: 1 + (n % 2) as u32,
                    request_id: Some(format!("w{worker}-{n}")),
                };
                // No Pub/Sub here: a fresh view per claim, so every claim asks Redis.
                let empties = LocalEmptyShards::default();
                match protocol::claim(
                    &client,
                    &meta,
                    &req,
                    ClaimOptions::new(&empties, shard_router::now_ms()),
                )
                .await
                .map(|a| a.outcome)
                {
                    Ok(ClaimOutcome::Claimed { claim, rerouted }) => {
                        counts.claimed.fetch_add(1, Ordering::Relaxed);
                        if rerouted {
                            counts.rerouted.fetch_add(1, Ordering::Relaxed);
                        }
                        let _ = tx.send(claim.claim_id);
                    }
                    Ok(ClaimOutcome::SoldOut) => {
                        counts.sold_out.fetch_add(1, Ordering::Relaxed);
                        // Let releases refill the slices (and the cache forget "empty").
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Ok(_) => {}
                    Err(e) => panic!("claim: {e}"),
                }
            }
        });
    }
    drop(tx);
    // Cancels and confirms of claims once the consumer committed them (the rest are
    // released by the payment timeout sweep of the running consumer).
    for _ in 0..2 {
        let (client, pool, stop, counts, rx) = (
            client.clone(),
            pool.clone(),
            stop.clone(),
            counts.clone(),
            rx.clone(),
        );
        load.spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let Some(id) = rx.lock().await.recv().await else {
                    break;
                };
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                if i.is_multiple_of(3) {
                    if release::release(&pool, &client, &id, release::Reason::Cancelled, T)
                        .await
                        .is_ok()
                    {
                        counts.cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                } else if i % 3 == 1 && release::confirm(&pool, &id, T).await.is_ok() {
                    counts.confirmed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    {
        let (client, pool, stop, counts, sku) = (
            client.clone(),
            pool.clone(),
            stop.clone(),
            counts.clone(),
            c.sku,
        );
        load.spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let w = wave::Wave {
                    sku,
                    id: format!("load-{n}"),
                    units: 7,
                    // Applied here; due later so the consumer's wave loop leaves it alone.
                    due_ms: shard_router::now_ms() + 3_600_000,
                };
                wave::schedule(&pool, &w, T).await.expect("schedule wave");
                wave::apply(&pool, &client, sku, &w.id, shard_router::now_ms(), T)
                    .await
                    .expect("apply wave");
                counts.waves.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        });
    }

    // Let the sale reach its steady state: slices emptying, refilling, reroutes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut reconcilers = JoinSet::new();
    let total = runs();
    for r in 0..2 {
        let (client, pool, sku) = (client.clone(), pool.clone(), c.sku);
        reconcilers.spawn(async move {
            let mut out = Vec::new();
            for _ in 0..total / 2 + (total % 2) * (1 - r) {
                let opts = Options {
                    page,
                    ..Default::default()
                };
                let rep = campaign_ops::reconcile::run_with(
                    &pool,
                    &client,
                    sku,
                    shard_router::now_ms(),
                    T,
                    opts,
                )
                .await
                .expect("reconcile");
                out.push(rep);
            }
            out
        });
    }
    let mut reports = Vec::new();
    while let Some(r) = reconcilers.join_next().await {
        reports.extend(r.expect("reconciler"));
    }
    stop.store(true, Ordering::Relaxed);
    while load.join_next().await.is_some() {}
    (reports, counts)
}

fn check(reports: &[Report], counts: &Counts) {
    let drifts: Vec<i64> = reports.iter().map(|r| r.drift).collect();
    let in_flight: Vec<i64> = reports.iter().map(|r| r.in_flight).collect();
    eprintln!(
        "reconciliations={} drifts(min,max)=({:?},{:?}) in_flight(max)={:?} counts={counts:?}",
        reports.len(),
        drifts.iter().min(),
        drifts.iter().max(),
        in_flight.iter().max()
    );
    assert_eq!(reports.len(), runs());
    for r in reports {
        assert_eq!(
            (r.drift, r.missing_slices.len(), r.excess_removed),
            (0, 0, 0),
            "{r:#?}"
        );
    }
    // The load really ran through every path while the reconciliations ran.
    for (what, n) in [
        ("claims", &counts.claimed),
        ("sold-out answers", &counts.sold_out),
        ("cancels", &counts.cancelled),
        ("confirms", &counts.confirmed),
        ("waves", &counts.waves),
    ] {
        assert!(n.load(Ordering::Relaxed) > 0, "no {what}: {counts:?}");
    }
    assert!(
        reports.iter().any(|r| r.in_flight > 0),
        "no reconciliation saw claims in flight"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_zero_in_every_reconciliation_under_load_on_single_redis() {
    let s = Stack::start().await;
    // Small stock and a 1 s payment timeout: slices empty and refill all the time.
    let c = campaign(&s, 9101, 300, SHARDS, 4, 1).await;
    let consumer = start_consumer(s.cfg.clone());
    let (reports, counts) = sale_with_reconciliations(
        &s.cfg,
        &s.client,
        &s.pool,
        &c,
        campaign_ops::reconcile::DEFAULT_PAGE,
    )
    .await;
    consumer.stop().await;
    check(&reports, &counts);
    assert!(counts.rerouted.load(Ordering::Relaxed) > 0, "{counts:?}");
    let last = s.reconcile(c.sku).await;
    assert_eq!(last.drift, 0, "{last:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_zero_in_every_reconciliation_under_load_on_a_cluster() {
    let s = ClusterStack::start(0).await;
    let c = open_campaign(&s.pool, &s.client, 9102, 300, SHARDS, 4, 1).await;
    let consumer = start_consumer(s.cfg.clone());
    let (reports, counts) = sale_with_reconciliations(
        &s.cfg,
        &s.client,
        &s.pool,
        &c,
        campaign_ops::reconcile::DEFAULT_PAGE,
    )
    .await;
    consumer.stop().await;
    check(&reports, &counts);
}

/// Pages of 8: every snapshot spans many Redis calls while claims, commits, releases,
/// and waves move between them, and still closes exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_zero_under_load_when_every_snapshot_spans_many_pages() {
    let s = Stack::start().await;
    let c = campaign(&s, 9103, 300, SHARDS, 4, 1).await;
    let consumer = start_consumer(s.cfg.clone());
    let (reports, counts) = sale_with_reconciliations(&s.cfg, &s.client, &s.pool, &c, 8).await;
    consumer.stop().await;
    check(&reports, &counts);
}
