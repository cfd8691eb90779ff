//! The system as a `stateright::Model`: the sale's initial state, the actions each part
//! enables in a state (`gateway`, `consumer`, `operator`, `faults`), the state each action
//! leads to, and the properties checked (`properties`). Above every part, apart from
//! `system`, which the parts build on.

use stateright::{Model, Property};

use crate::mutant::Mutant;
use crate::system::{Action, State, System};

impl Model for System {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, st: &State, out: &mut Vec<Action>) {
        self.gateway_actions(st, out);
        self.consumer_actions(st, out);
        self.operator_actions(st, out);
        self.fault_actions(st, out);
        self.watch_actions(st, out);
        if st.db_refusing {
            // What writes the ledger fails and is retried later: nothing changes now.
            out.retain(|a| !self.writes_ledger(a));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut st = last.clone();
        let changed = match action {
            Action::Send { user, rid, gw } => self.send(&mut st, user, rid, gw),
            Action::Step { task, lag } => self.step(&mut st, usize::from(task), lag),
            Action::Deliver => self.deliver(&mut st),
            Action::LoseEvent(g) => self.lose_event(&mut st, g),
            Action::ReadFilter(g) => self.read_filter(&mut st, g),
            Action::RevalidateFilter(g) => self.revalidate_filter(&mut st, g),
            Action::CrashGateway(g) => self.crash_gateway(&mut st, g),
            Action::Consume { shard, crash } => self.consume(&mut st, shard, crash),
            Action::Read(s) => self.read_stall(&mut st, s),
            Action::Takeover(s) => self.takeover(&mut st, s),
            Action::CommitStalled => self.commit_stalled(&mut st),
            Action::DropStalled => {
                st.stalled = None;
                true
            }
            Action::Trim(s) => self.trim(&mut st, s),
            Action::ResolveHold { shard, user, seq } => {
                self.resolve_hold(&mut st, shard, user, seq)
            }
            Action::Replicate(s) => {
                st.sync(s);
                true
            }
            Action::Failover(s) => self.failover(&mut st, s),
            Action::Lose(s) => self.lose(&mut st, s),
            Action::Snapshot(s) => {
                let n = &mut st.nodes[usize::from(s)];
                n.snapshot = Some(n.master.clone());
                true
            }
            Action::Restore(s) => self.restore(&mut st, s),
            Action::Watch(s) => self.watch(&mut st, s),
            Action::DbRefuses => self.db_refuses(&mut st),
            Action::DbAccepts => {
                st.db_refusing = false;
                true
            }
            Action::Rebuild => self.rebuild(&mut st),
            Action::Repreheat => self.repreheat(&mut st),
            Action::ReleaseBegin(id) => self.release_begin(&mut st, id),
            Action::ReleaseRedis(id) => self.release_redis(&mut st, id),
            Action::WavePlace => self.wave_place(&mut st),
            Action::WaveRedis => self.wave_redis(&mut st),
            Action::Tick => {
                st.now += 1;
                true
            }
        };
        changed.then_some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        crate::properties::all(self)
    }
}

impl System {
    /// A transaction on the ledger (the watch's rebuild is left out by the watch itself).
    /// [`Mutant::ServerErrorIsPoison`]: the consumer's commits go on, as poison.
    fn writes_ledger(&self, a: &Action) -> bool {
        match a {
            Action::Consume { .. } | Action::CommitStalled => {
                !self.cfg.mutant_is(Mutant::ServerErrorIsPoison)
            }
            Action::Takeover(_)
            | Action::Rebuild
            | Action::Repreheat
            | Action::ReleaseBegin(_)
            | Action::ReleaseRedis(_)
            | Action::WavePlace
            | Action::WaveRedis => true,
            _ => false,
        }
    }
}
