//! Release by cancel and by payment timeout: each done twice, units back once.

use std::time::Duration;

use crate::common::failover::*;
use crate::common::*;
use campaign_ops::release::{self, Outcome, Reason};
use consumer::replica::ReplicaWait;
use shard_router::keys;

async fn slices(s: &Stack, sku: u64, width: u16) -> i64 {
    s.client
        .slices(sku, width)
        .await
        .unwrap()
        .iter()
        .map(|(_, v)| v.unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_twice_returns_units_once_and_the_user_may_claim_again() {
    let s = Stack::start().await;
    let c = campaign(&s, 8001, 3, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let ids = claim_all(&s.client, &c, vec!["carol".into(), "dave".into()], 2).await;
    assert_eq!(ids.len(), 2);
    wait_drained(&s, c.sku, 2, Duration::from_secs(20)).await;
    let carol: String = sqlx::query_scalar("SELECT claim_id FROM claims WHERE user_id = 'carol'")
        .fetch_one(&s.pool)
        .await
        .unwrap();

    // Watch restock events: a slice that goes from 0 back up publishes one.
    let mut pubsub = redis::Client::open(s.redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut ps = pubsub.as_pubsub();
    ps.subscribe(keys::EVENTS_CHANNEL).unwrap();
    ps.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();

    assert_eq!(slices(&s, c.sku, 2).await, 1);
    let first = release::release(&s.pool, &s.client, &carol, Reason::Cancelled, T)
        .await
        .unwrap();
    let second = release::release(&s.pool, &s.client, &carol, Reason::Cancelled, T)
        .await
        .unwrap();
    assert_eq!(
        (first, second),
        (Outcome::Released, Outcome::AlreadyReleased)
    );
    assert_eq!(slices(&s, c.sku, 2).await, 2, "one unit back, once");
    assert_eq!(s.client.user_count(c.sku, 2, "carol").await.unwrap(), 0);
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 8001")
            .await,
        2
    );
    assert!(
        release::confirm(&s.pool, &carol, T).await.is_err(),
        "a released claim cannot be paid"
    );

    // The user may claim again (limit 1 was used by the cancelled claim).
    let again = claim_all(&s.client, &c, vec!["carol".into()], 1).await;
    assert_eq!(again.len(), 1);
    wait_drained(&s, c.sku, 3, Duration::from_secs(20)).await;
    consumer.stop().await;
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.drift, 0, "{r:?}");
    // A restock is published only if the slice carol's unit came from was empty; either
    // way, never more than one per release.
    let mut restocks = 0;
    while let Ok(m) = ps.get_message() {
        let text: String = m.get_payload().unwrap();
        if text.starts_with("restock") {
            restocks += 1;
        }
    }
    assert!(
        restocks <= 1,
        "at most one restock for one release, saw {restocks}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payment_timeout_releases_once_even_when_swept_twice() {
    let s = Stack::start().await;
    let c = campaign(&s, 8002, 2, 1, 1, 1).await;
    let mut cfg = s.cfg.clone();
    cfg.release_interval = Duration::from_secs(3600); // sweeps are driven by the test
    let consumer = start_consumer(cfg);
    let ids = claim_all(&s.client, &c, vec!["erin".into(), "frank".into()], 2).await;
    assert_eq!(ids.len(), 2);
    wait_drained(&s, c.sku, 2, Duration::from_secs(20)).await;
    release::confirm(&s.pool, &ids[1], T).await.unwrap();
    assert_eq!(slices(&s, c.sku, 1).await, 0);

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let now = shard_router::now_ms();
    let first = release::sweep(&s.pool, &s.client, now, T).await.unwrap();
    let second = release::sweep(&s.pool, &s.client, now, T).await.unwrap();
    assert_eq!((first, second), (1, 0), "only the unpaid claim, once");
    // A direct second release of the same claim changes nothing either.
    assert_eq!(
        release::release(&s.pool, &s.client, &ids[0], Reason::PaymentTimeout, T)
            .await
            .unwrap(),
        Outcome::AlreadyReleased
    );
    assert_eq!(slices(&s, c.sku, 1).await, 1);
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 8002")
            .await,
        1
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims WHERE status = 'released'")
            .await,
        1
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims WHERE status = 'confirmed'")
            .await,
        1
    );

    let timed_out_user: String =
        sqlx::query_scalar("SELECT CAST(user_id AS CHAR) FROM claims WHERE status = 'released'")
            .fetch_one(&s.pool)
            .await
            .unwrap();
    assert_eq!(
        s.client
            .user_count(c.sku, 1, &timed_out_user)
            .await
            .unwrap(),
        0
    );
    let again = claim_all(&s.client, &c, vec![timed_out_user], 1).await;
    assert_eq!(again.len(), 1, "the released user may claim again");
    wait_drained(&s, c.sku, 3, Duration::from_secs(20)).await;
    consumer.stop().await;
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.drift, 0, "{r:?}");
}

/// A release's Redis step is on a replica before the ledger says `released`. Before the
/// fix the ledger moved the claim to `released` as soon as the master ran the scripts; a
/// failover to a replica that missed them rolled the unit back out of the slice (and the
/// user's count back up), and nothing ever returned it: the ledger's `released` claim is
/// never released again. Now the claim stays `releasing` and the sweep releases it on the
/// promoted replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_no_replica_confirmed_stays_releasing_until_one_does() {
    let (mut s, replica) = stack_with_replica().await;
    let c = campaign(&s, 8_004, 2, 1, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    assert_eq!(
        claim_all(&s.client, &c, vec!["erin".into()], 1).await.len(),
        1
    );
    wait_drained(&s, c.sku, 1, Duration::from_secs(20)).await;
    consumer.stop().await;
    let erin: String = sqlx::query_scalar("SELECT claim_id FROM claims WHERE user_id = 'erin'")
        .fetch_one(&s.pool)
        .await
        .unwrap();

    promote(&replica);
    let out = release::release(&s.pool, &s.client, &erin, Reason::Cancelled, T).await;
    assert!(out.is_err(), "no replica confirmed the release: {out:?}");
    assert_eq!(slices(&s, c.sku, 1).await, 2, "the master has it");
    let status = "SELECT COUNT(*) FROM claims WHERE status = 'releasing'";
    assert_eq!(
        s.count(status).await,
        1,
        "not released before a replica holds it"
    );

    let promoted = fail_over(&mut s, &replica).await;
    let slice = || async { promoted.slices(c.sku, 1).await.unwrap()[0].1 };
    assert_eq!(slice().await, Some(1), "the release rolled back");
    let _second = test_support::RedisServer::start_replica_of(&replica);
    retry(async || {
        let _ = release::sweep(&s.pool, &promoted, shard_router::now_ms(), T).await;
        s.count(status).await == 0
    })
    .await;
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims WHERE status = 'released'")
            .await,
        1
    );
    assert_eq!(
        slice().await,
        Some(2),
        "the unit is back on the promoted replica"
    );
    assert_eq!(promoted.user_count(c.sku, 1, "erin").await.unwrap(), 0);
}

