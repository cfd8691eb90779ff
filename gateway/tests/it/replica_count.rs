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
