//! Streams → ledger: exactly once, duplicates, redelivery.

use std::time::{Duration, Instant};

use crate::common::*;
use campaign_ops::campaign::Campaign;
use consumer::commit;
use shard_router::stream;
use shard_router::ClaimRecord;

/// Claims produced by this test: 50 000 as the ledger's throughput target asks (~30 s in a debug build on 2 shared
/// cores, bound by the producer); `FG_TEST_CLAIMS` changes it.
fn claims_n() -> usize {
    std::env::var("FG_TEST_CLAIMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_claims_land_exactly_once() {
    let n = claims_n();
    let s = Stack::start().await;
    let c = campaign(&s, 7001, n as u64, SHARDS, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let t0 = Instant::now();
    let ids = claim_all(&s.client, &c, users("u", n), 64).await;
    let produced = t0.elapsed();
    assert_eq!(ids.len(), n, "every claim succeeds: stock equals users");
    wait_drained(&s, c.sku, n as i64, Duration::from_secs(60)).await;
    let drained = t0.elapsed();
    consumer.stop().await;
    eprintln!("{n} claims: produced in {produced:?}, all in the ledger after {drained:?}");

    assert_eq!(
        s.count("SELECT COUNT(DISTINCT claim_id) FROM claims").await,
        n as i64
    );
    assert_eq!(
        s.count("SELECT CAST(SUM(qty) AS SIGNED) FROM claims").await,
        n as i64
    );
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 7001")
            .await,
        0
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
    let slices: i64 = s
        .client
        .slices(c.sku, c.width)
        .await
        .unwrap()
        .iter()
        .map(|(_, v)| v.unwrap())
        .sum();
    assert_eq!(slices, 0);
    assert_eq!(
        stream_depth(&s).await,
        (0, 0),
        "streams drained and trimmed"
    );
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.drift, 0, "{r:?}");
}

/// A campaign of `n` units over every shard, sold out to `n` users of `prefix` before any
/// consumer runs, and the records its streams then hold.
async fn sold_out_in_the_streams(
    s: &Stack,
    sku: u64,
    n: usize,
    prefix: &str,
) -> (Campaign, Vec<ClaimRecord>) {
    let c = campaign(s, sku, n as u64, SHARDS, 1, 3600).await;
    let ids = claim_all(&s.client, &c, users(prefix, n), 16).await;
    assert_eq!(ids.len(), n);
    let records = stream_records(s).await;
    assert_eq!(records.len(), n);
    (c, records)
}

/// Reads every entry of every shard stream (without a group) and decodes it.
async fn stream_records(s: &Stack) -> Vec<ClaimRecord> {
    let mut out = Vec::new();
    for shard in 0..SHARDS {
        let st = stream::ShardStream::new(&s.client, shard);
        for e in st.all_entries(&s.client, 1000).await.unwrap() {
            out.push(stream::decode(shard, &e).unwrap().record);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_entries_delivered_twice_give_no_duplicate_rows() {
    let s = Stack::start().await;
    let (c, records) = sold_out_in_the_streams(&s, 7002, 300, "d").await;

    // Two deliveries of the same entries straight into the ledger...
    let first = commit::write_batch(&s.pool, &records, T).await.unwrap();
    let second = commit::write_batch(&s.pool, &records, T).await.unwrap();
    assert_eq!((first.inserted, first.redelivered), (300, 0));
    assert_eq!((second.inserted, second.redelivered), (0, 300));
    assert!(second.collisions.is_empty());
    // ...and a third through the consumer, which reads the same entries from the streams.
    let consumer = start_consumer(s.cfg.clone());
    wait_drained(&s, c.sku, 300, Duration::from_secs(20)).await;
    consumer.stop().await;

    assert_eq!(s.count("SELECT COUNT(*) FROM claims").await, 300);
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 7002")
            .await,
        0,
        "stock taken once"
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies").await,
        0,
        "a redelivery is no anomaly"
    );
}

/// The ledger INSERT is padded with copies of a batch's last record up to one of a few row
/// counts (`ledger/src/row_buckets.rs`): the copies must never count as rows, units or
/// redeliveries, whether the record they copy is new or already in the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padded_batches_count_only_their_own_records() {
    let s = Stack::start().await;
    let (_, records) = sold_out_in_the_streams(&s, 7003, 300, "p").await;

    let write = |batch: Vec<ClaimRecord>| {
        let pool = s.pool.clone();
        async move {
            let out = commit::write_batch(&pool, &batch, T).await.unwrap();
            assert!(out.collisions.is_empty());
            (out.inserted, out.redelivered, out.inserted_units)
        }
    };
    // 150 rows are sent as 160, 159 as 160 (its last record new), 51 as 56 (its last record
    // already stored), 9 as 10 (all stored).
    assert_eq!(write(records[..150].to_vec()).await, (150, 0, 150));
    assert_eq!(write(records[100..259].to_vec()).await, (109, 50, 109));
    let mut tail = records[259..].to_vec();
    tail.extend(records[..10].iter().cloned());
    assert_eq!(write(tail).await, (41, 10, 41));
    assert_eq!(write(records[..9].to_vec()).await, (0, 9, 0));

    assert_eq!(s.count("SELECT COUNT(*) FROM claims").await, 300);
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 7003")
            .await,
        0,
        "every unit taken once"
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
}

/// Statements one connection of `url`'s pool prepares for three runs of one query.
async fn prepares_for_three_runs(url: &str) -> i64 {
    let pool = ledger::pool::connect(url, T).await.expect("pool");
    let mut conn = pool.acquire().await.expect("connection");
    // The text protocol: reading the counter prepares nothing itself.
    let prepared = |row: sqlx::mysql::MySqlRow| -> i64 {
        use sqlx::Row;
        row.get::<String, _>(1).parse().expect("a count")
    };
    let status = "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'";
    let before = prepared(sqlx::raw_sql(status).fetch_one(&mut *conn).await.unwrap());
    for i in 0..3i64 {
        let one: i64 = sqlx::query_scalar("SELECT ? + 0")
            .bind(i)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(one, i);
    }
    let after = prepared(sqlx::raw_sql(status).fetch_one(&mut *conn).await.unwrap());
    after - before
}

/// `url` with `pair` added to its query.
fn with_query(url: &str, pair: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{pair}")
}

/// `db::connect` raises sqlx's statement cache for the padded INSERT's shapes
/// (`ledger/src/row_buckets.rs`), but a `statement-cache-capacity` the operator wrote in
/// the URL is theirs: 0 (nothing left prepared on the server, e.g. behind a pooling proxy or
/// near `max_prepared_stmt_count`) must stay 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_cache_capacity_in_the_url_is_kept() {
    let db = test_support::mariadb::TestDatabase::create();
    assert_eq!(
        prepares_for_three_runs(&db.url()).await,
        1,
        "by default a statement is prepared once per connection"
    );
    assert_eq!(
        prepares_for_three_runs(&with_query(&db.url(), "statement-cache-capacity=0")).await,
        3,
        "statement-cache-capacity=0 in the URL: every run prepares (and closes) its statement"
    );
}

/// Rows another path committed first (a rebuild stores the claims it finds in flight) are
/// read again by the consumer from its place and ignored by claim id: one row each, the
/// stock taken once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_committed_by_another_path_are_not_committed_twice() {
    let s = Stack::start().await;
    let c = campaign(&s, 7003, 200, SHARDS, 1, 3600).await;
    let ids = claim_all(&s.client, &c, users("k", 200), 16).await;
    assert_eq!(ids.len(), 200);

    let mut first = Vec::new();
    for shard in 0..SHARDS {
        let st = stream::ShardStream::new(&s.client, shard);
        for e in st.all_entries(&s.client, 1000).await.unwrap() {
            first.push(stream::decode(shard, &e).unwrap().record);
        }
    }
    assert_eq!(first.len(), 200);
    commit::write_batch(&s.pool, &first, T).await.unwrap();
    assert_eq!(
        stream_depth(&s).await,
        (200, 200),
        "committed, the places not moved"
    );

    let consumer = start_consumer(s.cfg.clone());
    wait_drained(&s, c.sku, 200, Duration::from_secs(20)).await;
    consumer.stop().await;
    assert_eq!(s.count("SELECT COUNT(*) FROM claims").await, 200);
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 7003")
            .await,
        0
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
}

