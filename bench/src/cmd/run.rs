//! `bench run` and `bench baseline`: offer a scenario's load to the gateway(s) or to the
//! bare baseline server, then check the invariants and write the reports.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use loadgen::http::Target;
use loadgen::outcome::Outcome;
use loadgen::token::Tokens;
use shard_router::{RedisArgs, SkuMeta, StockClient};

use bench::checks::invariants;
use bench::report::verdict::InvariantReport;
use bench::report::{markdown, svg};
use bench::report::{BaselineRatios, Report};
use bench::scenario::cli::ScenarioArgs;
use bench::scenario::Scenario;
use bench::stack::baseline::{BaselineKind, BaselineProc};
use bench::stack::cpu::{Role, Sampler, Watched};
use bench::stack::external::ExternalClient;
use bench::stack::mysql::Mysql;

use super::stack::{Stack, StackOpts};

/// Path of the claim API.
pub(crate) const CLAIM_PATH: &str = "/v1/claims";

/// Where the system under test is, and what to do around the load. Each setting is also
/// a `FLASHGATE_*` variable, the same names the gateway and the consumer read (and that
/// `deploy/local/up.sh` prints), so bench runs as the compose service unchanged.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SystemArgs {
    /// Gateway URL(s), comma-separated or repeated; connections are spread round-robin.
    /// Host names are resolved once at start (`http://haproxy:8080`).
    #[arg(
        long = "target",
        env = "FLASHGATE_URL",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8080"
    )]
    pub(crate) targets: Vec<String>,
    /// The Redis the gateways use and the deployment's shard count (the same flags as
    /// theirs): bench preheats the SKUs and checks the invariants there. Without `--redis`
    /// only client-side checks run.
    #[command(flatten)]
    pub(crate) redis: RedisArgs,
    /// Leave the SKUs as they are (they were preheated elsewhere).
    #[arg(long)]
    pub(crate) no_preheat: bool,
    /// Ledger URL (mysql://user@host:port/db): checks ledger rows == successes once the
    /// consumer has drained.
    #[arg(long, env = "FLASHGATE_MYSQL_URL")]
    pub(crate) mysql: Option<String>,
    /// Consumer binary: campaigns are created in MySQL and preheated through it, so the
    /// ledger knows them. Without it, SKUs are preheated straight into Redis.
    #[arg(long, env = "FLASHGATE_CONSUMER_BIN")]
    pub(crate) consumer_bin: Option<PathBuf>,
    /// Longest wait for the consumer to drain before the ledger check (s).
    #[arg(long, default_value_t = 60)]
    pub(crate) drain_timeout_s: u64,
    /// HS256 secret the gateways verify tokens with: every claim carries a bearer token
    /// for its user, minted once per user (`--stack` sets this up by itself).
    #[arg(long, env = "FLASHGATE_TOKEN_SECRET_FILE")]
    pub(crate) token_secret_file: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunOpts {
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    #[command(flatten)]
    pub(crate) system: SystemArgs,
    /// Also drive a baseline server with the same load, and print the ratios.
    #[arg(long)]
    pub(crate) compare_baseline: bool,
    /// Which baseline `--compare-baseline` drives: `bare` (hyper alone, the sold-out
    /// path's ceiling) or `redis` (hyper + one redis-rs EVALSHA round trip to the run's
    /// Redis, the floor of a claim's client side; a single Redis only) or `claim` (hyper +
    /// lua/claim.lua on the user's home shard, on a copy of the SKUs: the floor of a claim
    /// with Redis's work in it; a single Redis only).
    #[arg(long, value_enum, default_value_t = BaselineKind::Bare)]
    pub(crate) baseline_kind: BaselineKind,
    /// After the run, drive the same stack with external clients (`--external-client`)
    /// for as long, each on fresh copies of the SKUs, and report their figures and CPU by
    /// process beside ours. Needs `--stack`.
    #[arg(long, requires = "stack")]
    pub(crate) external: bool,
    /// The external clients `--external` runs, one after the other: `wrk` (with
    /// bench/external/claims.lua, a distinct user per request) and `h2load` (one user's
    /// fixed request, no request id, so a cheaper claim; its SKU copies' per-user limit
    /// does not bind, and the gateways need `--user-rate 0`).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "wrk",
        requires = "external"
    )]
    pub(crate) external_client: Vec<ExternalClient>,
    /// The wrk binary for `--external`.
    #[arg(long, default_value = "wrk")]
    pub(crate) wrk_bin: String,
    /// The h2load binary for `--external-client h2load`.
    #[arg(long, default_value = "h2load")]
    pub(crate) h2load_bin: String,
    /// Threads of each external client.
    #[arg(long, default_value_t = 2)]
    pub(crate) wrk_threads: usize,
    /// Fail (exit 1) when the first second's latency (p50 or p99, all answers and claimed)
    /// is more than 2× the one stored in this report.json.
    #[arg(long)]
    pub(crate) first_second_reference: Option<PathBuf>,
    /// Directory for report.json, report.md and timeline.svg.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// No progress bar (logs, CI).
    #[arg(long)]
    pub(crate) quiet: bool,
    /// Start a local stack for this run and stop it after (see `bench stack --help`).
    #[arg(long)]
    pub(crate) stack: bool,
    #[command(flatten)]
    pub(crate) stack_opts: StackOpts,
}

