//! The draw scripts of `lua/` (`draw_open`, `draw_enter`, `draw_close`, `draw_mark`,
//! `draw_restore`) and the grant's `HSET` of a win, each one atomic function over one
//! shard's draw keys. `tests/draw_conformance.rs` holds them to the real scripts.

use std::collections::{BTreeMap, BTreeSet};

/// An entrant: in the checker 0.., in the conformance test `u<NN>` (so that the byte order
/// of the names is the numeric order, as the top-K's ties need).
pub type User = u8;
/// A priority: the first 52 bits of the HMAC (the script computes it; here the caller
/// passes it, since it is a fixed function of the user).
pub type Prio = u64;
/// An entries stream id (Redis's `ms-seq`, here a number that a lost stream may hand out
/// again).
pub type EntryId = u32;

/// `{T}:draw:<sku>`'s `state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DrawState {
    Open,
    Closed,
    Drawn,
}

impl DrawState {
    pub fn as_str(self) -> &'static str {
        match self {
            DrawState::Open => "open",
            DrawState::Closed => "closed",
            DrawState::Drawn => "drawn",
        }
    }
}

/// A grant's claim as the win mark and the stored answer name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimRef {
    pub id: u32,
    pub shard: u8,
}

/// `{T}:entrants:<sku>`'s value: `E|<entry id>`, `R|<rank>`, `W|<claim id>|<shard>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Standing {
    E(EntryId),
    R(u32),
    W(ClaimRef),
}

/// The draw meta hash (`ik`/`ok`, the seed's pads, are fixed per run and left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DrawMeta {
    /// None while a restore holds the shard (draw_open.lua's `held`): entrants are told
    /// NOT_PREHEATED until its entrants and ranks are back.
    pub state: Option<DrawState>,
    pub estart: i64,
    pub draw_at: i64,
    pub k: u32,
    pub stock: u32,
    /// A restore's hold (`hold`, `hn`): its token and how many of its writes (restore
    /// pages, held marks) this shard has.
    pub hold: Option<(u8, u32)>,
}

/// One stream entry of `{T}:entries`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamEntry {
    pub user: User,
    pub prio: Prio,
    pub ts: i64,
}

/// One shard's draw keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DrawShard {
    pub meta: Option<DrawMeta>,
    pub entrants: BTreeMap<User, Standing>,
    /// The bounded top-K, in draw order (priority, then user).
    pub topk: BTreeSet<(Prio, User)>,
    pub stream: BTreeMap<EntryId, StreamEntry>,
    /// The stream's last id: the next XADD gets the one after it.
    pub last_id: EntryId,
    /// The grant claims' stored answers (`{T}:req:<sku>:<len>:<user>:draw`) of the users
    /// whose home this shard is: written by the claim protocol, confirmed on the replica,
    /// gone with the shard.
    pub grants: BTreeMap<User, GrantAnswer>,
}

/// The grant claim's stored answer (`{T}:req:<sku>:<len>:<user>:draw`) as draw_enter
/// reads it: `P` while the claim runs, else the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GrantAnswer {
    Pending,
    Claim(ClaimRef),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EnterReply {
    /// 80: entered (`fresh`: by this call); the value's tail is the entry id.
    Entered {
        standing: Standing,
        fresh: bool,
    },
    /// 81.
    Won(ClaimRef),
    /// 82.
    WonPending,
    /// 83, position 1 = next.
    Waitlisted(u32),
    /// 84.
    Lost,
    /// 85: entered, the draw has not run (the value's tail).
    Closed(Standing),
    NotStarted,
    Ended,
    NotPreheated,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CloseReply {
    /// 90: state after, entrants on this shard, the top-K in draw order.
    Closed {
        state: DrawState,
        entrants: u32,
        top: Vec<(User, Prio)>,
    },
    NotPreheated,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenReply {
    /// None: opened held.
    Opened(Option<DrawState>),
    Live(DrawState),
    BadArgument,
    /// `publish` and the shard has no meta (lost again since it was held).
    NotPreheated,
}

/// 91 marked / 92 restored, or 14.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CountReply {
    Done(u32),
    NotPreheated,
}

/// draw_mark.lua's ARGV[1]: more follow, the last batch (the state becomes drawn), or a
/// restore's batch on a shard it holds under this token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MarkBatch {
    More,
    Last,
    Held(u8),
}

/// The arguments of draw_open.lua (the pads are the caller's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpenArgs {
    pub estart: i64,
    pub draw_at: i64,
    pub k: u32,
    pub stock: u32,
    /// None: `held`, the fields without a state, the hold named by `token`.
    pub state: Option<DrawState>,
    /// The restore's token (held and publish).
    pub token: u8,
    /// The restore's last step, with its count of writes: only a shard whose hold is this
    /// token's with that count gets the state.
    pub publish: Option<u32>,
}

