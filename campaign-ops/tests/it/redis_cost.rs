//! Redis CPU per claim, split by command (issue 16): what the claim script costs Redis, and
//! what the offset consumer's stream work (reads, replica fences, trims, lag gauges) adds
//! on top, on the master it reads from and on a master whose replica it reads from.
//!
//! One round on a fresh Redis and database, with the production consumer settings and 16
//! shards (what `bench run --stack` deploys), four phases of `FG_COST_CLAIMS` claims at
//! `FG_COST_RATE` claims/s through the claim script, each after a warm-up of 2000:
//! - A: no consumer running: the claim path alone;
//! - B: the consumer running, reading the master (XREAD + `INFO replication` in one
//!   pipeline; no replica, so no fence) and committing to MariaDB, the trim script
//!   (`lua/stream_trim.lua`: XINFO STREAM + XTRIM MINID, one EVAL at most once a second per
//!   shard) and the lag gauges (XLEN and XRANGE every 5 s per shard).
//!
//! Then a replica of the same master is started (`RedisServer::start_replica_of`), and:
//! - A': the replica attached, no consumer: the claim path plus feeding a replica;
//! - C: the consumer with `read_replica` pointing at the replica: its reads go to the
//!   replica, and the master serves its fences before each commit (INCR of the shard's
//!   fence key + WAIT + `INFO replication` in one pipeline, `consumer/src/replica.rs`), its
//!   trims and gauges, and the replica's acknowledgements (REPLCONF) the WAITs ask for.
//!
//! A phase with the consumer ends when the ledger has committed every claim issued so far
//! (`COUNT(*)` of claims, polled in MariaDB so the wait costs Redis nothing). Entries are
//! no longer deleted one by one: a committed entry stays in its stream until the next trim
//! of the shard (up to about a second later), so a window starts and ends with about a
//! second of committed, untrimmed entries, and holds about one trim per shard per second
//! of its length (steady state, not a final clean-up).
//!
//! Each phase reads `INFO commandstats` and the Redis process CPU (`INFO cpu`, user + sys:
//! the whole process, as getrusage counts it) of the master, and in A' and C of the
//! replica, before and after. B − A is the consumer's share of the master it reads; C − A'
//! is its share of a master whose replica it reads (the replica's own cost is the claim
//! path's too, so A' is the base, not A). The process CPU includes what no command row
//! shows: reading requests, writing replies, waking blocked reads, feeding the replica.
//! Commands that run inside a script are counted by Redis in their own rows too; the share
//! "by command" sums only what was sent from outside (see `INNER_CLAIM`, `INNER_TRIM`),
//! minus the same rows of the phase without the consumer (REPLCONF runs every second with
//! or without it; the test's own `INFO` calls are in every phase).
//!
//! On a shared 2-core machine one phase's process CPU per claim moves by several µs from
//! round to round (the claim pipelines' batching follows the scheduling), which is more
//! than the consumer adds to a master it does not read: C − A' is within that noise, and
//! its command rows say more. Medians are taken per figure (a difference's median is not
//! the difference of the medians).
//!
//! Run: `cargo test -p campaign-ops --test it redis_cost:: -- --ignored --nocapture`
//! (`FG_COST_ROUNDS`, default 3, prints medians over the rounds; Redis's own cost does not
//! depend on the build, but the consumer's read sizes do a little: release is closer to a
//! deployment). Four Redis-heavy phases and a replica fit a 2-core machine at the default
//! size; `FG_COST_CLAIMS` / `FG_COST_RATE` change it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use campaign_ops::campaign::{self, Campaign};
use campaign_ops::Config;
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::{ClaimOutcome, ClaimRequest, RedisTarget, StockClient};
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;
use test_support::RedisServer;

