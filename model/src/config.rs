//! The bounds of one check: how many shards, users, gateways and faults, and which
//! operations and faults are in play. [`Config::ci`] is the form `cargo test -p model`
//! explores exhaustively; [`Config::deep`] is the one run by hand.

use crate::keyspace::Units;
use crate::mutant::Mutant;

#[derive(Clone, Debug)]
pub struct Config {
    pub shards: u8,
    pub users: u8,
    /// Request ids per user (each a separate claim of the same user).
    pub rids: u8,
    /// Sends per request id of the first `retrying` users: the first and its retries (a
    /// retry may come while the first is still running: a client that hung up). The other
    /// users send once.
    pub attempts: u8,
    pub retrying: u8,
    pub gateways: u8,
    pub stock: Units,
    pub limit: Units,
    /// Faults and operations in one run: crashes, lost events, replica lag, failover,
    /// loss, and the operator's wave, release and preheat.
    pub faults: u8,
    /// Steps of the clock (holds expire, the take's deadline passes).
    pub max_time: i64,
    pub hold_ttl: i64,
    /// Which faults and operations are explored.
    pub ops: Ops,
    pub mutant: Option<Mutant>,
}

#[derive(Clone, Copy, Debug)]
pub struct Ops {
    pub gateway_crash: bool,
    pub lose_event: bool,
    pub replica_lag: bool,
    pub failover: bool,
    pub loss: bool,
    pub consumer_crash: bool,
    /// A wave of this many units (0: none).
    pub wave: Units,
    /// Releases of unpaid claims (at most this many).
    pub releases: u8,
    /// An operator preheat over a running sale.
    pub repreheat: bool,
    pub replay_filter: bool,
    /// The rebuild raises a stream's last id to the highest id of the shard's claims in
    /// the ledger (`lua/rebuild.lua`'s floor), so a lost stream hands out no id at or below
    /// the consumer's offset. Off (the offset mutants' forms): a lost stream's ids start
    /// again below the ones the lost master handed out, and the rebuild leaves them there:
    /// the new master rule alone must keep them. What this stands for in a deployment: a
    /// stream fed before a rebuild raised it (a SKU preheated on the shard after the loss
    /// shares its stream), under a master whose clock is behind the old one's.
    pub rebuild_floor: bool,
    /// A master restarts from an older snapshot (one snapshot and one restart per run).
    pub restore: bool,
    /// The database refuses writes for a while.
    pub db_refuses: bool,
}

impl Ops {
    pub const ALL: Ops = Ops {
        gateway_crash: true,
        lose_event: true,
        replica_lag: true,
        failover: true,
        loss: true,
        consumer_crash: true,
        wave: 1,
        releases: 1,
        repreheat: true,
        replay_filter: true,
        rebuild_floor: true,
        // Checked in forms of their own (`Config::restore`, `Config::db_refusal`).
        restore: false,
        db_refuses: false,
    };

    /// No fault or operation at all (the small forms add the ones they need).
    pub const NONE: Ops = Ops {
        gateway_crash: false,
        lose_event: false,
        replica_lag: false,
        failover: false,
        loss: false,
        consumer_crash: false,
        wave: 0,
        releases: 0,
        repreheat: false,
        replay_filter: false,
        rebuild_floor: true,
        restore: false,
        db_refuses: false,
    };
}

impl Config {
    /// The CI form: 2 shards, 1 SKU of stock 2, 3 users of limit 1, 2 gateways, at most
    /// one fault or operation, every kind in play; each user sends once.
    pub fn ci() -> Self {
        Config {
            retrying: 0,
            ..Self::base()
        }
    }

    /// The CI form's retries: the same, with no fault, and one user who sends its request
    /// twice (a retry after the answer, or while the first send still runs).
    pub fn ci_retry() -> Self {
        Config {
            faults: 0,
            ..Self::base()
        }
    }

    /// The deep form, run by hand (`cargo run -p model --release --bin model-check --
    /// --deep`): one retrying user and one fault together.
    pub fn deep() -> Self {
        Self::base()
    }

    /// A master restarts from an older snapshot: one snapshot of either shard at any point,
    /// then the restart, and no other fault (the vouch fence's form, in `cargo test -p
    /// model --test check`).
    pub fn restore() -> Self {
        Config {
            retrying: 0,
            ops: Ops {
                restore: true,
                ..Ops::NONE
            },
            ..Self::base()
        }
    }

    /// The same with a user who sends its request twice, over one gateway, with the
    /// clock stopped (no hold expires): what a winner's retry is told after the restart.
    pub fn restore_retry() -> Self {
        Config {
            retrying: 1,
            gateways: 1,
            max_time: 0,
            ..Self::restore()
        }
    }

    /// The database refuses writes for a while, and no other fault.
    pub fn db_refusal() -> Self {
        Config {
            retrying: 0,
            ops: Ops {
                db_refuses: true,
                ..Ops::NONE
            },
            ..Self::base()
        }
    }

    fn base() -> Self {
        Config {
            shards: 2,
            users: 3,
            rids: 1,
            attempts: 2,
            retrying: 1,
            gateways: 2,
            stock: 2,
            limit: 1,
            faults: 1,
            max_time: 4,
            hold_ttl: 3,
            ops: Ops::ALL,
            mutant: None,
        }
    }

    pub fn with_mutant(mut self, m: Mutant) -> Self {
        self.mutant = Some(m);
        self
    }

    pub fn mutant_is(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }

    /// The take's deadline for a hold placed at `now`: its expiry less a third of its TTL
    /// (`shard-router`'s take deadline).
    pub fn take_deadline(&self, now: i64) -> i64 {
        now + self.hold_ttl - self.hold_ttl / 3
    }

    /// Shard `s`'s share of `units` (the preheat split: the remainder to the first shards).
    pub fn share(&self, units: Units, s: u8) -> Units {
        let n = Units::from(self.shards);
        units / n + Units::from(Units::from(s) < units % n)
    }

    /// The user's home shard (placement's xxHash, reduced to a fixed spread).
    pub fn home(&self, user: u8) -> u8 {
        user % self.shards
    }

    /// The user's second-chance order: the other shards, after the home.
    pub fn others(&self, user: u8) -> impl Iterator<Item = u8> + '_ {
        let home = self.home(user);
        (1..self.shards).map(move |i| (home + i) % self.shards)
    }
}
