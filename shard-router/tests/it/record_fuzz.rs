//! Property tests over the claim record codec: the consumer decodes whatever sits in a
//! stream, so arbitrary field sets must give a record or a `RecordError`, never a panic,
//! every valid record must survive encode → decode unchanged, and the same text under a
//! version the reader does not know must not decode or count.

use proptest::prelude::*;
use shard_router::codec::ClaimId;
use shard_router::record::ClaimRecord;

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(ClaimRecord::FIELD.to_owned()),
        "c[0-9]{0,3}",
        "[a-z]{0,6}",
    ]
}

/// Values shaped like records: commas, digits, a length that may or may not fit.
fn record_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "([0-9]{0,3},){0,9}[0-9a-zü,]{0,12}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..80),
    ]
}

fn record() -> impl Strategy<Value = ClaimRecord> {
    (
        any::<u64>(),
        // Commas and multi-byte characters: the record cuts the user by its length.
        "[a-zA-Z0-9_@.:|,ü-]{1,32}",
        1u32..1000,
        any::<u64>(),
        0u16..1024,
        0u16..1024,
        proptest::option::of("[a-zA-Z0-9-]{1,64}"),
        any::<i64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(sku, user, qty, seq, shard, home, rid, ts, ms, n)| ClaimRecord {
                claim_id: format!("{shard}-{ms}-{n}"),
                sku,
                user,
                qty,
                user_seq: seq,
                shard,
                home,
                request_id: rid,
                ts_ms: ts,
                gen: 0,
            },
        )
}

proptest! {
    #[test]
    fn arbitrary_entries_never_panic(
        id in "[0-9-]{0,24}",
        fields in prop::collection::vec((field_name(), record_value()), 0..12),
    ) {
        let _ = ClaimRecord::decode(&id, fields.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        let _ = ClaimRecord::sku_and_units(fields.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        let _ = ClaimId::parse(&id);
    }

    #[test]
    fn valid_records_round_trip(rec in record(), other in 2u32..1000) {
        let entry = rec.claim_id.split_once('-').unwrap().1.to_owned();
        let fields = rec.encode();
        let back = ClaimRecord::decode(&entry, fields.iter().map(|(k, v)| (*k, v.as_bytes())));
        prop_assert_eq!(back.unwrap(), rec.clone());
        let (sku, units) = ClaimRecord::sku_and_units(fields.iter().map(|(k, v)| (*k, v.as_bytes()))).unwrap();
        let want = rec.sku.to_string();
        prop_assert_eq!((sku, units), (want.as_bytes(), i64::from(rec.qty)));
        prop_assert_eq!(ClaimId::parse(&rec.claim_id).map(|c| c.shard()), Some(rec.shard));
        let name = format!("c{other}");
        let unknown = [(name.as_str(), fields[0].1.as_bytes())];
        let e = ClaimRecord::decode(&entry, unknown).unwrap_err();
        prop_assert!(e.reason.contains(&format!("unknown version {other}")), "{}", e.reason);
        prop_assert_eq!(ClaimRecord::sku_and_units(unknown), None);
    }
}
