//! `lua/settle.lua`.

use crate::keyspace::{Answer, Rid, Shard, Units, User};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Keep the hold: the take succeeded; store this answer (tentative or not).
    Keep(Answer),
    /// Give the count back: nothing was taken.
    Undo,
    /// Make a tentative answer final (or replace a `P`); touches no hold.
    Final(Answer),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettleReply {
    Settled { qty: Units },
    HoldGone,
    BadArgument,
}

fn untentative(a: Answer) -> Answer {
    match a {
        Answer::Done {
            claim, shard, qty, ..
        } => Answer::Done {
            claim,
            shard,
            qty,
            tentative: false,
        },
        p => p,
    }
}

/// `hold_gen`: the name of the caller's hold, the rebuild generation it was placed under
/// (`ARGV[7]`), or none (any hold of that `user|seq`). A hold of another generation is
/// another claim's (a loss restarted the sequence: a retry's) and is left standing.
pub fn settle(
    sh: &mut Shard,
    user: User,
    seq: u32,
    verb: Verb,
    rid: Option<Rid>,
    hold_gen: Option<u32>,
) -> SettleReply {
    if let Verb::Final(answer) = verb {
        // `final` names its answer without the `~`; it applies over a `P` or over the same
        // answer still tentative.
        let Some(rid) = rid else {
            return SettleReply::HoldGone;
        };
        let fin = untentative(answer);
        let tentative = match fin {
            Answer::Done {
                claim, shard, qty, ..
            } => Answer::Done {
                claim,
                shard,
                qty,
                tentative: true,
            },
            p => p,
        };
        let seen = sh.req.get(&(user, rid)).copied();
        if seen != Some(Answer::Pending) && seen != Some(tentative) {
            return SettleReply::HoldGone;
        }
        sh.req.insert((user, rid), fin);
        return SettleReply::Settled { qty: 0 };
    }
    let Some(placed) = sh.holds.get(&(user, seq)).map(|h| h.gen) else {
        return SettleReply::HoldGone;
    };
    if hold_gen.is_some_and(|g| g != placed) {
        return SettleReply::HoldGone;
    }
    let hold = sh.holds.remove(&(user, seq)).expect("checked above");
    match verb {
        Verb::Keep(answer) => {
            if let Some(rid) = rid {
                if sh.req.get(&(user, rid)).copied() != Some(untentative(answer)) {
                    sh.req.insert((user, rid), answer);
                }
            }
        }
        Verb::Undo => {
            let held = sh.users.entry(user).or_insert(0);
            *held -= hold.qty;
            if *held <= 0 {
                sh.users.remove(&user);
            }
            if let Some(rid) = rid {
                sh.req.remove(&(user, rid));
            }
        }
        Verb::Final(_) => unreachable!("handled above"),
    }
    SettleReply::Settled { qty: hold.qty }
}
