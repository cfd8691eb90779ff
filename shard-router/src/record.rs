//! The claim record: what a Lua script XADDs to a shard's claims stream, and what the
//! consumer reads back into the ledger. The Lua side writes these exact field names.

use std::fmt;

use crate::codec::ClaimId;

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
    /// it was not counted by that rebuild (see `consumer/src/rebuild/late.rs`).
    pub gen: u64,
}

/// A stream entry that is not a valid claim record (a poison entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("claim record {entry_id}: {reason}")]
pub struct RecordError {
    pub entry_id: String,
    pub reason: String,
}

impl ClaimRecord {
    /// Field names in the order the scripts write them; `gen` is optional (records
    /// written before it existed decode as generation 0).
    pub const FIELDS: [&'static str; 9] = [
        "sku", "user", "qty", "seq", "shard", "home", "rid", "ts", "gen",
    ];

    /// Decodes a stream entry. `fields` are the entry's name/value pairs in any order.
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
        for (name, value) in fields {
            if let Some(i) = Self::FIELDS.iter().position(|f| *f == name) {
                raw[i] = Some(value);
            }
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
        fn num<T: std::str::FromStr>(
            name: &str,
            text: &str,
            err: &dyn Fn(String) -> RecordError,
        ) -> Result<T, RecordError> {
            text.parse()
                .map_err(|_| err(format!("field {name} is not a number: {text:?}")))
        }
        let shard: u16 = num("shard", get(4)?, &err)?;
        let user = get(1)?;
        if user.is_empty() || user.len() > 64 {
            return Err(err(format!("user length {} outside 1..=64", user.len())));
        }
        let qty: u32 = num("qty", get(2)?, &err)?;
        if qty == 0 {
            return Err(err("qty is 0".into()));
        }
        let rid = get(6)?;
        Ok(ClaimRecord {
            claim_id: ClaimId::new(shard, entry_id).into(),
            sku: num("sku", get(0)?, &err)?,
            user: user.to_owned(),
            qty,
            user_seq: num("seq", get(3)?, &err)?,
            shard,
            home: num("home", get(5)?, &err)?,
            request_id: (!rid.is_empty()).then(|| rid.to_owned()),
            ts_ms: num("ts", get(7)?, &err)?,
            gen: match vals[8] {
                Some(g) => num("gen", g, &err)?,
                None => 0,
            },
        })
    }

    /// The fields as the scripts write them (for re-adding an entry elsewhere, e.g. to a
    /// dead-letter stream, and for tests that build records by hand).
    pub fn encode(&self) -> Vec<(&'static str, String)> {
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

    #[test]
    fn round_trips() {
        let rec = sample();
        let fields = rec.encode();
        let decoded = ClaimRecord::decode(
            "1700000000000-7",
            fields.iter().map(|(k, v)| (*k, v.as_bytes())),
        )
        .unwrap();
        assert_eq!(decoded, rec);
    }

    #[test]
    fn a_record_without_gen_is_generation_zero() {
        let rec = sample();
        let mut fields = rec.encode();
        fields.retain(|(k, _)| *k != "gen");
        let decoded = ClaimRecord::decode(
            "1700000000000-7",
            fields.iter().map(|(k, v)| (*k, v.as_bytes())),
        )
        .unwrap();
        assert_eq!(decoded.gen, 0);
    }

    #[test]
    fn empty_request_id_is_none() {
        let mut rec = sample();
        rec.request_id = None;
        let fields = rec.encode();
        let decoded = ClaimRecord::decode(
            "1700000000000-7",
            fields.iter().map(|(k, v)| (*k, v.as_bytes())),
        )
        .unwrap();
        assert_eq!(decoded.request_id, None);
    }

    #[test]
    fn rejects_poison() {
        let rec = sample();
        let mut fields = rec.encode();
        fields.retain(|(k, _)| *k != "qty");
        let e = ClaimRecord::decode("1-0", fields.iter().map(|(k, v)| (*k, v.as_bytes())));
        assert!(e.unwrap_err().reason.contains("missing field qty"));

        let mut fields = rec.encode();
        fields[2].1 = "0".into();
        let e = ClaimRecord::decode("1-0", fields.iter().map(|(k, v)| (*k, v.as_bytes())));
        assert!(e.is_err());

        let e = ClaimRecord::decode("1-0", [("sku", &b"\xff"[..])]);
        assert!(e.is_err());
    }
}