/// Points the run at a started stack; SKU widths shrink to the stack's shard count.
pub(crate) fn use_stack(sys: &mut SystemArgs, st: &Stack, s: &mut Scenario) {
    sys.targets = st.gateway_urls();
    sys.redis = RedisArgs::of(&st.redis.target(), st.shards);
    sys.mysql = st.mysql_url.clone();
    sys.consumer_bin = st.consumer_bin.clone();
    sys.token_secret_file = Some(st.token_secret_file.clone());
    for k in &mut s.skus {
        k.width = k.width.min(st.shards);
    }
}

/// A unique prefix for this run's users and request ids: `b<unix ms>-`, [a-z0-9-] only.
pub(crate) fn run_tag(prefix: &str) -> String {
    format!("{prefix}{}-", shard_router::now_ms())
}

/// Creates (through the consumer when given) and preheats every SKU of the scenario.
pub(crate) async fn prepare(sys: &SystemArgs, s: &Scenario) -> anyhow::Result<Option<StockClient>> {
    if sys.redis.redis.is_none() {
        return Ok(None);
    }
    let client = StockClient::connect(sys.redis.stock_config()?).await?;
    if sys.no_preheat {
        return Ok(Some(client));
    }
    let now = shard_router::now_ms();
    for sku in &s.skus {
        let meta = SkuMeta {
            sku: sku.id,
            stock: sku.stock,
            width: sku.width,
            limit: s.limit,
            start_ms: now - 60_000,
            end_ms: now + 24 * 3_600_000,
            mode: shard_router::SkuMode::Fcfs,
        };
        match &sys.consumer_bin {
            Some(bin) => consumer_campaign(bin, sys, &meta).await?,
            None => {
                let out = client.preheat(&meta).await?;
                if out
                    .iter()
                    .any(|(_, o)| matches!(o, shard_router::PreheatOutcome::Live { .. }))
                {
                    eprintln!(
                        "warning: SKU {} was already live; its slices were kept as they are",
                        sku.id
                    );
                }
            }
        }
    }
    Ok(Some(client))
}

async fn consumer_campaign(bin: &Path, sys: &SystemArgs, m: &SkuMeta) -> anyhow::Result<()> {
    let steps: [Vec<String>; 2] = [
        [
            "campaign",
            "--sku",
            &m.sku.to_string(),
            "--stock",
            &m.stock.to_string(),
            "--width",
            &m.width.to_string(),
            "--limit",
            &m.limit.to_string(),
            "--start-ms",
            &m.start_ms.to_string(),
            "--end-ms",
            &m.end_ms.to_string(),
        ]
        .map(str::to_owned)
        .to_vec(),
        vec!["preheat".to_owned(), m.sku.to_string()],
    ];
    for args in steps {
        consumer(bin, sys, &args).await?;
    }
    Ok(())
}

