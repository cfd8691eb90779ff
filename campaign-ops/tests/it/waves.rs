//! Waves declared by `consumer campaign --wave`: a rerun without a flag cancels that wave
//! while it adds nothing yet; an applied wave and a wave from `consumer wave` stay.

use crate::common::{campaign, Stack, T};
use campaign_ops::wave::{self, Wave};

fn wave_at(sku: u64, id: &str, units: u64) -> Wave {
    Wave {
        sku,
        id: id.into(),
        units,
        // Due in an hour: nothing applies it unless the test does.
        due_ms: shard_router::now_ms() + 3_600_000,
    }
}

async fn ids(s: &Stack, sku: u64) -> Vec<String> {
    let mut v: Vec<String> = wave::list(&s.pool, sku, T)
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    v.sort();
    v
}

// Multi-threaded: the refused apply at the end leaves its rollback to the pool, which must
// run while the test database is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_dropped_from_the_campaign_flags_is_cancelled_unless_applied() {
    let s = Stack::start().await;
    let c = campaign(&s, 71, 10, 2, 1, 60).await;
    for id in ["now+10m=5", "now+20m=3", "now+30m=2"] {
        wave::schedule_for_campaign(&s.pool, &wave_at(c.sku, id, 1), T)
            .await
            .unwrap();
    }
    wave::schedule(&s.pool, &wave_at(c.sku, "manual", 4), T)
        .await
        .unwrap();
    let now = shard_router::now_ms();
    let applied = wave::apply(&s.pool, &s.client, c.sku, "now+30m=2", now, T)
        .await
        .unwrap();
    assert_eq!(applied, wave::Applied::Applied);

    // The rerun lists only the first flag.
    let dropped = wave::cancel_dropped(&s.pool, c.sku, &["now+10m=5".to_owned()], T)
        .await
        .unwrap();
    assert_eq!(dropped.cancelled, vec!["now+20m=3".to_owned()]);
    assert_eq!(
        dropped.kept,
        vec!["now+30m=2".to_owned()],
        "an applied wave's units are in the stock and stay"
    );
    assert_eq!(
        ids(&s, c.sku).await,
        ["manual", "now+10m=5", "now+30m=2"],
        "a wave from `consumer wave` is never cancelled by a campaign rerun"
    );
    // Idempotent: a second rerun with the same flags changes nothing.
    let again = wave::cancel_dropped(&s.pool, c.sku, &["now+10m=5".to_owned()], T)
        .await
        .unwrap();
    assert!(again.cancelled.is_empty());
    // A cancelled wave can no longer be applied.
    let gone = wave::apply(&s.pool, &s.client, c.sku, "now+20m=3", now, T).await;
    assert!(gone.is_err(), "{gone:?}");
}
