//! Oversized bodies, header floods and a wrong content type (see `mod.rs`).

use super::*;

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
