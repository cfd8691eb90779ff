//! The stale-hold resolution settles only the hold it read. A round reads the expired
//! holds, then asks the ledger about each; a loss and its rebuild in between start the
//! user's sequence again, and a new request of the same user can hold the very `user|seq`
//! the round is deciding about. Undoing that hold gives the new request's count back while
//! its take goes on, and leaves its `P` answer standing (409 `in_progress` for 24 h).
//! The round is held up on the ledger (a table lock, as a slow database would) while the
//! loss, the rebuild's new generation and the new hold happen on a real Redis.

use std::time::{Duration, Instant};

use campaign_ops::reconcile::holds::resolve_stale_holds;
use consumer::replica::ReplicaWait;
use shard_router::stream::ShardStream;
use shard_router::test_util::{claim_once, drain, lose_user, req};
use shard_router::{ClaimOutcome, HomeOutcome};

use crate::common::rebuild::rebuild_opts;
use crate::common::*;

const WALKER: &str = "walker";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_hold_resolution_settles_only_the_hold_it_read() {
    let s = Stack::start().await;
    let c = campaign(&s, 9101, 8, 2, 1, 3600).await;
    let meta = s
        .client
        .sku_meta(c.sku)
        .await
        .expect("meta")
        .expect("preheated");
    let home = s.client.placement().home_shard(c.sku, 2, WALKER);
    drain(&s.client, &meta, home).await;
    let now = shard_router::now_ms();
    let held = s
        .client
        .claim_home(&req(c.sku, WALKER, Some("w1")), home, now, true)
        .await
        .expect("hold")
        .outcome;
    let HomeOutcome::Hold { user_seq: seq, .. } = held else {
        panic!("expected a hold: {held:?}")
    };

    // The round reads the hold (expired by its clock), then waits on the ledger.
    let mut lock = s.pool.acquire().await.expect("conn");
    sqlx::raw_sql("LOCK TABLES claims WRITE")
        .execute(&mut *lock)
        .await
        .expect("lock");
    let round = {
        let (pool, client) = (s.pool.clone(), s.client.clone());
        let shards = client.placement().shards_of(c.sku, 2);
        tokio::spawn(async move {
            let streams: Vec<ShardStream> = shards
                .iter()
                .map(|&x| ShardStream::new(&client, x))
                .collect();
            resolve_stale_holds(
                &pool,
                &client,
                &streams,
                c.sku,
                &shards,
                now + 3_600_000,
                T,
                ReplicaWait::Off,
            )
            .await
        })
    };
    wait_for_a_query_on_the_lock(&s).await;

    // Meanwhile Redis loses the hold, the rebuild writes the next generation, and another
    // request of the same user holds the same sequence again.
    lose_user(
        &mut s.redis.connection(),
        &s.client,
        &meta,
        home,
        WALKER,
        "w1",
    );
    let again = s
        .client
        .claim_home(
            &req(c.sku, WALKER, Some("w2")),
            home,
            shard_router::now_ms(),
            true,
        )
        .await
        .expect("the new hold")
        .outcome;
    assert!(
        matches!(again, HomeOutcome::Hold { user_seq, .. } if user_seq == seq),
        "the sequence started again: {again:?}"
    );

    sqlx::raw_sql("UNLOCK TABLES")
        .execute(&mut *lock)
        .await
        .expect("unlock");
    let resolved = round.await.expect("round").expect("resolution");
    let holds = s.client.holds(c.sku, home).await.expect("holds");
    let count = s.client.user_count(c.sku, 2, WALKER).await.expect("count");
    println!("resolution: {resolved:?}; holds after it: {holds:?}; count={count}");
    assert!(
        holds
            .iter()
            .any(|h| h.user_seq == seq && h.request_id.as_deref() == Some("w2")),
        "the new request's hold was settled by a round that read another: {holds:?}"
    );
    assert_eq!(count, 1, "the new request's hold still counts for the user");
}

/// Waits (bounded) until a statement of another session waits on a table lock.
async fn wait_for_a_query_on_the_lock(s: &Stack) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting = s
            .count(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE ID <> CONNECTION_ID() AND STATE LIKE '%lock%' \
                 AND INFO LIKE '%FROM claims%'",
            )
            .await;
        if waiting > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the round never reached the ledger"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The rebuild takes a standing hold for the ledger claim of the same `user|seq` (it is
