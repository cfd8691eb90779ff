//! A collision (two claim ids on one `(sku, user, user_seq)`, as a Redis that lost its
//! `useq` hands out a seq again) never voids an acknowledged claim: both rows stay, the
//! stock is taken for both, and a critical anomaly names them. A true redelivery (same
//! claim id) stays a no-op.

use std::time::Duration;

use crate::common::*;
use consumer::commit;
use shard_router::keys::ShardKeys;
use shard_router::stream;
use shard_router::ClaimRecord;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_user_seq_keeps_both_acknowledged_claims() {
    let s = Stack::start().await;
    let c = campaign(&s, 7101, 10, 1, 2, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let first = claim_all(&s.client, &c, vec!["alice".into()], 1).await;
    assert_eq!(first.len(), 1);
    wait_drained(&s, c.sku, 1, Duration::from_secs(20)).await;

    // Redis forgets the user's sequence (a loss, a rollback): the next claim reuses seq 1.
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let k = ShardKeys::new(s.client.placement(), shard, c.sku);
    let mut conn = s.redis.connection();
    forget_seq(&s, c.sku, shard, "alice");
    let second = claim_all(&s.client, &c, vec!["alice".into()], 1).await;
    assert_eq!(second.len(), 1, "the second claim is acknowledged");
    assert_ne!(first[0], second[0]);
    wait_drained(&s, c.sku, 2, Duration::from_secs(20)).await;
    consumer.stop().await;

    for id in [&first[0], &second[0]] {
        let status: String =
            sqlx::query_scalar("SELECT CAST(status AS CHAR) FROM claims WHERE claim_id = ?")
                .bind(id)
                .fetch_one(&s.pool)
                .await
                .unwrap_or_else(|e| panic!("acknowledged claim {id} must be in the ledger: {e}"));
        assert_eq!(status, "pending", "claim {id}");
    }
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'collision'")
            .await,
        1,
        "the collision is a critical anomaly"
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'duplicate'")
            .await,
        0
    );
    let slice: i64 = redis::cmd("GET").arg(k.stock()).query(&mut conn).unwrap();
    assert_eq!(slice, 8, "no unit of an acknowledged claim goes back");
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 7101")
            .await,
        8
    );
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.drift, 0, "{r:?}");
}

/// `user` claims a unit of a new campaign `sku`, Redis forgets the user's sequence, and the
/// user claims again under the same one: the two records, in stream order, read back
/// without a consumer.
async fn one_seq_claimed_twice(s: &Stack, sku: u64, user: &str) -> Vec<ClaimRecord> {
    let c = campaign(s, sku, 10, 1, 2, 3600).await;
    claim_all(&s.client, &c, vec![user.into()], 1).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    forget_seq(s, c.sku, shard, user);
    claim_all(&s.client, &c, vec![user.into()], 1).await;
    let st = stream::ShardStream::new(&s.client, shard);
    let records: Vec<_> = st
        .all_entries(&s.client, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| stream::decode(shard, e).unwrap().record)
        .collect();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].user_seq, records[1].user_seq);
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_collision_is_still_a_no_op() {
    let s = Stack::start().await;
    let records = one_seq_claimed_twice(&s, 7102, "bob").await;

    let one = commit::write_batch(&s.pool, &records, T).await.unwrap();
    assert_eq!((one.inserted, one.redelivered), (2, 0));
    assert_eq!(one.collisions.len(), 1);
    // Both again, and each alone: nothing new.
    for batch in [&records[..], &records[..1], &records[1..]] {
        let again = commit::write_batch(&s.pool, batch, T).await.unwrap();
        assert_eq!((again.inserted, again.redelivered), (0, batch.len()));
        assert!(again.collisions.is_empty());
    }
    assert_eq!(s.count("SELECT COUNT(*) FROM claims").await, 2);
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 7102")
            .await,
        8
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'collision'")
            .await,
        1
    );
}

