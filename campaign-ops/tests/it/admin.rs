//! The admin listener: open `/healthz` and `/metrics`, token-protected campaign and claim
//! routes, clear 4xx answers for caller mistakes.

use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TOKEN: &str = "test-token-0123456789";

/// One HTTP/1.1 request over a fresh connection; returns (status, body).
async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The consumer service with the admin listener on a free port, behind [`TOKEN`].
async fn start_admin(s: &Stack) -> (std::net::SocketAddr, Running) {
    let mut cfg = s.cfg.clone();
    cfg.admin_token = Some(TOKEN.into());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (addr, start_service(cfg, Some(listener)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_needs_the_token_and_manages_campaigns() {
    let s = Stack::start().await;
    let (addr, service) = start_admin(&s).await;

    assert_eq!(http(addr, "GET", "/healthz", None, "").await.0, 200);
    let (st, metrics) = http(addr, "GET", "/metrics", None, "").await;
    assert_eq!(st, 200, "{metrics}");

    let now = shard_router::now_ms();
    let campaign = format!(
        r#"{{"sku": 555, "stock": 10, "width": 2, "limit": 1, "start_ms": {}, "end_ms": {}, "payment_timeout_s": 60}}"#,
        now - 1000,
        now + 60_000
    );
    let (st, body) = http(addr, "PUT", "/v1/campaigns", None, &campaign).await;
    assert_eq!(st, 401);
    // Rejections carry the same shape as the gateway's: a status word and a message.
    assert!(
        body.contains(r#""status":"unauthorized""#) && body.contains(r#""error":"#),
        "{body}"
    );
    assert_eq!(
        http(
            addr,
            "PUT",
            "/v1/campaigns",
            Some("test-token-0123456788"),
            &campaign
        )
        .await
        .0,
        401
    );
    let (st, body) = http(addr, "PUT", "/v1/campaigns", Some(TOKEN), &campaign).await;
    assert_eq!(st, 200, "{body}");
    let (st, body) = http(addr, "POST", "/v1/campaigns/555/preheat", Some(TOKEN), "").await;
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("Preheated"), "{body}");
    // Preheat again: live slices are left alone.
    let (_, body) = http(addr, "POST", "/v1/campaigns/555/preheat", Some(TOKEN), "").await;
    assert!(
        body.contains("Live") && !body.contains("Preheated"),
        "{body}"
    );
    let (st, body) = http(addr, "GET", "/v1/campaigns/555", Some(TOKEN), "").await;
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"available\":10"), "{body}");
    let (st, body) = http(addr, "POST", "/v1/campaigns/555/reconcile", Some(TOKEN), "").await;
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"drift\":0"), "{body}");

    // Caller mistakes: clear 4xx, nothing changed.
    assert_eq!(
        http(addr, "PUT", "/v1/campaigns", Some(TOKEN), "{").await.0,
        400
    );
    let bad_width = campaign.replace("\"width\": 2", "\"width\": 99");
    assert_eq!(
        http(addr, "PUT", "/v1/campaigns", Some(TOKEN), &bad_width)
            .await
            .0,
        400
    );
    let (st, body) = http(addr, "GET", "/v1/campaigns/556", Some(TOKEN), "").await;
    assert_eq!(st, 404);
    assert!(body.contains(r#""status":"not_found""#), "{body}");
    assert_eq!(
        http(addr, "POST", "/v1/claims/0-1-1/cancel", Some(TOKEN), "")
            .await
            .0,
        404
    );

    service.stop().await;
}

/// A preheat that rebuilds from the ledger (a slice missing) waits for replicas as
/// `--replica-wait` says. It used the default (`auto`, 100 ms) whatever the consumer was
/// configured with: with `off` (no extra round trip wanted) it fenced every shard all the
/// same and, here with a stalled replica the master still counts connected, failed
/// unconfirmed after a second or two; with `always` it confirmed nothing on a master that
/// never had a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preheat_waits_for_replicas_as_configured() {
    let (s, replica) = crate::common::failover::stack_with_replica().await;
    replica.signal("STOP");
    let mut cfg = s.cfg.clone();
    cfg.admin_token = Some(TOKEN.into());
    cfg.datapath.replica_wait = consumer::replica::ReplicaWait::Off;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = plumbing::shutdown::channel();
    let task = tokio::spawn(campaign_ops::service::run(cfg, Some(listener), rx));

    let now = shard_router::now_ms();
    let campaign = format!(
        r#"{{"sku": 556, "stock": 10, "width": 2, "limit": 1, "start_ms": {}, "end_ms": {}, "payment_timeout_s": 60}}"#,
        now - 1000,
        now + 60_000
    );
    let (st, body) = http(addr, "PUT", "/v1/campaigns", Some(TOKEN), &campaign).await;
    assert_eq!(st, 200, "{body}");
    let (st, body) = http(addr, "POST", "/v1/campaigns/556/preheat", Some(TOKEN), "").await;
    assert_eq!(
        st, 200,
        "replica-wait off: the preheat waits for no replica: {body}"
    );
    assert!(body.contains("Preheated"), "{body}");
    replica.signal("CONT");
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(20), task).await;

    // `always` on a master with no replica: nothing is confirmed, the preheat says so.
    let s = Stack::start().await;
    let mut cfg = s.cfg.clone();
    cfg.datapath.replica_wait = consumer::replica::ReplicaWait::Always(Duration::from_millis(20));
    let c = campaign_ops::campaign::Campaign {
        sku: 557,
        name: "always".into(),
        stock: 10,
        width: 2,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 60_000,
        payment_timeout_s: 60,
    };
    campaign_ops::campaign::put(&s.pool, &c, SHARDS, T)
        .await
        .unwrap();
    cfg.admin_token = Some(TOKEN.into());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = plumbing::shutdown::channel();
    let task = tokio::spawn(campaign_ops::service::run(cfg, Some(listener), rx));
    let (st, body) = http(addr, "POST", "/v1/campaigns/557/preheat", Some(TOKEN), "").await;
    assert_eq!(
        st, 503,
        "replica-wait always, no replica: unconfirmed, retryable: {body}"
    );
    assert!(
        body.contains("not confirmed by a replica"),
        "the answer says why, not only the log: {body}"
    );
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
}