/// Runs one consumer admin subcommand against the system's Redis and ledger.
async fn consumer(bin: &Path, sys: &SystemArgs, args: &[String]) -> anyhow::Result<String> {
    let mut common = sys.redis.to_args();
    if let Some(url) = &sys.mysql {
        common.extend(["--mysql".to_owned(), url.clone()]);
    }
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(bin)
            .args(&common)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    anyhow::ensure!(
        out.status.success(),
        "{} {}: {}",
        bin.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn targets(urls: &[String]) -> anyhow::Result<Vec<Target>> {
    urls.iter()
        .map(|u| Target::parse(u, CLAIM_PATH).map_err(anyhow::Error::msg))
        .collect()
}

/// Drives a baseline server with the scenario's load: the bare one, or with `redis` the
/// one making a round trip to that Redis per request.
pub(crate) async fn baseline(
    s: &Scenario,
    progress: bool,
    redis: Option<String>,
) -> anyhow::Result<Report> {
    let kind = baseline_kind(redis.as_deref());
    let server =
        tokio::task::spawn_blocking(move || BaselineProc::start_with(redis.as_deref())).await??;
    let mut spec = s.load_spec(targets(&[server.url()])?, run_tag("base"));
    spec.progress = progress;
    let cpu = Sampler::start(vec![
        Watched::load_generator(),
        Watched::new(Role::Baseline, kind.server_name(), server.pid()),
    ]);
    let r = loadgen::drive(spec, Arc::new(s.workload())).await;
    let mut report = Report::from_load("baseline", &s.name, &r);
    report.cpu = cpu.finish(report.requests);
    drop(server);
    Ok(report)
}

/// The processes a run accounts CPU for: the load generator, and the stack's when there
/// is one (an outside system's processes are not ours to read).
pub(crate) fn watched(stack: Option<&Stack>) -> Vec<Watched> {
    let mut w = vec![Watched::load_generator()];
    w.extend(stack.map(Stack::watched).unwrap_or_default());
    w
}

/// Drives the gateways and checks the invariants; `tag` prefixes users and request ids.
pub(crate) async fn against_system(
    sys: &SystemArgs,
    s: &Scenario,
    client: Option<&StockClient>,
    tag: String,
    progress: bool,
    watched: Vec<Watched>,
) -> anyhow::Result<Report> {
    let mut spec = s.load_spec(targets(&sys.targets)?, tag.clone());
    spec.progress = progress;
    if let Some(path) = &sys.token_secret_file {
        spec.tokens = Some(Arc::new(Tokens::load(path, s.users)?));
    }
    let workload = Arc::new(s.workload());
    let (ahead, w) = (spec.clone(), workload.clone());
    tokio::task::spawn_blocking(move || loadgen::generator::mint_ahead(&ahead, &w)).await?;
    let cpu = Sampler::start(watched);
    let r = loadgen::drive(spec, workload).await;
    let mut report = Report::from_load("run", &s.name, &r);
    report.cpu = cpu.finish(report.requests);
    let claims = &r.rec.claims;
    let mut checks = invariants::client_checks(s, claims);
    if let Some(c) = client {
        checks.extend(invariants::redis_checks(c, s, claims).await);
    }
    if let Some(url) = &sys.mysql {
        let db = Mysql::parse(url)?;
        let limit = Duration::from_secs(sys.drain_timeout_s);
        let ambiguous = Outcome::ALL
            .iter()
            .filter(|o| o.is_ambiguous())
            .map(|o| r.rec.count(*o))
            .sum();
        checks.extend(invariants::ledger_checks(&db, s, claims, &tag, limit, ambiguous).await);
        if let Some(bin) = &sys.consumer_bin {
            // Reconcile now, so the drift checked is measured after this run drained.
            for sku in &s.skus {
                if let Err(e) =
                    consumer(bin, sys, &["reconcile".to_owned(), sku.id.to_string()]).await
                {
                    eprintln!("warning: reconcile of SKU {}: {e:#}", sku.id);
                }
            }
        }
        checks.extend(invariants::drift_checks(&db, s).await);
    }
    report.invariants = Some(InvariantReport::new(checks));
    Ok(report)
}

mod external;
mod floor;

/// The Redis URL the chosen baseline talks to (`None`: the bare one).
fn baseline_redis(o: &RunOpts, sys: &SystemArgs) -> anyhow::Result<Option<String>> {
    match o.baseline_kind {
        BaselineKind::Bare => Ok(None),
        BaselineKind::Redis | BaselineKind::Claim if sys.redis.redis_cluster => {
            anyhow::bail!("--baseline-kind redis or claim needs a single Redis, not a cluster")
        }
        BaselineKind::Claim if o.external => {
            anyhow::bail!("--baseline-kind claim does not run with --external")
        }
        BaselineKind::Redis | BaselineKind::Claim => {
            Ok(Some(sys.redis.redis.clone().unwrap_or_else(|| {
                shard_router::args::DEFAULT_REDIS.to_owned()
            })))
        }
    }
}

fn baseline_kind(redis: Option<&str>) -> BaselineKind {
    if redis.is_some() {
        BaselineKind::Redis
    } else {
        BaselineKind::Bare
    }
}

/// `bench run`.
pub(crate) async fn run(o: &RunOpts) -> anyhow::Result<Report> {
    let mut s = o.scenario.scenario()?;
    let mut sys = o.system.clone();
    let stack = if o.stack {
        let st = Stack::start(&o.stack_opts).await?;
        eprint!("{}", st.describe());
        use_stack(&mut sys, &st, &mut s);
        Some(st)
    } else {
        None
    };
    let base = if o.compare_baseline {
        let redis = baseline_redis(o, &sys)?;
        eprintln!("baseline: {}, same load ...", o.baseline_kind.server_name());
        let mut b = match (o.baseline_kind, &redis) {
            (BaselineKind::Claim, Some(url)) => floor::drive(&sys, &s, !o.quiet, url).await?,
            _ => baseline(&s, !o.quiet, redis.clone()).await?,
        };
        if o.external {
            let d = std::time::Duration::from_secs_f64(b.measured_s.max(1.0));
            for &c in &o.external_client {
                let x = external::drive_baseline(o, &sys, &s, d, redis.clone(), c).await?;
                *external::slot(&mut b, c) = Some(x);
            }
        }
        Some(b)
    } else {
        None
    };
    let client = prepare(&sys, &s).await?;
    eprintln!("run: {} against {:?} ...", s.name, sys.targets);
    let w = watched(stack.as_ref());
    let mut report = against_system(&sys, &s, client.as_ref(), run_tag("b"), !o.quiet, w).await?;
    if let (true, Some(st)) = (o.external, stack.as_ref()) {
        for &c in &o.external_client {
            let x = external::drive(o, &sys, &s, st, report.measured_s, c).await?;
            *external::slot(&mut report, c) = Some(x);
        }
    }
    drop(stack);
    report.baseline = base.as_ref().map(|b| BaselineRatios::of(&report, b));
    write_outputs(o.out.as_deref(), &report, base.as_ref())?;
    Ok(report)
}

/// Writes report.json, report.md and timeline.svg (and the baseline's) into `dir`.
pub(crate) fn write_outputs(
    dir: Option<&Path>,
    r: &Report,
    base: Option<&Report>,
) -> anyhow::Result<()> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(r)?)?;
    let mut md = markdown::run_summary(r);
    if let Some(b) = base {
        md.push('\n');
        md.push_str(&markdown::run_summary(b));
        std::fs::write(dir.join("baseline.json"), serde_json::to_vec_pretty(b)?)?;
    }
    std::fs::write(dir.join("report.md"), md)?;
    std::fs::write(dir.join("timeline.svg"), svg::timeline(r))?;
    Ok(())
}
