//! One rebuild path from the ledger: after Redis lost its data, preheat or
//! `rebuild` writes back what the ledger says was sold, never the full split again; claims
//! racing the rebuild, a second rebuild and a crashed one are all safe.

use std::time::Duration;

use crate::common::rebuild::*;
use crate::common::*;
use campaign_ops::campaign::Campaign;
use campaign_ops::rebuild::{self};
use shard_router::rebuild::{FenceOutcome, ShardImage};
use shard_router::{ClaimOutcome, PreheatOutcome};

fn claimed(o: &ClaimOutcome) -> bool {
    matches!(o, ClaimOutcome::Claimed { .. })
}

async fn slices(s: &Stack, c: &Campaign) -> Vec<Option<i64>> {
    s.client
        .slices(c.sku, c.width)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

/// The "Reproduced": stock 2, limit 1; alice claims and is committed; Redis loses
/// everything; the operator preheats again. Before the fix the slice came back as 2 and
/// bob and carol both got a unit: 3 claims on a stock of 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preheat_after_a_flushall_does_not_sell_the_stock_twice() {
    let s = Stack::start().await;
    let c = campaign(&s, 11_001, 2, 1, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    assert!(claimed(&claim_one(&s, &c, "alice", None).await));
    wait_drained(&s, c.sku, 1, Duration::from_secs(20)).await;

    flushall(&s);
    let out = campaign_ops::campaign::preheat(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    assert_eq!(out, vec![(out[0].0, PreheatOutcome::Rebuilt { slice: 1 })]);
    assert!(claimed(&claim_one(&s, &c, "bob", None).await));
    assert_eq!(
        claim_one(&s, &c, "carol", None).await,
        ClaimOutcome::SoldOut
    );
    assert_eq!(
        claim_one(&s, &c, "alice", None).await,
        ClaimOutcome::LimitReached { held: 1 },
        "alice's count is back"
    );
    wait_drained(&s, c.sku, 2, Duration::from_secs(20)).await;
    consumer.stop().await;
    let st = campaign_ops::campaign::status(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    assert_eq!((st.pending, st.available), (2, 0));
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// Everything the issue lists comes back: user counts, sequences (no collision), release
/// sets (a releasing claim is not released twice), replay answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_restores_counts_sequences_release_sets_and_answers() {
    let s = Stack::start().await;
    let c = campaign(&s, 11_002, 20, SHARDS, 2, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let a1 = claim_one(&s, &c, "alice", Some("a-1")).await;
    assert!(claimed(&a1));
    assert!(claimed(&claim_one(&s, &c, "bob", Some("b-1")).await));
    assert!(claimed(&claim_one(&s, &c, "bob", Some("b-2")).await));
    assert!(claimed(&claim_one(&s, &c, "carol", None).await));
    wait_drained(&s, c.sku, 4, Duration::from_secs(20)).await;
    consumer.stop().await;
    // bob's first claim released for good, carol's half way (ledger `releasing`, Redis not
    // yet): neither may come back twice.
    let id = |user: &str, seq: u64| {
        sqlx::query_scalar::<_, String>(
            "SELECT claim_id FROM claims WHERE user_id = ? AND user_seq = ?",
        )
        .bind(user.to_owned())
        .bind(seq)
        .fetch_one(&s.pool)
    };
    let bob1 = id("bob", 1).await.unwrap();
    let carol = id("carol", 1).await.unwrap();
    campaign_ops::release::release(
        &s.pool,
        &s.client,
        &bob1,
        campaign_ops::release::Reason::Cancelled,
        T,
    )
    .await
    .unwrap();
    sqlx::query("UPDATE claims SET status = 'releasing' WHERE claim_id = ?")
        .bind(&carol)
        .execute(&s.pool)
        .await
        .unwrap();
    let before = slices(&s, &c).await;

    flushall(&s);
    let r = rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!((r.active_units, r.in_flight_units, r.oversold), (2, 0, 0));
    let after = slices(&s, &c).await;
    let total = |v: &[Option<i64>]| v.iter().map(|x| x.unwrap()).sum::<i64>();
    assert_eq!(total(&after), 18, "20 - alice - bob's second");
    assert_eq!(
        total(&after),
        total(&before) + 1,
        "carol's releasing unit is back once"
    );

    // Counts: alice 1, bob 1 (one released), carol 0.
    for (user, n) in [("alice", 1), ("bob", 1), ("carol", 0)] {
        assert_eq!(
            s.client.user_count(c.sku, c.width, user).await.unwrap(),
            n,
            "{user}"
        );
    }
    // Finishing carol's release gives nothing back a second time.
    campaign_ops::release::sweep(&s.pool, &s.client, shard_router::now_ms(), T)
        .await
        .unwrap();
    assert_eq!(total(&slices(&s, &c).await), 18);
    assert_eq!(
        s.client.user_count(c.sku, c.width, "carol").await.unwrap(),
        0
    );
    // Replay: the same request id gets the same claim, no second unit.
    let ClaimOutcome::Claimed { claim: first, .. } = a1 else {
        unreachable!()
    };
    assert_eq!(
        claim_one(&s, &c, "alice", Some("a-1")).await,
        ClaimOutcome::Replay(first)
    );
    // Sequences: bob's next claim is seq 3, not a reused 1 or 2.
    assert!(claimed(&claim_one(&s, &c, "bob", None).await));
    assert_eq!(
        claim_one(&s, &c, "bob", None).await,
        ClaimOutcome::LimitReached { held: 2 }
    );
    let consumer = start_consumer(s.cfg.clone());
    wait_drained(&s, c.sku, 5, Duration::from_secs(20)).await;
    consumer.stop().await;
    assert_eq!(
        s.count("SELECT CAST(MAX(user_seq) AS SIGNED) FROM claims WHERE user_id = 'bob'")
            .await,
        3
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// The fence: claims answer "not preheated" and change nothing, preheat refuses, a second
/// rebuild stops, and a rebuild whose lease was taken over writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_holds_claims_preheat_and_other_rebuilds_off() {
    let s = Stack::start().await;
    let c = campaign(&s, 11_003, 10, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let fenced = s
        .client
        .fence_rebuild(c.sku, shard, "crashed", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(fenced, FenceOutcome::Fenced { previous: Some(10) });
    assert_eq!(
        claim_one(&s, &c, "u", None).await,
        ClaimOutcome::NotPreheated
    );
    assert_eq!(
        s.client
            .preheat(&campaign_ops::sku::meta(&c))
            .await
            .unwrap()[0]
            .1,
        PreheatOutcome::Rebuilding
    );
    let busy = rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts()).await;
    assert!(
        busy.unwrap_err()
            .to_string()
            .contains("being rebuilt by crashed"),
        "a second rebuild stops"
    );
    assert_eq!(slices(&s, &c).await, vec![None], "nothing written");

    // The lease runs out: the next rebuild takes over, the crashed one can write nothing.
    s.client
        .fence_rebuild(c.sku, shard, "crashed", Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(slices(&s, &c).await, vec![Some(10)]);
    let stale = ShardImage {
        shard,
        slice: 10,
        ..ShardImage::default()
    };
    assert!(!s
        .client
        .write_rebuild(&campaign_ops::sku::meta(&c), "crashed", &stale, &[], 1)
        .await
        .unwrap());
    // With the fence gone, claims work again.
    assert!(claimed(&claim_one(&s, &c, "u", None).await));
}

/// A rebuild of a live SKU while claims run: counted exactly once, nothing refilled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilds_racing_claims_and_the_consumer_keep_the_books() {
    let s = Stack::start().await;
    let c = campaign(&s, 11_004, 400, SHARDS, 2, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let load = {
        let (client, c) = (s.client.clone(), c.clone());
        tokio::spawn(async move {
            let mut got = Vec::new();
            for round in 0..6 {
                got.extend(claim_all(&client, &c, users("u", 150), 8).await);
                tokio::time::sleep(Duration::from_millis(50 * round)).await;
            }
            got
        })
    };
    for _ in 0..4 {
        rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let ids = load.await.unwrap();
    assert!(!ids.is_empty());
    wait_drained(&s, c.sku, ids.len() as i64, Duration::from_secs(30)).await;
    consumer.stop().await;
    assert!(ids.len() <= 300, "150 users × limit 2");
    assert_eq!(
        s.count("SELECT COUNT(*) FROM (SELECT user_id FROM claims WHERE sku = 11004 GROUP BY user_id HAVING SUM(qty) > 2) o")
            .await,
        0,
        "per-user limit"
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// The service finds a missing slice of a live campaign and rebuilds it by itself; it also
/// recreates its consumer groups (NOGROUP after the loss) and keeps committing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_rebuilds_a_lost_slice_and_its_groups_by_itself() {
    let s = Stack::start().await;
    let c = campaign(&s, 11_005, 6, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let ids = claim_all(&s.client, &c, users("a", 3), 2).await;
    assert_eq!(ids.len(), 3);
    wait_drained(&s, c.sku, 3, Duration::from_secs(20)).await;

    flushall(&s);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while slices(&s, &c).await.iter().any(Option::is_none) {
        assert!(std::time::Instant::now() < deadline, "no rebuild");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total: i64 = slices(&s, &c).await.into_iter().flatten().sum();
    assert_eq!(total, 3);
    // The same users are at their limit; new ones take the rest.
    assert!(claim_all(&s.client, &c, users("a", 3), 2).await.is_empty());
    assert_eq!(claim_all(&s.client, &c, users("b", 5), 2).await.len(), 3);
    wait_drained(&s, c.sku, 6, Duration::from_secs(20)).await;
    consumer.stop().await;
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// A failover rolled a rebuild's write back on one shard (the rebuild failed unconfirmed):
/// the shard keeps its slice at the older generation, so its claims would carry that
/// generation and wait as late claims for good. The watch rebuilds it like a lost slice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_rebuilds_a_shard_a_failover_left_behind_the_ledgers_generation() {
    let s = Stack::start().await;
    let c = campaign(&s, 11_006, 6, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    assert_eq!(claim_all(&s.client, &c, users("a", 2), 2).await.len(), 2);
    wait_drained(&s, c.sku, 2, Duration::from_secs(20)).await;
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    let shard = s.client.placement().shards_of(c.sku, c.width)[0];
    let gen = s.client.rebuild_gen(c.sku, shard).await.unwrap().unwrap();
    assert!(gen > 0);
    // The promoted replica never had the rebuild's write: the meta's older generation.
    let meta = shard_router::keys::ShardKeys::new(s.client.placement(), shard, c.sku).meta();
    let _: () = redis::cmd("HSET")
        .arg(&meta)
        .arg("gen")
        .arg(0)
        .query_async(&mut s.client.conn())
        .await
        .unwrap();

    let rebuilt = rebuild::watch::check(&s.pool, &s.client, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(rebuilt, vec![c.sku], "the shard behind was not rebuilt");
    assert_eq!(
        s.client.rebuild_gen(c.sku, shard).await.unwrap(),
        Some(gen + 1)
    );
    assert!(
        rebuild::watch::check(&s.pool, &s.client, &rebuild_opts())
            .await
            .unwrap()
            .is_empty(),
        "a shard at the ledger's generation is left alone"
    );
    assert_eq!(claim_all(&s.client, &c, users("b", 6), 2).await.len(), 4);
    wait_drained(&s, c.sku, 6, Duration::from_secs(20)).await;
    consumer.stop().await;
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// The last id of `shard`'s claims stream, `None` when the stream does not exist.
async fn stream_last_id(s: &Stack, shard: u16) -> Option<(u64, u64)> {
    let key = shard_router::keys::claims_stream(s.client.placement(), shard);
    let mut conn = s.client.conn();
    let info: redis::Value = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .ok()?;
    let redis::Value::Array(items) = info else {
        return None;
    };
    let at = items
        .iter()
        .position(|v| matches!(v, redis::Value::BulkString(b) if b == b"last-generated-id"))?;
    let redis::Value::BulkString(id) = &items[at + 1] else {
        return None;
    };
    shard_router::codec::parse_entry_id(std::str::from_utf8(id).ok()?)
}

/// Redis loses the claims streams with everything else. A new stream would hand out ids
/// again from the clock of whichever master serves it; one that runs behind (or a failover
/// that rolled the stream back) could reissue a claim id the ledger holds, and that claim's
/// insert would be taken for a duplicate and dropped. The rebuild raises each stream's last
/// id to the highest entry id the ledger holds from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuilt_stream_never_reissues_a_claim_id_the_ledger_holds() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_050, 10, 2, 2, 3600).await;
    for u in ["a", "b", "c", "d", "e"] {
        assert!(claimed(&claim_one(&s, &c, u, None).await));
    }
    let records = read_like_a_consumer(&s, &c).await;
    consumer::commit::write_batch(&s.pool, &records, T)
        .await
        .unwrap();
    flushall(&s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    for shard in s.client.placement().shards_of(c.sku, c.width) {
        let highest = records
            .iter()
            .filter_map(|r| shard_router::codec::ClaimId::parse(&r.claim_id))
            .filter(|id| id.shard() == shard)
            .map(|id| id.entry())
            .max();
        let Some(highest) = highest else { continue };
        let last = stream_last_id(&s, shard).await;
        assert!(
            last.is_some_and(|l| l >= highest),
            "shard {shard}: stream last id {last:?} below the ledger's {highest:?}"
        );
    }
    let ClaimOutcome::Claimed { claim, .. } = claim_one(&s, &c, "f", None).await else {
        panic!("claims go on after the rebuild")
    };
    assert!(!records.iter().any(|r| r.claim_id == claim.claim_id));
}

/// A hold placed before a rebuild may be gone with the data Redis lost, and the rebuilt
/// user counts cannot know it, so a take under it is refused. That used to compare the
/// gateway's clock with the Redis clock of the rebuild: a gateway whose clock ran ahead got
/// its take through. Now the hold carries its shard's rebuild generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_under_a_hold_from_before_a_rebuild_is_refused_whatever_the_gateway_clock() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_060, 2, 2, 1, 3600).await;
    let meta = campaign_ops::sku::meta(&c);
    let p = s.client.placement();
    let home = p.home_shard(c.sku, c.width, "late");
    let other = p
        .shards_of(c.sku, c.width)
        .into_iter()
        .find(|&sh| sh != home)
        .unwrap();
    let drainer = (0..)
        .map(|n| format!("d{n}"))
        .find(|u| p.home_shard(c.sku, c.width, u) == home)
        .unwrap();
    assert!(claimed(&claim_one(&s, &c, &drainer, None).await));
    let req = shard_router::ClaimRequest {
        sku: c.sku,
        user: "late".into(),
        qty: 1,
        request_id: None,
    };
    let now = shard_router::now_ms();
    let shard_router::HomeOutcome::Hold { user_seq, gen, .. } = s
        .client
        .claim_home(&req, home, now, true)
        .await
        .unwrap()
        .outcome
    else {
        panic!("the home slice is empty: a hold")
    };
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    let ahead = shard_router::now_ms() + 600_000;
    let taken = s
        .client
        .take(&req, other, home, user_seq, gen, ahead)
        .await
        .unwrap()
        .outcome;
    assert_eq!(taken, shard_router::TakeOutcome::HoldExpired);
    assert_eq!(
        s.client
            .slices(meta.sku, meta.width)
            .await
            .unwrap()
            .into_iter()
            .find(|(sh, _)| *sh == other)
            .and_then(|(_, v)| v),
        Some(1),
        "nothing taken"
    );
}

/// The claims stream is the shard's, shared by every SKU placed there, and claim ids are
/// the ledger's primary key across SKUs. A rebuild of one SKU that raises the stream only
/// to that SKU's highest id leaves another SKU's higher ids (a closed campaign is never
/// rebuilt) to be handed out again, and a new claim with one of them is dropped as a
/// duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuilt_stream_never_reissues_another_skus_claim_id() {
    let s = Stack::start().await;
    let x = campaign(&s, 12_060, 10, 1, 2, 3600).await;
    let shard = s.client.placement().shards_of(x.sku, 1)[0];
    let ysku = (12_061..13_000)
        .find(|&k| s.client.placement().shards_of(k, 1)[0] == shard)
        .expect("a second SKU on the same shard");
    let y = campaign(&s, ysku, 10, 1, 2, 3600).await;
    assert!(claimed(&claim_one(&s, &x, "a", None).await));
    tokio::time::sleep(Duration::from_millis(5)).await;
    for u in ["b", "c", "d"] {
        assert!(claimed(&claim_one(&s, &y, u, None).await));
    }
    let records = read_like_a_consumer(&s, &x).await;
    consumer::commit::write_batch(&s.pool, &records, T)
        .await
        .unwrap();
    let highest = records
        .iter()
        .filter_map(|r| shard_router::codec::ClaimId::parse(&r.claim_id))
        .map(|id| id.entry())
        .max()
        .unwrap();
    flushall(&s);
    rebuild::rebuild(&s.pool, &s.client, x.sku, &rebuild_opts())
        .await
        .unwrap();
    let last = stream_last_id(&s, shard).await;
    assert!(
        last.is_some_and(|l| l >= highest),
        "shard {shard}: stream last id {last:?} below the ledger's {highest:?} (SKU {ysku})"
    );
}

/// The floor compares entry ids as numbers: within one millisecond `-10` is above `-9`,
/// although it sorts below it as text (the ledger reads the greatest id as text first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_floor_compares_sequence_numbers_as_numbers() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_070, 10, 1, 2, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, c.width)[0];
    let ms = shard_router::now_ms();
    let records: Vec<shard_router::ClaimRecord> = [9u64, 10]
        .iter()
        .map(|&seq| shard_router::ClaimRecord {
            claim_id: format!("{shard}-{ms}-{seq}"),
            sku: c.sku,
            user: format!("u{seq}"),
            qty: 1,
            user_seq: 1,
            shard,
            home: shard,
            request_id: None,
            ts_ms: ms,
            gen: 0,
        })
        .collect();
    consumer::commit::write_batch(&s.pool, &records, T)
        .await
        .unwrap();
    flushall(&s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(stream_last_id(&s, shard).await, Some((ms as u64, 10)));
}

/// Drill `sku_meta_loss` (short form): the SKU metadata (`fg:sku:<sku>`, `fg:skus`) has no
/// shard tag, so on a cluster it lives on one master that may lose its data while the
/// SKU's shards keep theirs: no slice is missing and no rebuild would write it back, and
/// every gateway answered the SKU 404 `unknown_sku` until an operator preheated again.
/// The watch writes it back from the ledger; the slices are left as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_writes_back_lost_sku_metadata() {
    let s = Stack::start().await;
    let c = campaign(&s, 11_011, 6, 2, 1, 3600).await;
    assert_eq!(claim_all(&s.client, &c, users("a", 2), 2).await.len(), 2);
    let before = slices(&s, &c).await;
    // What the loss of the master holding these two keys leaves.
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg(shard_router::keys::sku_meta(c.sku))
        .cmd("SREM")
        .arg(shard_router::keys::SKU_SET)
        .arg(c.sku)
        .query_async(&mut s.client.conn())
        .await
        .unwrap();
    assert_eq!(s.client.sku_meta(c.sku).await.unwrap(), None);

    rebuild::watch::check(&s.pool, &s.client, &rebuild_opts())
        .await
        .unwrap();
    let meta = s.client.sku_meta(c.sku).await.unwrap();
    assert_eq!(
        meta.map(|m| (m.stock, m.width, m.limit)),
        Some((c.stock, c.width, c.limit)),
        "the SKU's metadata was not written back"
    );
    assert!(s.client.skus().await.unwrap().contains(&c.sku));
    assert_eq!(slices(&s, &c).await, before, "the slices were rewritten");
}

/// A record of a version this build does not know, in a stream a rebuild reads: poison to
/// the rebuild as to the consumer, so it is not stored as an in-flight claim and its units
/// are not counted (docs/DESIGN.md, "Claim record versions": why no writer may get ahead
/// of the readers). Its text is a valid version-1 record, so a rebuild that took it would
/// store bob's claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_does_not_take_a_record_of_an_unknown_version() {
    let s = Stack::start().await;
    let c = campaign(&s, 11_020, 4, 1, 2, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    assert!(claimed(&claim_one(&s, &c, "alice", Some("a-1")).await));
    let mut conn = s.redis.connection();
    type Entry = (String, Vec<(String, String)>);
    let written: Vec<Entry> = redis::cmd("XRANGE")
        .arg(stream_key(&s, shard))
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    assert_eq!(written.len(), 1);
    let (name, text) = &written[0].1[0];
    assert_eq!(name, "c1");
    // The same record for bob: the user's length, then the user and the request id.
    let parts: Vec<&str> = text.splitn(9, ',').collect();
    assert_eq!((parts[7], parts[8]), ("5", "alicea-1"), "{text}");
    let bob = format!("{},3,bobb-1", parts[..7].join(","));
    let _: String = redis::cmd("XADD")
        .arg(stream_key(&s, shard))
        .arg("*")
        .arg("c2")
        .arg(&bob)
        .query(&mut conn)
        .unwrap();
    let r = rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!((r.active_units, r.in_flight_units), (0, 1), "{r:?}");
    let users: Vec<Vec<u8>> = sqlx::query_scalar("SELECT user_id FROM claims WHERE sku = 11020")
        .fetch_all(&s.pool)
        .await
        .unwrap();
    assert_eq!(users, vec![b"alice".to_vec()]);
}
