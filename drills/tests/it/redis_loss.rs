//! Drill `redis_loss` (docs/DESIGN.md): Redis loses everything mid-sale, the stock is rebuilt from the
//! ledger, and the sale goes on. Two forms of the loss: `FLUSHALL` followed by an
//! operator's `consumer preheat`, and a restart of a Redis that persists nothing, rebuilt
//! by the consumer service on its own. Required after each: ledger active units ≤ stock,
//! no user above the limit, every ledger row from before the loss still there with the
//! same status (no acknowledged claim voided), and reconciliation back to 0.
//!
//! Short form in CI; `FG_DRILL_SCALE=10 cargo test -p drills --test it redis_loss:: -- --nocapture`
//! is the long one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use campaign_ops::campaign::{self, Campaign};
use campaign_ops::service;
use campaign_ops::Config;
use drills::load::{self, Durability};
use drills::verdict;
use shard_router::{now_ms, ClaimRecord, RedisTarget, StockClient};
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;
use test_support::RedisServer;

const SHARDS: u16 = 8;
const T: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `FLUSHALL`, then the operator runs `consumer preheat` (which rebuilds).
    Flushall,
    /// redis-server restarted without persistence; the consumer's watch rebuilds.
    Restart,
}

/// A campaign that opened a minute ago and closes in an hour.
pub(crate) fn open_campaign(sku: u64, name: &str, stock: u64, width: u16, limit: u32) -> Campaign {
    let now = now_ms();
    Campaign {
        sku,
        name: name.into(),
        stock,
        width,
        limit,
        start_ms: now - 60_000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    }
}

/// Stores `c` in the ledger and preheats it; its SKU metadata.
pub(crate) async fn put_and_preheat(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    shards: u16,
) -> shard_router::SkuMeta {
    campaign::put(pool, c, shards, T).await.expect("campaign");
    campaign::preheat(pool, client, c.sku, T)
        .await
        .expect("preheat");
    campaign_ops::sku::meta(c)
}

pub(crate) fn config(redis: &str, db: &str) -> Config {
    let mut c = Config::new(RedisTarget::Single(redis.to_owned()), SHARDS, db);
    c.datapath.read_block = Duration::from_millis(200);
    c.datapath.lease = Duration::from_millis(1500);
    c.reconcile_interval = Duration::from_secs(3600);
    c.datapath.backoff_max = Duration::from_millis(500);
    c
}

/// A ledger row: claim id, user, seq, qty, shard, home, claimed_ms, status.
type Row = (String, String, u64, u32, u16, u16, i64, String);

/// Ledger rows of `sku`: claim id → (record, status).
pub(crate) async fn ledger(pool: &MySqlPool, sku: u64) -> HashMap<String, (ClaimRecord, String)> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT claim_id, CAST(user_id AS CHAR), user_seq, qty, shard, home, claimed_ms, \
         CAST(status AS CHAR) FROM claims WHERE sku = ?",
    )
    .bind(sku)
    .fetch_all(pool)
    .await
    .expect("read ledger");
    rows.into_iter()
        .map(|(id, user, seq, qty, shard, home, ts, status)| {
            let r = ClaimRecord {
                claim_id: id.clone(),
                sku,
                user,
                qty,
                user_seq: seq,
                shard,
                home,
                request_id: None,
                ts_ms: ts,
                gen: 0,
            };
            (id, (r, status))
        })
        .collect()
}

