//! Pending-entry recovery keeps this process's own entries fresh even while the writer's
//! channel is full: entries it took over from a dead consumer wait for room there, and
//! that wait must not stop the refreshes, or another consumer takes over live work (and
//! every takeover raises the entries' delivery counts toward the dead letters).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use consumer::inflight::InFlight;
use consumer::recovery::Recovery;
use consumer::replica::{ReplicaWait, ShardReplica};
use consumer::stream::ShardStream;
use tokio::sync::mpsc;

/// Idle time (ms) of a pending entry in the group.
async fn idle_ms(s: &Stack, st: &ShardStream, id: &str) -> u64 {
    let mut conn = s.client.conn();
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(&st.key)
        .arg(&st.group)
        .arg(id)
        .arg(id)
        .arg(1)
        .query_async(&mut conn)
        .await
        .expect("xpending");
    rows.first().expect("still pending").2
}

#[tokio::test]
async fn own_entries_stay_fresh_while_taken_over_work_waits_for_the_writer() {
    let s = Stack::start().await;
    let mut cfg = s.cfg.clone();
    cfg.replica_wait = ReplicaWait::Off;
    let c = campaign(&s, 7301, 100, 1, 10, 600).await;
    assert_eq!(claim_all(&s.client, &c, users("u", 2), 1).await.len(), 2);
    let mut shard = None;
    for sh in 0..SHARDS {
        let st = ShardStream::new(&s.client, sh, &cfg.group);
        st.ensure_group(&s.client).await.unwrap();
        if st.depth(&s.client).await.unwrap().len == 2 {
            shard = Some(st);
        }
    }
    let st = shard.expect("both claims on the campaign's one shard");
    // A consumer that died holds the first entry; this process is committing the second.
    let block = Duration::from_millis(10);
    let dead = st.read_new(&s.client, "died", 1, block).await.unwrap();
    let mine = st
        .read_new(&s.client, &cfg.consumer_name, 1, block)
        .await
        .unwrap();
    assert_eq!((dead.len(), mine.len()), (1, 1));
    let mine = mine[0].id.clone();
    let inflight = InFlight::default();
    inflight.add(st.shard, [mine.as_str()], &inflight.begin());
    // The writer is stuck (a slow ledger): its channel is full and nobody takes from it.
    let (tx, _rx) = mpsc::channel(1);
    tx.send(Vec::new()).await.unwrap();

    let rec = Recovery {
        cfg: cfg.clone(),
        client: s.client.clone(),
        pool: s.pool.clone(),
        stream: st.clone(),
        replica: ShardReplica::new(st.shard, cfg.replica_wait),
        inflight: inflight.clone(),
        db_healthy: Arc::new(AtomicBool::new(true)),
    };
    let (stop, stopped) = consumer::signal::channel();
    let task = tokio::spawn(rec.run(tx, stopped));
    let until = Instant::now() + cfg.claim_idle * 3;
    let mut worst = 0;
    while Instant::now() < until {
        worst = worst.max(idle_ms(&s, &st, &mine).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        u128::from(worst) < cfg.claim_idle.as_millis(),
        "this process's entry sat idle {worst} ms: another consumer could take it over"
    );
    let _ = stop.send(true);
    drop(_rx);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("recovery stops")
        .unwrap();
}
