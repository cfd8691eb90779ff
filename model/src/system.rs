//! The whole system the `stateright` model checks: its state (Redis nodes, the ledger,
//! gateways with their requests in flight, consumers, clients' answers) and every action
//! that can happen next. Each action is one atomic step: one script on one shard, one
//! consumer transaction, one event delivered, or one fault. The steps themselves are
//! `System` methods in the modules of what takes them (`gateway`, `consumer`, `operator`,
//! `faults`); `transitions` makes the whole a `stateright` model.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::Config;
use crate::gateway_state::{Gateway, Reply, Request, Task};
use crate::keyspace::{ClaimId, Event, Meta, Record, Rid, Shard, ShardId, Units, User, Vouch};
use crate::ledger::{Ledger, Offset, StreamRow};

/// One shard's Redis: a master and its replica. The replica is the master as of its last
/// sync (Redis replicates in order, so a replica always holds a prefix of the master's
/// writes); a failover promotes it, losing what it had not got.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub master: Shard,
    pub replica: Shard,
    /// The master's replication id (INFO replication `master_replid`): a new one at every
    /// failover and every loss (Redis takes a new id at every master start), so what a
    /// reader saw under an older one may be gone, and ids may be handed out again.
    pub replid: u8,
    /// The master's process (its `run_id`): a new one at every start and failover, and the
    /// one thing a restart from an older snapshot does not roll back.
    pub run: u8,
    /// The snapshot a restart may come back from (an RDB, an AOF that lost its last
    /// second): the master's data as it was when taken.
    pub snapshot: Option<Shard>,
}

/// A rule the run broke on the way (the properties read these).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Violation {
    /// A retry got a success with another claim id than the first.
    DifferentSuccess(User, Rid),
    /// A retry got a refusal after a success.
    RefusalAfterSuccess(User, Rid, Reply),
}

/// A consumer's read of a shard's stream whose commit has not happened yet (a paused
/// consumer, or a batch its writer has not committed): the transaction it will run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stalled {
    pub shard: ShardId,
    /// The offset the read started from; the commit is conditional on it.
    pub from: Offset,
    /// The newest entry read, under the replication id the read saw.
    pub to: Offset,
    /// The lease epoch the reader held.
    pub epoch: u8,
    pub entries: Vec<(u32, Record)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Redis's clock and the gateways' (skew is not modeled).
    pub now: i64,
    pub nodes: Vec<Node>,
    pub ledger: Ledger,
    pub gateways: Vec<Gateway>,
    pub tasks: Vec<Task>,
    pub requests: BTreeMap<(User, Rid), Request>,
    /// At most one read whose commit is pending (a fault: it counts against the budget).
    pub stalled: Option<Stalled>,
    pub faults: u8,
    /// Every success answered: claim id, user, units.
    pub acked: BTreeSet<(ClaimId, User, Units)>,
    pub violations: BTreeSet<Violation>,
    /// Every answer, in order (user, request id, reply): what a counterexample shows.
    pub answers: Vec<(User, Rid, Reply)>,
    /// Claims that were in Redis alone (in a stream, or taken and not yet settled) when
    /// their shard lost master and replica at once: beyond what `replica` durability
    /// covers (a failover), so the properties on acknowledgements leave them out.
    pub voidable: BTreeSet<(ClaimId, User)>,
    /// Refusals of a winner's retry by the replay filter within its stated residual.
    pub residuals: u8,
    pub releases: u8,
    pub repreheated: bool,
    pub rebuilds: u8,
    pub reroutes: u8,
    /// The database refuses writes (read-only, full, connections lost): every transaction
    /// fails, the consumer's commit and its place with it, until it accepts again.
    pub db_refusing: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client sends (or retries) request `rid` of `user` through gateway `gw`.
    Send {
        user: User,
        rid: Rid,
        gw: u8,
    },
    /// The next step of a request in flight; `lag`: the replica misses it (WAIT times out).
    Step {
        task: u8,
        lag: bool,
    },
    Deliver,
    LoseEvent(u8),
    ReadFilter(u8),
    RevalidateFilter(u8),
    CrashGateway(u8),
    /// A consumer round on a shard: read after the offset, fence, commit and move the
    /// offset, final answers, trim. `crash`: the consumer dies after the commit, before
    /// its final answers and the trim.
    Consume {
        shard: ShardId,
        crash: bool,
    },
    /// A consumer reads a shard's stream and pauses before its commit.
    Read(ShardId),
    /// The paused consumer's lease runs out and another consumer takes the shard.
    Takeover(ShardId),
    /// The paused consumer resumes: its fence and conditional commit.
    CommitStalled,
    /// The paused consumer dies: its read is never committed.
    DropStalled,
    /// The amortized trim (`stream_trim.lua`) of a shard's master, after a crash left
    /// committed entries behind.
    Trim(ShardId),
    ResolveHold {
        shard: ShardId,
        user: User,
        seq: u32,
    },
    Replicate(ShardId),
    Failover(ShardId),
    Lose(ShardId),
    /// A snapshot of the shard's master is taken (the one a restart may come back from).
    Snapshot(ShardId),
    /// The master restarts from its snapshot, under a new process; its replica resyncs.
    Restore(ShardId),
    /// The consumer's watch on a shard whose vouch is not its process's: revoke, rebuild
    /// from the ledger, vouch (`campaign-ops/src/rebuild/watch.rs`).
    Watch(ShardId),
    /// The database starts refusing writes.
    DbRefuses,
    /// The database accepts writes again.
    DbAccepts,
    Rebuild,
    Repreheat,
    ReleaseBegin(ClaimId),
    ReleaseRedis(ClaimId),
    WavePlace,
    WaveRedis,
    Tick,
}