/// An entry that is not a claim record is kept in `stream_poison` with its fields, the
/// reason and a `poison` anomaly, in the batch that moves the place past it: the claims
/// after it are committed, nothing waits on it. A record of a version this build does not
/// know is such an entry (docs/DESIGN.md, "Claim record versions"), though its text reads
/// as a valid claim of the version it knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_entry_is_kept_in_the_ledger_and_passed() {
    let s = Stack::start().await;
    let c = campaign(&s, 7005, 10, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let mut conn = s.redis.connection();
    let bad: String = redis::cmd("XADD")
        .arg(stream_key(&s, shard))
        .arg("*")
        .arg("sku")
        .arg("7005")
        .arg("user")
        .arg("mallory")
        .query(&mut conn)
        .unwrap();
    let later = ClaimRecord {
        claim_id: String::new(),
        sku: c.sku,
        user: "later".into(),
        qty: 1,
        user_seq: 1,
        shard,
        home: shard,
        request_id: None,
        ts_ms: shard_router::now_ms(),
        gen: 0,
    };
    let text = later.encode().remove(0).1;
    let unknown: String = redis::cmd("XADD")
        .arg(stream_key(&s, shard))
        .arg("*")
        .arg("c2")
        .arg(&text)
        .query(&mut conn)
        .unwrap();
    let ids = claim_all(&s.client, &c, users("p", 3), 2).await;
    assert_eq!(ids.len(), 3);
    let consumer = start_consumer(s.cfg.clone());
    wait_drained(&s, c.sku, 3, Duration::from_secs(20)).await;
    consumer.stop().await;
    let mut kept = ledger::poison::list(&s.pool, 10, T).await.unwrap();
    kept.sort_by(|a, b| a.entry_id.cmp(&b.entry_id));
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[0].entry_id, bad);
    assert_eq!(kept[0].stream, stream_key(&s, shard));
    let fields: serde_json::Value = serde_json::from_str(&kept[0].fields).unwrap();
    assert_eq!(fields["user"], "mallory", "{fields}");
    assert!(kept[0].reason.contains("no field c1"), "{}", kept[0].reason);
    assert_eq!(kept[1].entry_id, unknown);
    assert_eq!(kept[1].stream, stream_key(&s, shard));
    let fields: serde_json::Value = serde_json::from_str(&kept[1].fields).unwrap();
    assert_eq!(fields["c2"], text.as_str(), "{fields}");
    assert!(
        kept[1].reason.contains("unknown version 2"),
        "{}",
        kept[1].reason
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'poison'")
            .await,
        2
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM claims").await, 3);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims WHERE user_id = 'later'")
            .await,
        0
    );
}

