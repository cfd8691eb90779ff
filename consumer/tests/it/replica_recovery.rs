//! Durability `replica` for the consumer's recovery writes (issue 11): a late claim's apply
//! and a stale hold's resolution count as done only once a replica holds them, so a
//! failover to a replica that missed them cannot leave the ledger (or anything read from
//! it) trusting a Redis write that is gone. The failover is a partition: the replica is
//! cut off and promoted (`REPLICAOF NO ONE`, as a sentinel would after losing the master),
//! the old master takes the write, then dies; the clients move to the promoted replica.
//! (A replica stopped with SIGSTOP would still get the write from its socket buffer.)

use std::time::Duration;

use crate::common::rebuild::*;
use crate::common::*;
use consumer::rebuild::{self, late};
use shard_router::{ClaimOutcome, RedisTarget, StockClient};
use test_support::RedisServer;

/// `replica` is cut off from its master and becomes a master itself.
fn promote(replica: &RedisServer) {
    let _: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.connection())
        .expect("promote the replica");
}

/// A client on `server`, with the stack's settings.
async fn client_on(server: &RedisServer, s: &Stack) -> StockClient {
    let mut cfg = s.cfg.clone();
    cfg.redis = RedisTarget::Single(server.url());
    StockClient::connect(cfg.stock()).await.expect("redis")
}

async fn slice(client: &StockClient, sku: u64) -> Option<i64> {
    client.slices(sku, 1).await.unwrap()[0].1
}

/// Before the fix the apply was marked done in the ledger as soon as the master ran it:
/// after the failover the promoted replica offered alice's unit again (3 on a stock of 3
/// with her claim in the ledger) and let her claim past her limit, and no sweep repaired it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_apply_no_replica_confirmed_is_applied_again_after_a_failover() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let mut s = Stack::start_on(master).await;
    let c = campaign(&s, 12_101, 3, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    assert!(matches!(
        claim_one(&s, &c, "alice", Some("r-alice")).await,
        ClaimOutcome::Claimed { .. }
    ));
    let held = read_like_a_consumer(&s, &c).await;
    flushall(&s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(
        s.client
            .wait_replicas(shard, 1, Duration::from_secs(5))
            .await
            .unwrap(),
        1,
        "the rebuild is on the replica"
    );
    let out = consumer::ledger::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1, "alice's claim is late");

    promote(&replica);
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(slice(&s.client, c.sku).await, Some(2), "the master has it");
    assert_eq!(
        s.count("SELECT COUNT(*) FROM late_claims WHERE applied_ms IS NULL")
            .await,
        1,
        "no replica confirmed the apply: the ledger must not call it applied"
    );

    s.redis.kill();
    let promoted = client_on(&replica, &s).await;
    assert_eq!(
        slice(&promoted, c.sku).await,
        Some(3),
        "the apply rolled back"
    );
    assert_eq!(promoted.user_count(c.sku, 1, "alice").await.unwrap(), 0);

    // The sweep applies it again on the new master once its own replica confirms.
    let _second = RedisServer::start_replica_of(&replica);
    assert_eq!(late::sweep(&s.pool, &promoted, None, T).await.unwrap(), 0);
    assert_eq!(slice(&promoted, c.sku).await, Some(2));
    assert_eq!(promoted.user_count(c.sku, 1, "alice").await.unwrap(), 1);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM late_claims WHERE applied_ms IS NULL")
            .await,
        0
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
}
