//! What operators read: a HELP line for every series on `/metrics`, the trace id echoed
//! in `X-Request-Id`, JSON log lines, and an access log that a rush cannot flood.

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::Instant;

use crate::binary::GatewayProc;
use crate::common::*;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_on_metrics_has_help() {
    let _one = crate::common::one_at_a_time().await;
    let redis = RedisServer::start();
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 71, 1, 1, 1).await;
    wait_live(gw.api, 71).await;
    // Traffic through every kind of answer: claimed, sold out, unknown SKU, 404, probes.
    for user in ["a", "b", "c"] {
        gw.claim(json!({"sku": 71, "user": user})).await;
    }
    gw.claim(json!({"sku": 9_999, "user": "a"})).await;
    let _ = get(gw.api, "/nope").await;
    let _ = get(gw.api, "/v1/skus/71").await;

    let text = gw.metrics().await;
    let names = |prefix: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| Some(l.strip_prefix(prefix)?.split(' ').next()?.to_owned()))
            .collect()
    };
    let (help, types) = (names("# HELP "), names("# TYPE "));
    for name in &types {
        assert!(help.contains(name), "{name} has no # HELP line:\n{text}");
    }
    // Every series the gateway declares was exported by this traffic, with its text.
    for (name, text_of) in gateway::metrics::DESCRIPTIONS {
        assert!(
            types.iter().any(|t| t == name),
            "{name} not exported:\n{text}"
        );
        assert!(
            text.contains(&format!("# HELP {name} {text_of}")),
            "{name}: wrong HELP"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_id_is_echoed_or_generated() {
    let _one = crate::common::one_at_a_time().await;
    let redis = RedisServer::start();
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let body = Some(("application/json", r#"{"sku": 5, "user": "u"}"#));
    let trace = |h: &hyper::HeaderMap| {
        h.get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };

    let (_, h, _) = request(
        gw.api,
        Method::POST,
        "/v1/claims",
        body,
        &[("x-request-id", "lb-42.a")],
    )
    .await
    .unwrap();
    assert_eq!(trace(&h).as_deref(), Some("lb-42.a"));

    // None given, or one that is not a short token: a fresh 16-hex-digit id each time.
    let mut seen = Vec::new();
    for given in [None, Some("two words"), Some(&*"x".repeat(65))] {
        let headers: Vec<(&str, &str)> = given.map(|g| ("x-request-id", g)).into_iter().collect();
        let (_, h, _) = request(gw.api, Method::POST, "/v1/claims", body, &headers)
            .await
            .unwrap();
        let id = trace(&h).expect("x-request-id on every answer");
        assert!(
            id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
        assert!(!seen.contains(&id), "{id} repeated");
        seen.push(id);
    }
    // Other routes carry it too.
    let (status, h, _) = get(gw.api, "/healthz").await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(trace(&h).is_some());
    gw.stop().await;
}

/// A rush of 300 claims against `--access-log-rate 5`: at most the burst plus 5 lines a
/// second reach the log, the rest are counted as dropped; every log line is one JSON
/// object; the access lines carry method, route, status, latency, a hashed user (never
/// the name itself) and the trace id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_is_json_bounded_and_hashes_users() {
    let _one = crate::common::one_at_a_time().await;
    let redis = RedisServer::start();
    let key = std::env::temp_dir().join(format!("fg-access-key-{}", std::process::id()));
    std::fs::write(&key, "a shared secret\n").unwrap();
    let mut child = GatewayProc::start(
        &redis.url(),
        5,
        &["--access-log-key-file", key.to_str().unwrap()],
    )
    .await;
    let stderr = child.child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let (api, admin) = (child.api, child.admin);
    let started = child.spawned;

    let rush = Instant::now();
    let body = r#"{"sku": 5, "user": "alice-real-name"}"#;
    for i in 0..300 {
        let id = format!("rush-{i}");
        request(
            api,
            Method::POST,
            "/v1/claims",
            Some(("application/json", body)),
            &[("x-request-id", &id)],
        )
        .await
        .unwrap();
    }
    let elapsed = rush.elapsed().as_secs_f64() + started.elapsed().as_secs_f64();
    let (_, _, metrics) = request(admin, Method::GET, "/metrics", None, &[])
        .await
        .unwrap();
    let dropped = metric(
        std::str::from_utf8(&metrics).unwrap(),
        "flashgate_access_log_dropped_total",
    );

    let ok = Command::new("kill")
        .args(["-TERM", &child.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let _ = child.child.wait();
    let lines = lines.join().unwrap();
    let _ = std::fs::remove_file(&key);

    let parsed: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let access: Vec<&Value> = parsed
        .iter()
        .filter(|v| v["target"] == "flashgate_access")
        .collect();
    let bound = 5.0 + 5.0 * elapsed.ceil() + 1.0;
    assert!(!access.is_empty(), "no access lines in {lines:#?}");
    assert!(
        (access.len() as f64) <= bound,
        "{} access lines in {elapsed:.1} s; the bound allows {bound}",
        access.len()
    );
    assert!(dropped >= 300.0 - bound, "dropped {dropped}");
    let claims: Vec<&&Value> = access.iter().filter(|v| v["route"] == "claims").collect();
    assert!(!claims.is_empty(), "{access:#?}");
    let user = claims[0]["user"].as_str().unwrap().to_owned();
    assert!(
        user.len() == 16 && user.bytes().all(|b| b.is_ascii_hexdigit()),
        "{user}"
    );
    for v in &claims {
        assert_eq!(v["method"], "POST");
        assert_eq!(v["status"], 404, "{v}");
        assert!(v["latency_us"].as_u64().is_some(), "{v}");
        assert_eq!(v["user"], user.as_str(), "one user, one hash");
        assert!(v["trace_id"].as_str().unwrap().starts_with("rush-"), "{v}");
    }
    assert!(
        !lines.iter().any(|l| l.contains("alice-real-name")),
        "the user's name reached the log"
    );
}
