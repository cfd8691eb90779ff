//! Bad input gets the documented status, a JSON body with `status` and `error`, and changes
//! nothing in Redis. Also: slow headers, the per-user rate limit, load shedding, the
//! trusted user header.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use test_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// name, method, path, content type, body, expected HTTP status, expected `status` field.
type Case<'a> = (
    &'a str,
    Method,
    &'a str,
    Option<&'a str>,
    String,
    StatusCode,
    &'a str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_table() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 5001, 10, 2, 2).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    // Load the SKU so the limit check below is answered from memory.
    get(gw.api, "/v1/skus/5001").await.unwrap();
    let calls = script_calls(&redis);

    let json_ct = Some("application/json");
    let long = "x".repeat(65);
    let huge = format!(r#"{{"sku":5001,"user":"{}"}}"#, "u".repeat(10_000));
    let cases: Vec<Case> = vec![
        (
            "wrong method",
            Method::GET,
            "/v1/claims",
            None,
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            "wrong method on sku",
            Method::DELETE,
            "/v1/skus/5001",
            None,
            String::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            "no route",
            Method::GET,
            "/v2/nothing",
            None,
            String::new(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "sku not a number",
            Method::GET,
            "/v1/skus/abc",
            None,
            String::new(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "text body",
            Method::POST,
            "/v1/claims",
            Some("text/plain"),
            r#"{"sku":5001,"user":"u"}"#.into(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_request",
        ),
        (
            "no content type",
            Method::POST,
            "/v1/claims",
            None,
            r#"{"sku":5001,"user":"u"}"#.into(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_request",
        ),
        (
            "bad json",
            Method::POST,
            "/v1/claims",
            json_ct,
            "{".into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "empty body",
            Method::POST,
            "/v1/claims",
            json_ct,
            String::new(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "array",
            Method::POST,
            "/v1/claims",
            json_ct,
            "[]".into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "missing sku",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"user":"u"}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "missing user",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"sku":5001}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "sku string",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"sku":"5001","user":"u"}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "sku negative",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"sku":-1,"user":"u"}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "empty user",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"sku":5001,"user":""}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "user too long",
            Method::POST,
            "/v1/claims",
            json_ct,
            format!(r#"{{"sku":5001,"user":"{long}"}}"#),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "request id too long",
            Method::POST,
            "/v1/claims",
            json_ct,
            format!(r#"{{"sku":5001,"user":"u","request_id":"{long}"}}"#),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "unknown field",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"sku":5001,"user":"u","quantity":1}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "qty 0",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"sku":5001,"user":"u","qty":0}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "qty over limit",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"sku":5001,"user":"u","qty":3}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "qty over u32",
            Method::POST,
            "/v1/claims",
            json_ct,
            r#"{"sku":5001,"user":"u","qty":4294967296}"#.into(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "huge body",
            Method::POST,
            "/v1/claims",
            json_ct,
            huge,
            StatusCode::PAYLOAD_TOO_LARGE,
            "bad_request",
        ),
    ];
    for (name, method, path, ctype, body, want, kind) in cases {
        let (status, headers, bytes) =
            request(gw.api, method, path, ctype.map(|c| (c, body.as_str())), &[])
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        let v: Value =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("{name}: not JSON"));
        assert_eq!(status, want, "{name}: {v}");
        assert_eq!(v["status"], kind, "{name}: {v}");
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{name}: {v}"
        );
        if want == StatusCode::METHOD_NOT_ALLOWED {
            assert!(headers.contains_key("allow"), "{name}");
        }
    }
    assert_eq!(
        script_calls(&redis),
        calls,
        "rejections made no script call"
    );
    assert_eq!(
        slices_left(&stock, &meta).await,
        10,
        "rejections changed nothing"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off() {
    let redis = RedisServer::start();
    let mut cfg = config(&redis.url(), false);
    cfg.header_timeout_ms = 300;
    let gw = Gateway::start(cfg).await;
    let mut s = TcpStream::connect(gw.api).await.unwrap();
    s.write_all(b"POST /v1/claims HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "connection still open after 3 s");
    assert!(started.elapsed() >= Duration::from_millis(250));
    // hyper closes the connection without a response (or with a 408).
    let text = String::from_utf8_lossy(&buf);
    assert!(buf.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_overload_and_trusted_header() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 5101, 100, 4, 10).await;
    let mut cfg = config(&redis.url(), false);
    cfg.user_rate = 1;
    cfg.user_burst = 2;
    cfg.max_in_flight = 1;
    cfg.access.user_header = Some("x-user".into());
    cfg.access.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    cfg.access.insecure_body_user = false;
    let gw = Gateway::start(cfg).await;

    let claim = |user: Option<&'static str>, body: Value| {
        let headers: Vec<(&str, &str)> = user.map(|u| vec![("x-user", u)]).unwrap_or_default();
        async move {
            let (s, h, b) = request(
                gw.api,
                Method::POST,
                "/v1/claims",
                Some(("application/json", &body.to_string())),
                &headers,
            )
            .await
            .unwrap();
            (s, h, serde_json::from_slice::<Value>(&b).unwrap())
        }
    };
    // Trusted header: required (a body user alone is not believed), and a body user
    // must match it.
    let (s, _, v) = claim(None, json!({"sku": 5101, "user": "alice"})).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    let (s, _, v) = claim(Some("alice"), json!({"sku": 5101, "user": "mallory"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");

    // Rate limit: burst of 2, then 429 with Retry-After; another user is unaffected.
    for _ in 0..2 {
        let (s, _, v) = claim(Some("alice"), json!({"sku": 5101})).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    let (s, h, v) = claim(Some("alice"), json!({"sku": 5101})).await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("rate_limited"))
    );
    assert!(h.contains_key("retry-after"));
    let (s, _, _) = claim(Some("bob"), json!({"sku": 5101})).await;
    assert_eq!(s, StatusCode::CREATED);

    // In-flight cap 1: a claim stuck in Redis (CLIENT PAUSE WRITE) holds the slot; the
    // next claim is shed at once with 503 overloaded; the stuck one then completes.
    let mut pause = redis.connection();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(400)
        .arg("WRITE")
        .query::<()>(&mut pause)
        .unwrap();
    let stuck = tokio::spawn({
        let api = gw.api;
        async move {
            request(
                api,
                Method::POST,
                "/v1/claims",
                Some(("application/json", &json!({"sku": 5101}).to_string())),
                &[("x-user", "carol")],
            )
            .await
            .unwrap()
            .0
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (s, h, v) = claim(Some("dave"), json!({"sku": 5101})).await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("overloaded")),
        "{v}"
    );
    assert!(h.contains_key("retry-after"));
    assert!(
        started.elapsed() < test_support::slack(Duration::from_millis(300)),
        "shed at once"
    );
    assert_eq!(stuck.await.unwrap(), StatusCode::CREATED);
    gw.stop().await;
}
