//! Drill `sku_meta_cluster` (docs/DRILLS.md): on a 3-master Redis Cluster with replicas,
//! the master holding the SKU set (`fg:skus`) and two SKUs' metadata (`fg:sku:<sku>`: no
//! hash tag, so one master holds them, apart from the SKUs' shards) loses its data
//! (`FLUSHALL`, which its replica copies) mid-sale. SKU `apart` has no shard on that
//! master; SKU `with` has one of its two shards there, so that shard loses its slice,
//! counts and stored answers too. New users keep claiming both SKUs through a real
//! gateway (SKU cache TTL 250 ms) while the winners from before the loss retry their own
//! request ids; the consumer runs (its watch rebuilds the lost shard and writes the
//! metadata back from the ledger). Required: no answer `404 unknown_sku` (a winner's
//! retry may get 503 while its shard is rebuilt, then its first claim), `apart` keeps
//! selling throughout (`with` answers 503 on both shards while its rebuild fences them),
//! and every winner gets its first claim back.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use campaign_ops::service;
use drills::verdict::Figures;
use shard_router::placement::slot_of_tag;
use shard_router::{keys, Claim, ShardId, StockClient};
use test_support::mariadb::TestDatabase;
use test_support::RedisCluster;

use super::cluster_sale::{claim, consumer_config, gateway, ledger_figures, unit, Answer};
use super::older_snapshot::{wait_ledger, wait_vouched};
use super::redis_loss::{ledger, open_campaign, put_and_preheat, wait_reading};

const T: Duration = Duration::from_secs(10);
/// Far more than the drill sells: a claim that reaches a live shard succeeds.
const STOCK: u64 = 100_000;
const WIDTH: u16 = 2;
const WINNERS: usize = 8;
/// Well under the watch's period: the gateway's entries and its copy of the live set
/// expire before the watch writes the metadata back.
const CACHE_TTL_MS: u64 = 250;

/// One answer of the load.
struct Sent {
    sent: Instant,
    sku: u64,
    user: String,
    /// The user's home shard lives on the master that lost its data.
    on_victim: bool,
    /// A winner's retry of its own request id.
    retry: bool,
    answer: Answer,
}

