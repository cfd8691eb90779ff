//! The per-shard debt (docs/DESIGN.md, "Rebuild from the ledger", late claims): units a
//! late claim found sold again after a rebuild. Every path that grows a slice pays it first
//! (a release of any claim of the shard, a stock wave), a rebuild sets it from the ledger,
//! and reconciliation counts it, so Redis never offers a unit that does not exist and the
//! books close at 0. Checked on a real Redis and MariaDB.

use crate::common::rebuild::*;
use crate::common::*;
use campaign_ops::campaign::Campaign;
use campaign_ops::rebuild;
use campaign_ops::release::{self, Reason};
use campaign_ops::wave;
use consumer::late;
use shard_router::{ClaimOutcome, ClaimRecord};

/// The scenario of every test here, on one shard with a stock of 3: alice's claim is in a
/// consumer's memory only when Redis loses everything; the rebuild offers its unit again,
/// bob, carol and dave take all three, and alice's claim commits late and finds its unit
/// sold (`oversold`, slice 0, a debt of 1). Returns the campaign and everyone's records.
async fn short_late_apply(s: &Stack, sku: u64) -> (Campaign, Vec<ClaimRecord>) {
    let c = campaign(s, sku, 3, 1, 1, 3600).await;
    assert!(matches!(
        claim_one(s, &c, "alice", Some("r-alice")).await,
        ClaimOutcome::Claimed { .. }
    ));
    let held = read_like_a_consumer(s, &c).await;
    flushall(s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    for u in ["bob", "carol", "dave"] {
        assert!(matches!(
            claim_one(s, &c, u, Some(&format!("r-{u}"))).await,
            ClaimOutcome::Claimed { .. }
        ));
    }
    let mut records = read_like_a_consumer(s, &c).await;
    consumer::commit::write_batch(&s.pool, &records, T)
        .await
        .unwrap();
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1, "alice's claim is late");
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    // A retried apply (a second consumer, a sweep after a crash) counts nothing again.
    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(slice_sum(s, &c).await, 0);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'oversold'")
            .await,
        1
    );
    records.extend(held);
    (c, records)
}

fn id_of(records: &[ClaimRecord], user: &str) -> String {
    records
        .iter()
        .find(|r| r.user == user)
        .unwrap_or_else(|| panic!("no record of {user}"))
        .claim_id
        .clone()
}

async fn cancel(s: &Stack, records: &[ClaimRecord], user: &str) {
    release::release(
        &s.pool,
        &s.client,
        &id_of(records, user),
        Reason::Cancelled,
        T,
    )
    .await
    .unwrap();
}

/// Bob's release is the unit alice's late claim lacked: it pays the debt and the slice
/// stays at 0 (before the debt it read 1: a unit sold twice offered a third time). Carol's
/// release then finds no debt and refills. A retried release of bob's claim (same claim id
/// in the stock script again) pays nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_another_claim_pays_the_debt_before_the_slice_grows() {
    let s = Stack::start().await;
    let (c, records) = short_late_apply(&s, 14_001).await;

    cancel(&s, &records, "bob").await;
    assert_eq!(active_units(&s, c.sku).await, 3, "alice, carol, dave");
    assert_eq!(slice_sum(&s, &c).await, 0, "bob's unit paid alice's debt");

    let bob = records.iter().find(|r| r.user == "bob").unwrap();
    let again = s
        .client
        .release(&shard_router::ReleaseRequest {
            sku: c.sku,
            claim_id: bob.claim_id.clone(),
            user: bob.user.clone(),
            qty: bob.qty,
            shard: bob.shard,
            home: bob.home,
        })
        .await
        .unwrap();
    assert_eq!(again.stock, shard_router::ReleaseStep::AlreadyReleased);

    cancel(&s, &records, "carol").await;
    assert_eq!(
        slice_sum(&s, &c).await,
        1,
        "the debt is paid: carol's unit is for sale"
    );
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// A stock wave's units pay the debt first: of a wave of 2 one is for sale (before the debt
/// the slice read 2 on a stock of 5 with 4 units sold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_after_a_short_late_apply_pays_the_debt_first() {
    let s = Stack::start().await;
    let (c, _) = short_late_apply(&s, 14_002).await;
    let now = schedule_wave_now(&s, c.sku, "w1", 2).await;
    assert_eq!(
        wave::apply(&s.pool, &s.client, c.sku, "w1", now, T)
            .await
            .unwrap(),
        wave::Applied::Applied
    );
    assert_eq!(slice_sum(&s, &c).await, 1, "5 units released, 4 sold");
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.excess_removed), (0, 0), "{r:?}");
}

