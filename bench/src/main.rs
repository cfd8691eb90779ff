//! `bench`: thin entry point. Parses the command line and hands each subcommand to its
//! module; `anyhow` lives only in the binary (`main.rs`, `cmd/`).

mod cmd;
#[cfg(test)]
mod doc_cli;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "bench",
    about = "flashgate load generator and capacity-planning harness"
)]
struct Cli {
    /// Log line format: `text` or `json` (one object per line). `RUST_LOG` sets the
    /// levels (default warn: the report goes to stdout, progress to stderr).
    #[arg(long, env = "FLASHGATE_LOG_FORMAT", value_enum, default_value_t = telemetry::LogFormat::Text, global = true)]
    log_format: telemetry::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Claims/s of the stock core in-process, on a private single Redis and a private
    /// 3-master cluster, side by side.
    Core(bench::stock_core::CoreOpts),
    /// Drive the bare hyper baseline server: the machine's HTTP limit.
    Baseline(BaselineOpts),
    /// Drive a flash sale against gateway(s), check the invariants, write reports.
    Run(Box<cmd::run::RunOpts>),
    /// Step the offered rate until p99 passes the SLO or errors appear: knee and capacity.
    Sweep(Box<cmd::sweep::SweepOpts>),
    /// The same scenario on a fresh stack per row, one feature switched per row.
    Ablate(Box<cmd::ablate::AblateOpts>),
    /// The bots scenario: one population with a share of fast, repeating bots against a
    /// first-come campaign and a draw; compares the bots' share of the winners.
    Draw(Box<cmd::draw::DrawOpts>),
    /// Start a local stack (Redis, consumer + database, gateways) until Ctrl-C or SIGTERM.
    Stack {
        #[command(flatten)]
        opts: cmd::stack::StackOpts,
        /// Stop after this many seconds instead of waiting for Ctrl-C or SIGTERM.
        #[arg(long = "for")]
        for_s: Option<u64>,
    },
    /// Internal: the baseline server process.
    #[command(hide = true)]
    ServeBaseline {
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Make one EVALSHA round trip to this Redis per request (the Redis baseline).
        #[arg(long)]
        redis_url: Option<String>,
        /// With `--redis-url`: run lua/claim.lua on the user's home shard among this many
        /// shards instead (the claim floor, bench/src/stack/baseline_claim.rs).
        #[arg(long, requires = "redis_url")]
        claim_shards: Option<u16>,
    },
}

#[derive(clap::Args)]
struct BaselineOpts {
    #[command(flatten)]
    scenario: bench::scenario::cli::ScenarioArgs,
    /// Directory for report.json, report.md and timeline.svg.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    #[arg(long)]
    quiet: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _log = telemetry::init(cli.log_format, "warn")?;
    // `bench stack` waits for the signal itself, and the baseline server is a child that
    // its parent stops.
    if matches!(cli.cmd, Cmd::Stack { .. } | Cmd::ServeBaseline { .. }) {
        return dispatch(cli.cmd).await;
    }
    // SIGTERM (a `timeout`, a cancelled CI job) would otherwise end this process where it
    // stands and leave the servers it started running on their ports. Dropping the
    // command's future drops them instead: each gets SIGTERM, then SIGKILL after a bound.
    tokio::select! {
        r = dispatch(cli.cmd) => r,
        _ = plumbing::shutdown::terminated() => {
            anyhow::bail!("interrupted (SIGTERM or Ctrl-C); the processes it started are stopped")
        }
    }
}

async fn dispatch(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Core(opts) => {
            let report = bench::stock_core::run(&opts).await.context("bench core")?;
            println!("{}", bench::stock_core::render(&report));
            if let Some(path) = &opts.json {
                std::fs::write(path, serde_json::to_vec_pretty(&report)?)
                    .with_context(|| format!("write {}", path.display()))?;
            }
        }
        Cmd::Baseline(o) => {
            let s = o.scenario.scenario()?;
            let r = cmd::run::baseline(&s, !o.quiet, None)
                .await
                .context("bench baseline")?;
            println!("{}", bench::report::markdown::run_summary(&r));
            cmd::run::write_outputs(o.out.as_deref(), &r, None)?;
        }
        Cmd::Run(o) => run(&o).await?,
        Cmd::Sweep(o) => {
            let (_, md) = cmd::sweep::sweep(&o).await.context("bench sweep")?;
            println!("{md}");
        }
        Cmd::Ablate(o) => {
            let (rows, md) = cmd::ablate::ablate(&o).await.context("bench ablate")?;
            println!("{md}");
            for (name, r) in &rows {
                if let Ok(r) = r {
                    println!("{name}:\n{}", bench::report::markdown::run_summary(r));
                }
            }
        }
        Cmd::Draw(o) => {
            let r = cmd::draw::run(&o).await.context("bench draw")?;
            println!("{}", cmd::draw::markdown(&r));
            if !r.invariants_passed {
                anyhow::bail!("bench draw: an invariant failed");
            }
        }
        Cmd::Stack { opts, for_s } => stack(&opts, for_s).await?,
        Cmd::ServeBaseline {
            listen,
            redis_url,
            claim_shards,
        } => match (redis_url, claim_shards) {
            (Some(url), Some(shards)) => {
                bench::stack::baseline_claim::serve(listen, url, shards).await
            }
            (url, _) => bench::stack::baseline::serve(listen, url).await,
        }
        .with_context(|| format!("baseline server on {listen}"))?,
    }
    Ok(())
}
/// `bench run`: the summary, then the invariants and the first second against a reference.
async fn run(o: &cmd::run::RunOpts) -> anyhow::Result<()> {
    let r = cmd::run::run(o).await.context("bench run")?;
    println!("{}", bench::report::markdown::run_summary(&r));
    if r.invariants.as_ref().is_some_and(|i| !i.passed) {
        anyhow::bail!("invariant check failed");
    }
    if let Some(path) = &o.first_second_reference {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let reference: bench::report::Report = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a bench report", path.display()))?;
        let bad = bench::checks::regress::first_second_regressions(&r, &reference);
        if !bad.is_empty() {
            anyhow::bail!(
                "first-second latency regressed against {}:\n{}",
                path.display(),
                bad.join("\n")
            );
        }
        eprintln!(
            "first-second latency within {}× of {}",
            bench::checks::regress::FACTOR,
            path.display()
        );
    }
    Ok(())
}

/// `bench stack`: up until `for_s` seconds pass, or Ctrl-C or SIGTERM.
async fn stack(opts: &cmd::stack::StackOpts, for_s: Option<u64>) -> anyhow::Result<()> {
    let st = cmd::stack::Stack::start(opts)
        .await
        .context("bench stack")?;
    println!("{}", st.describe());
    match for_s {
        Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
        None => {
            eprintln!("stack up; Ctrl-C or SIGTERM stops it");
            plumbing::shutdown::terminated().await;
        }
    }
    eprintln!("stopping ...");
    drop(st);
    Ok(())
}
