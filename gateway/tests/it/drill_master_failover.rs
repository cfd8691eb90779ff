//! Fault drill: one master of a 3-master Redis Cluster (with replicas) is SIGKILLed while
//! two real gateway processes serve claims. Readiness is each gateway's own health, so:
//!
//! - both gateways stay ready the whole time (a balancer keeps them);
//! - claims whose home shard lives on another master keep succeeding during the outage;
//! - claims on the killed master's shards answer 503 `unavailable` until its replica takes
//!   over, and `restoring` until the ledger vouched for it (the consumer's watch, here a
//!   stand-in: docs/DESIGN.md "A Redis that comes back older"), then succeed again;
//! - nothing is oversold: Σ slices + Σ recorded units = stock, shard by shard.
//!
//! The victim is the master holding the SKU's metadata key, the hardest case: gateways whose
//! cache entry expires during the outage (`--cache-ttl-ms 1000`) cannot reload it and must
//! go on with what they loaded. Short form in CI; `FG_DRILL_SCALE=10` runs it longer.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use drills::load::Answers;
use hyper::{Method, StatusCode};
use shard_router::placement::slot_of_tag;
use shard_router::{Claim, ShardId};
use test_support::RedisCluster;

const SKU: u64 = 9301;

/// One HTTP answer of the load, with the home shard of its user.
struct Sent {
    /// When the request left: a claim answered just after the kill may have been served
    /// just before it, so recovery is judged by requests sent after the kill.
    sent: Instant,
    at: Instant,
    home: ShardId,
    /// Which gateway answered (1 or 2).
    gateway: u8,
    status: Option<StatusCode>,
    kind: Option<ApiStatus>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_failover_keeps_gateways_ready_and_other_shards_selling() {
    let mut cluster = RedisCluster::start(3, 1);
    let seeds = cluster.urls().join(",");
    let stock = stock_client(&seeds, true).await;
    // Far more stock than the drill sells: every claim that reaches a live shard succeeds,
    // so a failure can only be the outage.
    let meta = preheat(&stock, SKU, 1_000_000, 16, 1).await;
    let placement = stock.placement().clone();

    // The metadata key has no hash tag: its slot is the CRC16 of the whole key.
    let meta_slot = slot_of_tag(&shard_router::keys::sku_meta(SKU));
    let victim_port = cluster.master_of(meta_slot);
    let victim_shards: HashSet<ShardId> = (0..placement.shard_count())
        .filter(|&s| cluster.master_of(slot_of_tag(placement.tag(s))) == victim_port)
        .collect();
    assert!(
        !victim_shards.is_empty() && victim_shards.len() < 16,
        "the victim serves some shards, not all"
    );

    let gw_args = [
        "--redis",
        &seeds,
        "--redis-cluster",
        "--user-rate",
        "0",
        "--client-rate",
        "0",
        "--insecure-body-user",
        "--probe-interval-ms",
        "100",
        "--cache-ttl-ms",
        "1000",
    ];
    let (_gw1, a1) = GatewayProcess::spawn(&gw_args);
    let (_gw2, a2) = GatewayProcess::spawn(&gw_args);
    wait_ready_at(a1).await;
    wait_ready_at(a2).await;

    let stop = Arc::new(AtomicBool::new(false));
    // Readiness as a balancer sees it: every gateway polled every 50 ms.
    let not_ready = Arc::new(AtomicU64::new(0));
    let polls = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, not_ready, polls) = (stop.clone(), not_ready.clone(), polls.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for addr in [a1, a2] {
                    polls.fetch_add(1, Ordering::Relaxed);
                    if !matches!(get(addr, "/readyz").await, Ok((StatusCode::OK, _, _))) {
                        not_ready.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let sent = Arc::new(Mutex::new(Vec::<Sent>::new()));
    let answers = Arc::new(Mutex::new(Answers::default()));
    let mut load = Vec::new();
    for t in 0..8u64 {
        let (stop, sent, answers, placement) = (
            stop.clone(),
            sent.clone(),
            answers.clone(),
            placement.clone(),
        );
        load.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let user = format!("f{t}-{n}");
                let home = placement.home_shard(SKU, 16, &user);
                let addr: SocketAddr = if n.is_multiple_of(2) { a1 } else { a2 };
                let body = format!(r#"{{"sku":{SKU},"user":"{user}"}}"#);
                let sent_at = Instant::now();
                let r = request(
                    addr,
                    Method::POST,
                    "/v1/claims",
                    Some(("application/json", &body)),
                    &[],
                )
                .await;
                let at = Instant::now();
                let (status, v) = match &r {
                    Ok((s, _, b)) => (
                        Some(*s),
                        serde_json::from_slice::<serde_json::Value>(b).unwrap_or_default(),
                    ),
                    Err(_) => (None, serde_json::Value::Null),
                };
                if status == Some(StatusCode::CREATED) {
                    let claim = Claim {
                        claim_id: v["claim_id"].as_str().unwrap_or_default().to_owned(),
                        sku: SKU,
                        shard: v["shard"].as_u64().unwrap_or(u64::MAX) as u16,
                        qty: 1,
                    };
                    answers.lock().unwrap().acknowledged.push((user, claim));
                } else if status == Some(StatusCode::SERVICE_UNAVAILABLE) || status.is_none() {
                    answers.lock().unwrap().errors += 1;
                } else {
                    answers.lock().unwrap().other += 1;
                }
                let failed = status != Some(StatusCode::CREATED);
                sent.lock().unwrap().push(Sent {
                    sent: sent_at,
                    at,
                    home,
                    gateway: if n.is_multiple_of(2) { 1 } else { 2 },
                    status,
                    kind: v["status"].as_str().and_then(|k| k.parse().ok()),
                });
                if failed {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }));
    }

    tokio::time::sleep(drills::scaled(Duration::from_millis(1_500))).await;
    let victim = cluster.node_index(victim_port);
    cluster.nodes_mut()[victim].kill();
    let killed = Instant::now();
    // In place of the consumer's watch (no ledger here): vouch for the victim's shards'
    // new master once it serves them. A promoted replica in replica mode holds every
    // acknowledged claim, which is what the watch's rebuild would find.
    let stand_in = {
        let (stock, stop, shards) = (stock.clone(), stop.clone(), victim_shards.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for &s in &shards {
                    if let Ok(id) = stock.server_identity(s).await {
                        if !id.vouched_here() {
                            let _ = stock.vouch(s, &id.run_id).await;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    // Run until the victim's shards sell again through each gateway (its replica took
    // over; each gateway learns the new master and its vouch on its own), then a little more.
    let first_sale = |gateway: u8| {
        sent.lock()
            .unwrap()
            .iter()
            .find(|s| {
                s.sent > killed
                    && s.gateway == gateway
                    && victim_shards.contains(&s.home)
                    && s.status == Some(StatusCode::CREATED)
            })
            .map(|s| s.at)
    };
    let (recovered, recovered_last) = loop {
        if let (Some(g1), Some(g2)) = (first_sale(1), first_sale(2)) {
            break (g1.min(g2), g1.max(g2));
        }
        assert!(
            killed.elapsed() < Duration::from_secs(40),
            "the victim's shards never sold again through both gateways"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(drills::scaled(Duration::from_millis(1_500))).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.expect("load task");
    }
    watcher.await.expect("readiness watcher");
    stand_in.await.expect("stand-in watch");
    tokio::task::block_in_place(|| cluster.wait_ok());

    let sent = Arc::try_unwrap(sent).ok().unwrap().into_inner().unwrap();
    let answers = Arc::try_unwrap(answers).ok().unwrap().into_inner().unwrap();
    // Sent after the kill: a claim in flight at the kill may still have been answered 201.
    let during = |s: &&Sent| s.sent > killed && s.at < recovered;
    let ok = |s: &&&Sent| s.status == Some(StatusCode::CREATED);
    let others_during: Vec<&Sent> = sent
        .iter()
        .filter(during)
        .filter(|s| !victim_shards.contains(&s.home))
        .collect();
    let others_ok = others_during.iter().filter(ok).count();
    let victim_during: Vec<&Sent> = sent
        .iter()
        .filter(during)
        .filter(|s| victim_shards.contains(&s.home))
        .collect();
    let victim_503 = victim_during
        .iter()
        .filter(|s| {
            s.status == Some(StatusCode::SERVICE_UNAVAILABLE)
                && matches!(s.kind, Some(ApiStatus::Unavailable | ApiStatus::Restoring))
        })
        .count();
    // Well after the takeover reached both gateways, the victim's shards sell like the others.
    let settled = recovered_last + drills::scaled(Duration::from_millis(500));
    let victim_after: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.at > settled && victim_shards.contains(&s.home))
        .collect();
    let victim_after_ok = victim_after.iter().filter(ok).count();

    // The books, read from the surviving nodes.
    let live: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.pid().is_some())
        .map(|n| n.url())
        .collect();
    let check = stock_client(&live.join(","), true).await;
    let mut v = drills::verdict::check("master-failover-gateways", &check, &meta, &answers).await;
    v.figures.recover_ms = Some(recovered.duration_since(killed).as_millis());
    let left = slices_left(&check, &meta).await;
    let recorded_units: u64 = v.records.iter().map(|r| u64::from(r.qty)).sum();
    println!(
        "{} gateways=2 second_gateway_ms={} victim_shards={} readyz_polls={} readyz_not_ready={} other_shards_during={} other_shards_ok_during={} victim_during={} victim_503_during={} victim_after={} victim_after_ok={}",
        v.figures,
        recovered_last.duration_since(recovered).as_millis(),
        victim_shards.len(),
        polls.load(Ordering::Relaxed),
        not_ready.load(Ordering::Relaxed),
        others_during.len(),
        others_ok,
        victim_during.len(),
        victim_503,
        victim_after.len(),
        victim_after_ok,
    );

    assert_eq!(
        not_ready.load(Ordering::Relaxed),
        0,
        "a gateway left the balancer during one master's failover"
    );
    assert!(
        others_during.len() >= 20,
        "too few claims on the other shards during the outage to judge"
    );
    // Every one, barring the odd claim caught in the client's slot-map refresh.
    assert!(
        others_ok * 100 >= others_during.len() * 95,
        "claims on healthy masters failed during the outage: {others_ok}/{}",
        others_during.len()
    );
    assert!(!victim_during.is_empty(), "the outage was felt");
    assert_eq!(
        victim_503,
        victim_during.len(),
        "the victim's shards answer 503 unavailable or restoring until the takeover and the vouch"
    );
    assert!(!victim_after.is_empty());
    let victim_after_failed: Vec<String> = victim_after
        .iter()
        .filter(|s| s.status != Some(StatusCode::CREATED))
        .map(|s| {
            format!(
                "gw{} {:?} {:?} +{}ms",
                s.gateway,
                s.status.map(|c| c.as_u16()),
                s.kind,
                s.at.duration_since(recovered).as_millis()
            )
        })
        .collect();
    assert_eq!(
        victim_after_ok,
        victim_after.len(),
        "the victim's shards sell again after the takeover; failed: {victim_after_failed:?}"
    );
    assert_eq!(v.figures.oversold, 0);
    assert_eq!(v.figures.duplicated, 0);
    assert_eq!(v.figures.over_limit, 0);
    assert_eq!(
        left as u64 + recorded_units,
        meta.stock,
        "every unit taken has its record (a lost claim loses its decrement with it)"
    );
}
