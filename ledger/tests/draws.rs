//! `ledger::draws` against a fresh database on the shared MariaDB (test-support).

use std::time::Duration;

use ledger::campaigns::{self, Campaign};
use ledger::draws::{self, DrawState, Entry, Mode, Ranked};
use ledger::places::Place;
use ledger::LedgerError;
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;

const T: Duration = Duration::from_secs(10);
const SEED: &[u8] = b"0123456789abcdef0123456789abcdef";

async fn ledger() -> (TestDatabase, MySqlPool) {
    let db = TestDatabase::create();
    let pool = ledger::pool::connect(&db.url(), T).await.expect("mysql");
    ledger::pool::migrate(&pool).await.expect("migrate");
    (db, pool)
}

async fn campaign(pool: &MySqlPool, sku: u64, stock: u64) {
    let c = Campaign {
        sku,
        name: "draw".into(),
        stock,
        width: 4,
        limit: 1,
        start_ms: 1_000,
        end_ms: 2_000,
        payment_timeout_s: 60,
    };
    campaigns::put(pool, &c, 16, T).await.unwrap();
}

fn entry(user: &str, priority: u64) -> Entry {
    Entry {
        user: user.into(),
        priority,
        entry_id: format!("0-{priority}-{}", user.len()),
        shard: (user.len() % 4) as u16,
        entered_ms: 1_500,
    }
}

/// Commits `n` entries of `sku` (users u1..un), on a stream of their own.
async fn enter(pool: &MySqlPool, sku: u64, n: u64) {
    let rows: Vec<(u64, Entry)> = (1..=n).map(|i| (sku, entry(&format!("u{i}"), i))).collect();
    let stream = format!("entries-of-{sku}");
    let from = draws::place(pool, &stream, T).await.unwrap();
    assert!(
        draws::commit_entries(pool, &stream, &from, &at(&format!("{sku}-{n}")), &rows, T)
            .await
            .unwrap()
    );
}

fn at(last_id: &str) -> Place {
    Place {
        last_id: last_id.into(),
        repl_id: "r1".into(),
    }
}

