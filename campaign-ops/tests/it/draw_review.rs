//! Adversarial review of the draw (campaign mode `draw`), on real Redis and MariaDB: each
//! test is an interleaving or a fault that broke an invariant or the draw's fairness or
//! verifiability before its fix. The draw loop and the entries reader are driven step by
//! step here (`draw::run::step`, `draw::entries::round`) so each interleaving is exact.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use campaign_ops::draw::{self, entries, run};
use ledger::draws::{self, DrawState, Ranked};
use shard_router::draw::EntryOutcome;

use crate::common::draw::{draw_campaign, enter_all};
use crate::common::{start_consumer, users, Stack, SHARDS, T};

const WIDTH: u16 = SHARDS;

/// One entries-reader round on every shard, as the consumer's reader runs them.
async fn read_entries(s: &Stack) {
    let mut trimmed = HashMap::new();
    for shard in 0..s.client.placement().shard_count() {
        entries::round(&s.pool, &s.client, shard, &mut trimmed, T)
            .await
            .unwrap();
    }
}

async fn the_draw(s: &Stack, sku: u64) -> draws::Draw {
    draws::get(&s.pool, sku, T).await.unwrap().unwrap()
}

/// `user`'s home shard loses the draw's keys, and every stored answer of the SKU goes
/// (a grant's among them); the home shard.
fn lose_the_draw_of(s: &Stack, sku: u64, user: &str) -> u16 {
    let home = s.client.placement().home_shard(sku, WIDTH, user);
    let k = shard_router::keys::ShardKeys::new(s.client.placement(), home, sku);
    let mut conn = s.redis.connection();
    redis::cmd("DEL")
        .arg(k.draw_meta())
        .arg(k.entrants())
        .arg(k.top_k())
        .query::<()>(&mut conn)
        .unwrap();
    let answers: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*:req:{sku}:*"))
        .query(&mut conn)
        .unwrap();
    for a in answers {
        redis::cmd("DEL").arg(a).query::<()>(&mut conn).unwrap();
    }
    home
}

/// One pass of the draw loop over `sku`, its settle started `waited` ago.
async fn step(s: &Stack, sku: u64, waited: Duration) {
    let d = the_draw(s, sku).await;
    let since = Instant::now()
        .checked_sub(waited)
        .unwrap_or_else(Instant::now);
    let mut closing = HashMap::from([(sku, run::Closing::new(since))]);
    run::step(
        &s.pool,
        &s.client,
        &d,
        shard_router::now_ms(),
        &mut closing,
        s.cfg.datapath.replica_wait,
        T,
    )
    .await
    .unwrap();
}

/// A shard's Redis lost its history (a failover to a replica whose clock is behind, a
/// restart from an old snapshot): the reader's place is far past every id the new master
/// hands out, under another replication id. The new master's entries stream is empty when
/// the reader first sees it. Before the fix the reader kept the old place under the new
/// replication id, so every later entry (ids below it) was never read, never committed,
/// and then trimmed away as "committed": acknowledged entries missing from the draw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_masters_empty_entries_stream_does_not_keep_the_old_place() {
    let s = Stack::start().await;
    let sku = 9_201;
    draw_campaign(&s, sku, 2, 1, Duration::from_secs(600), 60).await;
    for shard in 0..s.client.placement().shard_count() {
        let key = s.client.entries_stream(shard).key;
        sqlx::query("INSERT INTO stream_offsets (stream, last_id, repl_id) VALUES (?, ?, ?)")
            .bind(&key)
            .bind("99999999999999-0")
            .bind("0000000000000000000000000000000000000000")
            .execute(&s.pool)
            .await
            .unwrap();
    }
    // The reader meets the new master before any entry.
    read_entries(&s).await;
    let who = users("after-failover", 12);
    enter_all(&s, sku, &who).await;
    for _ in 0..3 {
        read_entries(&s).await;
    }
    assert_eq!(
        draws::entry_count(&s.pool, sku, T).await.unwrap(),
        who.len() as u64,
        "every acknowledged entry reaches the ledger"
    );
}

