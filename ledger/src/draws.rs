//! Draw campaigns (migrations/0018_draws.sql): a verifiable raffle. Users enter during the
//! entry window; Redis gives each entry a priority from HMAC-SHA1(seed, "<sku>:<user>")
//! (lower wins, ties by user id bytes). At `draw_at_ms` the best `stock + waitlist`
//! entrants get ranks 1..K: ranks 1..stock win (each becomes an ordinary 1-unit claim), the
//! rest are served in rank order as units are released. The seed's SHA-256 is published at
//! creation and the seed revealed after the draw, so anyone can recompute the order from
//! [`entries_in_order`].
//!
//! Entries reach the ledger the way claims do: read from each shard's entries stream and
//! committed with the stream's place in `stream_offsets` ([`commit_entries`]), so a read is
//! committed exactly once.
//!
//! The statements live by what they hold: `draws/terms.rs` the draw's row (its terms, the
//! due and live lists), `draws/entries.rs` the entries and the entries streams' places,
//! `draws/ranks.rs` the result and how far it is granted, `draws/grants.rs` the claims that
//! granted the ranks.

use serde::{Deserialize, Serialize};
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use crate::error::LedgerError;

mod entries;
mod grants;
mod ranks;
mod terms;

pub use entries::{commit_entries, entries_in_order, entries_of_shard, entry_count, place};
pub use grants::{claims_of_draw, grants, record_win, wins};
pub use ranks::{rank_of, ranks, record, set_granted};
pub use terms::{check_terms, create, due, get, live, mode};

/// How a campaign sells (`campaigns.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// First come, first served: every campaign before draws existed.
    #[default]
    Fcfs,
    Draw,
    /// A waiting room in front of first come, first served (`crate::queues`).
    Queue,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fcfs => "fcfs",
            Self::Draw => "draw",
            Self::Queue => "queue",
        }
    }

    /// `None` for a mode this build does not know.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "fcfs" => Some(Self::Fcfs),
            "draw" => Some(Self::Draw),
            "queue" => Some(Self::Queue),
            _ => None,
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = LedgerError;
    fn from_str(s: &str) -> Result<Self, LedgerError> {
        Self::parse(s).ok_or_else(|| LedgerError::Invalid(format!("unknown campaign mode {s:?}")))
    }
}

/// Where a draw is: taking entries, or drawn (its ranks recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DrawState {
    Open,
    Drawn,
}

/// A `draws` row. Not `Serialize`: `seed` must not leave before the draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draw {
    pub sku: u64,
    pub draw_at_ms: i64,
    pub waitlist: u32,
    pub seed: Vec<u8>,
    /// Lowercase hex of SHA-256 of the raw seed bytes: published at creation.
    pub seed_sha256: String,
    pub state: DrawState,
    pub drawn_at_ms: Option<i64>,
    /// Entries the draw was made from.
    pub entrants: Option<u64>,
    /// Ranks 1..=granted_rank have been granted or skipped.
    pub granted_rank: u32,
}

/// One user's entry. `entry_id` is `<shard>-<stream id>`; `shard` the user's home shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub user: String,
    pub priority: u64,
    pub entry_id: String,
    pub shard: u16,
    pub entered_ms: i64,
}

/// One rank of a draw's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranked {
    pub rank: u32,
    pub user: String,
    pub priority: u64,
}

/// A draw of a campaign still live, with what the restore loop needs of the campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub draw: Draw,
    pub width: u16,
    pub stock: u64,
}

const DRAW_COLUMNS: &str = "d.sku, d.draw_at_ms, d.waitlist, d.seed, d.seed_sha256, \
     CAST(d.state AS CHAR), d.drawn_at_ms, d.entrants, d.granted_rank";
/// Rows per multi-row INSERT (4 or 6 placeholders each, far below MySQL's 65 535).
const CHUNK: usize = 1000;

fn draw_of(r: &MySqlRow) -> Draw {
    let state: String = r.get(5);
    Draw {
        sku: r.get(0),
        draw_at_ms: r.get(1),
        waitlist: r.get(2),
        seed: r.get(3),
        seed_sha256: r.get(4),
        state: if state == "drawn" {
            DrawState::Drawn
        } else {
            DrawState::Open
        },
        drawn_at_ms: r.get(6),
        entrants: r.get(7),
        granted_rank: r.get(8),
    }
}
