//! Drill `hostile_input` (docs/DESIGN.md), socket half: a real gateway on `127.0.0.1:0` and a real
//! Redis, attacked over raw TCP while a normal client keeps claiming.
//!
//! - slowloris: hundreds of connections trickling a request head byte by byte (and some
//!   sending nothing) are cut off by the header read timeout, and normal claims stay fast;
//! - the connection cap: past it, new connections wait, and service resumes as soon as the
//!   hogs leave or are cut off;
//! - oversized bodies (declared or chunked) are 413 JSON and take nothing;
//! - header floods (many headers, one huge header, a huge request line) are refused without
//!   harming the server;
//! - a wrong content type is 415 JSON and takes nothing;
//! - slow bodies hold a connection until the body timeout (408), never an in-flight slot, so
//!   they do not shed normal claims;
//! - a client that pipelines requests and never reads is cut by the write timeout, and a
//!   connection past its maximum age is closed after its current request.
//!
//! Every drill prints one `drill=...` line of figures.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::raw::*;
use crate::common::*;
use shard_router::SkuMeta;
use test_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get((v.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

struct Setup {
    redis: RedisServer,
    gw: Gateway,
    stock: shard_router::StockClient,
    meta: SkuMeta,
}

async fn setup(sku: u64, stock_units: u64, tune: impl FnOnce(&mut gateway::Config)) -> Setup {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, sku, stock_units, 4, 1).await;
    let mut cfg = config(&redis.url(), false);
    tune(&mut cfg);
    let gw = Gateway::start(cfg).await;
    Setup {
        redis,
        gw,
        stock,
        meta,
    }
}

/// A connection that sends `head` one byte per `every`, and reports how long the server
/// kept it open (`None`: still open when the test gave up at `give_up`).
async fn trickle(
    addr: SocketAddr,
    head: &'static [u8],
    every: Duration,
    give_up: Duration,
) -> Option<Duration> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let started = Instant::now();
    let (mut rd, mut wr) = stream.into_split();
    let write = async {
        for byte in head.iter().cycle() {
            if wr.write_all(std::slice::from_ref(byte)).await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    };
    let read = async {
        let mut sink = [0u8; 512];
        // Anything but more data (EOF, reset) means the server let go. A 408 answer is
        // fine too; the close that follows ends the loop.
        while let Ok(n) = rd.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::select! {
        _ = read => Some(started.elapsed()),
        _ = write => Some(started.elapsed()),
        _ = tokio::time::sleep(give_up) => None,
    }
}

/// A connection that sends nothing at all.
async fn silent(addr: SocketAddr, give_up: Duration) -> Option<Duration> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let started = Instant::now();
    let mut sink = [0u8; 64];
    match tokio::time::timeout(give_up, stream.read(&mut sink)).await {
        Ok(_) => Some(started.elapsed()),
        Err(_) => None,
    }
}

const SLOW_HEAD: &[u8] = b"POST /v1/claims HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_does_not_starve_normal_clients() {
    const SLOW: usize = 200;
    const SILENT: usize = 20;
    let header_timeout = Duration::from_millis(1_000);
    let s = setup(8001, 10_000, |c| {
        c.header_timeout_ms = header_timeout.as_millis() as u64;
    })
    .await;
    let addr = s.gw.api;

    let mut attackers = JoinSet::new();
    for _ in 0..SLOW {
        attackers.spawn(trickle(
            addr,
            SLOW_HEAD,
            Duration::from_millis(100),
            Duration::from_secs(6),
        ));
    }
    for _ in 0..SILENT {
        attackers.spawn(silent(addr, Duration::from_secs(6)));
    }

    // The normal client claims one unit per fresh user, back to back, for 2.5 s.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut ok = 0usize;
    let mut i = 0;
    while started.elapsed() < Duration::from_millis(2_500) && i < 2_000 {
        let (a, took) = normal_claim(addr, s.meta.sku, &format!("normal-{i}")).await;
        assert_eq!(a.status, Some(201), "normal claim {i}: {:?}", a.body);
        ok += 1;
        latencies.push(took);
        i += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut cut = Vec::new();
    let mut still_open = 0usize;
    while let Some(r) = attackers.join_next().await {
        match r.expect("attacker task") {
            Some(d) => cut.push(d),
            None => still_open += 1,
        }
    }
    let max = latencies.iter().max().copied().unwrap_or_default();
    let p99 = p99(latencies);
    let earliest = cut.iter().min().copied().unwrap_or_default();
    let latest = cut.iter().max().copied().unwrap_or_default();
    println!(
        "drill=slowloris slow_conns={SLOW} silent_conns={SILENT} header_timeout_ms={} normal_ok={ok} normal_p99_ms={} normal_max_ms={} cut_off={} still_open={still_open} cut_after_ms={}..{}",
        header_timeout.as_millis(),
        p99.as_millis(),
        max.as_millis(),
        cut.len(),
        earliest.as_millis(),
        latest.as_millis(),
    );
    assert!(ok >= 20, "the normal client got through only {ok} claims");
    assert!(max < Duration::from_secs(1), "a normal claim took {max:?}");
    assert_eq!(
        still_open, 0,
        "slow connections outlived the header timeout"
    );
    assert_eq!(cut.len(), SLOW + SILENT);
    assert!(
        earliest >= header_timeout - Duration::from_millis(100),
        "cut before the header timeout: {earliest:?}"
    );
    assert!(
        latest < header_timeout * 3,
        "a slow connection lasted {latest:?}"
    );
    assert_eq!(
        slices_left(&s.stock, &s.meta).await,
        s.meta.stock as i64 - ok as i64,
        "exactly the normal claims took stock"
    );
    s.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_queues_then_recovers() {
    const CAP: usize = 16;
    let header_timeout = Duration::from_millis(1_500);
    let s = setup(8002, 100, |c| {
        c.max_connections = CAP;
        c.header_timeout_ms = header_timeout.as_millis() as u64;
    })
    .await;
    let addr = s.gw.api;

    // Hogs: full slots, each holding a half-sent head.
    let open_hogs = || async move {
        let mut hogs = Vec::new();
        for _ in 0..CAP {
            let mut h = TcpStream::connect(addr).await.expect("connect hog");
            h.write_all(b"POST /v1/claims HTTP/1.1\r\nhost: x\r\n")
                .await
                .expect("hog head");
            hogs.push(h);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        hogs
    };

    // Phase 1: while the hogs hold every slot a new client waits; when they leave it is
    // served at once.
    let hogs = open_hogs().await;
    let waiting = tokio::spawn(normal_claim(addr, s.meta.sku, "cap-1"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "served past the connection cap");
    let released = Instant::now();
    drop(hogs);
    let (a, _) = waiting.await.expect("claim task");
    let resume_after_drop = released.elapsed();
    assert_eq!(a.status, Some(201), "{:?}", a.body);
    assert!(
        resume_after_drop < Duration::from_secs(1),
        "served {resume_after_drop:?} after the hogs left"
    );

    // Phase 2: hogs that stay are cut off by the header timeout, which frees the slots.
    let hogs = open_hogs().await;
    let started = Instant::now();
    let (a, waited) = normal_claim(addr, s.meta.sku, "cap-2").await;
    assert_eq!(a.status, Some(201), "{:?}", a.body);
    assert!(
        waited >= Duration::from_millis(500) && waited < header_timeout * 2,
        "waited {waited:?} behind hogs cut after {header_timeout:?}"
    );
    // A hog that waited in the backlog is cut one timeout after it was accepted.
    let deadline = started + header_timeout * 3;
    let mut cut = 0;
    for mut h in hogs {
        let mut sink = [0u8; 64];
        let left = deadline.saturating_duration_since(Instant::now());
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(left, h.read(&mut sink)).await {
            cut += 1;
        }
    }
    // And afterwards service is normal again.
    let (a, after) = normal_claim(addr, s.meta.sku, "cap-3").await;
    assert_eq!(a.status, Some(201), "{:?}", a.body);
    assert!(after < Duration::from_secs(1), "{after:?}");
    println!(
        "drill=conn_cap max_connections={CAP} hogs={CAP} resume_after_drop_ms={} waited_behind_stuck_hogs_ms={} hogs_cut={cut} after_ms={}",
        resume_after_drop.as_millis(),
        waited.as_millis(),
        after.as_millis(),
    );
    assert_eq!(cut, CAP, "every stuck hog was cut off");
    s.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_413_and_take_nothing() {
    let s = setup(8003, 100, |c| c.body_timeout_ms = 1_000).await;
    let addr = s.gw.api;
    let max = config(&s.redis.url(), false).max_body_bytes;
    let calls = script_calls(&s.redis);
    let head = |extra: &str| {
        format!(
            "POST /v1/claims HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{extra}\r\n"
        )
    };
    // A claim whose `user` is padded out to `len` bytes.
    let padded = |len: usize| {
        let prefix = format!(r#"{{"sku":{},"user":""#, s.meta.sku);
        let mut b = prefix.into_bytes();
        b.resize(len.saturating_sub(2), b'u');
        b.extend_from_slice(b"\"}");
        b
    };
    let chunked = |body: &[u8], chunk: usize| {
        let mut out = head("transfer-encoding: chunked\r\n").into_bytes();
        for c in body.chunks(chunk) {
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    };

    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "declared 10 MB, nothing sent",
            head("content-length: 10000000\r\n").into_bytes(),
        ),
        (
            "declared 2^63",
            head(&format!("content-length: {}\r\n", 1u64 << 63)).into_bytes(),
        ),
        ("declared and sent cap+1", {
            let body = padded(max + 1);
            let mut r = head(&format!("content-length: {}\r\n", body.len())).into_bytes();
            r.extend_from_slice(&body);
            r
        }),
        ("sent 1 MB", {
            let body = padded(1 << 20);
            let mut r = head(&format!("content-length: {}\r\n", body.len())).into_bytes();
            r.extend_from_slice(&body);
            r
        }),
        (
            "chunked, small chunks past the cap",
            chunked(&padded(max * 4), 256),
        ),
        (
            "chunked, one chunk past the cap",
            chunked(&padded(max + 1), max + 1),
        ),
        ("chunked, huge declared chunk", {
            let mut r = head("transfer-encoding: chunked\r\n").into_bytes();
            r.extend_from_slice(b"7fffffff\r\n");
            r.extend_from_slice(&padded(max + 100));
            r
        }),
    ];
    let n = cases.len();
    let mut worst = Duration::ZERO;
    for (name, req) in cases {
        let started = Instant::now();
        let a = raw_exchange(addr, req).await;
        worst = worst.max(started.elapsed());
        assert_eq!(a.status, Some(413), "{name}: {:?}", a.body);
        assert_eq!(
            a.kind(),
            Some(ApiStatus::BadRequest),
            "{name}: {:?}",
            a.body
        );
        assert!(a.body["error"].as_str().is_some(), "{name}");
    }
    // A length hyper cannot even represent is refused by hyper itself (431, no JSON)
    // before any handler runs; what matters is that it is refused and takes nothing.
    let unrepresentable = raw_exchange(
        addr,
        head(&format!("content-length: {}\r\n", u64::MAX)).into_bytes(),
    )
    .await;
    assert!(
        matches!(unrepresentable.status, Some(413 | 431) | None),
        "content-length u64::MAX: {:?}",
        unrepresentable.status
    );
    // The cap itself is accepted (it is a cap, not a limit minus one).
    let at_cap = {
        let body = padded(max);
        let mut r = head(&format!("content-length: {}\r\n", body.len())).into_bytes();
        r.extend_from_slice(&body);
        raw_exchange(addr, r).await
    };
    assert_eq!(
        at_cap.status,
        Some(400),
        "a {max}-byte user is refused as a field, not as a size: {:?}",
        at_cap.body
    );

    let left = slices_left(&s.stock, &s.meta).await;
    let calls_after = script_calls(&s.redis);
    println!(
        "drill=oversized cases={n} all_413=true worst_ms={} script_calls={} stock_before={} stock_after={left}",
        worst.as_millis(),
        calls_after - calls,
        s.meta.stock,
    );
    assert!(worst < Duration::from_secs(2), "a rejection took {worst:?}");
    assert_eq!(calls_after, calls, "oversized bodies reached a script");
    assert_eq!(left, s.meta.stock as i64, "oversized bodies took stock");
    let (a, _) = normal_claim(addr, s.meta.sku, "after-oversized").await;
    assert_eq!(a.status, Some(201), "{:?}", a.body);
    s.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_floods_are_refused_without_harm() {
    const FLOODERS: usize = 40;
    let s = setup(8004, 1_000, |_| {}).await;
    let addr = s.gw.api;
    let calls = script_calls(&s.redis);
    let body = format!(r#"{{"sku":{},"user":"flood"}}"#, s.meta.sku);
    let with_head = |extra: String| {
        format!(
            "POST /v1/claims HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let many_headers = |n: usize| (0..n).map(|i| format!("x-h{i}: v\r\n")).collect::<String>();
    let floods: Vec<(&str, Vec<u8>)> = vec![
        ("300 headers", with_head(many_headers(300))),
        ("3000 headers", with_head(many_headers(3_000))),
        (
            "one 64 KiB header",
            with_head(format!("x-big: {}\r\n", "a".repeat(64 * 1024))),
        ),
        (
            "one 1 MiB header",
            with_head(format!("x-big: {}\r\n", "a".repeat(1 << 20))),
        ),
        ("64 KiB request line", {
            let mut r =
                format!("POST /v1/claims?{} HTTP/1.1\r\n", "q".repeat(64 * 1024)).into_bytes();
            r.extend_from_slice(&with_head(String::new())[b"POST /v1/claims HTTP/1.1\r\n".len()..]);
            r
        }),
    ];

    // A head comfortably under the cap (12 KiB of headers) is served normally.
    let big_ok = raw_exchange(
        addr,
        with_head(format!("x-token: {}\r\n", "t".repeat(12 * 1024))),
    )
    .await;
    assert_eq!(big_ok.status, Some(201), "12 KiB head: {:?}", big_ok.body);

    // Each flood alone: refused with 431 (or 414), or the connection closed unanswered.
    let mut outcomes = Vec::new();
    for (name, req) in &floods {
        let a = raw_exchange(addr, req.clone()).await;
        assert!(
            matches!(a.status, None | Some(431) | Some(414)),
            "{name}: answered {:?} {:?}",
            a.status,
            a.body
        );
        outcomes.push(format!(
            "{}={}",
            name.replace(' ', "_"),
            a.status.map_or("closed".into(), |c| c.to_string())
        ));
    }

    // All of them at once from many connections while the normal client claims.
    let refused = Arc::new(AtomicU64::new(0));
    let mut flooders = JoinSet::new();
    for i in 0..FLOODERS {
        let req = floods[i % floods.len()].1.clone();
        let refused = refused.clone();
        flooders.spawn(async move {
            let a = raw_exchange(addr, req).await;
            if matches!(a.status, None | Some(431) | Some(414)) {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let mut latencies = Vec::new();
    for i in 0..50 {
        let (a, took) = normal_claim(addr, s.meta.sku, &format!("normal-{i}")).await;
        assert_eq!(a.status, Some(201), "normal claim {i}: {:?}", a.body);
        latencies.push(took);
    }
    while flooders.join_next().await.is_some() {}
    let max = latencies.iter().max().copied().unwrap_or_default();
    let left = slices_left(&s.stock, &s.meta).await;
    let calls_after = script_calls(&s.redis);
    println!(
        "drill=header_flood {} flooders={FLOODERS} refused={} normal_ok={} normal_p99_ms={} normal_max_ms={} script_calls={}",
        outcomes.join(" "),
        refused.load(Ordering::Relaxed),
        latencies.len(),
        p99(latencies).as_millis(),
        max.as_millis(),
        calls_after - calls,
    );
    assert_eq!(refused.load(Ordering::Relaxed), FLOODERS as u64);
    assert!(max < Duration::from_secs(1), "a normal claim took {max:?}");
    assert_eq!(
        left,
        s.meta.stock as i64 - 51,
        "only the normal claims (and the 12 KiB one) took stock"
    );
    s.gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_content_type_is_415() {
    let s = setup(8005, 100, |_| {}).await;
    let addr = s.gw.api;
    let calls = script_calls(&s.redis);
    let body = format!(r#"{{"sku":{},"user":"ct"}}"#, s.meta.sku);
    let types: &[Option<&str>] = &[
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonx"),
        Some("application/json-patch+json"),
        Some("json"),
        Some(""),
    ];
    for ct in types {
        let ct_line = ct
            .map(|c| format!("content-type: {c}\r\n"))
            .unwrap_or_default();
        let req = format!(
            "POST /v1/claims HTTP/1.1\r\nhost: x\r\n{ct_line}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let a = raw_exchange(addr, req.into_bytes()).await;
        assert_eq!(a.status, Some(415), "{ct:?}: {:?}", a.body);
        assert_eq!(a.kind(), Some(ApiStatus::BadRequest), "{ct:?}");
    }
    let left = slices_left(&s.stock, &s.meta).await;
    let calls_after = script_calls(&s.redis);
    println!(
        "drill=content_type cases={} all_415=true script_calls={} stock_before={} stock_after={left}",
        types.len(),
        calls_after - calls,
        s.meta.stock
    );
    assert_eq!(calls_after, calls);
    assert_eq!(left, s.meta.stock as i64);
    s.gw.stop().await;
}

/// Slow bodies ("R-U-Dead-Yet"): a claim whose body trickles in holds a connection, not an
/// in-flight slot (the slot is taken once the body is in). So as many slow bodies as the
/// in-flight cap do not shed a normal claim, and each slow one ends in 408 at the body
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_hold_no_in_flight_slot() {
    const SLOW: usize = 8;
    let body_timeout = Duration::from_millis(1_000);
    let s = setup(8006, 100, |c| {
        c.max_in_flight = SLOW;
        c.body_timeout_ms = body_timeout.as_millis() as u64;
    })
    .await;
    let addr = s.gw.api;
    let mut slow = JoinSet::new();
    for i in 0..SLOW {
        slow.spawn(async move {
            let body = format!(r#"{{"sku":8006,"user":"slow-{i}"}}"#);
            let head = format!(
                "POST /v1/claims HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            let started = Instant::now();
            let mut st = TcpStream::connect(addr).await.expect("connect");
            st.write_all(head.as_bytes()).await.expect("head");
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            // One body byte every 100 ms: the body is never complete before the timeout.
            for b in body.bytes().take(30) {
                if st.write_all(&[b]).await.is_err() {
                    break;
                }
                match tokio::time::timeout(Duration::from_millis(100), st.read(&mut chunk)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                    Err(_) => {}
                }
                if complete(&buf) {
                    break;
                }
            }
            (parse_answer(&buf), started.elapsed())
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (normal, normal_took) = normal_claim(addr, s.meta.sku, "while-slow").await;
    assert_eq!(normal.status, Some(201), "{:?}", normal.body);
    assert!(
        normal_took < test_support::slack(Duration::from_millis(500)),
        "served after {normal_took:?}"
    );

    let mut timed_out = 0;
    let mut held = Duration::ZERO;
    while let Some(r) = slow.join_next().await {
        let (a, took) = r.expect("slow task");
        if a.status == Some(408) && a.kind() == Some(ApiStatus::BadRequest) {
            timed_out += 1;
        }
        held = held.max(took);
    }
    let (after, after_took) = normal_claim(addr, s.meta.sku, "after-slow").await;
    println!(
        "drill=slow_body slow_conns={SLOW} max_in_flight={SLOW} body_timeout_ms={} normal_status={} normal_ms={} slow_408={timed_out} slow_held_max_ms={} after_status={} after_ms={}",
        body_timeout.as_millis(),
        normal.status.unwrap_or(0),
        normal_took.as_millis(),
        held.as_millis(),
        after.status.unwrap_or(0),
        after_took.as_millis(),
    );
    assert_eq!(timed_out, SLOW, "every slow body ended in 408");
    assert!(
        held < body_timeout * 2,
        "a slow body held its connection {held:?}"
    );
    assert_eq!(after.status, Some(201), "{:?}", after.body);
    // Only the two normal claims took stock; no slow body did.
    assert_eq!(
        slices_left(&s.stock, &s.meta).await,
        s.meta.stock as i64 - 2
    );
    s.gw.stop().await;
}

/// A connection that pipelines requests as fast as it can and never reads an answer, from
/// a socket with a tiny receive buffer: the answers fill the buffers, the server's write
/// stalls, and from then on the server reads nothing more from it either. Each request is
/// for a 12 KB unknown path, whose 404 answer echoes it: the server's send buffer (which
/// the kernel grows to a few MB) fills after a few hundred requests instead of after tens
/// of thousands. Returns the stream (still open, still unread) and the bytes sent.
async fn pipelining_non_reader(addr: SocketAddr) -> (TcpStream, usize) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stream = socket.connect(addr).await.expect("connect");
    let path = "x".repeat(12_000);
    let chunk = format!("GET /{path} HTTP/1.1\r\nhost: x\r\n\r\n").repeat(4);
    let chunk = chunk.as_bytes();
    let mut sent = 0;
    // Until a write blocks (every buffer on the way is full) or 64 MiB, whichever first.
    while sent < 64 << 20 {
        match tokio::time::timeout(Duration::from_millis(300), stream.write_all(chunk)).await {
            Ok(Ok(())) => sent += chunk.len(),
            Ok(Err(_)) | Err(_) => break,
        }
    }
    (stream, sent)
}

/// Connections that never read. With one connection slot, a client that pipelines
/// requests and never reads its answers holds the slot until the write timeout cuts it;
/// the next client is then served. Without a write timeout the slot is held for good (the
/// header timeout never runs: the server is stuck writing, not reading) and the next
/// client waits forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_reading_pipeliner_is_cut_by_the_write_timeout() {
    let write_timeout = Duration::from_millis(500);
    let s = setup(8007, 100, |c| {
        c.max_connections = 1;
        c.write_timeout_ms = write_timeout.as_millis() as u64;
        // Far past the test, so only the write timeout can free the slot.
        c.max_connection_age_ms = 600_000;
        // Closes the test client's idle keep-alive connection (from the readiness wait),
        // which would hold the only slot. It never cuts the hog: a server stuck writing
        // reads no request head.
        c.header_timeout_ms = 200;
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let addr = s.gw.api;
    let (mut hog, sent) = pipelining_non_reader(addr).await;
    let stalled = Instant::now();
    let (a, waited) = normal_claim(addr, s.meta.sku, "behind-pipeliner").await;
    // The hog was cut: what it can still read ends (EOF or reset) instead of waiting.
    let mut sink = vec![0u8; 64 * 1024];
    let mut unread = 0usize;
    let closed = loop {
        match tokio::time::timeout(EXCHANGE_LIMIT, hog.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => unread += n,
            Err(_) => break false,
        }
    };
    println!(
        "drill=non_reader write_timeout_ms={} pipelined_bytes={sent} answer_bytes_left={unread} normal_status={} normal_waited_ms={} since_stall_ms={} hog_closed={closed}",
        write_timeout.as_millis(),
        a.status.unwrap_or(0),
        waited.as_millis(),
        stalled.elapsed().as_millis(),
    );
    assert_eq!(
        a.status,
        Some(201),
        "served once the hog is cut: {:?}",
        a.body
    );
    assert!(
        waited < drills::scaled(write_timeout * 6),
        "waited {waited:?} behind a hog cut after {write_timeout:?}"
    );
    assert!(closed, "the server closed the non-reading connection");
    s.gw.stop().await;
}

/// A well-behaved keep-alive client that never goes idle is closed once its connection is
/// older than `--max-connection-age-ms`: the request in progress is answered
/// (`connection: close`), then the server closes. Without a maximum age it keeps the
/// connection (and its slot) for as long as it likes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_closed_at_the_maximum_age() {
    let max_age = Duration::from_millis(1_000);
    let s = setup(8008, 100, |c| {
        c.max_connection_age_ms = max_age.as_millis() as u64;
    })
    .await;
    let started = Instant::now();
    let mut st = TcpStream::connect(s.gw.api).await.expect("connect");
    let give_up = drills::scaled(max_age * 6);
    let (mut answered, mut saw_close) = (0u32, false);
    let lifetime = loop {
        if started.elapsed() > give_up {
            break None;
        }
        if st
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .is_err()
        {
            break Some(started.elapsed());
        }
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        let eof = loop {
            match tokio::time::timeout(EXCHANGE_LIMIT, st.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break true,
                Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            }
            if complete(&buf) {
                break false;
            }
        };
        if complete(&buf) {
            answered += 1;
            let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
            saw_close |= head.contains("connection: close");
        }
        if eof {
            break Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "drill=max_age max_connection_age_ms={} closed_after_ms={} answered={answered} connection_close_sent={saw_close}",
        max_age.as_millis(),
        lifetime.map_or("-".into(), |d| d.as_millis().to_string()),
    );
    let lifetime = lifetime.expect("the server closed an old connection");
    assert!(
        lifetime >= max_age,
        "closed after {lifetime:?}, before the maximum age"
    );
    assert!(answered >= 5, "the connection served requests until then");
    // The server is still there for a new connection.
    let (a, _) = normal_claim(s.gw.api, s.meta.sku, "after-max-age").await;
    assert_eq!(a.status, Some(201), "{:?}", a.body);
    s.gw.stop().await;
}
