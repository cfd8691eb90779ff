//! `bench run --external`: after our own run, the same stack driven by wrk on fresh copies
//! of the scenario's SKUs, so our load generator's figures stand beside an external
//! client's from the same run.

use std::path::PathBuf;
use std::time::Duration;

use bench::scenario::Scenario;
use bench::stack::baseline::{BaselineKind, BaselineProc};
use bench::stack::cpu::{Role, Watched};
use loadgen::token::Tokens;

use super::{prepare, run_tag, RunOpts, SystemArgs, CLAIM_PATH};
use crate::cmd::stack::Stack;

/// Distinct users (tokens) the external client cycles through.
const EXTERNAL_USERS: u64 = 200_000;

/// SKU ids of the external client's copies: the scenario's plus this.
const EXTERNAL_SKU_OFFSET: u64 = 1_000_000;

/// Drives the stack with wrk on fresh copies of the scenario's SKUs, for as long as our
/// own run took (at least a second).
pub(super) async fn drive(
    o: &RunOpts,
    sys: &SystemArgs,
    s: &Scenario,
    st: &Stack,
    run_s: f64,
) -> anyhow::Result<bench::stack::external::ExternalReport> {
    let mut copy = s.clone();
    for k in &mut copy.skus {
        k.id += EXTERNAL_SKU_OFFSET;
    }
    prepare(sys, &copy).await?;
    let duration = if s.duration_s > 0.0 {
        s.duration_s + s.warmup_s
    } else {
        run_s
    };
    let tag = run_tag("w");
    let tokens_file = tokens_file(sys, &tag)?;
    let spec = bench::stack::external::WrkSpec {
        bin: o.wrk_bin.clone(),
        url: format!("{}{CLAIM_PATH}", sys.targets[0]),
        threads: o.wrk_threads,
        connections: s.load.connections,
        duration: Duration::from_secs_f64(duration.max(1.0)),
        timeout: Duration::from_millis(s.load.timeout_ms),
        tag,
        skus: copy.skus.iter().map(|k| k.id).collect(),
        tokens_file: tokens_file.clone(),
    };
    eprintln!(
        "external: wrk -t{} -c{} for {:.0} s against {} ...",
        spec.threads,
        spec.connections,
        spec.duration.as_secs_f64().ceil(),
        spec.url
    );
    let r = bench::stack::external::run_wrk(&spec, st.watched()).await;
    if let Some(p) = tokens_file {
        let _ = std::fs::remove_file(p);
    }
    Ok(r?)
}

/// The gateways verify a token per claim: mint the external client's users' tokens before
/// it starts (off its clock and its CPU), one `user token` line per user. `None` when the
/// gateways verify none.
fn tokens_file(sys: &SystemArgs, tag: &str) -> anyhow::Result<Option<PathBuf>> {
    let Some(secret) = &sys.token_secret_file else {
        return Ok(None);
    };
    let users = EXTERNAL_USERS;
    let tokens = Tokens::load(secret, users)?;
    let mut lines = String::with_capacity(users as usize * 200);
    for i in 0..users {
        let name = format!("{tag}x{i}");
        let auth = tokens.authorization(i, || name.clone());
        lines.push_str(&name);
        lines.push(' ');
        lines.push_str(auth.to_str().unwrap_or_default());
        lines.push('\n');
    }
    let path =
        std::env::temp_dir().join(format!("flashgate-wrk-tokens-{}-{tag}", std::process::id()));
    std::fs::write(&path, lines)?;
    Ok(Some(path))
}

/// Drives the bare baseline server with wrk for `duration`: the external client's figure of
/// the machine's HTTP ceiling in the same run (docs/BENCHMARKS.md: the sold-out path
/// against bare hyper, both under wrk). wrk sends it the very requests it sends the gateway,
/// bearer tokens included (the server ignores them): building a request with a token costs
/// wrk's Lua about twice the CPU of one without, and on a shared 2-core machine a client
/// that is cheaper against one server than the other skews the throughput ratio.
pub(super) async fn drive_baseline(
    o: &RunOpts,
    sys: &SystemArgs,
    s: &Scenario,
    duration: Duration,
    redis: Option<String>,
) -> anyhow::Result<bench::stack::external::ExternalReport> {
    let tag = run_tag("wb");
    let tokens_file = tokens_file(sys, &tag)?;
    let name = if redis.is_some() {
        BaselineKind::Redis
    } else {
        BaselineKind::Bare
    }
    .server_name();
    let server =
        tokio::task::spawn_blocking(move || BaselineProc::start_with(redis.as_deref())).await??;
    let spec = bench::stack::external::WrkSpec {
        bin: o.wrk_bin.clone(),
        url: format!("{}{CLAIM_PATH}", server.url()),
        threads: o.wrk_threads,
        connections: s.load.connections,
        duration: duration.max(Duration::from_secs(1)),
        timeout: Duration::from_millis(s.load.timeout_ms),
        tag,
        skus: s.skus.iter().map(|k| k.id).collect(),
        tokens_file: tokens_file.clone(),
    };
    eprintln!(
        "external: wrk -t{} -c{} for {:.0} s against the {name} ...",
        spec.threads,
        spec.connections,
        spec.duration.as_secs_f64().ceil()
    );
    let watched = vec![Watched::new(Role::Baseline, name, server.pid())];
    let r = bench::stack::external::run_wrk(&spec, watched).await;
    drop(server);
    if let Some(p) = tokens_file {
        let _ = std::fs::remove_file(p);
    }
    Ok(r?)
}
