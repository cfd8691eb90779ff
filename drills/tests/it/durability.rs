//! Durability drills (docs/DESIGN.md): `reroute_home_kill`, a rerouted claim whose home master dies right
//! after the take, must not be claimed twice on retry; `wait_reconnect`, a forced reconnect between
//! a claim's script and its WAIT, must never give a false acknowledgement. Short forms; the
//! load scales with `FG_DRILL_SCALE`.

use std::time::{Duration, Instant};

use drills::load::{self, Durability};
use drills::verdict;
use shard_router::protocol::{self, Acked, Confirmation, LocalEmptyShards};
use shard_router::test_util::{drain, open_meta, split_sku};
use shard_router::{
    now_ms, ClaimOutcome, ClaimRequest, HomeOutcome, RedisTarget, Settlement, SkuMeta, StockClient,
    StockConfig, StockError, TakeOutcome,
};
use test_support::{RedisCluster, RedisServer};

const ACK: Duration = Duration::from_millis(100);

async fn connect(target: RedisTarget, ack: Option<Duration>) -> StockClient {
    let mut cfg = StockConfig::new(target, 16);
    cfg.replica_ack = ack;
    StockClient::connect(cfg).await.expect("connect")
}

/// Kills every normal client connection of the node but the caller's own.
fn kill_connections(node: &RedisServer) {
    if let Ok(mut c) = redis::Client::open(node.url())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
    {
        let _: redis::RedisResult<redis::Value> = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query(&mut c);
    }
}

/// Drill `wait_reconnect`: claims under replica durability while the replica is stopped (SIGSTOP) and
/// the gateway's connections are killed again and again, so scripts and WAITs straddle
/// reconnects. Then the master dies with the replica still behind and the replica is
/// promoted: every claim acknowledged as confirmed must be on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_between_script_and_wait_gives_no_false_ack() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let client = connect(RedisTarget::Single(master.url()), Some(ACK)).await;
    // Never sells out within the drill: every claim reaches Redis.
    let meta = open_meta(11_004, 1_000_000, 4, 1);
    client.preheat(&meta).await.expect("preheat");

    let run_for = drills::scaled(Duration::from_secs(5));
    let load = {
        let (client, meta) = (client.clone(), meta.clone());
        tokio::spawn(async move {
            load::run(
                &client,
                &meta,
                8,
                run_for,
                Durability::Replica,
                drills::scaled_count(500_000),
            )
            .await
        })
    };
    let started = Instant::now();
    // Rounds of: replica stopped, connections killed every 25 ms, replica resumed.
    while started.elapsed() < run_for.mul_f64(0.6) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        replica.signal("STOP");
        for _ in 0..6 {
            kill_connections(&master);
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        replica.signal("CONT");
    }
    // The end: the replica stops for good, the connections keep dying, the master dies.
    replica.signal("STOP");
    for _ in 0..20 {
        kill_connections(&master);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    master.kill();
    let answers = load.await.expect("load");
    replica.signal("CONT");
    let _: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.connection())
        .expect("promote the replica");

    let promoted = connect(RedisTarget::Single(replica.url()), None).await;
    let v = verdict::check(
        "reconnect-between-script-and-wait",
        &promoted,
        &meta,
        &answers,
    )
    .await;
    println!("{} unconfirmed={}", v.figures, answers.unconfirmed);
    assert!(
        v.figures.acknowledged > 0,
        "the load must have made progress"
    );
    // Killed mid-WAIT, a claim is an ambiguous error; finished unconfirmed, a 503.
    assert!(
        answers.unconfirmed + answers.ambiguous > 0,
        "the stopped replica and the kills must have been felt"
    );
    assert_eq!(
        v.figures.lost, 0,
        "a claim acknowledged as replicated is missing on the promoted replica"
    );
    assert_eq!(v.figures.duplicated, 0);
    assert_eq!(v.figures.over_limit, 0);
}

/// Closes the node's replication links to its replicas.
pub(crate) fn cut_replicas(node: &RedisServer) {
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut node.connection())
        .expect("CLIENT KILL TYPE replica");
}

