//! Redis CPU per claim, split by command (issue 16): what the claim script costs Redis, and
//! what the consumer's stream work (reads, acks, deletes, recovery) adds on top.
//!
//! One round on a fresh Redis and database, with the production consumer settings and 16
//! shards (what `bench run --stack` deploys):
//! - A: `FG_COST_CLAIMS` claims through the claim script at `FG_COST_RATE` claims/s with no
//!   consumer running: the claim path alone;
//! - B: the consumer running and committing to MariaDB, the same load again, until the
//!   consumer has drained every entry (acknowledged and deleted).
//!
//! Each phase reads `INFO commandstats` and the Redis process CPU (`INFO cpu`, user + sys)
//! before and after. B − A is the consumer's share by process CPU (it includes serving
//! blocked reads, which Redis 7.0 does outside any command's timing). Commands that run
//! inside a script are counted by Redis in their own rows too; the share "by command" sums
//! only what was sent from outside (see `INNER_CLAIM`, `INNER_SETTLE`).
//!
//! Run: `cargo test -p campaign-ops --test it redis_cost:: -- --ignored --nocapture`
//! (`FG_COST_ROUNDS`, default 3, prints medians over the rounds; `FG_COST_RECORDS=pairs`
//! writes the nine-pair records instead of the compact ones; Redis's own cost does not
//! depend on the build, but the consumer's read sizes do a little: release is closer to a
//! deployment).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use campaign_ops::campaign::{self, Campaign};
use consumer::Config;
use shard_router::protocol::{self, LocalEmptyShards};
use shard_router::{ClaimOutcome, ClaimRequest, RecordForm, RedisTarget, StockClient};
use test_support::mariadb::TestDatabase;
use test_support::RedisServer;

const SKU: u64 = 1616;
const COST_SHARDS: u16 = 16;
/// Commands `lua/claim.lua` runs inside its EVALSHA.
const INNER_CLAIM: &[&str] = &[
    "hmget", "get", "expire", "hget", "hincrby", "hset", "set", "decrby", "xadd", "publish",
];
/// Commands the consumer's settle script runs inside its EVAL (`shard-router/src/stream/settle.rs`).
const INNER_SETTLE: &[&str] = &["xack", "xdel", "xtrim", "xpending", "xinfo|groups"];

/// `FG_COST_RECORDS`: the form of the claim records, `compact` (default) or `pairs`.
fn record_form() -> RecordForm {
    match std::env::var("FG_COST_RECORDS").as_deref() {
        Ok("pairs") => RecordForm::Pairs,
        Ok("compact") | Err(_) => RecordForm::Compact,
        Ok(other) => panic!("FG_COST_RECORDS must be compact or pairs, not {other:?}"),
    }
}

