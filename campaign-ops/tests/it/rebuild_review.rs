//! Adversarial review of the rebuild serialization and late claims (docs/DESIGN.md,
//! "Rebuild from the ledger"): interleavings with stock waves, a preheat after a loss, and
//! the late-claim sweep, each checked against the books (slices + active ledger units =
//! stock) on a real Redis and MariaDB.

use std::time::{Duration, Instant};

use crate::common::rebuild::*;
use crate::common::*;
use campaign_ops::rebuild;
use campaign_ops::wave;
use consumer::late;
use shard_router::{ClaimOutcome, ClaimRecord, ClaimRequest};
use sqlx::Connection;

/// A wave pushed to Redis (its step 2) just before a rebuild's fence, and marked applied in
/// the ledger (step 3) only after the rebuild read the campaign: the rebuild read the stock
/// without the wave and wrote the wave hash without its id, so the wave's units were in
/// neither the rebuilt slice nor any retry (the ledger says applied). Before the fix the
/// slice stayed at 4 on a stock of 6 (drift -2: units stuck, never sold). The wave row is
/// held from a second connection so step 3 waits exactly there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_marked_applied_after_the_rebuild_read_keeps_its_units() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_001, 4, 1, 1, 3600).await;
    let now = schedule_wave_now(&s, c.sku, "w1", 2).await;
    sqlx::query("UPDATE campaign_waves SET start_unit = 4 WHERE sku = ? AND wave_id = 'w1'")
        .bind(c.sku)
        .execute(&s.pool)
        .await
        .unwrap();
    let mut blocker = sqlx::MySqlConnection::connect(&s.db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT wave_id FROM campaign_waves WHERE sku = ? AND wave_id = 'w1' FOR UPDATE")
        .bind(c.sku)
        .execute(&mut blocker)
        .await
        .unwrap();
    let apply = {
        let (pool, client) = (s.pool.clone(), s.client.clone());
        tokio::spawn(async move { wave::apply(&pool, &client, 13_001, "w1", now, T).await })
    };
    // Step 2 done: the slice carries the wave.
    let deadline = Instant::now() + Duration::from_secs(5);
    while slice_sum(&s, &c).await != 6 {
        assert!(Instant::now() < deadline, "wave never reached Redis");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rebuild = {
        let (pool, client) = (s.pool.clone(), s.client.clone());
        tokio::spawn(async move { rebuild::rebuild(&pool, &client, 13_001, &rebuild_opts()).await })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sqlx::query("COMMIT").execute(&mut blocker).await.unwrap();
    let applied = apply.await.unwrap();
    rebuild.await.unwrap().unwrap();
    if applied.is_err() {
        // Refused because a rebuild ran meanwhile: the next round pushes it again.
        wave::apply(&s.pool, &s.client, c.sku, "w1", now, T)
            .await
            .unwrap();
    }
    let stock = s
        .count("SELECT CAST(stock AS SIGNED) FROM campaigns WHERE sku = 13001")
        .await;
    assert_eq!(stock, 6, "the wave is in the ledger");
    assert_eq!(slice_sum(&s, &c).await, 6, "the wave's units are sellable");
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// Note (c) of the change: Redis loses everything while a consumer holds the campaign's
/// first batch, and the operator preheats again. With an empty ledger and no rebuild
/// before, the preheat split the full stock, and the batch (generation 0, like the
/// campaign) committed as an ordinary batch: Redis offered alice's unit a second time
/// (slice 3 + 1 active on a stock of 3) until a reconciliation removed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preheat_after_a_loss_with_an_empty_ledger_counts_the_held_batch() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_002, 3, 1, 1, 3600).await;
    let held = held_by_a_consumer(&s, &c, "alice").await;
    assert_eq!(held.len(), 1);
    flushall(&s);
    campaign_ops::campaign::preheat(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(
        slice_sum(&s, &c).await + active_units(&s, c.sku).await,
        3,
        "alice's unit offered once (late: {:?})",
        out.late
    );
    assert_eq!(s.client.user_count(c.sku, 1, "alice").await.unwrap(), 1);
}

/// Late claims whose shards never reach their generation (a campaign closed meanwhile, a
/// shard rolled back by a failover) stay unapplied. The sweep read only the first 500 by
/// claim id, every 2 s, forever: once 500 such rows existed, a late claim sorting after
/// them (a consumer crashed between its commit and its apply) was never counted, and its
/// unit stayed on sale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_reaches_late_claims_behind_ones_that_wait_forever() {
    let s = Stack::start().await;
    let stuck = campaign(&s, 13_003, 1000, 1, 1000, 3600).await;
    let c = campaign(&s, 13_004, 3, 1, 1, 3600).await;
    let held = held_through_a_loss(&s, &c, "alice").await;

    // 500 late claims judged against a generation the stuck campaign's shards never get.
    sqlx::query("UPDATE campaigns SET rebuild_gen = 99 WHERE sku = ?")
        .bind(stuck.sku)
        .execute(&s.pool)
        .await
        .unwrap();
    let shard = s.client.placement().shards_of(stuck.sku, 1)[0];
    let waiting: Vec<ClaimRecord> = (0..500)
        .map(|n| ClaimRecord {
            claim_id: format!("{shard}-0-{n:04}"),
            sku: stuck.sku,
            user: format!("u{n}"),
            qty: 1,
            user_seq: 1,
            shard,
            home: shard,
            request_id: None,
            ts_ms: shard_router::now_ms(),
            gen: 0,
        })
        .collect();
    let out = consumer::commit::write_batch(&s.pool, &waiting, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 500);
    assert_eq!(late::sweep(&s.pool, &s.client, None, T).await.unwrap(), 500);

    // Alice's batch commits late; the consumer crashes before its apply.
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1);
    assert!(
        out.late[0].claim.claim_id > waiting[499].claim_id,
        "sorts after the stuck ones"
    );
    late::sweep(&s.pool, &s.client, None, T).await.unwrap();
    assert_eq!(
        slice_sum(&s, &c).await,
        2,
        "alice's late claim counted by the sweep"
    );
    assert_eq!(s.client.user_count(c.sku, 1, "alice").await.unwrap(), 1);
}

/// The same interleaving in the order it takes in production (the rebuild's fence and
/// quiesce come first, the wave's ledger step waits for the rebuild's campaign row): the
/// wave's ledger step after the rebuild's commit finds the generation bumped and leaves
/// the wave pending; its next round pushes it to the rebuilt shards and marks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_finishing_after_a_rebuild_is_pushed_again() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_005, 4, 2, 1, 3600).await;
    let now = schedule_wave_now(&s, c.sku, "w2", 3).await;
    let pushed = wave::push(&s.pool, &s.client, c.sku, "w2", T)
        .await
        .unwrap();
    let wave::Pushed::Shards { units, gen } = pushed else {
        panic!("{pushed:?}")
    };
    assert_eq!(slice_sum(&s, &c).await, 7);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    let refused = wave::finish(&s.pool, c.sku, "w2", units, gen, now, T).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(
        wave::apply(&s.pool, &s.client, c.sku, "w2", now, T)
            .await
            .unwrap(),
        wave::Applied::Applied
    );
    assert_eq!(slice_sum(&s, &c).await, 7);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// A late claim's sequence number was lost with Redis, so the rebuilt `useq` hands it out
/// again: alice's next request places a hold under the very `user|seq` of her late claim.
/// The late apply took that hold for its own and skipped her count: once the hold was
/// undone (her second chance found nothing), her count no longer showed the late claim's
/// unit, and she could claim past her limit. Before the fix her count read 1 with the
/// hold standing (2 expected) and 0 after the undo (1 expected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_apply_does_not_take_another_requests_hold_for_its_own() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_006, 4, 2, 2, 3600).await;
    let p = s.client.placement().clone();
    let home = p.home_shard(c.sku, c.width, "alice");
    let held = held_by_a_consumer(&s, &c, "alice").await;
    assert_eq!((held[0].home, held[0].user_seq), (home, 1));
    flushall(&s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();

    // Alice's home is short: her next request holds her count under seq 1 again.
    let stock_key = shard_router::keys::ShardKeys::new(&p, home, c.sku).stock();
    let _: () = redis::cmd("SET")
        .arg(&stock_key)
        .arg(0)
        .query(&mut s.redis.connection())
        .unwrap();
    let req = ClaimRequest {
        sku: c.sku,
        user: "alice".into(),
        qty: 1,
        request_id: Some("r-second".into()),
    };
    let now = shard_router::now_ms();
    let hold = s
        .client
        .claim_home(&req, home, now, true)
        .await
        .unwrap()
        .outcome;
    assert!(
        matches!(hold, shard_router::HomeOutcome::Hold { user_seq: 1, .. }),
        "{hold:?}"
    );

    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1);
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(
        s.client.user_count(c.sku, c.width, "alice").await.unwrap(),
        2,
        "the late claim and the standing hold"
    );
    // Her second chance found nothing: the hold is undone.
    let undone = s
        .client
        .settle(
            c.sku,
            home,
            "alice",
            1,
            Some("r-second"),
            &shard_router::Settlement::Undo,
        )
        .await
        .unwrap()
        .outcome;
    assert!(
        matches!(undone, shard_router::SettleOutcome::Settled { .. }),
        "{undone:?}"
    );
    assert_eq!(
        s.client.user_count(c.sku, c.width, "alice").await.unwrap(),
        1,
        "the late claim still counts"
    );
}

