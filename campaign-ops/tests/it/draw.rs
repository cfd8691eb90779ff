//! Draw campaigns end to end with the consumer service running, on real Redis and MariaDB:
//! entries into the ledger, the draw at its time from the ledger, the winners' claims, the
//! waitlist served as a winner's unpaid unit comes back, `verify` (and a tampered draw
//! failing it), and a Redis loss before the draw that the draw still covers.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use campaign_ops::draw;
use ledger::draws::{self, DrawState};
use shard_router::draw::{draw_order, priority, EntryOutcome};

use crate::common::draw::{draw_campaign, enter_all};
use crate::common::{start_consumer, users, Stack, SHARDS, T};

const WIDTH: u16 = SHARDS;

/// Polls until `done` holds for the SKU's draw row (at most `limit`).
async fn wait_draw(s: &Stack, sku: u64, limit: Duration, done: impl Fn(&draws::Draw) -> bool) {
    let t0 = Instant::now();
    loop {
        let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
        if done(&d) {
            return;
        }
        assert!(t0.elapsed() < limit, "draw of {sku} stuck at {d:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls until every shard of the SKU has its draw back: a restore holds each shard (no
/// state, entrants told to come back) until its entrants and ranks are back.
async fn wait_restored(s: &Stack, sku: u64) {
    let t0 = Instant::now();
    for shard in s.client.placement().shards_of(sku, WIDTH) {
        while s.client.draw_state(shard, sku).await.unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "shard {shard} not restored"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The best `k` of `who` by the revealed seed: the draw anyone can recompute.
fn expected(seed: &[u8], sku: u64, who: &[String], k: usize) -> Vec<String> {
    let mut all: Vec<(String, u64)> = who
        .iter()
        .map(|u| (u.clone(), priority(seed, sku, u)))
        .collect();
    all.sort_by(draw_order);
    all.into_iter().take(k).map(|(u, _)| u).collect()
}

async fn ranked(s: &Stack, sku: u64) -> Vec<String> {
    draws::ranks(&s.pool, sku, 0, 1000, T)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.user)
        .collect()
}

async fn claim_of(s: &Stack, sku: u64, user: &str) -> Option<String> {
    sqlx::query_scalar(
        "SELECT claim_id FROM claims WHERE sku = ? AND user_id = ? AND request_id = 'draw' \
         AND status IN ('pending', 'confirmed')",
    )
    .bind(sku)
    .bind(user)
    .fetch_optional(&s.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_ranks_from_the_ledger_grants_the_winners_and_serves_the_waitlist() {
    let s = Stack::start().await;
    let sku = 9_101;
    let (stock, waitlist) = (5u64, 3u32);
    draw_campaign(&s, sku, stock, waitlist, Duration::from_secs(4), 2).await;
    let consumer = start_consumer(s.cfg.clone());
    let who = users("entrant", 120);
    enter_all(&s, sku, &who).await;
    // Before the draw the seed is secret: verify refuses, show hides it.
    assert!(draw::verify::verify(&s.pool, sku, T).await.is_err());
    assert_eq!(draw::show(&s.pool, sku, T).await.unwrap().seed, None);

    wait_draw(&s, sku, Duration::from_secs(30), |d| {
        d.state == DrawState::Drawn && d.granted_rank >= stock as u32
    })
    .await;
    let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
    assert_eq!(d.entrants, Some(who.len() as u64));
    let ranks = ranked(&s, sku).await;
    assert_eq!(
        ranks,
        expected(&d.seed, sku, &who, (stock + u64::from(waitlist)) as usize)
    );
    let anomalies = s
        .count("SELECT COUNT(*) FROM anomalies WHERE kind LIKE 'draw%'")
        .await;
    assert_eq!(anomalies, 0, "the shards' top-K is the ledger's");

    // Winners hold one unit each, by grant; the waitlist waits; everyone else lost.
    let mut winner_claims = Vec::new();
    for (i, u) in ranks.iter().enumerate().take(stock as usize) {
        let t0 = Instant::now();
        let id = loop {
            if let Some(id) = claim_of(&s, sku, u).await {
                break id;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "rank {} has no claim",
                i + 1
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let got = s.client.draw_enter(sku, WIDTH, u, 0).await.unwrap();
        assert!(
            matches!(&got, EntryOutcome::Won { claim_id, .. } if *claim_id == id),
            "rank {}: {got:?}",
            i + 1
        );
        winner_claims.push(id);
    }
    assert_eq!(
        s.client
            .draw_enter(sku, WIDTH, &ranks[stock as usize], 0)
            .await
            .unwrap(),
        EntryOutcome::Waitlisted { position: 1 }
    );
    let ranked_set: HashSet<&String> = ranks.iter().collect();
    let loser = who.iter().find(|u| !ranked_set.contains(u)).unwrap();
    assert_eq!(
        s.client.draw_enter(sku, WIDTH, loser, 0).await.unwrap(),
        EntryOutcome::Lost
    );
    assert_eq!(
        s.client
            .draw_enter(sku, WIDTH, "came-too-late", shard_router::now_ms())
            .await
            .unwrap(),
        EntryOutcome::Closed
    );

    // Four winners pay; the first does not, and its unit goes to the waitlist's first.
    for id in &winner_claims[1..] {
        campaign_ops::release::confirm(&s.pool, id, T)
            .await
            .unwrap();
    }
    let next = &ranks[stock as usize];
    let t0 = Instant::now();
    let promoted = loop {
        if let Some(id) = claim_of(&s, sku, next).await {
            break id;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the waitlist's first got no unit"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    campaign_ops::release::confirm(&s.pool, &promoted, T)
        .await
        .unwrap();
    assert!(claim_of(&s, sku, &ranks[0]).await.is_none(), "released");
    assert!(
        claim_of(&s, sku, &ranks[stock as usize + 1])
            .await
            .is_none(),
        "one unit came back, one waitlisted user served"
    );
    // no-oversell and user-limit in the ledger.
    let active = s
        .count(&format!(
            "SELECT CAST(COALESCE(SUM(qty), 0) AS SIGNED) FROM claims WHERE sku = {sku} AND status IN ('pending', 'confirmed')"
        ))
        .await;
    assert_eq!(active, stock as i64);
    let most = s
        .count(&format!(
            "SELECT CAST(COALESCE(MAX(n), 0) AS SIGNED) FROM (SELECT SUM(qty) AS n FROM claims WHERE sku = {sku} \
             AND status IN ('pending', 'confirmed') GROUP BY user_id) x"
        ))
        .await;
    assert_eq!(most, 1);
    consumer.stop().await;

    let v = draw::verify::verify(&s.pool, sku, T).await.unwrap();
    assert!(v.verified, "{v:?}");
    assert_eq!((v.entrants, v.ranks, v.granted), (120, 8, 6));
    assert_eq!(
        draw::show(&s.pool, sku, T).await.unwrap().seed,
        Some(v.seed.clone())
    );

    // A draw that was not the seed's order fails verify: swap two ranks.
    sqlx::query("UPDATE draw_ranks SET rnk = 1000 WHERE sku = ? AND rnk = 1")
        .bind(sku)
        .execute(&s.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE draw_ranks SET rnk = 1 WHERE sku = ? AND rnk = 2")
        .bind(sku)
        .execute(&s.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE draw_ranks SET rnk = 2 WHERE sku = ? AND rnk = 1000")
        .bind(sku)
        .execute(&s.pool)
        .await
        .unwrap();
    let v = draw::verify::verify(&s.pool, sku, T).await.unwrap();
    assert!(!v.verified && !v.ranks_match, "{v:?}");
}

/// Redis loses everything during the entry window: the entries already in the ledger come
/// back to their shards (a returning entrant is told the same entry), and the draw covers
/// every entry, before and after the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_covers_the_entries_of_a_redis_loss() {
    let s = Stack::start().await;
    let sku = 9_102;
    let (stock, waitlist) = (3u64, 2u32);
    draw_campaign(&s, sku, stock, waitlist, Duration::from_secs(15), 60).await;
    let consumer = start_consumer(s.cfg.clone());
    let before = users("before", 40);
    enter_all(&s, sku, &before).await;
    let t0 = Instant::now();
    while draws::entry_count(&s.pool, sku, T).await.unwrap() < before.len() as u64 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "entries not committed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = s
        .client
        .draw_enter(sku, WIDTH, &before[0], shard_router::now_ms())
        .await
        .unwrap();
    redis::cmd("FLUSHALL")
        .query::<()>(&mut s.redis.connection())
        .unwrap();
    // Restored: the same user is told the same entry, not a new one.
    let t0 = Instant::now();
    loop {
        let got = s
            .client
            .draw_enter(sku, WIDTH, &before[0], shard_router::now_ms())
            .await
            .unwrap();
        if got != EntryOutcome::NotPreheated {
            let EntryOutcome::Entered { entry_id, fresh } = got else {
                panic!("{got:?}")
            };
            let EntryOutcome::Entered { entry_id: was, .. } = &first else {
                panic!("{first:?}")
            };
            assert!(!fresh, "the ledger's entry came back before the user did");
            assert_eq!(&entry_id, was);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "draw not restored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_restored(&s, sku).await;
    let after = users("after", 40);
    enter_all(&s, sku, &after).await;
    wait_draw(&s, sku, Duration::from_secs(40), |d| {
        d.state == DrawState::Drawn && d.granted_rank >= stock as u32
    })
    .await;
    let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
    let everyone: Vec<String> = before.iter().chain(&after).cloned().collect();
    assert_eq!(d.entrants, Some(everyone.len() as u64));
    assert_eq!(
        ranked(&s, sku).await,
        expected(
            &d.seed,
            sku,
            &everyone,
            (stock + u64::from(waitlist)) as usize
        )
    );
    let mismatches = s
        .count("SELECT COUNT(*) FROM anomalies WHERE kind = 'draw_topk_mismatch'")
        .await;
    assert_eq!(mismatches, 0, "the restored top-K is the ledger's");
    consumer.stop().await;
    let v = draw::verify::verify(&s.pool, sku, T).await.unwrap();
    assert!(v.verified, "{v:?}");
}

/// The restore puts a shard's entrants back page by page. Until the last page is back a
/// returning entrant is told to come back, never entered a second time: an entrant of the
/// last page asks all the while. (Before the restore held the shard's state back, the
/// shard was open from its first step, and such an entrant got a fresh entry.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_entrant_is_not_entered_again_while_the_restore_runs() {
    let s = Stack::start().await;
    let sku = 9_104;
    let c = draw_campaign(&s, sku, 3, 0, Duration::from_secs(600), 60).await;
    let consumer = start_consumer(s.cfg.clone());
    // Over 500 (the restore's page) a shard: its last user comes back in a second page.
    let who = users("page", 2_400);
    enter_all(&s, sku, &who).await;
    let t0 = Instant::now();
    while draws::entry_count(&s.pool, sku, T).await.unwrap() < who.len() as u64 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "entries not committed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The restore below is the only one: the consumer's loop would race it.
    consumer.stop().await;
    let last = who.iter().max().unwrap().clone();
    let EntryOutcome::Entered { entry_id: was, .. } = s
        .client
        .draw_enter(sku, WIDTH, &last, shard_router::now_ms())
        .await
        .unwrap()
    else {
        panic!("{last} not entered")
    };
    redis::cmd("FLUSHALL")
        .query::<()>(&mut s.redis.connection())
        .unwrap();
    let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asker = {
        let (client, last, done) = (s.client.clone(), last.clone(), done.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let got = client
                    .draw_enter(sku, WIDTH, &last, shard_router::now_ms())
                    .await
                    .unwrap();
                if got != EntryOutcome::NotPreheated {
                    seen.push(got);
                }
            }
            seen
        })
    };
    for shard in s.client.placement().shards_of(sku, WIDTH) {
        draw::restore::shard(&s.pool, &s.client, &c, &d, shard, T)
            .await
            .unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut seen = asker.await.unwrap();
    seen.push(
        s.client
            .draw_enter(sku, WIDTH, &last, shard_router::now_ms())
            .await
            .unwrap(),
    );
    for got in &seen {
        assert_eq!(
            got,
            &EntryOutcome::Entered {
                entry_id: was.clone(),
                fresh: false
            },
            "told while the restore ran"
        );
    }
}

/// A shard restored after the grants tells each winner `won` with their claim from the
/// ledger, not only while the grant's stored answer lasts (24 h): here the stored answers
/// are removed after the restore, as their TTL would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_shard_still_tells_the_winners_their_claims() {
    let s = Stack::start().await;
    let sku = 9_103;
    draw_campaign(&s, sku, 2, 0, Duration::from_secs(3), 600).await;
    let consumer = start_consumer(s.cfg.clone());
    let who = users("w", 12);
    enter_all(&s, sku, &who).await;
    wait_draw(&s, sku, Duration::from_secs(30), |d| {
        d.state == DrawState::Drawn && d.granted_rank >= 2
    })
    .await;
    let ranks = ranked(&s, sku).await;
    let mut claims = Vec::new();
    for u in &ranks {
        let t0 = Instant::now();
        loop {
            if let Some(id) = claim_of(&s, sku, u).await {
                claims.push(id);
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(15), "{u} has no claim");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut conn = s.redis.connection();
    redis::cmd("FLUSHALL").query::<()>(&mut conn).unwrap();
    let t0 = Instant::now();
    loop {
        let got = s.client.draw_enter(sku, WIDTH, &ranks[0], 0).await.unwrap();
        if matches!(got, EntryOutcome::Won { .. }) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not restored: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_restored(&s, sku).await;
    let answers: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*:req:{sku}:*"))
        .query(&mut conn)
        .unwrap();
    for k in answers {
        redis::cmd("DEL").arg(k).query::<()>(&mut conn).unwrap();
    }
    for (u, id) in ranks.iter().zip(&claims) {
        let got = s.client.draw_enter(sku, WIDTH, u, 0).await.unwrap();
        assert!(
            matches!(&got, EntryOutcome::Won { claim_id, .. } if claim_id == id),
            "{u}: {got:?}"
        );
    }
    consumer.stop().await;
}

/// Found by the draw model: a drawn shard rolled back by a failover to `open` (before its
/// close) or `closed` (before its mark) is marked again, also once every rank is granted
/// and the draw is no longer due; its entrants hear their standing, not `entered`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drawn_shard_rolled_back_is_marked_again() {
    let s = Stack::start().await;
    let sku = 9_104;
    draw_campaign(&s, sku, 1, 0, Duration::from_secs(3), 600).await;
    let consumer = start_consumer(s.cfg.clone());
    let who = users("r", 10);
    enter_all(&s, sku, &who).await;
    wait_draw(&s, sku, Duration::from_secs(30), |d| {
        d.state == DrawState::Drawn && d.granted_rank >= 1
    })
    .await;
    let winner = ranked(&s, sku).await.remove(0);
    let t0 = Instant::now();
    while claim_of(&s, sku, &winner).await.is_none() {
        assert!(t0.elapsed() < Duration::from_secs(15), "no grant");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut conn = s.redis.connection();
    for rolled_to in ["open", "closed"] {
        for shard in s.client.placement().shards_of(sku, WIDTH) {
            let k = shard_router::keys::ShardKeys::new(s.client.placement(), shard, sku);
            redis::cmd("HSET")
                .arg(k.draw_meta())
                .arg("state")
                .arg(rolled_to)
                .query::<()>(&mut conn)
                .unwrap();
        }
        let t0 = Instant::now();
        'wait: loop {
            let mut settled = true;
            for u in &who {
                let got = s.client.draw_enter(sku, WIDTH, u, 0).await.unwrap();
                let want_won = *u == winner;
                let ok = if want_won {
                    matches!(got, EntryOutcome::Won { .. })
                } else {
                    got == EntryOutcome::Lost
                };
                settled &= ok;
            }
            if settled {
                break 'wait;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "shards rolled back to {rolled_to} were not marked again"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    consumer.stop().await;
}
