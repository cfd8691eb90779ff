//! Late claims (docs/DESIGN.md, "Rebuild from the ledger"): a consumer batch holding
//! records from before a loss that commits only after the rebuild read the ledger. Those
//! units must still be counted (no oversell, the user's limit holds), exactly once, and a
//! crash between the commit and the Redis half is repaired.

use std::time::{Duration, Instant};

use crate::common::rebuild::*;
use crate::common::*;
use campaign_ops::campaign::Campaign;
use campaign_ops::rebuild;
use consumer::late;
use shard_router::{ClaimOutcome, ClaimRecord};
use sqlx::Connection;

async fn wait_count(s: &Stack, c: &Campaign, user: &str, n: u32, limit: Duration) -> u32 {
    let deadline = Instant::now() + limit;
    loop {
        let got = s.client.user_count(c.sku, c.width, user).await.unwrap();
        if got == n || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Subscribes to the events channel now; the receiver gets `true` once `message` is
/// published (within 10 s).
fn first_event(s: &Stack, message: &str) -> std::sync::mpsc::Receiver<bool> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut conn = s.redis.connection();
    let message = message.to_owned();
    std::thread::spawn(move || {
        let mut ps = conn.as_pubsub();
        ps.subscribe(shard_router::keys::EVENTS_CHANNEL).unwrap();
        ps.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let _ = ready_tx.send(());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(msg) = ps.get_message() {
                if msg.get_payload::<String>().ok().as_deref() == Some(message.as_str()) {
                    let _ = tx.send(true);
                    return;
                }
            }
        }
        let _ = tx.send(false);
    });
    ready_rx.recv().unwrap();
    rx
}

