//! The random steps: every script with arguments both sides get alike, and the faults a
//! test applies to both sides by hand.
//!
//! Arguments lean on the model's state (holds that exist, claim ids seen, the shard's
//! generation) so the interesting branches come up, and sometimes miss it on purpose
//! (holds that never were, ids released twice, deadlines past, older generations).

use model::keyspace::{Answer, ClaimId, Rid, Shard, ShardId, Units, User};
use model::scripts::{ClaimArgs, TakeArgs, Verb};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::Rng;

use crate::ids::FAKE_BASE;
use crate::keys::{RIDS, SHARDS, USERS, WAVES};

/// The campaign window every preheat uses unless it picks another on purpose, and the
/// gateway clock a claim or take sends: synthetic, since only take's deadline is judged by
/// Redis's own clock.
pub(crate) const START: i64 = 1_000;
pub(crate) const END: i64 = 9_000;
const NOW: i64 = 5_000;
/// How far from Redis's clock a take's deadline is, so TIME decides it one way for sure.
pub(crate) const DEADLINE_MARGIN_MS: i64 = 3_600_000;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Fault {
    /// The slice is lost (a failover, an operator): scripts answer "not preheated".
    DelSlice,
    /// The meta is lost.
    DelMeta,
    /// rebuild_fence.lua's `rebuild` field (only over a meta that exists: the model's meta
    /// is all fields or none).
    Fence,
    Unfence,
    /// A rebuild's new generation.
    SetGen(u32),
    /// Debt as rebuild / rebuild_late / reconcile_fix leave it (0 deletes the key).
    SetDebt(Units),
}

#[derive(Clone, Debug)]
pub(crate) enum Step {
    Claim {
        args: ClaimArgs,
    },
    /// `late`: the deadline is an hour behind Redis's clock, else an hour ahead.
    Take {
        args: TakeArgs,
        late: bool,
    },
    Settle {
        shard: ShardId,
        user: User,
        seq: u32,
        verb: Verb,
        rid: Option<Rid>,
        /// The generation the settle names its hold by (`ARGV[7]`), or none (any hold).
        hold_gen: Option<u32>,
    },
    Preheat {
        shard: ShardId,
        slice: Units,
        limit: Units,
        start: i64,
        end: i64,
    },
    ReleaseStock {
        shard: ShardId,
        claim: ClaimId,
        qty: Units,
    },
    ReleaseUser {
        shard: ShardId,
        claim: ClaimId,
        user: User,
        qty: Units,
    },
    Wave {
        shard: ShardId,
        id: u8,
        units: Units,
    },
    Fault {
        shard: ShardId,
        fault: Fault,
    },
    /// Close-out of the whole campaign on both sides (FLUSHALL, empty shards), so the sets
    /// and streams a long run grows stay small enough to compare whole after every step.
    Reset,
}

impl Step {
    /// The shards whose keys the step may change.
    pub(crate) fn shards(&self) -> Vec<ShardId> {
        match self {
            Step::Claim { args, .. } => vec![args.shard],
            Step::Take { args, .. } => vec![args.shard],
            Step::Settle { shard, .. }
            | Step::Preheat { shard, .. }
            | Step::ReleaseStock { shard, .. }
            | Step::ReleaseUser { shard, .. }
            | Step::Wave { shard, .. }
            | Step::Fault { shard, .. } => vec![*shard],
            Step::Reset => (0..SHARDS).collect(),
        }
    }
}

/// A claim the run saw succeed, for releases and stored answers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    pub(crate) claim: ClaimId,
    pub(crate) user: User,
    pub(crate) qty: Units,
    pub(crate) home: ShardId,
}

fn rid(rng: &mut StdRng) -> Option<Rid> {
    if rng.random_bool(0.4) {
        None
    } else {
        Some(rng.random_range(0..RIDS))
    }
}

fn now(rng: &mut StdRng) -> i64 {
    match rng.random_range(0..40) {
        0 => START - 1,
        1 => START,
        2 => END - 1,
        3 => END,
        4 => END + 500,
        _ => NOW,
    }
}

