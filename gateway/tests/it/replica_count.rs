//! Replica durability waits for every replica (docs/DESIGN.md "Durability"): a claim is
//! acknowledged only once every replica its master counted connected at the last probe
//! holds it, not the first one to answer. With two replicas, a 201 resting on one would be
//! lost if the master died and the other one was promoted.

use std::time::{Duration, Instant};

use crate::common::*;
use gateway::config::Durability;
use hyper::StatusCode;
use serde_json::json;
use test_support::{slack, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_only_one_replica_of_two_holds_is_not_acknowledged() {
    let master = RedisServer::start();
    let _first = RedisServer::start_replica_of(&master);
    let second = RedisServer::start_replica_of(&master);
    let stock = stock_client(&master.url(), false).await;
    preheat(&stock, 7301, 10, 1, 1).await;
    let mut cfg = config(&master.url(), false);
    cfg.durability = Durability::Replica;
    cfg.wait_ms = 100;
    let gw = Gateway::start(cfg).await;
    // The master counts a replica online once its first ACK arrived (every second at
    // most); a batch that finds one online its WAIT did not ask for is unconfirmed.
    tokio::time::sleep(slack(Duration::from_millis(1_200))).await;

    let a = gw.claim(json!({"sku": 7301, "user": "both"})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    // Several probes (every 100 ms) have counted both replicas.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // One replica stalls: still connected for its master, acknowledging nothing. The other
    // acknowledges at once, which WAIT 1 took for a confirmation.
    second.signal("STOP");
    let b = gw.claim(json!({"sku": 7301, "user": "one-of-two"})).await;
    second.signal("CONT");
    assert_eq!(b.status, StatusCode::SERVICE_UNAVAILABLE, "{}", b.body);
    assert_eq!(b.body["unconfirmed"], true, "{}", b.body);

    // Back: it catches up, and claims are acknowledged again.
    let deadline = Instant::now() + slack(Duration::from_secs(5));
    let mut n = 0;
    loop {
        let c = gw
            .claim(json!({"sku": 7301, "user": format!("back{n}")}))
            .await;
        if c.status == StatusCode::CREATED {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never acknowledged again: {}",
            c.body
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.stop().await;
}

/// The count a claim's WAIT asks for is the last probe's; a replica that came online since
/// is not in it. A 201 resting on the replica the probe counted, while the newer one
/// holds nothing, is lost when the newer one is promoted. The pipeline's own `INFO
/// replication` (after its WAIT) says how many replicas were online: fewer
/// acknowledgements confirm nothing, and neither does a replay of that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_online_since_the_last_probe_is_waited_for() {
    let master = RedisServer::start();
    let _first = RedisServer::start_replica_of(&master);
    let stock = stock_client(&master.url(), false).await;
    // Two units: the second claim sells the SKU out, so the other gateway replays it with
    // the replay read alone (`shard-router/src/replay.rs`), not through a claim pipeline.
    preheat(&stock, 7302, 2, 1, 1).await;
    let mut cfg = config(&master.url(), false);
    cfg.durability = Durability::Replica;
    cfg.wait_ms = 100;
    // One probe at start (one replica), none after within this test.
    cfg.probe_interval_ms = 3_600_000;
    let gw = Gateway::start(cfg.clone()).await;
    // Another gateway replays: its probe counted one replica too, and it ran no claim since.
    let other = Gateway::start(cfg).await;
    let a = gw.claim(json!({"sku": 7302, "user": "before"})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);

    let second = RedisServer::start_replica_of(&master);
    // The master counts it online once its first ACK arrived (every second at most).
    tokio::time::sleep(slack(Duration::from_millis(1_200))).await;
    second.signal("STOP");
    let b = gw
        .claim(json!({"sku": 7302, "user": "newer", "request_id": "n1"}))
        .await;
    wait_sold_out(other.api, 7302, true, "the sell-out at the other gateway").await;
    let again = other
        .claim(json!({"sku": 7302, "user": "newer", "request_id": "n1"}))
        .await;
    second.signal("CONT");
    assert_eq!(b.status, StatusCode::SERVICE_UNAVAILABLE, "{}", b.body);
    assert_eq!(b.body["unconfirmed"], true, "{}", b.body);
    assert_eq!(
        again.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "replay: {}",
        again.body
    );
    assert_eq!(again.body["unconfirmed"], true, "replay: {}", again.body);
    gw.stop().await;
    other.stop().await;
}
