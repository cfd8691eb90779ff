//! The claim record (`shard-router/src/record.rs`) as the scripts write it: a claim on the
//! home shard and a second chance's take are read back as the records they are, each one
//! field of the version readers know (`c1`); a user sequence past 10^14 is written whole,
//! in the record and in a hold (Lua's `..` would write `1e+14`, which no reader takes as a
//! number: an acknowledged claim would become poison, and a hold one its settle cannot
//! find); and a record of an unknown version in a stream is not taken by the readers here.

use crate::common::{hold_and_take, open_meta, other_shard, req, users_with_home, Env, SHARDS};
use shard_router::keys::{claims_stream, ShardKeys};
use shard_router::{
    ClaimRecord, HomeOutcome, SettleOutcome, Settlement, SkuMeta, StockClient, StockConfig,
    TakeOutcome,
};

async fn client(env: &Env) -> StockClient {
    StockClient::connect(StockConfig::new(env.target(), SHARDS))
        .await
        .expect("connect")
}

/// A client and a preheated SKU of 4 units over `width` shards, limit 3.
async fn preheated(env: &Env, sku: u64, width: u16) -> (StockClient, SkuMeta) {
    let client = client(env).await;
    let meta = open_meta(sku, 4, width, 3);
    client.preheat(&meta).await.expect("preheat");
    (client, meta)
}

/// The raw field names of every entry of `shard`'s stream, and the entries decoded.
fn entries(env: &Env, client: &StockClient, shard: u16) -> Vec<(Vec<String>, ClaimRecord)> {
    type Entry = (String, Vec<(String, Vec<u8>)>);
    let mut conn = env.node_connections().remove(0);
    let raw: Vec<Entry> = redis::cmd("XRANGE")
        .arg(claims_stream(client.placement(), shard))
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .expect("XRANGE");
    raw.into_iter()
        .map(|(id, fields)| {
            let names = fields.iter().map(|(k, _)| k.clone()).collect();
            let pairs = fields.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
            let record = ClaimRecord::decode(&id, pairs).expect("a valid record");
            (names, record)
        })
        .collect()
}

#[tokio::test]
async fn a_claim_and_a_take_read_back_as_one_versioned_field() {
    let env = Env::single();
    let (client, meta) = preheated(&env, 2100, 2).await;
    let user = users_with_home(
        &client,
        &meta,
        client.placement().shards_of(meta.sku, 2)[0],
        "u,ü",
        1,
    )
    .remove(0);
    let home = client.placement().home_shard(meta.sku, meta.width, &user);
    let other = other_shard(&client, &meta, home);
    let now = shard_router::now_ms();
    let r = req(meta.sku, &user, Some("r,1"));
    let HomeOutcome::Claimed { user_seq, .. } = client
        .claim_home(&r, home, now, true)
        .await
        .expect("claim")
        .outcome
    else {
        panic!("expected a claim")
    };
    assert_eq!(user_seq, 1);
    // The take of a second chance, under a hold the test places by hand.
    let k = ShardKeys::new(client.placement(), home, meta.sku);
    let mut conn = env.node_connections().remove(0);
    let _: i64 = redis::cmd("HINCRBY")
        .arg(k.user_seq())
        .arg(&user)
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let taken = client
        .take(&r, other, home, 2, 0, now)
        .await
        .expect("take")
        .outcome;
    assert!(matches!(taken, TakeOutcome::Claimed { .. }), "{taken:?}");

    let mut got: Vec<(Vec<String>, ClaimRecord)> = entries(&env, &client, home);
    got.extend(entries(&env, &client, other));
    assert_eq!(got.len(), 2);
    for (names, rec) in &got {
        assert_eq!(names, &["c1"]);
        assert_eq!(
            (
                rec.sku,
                rec.user.as_str(),
                rec.qty,
                rec.home,
                rec.request_id.as_deref(),
                rec.ts_ms
            ),
            (meta.sku, user.as_str(), 1, home, Some("r,1"), now),
        );
    }
    let by_shard = |s: u16| {
        got.iter()
            .find(|(_, r)| r.shard == s)
            .expect("record")
            .1
            .user_seq
    };
    assert_eq!((by_shard(home), by_shard(other)), (1, 2));
}