/// The settle gave up (the ledger lagged the shards past its bound) and the draw was made
/// from what the ledger held. The entries the reader commits afterwards must not join the
/// ledger's entries of that draw: before the fix they did, so the ledger's entry list was
/// no longer the list the draw was made from (`entrants` disagreed with it, and an honest
/// draw failed `verify` whenever a late entry would have ranked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_committed_after_the_draw_do_not_join_it() {
    let s = Stack::start().await;
    let sku = 9_202;
    draw_campaign(&s, sku, 2, 2, Duration::from_secs(600), 60).await;
    let early = users("early", 10);
    enter_all(&s, sku, &early).await;
    read_entries(&s).await;
    assert_eq!(draws::entry_count(&s.pool, sku, T).await.unwrap(), 10);
    // Accepted by the shards, not in the ledger yet when the draw runs.
    let late = users("late", 30);
    enter_all(&s, sku, &late).await;
    step(&s, sku, Duration::from_secs(31)).await;
    let d = the_draw(&s, sku).await;
    assert_eq!(d.state, DrawState::Drawn);
    assert_eq!(d.entrants, Some(10));
    let unsettled = s
        .count("SELECT COUNT(*) FROM anomalies WHERE kind = 'draw_unsettled'")
        .await;
    assert_eq!(unsettled, 1);

    // The reader catches up after the draw.
    for _ in 0..3 {
        read_entries(&s).await;
    }
    assert_eq!(
        draws::entry_count(&s.pool, sku, T).await.unwrap(),
        10,
        "the ledger's entries are the ones drawn from"
    );
    let v = draw::verify::verify(&s.pool, sku, T).await.unwrap();
    assert!(v.verified, "{v:?}");
    // A late entrant is told the truth: not in the draw.
    assert_eq!(
        s.client.draw_enter(sku, WIDTH, &late[0], 0).await.unwrap(),
        EntryOutcome::Lost
    );
}

/// An entry added to (or removed from) the ledger after the draw, below the ranks, left
/// `verify` passing: it did not compare the entries it recomputed from with the count the
/// draw recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_an_entry_list_changed_after_the_draw() {
    let s = Stack::start().await;
    let sku = 9_203;
    draw_campaign(&s, sku, 1, 1, Duration::from_secs(600), 60).await;
    enter_all(&s, sku, &users("u", 8)).await;
    read_entries(&s).await;
    step(&s, sku, Duration::ZERO).await;
    let d = the_draw(&s, sku).await;
    assert_eq!((d.state, d.entrants), (DrawState::Drawn, Some(8)));
    assert!(
        draw::verify::verify(&s.pool, sku, T)
            .await
            .unwrap()
            .verified
    );
    // An entry that ranks below every rank: it changes no rank.
    let worst = draws::ranks(&s.pool, sku, 0, 10, T)
        .await
        .unwrap()
        .last()
        .unwrap()
        .priority;
    let (user, prio) = (0..)
        .map(|i| format!("added-later-{i}"))
        .map(|u| {
            let p = shard_router::draw::priority(&d.seed, sku, &u);
            (u, p)
        })
        .find(|(_, p)| *p > worst)
        .unwrap();
    sqlx::query(
        "INSERT INTO draw_entries (sku, user_id, priority, entry_id, shard, entered_ms) \
         VALUES (?, ?, ?, '0-1-0', 0, 0)",
    )
    .bind(sku)
    .bind(&user)
    .bind(prio)
    .execute(&s.pool)
    .await
    .unwrap();
    let v = draw::verify::verify(&s.pool, sku, T).await.unwrap();
    assert!(v.ranks_match, "{v:?}");
    assert!(
        !v.verified,
        "an entry list that is not the drawn one: {v:?}"
    );
}

/// The operator hands a unit to a waitlisted user ahead of a winner (a grant under the
/// request id `draw` for rank 3 while rank 1 gets none): every granted user is ranked, so
/// `verify` passed. Grants go in rank order, so the granted users must be ranks 1..n.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_grants_out_of_rank_order() {
    let s = Stack::start().await;
    let sku = 9_204;
    let stock = 2u64;
    draw_campaign(&s, sku, stock, 2, Duration::from_secs(3), 60).await;
    let consumer = start_consumer(s.cfg.clone());
    enter_all(&s, sku, &users("u", 20)).await;
    let t0 = Instant::now();
    loop {
        let d = the_draw(&s, sku).await;
        let grants = s
            .count(&format!(
                "SELECT COUNT(*) FROM claims WHERE sku = {sku} AND request_id = 'draw'"
            ))
            .await;
        if d.state == DrawState::Drawn && grants == stock as i64 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "not granted: {d:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.stop().await;
    let v = draw::verify::verify(&s.pool, sku, T).await.unwrap();
    assert!(v.verified, "{v:?}");
    let ranks: Vec<Ranked> = draws::ranks(&s.pool, sku, 0, 10, T).await.unwrap();
    // Rank 1's unit goes to rank 3 instead.
    sqlx::query(
        "UPDATE claims SET user_id = ? WHERE sku = ? AND user_id = ? AND request_id = 'draw'",
    )
    .bind(&ranks[2].user)
    .bind(sku)
    .bind(&ranks[0].user)
    .execute(&s.pool)
    .await
    .unwrap();
    let v = draw::verify::verify(&s.pool, sku, T).await.unwrap();
    assert!(
        !v.verified,
        "a waitlisted user served before a winner: {v:?}"
    );
}

