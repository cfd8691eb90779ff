//! Fixtures the workspace's tests share (feature `test-util`, enabled by the crates' dev
//! dependencies only): a stock client, a campaign open now, one claim, the slices' sum,
//! users whose home is a given shard.

use crate::protocol::{self, LocalEmptyShards};
use crate::{now_ms, ClaimOutcome, ClaimRequest, RedisTarget, SkuMeta, StockClient, StockConfig};

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
    protocol::claim(client, meta, r, &LocalEmptyShards::default(), now_ms())
        .await
        .expect("claim")
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
