//! The rebuild's flush handshake (docs/DESIGN.md, "Rebuild from the ledger"): a live
//! consumer commits what it read before the rebuild's flush request, before the rebuild
//! reads the ledger, so those claims are counted by the rebuild and never late.

use std::time::{Duration, Instant};

use crate::common::rebuild::*;
use crate::common::*;
use shard_router::ClaimOutcome;

/// alice's claim sits in a running consumer's open batch (held 6 s, as a slow writer
/// would) when Redis loses everything; the service's own watch rebuilds the SKU. Before
/// the handshake the rebuild read the ledger without her (its 1 s pause is shorter than
/// the batch), three more users bought the full stock of 3 again, and her commit found
/// its unit sold twice: a late claim, a debt and an `oversold` anomaly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_held_by_a_live_consumer_is_counted_by_the_rebuild() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_101, 3, 1, 1, 3600).await;
    let consumer = start_slow_writer(&s);
    held_in_an_open_batch(&s, &c, "alice").await;

    flushall(&s);
    // The watch sees the missing slice and rebuilds.
    assert!(
        until(Duration::from_secs(10), || async {
            s.client.slices(c.sku, 1).await.unwrap()[0].1.is_some()
        })
        .await,
        "rebuilt"
    );
    let mut sold = 0;
    for user in ["bob", "carol", "dave"] {
        if matches!(claim(&s, &c, user).await, ClaimOutcome::Claimed { .. }) {
            sold += 1;
        }
    }
    assert_eq!(sold, 2, "alice's unit was counted by the rebuild");
    wait_rows(&s.pool, c.sku, 3, Duration::from_secs(20)).await;
    consumer.stop().await;
    assert_eq!(s.count("SELECT COUNT(*) FROM late_claims").await, 0);
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
    assert!(active_units(&s, c.sku).await <= 3);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// A consumer that dies without deregistering keeps a fresh heartbeat for a moment: a
/// rebuild then waits for it only up to its bound, names it in its report and goes on.
/// Once its heartbeat aged, rebuilds no longer wait for it at all; for a minute they still
/// name it and keep their pause (`rebuild/handshake.rs`, `MAYBE_ALIVE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_never_answers_holds_the_rebuild_only_up_to_the_bound() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_102, 4, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    wait_live(&s, 1, Duration::from_secs(5)).await;
    consumer.kill();

    let mut opts = rebuild_opts();
    opts.flush_wait = Duration::from_secs(1);
    let (r, took) = rebuild_timed(&s, c.sku, &opts).await;
    assert_eq!(r.flush.consumers, 1, "{:?}", r.flush);
    assert_eq!(
        r.flush.unanswered,
        std::slice::from_ref(&s.cfg.datapath.consumer_name)
    );
    assert!(r.flush.waited_ms >= 1000, "{:?}", r.flush);
    assert!(
        took < test_support::slack(Duration::from_millis(2500)),
        "the rebuild waited {took:?} with a 1 s bound"
    );

    tokio::time::sleep(consumer::HEARTBEAT_STALE_AFTER).await;
    let started = Instant::now();
    let r = campaign_ops::rebuild::rebuild(&s.pool, &s.client, c.sku, &opts)
        .await
        .unwrap();
    // Not waited for, but named (it may be alive with a stalled heartbeat): the rebuild
    // keeps its pause (100 ms here).
    assert_eq!(r.flush.consumers, 0, "{:?}", r.flush);
    assert_eq!(
        r.flush.unanswered,
        std::slice::from_ref(&s.cfg.datapath.consumer_name)
    );
    assert!(started.elapsed() < test_support::slack(Duration::from_secs(1)));
    assert_eq!(slice_sum(&s, &c).await, 4);
}

/// A consumer stopped cleanly drains its writer and deletes its row; a running one answers
/// a rebuild's flush request within a few beats, and then the rebuild takes no pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_consumer_answers_and_a_stopped_one_deregisters() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_103, 4, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    wait_live(&s, 1, Duration::from_secs(5)).await;

    let mut opts = rebuild_opts();
    opts.quiesce = Duration::from_secs(3);
    let started = Instant::now();
    let r = campaign_ops::rebuild::rebuild(&s.pool, &s.client, c.sku, &opts)
        .await
        .unwrap();
    assert!(r.flush.complete(), "{:?}", r.flush);
    assert_eq!(r.flush.consumers, 1);
    eprintln!(
        "flush answered in {} ms, rebuild took {:?}",
        r.flush.waited_ms,
        started.elapsed()
    );
    assert!(
        started.elapsed() < test_support::slack(Duration::from_secs(2)),
        "no quiesce after a complete handshake: {:?}",
        started.elapsed()
    );

    consumer.stop().await;
    assert_eq!(s.count("SELECT COUNT(*) FROM consumers").await, 0);
    let r = campaign_ops::rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!((r.flush.consumers, r.flush.unanswered.len()), (0, 0));
}

