//! The consumer commits only what a replica holds, so the ledger never shows a claim that
//! a failover can take back from Redis (the promoted replica would sell that unit again).
//!
//! Confirmation never trusts the connection (see `shard-router/src/replication.rs`): the
//! read carries `INFO replication` in its own pipeline, which names the master's
//! replication id; a later *fence* (fence write + WAIT + INFO in one pipeline, on any
//! connection) confirms the read when a replica acknowledged it and the id is unchanged.
//! A changed id (failover or restart) means the entries may not exist any more: the batch
//! is dropped, not committed, and the entries are read again from the new master (or
//! taken over by recovery) if they survived.
//!
//! [`ReplicaWait::Auto`] (the default) waits on every shard whose master has, or had since
//! this process started, a replica, whose master keeps a replication backlog (it had one
//! within `repl-backlog-ttl`), or whose fence shows that an earlier process waited for
//! one ([`ShardReplica::remember`]); `Always` waits even where none was seen; `Off` never.
//! Each attempt is bounded by the wait; attempts repeat with backoff until confirmed, the
//! master changes, or shutdown.
//!
//! **How many replicas.** A fence counts only when *every* replica the master reports
//! online (`state=online` lines in the fence's own `INFO`, at least one) acknowledged it
//! (`Fence::confirms`, `shard-router/src/replication.rs`). With `WAIT 1` on a master with
//! two replicas, a commit could rest on the replica that is not the one promoted later.
//! When one replica of two is down:
//! - still connected as far as the master knows (stalled, partitioned within
//!   `repl-timeout`): nothing is confirmed; the reader keeps waiting, and the consumer's own
//!   writes stay undone, until it acknowledges or the master drops it;
//! - dropped by the master (dead, or past `repl-timeout`): it is not waited for, or one
//!   dead replica would stop every commit until it is replaced. The master streams
//!   nothing to it, so it misses every write from then on and is behind the replicas that
//!   confirmed; a failover ranks replicas by replication offset (a sentinel, and a Redis
//!   Cluster replica election, prefer the one that processed most), so it is promoted only
//!   when none of those is reachable. That case (every confirming replica lost with the
//!   master) loses acknowledged claims however long anyone waits (`nothing-lost`; run
//!   enough replicas). With no replica connected at all, `Auto`/`Always` still wait for
//!   one: zero never confirms.
//! - still in its sync (attaching, or a full resync): connected, but it acknowledges
//!   nothing before it has loaded the master's data (which then includes the write), and a
//!   failover does not prefer it over one that confirmed (it has no newer offset); it is
//!   not waited for, or adding a replica would stop every commit for the whole sync, and
//!   one whose sync keeps failing would stop them for good. It still makes a replica
//!   required in `auto`, and with no replica online nothing confirms.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shard_router::{Fence, ReplicationInfo, ShardId, StockClient, StockError};
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::metrics as m;

/// Default bound of one WAIT of the consumer.
pub(crate) const DEFAULT_REPLICA_WAIT: Duration = Duration::from_millis(100);

/// When the consumer waits for a replica before committing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaWait {
    /// Never (a deployment without replicas that wants no extra round trip).
    Off,
    /// Wherever the shard's master has, or had since start, a replica.
    Auto(Duration),
    /// Always: with no replica at all, nothing is committed.
    Always(Duration),
}

impl ReplicaWait {
    pub fn bound(self) -> Option<Duration> {
        match self {
            Self::Off => None,
            Self::Auto(d) | Self::Always(d) => Some(d),
        }
    }
}

impl Default for ReplicaWait {
    fn default() -> Self {
        Self::Auto(DEFAULT_REPLICA_WAIT)
    }
}

/// `--replica-wait` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Auto,
    Always,
    Off,
}

/// The two flags that make a [`ReplicaWait`].
#[derive(Debug, clap::Args)]
struct ReplicaWaitArgs {
    /// When read entries wait for a replica before they go to the ledger: `auto` wherever
    /// the shard's master has (or had since start) a replica, `always`, or `off`.
    #[arg(long = "replica-wait", env = "FLASHGATE_REPLICA_WAIT", value_enum, default_value_t = Mode::Auto)]
    mode: Mode,
    /// Bound of one WAIT for a replica (ms); unconfirmed reads retry with backoff.
    #[arg(long = "replica-wait-ms", env = "FLASHGATE_REPLICA_WAIT_MS", value_name = "MS", default_value_t = DEFAULT_REPLICA_WAIT.as_millis() as u64)]
    ms: u64,
}