#[tokio::test]
async fn create_is_idempotent_and_refuses_changes_once_entered() {
    let (_db, pool) = ledger().await;
    let refused = draws::create(&pool, 7, 3_000, 2, SEED, T).await;
    assert!(
        matches!(refused, Err(LedgerError::Invalid(_))),
        "{refused:?}"
    );
    campaign(&pool, 7, 3).await;
    assert_eq!(draws::mode(&pool, 7, T).await.unwrap(), Some(Mode::Fcfs));
    assert_eq!(draws::mode(&pool, 8, T).await.unwrap(), None);
    let short = draws::create(&pool, 7, 3_000, 2, &SEED[..15], T).await;
    assert!(matches!(short, Err(LedgerError::Invalid(_))), "{short:?}");

    let d = draws::create(&pool, 7, 3_000, 2, SEED, T).await.unwrap();
    assert_eq!(d.seed_sha256.len(), 64);
    assert!(d
        .seed_sha256
        .chars()
        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    assert_eq!(d.state, DrawState::Open);
    assert_eq!((d.draw_at_ms, d.waitlist, d.granted_rank), (3_000, 2, 0));
    assert_eq!(draws::mode(&pool, 7, T).await.unwrap(), Some(Mode::Draw));
    assert_eq!(draws::create(&pool, 7, 3_000, 2, SEED, T).await.unwrap(), d);
    assert_eq!(draws::get(&pool, 7, T).await.unwrap(), Some(d.clone()));

    // No entry yet: the terms may still change.
    let moved = draws::create(&pool, 7, 4_000, 2, SEED, T).await.unwrap();
    assert_eq!(moved.draw_at_ms, 4_000);

    let stream = "{s0}:entries";
    assert!(draws::commit_entries(
        &pool,
        stream,
        &Place::start(),
        &at("1-0"),
        &[(7, entry("a", 5))],
        T
    )
    .await
    .unwrap());
    for (draw_at, waitlist, seed) in [(5_000, 2, SEED), (4_000, 3, SEED), (4_000, 2, &SEED[1..])] {
        let r = draws::create(&pool, 7, draw_at, waitlist, seed, T).await;
        assert!(matches!(r, Err(LedgerError::Invalid(_))), "{r:?}");
    }
    assert_eq!(draws::get(&pool, 7, T).await.unwrap(), Some(moved.clone()));
    assert_eq!(
        draws::create(&pool, 7, 4_000, 2, SEED, T).await.unwrap(),
        moved
    );
}

#[tokio::test]
async fn the_seed_digest_is_lowercase_sha256_hex() {
    let (_db, pool) = ledger().await;
    campaign(&pool, 1, 1).await;
    let d = draws::create(&pool, 1, 3_000, 0, &[0u8; 16], T)
        .await
        .unwrap();
    // sha256 of 16 zero bytes.
    assert_eq!(
        d.seed_sha256,
        "374708fff7719dd5979ec875d56cd2286f6d3cf7ec317a3b25632aab28ec37bb"
    );
    assert_eq!(d.seed, vec![0u8; 16]);
}

#[tokio::test]
async fn commit_entries_is_conditional_and_ignores_repeats() {
    let (_db, pool) = ledger().await;
    campaign(&pool, 7, 3).await;
    draws::create(&pool, 7, 3_000, 2, SEED, T).await.unwrap();
    let stream = "{s1}:entries";
    assert_eq!(
        draws::place(&pool, stream, T).await.unwrap(),
        Place::start()
    );

    let first = [(7, entry("a", 5)), (7, entry("b", 3)), (99, entry("z", 1))];
    assert!(
        draws::commit_entries(&pool, stream, &Place::start(), &at("2-0"), &first, T)
            .await
            .unwrap()
    );
    assert_eq!(draws::place(&pool, stream, T).await.unwrap(), at("2-0"));
    // The sku without a draw was skipped.
    assert_eq!(draws::entry_count(&pool, 7, T).await.unwrap(), 2);
    assert_eq!(draws::entry_count(&pool, 99, T).await.unwrap(), 0);

    // A second commit from the same stale place: refused, nothing written.
    let stale = [(7, entry("c", 9))];
    assert!(
        !draws::commit_entries(&pool, stream, &Place::start(), &at("3-0"), &stale, T)
            .await
            .unwrap()
    );
    assert_eq!(draws::place(&pool, stream, T).await.unwrap(), at("2-0"));
    assert_eq!(draws::entry_count(&pool, 7, T).await.unwrap(), 2);
    assert_eq!(draws::rank_of(&pool, 7, "c", T).await.unwrap(), None);

    // A re-read after a failover (new replication id) repeats entries: ignored.
    let mut again = entry("a", 5);
    again.priority = 1;
    let reread = [
        (7, again),
        (7, entry("b", 3)),
        (7, entry("c", 9)),
        (7, entry("c", 9)),
    ];
    let new_master = Place {
        last_id: "3-0".into(),
        repl_id: "r2".into(),
    };
    assert!(
        draws::commit_entries(&pool, stream, &at("2-0"), &new_master, &reread, T)
            .await
            .unwrap()
    );
    assert_eq!(draws::place(&pool, stream, T).await.unwrap(), new_master);
    let all = draws::entries_in_order(&pool, 7, None, 10, T)
        .await
        .unwrap();
    let order: Vec<(&str, u64)> = all.iter().map(|e| (e.user.as_str(), e.priority)).collect();
    assert_eq!(
        order,
        [("b", 3), ("a", 5), ("c", 9)],
        "the first entry of a stands"
    );
    assert_eq!(all[1], entry("a", 5));

    // An empty batch still moves the place (a read of nothing but skipped entries).
    let newer = Place {
        last_id: "4-0".into(),
        repl_id: "r2".into(),
    };
    assert!(
        draws::commit_entries(&pool, stream, &new_master, &newer, &[], T)
            .await
            .unwrap()
    );
    assert_eq!(draws::place(&pool, stream, T).await.unwrap(), newer);
}

#[tokio::test]
async fn record_writes_once() {
    let (_db, pool) = ledger().await;
    campaign(&pool, 7, 2).await;
    draws::create(&pool, 7, 3_000, 1, SEED, T).await.unwrap();
    enter(&pool, 7, 5).await;
    let ranked = |users: &[&str]| -> Vec<Ranked> {
        users
            .iter()
            .enumerate()
            .map(|(i, u)| Ranked {
                rank: i as u32 + 1,
                user: (*u).into(),
                priority: 10 * i as u64,
            })
            .collect()
    };
    assert!(
        draws::record(&pool, 7, &ranked(&["x", "y", "z"]), 5, 3_100, T)
            .await
            .unwrap()
    );
    assert!(
        !draws::record(&pool, 7, &ranked(&["z", "y", "x"]), 6, 3_200, T)
            .await
            .unwrap()
    );
    let d = draws::get(&pool, 7, T).await.unwrap().unwrap();
    assert_eq!(d.state, DrawState::Drawn);
    assert_eq!((d.drawn_at_ms, d.entrants), (Some(3_100), Some(5)));
    assert_eq!(
        draws::ranks(&pool, 7, 0, 10, T).await.unwrap(),
        ranked(&["x", "y", "z"])
    );
    assert_eq!(
        draws::ranks(&pool, 7, 1, 1, T).await.unwrap(),
        ranked(&["x", "y"])[1..]
    );
    assert_eq!(draws::rank_of(&pool, 7, "z", T).await.unwrap(), Some(3));
    assert_eq!(draws::rank_of(&pool, 7, "Z", T).await.unwrap(), None);

    let gap = [Ranked {
        rank: 2,
        user: "q".into(),
        priority: 0,
    }];
    assert!(matches!(
        draws::record(&pool, 7, &gap, 1, 0, T).await,
        Err(LedgerError::Invalid(_))
    ));
    assert!(matches!(
        draws::record(&pool, 8, &[], 0, 0, T).await,
        Err(LedgerError::NotFound(_))
    ));

    // More than one INSERT chunk.
    campaign(&pool, 9, 2_000).await;
    draws::create(&pool, 9, 3_000, 600, SEED, T).await.unwrap();
    enter(&pool, 9, 2_500).await;
    let many: Vec<Ranked> = (1..=2_500u32)
        .map(|r| Ranked {
            rank: r,
            user: format!("u{r}"),
            priority: r as u64,
        })
        .collect();
    assert!(draws::record(&pool, 9, &many, 2_500, 3_100, T)
        .await
        .unwrap());
    assert_eq!(
        draws::ranks(&pool, 9, 2_400, 1_000, T).await.unwrap(),
        many[2_400..]
    );
}

#[tokio::test]
async fn entries_in_order_pages_every_entry_once_with_ties() {
    let (_db, pool) = ledger().await;
    campaign(&pool, 7, 3).await;
    draws::create(&pool, 7, 3_000, 2, SEED, T).await.unwrap();
    // Ties on priority, ordered by user id bytes: case and trailing spaces matter, and
    // "Z" (0x5a) sorts before "a", "é" (0xc3 0xa9) after "z".
    let users = ["a", "b", "A", "Z", "b ", "z", "é", "aa", "ab", "a b"];
    let mut entries = Vec::new();
    for (i, u) in users.iter().enumerate() {
        for p in [1u64, 2, 3] {
            if (i as u64 + p).is_multiple_of(2) {
                continue;
            }
            entries.push((7u64, entry(&format!("{u}{p}"), p * 1_000_000_000_000)));
        }
        entries.push((7u64, entry(u, 2_000_000_000_000)));
    }
    entries.push((7u64, entry("max", (1 << 52) - 1)));
    let stream = "{s2}:entries";
    let mid = entries.len() / 2;
    assert!(draws::commit_entries(
        &pool,
        stream,
        &Place::start(),
        &at("1-0"),
        &entries[..mid],
        T
    )
    .await
    .unwrap());
    assert!(
        draws::commit_entries(&pool, stream, &at("1-0"), &at("2-0"), &entries[mid..], T)
            .await
            .unwrap()
    );

    let mut want: Vec<(u64, String)> = entries
        .iter()
        .map(|(_, e)| (e.priority, e.user.clone()))
        .collect();
    // Byte order of the UTF-8 user ids (`String`'s Ord).
    want.sort();
    assert_eq!(
        draws::entry_count(&pool, 7, T).await.unwrap(),
        want.len() as u64
    );
    for limit in [1u32, 2, 3, 7, 100] {
        let mut got = Vec::new();
        let mut after: Option<(u64, String)> = None;
        loop {
            let page = draws::entries_in_order(
                &pool,
                7,
                after.as_ref().map(|(p, u)| (*p, u.as_str())),
                limit,
                T,
            )
            .await
            .unwrap();
            assert!(page.len() <= limit as usize);
            let Some(last) = page.last() else { break };
            after = Some((last.priority, last.user.clone()));
            got.extend(page.into_iter().map(|e| (e.priority, e.user)));
        }
        assert_eq!(got, want, "pages of {limit}");
    }

    // One home shard's entries by user id, paged.
    for shard in 0..4u16 {
        let mut want: Vec<String> = entries
            .iter()
            .filter(|(_, e)| e.shard == shard)
            .map(|(_, e)| e.user.clone())
            .collect();
        want.sort();
        let mut got = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = draws::entries_of_shard(&pool, 7, shard, after.as_deref(), 3, T)
                .await
                .unwrap();
            let Some(last) = page.last() else { break };
            after = Some(last.user.clone());
            got.extend(page.into_iter().map(|e| e.user));
        }
        assert_eq!(got, want, "shard {shard}");
    }
}

