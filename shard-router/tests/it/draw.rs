//! The draw scripts (`lua/draw_*.lua`) on a private single Redis and on a private Redis
//! Cluster: one entry per user, Redis's priorities equal to `draw::priority` (what verify
//! recomputes), each shard's top-K bounded and in draw order, the close fencing entries,
//! the marks answering each entrant's standing, and a restore after a loss.

use std::collections::{BTreeMap, HashSet};

use shard_router::draw::{self, DrawSpec, DrawState, EntryOutcome, MarkBatch};
use shard_router::{now_ms, StockClient};

use crate::common::Env;

const SKU: u64 = 4_242;
const WIDTH: u16 = 4;

fn spec(stock: u64, waitlist: u32) -> DrawSpec {
    let now = now_ms();
    DrawSpec {
        sku: SKU,
        entries_open_ms: now - 60_000,
        draw_at_ms: now + 3_600_000,
        stock,
        waitlist,
        seed: (0..32u8).map(|i| i.wrapping_mul(37)).collect(),
    }
}

async fn open(client: &StockClient, s: &DrawSpec) {
    for shard in client.placement().shards_of(SKU, WIDTH) {
        let (state, created) = client.draw_open(shard, s, DrawState::Open).await.unwrap();
        assert_eq!((state, created), (DrawState::Open, true));
    }
}

