//! Drill `clock_skew` (docs/DESIGN.md "Durability", Clocks): the sale opens by each
//! gateway's clock, so two gateways whose clocks are 1 s apart would open it 1 s apart,
//! and the early one's users could take the whole stock first. With the clock of one
//! gateway process faked 1 s ahead by Debian's `faketime` (libfaketime), that gateway
//! never turns ready and refuses claims; one faked 10 ms ahead (within the bound) serves.

use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use test_support::RedisServer;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn faked(args: &[&str], offset: &str) -> (GatewayProcess, std::net::SocketAddr) {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} missing: apt-get install faketime (deploy/local/test.sh does)"
    );
    GatewayProcess::spawn_with_env(
        args,
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", offset),
            // Timers keep the real monotonic clock; only the wall clock is off.
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_whose_clock_is_a_second_off_refuses_to_serve() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 9_401, 100, 2, 1).await;
    let url = redis.url();
    let args = [
        "--redis",
        &url,
        "--insecure-body-user",
        "--user-rate",
        "0",
        "--client-rate",
        "0",
        "--probe-interval-ms",
        "100",
    ];
    let (_on_time, a) = GatewayProcess::spawn(&args);
    let (_near, near) = faked(&args, "+0.01");
    let (_ahead, ahead) = faked(&args, "+1");
    wait_ready_at(a).await;
    wait_ready_at(near).await;

    // Well past the first probes: the gateway a second ahead was never ready.
    let watch_until = Instant::now() + Duration::from_secs(3);
    let mut ready = 0;
    let mut why = serde_json::Value::Null;
    while Instant::now() < watch_until {
        if let Ok((status, _, body)) = get(ahead, "/readyz").await {
            ready += u32::from(status == StatusCode::OK);
            why = body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let body = format!(r#"{{"sku":{},"user":"u1","qty":1}}"#, meta.sku);
    let refused = post_json(ahead, "/v1/claims", &body).await;
    let served = post_json(near, "/v1/claims", &body).await;
    println!(
        "drill=clock_skew ahead_ready_polls={ready} ahead_readyz={why} ahead_claim={} near_claim={}",
        refused.status, served.status
    );
    assert_eq!(ready, 0, "a gateway 1 s ahead was ready");
    assert!(
        why.to_string().contains("clock"),
        "readyz names the clock: {why}"
    );
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        refused.body
    );
    assert_eq!(served.status, StatusCode::CREATED, "{:?}", served.body);
}
