//! Drill `hold_failover_before_keep` (docs/DRILLS.md): durability `none`, a rerouted claim
//! stalls between its take (on another master's shard) and its keep, and the home master
//! fails over meanwhile, before its replica got the hold, the user's count or the `P`
//! answer. The keep then reaches a process that never had the hold. Required: it is
//! refused there (503 `restoring`: the Redis process is not vouched for, `lua/guard.lua`),
//! never kept nor answered for another hold; the client's retry of the same request id is
//! never a second 201 and gets the first claim once the consumer rebuilt the home shard
//! from the ledger and the take's record; the user within the limit.
//!
//! What this holds to the fence: the consumer is down while the home fails over (no
//! rebuild can come first), so for the retries sent then only the guard stands between
//! the promoted replica, which has neither the answer nor the hold, and a second unit.

use std::time::{Duration, Instant};

use campaign_ops::service;
use campaign_ops::Config;
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::test_util::{drain, split_sku};
use shard_router::{
    now_ms, Claim, ClaimOutcome, ClaimRequest, HomeOutcome, RedisTarget, Settlement, ShardId,
    SkuMeta, StockClient, StockError, TakeOutcome,
};
use sqlx::MySqlPool;
use test_support::mariadb::TestDatabase;
use test_support::RedisCluster;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::durability::cut_replicas;
use super::older_snapshot::wait_vouched;
use super::redis_loss::{ledger, open_campaign, put_and_preheat, wait_reading};

const T: Duration = Duration::from_secs(10);

/// A sale on a cluster (3 masters, a replica each) with the consumer running: 10 units on
/// 2 shards of two masters, limit 1, the home shard drained and every shard vouched; then
/// the home master's replica is stopped and cut off, so nothing the home writes from now
/// on survives its failover. Shared with `reroute_none_failover`.
pub(crate) struct CutHome {
    pub(crate) cluster: RedisCluster,
    _db: TestDatabase,
    pub(crate) cfg: Config,
    pub(crate) client: StockClient,
    pub(crate) pool: MySqlPool,
    pub(crate) meta: SkuMeta,
    pub(crate) home: ShardId,
    pub(crate) other: ShardId,
    master: usize,
    replica: usize,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) service: Option<JoinHandle<Result<(), campaign_ops::OpsError>>>,
}

impl CutHome {
    pub(crate) async fn start(seed: u64, name: &str) -> Self {
        let cluster = RedisCluster::start(3, 1);
        let db = TestDatabase::create();
        let mut cfg = Config::new(RedisTarget::Cluster(cluster.urls()), 16, db.url());
        cfg.datapath.read_block = Duration::from_millis(200);
        cfg.datapath.lease = Duration::from_millis(1500);
        cfg.reconcile_interval = Duration::from_secs(3600);
        cfg.datapath.backoff_max = Duration::from_millis(500);
        let client = StockClient::connect(cfg.datapath.stock())
            .await
            .expect("redis");
        let pool = ledger::pool::connect(&cfg.datapath.mysql_url, T)
            .await
            .expect("db");
        ledger::pool::migrate(&pool).await.expect("migrate");
        let sku = split_sku(&client, seed, |slot| cluster.master_of(slot));
        let c = open_campaign(sku, name, 10, 2, 1);
        let meta = put_and_preheat(&pool, &client, &c, cfg.datapath.shards).await;
        let (stop, rx) = plumbing::shutdown::channel();
        let service = tokio::spawn(service::run(cfg.clone(), None, rx));
        wait_reading(&pool).await;
        let shards = client.placement().shards_of(sku, 2);
        let (home, other) = (shards[0], shards[1]);
        drain(&client, &meta, home).await;
        wait_vouched(&client, &meta).await;
        let home_slot = shard_router::placement::slot_of_tag(client.placement().tag(home));
        let (master, replica) = cluster.master_and_replica(home_slot);
        cluster.nodes()[replica].signal("STOP");
        cut_replicas(&cluster.nodes()[master]);
        Self {
            cluster,
            _db: db,
            cfg,
            client,
            pool,
            meta,
            home,
            other,
            master,
            replica,
            stop,
            service: Some(service),
        }
    }

    /// A user whose home is the drained home shard.
    pub(crate) fn user(&self, prefix: &str) -> String {
        (0..)
            .map(|n| format!("{prefix}{n}"))
            .find(|u| self.client.placement().home_shard(self.meta.sku, 2, u) == self.home)
            .expect("a user homed there")
    }

    /// Fails the home master over to its replica (which has nothing since the cut) and
    /// brings it back as a replica; returns a gateway's client connected anew.
    pub(crate) async fn fail_over_home(&mut self) -> StockClient {
        tokio::task::block_in_place(|| {
            self.cluster.take_over(self.master, self.replica);
            self.cluster.rejoin_as_replica(self.master);
        });
        let live: Vec<String> = self
            .cluster
            .nodes()
            .iter()
            .filter(|n| n.pid().is_some())
            .map(|n| n.url())
            .collect();
        let gw_cfg = shard_router::StockConfig::new(RedisTarget::Cluster(live), 16);
        StockClient::connect(gw_cfg).await.expect("reconnect")
    }

