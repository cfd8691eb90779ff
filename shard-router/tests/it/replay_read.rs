//! The read behind the gateways' replay filter (`shard-router/src/replay_users.rs`,
//! docs/DESIGN.md "Replay after sell-out"), at its own depth, on a single Redis and a
//! cluster: the set is read only when every slice is present and at most 0 with its meta,
//! it is every user of the SKU's `useq` hashes, and a check against its marks fails once a
//! user is added, a rebuild changes a generation or a close-out fences a shard.

use std::collections::HashSet;

use shard_router::keys::ShardKeys;
use shard_router::{ClaimOutcome, ReplayUsers, SkuMeta, StockClient};

use crate::common::{claim_once, open_meta, req, Env};

/// Runs one Redis command on the node that owns `key`.
async fn on_key(client: &StockClient, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async::<redis::Value>(&mut client.conn())
        .await
        .expect("command");
}

fn keys(client: &StockClient, meta: &SkuMeta, nth: usize) -> ShardKeys {
    let shard = client.placement().shards_of(meta.sku, meta.width)[nth];
    ShardKeys::new(client.placement(), shard, meta.sku)
}

async fn read(client: &StockClient, meta: &SkuMeta, cap: u64) -> ReplayUsers {
    client
        .replay_users(meta.sku, meta.width, cap)
        .await
        .expect("replay users")
}

async fn scenario(env: Env, sku: u64) {
    let client = env.client().await;
    let meta = open_meta(sku, 4, 2, 1);
    client.preheat(&meta).await.expect("preheat");
    let winners: HashSet<String> = (0..4).map(|i| format!("u{i}")).collect();
    for (i, u) in winners.iter().enumerate() {
        if i == 3 {
            // Units left on a slice: nothing to rely on, and nothing was scanned.
            assert_eq!(
                read(&client, &meta, 100).await,
                ReplayUsers::Moving { scanned: 0 }
            );
        }
        let out = claim_once(&client, &meta, &req(meta.sku, u, None)).await;
        assert!(matches!(out, ClaimOutcome::Claimed { .. }), "{u}: {out:?}");
    }

    // Sold out: the set is every winner, and the check against its marks holds.
    let ReplayUsers::Users { users, marks } = read(&client, &meta, 100).await else {
        panic!("sold out everywhere, yet not read");
    };
    assert_eq!(users, winners);
    assert!(client
        .replay_users_unchanged(meta.sku, meta.width, &marks)
        .await
        .unwrap());
    // Past the cap, not read at all.
    assert_eq!(read(&client, &meta, 3).await, ReplayUsers::TooMany(4));

    // A user added to a `useq` (what a late claim's rebuild_late.lua writes) fails the
    // check, and the next read has the user.
    on_key(
        &client,
        &["HSET", &keys(&client, &meta, 1).user_seq(), "late", "1"],
    )
    .await;
    assert!(!client
        .replay_users_unchanged(meta.sku, meta.width, &marks)
        .await
        .unwrap());
    let ReplayUsers::Users { users, marks } = read(&client, &meta, 100).await else {
        panic!("not read after the late user");
    };
    assert!(users.contains("late") && users.len() == 5, "{users:?}");

    // A rebuild's new generation fails the check.
    on_key(
        &client,
        &["HSET", &keys(&client, &meta, 0).meta(), "gen", "9"],
    )
    .await;
    assert!(!client
        .replay_users_unchanged(meta.sku, meta.width, &marks)
        .await
        .unwrap());

    // A close-out's fence (the meta gone, the slice still 0) is never "nobody won here".
    on_key(&client, &["DEL", &keys(&client, &meta, 0).meta()]).await;
    assert_eq!(
        read(&client, &meta, 100).await,
        ReplayUsers::Moving { scanned: 0 }
    );
}

#[tokio::test]
async fn the_replay_read_on_a_single_redis() {
    scenario(Env::single(), 1401).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_read_on_a_cluster() {
    scenario(Env::cluster(), 1402).await;
}
