//! Review of the held restore (3856a26): the restore holds a lost shard (no state), puts
//! the ledger's entrants and ranks back, then publishes the state with `draw_open.lua`
//! `publish`, which checks only that the meta exists. A failover between the hold and the
//! publish leaves a new master holding a prefix of the restore's writes: the hold, not the
//! entrants and marks. The restore's steps are driven one by one here (as
//! `draw::restore::shard` runs them) so the failover falls exactly between them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use campaign_ops::draw::{self, entries, run};
use ledger::draws::{self, DrawState};
use shard_router::draw::EntryOutcome;
use shard_router::RedisTarget;

use crate::common::draw::{draw_campaign, enter_all};
use crate::common::failover::*;
use crate::common::*;

const WIDTH: u16 = SHARDS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_mid_restore_does_not_publish_a_shard_missing_its_entrants() {
    let (mut s, replica) = stack_with_replica().await;
    let sku = 9_311;
    // No stock: the ranks are a waitlist, told `waitlisted` once marked (no grant).
    let c = draw_campaign(&s, sku, 0, 2, Duration::from_secs(1), 3600).await;
    enter_all(&s, sku, &users("fo", 6)).await;
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
    let mut closing = HashMap::from([(sku, run::Closing::new(Instant::now()))]);
    run::step(
        &s.pool,
        &s.client,
        &d,
        shard_router::now_ms(),
        &mut closing,
        s.cfg.datapath.replica_wait,
        T,
    )
    .await
    .unwrap();
    let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
    assert_eq!(d.state, DrawState::Drawn);
    let first = draws::ranks(&s.pool, sku, 0, 10, T).await.unwrap()[0]
        .user
        .clone();
    let told = s.client.draw_enter(sku, WIDTH, &first, 0).await.unwrap();
    assert!(
        matches!(told, EntryOutcome::Waitlisted { .. }),
        "{first}: {told:?}"
    );

    // The shard lost its draw, master and replica alike.
    let home = s.client.placement().home_shard(sku, WIDTH, &first);
    let k = shard_router::keys::ShardKeys::new(s.client.placement(), home, sku);
    redis::cmd("DEL")
        .arg(k.draw_meta())
        .arg(k.entrants())
        .arg(k.top_k())
        .query::<()>(&mut s.redis.connection())
        .unwrap();
    assert_on_the_replica(&s.client, home, "the loss is on the replica").await;

    // The restore's first step, the hold, reaches the replica ...
    let spec = draw::spec(&c, &d);
    let token = 7;
    assert!(s.client.draw_hold(home, &spec, token).await.unwrap());
    assert_on_the_replica(&s.client, home, "the hold is on the replica").await;
    // ... its entrants and marks only the master, which then dies.
    promote(&replica);
    let page = draws::entries_of_shard(&s.pool, sku, home, None, 500, T)
        .await
        .unwrap();
    let batch = draw::restore::page_args(&page);
    assert!(s
        .client
        .draw_restore(home, sku, token, &batch)
        .await
        .unwrap()
        .is_some());
    let marks = run::mark_shard(&s.pool, &s.client, &c, home, Some(token), T)
        .await
        .unwrap()
        .expect("held under the token");
    let promoted = fail_over(&mut s, &replica).await;
    // The restore's last step lands on the promoted replica.
    let published = promoted
        .draw_publish(
            home,
            &spec,
            shard_router::draw::DrawState::Drawn,
            token,
            1 + marks,
        )
        .await
        .unwrap();
    assert!(
        !published,
        "published on a promoted replica holding the hold alone"
    );

    // The consumer on the promoted replica: its restore loop and draw loop have 10 s to
    // give the waitlisted entrant their standing back.
    let mut cfg = s.cfg.clone();
    cfg.datapath.redis = RedisTarget::Single(replica.url());
    let consumer = start_consumer(cfg);
    let t0 = Instant::now();
    let told = loop {
        let told = promoted.draw_enter(sku, WIDTH, &first, 0).await.unwrap();
        if matches!(told, EntryOutcome::Waitlisted { .. }) || t0.elapsed() > Duration::from_secs(10)
        {
            break told;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    consumer.stop().await;
    assert!(
        matches!(told, EntryOutcome::Waitlisted { .. }),
        "{first}, rank 1 of the waitlist, told {told:?} for good: the publish gave `drawn` \
         to a promoted replica that held the restore's hold but none of its entrants or marks"
    );
}

/// Close-out racing a restore: the restore loop found the shard lost (no state) just before
/// close-out kept its answers (`draw_over`: state `over`, the window's fields deleted, an
/// expiry) and removed the campaign's keys. The restore's hold writes the window back into
/// the `over` meta (draw_open.lua writes the fields before it looks at the state), so its
/// pages find `k` and put the entrants and the top-K back, with no expiry: they stay for
/// good after the campaign is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_racing_close_out_leaves_no_draw_keys_without_expiry() {
    let s = Stack::start().await;
    let sku = 9_312;
    let c = draw_campaign(&s, sku, 1, 0, Duration::from_secs(600), 60).await;
    let who = users("co", 8);
    enter_all(&s, sku, &who).await;
    let mut trimmed = HashMap::new();
    for shard in 0..SHARDS {
        entries::round(&s.pool, &s.client, shard, &mut trimmed, T)
            .await
            .unwrap();
    }
    let d = draws::get(&s.pool, sku, T).await.unwrap().unwrap();
    let home = s.client.placement().home_shard(sku, WIDTH, &who[0]);
    let k = shard_router::keys::ShardKeys::new(s.client.placement(), home, sku);
    let mut conn = s.redis.connection();
    // Lost; the restore loop reads the state (none) and is about to restore the shard ...
    redis::cmd("DEL")
        .arg(k.draw_meta())
        .arg(k.entrants())
        .arg(k.top_k())
        .query::<()>(&mut conn)
        .unwrap();
    assert_eq!(s.client.draw_state(home, sku).await.unwrap(), None);
    // ... when close-out keeps the answers and removes the campaign's keys.
    draw::over::keep_answers(&s.pool, &s.client, &c, Duration::from_secs(60), T)
        .await
        .unwrap();
    s.client.remove_campaign_keys(sku, c.width).await.unwrap();
    draw::restore::shard(&s.pool, &s.client, &c, &d, home, T)
        .await
        .unwrap();
    let state: Option<String> = redis::cmd("HGET")
        .arg(k.draw_meta())
        .arg("state")
        .query(&mut conn)
        .unwrap();
    assert_eq!(state.as_deref(), Some("over"), "close-out's state kept");
    for key in [k.entrants(), k.top_k(), k.draw_meta()] {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        assert_ne!(ttl, -1, "{key} left without an expiry after close-out");
    }
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(k.draw_meta())
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        fields,
        vec!["state".to_owned()],
        "an `over` meta is its state alone"
    );
}
