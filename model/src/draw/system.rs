//! The draw's state (shards with master and replica, the ledger's draw tables and a
//! simplified claim side for grants, the entries readers, the draw service, the restore
//! loop) and its actions, each one atomic step: one script on one shard, one ledger
//! transaction, or one fault. `DrawSystem` is the `stateright::Model`.

use std::collections::{BTreeMap, BTreeSet};

use stateright::{Model, Property};

use super::config::{DrawConfig, DrawMutant, DRAW_AT, ESTART, FIRST_LAST_ID};
use super::scripts::{
    ClaimRef, CloseReply, CountReply, DrawShard, DrawState, EntryId, GrantAnswer, MarkBatch,
    OpenArgs, Prio, User,
};

/// One shard's Redis: the master and a replica holding a prefix of its writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub master: DrawShard,
    pub replica: DrawShard,
    /// New at every failover and loss.
    pub replid: u8,
}

/// `stream_offsets`' row of a shard's entries stream: the last id committed, under which
/// master (`None`: never committed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    pub last: EntryId,
    pub replid: Option<u8>,
}

/// A `draw_entries` row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LedgerEntry {
    pub prio: Prio,
    pub shard: u8,
    pub id: EntryId,
}

/// A claim of the grants (the claim protocol, checked by the claim model, as one step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Claim {
    pub user: User,
    pub released: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ledger {
    /// `draw_entries`, keyed by user (the row's key `(sku, user)`).
    pub entries: BTreeMap<User, LedgerEntry>,
    pub places: Vec<Place>,
    /// `draw_ranks` once recorded (`draws.state = 'drawn'`): rank i+1 is `ranks[i]`.
    pub ranks: Option<Vec<(User, Prio)>>,
    /// `draws.entrants`: how many entries the ranks were drawn from.
    pub entrants: u32,
    pub granted: u32,
    /// The claim side: claims by id, units not claimed, the stored answers of request id
    /// `draw` per user.
    pub claims: BTreeMap<u32, Claim>,
    pub left: u32,
    pub answers: BTreeMap<User, ClaimRef>,
}

impl Ledger {
    pub fn rank_of(&self, u: User) -> Option<u32> {
        self.ranks
            .as_ref()?
            .iter()
            .position(|&(v, _)| v == u)
            .map(|i| i as u32 + 1)
    }

    /// The best `k` entries in draw order: what `entries_in_order` returns.
    pub fn best(&self, k: u32) -> Vec<(User, Prio)> {
        let mut all: Vec<(Prio, User)> = self.entries.iter().map(|(&u, e)| (e.prio, u)).collect();
        all.sort();
        all.into_iter()
            .take(k as usize)
            .map(|(p, u)| (u, p))
            .collect()
    }
}

/// An entries reader's read not committed yet.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Read {
    pub shard: u8,
    pub from: Place,
    pub to: Place,
    pub rows: Vec<(User, Prio, EntryId)>,
}

/// Where the draw service (`draw::run::step`) stands in its pass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Svc {
    Idle,
    /// `draw_close` on shard `next`; `accepted` entrants so far, `unread`: a shard before
    /// it not read up to its close yet.
    Closing {
        next: u8,
        accepted: u32,
        unread: bool,
    },
    /// `entries_last` on shard `next` (its target kept while the master is the same) and
    /// the ledger's place of its stream.
    Last {
        next: u8,
        accepted: u32,
        unread: bool,
    },
    /// Every shard closed: the ledger's count, then its best `k` (and the count they are
    /// drawn from).
    Settle {
        accepted: u32,
        unread: bool,
    },
    /// Ranked from the ledger's `total` entries, to record.
    Record {
        ranks: Vec<(User, Prio)>,
        total: u32,
    },
    /// `draw_state` of shard `next` (closed first when found `open`); `any`: a shard of
    /// this pass marked.
    Marking {
        next: u8,
        any: bool,
    },
    /// mark_shard's first half on shard `next`: the wins (`W|`) of the ledger's grants.
    Wins {
        next: u8,
        any: bool,
    },
    /// mark_shard's second half on shard `next`: the ranks.
    Mark {
        next: u8,
        any: bool,
    },
    /// The SKU metadata with the seed, when a shard was marked or the seed is hidden.
    Reveal {
        any: bool,
    },
    /// The grant pass: the next rank to claim for.
    Granting {
        next: u32,
    },
    /// Claimed (or replayed) for `rank`: the win mark next.
    Won {
        rank: u32,
        user: User,
        claim: ClaimRef,
    },
    /// Marked: `set_granted` next.
    Granted {
        rank: u32,
    },
}

