//! A private Redis Cluster: `masters × (1 + replicas)` nodes joined by
//! `redis-cli --cluster create`, usable once every node reports `cluster_state:ok`.

use std::process::Command;
use std::time::Duration;

use crate::{try_wait_until, wait_until, RedisServer, ServerError};

/// A running local cluster owned by the test.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(masters: usize, replicas: usize) -> Self {
        Self::try_start(masters, replicas).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::start`] that returns what went wrong.
    pub fn try_start(masters: usize, replicas: usize) -> Result<Self, ServerError> {
        if masters < 3 {
            return Err(ServerError::Failed {
                what: format!("a cluster of {masters} masters"),
                detail: "redis-cli --cluster create needs at least 3 masters".into(),
            });
        }
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                RedisServer::try_start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    // As deployed (deploy/local/up.sh, deploy/compose): while one master's
                    // slots wait for their replica, the other masters keep serving theirs.
                    "--cluster-require-full-coverage",
                    "no",
                ])
            })
            .collect::<Result<_, _>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(std::process::Stdio::null())
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
        let cluster = Self { nodes };
        cluster.try_wait_ok()?;
        Ok(cluster)
    }

    /// Waits until every node sees the whole slot space served and every replica has
    /// finished its first sync (until then WAIT cannot be confirmed).
    /// Killed nodes are skipped, so this also waits out a failover.
    pub fn wait_ok(&self) {
        if let Err(e) = self.try_wait_ok() {
            panic!("{e}");
        }
    }

    fn try_wait_ok(&self) -> Result<(), ServerError> {
        for n in self.nodes.iter().filter(|n| n.pid().is_some()) {
            let url = n.url();
            let query = |args: &[&str]| -> String {
                redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
                    .and_then(|mut c| redis::cmd(args[0]).arg(&args[1..]).query(&mut c))
                    .unwrap_or_default()
            };
            try_wait_until(
                &format!("cluster_state:ok on :{}", n.port()),
                Duration::from_secs(30),
                || {
                    let info = query(&["CLUSTER", "INFO"]);
                    info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
                },
            )?;
            try_wait_until("replica link up", Duration::from_secs(30), || {
                let info = query(&["INFO", "replication"]);
                !info.contains("role:slave") || info.contains("master_link_status:up")
            })?;
        }
        Ok(())
    }

    /// `redis://127.0.0.1:PORT` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// `(first slot, last slot, master port)` for every slot range, from `CLUSTER SLOTS`.
    pub fn slot_ranges(&self) -> Vec<(u16, u16, u16)> {
        let live = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a live node");
        let v: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut live.connection())
            .expect("CLUSTER SLOTS");
        let redis::Value::Array(ranges) = v else {
            panic!("CLUSTER SLOTS: not an array")
        };
        ranges
            .into_iter()
            .map(|r| {
                let redis::Value::Array(items) = r else {
                    panic!("CLUSTER SLOTS: range not an array")
                };
                let int = |v: &redis::Value| match v {
                    redis::Value::Int(i) => *i as u16,
                    other => panic!("CLUSTER SLOTS: not an int: {other:?}"),
                };
                let redis::Value::Array(master) = &items[2] else {
                    panic!("CLUSTER SLOTS: master not an array")
                };
                (int(&items[0]), int(&items[1]), int(&master[1]))
            })
            .collect()
    }

    /// Index in [`Self::nodes`] of the node listening on `port`.
    pub fn node_index(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .expect("a node on that port")
    }

    /// The port of the master serving `slot`.
    pub fn master_of(&self, slot: u16) -> u16 {
        self.slot_ranges()
            .into_iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|(_, _, port)| port)
            .expect("every slot is served")
    }

    /// Indexes into [`Self::nodes`] of the master serving `slot` and of its replica.
    pub fn master_and_replica(&self, slot: u16) -> (usize, usize) {
        let port = self.master_of(slot);
        let replica = self
            .nodes
            .iter()
            .position(|n| {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut n.connection())
                    .unwrap_or_default();
                info.contains("role:slave") && info.contains(&format!("master_port:{port}"))
            })
            .expect("every master has a replica");
        (self.node_index(port), replica)
    }

    /// Kills the master at `master` and makes the (possibly SIGSTOPped) replica at `replica`
    /// take over at once (`CLUSTER FAILOVER TAKEOVER`): a failover with whatever that replica
    /// had. Waits until the cluster is ok again.
    pub fn take_over(&mut self, master: usize, replica: usize) {
        self.nodes[master].kill();
        self.nodes[replica].signal("CONT");
        let _: redis::RedisResult<String> = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("TAKEOVER")
            .query(&mut self.nodes[replica].connection());
        self.wait_ok();
    }

    /// Restarts the killed node at `node` (empty) and waits until it serves again as the
    /// replica of the master that took its slots.
    pub fn rejoin_as_replica(&mut self, node: usize) {
        self.nodes[node].restart();
        let conn = || self.nodes[node].connection();
        wait_until(
            "old master rejoined as a replica",
            Duration::from_secs(30),
            || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut conn())
                    .unwrap_or_default();
                info.contains("role:slave") && info.contains("master_link_status:up")
            },
        );
        self.wait_ok();
    }
}
