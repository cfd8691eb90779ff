//! The Redis and shard settings every flashgate process takes: `--redis`, `--redis-cluster`
//! and `--shards` with their `FLASHGATE_*` variables, defined once here and flattened
//! (`#[command(flatten)]`) into the gateway's, the consumer's and bench's command lines,
//! so a deployment's shared settings (deploy/compose/docker-compose.yml) mean the same to
//! every process.

use clap::Args;

use crate::client::StockConfig;
use crate::conn::RedisTarget;
use crate::error::StockError;
use crate::placement::{DEFAULT_SHARDS, MAX_SHARDS};

/// `--redis` when neither the flag nor `FLASHGATE_REDIS` is given.
pub const DEFAULT_REDIS: &str = "redis://127.0.0.1:6379";

/// Where the stock lives and how it is sharded.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct RedisArgs {
    /// Redis URL, or with `--redis-cluster` a comma-separated list of seed nodes
    /// (`host:port` means `redis://host:port`). Default redis://127.0.0.1:6379; bench
    /// checks nothing in Redis without it.
    #[arg(long, env = "FLASHGATE_REDIS", global = true)]
    pub redis: Option<String>,
    /// Treat `--redis` as Redis Cluster seed nodes.
    #[arg(long, env = "FLASHGATE_REDIS_CLUSTER", global = true)]
    pub redis_cluster: bool,
    /// Stock shard count S; the same for every process, fixed for the deployment's life.
    #[arg(long, env = "FLASHGATE_SHARDS", default_value_t = DEFAULT_SHARDS, global = true)]
    pub shards: u16,
}

/// One bad setting, printed as one line that names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {setting}: {reason}")]
pub struct SettingError {
    pub setting: &'static str,
    pub reason: String,
}

impl SettingError {
    pub fn new(setting: &'static str, reason: impl Into<String>) -> Self {
        Self {
            setting,
            reason: reason.into(),
        }
    }
}

impl RedisArgs {
    /// The flags that name `target` with `shards` (the inverse of [`Self::target`]).
    pub fn of(target: &RedisTarget, shards: u16) -> Self {
        let (spec, redis_cluster) = match target {
            RedisTarget::Single(url) => (url.clone(), false),
            RedisTarget::Cluster(nodes) => (nodes.join(","), true),
        };
        Self {
            redis: Some(spec),
            redis_cluster,
            shards,
        }
    }

    /// The Redis to use: `--redis` (or [`DEFAULT_REDIS`]) read as one node, or as seed
    /// nodes with `--redis-cluster`.
    pub fn target(&self) -> Result<RedisTarget, SettingError> {
        let spec = self.redis.as_deref().unwrap_or(DEFAULT_REDIS);
        RedisTarget::parse(spec, self.redis_cluster).map_err(|e| {
            let reason = match e {
                StockError::InvalidArgument(why) => why,
                other => other.to_string(),
            };
            SettingError::new("--redis", reason)
        })
    }

    /// `--shards` once it is within 1..=[`MAX_SHARDS`].
    pub fn valid_shards(&self) -> Result<u16, SettingError> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(SettingError::new(
                "--shards",
                format!("{} is outside 1..={MAX_SHARDS}", self.shards),
            ));
        }
        Ok(self.shards)
    }

    /// Stock client settings with the default timeouts.
    pub fn stock_config(&self) -> Result<StockConfig, SettingError> {
        Ok(StockConfig::new(self.target()?, self.valid_shards()?))
    }

    /// The same settings as arguments of another flashgate process.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::with_capacity(5);
        if let Some(spec) = &self.redis {
            args.extend(["--redis".to_owned(), spec.clone()]);
        }
        if self.redis_cluster {
            args.push("--redis-cluster".to_owned());
        }
        args.extend(["--shards".to_owned(), self.shards.to_string()]);
        args
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        redis: RedisArgs,
    }

    fn parse(args: &[&str]) -> Result<RedisArgs, clap::Error> {
        let mut cmd = <Cli as clap::CommandFactory>::command();
        // Unit tests must not read the FLASHGATE_* variables of whoever runs them.
        cmd = cmd.mut_args(|a| a.env(None::<&str>));
        let m = cmd.try_get_matches_from(std::iter::once("t").chain(args.iter().copied()))?;
        <Cli as clap::FromArgMatches>::from_arg_matches(&m).map(|c| c.redis)
    }

    #[test]
    fn defaults_are_one_local_node_and_sixteen_shards() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.target(), Ok(RedisTarget::Single(DEFAULT_REDIS.into())));
        assert_eq!(a.valid_shards(), Ok(DEFAULT_SHARDS));
        assert_eq!(DEFAULT_SHARDS, 16, "README's settings table says 16");
    }

    #[test]
    fn cluster_seeds_and_bare_addresses() {
        let a = parse(&["--redis", "a:1, redis://b:2", "--redis-cluster"]).unwrap();
        assert_eq!(
            a.target(),
            Ok(RedisTarget::Cluster(vec![
                "redis://a:1".into(),
                "redis://b:2".into()
            ]))
        );
        assert_eq!(
            RedisArgs::of(&a.target().unwrap(), a.shards).target(),
            a.target()
        );
    }

    #[test]
    fn bad_input_is_one_line_naming_the_flag() {
        let cases: [(&[&str], &str); 4] = [
            (&["--redis", "a:1,b:2"], "--redis"),
            (&["--redis", " , "], "--redis"),
            (&["--shards", "0"], "--shards"),
            (&["--shards", "5000"], "--shards"),
        ];
        for (args, setting) in cases {
            let a = parse(args).unwrap();
            let err = a.stock_config().unwrap_err();
            assert_eq!(err.setting, setting, "{args:?}: {err}");
            assert!(!err.to_string().contains('\n'), "one line: {err}");
        }
        assert!(parse(&["--shards", "x"]).is_err());
    }

    #[test]
    fn to_args_round_trips() {
        for args in [
            &["--redis", "redis://h:1"][..],
            &["--redis", "a:1,b:2", "--redis-cluster", "--shards", "4"][..],
            &[][..],
        ] {
            let a = parse(args).unwrap();
            let again: Vec<String> = a.to_args();
            let again: Vec<&str> = again.iter().map(String::as_str).collect();
            assert_eq!(parse(&again).unwrap(), a, "{args:?}");
        }
    }
}
