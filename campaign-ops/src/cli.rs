//! Command-line interface of the consumer binary: `run` (the service) and the campaign
//! admin subcommands, which work against MySQL and Redis directly.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use shard_router::RedisArgs;

use crate::campaign::Campaign;
use crate::times;
use crate::Config;
use consumer::config;

#[derive(Debug, Parser)]
#[command(
    name = "consumer",
    about = "flashgate claims consumer, ledger and campaign admin"
)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Settings every subcommand needs.
#[derive(Debug, Args)]
pub struct Common {
    /// `--redis`, `--redis-cluster`, `--shards` (shared by every process:
    /// shard-router/src/args.rs).
    #[command(flatten)]
    pub redis: RedisArgs,
    /// mysql://user:pass@host:port/db
    #[arg(
        long,
        env = "FLASHGATE_MYSQL_URL",
        default_value = config::DEFAULT_MYSQL_URL,
        global = true
    )]
    pub mysql: String,
    /// Log line format: `text` for terminals, `json` (one object per line) for a log
    /// pipeline. `RUST_LOG` sets the levels.
    #[arg(long, env = "FLASHGATE_LOG_FORMAT", value_enum, default_value_t = telemetry::LogFormat::Text, global = true)]
    pub log_format: telemetry::LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the consumer service (streams → ledger, release, reconciliation).
    Run(Box<RunArgs>),
    /// Apply the migrations and exit.
    Migrate,
    /// Create or update a campaign in MySQL.
    Campaign(CampaignArgs),
    /// Preheat Redis from a stored campaign (live slices are never overwritten). Once the
    /// ledger holds claims of the SKU this is `rebuild`.
    Preheat { sku: u64 },
    /// Rebuild a SKU's Redis state (slices, user counts and sequences, release sets, replay
    /// answers) from the ledger and the claims in flight. Claims on the SKU answer "not
    /// preheated" while it runs; safe to run again after a crash.
    Rebuild { sku: u64 },
    /// Show a campaign's ledger and Redis state.
    Status { sku: u64 },
    /// Mark a claim paid.
    Confirm { claim_id: String },
    /// Cancel a claim: units back to Redis, once.
    Cancel { claim_id: String },
    /// Reconcile one SKU (invariant `books-close` (docs/DESIGN.md)) and print the report; takes excess out of the slices.
    Reconcile { sku: u64 },
    /// Release a stock wave now (or at --at): slices grow, gateways hear `restock`.
    Wave(WaveArgs),
    /// Close a finished campaign: closing report, Redis keys removed, no more reconciling.
    Close { sku: u64 },
    /// A draw campaign: `show` its state (the seed once drawn), `verify` it from the ledger.
    Draw {
        #[command(subcommand)]
        command: DrawCommand,
    },
    /// List the stream entries kept in the ledger instead of a claim row (`stream_poison`:
    /// not claim records, or rows MySQL refused), oldest first; `replay` applies them.
    Poison {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        #[command(subcommand)]
        command: Option<PoisonCommand>,
    },
}

/// `consumer poison ...`.
#[derive(Debug, Subcommand)]
pub enum PoisonCommand {
    /// Apply poison entries once their cause is fixed: each entry's claim goes into the
    /// ledger (ignored by claim id, stock taken once) and its poison row is deleted, in one
    /// transaction; entries that still fail stay and are reported (exit 1).
    Replay {
        /// The entry's stream key (`consumer poison` lists it), with --entry.
        #[arg(long, requires = "entry", conflicts_with = "all")]
        stream: Option<String>,
        /// The entry's id, with --stream.
        #[arg(long, requires = "stream")]
        entry: Option<String>,
        /// Every kept entry instead, oldest first, at most --limit of them.
        #[arg(long, required_unless_present = "stream")]
        all: bool,
        /// With --all: at most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
}

/// `consumer draw ...`.
#[derive(Debug, Subcommand)]
pub enum DrawCommand {
    /// The draw's state: draw time, seed digest, entrants, ranks granted, the seed once drawn.
    Show { sku: u64 },
    /// Recompute the draw from the ledger and the revealed seed; exits 1 unless verified.
    Verify { sku: u64 },
}

/// How a campaign sells; fixed once it is preheated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// First come, first served.
    Fcfs,
    /// A raffle: entries until --draw-at, then a verifiable draw (docs/DESIGN.md "The draw").
    Draw,
    /// First come, first served behind a waiting room that admits users as the stock
    /// allows (docs/DESIGN.md "The waiting room").
    Queue,
}