/// One master's replica stalls (stopped, still connected): the releases of its shards
/// cannot be confirmed, and the sweep used to stop at the first of them, so every other
/// due claim of every SKU and master waited behind it (and behind the first 500 due rows,
/// which stuck claims fill). Now the sweep leaves the shards it found unconfirmed for the
/// next sweep, goes on with the others, and spends one bounded confirmation per stuck
/// master, not one per claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_replica_holds_back_only_the_releases_of_its_own_master() {
    let s = ClusterStack::start(1).await;
    let p = s.client.placement().clone();
    let slot = |shard: u16| shard_router::placement::slot_of_tag(p.tag(shard));
    let shard = |sku: u64| p.shards_of(sku, 1)[0];
    // The stuck SKU comes first in the sweep's order (lower sku, lower claim ids) and
    // lives on another master than the healthy one.
    let (stuck, healthy) = (15_101..15_200)
        .flat_map(|a| (a + 1..15_200).map(move |b| (a, b)))
        .find(|&(a, b)| {
            s.cluster.master_of(slot(shard(a))) != s.cluster.master_of(slot(shard(b)))
                && format!("{}-", shard(a)) < format!("{}-", shard(b))
        })
        .expect("two skus on two masters");
    let a = open_campaign(&s.pool, &s.client, stuck, 600, 1, 1, 1).await;
    let b = open_campaign(&s.pool, &s.client, healthy, 4, 1, 1, 1).await;
    let wait = ReplicaWait::Auto(Duration::from_millis(50));
    let mut cfg = s.cfg.clone();
    cfg.datapath.replica_wait = wait;
    let consumer = start_consumer(cfg);
    assert_eq!(
        claim_all(&s.client, &a, users("a", 520), 16).await.len(),
        520
    );
    assert_eq!(claim_all(&s.client, &b, users("b", 3), 3).await.len(), 3);
    wait_rows(&s.pool, a.sku, 520, Duration::from_secs(60)).await;
    wait_rows(&s.pool, b.sku, 3, Duration::from_secs(30)).await;
    consumer.stop().await;

    let (_, replica) = s.cluster.master_and_replica(slot(shard(a.sku)));
    s.cluster.nodes()[replica].signal("STOP");
    let released = |sku: u64| {
        let pool = s.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM claims WHERE sku = ? AND status = 'released'",
            )
            .bind(sku)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    // Every claim is past its payment timeout.
    let later = shard_router::now_ms() + 3_600_000;
    let started = std::time::Instant::now();
    let n = release::sweep_with(&s.pool, &s.client, later, wait, T)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        (released(b.sku).await, released(a.sku).await, n),
        (3, 0, 3),
        "the healthy master's claims are released, the stalled one's wait"
    );
    // One confirmation bound (3 attempts of a 50 ms fence and a pause each, ~0.3 s) for
    // the stuck shard, not one per claim (520 of them), and the stuck claims, more than a
    // page of due claims, did not hide the healthy ones.
    assert!(
        took < test_support::slack(Duration::from_millis(1500)),
        "sweep took {took:?}"
    );

    s.cluster.nodes()[replica].signal("CONT");
    retry(async || {
        let _ = release::sweep_with(&s.pool, &s.client, later, wait, T).await;
        released(a.sku).await == 520
    })
    .await;
    assert_eq!(
        released(a.sku).await,
        520,
        "released once the replica is back"
    );
    assert_eq!(
        s.client.slices(a.sku, 1).await.unwrap()[0].1,
        Some(600),
        "each unit back once"
    );
}
