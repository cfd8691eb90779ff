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
