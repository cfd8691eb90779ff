//! Edges of the rebuild's flush handshake (docs/DESIGN.md, "Rebuild from the ledger";
//! `consumer/src/flush.rs`, `campaign-ops/src/rebuild/handshake.rs`): a reader backing off,
//! a read whose reply reaches the writer after the cut, and a stream reader with no
//! heartbeat row.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use consumer::{InFlight, Read, ShardLease, Writer};
use shard_router::stream::ShardStream;
use shard_router::ClaimOutcome;

use crate::common::rebuild::*;
use crate::common::*;

/// The consumer row's honoured request.
async fn flushed(s: &Stack) -> i64 {
    s.count("SELECT CAST(COALESCE(MAX(flushed), 0) AS SIGNED) FROM consumers")
        .await
}

/// Raises a flush request as a rebuild does; returns it.
async fn raise(s: &Stack) -> i64 {
    sqlx::query("UPDATE flush_requests SET seq = seq + 1 WHERE id = 1")
        .execute(&s.pool)
        .await
        .unwrap();
    s.count("SELECT CAST(seq AS SIGNED) FROM flush_requests WHERE id = 1")
        .await
}

/// A rebuild of `sku` with a 1.5 s pause, while one registered consumer answers and
/// `unanswered` does not: it names that one and keeps the whole pause.
async fn rebuild_keeps_its_pause(
    s: &Stack,
    sku: u64,
    unanswered: &str,
) -> campaign_ops::rebuild::Report {
    let mut opts = rebuild_opts();
    opts.quiesce = Duration::from_millis(1500);
    let (r, took) = rebuild_timed(s, sku, &opts).await;
    assert_eq!(r.flush.consumers, 1, "{:?}", r.flush);
    assert_eq!(r.flush.unanswered, [unanswered], "{:?}", r.flush);
    assert!(took >= opts.quiesce, "no pause: {took:?}");
    r
}

/// Every reader's next XREAD fails (here each stream key holds a string, WRONGTYPE) and it
/// backs off, here 8 s, longer than a rebuild waits for an answer. A failed read delivered
/// nothing, so it must not hold the flush back while its reader sleeps: the consumer
/// answers at its next beat, not after the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_backing_off_after_a_failed_read_does_not_hold_the_flush() {
    let s = Stack::start().await;
    let mut cfg = s.cfg.clone();
    cfg.datapath.backoff_min = Duration::from_secs(8);
    cfg.datapath.backoff_max = Duration::from_secs(8);
    let consumer = start_consumer(cfg);
    wait_live(&s, 1, Duration::from_secs(5)).await;

    let mut conn = s.redis.connection();
    for shard in 0..SHARDS {
        let _: () = redis::cmd("SET")
            .arg(stream_key(&s, shard))
            .arg("not a stream")
            .query(&mut conn)
            .unwrap();
    }
    // Every reader's blocked read (200 ms) ended and the next one failed.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let n = raise(&s).await;
    let started = Instant::now();
    let answered = until(Duration::from_secs(3), || async { flushed(&s).await >= n }).await;
    assert!(
        answered,
        "request {n} not answered after {:?}: the readers' backoff held it",
        started.elapsed()
    );
    consumer.stop().await;
}