impl From<ReplicaWaitArgs> for ReplicaWait {
    fn from(a: ReplicaWaitArgs) -> Self {
        let wait = Duration::from_millis(a.ms.max(1));
        match a.mode {
            Mode::Auto => Self::Auto(wait),
            Mode::Always => Self::Always(wait),
            Mode::Off => Self::Off,
        }
    }
}

/// Flattened into the consumer's configuration (config.rs) as its two flags.
impl clap::Args for ReplicaWait {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        ReplicaWaitArgs::augment_args(cmd)
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        ReplicaWaitArgs::augment_args_for_update(cmd)
    }
}

impl clap::FromArgMatches for ReplicaWait {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        ReplicaWaitArgs::from_arg_matches(m).map(Self::from)
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// How a wait for a replica ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replicated {
    /// A replica holds the entries (or no wait is required here).
    Yes,
    /// The master's replication id changed since the read: drop the entries.
    MasterChanged,
    /// Shutting down before a replica confirmed.
    Shutdown,
}

/// The replica policy of one shard, shared by its reader and its recovery loop.
#[derive(Debug, Clone)]
pub(crate) struct ShardReplica {
    pub shard: ShardId,
    mode: ReplicaWait,
    /// Sticky: once a replica was seen on this shard's master, a replica that goes away is
    /// waited for, not forgotten.
    seen: Arc<AtomicBool>,
}

impl ShardReplica {
    pub(crate) fn new(shard: ShardId, mode: ReplicaWait) -> Self {
        Self {
            shard,
            mode,
            seen: Arc::new(AtomicBool::new(false)),
        }
    }

    /// In `auto`, remembers a replica seen by an earlier process: the shard's fence exists
    /// only where someone waited for a replica, so a restart while the replica is away
    /// still waits for it. Unknown (Redis unreachable now) leaves it to the reads to see.
    pub(crate) async fn remember(&self, client: &StockClient) {
        if !matches!(self.mode, ReplicaWait::Auto(_)) {
            return;
        }
        match client.fenced_before(self.shard).await {
            Ok(true) => self.seen.store(true, Ordering::Relaxed),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(shard = self.shard, error = %e, "could not tell whether a replica was seen before")
            }
        }
    }

    /// Whether entries read under `info` must wait for a replica.
    pub(crate) fn required(&self, info: &ReplicationInfo) -> bool {
        // The backlog also shows a replica that left before any process fenced this shard
        // (so no fence key remembers it); it is kept `repl-backlog-ttl` after it left.
        if info.connected_replicas > 0 || info.backlog {
            self.seen.store(true, Ordering::Relaxed);
        }
        match self.mode {
            ReplicaWait::Off => false,
            ReplicaWait::Always(_) => true,
            ReplicaWait::Auto(_) => self.seen.load(Ordering::Relaxed),
        }
    }

    /// Waits until a replica holds what the master `read_under` wrote before this call.
    /// Counts unconfirmed attempts and measures the whole wait.
    pub(crate) async fn confirm(
        &self,
        client: &StockClient,
        read_under: &ReplicationInfo,
        backoff: &mut Backoff,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Replicated {
        let Some(wait) = self.mode.bound() else {
            return Replicated::Yes;
        };
        let started = Instant::now();
        let shard = self.shard;
        // Every replica the master counts online (see the module doc); a replica that
        // attaches or drops off between attempts changes the count asked for next.
        let mut want = read_under.replicas_to_wait();
        let out = loop {
            match fence_all(client, shard, want, wait).await {
                Ok(f) if f.info.replid != read_under.replid => {
                    metrics::counter!(m::REPLICA_MASTER_CHANGED).increment(1);
                    tracing::warn!(shard, "master changed since the read; entries dropped, read again from the new master");
                    break Replicated::MasterChanged;
                }
                Ok(f) if f.confirms(read_under) => break Replicated::Yes,
                Ok(f) => {
                    want = f.info.replicas_to_wait();
                    tracing::warn!(
                        shard,
                        acked = f.acked,
                        connected = f.info.connected_replicas,
                        online = f.info.online_replicas,
                        "not every replica confirmed the read yet"
                    )
                }
                Err(e) => tracing::warn!(shard, error = %e, "replica fence failed"),
            }
            metrics::counter!(m::REPLICA_UNCONFIRMED).increment(1);
            if !backoff.sleep(shutdown).await {
                break Replicated::Shutdown;
            }
        };
        metrics::histogram!(m::REPLICA_WAIT_SECONDS).record(started.elapsed().as_secs_f64());
        out
    }
}

