//! A MariaDB ledger and the consumer's own service beside a test's Redis, for tests that
//! need the ledger's side of a campaign (close-out, rebuild from the ledger).

use std::time::{Duration, Instant};

use campaign_ops::campaign::{self, Campaign};
use shard_router::{RedisTarget, StockClient};
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;
use test_support::RedisServer;

pub(crate) const T: Duration = Duration::from_secs(10);
/// The gateway's default shard count (`Config::for_redis`).
pub(crate) const SHARDS: u16 = 16;

pub(crate) struct Ledger {
    _db: TestDatabase,
    pub(crate) cfg: campaign_ops::Config,
    pub(crate) pool: MySqlPool,
    pub(crate) client: StockClient,
}

pub(crate) async fn ledger(redis: &RedisServer) -> Ledger {
    let db = TestDatabase::create();
    let mut cfg = campaign_ops::Config::new(RedisTarget::Single(redis.url()), SHARDS, db.url());
    cfg.datapath.read_block = Duration::from_millis(200);
    cfg.reconcile_interval = Duration::from_secs(3600);
    cfg.datapath.db_timeout = Duration::from_secs(3);
    let client = StockClient::connect(cfg.datapath.stock())
        .await
        .expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("mysql");
    ledger::pool::migrate(&pool).await.expect("migrate");
    Ledger {
        _db: db,
        cfg,
        pool,
        client,
    }
}

impl Ledger {
    /// Stores `c` in the ledger and preheats it onto Redis, as an operator does.
    pub(crate) async fn open(&self, c: &Campaign) {
        self.open_draw(c, None).await;
    }

    /// [`Self::open`], as a draw at `draw` = `(draw_at_ms, waitlist)` when given (made
    /// between the two steps, as `consumer campaign --mode draw` does).
    pub(crate) async fn open_draw(&self, c: &Campaign, draw: Option<(i64, u32)>) {
        campaign::put(&self.pool, c, SHARDS, T).await.unwrap();
        if let Some((draw_at_ms, waitlist)) = draw {
            campaign_ops::draw::create(&self.pool, c, draw_at_ms, waitlist, T)
                .await
                .unwrap();
        }
        campaign::preheat(&self.pool, &self.client, c.sku, T)
            .await
            .unwrap();
    }
}

/// Runs the consumer until the ledger holds `n` claims of `sku`, then confirms them all, so
/// close-out finds nothing pending.
pub(crate) async fn ingest_and_confirm(l: &Ledger, sku: u64, n: i64) {
    let (stop, rx) = plumbing::shutdown::channel();
    let task = tokio::spawn(campaign_ops::service::run(l.cfg.clone(), None, rx));
    let deadline = Instant::now() + Duration::from_secs(20);
    let ids: Vec<String> = loop {
        let ids: Vec<String> = sqlx::query_scalar("SELECT claim_id FROM claims WHERE sku = ?")
            .bind(sku)
            .fetch_all(&l.pool)
            .await
            .unwrap();
        if ids.len() as i64 == n {
            break ids;
        }
        assert!(Instant::now() < deadline, "ledger has {} of {n}", ids.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for id in &ids {
        campaign_ops::release::confirm(&l.pool, id, T)
            .await
            .unwrap();
    }
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("consumer drains")
        .unwrap()
        .unwrap();
}
