//! What a master says about its replicas (`INFO replication`) and what a fence proved.
//! These are plain values: the batch (`batch.rs`) reads them from its claim pipeline and
//! the client's fences (`client/fence.rs`) from theirs, so this module sits below both.
//!
//! Why fences: `WAIT` counts the replicas that acknowledged the writes of the connection it
//! runs on; after a reconnect (or once the slot moved to a promoted node) that connection
//! has written nothing, and WAIT "confirms" at once. Claims therefore carry their WAIT in
//! their own pipeline (`batch.rs`). Everybody else (the consumer after XREAD, tests,
//! drills) uses a *fence*: one pipeline that writes the shard's fence key, WAITs, and reads
//! `INFO replication`. The fence write is on the WAIT's connection, and a master replicates
//! in order, so a confirmed fence covers every write that master made before it, from any
//! connection. That holds only on the same master lineage: the caller compares the
//! replication id with the one it saw when it read the writes it cares about (a promotion
//! or a restart changes it).

/// What `INFO replication` says about a master.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicationInfo {
    /// `role:master`; a replica answering means the slot map is stale.
    pub is_master: bool,
    /// The replication id: the same id means the same history of writes.
    pub replid: String,
    /// Replicas connected right now, including ones still in their first sync.
    pub connected_replicas: u32,
    /// Of those, the ones past their sync (`state=online` in their `slave<n>:` line): the
    /// only ones that hold the data and acknowledge writes.
    pub online_replicas: u32,
    /// `repl_backlog_active:1`: a replica is or was attached (the backlog is created for
    /// the first one, kept `repl-backlog-ttl` after the last leaves, and kept by a replica
    /// for its own promotion), so this node's writes are meant to be replicated.
    pub backlog: bool,
}

impl ReplicationInfo {
    /// Parses the text of `INFO replication`.
    pub fn parse(info: &str) -> Self {
        let mut out = Self::default();
        for line in info.lines() {
            let Some((k, v)) = line.trim().split_once(':') else {
                continue;
            };
            match k {
                "role" => out.is_master = v == "master",
                "master_replid" => out.replid = v.to_owned(),
                "connected_slaves" => out.connected_replicas = v.parse().unwrap_or(0),
                "repl_backlog_active" => out.backlog = v == "1",
                // `slave<n>:ip=…,port=…,state=online,offset=…,lag=…`
                k if k.starts_with("slave")
                    && k[5..].bytes().all(|b| b.is_ascii_digit())
                    && v.split(',').any(|f| f == "state=online") =>
                {
                    out.online_replicas += 1;
                }
                _ => {}
            }
        }
        out
    }

    /// How many replicas a fence on this master waits for: every online one, at least one.
    /// (A commit resting on one replica of two is lost when the other one is promoted.) A
    /// replica still in its sync is not waited for: it acknowledges nothing until it has
    /// loaded the master's data, which includes the write, and holds nothing a failover
    /// would promote it for (it has no replication offset to rank on); waiting for it would
    /// stop every confirmation for the whole sync, or for good while its sync keeps failing.
    pub fn replicas_to_wait(&self) -> u32 {
        self.online_replicas.max(1)
    }
}

/// The answer of one fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// Replicas that acknowledged the fence write.
    pub acked: u32,
    /// The master that took the fence.
    pub info: ReplicationInfo,
}

impl Fence {
    /// True when this fence confirms the writes read under `before`: the same master
    /// lineage (replication id) and an acknowledgement from every replica the master counted
    /// online after the WAIT, at least one. The WAIT itself asked for the count seen
    /// before; a replica that attached meanwhile makes this false (ask again with
    /// [`ReplicationInfo::replicas_to_wait`] of [`Fence::info`]), one the master dropped
    /// meanwhile is no longer counted.
    pub fn confirms(&self, before: &ReplicationInfo) -> bool {
        self.info.replid == before.replid && self.acked >= self.info.replicas_to_wait()
    }
}

/// WAIT's reply as a replica count (never negative; saturating rather than wrapping).
pub(crate) fn replica_count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::{Fence, ReplicationInfo};

    #[test]
    fn parses_info_replication() {
        let text = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\nslave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\nmaster_replid:abc123\r\nmaster_replid2:0000\r\nrepl_backlog_active:1\r\n";
        let info = ReplicationInfo::parse(text);
        assert!(info.is_master);
        assert_eq!(info.replid, "abc123");
        assert_eq!(info.connected_replicas, 2);
        assert_eq!(info.online_replicas, 1, "one still in its sync");
        assert_eq!(info.replicas_to_wait(), 1);
        assert!(info.backlog);
        let replica = ReplicationInfo::parse("role:slave\r\nmaster_replid:x\r\n");
        assert!(!replica.is_master);
        assert_eq!(replica.connected_replicas, 0);
        assert!(!replica.backlog);
    }

    #[test]
    fn a_fence_confirms_only_with_every_connected_replica() {
        let info = |replid: &str, replicas| ReplicationInfo {
            is_master: true,
            replid: replid.into(),
            connected_replicas: replicas,
            online_replicas: replicas,
            backlog: true,
        };
        let fence = |acked, replicas| Fence {
            acked,
            info: info("a", replicas),
        };
        let before = info("a", 2);
        assert!(fence(2, 2).confirms(&before));
        assert!(!fence(1, 2).confirms(&before), "one of two");
        assert!(fence(1, 1).confirms(&before), "the other was dropped");
        assert!(!fence(0, 0).confirms(&before), "none left: at least one");
        assert!(!fence(2, 2).confirms(&info("b", 2)), "another master");
        assert_eq!(info("a", 0).replicas_to_wait(), 1);
        assert_eq!(info("a", 3).replicas_to_wait(), 3);
    }
}