/// A fence on `shard` whose WAIT asks for every replica the master counts online: for
/// `want` (the count last seen), and once more for the fence's own count when more replicas
/// are online than that and not all acknowledged. (WAIT returns as soon as `want`
/// replicas acknowledged, so asking for too few could leave the others unconfirmed on
/// every attempt.)
pub(crate) async fn fence_all(
    client: &StockClient,
    shard: ShardId,
    want: u32,
    wait: Duration,
) -> Result<Fence, StockError> {
    let f = client.fence(shard, want, wait).await?;
    let connected = f.info.replicas_to_wait();
    if connected > want && f.acked < connected {
        return client.fence(shard, connected, wait).await;
    }
    Ok(f)
}

/// Whether a write the consumer makes itself (a late claim's apply, `consumer/src/late.rs`; a
/// stale hold's resolution, `reconcile/holds.rs`) must be on a replica before anything
/// relies on it, on the master `info` describes. These run from several loops and commands,
/// so `Auto` keeps no memory of its own: it asks the master whether it has or had a
/// replica (`ReplicationInfo::backlog`), which also covers a replica that is down now.
pub fn write_needs_replica(mode: ReplicaWait, info: &ReplicationInfo) -> bool {
    match mode {
        ReplicaWait::Off => false,
        ReplicaWait::Always(_) => true,
        ReplicaWait::Auto(_) => info.connected_replicas > 0 || info.backlog,
    }
}

/// One bounded check that a replica holds what `shard`'s master wrote so far, that master
/// being the one `before` described (read before the writes: a changed replication id
/// means a failover or restart in between, and the writes may be gone). True when
/// confirmed or not required; false otherwise (the caller leaves its decision undone and
/// tries again later, never waits here).
pub async fn write_confirmed(
    client: &StockClient,
    shard: ShardId,
    mode: ReplicaWait,
    before: &ReplicationInfo,
) -> bool {
    let Some(wait) = mode.bound() else {
        return true;
    };
    if !write_needs_replica(mode, before) {
        return true;
    }
    let ok = match fence_all(client, shard, before.replicas_to_wait(), wait).await {
        Ok(f) if f.info.replid != before.replid => {
            tracing::warn!(shard, "master changed since the write; it may be gone");
            false
        }
        Ok(f) => f.confirms(before),
        Err(e) => {
            tracing::warn!(shard, error = %e, "replica fence failed");
            false
        }
    };
    if !ok {
        // Not the reader's metrics: those count stream records held back.
        tracing::warn!(shard, "no replica confirmed the consumer's write yet");
    }
    ok
}

/// [`write_confirmed`] tried up to `attempts` times, one wait apart: for a caller that
/// must not report success before a replica holds its writes (a rebuild, `rebuild.rs`; a
/// release, `release.rs`), where a write just made may take longer than one WAIT to reach
/// every replica. False when no attempt was confirmed.
pub async fn write_confirmed_within(
    client: &StockClient,
    shard: ShardId,
    mode: ReplicaWait,
    before: &ReplicationInfo,
    attempts: u32,
) -> bool {
    for attempt in 0..attempts.max(1) {
        if attempt > 0 {
            if let Some(wait) = mode.bound() {
                tokio::time::sleep(wait).await;
            }
        }
        if write_confirmed(client, shard, mode, before).await {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(replicas: u32) -> ReplicationInfo {
        ReplicationInfo {
            is_master: true,
            replid: "r".into(),
            connected_replicas: replicas,
            online_replicas: replicas,
            backlog: replicas > 0,
        }
    }

    #[test]
    fn auto_waits_once_a_replica_was_seen_even_after_it_left() {
        let auto = ShardReplica::new(0, ReplicaWait::default());
        assert!(
            !auto.required(&info(0)),
            "no replica ever: nothing to wait for"
        );
        assert!(auto.required(&info(1)));
        assert!(
            auto.required(&info(0)),
            "the replica went down: wait for it"
        );
        assert!(!ShardReplica::new(0, ReplicaWait::Off).required(&info(2)));
        let always = ShardReplica::new(0, ReplicaWait::Always(DEFAULT_REPLICA_WAIT));
        assert!(always.required(&info(0)));
    }
}