const SKU: u64 = 1616;
const COST_SHARDS: u16 = 16;
const WARM_UP: usize = 2000;
/// Commands `lua/claim.lua` runs inside its EVALSHA.
const INNER_CLAIM: &[&str] = &[
    "hmget", "get", "expire", "hget", "hincrby", "hset", "set", "decrby", "xadd", "publish",
];
/// Commands the consumer's trim script runs inside its EVAL (`lua/stream_trim.lua`,
/// `shard-router/src/stream/trim.rs`).
const INNER_TRIM: &[&str] = &["exists", "xinfo|stream", "xtrim"];

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
    /// Whether `cmd` is a row of the consumer's, not of the claim path: neither the claim
    /// script nor what runs inside it, nor (when the trim script ran) what runs inside that.
    fn consumer_row(&self, cmd: &str) -> bool {
        cmd != "evalsha"
            && !INNER_CLAIM.contains(&cmd)
            && !(self.calls("eval") > 0.0 && INNER_TRIM.contains(&cmd))
    }
    /// µs per claim of the consumer's rows, minus the same rows of `base` (the phase
    /// without the consumer: REPLCONF, the test's own INFO).
    fn consumer_commands(&self, base: &PerClaim) -> f64 {
        self.cmds
            .keys()
            .chain(base.cmds.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|k| self.consumer_row(k))
            .map(|k| self.us(k) - base.us(k))
            .sum()
    }
    fn print(&self, title: &str) {
        eprintln!(
            "  {title}: {:.0} claims, Redis process CPU {:.1} µs/claim",
            self.claims, self.cpu
        );
        eprintln!(
            "    {:<14} {:>12} {:>10} {:>10}",
            "command", "calls/claim", "µs/call", "µs/claim"
        );
        let mut rows: Vec<_> = self.cmds.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        for (k, (calls, us)) in rows {
            eprintln!("    {k:<14} {calls:>12.4} {:>10.1} {us:>10.2}", us / calls);
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
                ClaimOptions::new(empties.as_ref(), shard_router::now_ms()),
            )
            .await
            .expect("claim")
            .outcome;
            assert!(matches!(out, ClaimOutcome::Claimed { .. }), "{out:?}");
            drop(permit);
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// The claims of [`SKU`] the ledger has.
async fn committed(pool: &MySqlPool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM claims WHERE sku = ?")
        .bind(SKU)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Waits until the ledger has committed all `issued` claims. Asks MariaDB only, so the
/// wait adds nothing to what Redis is measured for. (The streams still hold the entries
/// committed since each shard's last trim: the consumer trims them within a second.)
async fn drained(pool: &MySqlPool, issued: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rows = committed(pool).await;
        if rows >= issued as i64 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{rows} of {issued} claims committed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// One round's phases, per claim: the master's in all four, the replica's in A' and C.
struct Round {
    a: PerClaim,
    b: PerClaim,
    a2: PerClaim,
    c: PerClaim,
    a2_replica: PerClaim,
    c_replica: PerClaim,
}

async fn round(round: usize, n: usize, rate: usize) -> Round {
    let redis = RedisServer::start();
    favour(&redis);
    let db = TestDatabase::create();
    let mut cfg = Config::new(RedisTarget::Single(redis.url()), COST_SHARDS, db.url());
    cfg.reconcile_interval = Duration::from_secs(3600);
    let client = StockClient::connect(cfg.datapath.stock()).await.unwrap();
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .unwrap();
    ledger::pool::migrate(&pool).await.unwrap();
    let now = shard_router::now_ms();
    let c = Campaign {
        sku: SKU,
        name: "cost".into(),
        stock: 10 * (n + WARM_UP) as u64,
        width: COST_SHARDS,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    };
    campaign::put(&pool, &c, COST_SHARDS, T).await.unwrap();
    campaign::preheat(&pool, &client, SKU, T).await.unwrap();
    let mut conn = redis.connection();
    let mut issued = 0;

    // Warm-up (scripts loaded, connections open), then A: the claim path alone.
    drive(&client, &c, &format!("w{round}"), WARM_UP, rate).await;
    let a0 = stats(&mut conn);
    drive(&client, &c, &format!("a{round}"), n, rate).await;
    let a1 = stats(&mut conn);
    issued += WARM_UP + n;

    // B: the consumer reading the master; measured from its steady state (everything
    // before committed) to the last claim committed.
    let consumer = start_consumer(cfg.clone());
    drained(&pool, issued).await;
    drive(&client, &c, &format!("v{round}"), WARM_UP, rate).await;
    issued += WARM_UP;
    drained(&pool, issued).await;
    let b0 = stats(&mut conn);
    let t = Instant::now();
    drive(&client, &c, &format!("b{round}"), n, rate).await;
    issued += n;
    drained(&pool, issued).await;
    let b1 = stats(&mut conn);
    let took_b = t.elapsed();
    consumer.stop().await;

    // A': a replica of the same master attached (full sync done), no consumer.
    let replica = RedisServer::start_replica_of(&redis);
    favour(&replica);
    let mut rconn = replica.connection();
    drive(&client, &c, &format!("x{round}"), WARM_UP, rate).await;
    issued += WARM_UP;
    let a2_0 = (stats(&mut conn), stats(&mut rconn));
    drive(&client, &c, &format!("r{round}"), n, rate).await;
    issued += n;
    let a2_1 = (stats(&mut conn), stats(&mut rconn));

    // C: the consumer reading the replica, fencing on the master before each commit.
    let mut replica_cfg = cfg.clone();
    replica_cfg.datapath.read_replica = Some(replica.url());
    let consumer = start_consumer(replica_cfg);
    drained(&pool, issued).await;
    drive(&client, &c, &format!("y{round}"), WARM_UP, rate).await;
    issued += WARM_UP;
    drained(&pool, issued).await;
    let c0 = (stats(&mut conn), stats(&mut rconn));
    let t = Instant::now();
    drive(&client, &c, &format!("c{round}"), n, rate).await;
    issued += n;
    drained(&pool, issued).await;
    let c1 = (stats(&mut conn), stats(&mut rconn));
    let took_c = t.elapsed();
    consumer.stop().await;

    let rows: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT claim_id) FROM claims")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, issued as i64, "every claim in the ledger once");
    assert_eq!(committed(&pool).await, issued as i64, "no claim twice");
    eprintln!("round {round}: B took {took_b:?}, C took {took_c:?} for {n} claims each");
    let r = Round {
        a: per_claim(&a0, &a1, n),
        b: per_claim(&b0, &b1, n),
        a2: per_claim(&a2_0.0, &a2_1.0, n),
        c: per_claim(&c0.0, &c1.0, n),
        a2_replica: per_claim(&a2_0.1, &a2_1.1, n),
        c_replica: per_claim(&c0.1, &c1.1, n),
    };
    assert_eq!(r.c.calls("xread"), 0.0, "the master served a read in C");
    assert!(
        r.c_replica.calls("xread") > 0.0,
        "the replica served no read in C"
    );
    r
}

/// One summary figure from a round.
type Figure = dyn Fn(&Round) -> f64;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// µs per claim of `cmds` in `x`, minus the same rows in `base`.
fn rows_over(x: &PerClaim, base: &PerClaim, cmds: &[&str]) -> f64 {
    cmds.iter().map(|k| x.us(k) - base.us(k)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "performance measurement; run explicitly"]
async fn redis_cpu_per_claim_by_command() {
    let n = env("FG_COST_CLAIMS", 30_000);
    let rate = env("FG_COST_RATE", 6_000);
    let rounds = env("FG_COST_ROUNDS", 3);
    let mut all = Vec::new();
    for r in 0..rounds {
        let round = round(r, n, rate).await;
        round.a.print("A, master, no consumer");
        round.b.print("B, master, consumer reading it");
        round.a2.print("A', master, replica attached, no consumer");
        round.c.print("C, master, consumer reading the replica");
        round.a2_replica.print("A', replica, no consumer");
        round.c_replica.print("C, replica, consumer reading it");
        all.push(round);
    }
    let med = |f: &Figure| median(all.iter().map(f).collect());
    // What the consumer reads on a master with no replica, what it sends there, and the
    // same on a master whose replica it reads.
    const READS: &[&str] = &["xread", "info"];
    const GAUGES: &[&str] = &["xlen", "xrange"];
    const FENCE: &[&str] = &["incr", "wait", "info", "replconf"];
    eprintln!(
        "\nRedis CPU per claim, {n} claims at {rate}/s, 16 shards, medians of {rounds} rounds:"
    );
    eprintln!(" master only (A, B: the consumer reads the master):");
    let master_rows: &[(&str, &Figure)] = &[
        ("process CPU, no consumer (µs/claim)", &|r| r.a.cpu),
        ("process CPU, consumer running", &|r| r.b.cpu),
        ("consumer's share, B − A", &|r| r.b.cpu - r.a.cpu),
        ("evalsha (claim script), B", &|r| r.b.us("evalsha")),
        ("xread", &|r| r.b.us("xread")),
        ("info (read's replication id)", &|r| {
            rows_over(&r.b, &r.a, &["info"])
        }),
        ("eval (trim: xinfo stream + xtrim)", &|r| r.b.us("eval")),
        ("xlen + xrange (lag gauges)", &|r| {
            rows_over(&r.b, &r.a, GAUGES)
        }),
        ("fence (incr + wait; none expected)", &|r| {
            rows_over(&r.b, &r.a, &["incr", "wait"])
        }),
        ("consumer's commands, sum", &|r| r.b.consumer_commands(&r.a)),
        ("other consumer commands", &|r| {
            r.b.consumer_commands(&r.a)
                - rows_over(&r.b, &r.a, READS)
                - r.b.us("eval")
                - rows_over(&r.b, &r.a, GAUGES)
                - rows_over(&r.b, &r.a, &["incr", "wait"])
        }),
        ("entries per xread", &|r| 1.0 / r.b.calls("xread").max(1e-9)),
        ("claims per trim", &|r| 1.0 / r.b.calls("eval").max(1e-9)),
    ];
    for &(name, f) in master_rows {
        eprintln!("  {name:<44} {:>8.2}", med(f));
    }
    eprintln!(" replica attached (A', C: the consumer reads the replica, fences on the master):");
    let replica_rows: &[(&str, &Figure)] = &[
        ("master CPU, no consumer (µs/claim)", &|r| r.a2.cpu),
        ("master CPU, consumer running", &|r| r.c.cpu),
        ("consumer's share on the master, C − A'", &|r| {
            r.c.cpu - r.a2.cpu
        }),
        ("replica's cost to the master, A' − A", &|r| {
            r.a2.cpu - r.a.cpu
        }),
        ("evalsha (claim script), C", &|r| r.c.us("evalsha")),
        ("xread on the master (0 expected)", &|r| r.c.us("xread")),
        ("fence: incr", &|r| r.c.us("incr")),
        ("fence: wait", &|r| r.c.us("wait")),
        ("fence: info", &|r| rows_over(&r.c, &r.a2, &["info"])),
        ("replconf (replica acks), C − A'", &|r| {
            rows_over(&r.c, &r.a2, &["replconf"])
        }),
        ("eval (trim: xinfo stream + xtrim)", &|r| r.c.us("eval")),
        ("xlen + xrange (lag gauges)", &|r| {
            rows_over(&r.c, &r.a2, GAUGES)
        }),
        ("consumer's commands on the master, sum", &|r| {
            r.c.consumer_commands(&r.a2)
        }),
        ("other consumer commands", &|r| {
            r.c.consumer_commands(&r.a2)
                - rows_over(&r.c, &r.a2, FENCE)
                - r.c.us("eval")
                - rows_over(&r.c, &r.a2, GAUGES)
                - r.c.us("xread")
        }),
        ("claims per fence (wait)", &|r| {
            1.0 / r.c.calls("wait").max(1e-9)
        }),
        ("claims per trim", &|r| 1.0 / r.c.calls("eval").max(1e-9)),
        ("replica CPU, no consumer", &|r| r.a2_replica.cpu),
        ("replica CPU, consumer reading it", &|r| r.c_replica.cpu),
        ("consumer's share on the replica", &|r| {
            r.c_replica.cpu - r.a2_replica.cpu
        }),
        ("replica: xread", &|r| r.c_replica.us("xread")),
        ("replica: info (read's replication id)", &|r| {
            rows_over(&r.c_replica, &r.a2_replica, &["info"])
        }),
        ("replica: entries per xread", &|r| {
            1.0 / r.c_replica.calls("xread").max(1e-9)
        }),
    ];
    for &(name, f) in replica_rows {
        eprintln!("  {name:<44} {:>8.2}", med(f));
    }
}
