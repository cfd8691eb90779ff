//! The waiting room's admission step with the consumer service running, on real Redis and
//! MariaDB: the stock's worth admitted at the start, more as admitted users fail to
//! claim, nothing more once sold out, and the watermark and the pre-queue's length kept
//! through a Redis loss (the ledger's marks written back).

use std::time::{Duration, Instant};

use ledger::campaigns::Campaign;
use shard_router::test_util::{claim_once, req};
use shard_router::ClaimOutcome;

use crate::common::{start_consumer, Stack, SHARDS, T};

async fn admitted_reaches(s: &Stack, sku: u64, at_least: u64, limit: Duration) -> u64 {
    let t0 = Instant::now();
    loop {
        let q = s.client.queue_state(sku).await.unwrap();
        if q.admitted >= at_least {
            return q.admitted;
        }
        assert!(
            t0.elapsed() < limit,
            "admitted {} never reached {at_least}",
            q.admitted
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_follows_the_stock_and_survives_a_redis_loss() {
    let s = Stack::start().await;
    let sku = 9_301;
    let now = shard_router::now_ms();
    let c = Campaign {
        sku,
        name: "queue".into(),
        stock: 30,
        width: SHARDS,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 3_600_000,
        payment_timeout_s: 600,
    };
    campaign_ops::campaign::put(&s.pool, &c, SHARDS, T)
        .await
        .unwrap();
    ledger::queues::create(&s.pool, sku, T).await.unwrap();
    campaign_ops::campaign::preheat(&s.pool, &s.client, sku, T)
        .await
        .unwrap();
    let meta = s.client.sku_meta(sku).await.unwrap().unwrap();
    assert!(meta.queue, "the SKU metadata carries the mode");
    // Two users in the pre-queue before the first step fixes its length.
    for u in ["early-1", "early-2"] {
        s.client
            .queue_join(sku, u, now - 5_000, c.start_ms)
            .await
            .unwrap();
    }
    let consumer = start_consumer(s.cfg.clone());

    // The first step admits the stock's worth with its headroom at once.
    let first = admitted_reaches(&s, sku, 36, Duration::from_secs(10)).await;
    assert_eq!(first, 36);
    assert_eq!(s.client.queue_state(sku).await.unwrap().pre, Some(2));
    // A third of the stock sells: fewer than the admitted claim, so more are admitted.
    for i in 0..10 {
        let r = req(sku, &format!("buyer-{i}"), None);
        assert!(matches!(
            claim_once(&s.client, &meta, &r).await,
            ClaimOutcome::Claimed { .. }
        ));
    }
    let grown = admitted_reaches(&s, sku, 37, Duration::from_secs(10)).await;
    assert!(grown > first);
    // Sold out: the watermark stops.
    for i in 10..30 {
        let r = req(sku, &format!("buyer-{i}"), None);
        assert!(matches!(
            claim_once(&s.client, &meta, &r).await,
            ClaimOutcome::Claimed { .. }
        ));
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let settled = s.client.queue_state(sku).await.unwrap().admitted;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(s.client.queue_state(sku).await.unwrap().admitted, settled);
    let t0 = Instant::now();
    loop {
        let kept: i64 = s
            .count(&format!(
                "SELECT CAST(admitted AS SIGNED) FROM queues WHERE sku = {sku}"
            ))
            .await;
        if kept as u64 == settled {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "ledger kept {kept}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Redis loses everything: once the rebuild has put the slices back, the watermark
    // and the pre-queue's length come back from the ledger (not 0, not a fresh count).
    redis::cmd("FLUSHALL")
        .query::<()>(&mut s.redis.connection())
        .unwrap();
    let back = admitted_reaches(&s, sku, settled, Duration::from_secs(20)).await;
    assert_eq!(back, settled);
    let q = s.client.queue_state(sku).await.unwrap();
    assert_eq!(q.pre, Some(2));
    consumer.stop().await;
}
