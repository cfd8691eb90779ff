//! A release and a loss of Redis in one run (the model checker's two-fault form,
//! `model/tests/two_faults.rs`): the release reaches Redis after the loss and before the
//! rebuild, the rebuild writes the shard back, the release finishes. The user's count in
//! Redis must then be what the ledger says (0: released), the slices must hold the unit
//! once, and the books must close.
//!
//! The model first reported this as broken: its release ran the user half on the lost home
//! shard although the stock half found no slice, and its rebuild counted a `releasing`
//! claim as the user's, so the count came back as 1 under a claim id already in the release
//! set. The real release stops at the stock half (`StockClient::release`), and the real
//! rebuild counts a `releasing` claim as released (`rebuild/image.rs`); the second test
//! runs the user half on the lost shard anyway (the real script), as the model did.

use std::time::Duration;

use crate::common::rebuild::*;
use crate::common::*;
use campaign_ops::campaign::Campaign;
use campaign_ops::rebuild;
use campaign_ops::release::{self, Outcome, Reason};
use shard_router::keys::ShardKeys;

async fn slices(s: &Stack, c: &Campaign) -> i64 {
    s.client
        .slices(c.sku, c.width)
        .await
        .unwrap()
        .iter()
        .map(|(_, v)| v.expect("slice after the rebuild"))
        .sum()
}

async fn status(s: &Stack, claim: &str) -> String {
    sqlx::query_scalar("SELECT CAST(status AS CHAR) FROM claims WHERE claim_id = ?")
        .bind(claim)
        .fetch_one(&s.pool)
        .await
        .unwrap()
}

/// Units the ledger counts as `user`'s (pending or confirmed claims).
async fn ledger_units(s: &Stack, sku: u64, user: &str) -> i64 {
    s.count(&format!(
        "SELECT CAST(COALESCE(SUM(qty), 0) AS SIGNED) FROM claims WHERE sku = {sku} \
         AND user_id = '{user}' AND status IN ('pending', 'confirmed')"
    ))
    .await
}

/// Two claims (ann's and ben's) committed, the consumer stopped (so its watch does not
/// rebuild before the test does), then Redis loses everything. Returns ann's claim id.
async fn sold_out_then_lost(s: &Stack, c: &Campaign) -> String {
    let consumer = start_consumer(s.cfg.clone());
    let ids = claim_all(&s.client, c, vec!["ann".into(), "ben".into()], 2).await;
    assert_eq!(ids.len(), 2);
    wait_drained(s, c.sku, 2, Duration::from_secs(20)).await;
    consumer.stop().await;
    let ann: String = sqlx::query_scalar("SELECT claim_id FROM claims WHERE user_id = 'ann'")
        .fetch_one(&s.pool)
        .await
        .unwrap();
    flushall(s);
    ann
}

/// After the rebuild and the release's end: ann's count is the ledger's (0), ben's is 1,
/// the unit is back once, the ledger's stock agrees, drift 0, and ann may claim again.
async fn books_close(s: &Stack, c: &Campaign, ann: &str) {
    assert_eq!(status(s, ann).await, "released");
    for user in ["ann", "ben"] {
        assert_eq!(
            i64::from(s.client.user_count(c.sku, c.width, user).await.unwrap()),
            ledger_units(s, c.sku, user).await,
            "{user}'s count in Redis against the ledger"
        );
    }
    assert_eq!(s.client.user_count(c.sku, c.width, "ann").await.unwrap(), 0);
    assert_eq!(slices(s, c).await, 1, "ann's unit back once");
    assert_eq!(
        s.count(&format!(
            "SELECT available FROM sku_stock WHERE sku = {}",
            c.sku
        ))
        .await,
        1
    );
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.drift, 0, "{r:?}");

    // Limit 1: ann's released claim no longer counts.
    let again = claim_all(&s.client, c, vec!["ann".into()], 1).await;
    assert_eq!(again.len(), 1, "ann may claim again");
    let r = s.reconcile(c.sku).await;
    assert_eq!(r.drift, 0, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_between_a_loss_and_the_rebuild_leaves_the_count_to_the_ledger() {
    let s = Stack::start().await;
    let c = campaign(&s, 8101, 2, 2, 1, 3600).await;
    let ann = sold_out_then_lost(&s, &c).await;

    // The release reaches Redis before the rebuild: no slice, so nothing changes there and
    // the claim stays `releasing`.
    let early = release::release(&s.pool, &s.client, &ann, Reason::Cancelled, T).await;
    assert!(early.is_err(), "postponed until a rebuild: {early:?}");
    assert_eq!(status(&s, &ann).await, "releasing");
    let (_, _, _, shard, home, _) = ledger::releases::row(&s.pool, &ann, T).await.unwrap();
    let mut conn = s.redis.connection();
    for (sh, key) in [
        (
            home,
            ShardKeys::new(s.client.placement(), home, c.sku).released_user(),
        ),
        (
            shard,
            ShardKeys::new(s.client.placement(), shard, c.sku).released_stock(),
        ),
    ] {
        let n: i64 = redis::cmd("SCARD").arg(&key).query(&mut conn).unwrap();
        assert_eq!(
            n, 0,
            "shard {sh}: the postponed release wrote no release set"
        );
    }

    let r = rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(r.active_units, 1, "ben's; ann's is releasing: {r:?}");
    assert_eq!(
        s.client.user_count(c.sku, c.width, "ann").await.unwrap(),
        0,
        "the rebuild counts a releasing claim as released"
    );

    // The release's next attempt (the sweep's, or the caller's) finishes it.
    assert_eq!(
        release::release(&s.pool, &s.client, &ann, Reason::Cancelled, T)
            .await
            .unwrap(),
        Outcome::Released
    );
    books_close(&s, &c, &ann).await;
}

/// The model's order: the user half runs on the lost home shard (its meta is gone, so
/// nothing fences it) before the rebuild, leaving the claim id in the user's release set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_half_run_on_the_lost_home_before_the_rebuild_is_counted_once() {
    let s = Stack::start().await;
    let c = campaign(&s, 8102, 2, 2, 1, 3600).await;
    let ann = sold_out_then_lost(&s, &c).await;

    ledger::releases::mark_releasing(&s.pool, &ann, Reason::Cancelled, T)
        .await
        .unwrap();
    let (_, user, qty, _, home, _) = ledger::releases::row(&s.pool, &ann, T).await.unwrap();
    let k = ShardKeys::new(s.client.placement(), home, c.sku);
    let reply: Vec<i64> = redis::Script::new(include_str!("../../../lua/release_user.lua"))
        .key(k.users())
        .key(k.released_user())
        .key(k.meta())
        .arg(&ann)
        .arg(&user)
        .arg(qty)
        .invoke(&mut s.redis.connection())
        .unwrap();
    assert_eq!(reply, vec![40, 0], "the user half ran on the empty shard");

    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(
        s.client.user_count(c.sku, c.width, "ann").await.unwrap(),
        0,
        "a releasing claim is not written back as the user's"
    );
    assert_eq!(
        release::release(&s.pool, &s.client, &ann, Reason::Cancelled, T)
            .await
            .unwrap(),
        Outcome::Released
    );
    books_close(&s, &c, &ann).await;
}
