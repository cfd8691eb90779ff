//! Drill `older_snapshot` (docs/DESIGN.md): a single Redis with AOF `everysec` comes back
//! from an older snapshot mid-sale, after the ledger already holds what was sold since:
//! the slices offer units the ledger holds, the users' counts and stored answers are gone,
//! and the stream and the generation rolled back with them. Sell half, `SAVE`, sell the
//! rest, wait until the ledger holds every unit, kill the server, restore the snapshot.
//! Then new users, a user who already holds the limit, and a winner retrying its own
//! request id keep claiming. Required: nothing acknowledged beyond the stock, nobody over
//! the limit, and every retry of a ledger-held claim answered with its first claim (never
//! a new one); the winner's retry gets its claim back once the shard is vouched for.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use campaign_ops::service;
use drills::load::Answers;
use drills::verdict;
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::{now_ms, Claim, ClaimOutcome, ClaimRecord, StockClient, StockError};
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;
use test_support::RedisServer;

use super::redis_loss::{config, ledger, open_campaign, put_and_preheat, wait_reading};

const T: Duration = Duration::from_secs(10);
const STOCK: u64 = 10;

fn request(sku: u64, user: &str, rid: &str) -> shard_router::ClaimRequest {
    shard_router::ClaimRequest {
        sku,
        user: user.to_owned(),
        qty: 1,
        request_id: Some(rid.to_owned()),
    }
}

async fn claim(
    client: &StockClient,
    meta: &shard_router::SkuMeta,
    empties: &LocalEmptyShards,
    user: &str,
    rid: &str,
) -> Result<ClaimOutcome, StockError> {
    let req = request(meta.sku, user, rid);
    protocol::claim(client, meta, &req, ClaimOptions::new(empties, now_ms()))
        .await
        .map(|a| a.outcome)
}

async fn ledger_len(pool: &MySqlPool, sku: u64) -> usize {
    ledger(pool, sku).await.len()
}

