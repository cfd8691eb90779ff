//! Drill `reroute_none_failover` (docs/DESIGN.md): durability `none`, a claim rerouted
//! (its home shard empty: hold on the home, take on another master's shard, settle keep on
//! the home), answered 201; then the home master fails over before any of its writes
//! reached the replica. The promoted home has neither the hold, nor the user's count, nor
//! the stored answer, while the take's record lives on the other master. The client
//! retries with the same request id. Required: never a second 201 for that request id,
//! never the user over the limit; the retry gets its first claim back once the consumer
//! rebuilt the home shard from the ledger and the streams.

use std::time::{Duration, Instant};

use campaign_ops::service;
use consumer::Config;
use shard_router::protocol::{self, LocalEmptyShards};
use shard_router::test_util::{drain, split_sku};
use shard_router::{now_ms, ClaimOutcome, ClaimRequest, RedisTarget, StockClient, StockError};
use test_support::mariadb::TestDatabase;
use test_support::RedisCluster;

use super::durability::cut_replicas;
use super::older_snapshot::wait_vouched;
use super::redis_loss::{ledger, open_campaign, put_and_preheat, wait_reading};

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerouted_claim_whose_home_fails_over_is_claimed_once() {
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
    let sku = split_sku(&client, 13_500, |slot| cluster.master_of(slot));
    let c = open_campaign(sku, "reroute_none drill", 10, 2, 1);
    let meta = put_and_preheat(&pool, &client, &c, cfg.shards).await;
    let (stop, rx) = consumer::signal::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    wait_reading(&pool).await;
    let shards = client.placement().shards_of(sku, 2);
    let home = shards[0];
    drain(&client, &meta, home).await;
    wait_vouched(&client, &meta).await;
    let home_slot = shard_router::placement::slot_of_tag(client.placement().tag(home));
    let (home_master, home_replica) = cluster.master_and_replica(home_slot);

    // The home's replica gets nothing from now on.
    cluster.nodes()[home_replica].signal("STOP");
    cut_replicas(&cluster.nodes()[home_master]);
    let user = (0..)
        .map(|n| format!("victim{n}"))
        .find(|u| client.placement().home_shard(sku, 2, u) == home)
        .unwrap();
    let req = ClaimRequest {
        sku,
        user: user.clone(),
        qty: 1,
        request_id: Some("once".into()),
    };
    let empties = LocalEmptyShards::default();
    let first = match protocol::claim(&client, &meta, &req, &empties, now_ms()).await {
        Ok(ClaimOutcome::Claimed {
            claim,
            rerouted: true,
        }) => claim,
        other => panic!("expected a rerouted claim: {other:?}"),
    };

    // The home master dies before replicating the hold, the count or the answer.
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

    let (mut again, mut replayed, mut mismatch, mut restoring, mut other) = (0, false, 0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(40);
    while !replayed && Instant::now() < deadline {
        match protocol::claim(&gateway, &meta, &req, &empties, now_ms()).await {
            Ok(ClaimOutcome::Claimed { .. }) => again += 1,
            Ok(ClaimOutcome::Replay(c)) if c.claim_id == first.claim_id => replayed = true,
            Ok(ClaimOutcome::Replay(_)) => mismatch += 1,
            Err(StockError::Restoring { .. }) => restoring += 1,
            _ => other += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Whatever was taken reaches the ledger.
    let deadline = Instant::now() + T;
    let held = loop {
        let rows = ledger(&pool, sku).await;
        let held = rows.values().filter(|(r, _)| r.user == user).count();
        if held > usize::from(again > 0) || Instant::now() > deadline {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = stop.send(true);
    let _ = service.await;
    println!(
        "drill=reroute_none_failover acknowledged={} second_201={again} replay_mismatch={mismatch} \
         winner_replayed={replayed} restoring={restoring} other={other} ledger_rows_of_user={held}",
        1 + again
    );
    assert_eq!(again, 0, "a second 201 for one request id");
    assert_eq!(mismatch, 0, "the retry replayed another claim");
    assert!(replayed, "the retry never got its first claim back");
    assert!(held <= 1, "the user holds {held} units over a limit of 1");
}