#[tokio::test]
async fn granted_rank_never_moves_back_and_due_lists_the_work() {
    let (_db, pool) = ledger().await;
    campaign(&pool, 7, 2).await;
    draws::create(&pool, 7, 3_000, 1, SEED, T).await.unwrap();
    assert!(draws::due(&pool, 2_999, T).await.unwrap().is_empty());
    let due: Vec<u64> = draws::due(&pool, 3_000, T)
        .await
        .unwrap()
        .iter()
        .map(|d| d.sku)
        .collect();
    assert_eq!(due, [7]);
    let live = draws::live(&pool, T).await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!((live[0].draw.sku, live[0].width, live[0].stock), (7, 4, 2));

    let ranks: Vec<Ranked> = (1..=3u32)
        .map(|r| Ranked {
            rank: r,
            user: format!("u{r}"),
            priority: r as u64,
        })
        .collect();
    enter(&pool, 7, 3).await;
    assert!(draws::record(&pool, 7, &ranks, 3, 3_100, T).await.unwrap());
    // A win is the ledger's from its record on, before the claims table has the claim.
    draws::record_win(&pool, 7, 2, "1-5-0", 1, T).await.unwrap();
    assert_eq!(
        draws::wins(&pool, 7, "draw", T).await.unwrap(),
        [("u2".to_owned(), "1-5-0".to_owned(), 1u16)]
    );
    assert!(matches!(
        draws::record_win(&pool, 7, 9, "1-6-0", 1, T).await,
        Err(LedgerError::NotFound(_))
    ));
    draws::set_granted(&pool, 7, 2, T).await.unwrap();
    assert_eq!(
        draws::due(&pool, 9_999, T).await.unwrap().len(),
        1,
        "the waitlist is left"
    );
    draws::set_granted(&pool, 7, 1, T).await.unwrap();
    assert_eq!(
        draws::get(&pool, 7, T).await.unwrap().unwrap().granted_rank,
        2
    );
    draws::set_granted(&pool, 7, 3, T).await.unwrap();
    draws::set_granted(&pool, 7, 0, T).await.unwrap();
    assert_eq!(
        draws::get(&pool, 7, T).await.unwrap().unwrap().granted_rank,
        3
    );
    assert!(draws::due(&pool, 9_999, T).await.unwrap().is_empty());
    assert!(matches!(
        draws::set_granted(&pool, 8, 1, T).await,
        Err(LedgerError::NotFound(_))
    ));

    // Fewer entrants than stock + waitlist: nothing is due past the last rank.
    campaign(&pool, 9, 5).await;
    draws::create(&pool, 9, 3_000, 5, SEED, T).await.unwrap();
    enter(&pool, 9, 2).await;
    assert!(draws::record(&pool, 9, &ranks[..2], 2, 3_100, T)
        .await
        .unwrap());
    draws::set_granted(&pool, 9, 2, T).await.unwrap();
    assert!(draws::due(&pool, 9_999, T).await.unwrap().is_empty());
}

