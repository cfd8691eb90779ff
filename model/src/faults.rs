//! Faults of Redis, the database and time: a replica catches up, a failover promotes it, a
//! shard loses its data, a master restarts from an older snapshot, the database refuses
//! writes for a while, the clock moves on. Gateway and consumer crashes, lost events and
//! replica lag are offered beside the steps they interrupt (`gateway`, `consumer`).

use crate::gateway_state::Pc;
use crate::keyspace::{ClaimId, Shard, ShardId, User};
use crate::system::{Action, State, System};

impl System {
    pub(crate) fn fault_actions(&self, st: &State, out: &mut Vec<Action>) {
        let snapshot_taken = st.nodes.iter().any(|n| n.snapshot.is_some());
        for (s, n) in st.nodes.iter().enumerate() {
            let s = s as ShardId;
            if n.replica != n.master {
                out.push(Action::Replicate(s));
                if self.cfg.ops.failover && self.can_fault(st) {
                    out.push(Action::Failover(s));
                }
            }
            if self.cfg.ops.loss && self.can_fault(st) && n.master.stock.is_some() {
                out.push(Action::Lose(s));
            }
            if self.cfg.ops.restore && self.can_fault(st) {
                // One snapshot per run, of either shard, at any point; then its restart.
                match &n.snapshot {
                    None if !snapshot_taken => out.push(Action::Snapshot(s)),
                    Some(snap) if *snap != n.master => out.push(Action::Restore(s)),
                    _ => {}
                }
            }
        }
        if self.cfg.ops.db_refuses {
            if st.db_refusing {
                out.push(Action::DbAccepts);
            } else if self.can_fault(st) {
                out.push(Action::DbRefuses);
            }
        }
        let holds = st.nodes.iter().any(|n| !n.master.holds.is_empty());
        if holds && st.now < self.cfg.max_time {
            out.push(Action::Tick);
        }
    }

    /// The replica is promoted: what it had not received is gone, and its ids after the
    /// last it received may be handed out again. It runs under a new replication id, so a
    /// read from before is not committed (the fence) and the consumer reads the stream again
    /// from the start (the new master rule). It is another process: the vouch it holds,
    /// copied from the old master, is not its own.
    pub(crate) fn failover(&self, st: &mut State, s: ShardId) -> bool {
        st.faults += 1;
        let n = &mut st.nodes[usize::from(s)];
        n.master = n.replica.clone();
        n.replid = n.replid.wrapping_add(1);
        n.run = n.run.wrapping_add(1);
        true
    }

    /// A restart without persistence: master and replica empty (the vouch too), the
    /// stream's counter back at 0 (ids at or below the consumer's offset are handed out
    /// again once the stream takes entries; the rebuild's floor raises it first), a new
    /// replication id and process.
    pub(crate) fn lose(&self, st: &mut State, s: ShardId) -> bool {
        st.faults += 1;
        self.come_back(st, s, Shard::default());
        true
    }

    /// The master restarts from its snapshot (an RDB restore, an AOF `everysec` that lost
    /// its last second): slices, counts, answers, stream, generation and vouch roll back
    /// together, the replica resyncs from it; the process is new.
    pub(crate) fn restore(&self, st: &mut State, s: ShardId) -> bool {
        st.faults += 1;
        let snap = st.nodes[usize::from(s)].snapshot.clone().expect("listed");
        self.come_back(st, s, snap);
        true
    }

    /// Master and replica come back holding `data` under a new replication id and process.
    /// The claims that were in Redis alone and are not in `data` (in the stream, or taken
    /// and not yet settled) are beyond what `replica` durability covers (it covers a
    /// failover), so the properties on acknowledgements leave them out.
    fn come_back(&self, st: &mut State, s: ShardId, data: Shard) {
        let kept = |id: ClaimId, user: User| {
            id.shard == s && data.stream.get(&id.entry).is_some_and(|r| r.user == user)
        };
        let shard = &st.nodes[usize::from(s)].master;
        let in_redis = shard
            .stream
            .iter()
            .map(|(&e, r)| (r.claim_id(e), r.user))
            .filter(|&(id, u)| !st.ledger.claims.contains_key(&id) && !kept(id, u));
        let taking = st.tasks.iter().filter_map(|t| match t.pc {
            Pc::Keeping { claim, .. } if claim.shard == s && !kept(claim, t.user) => {
                Some((claim, t.user))
            }
            _ => None,
        });
        let void: Vec<(ClaimId, User)> = in_redis.chain(taking).collect();
        st.voidable.extend(void);
        let n = &mut st.nodes[usize::from(s)];
        n.replica = data.clone();
        n.master = data;
        n.replid = n.replid.wrapping_add(1);
        n.run = n.run.wrapping_add(1);
    }

    pub(crate) fn db_refuses(&self, st: &mut State) -> bool {
        st.faults += 1;
        st.db_refusing = true;
        true
    }
}
