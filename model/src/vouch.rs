//! The vouch fence (docs/DESIGN.md "A Redis that comes back older"): the gateway's guarded
//! calls (claim, take and settle refuse on a process the ledger has not vouched for) and
//! the consumer's watch, which revokes a vouch of another process, rebuilds the campaign
//! from the ledger and vouches for the shard's current process.

use crate::keyspace::{ShardId, Vouch};
use crate::mutant::Mutant;
use crate::scripts;
use crate::system::{Action, State, System};

impl System {
    /// `lua/guard.lua` in front of a selling script on shard `s`'s master, loaded for the
    /// process it runs on: false is RESTORING.
    pub(crate) fn guarded(&self, st: &mut State, s: ShardId) -> bool {
        if self.cfg.mutant_is(Mutant::NoVouchFence) {
            return true;
        }
        let run = st.nodes[usize::from(s)].run;
        scripts::guard(st.master(s), run)
    }

    pub(crate) fn watch_actions(&self, st: &State, out: &mut Vec<Action>) {
        for s in 0..self.cfg.shards {
            let n = &st.nodes[usize::from(s)];
            // A shard with no vouch at all is vouched as it is, once it has a slice again.
            // Only a later restart from a snapshot of it could tell, so only forms with
            // that fault explore it.
            let absent =
                self.cfg.ops.restore && n.master.vouch.is_none() && n.master.stock.is_some();
            // The rebuild writes the ledger: not while the database refuses.
            if absent || (unvouched(st, s) && !(self.watch_rebuilds(st, s) && st.db_refusing)) {
                out.push(Action::Watch(s));
            }
        }
    }

    /// One round of the watch on shard `s`: a vouch of another process (or `revoked`) is
    /// revoked and the campaign rebuilt from the ledger (which counts the claims still in
    /// the streams first, and raises the generation: a walk under a hold the restart lost
    /// takes nothing after it); then `vouch.lua` vouches for the process the watch read.
    pub(crate) fn watch(&self, st: &mut State, s: ShardId) -> bool {
        if self.watch_rebuilds(st, s) {
            self.rebuild(st);
        }
        let run = st.nodes[usize::from(s)].run;
        st.master(s).vouch = Some(Vouch::Run(run));
        true
    }

    /// Whether the watch rebuilds shard `s`'s campaign before it vouches: on a vouch of
    /// another process. [`Mutant::VouchWithoutRebuild`]: never.
    /// [`Mutant::WatchTrustsEmptyLedger`]: only when the ledger holds claims of it.
    fn watch_rebuilds(&self, st: &State, s: ShardId) -> bool {
        unvouched(st, s)
            && !self.cfg.mutant_is(Mutant::VouchWithoutRebuild)
            && !(self.cfg.mutant_is(Mutant::WatchTrustsEmptyLedger) && st.ledger.claims.is_empty())
    }
}

/// Shard `s`'s vouch names another process than its master's (or was revoked): the guard
/// refuses there, and the watch rebuilds it.
pub fn unvouched(st: &State, s: ShardId) -> bool {
    let n = &st.nodes[usize::from(s)];
    matches!(n.master.vouch, Some(v) if v != Vouch::Run(n.run))
}