/// The SKUs of the drill: their metadata on `victim`, `apart`'s shards elsewhere, one of
/// `with`'s shards on `victim`.
fn pick_skus(client: &StockClient, master_of: impl Fn(u16) -> u16, victim: u16) -> (u64, u64) {
    let on_victim = |sku: u64| -> (bool, usize) {
        let meta_there = master_of(slot_of_tag(&keys::sku_meta(sku))) == victim;
        let shards = client.placement().shards_of(sku, WIDTH);
        let there = shards
            .iter()
            .filter(|&&s| master_of(slot_of_tag(client.placement().tag(s))) == victim)
            .count();
        (meta_there, there)
    };
    let find = |want: usize| {
        (1_400..20_000)
            .find(|&sku| on_victim(sku) == (true, want))
            .expect("a SKU placed as the drill needs")
    };
    (find(0), find(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_holding_sku_metadata_loses_its_data() {
    let cluster = RedisCluster::start(3, 1);
    let db = TestDatabase::create();
    let cfg = consumer_config(&cluster, &db.url());
    let client = StockClient::connect(cfg.datapath.stock())
        .await
        .expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("db");
    ledger::pool::migrate(&pool).await.expect("migrate");
    let ranges = tokio::task::block_in_place(|| cluster.slot_ranges());
    let master_of = |slot: u16| {
        let r = ranges
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot));
        r.expect("every slot is served").2
    };
    let victim = master_of(slot_of_tag(keys::SKU_SET));
    let (apart, with) = pick_skus(&client, master_of, victim);
    let mut metas = HashMap::new();
    for sku in [apart, with] {
        let c = open_campaign(sku, "sku_meta_cluster drill", STOCK, WIDTH, 1);
        metas.insert(
            sku,
            put_and_preheat(&pool, &client, &c, cfg.datapath.shards).await,
        );
    }
    let victim_shards: Vec<ShardId> = (0..client.placement().shard_count())
        .filter(|&s| master_of(slot_of_tag(client.placement().tag(s))) == victim)
        .collect();
    let placement = client.placement().clone();
    let homed_on_victim =
        move |sku: u64, user: &str| victim_shards.contains(&placement.home_shard(sku, WIDTH, user));
    let (stop, rx) = plumbing::shutdown::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    wait_reading(&pool).await;
    let gw = gateway(&cluster, cfg.datapath.shards, CACHE_TTL_MS).await;

    // Winners of both SKUs, in the ledger before the loss (the rebuild restores their
    // answers from it).
    let mut first: Vec<(u64, String, Claim)> = Vec::new();
    for sku in [apart, with] {
        for k in 0..WINNERS {
            let user = format!("w{sku}-{k}");
            let a = claim(gw.addr, sku, &user, &format!("r-{user}")).await;
            let Some(claim_id) = a.claim_id.clone().filter(|_| a.status == Some(201)) else {
                panic!("winner {user} before the fault: {a:?}");
            };
            let shard = client.placement().home_shard(sku, WIDTH, &user);
            first.push((sku, user, unit(claim_id, sku, shard)));
        }
        wait_ledger(&pool, sku, WINNERS).await;
        wait_vouched(&client, &metas[&sku]).await;
    }
    assert!(
        first
            .iter()
            .any(|(s, u, _)| *s == with && homed_on_victim(*s, u)),
        "a winner homed on the shard that loses its data"
    );

    let stop_load = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Mutex::new(Vec::<Sent>::new()));
    let record = {
        let (sent, homed) = (sent.clone(), homed_on_victim.clone());
        move |sent_at: Instant, sku: u64, user: String, retry: bool, answer: Answer| {
            let on_victim = homed(sku, &user);
            let s = Sent {
                sent: sent_at,
                sku,
                user,
                on_victim,
                retry,
                answer,
            };
            sent.lock().unwrap().push(s);
        }
    };
    let mut load = Vec::new();
    for t in 0..2 {
        let (stop_load, record) = (stop_load.clone(), record.clone());
        load.push(tokio::spawn(new_users(
            gw.addr,
            t,
            [apart, with],
            stop_load,
            record,
        )));
    }
    let retries: Vec<(u64, String)> = first.iter().map(|(s, u, _)| (*s, u.clone())).collect();
    load.push(tokio::spawn(winners(
        gw.addr,
        retries,
        stop_load.clone(),
        record,
    )));

    tokio::time::sleep(drills::scaled(Duration::from_millis(1_000))).await;
    let victim_node = &cluster.nodes()[cluster.node_index(victim)];
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut victim_node.connection())
        .expect("FLUSHALL on the victim");
    let flushed = Instant::now();

    // Until every winner had its first claim back after the loss, and at least past the
    // cache TTL and two watch rounds (or the bound).
    let replayed_of = |sent: &[Sent]| {
        let ids: HashMap<&str, &str> = first
            .iter()
            .map(|(_, u, c)| (u.as_str(), c.claim_id.as_str()))
            .collect();
        let mut users: Vec<&str> = sent
            .iter()
            .filter(|s| s.sent > flushed && s.retry && s.answer.status == Some(200))
            .filter(|s| s.answer.claim_id.as_deref() == ids.get(s.user.as_str()).copied())
            .map(|s| s.user.as_str())
            .collect();
        users.sort_unstable();
        users.dedup();
        users.len()
    };
    let settle =
        Duration::from_millis(CACHE_TTL_MS) + campaign_ops::rebuild::watch::CHECK_EVERY * 2;
    let deadline = flushed + Duration::from_secs(40);
    while Instant::now() < deadline
        && (flushed.elapsed() < drills::scaled(settle)
            || replayed_of(&sent.lock().unwrap()) < first.len())
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recover_ms = flushed.elapsed().as_millis();
    stop_load.store(true, Ordering::Relaxed);
    for t in load {
        t.await.expect("load task");
    }
    drop(gw);
    let sent = Arc::try_unwrap(sent)
        .ok()
        .expect("load done")
        .into_inner()
        .unwrap();

    // What clients were told against the ledger, once what was acknowledged reached it.
    let acknowledged = |sku: u64| -> Vec<(String, Claim)> {
        let fresh = sent
            .iter()
            .filter(|s| s.sku == sku && !s.retry && s.answer.status == Some(201));
        let fresh = fresh.filter_map(|s| {
            let claim_id = s.answer.claim_id.clone()?;
            // The verdict matches claim ids; the taking shard is not judged here.
            Some((s.user.clone(), unit(claim_id, sku, 0)))
        });
        let winners = first.iter().filter(|(s, _, _)| *s == sku);
        winners
            .map(|(_, u, c)| (u.clone(), c.clone()))
            .chain(fresh)
            .collect()
    };
    let deadline = Instant::now() + T;
    for sku in [apart, with] {
        let want = acknowledged(sku).len();
        while ledger(&pool, sku).await.len() < want && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let _ = stop.send(true);
    service
        .await
        .expect("service")
        .expect("service ends cleanly");
    let mut f = Figures {
        drill: "sku_meta_cluster".into(),
        recover_ms: Some(recover_ms),
        ..Figures::default()
    };
    for sku in [apart, with] {
        let g = ledger_figures(&pool, "sku_meta_cluster", &metas[&sku], acknowledged(sku)).await;
        f.acknowledged += g.acknowledged;
        f.recorded += g.recorded;
        f.lost += g.lost;
        f.duplicated += g.duplicated;
        f.oversold += g.oversold;
        f.over_limit += g.over_limit;
    }

    let after: Vec<&Sent> = sent.iter().filter(|s| s.sent > flushed).collect();
    let count = |p: &dyn Fn(&&&Sent) -> bool| after.iter().filter(p).count();
    let unknown = count(&|s| s.answer.status == Some(404));
    let retry_404 = count(&|s| s.retry && s.answer.status == Some(404));
    let retry_503 = count(&|s| s.retry && s.answer.status == Some(503));
    let ids: HashMap<&str, &str> = first
        .iter()
        .map(|(_, u, c)| (u.as_str(), c.claim_id.as_str()))
        .collect();
    let mismatch = sent
        .iter()
        .filter(|s| s.retry && matches!(s.answer.status, Some(200 | 201)))
        .filter(|s| s.answer.claim_id.as_deref() != ids.get(s.user.as_str()).copied())
        .count();
    // New users' claims, by where they are homed: `apart` (no shard on the victim), `with`'s
    // shard on another master (fenced while the rebuild of `with` runs: 503 `restoring`),
    // and `with`'s shard on the victim.
    let fresh = |s: &&&Sent| !s.retry;
    let sold = |s: &&&Sent| s.answer.status == Some(201);
    let apart_n = count(&|s| fresh(s) && s.sku == apart);
    let apart_ok = count(&|s| fresh(s) && s.sku == apart && sold(s));
    let with_other = count(&|s| fresh(s) && s.sku == with && !s.on_victim);
    let with_other_ok = count(&|s| fresh(s) && s.sku == with && !s.on_victim && sold(s));
    let on_victim = count(&|s| fresh(s) && s.on_victim);
    let on_victim_ok = count(&|s| fresh(s) && s.on_victim && sold(s));
    let replayed = replayed_of(&sent);
    println!(
        "{f} replay_mismatch={mismatch} unknown_sku={unknown} retry_404={retry_404} retry_503={retry_503} \
         winners_replayed={replayed}/{} apart_after={apart_n} apart_ok={apart_ok} \
         with_other_master_after={with_other} with_other_master_ok={with_other_ok} \
         with_victim_after={on_victim} with_victim_ok={on_victim_ok}",
        first.len()
    );
    assert_eq!(
        unknown, 0,
        "a live SKU answered 404 unknown_sku after its metadata's master lost it"
    );
    assert_eq!(
        mismatch, 0,
        "a winner's retry got another claim than its first"
    );
    assert_eq!(
        replayed,
        first.len(),
        "a winner's retry never got its first claim back"
    );
    assert!(
        apart_n >= 20,
        "too few claims of the SKU with no shard on the victim to judge: {apart_n}"
    );
    // Its shards lost nothing and no slot moved: nothing excuses a claim there.
    assert_eq!(
        apart_ok, apart_n,
        "the SKU with no shard on the victim stopped selling"
    );
    assert_eq!(f.oversold, 0, "the ledger holds more than the stock");
    assert_eq!(f.over_limit, 0, "a user holds more than the limit");
}

/// New users claiming `skus` in turn until `stop`.
async fn new_users(
    addr: SocketAddr,
    t: u32,
    skus: [u64; 2],
    stop: Arc<AtomicBool>,
    record: impl Fn(Instant, u64, String, bool, Answer),
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let sku = skus[(n % 2) as usize];
        let user = format!("n{sku}-{t}-{n}");
        let sent = Instant::now();
        let a = claim(addr, sku, &user, &format!("r-{user}")).await;
        let failed = a.status != Some(201);
        record(sent, sku, user, false, a);
        if failed {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The winners retrying their own request ids in turn until `stop`.
async fn winners(
    addr: SocketAddr,
    winners: Vec<(u64, String)>,
    stop: Arc<AtomicBool>,
    record: impl Fn(Instant, u64, String, bool, Answer),
) {
    for (sku, user) in winners.iter().cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let sent = Instant::now();
        let a = claim(addr, *sku, user, &format!("r-{user}")).await;
        record(sent, *sku, user.clone(), true, a);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
