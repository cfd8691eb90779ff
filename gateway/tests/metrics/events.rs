//! Sold-out knowledge across gateways: a second gateway learns a sell-out through Pub/Sub,
//! resyncs from Redis after its subscriber is killed, and sells again after a restock.

use std::time::Duration;

use crate::common::*;
use hyper::StatusCode;
use serde_json::json;
use shard_router::ReleaseRequest;
use test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_gateway_follows_sell_out_resync_and_restock() {
    let _one = crate::common::one_at_a_time().await;
    let redis = RedisServer::start();
    let stock = stock_client(&redis.url(), false).await;
    let meta = preheat(&stock, 4001, 4, 2, 1).await;
    let a = Gateway::start(config(&redis.url(), false)).await;
    let b = Gateway::start(config(&redis.url(), false)).await;
    assert_eq!(view(b.api, meta.sku).await["sold_out"], false);
    // Past one keep-alive ping of the subscriber: a healthy link does not reconnect.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let reconnects = "flashgate_pubsub_reconnects_total";
    assert_eq!(
        metric(&b.metrics().await, reconnects),
        0.0,
        "ping must not drop the link"
    );

    // A sells everything; B hears it on fg:events.
    let mut claims = Vec::new();
    for u in 0..6 {
        let user = format!("a{u}");
        let ans = a.claim(json!({"sku": meta.sku, "user": user})).await;
        if ans.status == StatusCode::CREATED {
            claims.push((user, ans.body));
        }
    }
    assert_eq!(claims.len(), 4);
    wait_sold_out(b.api, meta.sku, true, "B to learn the sell-out via pubsub").await;
    let ans = b.claim(json!({"sku": meta.sku, "user": "b0"})).await;
    assert_eq!(
        (ans.status, ans.kind()),
        (StatusCode::GONE, Some(ApiStatus::SoldOut))
    );

    // A unit comes back without any event (as if B missed it), then B's subscriber is
    // killed: the reconnect resyncs B from Redis.
    restock_silently(&redis, &stock, &meta);
    assert_eq!(
        view(b.api, meta.sku).await["sold_out"],
        true,
        "no event, no change"
    );
    let killed = kill_pubsub(&redis);
    assert!(killed >= 2, "both gateways subscribe");
    wait_sold_out(b.api, meta.sku, false, "B to resync after the pubsub kill").await;
    let ans = b.claim(json!({"sku": meta.sku, "user": "b1"})).await;
    assert_eq!(ans.status, StatusCode::CREATED, "{}", ans.body);
    wait_sold_out(b.api, meta.sku, true, "B to see its own sell-out").await;

    // A release publishes `restock`: B (resubscribed) sells again.
    let (user, body) = &claims[0];
    let rel = ReleaseRequest {
        sku: meta.sku,
        claim_id: body["claim_id"].as_str().unwrap().to_owned(),
        user: user.clone(),
        qty: 1,
        shard: body["shard"].as_u64().unwrap() as u16,
        home: stock.placement().home_shard(meta.sku, meta.width, user),
    };
    stock.release(&rel).await.unwrap();
    wait_sold_out(b.api, meta.sku, false, "B to hear the restock").await;
    let ans = b.claim(json!({"sku": meta.sku, "user": "b2"})).await;
    assert_eq!(ans.status, StatusCode::CREATED, "{}", ans.body);

    let text = b.metrics().await;
    assert!(
        metric(&text, "flashgate_pubsub_reconnects_total") >= 1.0,
        "{text}"
    );
    a.stop().await;
    b.stop().await;
}
