//! The consumer's place in each stream, kept in the ledger (`ledger/src/places.rs`,
//! `consumer/src/shard.rs`): the lease fences a consumer that lost it, a new master is read
//! again from its start, and consumers hand shards over without losing or doubling a claim.

use std::time::Duration;

use ledger::claims::Written;
use ledger::places::{self, Advance, Place};
use shard_router::stream::ShardStream;
use shard_router::ClaimRecord;

use crate::common::*;

fn record(sku: u64, user: &str, shard: u16, entry: &str) -> ClaimRecord {
    ClaimRecord {
        claim_id: format!("{shard}-{entry}"),
        sku,
        user: user.into(),
        qty: 1,
        user_seq: 1,
        shard,
        home: shard,
        request_id: None,
        ts_ms: shard_router::now_ms(),
        gen: 0,
    }
}

/// A consumer whose lease ran out and was taken (a pause longer than the lease) commits
/// nothing: its rows go with its refused place, and the new owner's commit stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_lost_its_lease_commits_nothing() {
    let s = Stack::start().await;
    let c = campaign(&s, 14_001, 10, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let stream = ShardStream::new(&s.client, shard).key;
    let short = Duration::from_millis(300);
    let a = places::acquire(&s.pool, &stream, "a", short, T)
        .await
        .unwrap()
        .expect("free");
    assert!(
        places::acquire(&s.pool, &stream, "b", short, T)
            .await
            .unwrap()
            .is_none(),
        "held by a"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = places::acquire(&s.pool, &stream, "b", short, T)
        .await
        .unwrap()
        .expect("a's lease ran out");
    assert!(b.epoch > a.epoch);
    assert!(!places::renew(&s.pool, &stream, "a", a.epoch, short, T)
        .await
        .unwrap());

    let rec = record(c.sku, "zed", shard, "100-1");
    let rows = [consumer::rows::row(&rec)];
    let to = Place {
        last_id: "100-1".into(),
        repl_id: "r".into(),
    };
    let moved = |l: &places::Lease| Advance {
        stream: stream.clone(),
        epoch: l.epoch,
        from: l.place.clone(),
        to: to.clone(),
    };
    let zombie = ledger::claims::write_at(&s.pool, &rows, &[moved(&a)], &[], T)
        .await
        .unwrap();
    assert!(
        matches!(zombie, Written::Fenced(ref w) if w == &[0]),
        "{zombie:?}"
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims").await,
        0,
        "rolled back"
    );
    let owner = ledger::claims::write_at(&s.pool, &rows, &[moved(&b)], &[], T)
        .await
        .unwrap();
    assert!(matches!(owner, Written::Committed(_)), "{owner:?}");
    assert_eq!(s.count("SELECT COUNT(*) FROM claims").await, 1);
    let (at, _, _) = places::get(&s.pool, &stream, T).await.unwrap().unwrap();
    assert_eq!(at, to);
    // The same read again (a retry after a timeout that did commit) is refused: its place
    // is gone, and nothing is counted twice.
    let again = ledger::claims::write_at(&s.pool, &rows, &[moved(&b)], &[], T)
        .await
        .unwrap();
    assert!(matches!(again, Written::Fenced(_)), "{again:?}");
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 14001")
            .await,
        9
    );
}

/// The place says a master under another replication id had reached an id far ahead of
/// what this master hands out (a restart that lost data, then a clock behind the old
/// master's): reading on after the place would skip every claim of this master for good.
/// The consumer reads the stream again from its start and commits them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_master_is_read_again_from_the_start() {
    let s = Stack::start().await;
    let c = campaign(&s, 14_002, 40, SHARDS, 1, 3600).await;
    for shard in 0..SHARDS {
        let key = ShardStream::new(&s.client, shard).key;
        sqlx::query(
            "INSERT INTO stream_offsets (stream, last_id, repl_id) VALUES (?, ?, 'an-old-master')",
        )
        .bind(&key)
        .bind(format!("{}-0", shard_router::now_ms() + 86_400_000))
        .execute(&s.pool)
        .await
        .unwrap();
    }
    let ids = claim_all(&s.client, &c, users("n", 40), 4).await;
    assert_eq!(ids.len(), 40);
    let consumer = start_consumer(s.cfg.clone());
    wait_rows(&s.pool, c.sku, 40, Duration::from_secs(20)).await;
    consumer.stop().await;
    let replid = s
        .count("SELECT COUNT(*) FROM stream_offsets WHERE repl_id = 'an-old-master'")
        .await;
    assert_eq!(replid, 0, "every place now names this master");
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
}