/// User ids differ byte for byte, as in Redis: ids that a case- or accent-insensitive
/// collation would merge ("Alice"/"alice", "bob"/"bob ", "josé"/"jose") are separate users
/// with separate ledger rows, not duplicates of each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_ids_are_compared_byte_for_byte() {
    let s = Stack::start().await;
    let c = campaign(&s, 7101, 10, SHARDS, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let names = ["Alice", "alice", "bob", "bob ", "josé", "jose"].map(str::to_owned);
    let ids = claim_all(&s.client, &c, names.to_vec(), 2).await;
    assert_eq!(ids.len(), names.len(), "Redis serves six users");
    wait_drained(&s, c.sku, names.len() as i64, Duration::from_secs(30)).await;
    consumer.stop().await;
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims WHERE sku = 7101")
            .await,
        6
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
}

/// Every record the scripts write reaches the ledger as the claim it records, field for
/// field (user and request id byte for byte, commas and all), with no anomaly and no drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_reach_the_ledger_field_for_field() {
    let s = Stack::start().await;
    let (c, records) = sold_out_in_the_streams(&s, 7004, 100, "up,ü").await;
    let mut want = records.clone();
    want.sort_by(|a, b| a.claim_id.cmp(&b.claim_id));

    let consumer = start_consumer(s.cfg.clone());
    wait_drained(&s, c.sku, 100, Duration::from_secs(30)).await;
    consumer.stop().await;
    // user_id and request_id are compared byte for byte (VARBINARY).
    type Row = (
        String,
        u64,
        Vec<u8>,
        u64,
        u32,
        u16,
        u16,
        Option<Vec<u8>>,
        i64,
    );
    let mut rows: Vec<Row> = sqlx::query_as(
        "SELECT claim_id, sku, user_id, user_seq, qty, shard, home, request_id, claimed_ms
         FROM claims WHERE sku = 7004 ORDER BY claim_id",
    )
    .fetch_all(&s.pool)
    .await
    .unwrap();
    rows.sort();
    let want: Vec<Row> = want
        .iter()
        .map(|r| {
            (
                r.claim_id.clone(),
                r.sku,
                r.user.clone().into_bytes(),
                r.user_seq,
                r.qty,
                r.shard,
                r.home,
                r.request_id.clone().map(String::into_bytes),
                r.ts_ms,
            )
        })
        .collect();
    assert_eq!(rows, want);
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.drift, 0, "{r:?}");
}