impl DrawShard {
    /// draw_open.lua.
    pub fn open(&mut self, a: OpenArgs) -> OpenReply {
        if a.draw_at <= a.estart || a.k < 1 {
            return OpenReply::BadArgument;
        }
        let mut hold = self.meta.and_then(|m| m.hold);
        if let Some(n) = a.publish {
            if hold != Some((a.token, n)) {
                return OpenReply::NotPreheated;
            }
            hold = None;
        }
        let old = self.state();
        if old.is_none() && a.state.is_none() {
            hold = Some((a.token, 0));
        }
        self.meta = Some(DrawMeta {
            state: old.or(a.state),
            estart: a.estart,
            draw_at: a.draw_at,
            k: a.k,
            stock: a.stock,
            hold,
        });
        match old {
            Some(s) => OpenReply::Live(s),
            None => OpenReply::Opened(a.state),
        }
    }

    /// draw_enter.lua: `prio` is the user's priority (a function of the seed and the
    /// user); the grant claim's stored answer is read from `grants`.
    pub fn enter(&mut self, user: User, prio: Prio, now: i64) -> EnterReply {
        let Some(m) = self.meta else {
            return EnterReply::NotPreheated;
        };
        let Some(state) = m.state else {
            return EnterReply::NotPreheated;
        };
        let grant = self.grants.get(&user).copied();
        let v = self.entrants.get(&user).copied();
        if state == DrawState::Drawn {
            return match v {
                None => EnterReply::Ended,
                Some(Standing::W(c)) => EnterReply::Won(c),
                Some(Standing::R(rank)) => match grant {
                    Some(GrantAnswer::Claim(c)) => EnterReply::Won(c),
                    _ if rank <= m.stock => EnterReply::WonPending,
                    _ => EnterReply::Waitlisted(rank - m.stock),
                },
                Some(Standing::E(_)) => EnterReply::Lost,
            };
        }
        if let Some(standing) = v {
            if state == DrawState::Closed {
                return EnterReply::Closed(standing);
            }
            return EnterReply::Entered {
                standing,
                fresh: false,
            };
        }
        if state != DrawState::Open {
            return EnterReply::Ended;
        }
        if now < m.estart {
            return EnterReply::NotStarted;
        }
        if now >= m.draw_at {
            return EnterReply::Ended;
        }
        self.last_id += 1;
        let id = self.last_id;
        self.stream.insert(
            id,
            StreamEntry {
                user,
                prio,
                ts: now,
            },
        );
        self.entrants.insert(user, Standing::E(id));
        self.topk.insert((prio, user));
        if self.topk.len() > m.k as usize {
            self.topk.pop_last();
        }
        EnterReply::Entered {
            standing: Standing::E(id),
            fresh: true,
        }
    }

    /// draw_close.lua.
    pub fn close(&mut self) -> CloseReply {
        let Some(m) = self.meta.as_mut() else {
            return CloseReply::NotPreheated;
        };
        let Some(mut state) = m.state else {
            return CloseReply::NotPreheated;
        };
        if state == DrawState::Open {
            state = DrawState::Closed;
            m.state = Some(state);
        }
        CloseReply::Closed {
            state,
            entrants: self.entrants.len() as u32,
            top: self.topk.iter().map(|&(p, u)| (u, p)).collect(),
        }
    }

    /// draw_mark.lua: ranks of this shard's entrants, in one of its batches.
    pub fn mark(&mut self, batch: MarkBatch, ranks: &[(User, u32)]) -> CountReply {
        let Some(m) = self.meta.as_mut() else {
            return CountReply::NotPreheated;
        };
        if let MarkBatch::Held(token) = batch {
            let Some((held, n)) = m.hold.as_mut().filter(|h| h.0 == token) else {
                return CountReply::NotPreheated;
            };
            debug_assert_eq!(*held, token);
            *n += 1;
        } else if m.state.is_none() {
            return CountReply::NotPreheated;
        }
        if batch == MarkBatch::Last {
            m.state = Some(DrawState::Drawn);
        }
        let mut marked = 0;
        for &(u, r) in ranks {
            if !matches!(self.entrants.get(&u), Some(Standing::W(_))) {
                self.entrants.insert(u, Standing::R(r));
                marked += 1;
            }
        }
        CountReply::Done(marked)
    }

    /// draw_restore.lua: (user, priority, entry id) triples from the ledger.
    pub fn restore(&mut self, token: u8, entries: &[(User, Prio, EntryId)]) -> CountReply {
        let Some(m) = self.meta.as_mut() else {
            return CountReply::NotPreheated;
        };
        let Some((_, n)) = m.hold.as_mut().filter(|h| h.0 == token) else {
            return CountReply::NotPreheated;
        };
        *n += 1;
        let m = *m;
        let mut restored = 0;
        for &(u, p, id) in entries {
            if let std::collections::btree_map::Entry::Vacant(v) = self.entrants.entry(u) {
                v.insert(Standing::E(id));
                restored += 1;
            }
            // ZADD: a member already there takes the new score.
            self.topk.retain(|&(_, v)| v != u);
            self.topk.insert((p, u));
        }
        while self.topk.len() > m.k as usize {
            self.topk.pop_last();
        }
        CountReply::Done(restored)
    }

    /// The grant's `HSET` of a win on the user's home shard (`StockClient::draw_won`).
    pub fn won(&mut self, user: User, claim: ClaimRef) {
        self.entrants.insert(user, Standing::W(claim));
    }

    pub fn state(&self) -> Option<DrawState> {
        self.meta.and_then(|m| m.state)
    }
}