/// `consumer run`: the service's settings (config.rs) and where its admin token is.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: Config,
    /// File holding the bearer token of the admin API (at least 16 bytes; a trailing
    /// newline is ignored). The token may instead come from the environment variable
    /// FLASHGATE_ADMIN_TOKEN; never from a flag, since argv is visible in `ps`. Neither
    /// set: the admin API is off (only /metrics and /healthz answer).
    #[arg(long, env = "FLASHGATE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Refused with a clear error: a token on the command line is visible in `ps`.
    #[arg(long = "admin-token", hide = true)]
    pub admin_token_argv: Option<String>,
}

/// `consumer campaign`: every flag but --sku and --stock has a default.
#[derive(Debug, Args)]
pub struct CampaignArgs {
    /// SKU id of the campaign (one campaign per SKU).
    #[arg(long)]
    pub sku: u64,
    /// Free-text name shown by `consumer status` (at most 200 bytes).
    #[arg(long, default_value = "")]
    pub name: String,
    /// Units released at the start; waves add more later. Cannot change once preheated.
    #[arg(long)]
    pub stock: u64,
    /// Shards the stock is split over (1..=--shards); fixed once the campaign exists.
    #[arg(long, default_value_t = 1)]
    pub width: u16,
    /// Units one user may hold at most.
    #[arg(long, default_value_t = 1)]
    pub limit: u32,
    /// Sale start: RFC 3339 (2026-12-01T10:00:00Z), now, now+10m, or ms since the epoch.
    #[arg(long = "start", visible_alias = "start-ms", default_value = "now")]
    pub start: String,
    /// Sale end (same forms as --start); must be after the start.
    #[arg(long = "end", visible_alias = "end-ms")]
    pub end: String,
    /// Seconds a claim may stay unpaid before it is released back to the stock.
    #[arg(long, default_value_t = 900)]
    pub payment_timeout_s: u32,
    /// A stock wave, <time>=<units> (e.g. 2026-12-01T10:30:00Z=200 or now+10m=200); repeat
    /// for more. The consumer adds the units to the slices when the time comes.
    #[arg(long = "wave", value_name = "TIME=UNITS")]
    pub waves: Vec<String>,
    /// How the campaign sells: fcfs, or draw (entries from --start to --draw-at, winners
    /// claim until --end).
    #[arg(long, value_enum, default_value_t = ModeArg::Fcfs)]
    pub mode: ModeArg,
    /// Draw mode: when entries close and the draw runs (same forms as --start).
    #[arg(long = "draw-at")]
    pub draw_at: Option<String>,
    /// Draw mode: entrants ranked after the winners, served in order as units come back.
    #[arg(long, default_value_t = 0)]
    pub waitlist: u32,
}

impl CampaignArgs {
    /// The campaign and its waves `(due_ms, units)`; a bad time names the flag.
    pub fn campaign(&self, now_ms: i64) -> Result<(Campaign, Vec<(i64, u64)>), String> {
        let at =
            |flag: &str, v: &str| times::parse_ms(v, now_ms).map_err(|e| format!("--{flag} {e}"));
        let waves = self
            .waves
            .iter()
            .map(|w| times::parse_wave(w, now_ms))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((
            Campaign {
                sku: self.sku,
                name: self.name.clone(),
                stock: self.stock,
                width: self.width,
                limit: self.limit,
                start_ms: at("start", &self.start)?,
                end_ms: at("end", &self.end)?,
                payment_timeout_s: self.payment_timeout_s,
            },
            waves,
        ))
    }
}