fn qty(rng: &mut StdRng) -> Units {
    match rng.random_range(0..30) {
        0 => 0,
        1 => -1,
        n if n < 12 => 2,
        _ => 1,
    }
}

fn fake_claim(rng: &mut StdRng) -> ClaimId {
    ClaimId {
        shard: rng.random_range(0..SHARDS),
        entry: FAKE_BASE + rng.random_range(0..5),
    }
}

/// A claim seen (recent ones more often, so a release is often repeated) or made up.
fn claim_of(rng: &mut StdRng, seen: &[Seen]) -> Option<Seen> {
    if seen.is_empty() || rng.random_bool(0.15) {
        return None;
    }
    let recent = &seen[seen.len().saturating_sub(12)..];
    let pool = if rng.random_bool(0.6) { recent } else { seen };
    pool.choose(rng).copied()
}

fn answer(rng: &mut StdRng, seen: &[Seen]) -> Answer {
    let (claim, qty) = match claim_of(rng, seen) {
        Some(s) => (s.claim, s.qty),
        None => (fake_claim(rng), rng.random_range(1..=2)),
    };
    Answer::Done {
        claim,
        shard: claim.shard,
        qty,
        tentative: rng.random_bool(0.5),
    }
}

/// A hold of the model, any shard, as (home, user, seq, qty, rid).
/// A standing hold's quantity and generation.
type Held = (Units, u32);

fn some_hold(rng: &mut StdRng, model: &[Shard]) -> Option<(ShardId, User, u32, Held, Option<Rid>)> {
    let all: Vec<_> = model
        .iter()
        .enumerate()
        .flat_map(|(s, sh)| {
            sh.holds
                .iter()
                .map(move |(&(u, seq), h)| (s as ShardId, u, seq, (h.qty, h.gen), h.rid))
        })
        .collect();
    all.choose(rng).copied()
}

