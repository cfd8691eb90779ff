//! Review of the vouch fence (`lua/guard.lua`): a failback to the old master must not resell.

use std::time::Duration;

use shard_router::protocol::{ClaimOptions, LocalEmptyShards};
use shard_router::test_util::{open_meta, req};
use shard_router::{
    protocol, ClaimOutcome, RedisTarget, StockClient, StockConfig, StockError, StoredAnswer,
};
use test_support::RedisServer;

fn run_id(s: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut s.connection())
        .unwrap();
    info.lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))
        .unwrap()
        .to_owned()
}

fn replica_synced(s: &RedisServer) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut s.connection())
        .unwrap();
    info.contains("master_link_status:up") && info.contains("master_sync_in_progress:0")
}

fn wait(what: &str, f: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn claim(
    client: &StockClient,
    meta: &shard_router::SkuMeta,
    user: &str,
) -> Result<ClaimOutcome, StockError> {
    let r = req(meta.sku, user, Some(&format!("rid-{user}")));
    protocol::claim(
        client,
        meta,
        &r,
        ClaimOptions::new(&LocalEmptyShards::default(), shard_router::now_ms()),
    )
    .await
    .map(|a| a.outcome)
}

/// Failover to a replica that lacks the last sales, then back to the old master before the
/// watch vouched for the replica. The old master keeps its run_id (a role change is not a
/// restart) but its data was replaced by the replica's on the resync; the vouch it got
/// back from the replica names it, so the guard passes and the lost units sell again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_to_the_old_master_before_the_vouch_resells() {
    const STOCK: u64 = 3;
    let m = RedisServer::start();
    let r = RedisServer::start_replica_of(&m);
    let client = StockClient::connect(StockConfig::new(RedisTarget::Single(m.url()), 16))
        .await
        .unwrap();
    client.load_scripts().await.unwrap();
    let meta = open_meta(4_242, STOCK, 1, 1);
    client.preheat(&meta).await.expect("preheat (vouches m)");
    let shard = client.placement().shards_of(meta.sku, 1)[0];
    let id = client.server_identity(shard).await.unwrap();
    assert!(id.vouched_here(), "{id:?}");
    let m_id = run_id(&m);
    // The replica holds the slice and the vouch for m.
    wait("replica has the vouch", || {
        let v: Option<String> = redis::cmd("GET")
            .arg(shard_router::keys::vouch(client.placement(), shard))
            .query(&mut r.connection())
            .unwrap();
        v.as_deref() == Some(m_id.as_str())
    });

    // The replica is cut off (partition) and promoted: m's next sales never reach it.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r.connection())
        .unwrap();
    let mut acked = 0;
    for i in 0..STOCK {
        match claim(&client, &meta, &format!("a{i}")).await {
            Ok(ClaimOutcome::Claimed { .. }) => acked += 1,
            other => panic!("claim before the failover: {other:?}"),
        }
    }
    assert_eq!(acked, STOCK);

    // The promoted replica is fenced, as designed.
    let on_r = StockClient::connect(StockConfig::new(RedisTarget::Single(r.url()), 16))
        .await
        .unwrap();
    match claim(&on_r, &meta, "probe").await {
        Err(StockError::Restoring { .. }) => {}
        other => panic!("the promoted replica must refuse: {other:?}"),
    }

    // m comes back as a replica of r (full resync: m's data is now r's, older) and is
    // promoted again (a failback, or r failing in turn) before any watch vouched for r.
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(r.port())
        .query(&mut m.connection())
        .unwrap();
    wait("m resynced from r", || replica_synced(&m));
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut m.connection())
        .unwrap();
    assert_eq!(run_id(&m), m_id, "a role change keeps the run_id");

    // The gateway's client on m sells the units again.
    let mut resold = 0;
    let mut restoring = 0;
    for i in 0..STOCK {
        match claim(&client, &meta, &format!("b{i}")).await {
            Ok(ClaimOutcome::Claimed { .. }) => resold += 1,
            Err(StockError::Restoring { .. }) => restoring += 1,
            Err(e) if e.is_ambiguous() => {}
            other => panic!("after the failback: {other:?}"),
        }
    }
    assert_eq!(
        resold, 0,
        "oversold: {acked} acknowledged before + {resold} after the failback over a stock of {STOCK} (restoring: {restoring})"
    );
}

/// The sold-out path's replay read (`replay_confirmed_live`) after a restart from a
/// snapshot taken before the winner's claim: the slice is back, her answer is not, and the
/// vouch names the process before the restart, the very one this client loaded its scripts
/// on (no selling script ran since, so it has not learned the new one). No answer there
/// is not "sold out": `restoring`, until the rebuild restores the answer and vouches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sold_out_replay_on_a_restored_older_snapshot_is_restoring() {
    let mut m = RedisServer::start();
    let client = StockClient::connect(StockConfig::new(RedisTarget::Single(m.url()), 16))
        .await
        .unwrap();
    client.load_scripts().await.unwrap();
    let meta = open_meta(4_243, 1, 1, 1);
    client.preheat(&meta).await.expect("preheat (vouches m)");
    let shard = client.placement().shards_of(meta.sku, 1)[0];
    let snapshot = tokio::task::block_in_place(|| m.snapshot());
    let won = claim(&client, &meta, "w").await;
    assert!(matches!(won, Ok(ClaimOutcome::Claimed { .. })), "{won:?}");
    let live = || client.replay_confirmed_live(meta.sku, 1, "w", "rid-w");
    let before = live().await;
    assert!(
        matches!(before, Ok(Some((StoredAnswer::Claimed(_), _)))),
        "{before:?}"
    );

    let answer_key = shard_router::keys::ShardKeys::new(client.placement(), shard, meta.sku)
        .request("w", Some("rid-w"));
    let stored: String = redis::cmd("GET")
        .arg(&answer_key)
        .query(&mut m.connection())
        .unwrap();

    tokio::task::block_in_place(|| m.restart_from_snapshot(&snapshot));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match live().await {
            Err(StockError::Restoring { .. }) => break,
            Ok(seen) => panic!("the winner's retry read {seen:?} (sold out) on older data"),
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The rebuild (no ledger here): her answer back, then the vouch for this process.
    let _: () = redis::cmd("SET")
        .arg(&answer_key)
        .arg(&stored)
        .query(&mut m.connection())
        .unwrap();
    shard_router::test_util::vouch_current(&client, shard).await;
    let after = live().await;
    assert!(
        matches!(after, Ok(Some((StoredAnswer::Claimed(_), _)))),
        "{after:?}"
    );
}