/// A read sent before the cut whose entry reaches the writer only after it (the reply was
/// on its way, or the reader waited for a replica), while the writer waited on an empty
/// queue: the batch it opens holds an entry the flush waits for, so it closes at once
/// instead of after `batch_max_wait` (6 s here, longer than a rebuild waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_read_before_the_cut_and_handed_on_after_it_is_committed_at_once() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_111, 3, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, c.width)[0];
    let streams: HashMap<u16, ShardStream> = (0..SHARDS)
        .map(|sh| (sh, ShardStream::new(&s.client, sh)))
        .collect();
    let leases: HashMap<u16, ShardLease> = streams
        .iter()
        .map(|(&sh, st)| (sh, ShardLease::new(sh, st)))
        .collect();
    let mut cfg = s.cfg.clone();
    cfg.datapath.batch_max_wait = Duration::from_secs(6);
    let lease = ledger::places::acquire(
        &s.pool,
        &streams[&shard].key,
        &cfg.datapath.consumer_name,
        Duration::from_secs(60),
        T,
    )
    .await
    .unwrap()
    .expect("a free lease");
    leases[&shard].hold(lease.epoch, &lease.place);
    let inflight = InFlight::default();
    let writer = Writer {
        cfg: cfg.datapath.clone(),
        pool: s.pool.clone(),
        client: s.client.clone(),
        streams: streams.clone(),
        leases,
        inflight: inflight.clone(),
        stalls: consumer::Stalls::new(1),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let writer = tokio::spawn(writer.run(vec![rx]));

    assert_claimed(&s, &c, "alice").await;
    // The read is registered, then the heartbeat sees a request and cuts.
    let reading = inflight.begin();
    let cut = inflight.cut();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (entries, under) = streams[&shard]
        .read_after_under(&s.client, "0-0", 10, Duration::from_millis(100))
        .await
        .unwrap();
    let batch: Vec<_> = entries.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(batch.len(), 1);
    inflight.add(shard, batch.iter().map(|d| d.entry_id.as_str()), &reading);
    drop(reading);
    assert!(!inflight.flushed(cut), "alice was read before the cut");
    let handed = Instant::now();
    let to = ledger::places::Place {
        last_id: batch[0].entry_id.clone(),
        repl_id: under.replid,
    };
    tx.send(Read {
        shard,
        epoch: lease.epoch,
        from: lease.place.clone(),
        to,
        entries: batch,
        poison: Vec::new(),
    })
    .await
    .unwrap();

    let done = until(Duration::from_secs(2), || async { inflight.flushed(cut) }).await;
    assert!(
        done,
        "alice not committed {:?} after the cut's entry reached the writer",
        handed.elapsed()
    );
    assert_eq!(active_units(&s, c.sku).await, 1);
    drop(tx);
    writer.await.unwrap();
}

/// A consumer that holds a stream's lease without a heartbeat row (its row lost): the
/// handshake cannot hear from it, and it
/// may hold alice's record, read just before the rebuild. Its lease names it, so the
/// rebuild names it as unanswered and keeps the pause it took before the handshake, instead
/// of calling the handshake complete because the one registered consumer answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reader_without_a_heartbeat_keeps_the_pause() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_112, 4, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, c.width)[0];
    let old = ShardStream::new(&s.client, shard);
    assert_claimed(&s, &c, "alice").await;
    let held = ledger::places::acquire(
        &s.pool,
        &old.key,
        "old-release-1",
        Duration::from_secs(60),
        T,
    )
    .await
    .unwrap();
    assert!(held.is_some(), "the older consumer holds the stream");
    let consumer = start_consumer(s.cfg.clone());
    wait_live(&s, 1, Duration::from_secs(5)).await;

    let r = rebuild_keeps_its_pause(&s, c.sku, "old-release-1").await;
    assert!(!r.flush.complete());
    consumer.stop().await;
}

/// A consumer alive but with a stalled heartbeat (its beat waits on MySQL longer than the
/// 3 s that make a row fresh; here a lock on its row holds it) is not among the consumers
/// a rebuild waits for, though it may hold what it read before the loss. Another consumer
/// answers at once. The rebuild must not call that complete: it names the stalled one and
/// keeps the pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_whose_heartbeat_stalled_keeps_the_pause() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_113, 4, 2, 1, 3600).await;
    let mut stalled = s.cfg.clone();
    stalled.datapath.consumer_name = "stalled".into();
    let mut healthy = s.cfg.clone();
    healthy.datapath.consumer_name = "healthy".into();
    let stalled = start_consumer(stalled);
    let healthy = start_consumer(healthy);
    wait_live(&s, 2, Duration::from_secs(5)).await;

    let instance: String =
        sqlx::query_scalar("SELECT instance FROM consumers WHERE name = 'stalled'")
            .fetch_one(&s.pool)
            .await
            .unwrap();
    // By primary key: only that row is locked.
    let mut lock = s.pool.begin().await.unwrap();
    sqlx::query("SELECT flushed FROM consumers WHERE instance = ? FOR UPDATE")
        .bind(&instance)
        .fetch_all(&mut *lock)
        .await
        .unwrap();
    wait_live(&s, 1, Duration::from_secs(6)).await;

    rebuild_keeps_its_pause(&s, c.sku, "stalled").await;
    lock.rollback().await.unwrap();
    healthy.stop().await;
    stalled.stop().await;
}

