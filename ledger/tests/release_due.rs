//! The payment-timeout scan (`ledger::releases::due`) against the predicate it replaces,
//! and what one scan reads.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::mysql::MySqlPoolOptions;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use test_support::mariadb::TestDatabase;

const T: Duration = Duration::from_secs(30);
const NOW: i64 = 1_700_000_000_000;

type Due = (String, u16, u16);

/// The scan as it was before ledger/src/releases/scan.rs: one join, no index serving it.
async fn old_due(pool: &MySqlPool, now_ms: i64, skip: &HashSet<u16>, limit: i64) -> Vec<Due> {
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT c.claim_id, c.shard, c.home FROM claims c JOIN campaigns p ON p.sku = c.sku \
         WHERE ((c.status = 'pending' AND c.claimed_ms + p.payment_timeout_s * 1000 <= ",
    );
    q.push_bind(now_ms);
    q.push(") OR c.status = 'releasing')");
    if !skip.is_empty() {
        for col in ["c.shard", "c.home"] {
            q.push(format!(" AND {col} NOT IN ("));
            let mut list = q.separated(", ");
            for s in skip {
                list.push_bind(*s);
            }
            q.push(")");
        }
    }
    q.push(" LIMIT ").push_bind(limit);
    q.build_query_as().fetch_all(pool).await.unwrap()
}

/// A fresh ledger on one connection (so session counters are the scan's).
async fn ledger(db: &TestDatabase) -> MySqlPool {
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&db.url())
        .await
        .unwrap();
    ledger::pool::migrate(&pool).await.unwrap();
    pool
}

/// A campaign row as campaign-ops leaves it (`closed`: closed out; its end in the past).
async fn campaign(pool: &MySqlPool, sku: u64, timeout_s: u32, closed: bool) {
    sqlx::query(
        "INSERT INTO campaigns (sku, stock, width, per_user_limit, start_ms, end_ms, \
         payment_timeout_s, closed_ms) VALUES (?, 1000000, 4, 1, 0, ?, ?, ?)",
    )
    .bind(sku)
    .bind(if closed { NOW / 2 } else { NOW * 2 })
    .bind(timeout_s)
    .bind(closed.then_some(NOW / 2))
    .execute(pool)
    .await
    .unwrap();
}

/// `n` claims of `sku` numbered from `first`: claimed at `ms`, `ms + 1`, … when `step`.
async fn claims(pool: &MySqlPool, sku: u64, first: u64, n: u64, ms: i64, step: bool, status: &str) {
    sqlx::query(
        "INSERT INTO claims (claim_id, sku, user_id, user_seq, qty, shard, home, claimed_ms, \
         status, batch_id) SELECT CONCAT(s.seq % 4, '-', ?, '-', s.seq), ?, CONCAT('u', s.seq), \
         1, 1, s.seq % 4, (s.seq + 1) % 4, ? + IF(?, CAST(s.seq AS SIGNED) - ?, 0), ?, 1 FROM seq_1_to_1000000 s \
         WHERE s.seq >= ? AND s.seq < ?",
    )
    .bind(sku)
    .bind(sku)
    .bind(ms)
    .bind(step)
    .bind(first as i64)
    .bind(status)
    .bind(first)
    .bind(first + n)
    .execute(pool)
    .await
    .unwrap();
}

fn sorted(mut v: Vec<Due>) -> Vec<Due> {
    v.sort();
    v
}

