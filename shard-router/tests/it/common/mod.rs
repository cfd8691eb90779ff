//! Shared set-up for the stock-core tests: the same scenario runs on a private single
//! Redis and on a private 3-master Redis Cluster.

pub(crate) use shard_router::test_util::{
    claim_at_home, claim_once, open_meta, req, slices_total, users_with_home,
};
use shard_router::{RedisTarget, SkuMeta, StockClient, StockConfig};
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

/// Every record in the SKU's shard streams, decoded.
pub(crate) async fn stream_records(
    client: &StockClient,
    meta: &SkuMeta,
) -> Vec<shard_router::ClaimRecord> {
    let mut out = Vec::new();
    for shard in client.placement().shards_of(meta.sku, meta.width) {
        out.extend(
            client
                .stream_records(shard, meta.sku, 1000)
                .await
                .expect("records"),
        );
    }
    out
}

/// A hold on `home` for `r` and the take of its unit on `other`, unsettled (what a gateway
/// leaves when it dies between the take and the settle): the hold's sequence and the
/// take's claim.
pub(crate) async fn hold_and_take(
    client: &StockClient,
    r: &shard_router::ClaimRequest,
    home: u16,
    other: u16,
    now: i64,
) -> (u64, shard_router::Claim) {
    use shard_router::{HomeOutcome, TakeOutcome};
    let HomeOutcome::Hold { user_seq, gen, .. } = client
        .claim_home(r, home, now, true)
        .await
        .expect("home")
        .outcome
    else {
        panic!("expected a hold")
    };
    let TakeOutcome::Claimed { claim_id, .. } = client
        .take(r, other, home, user_seq, gen, now)
        .await
        .expect("take")
        .outcome
    else {
        panic!("expected a take")
    };
    let claim = shard_router::Claim {
        claim_id,
        sku: r.sku,
        shard: other,
        qty: r.qty,
    };
    (user_seq, claim)
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
