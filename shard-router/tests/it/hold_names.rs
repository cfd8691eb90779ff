//! A hold is named by the rebuild generation it was placed under, and only its own
//! settle (keep or undo) and its own late claim's apply act on it. After Redis lost data a
//! user's sequence starts again, so a retry's hold can take the very `user|seq` of a hold
//! the loss removed; the stalled attempt's keep, or its claim committed late, must leave
//! the retry's hold to the retry. A private single Redis; the loss is what a restart from
//! an older snapshot (every shard at once) and the rebuild after it leave.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use shard_router::keys::ShardKeys;
use shard_router::protocol::{self, ClaimOptions, EmptyShards, LocalEmptyShards};
use shard_router::test_util::{drain, lose_user};
use shard_router::{
    Claim, ClaimOutcome, ClaimRecord, HomeOutcome, RedisTarget, SettleOutcome, Settlement, ShardId,
    SkuMeta, StockClient, StockConfig, TakeOutcome,
};

use crate::common::{claim_once, open_meta, other_shard, req, stream_records, Env, SHARDS};

const WALKER: &str = "walker";

/// A SKU of 8 units on 2 shards whose slice on `walker`'s home is sold, so `walker`'s
/// claims hold there and take on the other shard. Returns the SKU, home and other shard.
async fn walker_rerouted(
    client: &StockClient,
    sku: u64,
    limit: u32,
) -> (SkuMeta, ShardId, ShardId) {
    let meta = open_meta(sku, 8, 2, limit);
    client.preheat(&meta).await.expect("preheat");
    let home = client.placement().home_shard(meta.sku, meta.width, WALKER);
    drain(client, &meta, home).await;
    (meta.clone(), home, other_shard(client, &meta, home))
}

/// What a restart from a snapshot taken before `lost` leaves once rebuilt from a ledger
/// that does not hold them either: `walker`'s keys on the home (`lose_user`), and each lost
/// take's record gone and its unit back on its slice.
fn lose(url: &str, client: &StockClient, meta: &SkuMeta, home: ShardId, lost: &[&Claim]) {
    let mut conn = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connect");
    lose_user(&mut conn, client, meta, home, WALKER, "w1");
    for c in lost {
        let t = ShardKeys::new(client.placement(), c.shard, meta.sku);
        let (_, entry) = c.claim_id.split_once('-').expect("claim id");
        let stream = shard_router::keys::claims_stream(client.placement(), c.shard);
        let _: () = redis::pipe()
            .cmd("XDEL")
            .arg(stream)
            .arg(entry)
            .cmd("INCRBY")
            .arg(t.stock())
            .arg(c.qty)
            .query(&mut conn)
            .expect("lose the take");
    }
}

type Step = Box<dyn Fn(StockClient) -> Pin<Box<dyn Future<Output = String>>> + Send + Sync>;

/// Runs `step` once, as the retry's walk reaches `other`, in another process (its own
/// runtime and connection: this one is blocked in the walk), then lets the walk go on.
struct Meanwhile {
    view: LocalEmptyShards,
    target: RedisTarget,
    other: ShardId,
    step: Step,
    ran: Mutex<Option<String>>,
}

impl Meanwhile {
    fn new(target: RedisTarget, other: ShardId, step: Step) -> Self {
        Self {
            view: LocalEmptyShards::default(),
            target,
            other,
            step,
            ran: Mutex::default(),
        }
    }

    fn ran(&self) -> String {
        self.ran.lock().unwrap().clone().expect("the step ran")
    }
}

impl EmptyShards for Meanwhile {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.view.is_empty(sku, shard)
    }

    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool) {
        self.view.set_empty(sku, shard, empty);
    }

    fn still_empty(&self, sku: u64, shard: ShardId) -> bool {
        if shard == self.other && self.ran.lock().unwrap().is_none() {
            let target = self.target.clone();
            let out = std::thread::scope(|sc| {
                sc.spawn(|| {
                    let rt = tokio::runtime::Runtime::new().expect("runtime");
                    rt.block_on(async {
                        let c = StockClient::connect(StockConfig::new(target, SHARDS))
                            .await
                            .expect("connect");
                        (self.step)(c).await
                    })
                })
                .join()
                .expect("step thread")
            });
            *self.ran.lock().unwrap() = Some(out);
        }
        self.view.is_empty(sku, shard)
    }
}

fn single_url(env: &Env) -> String {
    match env {
        Env::Single(s) => s.url(),
        Env::Cluster(_) => unreachable!("single"),
    }
}

