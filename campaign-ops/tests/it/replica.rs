//! Durability `replica` on the consumer side: an entry reaches the ledger only once a
//! replica holds it, so a failover cannot take back a decrement the ledger already shows.

use std::time::Duration;

use crate::common::*;
use consumer::replica::ReplicaWait;

/// Waits 2 s, then the ledger must still hold no claim: `why`.
async fn nothing_committed_for_2s(s: &Stack, why: &str) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(s.count("SELECT COUNT(*) FROM claims").await, 0, "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_nothing_reaches_the_ledger() {
    let s = Stack::start().await;
    let c = campaign(&s, 12001, 50, SHARDS, 1, 3600).await;
    let mut cfg = s.cfg.clone();
    cfg.datapath.replica_wait = ReplicaWait::Always(Duration::from_millis(50));
    let consumer = start_consumer(cfg);
    let ids = claim_all(&s.client, &c, users("r", 50), 8).await;
    assert_eq!(ids.len(), 50);
    nothing_committed_for_2s(&s, "unreplicated entries must not be committed").await;
    let (_, pending) = stream_depth(&s).await;
    assert!(pending > 0, "read, held back, still pending");
    // Shutdown is not blocked by the wait; the entries stay pending for recovery.
    consumer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replicas_every_claim_lands_once() {
    let s = ClusterStack::start(1).await;
    let c = open_campaign(&s.pool, &s.client, 12002, 300, SHARDS, 1, 3600).await;
    let mut cfg = s.cfg.clone();
    cfg.datapath.replica_wait = ReplicaWait::Always(Duration::from_millis(200));
    let consumer = start_consumer(cfg);
    let ids = claim_all(&s.client, &c, users("q", 300), 8).await;
    assert_eq!(ids.len(), 300);
    wait_rows(&s.pool, c.sku, 300, Duration::from_secs(30)).await;
    consumer.stop().await;
}

/// The stack's configuration with `--replica-wait auto` and a short wait.
fn auto(s: &Stack) -> campaign_ops::Config {
    let mut cfg = s.cfg.clone();
    cfg.datapath.replica_wait = ReplicaWait::Auto(Duration::from_millis(50));
    cfg
}

/// `auto` waits wherever a replica was seen. A consumer restarted while the replica is
/// away used to see none and commit what no replica held, which a failover to that
/// replica then takes back from Redis while the ledger keeps it. Having fenced a shard
/// (the fence key is replicated like everything else) is remembered by Redis itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_remembers_a_replica_across_a_consumer_restart() {
    let s = Stack::start().await;
    let mut replica = test_support::RedisServer::start_replica_of(&s.redis);
    let c = campaign(&s, 12003, 20, 1, 1, 3600).await;
    let cfg = auto(&s);
    let consumer = start_consumer(cfg.clone());
    claim_all(&s.client, &c, users("a", 2), 2).await;
    wait_rows(&s.pool, c.sku, 2, Duration::from_secs(20)).await;
    consumer.stop().await;

    replica.kill();
    let consumer = start_consumer(cfg);
    claim_all(&s.client, &c, users("b", 2), 2).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims").await,
        2,
        "nothing committed while the replica seen before is away"
    );
    replica.restart();
    wait_rows(&s.pool, c.sku, 4, Duration::from_secs(30)).await;
    consumer.stop().await;
}

/// `auto` in a deployment that never had a replica: a consumer that takes a shard over
/// from one that died, and then a restarted one, commit without waiting for a replica
/// that never existed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_without_any_replica_commits_after_a_takeover_and_a_restart() {
    let s = Stack::start().await;
    let c = campaign(&s, 12004, 20, 1, 1, 3600).await;
    let cfg = auto(&s);
    claim_all(&s.client, &c, users("a", 2), 2).await;
    // A consumer that died holding every shard's lease: the next one takes them over
    // once the leases run out.
    for sh in 0..SHARDS {
        let st = shard_router::stream::ShardStream::new(&s.client, sh);
        ledger::places::acquire(&s.pool, &st.key, "died", Duration::from_secs(1), T)
            .await
            .unwrap()
            .expect("free lease");
    }
    let consumer = start_consumer(cfg.clone());
    wait_rows(&s.pool, c.sku, 2, Duration::from_secs(20)).await;
    consumer.stop().await;

    let consumer = start_consumer(cfg);
    claim_all(&s.client, &c, users("b", 2), 2).await;
    wait_rows(&s.pool, c.sku, 4, Duration::from_secs(10)).await;
    consumer.stop().await;
}

