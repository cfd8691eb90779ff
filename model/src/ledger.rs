//! The ledger (MySQL) as model state: claims by claim id with their status, released
//! stock (base plus waves), the rebuild generation, each shard stream's offset and lease
//! (`stream_offsets`), and what the books disagreed on.

use std::collections::BTreeMap;

use crate::keyspace::{ClaimId, Record, Units, User};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Pending or confirmed: the units are the user's.
    Active,
    /// The release's Redis step may have run; the units are not back for sure.
    Releasing,
    Released,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Row {
    pub rec: Record,
    pub status: Status,
    /// Committed with a generation older than the campaign's (a late claim).
    pub late: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaveState {
    Pending,
    Applied,
}

/// A place in a shard's stream: the newest entry committed and the replication id of the
/// master it was read under (`None`: nothing committed yet, the stored `''`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Offset {
    pub last: u32,
    pub repl: Option<u8>,
}

/// One `stream_offsets` row: the offset and the lease epoch (raised by every acquisition;
/// the owner and its expiry are the actions that raise it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StreamRow {
    pub offset: Offset,
    pub epoch: u8,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ledger {
    pub claims: BTreeMap<ClaimId, Row>,
    pub base_stock: Units,
    pub waves: BTreeMap<u8, (Units, WaveState)>,
    pub rebuild_gen: u32,
    /// Per shard, its stream's offset and lease.
    pub streams: Vec<StreamRow>,
    /// Inserts dropped because the claim id was taken by another record (a stream id
    /// Redis handed out twice).
    pub shadowed: u8,
    /// Late applies that found their units sold again (an `oversold` anomaly).
    pub oversold: u8,
}

impl Ledger {
    /// Stock released so far: the base and every wave placed.
    pub fn released(&self) -> Units {
        self.base_stock + self.waves.values().map(|(u, _)| u).sum::<Units>()
    }

    /// `INSERT IGNORE` by claim id. True when the row is new.
    pub fn insert(&mut self, id: ClaimId, rec: Record, late: bool) -> bool {
        match self.claims.get(&id) {
            Some(row) if row.rec == rec => false,
            Some(_) => {
                self.shadowed = self.shadowed.saturating_add(1);
                false
            }
            None => {
                self.claims.insert(
                    id,
                    Row {
                        rec,
                        status: Status::Active,
                        late,
                    },
                );
                true
            }
        }
    }

    /// Rows whose units are still the user's (active or releasing).
    pub fn unreleased(&self) -> impl Iterator<Item = (&ClaimId, &Row)> {
        self.claims
            .iter()
            .filter(|(_, r)| r.status != Status::Released)
    }

    pub fn units_of(&self, user: User) -> Units {
        self.unreleased()
            .filter(|(_, r)| r.rec.user == user)
            .map(|(_, r)| r.rec.qty)
            .sum()
    }

    /// A record of `(user, seq)` homed on `home`, the claim a hold stands for.
    pub fn find(&self, user: User, seq: u32, home: u8) -> Option<(ClaimId, Record)> {
        self.claims
            .iter()
            .find(|(_, r)| r.rec.user == user && r.rec.seq == seq && r.rec.home == home)
            .map(|(id, r)| (*id, r.rec))
    }
}
