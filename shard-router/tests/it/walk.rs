//! The second chance's walk over the other shards, on a private single Redis.

use std::collections::HashMap;
use std::sync::Mutex;

use shard_router::protocol::{self, ClaimOptions, EmptyShards, LocalEmptyShards};
use shard_router::{ClaimOutcome, ShardId, SkuMeta, StockClient};

use crate::common::{claim_once, open_meta, req, users_with_home, Env};

/// A view in which one shard turns empty once the walk has been planned, as when another
/// claim's miss or an `empty` event arrives while this claim holds and walks.
struct EmptiedDuringTheWalk {
    view: LocalEmptyShards,
    shard: ShardId,
    asked: Mutex<HashMap<ShardId, u32>>,
}

impl EmptyShards for EmptiedDuringTheWalk {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool {
        let mut asked = self.asked.lock().unwrap();
        let n = asked.entry(shard).or_default();
        *n += 1;
        (shard == self.shard && *n > 1) || self.view.is_empty(sku, shard)
    }

    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool) {
        self.view.set_empty(sku, shard, empty);
    }
}

/// A shard the view learnt was empty after the walk began is not tried: in a rush, each
/// try is a Redis round trip behind every other runnable task, and walking shards other
/// claims just found empty is what made sold-out answers slow (docs/BENCHMARKS.md "Where
/// the rush time goes").
#[tokio::test]
async fn a_walk_skips_a_shard_found_empty_since_it_began() {
    let env = Env::single();
    let client = env.client().await;
    // 6 units over 3 shards, 2 each; the walker's home shard is drained first.
    let meta = open_meta(1301, 6, 3, 1);
    client.preheat(&meta).await.expect("preheat");
    let walker = "walker";
    let home = client.placement().home_shard(meta.sku, meta.width, walker);
    for u in users_with_home(&client, &meta, home, "h", 2) {
        let out = claim_once(&client, &meta, &req(meta.sku, &u, None)).await;
        assert!(matches!(out, ClaimOutcome::Claimed { .. }), "{out:?}");
    }
    let order = client
        .placement()
        .second_chances(meta.sku, meta.width, walker, |_| false);
    assert_eq!(order.len(), 2, "{order:?}");
    let (first, second) = (order[0], order[1]);

    let view = EmptiedDuringTheWalk {
        view: LocalEmptyShards::default(),
        shard: first,
        asked: Mutex::default(),
    };
    let out = protocol::claim(
        &client,
        &meta,
        &req(meta.sku, walker, Some("w1")),
        ClaimOptions::new(&view, shard_router::now_ms()),
    )
    .await
    .expect("claim")
    .outcome;
    let ClaimOutcome::Claimed { claim, rerouted } = out else {
        panic!("expected a claim, got {out:?}")
    };
    assert!(rerouted);
    assert_eq!(claim.shard, second, "the shard emptied mid-walk was tried");
    let slices: HashMap<ShardId, Option<i64>> = client
        .slices(meta.sku, meta.width)
        .await
        .expect("slices")
        .into_iter()
        .collect();
    assert_eq!(
        slices[&first],
        Some(2),
        "nothing taken where the walk skipped"
    );
    assert_eq!(slices[&second], Some(1));
    assert_eq!(slices[&home], Some(0));
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, walker)
            .await
            .expect("count"),
        1,
        "the hold settled into the claim"
    );
}

/// A view that, as the stalled walk reaches the other shard, lets the consumer resolve the
/// walker's hold as "nothing taken" (it expired) and the client's retry of the same request
/// id win that shard's unit, then reports the shard empty, so the stalled walk ends.
struct ResolvedBehindTheWalk {
    view: LocalEmptyShards,
    target: shard_router::RedisTarget,
    meta: shard_router::SkuMeta,
    home: ShardId,
    other: ShardId,
    retried: Mutex<Option<ClaimOutcome>>,
}

impl EmptyShards for ResolvedBehindTheWalk {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.view.is_empty(sku, shard)
    }

    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool) {
        self.view.set_empty(sku, shard, empty);
    }

    fn still_empty(&self, _sku: u64, shard: ShardId) -> bool {
        if shard != self.other || self.retried.lock().unwrap().is_some() {
            return self.view.is_empty(self.meta.sku, shard);
        }
        // Another process (the consumer, then the client's retry through another
        // gateway): its own runtime and connection, since this one is blocked here.
        let (target, meta, home) = (self.target.clone(), self.meta.clone(), self.home);
        let retried = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async move {
                let other = shard_router::StockClient::connect(shard_router::StockConfig::new(
                    target,
                    crate::common::SHARDS,
                ))
                .await
                .expect("connect");
                let undone = other
                    .settle(
                        meta.sku,
                        home,
                        "walker",
                        1,
                        Some("w1"),
                        &shard_router::Settlement::Undo,
                    )
                    .await
                    .expect("the consumer's undo")
                    .outcome;
                assert!(matches!(
                    undone,
                    shard_router::SettleOutcome::Settled { .. }
                ));
                let view = LocalEmptyShards::default();
                protocol::claim(
                    &other,
                    &meta,
                    &req(meta.sku, "walker", Some("w1")),
                    ClaimOptions::new(&view, shard_router::now_ms()),
                )
                .await
                .expect("the retry")
                .outcome
            })
        })
        .join()
        .expect("retry thread");
        *self.retried.lock().unwrap() = Some(retried);
        true
    }
}

