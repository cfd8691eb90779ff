//! Reconciliation reads a shard in bounded pages (`campaign-ops/src/reconcile/snapshot.rs`): no
//! single Redis call grows with the stream or the release set, and a snapshot spread over
//! many pages is as exact as one atomic read (drift 0, and the exact figure when wrong).
//! The bound's figures at another size: `FG_PAGES_ENTRIES=50000 cargo test -p campaign-ops
//! --test it reconcile_pages::longest -- --nocapture`.

use std::time::Duration;

use crate::common::*;
use campaign_ops::reconcile::{self, Options, Report};
use campaign_ops::{release, wave};
use shard_router::keys::{self, ShardKeys};
use shard_router::ClaimRecord;

fn entries() -> usize {
    std::env::var("FG_PAGES_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// `n` claim records of `sku` on `shard` as the scripts write them, their units taken from
/// the slice, and `n` released claim ids in the release set (ids no ledger row has: they weigh on the read,
/// not on the figures).
fn fill(s: &Stack, sku: u64, shard: u16, n: usize) {
    let mut conn = s.redis.connection();
    let k = ShardKeys::new(s.client.placement(), shard, sku);
    let stream = keys::claims_stream(s.client.placement(), shard);
    for start in (0..n).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 1000).min(n) {
            let record = ClaimRecord {
                claim_id: String::new(),
                sku,
                user: format!("user-{i}"),
                qty: 1,
                user_seq: 1,
                shard,
                home: shard,
                request_id: Some(format!("r-{i}")),
                ts_ms: shard_router::now_ms(),
                gen: 0,
            };
            let add = pipe.cmd("XADD").arg(&stream).arg("*");
            for (name, value) in record.encode() {
                add.arg(name).arg(value);
            }
            add.ignore();
            pipe.cmd("SADD")
                .arg(k.released_stock())
                .arg(format!("{shard}-1-{i}"))
                .ignore();
        }
        pipe.cmd("DECRBY")
            .arg(k.stock())
            .arg((start + 1000).min(n) - start)
            .ignore();
        pipe.query::<()>(&mut conn).unwrap();
    }
}

/// Longest call in Redis's slow log (µs), with everything logged from now on.
fn slowlog_reset(s: &Stack) {
    let mut conn = s.redis.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg(100_000)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut conn).unwrap();
}

/// (µs, command name) of the longest call since the reset, and the number of calls.
fn slowlog_longest(s: &Stack) -> ((u64, String), usize) {
    let mut conn = s.redis.connection();
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    let mut longest = (0, String::new());
    for e in &log {
        let redis::Value::Array(f) = e else { continue };
        let us: u64 = redis::from_redis_value(f[2].clone()).unwrap();
        let args: Vec<Vec<u8>> = redis::from_redis_value(f[3].clone()).unwrap_or_default();
        let name = args
            .first()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .unwrap_or_default();
        if us > longest.0 {
            longest = (us, name);
        }
    }
    (longest, log.len())
}

/// Every Redis call of a reconciliation stays short with 20 000 claims in flight and 20 000
/// released ids on one shard (one atomic script took ~0.5 s there, and refused above 200 000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn longest_redis_call_of_a_reconciliation_stays_short() {
    let s = Stack::start().await;
    let n = entries();
    let c = campaign(&s, 9301, n as u64 + 10, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    fill(&s, c.sku, shard, n);
    slowlog_reset(&s);
    let started = std::time::Instant::now();
    let (r, _) = reconcile::measure(&s.pool, &s.client, c.sku, T)
        .await
        .expect("measure");
    let took = started.elapsed();
    let ((us, name), calls) = slowlog_longest(&s);
    eprintln!(
        "entries={n} released_ids={n} calls={calls} longest_call_us={us} ({name}) whole_measure_ms={}",
        took.as_millis()
    );
    assert_eq!((r.in_flight, r.drift), (n as i64, 0), "{r:#?}");
    // Catches a call of the size the old script reached (~0.5 s); a page's XRANGE took
    // 31 ms once on a machine busy with a whole test run beside it.
    let bound = test_support::slack(std::time::Duration::from_millis(100)).as_micros() as u64;
    assert!(us < bound, "a single call took {us} µs ({name})");
}

async fn run_paged(s: &Stack, sku: u64, page: usize) -> Report {
    let opts = Options {
        page,
        remove_excess: false,
        ..Default::default()
    };
    reconcile::run_with(&s.pool, &s.client, sku, shard_router::now_ms(), T, opts)
        .await
        .expect("reconcile")
}

/// With three items per Redis call, every place a claim can sit is still counted once:
/// committed, released (units back, id in the release set), in flight, and
/// a wave; then a slice raised on one shard and lowered on the other is reported exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_many_pages_is_exact_and_reports_drift_exactly() {
    let s = Stack::start().await;
    let c = campaign(&s, 9302, 200, 2, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    let committed = claim_all(&s.client, &c, users("p", 60), 4).await;
    assert_eq!(committed.len(), 60);
    wait_drained(&s, c.sku, 60, Duration::from_secs(30)).await;
    consumer.stop().await;
    for id in &committed[..20] {
        release::release(&s.pool, &s.client, id, release::Reason::Cancelled, T)
            .await
            .expect("release");
    }
    let in_flight = claim_all(&s.client, &c, users("q", 50), 4).await;
    assert_eq!(in_flight.len(), 50);
    let w = wave::Wave {
        sku: c.sku,
        id: "pages".into(),
        units: 11,
        due_ms: shard_router::now_ms() + 3_600_000,
    };
    wave::schedule(&s.pool, &w, T).await.unwrap();
    wave::apply(&s.pool, &s.client, c.sku, &w.id, shard_router::now_ms(), T)
        .await
        .unwrap();

    let r = run_paged(&s, c.sku, 3).await;
    assert_eq!(
        (r.stock, r.drift, r.in_flight, r.active_ledger),
        (211, 0, 50, 40),
        "{r:#?}"
    );
    assert_eq!(r.slices, 211 - 50 - 40, "{r:#?}");

    let shards = s.client.placement().shards_of(c.sku, 2);
    let mut conn = s.redis.connection();
    for (shard, by) in [(shards[0], 4), (shards[1], -1)] {
        let key = ShardKeys::new(s.client.placement(), shard, c.sku).stock();
        let _: i64 = redis::cmd("INCRBY")
            .arg(key)
            .arg(by)
            .query(&mut conn)
            .unwrap();
    }
    let r = run_paged(&s, c.sku, 3).await;
    let per_shard: Vec<(u16, i64)> = r.shards.iter().map(|f| (f.shard, f.drift)).collect();
    assert_eq!(r.drift, 3, "{r:#?}");
    assert_eq!(per_shard, vec![(shards[0], 4), (shards[1], -1)], "{r:#?}");
}
