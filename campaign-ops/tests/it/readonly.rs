//! Drill `mysql_readonly`: what a primary switchover does to the consumer. A private
//! MariaDB; the consumer connects as a user without SUPER (so `read_only` applies to it)
//! while claims flow; one of its batch statements is killed (`KILL QUERY`) mid-commit, then
//! the server is read-only for 5 s, then flips read-only in 30 short blips (20 ms on,
//! 80 ms off: a switchover that goes back and forth). None of it is the rows' fault: every
//! acknowledged claim must reach `claims`, nothing may be kept as poison, the writer must
//! move again once the server is writable, and `/healthz` must say so while it cannot.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::MySqlPool;
use test_support::mariadb::{MariaDbServer, PRIVATE_DB};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

/// The consumer's MySQL user: no SUPER, no READ ONLY ADMIN, only the drill's database.
const USER: &str = "fg_writer";
const PASSWORD: &str = "fg-writer-pw";
/// Bound on the ledger catching up once the server is writable again.
const CATCH_UP: Duration = Duration::from_secs(30);

/// `/healthz`'s status (0 when it did not answer within 5 s).
async fn healthz(addr: SocketAddr) -> u16 {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        out.get(9..12)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// Every change of `/healthz`'s status, with the time it was seen, polled every 100 ms.
fn watch_health(addr: SocketAddr, start: Instant) -> Arc<Mutex<Vec<(Duration, u16)>>> {
    let seen = Arc::new(Mutex::new(Vec::<(Duration, u16)>::new()));
    let out = seen.clone();
    tokio::spawn(async move {
        loop {
            let status = healthz(addr).await;
            {
                let mut seen = seen.lock().unwrap();
                if seen.last().is_none_or(|&(_, s)| s != status) {
                    seen.push((start.elapsed(), status));
                }
            }
            if Arc::strong_count(&seen) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    out
}

/// Holds `sku`'s campaign row (a batch takes it shared) until a batch statement of
/// [`USER`] waits on it, then kills that statement: a commit interrupted by an operator's
/// `KILL QUERY`, or a proxy's. Returns how many were killed.
async fn kill_a_commit(root: &MySqlPool, sku: u64) -> usize {
    let mut hold = root.begin().await.unwrap();
    sqlx::query("SELECT sku FROM campaigns WHERE sku = ? FOR UPDATE")
        .bind(sku)
        .execute(&mut *hold)
        .await
        .unwrap();
    // Inside the consumer's statement bound (3 s), which would end the wait itself.
    let deadline = Instant::now() + Duration::from_millis(2500);
    let mut killed = 0;
    while killed == 0 && Instant::now() < deadline {
        let waiting: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM information_schema.processlist \
             WHERE user = ? AND command IN ('Query', 'Execute') AND info LIKE '%rebuild_gen%'",
        )
        .bind(USER)
        .fetch_all(root)
        .await
        .unwrap();
        for id in waiting {
            // Gone already (its wait ended): nothing to kill.
            if sqlx::query(&format!("KILL QUERY {id}"))
                .execute(root)
                .await
                .is_ok()
            {
                killed += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    hold.rollback().await.unwrap();
    killed
}

/// How often the server flips read-only briefly after the long spell.
const BLIPS: usize = 30;

async fn set_read_only(root: &MySqlPool, on: bool) {
    sqlx::query(&format!(
        "SET GLOBAL read_only = {}",
        if on { "ON" } else { "OFF" }
    ))
    .execute(root)
    .await
    .unwrap();
}

/// True once the ledger has `n` claims of `sku` and nothing past the places is left.
async fn drained_within(s: &Stack, sku: u64, n: usize, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let rows = s
            .count(&format!("SELECT COUNT(*) FROM claims WHERE sku = {sku}"))
            .await;
        if rows == n as i64 && stream_depth(s).await.1 == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_readonly() {
    let mysql = MariaDbServer::start();
    let mut s = Stack::start().await;
    // Root (SUPER) for the drill's own statements: setup, the fault, the checks.
    s.pool = ledger::pool::connect(&mysql.url(), T).await.unwrap();
    ledger::pool::migrate(&s.pool).await.unwrap();
    for sql in [
        format!("CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'"),
        format!("GRANT ALL ON `{PRIVATE_DB}`.* TO '{USER}'@'%'"),
    ] {
        sqlx::query(&sql).execute(&s.pool).await.unwrap();
    }
    let mut cfg = s.cfg.clone();
    // Well inside the read-only spell, so /healthz must show it.
    cfg.datapath.writer_stall = Duration::from_secs(1);
    cfg.datapath.mysql_url = format!(
        "mysql://{USER}:{PASSWORD}@127.0.0.1:{}/{PRIVATE_DB}",
        mysql.port()
    );
    let sku = 10_301;
    let c = campaign(&s, sku, 1_000_000, SHARDS, 1, 3600).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    let consumer = start_service(cfg, Some(listener));

    // ~300 claims/s, from before the first fault until well after the last (the kill
    // takes up to 2.5 s, read-only 5 s, the blips 3 s).
    let read_only_for = Duration::from_secs(5);
    let rounds = (drills::scaled(Duration::from_secs(14)).as_millis() / 100) as usize;
    let producer = {
        let client = s.client.clone();
        let c = c.clone();
        tokio::spawn(async move {
            let mut all = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            for round in 0..rounds {
                tick.tick().await;
                all.extend(claim_all(&client, &c, users(&format!("ro{round}-"), 30), 8).await);
            }
            all
        })
    };
    let start = Instant::now();
    let health = watch_health(admin, start);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = kill_a_commit(&s.pool, sku).await;

    tokio::time::sleep(Duration::from_millis(500)).await;
    let root = &s.pool;
    set_read_only(root, true).await;
    let on_at = start.elapsed();
    tokio::time::sleep(read_only_for).await;
    set_read_only(root, false).await;
    let off_at = start.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..BLIPS {
        set_read_only(root, true).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        set_read_only(root, false).await;
        tokio::time::sleep(Duration::from_millis(80)).await;
    }

    let ids = producer.await.unwrap();
    let caught_up = drained_within(&s, sku, ids.len(), CATCH_UP).await;
    let catch_up = start.elapsed() - off_at;
    // Healthy again once it moves: a bounded wait for the last change to show.
    let deadline = Instant::now() + Duration::from_secs(10);
    while health.lock().unwrap().last().map(|&(_, st)| st) != Some(200) && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = health.lock().unwrap().clone();
    drop(health);

    let rows: Vec<String> = sqlx::query_scalar("SELECT claim_id FROM claims")
        .fetch_all(root)
        .await
        .unwrap();
    let poison = s.count("SELECT COUNT(*) FROM stream_poison").await;
    let in_ledger: HashSet<&String> = rows.iter().collect();
    let figures = drills::Figures {
        drill: "mysql_readonly".into(),
        acknowledged: ids.len() as u64,
        recorded: rows.len() as u64,
        lost: ids.iter().filter(|id| !in_ledger.contains(id)).count() as u64,
        duplicated: (rows.len() - in_ledger.len()) as u64,
        recover_ms: caught_up.then_some(catch_up.as_millis()),
        ..drills::Figures::default()
    };
    println!(
        "{figures} poison={poison} killed={killed} read_only_ms={}..{} blips={BLIPS} caught_up={caught_up} health={seen:?}",
        on_at.as_millis(),
        off_at.as_millis()
    );

    assert!(killed > 0, "no batch statement was caught to kill");
    assert_eq!(poison, 0, "a server's state made rows poison");
    assert_eq!(
        figures.lost, 0,
        "acknowledged claims missing from the ledger"
    );
    assert!(
        caught_up,
        "the ledger did not catch up within {CATCH_UP:?} of read_only OFF"
    );
    let unhealthy = seen.iter().position(|&(at, st)| st == 503 && at >= on_at);
    assert!(
        unhealthy.is_some(),
        "/healthz never turned unhealthy while the writer could not commit: {seen:?}"
    );
    assert_eq!(
        seen.last().map(|&(_, st)| st),
        Some(200),
        "/healthz healthy again after the stall: {seen:?}"
    );
    consumer.stop().await;
}