#[tokio::test]
async fn the_scan_returns_what_the_join_returned() {
    let db = TestDatabase::create();
    let pool = ledger(&db).await;
    // Timeouts 0, 1 s, 1 min, 1 h (closed out), the largest, one past its end; a SKU with
    // claims and no campaign, whose claims are never due.
    let skus: [(u64, u32, bool); 6] = [
        (10, 0, false),
        (11, 1, false),
        (12, 60, false),
        (13, 3600, true),
        (14, u32::MAX, false),
        (15, 5, true),
    ];
    for (sku, timeout_s, closed) in skus {
        campaign(&pool, sku, timeout_s, closed).await;
        let cutoff = NOW - i64::from(timeout_s) * 1000;
        // Claims just before, at and just after the cutoff at NOW, in every status.
        for (i, status) in ["pending", "confirmed", "releasing", "released"]
            .into_iter()
            .enumerate()
        {
            let first = 1 + 100 * i as u64;
            claims(&pool, sku, first, 9, cutoff - 4, true, status).await;
        }
    }
    claims(&pool, 99, 1, 4, 0, false, "pending").await;
    claims(&pool, 99, 101, 4, NOW, false, "releasing").await;
    // More campaigns than one statement takes (ledger/src/releases/scan.rs), timeouts 0 to
    // 6 s, each with a pending claim at its cutoff at NOW and one just after.
    sqlx::query(
        "INSERT INTO campaigns (sku, stock, width, per_user_limit, start_ms, end_ms, \
         payment_timeout_s) SELECT 1000 + seq, 10, 4, 1, 0, ?, seq % 7 FROM seq_0_to_599",
    )
    .bind(NOW * 2)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO claims (claim_id, sku, user_id, user_seq, qty, shard, home, claimed_ms, \
         status, batch_id) SELECT CONCAT(seq % 4, '-', 1000 + seq DIV 2, '-', seq), \
         1000 + seq DIV 2, CONCAT('u', seq), 1, 1, seq % 4, (seq + 1) % 4, \
         ? - (seq DIV 2 % 7) * 1000 + seq % 2, 'pending', 1 FROM seq_0_to_1199",
    )
    .bind(NOW)
    .execute(&pool)
    .await
    .unwrap();

    let nows = [
        i64::MIN,
        0,
        NOW - 2,
        NOW - 1,
        NOW,
        NOW + 1,
        NOW + 3_600_000,
        i64::MAX,
    ];
    let skips: [&[u16]; 4] = [&[], &[0], &[1, 2], &[0, 1, 2, 3]];
    let mut compared = 0;
    for now in nows {
        for skip in skips {
            let skip: HashSet<u16> = skip.iter().copied().collect();
            let all = sorted(old_due(&pool, now, &skip, 10_000).await);
            for limit in [10_000, 600, 7, 1, 0] {
                let got = sorted(
                    ledger::releases::due(&pool, now, &skip, limit, T)
                        .await
                        .unwrap(),
                );
                let what = format!("now {now}, skip {skip:?}, limit {limit}");
                assert_eq!(got.len(), all.len().min(limit as usize), "{what}: {got:?}");
                let unique: HashSet<&Due> = got.iter().collect();
                assert_eq!(unique.len(), got.len(), "{what}: a claim twice");
                assert!(got.iter().all(|d| all.contains(d)), "{what}: {got:?}");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 8 * 4 * 5);
    // The table covers the edges: at NOW each pending cutoff splits 5 due from 4 not due
    // (1 from 1 for the 600).
    let at_now = old_due(&pool, NOW, &HashSet::new(), 10_000).await;
    assert_eq!(
        at_now.len(),
        6 * 5 + 6 * 9 + 600,
        "pending due at NOW, and every releasing"
    );
}

/// Reads (`Handler_read_%`) of one scan with `HELD` pending claims, none due: the join's
/// and the scan's. bench/external/due_scan_reads.sh prints them.
#[tokio::test]
async fn a_scan_reads_the_claims_due_not_the_claims_held() {
    const HELD: u64 = 20_000;
    let db = TestDatabase::create();
    let pool = ledger(&db).await;
    campaign(&pool, 1, 600, false).await;
    claims(&pool, 1, 1, HELD, NOW, true, "pending").await;
    sqlx::query("ANALYZE TABLE claims, campaigns")
        .execute(&pool)
        .await
        .unwrap();
    let none = HashSet::new();
    let old = reads(&pool, async || old_due(&pool, NOW, &none, 500).await.len()).await;
    let new = reads(&pool, async || {
        ledger::releases::due(&pool, NOW, &none, 500, T)
            .await
            .unwrap()
            .len()
    })
    .await;
    println!(
        "due scan, {HELD} pending claims held, none due: Handler_read_* before {old}, after {new}"
    );
    assert!(old >= HELD, "the join read {old}");
    assert!(new <= 10, "the scan read {new}");
}

/// Sum of the session's `Handler_read_%` counters over `scan` (which must find nothing).
async fn reads(pool: &MySqlPool, scan: impl AsyncFnOnce() -> usize) -> u64 {
    sqlx::raw_sql("FLUSH STATUS").execute(pool).await.unwrap();
    assert_eq!(scan().await, 0);
    let rows: Vec<(String, String)> = sqlx::query_as("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(pool)
        .await
        .unwrap();
    rows.iter().map(|(_, v)| v.parse::<u64>().unwrap()).sum()
}
