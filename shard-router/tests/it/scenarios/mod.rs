//! The stock-core scenarios. Each takes a fresh [`Env`] and fails if an invariant of
//! docs/DESIGN.md breaks; `stock_single.rs` and `stock_cluster.rs` run every one of them.

#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::{
    now_ms, ClaimOutcome, PreheatOutcome, ReleaseRequest, ReleaseStep, StockClient,
};

use crate::common::*;

/// 200 tasks send 20 000 claims from 5 000 users (1% repeated request ids) against 1 000
/// units over 8 shards. Exactly 1 000 units go out, no user passes the limit, every slice
/// ends at 0, the streams hold exactly the 1 000 records, and every replay names its
/// original claim.
pub(crate) async fn concurrency(env: Env) {
    const TASKS: usize = 200;
    const USERS: usize = 5_000;
    const CLAIMS: usize = 20_000;
    let client = env.client().await;
    let meta = open_meta(1001, 1_000, 8, 2);
    client.preheat(&meta).await.expect("preheat");

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let fresh = CLAIMS - CLAIMS / 100;
    let mut reqs: Vec<_> = (0..fresh)
        .map(|i| req(meta.sku, &format!("u{}", i % USERS), Some(&format!("r{i}"))))
        .collect();
    for _ in 0..CLAIMS / 100 {
        let again = reqs[rng.random_range(0..fresh)].clone();
        reqs.push(again);
    }
    reqs.shuffle(&mut rng);

    // One shared view of empty shards, as one gateway would have.
    let empties = Arc::new(LocalEmptyShards::default());
    let chunks: Vec<Vec<_>> = reqs.chunks(CLAIMS / TASKS).map(<[_]>::to_vec).collect();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let (client, meta, empties) = (client.clone(), meta.clone(), empties.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for r in chunk {
                let o = protocol::claim(
                    &client,
                    &meta,
                    &r,
                    ClaimOptions::new(empties.as_ref(), now_ms()),
                )
                .await
                .expect("claim")
                .outcome;
                out.push((r, o));
            }
            out
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.extend(t.await.expect("task"));
    }
    assert_eq!(results.len(), CLAIMS);

    let mut per_user: HashMap<String, u32> = HashMap::new();
    let mut claimed_by_rid: HashMap<String, String> = HashMap::new();
    let mut replays = Vec::new();
    let mut units = 0u32;
    for (r, o) in &results {
        match o {
            ClaimOutcome::Claimed { claim, .. } => {
                units += claim.qty;
                *per_user.entry(r.user.clone()).or_default() += claim.qty;
                let prev = claimed_by_rid
                    .insert(r.request_id.clone().expect("rid"), claim.claim_id.clone());
                assert!(prev.is_none(), "request id served twice: {r:?}");
            }
            ClaimOutcome::Replay(c) => {
                replays.push((r.request_id.clone().expect("rid"), c.clone()))
            }
            ClaimOutcome::SoldOut
            | ClaimOutcome::LimitReached { .. }
            | ClaimOutcome::InProgress => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(units, 1_000, "units claimed must equal stock");
    for (user, n) in &per_user {
        assert!(*n <= meta.limit, "user {user} holds {n} > limit");
        let in_redis = client
            .user_count(meta.sku, meta.width, user)
            .await
            .expect("count");
        assert_eq!(in_redis, *n, "redis count of {user}");
    }
    for (rid, c) in &replays {
        assert_eq!(
            claimed_by_rid.get(rid),
            Some(&c.claim_id),
            "replay of {rid}"
        );
    }
    assert_eq!(slices_total(&client, &meta).await, 0);
    for (_, v) in client.slices(meta.sku, meta.width).await.expect("slices") {
        assert_eq!(v, Some(0));
    }
    let records = stream_records(&client, &meta).await;
    assert_eq!(records.len(), 1_000, "one record per claimed unit");
    let ids: HashSet<_> = records.iter().map(|r| r.claim_id.clone()).collect();
    let acked: HashSet<_> = claimed_by_rid.values().cloned().collect();
    assert_eq!(
        ids, acked,
        "stream records are exactly the acknowledged claims"
    );
    assert_no_holds(&client, &meta).await;
}

async fn assert_no_holds(client: &StockClient, meta: &shard_router::SkuMeta) {
    for shard in client.placement().shards_of(meta.sku, meta.width) {
        let holds = client.holds(meta.sku, shard).await.expect("holds");
        assert!(holds.is_empty(), "hold left on shard {shard}: {holds:?}");
    }
}

/// Every user hashes to the same home shard, so it empties first; the rest of the stock
/// must still be sold through second chances — never "stock left but sold out".
pub(crate) async fn uneven_drain(env: Env) {
    let client = env.client().await;
    let meta = open_meta(1002, 40, 4, 1);
    client.preheat(&meta).await.expect("preheat");
    let home = client.placement().shards_of(meta.sku, meta.width)[0];
    let users = users_with_home(&client, &meta, home, "drain", 60);

    let mut tasks = Vec::new();
    for u in users {
        let (client, meta) = (client.clone(), meta.clone());
        // A fresh view per claim: the worst case, nothing known about empty shards.
        tasks.push(tokio::spawn(async move {
            claim_once(&client, &meta, &req(meta.sku, &u, None)).await
        }));
    }
    let (mut direct, mut rerouted, mut sold_out) = (0, 0, 0);
    for t in tasks {
        match t.await.expect("task") {
            ClaimOutcome::Claimed {
                rerouted: false, ..
            } => direct += 1,
            ClaimOutcome::Claimed { rerouted: true, .. } => rerouted += 1,
            ClaimOutcome::SoldOut => sold_out += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(direct, 10, "the home slice gives its 10 units");
    assert_eq!(rerouted, 30, "the other 30 units go out by second chance");
    assert_eq!(sold_out, 20);
    assert_eq!(slices_total(&client, &meta).await, 0);
    assert_eq!(stream_records(&client, &meta).await.len(), 40);
    assert_no_holds(&client, &meta).await;
}

/// One user fires many concurrent claims while the home shard is empty: the hold on the
/// home count keeps them at the limit even though every unit comes from elsewhere.
pub(crate) async fn limit_across_reroutes(env: Env) {
    let client = env.client().await;
    let meta = open_meta(1003, 40, 4, 2);
    client.preheat(&meta).await.expect("preheat");
    let home = client.placement().shards_of(meta.sku, meta.width)[1];
    let mut users = users_with_home(&client, &meta, home, "x", 11);
    let target = users.pop().expect("target user");
    // Drain the target's home slice (10 units) with other users of the same home.
    for u in &users[..10] {
        let o = claim_once(&client, &meta, &req(meta.sku, u, None)).await;
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
    let empties = Arc::new(LocalEmptyShards::default());
    let mut tasks = Vec::new();
    for i in 0..30 {
        let (client, meta, empties, user) = (
            client.clone(),
            meta.clone(),
            empties.clone(),
            target.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let r = req(meta.sku, &user, Some(&format!("t{i}")));
            protocol::claim(
                &client,
                &meta,
                &r,
                ClaimOptions::new(empties.as_ref(), now_ms()),
            )
            .await
            .expect("claim")
            .outcome
        }));
    }
    let mut got = 0;
    for t in tasks {
        match t.await.expect("task") {
            ClaimOutcome::Claimed { rerouted, claim } => {
                assert!(rerouted, "home is empty, so only reroutes can succeed");
                assert_ne!(claim.shard, home);
                got += claim.qty;
            }
            ClaimOutcome::LimitReached { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, meta.limit, "exactly the limit, never more");
    let held = client
        .user_count(meta.sku, meta.width, &target)
        .await
        .expect("count");
    assert_eq!(held, meta.limit);
    assert_no_holds(&client, &meta).await;
}

/// The same request id gets the same answer and takes no second unit, on the home shard
/// and after a reroute.
pub(crate) async fn replay(env: Env) {
    let client = env.client().await;
    let meta = open_meta(1004, 8, 2, 3);
    client.preheat(&meta).await.expect("preheat");

    let first = claim_once(&client, &meta, &req(meta.sku, "alice", Some("same"))).await;
    let ClaimOutcome::Claimed { claim, .. } = first else {
        panic!("first claim: {first:?}")
    };
    for _ in 0..3 {
        let again = claim_once(&client, &meta, &req(meta.sku, "alice", Some("same"))).await;
        assert_eq!(again, ClaimOutcome::Replay(claim.clone()));
    }
    assert_eq!(slices_total(&client, &meta).await, 7);
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, "alice")
            .await
            .unwrap(),
        1
    );

    // Rerouted: drain bob's home slice, then claim with a request id and replay it.
    let home = client.placement().home_shard(meta.sku, meta.width, "bob");
    let others = users_with_home(&client, &meta, home, "drainer", 4);
    for u in &others {
        claim_once(&client, &meta, &req(meta.sku, u, None)).await;
    }
    let first = claim_once(&client, &meta, &req(meta.sku, "bob", Some("b1"))).await;
    let ClaimOutcome::Claimed {
        claim,
        rerouted: true,
    } = first
    else {
        panic!("expected a reroute: {first:?}")
    };
    let left = slices_total(&client, &meta).await;
    let again = claim_once(&client, &meta, &req(meta.sku, "bob", Some("b1"))).await;
    assert_eq!(again, ClaimOutcome::Replay(claim));
    assert_eq!(slices_total(&client, &meta).await, left);
    assert_eq!(stream_records(&client, &meta).await.len() as i64, 8 - left);
}

/// Releasing a claim twice returns its units once and lets the user claim again.
pub(crate) async fn release_twice(env: Env) {
    let client = env.client().await;
    let meta = open_meta(1005, 4, 2, 1);
    client.preheat(&meta).await.expect("preheat");
    let o = claim_once(&client, &meta, &req(meta.sku, "carol", None)).await;
    let ClaimOutcome::Claimed { claim, .. } = o else {
        panic!("{o:?}")
    };
    let o = claim_once(&client, &meta, &req(meta.sku, "carol", None)).await;
    assert_eq!(o, ClaimOutcome::LimitReached { held: 1 });
    assert_eq!(slices_total(&client, &meta).await, 3);

    let rel = ReleaseRequest {
        sku: meta.sku,
        claim_id: claim.claim_id.clone(),
        user: "carol".into(),
        qty: claim.qty,
        shard: claim.shard,
        home: client.placement().home_shard(meta.sku, meta.width, "carol"),
    };
    let first = client.release(&rel).await.expect("release");
    assert_eq!(
        (first.stock, first.user),
        (ReleaseStep::Released, ReleaseStep::Released)
    );
    let second = client.release(&rel).await.expect("release again");
    assert_eq!(
        (second.stock, second.user),
        (ReleaseStep::AlreadyReleased, ReleaseStep::AlreadyReleased)
    );
    assert_eq!(
        slices_total(&client, &meta).await,
        4,
        "units back exactly once"
    );
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, "carol")
            .await
            .unwrap(),
        0
    );
    let o = claim_once(&client, &meta, &req(meta.sku, "carol", None)).await;
    assert!(
        matches!(o, ClaimOutcome::Claimed { .. }),
        "claims again: {o:?}"
    );
}

/// After SCRIPT FLUSH on every node the next claim still works (EVALSHA → NOSCRIPT →
/// load → EVALSHA).
pub(crate) async fn script_flush(env: Env) {
    let client = env.client().await;
    let meta = open_meta(1006, 10, 4, 5);
    client.preheat(&meta).await.expect("preheat");
    assert!(matches!(
        claim_once(&client, &meta, &req(meta.sku, "d", None)).await,
        ClaimOutcome::Claimed { .. }
    ));
    for mut c in env.node_connections() {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut c)
            .expect("flush");
    }
    assert!(matches!(
        claim_once(&client, &meta, &req(meta.sku, "d", None)).await,
        ClaimOutcome::Claimed { .. }
    ));
    assert_eq!(slices_total(&client, &meta).await, 8);
}

