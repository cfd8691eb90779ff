//! Draw campaigns for the tests: one made and preheated, and entries.

use std::time::Duration;

use campaign_ops::draw;
use ledger::campaigns::Campaign;
use shard_router::draw::EntryOutcome;

use super::{Stack, SHARDS, T};

const WIDTH: u16 = SHARDS;

/// A draw campaign: entries open now, the draw in `draw_in`, stock `stock`.
pub(crate) async fn draw_campaign(
    s: &Stack,
    sku: u64,
    stock: u64,
    waitlist: u32,
    draw_in: Duration,
    payment_timeout_s: u32,
) -> Campaign {
    let now = shard_router::now_ms();
    let c = Campaign {
        sku,
        name: format!("draw {sku}"),
        stock,
        width: WIDTH,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 3_600_000,
        payment_timeout_s,
    };
    campaign_ops::campaign::put(&s.pool, &c, SHARDS, T)
        .await
        .unwrap();
    draw::create(&s.pool, &c, now + draw_in.as_millis() as i64, waitlist, T)
        .await
        .unwrap();
    campaign_ops::campaign::preheat(&s.pool, &s.client, sku, T)
        .await
        .unwrap();
    c
}

pub(crate) async fn enter_all(s: &Stack, sku: u64, who: &[String]) {
    for u in who {
        let got = s
            .client
            .draw_enter(sku, WIDTH, u, shard_router::now_ms())
            .await
            .unwrap();
        assert!(matches!(got, EntryOutcome::Entered { .. }), "{u}: {got:?}");
    }
}
