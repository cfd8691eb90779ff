//! A draw's grants under replicas (docs/DESIGN.md "Durability", "The draw"): a grant is a
//! claim, so it counts (the win in the ledger, `W|` in Redis, the rank granted) only once
//! a replica of the shard that took the unit holds it. The failover is a partition, as in
//! `replica_recovery.rs`: the replica is cut off and promoted (`REPLICAOF NO ONE`), the
//! old master runs the grant, then dies; the consumer moves to the promoted replica.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use campaign_ops::draw::{entries, run};
use ledger::draws::{self, DrawState};
use shard_router::draw::EntryOutcome;
use shard_router::{RedisTarget, StockClient};
use test_support::RedisServer;

use crate::common::draw::{draw_campaign, enter_all};
use crate::common::failover::*;
use crate::common::*;

const WIDTH: u16 = SHARDS;

/// One pass of the draw loop over `sku` on `client`, as the consumer's loop runs it.
async fn step(s: &Stack, client: &StockClient, sku: u64) {
    let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
    let mut closing = HashMap::from([(sku, run::Closing::new(Instant::now()))]);
    run::step(
        &s.pool,
        client,
        &d,
        shard_router::now_ms(),
        &mut closing,
        s.cfg.datapath.replica_wait,
        T,
    )
    .await
    .unwrap();
}

/// `(rank, user, claim id)` of every rank the ledger holds a win for.
async fn recorded_wins(s: &Stack, sku: u64) -> Vec<(u32, String, String)> {
    sqlx::query_as(
        "SELECT rnk, CAST(user_id AS CHAR), claim_id FROM draw_ranks \
         WHERE sku = ? AND claim_id IS NOT NULL ORDER BY rnk",
    )
    .bind(sku)
    .fetch_all(&s.pool)
    .await
    .unwrap()
}

async fn in_claims(s: &Stack, claim_id: &str) -> bool {
    s.count(&format!(
        "SELECT COUNT(*) FROM claims WHERE claim_id = '{claim_id}'"
    ))
    .await
        == 1
}

/// Found on main: the grant loop claimed the winner's unit with the consumer's client
/// (no replica durability, so every claim looked acknowledgeable) and at once recorded the
/// win, wrote `W|` and moved `granted_rank` past it. A failover before the replica had the
/// claim told the winner `won` with a claim id the promoted replica never had: it never
/// reached `claims`, and the unit, back on the promoted replica's slice, went to the next
/// rank. Now the grant waits for the replica under `--replica-wait`; unconfirmed, nothing
/// is recorded and the next pass (on the promoted replica) claims again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_no_replica_confirmed_is_not_a_win_until_one_does() {
    let (mut s, replica) = stack_with_replica().await;
    let sku = 9_301;
    // No stock at the draw: the ranks are the waitlist, served as a wave brings units.
    let c = draw_campaign(&s, sku, 0, 2, Duration::from_secs(1), 3600).await;
    enter_all(&s, sku, &users("rep", 6)).await;
    let mut trimmed = HashMap::new();
    for shard in 0..SHARDS {
        entries::round(&s.pool, &s.client, shard, &mut trimmed, T)
            .await
            .unwrap();
    }
    let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
    while shard_router::now_ms() <= d.draw_at_ms + 50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Close, draw, mark; the grant of rank 1 finds no stock.
    step(&s, &s.client, sku).await;
    let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
    assert_eq!((d.state, d.granted_rank), (DrawState::Drawn, 0));
    let w = campaign_ops::wave::Wave {
        sku,
        id: "w1".into(),
        units: 1,
        due_ms: shard_router::now_ms(),
    };
    campaign_ops::wave::schedule(&s.pool, &w, T).await.unwrap();
    campaign_ops::wave::apply(&s.pool, &s.client, sku, "w1", shard_router::now_ms(), T)
        .await
        .unwrap();
    for shard in 0..SHARDS {
        assert_on_the_replica(&s.client, shard, "the draw and the wave are on the replica").await;
    }
    let ranks = draws::ranks(&s.pool, sku, 0, 10, T).await.unwrap();
    let (first, second) = (ranks[0].user.clone(), ranks[1].user.clone());

    // The replica is cut off; the old master runs the grant of rank 1.
    promote(&replica);
    step(&s, &s.client, sku).await;
    let before = recorded_wins(&s, sku).await;
    let granted_before = draws::get(&s.pool, sku, T)
        .await
        .unwrap()
        .unwrap()
        .granted_rank;
    eprintln!(
        "after the grant on the cut-off master: granted_rank {granted_before}, wins recorded {before:?}"
    );

    // The master dies; the promoted replica (with a replica of its own) takes over and the
    // consumer runs on it: its watch vouches for it, the draw loop grants again.
    let promoted = fail_over(&mut s, &replica).await;
    let _second = RedisServer::start_replica_of(&replica);
    let mut cfg = s.cfg.clone();
    cfg.datapath.redis = RedisTarget::Single(replica.url());
    let consumer = start_consumer(cfg);
    let t0 = Instant::now();
    let (wins, found) = loop {
        let wins = recorded_wins(&s, sku).await;
        let mut found = 0;
        for (_, _, id) in &wins {
            found += usize::from(in_claims(&s, id).await);
        }
        if (!wins.is_empty() && found == wins.len()) || t0.elapsed() > Duration::from_secs(30) {
            break (wins, found);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let granted = draws::get(&s.pool, sku, T)
        .await
        .unwrap()
        .unwrap()
        .granted_rank;
    let grants = draws::grants(&s.pool, sku, shard_router::GRANT_REQUEST, T)
        .await
        .unwrap();
    eprintln!(
        "settled on the promoted replica: granted_rank {granted}, wins recorded {wins:?}, \
         of them in claims {found}, grants in claims {grants:?}"
    );
    let told = promoted.draw_enter(sku, WIDTH, &first, 0).await.unwrap();
    let told_second = promoted.draw_enter(sku, WIDTH, &second, 0).await.unwrap();
    consumer.stop().await;
    assert_eq!(
        found,
        wins.len(),
        "every recorded win has its claim in `claims`: {wins:?}"
    );
    assert_eq!(
        wins.iter()
            .map(|(r, u, _)| (*r, u.clone()))
            .collect::<Vec<_>>(),
        vec![(1, first.clone())],
        "the one unit is rank 1's"
    );
    assert!(
        matches!(&told, EntryOutcome::Won { claim_id, .. } if *claim_id == wins[0].2),
        "{first}: {told:?}"
    );
    // (Its position is counted from the stock at the draw, 0: the marks are not redone
    // as units come.)
    assert!(
        matches!(told_second, EntryOutcome::Waitlisted { .. }),
        "{second}: {told_second:?}"
    );
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert!(
        before.is_empty() && granted_before == 0,
        "no replica held the grant's claim: the ledger must not have recorded it \
         (granted_rank {granted_before}, wins {before:?})"
    );
    let _ = c;
}