/// `consumer rebuild <sku>` run as its own process (no stream consumer itself) takes part
/// too: it raises the request and the running consumer commits the record it holds in a
/// 6 s open batch at once, so the rebuild finds it in the ledger, not only in the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rebuild_command_waits_for_the_running_consumers() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_104, 3, 1, 1, 3600).await;
    let consumer = start_slow_writer(&s);
    wait_live(&s, 1, Duration::from_secs(5)).await;
    held_in_an_open_batch(&s, &c, "alice").await;

    let args = [
        "--redis".to_owned(),
        s.redis.url(),
        "--shards".to_owned(),
        SHARDS.to_string(),
        "--mysql".to_owned(),
        s.db.url(),
        "rebuild".to_owned(),
        c.sku.to_string(),
    ];
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_consumer"))
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run consumer rebuild")
    })
    .await
    .unwrap();
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["flush"]["consumers"], 1, "{r}");
    assert_eq!(r["flush"]["unanswered"], serde_json::json!([]), "{r}");
    assert_eq!(
        (r["active_units"].as_u64(), r["in_flight_units"].as_u64()),
        (Some(1), Some(0)),
        "alice committed before the rebuild's read: {r}"
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
    consumer.stop().await;
    assert_eq!(s.count("SELECT COUNT(*) FROM late_claims").await, 0);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// A Redis back from a snapshot taken before the sale's first claim, while that claim sits
/// in a live consumer's open batch and the ledger holds no claim yet: the watch must
/// rebuild (flush handshake included) before it vouches for the restored process. Vouched
/// as it is, the restored slice would offer alice's unit again and bob would buy it: 2
/// units in the ledger for a stock of 1. The model's mutant `WatchTrustsEmptyLedger`
/// (a watch that rebuilds only once the ledger has claims) does that; the watch rebuilds
/// any campaign the ledger has claims of or has rebuilt (the first preheat is a rebuild),
/// and this holds it to that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_older_than_the_first_claim_is_rebuilt_before_it_is_vouched() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_105, 1, 1, 1, 3600).await;
    let consumer = start_slow_writer(&s);
    wait_live(&s, 1, Duration::from_secs(5)).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let k = shard_router::keys::ShardKeys::new(s.client.placement(), shard, c.sku);
    held_in_an_open_batch(&s, &c, "alice").await;

    // Back from the snapshot: the slice, alice's count, sequence and answer as before her
    // claim, and a vouch naming the process that wrote the snapshot.
    let vouch = shard_router::keys::vouch(s.client.placement(), shard);
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(k.stock())
        .arg(1)
        .cmd("HDEL")
        .arg(k.users())
        .arg("alice")
        .cmd("HDEL")
        .arg(k.user_seq())
        .arg("alice")
        .cmd("DEL")
        .arg(k.request("alice", Some("r-alice")))
        .cmd("SET")
        .arg(&vouch)
        .arg("0123456789abcdef0123456789abcdef01234567")
        .query(&mut s.redis.connection())
        .unwrap();

    // This check, or the consumer's own watch racing it, rebuilds and vouches.
    let rebuilt = campaign_ops::rebuild::watch::check(&s.pool, &s.client, &rebuild_opts())
        .await
        .unwrap();
    assert!(
        until(Duration::from_secs(10), || async {
            s.client
                .server_identity(shard)
                .await
                .unwrap()
                .vouched_here()
        })
        .await,
        "the restored process was never vouched for"
    );
    let bob = claim(&s, &c, "bob").await;
    eprintln!("rebuilt={rebuilt:?} bob={bob:?}");
    wait_rows(&s.pool, c.sku, 1, Duration::from_secs(20)).await;
    consumer.stop().await;
    assert!(
        !matches!(bob, ClaimOutcome::Claimed { .. }),
        "alice's unit sold again: {bob:?}"
    );
    assert_eq!(active_units(&s, c.sku).await, 1);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}
