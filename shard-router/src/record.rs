//! The claim record: what a Lua script XADDs to a shard's claims stream, and what the
//! consumer reads back into the ledger. One stream field whose name carries the format's
//! version: `c1`, laid out in `record/v1.rs`. A reader decodes only the versions it knows;
//! an entry of any other version is poison to it (kept aside with that reason, never
//! counted as a claim). How a later format comes in: docs/DESIGN.md, "Claim record versions".

use std::fmt;

use crate::codec::ClaimId;

mod v1;

/// One acknowledged claim, as carried by a claims stream entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    /// `<shard>-<stream entry id>`: unique across Redis restarts because entry ids follow
    /// the server clock, and known to the gateway the moment the script returns.
    pub claim_id: String,
    pub sku: u64,
    pub user: String,
    pub qty: u32,
    /// The user's running claim number for this SKU (allocated on the home shard); the
    /// ledger keys a collision (a second claim id on it) as a critical anomaly.
    pub user_seq: u64,
    /// Shard whose slice gave the units.
    pub shard: u16,
    /// The user's home shard (differs from `shard` after a second chance).
    pub home: u16,
    pub request_id: Option<String>,
    /// Gateway clock at claim time, in ms since the epoch.
    pub ts_ms: i64,
    /// Rebuild generation of the shard meta when the script ran (0 on a shard never
    /// rebuilt): a record older than the campaign's last rebuild that reaches the ledger
    /// only after it was not counted by that rebuild (see `consumer/src/late.rs`).
    pub gen: u64,
}

/// A stream entry that is not a claim record this reader knows (a poison entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("claim record {entry_id}: {reason}")]
pub struct RecordError {
    pub entry_id: String,
    pub reason: String,
}

/// The version a stream field's name gives a record: `c<decimal digits>`.
fn version_of(name: &str) -> Option<&str> {
    let v = name.strip_prefix('c')?;
    (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())).then_some(v)
}

impl ClaimRecord {
    /// The record's one field, `c` and the version of its layout (`lua/claim.lua` and
    /// `lua/take.lua` write it).
    pub const FIELD: &'static str = v1::FIELD;

    /// Decodes a stream entry. `fields` are the entry's name/value pairs in any order; the
    /// record is the value of [`Self::FIELD`] (a name given twice keeps its last value, as
    /// a map of the fields would). An entry with a record field of another version only,
    /// or with none, is poison, and the reason says which.
    pub fn decode<'a>(
        entry_id: &str,
        fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Self, RecordError> {
        let err = |reason: String| RecordError {
            entry_id: entry_id.to_owned(),
            reason,
        };
        let mut packed = None;
        let mut other = None;
        for (name, value) in fields {
            if name == v1::FIELD {
                packed = Some(value);
            } else if let Some(v) = version_of(name) {
                other.get_or_insert(v);
            }
        }
        let Some(value) = packed else {
            return Err(err(match other {
                Some(v) => format!(
                    "claim record of unknown version {v} (field c{v}; this reader knows version {})",
                    v1::VERSION
                ),
                None => format!("not a claim record: no field {}", v1::FIELD),
            }));
        };
        let text =
            std::str::from_utf8(value).map_err(|_| err("claim record is not UTF-8".into()))?;
        Self::from_parts(entry_id, v1::split(text).map_err(err)?)
    }

    /// The SKU (as written) and units of a stream entry, read from the record's first two
    /// parts only: reconciliation counts an entry's units even when a later part would make
    /// it poison (its units were taken all the same). `None` for an entry with no record
    /// of a known version, whose parts mean nothing to this reader.
    pub fn sku_and_units<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Option<(&'a [u8], i64)> {
        let mut packed = None;
        for (name, value) in fields {
            if name == v1::FIELD {
                packed = Some(value);
            }
        }
        let mut parts = packed?.splitn(3, |b| *b == b',');
        let (sku, qty) = (parts.next()?, parts.next()?);
        Some((sku, std::str::from_utf8(qty).ok()?.parse().ok()?))
    }

    /// Validates a record's parts.
    fn from_parts(entry_id: &str, p: v1::Parts<'_>) -> Result<Self, RecordError> {
        let err = |reason: String| RecordError {
            entry_id: entry_id.to_owned(),
            reason,
        };
        fn num<T: std::str::FromStr>(
            name: &str,
            text: &str,
            err: &dyn Fn(String) -> RecordError,
        ) -> Result<T, RecordError> {
            text.parse()
                .map_err(|_| err(format!("field {name} is not a number: {text:?}")))
        }
        let shard: u16 = num("shard", p.shard, &err)?;
        if p.user.is_empty() || p.user.len() > 64 {
            return Err(err(format!("user length {} outside 1..=64", p.user.len())));
        }
        let qty: u32 = num("qty", p.qty, &err)?;
        if qty == 0 {
            return Err(err("qty is 0".into()));
        }
        Ok(ClaimRecord {
            claim_id: ClaimId::new(shard, entry_id).into(),
            sku: num("sku", p.sku, &err)?,
            user: p.user.to_owned(),
            qty,
            user_seq: num("seq", p.seq, &err)?,
            shard,
            home: num("home", p.home, &err)?,
            request_id: (!p.rid.is_empty()).then(|| p.rid.to_owned()),
            ts_ms: num("ts", p.ts, &err)?,
            gen: num("gen", p.gen, &err)?,
        })
    }

    /// The record's fields as the scripts write them (tests build stream entries with it,
    /// and a record the ledger refuses is kept as poison in it).
    pub fn encode(&self) -> Vec<(&'static str, String)> {
        vec![(v1::FIELD, v1::pack(self))]
    }
}

