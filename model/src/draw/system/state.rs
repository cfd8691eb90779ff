//! The draw model's state: the shards, the ledger's draw tables and claim side, the
//! readers' reads, and what was broken on the way; and the actions that move it.

use std::collections::{BTreeMap, BTreeSet};

use super::{Restore, Svc};
use crate::draw::scripts::{ClaimRef, DrawShard, EntryId, Prio, User};

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
