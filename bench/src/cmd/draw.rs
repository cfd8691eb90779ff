//! `bench draw`: the bots scenario (issue 28). One population, a share of it bots that
//! send `--bot-factor` times the requests of a human with no delay, offered to a
//! first-come campaign, to a draw campaign and to a queue campaign (a waiting room in
//! front of first come), each on a fresh SKU; the report compares the bots' share of the
//! winners with their share of the users, and checks each mode's invariants (at most the
//! stock won, one unit a user, the draw verifies, every queue token accepted).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bench::stack::cpu::Watched;
use loadgen::http::Target;
use loadgen::token::Tokens;

use super::run::{run_tag, SystemArgs, CLAIM_PATH};
use super::stack::{Stack, StackOpts};

mod drive;
mod ledger;
mod modes;
mod population;
mod procs;
mod report;

pub(crate) use report::markdown;
use report::{DrawReport, ModeReport};

/// Which campaigns the population meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeSel {
    Fcfs,
    Draw,
    Queue,
    /// fcfs, draw and queue, in that order.
    All,
    /// fcfs and draw (the former default).
    Both,
}

impl ModeSel {
    fn runs(self, mode: ModeSel) -> bool {
        match self {
            ModeSel::All => true,
            ModeSel::Both => matches!(mode, ModeSel::Fcfs | ModeSel::Draw),
            one => one == mode,
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DrawOpts {
    /// Users in the population.
    #[arg(long, default_value_t = 5000)]
    pub(crate) users: u32,
    /// Share of the users that are bots.
    #[arg(long, default_value_t = 0.10)]
    pub(crate) bot_share: f64,
    /// Requests a bot sends, back to back from the opening (a human sends one).
    #[arg(long, default_value_t = 20)]
    pub(crate) bot_factor: u32,
    /// Humans send at a uniformly random moment of this many ms after the opening ...
    #[arg(long, default_value_t = 1000)]
    pub(crate) rush_ms: u64,
    /// ... plus a client delay between these two (ms).
    #[arg(long, default_value_t = 50)]
    pub(crate) delay_min_ms: u64,
    #[arg(long, default_value_t = 300)]
    pub(crate) delay_max_ms: u64,
    /// Seed of the population's schedule.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Units of each campaign.
    #[arg(long, default_value_t = 200)]
    pub(crate) stock: u64,
    /// Shards each campaign's stock is split over (at most the deployment's).
    #[arg(long, default_value_t = 8)]
    pub(crate) width: u16,
    #[arg(long, value_enum, default_value_t = ModeSel::All)]
    pub(crate) mode: ModeSel,
    /// Connections of the load generator (the bots and humans share them).
    #[arg(long, default_value_t = 500)]
    pub(crate) connections: usize,
    /// Per-request timeout (ms).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) timeout_ms: u64,
    /// SKU of the first campaign (the next mode takes the next id); default from the clock,
    /// so every run has fresh ones.
    #[arg(long)]
    pub(crate) sku: Option<u64>,
    /// The draw's entry window from the opening, and the queue's arrivals before its start
    /// (s). Default: twice the fcfs phase when it ran first, else the requests at
    /// --entry-rate.
    #[arg(long)]
    pub(crate) entry_window_s: Option<f64>,
    /// Answers/s assumed to size the entry window when no fcfs phase measured it.
    #[arg(long, default_value_t = 8000.0)]
    pub(crate) entry_rate: f64,
    /// Slack between the entry (arrival) window's end and the draw (the queue's start) (s).
    #[arg(long, default_value_t = 3.0)]
    pub(crate) draw_margin_s: f64,
    /// Longest wait after the draw time for the draw and its grants (s).
    #[arg(long, default_value_t = 180)]
    pub(crate) draw_wait_s: u64,
    /// Longest a queue's users keep polling after its start (s).
    #[arg(long, default_value_t = 120)]
    pub(crate) queue_wait_s: u64,
    /// Gateways behind --target (a balancer) whose CPU to sample when they run here.
    #[arg(long, env = "FLASHGATE_GATEWAYS", value_delimiter = ',')]
    pub(crate) cpu_gateways: Vec<String>,
    /// Directory for draw-report.json and draw-report.md.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) system: SystemArgs,
    /// Start a local stack for this run and stop it after (see `bench stack --help`).
    #[arg(long)]
    pub(crate) stack: bool,
    #[command(flatten)]
    pub(crate) stack_opts: StackOpts,
}

/// `bench draw`.
pub(crate) async fn run(o: &DrawOpts) -> anyhow::Result<DrawReport> {
    anyhow::ensure!(o.users > 0, "--users must be at least 1");
    anyhow::ensure!(
        (0.0..=1.0).contains(&o.bot_share),
        "--bot-share must be within 0..=1"
    );
    anyhow::ensure!(o.bot_factor > 0, "--bot-factor must be at least 1");
    let mut sys = o.system.clone();
    let stack = if o.stack {
        Some(start_stack(&o.stack_opts, &mut sys).await?)
    } else {
        None
    };
    let width = o.width.min(sys.redis.shards).max(1);
    let bin = sys.consumer_bin.clone().context(
        "bench draw needs --consumer-bin (FLASHGATE_CONSUMER_BIN): campaigns are made through it",
    )?;
    let url = sys.mysql.clone().context(
        "bench draw needs --mysql (FLASHGATE_MYSQL_URL): winners are read from the ledger",
    )?;
    let watched = match &stack {
        Some(st) => st.watched(),
        None => local_processes(o, &sys),
    };
    let targets = sys
        .targets
        .iter()
        .map(|u| Target::parse(u, CLAIM_PATH).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let shape = shape(o);
    // Only the bots' tokens are kept (they send many requests); a human's is minted for
    // its one request, so a million users cost no token cache.
    let tokens = match &sys.token_secret_file {
        Some(p) => Some(Arc::new(Tokens::load(p, shape.bots() as u64)?)),
        None => None,
    };
    let tag = run_tag("d");
    let ctx = modes::Ctx {
        o,
        sys: &sys,
        bin: &bin,
        ledger: ledger::Ledger::connect(&url)?,
        targets: &targets,
        tokens,
        tag: &tag,
        shape,
        width,
        watched,
    };
    let out = run_modes(&ctx).await?;
    drop(stack);
    let r = report(o, out);
    if let Some(dir) = &o.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("draw-report.json"), serde_json::to_vec_pretty(&r)?)?;
        std::fs::write(dir.join("draw-report.md"), markdown(&r))?;
    }
    Ok(r)
}

/// Starts the local stack of `--stack` and points `sys` at it.
async fn start_stack(opts: &StackOpts, sys: &mut SystemArgs) -> anyhow::Result<Stack> {
    let st = Stack::start(opts).await?;
    eprint!("{}", st.describe());
    sys.targets = st.gateway_urls();
    sys.redis = shard_router::RedisArgs::of(&st.redis.target(), st.shards);
    sys.mysql = st.mysql_url.clone();
    sys.consumer_bin = st.consumer_bin.clone();
    sys.token_secret_file = Some(st.token_secret_file.clone());
    Ok(st)
}

/// Without `--stack`: the processes of this machine that serve the targets, the
/// `--cpu-gateways` and Redis.
fn local_processes(o: &DrawOpts, sys: &SystemArgs) -> Vec<Watched> {
    let mut urls = sys.targets.clone();
    urls.extend(o.cpu_gateways.iter().cloned());
    if let Some(r) = &sys.redis.redis {
        urls.extend(r.split(',').map(str::to_owned));
    }
    procs::local(&urls)
}

fn shape(o: &DrawOpts) -> population::Shape {
    population::Shape {
        users: o.users,
        bot_share: o.bot_share,
        bot_factor: o.bot_factor,
        rush: Duration::from_millis(o.rush_ms),
        delay_min: Duration::from_millis(o.delay_min_ms),
        delay_max: Duration::from_millis(o.delay_max_ms.max(o.delay_min_ms)),
        seed: o.seed,
    }
}

/// The selected modes in order (fcfs, draw, queue), each on the next SKU.
async fn run_modes(ctx: &modes::Ctx<'_>) -> anyhow::Result<Vec<ModeReport>> {
    let o = ctx.o;
    let mut sku = o.sku.unwrap_or_else(|| shard_router::now_ms() as u64);
    let mut out = Vec::new();
    let mut fcfs_took = None;
    let announce = |mode: &str, sku: u64| {
        eprintln!(
            "{mode}: {} users ({} bots) for {} units, SKU {sku} ...",
            o.users,
            ctx.shape.bots(),
            o.stock
        )
    };
    if o.mode.runs(ModeSel::Fcfs) {
        announce("fcfs", sku);
        let m = modes::fcfs(ctx, sku).await?;
        fcfs_took = Some(m.phase_s);
        out.push(m);
        sku += 1;
    }
    if o.mode.runs(ModeSel::Draw) {
        announce("draw", sku);
        out.push(modes::draw(ctx, sku, fcfs_took).await?);
        sku += 1;
    }
    if o.mode.runs(ModeSel::Queue) {
        announce("queue", sku);
        out.push(modes::queue(ctx, sku, fcfs_took).await?);
    }
    Ok(out)
}

fn report(o: &DrawOpts, out: Vec<ModeReport>) -> DrawReport {
    let goals = out
        .iter()
        .filter(|m| m.mode != "fcfs")
        .map(report::goal_line)
        .collect();
    DrawReport {
        seed: o.seed,
        bot_factor: o.bot_factor,
        rush_ms: o.rush_ms,
        connections: o.connections,
        invariants_passed: out.iter().all(|m| m.passed()),
        modes: out,
        goals,
    }
}
