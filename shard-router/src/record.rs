//! The claim record: what a Lua script XADDs to a shard's claims stream, and what the
//! consumer reads back into the ledger. Two forms, both always read: nine field/value
//! pairs, and the one-field compact form of `record/compact.rs` ([`RecordForm`]).

use std::fmt;

use crate::codec::ClaimId;

mod compact;

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
    /// Rebuild generation of the shard meta when the script ran (`gen`; absent = 0): a
    /// record older than the campaign's last rebuild that reaches the ledger only after
    /// it was not counted by that rebuild (see `consumer/src/late.rs`).
    pub gen: u64,
}

/// Which form `lua/claim.lua` and `lua/take.lua` write (the gateway's `--stream-records`).
/// Every reader of this release reads both; a reader of an earlier release reads only
/// `pairs`: to its consumer and tools a compact record is poison (dead-lettered, left out
/// of a rebuild's and a stale hold's in-flight claims), and its gateway's replay check does
/// not find a compact take. So `compact` is for a deployment whose every process runs this
/// release or later: a new one, or an upgrade once it is complete (docs/OPERATIONS.md "Upgrading").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RecordForm {
    /// Nine field/value pairs, readable by every release.
    #[default]
    Pairs,
    /// One field (`record/compact.rs`): less Redis CPU per claim written and read.
    Compact,
}

impl RecordForm {
    /// The scripts' argument for it.
    pub(crate) fn script_arg(self) -> &'static str {
        match self {
            Self::Pairs => "",
            Self::Compact => compact::FIELD,
        }
    }
}

/// A stream entry that is not a valid claim record (a poison entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("claim record {entry_id}: {reason}")]
pub struct RecordError {
    pub entry_id: String,
    pub reason: String,
}

impl ClaimRecord {
    /// Field names of the nine-pair form ([`RecordForm::Pairs`]); `gen` is optional
    /// (records written before it existed decode as generation 0).
    pub const FIELDS: [&'static str; 9] = [
        "sku", "user", "qty", "seq", "shard", "home", "rid", "ts", "gen",
    ];
    /// The one field of the compact form.
    pub const COMPACT: &'static str = compact::FIELD;

    /// Decodes a stream entry. `fields` are the entry's name/value pairs in any order:
    /// the compact field when there is one (other fields, such as a dead letter's, are
    /// then ignored), else the nine pairs.
    pub fn decode<'a>(
        entry_id: &str,
        fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Self, RecordError> {
        let err = |reason: String| RecordError {
            entry_id: entry_id.to_owned(),
            reason,
        };
        // A name given twice keeps its last value (as a map of the fields would), and only
        // that value must be UTF-8.
        let mut raw: [Option<&[u8]>; 9] = [None; 9];
        let mut packed = None;
        for (name, value) in fields {
            if name == compact::FIELD {
                packed = Some(value);
            } else if let Some(i) = Self::FIELDS.iter().position(|f| *f == name) {
                raw[i] = Some(value);
            }
        }
        if let Some(value) = packed {
            let text = std::str::from_utf8(value)
                .map_err(|_| err("compact record is not UTF-8".into()))?;
            return Self::from_parts(entry_id, compact::split(text).map_err(err)?);
        }
        let mut vals: [Option<&str>; 9] = [None; 9];
        for (i, value) in raw.iter().enumerate() {
            if let Some(value) = value {
                let text = std::str::from_utf8(value)
                    .map_err(|_| err(format!("field {} is not UTF-8", Self::FIELDS[i])))?;
                vals[i] = Some(text);
            }
        }
        let get =
            |i: usize| vals[i].ok_or_else(|| err(format!("missing field {}", Self::FIELDS[i])));
        let parts = compact::Parts {
            sku: get(0)?,
            user: get(1)?,
            qty: get(2)?,
            seq: get(3)?,
            shard: get(4)?,
            home: get(5)?,
            rid: get(6)?,
            ts: get(7)?,
            gen: vals[8].unwrap_or("0"),
        };
        Self::from_parts(entry_id, parts)
    }