/// A claim for a SKU whose slices are missing is NotPreheated — never a zero, never a
/// refill — and creates no key. Preheat never overwrites a live slice either.
pub(crate) async fn not_preheated(env: Env) {
    let client = env.client().await;
    let meta = open_meta(1007, 10, 4, 1);
    let before = env.key_count();
    for u in ["e1", "e2", "e3"] {
        let o = claim_once(&client, &meta, &req(meta.sku, u, Some("rid"))).await;
        assert_eq!(o, ClaimOutcome::NotPreheated);
    }
    assert_eq!(env.key_count(), before, "no key created");

    // Live slices survive a second preheat.
    client.preheat(&meta).await.expect("preheat");
    claim_once(&client, &meta, &req(meta.sku, "e1", None)).await;
    let again = client.preheat(&meta).await.expect("preheat again");
    assert!(again
        .iter()
        .all(|(_, o)| matches!(o, PreheatOutcome::Live { .. })));
    assert_eq!(slices_total(&client, &meta).await, 9);

    // A slice lost by hand is reported, not recreated.
    let shard = client.placement().home_shard(meta.sku, meta.width, "e2");
    let key = shard_router::keys::ShardKeys::new(client.placement(), shard, meta.sku).stock();
    let mut conn = client.conn();
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let o = claim_once(&client, &meta, &req(meta.sku, "e2", None)).await;
    assert_eq!(o, ClaimOutcome::NotPreheated);
    let exists: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!exists, "the slice must not be recreated");
}

