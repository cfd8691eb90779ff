//! `consumer redrive` on a rerouted claim: once its record is in the ledger and its letter
//! deleted, only a final replay answer can be confirmed, so redrive makes it final as the
//! writer does (`consumer/src/final_answers.rs`); a tentative one would answer every retry
//! of that request 503 for good.

use crate::common::failover::*;
use crate::common::rebuild::claim_on;
use crate::common::*;
use campaign_ops::campaign::Campaign;
use shard_router::keys::ShardKeys;
use shard_router::ClaimOutcome;

async fn answer(s: &Stack, c: &Campaign, user: &str, rid: &str) -> Option<String> {
    let home = s.client.placement().home_shard(c.sku, c.width, user);
    let key = ShardKeys::new(s.client.placement(), home, c.sku).request(user, Some(rid));
    let mut conn = s.client.conn();
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redriven_reroute_gets_a_final_answer() {
    let s = Stack::start().await;
    let c = campaign(&s, 13_101, 2, 2, 1, 3600).await;
    let p = s.client.placement();
    let home = p.home_shard(c.sku, c.width, "late");
    let drainer = (0..)
        .map(|n| format!("d{n}"))
        .find(|u| p.home_shard(c.sku, c.width, u) == home)
        .unwrap();
    claim_all(&s.client, &c, vec![drainer], 1).await;
    let out = claim_on(&s.client, &c, "late", Some("late-r")).await;
    let ClaimOutcome::Claimed { claim, .. } = out else {
        panic!("{out:?}")
    };
    assert_ne!(claim.shard, home, "rerouted");
    // As a gateway with replica durability leaves it until the take is confirmed.
    let stored = answer(&s, &c, "late", "late-r").await.unwrap();
    let key = ShardKeys::new(p, home, c.sku).request("late", Some("late-r"));
    let mut conn = s.client.conn();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(format!("~{}", stored.trim_start_matches('~')))
        .query_async(&mut conn)
        .await
        .unwrap();

    assert_eq!(dead_letter_everything(&s).await, 2);
    let r = redrive(&s).await;
    assert_eq!(r.inserted, 2);
    let after = answer(&s, &c, "late", "late-r").await.unwrap();
    assert!(!after.starts_with('~'), "still tentative: {after}");
    assert!(after.starts_with(&claim.claim_id), "{after}");
}

/// A dead letter is a claim the reader never committed, so no replica check ever covered
/// it. Before the fix redrive committed it as read: here the claim and its letter exist on
/// a master whose replica was cut off, and after the failover the promoted replica offers
/// the unit again while the ledger holds the claim. Now the letter stays until a replica
/// holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_no_replica_holds_is_not_redriven() {
    let (mut s, replica) = stack_with_replica().await;
    let c = campaign(&s, 13_102, 2, 1, 1, 3600).await;
    // With the replica attached, a letter is redriven.
    assert_eq!(claim_all(&s.client, &c, users("b", 1), 1).await.len(), 1);
    assert_eq!(dead_letter_everything(&s).await, 1);
    assert_eq!(redrive(&s).await.inserted, 1);

    promote(&replica);
    assert_eq!(claim_all(&s.client, &c, users("a", 1), 1).await.len(), 1);
    assert_eq!(dead_letter_everything(&s).await, 1);
    let r = redrive(&s).await;
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims").await,
        1,
        "a letter no replica holds must not reach the ledger: {r:?}"
    );
    assert_eq!(
        (r.removed, r.unconfirmed),
        (0, 1),
        "the letter stays: {r:?}"
    );

    let promoted = fail_over(&mut s, &replica).await;
    assert_eq!(
        promoted.slices(c.sku, 1).await.unwrap()[0].1,
        Some(1),
        "the second claim rolled back with the failover"
    );
}

async fn redrive(s: &Stack) -> campaign_ops::redrive::RedriveReport {
    campaign_ops::redrive::run(&s.pool, &s.client, &[], s.cfg.replica_wait, T)
        .await
        .unwrap()
}
