//! Durability `replica` for the consumer's recovery writes (issue 11): a late claim's apply
//! and a stale hold's resolution count as done only once a replica holds them, so a
//! failover to a replica that missed them cannot leave the ledger (or anything read from
//! it) trusting a Redis write that is gone. The failover is a partition: the replica is
//! cut off and promoted (`REPLICAOF NO ONE`, as a sentinel would after losing the master),
//! the old master takes the write, then dies; the clients move to the promoted replica.
//! (A replica stopped with SIGSTOP would still get the write from its socket buffer.)

use crate::common::failover::*;
use crate::common::rebuild::*;
use crate::common::*;
use campaign_ops::rebuild;
use consumer::late;
use shard_router::keys::{self, ShardKeys};
use shard_router::{ClaimRecord, StockClient};
use test_support::RedisServer;

async fn slice(client: &StockClient, sku: u64) -> Option<i64> {
    client.slices(sku, 1).await.unwrap()[0].1
}

/// Late claims the ledger does not count as applied yet.
const UNAPPLIED: &str = "SELECT COUNT(*) FROM late_claims WHERE applied_ms IS NULL";

/// Sweeps the late claims on `promoted` until none waits, as the writer's loop would (a
/// confirmed apply after a rollback finds no mark and applies in full); then alice's one
/// unit is counted there once.
async fn alice_applied_again_on(s: &Stack, promoted: &StockClient, sku: u64) {
    let applied = retry(async || late::sweep(&s.pool, promoted, None, T).await.unwrap() == 0).await;
    assert!(applied, "applied on the promoted replica");
    assert_eq!(slice(promoted, sku).await, Some(2));
    assert_eq!(promoted.user_count(sku, 1, "alice").await.unwrap(), 1);
}

/// Before the fix the apply was marked done in the ledger as soon as the master ran it:
/// after the failover the promoted replica offered alice's unit again (3 on a stock of 3
/// with her claim in the ledger) and let her claim past her limit, and no sweep repaired it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_apply_no_replica_confirmed_is_applied_again_after_a_failover() {
    let (mut s, replica) = stack_with_replica().await;
    let c = campaign(&s, 12_101, 3, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let held = held_through_a_loss(&s, &c, "alice").await;
    assert_on_the_replica(&s.client, shard, "the rebuild is on the replica").await;
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1, "alice's claim is late");

    promote(&replica);
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(slice(&s.client, c.sku).await, Some(2), "the master has it");
    assert_eq!(
        s.count(UNAPPLIED).await,
        1,
        "no replica confirmed the apply: the ledger must not call it applied"
    );

    let promoted = fail_over(&mut s, &replica).await;
    assert_eq!(
        slice(&promoted, c.sku).await,
        Some(3),
        "the apply rolled back"
    );
    assert_eq!(promoted.user_count(c.sku, 1, "alice").await.unwrap(), 0);

    // The sweep applies it again on the new master once its own replica confirms (swept
    // again while the new link is still slow to acknowledge).
    let _second = RedisServer::start_replica_of(&replica);
    alice_applied_again_on(&s, &promoted, c.sku).await;
    assert_eq!(s.count(UNAPPLIED).await, 0);
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
}