/// Outside the window nothing is taken.
pub(crate) async fn window(env: Env) {
    let client = env.client().await;
    let mut meta = open_meta(1008, 10, 2, 1);
    let now = now_ms();
    meta.start_ms = now + 60_000;
    client.preheat(&meta).await.expect("preheat");
    let o = claim_once(&client, &meta, &req(meta.sku, "f", None)).await;
    assert_eq!(o, ClaimOutcome::NotStarted);
    let o = protocol::claim(
        &client,
        &meta,
        &req(meta.sku, "f", None),
        ClaimOptions::new(&LocalEmptyShards::default(), meta.end_ms),
    )
    .await
    .unwrap()
    .outcome;
    assert_eq!(o, ClaimOutcome::Ended);
    assert_eq!(slices_total(&client, &meta).await, 10);

    // A success replays under its request id even after the window closed.
    let meta = open_meta(1010, 10, 2, 1);
    client.preheat(&meta).await.expect("preheat");
    let r = req(meta.sku, "late", Some("l1"));
    let ClaimOutcome::Claimed { claim, .. } = claim_once(&client, &meta, &r).await else {
        panic!("claim")
    };
    let after_end = protocol::claim(
        &client,
        &meta,
        &r,
        ClaimOptions::new(&LocalEmptyShards::default(), meta.end_ms),
    )
    .await
    .unwrap()
    .outcome;
    assert_eq!(after_end, ClaimOutcome::Replay(claim));
}