/// A claim acknowledged before a loss and committed late (a consumer held its record while
/// Redis restarted from an older snapshot) is applied while the client's retry of the same
/// request id holds the same `user|seq` again. The apply must not take the retry's hold for
/// its own: it would settle it as kept, the retry's take would then count for nobody, and
/// the user, holding both units, could claim past the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_claim_does_not_take_a_retrys_hold_for_its_own() {
    let env = Env::single();
    let client = env.client().await;
    let (meta, home, other) = walker_rerouted(&client, 1401, 2).await;
    let late = match claim_once(&client, &meta, &req(meta.sku, WALKER, Some("w1"))).await {
        ClaimOutcome::Claimed {
            claim,
            rerouted: true,
        } => claim,
        out => panic!("expected a rerouted claim: {out:?}"),
    };
    let record: ClaimRecord = stream_records(&client, &meta)
        .await
        .into_iter()
        .find(|r| r.claim_id == late.claim_id)
        .expect("the late claim's record");
    lose(&single_url(&env), &client, &meta, home, &[&late]);
    let judged = record.gen + 1;

    // As the retry walks, the consumer commits the record late and applies it.
    let view = Meanwhile::new(
        env.target(),
        other,
        Box::new(move |c| {
            let record = record.clone();
            Box::pin(async move {
                let take = c
                    .apply_late(&record, judged, other)
                    .await
                    .expect("take part");
                let own = c
                    .apply_late(&record, judged, home)
                    .await
                    .expect("home part");
                format!("take={take:?} home={own:?}")
            })
        }),
    );
    let retry = protocol::claim(
        &client,
        &meta,
        &req(meta.sku, WALKER, Some("w1")),
        ClaimOptions::new(&view, shard_router::now_ms()),
    )
    .await
    .map(|a| a.outcome);
    let count = client
        .user_count(meta.sku, meta.width, WALKER)
        .await
        .expect("count");
    let third = claim_once(&client, &meta, &req(meta.sku, WALKER, Some("w2"))).await;
    println!(
        "late apply: {}; retry: {retry:?}; count={count}; a third claim: {third:?}",
        view.ran()
    );
    assert!(
        matches!(retry, Ok(ClaimOutcome::Claimed { rerouted: true, .. })),
        "the retry took a unit: {retry:?}"
    );
    assert_eq!(count, 2, "the user holds the late claim and the retry's");
    assert!(
        matches!(third, ClaimOutcome::LimitReached { held: 2 }),
        "a third claim past the limit of 2: {third:?}"
    );
}

/// An attempt stalls between its take and its keep while Redis restarts from an older
/// snapshot (its hold and its take both lost) and is rebuilt; the client's retry of the
/// same request id holds the same `user|seq` again and walks. The stalled keep lands now:
/// it must not keep the retry's hold, or the request id's stored answer names a claim that
/// exists nowhere while the retry was told its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_keep_leaves_a_retrys_hold_alone() {
    let env = Env::single();
    let client = env.client().await;
    let (meta, home, other) = walker_rerouted(&client, 1402, 1).await;
    let r = req(meta.sku, WALKER, Some("w1"));
    let now = shard_router::now_ms();
    let HomeOutcome::Hold {
        user_seq: seq, gen, ..
    } = client
        .claim_home(&r, home, now, true)
        .await
        .expect("hold")
        .outcome
    else {
        panic!("expected a hold")
    };
    let TakeOutcome::Claimed { claim_id, .. } = client
        .take(&r, other, home, seq, gen, now)
        .await
        .expect("take")
        .outcome
    else {
        panic!("expected a take")
    };
    let stalled = Claim {
        claim_id,
        sku: meta.sku,
        shard: other,
        qty: 1,
    };
    lose(&single_url(&env), &client, &meta, home, &[&stalled]);

    let kept = stalled.clone();
    let view = Meanwhile::new(
        env.target(),
        other,
        Box::new(move |c| {
            let kept = kept.clone();
            Box::pin(async move {
                let how = Settlement::KeepOwn {
                    claim: kept.clone(),
                    gen,
                };
                let out = c
                    .settle(kept.sku, home, WALKER, seq, Some("w1"), &how)
                    .await
                    .expect("the stalled keep")
                    .outcome;
                format!("{out:?}")
            })
        }),
    );
    let retry = protocol::claim(
        &client,
        &meta,
        &r,
        ClaimOptions::new(&view, shard_router::now_ms()),
    )
    .await
    .map(|a| a.outcome);
    let replay = claim_once(&client, &meta, &r).await;
    println!(
        "stalled keep: {}; retry: {retry:?}; replay: {replay:?}",
        view.ran()
    );
    let Ok(ClaimOutcome::Claimed {
        claim,
        rerouted: true,
    }) = retry
    else {
        panic!("the retry took a unit: {retry:?}")
    };
    assert_eq!(view.ran(), format!("{:?}", SettleOutcome::HoldGone));
    assert!(
        matches!(&replay, ClaimOutcome::Replay(c) if c.claim_id == claim.claim_id),
        "the request id replays {replay:?}, the retry was told {}",
        claim.claim_id
    );
}
