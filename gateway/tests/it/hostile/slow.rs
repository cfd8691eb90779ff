//! Slowloris heads, the connection cap, and slow bodies (see `mod.rs`).

use super::*;

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