/// Note (a)'s oversell, then a release: alice's late claim finds its unit sold again (the
/// `oversold` anomaly, slice left at 0). Cancelling alice's claim then gave her unit back
/// to the slice although bob holds it: Redis offered a unit that does not exist, a second
/// oversell on top of the recorded one, until a reconciliation removed it. Before the fix
/// the slice read 1 after the cancel (0 expected: 3 active claims on a stock of 3).
///
/// The fix is a per-shard debt (`{T}:debt:<sku>`): `rebuild_late.lua` adds the shortfall,
/// `release_stock.lua` and `wave.lua` pay it before the slice grows, `rebuild.lua` sets it
/// from the ledger, reconciliation counts it. The release of the claim that took the unit,
/// a wave, and rebuilds with a debt standing are in `rebuild_debt.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_does_not_refill_a_late_claims_unit_sold_twice() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_007, 3, 1, 1, 3600).await;
    let held = held_through_a_loss(&s, &c, "alice").await;
    for u in ["bob", "carol", "dave"] {
        assert!(matches!(
            claim(&s, &c, u).await,
            ClaimOutcome::Claimed { .. }
        ));
    }
    let others = read_like_a_consumer(&s, &c).await;
    consumer::commit::write_batch(&s.pool, &others, T)
        .await
        .unwrap();
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(slice_sum(&s, &c).await, 0);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'oversold'")
            .await,
        1
    );

    campaign_ops::release::release(
        &s.pool,
        &s.client,
        &held[0].claim_id,
        campaign_ops::release::Reason::Cancelled,
        T,
    )
    .await
    .unwrap();
    assert_eq!(active_units(&s, c.sku).await, 3);
    assert_eq!(
        slice_sum(&s, &c).await,
        0,
        "alice's unit is bob's (or carol's, or dave's) now"
    );
}