/// `PUT /v1/campaigns` creates draw and queue campaigns as `consumer campaign --mode`
/// does; a wrong mode, a misspelt key, a draw without its time or draw fields on another
/// mode are 400 and write nothing; a field left out keeps what is stored; a draw's mode
/// cannot change, nor, once it has entries, its terms (refused before the campaign row
/// changes: found by review, the row was written first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_creates_draws_and_queues() {
    let s = Stack::start().await;
    let (addr, service) = start_admin(&s).await;
    let now = shard_router::now_ms();
    let body = |sku: u64, extra: &str| {
        format!(
            r#"{{"sku": {sku}, "stock": 10, "width": 2, "limit": 1, "start_ms": {}, "end_ms": {}, "payment_timeout_s": 60{extra}}}"#,
            now - 1000,
            now + 3_600_000
        )
    };
    let put = |b: String| async move { http(addr, "PUT", "/v1/campaigns", Some(TOKEN), &b).await };

    let draw_at = now + 600_000;
    let (st, out) = put(body(
        571,
        &format!(r#", "mode": "draw", "draw_at_ms": {draw_at}, "waitlist": 5"#),
    ))
    .await;
    assert_eq!(st, 200, "{out}");
    assert!(out.contains(r#""mode":"draw""#), "{out}");
    let d = ledger::draws::get(&s.pool, 571, T).await.unwrap().unwrap();
    assert_eq!((d.draw_at_ms, d.waitlist), (draw_at, 5));

    let (st, out) = put(body(572, r#", "mode": "queue""#)).await;
    assert_eq!(st, 200, "{out}");
    assert_eq!(
        ledger::draws::mode(&s.pool, 572, T).await.unwrap(),
        Some(ledger::draws::Mode::Queue)
    );

    for (sku, extra, says) in [
        (573, r#", "mode": "lottery""#, "is not one of"),
        (574, r#", "mode": "draw""#, "needs draw_at_ms"),
        (575, r#", "waitlist": 3"#, "need mode draw"),
        (
            576,
            &format!(r#", "mode": "draw", "draw_at_ms": {}"#, now - 5000) as &str,
            "draw time",
        ),
        (577, r#", "Mode": "queue""#, "unknown field"),
    ] {
        let (st, out) = put(body(sku, extra)).await;
        assert_eq!(st, 400, "{extra}: {out}");
        assert!(out.contains(says), "{extra}: {out}");
        assert!(
            matches!(
                ledger::campaigns::get(&s.pool, sku, T).await,
                Err(ledger::LedgerError::NotFound(_))
            ),
            "{extra} wrote the campaign"
        );
    }
    // Left out, the mode and the draw's terms keep what is stored.
    let (st, out) = put(body(571, "")).await;
    assert_eq!(st, 200, "{out}");
    let d = ledger::draws::get(&s.pool, 571, T).await.unwrap().unwrap();
    assert_eq!((d.draw_at_ms, d.waitlist), (draw_at, 5));
    // A draw stays a draw.
    let (st, out) = put(body(571, r#", "mode": "fcfs""#)).await;
    assert_eq!(st, 400, "{out}");
    assert!(out.contains("cannot change"), "{out}");
    // Once entered, its terms are fixed, and the refusal changes nothing else.
    let (st, out) = http(addr, "POST", "/v1/campaigns/571/preheat", Some(TOKEN), "").await;
    assert_eq!(st, 200, "{out}");
    let got = s.client.draw_enter(571, 2, "early", now).await.unwrap();
    assert!(
        matches!(got, shard_router::draw::EntryOutcome::Entered { .. }),
        "{got:?}"
    );
    let t0 = std::time::Instant::now();
    while ledger::draws::entry_count(&s.pool, 571, T).await.unwrap() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the entry never reached the ledger"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let later_end = body(571, r#", "waitlist": 6"#).replace(
        &format!("\"end_ms\": {}", now + 3_600_000),
        &format!("\"end_ms\": {}", now + 7_200_000),
    );
    let (st, out) = put(later_end).await;
    assert_eq!(st, 400, "{out}");
    assert!(out.contains("cannot change"), "{out}");
    let c = ledger::campaigns::get(&s.pool, 571, T).await.unwrap();
    assert_eq!(
        c.end_ms,
        now + 3_600_000,
        "a refused change wrote the campaign"
    );

    service.stop().await;
}
