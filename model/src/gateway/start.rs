//! A request's first step (`shard-router/src/protocol.rs`'s claim on the home shard): the
//! answer from memory when every shard is sold out in the gateway's cache, otherwise
//! claim.lua on the home shard, whose hold starts the take walk.

use crate::gateway_state::{Pc, Reply, Task};
use crate::keyspace::ShardId;
use crate::mutant::Mutant;
use crate::scripts::{self, ClaimArgs, ClaimReply};
use crate::system::{State, System};

/// Where a request goes after its claim.
enum Next {
    Answer(Reply),
    Go(Pc),
}

impl System {
    pub(super) fn start(
        &self,
        st: &mut State,
        t: usize,
        task: &Task,
        home: ShardId,
        lag: bool,
    ) -> bool {
        let g = usize::from(task.gw);
        if self.all_empty(&st.gateways[g]) {
            return self.sold_out_from_memory(st, t, task, home, lag);
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
        match self.after_claim(st, task, home, reply, walk, lag) {
            Next::Answer(answer) => self.finish(st, t, answer),
            Next::Go(pc) => {
                st.tasks[t].pc = pc;
                true
            }
        }
    }

    /// Every shard empty in the gateway's cache: 410 from memory, unless the replay
    /// filter or the replay read knows better.
    fn sold_out_from_memory(
        &self,
        st: &mut State,
        t: usize,
        task: &Task,
        home: ShardId,
        lag: bool,
    ) -> bool {
        if self.cfg.mutant_is(Mutant::ReplayAfterCache) {
            return self.finish(st, t, Reply::SoldOut);
        }
        let gw = &st.gateways[usize::from(task.gw)];
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
        self.finish(st, t, answer)
    }

    /// What follows claim.lua's reply: the client's answer, or under a hold the walk
    /// (unconfirmed: the undo).
    fn after_claim(
        &self,
        st: &mut State,
        task: &Task,
        home: ShardId,
        reply: ClaimReply,
        walk: Vec<ShardId>,
        lag: bool,
    ) -> Next {
        Next::Answer(match reply {
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
                return Next::Go(if lag {
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
                });
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
        })
    }
}