    /// The nine-pair form: what `--stream-records pairs` and every earlier release write.
    pub fn encode_pairs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("sku", self.sku.to_string()),
            ("user", self.user.clone()),
            ("qty", self.qty.to_string()),
            ("seq", self.user_seq.to_string()),
            ("shard", self.shard.to_string()),
            ("home", self.home.to_string()),
            ("rid", self.request_id.clone().unwrap_or_default()),
            ("ts", self.ts_ms.to_string()),
            ("gen", self.gen.to_string()),
        ]
    }

    /// The SKU (as written) and units of a stream entry, read from those two fields
    /// only, in either form: reconciliation counts an entry's units even when a later
    /// field would make it poison (the dead letters hold such entries).
    pub fn sku_and_units<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Option<(&'a [u8], i64)> {
        let (mut sku, mut qty, mut packed) = (None, None, None);
        for (name, value) in fields {
            match name {
                compact::FIELD => packed = Some(value),
                "sku" => sku = Some(value),
                "qty" => qty = Some(value),
                _ => {}
            }
        }
        let (sku, qty) = match packed {
            Some(value) => {
                let mut parts = value.splitn(3, |b| *b == b',');
                (parts.next()?, parts.next()?)
            }
            None => (sku?, qty?),
        };
        Some((sku, std::str::from_utf8(qty).ok()?.parse().ok()?))
    }

    /// One validation for both forms.
    fn from_parts(entry_id: &str, p: compact::Parts<'_>) -> Result<Self, RecordError> {
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

    /// The record in the compact form (tests build records with it; an entry moved
    /// elsewhere, such as a dead letter, keeps the fields it came with).
    pub fn encode(&self) -> Vec<(&'static str, String)> {
        vec![(compact::FIELD, compact::pack(self))]
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

    #[test]
    fn round_trips_in_both_forms() {
        let rec = sample();
        assert_eq!(
            rec.encode(),
            vec![("c", "42,2,5,3,1,1700000000000,3,5,alicer-1".to_owned())]
        );
        assert_eq!(decode(&rec.encode()).unwrap(), rec);
        assert_eq!(decode(&rec.encode_pairs()).unwrap(), rec);
    }

    #[test]
    fn the_compact_user_is_cut_by_its_length_not_by_its_characters() {
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
    fn the_compact_field_wins_over_pairs_beside_it() {
        // A dead letter's copy carries the record plus `dead_entry` and `dead_reason`.
        let rec = sample();
        let mut fields = rec.encode();
        fields.push(("dead_entry", "1700000000000-7".into()));
        fields.push(("user", "mallory".into()));
        assert_eq!(decode(&fields).unwrap(), rec);
    }

    #[test]
    fn rejects_a_bad_compact_record() {
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
        ] {
            let e = decode(&[("c", bad.to_owned())]).unwrap_err();
            assert!(e.reason.contains(why), "{bad:?}: {}", e.reason);
        }
        let e = ClaimRecord::decode("1-0", [("c", &b"42,\xff"[..])]).unwrap_err();
        assert!(e.reason.contains("not UTF-8"), "{}", e.reason);
    }

    #[test]
    fn sku_and_units_read_both_forms() {
        let rec = sample();
        fn units<'a>(fields: &'a [(&'a str, String)]) -> Option<(&'a [u8], i64)> {
            ClaimRecord::sku_and_units(fields.iter().map(|(k, v)| (*k, v.as_bytes())))
        }
        assert_eq!(units(&rec.encode()), Some((&b"42"[..], 2)));
        assert_eq!(units(&rec.encode_pairs()), Some((&b"42"[..], 2)));
        assert_eq!(units(&[("c", "42,2".into())]), Some((&b"42"[..], 2)));
        assert_eq!(units(&[("c", "42".into())]), None);
        assert_eq!(units(&[("c", "42,x,".into())]), None);
        assert_eq!(units(&[("sku", "42".into())]), None);
    }

    #[test]
    fn a_record_without_gen_is_generation_zero() {
        let mut fields = sample().encode_pairs();
        fields.retain(|(k, _)| *k != "gen");
        assert_eq!(decode(&fields).unwrap().gen, 0);
    }

    #[test]
    fn empty_request_id_is_none() {
        let mut rec = sample();
        rec.request_id = None;
        assert_eq!(decode(&rec.encode()).unwrap().request_id, None);
        assert_eq!(decode(&rec.encode_pairs()).unwrap().request_id, None);
    }

    #[test]
    fn rejects_poison() {
        let rec = sample();
        let mut fields = rec.encode_pairs();
        fields.retain(|(k, _)| *k != "qty");
        let e = decode(&fields);
        assert!(e.unwrap_err().reason.contains("missing field qty"));

        let mut fields = rec.encode_pairs();
        fields[2].1 = "0".into();
        assert!(decode(&fields).is_err());

        let e = ClaimRecord::decode("1-0", [("sku", &b"\xff"[..])]);
        assert!(e.is_err());
    }
}
