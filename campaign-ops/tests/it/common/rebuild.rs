//! Scaffolding the rebuild tests share: a claim through the whole protocol, Redis losing
//! everything, a rebuild's options with a short pause, and what a consumer holds in memory.

use std::time::Duration;

use campaign_ops::campaign::Campaign;
use campaign_ops::rebuild::Options;
use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::stream::{self, ShardStream};
use shard_router::{ClaimOutcome, ClaimRecord, ClaimRequest, StockClient};

use super::{start_consumer, stream_depth, Running, Stack, T};

/// One unit of `c` for `user`, through the whole claim protocol (second chance included).
pub(crate) async fn claim_one(
    s: &Stack,
    c: &Campaign,
    user: &str,
    rid: Option<&str>,
) -> ClaimOutcome {
    claim_on(&s.client, c, user, rid).await
}

/// [`claim_one`] through `client` (a cluster's, say).
pub(crate) async fn claim_on(
    client: &StockClient,
    c: &Campaign,
    user: &str,
    rid: Option<&str>,
) -> ClaimOutcome {
    let req = ClaimRequest {
        sku: c.sku,
        user: user.into(),
        qty: 1,
        request_id: rid.map(str::to_owned),
    };
    protocol::claim(
        client,
        &campaign_ops::sku::meta(c),
        &req,
        ClaimOptions::new(&LocalEmptyShards::default(), shard_router::now_ms()),
    )
    .await
    .expect("claim")
    .outcome
}

/// Redis loses everything.
pub(crate) fn flushall(s: &Stack) {
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut s.redis.connection())
        .unwrap();
}

/// A rebuild's options with a 100 ms pause before its ledger read (tests need no more).
pub(crate) fn rebuild_opts() -> Options {
    let mut o = Options::new(T);
    o.quiesce = Duration::from_millis(100);
    o
}

/// What a consumer holds in memory after reading the streams: every record of `c`.
pub(crate) async fn read_like_a_consumer(s: &Stack, c: &Campaign) -> Vec<ClaimRecord> {
    let mut out = Vec::new();
    for shard in s.client.placement().shards_of(c.sku, c.width) {
        let st = ShardStream::new(&s.client, shard);
        for e in st.all_entries(&s.client, 100).await.unwrap() {
            out.push(stream::decode(shard, &e).unwrap().record);
        }
    }
    out
}

/// Units of `sku` the ledger holds in active claims (`pending` or `confirmed`).
pub(crate) async fn active_units(s: &Stack, sku: u64) -> i64 {
    s.count(&format!(
        "SELECT CAST(COALESCE(SUM(qty), 0) AS SIGNED) FROM claims WHERE sku = {sku} \
         AND status IN ('pending', 'confirmed')"
    ))
    .await
}

/// [`claim_one`] under request id `r-<user>`.
pub(crate) async fn claim(s: &Stack, c: &Campaign, user: &str) -> ClaimOutcome {
    claim_one(s, c, user, Some(&format!("r-{user}"))).await
}

/// [`claim`], which must win a unit.
pub(crate) async fn assert_claimed(s: &Stack, c: &Campaign, user: &str) {
    assert!(matches!(
        claim(s, c, user).await,
        ClaimOutcome::Claimed { .. }
    ));
}

/// Sum of the slices Redis has (missing ones count 0).
pub(crate) async fn slice_sum(s: &Stack, c: &Campaign) -> i64 {
    s.client
        .slices(c.sku, c.width)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(_, v)| v)
        .sum()
}

/// `user` claims (request id `r-<user>`) and a consumer reads the record and holds it (not
/// committed yet): returns what it holds.
pub(crate) async fn held_by_a_consumer(s: &Stack, c: &Campaign, user: &str) -> Vec<ClaimRecord> {
    assert_claimed(s, c, user).await;
    read_like_a_consumer(s, c).await
}

/// [`held_by_a_consumer`], then Redis loses everything and the ledger rebuilds it: returns
/// what the consumer holds, which commits as a late claim.
pub(crate) async fn held_through_a_loss(s: &Stack, c: &Campaign, user: &str) -> Vec<ClaimRecord> {
    let held = held_by_a_consumer(s, c, user).await;
    flushall(s);
    campaign_ops::rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    held
}

/// Schedules wave `id` of `units` for `sku`, due now; returns now.
pub(crate) async fn schedule_wave_now(s: &Stack, sku: u64, id: &str, units: u64) -> i64 {
    let now = shard_router::now_ms();
    let w = campaign_ops::wave::Wave {
        sku,
        id: id.into(),
        units,
        due_ms: now,
    };
    campaign_ops::wave::schedule(&s.pool, &w, T).await.unwrap();
    now
}

/// Polls until `cond` holds (or `limit`, stretched by `test_support::slack`, passes);
/// returns whether it did.
pub(crate) async fn until<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + test_support::slack(limit);
    while std::time::Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Consumers registered with a recent heartbeat (`consumer/src/flush.rs`).
pub(crate) async fn live(s: &Stack) -> i64 {
    s.count(
        "SELECT COUNT(*) FROM consumers \
         WHERE beat_at >= CURRENT_TIMESTAMP(3) - INTERVAL 3 SECOND",
    )
    .await
}

/// Asserts that `n` consumers are live within `limit` (stretched as [`until`] does).
pub(crate) async fn wait_live(s: &Stack, n: i64, limit: Duration) {
    assert!(until(limit, || async { live(s).await == n }).await);
}

/// A rebuild of `sku` under `opts`; returns its report and how long it took.
pub(crate) async fn rebuild_timed(
    s: &Stack,
    sku: u64,
    opts: &Options,
) -> (campaign_ops::rebuild::Report, Duration) {
    let started = std::time::Instant::now();
    let r = campaign_ops::rebuild::rebuild(&s.pool, &s.client, sku, opts)
        .await
        .unwrap();
    (r, started.elapsed())
}

/// A consumer on `s` whose batches stay open 6 s (a slow writer; longer than a rebuild
/// waits).
pub(crate) fn start_slow_writer(s: &Stack) -> Running {
    let mut cfg = s.cfg.clone();
    cfg.datapath.batch_max_wait = Duration::from_secs(6);
    start_consumer(cfg)
}

/// `user` claims a unit of `c` and a running consumer reads the record and holds it
/// uncommitted, in an open batch under [`start_slow_writer`]. An XREAD leaves no trace in
/// Redis: the reader, blocked on the stream, has it within milliseconds; 2 s leave it far
/// more while the 6 s batch is still open, which the ledger shows.
pub(crate) async fn held_in_an_open_batch(s: &Stack, c: &Campaign, user: &str) {
    assert_claimed(s, c, user).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        stream_depth(s).await.1,
        1,
        "{user}'s record is not committed yet"
    );
}