impl fmt::Display for ClaimRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "claim {} sku={} user={} qty={} seq={}",
            self.claim_id, self.sku, self.user, self.qty, self.user_seq
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClaimRecord {
        ClaimRecord {
            claim_id: "3-1700000000000-7".into(),
            sku: 42,
            user: "alice".into(),
            qty: 2,
            user_seq: 5,
            shard: 3,
            home: 1,
            request_id: Some("r-1".into()),
            ts_ms: 1_700_000_000_000,
            gen: 3,
        }
    }

    fn decode(fields: &[(&str, String)]) -> Result<ClaimRecord, RecordError> {
        ClaimRecord::decode(
            "1700000000000-7",
            fields.iter().map(|(k, v)| (*k, v.as_bytes())),
        )
    }

    fn units<'a>(fields: &'a [(&'a str, String)]) -> Option<(&'a [u8], i64)> {
        ClaimRecord::sku_and_units(fields.iter().map(|(k, v)| (*k, v.as_bytes())))
    }

    #[test]
    fn round_trips() {
        let rec = sample();
        assert_eq!(
            rec.encode(),
            vec![("c1", "42,2,5,3,1,1700000000000,3,5,alicer-1".to_owned())]
        );
        assert_eq!(decode(&rec.encode()).unwrap(), rec);
    }

    #[test]
    fn the_user_is_cut_by_its_length_not_by_its_characters() {
        let mut rec = sample();
        for (user, rid) in [
            ("a,b,c", Some("1,2")),
            ("ünï", Some("r")),
            ("9", None),
            ("x".repeat(64).as_str(), Some("y")),
        ] {
            rec.user = user.to_owned();
            rec.request_id = rid.map(str::to_owned);
            assert_eq!(decode(&rec.encode()).unwrap(), rec, "{user:?} {rid:?}");
        }
    }

    #[test]
    fn the_record_field_wins_over_fields_beside_it() {
        let rec = sample();
        let mut fields = rec.encode();
        fields.push(("c", "43,1,1,3,1,1,0,1,x".into()));
        fields.push(("user", "mallory".into()));
        fields.push(("c2", "anything".into()));
        assert_eq!(decode(&fields).unwrap(), rec);
    }

    /// A record of a version this reader does not know is poison, however much it looks
    /// like one it knows: its parts may mean something else (docs/DESIGN.md, "Claim record
    /// versions"). Every reader decodes through `decode` and counts units through
    /// `sku_and_units`, so neither may take it.
    #[test]
    fn an_unknown_version_is_poison() {
        let v1 = sample().encode().remove(0).1;
        for (name, why) in [
            ("c2", "unknown version 2"),
            ("c0", "unknown version 0"),
            ("c10", "unknown version 10"),
            ("c", "no field c1"),
            ("C1", "no field c1"),
            ("c1 ", "no field c1"),
        ] {
            let fields = [(name, v1.clone())];
            let e = decode(&fields).unwrap_err();
            assert!(e.reason.contains(why), "{name:?}: {}", e.reason);
            assert_eq!(units(&fields), None, "{name:?}");
        }
        let e = decode(&[("sku", "42".into()), ("qty", "2".into())]).unwrap_err();
        assert!(e.reason.contains("no field c1"), "{}", e.reason);
        let e = decode(&[]).unwrap_err();
        assert!(e.reason.contains("no field c1"), "{}", e.reason);
    }

    #[test]
    fn rejects_a_bad_record() {
        for (bad, why) in [
            ("42,2,5,3,1,1700000000000,3,9,alice", "does not fit"),
            ("42,2,5,3,1,1700000000000,3,1,ünï", "does not fit"),
            ("42,2,5,3,1,1700000000000,3", "ends before user length"),
            (
                "42,2,5,3,1,1700000000000,3,x,alice",
                "user length is not a number",
            ),
            ("42,2,5,3,1,1700000000000,3,0,alice", "user length 0"),
            ("42,0,5,3,1,1700000000000,3,5,alice", "qty is 0"),
            ("42,2,5,99999,1,1700000000000,3,5,alice", "field shard"),
            ("42,2,5,3,1,1700000000000,x,5,alice", "field gen"),
            ("42,2,5,3,1,1700000000000,,5,alice", "field gen"),
            ("x,2,5,3,1,1700000000000,3,5,alice", "field sku"),
        ] {
            let e = decode(&[("c1", bad.to_owned())]).unwrap_err();
            assert!(e.reason.contains(why), "{bad:?}: {}", e.reason);
        }
        let e = ClaimRecord::decode("1-0", [("c1", &b"42,\xff"[..])]).unwrap_err();
        assert!(e.reason.contains("not UTF-8"), "{}", e.reason);
    }

    #[test]
    fn sku_and_units_read_the_first_two_parts() {
        let rec = sample();
        assert_eq!(units(&rec.encode()), Some((&b"42"[..], 2)));
        assert_eq!(units(&[("c1", "42,2".into())]), Some((&b"42"[..], 2)));
        assert_eq!(units(&[("c1", "42".into())]), None);
        assert_eq!(units(&[("c1", "42,x,".into())]), None);
        assert_eq!(units(&[("sku", "42".into()), ("qty", "2".into())]), None);
    }

    #[test]
    fn empty_request_id_is_none() {
        let mut rec = sample();
        rec.request_id = None;
        assert_eq!(decode(&rec.encode()).unwrap().request_id, None);
    }
}