/// A SKU of 4 units on 2 shards, limit 1, whose slice on the home shard of `walker` two
/// other users have sold: `walker`'s claim must walk. Returns the SKU, that home shard and
/// the first shard of `walker`'s second chances.
async fn walker_home_sold_out(client: &StockClient, sku: u64) -> (SkuMeta, ShardId, ShardId) {
    let meta = open_meta(sku, 4, 2, 1);
    client.preheat(&meta).await.expect("preheat");
    let home = client
        .placement()
        .home_shard(meta.sku, meta.width, "walker");
    for u in users_with_home(client, &meta, home, "h", 2) {
        let out = claim_once(client, &meta, &req(meta.sku, &u, None)).await;
        assert!(matches!(out, ClaimOutcome::Claimed { .. }), "{out:?}");
    }
    let other = client
        .placement()
        .second_chances(meta.sku, meta.width, "walker", |_| false)[0];
    (meta, home, other)
}

/// Found by the model checker (model/, `replay`): a walk that stalled past its hold's TTL
/// while the consumer resolved the hold and a retry of the same request id won must not
/// answer "sold out" when it ends; the request's answer is no longer its own to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_whose_hold_was_resolved_meanwhile_refuses_nothing() {
    let env = Env::single();
    let client = env.client().await;
    let (meta, home, other) = walker_home_sold_out(&client, 1302).await;
    let view = ResolvedBehindTheWalk {
        view: LocalEmptyShards::default(),
        target: env.target(),
        meta: meta.clone(),
        home,
        other,
        retried: Mutex::default(),
    };
    let first = protocol::claim(
        &client,
        &meta,
        &req(meta.sku, "walker", Some("w1")),
        ClaimOptions::new(&view, shard_router::now_ms()),
    )
    .await
    .map(|a| a.outcome);
    let retried = view.retried.lock().unwrap().clone();
    assert!(
        matches!(retried, Some(ClaimOutcome::Claimed { rerouted: true, .. })),
        "the retry won the other shard's unit: {retried:?}"
    );
    assert!(
        !matches!(first, Ok(ClaimOutcome::SoldOut)),
        "the stalled first attempt answered sold out after its retry won: {first:?}"
    );
}

/// A view that, as the stalled walk reaches the other shard, lets Redis lose the walker's
/// keys on its home (its hold, sequence and count: a loss the rebuild did not know the
/// hold of) and a retry of the same request id place a hold there again, which gets the
/// same sequence number. It then reports the shard empty, so the stalled walk ends.
struct HoldReplacedBehindTheWalk {
    view: LocalEmptyShards,
    target: shard_router::RedisTarget,
    url: String,
    meta: shard_router::SkuMeta,
    home: ShardId,
    other: ShardId,
    replaced: Mutex<Option<u64>>,
}

impl EmptyShards for HoldReplacedBehindTheWalk {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.view.is_empty(sku, shard)
    }

    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool) {
        self.view.set_empty(sku, shard, empty);
    }

    fn still_empty(&self, _sku: u64, shard: ShardId) -> bool {
        if shard != self.other || self.replaced.lock().unwrap().is_some() {
            return self.view.is_empty(self.meta.sku, shard);
        }
        let (target, url, meta, home) = (
            self.target.clone(),
            self.url.clone(),
            self.meta.clone(),
            self.home,
        );
        let seq = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async move {
                let other = shard_router::StockClient::connect(shard_router::StockConfig::new(
                    target,
                    crate::common::SHARDS,
                ))
                .await
                .expect("connect");
                let k = shard_router::keys::ShardKeys::new(other.placement(), home, meta.sku);
                let mut conn = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("connect");
                let _: () = redis::cmd("DEL")
                    .arg(k.holds())
                    .arg(k.user_seq())
                    .arg(k.users())
                    .arg(k.request("walker", Some("w1")))
                    .query(&mut conn)
                    .expect("DEL");
                // The rebuild after the loss writes the next generation.
                let _: () = redis::cmd("HINCRBY")
                    .arg(k.meta())
                    .arg("gen")
                    .arg(1)
                    .query(&mut conn)
                    .expect("HINCRBY");
                let held = other
                    .claim_home(
                        &req(meta.sku, "walker", Some("w1")),
                        home,
                        shard_router::now_ms(),
                        true,
                    )
                    .await
                    .expect("the retry's hold")
                    .outcome;
                let shard_router::HomeOutcome::Hold { user_seq, .. } = held else {
                    panic!("the retry holds: {held:?}")
                };
                user_seq
            })
        })
        .join()
        .expect("retry thread");
        *self.replaced.lock().unwrap() = Some(seq);
        true
    }
}

/// Found by the model checker (model/, `books-close`): after a loss, a user's sequence
/// starts again, so a retry's hold can take the very `user|seq` of a stalled attempt's
/// hold that the loss removed. The stalled attempt's undo must not give back the retry's
/// count (the user would then hold a unit the count does not show, and could claim past
/// the limit): a settle names the hold it placed by its rebuild generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_walk_does_not_undo_a_retrys_hold_of_the_same_sequence() {
    let env = Env::single();
    let client = env.client().await;
    let (meta, home, other) = walker_home_sold_out(&client, 1303).await;
    let crate::common::Env::Single(server) = &env else {
        unreachable!("single")
    };
    let view = HoldReplacedBehindTheWalk {
        view: LocalEmptyShards::default(),
        target: env.target(),
        url: server.url(),
        meta: meta.clone(),
        home,
        other,
        replaced: Mutex::default(),
    };
    let first = protocol::claim(
        &client,
        &meta,
        &req(meta.sku, "walker", Some("w1")),
        ClaimOptions::new(&view, shard_router::now_ms()),
    )
    .await
    .map(|a| a.outcome);
    let seq = view.replaced.lock().unwrap().expect("the retry held");
    assert_eq!(seq, 1, "the lost sequence started again");
    assert!(
        !matches!(first, Ok(ClaimOutcome::SoldOut)),
        "the stalled attempt answered sold out: {first:?}"
    );
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, "walker")
            .await
            .expect("count"),
        1,
        "the retry's hold still counts for the user"
    );
}