/// Waits until the consumer service is registered for the rebuild's flush handshake and
/// holds every shard's lease: before that, a load can sell its whole share before any
/// claim reaches the ledger, and a loss would come after the sale instead of in its middle.
pub(crate) async fn wait_reading(pool: &MySqlPool) {
    let registered = Instant::now();
    while sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM consumers")
        .fetch_one(pool)
        .await
        .expect("consumers")
        == 0
    {
        assert!(registered.elapsed() < T, "the consumer never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM stream_offsets WHERE owner IS NOT NULL",
    )
    .fetch_one(pool)
    .await
    .expect("stream leases")
        < i64::from(SHARDS)
    {
        assert!(
            registered.elapsed() < T,
            "the consumer never took its leases"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn drill(loss: Loss) -> verdict::Figures {
    let mut redis = RedisServer::start();
    let db = TestDatabase::create();
    let cfg = config(&redis.url(), &db.url());
    let client = StockClient::connect(cfg.datapath.stock())
        .await
        .expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("db");
    ledger::pool::migrate(&pool).await.expect("migrate");
    let now = now_ms();
    // Users come back for more than the limit, so the limit check across the loss bites.
    let stock = drills::scaled_count(1_200);
    let c = Campaign {
        sku: 1_101,
        name: "redis_loss drill".into(),
        stock,
        width: SHARDS,
        limit: 2,
        start_ms: now - 60_000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    };
    campaign::put(&pool, &c, SHARDS, T).await.expect("campaign");
    campaign::preheat(&pool, &client, c.sku, T)
        .await
        .expect("preheat");
    let meta = campaign_ops::sku::meta(&c);

    let (stop, rx) = plumbing::shutdown::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    wait_reading(&pool).await;

    let load = {
        let (client, meta) = (client.clone(), meta.clone());
        tokio::spawn(async move {
            load::run(
                &client,
                &meta,
                4,
                drills::scaled(Duration::from_secs(10)),
                Durability::None,
                stock / 3,
            )
            .await
        })
    };
    // The loss comes once a third is sold and some of it is in the ledger.
    let started = Instant::now();
    loop {
        let left: i64 = client
            .slices(c.sku, c.width)
            .await
            .map(|s| s.into_iter().filter_map(|(_, v)| v).sum())
            .unwrap_or(stock as i64);
        let rows = ledger(&pool, c.sku).await.len();
        if left <= stock as i64 * 2 / 3 && rows > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "sale never got going"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = ledger(&pool, c.sku).await;
    let lost_at = Instant::now();
    match loss {
        Loss::Flushall => {
            let _: () = redis::cmd("FLUSHALL")
                .query(&mut redis.connection())
                .expect("flushall");
            tokio::time::sleep(Duration::from_millis(300)).await;
            // The service's watch may have started its own rebuild in the meantime (it
            // checks every 2 s): then the preheat is refused as "being rebuilt", as it
            // should be, and that rebuild does the work.
            if let Err(e) = campaign::preheat(&pool, &client, c.sku, T).await {
                assert!(
                    e.to_string().contains("is being rebuilt by"),
                    "preheat after the loss: {e}"
                );
            }
        }
        Loss::Restart => tokio::task::block_in_place(|| redis.restart()),
    }
    // Rebuilt once every slice is back (the operator's preheat, or the service's watch).
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .slices(c.sku, c.width)
        .await
        .map_or(true, |s| s.iter().any(|(_, v)| v.is_none()))
    {
        assert!(Instant::now() < deadline, "never rebuilt");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rebuilt_ms = lost_at.elapsed().as_millis();
    let answers = load.await.expect("load");
    // Drained: every stream empty (XLEN; a missing stream counts as empty only once the
    // consumer could have recreated it, which `rows > 0` after the loss shows).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut depth = 0i64;
        for shard in 0..SHARDS {
            let key = shard_router::keys::claims_stream(client.placement(), shard);
            let mut conn = client.conn();
            depth += redis::cmd("XLEN")
                .arg(&key)
                .query_async::<i64>(&mut conn)
                .await
                .unwrap_or(1);
        }
        if depth == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not drained: {depth} entries in the streams"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    service
        .await
        .expect("service")
        .expect("service ends cleanly");

    let after = ledger(&pool, c.sku).await;
    let records: Vec<ClaimRecord> = after.values().map(|(r, _)| r.clone()).collect();
    let name = format!("redis_loss loss={loss:?}");
    let mut f = verdict::compare(&name, &meta, &answers, &records);
    f.errors = answers.errors;
    f.ambiguous = answers.ambiguous;
    f.recover_ms = Some(rebuilt_ms);
    let voided = before
        .iter()
        .filter(|(id, (_, status))| after.get(*id).map(|(_, s)| s) != Some(status))
        .count();
    let active: u64 = after
        .values()
        .filter(|(_, s)| s == "pending" || s == "confirmed")
        .map(|(r, _)| u64::from(r.qty))
        .sum();
    let report = campaign_ops::reconcile::run(&pool, &client, c.sku, now_ms(), T)
        .await
        .expect("reconcile");
    // Claims committed after the rebuild read the ledger (consumer/src/late.rs):
    // each must be counted in Redis by the time the service stopped.
    let (late, unapplied): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), CAST(COALESCE(SUM(applied_ms IS NULL), 0) AS SIGNED) \
         FROM late_claims WHERE sku = ?",
    )
    .bind(c.sku)
    .fetch_one(&pool)
    .await
    .expect("late claims");
    println!(
        "{f} voided={voided} ledger_before={} active={active} stock={stock} drift={} \
         late={late} late_unapplied={unapplied}",
        before.len(),
        report.drift
    );
    assert_eq!(unapplied, 0, "late claims left uncounted in Redis");
    assert!(
        after.len() > before.len(),
        "the sale went on after the loss"
    );
    assert!(
        active <= stock,
        "ledger active units {active} > stock {stock}"
    );
    assert_eq!(f.oversold, 0);
    assert_eq!(f.over_limit, 0, "per-user limit across the loss");
    assert_eq!(voided, 0, "an acknowledged claim in the ledger was voided");
    assert_eq!(f.duplicated, 0, "no (user, seq) reused");
    assert_eq!(report.drift, 0, "{report:?}");
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_flushall_mid_sale_then_preheat() {
    drill(Loss::Flushall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence_mid_sale() {
    drill(Loss::Restart).await;
}
