//! Ledger throughput (the ledger writer's throughput), three writers side by side on the same
//! MariaDB server in one run:
//! 1. the consumer draining a pre-filled stream backlog (claims committed per second);
//! 2. the `mariadb` client running multi-row INSERTs of the same rows (1000 per statement,
//!    each its own autocommit transaction);
//! 3. a writer that commits one row per transaction.
//!
//! The machine is shared, so 1 and 2 run interleaved `FG_PERF_ROUNDS` times (default 3)
//! and the best round of each is compared (the least disturbed by other tenants).
//!
//! Run: `cargo test --release -p campaign-ops --test it throughput:: -- --ignored --nocapture`
//! (`FG_PERF_CLAIMS` sets the backlog, default 50 000; `FG_PERF_BATCH`, `FG_PERF_WRITERS`
//! override the consumer's batch rows and writer count).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use campaign_ops::campaign::{self, Campaign};
use shard_router::ClaimRecord;
use test_support::mariadb::TestDatabase;

const SKU: u64 = 4242;
const COLUMNS: &str =
    "(claim_id, sku, user_id, user_seq, qty, shard, home, request_id, claimed_ms, batch_id)";

fn env(k: &str) -> Option<usize> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

/// Writes `n` claim records into the shard streams (what the scripts would have written);
/// returns them with their claim ids.
fn fill_backlog(s: &Stack, n: usize, round: usize) -> Vec<ClaimRecord> {
    let p = s.client.placement();
    let mut recs: Vec<ClaimRecord> = (0..n)
        .map(|i| {
            let user = format!("perf-{round}-{i}");
            let home = p.home_shard(SKU, SHARDS, &user);
            ClaimRecord {
                claim_id: String::new(),
                sku: SKU,
                user,
                qty: 1,
                user_seq: 1,
                shard: home,
                home,
                request_id: Some(format!("req-{i}")),
                ts_ms: shard_router::now_ms(),
                gen: 0,
            }
        })
        .collect();
    let mut conn = s.redis.connection();
    for chunk in recs.chunks_mut(1000) {
        let mut pipe = redis::pipe();
        for r in chunk.iter() {
            let mut add = redis::cmd("XADD");
            add.arg(stream_key(s, r.shard)).arg("*");
            for (k, v) in r.encode() {
                add.arg(k).arg(v);
            }
            pipe.add_command(add);
        }
        let ids: Vec<String> = pipe.query(&mut conn).unwrap();
        for (r, id) in chunk.iter_mut().zip(ids) {
            r.claim_id = format!("{}-{id}", r.shard);
        }
    }
    recs
}

/// One consumer round's figures.
struct Round {
    /// Claims per second from the consumer's start.
    cold: f64,
    /// Claims per second after the first commit.
    steady: f64,
    /// This process's CPU time (the consumer's, plus the drain polling) per claim, in µs.
    cpu_us: f64,
    /// The Redis server's CPU time per claim, in µs.
    redis_cpu_us: f64,
}

/// This process's CPU time so far (user + system, all threads, live or ended), in µs:
/// `/proc/self/stat` fields 14 and 15, in clock ticks of 10 ms.
fn process_cpu_us() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<u64> = stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    (fields[0] + fields[1]) * 10_000
}

/// The Redis server's CPU time so far (user + system, `INFO cpu`), in µs.
fn redis_cpu_us(s: &Stack) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(&mut s.redis.connection())
        .unwrap();
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .map(|v| (v.trim().parse::<f64>().unwrap() * 1e6) as u64)
        .sum()
}

