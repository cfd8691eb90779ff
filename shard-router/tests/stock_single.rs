//! Stock-core scenarios on a private single Redis.

mod common;
mod scenarios;

use common::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency() {
    scenarios::concurrency(Env::single()).await;
}

#[tokio::test]
async fn uneven_drain() {
    scenarios::uneven_drain(Env::single()).await;
}

#[tokio::test]
async fn limit_across_reroutes() {
    scenarios::limit_across_reroutes(Env::single()).await;
}

#[tokio::test]
async fn replay() {
    scenarios::replay(Env::single()).await;
}

#[tokio::test]
async fn release_twice() {
    scenarios::release_twice(Env::single()).await;
}

#[tokio::test]
async fn script_flush() {
    scenarios::script_flush(Env::single()).await;
}

#[tokio::test]
async fn not_preheated() {
    scenarios::not_preheated(Env::single()).await;
}

#[tokio::test]
async fn hold_left_behind() {
    scenarios::hold_left_behind(Env::single()).await;
}

#[tokio::test]
async fn window() {
    scenarios::window(Env::single()).await;
}

/// Without replicas, `WAIT` reports 0 confirmations after its timeout instead of hanging.
#[tokio::test]
async fn wait_replicas_without_replicas() {
    let env = Env::single();
    let client = env.client().await;
    let t = std::time::Instant::now();
    let n = client
        .wait_replicas(0, 1, std::time::Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(n, 0);
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
}

/// The claim script writes the caller's qty string as is (no Lua number formatting), so it
/// must refuse anything but a plain positive integer before touching a key.
#[tokio::test]
async fn claim_script_refuses_a_non_canonical_qty() {
    use shard_router::keys::{claims_stream, ShardKeys};
    let env = Env::single();
    let client = env.client().await;
    let meta = common::open_meta(77, 10, 1, 5);
    client.preheat(&meta).await.expect("preheat");
    let shard = client.placement().shards_of(meta.sku, 1)[0];
    let k = ShardKeys::new(client.placement(), shard, meta.sku);
    let script = redis::Script::new(include_str!("../../lua/claim.lua"));
    let mut conn = env.node_connections().remove(0);
    for qty in ["1.0", "01", " 1", "1e0", "0", "-1", "", "x"] {
        let reply: Vec<i64> = script
            .key(k.stock())
            .key(k.meta())
            .key(k.users())
            .key(k.user_seq())
            .key(k.holds())
            .key(claims_stream(client.placement(), shard))
            .key(k.request("u", None))
            .arg(meta.sku)
            .arg("u")
            .arg(qty)
            .arg(shard_router::now_ms())
            .arg("")
            .arg(shard)
            .arg(0)
            .arg(60)
            .arg("fg:events")
            .invoke(&mut conn)
            .unwrap_or_else(|e| panic!("qty {qty:?}: {e}"));
        assert_eq!(reply, vec![15], "qty {qty:?} must be BAD_ARGUMENT");
    }
    assert_eq!(common::slices_total(&client, &meta).await, 10);
    assert_eq!(client.user_count(meta.sku, 1, "u").await.expect("count"), 0);
    let stream_len: i64 = redis::cmd("XLEN")
        .arg(claims_stream(client.placement(), shard))
        .query(&mut conn)
        .expect("XLEN");
    assert_eq!(stream_len, 0);
}