#[tokio::test]
async fn a_user_sequence_past_ten_to_the_fourteen_is_written_whole() {
    let env = Env::single();
    let (client, meta) = preheated(&env, 2200, 1).await;
    let shard = client.placement().shards_of(meta.sku, 1)[0];
    let k = ShardKeys::new(client.placement(), shard, meta.sku);
    let mut conn = env.node_connections().remove(0);
    let _: () = redis::cmd("HSET")
        .arg(k.user_seq())
        .arg("big")
        .arg(99_999_999_999_999_u64)
        .query(&mut conn)
        .unwrap();
    let r = req(meta.sku, "big", None);
    let HomeOutcome::Claimed { user_seq, .. } = client
        .claim_home(&r, shard, shard_router::now_ms(), false)
        .await
        .expect("claim")
        .outcome
    else {
        panic!("expected a claim")
    };
    assert_eq!(user_seq, 100_000_000_000_000);
    let got = entries(&env, &client, shard);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.user_seq, 100_000_000_000_000);
}

#[tokio::test]
async fn a_hold_past_ten_to_the_fourteen_is_settled() {
    let env = Env::single();
    // One unit per shard; the home shard's goes to someone else first.
    let client = client(&env).await;
    let meta = open_meta(2300, 2, 2, 3);
    client.preheat(&meta).await.expect("preheat");
    let home = client.placement().shards_of(meta.sku, 2)[0];
    let other = other_shard(&client, &meta, home);
    let users = users_with_home(&client, &meta, home, "h", 2);
    let now = shard_router::now_ms();
    let first = req(meta.sku, &users[0], None);
    assert!(matches!(
        client
            .claim_home(&first, home, now, false)
            .await
            .map(|a| a.outcome),
        Ok(HomeOutcome::Claimed { .. })
    ));
    let k = ShardKeys::new(client.placement(), home, meta.sku);
    let mut conn = env.node_connections().remove(0);
    let _: () = redis::cmd("HSET")
        .arg(k.user_seq())
        .arg(&users[1])
        .arg(99_999_999_999_999_u64)
        .query(&mut conn)
        .unwrap();
    let r = req(meta.sku, &users[1], None);
    let (user_seq, kept) = hold_and_take(&client, &r, home, other, now).await;
    assert_eq!(user_seq, 100_000_000_000_000);
    let settled = client
        .settle(
            meta.sku,
            home,
            &users[1],
            user_seq,
            None,
            &Settlement::Keep(kept),
        )
        .await
        .expect("settle")
        .outcome;
    assert_eq!(settled, SettleOutcome::Settled { qty: 1 });
}

/// A record of a version these readers do not know, beside one they do: reconciliation's
/// count of units taken leaves it out, and the records a drill compares with its clients'
/// answers are refused whole (a stream they cannot read is not a verdict).
#[tokio::test]
async fn a_record_of_an_unknown_version_is_not_read_as_a_claim() {
    let env = Env::single();
    let (client, meta) = preheated(&env, 2400, 1).await;
    let shard = client.placement().shards_of(meta.sku, 1)[0];
    let r = req(meta.sku, "known", None);
    let HomeOutcome::Claimed { claim_id, .. } = client
        .claim_home(&r, shard, shard_router::now_ms(), false)
        .await
        .expect("claim")
        .outcome
    else {
        panic!("expected a claim")
    };
    let (_, written) = entries(&env, &client, shard).remove(0);
    // The same text, a unit more, under version 2.
    let mut next = written.clone();
    next.user = "next".into();
    let text = next.encode().remove(0).1;
    let mut conn = env.node_connections().remove(0);
    let id: String = redis::cmd("XADD")
        .arg(claims_stream(client.placement(), shard))
        .arg("*")
        .arg("c2")
        .arg(&text)
        .query(&mut conn)
        .unwrap();
    let taken = client
        .units_taken(shard, meta.sku, (u64::MAX, u64::MAX), 10)
        .await
        .expect("units taken");
    assert_eq!(taken.into_iter().collect::<Vec<_>>(), vec![(claim_id, 1)]);
    let e = client
        .stream_records(shard, meta.sku, 10)
        .await
        .expect_err("a stream with an unknown record");
    let e = e.to_string();
    assert!(e.contains(&id) && e.contains("unknown version 2"), "{e}");
}
