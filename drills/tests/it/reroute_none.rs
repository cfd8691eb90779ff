//! Drill `reroute_none_failover` (docs/DESIGN.md): durability `none`, a claim rerouted
//! (its home shard empty: hold on the home, take on another master's shard, settle keep on
//! the home), answered 201; then the home master fails over before any of its writes
//! reached the replica. The promoted home has neither the hold, nor the user's count, nor
//! the stored answer, while the take's record lives on the other master. The client
//! retries with the same request id. Required: never a second 201 for that request id,
//! never the user over the limit; the retry gets its first claim back once the consumer
//! rebuilt the home shard from the ledger and the streams.

use std::time::Duration;

use shard_router::protocol::{self, ClaimOptions, LocalEmptyShards};
use shard_router::{now_ms, ClaimOutcome, ClaimRequest};

use super::hold_failover::CutHome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerouted_claim_whose_home_fails_over_is_claimed_once() {
    let mut s = CutHome::start(13_500, "reroute_none drill").await;
    let user = s.user("victim");
    let req = ClaimRequest {
        sku: s.meta.sku,
        user: user.clone(),
        qty: 1,
        request_id: Some("once".into()),
    };
    let empties = LocalEmptyShards::default();
    let first = match protocol::claim(
        &s.client,
        &s.meta,
        &req,
        ClaimOptions::new(&empties, now_ms()),
    )
    .await
    .map(|a| a.outcome)
    {
        Ok(ClaimOutcome::Claimed {
            claim,
            rerouted: true,
        }) => claim,
        other => panic!("expected a rerouted claim: {other:?}"),
    };

    // The home master dies before replicating the hold, the count or the answer, while
    // the consumer is down (no rebuild can come first: only the fence stands between the
    // retries and a second unit); it is back after 3 s.
    s.pause().await;
    let gateway = s.fail_over_home().await;
    let r = s
        .retry_until_replayed(&gateway, &req, &first, Duration::from_secs(3))
        .await;
    // Whatever was taken reaches the ledger.
    let held = s.rows_of(&user, usize::from(r.again > 0)).await;
    s.pause().await;
    let (again, mismatch, replayed, restoring, other) =
        (r.again, r.mismatch, r.replayed, r.restoring, r.other);
    println!(
        "drill=reroute_none_failover acknowledged={} second_201={again} replay_mismatch={mismatch} \
         winner_replayed={replayed} restoring={restoring} other={other} ledger_rows_of_user={held}",
        1 + again
    );
    assert_eq!(again, 0, "a second 201 for one request id");
    assert_eq!(mismatch, 0, "the retry replayed another claim");
    assert!(replayed, "the retry never got its first claim back");
    assert!(held <= 1, "the user holds {held} units over a limit of 1");
}
