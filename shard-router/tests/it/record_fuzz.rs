//! Property tests over the claim record codec: the consumer decodes whatever sits in a
//! stream, so arbitrary field sets must give a record or a `RecordError`, never a panic,
//! and every valid record must survive encode → decode unchanged.

use proptest::prelude::*;
use shard_router::codec::ClaimId;
use shard_router::record::ClaimRecord;

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(ClaimRecord::FIELDS.to_vec()).prop_map(str::to_owned),
        "[a-z]{0,6}",
    ]
}

fn record() -> impl Strategy<Value = ClaimRecord> {
    (
        any::<u64>(),
        "[a-zA-Z0-9_@.:|-]{1,64}",
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
        fields in prop::collection::vec((field_name(), prop::collection::vec(any::<u8>(), 0..80)), 0..12),
    ) {
        let _ = ClaimRecord::decode(&id, fields.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        let _ = ClaimId::parse(&id);
    }

    #[test]
    fn valid_records_round_trip(rec in record()) {
        let entry = rec.claim_id.split_once('-').unwrap().1.to_owned();
        let fields = rec.encode();
        let back = ClaimRecord::decode(&entry, fields.iter().map(|(k, v)| (*k, v.as_bytes())));
        prop_assert_eq!(back.unwrap(), rec.clone());
        prop_assert_eq!(ClaimId::parse(&rec.claim_id).map(|c| c.shard()), Some(rec.shard));
    }
}
