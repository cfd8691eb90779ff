//! `/healthz` reports MySQL and Redis as the consumer's probes see them, and `/metrics`
//! gives every series a HELP line.

use std::time::{Duration, Instant};

use crate::common::*;
use test_support::mariadb::MariaDbServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// GET over a fresh connection; (status, body).
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        let status = out.get(9..12)?.parse().ok()?;
        Some((status, out.split_once("\r\n\r\n")?.1.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .ok()
        .flatten()
        .unwrap_or((0, String::new()))
}

/// Polls `/healthz` until its status is `want` (within `limit`); returns the body.
async fn wait_health(addr: std::net::SocketAddr, want: u16, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let (status, body) = get(addr, "/healthz").await;
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/healthz stayed {status} {body:?}, wanted {want} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_follows_mysql_and_redis() {
    let _one = crate::common::one_at_a_time().await;
    let mut mysql = MariaDbServer::start();
    let mut s = Stack::start().await;
    s.cfg.datapath.mysql_url = mysql.url();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = plumbing::shutdown::channel();
    let task = tokio::spawn(campaign_ops::service::run(
        s.cfg.clone(),
        Some(listener),
        rx,
    ));

    // A probe every second, bounded by 2 s: a change shows within a few seconds.
    let limit = drills::scaled(Duration::from_secs(10));
    let body = wait_health(addr, 200, limit).await;
    assert!(body.contains(r#""mysql":true"#), "{body}");

    tokio::task::block_in_place(|| mysql.stop());
    let body = wait_health(addr, 503, limit).await;
    assert!(
        body.contains(r#""mysql":false"#) && body.contains(r#""redis":true"#),
        "{body}"
    );
    let (_, metrics) = get(addr, "/metrics").await;
    assert!(metrics.contains("flashgate_consumer_db_up 0"), "{metrics}");

    tokio::task::block_in_place(|| mysql.start_again());
    wait_health(addr, 200, limit).await;

    // Redis gone: unhealthy too, and the body says which.
    tokio::task::block_in_place(|| s.redis.kill());
    let body = wait_health(addr, 503, limit).await;
    assert!(body.contains(r#""redis":false"#), "{body}");

    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_on_metrics_has_help() {
    let _one = crate::common::one_at_a_time().await;
    let s = Stack::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = plumbing::shutdown::channel();
    let task = tokio::spawn(campaign_ops::service::run(
        s.cfg.clone(),
        Some(listener),
        rx,
    ));
    let c = campaign(&s, 42, 10, SHARDS, 1, 3600).await;
    let ids = claim_all(&s.client, &c, users("h", 3), 3).await;
    wait_drained(&s, c.sku, ids.len() as i64, Duration::from_secs(30)).await;
    // Health probe and recovery round (stream gauges) have run.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let (status, text) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    let help: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next())
        .collect();
    let types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
        .collect();
    assert!(types.len() >= 5, "too few series to mean anything: {text}");
    for name in &types {
        assert!(help.contains(name), "{name} has no # HELP line:\n{text}");
    }
    assert!(types.contains(&campaign_ops::metrics::DB_UP), "{text}");
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
}
