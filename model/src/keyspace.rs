//! One shard's keys for the model's one SKU, as docs/DESIGN.md "Keyspace" lists them, with
//! the strings and hashes reduced to what the scripts read and write. Users, request ids and
//! waves are small numbers; a stream entry id is the shard's counter (Redis's `ms-seq` ids
//! keep the same order, which is all a script or reader relies on).

use std::collections::{BTreeMap, BTreeSet};

pub type User = u8;
pub type Rid = u8;
pub type ShardId = u8;
pub type Units = i32;

/// `<shard>-<stream entry id>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimId {
    pub shard: ShardId,
    pub entry: u32,
}

/// `{T}:meta:<sku>`. Absent after a loss or close-out (the scripts answer "not preheated").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Meta {
    pub limit: Units,
    pub start: i64,
    pub end: i64,
    /// The rebuild generation (`gen`; absent reads as 0 in the scripts).
    pub gen: u32,
    /// A rebuild's fence (`rebuild` field) is up.
    pub fenced: bool,
}

/// `{T}:holds:<sku>` value: `qty|expires_ms:gen|request_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HoldVal {
    pub qty: Units,
    pub expires: i64,
    /// The shard's rebuild generation when it was placed: the hold's name for a settle.
    pub gen: u32,
    pub rid: Option<Rid>,
}

/// `{T}:req:…` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// `P`: the request id is held right now.
    Pending,
    /// `[~]claim_id|shard|qty`; `tentative` is the leading `~` (a reroute not yet confirmed
    /// on its taking shard).
    Done {
        claim: ClaimId,
        shard: ShardId,
        qty: Units,
        tentative: bool,
    },
}

/// A claims stream entry (the claim record's parts, `shard-router/src/record/v1.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    pub user: User,
    pub qty: Units,
    pub seq: u32,
    pub shard: ShardId,
    pub home: ShardId,
    pub rid: Option<Rid>,
    pub gen: u32,
}

impl Record {
    pub fn claim_id(&self, entry: u32) -> ClaimId {
        ClaimId {
            shard: self.shard,
            entry,
        }
    }
}

/// `{T}:vouch`: which Redis process the ledger vouched for (`lua/vouch.lua`). Processes
/// are numbered per shard (the model's `run_id`: a new one at every start and failover).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vouch {
    Run(u8),
    /// `revoked`: a vouch of another process, replaced by the guard or the watch.
    Revoked,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shard {
    pub stock: Option<Units>,
    pub debt: Units,
    pub meta: Option<Meta>,
    pub users: BTreeMap<User, Units>,
    pub useq: BTreeMap<User, u32>,
    pub holds: BTreeMap<(User, u32), HoldVal>,
    pub req: BTreeMap<(User, Rid), Answer>,
    pub relstock: BTreeSet<ClaimId>,
    pub reluser: BTreeSet<ClaimId>,
    pub waves: BTreeMap<u8, Units>,
    /// `{T}:claims`: entry id → record, in id order. Entries stay after their commit until
    /// the consumer's trim (`stream_trim.lua`) removes those below its offset.
    pub stream: BTreeMap<u32, Record>,
    /// The stream's last id (XADD hands out the next one; XSETID raises it; a loss sets it
    /// back to 0).
    pub last_id: u32,
    /// Data like the rest: it rolls back with a snapshot and is lost with the shard.
    pub vouch: Option<Vouch>,
}

impl Shard {
    /// Appends a record the way XADD `*` does.
    pub fn xadd(&mut self, rec: Record) -> u32 {
        self.last_id += 1;
        self.stream.insert(self.last_id, rec);
        self.last_id
    }

    pub fn gen(&self) -> u32 {
        self.meta.as_ref().map_or(0, |m| m.gen)
    }
}

/// What a script publishes on `fg:events`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    Empty(ShardId),
    Restock(ShardId),
}
