//! One connection type for a single Redis and for Redis Cluster, so every caller (scripts,
//! stream reads, admin commands) is written once.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::error::StockError;

/// Where Redis is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// `redis://host:port[/db]`
    Single(String),
    /// Seed nodes of a cluster (`redis://host:port` each); the rest is discovered.
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// Parses the `--redis` / `--redis-cluster` style of configuration: a cluster when
    /// `cluster` is true, the comma-separated list being its seed nodes.
    pub fn parse(spec: &str, cluster: bool) -> Result<Self, StockError> {
        let urls: Vec<String> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                if s.contains("://") {
                    s.to_owned()
                } else {
                    format!("redis://{s}")
                }
            })
            .collect();
        match (cluster, urls.len()) {
            (_, 0) => Err(StockError::InvalidArgument("no redis address given".into())),
            (false, 1) => Ok(Self::Single(urls[0].clone())),
            (false, _) => Err(StockError::InvalidArgument(
                "several redis addresses given without cluster mode".into(),
            )),
            (true, _) => Ok(Self::Cluster(urls)),
        }
    }
}

/// Connection bounds. Every call also runs under `response` as an outer timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub response: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_millis(500),
            response: Duration::from_millis(500),
        }
    }
}

/// A cheap-to-clone, auto-reconnecting connection to a single Redis or a cluster.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// `rediss://` needs a process-wide rustls crypto provider. The workspace builds rustls with
/// ring only (workspace `Cargo.toml`); installing it here, before any connection, means no
/// binary needs a setup step of its own. A provider installed earlier is kept.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl RedisConn {
    /// `read_from_replicas`: on a cluster, read-only commands go to a replica of the slot
    /// (redis-rs's `read_from_replicas`); ignored for a single Redis.
    pub async fn connect(
        target: &RedisTarget,
        t: Timeouts,
        read_from_replicas: bool,
    ) -> Result<Self, StockError> {
        install_tls_provider();
        let err = |source| StockError::Redis {
            op: "connect",
            source,
        };
        let fut = async {
            match target {
                RedisTarget::Single(url) => {
                    let client = redis::Client::open(url.as_str()).map_err(err)?;
                    let cfg = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(t.connect))
                        .set_response_timeout(Some(t.response))
                        .set_number_of_retries(2)
                        .set_max_delay(Duration::from_millis(200));
                    let cm = ConnectionManager::new_with_config(client, cfg)
                        .await
                        .map_err(err)?;
                    Ok(Self::Single(cm))
                }
                RedisTarget::Cluster(nodes) => {
                    // No client-side retries: redis-rs re-sends a command whose
                    // connection dropped, and a claim script run twice takes a unit the
                    // client never hears of. A dropped or redirected call surfaces as an
                    // error (a 503 for the claim, ambiguous when it was sent); the slot map
                    // is refreshed for the next call.
                    let mut builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                        .connection_timeout(t.connect)
                        .response_timeout(t.response)
                        .retries(0);
                    if read_from_replicas {
                        builder = builder.read_routing_strategy(
                            redis::cluster_read_routing::RandomReplicaStrategy,
                        );
                    }
                    let client = builder.build().map_err(err)?;
                    Ok(Self::Cluster(
                        client.get_async_connection().await.map_err(err)?,
                    ))
                }
            }
        };
        // Connecting may retry internally; bound the whole attempt.
        let bound = t.connect * 4;
        tokio::time::timeout(bound, fut)
            .await
            .map_err(|_| StockError::Timeout {
                op: "connect",
                after: bound,
            })?
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Sends `cmd` to the master serving `slot` only: on a cluster this bypasses the
    /// key-based routing (and the fan-out to every master that commands like PING get), so
    /// one master's trouble says nothing about the others. A single Redis serves every slot.
    pub async fn on_slot_master(&mut self, cmd: Cmd, slot: u16) -> RedisResult<Value> {
        match self {
            Self::Single(c) => c.req_packed_command(&cmd).await,
            Self::Cluster(c) => {
                let route = Route::new(slot, SlotAddr::Master);
                c.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
            }
        }
    }
}

impl RedisConn {
    /// Sends `pipe` to the master serving `slot` only, as one write on one connection: its
    /// replies all come from one server process (see [`Self::on_slot_master`]).
    pub async fn pipeline_on_slot_master(
        &mut self,
        pipe: &Pipeline,
        slot: u16,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Self::Single(c) => pipe.query_async(c).await,
            Self::Cluster(c) => {
                let route = Route::new(slot, SlotAddr::Master);
                c.route_pipeline(
                    pipe.clone(),
                    0,
                    pipe.len(),
                    SingleNodeRoutingInfo::SpecificNode(route),
                )
                .await
            }
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}
