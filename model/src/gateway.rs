//! Gateways: their requests in flight, whose steps are `shard-router/src/protocol.rs`
//! (claim on the home shard; under a hold, the take walk over the other shards; settle),
//! the sold-out cache fed by outcomes and Pub/Sub events, the replay filter
//! (`gateway/src/replay_filter.rs`) and the replay read (`shard-router/src/replay.rs`).
//! Every Redis step runs with replica durability: a step whose WAIT a replica did not
//! acknowledge (`lag`) is not acknowledged to the client.
//!
//! Layout: this file lists a gateway's actions, starts a request, runs its next step and
//! ends it with its answer (checked against the request's earlier answers); `start.rs` is
//! the first step (memory or claim.lua), `walk.rs` the take walk, `settle.rs` the hold's
//! keep or undo, `replay.rs` the replay read, `events.rs` the events and the filter.

mod events;
mod replay;
mod settle;
mod start;
mod walk;

use crate::gateway_state::{Gateway, Pc, Reply, Task};
use crate::keyspace::{ClaimId, Rid, ShardId, Units, User};
use crate::system::{Action, State, System, Violation};

impl System {
    pub(crate) fn gateway_actions(&self, st: &State, out: &mut Vec<Action>) {
        for (&(user, rid), req) in &st.requests {
            if req.attempts_left > 0 {
                for gw in 0..self.cfg.gateways {
                    out.push(Action::Send { user, rid, gw });
                }
            }
        }
        let lag = self.cfg.ops.replica_lag && self.can_fault(st);
        for t in 0..st.tasks.len() {
            let task = t as u8;
            out.push(Action::Step { task, lag: false });
            if lag {
                out.push(Action::Step { task, lag: true });
            }
        }
        if st.gateways.iter().any(|g| !g.inbox.is_empty()) {
            out.push(Action::Deliver);
        }
        for (g, gw) in st.gateways.iter().enumerate() {
            let g = g as u8;
            if !gw.inbox.is_empty() && self.cfg.ops.lose_event && self.can_fault(st) {
                out.push(Action::LoseEvent(g));
            }
            if self.cfg.ops.replay_filter && self.all_empty(gw) {
                match &gw.filter {
                    None => out.push(Action::ReadFilter(g)),
                    Some(f) if f.at < st.now => out.push(Action::RevalidateFilter(g)),
                    Some(_) => {}
                }
            }
            if self.cfg.ops.gateway_crash && self.can_fault(st) {
                out.push(Action::CrashGateway(g));
            }
        }
    }

    fn all_empty(&self, gw: &Gateway) -> bool {
        gw.cache.len() == usize::from(self.cfg.shards)
    }

    pub(crate) fn send(&self, st: &mut State, user: User, rid: Rid, gw: u8) -> bool {
        let Some(req) = st.requests.get_mut(&(user, rid)) else {
            return false;
        };
        req.attempts_left -= 1;
        st.tasks.push(Task {
            gw,
            user,
            rid,
            qty: 1,
            pc: Pc::Start,
        });
        true
    }

    pub(crate) fn step(&self, st: &mut State, t: usize, lag: bool) -> bool {
        if lag {
            st.faults += 1;
        }
        let task = st.tasks[t].clone();
        let home = self.cfg.home(task.user);
        match task.pc {
            Pc::Start => self.start(st, t, &task, home, lag),
            Pc::Walking { .. } => self.take_next(st, t, lag),
            Pc::Keeping { .. } | Pc::Undoing { .. } => self.step_undo_or_keep(st, t, lag),
        }
    }

    fn note(&self, st: &mut State, gw: u8, shard: ShardId, remaining: Units) {
        let cache = &mut st.gateways[usize::from(gw)].cache;
        if remaining <= 0 {
            cache.insert(shard);
        } else {
            cache.remove(&shard);
        }
    }

    /// Ends request `t` with `reply`, and checks `replay` against its earlier answers.
    fn finish(&self, st: &mut State, t: usize, reply: Reply) -> bool {
        let task = st.tasks.remove(t);
        st.answers.push((task.user, task.rid, reply));
        if let Some(c) = reply.success() {
            st.acked.insert((c, task.user, task.qty));
        }
        let gw = &st.gateways[usize::from(task.gw)];
        let residual = gw.lost || !gw.inbox.is_empty();
        let req = st
            .requests
            .get_mut(&(task.user, task.rid))
            .expect("every task has its request");
        // A claim void with its shard (master and replica lost at once) has no answer left
        // to replay: beyond `replica` durability, like its acknowledgement. Either side: a
        // stalled first send may name its void claim after a retry won another (the lost
        // stream hands out ids again, and they differ from the lost ones).
        let void_claim = |c: ClaimId| st.voidable.contains(&(c, task.user));
        let void = req.success.is_some_and(void_claim) || reply.success().is_some_and(void_claim);
        match (req.success, reply.success()) {
            _ if void => {}
            (Some(first), Some(now)) if first != now => {
                st.violations
                    .insert(Violation::DifferentSuccess(task.user, task.rid));
            }
            (Some(_), None) if reply == Reply::SoldOutFiltered && residual => {
                st.residuals = st.residuals.saturating_add(1);
            }
            (Some(_), None) if reply.refusal() => {
                st.violations
                    .insert(Violation::RefusalAfterSuccess(task.user, task.rid, reply));
            }
            (None, Some(now)) => req.success = Some(now),
            _ => {}
        }
        true
    }

    pub(crate) fn crash_gateway(&self, st: &mut State, g: u8) -> bool {
        st.faults += 1;
        st.tasks.retain(|t| t.gw != g);
        st.gateways[usize::from(g)] = Gateway::default();
        true
    }
}
