//! Drill `gateway_kill` (docs/DESIGN.md), short form: a gateway process is SIGKILLed under load. Clients see
//! errors, every acknowledged claim has its record, and no unit is taken without one
//! (slices + recorded units = stock). A new gateway then serves at once.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use drills::load::Answers;
use hyper::{Method, StatusCode};
use shard_router::Claim;
use test_support::RedisServer;

fn spawn_gateway(redis: &str) -> (GatewayProcess, SocketAddr) {
    GatewayProcess::spawn(&[
        "--redis",
        redis,
        "--user-rate",
        "0",
        "--client-rate",
        "0",
        "--insecure-body-user",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_sigkill_takes_nothing_without_a_record() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 9001, 1_000_000, 8, 1).await;
    let (mut gw, addr) = spawn_gateway(&redis.url());
    wait_ready_at(addr).await;

    let answers = Arc::new(Mutex::new(Answers::default()));
    let deadline = Instant::now() + drills::scaled(Duration::from_secs(3));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let answers = answers.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while Instant::now() < deadline {
                n += 1;
                let user = format!("k{t}-{n}");
                let body = format!(r#"{{"sku":9001,"user":"{user}"}}"#);
                let r = request(
                    addr,
                    Method::POST,
                    "/v1/claims",
                    Some(("application/json", &body)),
                    &[],
                )
                .await;
                let failed = r.is_err();
                {
                    let mut a = answers.lock().unwrap();
                    match r {
                        Ok((StatusCode::CREATED, _, b)) => {
                            let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                            let claim = Claim {
                                claim_id: v["claim_id"].as_str().unwrap().to_owned(),
                                sku: 9001,
                                shard: v["shard"].as_u64().unwrap() as u16,
                                qty: 1,
                            };
                            a.acknowledged.push((user, claim));
                        }
                        Ok(_) => a.other += 1,
                        Err(_) => a.errors += 1,
                    }
                }
                if failed {
                    // The gateway is gone: do not spin on a refused port.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }));
    }
    tokio::time::sleep(drills::scaled(Duration::from_millis(1000))).await;
    gw.kill();
    for t in tasks {
        t.await.unwrap();
    }
    let answers = Arc::try_unwrap(answers).unwrap().into_inner().unwrap();

    // Time to recover: a replacement process until its first acknowledged claim.
    let respawned = Instant::now();
    let (gw2, addr2) = spawn_gateway(&redis.url());
    let ready_after = wait_ready_at(addr2).await;
    let again = post_json(addr2, "/v1/claims", r#"{"sku":9001,"user":"after-kill"}"#).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    let recover = respawned.elapsed();
    drop(gw2);

    let mut v = drills::verdict::check("gateway-sigkill", &stock, &meta, &answers).await;
    v.figures.errors = answers.errors;
    v.figures.recover_ms = Some(recover.as_millis());
    println!(
        "{} new_gateway_ready_ms={}",
        v.figures,
        ready_after.as_millis()
    );
    assert!(
        v.figures.acknowledged > 0,
        "load made progress before the kill"
    );
    assert!(answers.errors > 0, "clients must have seen the kill");
    assert_eq!(v.figures.lost, 0);
    assert_eq!(v.figures.duplicated, 0);
    assert_eq!(v.figures.oversold, 0);
    assert_eq!(v.figures.over_limit, 0);
    let left = slices_left(&stock, &meta).await;
    let recorded_units: u64 = v.records.iter().map(|r| u64::from(r.qty)).sum();
    assert_eq!(
        left as u64 + recorded_units,
        meta.stock,
        "every unit taken has its record"
    );
}