    /// Stops the consumer (a restart of it, say): nothing rebuilds until [`Self::resume`].
    pub(crate) async fn pause(&mut self) {
        let _ = self.stop.send(true);
        if let Some(s) = self.service.take() {
            let _ = s.await;
        }
    }

    pub(crate) fn resume(&mut self) {
        let (stop, rx) = plumbing::shutdown::channel();
        self.stop = stop;
        self.service = Some(tokio::spawn(service::run(self.cfg.clone(), None, rx)));
    }

    /// The ledger rows of `user`, once more than `expected` arrived or within a bound.
    pub(crate) async fn rows_of(&self, user: &str, expected: usize) -> usize {
        let deadline = Instant::now() + T;
        loop {
            let rows = ledger(&self.pool, self.meta.sku).await;
            let held = rows.values().filter(|(r, _)| r.user == user).count();
            if held > expected || Instant::now() > deadline {
                return held;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What a client's retries of one request id got.
#[derive(Debug, Default)]
pub(crate) struct Retries {
    pub(crate) again: u32,
    pub(crate) replayed: bool,
    pub(crate) mismatch: u32,
    pub(crate) restoring: u32,
    pub(crate) other: u32,
}

impl CutHome {
    /// Retries `req` every 100 ms through `gateway` until it replays `first` (or 40 s),
    /// starting the paused consumer again after `resume_after`.
    pub(crate) async fn retry_until_replayed(
        &mut self,
        gateway: &StockClient,
        req: &ClaimRequest,
        first: &Claim,
        resume_after: Duration,
    ) -> Retries {
        let mut r = Retries::default();
        let empties = LocalEmptyShards::default();
        let meta = self.meta.clone();
        let back = Instant::now() + resume_after;
        let deadline = Instant::now() + Duration::from_secs(40);
        while !r.replayed && Instant::now() < deadline {
            if self.service.is_none() && Instant::now() > back {
                self.resume();
            }
            match protocol::claim(gateway, &meta, req, ClaimOptions::new(&empties, now_ms()))
                .await
                .map(|a| a.outcome)
            {
                Ok(ClaimOutcome::Claimed { .. }) => r.again += 1,
                Ok(ClaimOutcome::Replay(c)) if c.claim_id == first.claim_id => r.replayed = true,
                Ok(ClaimOutcome::Replay(_)) => r.mismatch += 1,
                Err(StockError::Restoring { .. }) => r.restoring += 1,
                _ => r.other += 1,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        r
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_after_its_home_failed_over_is_refused_and_the_retry_replays() {
    let mut s = CutHome::start(13_600, "hold_failover drill").await;
    let (sku, home, other) = (s.meta.sku, s.home, s.other);
    let user = s.user("stalled");
    let req = ClaimRequest {
        sku,
        user: user.clone(),
        qty: 1,
        request_id: Some("once".into()),
    };
    let now = now_ms();
    let HomeOutcome::Hold { user_seq, gen, .. } = s
        .client
        .claim_home(&req, home, now, true)
        .await
        .expect("hold")
        .outcome
    else {
        panic!("expected a hold on the drained home")
    };
    let TakeOutcome::Claimed { claim_id, .. } = s
        .client
        .take(&req, other, home, user_seq, gen, now)
        .await
        .expect("take")
        .outcome
    else {
        panic!("expected a take on the other shard")
    };
    let taken = Claim {
        claim_id,
        sku,
        shard: other,
        qty: 1,
    };

    // The consumer stops, then the home master dies before replicating; the stalled keep
    // arrives afterwards, and the client retries (the consumer back after 3 s).
    s.pause().await;
    let gateway = s.fail_over_home().await;
    let keep = Settlement::KeepOwn {
        claim: taken.clone(),
        gen,
    };
    let kept = gateway
        .settle(sku, home, &user, user_seq, Some("once"), &keep)
        .await
        .map(|a| a.outcome);
    let r = s
        .retry_until_replayed(&gateway, &req, &taken, Duration::from_secs(3))
        .await;
    let held = s.rows_of(&user, usize::from(r.again > 0)).await;
    s.pause().await;
    println!(
        "drill=hold_failover_before_keep keep={kept:?} second_201={} replay_mismatch={} \
         winner_replayed={} restoring={} other={} ledger_rows_of_user={held}",
        r.again, r.mismatch, r.replayed, r.restoring, r.other
    );
    assert!(
        matches!(kept, Err(StockError::Restoring { .. })),
        "the keep reached a process that never had the hold and was not refused: {kept:?}"
    );
    assert_eq!(r.again, 0, "a second 201 for one request id");
    assert_eq!(r.mismatch, 0, "the retry replayed another claim");
    assert!(r.replayed, "the retry never got its first claim back");
    assert!(held <= 1, "the user holds {held} units over a limit of 1");
}
