//! Review of the vouch fence: a promoted replica whose own replica is gone (the
//! old master's host is dead) is never vouched for under the default `--replica-wait auto`:
//! the watch's rebuild cannot be confirmed (a promoted replica has a backlog, so `auto`
//! wants a replica) and fails every round, so the shard answers 503 `restoring` until an
//! operator attaches a new replica.
//!
//! Simulated on one process: a master with a replica (so it has a backlog), the replica
//! killed, and the shard's vouch rewritten to another run_id: exactly what a promoted
//! replica sees (the old master's vouch, a backlog, no replica online).

use std::time::{Duration, Instant};

use campaign_ops::service;
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::{now_ms, ClaimOutcome, StockClient, StockError};
use test_support::mariadb::TestDatabase;
use test_support::RedisServer;

use super::redis_loss::{config, open_campaign, put_and_preheat, wait_reading};

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_without_a_replica_is_vouched_for() {
    promoted_replica(None).await
}

/// Control: the same with `--replica-wait off` passes (the shard is vouched within a round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_with_replica_wait_off() {
    promoted_replica(Some(consumer::replica::ReplicaWait::Off)).await
}

async fn promoted_replica(wait: Option<consumer::replica::ReplicaWait>) {
    let m = RedisServer::start();
    let mut r = RedisServer::start_replica_of(&m);
    let db = TestDatabase::create();
    let mut cfg = config(&m.url(), &db.url());
    if let Some(w) = wait {
        cfg.datapath.replica_wait = w;
    }
    let client = StockClient::connect(cfg.datapath.stock())
        .await
        .expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("db");
    ledger::pool::migrate(&pool).await.expect("migrate");
    let c = open_campaign(1_401, "review: promoted replica", 10, 1, 1);
    let meta = put_and_preheat(&pool, &client, &c, cfg.datapath.shards).await;
    let shard = client.placement().shards_of(c.sku, 1)[0];
    let (stop, rx) = plumbing::shutdown::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    wait_reading(&pool).await;
    let empties = LocalEmptyShards::default();
    let req = |u: &str| shard_router::ClaimRequest {
        sku: c.sku,
        user: u.to_owned(),
        qty: 1,
        request_id: Some(format!("rid-{u}")),
    };
    match protocol::claim(
        &client,
        &meta,
        &req("u0"),
        ClaimOptions::new(&empties, now_ms()),
    )
    .await
    .map(|a| a.outcome)
    {
        Ok(ClaimOutcome::Claimed { .. }) => {}
        other => panic!("claim before the failover: {other:?}"),
    }

    // "Failover": the only replica is gone, and the vouch names the old master.
    r.kill();
    let _: () = redis::cmd("SET")
        .arg(shard_router::keys::vouch(client.placement(), shard))
        .arg("00000000000000000000000000000000deadbeef")
        .query(&mut m.connection())
        .unwrap();
    let gen_before = ledger::rebuild::rebuild_gen(&pool, c.sku, T).await.unwrap();

    // The sale should resume within a few watch rounds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut restoring, mut sold, mut other) = (0, 0, 0);
    let mut i = 0;
    while sold == 0 && Instant::now() < deadline {
        i += 1;
        match protocol::claim(
            &client,
            &meta,
            &req(&format!("n{i}")),
            ClaimOptions::new(&empties, now_ms()),
        )
        .await
        .map(|a| a.outcome)
        {
            Ok(ClaimOutcome::Claimed { .. }) => sold += 1,
            Err(StockError::Restoring { .. }) => restoring += 1,
            _ => other += 1,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gen_after = ledger::rebuild::rebuild_gen(&pool, c.sku, T).await.unwrap();
    let _ = stop.send(true);
    let _ = service.await;
    println!(
        "sold={sold} restoring={restoring} other={other} rebuild_gen {gen_before} -> {gen_after}"
    );
    assert!(
        sold > 0,
        "the shard never sold again in 20 s: restoring={restoring} other={other}, \
         rebuilds run meanwhile: {}",
        gen_after - gen_before
    );
}
