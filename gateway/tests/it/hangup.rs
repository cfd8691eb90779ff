//! A client that hangs up while its claim is in flight still gets its hold settled: the
//! protocol moves to a task of its own when hyper drops the handler
//! (`gateway/src/api/claim/finish.rs`). Each test empties the user's home shard, so the
//! claim places a hold there, takes on another shard and settles the hold; Redis (or the
//! other shard's master) is paused with `CLIENT PAUSE WRITE` so the hang-up lands in the
//! middle. Dropping the unfinished protocol instead of handing it on fails all three.

use std::net::SocketAddr;
use std::time::Duration;

use shard_router::keys::ShardKeys;
use shard_router::placement::slot_of_tag;
use shard_router::{SkuMeta, StockClient};
use test_support::{RedisCluster, RedisServer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::*;
use shard_router::test_util::{drain, split_sku, users_with_home};

/// Shorter than the gateway's Redis timeout (500 ms), so the paused step is answered,
/// not given up as ambiguous (that hold is the consumer's to resolve, by design).
const PAUSE_MS: u64 = 400;
/// Pause, then the rest of the protocol: well past both.
const SETTLED: Duration = Duration::from_millis(1500);

/// A SKU of width 2 whose first shard, the user's home, is empty.
struct Sale {
    stock: StockClient,
    meta: SkuMeta,
    home: u16,
    other: u16,
    /// Units left on all slices before the user's claim.
    before: i64,
    user: String,
}

impl Sale {
    async fn open(stock: StockClient, sku: u64) -> Self {
        let meta = preheat(&stock, sku, 4, 2, 1).await;
        let shards = stock.placement().shards_of(meta.sku, meta.width);
        let (home, other) = (shards[0], shards[1]);
        drain(&stock, &meta, home).await;
        let before = slices_left(&stock, &meta).await;
        let user = users_with_home(&stock, &meta, home, "gone", 1).remove(0);
        Self {
            stock,
            meta,
            home,
            other,
            before,
            user,
        }
    }

    fn home_keys(&self) -> ShardKeys {
        ShardKeys::new(self.stock.placement(), self.home, self.meta.sku)
    }

    /// Sends the user's claim and waits until it is in flight; the caller hangs up by
    /// dropping the connection.
    async fn claim_in_flight(&self, api: SocketAddr) -> TcpStream {
        let mut s = TcpStream::connect(api).await.unwrap();
        s.write_all(&raw::claim_request(self.meta.sku, &self.user))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        s
    }

    /// After the protocol ended: no hold on the home shard (reached by `home`), the user
    /// counted once, one unit taken.
    async fn assert_settled(&self, home: &mut redis::Connection) {
        let keys = self.home_keys();
        let holds: i64 = redis::cmd("HLEN").arg(keys.holds()).query(home).unwrap();
        let held: Option<i64> = redis::cmd("HGET")
            .arg(keys.users())
            .arg(&self.user)
            .query(home)
            .unwrap();
        assert_eq!(holds, 0, "a hold was left standing");
        assert_eq!(held, Some(1), "the user's count");
        let after = slices_left(&self.stock, &self.meta).await;
        assert_eq!(after, self.before - 1, "the take");
    }
}

fn pause_writes(c: &mut redis::Connection) {
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(PAUSE_MS)
        .arg("WRITE")
        .query::<()>(c)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_hold_leaves_no_hold() {
    let redis = RedisServer::start();
    let sale = Sale::open(stock_client(&redis.url(), false).await, 9_301).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;

    pause_writes(&mut redis.connection());
    drop(sale.claim_in_flight(gw.api).await); // while claim.lua waits in Redis
    tokio::time::sleep(SETTLED).await;

    sale.assert_settled(&mut redis.connection()).await;
    gw.stop().await;
}

/// The hang-up while the reroute's take waits: the home shard's master answers HOLD at
/// once, the other shard's master (a different one) is paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_take_leaves_no_hold() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = cluster.urls().join(",");
    let stock = stock_client(&seeds, true).await;
    let sku = split_sku(&stock, 9_400, |slot| cluster.master_of(slot));
    let sale = Sale::open(stock, sku).await;
    let gw = Gateway::start(config(&seeds, true)).await;
    let node = |shard: u16| {
        let port = cluster.master_of(slot_of_tag(sale.stock.placement().tag(shard)));
        &cluster.nodes()[cluster.node_index(port)]
    };

    pause_writes(&mut node(sale.other).connection());
    let s = sale.claim_in_flight(gw.api).await;
    let mut home = node(sale.home).connection();
    let standing: i64 = redis::cmd("HLEN")
        .arg(sale.home_keys().holds())
        .query(&mut home)
        .unwrap();
    assert_eq!(standing, 1, "the hold stands when the client hangs up");
    drop(s);
    tokio::time::sleep(SETTLED).await;

    sale.assert_settled(&mut home).await;
    gw.stop().await;
}

/// Shutdown: the grace period (50 ms) ends while the claim waits in Redis, so the
/// connection task is aborted; the rest of the protocol still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_cut_off_by_the_end_of_the_grace_period_leaves_no_hold() {
    let redis = RedisServer::start();
    let sale = Sale::open(stock_client(&redis.url(), false).await, 9_302).await;
    let mut cfg = config(&redis.url(), false);
    cfg.shutdown_grace_ms = 50;
    cfg.drain_delay_ms = 0;
    let gw = Gateway::start(cfg).await;

    pause_writes(&mut redis.connection());
    let s = sale.claim_in_flight(gw.api).await;
    gw.stop().await;
    tokio::time::sleep(SETTLED).await;
    drop(s);

    sale.assert_settled(&mut redis.connection()).await;
}
