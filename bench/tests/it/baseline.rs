//! The Redis baseline (`bench/src/stack/baseline.rs`): every request is answered 201 after
//! exactly one EVALSHA round trip, so its CPU per answer is a claim's floor.

use std::sync::Arc;

use bench::scenario::Scenario;
use loadgen::http::Target;
use loadgen::outcome::Outcome;
use test_support::RedisServer;

fn evalsha_calls(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.connection())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_answer_costs_one_evalsha() {
    let redis = RedisServer::start();
    let addr = crate::common::baseline_server(Some(redis.url())).await;

    let s = Scenario {
        requests: 1_000,
        duration_s: 0.0,
        ..Scenario::default()
    };
    let target = Target::parse(&format!("http://{addr}"), "/v1/claims").unwrap();
    let mut spec = s.load_spec(vec![target], "rb-".into());
    spec.progress = false;
    let before = evalsha_calls(&redis);
    let r = loadgen::drive(spec, Arc::new(s.workload())).await;
    assert_eq!(
        r.rec.count(Outcome::Claimed),
        1_000,
        "every request answered 201"
    );
    assert_eq!(
        evalsha_calls(&redis) - before,
        1_000,
        "one EVALSHA per answer"
    );
}

/// The claim floor (`bench/src/stack/baseline_claim.rs`) sells through claim.lua on each
/// user's home shard only: every unit of a preheated SKU is answered 201 once, and each
/// leaves one claim record in its shard's stream; the rest are sold out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_floor_sells_the_stock_through_claim_lua() {
    use shard_router::keys::claims_stream;
    use shard_router::{Placement, RedisArgs, RedisTarget, SkuMeta, StockClient};

    let redis = RedisServer::start();
    let shards = 4;
    let args = RedisArgs::of(&RedisTarget::Single(redis.url()), shards);
    let client = StockClient::connect(args.stock_config().unwrap())
        .await
        .unwrap();
    let now = shard_router::now_ms();
    let meta = SkuMeta {
        sku: 7,
        stock: 10,
        width: shards,
        limit: 1,
        start_ms: now - 60_000,
        end_ms: now + 3_600_000,
        mode: shard_router::SkuMode::Fcfs,
    };
    client.preheat(&meta).await.unwrap();
    let addr = crate::common::free_addr();
    tokio::spawn(bench::stack::baseline_claim::serve(
        addr,
        redis.url(),
        shards,
    ));
    crate::common::wait_accepting(addr).await;

    // 200 distinct users, about 50 per shard: every shard's slice sells out.
    let s = Scenario {
        skus: vec![bench::scenario::SkuSpec {
            id: 7,
            stock: 10,
            width: shards,
        }],
        users: 200,
        requests: 200,
        duration_s: 0.0,
        ..Scenario::default()
    };
    let target = Target::parse(&format!("http://{addr}"), "/v1/claims").unwrap();
    let mut spec = s.load_spec(vec![target], "cf-".into());
    spec.progress = false;
    let r = loadgen::drive(spec, Arc::new(s.workload())).await;
    assert_eq!(r.rec.count(Outcome::Claimed), 10, "one 201 per unit");
    assert_eq!(r.rec.count(Outcome::SoldOut), 190, "the rest sold out");
    let placement = Placement::new(shards).unwrap();
    let mut records = 0;
    for shard in 0..shards {
        let len: u64 = redis::cmd("XLEN")
            .arg(claims_stream(&placement, shard))
            .query(&mut redis.connection())
            .unwrap();
        records += len;
    }
    assert_eq!(records, 10, "one claim record per 201");
}
