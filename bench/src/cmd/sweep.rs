//! `bench sweep`: open-loop steps of rising offered rate until p99 passes the SLO or
//! errors appear. The last passing step is the knee (the largest sustainable rate); the
//! capacity table divides it by the gateway cores and Redis masters that served it and
//! says how many of each a target rate needs.

use std::fmt::Write;
use std::path::PathBuf;

use loadgen::latency::fmt_us;
use serde::Serialize;

use bench::capacity::{self, Capacity, CPU_PLAN_UTILISATION};
use bench::report::svg;
use bench::report::Report;
use bench::scenario::cli::ScenarioArgs;
use bench::scenario::{Mode, Scenario, SkuSpec};

use super::run::{self, SystemArgs};
use super::stack::{Stack, StackOpts};

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SweepOpts {
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    #[command(flatten)]
    pub(crate) system: SystemArgs,
    /// Start a local stack for the sweep (see `bench stack --help` for its flags).
    #[arg(long)]
    pub(crate) stack: bool,
    #[command(flatten)]
    pub(crate) stack_opts: StackOpts,
    #[arg(long, default_value_t = 1000.0)]
    pub(crate) start_rate: f64,
    /// Each step multiplies the rate by this.
    #[arg(long, default_value_t = 1.5)]
    pub(crate) factor: f64,
    #[arg(long, default_value_t = 100_000.0)]
    pub(crate) max_rate: f64,
    /// Seconds per step (after a 1 s warm-up).
    #[arg(long, default_value_t = 3.0)]
    pub(crate) step_s: f64,
    #[arg(long, default_value_t = 20.0)]
    pub(crate) slo_p99_ms: f64,
    /// A step with more unserved answers than this share fails.
    #[arg(long, default_value_t = 0.001)]
    pub(crate) max_error_ratio: f64,
    /// Cores the gateways had (for claims/s per core); default: this machine's.
    #[arg(long)]
    pub(crate) gateway_cores: Option<f64>,
    /// Redis masters that held the stock shards.
    #[arg(long)]
    pub(crate) redis_masters: Option<f64>,
    /// Target rates for the capacity table.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub(crate) plan: Vec<f64>,
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// The sweep's machine-readable result.
#[derive(Debug, Serialize)]
pub(crate) struct SweepReport {
    pub(crate) slo_p99_ms: f64,
    pub(crate) max_error_ratio: f64,
    #[serde(flatten)]
    pub(crate) capacity: Capacity,
    pub(crate) steps: Vec<Report>,
    pub(crate) passed: Vec<bool>,
}

pub(crate) async fn sweep(o: &SweepOpts) -> anyhow::Result<(SweepReport, String)> {
    let mut base = o.scenario.scenario()?;
    if o.scenario.skus.is_empty() && o.scenario.scenario.is_none() && o.scenario.preset.is_none() {
        // The claim path, not the sold-out path: stock no step can exhaust, every request
        // from a new user.
        base.skus = vec![SkuSpec {
            id: 1,
            stock: 100_000_000,
            width: 8,
        }];
        base.users = u64::MAX / 2;
    }
    let mut sys = o.system.clone();
    let stack = if o.stack {
        let st = Stack::start(&o.stack_opts).await?;
        eprint!("{}", st.describe());
        run::use_stack(&mut sys, &st, &mut base);
        Some(st)
    } else {
        None
    };
    let client = run::prepare(&sys, &base).await?;
    let slo_us = (o.slo_p99_ms * 1000.0) as u64;
    let (mut steps, mut passed) = (Vec::new(), Vec::new());
    let mut rate = o.start_rate;
    while rate <= o.max_rate {
        let s = step(&base, rate, o);
        let w = run::watched(stack.as_ref());
        let r =
            run::against_system(&sys, &s, client.as_ref(), run::run_tag("s"), !o.quiet, w).await?;
        let ok = r.latency.p99_us <= slo_us
            && r.error_ratio() <= o.max_error_ratio
            && r.invariants.as_ref().is_none_or(|i| i.passed);
        eprintln!(
            "  offered {rate:>8.0}/s: {:>8.0}/s, p99 {}, errors {:.3}% → {}",
            r.throughput_rps,
            fmt_us(r.latency.p99_us),
            100.0 * r.error_ratio(),
            if ok { "ok" } else { "past the knee" }
        );
        steps.push(r);
        passed.push(ok);
        if !ok {
            break;
        }
        rate *= o.factor.max(1.01);
    }
    drop(stack);
    let knee = capacity::knee(&steps, &passed).cloned();
    let rep = SweepReport {
        slo_p99_ms: o.slo_p99_ms,
        max_error_ratio: o.max_error_ratio,
        capacity: capacity_at(o, knee.as_ref()),
        steps,
        passed,
    };
    let md = markdown(&rep, &o.plan);
    if let Some(dir) = &o.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("sweep.json"), serde_json::to_vec_pretty(&rep)?)?;
        std::fs::write(dir.join("sweep.md"), &md)?;
        std::fs::write(
            dir.join("latency-vs-rate.svg"),
            svg::latency_vs_rate(&rep.steps),
        )?;
        if let Some(k) = &knee {
            std::fs::write(dir.join("knee-timeline.svg"), svg::timeline(k))?;
        }
    }
    Ok((rep, md))
}