impl CampaignArgs {
    /// The draw's time and waitlist in draw mode; `None` in fcfs. A draw flag without
    /// `--mode draw`, or draw mode without `--draw-at`, names the flag.
    pub fn draw(&self, now_ms: i64) -> Result<Option<(i64, u32)>, String> {
        match (self.mode, &self.draw_at) {
            (ModeArg::Fcfs | ModeArg::Queue, None) if self.waitlist == 0 => Ok(None),
            (ModeArg::Fcfs | ModeArg::Queue, _) => {
                Err("--draw-at and --waitlist need --mode draw".into())
            }
            (ModeArg::Draw, None) => Err("--mode draw needs --draw-at".into()),
            (ModeArg::Draw, Some(at)) => {
                let at = times::parse_ms(at, now_ms).map_err(|e| format!("--draw-at {e}"))?;
                Ok(Some((at, self.waitlist)))
            }
        }
    }
}

/// `consumer wave`: releases more stock of a running campaign.
#[derive(Debug, Args)]
pub struct WaveArgs {
    /// SKU of the campaign.
    pub sku: u64,
    /// Units to add (split evenly over the SKU's shards).
    pub units: u64,
    /// Wave id (1..=64 bytes), e.g. round-2: a retry with the same id never adds the wave
    /// twice; the same id with other units is refused.
    #[arg(long)]
    pub id: String,
    /// When to release it (same forms as campaign --start); default now.
    #[arg(long, default_value = "now")]
    pub at: String,
}

impl Cli {
    /// The configuration of this invocation: the global settings over `run`'s (the
    /// defaults for the admin subcommands), with the admin token read; the error names
    /// the setting.
    pub fn config(&self) -> Result<Config, String> {
        let redis = self.common.redis.target().map_err(|e| e.to_string())?;
        let shards = self
            .common
            .redis
            .valid_shards()
            .map_err(|e| e.to_string())?;
        let mut cfg = match &self.command {
            Command::Run(run) => Config {
                datapath: run.config.datapath.clone().named(),
                admin_token: run.admin_token(std::env::var(ENV_ADMIN_TOKEN).ok())?,
                ..run.config.clone()
            },
            _ => Config::defaults(),
        };
        cfg.datapath.redis = redis;
        cfg.datapath.shards = shards;
        cfg.datapath.mysql_url = self.common.mysql.clone();
        Ok(cfg)
    }
}

/// Environment variable that may carry the admin token.
pub const ENV_ADMIN_TOKEN: &str = "FLASHGATE_ADMIN_TOKEN";

impl RunArgs {
    /// The admin token from `--admin-token-file` or [`ENV_ADMIN_TOKEN`] (`env_token`),
    /// never from argv; the error names the setting.
    pub fn admin_token(&self, env_token: Option<String>) -> Result<Option<String>, String> {
        if self.admin_token_argv.is_some() {
            return Err(format!(
                "--admin-token: a token on the command line is visible in `ps`; put it in a \
                 file named by --admin-token-file or in {ENV_ADMIN_TOKEN}"
            ));
        }
        let env_token = env_token.filter(|t| !t.is_empty());
        match (&self.admin_token_file, env_token) {
            (Some(_), Some(_)) => Err(format!(
                "--admin-token-file and {ENV_ADMIN_TOKEN} are both set; set one"
            )),
            (Some(path), None) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("--admin-token-file {}: {e}", path.display()))?;
                let token = text.trim_end_matches(['\r', '\n']);
                if token.is_empty() {
                    return Err(format!("--admin-token-file {}: empty", path.display()));
                }
                Ok(Some(token.to_owned()))
            }
            (None, t) => Ok(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use shard_router::RedisTarget;

    use super::*;
    use consumer::replica::ReplicaWait;

    fn cli(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("consumer").chain(args.iter().copied()))
    }

