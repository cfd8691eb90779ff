//! The take walk under a hold (`shard-router/src/protocol.rs`): take.lua on the next
//! shard not known empty, until one takes, every one is tried, or one refuses.

use crate::gateway_state::{Pc, Reply};
use crate::keyspace::ShardId;
use crate::scripts::{self, TakeArgs, TakeReply};
use crate::system::{State, System};

impl System {
    /// The walk's next take; the request's hold is settled next (kept after a take,
    /// undone otherwise) or the walk goes on.
    pub(super) fn take_next(&self, st: &mut State, t: usize, lag: bool) -> bool {
        let task = st.tasks[t].clone();
        let home = self.cfg.home(task.user);
        let Pc::Walking {
            seq,
            gen,
            deadline,
            mut walk,
        } = task.pc
        else {
            unreachable!("only walks come here")
        };
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
        if let TakeReply::Claimed { remaining, .. } | TakeReply::SoldOut { remaining } = reply {
            self.note(st, task.gw, shard, remaining);
        }
        st.tasks[t].pc = after_take(reply, seq, gen, deadline, walk, lag);
        true
    }
}

/// Where a walk goes after take.lua's reply on one shard.
fn after_take(
    reply: TakeReply,
    seq: u32,
    gen: u32,
    deadline: i64,
    walk: Vec<ShardId>,
    lag: bool,
) -> Pc {
    let undo = |answer| Pc::Undoing { seq, gen, answer };
    match reply {
        TakeReply::Claimed { claim, .. } => Pc::Keeping {
            seq,
            gen,
            claim,
            confirmed: !lag,
        },
        TakeReply::SoldOut { .. } if walk.is_empty() => undo(Reply::SoldOut),
        TakeReply::SoldOut { .. } => Pc::Walking {
            seq,
            gen,
            deadline,
            walk,
        },
        // A missing slice is 503 too (the gateway's `Restoring`).
        TakeReply::HoldExpired | TakeReply::NotPreheated => undo(Reply::Unavailable),
        TakeReply::NotStarted | TakeReply::Ended | TakeReply::BadArgument => undo(Reply::Refused),
    }
}
