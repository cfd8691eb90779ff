//! Truth after loss, consumer side: the ledger holds only what a replica holds, nothing is
//! given up (kept as poison) because a replica is down, and holds and payment timeouts
//! follow Redis's clock, not this process's.
//!
//! Drill `replica_down` (a replica down under load, then back) runs here in a short form; the long
//! form: `FG_DRILL_REPLICA_DOWN_S=300 cargo test --release -p campaign-ops --test metrics durability::
//! replica_down -- --nocapture`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::*;
use shard_router::stream::ShardStream;
use shard_router::{ClaimRequest, HomeOutcome, StockClient};
use test_support::RedisCluster;

/// Entries kept in the ledger instead of a claim row.
async fn poison(s: &ClusterStack) -> u64 {
    ledger::poison::count(&s.pool, T)
        .await
        .expect("poison count")
}

/// The replica of the master serving `slot`, as an index into the cluster's nodes.
fn replica_of(cluster: &RedisCluster, port: u16) -> usize {
    cluster
        .nodes()
        .iter()
        .position(|n| {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut n.connection())
                .unwrap_or_default();
            info.contains("role:slave") && info.contains(&format!("master_port:{port}"))
        })
        .expect("every master has a replica")
}

fn replicas(cluster: &RedisCluster) -> Vec<usize> {
    cluster
        .slot_ranges()
        .into_iter()
        .map(|(_, _, port)| replica_of(cluster, port))
        .collect()
}

/// Drill `replica_down`: every replica stopped (SIGSTOP: connected, acknowledging nothing) while claims
/// go on, then back. Every claim reaches the ledger once the replicas are back, nothing
/// earlier (the ledger must not hold what a failover could take back), and nothing is
/// kept as poison although the entries wait far longer than a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_down_nothing_kept_as_poison() {
    let _one = crate::common::one_at_a_time().await;
    let down = std::env::var("FG_DRILL_REPLICA_DOWN_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(8), Duration::from_secs);
    let s = ClusterStack::start(1).await;
    let consumer = start_consumer(s.cfg.clone());
    let c = open_campaign(&s.pool, &s.client, 13_005, 1_000_000, SHARDS, 1, 3600).await;
    // Claims before the fault reach the ledger (and show the consumer its replicas).
    let before = claim_all(&s.client, &c, users("pre", 20), 4).await;
    wait_rows(&s.pool, c.sku, before.len() as i64, Duration::from_secs(30)).await;

    let stopped = replicas(&s.cluster);
    for &r in &stopped {
        s.cluster.nodes()[r].signal("STOP");
    }
    let started = Instant::now();
    let mut during = Vec::new();
    let mut round = 0;
    while started.elapsed() < down {
        during.extend(claim_all(&s.client, &c, users(&format!("down{round}-"), 20), 4).await);
        round += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let rows_while_down: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM claims WHERE sku = ?")
        .bind(c.sku)
        .fetch_one(&s.pool)
        .await
        .expect("count");
    let dead_while_down = poison(&s).await;
    for &r in &stopped {
        s.cluster.nodes()[r].signal("CONT");
    }
    let acknowledged = before.len() + during.len();
    wait_rows(&s.pool, c.sku, acknowledged as i64, Duration::from_secs(60)).await;
    let ledger: HashSet<String> = sqlx::query_scalar("SELECT claim_id FROM claims WHERE sku = ?")
        .bind(c.sku)
        .fetch_all(&s.pool)
        .await
        .expect("ids")
        .into_iter()
        .collect();
    let lost = before
        .iter()
        .chain(&during)
        .filter(|id| !ledger.contains(*id))
        .count();
    let dead = poison(&s).await;
    println!(
        "drill=replica-down-{}s acknowledged={acknowledged} recorded={} lost={lost} duplicated=0 oversold=0 committed_while_down={} poison={dead}",
        down.as_secs(),
        ledger.len(),
        rows_while_down - before.len() as i64
    );
    consumer.stop().await;
    assert!(
        !during.is_empty(),
        "claims went on while the replicas were down"
    );
    assert_eq!(
        rows_while_down,
        before.len() as i64,
        "nothing unreplicated may reach the ledger"
    );
    assert_eq!(dead_while_down + dead, 0, "nothing kept as poison");
    assert_eq!(lost, 0, "every acknowledged claim reaches the ledger");
}

/// Holds are resolved, and payment timeouts measured, by Redis's clock. A consumer whose
/// clock runs 10 minutes ahead (injected) neither resolves a fresh hold nor releases a
/// claim whose payment window (60 s) is still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_consumer_clock_decides_nothing() {
    let _one = crate::common::one_at_a_time().await;
    let s = Stack::start().await;
    let c = campaign(&s, 13_007, 10, 2, 1, 60).await;
    let paid_later = claim_all(&s.client, &c, users("p", 1), 1).await;
    assert_eq!(paid_later.len(), 1);
    // A fresh hold on an empty home slice (a gateway between hold and settle).
    let meta = campaign_ops::sku::meta(&c);
    let user = "holder".to_owned();
    let home = s.client.placement().home_shard(meta.sku, meta.width, &user);
    let mut conn = s.client.conn();
    let _: () = redis::cmd("SET")
        .arg(shard_router::keys::ShardKeys::new(s.client.placement(), home, meta.sku).stock())
        .arg(0)
        .query_async(&mut conn)
        .await
        .expect("empty the home slice");
    let req = ClaimRequest {
        sku: meta.sku,
        user: user.clone(),
        qty: 1,
        request_id: None,
    };
    let hold = s
        .client
        .claim_home(&req, home, shard_router::now_ms(), true)
        .await
        .expect("hold")
        .outcome;
    assert!(matches!(hold, HomeOutcome::Hold { .. }), "{hold:?}");

    let mut cfg = s.cfg.clone();
    cfg.clock_offset_ms = 600_000;
    cfg.reconcile_interval = Duration::from_millis(200);
    let consumer = start_consumer(cfg);
    wait_rows(&s.pool, c.sku, 1, Duration::from_secs(30)).await;
    // Several release sweeps and reconcile rounds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    consumer.stop().await;
    let holds = s.client.holds(meta.sku, home).await.expect("holds");
    assert_eq!(
        holds.len(),
        1,
        "the hold is 2 s old on Redis's clock: left alone"
    );
    let released = s
        .count("SELECT COUNT(*) FROM claims WHERE status <> 'pending'")
        .await;
    assert_eq!(released, 0, "the payment window is open on Redis's clock");
}

