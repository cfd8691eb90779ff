//! Statements that build an `IN (...)` list never send an empty one: `IN ()` is a syntax
//! error (1064), which is not retryable, so a batch retried with no rows left (its rows
//! kept as poison, or every read of it dropped) would fail for good and wedge its writer.

use std::time::Duration;

use ledger::poison::Poison;
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;

const T: Duration = Duration::from_secs(10);

async fn ledger() -> (TestDatabase, MySqlPool) {
    let db = TestDatabase::create();
    let pool = ledger::pool::connect(&db.url(), T).await.expect("mysql");
    ledger::pool::migrate(&pool).await.expect("migrate");
    (db, pool)
}

#[tokio::test]
async fn campaign_gens_of_no_sku_is_empty_without_sql() {
    let (_db, pool) = ledger().await;
    let mut tx = pool.begin().await.unwrap();
    let gens = ledger::late::campaign_gens(&mut tx, &[], T).await;
    assert!(
        gens.as_ref().is_ok_and(|g| g.is_empty()),
        "no SKU: no generations, no error: {gens:?}"
    );
}

/// The batch shape that wedged a writer: no claim rows, only entries kept as poison.
#[tokio::test]
async fn a_batch_of_poison_alone_commits() {
    let (_db, pool) = ledger().await;
    let p = Poison {
        stream: "claims:0".into(),
        entry_id: "1-0".into(),
        reason: "not a claim record".into(),
        fields: "{}".into(),
    };
    let written = ledger::claims::write_at(&pool, &[], &[], std::slice::from_ref(&p), T).await;
    assert!(
        matches!(written, Ok(ledger::claims::Written::Committed(_))),
        "{written:?}"
    );
    let kept = ledger::poison::list(&pool, 10, T).await.unwrap();
    assert_eq!(kept, vec![p]);
}

#[test]
fn no_claim_id_builds_no_query() {
    assert!(ledger::claims::claim_ids_query(std::iter::empty()).is_none());
    let q = ledger::claims::claim_ids_query(["0-1-0"]).expect("one id");
    assert!(q.sql().ends_with("IN (?)"), "{}", q.sql());
}