/// Two consumers under load: each shard is read by one of them at a time; one stops
/// cleanly mid-sale (its leases are released and taken at once), later the other is
/// killed (its leases run out, then a third takes them). Every claim lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_hand_shards_over_without_losing_or_doubling_a_claim() {
    let s = Stack::start().await;
    let c = campaign(&s, 14_003, 600, SHARDS, 1, 3600).await;
    let name = |n: &str| {
        let mut cfg = s.cfg.clone();
        cfg.datapath.consumer_name = n.into();
        cfg
    };
    let a = start_consumer(name("a"));
    let b = start_consumer(name("b"));
    let first = claim_all(&s.client, &c, users("x", 200), 8).await;
    a.stop().await;
    let second = claim_all(&s.client, &c, users("y", 200), 8).await;
    wait_rows(&s.pool, c.sku, 400, Duration::from_secs(20)).await;
    b.kill();
    let third = claim_all(&s.client, &c, users("z", 200), 8).await;
    let d = start_consumer(name("d"));
    wait_drained(&s, c.sku, 600, Duration::from_secs(30)).await;
    d.stop().await;
    assert_eq!(first.len() + second.len() + third.len(), 600);
    assert_eq!(
        s.count("SELECT COUNT(DISTINCT claim_id) FROM claims WHERE sku = 14003")
            .await,
        600
    );
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 14003")
            .await,
        0
    );
    assert_eq!(s.count("SELECT COUNT(*) FROM anomalies").await, 0);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// `calls` of `command` in a node's `INFO commandstats` (0 when never called).
fn calls(server: &test_support::RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// With `--read-replica` the consumer's reads go to the replica: the master serves no
/// XREAD at all, and every claim still lands once (the fence on the master confirms them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_a_replica_cost_the_master_no_read() {
    let s = Stack::start().await;
    let replica = test_support::RedisServer::start_replica_of(&s.redis);
    let c = campaign(&s, 14_004, 100, SHARDS, 1, 3600).await;
    let mut cfg = s.cfg.clone();
    cfg.datapath.read_replica = Some(replica.url());
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut s.redis.connection())
        .unwrap();
    let consumer = start_consumer(cfg);
    let ids = claim_all(&s.client, &c, users("r", 100), 8).await;
    assert_eq!(ids.len(), 100);
    wait_drained(&s, c.sku, 100, Duration::from_secs(30)).await;
    consumer.stop().await;
    assert_eq!(calls(&s.redis, "xread"), 0, "the master served a read");
    assert!(calls(&replica, "xread") > 0, "the replica served none");
    assert_eq!(
        s.count("SELECT COUNT(DISTINCT claim_id) FROM claims WHERE sku = 14004")
            .await,
        100
    );
}

/// On a Redis Cluster with a replica per master, `--read-from-replicas` sends stream reads
/// to the replicas (a share still reaches the masters, see below), and every claim lands
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_reads_go_to_the_replicas() {
    let s = ClusterStack::start(1).await;
    let c = open_campaign(&s.pool, &s.client, 14_006, 120, SHARDS, 1, 3600).await;
    let role = |n: &test_support::RedisServer| -> bool {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut n.connection())
            .unwrap();
        info.contains("role:master")
    };
    for n in s.cluster.nodes() {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut n.connection())
            .unwrap();
    }
    // The reader's client learns the replicas from CLUSTER SLOTS when it connects; a
    // replica still attaching is not listed yet (its reads would go to the master until
    // the client's next topology refresh).
    let listed = || async {
        let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut s.cluster.nodes()[0].connection())
            .unwrap();
        slots.iter().all(|range| range.len() >= 4)
    };
    assert!(
        crate::common::rebuild::until(Duration::from_secs(15), listed).await,
        "replicas listed in CLUSTER SLOTS"
    );
    let mut cfg = s.cfg.clone();
    cfg.datapath.read_from_replicas = true;
    let consumer = start_consumer(cfg);
    // A replica serves the reader's reads. Not all of them: redis-rs sends a share to the
    // masters (2 to 9 of 8 to 18 reads in this test over a dozen runs, 6 of 8 once in CI;
    // the earlier bound of a tenth failed one run in three), so no share is asserted.
    let replica_read = || async {
        s.cluster
            .nodes()
            .iter()
            .filter(|n| !role(n))
            .map(|n| calls(n, "xread"))
            .sum::<u64>()
            > 0
    };
    assert!(
        crate::common::rebuild::until(Duration::from_secs(15), replica_read).await,
        "no replica served a stream read"
    );
    let ids = claim_all(&s.client, &c, users("c", 120), 8).await;
    assert_eq!(ids.len(), 120);
    wait_rows(&s.pool, c.sku, 120, Duration::from_secs(30)).await;
    consumer.stop().await;
    let (mut on_masters, mut on_replicas) = (0, 0);
    for n in s.cluster.nodes() {
        if role(n) {
            on_masters += calls(n, "xread");
        } else {
            on_replicas += calls(n, "xread");
        }
    }
    eprintln!("stream reads: masters {on_masters}, replicas {on_replicas}");
}

