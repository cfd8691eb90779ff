//! Shared test scaffolding: a real redis-server and a fresh MariaDB database per test, a
//! consumer service run in-process, campaigns, and claims produced through the Lua scripts.

pub(crate) mod draw;
pub(crate) mod failover;
pub(crate) mod rebuild;

use std::sync::Arc;
use std::time::{Duration, Instant};

use campaign_ops::campaign::{self, Campaign};
use campaign_ops::service;
use campaign_ops::Config;
use futures::StreamExt;
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::{keys, ClaimOutcome, ClaimRequest, RedisTarget, StockClient};
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;
use test_support::{RedisCluster, RedisServer};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) const SHARDS: u16 = 4;
pub(crate) const T: Duration = Duration::from_secs(10);

/// Test-speed settings: short blocks, short leases.
pub(crate) fn config(redis_url: &str, mysql_url: &str) -> Config {
    let mut c = Config::new(RedisTarget::Single(redis_url.to_owned()), SHARDS, mysql_url);
    c.datapath.read_block = Duration::from_millis(200);
    c.datapath.lease = Duration::from_millis(1500);
    c.release_interval = Duration::from_millis(200);
    c.reconcile_interval = Duration::from_secs(3600);
    c.datapath.backoff_max = Duration::from_millis(500);
    c.datapath.db_timeout = Duration::from_secs(3);
    c
}

pub(crate) struct Stack {
    pub(crate) redis: RedisServer,
    pub(crate) db: TestDatabase,
    pub(crate) cfg: Config,
    pub(crate) client: StockClient,
    pub(crate) pool: MySqlPool,
}

impl Stack {
    pub(crate) async fn start() -> Self {
        Self::start_on(RedisServer::start()).await
    }

    /// A stack whose Redis is `redis` (a master with replicas, for failover tests).
    pub(crate) async fn start_on(redis: RedisServer) -> Self {
        let db = TestDatabase::create();
        let cfg = config(&redis.url(), &db.url());
        let (client, pool) = connect(&cfg).await;
        Self {
            redis,
            db,
            cfg,
            client,
            pool,
        }
    }

    /// Reconciles `sku` now (invariant `books-close` (docs/DESIGN.md)) and returns the report.
    pub(crate) async fn reconcile(&self, sku: u64) -> campaign_ops::reconcile::Report {
        campaign_ops::reconcile::run(&self.pool, &self.client, sku, shard_router::now_ms(), T)
            .await
            .expect("reconcile")
    }

    pub(crate) async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

/// A consumer service run in-process; `stop` drains it like SIGTERM.
pub(crate) struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), campaign_ops::OpsError>>,
}

pub(crate) fn start_consumer(cfg: Config) -> Running {
    start_service(cfg, None)
}

/// [`start_consumer`] with its admin listener on `admin`.
pub(crate) fn start_service(cfg: Config, admin: Option<tokio::net::TcpListener>) -> Running {
    let (stop, rx) = plumbing::shutdown::channel();
    let task = tokio::spawn(service::run(cfg, admin, rx));
    Running { stop, task }
}

impl Running {
    /// True once `run` returned (it must not, short of a shutdown).
    pub(crate) fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Ends it at once, as a crash would: nothing drains, nothing deregisters.
    pub(crate) fn kill(self) {
        self.task.abort();
    }

    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("consumer drains within 20 s")
            .expect("consumer task")
            .expect("consumer ends cleanly");
    }
}

/// A campaign open now for an hour, stored and preheated.
pub(crate) async fn campaign(
    s: &Stack,
    sku: u64,
    stock: u64,
    width: u16,
    limit: u32,
    payment_timeout_s: u32,
) -> Campaign {
    open_campaign(
        &s.pool,
        &s.client,
        sku,
        stock,
        width,
        limit,
        payment_timeout_s,
    )
    .await
}

/// Stores a campaign open for the next hour and preheats it.
pub(crate) async fn open_campaign(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    stock: u64,
    width: u16,
    limit: u32,
    payment_timeout_s: u32,
) -> Campaign {
    let now = shard_router::now_ms();
    let c = Campaign {
        sku,
        name: format!("test {sku}"),
        stock,
        width,
        limit,
        start_ms: now - 1000,
        end_ms: now + 3_600_000,
        payment_timeout_s,
    };
    campaign::put(pool, &c, SHARDS, T)
        .await
        .expect("put campaign");
    campaign::preheat(pool, client, sku, T)
        .await
        .expect("preheat");
    c
}

/// The stock client and the migrated ledger pool a stack's `cfg` names.
async fn connect(cfg: &Config) -> (StockClient, MySqlPool) {
    let client = StockClient::connect(cfg.datapath.stock())
        .await
        .expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("mysql");
    ledger::pool::migrate(&pool).await.expect("migrate");
    (client, pool)
}

/// The consumer's world on a private Redis Cluster (`replicas` per master) and a fresh
/// database.
pub(crate) struct ClusterStack {
    pub(crate) cluster: RedisCluster,
    pub(crate) db: TestDatabase,
    pub(crate) cfg: Config,
    pub(crate) client: StockClient,
    pub(crate) pool: MySqlPool,
}

impl ClusterStack {
    pub(crate) async fn start(replicas: usize) -> Self {
        let cluster = RedisCluster::start(3, replicas);
        let db = TestDatabase::create();
        let mut cfg = config("redis://unused", &db.url());
        cfg.datapath.redis = RedisTarget::Cluster(cluster.urls());
        let (client, pool) = connect(&cfg).await;
        Self {
            cluster,
            db,
            cfg,
            client,
            pool,
        }
    }
}

