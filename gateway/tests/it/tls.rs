//! Redis over TLS: a gateway given a `rediss://` URL connects through rustls, verifies the
//! server's certificate against its trust store (here a CA made for the test, trusted
//! through `SSL_CERT_FILE`), and serves claims; without that CA it refuses the server and
//! stays not ready. The Redis is a real `redis-server --tls-port`.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use test_support::TlsRedis;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_claims_over_rediss() {
    let redis = TlsRedis::start();
    // Setup over the plain port; the gateway only knows the TLS one.
    let stock = stock_client(&redis.server().url(), false).await;
    let meta = preheat(&stock, 9501, 10, 2, 1).await;
    let url = redis.tls_url();
    let ca = redis.ca_file();
    let ca = ca.to_str().expect("utf-8 path");
    let args = [
        "--redis",
        url.as_str(),
        "--user-rate",
        "0",
        "--insecure-body-user",
    ];

    let (_trusting, addr) = GatewayProcess::spawn_with_env(&args, &[("SSL_CERT_FILE", ca)]);
    wait_ready_at(addr).await;
    let a = post_json(addr, "/v1/claims", r#"{"sku":9501,"user":"tls-1"}"#).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    assert_eq!(
        slices_left(&stock, &meta).await,
        9,
        "the claim took its unit"
    );

    // The same server with the system's roots only: the certificate is not trusted, so
    // the gateway never connects (no silent fallback to an unverified link).
    let (_doubting, addr) = GatewayProcess::spawn_with_env(&args, &[]);
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < Duration::from_secs(3) {
        if let Ok((status, _, v)) = get(addr, "/readyz").await {
            assert_ne!(
                status,
                StatusCode::OK,
                "ready with an untrusted certificate"
            );
            last = Some(v);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = last.expect("the untrusting gateway answered /readyz");
    println!("drill=redis-tls trusted_claim=201 untrusted_readyz={last}");
    let a = post_json(addr, "/v1/claims", r#"{"sku":9501,"user":"tls-2"}"#).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    assert_eq!(slices_left(&stock, &meta).await, 9);
}
