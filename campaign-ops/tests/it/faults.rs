//! Fault drills: the consumer process SIGKILLed mid-batch and SIGTERMed with an open
//! batch, and MySQL stopped for 10 s under load.

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use test_support::mariadb::MariaDbServer;

fn spawn_consumer(s: &Stack, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_consumer"))
        .args([
            "--redis",
            &s.redis.url(),
            "--shards",
            &SHARDS.to_string(),
            "--mysql",
            &s.db.url(),
        ])
        .args(["run", "--admin-addr", "127.0.0.1:0", "--lease-ms", "3000"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn consumer binary")
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "consumer did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The drill's figures line: acknowledged claim ids against ledger rows.
fn figures(drill: &str, acked: &[String], ledger: &[String], recover: Duration) -> drills::Figures {
    let rows: HashSet<&String> = ledger.iter().collect();
    let acked_set: HashSet<&String> = acked.iter().collect();
    drills::Figures {
        drill: drill.to_owned(),
        acknowledged: acked.len() as u64,
        recorded: ledger.len() as u64,
        lost: acked_set.difference(&rows).count() as u64,
        duplicated: (ledger.len() - rows.len()) as u64,
        recover_ms: Some(recover.as_millis()),
        ..drills::Figures::default()
    }
}

async fn ledger_ids(s: &Stack) -> Vec<String> {
    sqlx::query_scalar("SELECT claim_id FROM claims")
        .fetch_all(&s.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_sigkilled_mid_batch_while_claims_flow_loses_and_doubles_nothing() {
    let s = Stack::start().await;
    let n = 6000;
    let c = campaign(&s, 10001, n as u64, SHARDS, 1, 3600).await;
    let mut first = spawn_consumer(&s, &["--batch-max-rows", "200"]);
    let producer = {
        let client = s.client.clone();
        let c = c.clone();
        tokio::spawn(async move { claim_all(&client, &c, users("s", n), 8).await })
    };
    // Kill once the ledger is filling, i.e. with batches in progress.
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.count("SELECT COUNT(*) FROM claims").await < 500 {
        assert!(
            Instant::now() < deadline,
            "the first consumer never committed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let at_kill = s.count("SELECT COUNT(*) FROM claims").await;
    let restarted = Instant::now();
    let mut second = spawn_consumer(&s, &["--batch-max-rows", "200"]);
    let ids = producer.await.unwrap();
    assert_eq!(ids.len(), n);
    wait_drained(&s, c.sku, n as i64, Duration::from_secs(40)).await;
    let recover = restarted.elapsed();
    sigterm(&second);
    assert!(wait_exit(&mut second, Duration::from_secs(15)).success());
    eprintln!("killed with {at_kill} of {n} rows committed");
    assert!(
        at_kill < n as i64,
        "the kill came while claims were flowing"
    );

    let in_ledger = ledger_ids(&s).await;
    println!(
        "{} committed_at_kill={at_kill}",
        figures("consumer-sigkill", &ids, &in_ledger, recover)
    );
    assert_eq!(in_ledger.len(), n);
    let a: HashSet<_> = in_ledger.into_iter().collect();
    let b: HashSet<_> = ids.into_iter().collect();
    assert_eq!(a, b, "every acknowledged claim exactly once");
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 10001")
            .await,
        0
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_flushes_the_open_batch_and_acks_only_what_committed() {
    let s = Stack::start().await;
    let c = campaign(&s, 10002, 3000, SHARDS, 1, 3600).await;
    let ids = claim_all(&s.client, &c, users("t", 3000), 16).await;
    assert_eq!(ids.len(), 3000);
    // A long max wait keeps a batch open when the signal arrives.
    let mut child = spawn_consumer(
        &s,
        &["--batch-max-rows", "5000", "--batch-max-wait-ms", "5000"],
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sigterm(&child);
    assert!(wait_exit(&mut child, Duration::from_secs(15)).success());
    let rows = s.count("SELECT COUNT(*) FROM claims").await;
    let (len, pending) = stream_depth(&s).await;
    assert!(rows > 0, "the open batch was flushed");
    assert_eq!(
        pending, len,
        "what committed was trimmed: the streams hold only what is past the place"
    );
    assert_eq!(
        rows as u64 + len,
        3000,
        "acknowledged = committed; the rest still in the streams"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_down_for_ten_seconds_under_load_loses_nothing() {
    let mut mysql = MariaDbServer::start();
    let mut s = Stack::start().await;
    // Point everything at the private server instead of the shared test database.
    s.cfg.datapath.mysql_url = mysql.url();
    s.pool = ledger::pool::connect(&s.cfg.datapath.mysql_url, T)
        .await
        .unwrap();
    ledger::pool::migrate(&s.pool).await.unwrap();
    let c = campaign(&s, 10003, 100_000, SHARDS, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());

    // ~300 claims/s for 14 s; MySQL goes away from second 2 to second 12.
    let producer = {
        let client = s.client.clone();
        let c = c.clone();
        tokio::spawn(async move {
            let mut all = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            for round in 0..140 {
                tick.tick().await;
                let batch = users(&format!("m{round}-"), 30);
                all.extend(claim_all(&client, &c, batch, 8).await);
            }
            all
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| mysql.stop());
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(stopped.elapsed())).await;
    let lag = stream_len(&s).await;
    tokio::task::block_in_place(|| mysql.start_again());
    eprintln!("stream backlog when MySQL came back: {lag}");
    assert!(lag > 0, "claims piled up while MySQL was down");

    let ids = producer.await.unwrap();
    let drain_from = Instant::now();
    wait_drained(&s, c.sku, ids.len() as i64, Duration::from_secs(30)).await;
    eprintln!(
        "{} claims, drained {:?} after the producer ended",
        ids.len(),
        drain_from.elapsed()
    );
    consumer.stop().await;
    let rows = ledger_ids(&s).await;
    println!(
        "{} backlog_when_back={lag}",
        figures("mysql-down-10s", &ids, &rows, drain_from.elapsed())
    );
    let in_ledger: HashSet<String> = rows.into_iter().collect();
    assert_eq!(in_ledger, ids.into_iter().collect::<HashSet<_>>());
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
}
