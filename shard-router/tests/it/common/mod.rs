//! Shared set-up for the stock-core tests: the same scenario runs on a private single
//! Redis and on a private 3-master Redis Cluster.

use shard_router::protocol::{self, LocalEmptyShards};
use shard_router::{
    keys, now_ms, ClaimOutcome, ClaimRequest, RedisTarget, SkuMeta, StockClient, StockConfig,
};
use test_support::{RedisCluster, RedisServer};

pub(crate) const SHARDS: u16 = 16;

/// A private Redis deployment owned by one test.
pub(crate) enum Env {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl Env {
    pub(crate) fn single() -> Self {
        Env::Single(RedisServer::start())
    }

    pub(crate) fn cluster() -> Self {
        Env::Cluster(RedisCluster::start(3, 0))
    }

    pub(crate) fn target(&self) -> RedisTarget {
        match self {
            Env::Single(s) => RedisTarget::Single(s.url()),
            Env::Cluster(c) => RedisTarget::Cluster(c.urls()),
        }
    }

    pub(crate) async fn client(&self) -> StockClient {
        StockClient::connect(StockConfig::new(self.target(), SHARDS))
            .await
            .expect("connect")
    }

    /// Blocking connections to every node (every master of a cluster).
    pub(crate) fn node_connections(&self) -> Vec<redis::Connection> {
        match self {
            Env::Single(s) => vec![s.connection()],
            Env::Cluster(c) => c.nodes().iter().map(|n| n.connection()).collect(),
        }
    }

    /// Total keys over all nodes.
    pub(crate) fn key_count(&self) -> i64 {
        self.node_connections()
            .iter_mut()
            .map(|c| redis::cmd("DBSIZE").query::<i64>(c).expect("DBSIZE"))
            .sum()
    }
}

/// A campaign that is open now.
pub(crate) fn open_meta(sku: u64, stock: u64, width: u16, limit: u32) -> SkuMeta {
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

pub(crate) fn req(sku: u64, user: &str, rid: Option<&str>) -> ClaimRequest {
    ClaimRequest {
        sku,
        user: user.to_owned(),
        qty: 1,
        request_id: rid.map(str::to_owned),
    }
}

/// Runs one claim with a fresh (empty) view of empty shards.
pub(crate) async fn claim_once(
    client: &StockClient,
    meta: &SkuMeta,
    r: &ClaimRequest,
) -> ClaimOutcome {
    protocol::claim(client, meta, r, &LocalEmptyShards::default(), now_ms())
        .await
        .expect("claim")
}

/// Sum of every slice of a SKU; panics when one is missing.
pub(crate) async fn slices_total(client: &StockClient, meta: &SkuMeta) -> i64 {
    client
        .slices(meta.sku, meta.width)
        .await
        .expect("slices")
        .into_iter()
        .map(|(s, v)| v.unwrap_or_else(|| panic!("slice of shard {s} missing")))
        .sum()
}

/// Every record in the SKU's shard streams, decoded.
pub(crate) async fn stream_records(
    client: &StockClient,
    meta: &SkuMeta,
) -> Vec<shard_router::ClaimRecord> {
    use redis::AsyncCommands;
    let mut out = Vec::new();
    for shard in client.placement().shards_of(meta.sku, meta.width) {
        let mut conn = client.conn();
        let key = keys::claims_stream(client.placement(), shard);
        let reply: redis::streams::StreamRangeReply = conn.xrange_all(&key).await.expect("XRANGE");
        for entry in reply.ids {
            let fields: Vec<(String, Vec<u8>)> = entry
                .map
                .iter()
                .map(|(k, v)| {
                    let redis::Value::BulkString(b) = v else {
                        panic!("field {k} is not a bulk string")
                    };
                    (k.clone(), b.clone())
                })
                .collect();
            let rec = shard_router::ClaimRecord::decode(
                &entry.id,
                fields.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
            )
            .expect("valid record");
            if rec.sku == meta.sku {
                out.push(rec);
            }
        }
    }
    out
}

/// Users whose home shard for `meta` is `home`, named `<prefix><n>`.
pub(crate) fn users_with_home(
    client: &StockClient,
    meta: &SkuMeta,
    home: u16,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    (0..)
        .map(|n| format!("{prefix}{n}"))
        .filter(|u| client.placement().home_shard(meta.sku, meta.width, u) == home)
        .take(count)
        .collect()
}

/// A shard of the SKU other than `not` (the SKU must be at least 2 wide).
pub(crate) fn other_shard(client: &StockClient, meta: &SkuMeta, not: u16) -> u16 {
    client
        .placement()
        .shards_of(meta.sku, meta.width)
        .into_iter()
        .find(|s| *s != not)
        .expect("a second shard")
}