/// The service died after marking every shard and before writing the SKU metadata with
/// the revealed seed. Every later pass found no shard left to mark and never wrote it:
/// gateways kept showing the draw without its seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_marks_and_the_metadata_still_reveals_the_seed() {
    let s = Stack::start().await;
    let sku = 9_205;
    let c = draw_campaign(&s, sku, 1, 1, Duration::from_secs(600), 60).await;
    enter_all(&s, sku, &users("u", 6)).await;
    read_entries(&s).await;
    // The draw loop's steps 1 to 4, up to the crash.
    for shard in s.client.placement().shards_of(sku, WIDTH) {
        s.client.draw_close(shard, sku).await.unwrap().unwrap();
    }
    let best = draws::entries_in_order(&s.pool, sku, None, 2, T)
        .await
        .unwrap();
    let ranks: Vec<Ranked> = best
        .into_iter()
        .enumerate()
        .map(|(i, e)| Ranked {
            rank: i as u32 + 1,
            user: e.user,
            priority: e.priority,
        })
        .collect();
    assert!(
        draws::record(&s.pool, sku, &ranks, 6, shard_router::now_ms(), T)
            .await
            .unwrap()
    );
    for shard in s.client.placement().shards_of(sku, WIDTH) {
        run::mark_shard(&s.pool, &s.client, &c, shard, None, T)
            .await
            .unwrap();
    }
    // The next owner's pass.
    step(&s, sku, Duration::ZERO).await;
    let meta = s.client.sku_meta(sku).await.unwrap().unwrap();
    let d = the_draw(&s, sku).await;
    assert_eq!(
        meta.mode.draw().unwrap().seed.clone(),
        Some(hex::encode(&d.seed)),
        "the seed is revealed once drawn"
    );
}

/// A shard lost an entry the ledger holds (a failover to a replica that had not got it;
/// modeled by removing it from the shard), and another entry waits on the shard to be
/// committed: the shards' count equals the ledger's, so the settle took the ledger as
/// complete and drew without the waiting entry, acknowledged and never counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_draw_waits_for_every_entry_even_when_the_counts_agree() {
    let s = Stack::start().await;
    let sku = 9_206;
    draw_campaign(&s, sku, 1, 1, Duration::from_secs(600), 60).await;
    let first = users("u", 6);
    enter_all(&s, sku, &first).await;
    read_entries(&s).await;
    let lost = &first[0];
    let home = s.client.placement().home_shard(sku, WIDTH, lost);
    let k = shard_router::keys::ShardKeys::new(s.client.placement(), home, sku);
    let mut conn = s.redis.connection();
    redis::cmd("HDEL")
        .arg(k.entrants())
        .arg(lost)
        .query::<()>(&mut conn)
        .unwrap();
    redis::cmd("ZREM")
        .arg(k.top_k())
        .arg(lost)
        .query::<()>(&mut conn)
        .unwrap();
    let waiting = "entered-last".to_owned();
    enter_all(&s, sku, std::slice::from_ref(&waiting)).await;

    step(&s, sku, Duration::ZERO).await;
    assert_eq!(
        the_draw(&s, sku).await.state,
        DrawState::Open,
        "an entry accepted by a shard is not in the ledger yet"
    );
    read_entries(&s).await;
    step(&s, sku, Duration::ZERO).await;
    let d = the_draw(&s, sku).await;
    assert_eq!((d.state, d.entrants), (DrawState::Drawn, Some(7)));
    assert!(
        draw::verify::verify(&s.pool, sku, T)
            .await
            .unwrap()
            .verified
    );
}

/// A shard lost its draw after the draw time, before the draw ran: the restore opened it
/// again as `open`, so a gateway whose clock is behind Redis's got a fresh entry accepted
/// there after every other shard had closed (a late entry joining the draw).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_restored_after_its_time_takes_no_entry() {
    let s = Stack::start().await;
    let sku = 9_207;
    let c = draw_campaign(&s, sku, 1, 1, Duration::from_secs(2), 60).await;
    enter_all(&s, sku, &users("u", 4)).await;
    read_entries(&s).await;
    let d = the_draw(&s, sku).await;
    while shard_router::now_ms() <= d.draw_at_ms + 50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let late = "late-by-a-slow-clock";
    let home = s.client.placement().home_shard(sku, WIDTH, late);
    let k = shard_router::keys::ShardKeys::new(s.client.placement(), home, sku);
    redis::cmd("DEL")
        .arg(k.draw_meta())
        .arg(k.entrants())
        .arg(k.top_k())
        .query::<()>(&mut s.redis.connection())
        .unwrap();
    draw::restore::shard(&s.pool, &s.client, &c, &d, home, T)
        .await
        .unwrap();
    // The gateway's clock says the window is still open.
    let got = s
        .client
        .draw_enter(sku, WIDTH, late, d.draw_at_ms - 1)
        .await
        .unwrap();
    assert_eq!(got, EntryOutcome::Closed);
}