/// A consumer that cannot register (MySQL fails its first beat; here the request counter is
/// renamed away for a moment) must not read: no rebuild would wait for what it reads, nor
/// name it. It reads once registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_reads_nothing_before_it_is_registered() {
    let s = Stack::start().await;
    let c = campaign(&s, 12_114, 3, 1, 1, 3600).await;
    let rename = |from: &str, to: &str| format!("RENAME TABLE {from} TO {to}");
    sqlx::query(&rename("flush_requests", "flush_requests_away"))
        .execute(&s.pool)
        .await
        .unwrap();
    let consumer = start_consumer(s.cfg.clone());
    assert_claimed(&s, &c, "alice").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(stream_depth(&s).await, (1, 1), "alice is not committed");
    assert_eq!(
        s.count("SELECT COUNT(*) FROM stream_offsets WHERE owner IS NOT NULL")
            .await,
        0,
        "a reader started (it holds a lease) before any rebuild could know of it"
    );
    sqlx::query(&rename("flush_requests_away", "flush_requests"))
        .execute(&s.pool)
        .await
        .unwrap();
    wait_live(&s, 1, Duration::from_secs(10)).await;
    wait_rows(&s.pool, c.sku, 1, Duration::from_secs(10)).await;
    consumer.stop().await;
}

/// On a Redis Cluster: a registered consumer that answered (and holds every stream's lease)
/// is neither unknown nor unregistered, so the handshake is complete and no pause is
/// taken; a lease owner with no row is named there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_readers_are_listed_from_every_master() {
    let s = ClusterStack::start(0).await;
    let c = open_campaign(&s.pool, &s.client, 12_115, 4, 1, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let registered = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM consumers")
            .fetch_one(&s.pool)
            .await
            .unwrap()
            == 1
    };
    assert!(until(Duration::from_secs(10), registered).await);

    let mut opts = rebuild_opts();
    opts.quiesce = Duration::from_millis(1500);
    let r = campaign_ops::rebuild::rebuild(&s.pool, &s.client, c.sku, &opts)
        .await
        .unwrap();
    assert!(r.flush.complete(), "{:?}", r.flush);

    // A reader with no heartbeat row holds a record read from one of the SKU's shards.
    let shard = s.client.placement().shards_of(c.sku, c.width)[0];
    let old = ShardStream::new(&s.client, shard);
    consumer.stop().await;
    let home = s.client.placement().home_shard(c.sku, c.width, "alice");
    assert_eq!(home, shard, "width 1: one shard");
    assert!(matches!(
        claim_on(&s.client, &c, "alice", None).await,
        ClaimOutcome::Claimed { .. }
    ));
    let held = ledger::places::acquire(
        &s.pool,
        &old.key,
        "old-release-2",
        Duration::from_secs(60),
        T,
    )
    .await
    .unwrap();
    assert!(held.is_some(), "the stopped consumer released its lease");
    let r = campaign_ops::rebuild::rebuild(&s.pool, &s.client, c.sku, &opts)
        .await
        .unwrap();
    assert!(
        r.flush.unanswered.iter().any(|n| n == "old-release-2"),
        "{:?}",
        r.flush
    );
}