async fn entries_and_close(env: Env) {
    let client = env.client().await;
    let s = spec(5, 3);
    open(&client, &s).await;
    let now = now_ms();
    let users: Vec<String> = (0..60).map(|i| format!("user-{i}")).collect();
    let mut ids = BTreeMap::new();
    for u in &users {
        match client.draw_enter(SKU, WIDTH, u, now).await.unwrap() {
            EntryOutcome::Entered { entry_id, fresh } => {
                assert!(fresh);
                ids.insert(u.clone(), entry_id);
            }
            other => panic!("{u}: {other:?}"),
        }
    }
    // One entry per user: a second one is the first one's answer and writes nothing.
    for u in users.iter().take(10) {
        let again = client.draw_enter(SKU, WIDTH, u, now).await.unwrap();
        assert_eq!(
            again,
            EntryOutcome::Entered {
                entry_id: ids[u].clone(),
                fresh: false
            }
        );
    }
    // The entries streams hold each entry once, with Redis's priority = the Rust one.
    let mut seen = HashSet::new();
    for shard in client.placement().shards_of(SKU, WIDTH) {
        let (entries, _) = client.read_entries(shard, "0-0", 1000).await.unwrap();
        for e in entries {
            let e = e.unwrap();
            assert_eq!(
                e.priority,
                draw::priority(&s.seed, SKU, &e.user),
                "{}",
                e.user
            );
            assert_eq!(ids[&e.user], format!("{shard}-{}", e.stream_id));
            assert!(seen.insert(e.user));
        }
    }
    assert_eq!(seen.len(), users.len());
    // Each shard's top-K is the best k of its entrants; the merge is the global best k.
    let mut merged = Vec::new();
    let mut total = 0;
    for shard in client.placement().shards_of(SKU, WIDTH) {
        let closed = client.draw_close(shard, SKU).await.unwrap().unwrap();
        assert_eq!(closed.state, DrawState::Closed);
        assert!(closed.top.len() as u64 <= s.k());
        let mut sorted = closed.top.clone();
        sorted.sort_by(draw::draw_order);
        assert_eq!(sorted, closed.top, "a shard's list is in draw order");
        total += closed.entrants;
        merged.extend(closed.top);
    }
    assert_eq!(total, users.len() as u64);
    merged.sort_by(draw::draw_order);
    merged.truncate(s.k() as usize);
    let mut want: Vec<(String, u64)> = users
        .iter()
        .map(|u| (u.clone(), draw::priority(&s.seed, SKU, u)))
        .collect();
    want.sort_by(draw::draw_order);
    want.truncate(s.k() as usize);
    assert_eq!(merged, want);
    // Closed: an entrant hears the draw is coming, a newcomer that entries are over.
    assert!(matches!(
        client.draw_enter(SKU, WIDTH, &users[0], now).await.unwrap(),
        EntryOutcome::Drawing { .. }
    ));
    assert_eq!(
        client
            .draw_enter(SKU, WIDTH, "late-user", now)
            .await
            .unwrap(),
        EntryOutcome::Closed
    );
    // Marks: ranks 1..=stock won, the rest of k waitlisted, everyone else lost.
    let mut by_home: BTreeMap<u16, Vec<(String, u32)>> = BTreeMap::new();
    for (i, (u, _)) in merged.iter().enumerate() {
        let home = client.placement().home_shard(SKU, WIDTH, u);
        by_home
            .entry(home)
            .or_default()
            .push((u.clone(), i as u32 + 1));
    }
    for shard in client.placement().shards_of(SKU, WIDTH) {
        let ranks = by_home.get(&shard).cloned().unwrap_or_default();
        assert!(client
            .draw_mark(shard, SKU, &ranks, MarkBatch::Last)
            .await
            .unwrap());
        assert_eq!(
            client.draw_state(shard, SKU).await.unwrap(),
            Some(DrawState::Drawn)
        );
    }
    let ranked: HashSet<&String> = merged.iter().map(|(u, _)| u).collect();
    for (i, (u, _)) in merged.iter().enumerate() {
        let got = client.draw_enter(SKU, WIDTH, u, now).await.unwrap();
        if i < 5 {
            assert_eq!(got, EntryOutcome::WonPending, "{u}");
        } else {
            assert_eq!(
                got,
                EntryOutcome::Waitlisted {
                    position: i as u64 + 1 - 5
                }
            );
        }
    }
    for u in users.iter().filter(|u| !ranked.contains(u)) {
        assert_eq!(
            client.draw_enter(SKU, WIDTH, u, now).await.unwrap(),
            EntryOutcome::Lost
        );
    }
    // A win recorded is answered with its claim, and a repeated mark does not undo it.
    let winner = &merged[0].0;
    let home = client.placement().home_shard(SKU, WIDTH, winner);
    client
        .draw_won(SKU, WIDTH, winner, "3-1-0", 3)
        .await
        .unwrap();
    client
        .draw_mark(home, SKU, &[(winner.clone(), 1)], MarkBatch::Last)
        .await
        .unwrap();
    assert_eq!(
        client.draw_enter(SKU, WIDTH, winner, now).await.unwrap(),
        EntryOutcome::Won {
            claim_id: "3-1-0".into(),
            shard: 3
        }
    );
}

#[tokio::test]
async fn entries_and_close_single() {
    entries_and_close(Env::single()).await;
}

#[tokio::test]
async fn entries_and_close_cluster() {
    entries_and_close(Env::cluster()).await;
}

/// Outside the window nothing is entered; a shard with no draw says so (never an implicit
/// open draw); a reopened draw keeps its state.
#[tokio::test]
async fn window_and_missing_draw() {
    let env = Env::single();
    let client = env.client().await;
    let s = spec(2, 0);
    assert_eq!(
        client.draw_enter(SKU, WIDTH, "u", now_ms()).await.unwrap(),
        EntryOutcome::NotPreheated
    );
    open(&client, &s).await;
    assert_eq!(
        client
            .draw_enter(SKU, WIDTH, "u", s.entries_open_ms - 1)
            .await
            .unwrap(),
        EntryOutcome::NotStarted
    );
    assert_eq!(
        client
            .draw_enter(SKU, WIDTH, "u", s.draw_at_ms)
            .await
            .unwrap(),
        EntryOutcome::Closed
    );
    let shard = client.placement().shards_of(SKU, WIDTH)[0];
    client.draw_close(shard, SKU).await.unwrap();
    let again = client.draw_open(shard, &s, DrawState::Open).await.unwrap();
    assert_eq!(again, (DrawState::Closed, false));
    let (entries, _) = client.read_entries(shard, "0-0", 10).await.unwrap();
    assert!(entries.is_empty());
}

