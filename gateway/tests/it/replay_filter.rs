//! The replay filter (`gateway/src/replay_filter.rs`, docs/DESIGN.md "Replay after
//! sell-out"): once a SKU is sold out on every shard, a request id of a user that never won
//! it is answered 410 from memory, no Redis call; a user that won still gets the first
//! answer, on any gateway, after a reroute, after a restock and sell-out again, and after
//! Redis lost everything and was rebuilt from the ledger; on a single Redis and a cluster.

use std::time::{Duration, Instant};

use crate::common::ledger::*;
use crate::common::*;
use campaign_ops::campaign::{self, Campaign};
use hyper::StatusCode;
use serde_json::{json, Value};
use shard_router::{keys, now_ms, SkuMeta, StockClient};
use test_support::{RedisCluster, RedisServer};

/// The claim answer fields a replay must repeat.
fn claim_fields(v: &Value) -> Value {
    json!([v["status"], v["claim_id"], v["sku"], v["shard"], v["qty"]])
}

/// Every command a claim, a replay read or a filter read could issue, summed over the
/// Redis servers at `urls`.
fn calls(urls: &[String]) -> u64 {
    const COMMANDS: [&str; 9] = [
        "evalsha", "eval", "hmget", "get", "mget", "fcall", "hlen", "hget", "hscan",
    ];
    urls.iter()
        .map(|url| {
            let mut c = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection())
                .expect("redis");
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut c)
                .unwrap();
            info.lines()
                .filter_map(|l| {
                    let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                    COMMANDS.contains(&name).then_some(())?;
                    rest.strip_prefix("calls=")?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum::<u64>()
        })
        .sum()
}

