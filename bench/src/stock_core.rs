//! `bench core`: the stock core in-process, no HTTP. Claims go through
//! `shard_router::protocol::claim` against a private single Redis and a private 3-master
//! cluster started in the same run, so the two figures share the machine's state and their
//! ratio means something. Repetitions alternate single / cluster, so drift in the machine's
//! load (other engineers build here) hits both sides alike.
//!
//! Each repetition also reads the CPU time of this process (the claim protocol's client
//! side: redis-rs, group commit, placement) and of the Redis processes, per claim. Beside
//! the gateway's CPU per sold-out answer (HTTP and the token, no Redis), the client figure
//! is the rest of what a claim costs the gateway (docs/BENCHMARKS.md, "Floors").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use loadgen::latency::{self, Percentiles};
use serde::Serialize;
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::{ClaimOutcome, ClaimRequest, SkuMeta, StockClient, StockConfig};

use crate::stack::cpu::{us_per_answer_of, Role, Sampler, Watched};
use crate::stack::servers::LocalRedis;

/// The fixed workload. Defaults are the figure the lead asked for.
#[derive(Debug, Clone, clap::Args)]
pub struct CoreOpts {
    /// Claims per repetition, each by a distinct user.
    #[arg(long, default_value_t = 200_000)]
    pub claims: u64,
    /// Concurrent claim tasks (one shared multiplexed connection, as in the gateway).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Width of the SKU (shards its stock is split over).
    #[arg(long, default_value_t = 8)]
    pub width: u16,
    /// Stock shard count S.
    #[arg(long, default_value_t = shard_router::placement::DEFAULT_SHARDS)]
    pub shards: u16,
    /// Repetitions per target; the report shows medians.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Masters of the cluster target.
    #[arg(long, default_value_t = 3)]
    pub masters: usize,
    /// Send no request id (skips the replay-key write in the script).
    #[arg(long)]
    pub no_request_id: bool,
    /// Write the samples and medians as JSON here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// One repetition on one target.
#[derive(Debug, Clone, Serialize)]
pub struct CoreSample {
    pub target: &'static str,
    pub rep: usize,
    pub claims: u64,
    pub claimed: u64,
    pub errors: u64,
    pub elapsed_s: f64,
    pub claims_per_s: f64,
    pub latency: Percentiles,
    /// Σ slices after the run == stock − claimed.
    pub slices_consistent: bool,
    /// CPU µs per claim of this process: the client side of the claim protocol.
    pub client_cpu_us_per_claim: Option<f64>,
    /// CPU µs per claim of the Redis processes, summed over the masters.
    pub redis_cpu_us_per_claim: Option<f64>,
}

/// The whole `bench core` result.
#[derive(Debug, Clone, Serialize)]
pub struct CoreReport {
    pub samples: Vec<CoreSample>,
    pub single_median_claims_per_s: f64,
    pub cluster_median_claims_per_s: f64,
    /// cluster / single.
    pub cluster_vs_single: f64,
    /// Medians of the repetitions' CPU µs per claim: (client, Redis), single then cluster.
    pub single_cpu_us_per_claim: (Option<f64>, Option<f64>),
    pub cluster_cpu_us_per_claim: (Option<f64>, Option<f64>),
    pub workload: String,
}

/// Errors of the core bench.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error(transparent)]
    Server(#[from] crate::stack::servers::ServerError),
    #[error(transparent)]
    Stock(#[from] shard_router::StockError),
    #[error("task: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Starts both Redis targets, runs the repetitions, prints and returns the report.
pub async fn run(opts: &CoreOpts) -> Result<CoreReport, CoreError> {
    let masters = opts.masters.max(3);
    eprintln!("starting private redis (single) and a {masters}-master cluster ...");
    let (single, cluster) = tokio::task::spawn_blocking(move || {
        Ok::<_, crate::stack::servers::ServerError>((
            LocalRedis::start(1)?,
            LocalRedis::start(masters)?,
        ))
    })
    .await??;
    let targets = [("single", &single), ("cluster", &cluster)];
    let mut clients = Vec::new();
    for (name, redis) in targets {
        let cfg = StockConfig::new(redis.target(), opts.shards);
        let client = StockClient::connect(cfg).await?;
        client.load_scripts().await?;
        clients.push((name, client, redis.watched()));
    }
    let mut samples = Vec::new();
    for rep in 0..opts.reps {
        for (name, client, redis) in &clients {
            // A fresh SKU per repetition: each one starts from full slices.
            let sku = 1000 + rep as u64;
            let s = one_rep(client, redis, name, rep, sku, opts).await?;
            eprintln!(
                "  {name:<7} rep {rep}: {:>9.0} claims/s  p50 {}  p99 {}",
                s.claims_per_s,
                latency::fmt_us(s.latency.p50_us),
                latency::fmt_us(s.latency.p99_us)
            );
            samples.push(s);
        }
    }
    let med = |t: &str| {
        median(
            samples
                .iter()
                .filter(|s| s.target == t)
                .map(|s| s.claims_per_s)
                .collect(),
        )
    };
    let (s, c) = (med("single"), med("cluster"));
    let cpu = |t: &str| {
        let of = |f: fn(&CoreSample) -> Option<f64>| {
            let v: Vec<f64> = samples
                .iter()
                .filter(|s| s.target == t)
                .filter_map(f)
                .collect();
            (!v.is_empty()).then(|| median(v))
        };
        (
            of(|s| s.client_cpu_us_per_claim),
            of(|s| s.redis_cpu_us_per_claim),
        )
    };
    let report = CoreReport {
        single_median_claims_per_s: s,
        cluster_median_claims_per_s: c,
        cluster_vs_single: if s > 0.0 { c / s } else { 0.0 },
        single_cpu_us_per_claim: cpu("single"),
        cluster_cpu_us_per_claim: cpu("cluster"),
        workload: format!(
            "{} claims/rep, distinct users, qty 1, width {}, S={}, {} tasks, {} reps, request ids {}",
            opts.claims,
            opts.width,
            opts.shards,
            opts.concurrency,
            opts.reps,
            if opts.no_request_id { "off" } else { "on" }
        ),
        samples,
    };
    drop((single, cluster));
    Ok(report)
}

async fn one_rep(
    client: &StockClient,
    redis: &[Watched],
    target: &'static str,
    rep: usize,
    sku: u64,
    opts: &CoreOpts,
) -> Result<CoreSample, CoreError> {
    // Twice the claims: every claim finds stock on its home shard, so this measures the
    // fast path, not the second chance.
    let stock = opts.claims * 2;
    let now = shard_router::now_ms();
    let meta = SkuMeta {
        sku,
        stock,
        width: opts.width,
        limit: 1,
        start_ms: now - 60_000,
        end_ms: now + 3_600_000,
        mode: shard_router::SkuMode::Fcfs,
    };
    client.preheat(&meta).await?;
    let next = Arc::new(AtomicU64::new(0));
    let empties = Arc::new(LocalEmptyShards::default());
    let mut procs = vec![Watched::load_generator()];
    procs.extend(redis.iter().cloned());
    let cpu = Sampler::start(procs);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(opts.concurrency);
    for _ in 0..opts.concurrency {
        let (client, meta, next, empties) =
            (client.clone(), meta.clone(), next.clone(), empties.clone());
        let (total, rid) = (opts.claims, !opts.no_request_id);
        tasks.push(tokio::spawn(async move {
            claim_until(&client, &meta, &next, &empties, total, rid, rep).await
        }));
    }
    let mut h: Histogram<u64> = latency::new_histogram();
    let (mut claimed, mut errors) = (0, 0);
    for t in tasks {
        let (th, c, e) = t.await?;
        h.add(th).expect("same histogram bounds");
        claimed += c;
        errors += e;
    }
    let elapsed = started.elapsed();
    let cpu = cpu.finish(opts.claims);
    // None when no process of the role could be read at both ends.
    let per_claim = |role: Role| {
        cpu.iter()
            .any(|c| c.role == role)
            .then(|| us_per_answer_of(&cpu, role))
    };
    let left: i64 = client
        .slices(sku, opts.width)
        .await?
        .into_iter()
        .map(|(_, v)| v.unwrap_or(0))
        .sum();
    Ok(CoreSample {
        target,
        rep,
        claims: opts.claims,
        claimed,
        errors,
        elapsed_s: elapsed.as_secs_f64(),
        claims_per_s: opts.claims as f64 / elapsed.max(Duration::from_micros(1)).as_secs_f64(),
        latency: Percentiles::of(&h),
        slices_consistent: left == stock as i64 - claimed as i64,
        client_cpu_us_per_claim: per_claim(Role::LoadGenerator),
        redis_cpu_us_per_claim: per_claim(Role::RedisMaster),
    })
}

/// One task of a rep: claims the next request number until `total` are taken; its latency
/// histogram, claims and errors.
async fn claim_until(
    client: &StockClient,
    meta: &SkuMeta,
    next: &AtomicU64,
    empties: &LocalEmptyShards,
    total: u64,
    rid: bool,
    rep: usize,
) -> (Histogram<u64>, u64, u64) {
    let mut h = latency::new_histogram();
    let (mut claimed, mut errors) = (0u64, 0u64);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= total {
            break;
        }
        let req = ClaimRequest {
            sku: meta.sku,
            user: format!("u{rep}-{i}"),
            qty: 1,
            request_id: rid.then(|| format!("r{i}")),
        };
        let t = Instant::now();
        let out = protocol::claim(
            client,
            meta,
            &req,
            ClaimOptions::new(empties, shard_router::now_ms()),
        )
        .await
        .map(|a| a.outcome);
        latency::record(&mut h, t.elapsed());
        match out {
            Ok(ClaimOutcome::Claimed { .. }) => claimed += 1,
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
    (h, claimed, errors)
}

/// Median of a sample (mean of the middle two for an even count); 0 when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The table the lead reads.
pub fn render(r: &CoreReport) -> String {
    let mut out = String::new();
    out.push_str(&format!("bench core — {}\n\n", r.workload));
    out.push_str("| target | rep | claimed | errors | elapsed | claims/s | p50 | p99 | p99.9 | slices ok |\n");
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for s in &r.samples {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.2}s | {:.0} | {} | {} | {} | {} |\n",
            s.target,
            s.rep,
            s.claimed,
            s.errors,
            s.elapsed_s,
            s.claims_per_s,
            latency::fmt_us(s.latency.p50_us),
            latency::fmt_us(s.latency.p99_us),
            latency::fmt_us(s.latency.p999_us),
            if s.slices_consistent { "yes" } else { "NO" }
        ));
    }
    out.push_str(&format!(
        "\n| median | single | cluster (3 masters) | cluster / single |\n| --- | ---: | ---: | ---: |\n| claims/s | {:.0} | {:.0} | {:.2} |\n",
        r.single_median_claims_per_s, r.cluster_median_claims_per_s, r.cluster_vs_single
    ));
    let us = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{v:.1}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("{:.2}", b / a),
        _ => "—".to_owned(),
    };
    let (s, c) = (r.single_cpu_us_per_claim, r.cluster_cpu_us_per_claim);
    out.push_str(&format!(
        "| client CPU µs per claim | {} | {} | {} |\n| Redis CPU µs per claim | {} | {} | {} |\n",
        us(s.0),
        us(c.0),
        ratio(s.0, c.0),
        us(s.1),
        us(c.1),
        ratio(s.1, c.1)
    ));
    out
}