/// The review finding: alice's claim is read by a consumer, Redis loses everything, the
/// rebuild reads streams and ledger (alice in neither), then the consumer's batch commits.
/// Before the fix the rebuilt slice sold alice's unit again (4 active units on a stock of
/// 3) and alice could claim a second time over her limit of 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_committed_after_the_rebuild_read_is_counted() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_001, 3, 1, 1, 3600).await;
    let held = held_by_a_consumer(&s, &c, "alice").await;
    assert_eq!(held.len(), 1);

    flushall(&s);
    let r = rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(r.slices.iter().map(|x| x.1).sum::<i64>(), 3, "alice unseen");
    let replay_event = first_event(&s, &format!("replay {}", c.sku));
    // The stalled consumer commits now; the running service counts its late claim.
    consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    let consumer = start_consumer(s.cfg.clone());
    assert_eq!(
        wait_count(&s, &c, "alice", 1, Duration::from_secs(5)).await,
        1,
        "alice's late claim counted in Redis"
    );
    // Her answer is back outside any claim: gateways that read the SKU's replay filter
    // before are told to drop it (gateway/src/replay_filter.rs).
    assert!(
        replay_event
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or(false),
        "no `replay` event for the late claim's answer"
    );
    // Her original request id replays her claim; a new one meets her limit.
    let ClaimOutcome::Replay(first) = claim(&s, &c, "alice").await else {
        panic!("no replay answer for alice's late claim")
    };
    assert_eq!(first.claim_id, held[0].claim_id);
    assert_eq!(
        claim_one(&s, &c, "alice", Some("r-again")).await,
        ClaimOutcome::LimitReached { held: 1 }
    );

    let mut sold = 0;
    for user in ["bob", "carol", "dave", "erin", "alice"] {
        if matches!(claim(&s, &c, user).await, ClaimOutcome::Claimed { .. }) {
            sold += 1;
        }
    }
    wait_rows(&s.pool, c.sku, 1 + sold, Duration::from_secs(20)).await;
    consumer.stop().await;
    let active = active_units(&s, c.sku).await;
    assert!(active <= 3, "ledger active units {active} > stock 3");
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims WHERE user_id = 'alice'")
            .await,
        1,
        "alice's limit of 1 held across the rebuild"
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM late_claims WHERE applied_ms IS NOT NULL")
            .await,
        1
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// The rebuild holds the campaign row while it reads: a batch that arrives meanwhile
/// waits, and commits either before the read (counted there) or after the rebuild's
/// commit (then it is late and counted in Redis). Either way each unit counts once.
/// The row is held from a second connection so the three steps overlap for sure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_racing_the_rebuild_read_is_counted_once() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_002, 4, 2, 1, 3600).await;
    let ids = claim_all(&s.client, &c, users("a", 2), 2).await;
    assert_eq!(ids.len(), 2);
    let held = read_like_a_consumer(&s, &c).await;
    flushall(&s);

    let mut blocker = sqlx::MySqlConnection::connect(&s.db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT sku FROM campaigns WHERE sku = ? FOR UPDATE")
        .bind(c.sku)
        .execute(&mut blocker)
        .await
        .unwrap();
    let rebuild = {
        let (pool, client) = (s.pool.clone(), s.client.clone());
        tokio::spawn(async move { rebuild::rebuild(&pool, &client, 12_002, &rebuild_opts()).await })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    let batch = {
        let pool = s.pool.clone();
        tokio::spawn(async move { consumer::commit::write_batch(&pool, &held, T).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!rebuild.is_finished() && !batch.is_finished(), "both wait");
    sqlx::query("COMMIT").execute(&mut blocker).await.unwrap();
    let r = rebuild.await.unwrap().unwrap();
    let out = batch.await.unwrap().unwrap();
    // Counted by the rebuild (inserted before its read) or late (after it): never both.
    eprintln!(
        "rebuild counted {} unit(s), the batch found {} late",
        r.active_units + r.in_flight_units,
        out.late.len()
    );
    let counted = r.active_units + out.late.len() as u64;
    assert_eq!(counted, 2, "rebuild {r:?}, late {:?}", out.late);
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    let left: i64 = s
        .client
        .slices(c.sku, c.width)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(_, v)| v)
        .sum();
    assert_eq!(left, 2, "4 - the two claims, once each");
    for u in users("a", 2) {
        assert_eq!(s.client.user_count(c.sku, c.width, &u).await.unwrap(), 1);
    }
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// A crash between the late batch's commit and its Redis half: the next rebuild counts the
/// claim from the ledger and marks it done, and no later sweep takes the unit twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_rebuild_counts_a_late_claim_left_unapplied() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_003, 5, 1, 2, 3600).await;
    let held = held_through_a_loss(&s, &c, "alice").await;
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1, "judged late");
    // (crash: never applied) — the next rebuild counts it from the ledger.
    let r = rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    // Generations: 1 the first preheat, 2 the first rebuild, 3 this one.
    assert_eq!((r.active_units, r.late_counted, r.gen), (1, 1, 3));
    assert_eq!(late::sweep(&s.pool, &s.client, None, T).await.unwrap(), 0);
    // Applying the old judgement again is refused: a newer rebuild counted it.
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(
        s.client.slices(c.sku, 1).await.unwrap()[0].1,
        Some(4),
        "taken once"
    );
    assert_eq!(s.client.user_count(c.sku, 1, "alice").await.unwrap(), 1);
}

/// A late second chance (units from another shard than the user's home) is counted on both
/// shards, once; a late claim whose units were sold again meanwhile is an `oversold`
/// anomaly and the slice stays at 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_second_chance_counts_on_both_shards_once() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_004, 8, 2, 2, 3600).await;
    let p = s.client.placement().clone();
    let shards = p.shards_of(c.sku, c.width);
    let record = |user: &str, n: u64| {
        let home = p.home_shard(c.sku, c.width, user);
        let other = *shards.iter().find(|&&x| x != home).unwrap();
        let now = shard_router::now_ms();
        ClaimRecord {
            claim_id: format!("{other}-{now}-{n}"),
            sku: c.sku,
            user: user.into(),
            qty: 1,
            user_seq: 3,
            shard: other,
            home,
            request_id: None,
            ts_ms: now,
            gen: 0,
        }
    };
    let zoe = record("zoe", 0);
    flushall(&s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    let before = s.client.slices(c.sku, c.width).await.unwrap();
    let out = consumer::commit::write_batch(&s.pool, std::slice::from_ref(&zoe), T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1);
    for _ in 0..2 {
        assert_eq!(
            late::apply(&s.pool, &s.client, &out.late, T).await.unwrap(),
            0
        );
    }
    let after = s.client.slices(c.sku, c.width).await.unwrap();
    for ((shard, b), (_, a)) in before.iter().zip(&after) {
        let taken = if *shard == zoe.shard { 1 } else { 0 };
        assert_eq!(a.unwrap(), b.unwrap() - taken, "shard {shard}");
    }
    assert_eq!(s.client.user_count(c.sku, c.width, "zoe").await.unwrap(), 1);

    // Sold out on yan's take shard before his late claim is counted.
    let yan = record("yan", 1);
    let stock_key = shard_router::keys::ShardKeys::new(&p, yan.shard, c.sku).stock();
    let _: () = redis::cmd("SET")
        .arg(&stock_key)
        .arg(0)
        .query(&mut s.redis.connection())
        .unwrap();
    let out = consumer::commit::write_batch(&s.pool, std::slice::from_ref(&yan), T)
        .await
        .unwrap();
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    let left: i64 = redis::cmd("GET")
        .arg(&stock_key)
        .query(&mut s.redis.connection())
        .unwrap();
    assert_eq!(left, 0, "never below 0");
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'oversold'")
            .await,
        1
    );
    assert_eq!(s.client.user_count(c.sku, c.width, "yan").await.unwrap(), 1);
}

