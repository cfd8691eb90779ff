//! What [`Config::validate`] hands to `run` (lib.rs): the checked settings in the types
//! they are used as, so `run` converts nothing and cannot see an unchecked value.

use std::time::Duration;

use plumbing::ServeOpts;
use shard_router::{RedisTarget, StockConfig};

use super::{bad, ms, Config, ConfigError};
use crate::metrics;

/// Connections the admin listener (`/metrics`, probes) accepts at most.
const ADMIN_MAX_CONNECTIONS: usize = 64;

/// The checked settings of one gateway.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Redis target, shard count, timeouts and the replica WAIT of every claim.
    pub stock: StockConfig,
    /// Nodes the event subscriber connects to, in turn.
    pub pubsub_nodes: PubsubNodes,
    /// Bound on a Pub/Sub connect and ping: the longer of the two Redis timeouts.
    pub pubsub_timeout: Duration,
    pub cache_ttl: Duration,
    pub unknown_sku_ttl: Duration,
    pub probe_interval: Duration,
    pub body_timeout: Duration,
    pub drain_delay: Duration,
    /// The claim API listener.
    pub api: ServeOpts,
    /// The admin listener: the API's bounds with a small connection cap.
    pub admin: ServeOpts,
}

impl Settings {
    pub(super) fn new(cfg: &Config, stock: StockConfig) -> Result<Self, ConfigError> {
        let pubsub_nodes = PubsubNodes::of(&stock.target)
            .ok_or_else(|| bad("--redis", "no redis address given"))?;
        let api = ServeOpts {
            max_connections: cfg.max_connections,
            header_timeout: ms(cfg.header_timeout_ms),
            max_header_bytes: cfg.max_header_bytes,
            write_timeout: ms(cfg.write_timeout_ms),
            max_age: ms(cfg.max_connection_age_ms),
            grace: ms(cfg.shutdown_grace_ms),
            connections_gauge: Some(metrics::CONNECTIONS),
        };
        Ok(Self {
            pubsub_nodes,
            pubsub_timeout: stock.timeouts.connect.max(stock.timeouts.response),
            stock,
            cache_ttl: ms(cfg.cache_ttl_ms),
            unknown_sku_ttl: ms(cfg.unknown_sku_ttl_ms),
            probe_interval: ms(cfg.probe_interval_ms),
            body_timeout: ms(cfg.body_timeout_ms),
            drain_delay: ms(cfg.drain_delay_ms),
            admin: ServeOpts {
                max_connections: ADMIN_MAX_CONNECTIONS,
                ..api.clone()
            },
            api,
        })
    }
}

/// Node URLs to subscribe to, at least one by construction (any node of a cluster
/// receives every PUBLISH, so the subscriber needs one and tries the next on failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubsubNodes {
    first: String,
    rest: Vec<String>,
}

impl PubsubNodes {
    /// The target's node, or its seed nodes; `None` for a cluster without seeds.
    pub fn of(target: &RedisTarget) -> Option<Self> {
        let nodes = match target {
            RedisTarget::Single(url) => std::slice::from_ref(url),
            RedisTarget::Cluster(nodes) => nodes.as_slice(),
        };
        let (first, rest) = nodes.split_first()?;
        Some(Self {
            first: first.clone(),
            rest: rest.to_vec(),
        })
    }

    /// The node of connection attempt `attempt`: every node in turn.
    pub fn pick(&self, attempt: usize) -> &str {
        match attempt % (self.rest.len() + 1) {
            0 => &self.first,
            i => &self.rest[i - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pubsub_nodes_are_never_empty_and_taken_in_turn() {
        assert_eq!(PubsubNodes::of(&RedisTarget::Cluster(Vec::new())), None);
        let one = PubsubNodes::of(&RedisTarget::Single("redis://a".into())).unwrap();
        assert_eq!((one.pick(0), one.pick(7)), ("redis://a", "redis://a"));
        let seeds = RedisTarget::Cluster(vec!["a".into(), "b".into(), "c".into()]);
        let three = PubsubNodes::of(&seeds).unwrap();
        let picked: Vec<&str> = (0..7).map(|i| three.pick(i)).collect();
        assert_eq!(picked, ["a", "b", "c", "a", "b", "c", "a"]);
    }

    #[test]
    fn settings_carry_the_flags_as_durations() {
        use clap::Parser;
        let cfg = Config::parse_from([
            "gw",
            "--listen",
            "127.0.0.1:8080",
            "--redis",
            "a:1,b:2",
            "--redis-cluster",
            "--redis-connect-timeout-ms",
            "700",
            "--redis-timeout-ms",
            "300",
            "--durability",
            "replica",
            "--wait-ms",
            "40",
        ]);
        let s = cfg.validate().unwrap();
        assert_eq!(s.pubsub_nodes.pick(1), "redis://b:2");
        assert_eq!(s.pubsub_timeout, Duration::from_millis(700));
        assert_eq!(s.stock.timeouts.response, Duration::from_millis(300));
        assert_eq!(s.stock.replica_ack, Some(Duration::from_millis(40)));
        assert_eq!(s.stock.shards, 16);
        assert_eq!(s.admin.max_connections, ADMIN_MAX_CONNECTIONS);
        assert_eq!(s.admin.header_timeout, s.api.header_timeout);
        assert_eq!(s.drain_delay, Duration::from_millis(4_000));
    }
}