/// The scenario of the step at `rate`: open loop, `--step-s` after a 1 s warm-up.
fn step(base: &Scenario, rate: f64, o: &SweepOpts) -> Scenario {
    let mut s = base.clone();
    s.name = format!("{} @ {rate:.0}/s", base.name);
    s.load.mode = Mode::Open;
    s.load.rate = rate;
    s.duration_s = o.step_s;
    s.warmup_s = 1.0;
    s.requests = 0;
    // Enough sockets that the schedule, not the pool, limits the rate at the SLO.
    s.load.connections = s
        .load
        .connections
        .max((rate * o.slo_p99_ms / 1000.0) as usize + 16);
    s
}

/// The capacity at the knee, per gateway core (`--gateway-cores`, else this machine's) and
/// per Redis master (`--redis-masters`, else the stack's).
fn capacity_at(o: &SweepOpts, knee: Option<&Report>) -> Capacity {
    let cores = o
        .gateway_cores
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64));
    let masters = o
        .redis_masters
        .unwrap_or(if o.stack && o.stack_opts.cluster {
            3.0
        } else {
            1.0
        });
    Capacity::at(knee, cores, masters)
}

/// The sweep's Markdown: the steps, the knee's capacity, and the plan for `plan`'s rates.
fn markdown(r: &SweepReport, plan: &[f64]) -> String {
    let mut s = String::new();
    steps_table(&mut s, r);
    capacity_table(&mut s, &r.capacity);
    plan_table(&mut s, &r.capacity, plan);
    let _ = writeln!(
        s,
        "\nOn a shared machine the load generator, the gateways and Redis compete for the same \
         cores, so the per-master figure is a lower bound: Redis was not the only limit. The \
         \"by CPU\" columns use each process's measured CPU per claim instead, with every \
         core planned at {:.0}% busy.",
        CPU_PLAN_UTILISATION * 100.0
    );
    s
}

fn steps_table(s: &mut String, r: &SweepReport) {
    let _ = writeln!(
        s,
        "### sweep — SLO p99 ≤ {} ms, errors ≤ {:.2}%\n",
        r.slo_p99_ms,
        100.0 * r.max_error_ratio
    );
    let _ = writeln!(
        s,
        "| offered/s | answers/s | claims/s | p50 | p99 | p99.9 | errors | invariants | verdict |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
    );
    for (st, ok) in r.steps.iter().zip(&r.passed) {
        let _ = writeln!(
            s,
            "| {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} |",
            st.offered_rps,
            st.throughput_rps,
            st.claims_per_s,
            fmt_us(st.latency.p50_us),
            fmt_us(st.latency.p99_us),
            fmt_us(st.latency.p999_us),
            st.errors,
            st.invariants
                .as_ref()
                .map_or("–", |i| if i.passed { "pass" } else { "FAIL" }),
            if *ok { "ok" } else { "past knee" }
        );
    }
}

/// The knee, and what it gives per gateway core and Redis master (and per claim in CPU).
fn capacity_table(s: &mut String, c: &Capacity) {
    let _ = writeln!(
        s,
        "\n**Knee:** {:.0} answers/s (offered {:.0}/s)\n",
        c.knee_rps, c.knee_offered_rps
    );
    let _ = writeln!(
        s,
        "| capacity | value |\n| --- | ---: |\n| claims/s per gateway core ({} cores) | {:.0} |\n| claims/s per Redis master ({} masters) | {:.0} |",
        c.gateway_cores,
        c.claims_per_s_per_gateway_core,
        c.redis_masters,
        c.claims_per_s_per_redis_master
    );
    if c.by_cpu() {
        let _ = writeln!(
            s,
            "| gateway CPU per claim at the knee | {:.1} µs ({:.0} claims/s per busy core) |\n| Redis CPU per claim at the knee (masters) | {:.1} µs ({:.0} claims/s per busy core) |",
            c.gateway_cpu_us,
            1e6 / c.gateway_cpu_us,
            c.redis_cpu_us,
            1e6 / c.redis_cpu_us
        );
        for (what, us) in [
            ("consumer", c.consumer_cpu_us),
            ("MariaDB server (shared, upper bound)", c.mariadb_cpu_us),
        ] {
            if us > 0.0 {
                let _ = writeln!(s, "| {what} CPU per claim at the knee | {us:.1} µs |");
            }
        }
    }
}

/// Cores and masters each target rate needs.
fn plan_table(s: &mut String, c: &Capacity, plan: &[f64]) {
    let _ = writeln!(
        s,
        "\n| target claims/s | gateway cores | Redis masters | gateway cores by CPU | Redis masters by CPU | consumer cores by CPU | MariaDB cores by CPU |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let cell = |v: Option<f64>| v.map_or("–".to_owned(), |n| format!("{n:.0}"));
    for &t in plan {
        let row = c.plan(t);
        let _ = writeln!(
            s,
            "| {t:.0} | {} | {} | {} | {} | {} | {} |",
            cell(row.gateway_cores),
            cell(row.redis_masters),
            cell(row.gateway_cores_by_cpu),
            cell(row.redis_masters_by_cpu),
            cell(row.consumer_cores_by_cpu),
            cell(row.mariadb_cores_by_cpu)
        );
    }
}
