//! Private `redis-server` processes the bench starts for itself: a single node, or a
//! 3-master cluster joined by `redis-cli --cluster create`. Each guard kills what it started
//! on `Drop`, so a failed or interrupted run leaves no server behind. The bench must not
//! depend on `test-support` at run time, hence this small copy of its approach.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shard_router::RedisTarget;

use crate::stack::cpu::{Role, Watched};

/// How long a server may take to answer after spawn. Generous: the machine is shared.
const START_LIMIT: Duration = Duration::from_secs(15);
/// How long a fresh cluster may take to reach `cluster_state:ok` on every node.
const CLUSTER_OK_LIMIT: Duration = Duration::from_secs(30);

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("spawn {program}: {source} (is it installed?)")]
    Spawn {
        program: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: not ready after {after:?}")]
    NotReady { what: String, after: Duration },
    #[error("{what}: {detail}")]
    Failed { what: String, detail: String },
    #[error("no free loopback port: {0}")]
    NoPort(#[source] std::io::Error),
}

/// A loopback port that is free now, and whose cluster bus port (`+10000`) is free too.
/// Another process may take it before we bind; good enough for a private bench.
pub fn free_port() -> Result<u16, ServerError> {
    for _ in 0..200 {
        let l = TcpListener::bind(("127.0.0.1", 0)).map_err(ServerError::NoPort)?;
        let port = l.local_addr().map_err(ServerError::NoPort)?.port();
        if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return Ok(port);
        }
    }
    Err(ServerError::NoPort(std::io::Error::other(
        "200 picks without a free bus port",
    )))
}

/// Polls `probe` every 50 ms until it is true or `limit` passes.
pub fn wait_until(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> bool,
) -> Result<(), ServerError> {
    let deadline = Instant::now() + limit;
    while !probe() {
        if Instant::now() >= deadline {
            return Err(ServerError::NotReady {
                what: what.to_owned(),
                after: limit,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A `redis-server` that persists nothing, killed on drop.
pub struct RedisProc {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisProc {
    /// Starts a node on a free port with extra arguments and waits for PING.
    pub fn start(extra: &[&str]) -> Result<Self, ServerError> {
        let port = free_port()?;
        let dir =
            std::env::temp_dir().join(format!("fg-bench-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| ServerError::Failed {
            what: format!("create {}", dir.display()),
            detail: e.to_string(),
        })?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| ServerError::Spawn {
                program: "redis-server",
                source,
            })?;
        // From here on, Drop owns the process even if the wait fails.
        let me = Self {
            child: Some(child),
            port,
            dir,
        };
        let url = me.url();
        wait_until(&format!("redis-server :{port}"), START_LIMIT, || {
            node_query(&url, &["PING"]).is_ok()
        })?;
        Ok(me)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One short-lived command on a node (`PING`, `INFO replication`, `CLUSTER INFO`), bounded.
fn node_query(url: &str, args: &[&str]) -> redis::RedisResult<String> {
    let client = redis::Client::open(url)?;
    let mut c = client.get_connection_with_timeout(Duration::from_millis(200))?;
    c.set_read_timeout(Some(Duration::from_millis(500)))?;
    redis::cmd(args[0]).arg(&args[1..]).query(&mut c)
}

impl RedisProc {
    /// Starts a replica of `primary` and waits until its link is up and the first sync
    /// is done, so a measured run does not begin with the initial sync.
    pub fn start_replica_of(primary: &RedisProc) -> Result<Self, ServerError> {
        let p = primary.port().to_string();
        let replica = Self::start(&["--replicaof", "127.0.0.1", &p])?;
        let url = replica.url();
        wait_until(
            &format!("replica :{} in sync", replica.port()),
            START_LIMIT * 3,
            || {
                node_query(&url, &["INFO", "replication"]).is_ok_and(|i| {
                    i.contains("master_link_status:up") && i.contains("master_sync_in_progress:0")
                })
            },
        )?;
        Ok(replica)
    }
}

/// A local Redis Cluster of `masters` nodes without replicas.
pub struct RedisClusterProc {
    nodes: Vec<RedisProc>,
}

impl RedisClusterProc {
    pub fn start(masters: usize) -> Result<Self, ServerError> {
        let nodes = (0..masters)
            .map(|_| {
                RedisProc::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ServerError::Spawn {
                program: "redis-cli",
                source,
            })?;
        if !out.status.success() {
            return Err(ServerError::Failed {
                what: "redis-cli --cluster create".into(),
                detail: String::from_utf8_lossy(&out.stdout).into_owned(),
            });
        }
        for n in &nodes {
            let url = n.url();
            wait_until(
                &format!("cluster_state:ok on :{}", n.port()),
                CLUSTER_OK_LIMIT,
                || {
                    node_query(&url, &["CLUSTER", "INFO"]).is_ok_and(|i| {
                        i.contains("cluster_state:ok") && i.contains("cluster_slots_ok:16384")
                    })
                },
            )?;
        }
        Ok(Self { nodes })
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisProc::url).collect()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(RedisProc::pid).collect()
    }
}

/// Either kind of private Redis, as one value the callers can hold and drop.
pub enum LocalRedis {
    Single(RedisProc),
    Cluster(RedisClusterProc),
}

impl LocalRedis {
    /// Every node's process, for CPU accounting.
    pub fn watched(&self) -> Vec<Watched> {
        let pids = match self {
            Self::Single(r) => r.pid().into_iter().collect(),
            Self::Cluster(c) => c.pids(),
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

    /// Starts a single node, or a cluster of `masters` when `masters > 1`.
    pub fn start(masters: usize) -> Result<Self, ServerError> {
        if masters <= 1 {
            RedisProc::start(&[]).map(Self::Single)
        } else {
            RedisClusterProc::start(masters).map(Self::Cluster)
        }
    }

    pub fn target(&self) -> RedisTarget {
        match self {
            Self::Single(n) => RedisTarget::Single(n.url()),
            Self::Cluster(c) => RedisTarget::Cluster(c.urls()),
        }
    }

    /// `host:port[,host:port...]`, as the gateway and consumer flags take it.
    pub fn addr_list(&self) -> String {
        match self {
            Self::Single(n) => format!("127.0.0.1:{}", n.port()),
            Self::Cluster(c) => c
                .nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port()))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}