/// The restore loop (`draw::restore`): which shard, with the ledger's state as read when
/// it started (`drawn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Restore {
    Idle,
    /// The ledger's draw read: `draw_open` held (no state) next.
    Found {
        shard: u8,
        drawn: bool,
    },
    /// Opened held under `token`: `draw_restore` of the ledger's entries next.
    Opened {
        shard: u8,
        drawn: bool,
        token: u8,
    },
    /// Drawn: the wins (`W|`) from the ledger's grants next; `n` writes counted so far.
    Wins {
        shard: u8,
        token: u8,
        n: u32,
    },
    /// The marks next.
    Marks {
        shard: u8,
        token: u8,
        n: u32,
    },
    /// Everything back: the clock and `draw_open` with the state next, published only
    /// where the hold counts the restore's `n` writes.
    Publish {
        shard: u8,
        drawn: bool,
        token: u8,
        n: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Actor {
    Service,
    Restore,
    Reader(u8),
}

/// A rule broken on the way (at the step that broke it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Violation {
    /// The ranks recorded are not the ledger's best k at the time.
    RanksNotBest,
    /// The draw was recorded without an acknowledged entry that survived, the settle not
    /// timed out.
    MissedEntry(User),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The draw time has passed (Redis's clock and the gateways' are one).
    pub past: bool,
    pub nodes: Vec<Node>,
    pub ledger: Ledger,
    pub readers: Vec<Option<Read>>,
    pub svc: Svc,
    pub restore: Restore,
    /// Users told `entered` by a fresh entry.
    pub acked: BTreeSet<User>,
    pub timed_out: bool,
    pub violations: BTreeSet<Violation>,
    pub faults: u8,
    pub releases: u8,
    pub next_replid: u8,
    /// The next restore's token (its hold's name).
    pub next_token: u8,
    /// The service's `Closing` targets per shard (in its memory: lost with a crash,
    /// dropped once drawn): the stream's last id after the close, under which master.
    pub targets: Vec<Option<(u8, EntryId)>>,
    /// The SKU metadata shows the seed.
    pub revealed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A user enters (draw_enter.lua on the home shard).
    Enter(User),
    /// The clock passes the draw time.
    Tick,
    /// Reader `reader` reads shard `shard`'s entries after the ledger's place.
    Read {
        reader: u8,
        shard: u8,
    },
    /// Reader `reader` commits its read (rows and the place's compare-and-set).
    Commit(u8),
    /// The guarded trim of a shard's entries stream to the committed place.
    Trim(u8),
    Replicate(u8),
    /// The draw service's next step.
    Service,
    /// The settle wait runs out: the draw goes on from the ledger.
    SettleTimeout,
    /// The restore loop's next step.
    Restore,
    /// A granted unit comes back (a release of an unpaid claim).
    Release(u32),
    Lose(u8),
    Failover(u8),
    Crash(Actor),
}

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

    /// What a reader's round on `s` would read: `None` when it has nothing to commit (an
    /// empty read under the place's master).
    pub fn read_of(&self, st: &State, s: u8) -> Option<Read> {
        let place = st.ledger.places[usize::from(s)];
        let node = &st.nodes[usize::from(s)];
        // The new-master rule: read again from 0-0, and the new place is where that read
        // ended, 0-0 when it found nothing.
        let new_master = place.replid.is_some_and(|r| r != node.replid);
        let after = if new_master { 0 } else { place.last };
        let rows: Vec<(User, Prio, EntryId)> = node
            .master
            .stream
            .range(after + 1..)
            .map(|(&id, e)| (e.user, e.prio, id))
            .collect();
        let base = if new_master && !self.cfg.mutant_is(DrawMutant::PlaceKeptAcrossNewMaster) {
            0
        } else {
            place.last
        };
        let to = Place {
            last: rows.last().map_or(base, |r| r.2),
            replid: Some(node.replid),
        };
        if to == place {
            return None;
        }
        Some(Read {
            shard: s,
            from: place,
            to,
            rows,
        })
    }

    fn commit(&self, st: &mut State, r: Read) -> bool {
        let place = &mut st.ledger.places[usize::from(r.shard)];
        if *place != r.from && !self.cfg.mutant_is(DrawMutant::UnconditionalPlace) {
            // Refused: another reader moved the place; the next round reads from there.
            return true;
        }
        *place = r.to;
        if st.ledger.ranks.is_some() && !self.cfg.mutant_is(DrawMutant::EntriesAfterDrawJoin) {
            // Drawn already (the settle gave up): skipped with the anomaly
            // draw_entry_after_draw; the place moves.
            return true;
        }
        for (u, prio, id) in r.rows {
            st.ledger.entries.entry(u).or_insert(LedgerEntry {
                prio,
                shard: r.shard,
                id,
            });
        }
        true
    }

    /// stream_trim.lua's guard: the master is the place's, and its stream reached it.
    fn trim_due(&self, st: &State, s: u8) -> bool {
        let place = st.ledger.places[usize::from(s)];
        let node = &st.nodes[usize::from(s)];
        place.replid == Some(node.replid)
            && node.master.last_id >= place.last
            && node.master.stream.range(..=place.last).next().is_some()
            && self.read_of(st, s).is_none()
    }

    /// The draw is due: open and past its time, or drawn with ranks not granted yet.
    fn due(&self, st: &State) -> bool {
        match &st.ledger.ranks {
            None => st.past,
            Some(r) => (st.ledger.granted as usize) < r.len(),
        }
    }

    /// The draw loop has something to do for this draw: it is due, or drawn with a shard
    /// `open` or `closed` or the seed hidden.
    pub fn service_work(&self, st: &State) -> bool {
        if self.due(st) {
            return true;
        }
        st.ledger.ranks.is_some()
            && !self.cfg.mutant_is(DrawMutant::MarkOnlyDue)
            && (!st.revealed
                || st
                    .nodes
                    .iter()
                    .any(|n| matches!(n.master.state(), Some(DrawState::Open | DrawState::Closed))))
    }

    /// `draws::record`: `false` when refused (the ledger's count moved since the ranks).
    fn record(&self, st: &mut State, ranks: Vec<(User, Prio)>, total: u32) -> bool {
        if st.ledger.ranks.is_some() {
            return true;
        }
        if st.ledger.entries.len() as u32 != total
            && !self.cfg.mutant_is(DrawMutant::RecordWithoutCount)
        {
            return false;
        }
        // Past the settle's timeout the draw is from what the ledger has when it reads.
        if !st.timed_out && ranks != st.ledger.best(self.cfg.k()) {
            st.violations.insert(Violation::RanksNotBest);
        }
        if !st.timed_out {
            for &u in &st.acked {
                let home = &st.nodes[usize::from(self.cfg.home(u))].master;
                let survived = home.stream.values().any(|e| e.user == u);
                if survived && !st.ledger.entries.contains_key(&u) {
                    st.violations.insert(Violation::MissedEntry(u));
                }
            }
        }
        st.ledger.ranks = Some(ranks);
        st.ledger.entrants = total;
        true
    }

    /// The first half of mark_shard: the wins of the users whose home is `s`, from
    /// draws::wins (each grant's claim, recorded on its rank before the `W|` and before
    /// `granted_rank` moves; here the grant's claim is in the ledger from the grant's
    /// step). A shard the restore opened from a stale read of the draw (still open) has
    /// none, and the marks never write one.
    fn write_wins(&self, st: &mut State, s: u8) {
        let wins: Vec<(User, ClaimRef)> = st
            .ledger
            .claims
            .iter()
            .filter(|(_, c)| self.cfg.home(c.user) == s)
            .map(|(&id, c)| (c.user, ClaimRef { id, shard: s }))
            .collect();
        for (u, c) in wins {
            st.nodes[usize::from(s)].master.won(u, c);
        }
    }

    /// mark_shard: the ranks of the users whose home is `s`, the last batch (`held`: the
    /// restore's, on the shard it holds under that token; then the batches written under
    /// it, none when no user of the shard has a rank, or `None` when not held under it).
    fn mark_shard(&self, st: &mut State, s: u8, held: Option<u8>) -> Option<u32> {
        let mine: Vec<(User, u32)> = st
            .ledger
            .ranks
            .iter()
            .flatten()
            .enumerate()
            .filter(|(_, (u, _))| self.cfg.home(*u) == s)
            .map(|(i, (u, _))| (*u, i as u32 + 1))
            .collect();
        let batch = match held {
            Some(_) if mine.is_empty() => return Some(0),
            Some(token) => MarkBatch::Held(token),
            None => MarkBatch::Last,
        };
        match st.nodes[usize::from(s)].master.mark(batch, &mine) {
            CountReply::Done(_) => Some(1),
            CountReply::NotPreheated => None,
        }
    }

    /// The settle's wait: a shard not read up to its close, or fewer entries than accepted.
    fn settle_waits(&self, st: &State, accepted: u32, unread: bool) -> bool {
        let fewer = (st.ledger.entries.len() as u32) < accepted;
        if self.cfg.mutant_is(DrawMutant::NoSettle) {
            false
        } else if self.cfg.mutant_is(DrawMutant::SettleByCount) {
            fewer
        } else {
            fewer || unread
        }
    }

    fn after_marking(&self, next: u8, any: bool) -> Svc {
        if next + 1 == self.cfg.shards {
            Svc::Reveal { any }
        } else {
            Svc::Marking {
                next: next + 1,
                any,
            }
        }
    }

    pub fn service(&self, st: &mut State) -> bool {
        let shards = self.cfg.shards;
        match st.svc.clone() {
            Svc::Idle => {
                if !self.service_work(st) {
                    return false;
                }
                st.svc = if st.ledger.ranks.is_none() {
                    Svc::Closing {
                        next: 0,
                        accepted: 0,
                        unread: false,
                    }
                } else {
                    Svc::Marking {
                        next: 0,
                        any: false,
                    }
                };
            }
            Svc::Closing {
                next,
                accepted,
                unread,
            } => {
                match st.nodes[usize::from(next)].master.close() {
                    // Lost: the restore puts it back first.
                    CloseReply::NotPreheated => st.svc = Svc::Idle,
                    CloseReply::Closed { entrants, .. } => {
                        st.svc = Svc::Last {
                            next,
                            accepted: accepted + entrants,
                            unread,
                        };
                    }
                }
            }
            Svc::Last {
                next,
                accepted,
                unread,
            } => {
                let s = usize::from(next);
                let node = &st.nodes[s];
                let last = node.master.stream.keys().next_back().copied().unwrap_or(0);
                let target = match st.targets[s] {
                    Some((r, id)) if r == node.replid => id,
                    _ => {
                        st.targets[s] = Some((node.replid, last));
                        last
                    }
                };
                let place = st.ledger.places[s];
                let read = place.replid == Some(node.replid) && place.last >= target;
                let unread = unread || !read;
                st.svc = if next + 1 == shards {
                    Svc::Settle { accepted, unread }
                } else {
                    Svc::Closing {
                        next: next + 1,
                        accepted,
                        unread,
                    }
                };
            }
            Svc::Settle { accepted, unread } => {
                st.svc = if self.settle_waits(st, accepted, unread) && !st.timed_out {
                    // Waits: the next tick closes and looks again.
                    Svc::Idle
                } else {
                    Svc::Record {
                        ranks: st.ledger.best(self.cfg.k()),
                        total: st.ledger.entries.len() as u32,
                    }
                };
            }
            Svc::Record { ranks, total } => {
                st.svc = if self.record(st, ranks, total) {
                    st.targets.iter_mut().for_each(|t| *t = None);
                    Svc::Marking {
                        next: 0,
                        any: false,
                    }
                } else {
                    // An error: the pass ends, the next one draws again.
                    Svc::Idle
                };
            }
            Svc::Marking { next, any } => {
                let wins = if self.cfg.mutant_is(DrawMutant::MarksWithoutWins) {
                    Svc::Mark { next, any }
                } else {
                    Svc::Wins { next, any }
                };
                let master = &mut st.nodes[usize::from(next)].master;
                st.svc = match master.state() {
                    Some(DrawState::Closed) => wins,
                    // Rolled back past its close by a failover: closed first.
                    Some(DrawState::Open) if !self.cfg.mutant_is(DrawMutant::MarkOnlyDue) => {
                        master.close();
                        wins
                    }
                    _ => self.after_marking(next, any),
                };
            }
            Svc::Wins { next, any } => {
                self.write_wins(st, next);
                st.svc = Svc::Mark { next, any };
            }
            Svc::Mark { next, .. } => {
                self.mark_shard(st, next, None);
                st.svc = self.after_marking(next, true);
            }
            Svc::Reveal { any } => {
                if any || !st.revealed {
                    st.revealed = true;
                }
                st.svc = if self.due(st) {
                    Svc::Granting {
                        next: st.ledger.granted + 1,
                    }
                } else {
                    Svc::Idle
                };
            }
            Svc::Granting { next } => {
                let Some(&(user, _)) = st
                    .ledger
                    .ranks
                    .as_ref()
                    .and_then(|r| r.get(next as usize - 1))
                else {
                    st.svc = Svc::Idle;
                    return true;
                };
                // The grant: one unit under request id `draw`, replayed when made before;
                // its stored answer on the user's home shard, confirmed on the replica.
                let claim = if let Some(&c) = st.ledger.answers.get(&user) {
                    Some(c)
                } else if st.ledger.left > 0 {
                    st.ledger.left -= 1;
                    let id = st.ledger.claims.len() as u32 + 1;
                    st.ledger.claims.insert(
                        id,
                        Claim {
                            user,
                            released: false,
                        },
                    );
                    let c = ClaimRef {
                        id,
                        shard: self.cfg.home(user),
                    };
                    st.ledger.answers.insert(user, c);
                    let n = &mut st.nodes[usize::from(self.cfg.home(user))];
                    n.master.grants.insert(user, GrantAnswer::Claim(c));
                    n.replica.grants.insert(user, GrantAnswer::Claim(c));
                    Some(c)
                } else {
                    None
                };
                st.svc = match claim {
                    Some(claim) => Svc::Won {
                        rank: next,
                        user,
                        claim,
                    },
                    // Sold out: the waitlist waits for units to come back.
                    None if self.cfg.mutant_is(DrawMutant::GrantsPastSoldOut) => {
                        Svc::Granting { next: next + 1 }
                    }
                    None => Svc::Idle,
                };
            }
            Svc::Won { rank, user, claim } => {
                let home = self.cfg.home(user);
                st.nodes[usize::from(home)].master.won(user, claim);
                st.svc = Svc::Granted { rank };
            }
            Svc::Granted { rank } => {
                st.ledger.granted = st.ledger.granted.max(rank);
                st.svc = Svc::Granting { next: rank + 1 };
            }
        }
        true
    }

    /// The state a restore gives a shard: drawn once its marks are back; past the draw
    /// time by Redis's clock a draw the ledger has open comes back closed.
    fn restored_state(st: &State, drawn: bool) -> DrawState {
        if drawn {
            DrawState::Drawn
        } else if st.past {
            DrawState::Closed
        } else {
            DrawState::Open
        }
    }

    /// The restore's pages on a shard it holds under `token` (one counted write here: the
    /// model restores every entry in one call); what it does next.
    fn restore_entries(&self, st: &mut State, shard: u8, drawn: bool, token: u8) -> Restore {
        let batch: Vec<(User, Prio, EntryId)> = st
            .ledger
            .entries
            .iter()
            .filter(|(_, e)| e.shard == shard)
            .map(|(&u, e)| (u, e.prio, e.id))
            .collect();
        let reply = st.nodes[usize::from(shard)].master.restore(token, &batch);
        let n = 1;
        if reply == CountReply::NotPreheated {
            Restore::Idle
        } else if !drawn {
            Restore::Publish {
                shard,
                drawn,
                token,
                n,
            }
        } else if self.cfg.mutant_is(DrawMutant::RestoreWithoutWins) {
            Restore::Marks { shard, token, n }
        } else {
            Restore::Wins { shard, token, n }
        }
    }

    pub fn restore_step(&self, st: &mut State) -> bool {
        match st.restore {
            Restore::Idle => {
                let Some(shard) = (0..self.cfg.shards)
                    .find(|&s| st.nodes[usize::from(s)].master.state().is_none())
                else {
                    return false;
                };
                st.restore = Restore::Found {
                    shard,
                    drawn: st.ledger.ranks.is_some(),
                };
            }
            Restore::Found { shard, drawn } => {
                let state = if self.cfg.mutant_is(DrawMutant::RestoreOpensAtOnce) {
                    Some(Self::restored_state(st, drawn))
                } else {
                    None
                };
                let token = st.next_token;
                st.next_token += 1;
                st.nodes[usize::from(shard)]
                    .master
                    .open(self.open_args(state, token, None));
                st.restore = Restore::Opened {
                    shard,
                    drawn,
                    token,
                };
            }
            Restore::Opened {
                shard,
                drawn,
                token,
            } => st.restore = self.restore_entries(st, shard, drawn, token),
            Restore::Wins { shard, token, n } => {
                self.write_wins(st, shard);
                st.restore = if self.cfg.mutant_is(DrawMutant::RestoreWithoutMark) {
                    Restore::Publish {
                        shard,
                        drawn: true,
                        token,
                        n,
                    }
                } else {
                    Restore::Marks { shard, token, n }
                };
            }
            Restore::Marks { shard, token, n } => {
                st.restore = match self.mark_shard(st, shard, Some(token)) {
                    Some(marks) => Restore::Publish {
                        shard,
                        drawn: true,
                        token,
                        n: n + marks,
                    },
                    None => Restore::Idle,
                };
            }
            Restore::Publish {
                shard,
                drawn,
                token,
                n,
            } => {
                let state = Self::restored_state(st, drawn);
                st.nodes[usize::from(shard)].master.open(self.open_args(
                    Some(state),
                    token,
                    Some(n),
                ));
                st.restore = Restore::Idle;
            }
        }
        true
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
}