pub(crate) async fn wait_ledger(pool: &MySqlPool, sku: u64, n: usize) {
    let deadline = Instant::now() + T;
    while ledger_len(pool, sku).await < n {
        assert!(
            Instant::now() < deadline,
            "the ledger never held {n} claims"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the clients saw after the restore.
#[derive(Default, Debug)]
struct After {
    /// New claims acknowledged (201) after the restore: each one is a unit beyond the
    /// stock, since the ledger held all of it before.
    fresh: Vec<(String, Claim)>,
    /// Retries of a ledger-held request id answered with another claim than the first.
    replay_mismatch: u64,
    /// The winner's retry answered with its own first claim.
    replayed: bool,
    restoring: u64,
    other: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_an_older_snapshot_resells_nothing() {
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let db = TestDatabase::create();
    let cfg = config(&redis.url(), &db.url());
    let client = StockClient::connect(cfg.datapath.stock())
        .await
        .expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("db");
    ledger::pool::migrate(&pool).await.expect("migrate");
    let c = open_campaign(1_301, "older_snapshot drill", STOCK, 2, 1);
    let meta = put_and_preheat(&pool, &client, &c, cfg.datapath.shards).await;
    let (stop, rx) = plumbing::shutdown::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    wait_reading(&pool).await;
    let empties = LocalEmptyShards::default();

    // Half the stock, in the ledger, then the snapshot; the other half, in the ledger too.
    let mut first: HashMap<String, Claim> = HashMap::new();
    let mut snapshot = None;
    for i in 0..STOCK {
        let (user, rid) = (format!("u{i}"), format!("r{i}"));
        match claim(&client, &meta, &empties, &user, &rid).await {
            Ok(ClaimOutcome::Claimed { claim, .. }) => first.insert(user, claim),
            other => panic!("claim {i} before the fault: {other:?}"),
        };
        if i + 1 == STOCK / 2 {
            wait_ledger(&pool, c.sku, first.len()).await;
            wait_vouched(&client, &meta).await;
            snapshot = Some(tokio::task::block_in_place(|| redis.snapshot()));
        }
    }
    wait_ledger(&pool, c.sku, first.len()).await;
    // Everything sold is in the ledger; AOF everysec has it on disk too. The host comes
    // back with the older file.
    let before = ledger(&pool, c.sku).await;
    let snapshot = snapshot.expect("snapshot taken");
    tokio::task::block_in_place(|| redis.restart_from_snapshot(&snapshot));
    let restored_at = Instant::now();

    // New users, a holder of the limit, and the winner u8 retrying its own request id,
    // until the winner has its claim back (or the bound).
    let mut after = After::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut round = 0u32;
    while !after.replayed && Instant::now() < deadline {
        round += 1;
        let tries = [
            (format!("n{}", round % 3), format!("n-{round}")),
            ("u7".to_owned(), format!("again-{round}")),
            ("u8".to_owned(), "r8".to_owned()),
        ];
        for (user, rid) in tries {
            match claim(&client, &meta, &empties, &user, &rid).await {
                Ok(ClaimOutcome::Claimed { claim, .. }) => after.fresh.push((user, claim)),
                Ok(ClaimOutcome::Replay(c)) => {
                    let own = first.get(&user).map(|f| f.claim_id == c.claim_id);
                    if own == Some(true) && rid == "r8" {
                        after.replayed = true;
                    } else {
                        after.replay_mismatch += 1;
                    }
                }
                Err(StockError::Restoring { .. }) => after.restoring += 1,
                _ => after.other += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recover_ms = restored_at.elapsed().as_millis();
    // Whatever was acknowledged after the restore reaches the ledger before the count.
    let deadline = Instant::now() + T;
    let want = before.len() + after.fresh.len();
    while ledger_len(&pool, c.sku).await < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(true);
    service
        .await
        .expect("service")
        .expect("service ends cleanly");

    let rows = ledger(&pool, c.sku).await;
    let records: Vec<ClaimRecord> = rows
        .values()
        .filter(|(_, s)| s == "pending" || s == "confirmed")
        .map(|(r, _)| r.clone())
        .collect();
    let answers = Answers {
        acknowledged: first
            .clone()
            .into_iter()
            .chain(after.fresh.clone())
            .collect(),
        ..Answers::default()
    };
    let mut f = verdict::compare("older_snapshot", &meta, &answers, &records);
    f.recover_ms = Some(recover_ms);
    let voided = before
        .iter()
        .filter(|(id, (_, status))| rows.get(*id).map(|(_, s)| s) != Some(status))
        .count();
    let collisions: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM anomalies WHERE kind = 'collision'")
            .fetch_one(&pool)
            .await
            .unwrap_or(0);
    println!(
        "{f} replay_mismatch={} winner_replayed={} fresh_after={} restoring={} other={} voided={voided} collisions={collisions}",
        after.replay_mismatch,
        after.replayed,
        after.fresh.len(),
        after.restoring,
        after.other
    );
    assert_eq!(f.lost, 0, "acknowledged claims missing from the ledger");
    assert!(
        after.fresh.is_empty(),
        "units sold again after the restore: {:?}",
        after.fresh
    );
    assert_eq!(f.oversold, 0, "the ledger holds more than the stock");
    assert_eq!(f.over_limit, 0, "a user holds more than the limit");
    assert_eq!(
        after.replay_mismatch, 0,
        "a retry got another claim than its first"
    );
    assert!(
        after.replayed,
        "the winner's retry never got its first claim back"
    );
    assert_eq!(voided, 0, "a ledger row changed status");
}

/// Waits until the consumer vouched for the process serving every shard of `meta` (its
/// watch, every 2 s): the snapshot then carries the vouch, as a live deployment's would.
pub(crate) async fn wait_vouched(client: &StockClient, meta: &shard_router::SkuMeta) {
    let deadline = Instant::now() + T;
    for s in client.placement().shards_of(meta.sku, meta.width) {
        while !client
            .server_identity(s)
            .await
            .is_ok_and(|id| id.vouched_here())
        {
            assert!(Instant::now() < deadline, "shard {s} never vouched for");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
