//! Drill `hold_failover_before_keep` (docs/DRILLS.md): durability `none`, a rerouted claim
//! stalls between its take (on another master's shard) and its keep, and the home master
//! fails over meanwhile, before its replica got the hold, the user's count or the `P`
//! answer. The keep then reaches a process that never had the hold. Required: it is
//! refused there (503 `restoring`: the Redis process is not vouched for, `lua/guard.lua`),
//! never kept nor answered for another hold; the client's retry of the same request id is
//! never a second 201 and gets the first claim once the consumer rebuilt the home shard
//! from the ledger and the take's record; the user within the limit.
//!
//! What this holds to the fence: the consumer is down while the home fails over (no
//! rebuild can come first), so for the retries sent then only the guard stands between
//! the promoted replica, which has neither the answer nor the hold, and a second unit.

use std::time::{Duration, Instant};

use campaign_ops::service;
use consumer::Config;
use shard_router::protocol::{self, LocalEmptyShards};
use shard_router::test_util::{drain, split_sku};
use shard_router::{
    now_ms, Claim, ClaimOutcome, ClaimRequest, HomeOutcome, RedisTarget, Settlement, StockClient,
    StockError, TakeOutcome,
};
use test_support::mariadb::TestDatabase;
use test_support::RedisCluster;

use super::durability::cut_replicas;
use super::older_snapshot::wait_vouched;
use super::redis_loss::{ledger, open_campaign, put_and_preheat, wait_reading};

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_after_its_home_failed_over_is_refused_and_the_retry_replays() {
    let mut cluster = RedisCluster::start(3, 1);
    let db = TestDatabase::create();
    let mut cfg = Config::new(RedisTarget::Cluster(cluster.urls()), 16, db.url());
    cfg.read_block = Duration::from_millis(200);
    cfg.lease = Duration::from_millis(1500);
    cfg.reconcile_interval = Duration::from_secs(3600);
    cfg.backoff_max = Duration::from_millis(500);
    let client = StockClient::connect(cfg.stock()).await.expect("redis");
    let pool = ledger::pool::connect(&cfg.mysql_url, T).await.expect("db");
    ledger::pool::migrate(&pool).await.expect("migrate");
    let sku = split_sku(&client, 13_600, |slot| cluster.master_of(slot));
    let c = open_campaign(sku, "hold_failover drill", 10, 2, 1);
    let meta = put_and_preheat(&pool, &client, &c, cfg.shards).await;
    let (stop, rx) = consumer::signal::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    wait_reading(&pool).await;
    let shards = client.placement().shards_of(sku, 2);
    let (home, other) = (shards[0], shards[1]);
    drain(&client, &meta, home).await;
    wait_vouched(&client, &meta).await;
    let home_slot = shard_router::placement::slot_of_tag(client.placement().tag(home));
    let (home_master, home_replica) = cluster.master_and_replica(home_slot);

    // The home's replica gets nothing from now on: not the hold, the count or the `P`.
    cluster.nodes()[home_replica].signal("STOP");
    cut_replicas(&cluster.nodes()[home_master]);
    let user = (0..)
        .map(|n| format!("stalled{n}"))
        .find(|u| client.placement().home_shard(sku, 2, u) == home)
        .unwrap();
    let req = ClaimRequest {
        sku,
        user: user.clone(),
        qty: 1,
        request_id: Some("once".into()),
    };
    let now = now_ms();
    let HomeOutcome::Hold { user_seq, gen, .. } = client
        .claim_home(&req, home, now, true)
        .await
        .expect("hold")
    else {
        panic!("expected a hold on the drained home")
    };
    let TakeOutcome::Claimed { claim_id, .. } = client
        .take(&req, other, home, user_seq, gen, now)
        .await
        .expect("take")
    else {
        panic!("expected a take on the other shard")
    };
    let taken = Claim {
        claim_id,
        sku,
        shard: other,
        qty: 1,
    };

    // The consumer stops (a restart of it, say), then the home master dies before
    // replicating; the stalled keep arrives afterwards, and the client retries.
    let _ = stop.send(true);
    let _ = service.await;
    tokio::task::block_in_place(|| {
        cluster.take_over(home_master, home_replica);
        cluster.rejoin_as_replica(home_master);
    });
    let live: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.pid().is_some())
        .map(|n| n.url())
        .collect();
    let mut gw_cfg = shard_router::StockConfig::new(RedisTarget::Cluster(live), 16);
    gw_cfg.record_form = cfg.stock().record_form;
    let gateway = StockClient::connect(gw_cfg).await.expect("reconnect");
    let keep = Settlement::KeepOwn {
        claim: taken.clone(),
        gen,
    };
    let kept = gateway
        .settle(sku, home, &user, user_seq, Some("once"), &keep)
        .await;

    let (mut again, mut replayed, mut mismatch, mut restoring, mut other_answers) =
        (0, false, 0, 0, 0);
    let empties = LocalEmptyShards::default();
    let back = Instant::now() + Duration::from_secs(3);
    let mut service = None;
    let (stop, rx) = consumer::signal::channel();
    let mut rx = Some(rx);
    let deadline = Instant::now() + Duration::from_secs(40);
    while !replayed && Instant::now() < deadline {
        if Instant::now() > back {
            if let Some(rx) = rx.take() {
                service = Some(tokio::spawn(service::run(cfg.clone(), None, rx)));
            }
        }
        match protocol::claim(&gateway, &meta, &req, &empties, now_ms()).await {
            Ok(ClaimOutcome::Claimed { .. }) => again += 1,
            Ok(ClaimOutcome::Replay(c)) if c.claim_id == taken.claim_id => replayed = true,
            Ok(ClaimOutcome::Replay(_)) => mismatch += 1,
            Err(StockError::Restoring { .. }) => restoring += 1,
            _ => other_answers += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + T;
    let held = loop {
        let held = ledger(&pool, sku)
            .await
            .values()
            .filter(|(r, _)| r.user == user)
            .count();
        if held > usize::from(again > 0) || Instant::now() > deadline {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = stop.send(true);
    if let Some(service) = service {
        let _ = service.await;
    }
    println!(
        "drill=hold_failover_before_keep keep={kept:?} second_201={again} \
         replay_mismatch={mismatch} winner_replayed={replayed} restoring={restoring} \
         other={other_answers} ledger_rows_of_user={held}"
    );
    assert!(
        matches!(kept, Err(StockError::Restoring { .. })),
        "the keep reached a process that never had the hold and was not refused: {kept:?}"
    );
    assert_eq!(again, 0, "a second 201 for one request id");
    assert_eq!(mismatch, 0, "the retry replayed another claim");
    assert!(replayed, "the retry never got its first claim back");
    assert!(held <= 1, "the user holds {held} units over a limit of 1");
}