/// Found by the draw model (`two_losses_leave_no_winner_pending` in model/tests/draw.rs):
/// the restore reads the ledger's draw while it is still open, the draw is recorded and
/// its winner granted, then the shard is lost again (the grant's stored answer with it)
/// and the restore, going on with what it read, puts the entries back closed, with no win
/// and no marks. Before the fix the draw loop's marks wrote only the ranks (`R|1` never
/// becomes `W|`) and the rank, granted, was never granted again: the winner was told
/// `won_pending` for good. The marks now write the ledger's wins first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_from_a_stale_read_of_the_draw_still_tells_the_winner() {
    let s = Stack::start().await;
    let sku = 9_208;
    let c = draw_campaign(&s, sku, 1, 0, Duration::from_secs(2), 60).await;
    let stale = the_draw(&s, sku).await;
    assert_eq!(stale.state, DrawState::Open);
    let consumer = start_consumer(s.cfg.clone());
    enter_all(&s, sku, &users("stale", 8)).await;
    let t0 = Instant::now();
    let (winner, claim) = loop {
        let d = the_draw(&s, sku).await;
        if d.state == DrawState::Drawn && d.granted_rank >= 1 {
            let winner = draws::ranks(&s.pool, sku, 0, 1, T).await.unwrap()[0]
                .user
                .clone();
            let grants = draws::grants(&s.pool, sku, shard_router::GRANT_REQUEST, T)
                .await
                .unwrap();
            if let Some((_, claim, _)) = grants.into_iter().find(|(u, _, _)| *u == winner) {
                break (winner, claim);
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "not drawn: {d:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    consumer.stop().await;
    let home = lose_the_draw_of(&s, sku, &winner);
    draw::restore::shard(&s.pool, &s.client, &c, &stale, home, T)
        .await
        .unwrap();
    step(&s, sku, Duration::ZERO).await;
    let got = s.client.draw_enter(sku, WIDTH, &winner, 0).await.unwrap();
    assert!(
        matches!(&got, EntryOutcome::Won { claim_id, .. } if *claim_id == claim),
        "{winner} after a restore from a stale read: {got:?}"
    );
}

/// Found by review: the marks read the wins from the ledger's claims, which trail the
/// claim streams. The draw loop grants the winner (the unit, its `W|`, `granted_rank`
/// moved past it), and the winner's home shard loses its draw keys and the grant's stored
/// answer before the claim reaches the ledger. The restore marked the shard from a ledger
/// with no grant yet: `R|1`, and `drawn`; nothing wrote the win again, so the winner, who
/// holds the unit, was told `won_pending` for good. The draw loop now records each win on
/// its rank (`draws::record_win`) before Redis and before the rank counts as granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_win_lost_before_the_ledger_holds_its_grant_is_restored() {
    let s = Stack::start().await;
    let sku = 9_209;
    let c = draw_campaign(&s, sku, 1, 0, Duration::from_secs(1), 60).await;
    enter_all(&s, sku, &users("ahead", 6)).await;
    read_entries(&s).await;
    let d = the_draw(&s, sku).await;
    while shard_router::now_ms() <= d.draw_at_ms + 50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Close, draw, mark and grant, with no consumer committing the grant's claim.
    step(&s, sku, Duration::ZERO).await;
    let d = the_draw(&s, sku).await;
    assert_eq!((d.state, d.granted_rank), (DrawState::Drawn, 1));
    let winner = draws::ranks(&s.pool, sku, 0, 1, T).await.unwrap()[0]
        .user
        .clone();
    let home = lose_the_draw_of(&s, sku, &winner);
    draw::restore::shard(&s.pool, &s.client, &c, &d, home, T)
        .await
        .unwrap();
    let consumer = start_consumer(s.cfg.clone());
    let t0 = Instant::now();
    loop {
        let got = s.client.draw_enter(sku, WIDTH, &winner, 0).await.unwrap();
        if matches!(got, EntryOutcome::Won { .. }) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "{winner} holds the unit and is told {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    consumer.stop().await;
}
