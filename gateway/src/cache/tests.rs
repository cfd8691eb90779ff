use super::*;
use shard_router::protocol::ClaimOptions;

fn state() -> SkuState {
    let meta = SkuMeta {
        sku: 7,
        stock: 4,
        width: 2,
        limit: 1,
        start_ms: 0,
        end_ms: 1,
        mode: shard_router::SkuMode::Fcfs,
    };
    SkuState::new(meta, vec![3, 4])
}

#[test]
fn sold_out_only_when_every_shard_is_empty() {
    let s = state();
    assert!(!s.all_empty());
    s.set_empty(7, 3, true);
    assert!(!s.all_empty());
    s.set_empty(8, 4, true); // another SKU: ignored
    assert!(!s.all_empty());
    s.set(4, true);
    assert!(s.all_empty());
    assert_eq!(s.empty_shards(), vec![3, 4]);
    s.rebuild(&[(3, Some(0)), (4, Some(2))]);
    assert_eq!(s.empty_shards(), vec![3]);
    s.rebuild(&[(3, None)]);
    assert!(!s.is_empty(7, 3), "a missing slice is not read as empty");
    s.set(9, true); // not a shard of the SKU, above its shards' ids
    s.set(0, true); // nor below them
    assert!(!s.all_empty());
    assert!(!s.is_empty(7, 9) && !s.is_empty(7, 0));
}

/// A view over a real cache whose entry, while one walk is under way, goes through
/// what a rush can do to it when the walk reaches `shard`: a concurrent claim of the
/// same state saw the shard's last unit go (a mark), the entry expired (the TTL), and a
/// release refilled the shard and published `restock`, which found no entry.
struct EntryExpiresMidWalk<'a> {
    view: ClaimView<'a>,
    cache: &'a SoldOutCache,
    state: &'a SkuState,
    shard: ShardId,
    ttl: Duration,
    asked: std::sync::Mutex<u32>,
}

impl EntryExpiresMidWalk<'_> {
    fn ask(&self, sku: u64, shard: ShardId) {
        if shard == self.shard {
            let mut asked = self.asked.lock().unwrap();
            *asked += 1;
            // The first ask plans the walk, the second is the walk reaching the shard.
            if *asked == 2 {
                self.state.set_empty(sku, shard, true);
                std::thread::sleep(self.ttl * 3);
                assert!(self.cache.peek(sku).is_none(), "the entry expired");
                self.cache.apply(sku, shard, false);
            }
        }
    }
}

impl EmptyShards for EntryExpiresMidWalk<'_> {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.ask(sku, shard);
        self.view.is_empty(sku, shard)
    }

    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool) {
        self.view.set_empty(sku, shard, empty);
    }

    fn still_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.ask(sku, shard);
        self.view.still_empty(sku, shard)
    }
}

/// A walk can outlive its SKU's cache entry (each take is a round trip, slow in a rush,
/// docs/BENCHMARKS.md "Where the rush time goes"; a slow shard up to the Redis timeout
/// per take), and from
/// then on the state it started with gets no event: a shard marked empty in it stays
/// marked through the `restock` that refilled it. The walk must not skip that shard,
/// or the claim is answered sold out with the refilled units on the shard it skipped.
#[tokio::test]
async fn a_walk_past_its_entry_skips_no_shard_on_a_mark_events_no_longer_reach() {
    use shard_router::test_util::{claim_once, preheat_open, req, stock_client, users_with_home};
    use shard_router::{ClaimOutcome, RedisTarget};

    let redis = test_support::RedisServer::start();
    let client = stock_client(RedisTarget::Single(redis.url()), 16).await;
    // 6 units over 3 shards, 2 each.
    let meta = preheat_open(&client, 4101, 6, 3, 1).await;
    let walker = "walker";
    let placement = client.placement();
    let home = placement.home_shard(meta.sku, meta.width, walker);
    let order = placement.second_chances(meta.sku, meta.width, walker, |_| false);
    let (refilled, drained) = (order[0], order[1]);
    // The walker's home and one other shard sold out before the gateway loads the SKU,
    // so the walk is planned over the refilled shard alone.
    for shard in [home, drained] {
        for u in users_with_home(&client, &meta, shard, &format!("u{shard}-"), 2) {
            let out = claim_once(&client, &meta, &req(meta.sku, &u, None)).await;
            assert!(matches!(out, ClaimOutcome::Claimed { .. }), "{out:?}");
        }
    }

    let ttl = Duration::from_millis(200);
    let cache = SoldOutCache::new(16, ttl, ttl);
    let state = cache.get(&client, meta.sku).await.unwrap().expect("loaded");
    assert_eq!(state.empty_shards().len(), 2, "home and one other empty");
    let view = EntryExpiresMidWalk {
        view: cache.claim_view(&state),
        cache: &cache,
        state: &state,
        shard: refilled,
        ttl,
        asked: Default::default(),
    };
    let out = shard_router::protocol::claim(
        &client,
        &meta,
        &req(meta.sku, walker, Some("w1")),
        ClaimOptions::new(&view, shard_router::now_ms()),
    )
    .await
    .expect("claim")
    .outcome;
    let left = client.slices(meta.sku, meta.width).await.expect("slices");
    let ClaimOutcome::Claimed { claim, rerouted } = out else {
        panic!("answered {out:?} with the slices at {left:?}")
    };
    assert!(rerouted);
    assert_eq!(claim.shard, refilled);
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, walker)
            .await
            .expect("count"),
        1,
        "the hold settled into the claim"
    );
}
