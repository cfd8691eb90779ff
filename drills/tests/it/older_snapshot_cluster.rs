//! Drill `older_snapshot_cluster` (docs/DRILLS.md): `older_snapshot` on a 3-master Redis
//! Cluster with replicas. The master serving the SKU's shard and its replica both come
//! back from an older snapshot mid-sale, on their own ports and with their `nodes.conf`,
//! so the cluster takes them back as they were: the master with its slots, the replica
//! syncing the older data from it. Sell half through a real gateway, `SAVE` on the master,
//! sell the rest, wait until the ledger holds every unit, stop both nodes, put the older
//! RDB in place for both, start them. The consumer keeps running; new users, a holder of
//! the limit and every winner retrying its own request id keep claiming through the
//! gateway. Required: nothing acknowledged beyond the stock, nobody over the limit, and
//! every retry of a ledger-held claim answered 200 with its first claim id (503 while the
//! shard is restored, never another claim).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use campaign_ops::service;
use shard_router::placement::slot_of_tag;
use shard_router::{Claim, StockClient};
use test_support::mariadb::TestDatabase;
use test_support::RedisCluster;

use super::cluster_sale::{claim, consumer_config, gateway, ledger_figures, unit};
use super::older_snapshot::{wait_ledger, wait_vouched};
use super::redis_loss::{ledger, open_campaign, put_and_preheat, wait_reading};

const T: Duration = Duration::from_secs(10);
const STOCK: u64 = 10;

/// What the clients saw after the restore.
#[derive(Default, Debug)]
struct After {
    /// 201s: each is a unit beyond the stock, since the ledger held all of it before.
    fresh: Vec<(String, Claim)>,
    /// 200s naming another claim than the request id's first.
    replay_mismatch: u64,
    /// Winners whose retry got their own first claim (200).
    replayed: HashSet<String>,
    restoring: u64,
    unavailable: u64,
    other: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_and_its_replica_back_from_an_older_snapshot_resell_nothing() {
    let mut cluster = RedisCluster::start(3, 1);
    let db = TestDatabase::create();
    let cfg = consumer_config(&cluster, &db.url());
    let client = StockClient::connect(cfg.datapath.stock())
        .await
        .expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("db");
    ledger::pool::migrate(&pool).await.expect("migrate");
    let c = open_campaign(1_311, "older_snapshot_cluster drill", STOCK, 1, 1);
    let meta = put_and_preheat(&pool, &client, &c, cfg.datapath.shards).await;
    let shard = client.placement().shards_of(c.sku, 1)[0];
    let (master, replica) = tokio::task::block_in_place(|| {
        cluster.master_and_replica(slot_of_tag(client.placement().tag(shard)))
    });
    let (stop, rx) = plumbing::shutdown::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    wait_reading(&pool).await;
    let gw = gateway(&cluster, cfg.datapath.shards, 1_000).await;

    // Half the stock, in the ledger, then the snapshot; the other half, in the ledger too.
    let mut first: HashMap<String, Claim> = HashMap::new();
    let mut snapshot = None;
    for i in 0..STOCK {
        let (user, rid) = (format!("u{i}"), format!("r{i}"));
        let a = claim(gw.addr, c.sku, &user, &rid).await;
        let Some(claim_id) = a.claim_id.clone().filter(|_| a.status == Some(201)) else {
            panic!("claim {i} before the fault: {a:?}");
        };
        first.insert(user, unit(claim_id, c.sku, shard));
        if i + 1 == STOCK / 2 {
            wait_ledger(&pool, c.sku, first.len()).await;
            wait_vouched(&client, &meta).await;
            snapshot = Some(tokio::task::block_in_place(|| {
                cluster.nodes()[master].snapshot()
            }));
        }
    }
    wait_ledger(&pool, c.sku, first.len()).await;
    let before = ledger(&pool, c.sku).await;
    let snapshot = snapshot.expect("snapshot taken");
    // Both nodes of the shard stop and come back from the older file.
    tokio::task::block_in_place(|| {
        let nodes = cluster.nodes_mut();
        nodes[master].kill();
        nodes[replica].kill();
        nodes[master].restart_from_snapshot(&snapshot);
        nodes[replica].restart_from_snapshot(&snapshot);
        cluster.wait_ok();
    });
    let restored_at = Instant::now();

    // New users, the limit holder u7 with new request ids, and every winner retrying its
    // own, until each winner has its first claim back (or the bound).
    let mut after = After::default();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut round = 0u32;
    while after.replayed.len() < first.len() && Instant::now() < deadline {
        round += 1;
        let mut tries = vec![
            (format!("n{}", round % 3), format!("n-{round}")),
            ("u7".to_owned(), format!("again-{round}")),
        ];
        tries.extend((0..STOCK).map(|i| (format!("u{i}"), format!("r{i}"))));
        for (user, rid) in tries {
            let a = claim(gw.addr, c.sku, &user, &rid).await;
            match (a.status, a.claim_id) {
                (Some(201), Some(claim_id)) => {
                    after.fresh.push((user, unit(claim_id, c.sku, shard)))
                }
                (Some(200), Some(id)) => {
                    let own = first.get(&user).is_some_and(|f| f.claim_id == id);
                    if own && rid.starts_with('r') {
                        after.replayed.insert(user);
                    } else {
                        after.replay_mismatch += 1;
                    }
                }
                (Some(503), _) if a.kind == "restoring" => after.restoring += 1,
                (Some(503), _) | (None, _) => after.unavailable += 1,
                _ => after.other += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recover_ms = restored_at.elapsed().as_millis();
    // Whatever was acknowledged after the restore reaches the ledger before the count.
    let deadline = Instant::now() + T;
    let want = before.len() + after.fresh.len();
    while ledger(&pool, c.sku).await.len() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(gw);
    let _ = stop.send(true);
    service
        .await
        .expect("service")
        .expect("service ends cleanly");

    let rows = ledger(&pool, c.sku).await;
    let acknowledged = first.clone().into_iter().chain(after.fresh.clone());
    let name = "older_snapshot_cluster";
    let mut f = ledger_figures(&pool, name, &meta, acknowledged.collect()).await;
    f.recover_ms = Some(recover_ms);
    let voided = before
        .iter()
        .filter(|(id, (_, status))| rows.get(*id).map(|(_, s)| s) != Some(status))
        .count();
    println!(
        "{f} replay_mismatch={} winners_replayed={}/{} fresh_after={} restoring={} unavailable={} other={} voided={voided}",
        after.replay_mismatch,
        after.replayed.len(),
        first.len(),
        after.fresh.len(),
        after.restoring,
        after.unavailable,
        after.other
    );
    assert_eq!(f.lost, 0, "acknowledged claims missing from the ledger");
    assert!(
        after.fresh.is_empty(),
        "units sold again after the restore: {:?}",
        after.fresh
    );
    assert_eq!(f.oversold, 0, "the ledger holds more than the stock");
    assert_eq!(f.over_limit, 0, "a user holds more than the limit");
    assert_eq!(
        after.replay_mismatch, 0,
        "a retry got another claim than its first"
    );
    assert_eq!(
        after.replayed.len(),
        first.len(),
        "a winner's retry never got its first claim back"
    );
    assert_eq!(voided, 0, "a ledger row changed status");
}