/// One consumer round on a fresh stack: its figures and the records.
async fn consumer_round(n: usize, round: usize) -> (Round, Vec<ClaimRecord>) {
    let s = Stack::start().await;
    let now = shard_router::now_ms();
    let c = Campaign {
        sku: SKU,
        name: "perf".into(),
        stock: n as u64,
        width: SHARDS,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    };
    campaign::put(&s.pool, &c, SHARDS, T).await.unwrap();
    let recs = fill_backlog(&s, n, round);
    assert_eq!(stream_depth(&s).await.0, n as u64);
    let mut cfg = s.cfg.clone();
    if let Some(rows) = env("FG_PERF_BATCH") {
        cfg.datapath.batch_max_rows = rows;
    }
    if let Some(w) = env("FG_PERF_WRITERS") {
        cfg.datapath.writers = w;
    }
    let (cpu0, redis0) = (process_cpu_us(), redis_cpu_us(&s));
    let t0 = Instant::now();
    let consumer = start_consumer(cfg);
    // Polls the places the ledger committed against each stream's newest entry, not
    // COUNT(*) (a scan every few ms would compete with the writers).
    let mut first: Option<(Instant, u64)> = None;
    loop {
        let left = uncommitted_streams(&s).await;
        if first.is_none() && left < u64::from(SHARDS) {
            first = Some((Instant::now(), rows_left(&s, n).await));
        }
        if left == 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "backlog not drained"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let end = Instant::now();
    let (cpu1, redis1) = (process_cpu_us(), redis_cpu_us(&s));
    consumer.stop().await;
    assert_eq!(s.count("SELECT COUNT(*) FROM claims").await, n as i64);
    let cold = n as f64 / (end - t0).as_secs_f64();
    let (t1, left) = first.unwrap();
    let steady = left as f64 / (end - t1).as_secs_f64();
    let round = Round {
        cold,
        steady,
        cpu_us: (cpu1 - cpu0) as f64 / n as f64,
        redis_cpu_us: (redis1 - redis0) as f64 / n as f64,
    };
    (round, recs)
}

/// Streams whose newest entry is past the place the ledger committed.
async fn uncommitted_streams(s: &Stack) -> u64 {
    let mut left = 0;
    for shard in 0..SHARDS {
        let st = shard_router::stream::ShardStream::new(&s.client, shard);
        let mut conn = s.client.conn();
        let newest: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
            .arg(&st.key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await
            .unwrap();
        let at = ledger::places::get(&s.pool, &st.key, T)
            .await
            .unwrap()
            .map(|(o, _, _)| o.last_id);
        if newest.first().map(|(id, _)| id) != at.as_ref() && !newest.is_empty() {
            left += 1;
        }
    }
    left
}

/// Claims not in the ledger yet (one COUNT, taken once).
async fn rows_left(s: &Stack, n: usize) -> u64 {
    (n as i64 - s.count("SELECT COUNT(*) FROM claims").await).max(0) as u64
}

fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// The same rows by the `mariadb` client into a fresh database: rows/s.
async fn raw_round(recs: &[ClaimRecord]) -> f64 {
    let db = TestDatabase::create();
    let pool = ledger::pool::connect(&db.url(), T).await.unwrap();
    ledger::pool::migrate(&pool).await.unwrap();
    let mut sql = String::new();
    for chunk in recs.chunks(1000) {
        sql.push_str(&format!("INSERT INTO claims {COLUMNS} VALUES "));
        let rows: Vec<String> = chunk
            .iter()
            .map(|r| {
                format!(
                    "({}, {}, {}, {}, {}, {}, {}, {}, {}, 1)",
                    sql_str(&r.claim_id),
                    r.sku,
                    sql_str(&r.user),
                    r.user_seq,
                    r.qty,
                    r.shard,
                    r.home,
                    sql_str(r.request_id.as_deref().unwrap_or("")),
                    r.ts_ms
                )
            })
            .collect();
        sql.push_str(&rows.join(","));
        sql.push_str(";\n");
    }
    let url = db.url();
    let hostport = url
        .rsplit_once('@')
        .unwrap()
        .1
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let (host, port) = hostport.split_once(':').unwrap();
    let t = Instant::now();
    let mut child = Command::new("mariadb")
        .args([
            "--protocol=TCP",
            "-h",
            host,
            "-P",
            port,
            "-uroot",
            db.name(),
        ])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let rate = recs.len() as f64 / t.elapsed().as_secs_f64();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM claims")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, recs.len() as i64);
    rate
}

/// One row per transaction (autocommit INSERT), for at most `limit`: rows/s.
async fn row_per_transaction(recs: &[ClaimRecord], limit: Duration) -> (f64, usize) {
    let db = TestDatabase::create();
    let pool = ledger::pool::connect(&db.url(), T).await.unwrap();
    ledger::pool::migrate(&pool).await.unwrap();
    let t = Instant::now();
    let mut n = 0;
    for r in recs {
        if t.elapsed() > limit {
            break;
        }
        sqlx::query(&format!(
            "INSERT INTO claims {COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"
        ))
        .bind(&r.claim_id)
        .bind(r.sku)
        .bind(&r.user)
        .bind(r.user_seq)
        .bind(r.qty)
        .bind(r.shard)
        .bind(r.home)
        .bind(r.request_id.as_deref())
        .bind(r.ts_ms)
        .execute(&pool)
        .await
        .unwrap();
        n += 1;
    }
    (n as f64 / t.elapsed().as_secs_f64(), n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "performance measurement; run explicitly in release mode"]
async fn ledger_throughput_vs_raw_insert_and_row_per_transaction() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let n = env("FG_PERF_CLAIMS").unwrap_or(50_000);
    let rounds = env("FG_PERF_ROUNDS").unwrap_or(3);
    let (mut best_cold, mut best_steady, mut best_raw) = (0f64, 0f64, 0f64);
    let mut last = Vec::new();
    for round in 0..rounds {
        let (r, recs) = consumer_round(n, round).await;
        let (cold, steady) = (r.cold, r.steady);
        let raw = raw_round(&recs).await;
        eprintln!("round {round}: consumer {cold:.0}/s from start, {steady:.0}/s after first commit; mariadb client {raw:.0} rows/s");
        eprintln!(
            "round {round}: consumer_cpu_us_per_claim={:.2} redis_cpu_us_per_claim={:.2}",
            r.cpu_us, r.redis_cpu_us
        );
        best_cold = best_cold.max(cold);
        best_steady = best_steady.max(steady);
        best_raw = best_raw.max(raw);
        last = recs;
    }
    let (one, one_n) = row_per_transaction(&last, Duration::from_secs(5)).await;

    eprintln!(
        "ledger throughput, {n} claims, same MariaDB server, best of {rounds} interleaved rounds:"
    );
    eprintln!("  consumer, from start:              {best_cold:>8.0} claims/s  ({:.2}x raw, {:.1}x row/txn)", best_cold / best_raw, best_cold / one);
    eprintln!("  consumer, after first commit:      {best_steady:>8.0} claims/s  ({:.2}x raw, {:.1}x row/txn)", best_steady / best_raw, best_steady / one);
    eprintln!("  mariadb client multi-row INSERT:   {best_raw:>8.0} rows/s");
    eprintln!("  one row per transaction ({one_n} rows): {one:>8.0} rows/s");
}
