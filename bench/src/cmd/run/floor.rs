//! `bench run --compare-baseline --baseline-kind claim`: the claim floor
//! (`bench/src/stack/baseline_claim.rs`) driven with the scenario's load, on a fresh copy
//! of its SKUs preheated as the gateway run's are (through the consumer when the stack has
//! one), so each run sells the same stock and the gateway run after it finds its own SKUs
//! untouched.

use std::sync::Arc;

use bench::report::Report;
use bench::scenario::Scenario;
use bench::stack::baseline::{BaselineKind, BaselineProc};
use bench::stack::baseline_claim;
use bench::stack::cpu::{Role, Sampler, Watched};

use super::{prepare, run_tag, targets, SystemArgs};

/// SKU ids of the floor's copies: the scenario's plus this (the external clients' copies
/// are at 1 and 2 times `external::EXTERNAL_SKU_OFFSET`).
const FLOOR_SKU_OFFSET: u64 = 3_000_000;

/// Drives the claim floor against `redis` (a single Redis) with the scenario's load.
pub(super) async fn drive(
    sys: &SystemArgs,
    s: &Scenario,
    progress: bool,
    redis: &str,
) -> anyhow::Result<Report> {
    let mut copy = s.clone();
    for k in &mut copy.skus {
        k.id += FLOOR_SKU_OFFSET;
    }
    prepare(sys, &copy).await?;
    let args = baseline_claim::serve_args(redis, sys.redis.shards);
    let server = tokio::task::spawn_blocking(move || BaselineProc::start_args(&args)).await??;
    // "f" is as long as the gateway run's "b": users and request ids of the same length.
    let mut spec = copy.load_spec(targets(&[server.url()])?, run_tag("f"));
    spec.progress = progress;
    let cpu = Sampler::start(vec![
        Watched::load_generator(),
        Watched::new(
            Role::Baseline,
            BaselineKind::Claim.server_name(),
            server.pid(),
        ),
    ]);
    let r = loadgen::drive(spec, Arc::new(copy.workload())).await;
    let mut report = Report::from_load("baseline", &s.name, &r);
    report.cpu = cpu.finish(report.requests);
    drop(server);
    Ok(report)
}
