//! The draw (campaign mode `draw`): the priority every entry gets, the seed's published
//! digest, and the typed outcomes of the draw scripts (`lua/draw_*.lua`). The calls are
//! `StockClient`'s (`client/draw.rs`); the service that closes, draws and grants is
//! `campaign-ops/src/draw`.
//!
//! The priority is the first 52 bits of HMAC-SHA1(seed, "<sku>:<user>"), lower first, ties
//! by user id bytes. Redis computes it in `draw_enter.lua` (the seed stays in Redis and the
//! ledger until the draw); [`priority`] is the same function for anyone who holds the
//! revealed seed. HMAC-SHA1 because SHA-1 is the hash Redis's Lua has: as a keyed function
//! (a PRF) HMAC-SHA1 has no known weakness; SHA-1's collisions do not reach it.

use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// Bits of the HMAC kept: a double (a sorted set's score) holds them exactly.
pub const PRIORITY_BITS: u32 = 52;
/// A seed's length in bytes (drawn at random when the campaign is created).
pub const SEED_LEN: usize = 32;

/// An entrant's priority in the draw of `sku`.
pub fn priority(seed: &[u8], sku: u64, user: &str) -> u64 {
    let mut mac = <Hmac<Sha1> as Mac>::new_from_slice(seed).expect("HMAC takes any key length");
    mac.update(sku.to_string().as_bytes());
    mac.update(b":");
    mac.update(user.as_bytes());
    let out = mac.finalize().into_bytes();
    let first = u64::from_be_bytes(out[..8].try_into().expect("SHA-1 has 20 bytes"));
    first >> (64 - PRIORITY_BITS)
}

/// The seed's published commitment: lowercase hex SHA-256 of its bytes.
pub fn seed_digest(seed: &[u8]) -> String {
    hex::encode(Sha256::digest(seed))
}

/// The key XORed with HMAC's inner and outer pads (RFC 2104), as `draw_open.lua` stores
/// them, so Redis hashes each entry with two SHA-1 calls and no key schedule.
pub(crate) fn pads(seed: &[u8]) -> ([u8; 64], [u8; 64]) {
    assert!(
        seed.len() <= 64,
        "a seed longer than SHA-1's block is hashed first"
    );
    let (mut inner, mut outer) = ([0x36u8; 64], [0x5cu8; 64]);
    for (i, b) in seed.iter().enumerate() {
        inner[i] ^= b;
        outer[i] ^= b;
    }
    (inner, outer)
}

/// Draw order: priority, then user id bytes (a sorted set's order of equal scores).
pub fn draw_order(a: &(String, u64), b: &(String, u64)) -> std::cmp::Ordering {
    a.1.cmp(&b.1)
        .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
}

/// Where a draw stands on a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawState {
    /// Entries accepted (inside the window).
    Open,
    /// Entries refused; the draw has not marked its ranks here yet.
    Closed,
    /// Ranks marked: entrants are told where they stand.
    Drawn,
    /// The campaign closed out: only its winners are left on the shard (`ShardKeys::winners`).
    Over,
}

impl DrawState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
            Self::Drawn => "drawn",
            Self::Over => "over",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "open" => Some(Self::Open),
            "closed" => Some(Self::Closed),
            "drawn" => Some(Self::Drawn),
            "over" => Some(Self::Over),
            _ => None,
        }
    }
}

/// A draw as one shard keeps it (`draw_open.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawSpec {
    pub sku: u64,
    /// Entries open at this instant (ms, gateway clock) ...
    pub entries_open_ms: i64,
    /// ... and close here, when the draw runs.
    pub draw_at_ms: i64,
    pub stock: u64,
    pub waitlist: u32,
    pub seed: Vec<u8>,
}

impl DrawSpec {
    /// How many entrants each shard keeps: every winner and every waitlist place.
    pub fn k(&self) -> u64 {
        self.stock + u64::from(self.waitlist)
    }
}

/// What `draw_enter.lua` answered a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryOutcome {
    /// Entered (`fresh`: by this request; else earlier, this is the same answer).
    Entered {
        entry_id: String,
        fresh: bool,
    },
    /// Entered; entries are closed and the draw has not been told here yet.
    Drawing {
        entry_id: String,
    },
    /// Won, and the unit is claimed: `claim_id` on `shard`.
    Won {
        claim_id: String,
        shard: u16,
    },
    /// Won; the claim is being made.
    WonPending,
    /// On the waitlist at `position` (1 = next unit released).
    Waitlisted {
        position: u64,
    },
    Lost,
    NotStarted,
    /// Entries are closed and this user did not enter.
    Closed,
    /// The campaign closed out and this user won nothing (lost, waitlisted or never entered).
    Ended,
    NotPreheated,
}

/// Which of a shard's mark batches (`draw_mark.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkBatch {
    /// More follow.
    More,
    /// The last: the shard's state becomes drawn.
    Last,
    /// A restore's, on a shard it holds under this token
    /// ([`crate::StockClient::draw_hold`]): the ranks only, one of the restore's counted
    /// writes; the restore gives the state when everything is back.
    Held(u64),
}

impl MarkBatch {
    pub(crate) fn arg(self) -> String {
        match self {
            Self::More => "0".into(),
            Self::Last => "1".into(),
            Self::Held(token) => format!("h:{token}"),
        }
    }
}

/// One shard's entries as `draw_close.lua` froze them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedShard {
    pub state: DrawState,
    /// Users who entered on this shard, all of them.
    pub entrants: u64,
    /// The shard's best k, in draw order: `(user, priority)`.
    pub top: Vec<(String, u64)>,
}

/// An entries-stream entry that is not an entry record: its id and why.
pub type BadEntry = (String, String);

/// One entry read from a shard's entries stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRecord {
    /// The stream entry id (the public entry id is `<shard>-<this>`).
    pub stream_id: String,
    pub sku: u64,
    pub user: String,
    pub priority: u64,
    pub ts_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2202 test case 2 (HMAC-SHA1, key "Jefe"): the pads and the priority are plain
    /// HMAC, so anyone's HMAC-SHA1 verifies a draw.
    #[test]
    fn the_priority_is_the_top_of_plain_hmac_sha1() {
        let mut mac = <Hmac<Sha1> as Mac>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
        let p = priority(b"Jefe", 42, "alice");
        let mut mac = <Hmac<Sha1> as Mac>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"42:alice");
        let full = mac.finalize().into_bytes();
        assert_eq!(p, u64::from_be_bytes(full[..8].try_into().unwrap()) >> 12);
        assert!(p < 1 << PRIORITY_BITS);
    }

    #[test]
    fn pads_are_the_key_xored_into_the_rfc_2104_constants() {
        let (i, o) = pads(&[0xff, 0x00]);
        assert_eq!((i[0], i[1], i[2]), (0xff ^ 0x36, 0x36, 0x36));
        assert_eq!((o[0], o[1], o[63]), (0xff ^ 0x5c, 0x5c, 0x5c));
    }

    #[test]
    fn the_digest_is_sha256_hex() {
        assert_eq!(
            seed_digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
