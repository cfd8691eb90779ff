//! Fixtures the workspace's tests share (feature `test-util`, enabled by the crates' dev
//! dependencies only): a stock client, a campaign open now, one claim, the slices' sum,
//! users whose home is a given shard, and a reroute's setup (a SKU across two masters, a
//! home shard emptied).

use crate::protocol::{self, ClaimOptions, LocalEmptyShards};
use crate::{
    now_ms, ClaimOutcome, ClaimRequest, HomeOutcome, RedisTarget, ShardId, SkuMeta, StockClient,
    StockConfig, StockError,
};

/// Connects with the default settings and loads the scripts.
pub async fn stock_client(target: RedisTarget, shards: u16) -> StockClient {
    let client = StockClient::connect(StockConfig::new(target, shards))
        .await
        .expect("connect the stock client");
    client.load_scripts().await.expect("load the scripts");
    client
}

/// A campaign that opened a minute ago and closes in an hour.
pub fn open_meta(sku: u64, stock: u64, width: u16, limit: u32) -> SkuMeta {
    let now = now_ms();
    SkuMeta {
        sku,
        stock,
        width,
        limit,
        start_ms: now - 60_000,
        end_ms: now + 3_600_000,
        mode: crate::SkuMode::Fcfs,
    }
}

/// [`open_meta`], preheated.
pub async fn preheat_open(
    client: &StockClient,
    sku: u64,
    stock: u64,
    width: u16,
    limit: u32,
) -> SkuMeta {
    let meta = open_meta(sku, stock, width, limit);
    client.preheat(&meta).await.expect("preheat");
    meta
}

/// A claim of one unit.
pub fn req(sku: u64, user: &str, request_id: Option<&str>) -> ClaimRequest {
    ClaimRequest {
        sku,
        user: user.to_owned(),
        qty: 1,
        request_id: request_id.map(str::to_owned),
    }
}

/// Runs one claim with a fresh (empty) view of empty shards.
pub async fn claim_once(client: &StockClient, meta: &SkuMeta, r: &ClaimRequest) -> ClaimOutcome {
    let empties = LocalEmptyShards::default();
    protocol::claim(client, meta, r, ClaimOptions::new(&empties, now_ms()))
        .await
        .expect("claim")
        .outcome
}

/// `user`'s one-unit claim (no request id) on its home shard `home`, no hold: the outcome,
/// or the error.
pub async fn claim_at_home(
    client: &StockClient,
    sku: u64,
    user: &str,
    home: ShardId,
) -> Result<HomeOutcome, StockError> {
    client
        .claim_home(&req(sku, user, None), home, now_ms(), false)
        .await
        .map(|a| a.outcome)
}

/// Sum of every slice of a SKU; panics when one is missing.
pub async fn slices_total(client: &StockClient, meta: &SkuMeta) -> i64 {
    client
        .slices(meta.sku, meta.width)
        .await
        .expect("slices")
        .into_iter()
        .map(|(s, v)| v.unwrap_or_else(|| panic!("slice of shard {s} missing")))
        .sum()
}

/// Users whose home shard for `meta` is `home`, named `<prefix><n>`.
pub fn users_with_home(
    client: &StockClient,
    meta: &SkuMeta,
    home: crate::ShardId,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    (0..)
        .map(|n| format!("{prefix}{n}"))
        .filter(|u| client.placement().home_shard(meta.sku, meta.width, u) == home)
        .take(count)
        .collect()
}

/// A SKU of width 2, from `from` on, whose two shards live on different masters of a
/// cluster (`master_of` maps a slot to its master), so a reroute crosses masters.
pub fn split_sku<M: PartialEq>(
    client: &StockClient,
    from: u64,
    master_of: impl Fn(u16) -> M,
) -> u64 {
    (from..from + 1000)
        .find(|&sku| {
            let s = client.placement().shards_of(sku, 2);
            let slot = |i: usize| crate::placement::slot_of_tag(client.placement().tag(s[i]));
            master_of(slot(0)) != master_of(slot(1))
        })
        .expect("some SKU spans two masters")
}

/// Empties `home`'s slice with claims of other users homed there (`drain<n>`), so the
/// next claim homed there holds and takes elsewhere.
pub async fn drain(client: &StockClient, meta: &SkuMeta, home: crate::ShardId) {
    for user in (0..).map(|n| format!("drain{n}")) {
        let left = client.slices(meta.sku, meta.width).await.expect("slices");
        if left.iter().any(|(s, v)| *s == home && *v == Some(0)) {
            return;
        }
        if client.placement().home_shard(meta.sku, meta.width, &user) != home {
            continue;
        }
        client
            .claim_home(&req(meta.sku, &user, None), home, now_ms(), false)
            .await
            .expect("drain claim");
    }
}

/// What the consumer's watch does once it rebuilt a shard from the ledger: vouches for the
/// process serving `shard` now (`lua/guard.lua`). For tests without a ledger whose premise
/// is that the new process holds everything acknowledged (a replica that confirmed every
/// write, promoted); anything else must go through the rebuild. Retries for up to 10 s
/// while a cluster's routing catches up with a failover.
pub async fn vouch_current(client: &StockClient, shard: crate::ShardId) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let done = match client.server_identity(shard).await {
            Ok(id) => client.vouch(shard, &id.run_id).await.unwrap_or(false),
            Err(_) => false,
        };
        if done {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "could not vouch for shard {shard}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// What a loss and the rebuild after it leave of `user` on `home` when the ledger does not
/// hold what was lost either (a restart from an older snapshot): the user's count,
/// sequence and holds and the answer of `request_id` gone, and the next rebuild generation
/// on every shard of the SKU. So the user's sequence starts again.
pub fn lose_user(
    conn: &mut redis::Connection,
    client: &StockClient,
    meta: &SkuMeta,
    home: crate::ShardId,
    user: &str,
    request_id: &str,
) {
    use crate::keys::ShardKeys;
    let k = ShardKeys::new(client.placement(), home, meta.sku);
    let mut lost = redis::pipe();
    lost.cmd("HDEL").arg(k.users()).arg(user);
    lost.cmd("HDEL").arg(k.user_seq()).arg(user);
    lost.cmd("DEL").arg(k.holds());
    lost.cmd("DEL").arg(k.request(user, Some(request_id)));
    for s in client.placement().shards_of(meta.sku, meta.width) {
        let m = ShardKeys::new(client.placement(), s, meta.sku).meta();
        lost.cmd("HINCRBY").arg(m).arg("gen").arg(1);
    }
    let _: () = lost.query(conn).expect("lose the user's keys");
}
