//! Verified identity, secure by default, and per-client limits: real tokens (HS256 minted
//! here; EdDSA / RS256 / JWKS are covered by the unit tests beside `identity/src/token.rs`),
//! the trusted-proxy rules for the user header and `X-Forwarded-For`, the 429 per client
//! address, and the refusal to start on a public address with no identity source.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::*;
use hyper::{Method, StatusCode};
use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};
use test_support::RedisServer;

const SECRET: &str = "identity-test-secret-0123456789abcdef";

fn secret_file() -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("fg-identity-{}", std::process::id()));
    std::fs::write(&p, SECRET).unwrap();
    p
}

fn token(user: &str, exp_in: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = json!({"sub": user, "aud": "flashgate", "exp": now + exp_in});
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

async fn post(
    gw: &Gateway,
    body: Value,
    headers: &[(&str, &str)],
) -> (StatusCode, hyper::HeaderMap, Value) {
    let (s, h, b) = request(
        gw.api,
        Method::POST,
        "/v1/claims",
        Some(("application/json", &body.to_string())),
        headers,
    )
    .await
    .unwrap();
    (s, h, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_decide_who_claims() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 8401, 10, 2, 1).await;
    let mut cfg = config(&redis.url(), false);
    cfg.access.insecure_body_user = false;
    cfg.access.token_secret_file = Some(secret_file());
    let gw = Gateway::start(cfg).await;

    let alice = format!("Bearer {}", token("alice", 300));
    // No token, a body user: not believed.
    let (s, h, v) = post(&gw, json!({"sku": 8401, "user": "alice"}), &[]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    assert_eq!(v["status"], "unauthorized");
    assert!(h.contains_key("www-authenticate"));
    // Expired, wrong audience, garbage: 401, nothing taken.
    let expired = format!("Bearer {}", token("alice", -300));
    for bad in [expired.as_str(), "Bearer x.y.z", "Basic YWxpY2U6cHc="] {
        let (s, _, v) = post(&gw, json!({"sku": 8401}), &[("authorization", bad)]).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{bad}: {v}");
    }
    // The token's subject is the user; a body user must match it.
    let (s, _, v) = post(&gw, json!({"sku": 8401}), &[("authorization", &alice)]).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, _, v) = post(
        &gw,
        json!({"sku": 8401, "user": "alice2"}),
        &[("authorization", &alice)],
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    // Changing the body name cannot get around the per-user limit: the limit keys on the
    // subject.
    let (s, _, v) = post(&gw, json!({"sku": 8401}), &[("authorization", &alice)]).await;
    assert_eq!(
        (s, v["status"].as_str()),
        (StatusCode::CONFLICT, Some("limit_reached")),
        "{v}"
    );
    let bob = format!("Bearer {}", token("bob", 300));
    let (s, _, v) = post(
        &gw,
        json!({"sku": 8401, "user": "bob"}),
        &[("authorization", &bob)],
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(
        slices_left(
            &stock,
            &shard_router::SkuMeta {
                sku: 8401,
                stock: 10,
                width: 2,
                limit: 1,
                start_ms: 0,
                end_ms: 1,
                mode: shard_router::SkuMode::Fcfs,
            }
        )
        .await,
        8
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_header_only_from_trusted_proxies_and_none_means_401() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 8501, 10, 2, 1).await;
    // The test client (127.0.0.1) is not in the trusted range: its header is refused.
    let mut cfg = config(&redis.url(), false);
    cfg.access.insecure_body_user = false;
    cfg.access.user_header = Some("x-user".into());
    cfg.access.trusted_proxies = vec!["10.0.0.0/8".parse().unwrap()];
    let gw = Gateway::start(cfg).await;
    let (s, _, v) = post(&gw, json!({"sku": 8501}), &[("x-user", "alice")]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("trusted proxy"),
        "{v}"
    );
    gw.stop().await;

    // No identity source at all (allowed on loopback only): every claim is refused.
    let mut cfg = config(&redis.url(), false);
    cfg.access.insecure_body_user = false;
    let gw = Gateway::start(cfg).await;
    let (s, _, v) = post(&gw, json!({"sku": 8501, "user": "alice"}), &[]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("no identity source"),
        "{v}"
    );
    gw.stop().await;
}

#[test]
fn refuses_to_start_public_without_identity_source() {
    let out = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["--listen", "0.0.0.0:0", "--admin-listen", "127.0.0.1:0"])
        .env_remove("FLASHGATE_INSECURE_BODY_USER")
        .output()
        .expect("gateway binary");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("--listen") && err.contains("no identity source"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_limit_believes_forwarded_for_only_from_trusted_proxies() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    preheat(&stock, 8601, 1000, 4, 100).await;

    // Direct clients: the socket address counts; X-Forwarded-For from them is ignored.
    let mut cfg = config(&redis.url(), false);
    cfg.access.client_rate = 1;
    cfg.access.client_burst = 3;
    let gw = Gateway::start(cfg).await;
    let mut statuses = Vec::new();
    for i in 0..5 {
        let xff = format!("198.51.100.{i}");
        let (s, h, v) = post(
            &gw,
            json!({"sku": 8601, "user": format!("c{i}")}),
            &[("x-forwarded-for", &xff)],
        )
        .await;
        if s == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(v["status"], "rate_limited");
            assert!(h.contains_key("retry-after"));
        }
        statuses.push(s);
    }
    assert_eq!(&statuses[..3], &[StatusCode::CREATED; 3], "{statuses:?}");
    assert_eq!(
        &statuses[3..],
        &[StatusCode::TOO_MANY_REQUESTS; 2],
        "{statuses:?}"
    );
    // The SKU view is limited too, and unknown SKUs as well.
    let (s, h, _) = get(gw.api, "/v1/skus/8601").await.unwrap();
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    assert!(h.contains_key("retry-after"));
    gw.stop().await;

    // Behind a trusted proxy (here the test client itself), each forwarded client has
    // its own budget.
    let mut cfg = config(&redis.url(), false);
    cfg.access.client_rate = 1;
    cfg.access.client_burst = 1;
    cfg.access.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let gw = Gateway::start(cfg).await;
    for i in 0..5 {
        let xff = format!("198.51.100.{i}");
        let (s, _, v) = post(
            &gw,
            json!({"sku": 8601, "user": format!("d{i}")}),
            &[("x-forwarded-for", &xff)],
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "client {xff}: {v}");
    }
    let (s, _, _) = post(
        &gw,
        json!({"sku": 8601, "user": "d9"}),
        &[("x-forwarded-for", "203.0.113.9, 198.51.100.0")],
    )
    .await;
    assert_eq!(
        s,
        StatusCode::TOO_MANY_REQUESTS,
        "a spoofed left part does not help"
    );
    gw.stop().await;
}
