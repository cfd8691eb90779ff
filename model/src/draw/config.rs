//! The bounds of one check of the draw, and its deliberate bugs.

use super::scripts::{Prio, User};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DrawMutant {
    /// The draw does not wait for the ledger to hold what the shards accepted: it draws as
    /// soon as every shard is closed (as if from the shards' top-K, trusting them).
    NoSettle,
    /// The settle before 1b20511: it waits for the ledger to hold as many entries as the
    /// shards count, not for every shard's stream to be read up to its close.
    SettleByCount,
    /// The grant pass goes on past a rank the stock cannot cover.
    GrantsPastSoldOut,
    /// A restore of a drawn shard puts the entries back but does not mark the ranks.
    RestoreWithoutMark,
    /// A restore of a drawn shard marks the ranks but does not write the wins back (`W|`,
    /// before 9a5ded4).
    RestoreWithoutWins,
    /// The draw loop marks a shard without writing the ledger's wins first (before this
    /// was found with two losses): a shard the restore opened from a stale read of the
    /// draw leaves a granted winner `won_pending`.
    MarksWithoutWins,
    /// The entries reader moves the place whether or not it still stands where the read
    /// started (no compare-and-set).
    UnconditionalPlace,
    /// The entries reader's new-master rule before 82441ee: it reads again from 0-0, but
    /// when that finds nothing it keeps the old master's place under the new replication
    /// id.
    PlaceKeptAcrossNewMaster,
    /// commit_entries adds entries of a draw already drawn (before 82441ee).
    EntriesAfterDrawJoin,
    /// record does not check that the ledger still holds the entries counted (before
    /// 82441ee).
    RecordWithoutCount,
    /// The draw loop before dfe0342: only due draws are marked, and only shards found
    /// `closed`.
    MarkOnlyDue,
    /// The restore before it held a shard: the draw opened with its state at the first
    /// step, so an entrant asking before the entries and marks were back was entered a
    /// second time, or told `lost` though a winner.
    RestoreOpensAtOnce,
}

impl DrawMutant {
    pub const ALL: [DrawMutant; 12] = [
        DrawMutant::NoSettle,
        DrawMutant::SettleByCount,
        DrawMutant::GrantsPastSoldOut,
        DrawMutant::RestoreWithoutMark,
        DrawMutant::RestoreWithoutWins,
        DrawMutant::MarksWithoutWins,
        DrawMutant::UnconditionalPlace,
        DrawMutant::PlaceKeptAcrossNewMaster,
        DrawMutant::EntriesAfterDrawJoin,
        DrawMutant::RecordWithoutCount,
        DrawMutant::MarkOnlyDue,
        DrawMutant::RestoreOpensAtOnce,
    ];
}

/// Which faults and operations are explored.
#[derive(Clone, Copy, Debug)]
pub struct DrawOps {
    /// A shard loses master and replica together (then the restore loop).
    pub loss: bool,
    /// A shard fails over to its replica (durability `none`: what it had not got is gone,
    /// acknowledged entries included, and entries the ledger already has).
    pub failover: bool,
    /// The draw service, the restore loop or an entries reader dies between two steps.
    pub crash: bool,
    /// The settle wait runs out (30 s) and the draw goes on from what the ledger has.
    pub timeout: bool,
}

impl DrawOps {
    pub const ALL: DrawOps = DrawOps {
        loss: true,
        failover: true,
        crash: true,
        timeout: true,
    };
}

#[derive(Clone, Debug)]
pub struct DrawConfig {
    pub shards: u8,
    pub users: u8,
    pub stock: u32,
    pub waitlist: u32,
    /// Entries readers (`draw::entries`), each with at most one read not committed yet.
    pub readers: u8,
    /// Faults in one run (loss, failover, crash).
    pub faults: u8,
    /// Releases of a granted unit (the unit comes back, the waitlist is served).
    pub releases: u8,
    pub ops: DrawOps,
    /// A master started after a loss or a failover hands out stream ids below the old
    /// master's (its clock is behind): after a loss from 1 again, after a failover from the
    /// replica's last id. Off: above every id handed out before (ids are the clock's).
    pub ids_restart_after_loss: bool,
    pub mutant: Option<DrawMutant>,
}

/// The first master's stream ids start above this (`ids_restart_after_loss`: a master
/// started after a loss hands out ids from 1 again, below them).
pub const FIRST_LAST_ID: u32 = 10;
/// Time: entries open at 0, the draw is at 1 (the clock takes the values 0 and 1).
pub const ESTART: i64 = 0;
pub const DRAW_AT: i64 = 1;

impl DrawConfig {
    /// The CI form: 2 shards, 3 users, stock 1 and a waitlist of 1, two entries readers,
    /// at most one fault and one release.
    pub fn ci() -> Self {
        DrawConfig {
            shards: 2,
            users: 3,
            stock: 1,
            waitlist: 1,
            readers: 2,
            faults: 1,
            releases: 1,
            ops: DrawOps::ALL,
            ids_restart_after_loss: false,
            mutant: None,
        }
    }

    pub fn with_mutant(mut self, m: DrawMutant) -> Self {
        self.mutant = Some(m);
        self
    }

    pub fn mutant_is(&self, m: DrawMutant) -> bool {
        self.mutant == Some(m)
    }

    pub fn k(&self) -> u32 {
        self.stock + self.waitlist
    }

    pub fn home(&self, u: User) -> u8 {
        u % self.shards
    }

    /// Priorities, distinct, in an order that is not the users' (u1 first, then u3, u2,
    /// u0 ...).
    pub fn prio(&self, u: User) -> Prio {
        [30, 10, 20, 15, 25][usize::from(u)]
    }
}
