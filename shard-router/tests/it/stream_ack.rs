//! Settling committed stream entries (`lua/stream_ack.lua`): what is acknowledged leaves
//! the stream, and nothing still pending or not yet delivered does, in whatever order the
//! batches are acknowledged. On a single Redis and on a cluster (one key per call).

use std::time::Duration;

use crate::common::{Env, SHARDS};
use shard_router::stream::{Settled, ShardStream};
use shard_router::{RedisTarget, StockClient, StockConfig};
use test_support::RedisServer;

const GROUP: &str = "ledger";

async fn add(client: &StockClient, st: &ShardStream, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut conn = client.conn();
        let id: String = redis::cmd("XADD")
            .arg(&st.key)
            .arg("*")
            .arg("n")
            .arg(i)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push(id);
    }
    out
}

async fn read(client: &StockClient, st: &ShardStream, consumer: &str, n: usize) -> Vec<String> {
    st.read_new(client, consumer, n, Duration::from_millis(10))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect()
}

async fn left(client: &StockClient, st: &ShardStream) -> Vec<String> {
    st.all_entries(client, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect()
}

async fn acks_in_any_order_remove_exactly_what_was_acknowledged(env: Env) {
    let client = env.client().await;
    let st = ShardStream::new(&client, 3, GROUP);
    st.ensure_group(&client).await.unwrap();
    // 300 entries span several listpack nodes (at most 100 entries each).
    let ids = add(&client, &st, 300).await;
    let a = read(&client, &st, "a", 100).await;
    let b = read(&client, &st, "b", 100).await;
    assert_eq!([a.clone(), b.clone()].concat(), ids[..200]);

    // The newer batch first: the older one is still pending, so nothing below it goes.
    let s = st.ack_and_delete(&client, &b[50..]).await.unwrap();
    assert_eq!(s.acked, 50);
    assert_eq!(s.trimmed + s.deleted, 50, "{s:?}");
    let expect: Vec<String> = [&ids[..150], &ids[200..]].concat();
    assert_eq!(left(&client, &st).await, expect);

    // Part of the oldest batch: its first entries are gone, the rest is still pending.
    let s = st.ack_and_delete(&client, &a[..30]).await.unwrap();
    assert_eq!((s.acked, s.trimmed + s.deleted), (30, 30), "{s:?}");
    assert!(
        s.trimmed > 0,
        "the oldest entries are trimmed, not searched: {s:?}"
    );
    let expect: Vec<String> = [&ids[30..150], &ids[200..]].concat();
    assert_eq!(left(&client, &st).await, expect);

    // The rest of both batches, oldest last: undelivered entries (200..300) stay.
    st.ack_and_delete(&client, &b[..50]).await.unwrap();
    let s = st.ack_and_delete(&client, &a[30..]).await.unwrap();
    assert_eq!(s.acked, 70);
    assert_eq!(left(&client, &st).await, ids[200..]);

    // Acknowledging again (a retry after a lost reply) changes nothing.
    let s = st.ack_and_delete(&client, &a).await.unwrap();
    assert_eq!(s.acked, 0);
    assert_eq!(left(&client, &st).await, ids[200..]);
    let depth = st.depth(&client).await.unwrap();
    assert_eq!((depth.len, depth.pending), (100, 0));

    // Delivered later, acknowledged in one batch given newest first: the stream is empty.
    let mut c = read(&client, &st, "a", 500).await;
    assert_eq!(c, ids[200..]);
    c.reverse();
    let s = st.ack_and_delete(&client, &c).await.unwrap();
    assert_eq!(
        s,
        Settled {
            acked: 100,
            trimmed: 100,
            deleted: 0
        }
    );
    assert!(left(&client, &st).await.is_empty());
    assert_eq!(
        st.ack_and_delete(&client, &[]).await.unwrap(),
        Settled::default()
    );
}

/// An entry another consumer holds (pending, idle) is older than everything acknowledged
/// here: it stays, and recovery can still take it over.
async fn an_old_pending_entry_is_kept_for_recovery(env: Env) {
    let client = env.client().await;
    let st = ShardStream::new(&client, 5, GROUP);
    st.ensure_group(&client).await.unwrap();
    let ids = add(&client, &st, 5).await;
    let dead = read(&client, &st, "died", 1).await;
    let mine = read(&client, &st, "me", 10).await;
    assert_eq!(dead, ids[..1]);
    st.ack_and_delete(&client, &mine).await.unwrap();
    assert_eq!(left(&client, &st).await, ids[..1]);
    let taken = st
        .autoclaim(&client, "me", Duration::ZERO, "0-0", 10)
        .await
        .unwrap();
    let taken: Vec<String> = taken.claimed.into_iter().map(|e| e.id).collect();
    assert_eq!(taken, ids[..1]);
    st.ack_and_delete(&client, &taken).await.unwrap();
    assert!(left(&client, &st).await.is_empty());
}

#[tokio::test]
async fn single_acks_in_any_order() {
    acks_in_any_order_remove_exactly_what_was_acknowledged(Env::single()).await;
}

#[tokio::test]
async fn single_old_pending_entry() {
    an_old_pending_entry_is_kept_for_recovery(Env::single()).await;
}

#[tokio::test]
async fn cluster_acks_in_any_order() {
    acks_in_any_order_remove_exactly_what_was_acknowledged(Env::cluster()).await;
}

async fn connect(server: &RedisServer) -> StockClient {
    StockClient::connect(StockConfig::new(RedisTarget::Single(server.url()), SHARDS))
        .await
        .expect("connect")
}

/// A master whose group is behind its entries: a replica promoted before the reads of the
/// old master reached it (with two replicas, WAIT 1 of the reader's fence may have been
/// answered by the other one), or a restart from an older snapshot. A batch read on the old
/// master and committed settles here with newer ids than the group ever handed out: the
/// entries read before it on the old master (by a consumer that then dropped them, its
/// master having changed) were never delivered here and are in no ledger. They stay, to be
/// read again; only what this call names goes.
#[tokio::test]
async fn entries_the_new_master_never_delivered_stay() {
    let old = RedisServer::start();
    let new = RedisServer::start_replica_of(&old);
    let old_client = connect(&old).await;
    let st = ShardStream::new(&old_client, 2, GROUP);
    st.ensure_group(&old_client).await.unwrap();
    let ids = add(&old_client, &st, 10).await;
    let mut conn = old.connection();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(acked, 1, "the replica holds the entries");
    let mut promote = new.connection();
    redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query::<()>(&mut promote)
        .unwrap();
    // Reads the promoted replica never sees.
    let dropped = read(&old_client, &st, "b", 5).await;
    let committed = read(&old_client, &st, "a", 5).await;
    assert_eq!([dropped.clone(), committed.clone()].concat(), ids);

    let new_client = connect(&new).await;
    st.ack_and_delete(&new_client, &committed).await.unwrap();
    assert_eq!(left(&new_client, &st).await, dropped);
    assert_eq!(read(&new_client, &st, "b", 10).await, dropped);
}

/// A dead letter whose copy Redis refuses (out of memory) must not be acknowledged or
/// deleted: the copy is the claim's only record until it is in the ledger.
#[tokio::test]
async fn a_dead_letter_refused_by_redis_stays_pending() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let st = ShardStream::new(&client, 4, GROUP);
    st.ensure_group(&client).await.unwrap();
    let ids = add(&client, &st, 1).await;
    assert_eq!(read(&client, &st, "a", 1).await, ids);
    let mut conn = server.connection();
    let config = |conn: &mut redis::Connection, k: &str, v: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query::<()>(conn)
            .unwrap()
    };
    config(&mut conn, "maxmemory-policy", "noeviction");
    config(&mut conn, "maxmemory", "1");
    let r = st
        .dead_letter(&client, &ids[0], &[("n".into(), b"0".to_vec())], "test")
        .await;
    config(&mut conn, "maxmemory", "0");
    assert!(r.is_err(), "the copy was refused: {r:?}");
    assert_eq!(left(&client, &st).await, ids, "the entry is still there");
    assert_eq!(st.depth(&client).await.unwrap().pending, 1, "and pending");
    assert_eq!(st.dead_len(&client).await.unwrap(), 0);
    st.dead_letter(&client, &ids[0], &[("n".into(), b"0".to_vec())], "test")
        .await
        .unwrap();
    assert!(left(&client, &st).await.is_empty());
    assert_eq!(st.dead_len(&client).await.unwrap(), 1);
}

/// The dead-letter script names both streams of a shard: one hash slot on a cluster.
#[tokio::test]
async fn cluster_dead_letter_moves_the_entry() {
    let env = Env::cluster();
    let client = env.client().await;
    let st = ShardStream::new(&client, 7, GROUP);
    st.ensure_group(&client).await.unwrap();
    let ids = add(&client, &st, 2).await;
    assert_eq!(read(&client, &st, "a", 2).await, ids);
    st.dead_letter(&client, &ids[0], &[("n".into(), b"0".to_vec())], "test")
        .await
        .unwrap();
    assert_eq!(left(&client, &st).await, ids[1..]);
    let dead = st.dead_page(&client, None, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].get::<String>("dead_entry"), Some(ids[0].clone()));
    assert_eq!(dead[0].get::<String>("n"), Some("0".to_owned()));
    assert_eq!(st.depth(&client).await.unwrap().pending, 1);
}