/// A second chance whose take was lost with Redis (its record in a consumer's memory) while
/// its hold stands on the home shard: the late apply finds the hold is the claim's own and
/// adds nothing (the hold counts zoe's unit). Then stale-hold resolution, which looked for
/// the claim before its commit (neither in a stream nor in the ledger), undoes the hold:
/// the count lost zoe's unit and she could buy one more than her limit. The apply settles
/// its own hold as kept (with the final answer), so the undo finds it gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_undone_after_its_late_claim_was_applied_keeps_the_count() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_021, 8, 2, 1, 3600).await;
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    let p = s.client.placement().clone();
    let home = p.home_shard(c.sku, c.width, "zoe");
    let other = *p
        .shards_of(c.sku, c.width)
        .iter()
        .find(|&&x| x != home)
        .unwrap();
    let now = shard_router::now_ms();
    let k = shard_router::keys::ShardKeys::new(&p, home, c.sku);
    let req = k.request("zoe", Some("r-zoe"));
    // What claim.lua leaves for a second chance: the count, the hold, the answer pending.
    let mut conn = s.redis.connection();
    let _: () = redis::pipe()
        .cmd("HINCRBY")
        .arg(k.users())
        .arg("zoe")
        .arg(1)
        .ignore()
        .cmd("HSET")
        .arg(k.user_seq())
        .arg("zoe")
        .arg(3)
        .ignore()
        .cmd("HSET")
        .arg(k.holds())
        .arg("zoe|3")
        // Placed under the generation her record below was taken under: her own hold.
        .arg(format!("1|{}:0|r-zoe", now - 1))
        .ignore()
        .cmd("SET")
        .arg(&req)
        .arg("P")
        .ignore()
        .query(&mut conn)
        .unwrap();
    let zoe = ClaimRecord {
        claim_id: format!("{other}-{now}-0"),
        sku: c.sku,
        user: "zoe".into(),
        qty: 1,
        user_seq: 3,
        shard: other,
        home,
        request_id: Some("r-zoe".into()),
        ts_ms: now,
        gen: 0,
    };
    let out = consumer::commit::write_batch(&s.pool, std::slice::from_ref(&zoe), T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1);
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(s.client.user_count(c.sku, c.width, "zoe").await.unwrap(), 1);

    // The stale-hold resolution's last step, decided before the commit.
    let _ = s
        .client
        .settle(
            c.sku,
            home,
            "zoe",
            3,
            Some("r-zoe"),
            &shard_router::Settlement::Undo,
        )
        .await
        .unwrap()
        .outcome;
    assert_eq!(
        s.client.user_count(c.sku, c.width, "zoe").await.unwrap(),
        1,
        "zoe's claim is in the ledger: her count keeps it"
    );
    let answer: Option<String> = redis::cmd("GET").arg(&req).query(&mut conn).unwrap();
    assert_eq!(
        answer.as_deref(),
        Some(format!("{}|{other}|1", zoe.claim_id).as_str()),
        "a retry replays the claim"
    );
}
