//! Replica confirmation never trusts the connection. WAIT counts the replicas that have the
//! writes *of the connection it runs on*; once that connection was replaced (a reconnect,
//! or a slot moved to a promoted node), a WAIT on the new one confirms at once writes it
//! never made. These tests stop the replica (SIGSTOP: it acknowledges nothing), kill the
//! client's connections mid-way, and check that nothing is reported confirmed.

use std::time::Duration;

use shard_router::protocol::{self, Confirmation, LocalEmptyShards};
use shard_router::test_util::open_meta;
use shard_router::{
    now_ms, ClaimOutcome, ClaimRequest, RedisTarget, SkuMeta, StockClient, StockConfig, StockError,
};
use test_support::RedisServer;

async fn client(master: &RedisServer, ack: Option<Duration>) -> StockClient {
    let mut cfg = StockConfig::new(RedisTarget::Single(master.url()), 16);
    cfg.replica_ack = ack;
    StockClient::connect(cfg).await.expect("connect")
}

/// Kills every normal client connection of `master` but the caller's own.
fn kill_connections(master: &RedisServer) {
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut master.connection())
        .expect("CLIENT KILL");
}

async fn claim(
    client: &StockClient,
    meta: &SkuMeta,
    user: &str,
) -> Result<(ClaimOutcome, Confirmation), StockError> {
    let req = ClaimRequest {
        sku: meta.sku,
        user: user.into(),
        qty: 1,
        request_id: Some(format!("{user}-r")),
    };
    protocol::claim(
        client,
        meta,
        &req,
        protocol::ClaimOptions::new(&LocalEmptyShards::default(), now_ms()),
    )
    .await
    .map(|claimed| (claimed.outcome, claimed.confirmation))
}

/// `wait_replicas` (the fence) after a reconnect: the old connection wrote a claim the
/// stopped replica never got; a plain WAIT on the new connection would answer 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_after_a_reconnect_confirms_nothing() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let c = client(&master, None).await;
    let m = open_meta(1, 100, 1, 1);
    c.preheat(&m).await.expect("preheat");
    let shard = c.placement().shards_of(m.sku, m.width)[0];
    assert_eq!(
        c.wait_replicas(shard, 1, Duration::from_millis(500))
            .await
            .expect("wait"),
        1,
        "a live replica confirms"
    );

    replica.signal("STOP");
    let (o, _) = claim(&c, &m, "a").await.expect("claim");
    assert!(matches!(o, ClaimOutcome::Claimed { .. }), "{o:?}");
    kill_connections(&master);
    // The first call after the kill may see the dropped connection; the next reconnects.
    let mut acked = None;
    for _ in 0..5 {
        if let Ok(n) = c.wait_replicas(shard, 1, Duration::from_millis(100)).await {
            acked = Some(n);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    replica.signal("CONT");
    assert_eq!(
        acked,
        Some(0),
        "the replica is stopped: nothing written since may be confirmed"
    );
}

/// Claims carry their WAIT in their own pipeline: confirmed with a live replica, never
/// confirmed while it is stopped, however often the connection is killed in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_confirmed_only_by_its_own_wait() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let c = client(&master, Some(Duration::from_millis(100))).await;
    let m = open_meta(2, 1000, 1, 1);
    c.preheat(&m).await.expect("preheat");
    let (o, conf) = claim(&c, &m, "live").await.expect("claim");
    assert!(matches!(o, ClaimOutcome::Claimed { .. }), "{o:?}");
    assert_eq!(conf, Confirmation::Confirmed);

    replica.signal("STOP");
    let mut confirmed = 0;
    let mut unconfirmed = 0;
    for i in 0..10 {
        if i % 2 == 1 {
            kill_connections(&master);
        }
        match claim(&c, &m, &format!("u{i}")).await {
            Ok((ClaimOutcome::Claimed { .. }, Confirmation::Confirmed)) => confirmed += 1,
            Ok((ClaimOutcome::Claimed { .. }, _)) => unconfirmed += 1,
            _ => {}
        }
    }
    replica.signal("CONT");
    assert_eq!(
        confirmed, 0,
        "nothing is confirmed while the replica is stopped"
    );
    assert!(unconfirmed > 0, "the claims themselves went through");
    // A replay writes (its answer's TTL), so its WAIT says whether the replica has it.
    let (o, conf) = claim(&c, &m, "live").await.expect("replay");
    assert!(matches!(o, ClaimOutcome::Replay(_)), "{o:?}");
    assert_eq!(conf, Confirmation::Confirmed);
}

/// A second chance whose hold no replica confirmed takes nothing: after a failover of the
/// home master a retry would find no hold and claim again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_hold_takes_nothing() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let c = client(&master, Some(Duration::from_millis(100))).await;
    let m = open_meta(3, 4, 2, 1);
    c.preheat(&m).await.expect("preheat");
    let shards = c.placement().shards_of(m.sku, m.width);
    // Drain the home shard of `victim` with other users of that home shard.
    let victim = "victim";
    let home = c.placement().home_shard(m.sku, m.width, victim);
    let mut n = 0;
    while c
        .slices(m.sku, m.width)
        .await
        .expect("slices")
        .iter()
        .any(|(s, v)| *s == home && *v != Some(0))
    {
        let u = format!("h{n}");
        n += 1;
        if c.placement().home_shard(m.sku, m.width, &u) == home {
            let req = ClaimRequest {
                sku: m.sku,
                user: u,
                qty: 1,
                request_id: None,
            };
            c.claim_home(&req, home, now_ms(), false)
                .await
                .expect("drain");
        }
    }
    let before = c.slices(m.sku, m.width).await.expect("slices");
    replica.signal("STOP");
    let out = claim(&c, &m, victim).await;
    replica.signal("CONT");
    assert!(
        matches!(out, Err(StockError::Unconfirmed { op: "hold" })),
        "{out:?}"
    );
    assert_eq!(
        c.slices(m.sku, m.width).await.expect("slices"),
        before,
        "nothing taken on {shards:?}"
    );
    assert_eq!(
        c.user_count(m.sku, m.width, victim).await.expect("count"),
        0,
        "the hold was given back"
    );
}