async fn retry(client: &StockClient, meta: &SkuMeta, req: &ClaimRequest) -> ClaimOutcome {
    for _ in 0..40 {
        match protocol::claim(
            client,
            meta,
            req,
            protocol::ClaimOptions::new(&LocalEmptyShards::default(), now_ms()),
        )
        .await
        {
            Ok(claimed) => return claimed.outcome,
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    panic!("no answer to the retry after the failover");
}

/// Records of `user` on any shard of the SKU, read from the (promoted) cluster.
async fn records_of(client: &StockClient, meta: &SkuMeta, user: &str) -> usize {
    let answers = load::Answers::default();
    let v = verdict::check("count", client, meta, &answers).await;
    v.records.iter().filter(|r| r.user == user).count()
}

/// Drill `reroute_home_kill`: a reroute in replica mode whose home master dies right after the take.
/// (a) The home replica never confirmed the hold: the claim must take nothing, so the
/// retry after the failover claims once. (b) The hold was confirmed, the take too, then
/// the home replica falls behind and the master dies before the settle replicates: the
/// retry with the same request_id must find the hold (in progress), not claim again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reroute_with_home_master_killed_claims_once() {
    let mut cluster = RedisCluster::start(3, 1);
    let client = connect(RedisTarget::Cluster(cluster.urls()), Some(ACK)).await;
    let sku = split_sku(&client, 11_300, |slot| cluster.master_of(slot));
    let meta = open_meta(sku, 40, 2, 1);
    client.preheat(&meta).await.expect("preheat");
    let shards = client.placement().shards_of(sku, 2);
    let home = shards[0];
    let other = shards[1];
    drain(&client, &meta, home).await;
    let home_slot = shard_router::placement::slot_of_tag(client.placement().tag(home));
    let (home_master, home_replica) = cluster.master_and_replica(home_slot);
    let users: Vec<String> = (0..)
        .map(|n| format!("victim{n}"))
        .filter(|u| client.placement().home_shard(sku, 2, u) == home)
        .take(2)
        .collect();
    let req = |user: &str| ClaimRequest {
        sku,
        user: user.to_owned(),
        qty: 1,
        request_id: Some(format!("{user}-once")),
    };

    // (a) Home replica stopped before the claim: the hold is not confirmed.
    let a = req(&users[0]);
    cluster.nodes()[home_replica].signal("STOP");
    let first = protocol::claim(
        &client,
        &meta,
        &a,
        protocol::ClaimOptions::new(&LocalEmptyShards::default(), now_ms()),
    )
    .await;
    cluster.nodes()[home_replica].signal("CONT");
    let a_first_acked = matches!(&first, Ok(Acked { outcome: ClaimOutcome::Claimed { .. }, confirmation }) if *confirmation != Confirmation::Unconfirmed);
    assert!(
        matches!(first, Err(StockError::Unconfirmed { op: "hold" })),
        "an unconfirmed hold must take nothing: {first:?}"
    );

    // (b) Hold and take confirmed, then the home replica stops before the settle.
    let b = req(&users[1]);
    let HomeOutcome::Hold { user_seq, gen, .. } = client
        .claim_home(&b, home, now_ms(), true)
        .await
        .expect("hold")
        .outcome
    else {
        panic!("home is drained: expected a hold");
    };
    let taken = client
        .take(&b, other, home, user_seq, gen, now_ms())
        .await
        .expect("take")
        .outcome;
    let TakeOutcome::Claimed { claim_id, .. } = taken else {
        panic!("the other shard has stock: {taken:?}");
    };
    // Stopped, and its link cut: nothing written from now on reaches it (a stopped
    // process still receives into its socket buffer, and would apply that on resume).
    cluster.nodes()[home_replica].signal("STOP");
    cut_replicas(&cluster.nodes()[home_master]);
    let keep = Settlement::Keep(shard_router::Claim {
        claim_id,
        sku,
        shard: other,
        qty: 1,
    });
    let _ = client
        .settle(sku, home, &b.user, user_seq, b.request_id.as_deref(), &keep)
        .await;

    // The home master dies; its replica (resumed) is promoted.
    // The old master comes back and rejoins as the promoted node's replica: replica mode
    // answers nothing as confirmed on a master without one.
    tokio::task::block_in_place(|| {
        cluster.take_over(home_master, home_replica);
        cluster.rejoin_as_replica(home_master);
    });
    let fresh = connect(
        RedisTarget::Cluster(
            cluster
                .nodes()
                .iter()
                .filter(|n| n.pid().is_some())
                .map(|n| n.url())
                .collect(),
        ),
        Some(ACK),
    )
    .await;
    // The promoted replica is a process the ledger never vouched for: it sells nothing
    // until the consumer's watch vouches, which this drill (no ledger) does in its place.
    shard_router::test_util::vouch_current(&fresh, home).await;

    let a_retry = retry(&fresh, &meta, &a).await;
    let b_retry = retry(&fresh, &meta, &b).await;
    let a_records = records_of(&fresh, &meta, &a.user).await;
    let b_records = records_of(&fresh, &meta, &b.user).await;
    let duplicated = (a_records.saturating_sub(1) + b_records.saturating_sub(1)) as u64;
    let acknowledged =
        u64::from(a_first_acked) + u64::from(matches!(a_retry, ClaimOutcome::Claimed { .. }));
    println!(
        "drill=reroute-home-master-killed acknowledged={acknowledged} recorded={} lost=0 duplicated={duplicated} oversold=0 over_limit={duplicated} b_retry={b_retry:?}",
        a_records + b_records
    );
    assert!(
        matches!(a_retry, ClaimOutcome::Claimed { .. }),
        "(a) nothing was taken, so the retry claims: {a_retry:?}"
    );
    assert_eq!(a_records, 1, "(a) one claim, not two");
    assert_eq!(
        b_retry,
        ClaimOutcome::InProgress,
        "(b) the promoted home has the confirmed hold, not the settle"
    );
    assert_eq!(b_records, 1, "(b) the take, and no second claim");
}