/// A rebuild while the debt stands (no loss: a rebuild on request) sets it from the ledger,
/// neither dropping it (bob's release would refill) nor adding to it (carol's would not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_sets_the_debt_from_the_ledger_without_doubling_it() {
    let s = Stack::start().await;
    let (c, records) = short_late_apply(&s, 14_003).await;
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(slice_sum(&s, &c).await, 0);
    cancel(&s, &records, "bob").await;
    assert_eq!(slice_sum(&s, &c).await, 0, "the rebuild kept the debt");
    cancel(&s, &records, "carol").await;
    assert_eq!(slice_sum(&s, &c).await, 1, "and did not double it");
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// Redis loses the debt with everything else: the rebuild finds the four units sold on a
/// stock of 3 in the ledger and writes the debt back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_after_a_loss_restores_the_debt_from_the_ledger() {
    let s = Stack::start().await;
    let (c, records) = short_late_apply(&s, 14_004).await;
    flushall(&s);
    let r = rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(r.oversold, 1);
    cancel(&s, &records, "bob").await;
    assert_eq!(
        slice_sum(&s, &c).await,
        0,
        "the debt came back from the ledger"
    );
    cancel(&s, &records, "carol").await;
    assert_eq!(slice_sum(&s, &c).await, 1);
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

/// With the debt outstanding the books close: slice 0 + 4 active − debt 1 = stock 3. Before
/// the debt was counted, every run reported +1 and tried to remove a unit from an empty
/// slice; after alice's release the drift stays 0 and nothing is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_counts_the_debt_and_reports_drift_0() {
    let s = Stack::start().await;
    let (c, records) = short_late_apply(&s, 14_005).await;
    let r = s.reconcile(c.sku).await;
    assert_eq!(
        (r.slices, r.active_ledger, r.debt, r.stock),
        (0, 4, 1, 3),
        "{r:?}"
    );
    assert_eq!((r.drift, r.excess_removed), (0, 0), "{r:?}");

    cancel(&s, &records, "alice").await;
    let r = s.reconcile(c.sku).await;
    assert_eq!(
        (r.slices, r.active_ledger, r.debt, r.drift, r.excess_removed),
        (0, 3, 0, 0, 0),
        "{r:?}"
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind IN ('drift', 'excess_removed')")
            .await,
        0
    );
}

/// Between a late claim's commit and its apply the ledger counts its unit while the slice
/// still offers it. Reconciliation counts that apply as pending (the claim's `late:` mark is
/// absent from the shard meta at the anchor), so it measures 0 there, not +1; and a removal
/// measured before the apply is refused after it anyway (the apply bumps the fix epoch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_excess_measured_before_a_late_apply_is_not_removed_after_it() {
    let s = Stack::start().await;
    let c = campaign(&s, 14_006, 3, 1, 1, 3600).await;
    let held = held_through_a_loss(&s, &c, "alice").await;
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1);
    let (report, figures) = campaign_ops::reconcile::measure(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    assert_eq!(
        (report.drift, report.late_pending),
        (0, 1),
        "the late window: {report:?}"
    );

    late::apply(&s.pool, &s.client, &out.late, T).await.unwrap();
    assert_eq!(slice_sum(&s, &c).await, 2);
    let removed = campaign_ops::reconcile::excess::remove(&s.pool, &s.client, c.sku, &figures, T)
        .await
        .unwrap();
    assert_eq!(removed, 0, "measured before the apply: stale");
    assert_eq!(slice_sum(&s, &c).await, 2);
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.excess_removed), (0, 0), "{r:?}");
}