/// A stale hold whose take is a record in another master's stream, not in the ledger yet:
/// keeping it stores a final replay answer on the home shard. Before the fix it was kept at
/// once, while no replica of the taking shard held the record: a failover of that shard
/// alone drops the record (and gives the unit back to the slice), yet the home shard goes on
/// answering 201 for it. Now the hold waits until a replica of the taking shard confirms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_kept_on_a_take_only_once_a_replica_of_its_shard_holds_it() {
    let s = ClusterStack::start(1).await;
    let p = s.client.placement().clone();
    let master_of = |shard: u16| {
        s.cluster
            .master_of(shard_router::placement::slot_of_tag(p.tag(shard)))
    };
    // A campaign whose two shards live on different masters.
    let sku = (14_101..14_200)
        .find(|&sku| {
            let sh = p.shards_of(sku, 2);
            master_of(sh[0]) != master_of(sh[1])
        })
        .expect("a sku across two masters");
    let c = open_campaign(&s.pool, &s.client, sku, 8, 2, 2, 3600).await;
    let home = p.home_shard(c.sku, c.width, "bob");
    let other = *p
        .shards_of(c.sku, c.width)
        .iter()
        .find(|&&x| x != home)
        .unwrap();
    let now = shard_router::now_ms();
    let hk = ShardKeys::new(&p, home, c.sku);
    let answer_key = hk.request("bob", Some("r-bob"));
    let mut conn = s.client.conn();
    // bob's hold (expired a minute ago) with its request in progress, on his home...
    let gen = shard_gen(&s.client, &hk).await;
    let _: () = dead_hold(&mut redis::pipe(), &hk, "bob", "r-bob", gen, now)
        .cmd("HSET")
        .arg(hk.user_seq())
        .arg("bob")
        .arg(1)
        .cmd("SET")
        .arg(&answer_key)
        .arg("P")
        .query_async(&mut conn)
        .await
        .unwrap();
    // ...and the take on the other shard, whose replica is stopped: it never acknowledges it.
    let (_, replica) = s
        .cluster
        .master_and_replica(shard_router::placement::slot_of_tag(p.tag(other)));
    s.cluster.nodes()[replica].signal("STOP");
    let take = ClaimRecord {
        claim_id: String::new(),
        sku: c.sku,
        user: "bob".into(),
        qty: 1,
        user_seq: 1,
        shard: other,
        home,
        request_id: Some("r-bob".into()),
        ts_ms: now - 61_000,
        gen: 0,
    };
    let mut add = redis::cmd("XADD");
    add.arg(keys::claims_stream(&p, other)).arg("*");
    for (k, v) in take.encode() {
        add.arg(k).arg(v);
    }
    let _: String = add.query_async(&mut conn).await.unwrap();

    let reconcile = || async {
        campaign_ops::reconcile::run(&s.pool, &s.client, c.sku, shard_router::now_ms(), T)
            .await
            .expect("reconcile")
    };
    let r = reconcile().await;
    let answer: Option<String> = redis::cmd("GET")
        .arg(&answer_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        (r.stale_holds, answer.as_deref()),
        (0, Some("P")),
        "no replica of shard {other} holds the take: no final answer yet"
    );

    s.cluster.nodes()[replica].signal("CONT");
    // The resumed replica catches up; until its fence confirms, the hold keeps waiting.
    let mut kept = 0;
    retry(async || {
        kept = reconcile().await.stale_holds;
        kept > 0
    })
    .await;
    assert_eq!(kept, 1, "confirmed now: kept");
    let answer: Option<String> = redis::cmd("GET")
        .arg(&answer_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        answer.is_some_and(|a| a.ends_with(&format!("|{other}|1")) && !a.starts_with('~')),
        "final answer"
    );
    assert_eq!(s.client.user_count(c.sku, c.width, "bob").await.unwrap(), 1);
}

/// A stale hold undone on a master that no replica confirms is not reported resolved (the
/// closing report waits for the same confirmation): the failover brings the hold back, and
/// the next run on the promoted replica resolves it again. Before the fix the first run
/// reported a resolution the promoted replica never saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_hold_resolution_counts_only_once_a_replica_holds_it() {
    let (mut s, replica) = stack_with_replica().await;
    let c = campaign(&s, 12_102, 4, 1, 1, 3600).await;
    let p = s.client.placement().clone();
    let home = p.home_shard(c.sku, c.width, "bob");
    let hk = ShardKeys::new(&p, home, c.sku);
    // A hold a dead gateway left; its claim is nowhere (nothing was taken).
    let gen = shard_gen(&s.client, &hk).await;
    let _: () = dead_hold(
        &mut redis::pipe(),
        &hk,
        "bob",
        "",
        gen,
        shard_router::now_ms(),
    )
    .query(&mut s.redis.connection())
    .unwrap();
    assert_on_the_replica(&s.client, home, "the hold is on the replica").await;

    promote(&replica);
    let r = s.reconcile(c.sku).await;
    assert_eq!(
        r.stale_holds, 0,
        "undone on the old master only: not resolved"
    );
    assert_eq!(s.client.user_count(c.sku, 1, "bob").await.unwrap(), 0);

    let promoted = fail_over(&mut s, &replica).await;
    assert_eq!(
        promoted.user_count(c.sku, 1, "bob").await.unwrap(),
        1,
        "rolled back"
    );
    let _second = RedisServer::start_replica_of(&replica);
    assert_on_the_replica(&promoted, home, "the promoted replica has a replica").await;
    // The promoted replica sells (and settles) only once the ledger vouched for it; the
    // watch that does so after its rebuild is not running here.
    shard_router::test_util::vouch_current(&promoted, home).await;
    let mut resolved = 0;
    retry(async || {
        resolved =
            campaign_ops::reconcile::run(&s.pool, &promoted, c.sku, shard_router::now_ms(), T)
                .await
                .unwrap()
                .stale_holds;
        resolved > 0
    })
    .await;
    assert_eq!(resolved, 1, "resolved again on the promoted replica");
    assert_eq!(promoted.user_count(c.sku, 1, "bob").await.unwrap(), 0);
}