/// The rebuild raises each stream's last id to the consumer's committed place as well as
/// to the claims the ledger holds: the place also passes poison entries, which are no
/// claims, and a new master handing out ids at or below it would be read only through the
/// new-master rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rebuild_floor_covers_the_committed_place() {
    let s = Stack::start().await;
    let c = campaign(&s, 14_007, 10, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let key = ShardStream::new(&s.client, shard).key;
    let place = format!("{}-7", shard_router::now_ms() + 60_000);
    sqlx::query("INSERT INTO stream_offsets (stream, last_id, repl_id) VALUES (?, ?, 'r')")
        .bind(&key)
        .bind(&place)
        .execute(&s.pool)
        .await
        .unwrap();
    crate::common::rebuild::flushall(&s);
    campaign_ops::rebuild::rebuild(
        &s.pool,
        &s.client,
        c.sku,
        &crate::common::rebuild::rebuild_opts(),
    )
    .await
    .unwrap();
    let info: Vec<redis::Value> = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(&key)
        .query(&mut s.redis.connection())
        .unwrap();
    let last = info
        .chunks(2)
        .find_map(|kv| match (&kv[0], &kv[1]) {
            (redis::Value::BulkString(k), redis::Value::BulkString(v))
                if k.as_slice() == b"last-generated-id" =>
            {
                Some(String::from_utf8(v.clone()).unwrap())
            }
            _ => None,
        })
        .expect("last-generated-id");
    assert_eq!(
        shard_router::codec::parse_entry_id(&last),
        shard_router::codec::parse_entry_id(&place)
    );
}

/// A consumer held a read while its lease went to another consumer (MySQL unreachable
/// for longer than the lease), and Redis lost the entry meanwhile: its commit's place is
/// refused, but the rows are acknowledged claims only it still has. They are committed
/// without the place (the new owner's place stands), not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_whose_lease_moved_is_committed_without_its_place() {
    use consumer::{InFlight, Read, ShardLease, Writer};
    use std::collections::HashMap;

    let s = Stack::start().await;
    let c = campaign(&s, 14_008, 10, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let streams: HashMap<u16, ShardStream> = (0..SHARDS)
        .map(|sh| (sh, ShardStream::new(&s.client, sh)))
        .collect();
    let leases: HashMap<u16, ShardLease> = streams
        .iter()
        .map(|(&sh, st)| (sh, ShardLease::new(sh, st)))
        .collect();
    let key = streams[&shard].key.clone();
    let mine = places::acquire(&s.pool, &key, "me", Duration::from_millis(200), T)
        .await
        .unwrap()
        .expect("free");
    leases[&shard].hold(mine.epoch, &mine.place);

    let ids = claim_all(&s.client, &c, users("m", 1), 1).await;
    let (entries, under) = streams[&shard]
        .read_after_under(&s.client, "0-0", 10, Duration::from_millis(100))
        .await
        .unwrap();
    let batch: Vec<_> = entries.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(batch.len(), 1);
    // The lease runs out and another consumer takes the shard; Redis loses everything.
    tokio::time::sleep(Duration::from_millis(400)).await;
    places::acquire(&s.pool, &key, "other", Duration::from_secs(60), T)
        .await
        .unwrap()
        .expect("expired");
    crate::common::rebuild::flushall(&s);

    let writer = Writer {
        cfg: s.cfg.datapath.clone(),
        pool: s.pool.clone(),
        client: s.client.clone(),
        streams,
        leases,
        inflight: InFlight::default(),
        stalls: consumer::Stalls::new(1),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let running = tokio::spawn(writer.run(vec![rx]));
    tx.send(Read {
        shard,
        epoch: mine.epoch,
        from: mine.place.clone(),
        to: Place {
            last_id: batch[0].entry_id.clone(),
            repl_id: under.replid,
        },
        entries: batch,
        poison: Vec::new(),
    })
    .await
    .unwrap();
    drop(tx);
    running.await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT claim_id FROM claims WHERE sku = 14008")
        .fetch_all(&s.pool)
        .await
        .unwrap();
    assert_eq!(rows, ids, "the acknowledged claim is in the ledger");
    let (at, _, owner) = places::get(&s.pool, &key, T).await.unwrap().unwrap();
    assert_eq!(
        (at.last_id.as_str(), owner.as_deref()),
        ("0-0", Some("other")),
        "the new owner's place stands"
    );
}