/// Sends request ids of users that never claimed until one is answered 410 without a Redis
/// call: the gateway's filter is read. Every answer on the way must be 410.
async fn wait_filter(gw: &Gateway, redis: &[String], sku: u64, tag: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for n in 0.. {
        let before = calls(redis);
        let user = format!("probe-{tag}-{n}");
        let a = gw
            .claim(json!({"sku": sku, "user": user, "request_id": "p"}))
            .await;
        assert_eq!(a.status, StatusCode::GONE, "{}", a.body);
        if calls(redis) == before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{tag}: the filter was never read"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 20 new request ids of users that never claimed: all 410, no Redis call. A batch takes a
/// few ms; the filter's own check (every `REVALIDATE_EVERY`, 500 ms) may fall into one, so
/// one of three batches must cost nothing.
async fn new_ids_cost_nothing(gw: &Gateway, redis: &[String], sku: u64, tag: &str) {
    let mut cost = Vec::new();
    for batch in 0..3 {
        let before = calls(redis);
        for i in 0..20 {
            let a = gw
                .claim(json!({"sku": sku, "user": format!("new-{tag}-{batch}-{i}"), "request_id": "n"}))
                .await;
            assert_eq!(a.status, StatusCode::GONE, "{tag}: {}", a.body);
        }
        cost.push(calls(redis) - before);
        if cost.last() == Some(&0) {
            return;
        }
    }
    panic!("{tag}: new request ids reached Redis: {cost:?} calls per batch of 20");
}

/// `user` claims a unit of `sku` on `gw` under `rid`, and wins it: returns the answer.
async fn wins(gw: &Gateway, sku: u64, user: &str, rid: &str) -> Answer {
    let a = gw
        .claim(json!({"sku": sku, "user": user, "request_id": rid}))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    a
}

/// Publishes the `restock` event a release or a wave publishes for `meta`'s first shard.
fn publish_restock(redis: &RedisServer, stock: &StockClient, meta: &SkuMeta) {
    let shard = stock.placement().shards_of(meta.sku, meta.width)[0];
    redis::cmd("PUBLISH")
        .arg(keys::EVENTS_CHANNEL)
        .arg(format!("restock {} {shard}", meta.sku))
        .query::<i64>(&mut redis.connection())
        .unwrap();
}

/// Runs `round` (given its number) every 50 ms for 1.5 s, well past a filter read.
async fn for_a_while(mut round: impl AsyncFnMut(u32)) {
    let until = Instant::now() + Duration::from_millis(1500);
    let mut n = 0;
    while Instant::now() < until {
        round(n).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A retry of `first` (user, request id) on `gw`: 200 with the first answer.
async fn replays(gw: &Gateway, sku: u64, user: &str, rid: &str, first: &Value, what: &str) {
    let a = gw
        .claim(json!({"sku": sku, "user": user, "request_id": rid}))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{what}: {}", a.body);
    assert_eq!(claim_fields(&a.body), claim_fields(first), "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_request_ids_after_sell_out_cost_no_redis_call_and_winners_still_replay() {
    let redis = RedisServer::start();
    sell_out_then_filter(&redis.url(), false, &[redis.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_too() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = cluster.urls().join(",");
    sell_out_then_filter(&seeds, true, &cluster.urls()).await;
    rerouted_then_filter(&seeds, true, &cluster.urls()).await;
}

async fn sell_out_then_filter(url: &str, cluster: bool, at: &[String]) {
    let stock = stock_client(url, cluster).await;
    let meta = preheat(&stock, 8301, 1, 1, 1).await;
    let gw = Gateway::start(config(url, cluster)).await;
    let first = wins(&gw, meta.sku, "alice", "r1").await;
    wait_sold_out(gw.api, meta.sku, true, "the sell-out event").await;

    // A second gateway that never saw the answer.
    let other = Gateway::start(config(url, cluster)).await;
    wait_sold_out(other.api, meta.sku, true, "the second gateway's load").await;
    for (g, tag) in [(&gw, "first"), (&other, "second")] {
        wait_filter(g, at, meta.sku, tag).await;
        new_ids_cost_nothing(g, at, meta.sku, tag).await;
        replays(g, meta.sku, "alice", "r1", &first.body, tag).await;
        // The winner's other request ids still read Redis, and are sold out.
        let a = g
            .claim(json!({"sku": meta.sku, "user": "alice", "request_id": "r2"}))
            .await;
        assert_eq!(a.status, StatusCode::GONE, "{tag}: {}", a.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerouted_success_replays_on_a_gateway_that_read_the_filter_after_sell_out() {
    let redis = RedisServer::start();
    rerouted_then_filter(&redis.url(), false, &[redis.url()]).await;
}

async fn rerouted_then_filter(url: &str, cluster: bool, at: &[String]) {
    let stock = stock_client(url, cluster).await;
    let meta = preheat(&stock, 8302, 2, 2, 1).await;
    let shards = stock.placement().shards_of(meta.sku, meta.width);
    let homed = |prefix: &str| {
        (0..)
            .map(|n| format!("{prefix}{n}"))
            .find(|u| stock.placement().home_shard(meta.sku, meta.width, u) == shards[0])
            .unwrap()
    };
    let gw = Gateway::start(config(url, cluster)).await;
    // Empty the home shard with a claim that stores no answer.
    let drain = gw
        .claim(json!({"sku": meta.sku, "user": homed("drain")}))
        .await;
    assert_eq!(drain.status, StatusCode::CREATED, "{}", drain.body);
    // Hold on the empty home, take on the other shard, answer stored on the home.
    let user = homed("u");
    let first = wins(&gw, meta.sku, &user, "r1").await;
    assert_eq!(
        first.body["shard"],
        json!(shards[1]),
        "rerouted: {}",
        first.body
    );
    wait_sold_out(gw.api, meta.sku, true, "the sell-out").await;

    let other = Gateway::start(config(url, cluster)).await;
    wait_sold_out(other.api, meta.sku, true, "the second gateway's load").await;
    wait_filter(&other, at, meta.sku, "second").await;
    new_ids_cost_nothing(&other, at, meta.sku, "second").await;
    replays(
        &other,
        meta.sku,
        &user,
        "r1",
        &first.body,
        "rerouted, second gateway",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restock_drops_the_filter() {
    let redis = RedisServer::start();
    let at = [redis.url()];
    let stock = stock_client(&redis.url(), false).await;
    let meta: SkuMeta = preheat(&stock, 8303, 1, 1, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let other = Gateway::start(config(&redis.url(), false)).await;
    let first = wins(&gw, meta.sku, "alice", "r1").await;
    for g in [&gw, &other] {
        wait_sold_out(g.api, meta.sku, true, "the sell-out").await;
    }
    wait_filter(&other, &at, meta.sku, "before the restock").await;

    // A unit comes back (as a release or a wave does: slice up, `restock` published).
    restock_silently(&redis, &stock, &meta);
    publish_restock(&redis, &stock, &meta);
    for g in [&gw, &other] {
        wait_sold_out(g.api, meta.sku, false, "the restock").await;
    }
    // Carol wins it on the first gateway; the SKU is sold out again.
    let carol = wins(&gw, meta.sku, "carol", "r3").await;
    wait_sold_out(other.api, meta.sku, true, "the second sell-out").await;
    // The second gateway read its filter before carol won: it must not answer from it.
    replays(
        &other,
        meta.sku,
        "carol",
        "r3",
        &carol.body,
        "after the restock",
    )
    .await;
    wait_filter(&other, &at, meta.sku, "after the restock").await;
    replays(&other, meta.sku, "carol", "r3", &carol.body, "read again").await;
    replays(&other, meta.sku, "alice", "r1", &first.body, "read again").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_replays_after_redis_lost_everything_and_a_rebuild() {
    let redis = RedisServer::start();
    let at = [redis.url()];
    let l = ledger(&redis).await;
    let now = now_ms();
    let c = Campaign {
        sku: 8304,
        name: "replay-filter-rebuild".into(),
        stock: 1,
        width: 1,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 600_000,
        payment_timeout_s: 600,
    };
    l.open(&c).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let first = wins(&gw, c.sku, "alice", "r1").await;
    ingest_and_confirm(&l, c.sku, 1).await;
    wait_sold_out(gw.api, c.sku, true, "the sell-out").await;
    wait_filter(&gw, &at, c.sku, "before the loss").await;

    // Redis loses everything; the campaign is rebuilt from the ledger.
    redis::cmd("FLUSHALL")
        .query::<()>(&mut redis.connection())
        .unwrap();
    campaign::preheat(&l.pool, &l.client, c.sku, T)
        .await
        .unwrap();

    // A gateway whose filter is read after the rebuild, and the one that read it before.
    let fresh = Gateway::start(config(&redis.url(), false)).await;
    wait_sold_out(fresh.api, c.sku, true, "the fresh gateway's load").await;
    for (g, tag) in [(&fresh, "fresh"), (&gw, "running")] {
        wait_filter(g, &at, c.sku, tag).await;
        new_ids_cost_nothing(g, &at, c.sku, tag).await;
        replays(g, c.sku, "alice", "r1", &first.body, tag).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_event_drops_the_filter() {
    let redis = RedisServer::start();
    let at = [redis.url()];
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 8305, 1, 1, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let first = wins(&gw, meta.sku, "alice", "r1").await;
    wait_sold_out(gw.api, meta.sku, true, "the sell-out").await;
    wait_filter(&gw, &at, meta.sku, "before").await;

    // What lua/rebuild_late.lua writes for a late claim on the user's home (its `useq`
    // field and its answer, in one step), and the event it publishes.
    let home = stock.placement().home_shard(meta.sku, meta.width, "dave");
    let k = keys::ShardKeys::new(stock.placement(), home, meta.sku);
    let answer = format!("{home}-1-0|{home}|1");
    let mut c = redis.connection();
    redis::pipe()
        .cmd("HSET")
        .arg(k.user_seq())
        .arg("dave")
        .arg(1)
        .ignore()
        .cmd("SET")
        .arg(k.request("dave", Some("r4")))
        .arg(&answer)
        .ignore()
        .cmd("PUBLISH")
        .arg(keys::EVENTS_CHANNEL)
        .arg(format!("replay {}", meta.sku))
        .ignore()
        .query::<()>(&mut c)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let a = gw
            .claim(json!({"sku": meta.sku, "user": "dave", "request_id": "r4"}))
            .await;
        if a.status == StatusCode::OK {
            assert_eq!(
                a.body["claim_id"],
                json!(format!("{home}-1-0")),
                "{}",
                a.body
            );
            break;
        }
        assert_eq!(a.status, StatusCode::GONE, "{}", a.body);
        assert!(
            Instant::now() < deadline,
            "the late claim's answer never replayed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_filter(&gw, &at, meta.sku, "after").await;
    replays(&gw, meta.sku, "alice", "r1", &first.body, "after").await;
}

/// Close-out removes a shard's keys one at a time, `useq` before the slice
/// (`shard_router::StockClient::remove_campaign_keys`), and keeps the stored answers. A
/// close-out that stopped in between (a crash, a Redis timeout: the next round finishes it)
/// leaves a shard with its slice at 0 and no `useq`. A filter read then must not take the
/// shard for "sold out, nobody won here": the winner's retry still gets its first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_out_stopped_after_useq_went_keeps_the_winners_replay() {
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 8306, 1, 1, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let first = wins(&gw, meta.sku, "alice", "r1").await;
    wait_sold_out(gw.api, meta.sku, true, "the sell-out").await;

    // Close-out's fence, then its removal up to `useq` (meta, users, useq), then nothing.
    stock.stop_sales(meta.sku, meta.width).await.unwrap();
    let shard = stock.placement().shards_of(meta.sku, meta.width)[0];
    let k = keys::ShardKeys::new(stock.placement(), shard, meta.sku);
    for key in [k.meta(), k.users(), k.user_seq()] {
        redis::cmd("DEL")
            .arg(key)
            .query::<i64>(&mut redis.connection())
            .unwrap();
    }

    // A gateway that loads the SKU now: slice 0, so sold out, and any filter read would see
    // an empty `useq`. Alice's retry must get her answer every time, well past a read.
    let fresh = Gateway::start(config(&redis.url(), false)).await;
    wait_sold_out(fresh.api, meta.sku, true, "the fresh gateway's load").await;
    for_a_while(async |n| {
        replays(
            &fresh,
            meta.sku,
            "alice",
            "r1",
            &first.body,
            &format!("close-out stopped midway, retry {n}"),
        )
        .await;
        // New request ids of other users keep the filter's read going.
        let a = fresh
            .claim(json!({"sku": meta.sku, "user": format!("x{n}"), "request_id": "x"}))
            .await;
        assert_eq!(a.status, StatusCode::GONE, "{}", a.body);
    })
    .await;
}

/// Units can come back with no event reaching this gateway: a failover whose promoted
/// replica lacks the last sales (slices higher, nothing published), a `restock` lost on a
/// cluster bus link, a half-open subscriber. The set is then checked against Redis at most
/// `REVALIDATE_EVERY` (`gateway/src/replay_filter.rs`) after it was last confirmed, not only
/// at the cache TTL: a success sold from those units replays here within about a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_back_without_an_event_stop_the_filter_within_a_second() {
    let redis = RedisServer::start();
    let at = [redis.url()];
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 8307, 1, 1, 2).await;
    let mut cfg = config(&redis.url(), false);
    // Far beyond the bound checked below: the filter's own check must do it.
    cfg.cache_ttl_ms = 60_000;
    let gw = Gateway::start(cfg).await;
    wins(&gw, meta.sku, "alice", "r1").await;
    wait_sold_out(gw.api, meta.sku, true, "the sell-out").await;
    wait_filter(&gw, &at, meta.sku, "before").await;

    // Two units back on the slice, no event (what a rollback leaves).
    let shard = stock.placement().shards_of(meta.sku, meta.width)[0];
    let k = keys::ShardKeys::new(stock.placement(), shard, meta.sku);
    redis::cmd("SET")
        .arg(k.stock())
        .arg(2)
        .query::<()>(&mut redis.connection())
        .unwrap();
    // Erin wins one through a gateway that loads the SKU now; one unit stays, so no
    // `empty` is published either.
    let other = Gateway::start(config(&redis.url(), false)).await;
    wait_sold_out(other.api, meta.sku, false, "the other gateway's load").await;
    let erin = wins(&other, meta.sku, "erin", "r5").await;
    let won = Instant::now();

    // Her retry on the first gateway, which still believes the SKU sold out.
    let bound = test_support::slack(Duration::from_millis(1500));
    loop {
        let a = gw
            .claim(json!({"sku": meta.sku, "user": "erin", "request_id": "r5"}))
            .await;
        if a.status == StatusCode::OK {
            assert_eq!(claim_fields(&a.body), claim_fields(&erin.body));
            break;
        }
        assert_eq!(a.status, StatusCode::GONE, "{}", a.body);
        assert!(
            won.elapsed() < bound,
            "erin's success still answered 410 after {:?}",
            won.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Memory: the sets of every SKU together hold at most `--replay-filter-total-users`. A
/// SKU whose set does not fit is not read (its request ids keep the replay read, and its
/// winners still replay); once another SKU's set goes, it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sets_of_all_skus_together_stay_within_the_total() {
    let redis = RedisServer::start();
    let at = [redis.url()];
    let stock = stock_client(&redis.url(), false).await;
    let a = preheat(&stock, 8308, 1, 1, 1).await;
    let b = preheat(&stock, 8309, 1, 1, 1).await;
    let mut cfg = config(&redis.url(), false);
    cfg.replay_filter_total_users = 1;
    let gw = Gateway::start(cfg).await;
    let mut won = Vec::new();
    for (meta, user) in [(&a, "alice"), (&b, "bob")] {
        let w = wins(&gw, meta.sku, user, "r1").await;
        wait_sold_out(gw.api, meta.sku, true, "the sell-out").await;
        won.push(w.body);
    }
    wait_filter(&gw, &at, a.sku, "a").await;

    // B's one user does not fit beside A's: its new request ids keep reaching Redis.
    for_a_while(async |n| {
        let before = calls(&at);
        let r = gw
            .claim(json!({"sku": b.sku, "user": format!("nb{n}"), "request_id": "x"}))
            .await;
        assert_eq!(r.status, StatusCode::GONE, "{}", r.body);
        assert!(calls(&at) > before, "b's set was read beyond the total");
    })
    .await;
    replays(&gw, b.sku, "bob", "r1", &won[1], "b, not read").await;

    // A's set goes (a unit back on A); B's is read now.
    publish_restock(&redis, &stock, &a);
    wait_sold_out(gw.api, a.sku, false, "the restock of a").await;
    wait_filter(&gw, &at, b.sku, "b").await;
    replays(&gw, b.sku, "bob", "r1", &won[1], "b, read").await;
}

/// A set goes with its cache entry: a SKU nobody asks about any more (its entry expired)
/// gives its room in `--replay-filter-total-users` back, so another SKU's set is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_entry_gives_its_room_back() {
    let redis = RedisServer::start();
    let at = [redis.url()];
    let stock = stock_client(&redis.url(), false).await;
    let a = preheat(&stock, 8310, 1, 1, 1).await;
    let b = preheat(&stock, 8311, 1, 1, 1).await;
    let mut cfg = config(&redis.url(), false);
    cfg.replay_filter_total_users = 1;
    cfg.cache_ttl_ms = 300;
    let gw = Gateway::start(cfg).await;
    for (meta, user) in [(&a, "alice"), (&b, "bob")] {
        wins(&gw, meta.sku, user, "r1").await;
    }
    wait_sold_out(gw.api, a.sku, true, "a sold out").await;
    wait_filter(&gw, &at, a.sku, "a").await;
    // Nobody asks about A any more; B's set must be read once A's entry is gone.
    wait_sold_out(gw.api, b.sku, true, "b sold out").await;
    wait_filter(&gw, &at, b.sku, "b, after a's entry expired").await;
}