/// A gateway that dies between hold and settle leaves the hold standing: the same request
/// id answers InProgress (never a second unit), the hold lists its request id, and whoever
/// resolves it (the consumer, against the ledger) settles the replay answer too.
pub(crate) async fn hold_left_behind(env: Env) {
    use shard_router::{HomeOutcome, Settlement};
    let client = env.client().await;
    let meta = open_meta(1009, 4, 2, 2);
    client.preheat(&meta).await.expect("preheat");
    let home = client.placement().home_shard(meta.sku, meta.width, "gina");
    for u in users_with_home(&client, &meta, home, "h", 2) {
        claim_once(&client, &meta, &req(meta.sku, &u, None)).await;
    }
    let r = req(meta.sku, "gina", Some("g1"));
    let now = now_ms();
    // The "gateway" takes a unit elsewhere and dies before settling.
    let other = other_shard(&client, &meta, home);
    let (user_seq, claim) = crate::common::hold_and_take(&client, &r, home, other, now).await;
    assert_eq!(
        claim_once(&client, &meta, &r).await,
        ClaimOutcome::InProgress
    );
    let holds = client.holds(meta.sku, home).await.expect("holds");
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].request_id.as_deref(), Some("g1"));
    assert_eq!(holds[0].user_seq, user_seq);

    client
        .settle(
            meta.sku,
            home,
            "gina",
            user_seq,
            Some("g1"),
            &Settlement::Keep(claim.clone()),
        )
        .await
        .expect("settle");
    assert_eq!(
        claim_once(&client, &meta, &r).await,
        ClaimOutcome::Replay(claim)
    );
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, "gina")
            .await
            .unwrap(),
        1
    );

    // Undo: a hold whose second chance never ran gives the count back.
    let r2 = req(meta.sku, "gina", Some("g2"));
    let HomeOutcome::Hold { user_seq, .. } = client
        .claim_home(&r2, home, now_ms(), true)
        .await
        .expect("home")
        .outcome
    else {
        panic!("expected a hold")
    };
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, "gina")
            .await
            .unwrap(),
        2
    );
    client
        .settle(
            meta.sku,
            home,
            "gina",
            user_seq,
            Some("g2"),
            &Settlement::Undo,
        )
        .await
        .expect("undo");
    assert_eq!(
        client
            .user_count(meta.sku, meta.width, "gina")
            .await
            .unwrap(),
        1
    );
    assert!(matches!(
        claim_once(&client, &meta, &r2).await,
        ClaimOutcome::Claimed { rerouted: true, .. }
    ));
    assert_no_holds(&client, &meta).await;
}