pub struct System {
    pub cfg: Config,
}

pub(crate) const WAVE_ID: u8 = 1;
pub(crate) const START: i64 = 0;
/// The streams' last id at the start: the first master's ids come after it, and a master
/// that starts empty after a loss hands out ids from 1 again, below them (Redis's ids are
/// its clock's; the new master's may be behind).
pub(crate) const FIRST_LAST_ID: u32 = 10;
pub(crate) const END: i64 = 1_000;

impl System {
    pub fn new(cfg: Config) -> Self {
        Self { cfg }
    }

    /// The sale as preheated by the rebuild path (generation 1), before any claim.
    pub(crate) fn initial(&self) -> State {
        let c = &self.cfg;
        let nodes = (0..c.shards)
            .map(|s| {
                let master = Shard {
                    stock: Some(c.share(c.stock, s)),
                    meta: Some(Meta {
                        limit: c.limit,
                        start: START,
                        end: END,
                        gen: 1,
                        fenced: false,
                    }),
                    last_id: FIRST_LAST_ID,
                    // The first preheat vouches for the process it writes to.
                    vouch: Some(Vouch::Run(0)),
                    ..Shard::default()
                };
                Node {
                    replica: master.clone(),
                    master,
                    replid: 0,
                    run: 0,
                    snapshot: None,
                }
            })
            .collect();
        let mut requests = BTreeMap::new();
        for u in 0..c.users {
            for r in 0..c.rids {
                let attempts = if u < c.retrying { c.attempts } else { 1 };
                requests.insert((u, r), Request::new(attempts));
            }
        }
        State {
            now: 0,
            nodes,
            ledger: Ledger {
                base_stock: c.stock,
                rebuild_gen: 1,
                streams: vec![StreamRow::default(); usize::from(c.shards)],
                ..Ledger::default()
            },
            gateways: vec![Gateway::default(); usize::from(c.gateways)],
            tasks: Vec::new(),
            requests,
            stalled: None,
            faults: 0,
            acked: BTreeSet::new(),
            violations: BTreeSet::new(),
            answers: Vec::new(),
            voidable: BTreeSet::new(),
            residuals: 0,
            releases: 0,
            repreheated: false,
            rebuilds: 0,
            reroutes: 0,
            db_refusing: false,
        }
    }

    pub(crate) fn can_fault(&self, st: &State) -> bool {
        st.faults < self.cfg.faults
    }

    /// Shard `s`'s share of the stock the slices should hold: the base and every wave
    /// whose units reached this slice or that the ledger applied.
    pub fn share(&self, st: &State, s: ShardId) -> Units {
        let sh = &st.nodes[usize::from(s)].master;
        let waves: Units = st
            .ledger
            .waves
            .iter()
            .filter(|(id, (_, state))| {
                *state == crate::ledger::WaveState::Applied || sh.waves.contains_key(id)
            })
            .map(|(_, (u, _))| self.cfg.share(*u, s))
            .sum();
        self.cfg.share(st.ledger.base_stock, s) + waves
    }
}

impl State {
    pub fn master(&mut self, s: ShardId) -> &mut Shard {
        &mut self.nodes[usize::from(s)].master
    }

    /// A fence or WAIT that a replica acknowledged: it holds everything written so far.
    pub fn sync(&mut self, s: ShardId) {
        let n = &mut self.nodes[usize::from(s)];
        n.replica = n.master.clone();
    }

    /// Pub/Sub: every gateway's subscriber gets the events, in order.
    pub fn publish(&mut self, events: &[Event]) {
        for g in &mut self.gateways {
            g.inbox.extend_from_slice(events);
        }
    }
}
