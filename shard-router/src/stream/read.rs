//! An XREAD reply decoded straight into claim records.
//!
//! redis-rs's `StreamReadReply` clones the whole reply before converting it and builds a
//! `HashMap<String, Value>` per entry (nine owned field names, each hashed): under
//! callgrind that conversion was a fifth of the consumer's instructions per claim. Here
//! the owned reply is walked once and each entry's fields are borrowed as they arrive;
//! only a poison entry copies them (it is kept in the ledger with its fields).

use redis::Value;

use super::{Delivered, Poison};
use crate::{ClaimRecord, ShardId};

/// Every entry of an XREAD reply on `shard`'s stream (one stream asked), decoded in
/// the order Redis sent them. `Nil` (the read timed out) holds none.
pub(super) fn decode_reply(shard: ShardId, reply: Value) -> Vec<Result<Delivered, Poison>> {
    let mut out = Vec::new();
    for (_key, entries) in streams(reply) {
        let Value::Array(entries) = entries else {
            continue;
        };
        out.reserve(entries.len());
        for entry in entries {
            if let Some(e) = decode_entry(shard, entry) {
                out.push(e);
            }
        }
    }
    out
}

/// The `(stream key, entries)` pairs: an array of pairs in RESP2, a map in RESP3.
fn streams(reply: Value) -> Vec<(Value, Value)> {
    match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(kv) => {
                    let mut kv = kv.into_iter();
                    Some((kv.next()?, kv.next()?))
                }
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams,
        _ => Vec::new(),
    }
}

/// One `[id, [field, value, ...]]` entry; `None` for a shape that names no entry id.
/// Fields are `Nil` for an entry deleted after it was delivered: no fields, so poison.
fn decode_entry(shard: ShardId, entry: Value) -> Option<Result<Delivered, Poison>> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let mut parts = parts.into_iter();
    let entry_id = match parts.next()? {
        Value::BulkString(b) => String::from_utf8(b).ok()?,
        Value::SimpleString(s) => s,
        _ => return None,
    };
    let fields = match parts.next() {
        Some(Value::Array(f)) => f,
        _ => Vec::new(),
    };
    let pairs = || {
        fields.chunks_exact(2).filter_map(|kv| {
            let name = text(&kv[0])?;
            let value = match &kv[1] {
                Value::BulkString(b) => b.as_slice(),
                Value::SimpleString(s) => s.as_bytes(),
                _ => return None,
            };
            Some((name, value))
        })
    };
    let poison = |reason: String| Poison {
        shard,
        entry_id: entry_id.clone(),
        reason,
        fields: fields
            .chunks_exact(2)
            .filter_map(|kv| Some((text(&kv[0])?.to_owned(), owned(&kv[1]))))
            .collect(),
    };
    Some(match ClaimRecord::decode(&entry_id, pairs()) {
        Ok(record) if record.shard == shard => Ok(Delivered {
            shard,
            entry_id,
            record,
        }),
        Ok(record) => Err(poison(format!(
            "record names shard {} but sits in shard {shard}",
            record.shard
        ))),
        Err(e) => Err(poison(e.reason)),
    })
}

/// A field name as text (names that are not UTF-8 are no field of a claim record).
fn text(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// A field value's bytes as the ledger keeps a poison entry's.
fn owned(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        Value::Int(i) => i.to_string().into_bytes(),
        other => format!("{other:?}").into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn entry(id: &str, fields: &[(&str, &str)]) -> Value {
        let flat = fields
            .iter()
            .flat_map(|(k, v)| [bulk(k), bulk(v)])
            .collect();
        Value::Array(vec![bulk(id), Value::Array(flat)])
    }

    fn record(shard: ShardId) -> ClaimRecord {
        ClaimRecord {
            claim_id: String::new(),
            sku: 7,
            user: "u1".into(),
            qty: 1,
            user_seq: 1,
            shard,
            home: shard,
            request_id: Some("r".into()),
            ts_ms: 5,
            gen: 0,
        }
    }

    #[test]
    fn decodes_entries_in_order_and_names_poison() {
        let good = record(3).encode();
        let good: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let other = record(4).encode();
        let other: Vec<(&str, &str)> = other.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let unknown = [("c2", good[0].1)];
        let entries = Value::Array(vec![
            entry("1-0", &good),
            entry("2-0", &other),
            Value::Array(vec![bulk("3-0"), Value::Nil]),
            entry("4-0", &good),
            entry("5-0", &unknown),
        ]);
        let reply = Value::Array(vec![Value::Array(vec![bulk("{3}:claims"), entries])]);
        let out = decode_reply(3, reply);
        assert_eq!(out.len(), 5);
        let d = out[0].as_ref().unwrap();
        assert_eq!(
            (d.entry_id.as_str(), d.record.claim_id.as_str()),
            ("1-0", "3-1-0")
        );
        assert_eq!(d.record.request_id.as_deref(), Some("r"));
        let p = out[1].as_ref().unwrap_err();
        assert!(p.reason.contains("names shard 4"), "{}", p.reason);
        assert_eq!(p.fields.len(), other.len());
        assert!(out[2].as_ref().unwrap_err().reason.contains("no field c1"));
        assert_eq!(out[3].as_ref().unwrap().entry_id, "4-0");
        let p = out[4].as_ref().unwrap_err();
        assert!(p.reason.contains("unknown version 2"), "{}", p.reason);
        assert_eq!(
            p.fields,
            vec![("c2".to_owned(), good[0].1.as_bytes().to_vec())]
        );
        assert!(decode_reply(3, Value::Nil).is_empty());
    }

    /// A field name given twice: like the `redis` crate's `StreamId` decoder (a
    /// `HashMap<String, Value>`, which keeps the last value only), an earlier value that is
    /// not UTF-8 does not poison the entry.
    #[test]
    fn a_repeated_field_takes_its_last_value_like_the_stream_id_decoder() {
        let fields = record(2).encode();
        let mut flat: Vec<Value> = vec![bulk("c1"), Value::BulkString(b"\xff".to_vec())];
        flat.extend(fields.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]));
        let mut map = std::collections::HashMap::new();
        for kv in flat.chunks_exact(2) {
            let Value::BulkString(k) = &kv[0] else {
                unreachable!()
            };
            map.insert(String::from_utf8(k.clone()).unwrap(), kv[1].clone());
        }
        let id = redis::streams::StreamId {
            id: "9-1".into(),
            map,
            ..Default::default()
        };
        let want = super::super::decode(2, &id).unwrap();
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("{2}:claims"),
            Value::Array(vec![Value::Array(vec![bulk("9-1"), Value::Array(flat)])]),
        ])]);
        let got = decode_reply(2, reply).remove(0).unwrap();
        assert_eq!((got.entry_id, got.record), (want.entry_id, want.record));
    }

    #[test]
    fn agrees_with_the_stream_id_decoder() {
        let fields = record(2).encode();
        let flat: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let id = redis::streams::StreamId {
            id: "9-1".into(),
            map: fields
                .iter()
                .map(|(k, v)| (k.to_string(), bulk(v)))
                .collect(),
            ..Default::default()
        };
        let want = super::super::decode(2, &id).unwrap();
        let reply = Value::Map(vec![(
            bulk("{2}:claims"),
            Value::Array(vec![entry("9-1", &flat)]),
        )]);
        let got = decode_reply(2, reply).remove(0).unwrap();
        assert_eq!((got.entry_id, got.record), (want.entry_id, want.record));
    }
}
