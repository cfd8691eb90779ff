//! The hold's settle (`shard-router/src/protocol.rs`'s keep and undo): kept after a
//! take, undone after a walk that took nothing.

use crate::gateway_state::{Pc, Reply};
use crate::keyspace::Answer;
use crate::mutant::Mutant;
use crate::scripts::{self, SettleReply, Verb};
use crate::system::{State, System};

impl System {
    /// Settles the hold: keep after a take, undo otherwise.
    pub(super) fn step_undo_or_keep(&self, st: &mut State, t: usize, lag: bool) -> bool {
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
}
