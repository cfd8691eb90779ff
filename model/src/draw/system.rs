//! The draw's state (shards with master and replica, the ledger's draw tables and a
//! simplified claim side for grants, the entries readers, the draw service, the restore
//! loop) and its actions, each one atomic step: one script on one shard, one ledger
//! transaction, or one fault. `DrawSystem` is the `stateright::Model`.
//!
//! Layout: `state.rs` holds the state and the actions; `readers.rs` the entries readers,
//! `service.rs` the draw service, `restore.rs` the restore loop, `marks.rs` the wins and
//! ranks both of those write; this file the initial state, which actions a state has, and
//! what each does.

mod marks;
mod readers;
mod restore;
mod service;
mod state;

use std::collections::{BTreeMap, BTreeSet};

use stateright::{Model, Property};

use super::config::{DrawConfig, DRAW_AT, ESTART, FIRST_LAST_ID};
use super::scripts::{DrawShard, DrawState, EnterReply, OpenArgs, User};
pub use restore::Restore;
pub use service::Svc;
pub use state::{Action, Actor, Claim, Ledger, LedgerEntry, Node, Place, Read, State, Violation};

pub struct DrawSystem {
    pub cfg: DrawConfig,
}

impl DrawSystem {
    pub fn new(cfg: DrawConfig) -> Self {
        Self { cfg }
    }

    fn open_args(&self, state: Option<DrawState>, token: u8, publish: Option<u32>) -> OpenArgs {
        OpenArgs {
            estart: ESTART,
            draw_at: DRAW_AT,
            k: self.cfg.k(),
            stock: self.cfg.stock,
            state,
            token,
            publish,
        }
    }

    /// Preheated: every shard's draw open, its stream at its first id.
    pub fn initial(&self) -> State {
        let c = &self.cfg;
        let nodes = (0..c.shards)
            .map(|_| {
                let mut master = DrawShard {
                    last_id: FIRST_LAST_ID,
                    ..DrawShard::default()
                };
                master.open(self.open_args(Some(DrawState::Open), 0, None));
                Node {
                    replica: master.clone(),
                    master,
                    replid: 0,
                }
            })
            .collect();
        State {
            past: false,
            nodes,
            ledger: Ledger {
                entries: BTreeMap::new(),
                places: vec![
                    Place {
                        last: 0,
                        replid: None
                    };
                    usize::from(c.shards)
                ],
                ranks: None,
                entrants: 0,
                granted: 0,
                claims: BTreeMap::new(),
                left: c.stock,
                answers: BTreeMap::new(),
            },
            readers: vec![None; usize::from(c.readers)],
            svc: Svc::Idle,
            restore: Restore::Idle,
            acked: BTreeSet::new(),
            timed_out: false,
            violations: BTreeSet::new(),
            faults: 0,
            releases: 0,
            next_replid: 1,
            next_token: 1,
            targets: vec![None; usize::from(c.shards)],
            revealed: false,
        }
    }

    fn now(st: &State) -> i64 {
        if st.past {
            DRAW_AT
        } else {
            ESTART
        }
    }

    fn fresh_replid(st: &mut State) -> u8 {
        let r = st.next_replid;
        st.next_replid += 1;
        r
    }

    /// States that differ in nothing that matters made equal: the readers are alike (their
    /// reads sorted), and once no failover can come, a replica is its master.
    fn canonical(&self, st: &mut State) {
        st.readers.sort();
        if !self.failover_possible(st) {
            for n in &mut st.nodes {
                if n.replica != n.master {
                    n.replica = n.master.clone();
                }
            }
        }
    }

    fn failover_possible(&self, st: &State) -> bool {
        self.cfg.ops.failover && st.faults < self.cfg.faults
    }

    /// Before the draw time: each user not entered yet enters, or the clock passes it.
    fn entry_actions(&self, st: &State, out: &mut Vec<Action>) {
        let c = &self.cfg;
        if !st.past {
            for u in 0..c.users {
                if !st.nodes[usize::from(c.home(u))]
                    .master
                    .entrants
                    .contains_key(&u)
                {
                    out.push(Action::Enter(u));
                }
            }
            out.push(Action::Tick);
        }
    }

    /// An idle reader reads any shard with something to read; a busy one commits.
    fn reader_actions(&self, st: &State, out: &mut Vec<Action>) {
        for (r, read) in st.readers.iter().enumerate() {
            let r = r as u8;
            match read {
                Some(_) => out.push(Action::Commit(r)),
                None => {
                    for s in 0..self.cfg.shards {
                        if self.read_of(st, s).is_some() {
                            out.push(Action::Read {
                                reader: r,
                                shard: s,
                            });
                        }
                    }
                }
            }
        }
    }