/// The ledger's entries of a draw are the ones it was drawn from: a result computed from
/// another count is refused, and entries committed after the result are kept out (with an
/// anomaly) while the reader's place still moves past them.
#[tokio::test]
async fn the_entries_of_a_draw_are_the_ones_it_was_drawn_from() {
    let (_db, pool) = ledger().await;
    campaign(&pool, 7, 1).await;
    draws::create(&pool, 7, 3_000, 1, SEED, T).await.unwrap();
    enter(&pool, 7, 3).await;
    let ranks = [Ranked {
        rank: 1,
        user: "u1".into(),
        priority: 1,
    }];
    assert!(matches!(
        draws::record(&pool, 7, &ranks, 2, 3_100, T).await,
        Err(LedgerError::Invalid(_))
    ));
    assert_eq!(
        draws::get(&pool, 7, T).await.unwrap().unwrap().state,
        DrawState::Open
    );
    assert!(draws::record(&pool, 7, &ranks, 3, 3_100, T).await.unwrap());

    let late = [(7, entry("late", 0))];
    assert!(
        draws::commit_entries(&pool, "late-stream", &Place::start(), &at("9-0"), &late, T)
            .await
            .unwrap()
    );
    assert_eq!(
        draws::place(&pool, "late-stream", T).await.unwrap(),
        at("9-0")
    );
    assert_eq!(draws::entry_count(&pool, 7, T).await.unwrap(), 3);
    let flagged: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM anomalies WHERE kind = 'draw_entry_after_draw' AND sku = 7",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(flagged, 1);
}