/// The ledger names a batch's collisions by position (`ledger/src/claims.rs`), counted
/// after duplicates of a claim id are dropped: a duplicate ahead of the collision must not
/// make the outcome name the wrong record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_in_the_batch_does_not_shift_which_record_collided() {
    let s = Stack::start().await;
    let records = one_seq_claimed_twice(&s, 7103, "cleo").await;

    // The first record twice (read, then recovered), then the one reusing its sequence.
    let batch = [records[0].clone(), records[0].clone(), records[1].clone()];
    let out = commit::write_batch(&s.pool, &batch, T).await.unwrap();
    assert_eq!((out.inserted, out.redelivered), (2, 0));
    assert_eq!(out.collisions, vec![records[1].clone()]);
}

/// A collision is what only a home shard older than the ledger hands out (its `useq` rolled
/// back): the consumer fences that shard (`lua/vouch.lua` "distrust"), so it sells nothing
/// more from the older state, until the watch rebuilt it from the ledger and vouched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collision_fences_the_home_shard_until_the_ledger_rebuilt_it() {
    let s = Stack::start().await;
    let c = campaign(&s, 7104, 10, 1, 2, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let consumer = start_consumer(s.cfg.clone());
    one_seq_claimed_in_order(&s, &c, shard, "dora").await;
    wait_drained(&s, c.sku, 2, Duration::from_secs(20)).await;
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'collision'")
            .await,
        1
    );
    let id = s.client.server_identity(shard).await.unwrap();
    assert!(
        !id.sells(),
        "the shard that handed out a sequence twice still sells: {id:?}"
    );
    let fenced = shard_router::protocol::claim(
        &s.client,
        &campaign_ops::sku::meta(&c),
        &shard_router::ClaimRequest {
            sku: c.sku,
            user: "erin".into(),
            qty: 1,
            request_id: None,
        },
        shard_router::protocol::ClaimOptions::new(
            &shard_router::protocol::LocalEmptyShards::default(),
            shard_router::now_ms(),
        ),
    )
    .await
    .map(|a| a.outcome);
    assert!(
        matches!(fenced, Err(shard_router::StockError::Restoring { .. })),
        "a claim on the fenced shard: {fenced:?}"
    );

    campaign_ops::rebuild::watch::check(
        &s.pool,
        &s.client,
        &crate::common::rebuild::rebuild_opts(),
    )
    .await
    .unwrap();
    assert!(s
        .client
        .server_identity(shard)
        .await
        .unwrap()
        .vouched_here());
    // Rebuilt from the ledger: dora holds 2 of her limit of 2, erin may claim.
    assert_eq!(
        claim_all(&s.client, &c, vec!["dora".into()], 1).await.len(),
        0
    );
    assert_eq!(
        claim_all(&s.client, &c, vec!["erin".into()], 1).await.len(),
        1
    );
    wait_drained(&s, c.sku, 3, Duration::from_secs(20)).await;
    consumer.stop().await;
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// `user` claims a unit, Redis forgets the user's sequence, and the user claims again
/// under the same one; the first record reaches the ledger before the second is made.
pub(crate) async fn one_seq_claimed_in_order(
    s: &Stack,
    c: &campaign_ops::campaign::Campaign,
    shard: u16,
    user: &str,
) {
    assert_eq!(claim_all(&s.client, c, vec![user.into()], 1).await.len(), 1);
    wait_drained(s, c.sku, 1, Duration::from_secs(20)).await;
    forget_seq(s, c.sku, shard, user);
    assert_eq!(claim_all(&s.client, c, vec![user.into()], 1).await.len(), 1);
}

/// Redis forgets `user`'s last sequence of `sku` on `shard` (a loss, a rollback): the next
/// claim hands that sequence out again.
fn forget_seq(s: &Stack, sku: u64, shard: u16, user: &str) {
    let k = ShardKeys::new(s.client.placement(), shard, sku);
    let _: i64 = redis::cmd("HDEL")
        .arg(k.user_seq())
        .arg(user)
        .query(&mut s.redis.connection())
        .unwrap();
}
