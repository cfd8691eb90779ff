//! Replay of rerouted claims once the consumer took their records into the ledger
//! (docs/DESIGN.md "Durability"). With replica durability a reroute's answer is stored
//! tentative and a replay confirms it by the record on the shard that took it; the
//! consumer deletes that record after the commit, so it must make the answer final first
//! (`consumer/src/final_answers.rs`), or every later replay of a committed claim would
//! answer 503. Also the race where the consumer commits a take before the gateway settles
//! its hold: the answer the consumer made final over the `P` stays final.

use std::time::{Duration, Instant};

use campaign_ops::campaign::{self, Campaign};
use campaign_ops::service;
use campaign_ops::Config;
use shard_router::keys::{self, ShardKeys};
use shard_router::protocol::{self, Acked, Confirmation, LocalEmptyShards};
use shard_router::{
    now_ms, Claim, ClaimOutcome, ClaimRequest, HomeOutcome, RedisTarget, Settlement, StockClient,
    StoredAnswer, TakeOutcome,
};
use test_support::mariadb::TestDatabase;
use test_support::RedisServer;

const SHARDS: u16 = 8;
const T: Duration = Duration::from_secs(10);

fn answer_of(redis: &RedisServer, client: &StockClient, home: u16, sku: u64, user: &str) -> String {
    let key = ShardKeys::new(client.placement(), home, sku).request(user, Some(&rid(user)));
    redis::cmd("GET")
        .arg(key)
        .query(&mut redis.connection())
        .expect("stored answer")
}

fn rid(user: &str) -> String {
    format!("{user}-r")
}