/// A wave pushed to the shard (paying the debt) whose ledger step finds a rebuild ran
/// meanwhile: the rebuild wrote the shard from a stock without the wave, so its debt is
/// the ledger's again (1), and the wave's next round pays it once more. One unit of the
/// wave's two is for sale (a rebuild that left the debt as the pushed wave had paid it,
/// 0, would offer both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_pushed_again_after_a_rebuild_pays_the_rebuilt_debt() {
    let s = Stack::start().await;
    let (c, _) = short_late_apply(&s, 14_007).await;
    let now = schedule_wave_now(&s, c.sku, "w2", 2).await;
    let pushed = wave::push(&s.pool, &s.client, c.sku, "w2", T)
        .await
        .unwrap();
    let wave::Pushed::Shards { units, gen } = pushed else {
        panic!("{pushed:?}")
    };
    assert_eq!(slice_sum(&s, &c).await, 1);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    assert_eq!(
        slice_sum(&s, &c).await,
        0,
        "stock 3 without the wave, 4 sold"
    );
    assert!(wave::finish(&s.pool, c.sku, "w2", units, gen, now, T)
        .await
        .is_err());
    assert_eq!(
        wave::apply(&s.pool, &s.client, c.sku, "w2", now, T)
            .await
            .unwrap(),
        wave::Applied::Applied
    );
    assert_eq!(slice_sum(&s, &c).await, 1, "5 units released, 4 sold");
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.debt, r.excess_removed), (0, 0, 0), "{r:?}");
}

/// Alice's claim (stock 3, one shard) committed late and not applied yet, then Redis and
/// the ledger as `late` leaves them: the rebuild offers 3 units, the ledger counts 1.
async fn late_committed_not_applied(
    s: &Stack,
    sku: u64,
) -> (
    Campaign,
    Vec<ledger::claims::Late<shard_router::ClaimRecord>>,
) {
    let c = campaign(s, sku, 3, 1, 1, 3600).await;
    assert!(matches!(
        claim_one(s, &c, "alice", Some("r-alice")).await,
        ClaimOutcome::Claimed { .. }
    ));
    let held = read_like_a_consumer(s, &c).await;
    flushall(s);
    rebuild::rebuild(&s.pool, &s.client, c.sku, &rebuild_opts())
        .await
        .unwrap();
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    assert_eq!(out.late.len(), 1);
    (c, out.late)
}

/// The gap the fix epoch could not close: a reconciliation that runs wholly between a late
/// claim's commit and its apply measured the claim as +1 excess and removed a unit; the
/// apply then took the unit again (slice 1 on a stock of 3 with 1 sold: a unit stuck,
/// never sold). The pending apply is counted, so nothing is removed and the books close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_before_a_late_apply_takes_nothing_of_its_units() {
    let s = Stack::start().await;
    let (c, late_claims) = late_committed_not_applied(&s, 14_008).await;
    let r = s.reconcile(c.sku).await;
    assert_eq!(
        (r.drift, r.excess_removed, r.late_pending),
        (0, 0, 1),
        "{r:?}"
    );
    assert_eq!(slice_sum(&s, &c).await, 3, "the apply has not run yet");

    late::apply(&s.pool, &s.client, &late_claims, T)
        .await
        .unwrap();
    assert_eq!(slice_sum(&s, &c).await, 2, "3 units, alice's sold");
    let r = s.reconcile(c.sku).await;
    assert_eq!(
        (r.drift, r.excess_removed, r.late_pending),
        (0, 0, 0),
        "{r:?}"
    );
}

