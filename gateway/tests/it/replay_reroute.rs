//! Replay of a rerouted claim in `replica` durability (docs/DESIGN.md "Durability"): the
//! stored answer lives on the home shard A, the take and its record on shard B. A retry
//! with the same request_id may acknowledge the claim only when B's part is confirmed too.
//! Here B's replica never gets the take: the first answer is 503 (unconfirmed), every
//! retry must stay unacknowledged, before B fails over and after it failed over to the
//! replica that never had the take (the claim is then gone from Redis). A claim whose take
//! was confirmed still replays, before and after the failover.

use std::time::{Duration, Instant};

use crate::common::*;
use gateway::config::Durability;
use hyper::StatusCode;
use serde_json::{json, Value};
use shard_router::placement::slot_of_tag;
use shard_router::test_util::{drain, split_sku, users_with_home};
use shard_router::{RedisTarget, SkuMeta, StockClient, StockConfig};
use test_support::{slack, RedisCluster};

fn body(meta: &SkuMeta, user: &str) -> Value {
    json!({"sku": meta.sku, "user": user, "request_id": format!("{user}-r")})
}

/// Retries until the gateway answers about the claim itself (not "Redis unreachable"
/// while the slot map settles); true when that answer acknowledged it (200 or 201).
async fn retried_acknowledged(gw: &Gateway, body: &Value) -> (bool, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = gw.claim(body.clone()).await;
        if a.status.is_success() {
            return (true, a.body);
        }
        if a.status == StatusCode::SERVICE_UNAVAILABLE && a.body["unconfirmed"] == true {
            return (false, a.body);
        }
        assert!(
            Instant::now() < deadline,
            "no answer about the claim: {} {}",
            a.status,
            a.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_of_a_reroute_is_confirmed_on_the_shard_that_took_it() {
    let mut cluster = RedisCluster::start(3, 1);
    let seeds = cluster.urls().join(",");
    let stock = stock_client(&seeds, true).await;
    let sku = split_sku(&stock, 8_700, |slot| cluster.master_of(slot));
    let meta = preheat(&stock, sku, 40, 2, 2).await;
    let shards = stock.placement().shards_of(sku, 2);
    let (home, other) = (shards[0], shards[1]);
    drain(&stock, &meta, home).await;
    let users = users_with_home(&stock, &meta, home, "rr", 3);

    let mut cfg = config(&seeds, true);
    cfg.durability = Durability::Replica;
    // Room for a replica's acknowledgement on a loaded machine: the control claim below
    // must be confirmed (it failed once in a full run with 100 ms).
    cfg.wait_ms = slack(Duration::from_millis(300)).as_millis() as u64;
    // The WAIT must fit in a Redis call's timeout (the config refuses it otherwise), also
    // when FG_TIME_FACTOR widens it.
    cfg.redis_timeout_ms = cfg.redis_timeout_ms.max(cfg.wait_ms * 2);
    let gw = Gateway::start(cfg).await;

    // Control: a reroute whose take a replica confirmed is acknowledged and replays.
    let good = body(&meta, &users[0]);
    let first = gw.claim(good.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(first.body["shard"], other, "rerouted: {}", first.body);
    let again = gw.claim(good.clone()).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.body["claim_id"], first.body["claim_id"]);

    // B's replica stops and loses its link: the take is never replicated.
    let b_slot = slot_of_tag(stock.placement().tag(other));
    let (b_master, b_replica) = cluster.master_and_replica(b_slot);
    cluster.nodes()[b_replica].signal("STOP");
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut cluster.nodes()[b_master].connection())
        .expect("cut B's replica link");

    let victim = body(&meta, &users[1]);
    let first = gw.claim(victim.clone()).await;
    assert_eq!(
        (first.status, &first.body["unconfirmed"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!(true)),
        "B's WAIT failed: {}",
        first.body
    );
    let claim_id = first.body["claim_id"]
        .as_str()
        .expect("claim id")
        .to_owned();
    assert!(claim_id.starts_with(&format!("{other}-")), "{claim_id}");

    // Retry while B's replica still lacks the take: A alone must not confirm it.
    let before = retried_acknowledged(&gw, &victim).await;

    // B fails over to the replica that never got the take; the old master rejoins empty
    // as its replica, so B's fences confirm again (only the record is missing).
    tokio::task::block_in_place(|| {
        cluster.take_over(b_master, b_replica);
        cluster.rejoin_as_replica(b_master);
    });

    // The claim is gone from Redis: no record of it on B's (new) master.
    let live: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.pid().is_some())
        .map(|n| n.url())
        .collect();
    let fresh = StockClient::connect(StockConfig::new(RedisTarget::Cluster(live), 16))
        .await
        .expect("connect");
    let entry = claim_id.split_once('-').expect("shard-entry").1.to_owned();
    let stream = shard_router::keys::claims_stream(fresh.placement(), other);
    let found: Vec<redis::Value> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg(&entry)
        .arg(&entry)
        .query_async(&mut fresh.conn())
        .await
        .expect("xrange");
    assert!(found.is_empty(), "the failover kept the take: {found:?}");

    let after = retried_acknowledged(&gw, &victim).await;
    println!(
        "drill=reroute_replay acknowledged={} recorded=0 lost={} duplicated=0 oversold=0 acknowledged_before_failover={}",
        u8::from(after.0),
        u8::from(after.0),
        u8::from(before.0)
    );
    assert!(
        !before.0,
        "replay acknowledged a take no replica of B holds: {}",
        before.1
    );
    assert!(
        !after.0,
        "replay acknowledged a claim B's failover lost: {}",
        after.1
    );

    // The confirmed reroute still replays after B's failover.
    let (acked, answer) = retried_acknowledged(&gw, &good).await;
    assert!(acked, "a confirmed reroute must replay: {answer}");
    assert_eq!(answer["claim_id"], again.body["claim_id"]);
}
