//! A client that hangs up while its claim is in flight still gets its hold settled: the
//! protocol moves to a task of its own when hyper drops the handler
//! (`gateway/src/api/claim/finish.rs`). Each test empties the user's home shard, so the
//! claim places a hold there, takes on another shard and settles the hold; Redis (or the
//! other shard's master) is paused with `CLIENT PAUSE WRITE` so the hang-up lands in the
//! middle. Dropping the unfinished protocol instead of handing it on fails all three.

use std::time::Duration;

use shard_router::keys::ShardKeys;
use shard_router::placement::slot_of_tag;
use shard_router::{now_ms, ClaimRequest, SkuMeta, StockClient};
use test_support::{RedisCluster, RedisServer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::*;

/// Shorter than the gateway's Redis timeout (500 ms), so the paused step is answered,
/// not given up as ambiguous (that hold is the consumer's to resolve, by design).
const PAUSE_MS: u64 = 400;
/// Pause, then the rest of the protocol: well past both.
const SETTLED: Duration = Duration::from_millis(1500);

fn users_homed_on(stock: &StockClient, meta: &SkuMeta, home: u16, prefix: &str) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|u| stock.placement().home_shard(meta.sku, meta.width, u) == home)
        .take(8)
        .collect()
}

/// Claims with other users until the home slice is empty.
async fn empty_home(stock: &StockClient, meta: &SkuMeta, home: u16) {
    for user in users_homed_on(stock, meta, home, "drain") {
        let left = stock.slices(meta.sku, meta.width).await.unwrap();
        if left.iter().any(|(s, v)| *s == home && *v == Some(0)) {
            return;
        }
        let req = ClaimRequest {
            sku: meta.sku,
            user,
            qty: 1,
            request_id: None,
        };
        stock.claim_home(&req, home, now_ms(), false).await.unwrap();
    }
    panic!("the home slice of shard {home} did not empty");
}

fn pause_writes(c: &mut redis::Connection) {
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(PAUSE_MS)
        .arg("WRITE")
        .query::<()>(c)
        .unwrap();
}

/// The hold's shard after the protocol ended: no hold, the user counted once.
fn hold_settled(c: &mut redis::Connection, keys: &ShardKeys, user: &str) {
    let holds: i64 = redis::cmd("HLEN").arg(keys.holds()).query(c).unwrap();
    let held: Option<i64> = redis::cmd("HGET")
        .arg(keys.users())
        .arg(user)
        .query(c)
        .unwrap();
    assert_eq!(holds, 0, "a hold was left standing");
    assert_eq!(held, Some(1), "the user's count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_hold_leaves_no_hold() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 9_301, 4, 2, 1).await;
    let home = stock.placement().shards_of(meta.sku, meta.width)[0];
    empty_home(&stock, &meta, home).await;
    let before = slices_left(&stock, &meta).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let user = users_homed_on(&stock, &meta, home, "gone").remove(0);

    pause_writes(&mut redis.connection());
    let mut s = TcpStream::connect(gw.api).await.unwrap();
    s.write_all(&raw::claim_request(meta.sku, &user))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(s); // while claim.lua waits in Redis
    tokio::time::sleep(SETTLED).await;

    let keys = ShardKeys::new(stock.placement(), home, meta.sku);
    hold_settled(&mut redis.connection(), &keys, &user);
    assert_eq!(slices_left(&stock, &meta).await, before - 1, "the take");
    gw.stop().await;
}

/// The hang-up while the reroute's take waits: the home shard's master answers HOLD at
/// once, the other shard's master (a different one) is paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_take_leaves_no_hold() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = cluster.urls().join(",");
    let stock = stock_client(&seeds, true).await;
    let master = |shard: u16| cluster.master_of(slot_of_tag(stock.placement().tag(shard)));
    let sku = (9_400u64..10_400)
        .find(|&sku| {
            let s = stock.placement().shards_of(sku, 2);
            master(s[0]) != master(s[1])
        })
        .unwrap();
    let meta = preheat(&stock, sku, 4, 2, 1).await;
    let shards = stock.placement().shards_of(meta.sku, meta.width);
    let (home, other) = (shards[0], shards[1]);
    empty_home(&stock, &meta, home).await;
    let before = slices_left(&stock, &meta).await;
    let gw = Gateway::start(config(&seeds, true)).await;
    let user = users_homed_on(&stock, &meta, home, "gone").remove(0);
    let node = |shard: u16| &cluster.nodes()[cluster.node_index(master(shard))];

    pause_writes(&mut node(other).connection());
    let mut s = TcpStream::connect(gw.api).await.unwrap();
    s.write_all(&raw::claim_request(meta.sku, &user))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let keys = ShardKeys::new(stock.placement(), home, meta.sku);
    let mut c = node(home).connection();
    let standing: i64 = redis::cmd("HLEN").arg(keys.holds()).query(&mut c).unwrap();
    assert_eq!(standing, 1, "the hold stands when the client hangs up");
    drop(s);
    tokio::time::sleep(SETTLED).await;

    hold_settled(&mut c, &keys, &user);
    assert_eq!(slices_left(&stock, &meta).await, before - 1, "the take");
    gw.stop().await;
}

/// Shutdown: the grace period (50 ms) ends while the claim waits in Redis, so the
/// connection task is aborted; the rest of the protocol still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_cut_off_by_the_end_of_the_grace_period_leaves_no_hold() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 9_302, 4, 2, 1).await;
    let home = stock.placement().shards_of(meta.sku, meta.width)[0];
    empty_home(&stock, &meta, home).await;
    let before = slices_left(&stock, &meta).await;
    let mut cfg = config(&redis.url(), false);
    cfg.shutdown_grace_ms = 50;
    cfg.drain_delay_ms = 0;
    let gw = Gateway::start(cfg).await;
    let user = users_homed_on(&stock, &meta, home, "gone").remove(0);

    pause_writes(&mut redis.connection());
    let mut s = TcpStream::connect(gw.api).await.unwrap();
    s.write_all(&raw::claim_request(meta.sku, &user))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    gw.stop().await;
    tokio::time::sleep(SETTLED).await;
    drop(s);

    let keys = ShardKeys::new(stock.placement(), home, meta.sku);
    hold_settled(&mut redis.connection(), &keys, &user);
    assert_eq!(slices_left(&stock, &meta).await, before - 1, "the take");
}