fn req(sku: u64, user: &str) -> ClaimRequest {
    ClaimRequest {
        sku,
        user: user.to_owned(),
        qty: 1,
        request_id: Some(rid(user)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerouted_answers_stay_replayable_after_the_ledger_took_them() {
    let master = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&master);
    let db = TestDatabase::create();
    let mut cfg = Config::new(RedisTarget::Single(master.url()), SHARDS, db.url());
    cfg.datapath.read_block = Duration::from_millis(200);
    cfg.reconcile_interval = Duration::from_secs(3600);
    let mut stock_cfg = cfg.datapath.stock();
    stock_cfg.replica_ack = Some(Duration::from_millis(200));
    let gateway = StockClient::connect(stock_cfg).await.expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("db");
    ledger::pool::migrate(&pool).await.expect("migrate");
    let now = now_ms();
    let c = Campaign {
        sku: 1_401,
        name: "replay_final".into(),
        stock: 4,
        width: 2,
        limit: 1,
        start_ms: now - 60_000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    };
    campaign::put(&pool, &c, SHARDS, T).await.expect("campaign");
    campaign::preheat(&pool, &gateway, c.sku, T)
        .await
        .expect("preheat");
    let meta = campaign_ops::sku::meta(&c);
    let shards = gateway.placement().shards_of(c.sku, 2);
    let (home, other) = (shards[0], shards[1]);
    let users: Vec<String> = (0..)
        .map(|n| format!("u{n}"))
        .filter(|u| gateway.placement().home_shard(c.sku, 2, u) == home)
        .take(4)
        .collect();
    // The home slice (2 units) goes to two users; the next two are rerouted to B.
    for u in [&users[0], &users[3]] {
        let o = protocol::claim(
            &gateway,
            &meta,
            &req(c.sku, u),
            protocol::ClaimOptions::new(&LocalEmptyShards::default(), now_ms())
                .second_chance(false),
        )
        .await
        .expect("home claim")
        .outcome;
        assert!(
            matches!(
                o,
                ClaimOutcome::Claimed {
                    rerouted: false,
                    ..
                }
            ),
            "{o:?}"
        );
    }

    // A whole reroute, confirmed: its answer is tentative until the take is seen on B.
    let Acked {
        outcome: rerouted,
        confirmation: confirmed,
    } = protocol::claim(
        &gateway,
        &meta,
        &req(c.sku, &users[1]),
        protocol::ClaimOptions::new(&LocalEmptyShards::default(), now_ms()),
    )
    .await
    .expect("rerouted claim");
    let ClaimOutcome::Claimed {
        claim: claim1,
        rerouted: true,
    } = rerouted
    else {
        panic!("expected a reroute: {rerouted:?}");
    };
    assert_eq!(confirmed, Confirmation::Confirmed);
    assert!(answer_of(&master, &gateway, home, c.sku, &users[1]).starts_with('~'));

    // Hold and take, settle not yet run: the consumer will commit the take first.
    let r2 = req(c.sku, &users[2]);
    let HomeOutcome::Hold { user_seq, gen, .. } = gateway
        .claim_home(&r2, home, now_ms(), true)
        .await
        .expect("hold")
        .outcome
    else {
        panic!("home is empty: expected a hold");
    };
    let TakeOutcome::Claimed { claim_id, .. } = gateway
        .take(&r2, other, home, user_seq, gen, now_ms())
        .await
        .expect("take")
        .outcome
    else {
        panic!("B has a unit");
    };
    let claim2 = Claim {
        claim_id,
        sku: c.sku,
        shard: other,
        qty: 1,
    };

    let (stop, rx) = plumbing::shutdown::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    // Both records committed and deleted from B's stream.
    let stream = keys::claims_stream(gateway.placement(), other);
    let started = Instant::now();
    loop {
        let left: u64 = redis::cmd("XLEN")
            .arg(&stream)
            .query(&mut master.connection())
            .expect("xlen");
        if left == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the consumer never took B's records"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    service
        .await
        .expect("service")
        .expect("service ends cleanly");

    // The gateway settles late: the answer stays final.
    gateway
        .settle(
            c.sku,
            home,
            &r2.user,
            user_seq,
            r2.request_id.as_deref(),
            &Settlement::Keep(claim2.clone()),
        )
        .await
        .expect("settle");
    for (user, claim) in [(&users[1], &claim1), (&users[2], &claim2)] {
        let replay = gateway
            .replay_confirmed(c.sku, 2, user, &rid(user))
            .await
            .expect("replay");
        assert_eq!(
            replay,
            Some((
                StoredAnswer::Claimed(claim.clone()),
                Confirmation::Confirmed
            )),
            "{user}: a committed reroute replays"
        );
        let stored = answer_of(&master, &gateway, home, c.sku, user);
        println!("{user}: {stored}");
        assert!(
            !stored.starts_with('~'),
            "{user}: the ledger has it, the answer must be final: {stored}"
        );
    }
}

/// The consumer that committed a reroute's record died before it made the answer final:
/// its place moved past the record with the commit, so no consumer reads the record
/// again, and once it is trimmed a replay answers 503 until the answer expires. The next
/// owner of the shard makes the answers of the committed records still in the stream
/// final when it takes the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_reroute_left_tentative_is_made_final_by_the_next_owner() {
    let master = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&master);
    let db = TestDatabase::create();
    let mut cfg = Config::new(RedisTarget::Single(master.url()), SHARDS, db.url());
    cfg.datapath.read_block = Duration::from_millis(200);
    cfg.reconcile_interval = Duration::from_secs(3600);
    let mut stock_cfg = cfg.datapath.stock();
    stock_cfg.replica_ack = Some(Duration::from_millis(200));
    let gateway = StockClient::connect(stock_cfg).await.expect("redis");
    let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
        .await
        .expect("db");
    ledger::pool::migrate(&pool).await.expect("migrate");
    let now = now_ms();
    let c = Campaign {
        sku: 1_402,
        name: "replay_final_owner".into(),
        stock: 2,
        width: 2,
        limit: 1,
        start_ms: now - 60_000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 3600,
    };
    campaign::put(&pool, &c, SHARDS, T).await.expect("campaign");
    campaign::preheat(&pool, &gateway, c.sku, T)
        .await
        .expect("preheat");
    let meta = campaign_ops::sku::meta(&c);
    let shards = gateway.placement().shards_of(c.sku, 2);
    let (home, other) = (shards[0], shards[1]);
    let users: Vec<String> = (0..)
        .map(|n| format!("v{n}"))
        .filter(|u| gateway.placement().home_shard(c.sku, 2, u) == home)
        .take(2)
        .collect();
    // The home slice (1 unit) goes to the first user; the second is rerouted to B.
    let claimed = |user: String, second_chance: bool| {
        let (gateway, meta) = (gateway.clone(), meta.clone());
        async move {
            protocol::claim(
                &gateway,
                &meta,
                &req(c.sku, &user),
                protocol::ClaimOptions::new(&LocalEmptyShards::default(), now_ms())
                    .second_chance(second_chance),
            )
            .await
            .expect("claim")
        }
    };
    claimed(users[0].clone(), false).await;
    let o = claimed(users[1].clone(), true).await.outcome;
    assert!(
        matches!(o, ClaimOutcome::Claimed { rerouted: true, .. }),
        "{o:?}"
    );
    assert!(answer_of(&master, &gateway, home, c.sku, &users[1]).starts_with('~'));

    // What the dead consumer did: B's record committed with B's place after it, under this
    // master; its answer not made final.
    let stream = keys::claims_stream(gateway.placement(), other);
    type Entry = (String, Vec<(String, Vec<u8>)>);
    let entries: Vec<Entry> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query(&mut master.connection())
        .expect("xrange");
    assert_eq!(entries.len(), 1);
    let (id, fields) = &entries[0];
    let record = shard_router::ClaimRecord::decode(
        id,
        fields.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
    )
    .expect("a claim record");
    consumer::commit::write_batch(&pool, &[record], T)
        .await
        .expect("commit");
    let replid = gateway.replication(other).await.expect("info").replid;
    sqlx::query("INSERT INTO stream_offsets (stream, last_id, repl_id) VALUES (?, ?, ?)")
        .bind(&stream)
        .bind(id)
        .bind(&replid)
        .execute(&pool)
        .await
        .expect("place");

    let (stop, rx) = plumbing::shutdown::channel();
    let service = tokio::spawn(service::run(cfg.clone(), None, rx));
    let started = Instant::now();
    while answer_of(&master, &gateway, home, c.sku, &users[1]).starts_with('~') {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the next owner left the committed reroute's answer tentative"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    service
        .await
        .expect("service")
        .expect("service ends cleanly");
}
