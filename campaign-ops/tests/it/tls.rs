//! MySQL over TLS: the ledger's pool (`ledger/src/pool.rs`, sqlx on rustls) honours the URL's
//! `ssl-mode` and `ssl-ca`. The server is a real private `mariadbd` with a certificate made
//! for the test, and the consumer's user is created `REQUIRE SSL`, so a plain connection is
//! refused by the server itself: the ledger rows below can only have come over TLS.

use std::time::Duration;

use crate::common::*;
use shard_router::StockClient;
use sqlx::MySqlPool;
use test_support::mariadb::MariaDbServer;
use test_support::{slack, RedisServer};

const USER: &str = "fg_tls";

fn url(db: &MariaDbServer, query: &str) -> String {
    format!(
        "mysql://{USER}:pw@127.0.0.1:{}/flashgate?{query}",
        db.port()
    )
}

/// Connects and runs one query, so a refused handshake shows as an error here.
async fn try_ledger(url: &str) -> Result<MySqlPool, String> {
    let pool = ledger::pool::connect(url, T)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::query("SELECT 1")
        .execute(&pool)
        .await
        .map_err(|e| e.to_string())?;
    Ok(pool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_is_written_over_verified_tls() {
    let db = MariaDbServer::start_with_tls();
    let root = ledger::pool::connect(&db.url(), T).await.unwrap();
    for sql in [
        format!("CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY 'pw' REQUIRE SSL"),
        format!("GRANT ALL ON flashgate.* TO '{USER}'@'127.0.0.1'"),
    ] {
        sqlx::query(&sql).execute(&root).await.unwrap();
    }
    let ca = db.ca_file();
    let verified = url(
        &db,
        &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", ca.display()),
    );

    // The server refuses this user without TLS, and the client refuses a server whose
    // certificate it cannot verify (no CA given, and the system's roots do not know it).
    let plain = try_ledger(&url(&db, "ssl-mode=DISABLED")).await;
    assert!(plain.is_err(), "a REQUIRE SSL user got in without TLS");
    let unverified = try_ledger(&url(&db, "ssl-mode=VERIFY_CA")).await;
    assert!(
        unverified.is_err(),
        "connected to a server whose certificate no trusted CA signed"
    );

    let pool = try_ledger(&verified)
        .await
        .expect("verified TLS connection");
    let (_, version): (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_version'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        version.starts_with("TLS"),
        "session not on TLS: {version:?}"
    );

    // Migrations over TLS, then the whole consumer on that URL commits claims.
    ledger::pool::migrate(&pool)
        .await
        .expect("migrations over TLS");
    let redis = RedisServer::start();
    let cfg = config(&redis.url(), &verified);
    let consumer = start_consumer(cfg.clone());
    let client = StockClient::connect(cfg.datapath.stock()).await.unwrap();
    let c = open_campaign(&pool, &client, 12_101, 10, 2, 1, 3600).await;
    assert_eq!(claim_all(&client, &c, users("tls", 4), 2).await.len(), 4);
    wait_rows(&pool, c.sku, 4, slack(Duration::from_secs(20))).await;
    println!("drill=mysql-tls ssl_version={version} rows=4 plain=refused unverified=refused");
    consumer.stop().await;
}
