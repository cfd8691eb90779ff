//! Private Redis for a run: a single node, or a cluster of masters joined by
//! `redis-cli --cluster create`. The processes are test-support's guards (the same ones the
//! tests use), so a failed or interrupted run leaves no server behind: each kills what it
//! started on `Drop`.

use shard_router::RedisTarget;
use test_support::RedisCluster;
pub use test_support::{free_port, try_wait_until as wait_until, RedisServer, ServerError};

use crate::stack::cpu::{Role, Watched};

/// Either kind of private Redis, as one value the callers can hold and drop.
pub enum LocalRedis {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl LocalRedis {
    /// Every master's process, for CPU accounting (these clusters have no replicas).
    pub fn watched(&self) -> Vec<Watched> {
        let pids: Vec<u32> = match self {
            Self::Single(r) => r.pid().into_iter().collect(),
            Self::Cluster(c) => c.nodes().iter().filter_map(RedisServer::pid).collect(),
        };
        let n = pids.len();
        pids.into_iter()
            .enumerate()
            .map(|(i, pid)| {
                let name = if n == 1 {
                    "redis-server".to_owned()
                } else {
                    format!("redis-server {i}")
                };
                Watched::new(Role::RedisMaster, name, pid)
            })
            .collect()
    }

    /// Starts a single node, or a cluster of `masters` when `masters > 1`, set as
    /// deployments run Redis (`hash-max-listpack-entries 32`, docs/OPERATIONS.md "Bounds"),
    /// so that a run's first users per shard cost what they cost there.
    pub fn start(masters: usize) -> Result<Self, ServerError> {
        let redis = if masters <= 1 {
            RedisServer::try_start_with(&["--hash-max-listpack-entries", "32"]).map(Self::Single)?
        } else {
            let cluster = RedisCluster::try_start(masters, 0)?;
            for node in cluster.nodes() {
                redis::cmd("CONFIG")
                    .arg(&["SET", "hash-max-listpack-entries", "32"])
                    .query::<()>(&mut node.connection())
                    .map_err(|e| ServerError::Failed {
                        what: format!("CONFIG SET on {}", node.url()),
                        detail: e.to_string(),
                    })?;
            }
            Self::Cluster(cluster)
        };
        Ok(redis)
    }

    pub fn target(&self) -> RedisTarget {
        match self {
            Self::Single(n) => RedisTarget::Single(n.url()),
            Self::Cluster(c) => RedisTarget::Cluster(c.urls()),
        }
    }

    /// `host:port[,host:port...]`, as the gateway and consumer flags take it.
    pub fn addr_list(&self) -> String {
        let ports: Vec<u16> = match self {
            Self::Single(n) => vec![n.port()],
            Self::Cluster(c) => c.nodes().iter().map(RedisServer::port).collect(),
        };
        ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}