/// A rebuild's own Redis write counts only once a replica holds it. Before the fix the
/// rebuild marked the waiting late claim counted in its ledger transaction, before its
/// write, and reported success with nothing confirmed: a failover to a replica that missed
/// the write brought back the shard of the previous generation (alice's unit still on
/// sale) while the ledger said her late claim was counted, so no sweep ever took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_no_replica_confirmed_leaves_its_late_claims_to_count() {
    let (mut s, replica) = stack_with_replica().await;
    let c = campaign(&s, 12_104, 3, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let held = held_through_a_loss(&s, &c, "alice").await;
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1, "alice's claim is late (never applied)");
    assert_on_the_replica(&s.client, shard, "the first rebuild is on the replica").await;

    promote(&replica);
    let r = rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts()).await;
    assert!(r.is_err(), "no replica confirmed the rebuild: {r:?}");
    assert_eq!(slice(&s.client, c.sku).await, Some(2), "the master has it");
    assert_eq!(
        s.count(UNAPPLIED).await,
        1,
        "the late claim is not counted until a replica holds the rebuild"
    );

    let promoted = fail_over(&mut s, &replica).await;
    assert_eq!(
        slice(&promoted, c.sku).await,
        Some(3),
        "the rebuild rolled back"
    );
    // The sweep counts it on the promoted replica once its own replica confirms.
    let _second = RedisServer::start_replica_of(&replica);
    alice_applied_again_on(&s, &promoted, c.sku).await;
}

/// A stock wave's Redis step (units onto the slices, its id in the wave hash) is on a
/// replica before the ledger marks the wave applied. Before the fix the ledger marked it at
/// once: a failover to a replica that missed the step took the units back off the slice,
/// and nothing pushed the wave again (applied in the ledger), so its units were lost for
/// good while the ledger's stock counted them. Now the wave stays pending until a replica
/// confirms, and its next round pushes it on the promoted replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_no_replica_confirmed_stays_pending_until_one_does() {
    let (mut s, replica) = stack_with_replica().await;
    let c = campaign(&s, 12_105, 2, 1, 1, 3600).await;
    let w = campaign_ops::wave::Wave {
        sku: c.sku,
        id: "w1".into(),
        units: 3,
        due_ms: shard_router::now_ms(),
    };
    campaign_ops::wave::schedule(&s.pool, &w, T).await.unwrap();
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    assert_on_the_replica(&s.client, shard, "the preheat is on the replica").await;

    promote(&replica);
    let now = shard_router::now_ms();
    let out = campaign_ops::wave::apply(&s.pool, &s.client, c.sku, "w1", now, T).await;
    assert!(out.is_err(), "no replica confirmed the wave: {out:?}");
    assert_eq!(slice(&s.client, c.sku).await, Some(5), "the master has it");
    let pending = "SELECT COUNT(*) FROM campaign_waves WHERE applied_ms IS NULL";
    assert_eq!(
        s.count(pending).await,
        1,
        "not applied before a replica holds it"
    );

    let promoted = fail_over(&mut s, &replica).await;
    assert_eq!(
        slice(&promoted, c.sku).await,
        Some(2),
        "the wave rolled back"
    );
    let _second = RedisServer::start_replica_of(&replica);
    retry(async || {
        let _ = campaign_ops::wave::apply_due(&s.pool, &promoted, shard_router::now_ms(), T).await;
        s.count(pending).await == 0
    })
    .await;
    assert_eq!(s.count(pending).await, 0, "applied on the promoted replica");
    assert_eq!(
        slice(&promoted, c.sku).await,
        Some(5),
        "the wave's units, once"
    );
    let stock: u64 = sqlx::query_scalar("SELECT stock FROM campaigns WHERE sku = ?")
        .bind(c.sku)
        .fetch_one(&s.pool)
        .await
        .unwrap();
    assert_eq!(stock, 5);
}
