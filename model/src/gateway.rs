//! Gateways: their requests in flight, whose steps are `shard-router/src/protocol.rs`
//! (claim on the home shard; under a hold, the take walk over the other shards; settle),
//! the sold-out cache fed by outcomes and Pub/Sub events, the replay filter
//! (`gateway/src/replay_filter.rs`) and the replay read (`shard-router/src/replay.rs`).
//! Every Redis step runs with replica durability: a step whose WAIT a replica did not
//! acknowledge (`lag`) is not acknowledged to the client.

use crate::gateway_state::{Filter, Gateway, Pc, Reply, Task};
use crate::keyspace::{Answer, ClaimId, Event, Rid, ShardId, Units, User};
use crate::mutant::Mutant;
use crate::scripts::{self, ClaimArgs, ClaimReply, SettleReply, TakeArgs, TakeReply, Verb};
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
            Pc::Walking {
                seq,
                gen,
                deadline,
                mut walk,
            } => {
                let g = usize::from(task.gw);
                // A shard learnt empty since the walk was planned is skipped.
                walk.retain(|s| !st.gateways[g].cache.contains(s));
                let Some(&shard) = walk.first() else {
                    st.tasks[t].pc = Pc::Undoing {
                        seq,
                        gen,
                        answer: Reply::SoldOut,
                    };
                    return self.step_undo_or_keep(st, t, lag);
                };
                walk.remove(0);
                if !self.guarded(st, shard) {
                    st.tasks[t].pc = Pc::Undoing {
                        seq,
                        gen,
                        answer: Reply::Restoring,
                    };
                    return true;
                }
                let args = TakeArgs {
                    user: task.user,
                    qty: task.qty,
                    now: st.now,
                    seq,
                    home,
                    rid: Some(task.rid),
                    shard,
                    deadline,
                    hold_gen: gen,
                };
                let mut ev = Vec::new();
                let now = st.now;
                let reply = scripts::take(st.master(shard), &args, now, self.cfg.mutant, &mut ev);
                st.publish(&ev);
                if !lag {
                    st.sync(shard);
                }
                let next = match reply {
                    TakeReply::Claimed { claim, remaining } => {
                        self.note(st, task.gw, shard, remaining);
                        Pc::Keeping {
                            seq,
                            gen,
                            claim,
                            confirmed: !lag,
                        }
                    }
                    TakeReply::SoldOut { remaining } => {
                        self.note(st, task.gw, shard, remaining);
                        if walk.is_empty() {
                            Pc::Undoing {
                                seq,
                                gen,
                                answer: Reply::SoldOut,
                            }
                        } else {
                            Pc::Walking {
                                seq,
                                gen,
                                deadline,
                                walk,
                            }
                        }
                    }
                    // A missing slice is 503 too (the gateway's `Restoring`).
                    TakeReply::HoldExpired | TakeReply::NotPreheated => Pc::Undoing {
                        seq,
                        gen,
                        answer: Reply::Unavailable,
                    },
                    TakeReply::NotStarted | TakeReply::Ended | TakeReply::BadArgument => {
                        Pc::Undoing {
                            seq,
                            gen,
                            answer: Reply::Refused,
                        }
                    }
                };
                st.tasks[t].pc = next;
                true
            }
            Pc::Keeping { .. } | Pc::Undoing { .. } => self.step_undo_or_keep(st, t, lag),
        }
    }

    fn start(&self, st: &mut State, t: usize, task: &Task, home: ShardId, lag: bool) -> bool {
        let g = usize::from(task.gw);
        if self.all_empty(&st.gateways[g]) {
            if self.cfg.mutant_is(Mutant::ReplayAfterCache) {
                return self.finish(st, t, Reply::SoldOut);
            }
            let gw = &st.gateways[g];
            if let Some(f) = &gw.filter {
                if f.at == st.now && !f.users.contains(&task.user) {
                    return self.finish(st, t, Reply::SoldOutFiltered);
                }
            }
            // Sold out from memory: no answer over a missing slice is 503 (the answer may
            // be lost with it until the rebuild: `replay_confirmed_live`).
            let slice_missing = st.nodes[usize::from(home)].master.stock.is_none();
            // Nor over a process the ledger has not vouched for: its answers may be older.
            let restoring = crate::vouch::unvouched(st, home)
                && !self.cfg.mutant_is(Mutant::ReplayReadIgnoresVouch);
            let answer = match self.replay_read(st, task, home, Reply::SoldOut, lag) {
                Reply::SoldOut if slice_missing => Reply::Unavailable,
                Reply::SoldOut if restoring => Reply::Restoring,
                a => a,
            };
            return self.finish(st, t, answer);
        }
        let walk: Vec<ShardId> = self
            .cfg
            .others(task.user)
            .filter(|s| !st.gateways[g].cache.contains(s))
            .collect();
        let args = ClaimArgs {
            user: task.user,
            qty: task.qty,
            now: st.now,
            rid: Some(task.rid),
            shard: home,
            hold_ttl: if walk.is_empty() {
                0
            } else {
                self.cfg.hold_ttl
            },
        };
        if !self.guarded(st, home) {
            return self.finish(st, t, Reply::Restoring);
        }
        let mut ev = Vec::new();
        let reply = scripts::claim(st.master(home), &args, self.cfg.mutant, &mut ev);
        st.publish(&ev);
        if !lag {
            st.sync(home);
        }
        let answer = match reply {
            ClaimReply::Claimed {
                claim, remaining, ..
            } => {
                self.note(st, task.gw, home, remaining);
                if lag {
                    Reply::Unavailable
                } else {
                    Reply::Created(claim)
                }
            }
            ClaimReply::Replay { claim, shard, .. } => {
                if lag {
                    Reply::Unavailable
                } else if shard != home {
                    // A reroute's replay: its take must be confirmed on its own shard.
                    match self.replay_read(st, task, home, Reply::Unavailable, false) {
                        Reply::Replayed(c) if c == claim => Reply::Replayed(c),
                        _ => Reply::Unavailable,
                    }
                } else {
                    Reply::Replayed(claim)
                }
            }
            ClaimReply::Hold {
                seq,
                remaining,
                gen,
            } => {
                self.note(st, task.gw, home, remaining);
                st.tasks[t].pc = if lag {
                    // A take under a hold the home replica may not have: undo, 503.
                    Pc::Undoing {
                        seq,
                        gen,
                        answer: Reply::Unavailable,
                    }
                } else {
                    Pc::Walking {
                        seq,
                        gen,
                        deadline: self.cfg.take_deadline(st.now),
                        walk,
                    }
                };
                return true;
            }
            ClaimReply::SoldOut { remaining } => {
                self.note(st, task.gw, home, remaining);
                Reply::SoldOut
            }
            ClaimReply::LimitReached { .. } => Reply::Limit,
            ClaimReply::InProgress => Reply::InProgress,
            // A known SKU with a slice missing: 503 (`Refusal::Restoring`), after the
            // replay read.
            ClaimReply::NotPreheated => self.replay_read(st, task, home, Reply::Unavailable, lag),
            ClaimReply::NotStarted | ClaimReply::Ended | ClaimReply::BadArgument => Reply::Refused,
        };
        self.finish(st, t, answer)
    }

    /// Settles the hold: keep after a take, undo otherwise.
    fn step_undo_or_keep(&self, st: &mut State, t: usize, lag: bool) -> bool {
        let task = st.tasks[t].clone();
        let home = self.cfg.home(task.user);
        // A hold placed under one process is never settled on another: the hold stays for
        // the consumer to resolve, the retry after the rebuild gets its answer.
        if !self.guarded(st, home) {
            return self.finish(st, t, Reply::Restoring);
        }
        match task.pc {
            Pc::Keeping {
                seq,
                gen,
                claim,
                confirmed,
            } => {
                let answer = Answer::Done {
                    claim,
                    shard: claim.shard,
                    qty: task.qty,
                    tentative: true,
                };
                let settled = scripts::settle(
                    st.master(home),
                    task.user,
                    seq,
                    Verb::Keep(answer),
                    Some(task.rid),
                    Some(gen),
                );
                if !lag {
                    st.sync(home);
                }
                // The unit is taken and recorded whatever settle says; a hold gone was
                // settled by someone else (or is another claim's after a loss): the stored
                // answer decides, not this attempt (protocol.rs `keep`, `HoldSettled`).
                let ok = confirmed && !lag && settled != SettleReply::HoldGone;
                if ok {
                    st.reroutes = st.reroutes.saturating_add(1);
                }
                self.finish(
                    st,
                    t,
                    if ok {
                        Reply::Created(claim)
                    } else {
                        Reply::Unavailable
                    },
                )
            }
            Pc::Undoing { seq, gen, answer } => {
                let verb = if self.cfg.mutant_is(Mutant::SettleKeepsFailedTake) {
                    Verb::Keep(Answer::Pending)
                } else {
                    Verb::Undo
                };
                let r = scripts::settle(
                    st.master(home),
                    task.user,
                    seq,
                    verb,
                    Some(task.rid),
                    Some(gen),
                );
                if !lag {
                    st.sync(home);
                }
                // A hold gone by now was resolved behind this request (protocol.rs,
                // `take_elsewhere`): its answer is no longer this walk's to give.
                let answer = match r {
                    SettleReply::HoldGone => Reply::Unavailable,
                    _ => answer,
                };
                self.finish(st, t, answer)
            }
            _ => unreachable!("only settles come here"),
        }
    }

    /// The replay read: the stored answer on the home shard under a fence; a tentative
    /// reroute also needs its record on the taking shard under a fence there, and is then
    /// made final. `otherwise` when nothing is stored.
    fn replay_read(
        &self,
        st: &mut State,
        task: &Task,
        home: ShardId,
        otherwise: Reply,
        lag: bool,
    ) -> Reply {
        if lag {
            return Reply::Unavailable;
        }
        st.sync(home);
        let stored = st.nodes[usize::from(home)]
            .master
            .req
            .get(&(task.user, task.rid))
            .copied();
        match stored {
            None => otherwise,
            Some(Answer::Pending) => Reply::InProgress,
            Some(Answer::Done {
                claim,
                tentative: false,
                ..
            }) => Reply::Replayed(claim),
            Some(Answer::Done {
                claim, shard, qty, ..
            }) => {
                let on_shard = st.nodes[usize::from(shard)]
                    .master
                    .stream
                    .iter()
                    .any(|(&e, r)| {
                        r.claim_id(e) == claim && r.user == task.user && r.rid == Some(task.rid)
                    });
                if !on_shard {
                    return Reply::Unavailable;
                }
                st.sync(shard);
                let fin = Answer::Done {
                    claim,
                    shard,
                    qty,
                    tentative: false,
                };
                scripts::settle(
                    st.master(home),
                    task.user,
                    0,
                    Verb::Final(fin),
                    Some(task.rid),
                    None,
                );
                st.sync(home);
                Reply::Replayed(claim)
            }
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

    /// Every subscriber processes what it received. One step for all of them: a gateway
    /// that has not processed an event yet is a gateway that lost it until then, which
    /// [`Action::LoseEvent`] explores.
    pub(crate) fn deliver(&self, st: &mut State) -> bool {
        for gw in &mut st.gateways {
            for ev in std::mem::take(&mut gw.inbox) {
                // Every event about the SKU drops the filter read for its sold-out state.
                gw.filter = None;
                match ev {
                    Event::Empty(s) => gw.cache.insert(s),
                    Event::Restock(s) => gw.cache.remove(&s),
                };
            }
        }
        true
    }

    pub(crate) fn lose_event(&self, st: &mut State, g: u8) -> bool {
        st.faults += 1;
        let gw = &mut st.gateways[usize::from(g)];
        gw.inbox.remove(0);
        gw.lost = true;
        true
    }

    /// `replay_users`: every slice present and at most 0, every meta there; the users are
    /// the union of the `useq` hashes.
    pub(crate) fn read_filter(&self, st: &mut State, g: u8) -> bool {
        let Some(count) = self.sold_out_marks(st) else {
            return false;
        };
        let users = st
            .nodes
            .iter()
            .flat_map(|n| n.master.useq.keys().copied())
            .collect();
        st.gateways[usize::from(g)].filter = Some(Filter {
            users,
            count,
            at: st.now,
        });
        true
    }

    /// `replay_users_unchanged`: the marks again; unchanged confirms the set.
    pub(crate) fn revalidate_filter(&self, st: &mut State, g: u8) -> bool {
        let marks = self.sold_out_marks(st);
        let now = st.now;
        let gw = &mut st.gateways[usize::from(g)];
        match (marks, gw.filter.as_mut()) {
            (Some(count), Some(f)) if count == f.count => f.at = now,
            _ => gw.filter = None,
        }
        true
    }

    fn sold_out_marks(&self, st: &State) -> Option<usize> {
        let sold_out = st
            .nodes
            .iter()
            .all(|n| n.master.meta.is_some() && n.master.stock.is_some_and(|s| s <= 0));
        sold_out.then(|| st.nodes.iter().map(|n| n.master.useq.len()).sum())
    }

    pub(crate) fn crash_gateway(&self, st: &mut State, g: u8) -> bool {
        st.faults += 1;
        st.tasks.retain(|t| t.gw != g);
        st.gateways[usize::from(g)] = Gateway::default();
        true
    }
}
