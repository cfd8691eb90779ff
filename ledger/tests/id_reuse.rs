//! A claim id handed out again for another claim (a Redis that went back in time, on a
//! clock behind the old master's) is a critical anomaly with the whole record, never a
//! silent redelivery; the same record read again stays a redelivery.

use std::time::Duration;

use ledger::campaigns::Campaign;
use ledger::rows::ClaimRow;
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;

const T: Duration = Duration::from_secs(10);

fn row<'a>(id: &'a str, user: &'a str, seq: u64) -> ClaimRow<'a> {
    ClaimRow {
        claim_id: id,
        sku: 77,
        user,
        qty: 1,
        user_seq: seq,
        shard: 0,
        home: 0,
        request_id: None,
        ts_ms: 1,
        gen: 0,
    }
}

async fn store(pool: &MySqlPool, rows: &[ClaimRow<'_>]) -> ledger::claims::Stored {
    let mut tx = pool.begin().await.unwrap();
    let out = ledger::claims::store(&mut tx, rows, None, T).await.unwrap();
    tx.commit().await.unwrap();
    out
}

#[tokio::test]
async fn a_claim_id_reused_for_another_user_is_a_critical_anomaly() {
    let db = TestDatabase::create();
    let pool = ledger::pool::connect(&db.url(), T).await.unwrap();
    ledger::pool::migrate(&pool).await.unwrap();
    let c = Campaign {
        sku: 77,
        name: "id reuse".into(),
        stock: 10,
        width: 1,
        limit: 1,
        start_ms: 0,
        end_ms: i64::MAX / 2,
        payment_timeout_s: 3600,
    };
    ledger::campaigns::put(&pool, &c, 16, T).await.unwrap();

    assert_eq!(store(&pool, &[row("0-5-0", "alice", 1)]).await.inserted, 1);
    let again = store(&pool, &[row("0-5-0", "alice", 1)]).await;
    assert_eq!(
        (again.redelivered, again.id_reused.len()),
        (1, 0),
        "read again"
    );
    let reused = store(&pool, &[row("0-5-0", "bob", 1)]).await;
    assert_eq!(
        (reused.redelivered, reused.id_reused),
        (0, vec![0]),
        "another claim"
    );

    let details: Vec<String> =
        sqlx::query_scalar("SELECT detail FROM anomalies WHERE kind = 'id_reuse'")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(details.len(), 1);
    assert!(
        details[0].starts_with("CRITICAL") && details[0].contains("user bob"),
        "{}",
        details[0]
    );
}
