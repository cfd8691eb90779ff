//! Campaign updates from operators: a preheated SKU keeps its stock (preheat never
//! overwrites live slices, so a new stock would reach the ledger but not Redis); other
//! fields may change, and a campaign not yet preheated may change its stock.

use crate::common::*;
use campaign_ops::campaign;
use campaign_ops::OpsError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_of_a_preheated_campaign_cannot_change() {
    let s = Stack::start().await;
    let c = campaign(&s, 8101, 10, SHARDS, 1, 3600).await;

    let mut lower = c.clone();
    lower.stock = 5;
    let e = campaign::put_checked(&s.pool, &s.client, &lower, SHARDS, T)
        .await
        .unwrap_err();
    assert!(matches!(e, OpsError::Invalid(_)), "{e}");
    assert!(e.to_string().contains("preheated"), "{e}");
    assert_eq!(campaign::get(&s.pool, c.sku, T).await.unwrap().stock, 10);
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 8101")
            .await,
        10,
        "nothing changed"
    );

    let mut other = c.clone();
    other.limit = 2;
    campaign::put_checked(&s.pool, &s.client, &other, SHARDS, T)
        .await
        .expect("limit may change");
    assert_eq!(campaign::get(&s.pool, c.sku, T).await.unwrap().limit, 2);

    // Not preheated yet: the stock may still change.
    let mut fresh = c.clone();
    fresh.sku = 8102;
    campaign::put_checked(&s.pool, &s.client, &fresh, SHARDS, T)
        .await
        .unwrap();
    fresh.stock = 20;
    campaign::put_checked(&s.pool, &s.client, &fresh, SHARDS, T)
        .await
        .expect("stock of a campaign not yet preheated");
    assert_eq!(campaign::get(&s.pool, 8102, T).await.unwrap().stock, 20);
}