/// After a loss the ledger's entries go back: entrants (a user entered since keeps that
/// entry) and a top-K bounded again.
#[tokio::test]
async fn restore_after_loss() {
    let env = Env::single();
    let client = env.client().await;
    let s = spec(1, 1);
    open(&client, &s).await;
    let shard = client.placement().shards_of(SKU, WIDTH)[0];
    let mut conn = env.node_connections().remove(0);
    redis::cmd("FLUSHALL").query::<()>(&mut conn).unwrap();
    // Users whose home is the shard, as the ledger's entries of it are.
    let lost: Vec<(String, u64, String)> = (0..)
        .map(|i| format!("back-{i}"))
        .filter(|u| client.placement().home_shard(SKU, WIDTH, u) == shard)
        .take(5)
        .enumerate()
        .map(|(i, u)| {
            let p = draw::priority(&s.seed, SKU, &u);
            (u, p, format!("1-{i}"))
        })
        .collect();
    let token = 41;
    assert_eq!(
        client.draw_restore(shard, SKU, token, &lost).await.unwrap(),
        None
    );
    // Lost again before its last step: the restore's publish does not open it empty.
    assert!(!client
        .draw_publish(shard, &s, DrawState::Open, token, 0)
        .await
        .unwrap());
    assert_eq!(client.draw_state(shard, SKU).await.unwrap(), None);
    assert!(client.draw_hold(shard, &s, token).await.unwrap());
    // Held: entrants come back later, the draw loop's marks are refused, the restore's not
    // (under its own token only).
    let back = &lost[4].0;
    assert_eq!(
        client.draw_enter(SKU, WIDTH, back, now_ms()).await.unwrap(),
        EntryOutcome::NotPreheated
    );
    assert!(!client
        .draw_mark(shard, SKU, &[], MarkBatch::Last)
        .await
        .unwrap());
    assert!(!client
        .draw_mark(shard, SKU, &[], MarkBatch::Held(token + 1))
        .await
        .unwrap());
    assert!(client
        .draw_mark(shard, SKU, &[], MarkBatch::Held(token))
        .await
        .unwrap());
    assert_eq!(client.draw_state(shard, SKU).await.unwrap(), None);
    assert_eq!(
        client
            .draw_restore(shard, SKU, token + 1, &lost)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        client.draw_restore(shard, SKU, token, &lost).await.unwrap(),
        Some(5)
    );
    assert_eq!(
        client.draw_restore(shard, SKU, token, &lost).await.unwrap(),
        Some(0)
    );
    // Three writes counted (a mark, two restores): a publish that counts fewer or more is
    // refused (a replica holding part of them), as is another token.
    for (t, n) in [(token, 2), (token, 4), (token + 1, 3)] {
        assert!(!client
            .draw_publish(shard, &s, DrawState::Open, t, n)
            .await
            .unwrap());
    }
    assert!(client
        .draw_publish(shard, &s, DrawState::Open, token, 3)
        .await
        .unwrap());
    assert_eq!(
        client.draw_enter(SKU, WIDTH, back, now_ms()).await.unwrap(),
        EntryOutcome::Entered {
            entry_id: format!("{shard}-1-4"),
            fresh: false
        }
    );
    let closed = client.draw_close(shard, SKU).await.unwrap().unwrap();
    assert_eq!(closed.entrants, 5);
    let mut want: Vec<(String, u64)> = lost.iter().map(|(u, p, _)| (u.clone(), *p)).collect();
    want.sort_by(draw::draw_order);
    want.truncate(2);
    assert_eq!(closed.top, want);
}