/// counted with that claim, so the hold is not counted again). After a loss handed the
/// sequence out again (the claim was late), the hold is another request's: matched by
/// `user|seq` alone, the user's count misses the units that hold stands for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_counts_another_generations_hold_on_a_claimed_sequence() {
    let s = Stack::start().await;
    let c = campaign(&s, 9102, 8, 2, 2, 3600).await;
    let meta = s
        .client
        .sku_meta(c.sku)
        .await
        .expect("meta")
        .expect("preheated");
    let home = s.client.placement().home_shard(c.sku, 2, WALKER);
    drain(&s.client, &meta, home).await;
    let consumer = start_consumer(s.cfg.clone());
    let first = claim_once(&s.client, &meta, &req(c.sku, WALKER, Some("w1"))).await;
    assert!(
        matches!(first, ClaimOutcome::Claimed { rerouted: true, .. }),
        "{first:?}"
    );
    wait_rows(&s.pool, c.sku, 5, Duration::from_secs(20)).await;
    consumer.stop().await;

    lose_user(
        &mut s.redis.connection(),
        &s.client,
        &meta,
        home,
        WALKER,
        "w1",
    );
    let again = s
        .client
        .claim_home(
            &req(c.sku, WALKER, Some("w2")),
            home,
            shard_router::now_ms(),
            true,
        )
        .await
        .expect("the new hold")
        .outcome;
    assert!(
        matches!(again, HomeOutcome::Hold { user_seq: 1, .. }),
        "the sequence started again: {again:?}"
    );
    campaign_ops::rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .expect("rebuild");
    let count = s.client.user_count(c.sku, 2, WALKER).await.expect("count");
    println!("after the rebuild: count={count} (the ledger's claim and w2's hold)");
    assert_eq!(count, 2, "the user's count misses the hold of w2");
}

/// The other half of the rule above: a hold standing for its own claim (the second chance
/// took its unit, the settle has not run yet: a gateway mid-walk, or one that died there)
/// is counted with that claim and must not be counted again. The rebuild reads its claims
/// back from the ledger, where a row carries no record generation (`consumer/src/rows.rs`
/// reads it as 0), while the hold is named by the generation its shard carried (1 from the
/// first preheat on): matched on `(user|seq, gen)`, the hold never meets its claim, and
/// the user's one unit counts twice, refusing them below the limit for good (the keep
/// that follows leaves the count as it is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_does_not_count_a_claims_own_hold_again() {
    let s = Stack::start().await;
    let c = campaign(&s, 9103, 8, 2, 2, 3600).await;
    let meta = s
        .client
        .sku_meta(c.sku)
        .await
        .expect("meta")
        .expect("preheated");
    let home = s.client.placement().home_shard(c.sku, 2, WALKER);
    let other = *s
        .client
        .placement()
        .shards_of(c.sku, 2)
        .iter()
        .find(|&&sh| sh != home)
        .expect("two shards");
    drain(&s.client, &meta, home).await;
    let r = req(c.sku, WALKER, Some("w1"));
    let now = shard_router::now_ms();
    let held = s
        .client
        .claim_home(&r, home, now, true)
        .await
        .expect("the hold")
        .outcome;
    let HomeOutcome::Hold { user_seq, gen, .. } = held else {
        panic!("the home slice is empty: a hold, not {held:?}")
    };
    assert!(gen >= 1, "the first preheat writes generation 1: {gen}");
    let taken = s
        .client
        .take(&r, other, home, user_seq, gen, now)
        .await
        .expect("take")
        .outcome;
    assert!(
        matches!(taken, shard_router::TakeOutcome::Claimed { .. }),
        "{taken:?}"
    );
    assert_eq!(s.client.user_count(c.sku, 2, WALKER).await.unwrap(), 1);

    // The settle has not run when a rebuild comes (a restart of another shard, a preheat).
    campaign_ops::rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .expect("rebuild");
    let count = s.client.user_count(c.sku, 2, WALKER).await.expect("count");
    assert_eq!(count, 1, "one unit taken, under its own hold: counted once");
}
