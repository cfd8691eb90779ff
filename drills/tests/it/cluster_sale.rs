//! What the cluster drills share: the consumer service's configuration on a cluster, a real
//! gateway in this process, and one claim sent to it over HTTP. The drills judge what a
//! client is told (201, 200 with which claim id, 503, 404), so they go through the gateway.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use drills::load::Answers;
use drills::verdict::{self, Figures};
use gateway::Listeners;
use shard_router::{Claim, ClaimRecord, RedisTarget, ShardId, SkuMeta};
use sqlx::MySqlPool;
use test_support::RedisCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Bound on one HTTP exchange: above the gateway's worst case for a claim.
const HTTP_TIMEOUT: Duration = Duration::from_secs(15);

/// The drills' consumer configuration (`redis_loss::config`) on `cluster`.
pub(crate) fn consumer_config(cluster: &RedisCluster, db: &str) -> campaign_ops::Config {
    let mut cfg = super::redis_loss::config(&cluster.urls()[0], db);
    cfg.datapath.redis = RedisTarget::Cluster(cluster.urls());
    cfg
}

/// A gateway running in this process; aborted on drop.
pub(crate) struct Gateway {
    pub(crate) addr: SocketAddr,
    _stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a gateway on `cluster` (`shards` as the consumer's, the SKU cache kept
/// `cache_ttl_ms`) and waits until it is ready.
pub(crate) async fn gateway(cluster: &RedisCluster, shards: u16, cache_ttl_ms: u64) -> Gateway {
    let mut cfg = gateway::Config::for_redis(&cluster.urls().join(","), true);
    cfg.redis.shards = shards;
    cfg.probe_interval_ms = 100;
    cfg.user_rate = 0;
    cfg.access.client_rate = 0;
    // The user from the body: these drills are about the claim path, not identity.
    cfg.access.insecure_body_user = true;
    cfg.cache_ttl_ms = cache_ttl_ms;
    let api = TcpListener::bind("127.0.0.1:0").await.expect("bind api");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
    let addr = api.local_addr().expect("api address");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        gateway::run(cfg, Listeners { api, admin }, async {
            let _ = rx.await;
        })
        .await
        .expect("valid gateway config");
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !matches!(http(addr, "GET", "/readyz", None).await, Some((200, _))) {
        assert!(Instant::now() < deadline, "the gateway never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Gateway {
        addr,
        _stop: tx,
        task,
    }
}

/// One claim's answer as a client sees it.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// `None`: no answer (connection refused or cut, or the bound passed).
    pub(crate) status: Option<u16>,
    /// The body's `status` field (`restoring`, `unknown_sku`, ...).
    pub(crate) kind: String,
    pub(crate) claim_id: Option<String>,
}

/// `POST /v1/claims` of one unit of `sku` for `user` with request id `rid`.
pub(crate) async fn claim(addr: SocketAddr, sku: u64, user: &str, rid: &str) -> Answer {
    let body = format!(r#"{{"sku":{sku},"user":"{user}","qty":1,"request_id":"{rid}"}}"#);
    let answer = http(addr, "POST", "/v1/claims", Some(&body)).await;
    let (status, v) = match answer {
        Some((s, v)) => (Some(s), v),
        None => (None, serde_json::Value::Null),
    };
    Answer {
        status,
        kind: v["status"].as_str().unwrap_or_default().to_owned(),
        claim_id: v["claim_id"].as_str().map(str::to_owned),
    }
}

/// One HTTP/1.1 exchange on its own connection: the status and the JSON body (`Null` when
/// the body is not JSON). `None` when no answer came within [`HTTP_TIMEOUT`].
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Option<(u16, serde_json::Value)> {
    let exchange = async {
        let mut conn = TcpStream::connect(addr).await.ok()?;
        let body = body.unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.ok()?;
        conn.write_all(body.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw);
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let json = text
            .split_once("\r\n\r\n")
            .and_then(|(_, b)| serde_json::from_str(b).ok())
            .unwrap_or_default();
        Some((status, json))
    };
    tokio::time::timeout(HTTP_TIMEOUT, exchange).await.ok()?
}

/// One unit of `sku` taken on `shard`, as its client was told.
pub(crate) fn unit(claim_id: String, sku: u64, shard: ShardId) -> Claim {
    Claim {
        claim_id,
        sku,
        shard,
        qty: 1,
    }
}

/// What clients were told (`acknowledged`) against the ledger's active rows of `meta`'s SKU.
pub(crate) async fn ledger_figures(
    pool: &MySqlPool,
    drill: &str,
    meta: &SkuMeta,
    acknowledged: Vec<(String, Claim)>,
) -> Figures {
    let rows = super::redis_loss::ledger(pool, meta.sku).await;
    let records: Vec<ClaimRecord> = rows
        .into_values()
        .filter(|(_, s)| s == "pending" || s == "confirmed")
        .map(|(r, _)| r)
        .collect();
    let answers = Answers {
        acknowledged,
        ..Answers::default()
    };
    verdict::compare(drill, meta, &answers, &records)
}
