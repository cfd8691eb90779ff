//! The pipe- and dash-separated values the scripts and the Rust side exchange, each decoded
//! in one place: the claim id, a hold's field and value, and a stored answer. The Lua side
//! of each format is named on its function; a change to one side changes both.

use std::fmt;

use crate::placement::ShardId;

/// A stream entry id `<ms>-<seq>`, ordered as Redis orders them.
pub type EntryId = (u64, u64);

/// Parses a stream entry id `<ms>-<seq>`.
pub fn parse_entry_id(id: &str) -> Option<EntryId> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// A claim's id: `<shard>-<entry id>`, the shard whose stream holds its record and the
/// record's entry id there. Unique for the life of a stream; the ledger's primary key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimId(String);

impl ClaimId {
    /// The id of the record `entry_id` on `shard`'s stream (what `claim.lua` and `take.lua`
    /// return as `shard .. '-' .. XADD's id`).
    pub fn new(shard: ShardId, entry_id: &str) -> Self {
        Self(format!("{shard}-{entry_id}"))
    }

    /// Checks the shape `<shard>-<ms>-<seq>`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        split(text).map(|_| Self(text.to_owned()))
    }

    pub fn shard(&self) -> ShardId {
        self.parts().0
    }

    /// The entry id on the shard's stream, as text (`<ms>-<seq>`).
    pub fn entry_str(&self) -> &str {
        self.parts().1
    }

    /// The entry id on the shard's stream, as numbers.
    pub fn entry(&self) -> EntryId {
        parse_entry_id(self.entry_str()).expect("checked when built")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn parts(&self) -> (ShardId, &str) {
        split(&self.0).expect("checked when built")
    }
}

fn split(text: &str) -> Option<(ShardId, &str)> {
    let (shard, entry) = text.split_once('-')?;
    let shard = shard.parse().ok()?;
    parse_entry_id(entry)?;
    Some((shard, entry))
}

impl fmt::Display for ClaimId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<ClaimId> for String {
    fn from(id: ClaimId) -> Self {
        id.0
    }
}

/// A hold as `claim.lua` writes it in the shard's holds hash: field `user|seq`, value
/// `qty|expires_ms:gen|request_id` (request id empty when none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldEntry {
    pub user: String,
    pub user_seq: u64,
    pub qty: u32,
    pub expires_ms: i64,
    /// The rebuild generation it was placed under: its name, which a settle gives so that
    /// it never settles another hold of the same `user|seq` (`lua/settle.lua`).
    pub gen: u64,
    pub request_id: Option<String>,
}

impl HoldEntry {
    pub fn parse(field: &str, value: &str) -> Option<Self> {
        let (user, seq) = field.rsplit_once('|')?;
        let mut parts = value.splitn(3, '|');
        let (qty, exp, rid) = (parts.next()?, parts.next()?, parts.next().unwrap_or(""));
        let (exp, gen) = exp.split_once(':')?;
        Some(Self {
            user: user.to_owned(),
            user_seq: seq.parse().ok()?,
            qty: qty.parse().ok()?,
            expires_ms: exp.parse().ok()?,
            gen: gen.parse().ok()?,
            request_id: (!rid.is_empty()).then(|| rid.to_owned()),
        })
    }
}

/// Marks a stored answer whose take (on a shard other than the home) is not known to be
/// replicated yet (see `replay.rs`).
pub const TENTATIVE: &str = "~";

/// A stored answer as `claim.lua` and `settle.lua` write it: `claim_id|shard|qty`, with
/// [`TENTATIVE`] first when tentative. Returns the three parts and the tentative flag.
pub fn parse_answer(stored: &str) -> Option<(ClaimId, ShardId, u32, bool)> {
    let (body, tentative) = match stored.strip_prefix(TENTATIVE) {
        Some(rest) => (rest, true),
        None => (stored, false),
    };
    let mut parts = body.split('|');
    let (Some(id), Some(shard), Some(qty), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some((
        ClaimId::parse(id)?,
        shard.parse().ok()?,
        qty.parse().ok()?,
        tentative,
    ))
}

/// The stored answer for `claim_id` (see [`parse_answer`]), as `settle.lua` is given it.
pub fn encode_answer(claim_id: &str, shard: ShardId, qty: u32, tentative: bool) -> String {
    let mark = if tentative { TENTATIVE } else { "" };
    format!("{mark}{claim_id}|{shard}|{qty}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_ids_round_trip_and_reject_other_shapes() {
        let id = ClaimId::new(3, "1700-7");
        assert_eq!(id.as_str(), "3-1700-7");
        assert_eq!(
            (id.shard(), id.entry_str(), id.entry()),
            (3, "1700-7", (1700, 7))
        );
        assert_eq!(ClaimId::parse("3-1700-7"), Some(id));
        for bad in ["", "x-1700-7", "3-1700", "3-1700-x", "70000-1-1"] {
            assert_eq!(ClaimId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn holds_and_answers_parse_as_the_scripts_write_them() {
        let h = HoldEntry::parse("al|ice|4", "2|1700:3|r|1").unwrap();
        assert_eq!((h.user.as_str(), h.user_seq, h.qty), ("al|ice", 4, 2));
        assert_eq!((h.expires_ms, h.gen), (1700, 3));
        assert_eq!(h.request_id.as_deref(), Some("r|1"));
        // A hold without its generation has no name a settle could give: not a hold.
        assert!(HoldEntry::parse("bob|1", "1|5|r-1").is_none());
        assert_eq!(
            HoldEntry::parse("bob|1", "1|5:0|").unwrap().request_id,
            None
        );
        assert!(HoldEntry::parse("bob|1", "1|5:x|").is_none());
        assert!(HoldEntry::parse("bob", "1|5|").is_none());
        assert_eq!(encode_answer("3-1700-0", 5, 2, true), "~3-1700-0|5|2");
        let (id, shard, qty, tentative) = parse_answer("~3-1700-0|5|2").unwrap();
        assert_eq!(
            (id.as_str(), shard, qty, tentative),
            ("3-1700-0", 5, 2, true)
        );
        assert!(!parse_answer("3-1700-0|3|1").unwrap().3);
        for bad in ["", "3-1700-0|3", "3-1700-0|3|1|x", "|3|1", "bad|3|1"] {
            assert!(parse_answer(bad).is_none(), "{bad:?}");
        }
    }
}