/// The same with the late claim released before its apply: the release gave its unit to
/// the slice (4 on a stock of 3) and the apply takes it back. Measured as +1 and removed,
/// the apply then left 2 on a stock of 3 with nothing sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_claim_released_before_its_apply_is_not_removed_as_excess() {
    let s = Stack::start().await;
    let (c, late_claims) = late_committed_not_applied(&s, 14_009).await;
    release::release(
        &s.pool,
        &s.client,
        &late_claims[0].claim.claim_id,
        Reason::Cancelled,
        T,
    )
    .await
    .unwrap();
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.excess_removed), (0, 0), "{r:?}");

    late::apply(&s.pool, &s.client, &late_claims, T)
        .await
        .unwrap();
    assert_eq!(slice_sum(&s, &c).await, 3, "nothing sold");
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.excess_removed), (0, 0), "{r:?}");
}

/// Redis comes back older than the ledger (a restart from an old snapshot, a failover
/// rollback): the slice of a stock of 3, all 3 sold and committed, reads 2 again, and two
/// more claims sell it before a reconciliation runs. 5 sold on 3: an excess of 2 the empty
/// slice cannot give. Those units are sold beyond the slice, which is the shard's debt:
/// without it the drift stayed +2 for good and a release of any claim put its unit on sale
/// again (a sold unit offered a third time). With it the books close and releases pay it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_excess_the_slice_cannot_give_becomes_the_debt() {
    let s = Stack::start().await;
    let c = campaign(&s, 14_010, 3, 1, 1, 3600).await;
    let shard = s.client.placement().shards_of(c.sku, 1)[0];
    let key = shard_router::keys::ShardKeys::new(s.client.placement(), shard, c.sku).stock();
    let mut sold = Vec::new();
    for u in ["a", "b", "c"] {
        assert!(matches!(
            claim_one(&s, &c, u, None).await,
            ClaimOutcome::Claimed { .. }
        ));
    }
    let first = read_like_a_consumer(&s, &c).await;
    consumer::commit::write_batch(&s.pool, &first, T)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(2)
        .query(&mut s.redis.connection())
        .unwrap();
    for u in ["d", "e"] {
        assert!(matches!(
            claim_one(&s, &c, u, None).await,
            ClaimOutcome::Claimed { .. }
        ));
    }
    let all = read_like_a_consumer(&s, &c).await;
    consumer::commit::write_batch(&s.pool, &all, T)
        .await
        .unwrap();
    sold.extend(all);
    assert_eq!(active_units(&s, c.sku).await, 5);

    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.excess_removed), (2, 0), "{r:?}");
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.debt), (0, 2), "the rest is the debt: {r:?}");
    cancel(&s, &sold, "d").await;
    assert_eq!(slice_sum(&s, &c).await, 0, "d's unit paid the debt");
    cancel(&s, &sold, "e").await;
    cancel(&s, &sold, "a").await;
    assert_eq!(
        slice_sum(&s, &c).await,
        1,
        "debt paid: a's unit is for sale"
    );
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.debt), (0, 0), "{r:?}");
}

/// A writer that crashed between a short apply in Redis and its `oversold` row: the sweep's
/// retry finds the claim applied. The oversell must still be recorded (DESIGN.md: "never
/// hidden"); the retry used to learn nothing of the shortfall and wrote no row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_apply_retried_after_a_crash_still_records_the_oversell() {
    let s = Stack::start().await;
    let c = campaign(&s, 14_011, 3, 1, 1, 3600).await;
    let held = held_through_a_loss(&s, &c, "alice").await;
    for u in ["bob", "carol", "dave"] {
        assert!(matches!(
            claim_one(&s, &c, u, None).await,
            ClaimOutcome::Claimed { .. }
        ));
    }
    let out = consumer::commit::write_batch(&s.pool, &held, T)
        .await
        .unwrap();
    let l = &out.late[0];
    // The writer's Redis step, then the crash.
    let step = s
        .client
        .apply_late(&l.claim, l.gen, l.claim.shard)
        .await
        .unwrap();
    assert_eq!(
        step,
        shard_router::rebuild::LateOutcome::Applied { short: 1 }
    );
    assert_eq!(
        late::sweep(&s.pool, &s.client, Some(c.sku), T)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM anomalies WHERE kind = 'oversold'")
            .await,
        1
    );
    assert_eq!(slice_sum(&s, &c).await, 0);
}
