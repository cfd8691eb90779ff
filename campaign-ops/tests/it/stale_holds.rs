//! Stale-hold resolution looks where the rebuild looks: the ledger, the claims streams and
//! the dead letters. A second chance whose take record was dead-lettered took a unit; its
//! hold must be kept, not undone as if the claim never happened.

use crate::common::*;
use shard_router::keys::{self, ShardKeys};
use shard_router::ClaimRecord;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_in_the_dead_letters_keeps_its_hold() {
    let s = Stack::start().await;
    let c = campaign(&s, 14_001, 8, 2, 2, 3600).await;
    let p = s.client.placement().clone();
    let home = p.home_shard(c.sku, c.width, "bob");
    let other = *p
        .shards_of(c.sku, c.width)
        .iter()
        .find(|&&x| x != home)
        .unwrap();
    let now = shard_router::now_ms();
    // The gateway placed bob's hold on his home, took the unit on the other shard, and
    // died before settling; the take record was then dead-lettered.
    let hk = ShardKeys::new(&p, home, c.sku);
    let mut conn = s.redis.connection();
    let _: () = dead_hold(&mut redis::pipe(), &hk, "bob", "", now)
        .cmd("HSET")
        .arg(hk.user_seq())
        .arg("bob")
        .arg(1)
        .cmd("DECRBY")
        .arg(ShardKeys::new(&p, other, c.sku).stock())
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let take = ClaimRecord {
        claim_id: String::new(),
        sku: c.sku,
        user: "bob".into(),
        qty: 1,
        user_seq: 1,
        shard: other,
        home,
        request_id: None,
        ts_ms: now - 61_000,
        gen: 0,
    };
    let mut add = redis::cmd("XADD");
    add.arg(keys::dead_letter_stream(&p, other)).arg("*");
    for (k, v) in take.encode() {
        add.arg(k).arg(v);
    }
    add.arg("dead_entry")
        .arg(format!("{}-0", now - 61_000))
        .arg("dead_reason")
        .arg("too many deliveries");
    let _: String = add.query(&mut conn).unwrap();

    let r = s.reconcile(c.sku).await;
    assert_eq!(r.stale_holds, 1, "{r:?}");
    assert_eq!(
        s.client.user_count(c.sku, c.width, "bob").await.unwrap(),
        1,
        "the hold was kept: bob's unit is taken"
    );
}
