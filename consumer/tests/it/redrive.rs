//! `consumer redrive` on a rerouted claim: once its record is in the ledger and its letter
//! deleted, only a final replay answer can be confirmed, so redrive makes it final as the
//! writer does (`consumer/src/final_answers.rs`); a tentative one would answer every retry
//! of that request 503 for good.

use crate::common::*;
use consumer::campaign::Campaign;
use shard_router::keys::ShardKeys;
use shard_router::{ClaimOutcome, ClaimRequest};

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
    let req = ClaimRequest {
        sku: c.sku,
        user: "late".into(),
        qty: 1,
        request_id: Some("late-r".into()),
    };
    let out = shard_router::protocol::claim(
        &s.client,
        &c.meta(),
        &req,
        &shard_router::protocol::LocalEmptyShards::default(),
        shard_router::now_ms(),
    )
    .await
    .unwrap();
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
    let r = consumer::redrive::run(&s.pool, &s.client, &[], T)
        .await
        .unwrap();
    assert_eq!(r.inserted, 2);
    let after = answer(&s, &c, "late", "late-r").await.unwrap();
    assert!(!after.starts_with('~'), "still tentative: {after}");
    assert!(after.starts_with(&claim.claim_id), "{after}");
}