    #[test]
    fn run_flags_and_global_flags_land_in_one_config() {
        let c = cli(&[
            "--shards",
            "4",
            "run",
            "--redis",
            "a:1,b:2",
            "--redis-cluster",
            "--batch-max-wait-ms",
            "7",
            "--replica-wait",
            "always",
            "--replica-wait-ms",
            "0",
            "--auto-close",
            "false",
            "--consumer-name",
            "c1",
        ])
        .unwrap()
        .config()
        .unwrap();
        let seeds = vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()];
        let d = &c.datapath;
        assert_eq!((&d.redis, d.shards), (&RedisTarget::Cluster(seeds), 4));
        assert_eq!(d.batch_max_wait, Duration::from_millis(7));
        // A zero bound would make WAIT block forever: it is raised to 1 ms.
        assert_eq!(
            d.replica_wait,
            ReplicaWait::Always(Duration::from_millis(1))
        );
        assert_eq!((c.auto_close, d.consumer_name.as_str()), (false, "c1"));
        let off = cli(&["run", "--replica-wait", "off"])
            .unwrap()
            .config()
            .unwrap();
        assert_eq!(off.datapath.replica_wait, ReplicaWait::Off);
    }

    /// `consumer run` with no flags and [`Config::new`] come from the same definitions.
    #[test]
    fn run_without_flags_is_the_library_default() {
        let named = |mut c: Config| {
            c.datapath.consumer_name = "n".into();
            c.datapath.mysql_url = "m".into();
            format!("{c:?}")
        };
        let run = cli(&["run", "--redis", "redis://x"])
            .unwrap()
            .config()
            .unwrap();
        let lib = Config::new(RedisTarget::Single("redis://x".into()), 16, "m");
        assert_eq!(named(run), named(lib));
        let status = cli(&["status", "1"]).unwrap().config().unwrap();
        assert_eq!(
            status.datapath.batch_max_rows,
            config::DEFAULT_BATCH_MAX_ROWS
        );
    }

    #[test]
    fn bad_settings_are_one_line_naming_the_flag() {
        for (args, flag) in [
            (&["--redis", "a:1,b:2", "status", "1"][..], "--redis"),
            (&["--shards", "0", "status", "1"][..], "--shards"),
        ] {
            let e = cli(args).unwrap().config().unwrap_err();
            assert!(
                e.starts_with(&format!("invalid {flag}:")) && !e.contains('\n'),
                "{e}"
            );
        }
        let e = cli(&["run", "--lease-ms", "soon"]).unwrap_err().to_string();
        let first = e.lines().next().unwrap();
        assert!(
            first.contains("--lease-ms") && first.contains("soon"),
            "{e}"
        );
    }

    fn run_args(args: &[&str]) -> RunArgs {
        let mut all = vec!["consumer", "run"];
        all.extend_from_slice(args);
        match Cli::try_parse_from(all).unwrap().command {
            Command::Run(a) => *a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn admin_token_never_from_argv() {
        let err = run_args(&["--admin-token", "0123456789abcdef0"])
            .admin_token(None)
            .unwrap_err();
        assert!(err.starts_with("--admin-token:"), "{err}");
    }

    #[test]
    fn admin_token_from_env_or_file_but_not_both() {
        let a = run_args(&[]);
        assert_eq!(a.admin_token(None).unwrap(), None);
        assert_eq!(
            a.admin_token(Some("from-env-0123456789".into())).unwrap(),
            Some("from-env-0123456789".into())
        );
        let path = std::env::temp_dir().join(format!("fg-token-{}", std::process::id()));
        std::fs::write(&path, "from-file-0123456789\n").unwrap();
        let a = run_args(&["--admin-token-file", path.to_str().unwrap()]);
        assert_eq!(
            a.admin_token(None).unwrap(),
            Some("from-file-0123456789".into())
        );
        assert!(a.admin_token(Some("x".repeat(20))).is_err());
        std::fs::remove_file(&path).unwrap();
        let err = a.admin_token(None).unwrap_err();
        assert!(err.starts_with("--admin-token-file"), "{err}");
    }
}