pub(crate) fn random_step(rng: &mut StdRng, model: &[Shard], seen: &[Seen]) -> Step {
    let shard = rng.random_range(0..SHARDS);
    let sh = &model[usize::from(shard)];
    match rng.random_range(0..100) {
        0..=34 => Step::Claim {
            args: ClaimArgs {
                user: rng.random_range(0..USERS),
                qty: qty(rng),
                now: now(rng),
                rid: rid(rng),
                shard,
                hold_ttl: if rng.random_bool(0.4) { 0 } else { 30_000 },
            },
        },
        35..=49 => {
            let (home, user, seq, qty, rid) = match some_hold(rng, model) {
                Some((home, u, seq, (qty, _), r)) if rng.random_bool(0.8) => (home, u, seq, qty, r),
                _ => (
                    rng.random_range(0..SHARDS),
                    rng.random_range(0..USERS),
                    rng.random_range(1..5),
                    1,
                    rid(rng),
                ),
            };
            let gen = sh.gen();
            let hold_gen = match rng.random_range(0..10) {
                0 if gen > 0 => gen - 1,
                1 => gen + 1,
                _ => gen,
            };
            Step::Take {
                args: TakeArgs {
                    user,
                    qty: if rng.random_bool(0.05) { 0 } else { qty },
                    now: now(rng),
                    seq,
                    home,
                    rid,
                    shard: if rng.random_bool(0.85) && home != shard {
                        shard
                    } else {
                        (home + 1) % SHARDS
                    },
                    deadline: 0,
                    hold_gen,
                },
                late: rng.random_bool(0.1),
            }
        }
        50..=64 => {
            // Mostly a hold that stands, settled on its home shard.
            let (shard, user, seq, placed, hold_rid) = match some_hold(rng, model) {
                Some((home, u, seq, (_, g), r)) if rng.random_bool(0.8) => {
                    (home, u, seq, Some(g), r)
                }
                _ => (
                    shard,
                    rng.random_range(0..USERS),
                    rng.random_range(1..5),
                    None,
                    rid(rng),
                ),
            };
            let sh = &model[usize::from(shard)];
            let rid = if rng.random_bool(0.85) {
                hold_rid
            } else {
                self::rid(rng)
            };
            let verb = match rng.random_range(0..10) {
                0..=3 => Verb::Keep(if rng.random_bool(0.05) {
                    Answer::Pending
                } else {
                    answer(rng, seen)
                }),
                4..=6 => Verb::Undo,
                _ => {
                    // The answer a `final` names: mostly the one stored (so it applies),
                    // never with the `~` (the gateway sends it without; the model's Final
                    // drops a `~` it is given, where the script would compare `~~…`).
                    let stored = rid.and_then(|r| sh.req.get(&(user, r)).copied());
                    let a = match stored {
                        Some(a @ Answer::Done { .. }) if rng.random_bool(0.7) => a,
                        _ if rng.random_bool(0.05) => Answer::Pending,
                        _ => answer(rng, seen),
                    };
                    Verb::Final(match a {
                        Answer::Done {
                            claim, shard, qty, ..
                        } => Answer::Done {
                            claim,
                            shard,
                            qty,
                            tentative: false,
                        },
                        p => p,
                    })
                }
            };
            // The generation a settle names its hold by: mostly the hold's own, sometimes an
            // older or newer one (a stalled attempt's, after a loss restarted the sequence),
            // sometimes none (any hold).
            let gen = placed.unwrap_or_else(|| sh.gen());
            let hold_gen = match rng.random_range(0..10) {
                0..=3 => Some(gen),
                4..=5 => Some(gen.saturating_sub(1)),
                6 => Some(gen + 1),
                _ => None,
            };
            Step::Settle {
                shard,
                user,
                seq,
                verb,
                rid,
                hold_gen,
            }
        }
        65..=72 => {
            let s = claim_of(rng, seen);
            let (claim, qty) = s.map_or_else(|| (fake_claim(rng), 1), |s| (s.claim, s.qty));
            Step::ReleaseStock {
                // The shard the units came from, mostly.
                shard: if rng.random_bool(0.9) {
                    claim.shard
                } else {
                    shard
                },
                claim,
                qty: if rng.random_bool(0.05) { 0 } else { qty },
            }
        }
        73..=79 => {
            let s = claim_of(rng, seen);
            let (claim, user, qty, home) = s.map_or_else(
                || (fake_claim(rng), rng.random_range(0..USERS), 1, shard),
                |s| (s.claim, s.user, s.qty, s.home),
            );
            Step::ReleaseUser {
                shard: if rng.random_bool(0.9) { home } else { shard },
                claim,
                user,
                qty: if rng.random_bool(0.05) { 0 } else { qty },
            }
        }
        80..=87 => Step::Wave {
            shard,
            id: rng.random_range(0..WAVES),
            units: match rng.random_range(0..20) {
                0 => -1,
                1..=3 => 0,
                _ => rng.random_range(1..=4),
            },
        },
        88..=93 => {
            // Mostly where the slice or meta is missing, so a campaign comes back.
            let missing: Vec<ShardId> = (0..SHARDS)
                .filter(|&s| {
                    let sh = &model[usize::from(s)];
                    sh.stock.is_none() || sh.meta.is_none()
                })
                .collect();
            match missing.choose(rng) {
                Some(&s) if rng.random_bool(0.7) => preheat(rng, s),
                _ => preheat(rng, shard),
            }
        }
        _ => Step::Fault {
            shard,
            fault: match rng.random_range(0..16) {
                0 => Fault::DelSlice,
                1 => Fault::DelMeta,
                2 | 3 => Fault::Fence,
                4..=8 => Fault::Unfence,
                9 | 10 => Fault::SetGen(sh.gen() + rng.random_range(0..=1)),
                _ => Fault::SetDebt(rng.random_range(0..=3)),
            },
        },
    }
}

pub(crate) fn preheat(rng: &mut StdRng, shard: ShardId) -> Step {
    let (start, end) = match rng.random_range(0..20) {
        0 => (NOW + 1, END),
        1 => (START, NOW),
        _ => (START, END),
    };
    Step::Preheat {
        shard,
        slice: if rng.random_bool(0.05) {
            -1
        } else {
            rng.random_range(0..=8)
        },
        limit: if rng.random_bool(0.05) {
            0
        } else {
            rng.random_range(1..=6)
        },
        start,
        end,
    }
}