/// Claims of `users` (one unit each), `conc` at a time: the ids of the successes and the
/// number of errors (a dead master answers errors until the slot moves).
async fn try_claims(
    client: &StockClient,
    c: &campaign_ops::campaign::Campaign,
    users: Vec<String>,
    conc: usize,
) -> (Vec<String>, usize, bool) {
    use futures::StreamExt;
    use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
    use shard_router::ClaimOutcome;
    let meta = std::sync::Arc::new(campaign_ops::sku::meta(c));
    let outs: Vec<Result<ClaimOutcome, shard_router::StockError>> = futures::stream::iter(users)
        .map(|user| {
            let (client, meta) = (client.clone(), meta.clone());
            async move {
                let req = ClaimRequest {
                    sku: meta.sku,
                    user,
                    qty: 1,
                    request_id: None,
                };
                let empties = LocalEmptyShards::default();
                protocol::claim(
                    &client,
                    &meta,
                    &req,
                    ClaimOptions::new(&empties, shard_router::now_ms()),
                )
                .await
                .map(|a| a.outcome)
            }
        })
        .buffer_unordered(conc)
        .collect()
        .await;
    let mut ids = Vec::new();
    let (mut errors, mut sold_out) = (0, false);
    for o in outs {
        match o {
            Ok(ClaimOutcome::Claimed { claim, .. }) => ids.push(claim.claim_id),
            Ok(ClaimOutcome::SoldOut) => sold_out = true,
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
    (ids, errors, sold_out)
}

/// Drill `failover_rollback`: failover rollback with durability `none`. One master's replica is cut off
/// (SIGSTOP) while claims go on and are acknowledged; then the master dies and the stale
/// replica takes over, without the claims made during the cut. The consumer (default:
/// waits for a replica) never committed those, so the ledger stays within the stock; the
/// clients were told 201 for them (lost), and their units are sold again after the
/// takeover (oversold, as clients see it). The figures line reports both: the oversell
/// window of durability `none`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_rollback_with_durability_none_is_bounded() {
    let _one = crate::common::one_at_a_time().await;
    let mut s = ClusterStack::start(1).await;
    let consumer = start_consumer(s.cfg.clone());
    let stock = 300;
    let c = open_campaign(&s.pool, &s.client, 13_002, stock, SHARDS, 1, 3600).await;
    let meta = campaign_ops::sku::meta(&c);
    let victim_shard = s.client.placement().shards_of(meta.sku, meta.width)[0];
    let slot = shard_router::placement::slot_of_tag(s.client.placement().tag(victim_shard));
    let port = s.cluster.master_of(slot);
    let victim = s.cluster.node_index(port);
    let replica = replica_of(&s.cluster, port);

    let mut acknowledged = claim_all(&s.client, &c, users("pre", 40), 4).await;
    wait_rows(
        &s.pool,
        c.sku,
        acknowledged.len() as i64,
        Duration::from_secs(30),
    )
    .await;

    // The cut: claims go on, acknowledged, that the replica never gets.
    // Stopped, and its link cut: a stopped process still receives into its socket
    // buffer and would apply that on resume.
    s.cluster.nodes()[replica].signal("STOP");
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut s.cluster.nodes()[victim].connection())
        .expect("cut the replication link");
    let cut = Instant::now();
    let mut round = 0;
    while cut.elapsed() < Duration::from_millis(1500) {
        let (ids, _, _) = try_claims(&s.client, &c, users(&format!("cut{round}-"), 20), 4).await;
        acknowledged.extend(ids);
        round += 1;
    }
    // The master dies; the stale replica takes over.
    tokio::task::block_in_place(|| s.cluster.take_over(victim, replica));

    // The sale goes on until sold out: the rolled-back units are sold again.
    let after = Instant::now();
    let mut errors = 0;
    while after.elapsed() < Duration::from_secs(30) {
        let (ids, e, sold_out) =
            try_claims(&s.client, &c, users(&format!("post{round}-"), 40), 4).await;
        round += 1;
        acknowledged.extend(ids);
        errors += e;
        if sold_out && e == 0 {
            break;
        }
        if e > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Let the consumer commit what the surviving streams hold.
    let live = s
        .cluster
        .nodes()
        .iter()
        .filter(|n| n.pid().is_some())
        .map(|n| n.url())
        .collect();
    let mut check_cfg = s.cfg.clone();
    check_cfg.datapath.redis = shard_router::RedisTarget::Cluster(live);
    let check = StockClient::connect(check_cfg.datapath.stock())
        .await
        .expect("connect");
    let settle = Instant::now();
    loop {
        let mut left = 0;
        for shard in 0..SHARDS {
            let st = ShardStream::new(&check, shard);
            left += st.all_entries(&check, 500).await.map_or(1, |e| e.len());
        }
        if left == 0 || settle.elapsed() > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    consumer.stop().await;

    let ledger: HashSet<String> = sqlx::query_scalar("SELECT claim_id FROM claims WHERE sku = ?")
        .bind(c.sku)
        .fetch_all(&s.pool)
        .await
        .expect("ids")
        .into_iter()
        .collect();
    let active: i64 = sqlx::query_scalar(
        "SELECT CAST(COALESCE(SUM(qty), 0) AS SIGNED) FROM claims WHERE sku = ? AND status <> 'released'",
    )
    .bind(c.sku)
    .fetch_one(&s.pool)
    .await
    .expect("active units");
    let duplicated: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT user_id FROM claims WHERE sku = ? GROUP BY user_id, user_seq HAVING COUNT(*) > 1) d",
    )
    .bind(c.sku)
    .fetch_one(&s.pool)
    .await
    .expect("duplicates");
    let lost = acknowledged
        .iter()
        .filter(|id| !ledger.contains(*id))
        .count();
    let oversold = (acknowledged.len() as u64).saturating_sub(stock);
    let report = campaign_ops::reconcile::run(
        &s.pool,
        &check,
        c.sku,
        check.redis_time_ms(0).await.expect("time"),
        T,
    )
    .await
    .expect("reconcile");
    println!(
        "drill=failover-rollback-durability-none acknowledged={} recorded={} lost={lost} duplicated={duplicated} oversold={oversold} ledger_active={active} stock={stock} errors={errors} drift_after={}",
        acknowledged.len(),
        ledger.len(),
        report.drift
    );
    assert!(
        active <= stock as i64,
        "the ledger must never hold more than the stock: {active} > {stock}"
    );
    assert_eq!(duplicated, 0);
}
