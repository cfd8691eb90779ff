//! The second chance's walk over the other shards, on a private single Redis.

use std::collections::HashMap;
use std::sync::Mutex;

use shard_router::protocol::{self, EmptyShards, LocalEmptyShards};
use shard_router::{ClaimOutcome, ShardId};

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
/// try is a Redis round trip, and walking shards other claims just found empty took
/// 100-250 ms per claim.
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
        &view,
        shard_router::now_ms(),
    )
    .await
    .expect("claim");
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