    /// Within the fault budget: a shard's loss or failover, a crash of whatever is busy.
    fn fault_actions(&self, st: &State, out: &mut Vec<Action>) {
        let c = &self.cfg;
        if st.faults >= c.faults {
            return;
        }
        for s in 0..c.shards {
            if c.ops.loss {
                out.push(Action::Lose(s));
            }
            let n = &st.nodes[usize::from(s)];
            if c.ops.failover && n.master != n.replica {
                out.push(Action::Failover(s));
            }
        }
        if c.ops.crash {
            if st.svc != Svc::Idle {
                out.push(Action::Crash(Actor::Service));
            }
            if st.restore != Restore::Idle {
                out.push(Action::Crash(Actor::Restore));
            }
            for (r, read) in st.readers.iter().enumerate() {
                if read.is_some() {
                    out.push(Action::Crash(Actor::Reader(r as u8)));
                }
            }
        }
    }

    /// draw_enter.lua on the user's home shard; a fresh entry is acknowledged.
    fn enter(&self, st: &mut State, u: User) {
        let now = Self::now(st);
        let reply = st.nodes[usize::from(self.cfg.home(u))]
            .master
            .enter(u, self.cfg.prio(u), now);
        if let EnterReply::Entered { fresh: true, .. } = reply {
            st.acked.insert(u);
        }
    }

    /// Shard `s` loses its data, master and replica; its ids restart only where the
    /// config says the clock does.
    fn lose(&self, st: &mut State, s: u8) {
        st.faults += 1;
        let replid = Self::fresh_replid(st);
        let n = &mut st.nodes[usize::from(s)];
        let last_id = if self.cfg.ids_restart_after_loss {
            0
        } else {
            n.master.last_id
        };
        n.master = DrawShard {
            last_id,
            ..DrawShard::default()
        };
        n.replica = n.master.clone();
        n.replid = replid;
    }

    /// Shard `s`'s replica becomes its master, without the writes it had not received.
    fn failover(&self, st: &mut State, s: u8) {
        st.faults += 1;
        let replid = Self::fresh_replid(st);
        let n = &mut st.nodes[usize::from(s)];
        let handed_out = n.master.last_id;
        n.master = n.replica.clone();
        if !self.cfg.ids_restart_after_loss {
            // Ids are the clock's: the new master's are past every id handed out.
            n.master.last_id = handed_out;
        }
        n.replid = replid;
    }

    /// `a` crashes between steps: what it held in memory is gone.
    fn crash(st: &mut State, a: Actor) {
        st.faults += 1;
        match a {
            Actor::Service => {
                st.svc = Svc::Idle;
                st.targets.iter_mut().for_each(|t| *t = None);
            }
            Actor::Restore => st.restore = Restore::Idle,
            Actor::Reader(r) => st.readers[usize::from(r)] = None,
        }
    }
}

impl Model for DrawSystem {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, st: &State, out: &mut Vec<Action>) {
        let c = &self.cfg;
        self.entry_actions(st, out);
        self.reader_actions(st, out);
        for s in 0..c.shards {
            if self.trim_due(st, s) {
                out.push(Action::Trim(s));
            }
            let n = &st.nodes[usize::from(s)];
            if n.master != n.replica && self.failover_possible(st) {
                out.push(Action::Replicate(s));
            }
        }
        if st.svc != Svc::Idle || self.service_work(st) {
            out.push(Action::Service);
        }
        if c.ops.timeout && !st.timed_out {
            if let Svc::Settle { accepted, unread } = st.svc {
                if self.settle_waits(st, accepted, unread) {
                    out.push(Action::SettleTimeout);
                }
            }
        }
        if st.restore != Restore::Idle || st.nodes.iter().any(|n| n.master.state().is_none()) {
            out.push(Action::Restore);
        }
        if st.releases < c.releases {
            for (&id, cl) in &st.ledger.claims {
                if !cl.released {
                    out.push(Action::Release(id));
                }
            }
        }
        self.fault_actions(st, out);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut st = last.clone();
        let changed = match action {
            Action::Enter(u) => {
                self.enter(&mut st, u);
                true
            }
            Action::Tick => {
                st.past = true;
                true
            }
            Action::Read { reader, shard } => {
                st.readers[usize::from(reader)] = self.read_of(&st, shard);
                true
            }
            Action::Commit(r) => {
                let read = st.readers[usize::from(r)].take().expect("listed");
                self.commit(&mut st, read)
            }
            Action::Trim(s) => {
                Self::trim(&mut st, s);
                true
            }
            Action::Replicate(s) => {
                let n = &mut st.nodes[usize::from(s)];
                n.replica = n.master.clone();
                true
            }
            Action::Service => self.service(&mut st),
            Action::SettleTimeout => {
                st.timed_out = true;
                st.svc = Svc::Record {
                    ranks: st.ledger.best(self.cfg.k()),
                    total: st.ledger.entries.len() as u32,
                };
                true
            }
            Action::Restore => self.restore_step(&mut st),
            Action::Release(id) => {
                st.releases += 1;
                st.ledger.claims.get_mut(&id).expect("listed").released = true;
                st.ledger.left += 1;
                true
            }
            Action::Lose(s) => {
                self.lose(&mut st, s);
                true
            }
            Action::Failover(s) => {
                self.failover(&mut st, s);
                true
            }
            Action::Crash(a) => {
                Self::crash(&mut st, a);
                true
            }
        };
        if !changed {
            return None;
        }
        self.canonical(&mut st);
        (st != *last).then_some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        super::properties::all()
    }
}
