//! A release racing a resale (issue 38 item 8b): the release's Redis step puts a unit back
//! in the slice, another user buys it, and the consumer commits that claim before the
//! release's last ledger step. The batch's units must be taken from `sku_stock` like any
//! other's: no `stock_guard` anomaly (nothing was oversold), and `sku_stock` agrees with
//! the claim rows once the release finishes.
//!
//! The steps run in turn, each a call of the code the release and the consumer run: the
//! release's first two steps by hand (`ledger::releases::mark_releasing`, the Redis step),
//! then the resale and its batch (`consumer::commit::write_batch`), then the release
//! itself, which finds its Redis step done and finishes.

use crate::common::rebuild::*;
use crate::common::*;
use campaign_ops::release::{self, Outcome, Reason};
use shard_router::ReleaseRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resale_committed_before_the_release_finishes_takes_its_units() {
    let s = Stack::start().await;
    let c = campaign(&s, 8_301, 1, 1, 1, 3600).await;
    assert_claimed(&s, &c, "ann").await;
    consumer::commit::write_batch(&s.pool, &read_like_a_consumer(&s, &c).await, T)
        .await
        .unwrap();
    let stock = || async {
        s.count(&format!(
            "SELECT available FROM sku_stock WHERE sku = {}",
            c.sku
        ))
        .await
    };
    assert_eq!(stock().await, 0, "ann holds the only unit");
    let (ann, user, qty, shard, home, _): (String, String, u32, u16, u16, String) = {
        let id: String = sqlx::query_scalar("SELECT claim_id FROM claims WHERE user_id = 'ann'")
            .fetch_one(&s.pool)
            .await
            .unwrap();
        let (_, user, qty, shard, home, status) =
            ledger::releases::row(&s.pool, &id, T).await.unwrap();
        (id, user, qty, shard, home, status)
    };

    // Release steps 1 and 2: the ledger says `releasing`, the unit is back in the slice.
    ledger::releases::mark_releasing(&s.pool, &ann, Reason::Cancelled, T)
        .await
        .unwrap();
    s.client
        .release(&ReleaseRequest {
            sku: c.sku,
            claim_id: ann.clone(),
            user,
            qty,
            shard,
            home,
        })
        .await
        .unwrap();
    assert_eq!(slice_sum(&s, &c).await, 1, "the unit is back for sale");

    // Sold again and committed before the release's step 3.
    assert_claimed(&s, &c, "ben").await;
    let batch = consumer::commit::write_batch(&s.pool, &read_like_a_consumer(&s, &c).await, T)
        .await
        .unwrap();
    assert_eq!(batch.inserted, 1, "ben's claim, ann's read again");
    let guard_trips = format!(
        "SELECT COUNT(*) FROM anomalies WHERE kind = 'stock_guard' AND sku = {}",
        c.sku
    );
    let trips = s.count(&guard_trips).await;
    let during = stock().await;

    // Step 3.
    assert_eq!(
        release::release(&s.pool, &s.client, &ann, Reason::Cancelled, T)
            .await
            .unwrap(),
        Outcome::Released
    );
    let after = stock().await;
    let r = s.reconcile(c.sku).await;
    eprintln!(
        "stock_guard anomalies {trips}, sku_stock during the release {during}, after {after} \
         (1 unit, ben holds it), drift {}, details {:?}",
        r.drift, r.details
    );
    assert_eq!(
        trips, 0,
        "nothing was oversold: ben bought ann's returned unit"
    );
    assert_eq!(after, 0, "ben holds the only unit");
    assert_eq!(active_units(&s, c.sku).await, 1);
    assert!(
        r.drift == 0 && r.details.iter().all(|d| !d.starts_with("ledger:")),
        "{r:?}"
    );
}