/// `auto` where the replica went away before any process fenced the shard (no fence key
/// to remember it by): the master still shows it had one (its replication backlog), and
/// a first consumer started then must wait for it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_waits_for_a_replica_that_left_before_any_fence() {
    let s = Stack::start().await;
    let mut replica = test_support::RedisServer::start_replica_of(&s.redis);
    let c = campaign(&s, 12005, 20, 1, 1, 3600).await;
    let cfg = auto(&s);
    // The replica attached (the master's backlog exists), then left.
    tokio::time::sleep(Duration::from_millis(500)).await;
    replica.kill();
    let consumer = start_consumer(cfg);
    claim_all(&s.client, &c, users("b", 2), 2).await;
    nothing_committed_for_2s(&s, "nothing committed while the master's replica is away").await;
    replica.restart();
    wait_rows(&s.pool, c.sku, 2, Duration::from_secs(30)).await;
    consumer.stop().await;
}

/// A master with two replicas: a commit must rest on every replica the master counts
/// connected, not on whichever acknowledged first (WAIT 1), or a failover to the other one
/// takes back what the ledger holds. One stalled replica (stopped, still connected) holds
/// the commit back; once the master drops it (it died), the commit rests on the rest: a
/// replica the master no longer streams to is behind and not one to promote (`replica.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connected_replica_confirms_a_commit() {
    let s = Stack::start().await;
    let _a = test_support::RedisServer::start_replica_of(&s.redis);
    let mut b = test_support::RedisServer::start_replica_of(&s.redis);
    let c = campaign(&s, 12006, 20, 1, 1, 3600).await;
    // The replica's link is up before its master counts it online (its first ACK): stop
    // it only once the master counts both, or the master never waits for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut s.redis.connection())
            .unwrap();
        if info.matches("state=online").count() == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replicas never online: {info}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    b.signal("STOP");
    let consumer = start_consumer(auto(&s));
    claim_all(&s.client, &c, users("b", 2), 2).await;
    nothing_committed_for_2s(
        &s,
        "committed while a connected replica had not acknowledged",
    )
    .await;
    // The master drops the replica that died: the other one confirms alone.
    b.kill();
    wait_rows(&s.pool, c.sku, 2, Duration::from_secs(30)).await;
    consumer.stop().await;
}

/// A replica in its first full sync is connected (`connected_slaves` counts it from its
/// first request) but holds nothing yet and acknowledges nothing until it has loaded the
/// master's data, and no failover prefers it over the replica that confirmed (it has no
/// offset to rank on). Counting it stopped every commit of its master for the whole sync:
/// here 30 s (the master's diskless-sync delay), and for good with a replica whose sync
/// keeps failing (an output buffer too small for the dataset). Only online replicas count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_still_in_its_first_sync_does_not_hold_commits_back() {
    let s = Stack::start().await;
    let _a = test_support::RedisServer::start_replica_of(&s.redis);
    let c = campaign(&s, 12007, 20, 1, 1, 3600).await;
    let mut m = s.redis.connection();
    for (k, v) in [
        ("repl-diskless-sync", "yes"),
        ("repl-diskless-sync-delay", "30"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(&mut m)
            .unwrap();
    }
    let port = s.redis.port().to_string();
    let _b = test_support::RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut info = || -> String { redis::cmd("INFO").arg("replication").query(&mut m).unwrap() };
    for _ in 0..100 {
        if info().contains("connected_slaves:2") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(info().contains("state=wait_bgsave"), "{}", info());

    let consumer = start_consumer(auto(&s));
    claim_all(&s.client, &c, users("s", 2), 2).await;
    wait_rows(
        &s.pool,
        c.sku,
        2,
        test_support::slack(Duration::from_secs(10)),
    )
    .await;
    consumer.stop().await;
    assert!(
        info().contains("state=wait_bgsave"),
        "the second replica was still syncing: {}",
        info()
    );
}