/// Once a campaign was rebuilt (even with an empty ledger), a preheat after a loss
/// rebuilds again instead of splitting the stock without a generation: records claimed
/// afterwards carry the campaign's generation and are never taken for late ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rebuild_a_preheat_keeps_the_generation() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_005, 4, 1, 1, 3600).await;
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    flushall(&s);
    campaign_ops::campaign::preheat(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    let held = held_by_a_consumer(&s, &c, "alice").await;
    // Generations: 1 the first preheat, 2 the rebuild, 3 the preheat after the loss.
    assert_eq!(held[0].gen, 3);
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert!(out.late.is_empty());
}

/// A late claim whose own hold still stands (its second chance was in progress at the
/// loss; the rebuild counted the hold for the user) must raise the user's count once. The
/// apply settles that hold itself; stale-hold resolution running first (the claim is in the
/// ledger, so it keeps the hold) must leave it to the apply. Before the fix it kept the
/// hold, the apply then found no hold of the claim's and counted the unit a second time:
/// a count of 2 for one unit, the user refused below the limit. (Reachable between commit
/// and apply, and after a failover took an unconfirmed apply back, bringing the hold back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_hold_of_an_unapplied_late_claim_is_left_to_its_apply() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_006, 5, 1, 2, 3600).await;
    let p = s.client.placement().clone();
    let shard = p.shards_of(c.sku, 1)[0];
    flushall(&s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    let now = shard_router::now_ms();
    let hk = shard_router::keys::ShardKeys::new(&p, shard, c.sku);
    // bob's hold, expired, counted for him (as the rebuild counts a standing hold), placed
    // under the generation his claim below was taken under: his own.
    let _: () = dead_hold(&mut redis::pipe(), &hk, "bob", "r-bob", 0, now)
        .query(&mut s.redis.connection())
        .unwrap();
    let bob = ClaimRecord {
        claim_id: format!("{shard}-{now}-0"),
        sku: c.sku,
        user: "bob".into(),
        qty: 1,
        user_seq: 1,
        shard,
        home: shard,
        request_id: Some("r-bob".into()),
        ts_ms: now - 61_000,
        gen: 0,
    };
    let out = consumer::commit::write_batch(&s.pool, std::slice::from_ref(&bob), T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1);
    // Reconciliation runs between the commit and the apply.
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.stale_holds, 0, "left to the late claim's apply: {r:?}");
    assert_eq!(r.drift, 0, "{r:?}");
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(
        s.client.user_count(c.sku, 1, "bob").await.unwrap(),
        1,
        "one unit, counted once"
    );
    assert_eq!(s.client.slices(c.sku, 1).await.unwrap()[0].1, Some(4));
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// The same late claim with its own hold standing, applied by the sweep instead (the
/// consumer died between its commit and its apply, or no replica confirmed the apply): the
/// sweep reads the claim back from the ledger, and the apply knows its hold by the
/// record's generation (`lua/rebuild_late.lua` ARGV[13]). The hold here is named as
/// `lua/claim.lua` names it, by the generation its shard carried (1, the first preheat's),
/// which is also the record's. Read back as generation 0, the claim did not know its own
/// hold: the user's count went to 2 for one unit and the hold stayed, kept later by
/// stale-hold resolution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_knows_a_late_claims_own_hold_by_its_generation() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_007, 5, 1, 2, 3600).await;
    let p = s.client.placement().clone();
    let shard = p.shards_of(c.sku, 1)[0];
    let hk = shard_router::keys::ShardKeys::new(&p, shard, c.sku);
    let placed = shard_gen(&s.client, &hk).await;
    assert_eq!(placed, 1, "the first preheat's generation");
    flushall(&s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    let now = shard_router::now_ms();
    // bob's hold from before the loss (his second chance in progress then), counted for him
    // as the rebuild counts a standing hold.
    let _: () = dead_hold(&mut redis::pipe(), &hk, "bob", "r-bob", placed, now)
        .query(&mut s.redis.connection())
        .unwrap();
    let bob = ClaimRecord {
        claim_id: format!("{shard}-{now}-0"),
        sku: c.sku,
        user: "bob".into(),
        qty: 1,
        user_seq: 1,
        shard,
        home: shard,
        request_id: Some("r-bob".into()),
        ts_ms: now - 61_000,
        gen: placed,
    };
    let out = consumer::commit::write_batch(&s.pool, std::slice::from_ref(&bob), T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1);
    // No apply from memory: the sweep finds it in the ledger.
    late::sweep(&s.pool, &s.client, Some(c.sku), T)
        .await
        .unwrap();
    assert_eq!(
        s.client.user_count(c.sku, 1, "bob").await.unwrap(),
        1,
        "one unit, counted once"
    );
    let holds = s.client.holds(c.sku, shard).await.unwrap();
    assert!(
        holds.is_empty(),
        "its own hold settled by the apply: {holds:?}"
    );
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}
