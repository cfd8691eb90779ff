//! Faults of Redis and time: a replica catches up, a failover promotes it, a shard loses
//! its data, the clock moves on. Gateway and consumer crashes, lost events and replica lag
//! are offered beside the steps they interrupt (`gateway`, `consumer`).

use crate::gateway_state::Pc;
use crate::keyspace::{ClaimId, Shard, ShardId};
use crate::system::{Action, State, System};

impl System {
    pub(crate) fn fault_actions(&self, st: &State, out: &mut Vec<Action>) {
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
        }
        let holds = st.nodes.iter().any(|n| !n.master.holds.is_empty());
        if holds && st.now < self.cfg.max_time {
            out.push(Action::Tick);
        }
    }

    /// The replica is promoted: what it had not received is gone, and its ids after the
    /// last it received may be handed out again. It runs under a new replication id, so a
    /// read from before is not committed (the fence) and the consumer reads the stream again
    /// from the start (the new master rule).
    pub(crate) fn failover(&self, st: &mut State, s: ShardId) -> bool {
        st.faults += 1;
        let n = &mut st.nodes[usize::from(s)];
        n.master = n.replica.clone();
        n.replid = n.replid.wrapping_add(1);
        true
    }

    /// A restart without persistence: master and replica empty, the stream's counter back
    /// at 0 (ids at or below the consumer's offset are handed out again once the stream
    /// takes entries; the rebuild's floor raises it first), a new replication id.
    pub(crate) fn lose(&self, st: &mut State, s: ShardId) -> bool {
        st.faults += 1;
        let shard = &st.nodes[usize::from(s)].master;
        let in_redis = shard
            .stream
            .iter()
            .filter(|(&e, _)| {
                !st.ledger
                    .claims
                    .contains_key(&ClaimId { shard: s, entry: e })
            })
            .map(|(&e, r)| (r.claim_id(e), r.user));
        let taking = st.tasks.iter().filter_map(|t| match t.pc {
            Pc::Keeping { claim, .. } if claim.shard == s => Some((claim, t.user)),
            _ => None,
        });
        let void: Vec<_> = in_redis.chain(taking).collect();
        st.voidable.extend(void);
        let n = &mut st.nodes[usize::from(s)];
        n.master = Shard::default();
        n.replica = Shard::default();
        n.replid = n.replid.wrapping_add(1);
        true
    }
}
