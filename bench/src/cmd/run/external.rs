//! `bench run --external`: after our own run, the same stack driven by wrk and/or h2load,
//! each on fresh copies of the scenario's SKUs, so our load generator's figures stand
//! beside external clients' from the same run.

use std::path::PathBuf;
use std::time::Duration;

use bench::report::Report;
use bench::scenario::Scenario;
use bench::stack::baseline::{BaselineKind, BaselineProc};
use bench::stack::cpu::{Role, Watched};
use bench::stack::external::{ExternalClient, ExternalReport, ExternalSpec};
use loadgen::token::Tokens;

use super::{prepare, run_tag, RunOpts, SystemArgs, CLAIM_PATH};
use crate::cmd::stack::Stack;

/// Distinct users (tokens) the external client cycles through.
const EXTERNAL_USERS: u64 = 200_000;

/// SKU ids of an external client's copies: the scenario's plus this times the client's
/// number (wrk 1, h2load 2).
const EXTERNAL_SKU_OFFSET: u64 = 1_000_000;

/// h2load's copies' per-user limit: its one user claims on every request, so a binding
/// limit would turn the run into limit refusals (`bench/src/stack/external/h2load.rs`).
const H2LOAD_USER_LIMIT: u32 = 1_000_000_000;

/// Where a client's figures go in a report.
pub(super) fn slot(r: &mut Report, c: ExternalClient) -> &mut Option<ExternalReport> {
    match c {
        ExternalClient::Wrk => &mut r.external,
        ExternalClient::H2load => &mut r.h2load,
    }
}

/// Drives the stack with `client` on fresh copies of the scenario's SKUs, for as long as
/// our own run took (at least a second).
pub(super) async fn drive(
    o: &RunOpts,
    sys: &SystemArgs,
    s: &Scenario,
    st: &Stack,
    run_s: f64,
    client: ExternalClient,
) -> anyhow::Result<ExternalReport> {
    let mut copy = s.clone();
    let offset = match client {
        ExternalClient::Wrk => EXTERNAL_SKU_OFFSET,
        ExternalClient::H2load => {
            copy.limit = H2LOAD_USER_LIMIT;
            2 * EXTERNAL_SKU_OFFSET
        }
    };
    for k in &mut copy.skus {
        k.id += offset;
    }
    prepare(sys, &copy).await?;
    let duration = if s.duration_s > 0.0 {
        s.duration_s + s.warmup_s
    } else {
        run_s
    };
    let spec = spec(o, sys, s, client, sys.targets[0].clone(), &copy)?;
    let spec = ExternalSpec {
        duration: Duration::from_secs_f64(duration.max(1.0)),
        ..spec
    };
    eprintln!(
        "external: {} -t{} -c{} for {:.0} s against {} ...",
        client.name(),
        spec.threads,
        spec.connections,
        spec.duration.as_secs_f64().ceil(),
        spec.url
    );
    let r = bench::stack::external::run_external(&spec, st.watched()).await;
    if let Some(p) = &spec.tokens_file {
        let _ = std::fs::remove_file(p);
    }
    let r = r?;
    warn_rate_limited(&r);
    Ok(r)
}

/// h2load's one user meets the gateways' per-user rate limit on every request past its
/// burst: its figures then measure 429s, not claims. Said, not refused, since a run
/// against outside gateways may have its reasons.
fn warn_rate_limited(r: &ExternalReport) {
    let limited = r.statuses.get(&429).copied().unwrap_or(0);
    if limited * 100 > r.requests {
        eprintln!(
            "warning: {} of {} answers to {} were 429 (the per-user rate limit): start the gateways with --user-rate 0 (--gateway-arg=--user-rate=0) to measure claims",
            limited, r.requests, r.client
        );
    }
}

/// One client's spec against `base_url`, with its tokens minted (a second by default;
/// the callers set the duration).
fn spec(
    o: &RunOpts,
    sys: &SystemArgs,
    s: &Scenario,
    client: ExternalClient,
    base_url: String,
    skus: &Scenario,
) -> anyhow::Result<ExternalSpec> {
    let tag = run_tag(match client {
        ExternalClient::Wrk => "w",
        ExternalClient::H2load => "h",
    });
    let users = match client {
        ExternalClient::Wrk => EXTERNAL_USERS,
        ExternalClient::H2load => 1,
    };
    let tokens_file = tokens_file(sys, &tag, users)?;
    Ok(ExternalSpec {
        client,
        bin: match client {
            ExternalClient::Wrk => o.wrk_bin.clone(),
            ExternalClient::H2load => o.h2load_bin.clone(),
        },
        url: format!("{base_url}{CLAIM_PATH}"),
        threads: o.wrk_threads,
        connections: s.load.connections,
        duration: Duration::from_secs(1),
        timeout: Duration::from_millis(s.load.timeout_ms),
        tag,
        skus: skus.skus.iter().map(|k| k.id).collect(),
        tokens_file,
    })
}

/// The gateways verify a token per claim: mint the external client's users' tokens before
/// it starts (off its clock and its CPU), one `user token` line per user. `None` when the
/// gateways verify none.
fn tokens_file(sys: &SystemArgs, tag: &str, users: u64) -> anyhow::Result<Option<PathBuf>> {
    let Some(secret) = &sys.token_secret_file else {
        return Ok(None);
    };
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

/// Drives the bare baseline server with `client` for `duration`: the external client's
/// figure of the machine's HTTP ceiling in the same run (docs/BENCHMARKS.md: the sold-out
/// path against bare hyper, both under wrk). The client sends it the very requests it
/// sends the gateway, bearer tokens included (the server ignores them): building a request
/// with a token costs wrk's Lua about twice the CPU of one without, and on a shared 2-core
/// machine a client that is cheaper against one server than the other skews the
/// throughput ratio.
pub(super) async fn drive_baseline(
    o: &RunOpts,
    sys: &SystemArgs,
    s: &Scenario,
    duration: Duration,
    redis: Option<String>,
    client: ExternalClient,
) -> anyhow::Result<ExternalReport> {
    let name = if redis.is_some() {
        BaselineKind::Redis
    } else {
        BaselineKind::Bare
    }
    .server_name();
    let server =
        tokio::task::spawn_blocking(move || BaselineProc::start_with(redis.as_deref())).await??;
    let spec = ExternalSpec {
        duration: duration.max(Duration::from_secs(1)),
        ..spec(o, sys, s, client, server.url(), s)?
    };
    eprintln!(
        "external: {} -t{} -c{} for {:.0} s against the {name} ...",
        client.name(),
        spec.threads,
        spec.connections,
        spec.duration.as_secs_f64().ceil()
    );
    let watched = vec![Watched::new(Role::Baseline, name, server.pid())];
    let r = bench::stack::external::run_external(&spec, watched).await;
    drop(server);
    if let Some(p) = &spec.tokens_file {
        let _ = std::fs::remove_file(p);
    }
    Ok(r?)
}