impl Model for DrawSystem {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, st: &State, out: &mut Vec<Action>) {
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
        for (r, read) in st.readers.iter().enumerate() {
            let r = r as u8;
            match read {
                Some(_) => out.push(Action::Commit(r)),
                None => {
                    for s in 0..c.shards {
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
        if st.faults < c.faults {
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
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut st = last.clone();
        let c = &self.cfg;
        let changed = match action {
            Action::Enter(u) => {
                let now = Self::now(&st);
                let reply = st.nodes[usize::from(c.home(u))]
                    .master
                    .enter(u, c.prio(u), now);
                if let super::scripts::EnterReply::Entered { fresh: true, .. } = reply {
                    st.acked.insert(u);
                }
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
                let last = st.ledger.places[usize::from(s)].last;
                let m = &mut st.nodes[usize::from(s)].master;
                m.stream = m.stream.split_off(&(last + 1));
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
                    ranks: st.ledger.best(c.k()),
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
                st.faults += 1;
                let replid = Self::fresh_replid(&mut st);
                let n = &mut st.nodes[usize::from(s)];
                let last_id = if c.ids_restart_after_loss {
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
                true
            }
            Action::Failover(s) => {
                st.faults += 1;
                let replid = Self::fresh_replid(&mut st);
                let n = &mut st.nodes[usize::from(s)];
                let handed_out = n.master.last_id;
                n.master = n.replica.clone();
                if !c.ids_restart_after_loss {
                    // Ids are the clock's: the new master's are past every id handed out.
                    n.master.last_id = handed_out;
                }
                n.replid = replid;
                true
            }
            Action::Crash(a) => {
                st.faults += 1;
                match a {
                    Actor::Service => {
                        st.svc = Svc::Idle;
                        st.targets.iter_mut().for_each(|t| *t = None);
                    }
                    Actor::Restore => st.restore = Restore::Idle,
                    Actor::Reader(r) => st.readers[usize::from(r)] = None,
                }
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