fn env(k: &str, default: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `INFO commandstats` (name → calls, usec) and the process CPU in µs.
#[derive(Debug, Clone, Default)]
struct Stats {
    cmds: HashMap<String, (u64, u64)>,
    cpu_us: f64,
}

fn stats(conn: &mut redis::Connection) -> Stats {
    let text: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let mut cmds = HashMap::new();
    for line in text.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |k: &str| -> u64 {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        cmds.insert(name.to_owned(), (field("calls"), field("usec")));
    }
    let cpu: String = redis::cmd("INFO").arg("cpu").query(conn).unwrap();
    let secs = |k: &str| -> f64 {
        cpu.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Stats {
        cmds,
        cpu_us: (secs("used_cpu_user") + secs("used_cpu_sys")) * 1e6,
    }
}

/// The difference `after − before`, per claim.
struct PerClaim {
    claims: f64,
    cpu: f64,
    /// name → (calls per claim, µs per claim)
    cmds: BTreeMap<String, (f64, f64)>,
}

fn per_claim(before: &Stats, after: &Stats, claims: usize) -> PerClaim {
    let n = claims as f64;
    let cmds = after
        .cmds
        .iter()
        .filter_map(|(k, &(calls, usec))| {
            let (c0, u0) = before.cmds.get(k).copied().unwrap_or((0, 0));
            (calls > c0).then(|| (k.clone(), ((calls - c0) as f64 / n, (usec - u0) as f64 / n)))
        })
        .collect();
    PerClaim {
        claims: n,
        cpu: (after.cpu_us - before.cpu_us) / n,
        cmds,
    }
}

impl PerClaim {
    fn us(&self, cmd: &str) -> f64 {
        self.cmds.get(cmd).map_or(0.0, |c| c.1)
    }
    fn calls(&self, cmd: &str) -> f64 {
        self.cmds.get(cmd).map_or(0.0, |c| c.0)
    }
    /// µs per claim of commands sent from outside a script other than the claim script's.
    fn consumer_commands(&self) -> f64 {
        let settle_script = self.calls("eval") > 0.0;
        self.cmds
            .iter()
            .filter(|(k, _)| k.as_str() != "evalsha" && !INNER_CLAIM.contains(&k.as_str()))
            .filter(|(k, _)| !(settle_script && INNER_SETTLE.contains(&k.as_str())))
            .map(|(_, c)| c.1)
            .sum()
    }
    fn print(&self, title: &str) {
        eprintln!(
            "  {title}: {:.0} claims, Redis process CPU {:.1} µs/claim",
            self.claims, self.cpu
        );
        eprintln!(
            "    {:<12} {:>12} {:>10} {:>10}",
            "command", "calls/claim", "µs/call", "µs/claim"
        );
        let mut rows: Vec<_> = self.cmds.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        for (k, (calls, us)) in rows {
            eprintln!("    {k:<12} {calls:>12.4} {:>10.1} {us:>10.2}", us / calls);
        }
    }
}

/// Claims of distinct users at `rate` per second (open loop, at most 512 in flight).
async fn drive(client: &StockClient, c: &Campaign, prefix: &str, n: usize, rate: usize) {
    let meta = Arc::new(campaign_ops::sku::meta(c));
    let empties = Arc::new(LocalEmptyShards::default());
    let gate = Arc::new(tokio::sync::Semaphore::new(512));
    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
        let permit = gate.clone().acquire_owned().await.unwrap();
        let (client, meta, empties) = (client.clone(), meta.clone(), empties.clone());
        let user = format!("{prefix}-{i}");
        tasks.spawn(async move {
            let req = ClaimRequest {
                sku: meta.sku,
                user,
                qty: 1,
                request_id: None,
            };
            let out = protocol::claim(
                &client,
                &meta,
                &req,
                empties.as_ref(),
                shard_router::now_ms(),
            )
            .await
            .expect("claim");
            assert!(matches!(out, ClaimOutcome::Claimed { .. }), "{out:?}");
            drop(permit);
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Waits until every claims stream is empty with nothing pending.
async fn drained(conn: &mut redis::Connection, client: &StockClient) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut left = 0u64;
        for shard in 0..COST_SHARDS {
            let key = shard_router::keys::claims_stream(client.placement(), shard);
            let len: u64 = redis::cmd("XLEN").arg(&key).query(conn).unwrap();
            left += len;
        }
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{left} entries not drained");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Commandstats time commands by the wall clock: on a shared machine a preempted command
/// looks expensive. A higher priority for this private Redis keeps its figures close to
/// its CPU time (needs root; `FG_COST_RENICE=0` leaves it).
fn favour(redis: &RedisServer) {
    if env("FG_COST_RENICE", 1) == 0 {
        return;
    }
    let pid = redis.pid().expect("redis pid").to_string();
    let ok = std::process::Command::new("renice")
        .args(["-n", "-20", "-p", &pid])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("note: renice failed; commandstats include time Redis was preempted");
    }
}

async fn round(round: usize, n: usize, rate: usize) -> (PerClaim, PerClaim) {
    let redis = RedisServer::start();
    favour(&redis);
    let db = TestDatabase::create();
    let mut cfg = Config::new(RedisTarget::Single(redis.url()), COST_SHARDS, db.url());
    cfg.reconcile_interval = Duration::from_secs(3600);
    let client = StockClient::connect(cfg.stock().with_record_form(record_form()))
        .await
        .unwrap();
    let pool = ledger::pool::connect(&cfg.mysql_url, T).await.unwrap();
    ledger::pool::migrate(&pool).await.unwrap();
    let now = shard_router::now_ms();
    let c = Campaign {
        sku: SKU,
        name: "cost".into(),
        stock: 10 * n as u64,
        width: COST_SHARDS,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    };
    campaign::put(&pool, &c, COST_SHARDS, T).await.unwrap();
    campaign::preheat(&pool, &client, SKU, T).await.unwrap();
    let mut conn = redis.connection();

    // Warm-up (scripts loaded, connections open), then A: the claim path alone.
    drive(&client, &c, &format!("w{round}"), 2000, rate).await;
    let a0 = stats(&mut conn);
    drive(&client, &c, &format!("a{round}"), n, rate).await;
    let a1 = stats(&mut conn);

    // B: the consumer running; measured from its steady state to the last delete.
    let consumer = start_consumer(cfg.clone());
    drained(&mut conn, &client).await;
    drive(&client, &c, &format!("v{round}"), 2000, rate).await;
    drained(&mut conn, &client).await;
    let b0 = stats(&mut conn);
    let t = Instant::now();
    drive(&client, &c, &format!("b{round}"), n, rate).await;
    drained(&mut conn, &client).await;
    let b1 = stats(&mut conn);
    let took = t.elapsed();
    consumer.stop().await;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM claims")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, (2 * n + 4000) as i64, "every claim in the ledger");
    eprintln!("round {round}: B took {took:?} for {n} claims");
    (per_claim(&a0, &a1, n), per_claim(&b0, &b1, n))
}

/// One summary figure from a round's two phases.
type Figure = dyn Fn(&PerClaim, &PerClaim) -> f64;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "performance measurement; run explicitly"]
async fn redis_cpu_per_claim_by_command() {
    let n = env("FG_COST_CLAIMS", 30_000);
    let rate = env("FG_COST_RATE", 6_000);
    let rounds = env("FG_COST_ROUNDS", 3);
    let mut all = Vec::new();
    for r in 0..rounds {
        let (a, b) = round(r, n, rate).await;
        a.print("A, no consumer");
        b.print("B, consumer running");
        all.push((a, b));
    }
    let med = |f: &Figure| median(all.iter().map(|(a, b)| f(a, b)).collect());
    eprintln!(
        "\nRedis CPU per claim, {n} claims at {rate}/s, 16 shards, medians of {rounds} rounds:"
    );
    let rows: [(&str, &Figure); 12] = [
        ("process CPU, no consumer (µs/claim)", &|a, _| a.cpu),
        ("process CPU, consumer running", &|_, b| b.cpu),
        ("consumer's share, B − A", &|a, b| b.cpu - a.cpu),
        ("evalsha (claim script)", &|_, b| b.us("evalsha")),
        ("xreadgroup", &|_, b| b.us("xreadgroup")),
        ("info (read's replication check)", &|_, b| b.us("info")),
        ("xack", &|_, b| {
            if b.calls("eval") > 0.0 {
                0.0
            } else {
                b.us("xack")
            }
        }),
        ("xdel", &|_, b| {
            if b.calls("eval") > 0.0 {
                0.0
            } else {
                b.us("xdel")
            }
        }),
        ("eval (settle script: xack + trim/xdel)", &|_, b| {
            b.us("eval")
        }),
        ("consumer's commands, sum", &|_, b| b.consumer_commands()),
        ("entries per xreadgroup", &|_, b| {
            1.0 / b.calls("xreadgroup").max(1e-9)
        }),
        ("claims per ack call", &|_, b| {
            1.0 / if b.calls("eval") > 0.0 {
                b.calls("eval")
            } else {
                b.calls("xack")
            }
            .max(1e-9)
        }),
    ];
    for (name, f) in rows {
        eprintln!("  {name:<42} {:>8.2}", med(f));
    }
    let others = med(&|_, b| {
        b.consumer_commands()
            - ["xreadgroup", "info", "eval"]
                .iter()
                .map(|k| b.us(k))
                .sum::<f64>()
            - if b.calls("eval") > 0.0 {
                0.0
            } else {
                b.us("xack") + b.us("xdel")
            }
    });
    eprintln!("  {:<42} {others:>8.2}", "other consumer commands");
}