/// Polls until the ledger holds `n` distinct claims of `sku` (at most `limit`).
pub(crate) async fn wait_rows(pool: &MySqlPool, sku: u64, n: i64, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let rows: i64 =
            sqlx::query_scalar("SELECT COUNT(DISTINCT claim_id) FROM claims WHERE sku = ?")
                .bind(sku)
                .fetch_one(pool)
                .await
                .expect("count claims");
        if rows == n {
            return;
        }
        assert!(Instant::now() < deadline, "{rows}/{n} rows after {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Claims of `users` (one unit each) through the Lua scripts, `conc` at a time; returns
/// the claim ids of the successes.
pub(crate) async fn claim_all(
    client: &StockClient,
    c: &Campaign,
    users: Vec<String>,
    conc: usize,
) -> Vec<String> {
    let meta = Arc::new(campaign_ops::sku::meta(c));
    let empties = Arc::new(LocalEmptyShards::default());
    futures::stream::iter(users)
        .map(|user| {
            let client = client.clone();
            let meta = meta.clone();
            let empties = empties.clone();
            async move {
                let req = ClaimRequest {
                    sku: meta.sku,
                    user,
                    qty: 1,
                    request_id: None,
                };
                match protocol::claim(
                    &client,
                    &meta,
                    &req,
                    ClaimOptions::new(empties.as_ref(), shard_router::now_ms()),
                )
                .await
                .map(|a| a.outcome)
                {
                    Ok(ClaimOutcome::Claimed { claim, .. }) => Some(claim.claim_id),
                    Ok(_) => None,
                    Err(e) => panic!("claim failed: {e}"),
                }
            }
        })
        .buffer_unordered(conc)
        .filter_map(|x| async move { x })
        .collect()
        .await
}

/// Total XLEN, and entries past the place the ledger committed (`stream_offsets`), over
/// every shard stream: what is in Redis, and what of it the ledger does not have yet.
pub(crate) async fn stream_depth(s: &Stack) -> (u64, u64) {
    let mut total = (0, 0);
    for shard in 0..SHARDS {
        let st = shard_router::stream::ShardStream::new(&s.client, shard);
        let at = ledger::places::get(&s.pool, &st.key, T)
            .await
            .expect("stream offset")
            .map(|(o, _, _)| o.last_id)
            .unwrap_or_else(|| "0-0".into());
        let id = |e: &str| {
            let (ms, seq) = e.split_once('-').expect("entry id");
            (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
        };
        let entries = st.all_entries(&s.client, 1000).await.expect("xrange");
        total.0 += entries.len() as u64;
        total.1 += entries.iter().filter(|e| id(&e.id) > id(&at)).count() as u64;
    }
    total
}

/// Total XLEN over every shard stream (Redis alone: usable while MySQL is down).
pub(crate) async fn stream_len(s: &Stack) -> u64 {
    let mut total = 0;
    for shard in 0..SHARDS {
        let st = shard_router::stream::ShardStream::new(&s.client, shard);
        total += st.len(&s.client).await.expect("xlen");
    }
    total
}

/// Polls until the ledger has `n` claims of `sku` and the streams hold nothing past the
/// committed places.
pub(crate) async fn wait_drained(s: &Stack, sku: u64, n: i64, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let rows = s
            .count(&format!("SELECT COUNT(*) FROM claims WHERE sku = {sku}"))
            .await;
        let (len, pending) = stream_depth(s).await;
        if rows == n && pending == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not drained after {limit:?}: {rows}/{n} rows, xlen {len}, not committed {pending}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn users(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

pub(crate) fn stream_key(s: &Stack, shard: u16) -> String {
    keys::claims_stream(s.client.placement(), shard)
}

/// Serialises the tests of one binary that read process-wide state (the metrics registry):
/// hold the guard for the whole test.
pub(crate) async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ONE.lock().await
}

/// The rebuild generation `hk`'s shard meta carries (0 when never written): what
/// `lua/claim.lua` names a hold placed there now with.
pub(crate) async fn shard_gen(client: &StockClient, hk: &keys::ShardKeys) -> u64 {
    let gen: Option<u64> = redis::cmd("HGET")
        .arg(hk.meta())
        .arg("gen")
        .query_async(&mut client.conn())
        .await
        .unwrap();
    gen.unwrap_or(0)
}

/// Adds to `pipe` what a gateway that died under a hold left on `hk`'s shard: `user`'s hold
/// (seq 1, one unit, under `rid`, "" for none, placed under generation `gen`) expired a
/// minute before `now`, and the unit it counted for the user.
pub(crate) fn dead_hold<'a>(
    pipe: &'a mut redis::Pipeline,
    hk: &keys::ShardKeys,
    user: &str,
    rid: &str,
    gen: u64,
    now: i64,
) -> &'a mut redis::Pipeline {
    pipe.cmd("HSET")
        .arg(hk.holds())
        .arg(format!("{user}|1"))
        .arg(format!("1|{}:{gen}|{rid}", now - 60_000))
        .cmd("HSET")
        .arg(hk.users())
        .arg(user)
        .arg(1)
}

/// `replica` is cut off from its master and becomes a master itself.
pub(crate) fn promote(replica: &RedisServer) {
    let _: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.connection())
        .expect("promote the replica");
}

/// A client on `server`, with the stack's settings.
pub(crate) async fn client_on(server: &RedisServer, s: &Stack) -> StockClient {
    let mut cfg = s.cfg.clone();
    cfg.datapath.redis = RedisTarget::Single(server.url());
    StockClient::connect(cfg.datapath.stock())
        .await
        .expect("redis")
}
