//! The campaign lifecycle after the preheat: stock waves (atomic, published, never added
//! twice) and close-out (closing report, Redis cleaned, series gone, idempotent, crash-safe,
//! never on a live campaign; the SKU metadata kept for replays until its answers expired).

use std::time::{Duration, Instant};

use crate::common::*;
use campaign_ops::campaign::{self, Campaign};
use campaign_ops::{closeout, wave};
use futures::StreamExt;

async fn slices_sum(s: &Stack, c: &Campaign) -> i64 {
    s.client
        .slices(c.sku, c.width)
        .await
        .unwrap()
        .iter()
        .map(|(_, v)| v.expect("slice"))
        .sum()
}

/// Every Redis key that names the SKU (`…:<sku>` or `…:<sku>:…`), plus its metadata, but
/// the stored answers of request ids (`…:req:<sku>:…`): close-out leaves those to their TTL.
/// Sorted, the live-set membership last.
fn keys_of(s: &Stack, sku: u64) -> Vec<String> {
    let mut conn = s.redis.connection();
    let all: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    let mut out: Vec<String> = all
        .into_iter()
        .filter(|k| k.ends_with(&format!(":{sku}")) || k.contains(&format!(":{sku}:")))
        .filter(|k| !k.contains(&format!(":req:{sku}:")))
        .collect();
    out.sort();
    let member: bool = redis::cmd("SISMEMBER")
        .arg(shard_router::keys::SKU_SET)
        .arg(sku)
        .query(&mut conn)
        .unwrap();
    if member {
        out.push("fg:skus member".into());
    }
    out
}

/// What close-out keeps of a SKU besides its stored answers, until `closeout::retire`.
fn kept(sku: u64) -> Vec<String> {
    vec![
        shard_router::keys::sku_meta(sku),
        "fg:skus member".to_owned(),
    ]
}

/// Moves a closed campaign's `closed_ms` back past its answers' TTL and the margin.
async fn age_close_out(s: &Stack, sku: u64) {
    let past = s.client.config().request_ttl + closeout::RETIRE_MARGIN;
    sqlx::query("UPDATE campaigns SET closed_ms = closed_ms - ? WHERE sku = ?")
        .bind(past.as_millis() as i64 + 1000)
        .bind(sku)
        .execute(&s.pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_reopens_a_sold_out_sale_once_and_publishes_restock() {
    let s = Stack::start().await;
    let c = campaign(&s, 9201, 10, 3, 1, 3600).await;
    let consumer = start_consumer(s.cfg.clone());
    assert_eq!(claim_all(&s.client, &c, users("a", 12), 4).await.len(), 10);
    assert_eq!(slices_sum(&s, &c).await, 0);

    let redis = redis::Client::open(s.redis.url()).unwrap();
    let mut sub = redis.get_async_pubsub().await.unwrap();
    sub.subscribe(shard_router::keys::EVENTS_CHANNEL)
        .await
        .unwrap();
    let w = wave::Wave {
        sku: c.sku,
        id: "round-2".into(),
        units: 5,
        // Applied by hand below; due later, so the running consumer leaves it alone.
        due_ms: shard_router::now_ms() + 3_600_000,
    };
    wave::schedule(&s.pool, &w, T).await.unwrap();
    let now = shard_router::now_ms();
    let first = wave::apply(&s.pool, &s.client, c.sku, "round-2", now, T).await;
    assert_eq!(first.unwrap(), wave::Applied::Applied);
    let msg = tokio::time::timeout(Duration::from_secs(5), sub.on_message().next())
        .await
        .expect("restock within 5 s")
        .unwrap();
    let text: String = msg.get_payload().unwrap();
    assert!(text.starts_with(&format!("restock {} ", c.sku)), "{text}");

    // A retry, and a crash between Redis and the ledger (simulated by undoing the ledger
    // half), add nothing to the slices.
    let again = wave::apply(&s.pool, &s.client, c.sku, "round-2", now, T).await;
    assert_eq!(again.unwrap(), wave::Applied::AlreadyApplied);
    sqlx::query("UPDATE campaign_waves SET applied_ms = NULL WHERE wave_id = 'round-2'")
        .execute(&s.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE campaigns SET stock = stock - 5 WHERE sku = 9201")
        .execute(&s.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE sku_stock SET available = available - 5 WHERE sku = 9201")
        .execute(&s.pool)
        .await
        .unwrap();
    let redo = wave::apply(&s.pool, &s.client, c.sku, "round-2", now, T).await;
    assert_eq!(redo.unwrap(), wave::Applied::Applied);
    assert_eq!(slices_sum(&s, &c).await, 5);
    assert_eq!(campaign::get(&s.pool, c.sku, T).await.unwrap().stock, 15);

    // The same id again (a rerun whose relative time resolved later) adds no wave; with
    // other units it is refused; the sale sells the wave and no more.
    let rerun = wave::Wave {
        due_ms: w.due_ms + 5000,
        ..w.clone()
    };
    wave::schedule(&s.pool, &rerun, T).await.unwrap();
    assert_eq!(wave::list(&s.pool, c.sku, T).await.unwrap().len(), 1);
    let bad = wave::Wave { units: 6, ..w };
    assert!(wave::schedule(&s.pool, &bad, T).await.is_err());
    assert_eq!(claim_all(&s.client, &c, users("b", 8), 4).await.len(), 5);
    wait_drained(&s, c.sku, 15, Duration::from_secs(20)).await;
    consumer.stop().await;
    let r = s.reconcile(c.sku).await;
    assert_eq!((r.drift, r.stock, r.active_ledger), (0, 15, 15), "{r:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_waves_are_applied_by_the_consumer_when_due() {
    let s = Stack::start().await;
    let c = campaign(&s, 9202, 4, 2, 1, 3600).await;
    let w = wave::Wave {
        sku: c.sku,
        id: "soon".into(),
        units: 6,
        due_ms: shard_router::now_ms() + 500,
    };
    wave::schedule(&s.pool, &w, T).await.unwrap();
    assert_eq!(slices_sum(&s, &c).await, 4, "not before it is due");
    let consumer = start_consumer(s.cfg.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while slices_sum(&s, &c).await != 10 {
        assert!(Instant::now() < deadline, "wave not applied within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.stop().await;
    assert_eq!(s.reconcile(c.sku).await.drift, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_out_stores_the_report_cleans_redis_and_survives_a_crash() {
    let prom = campaign_ops::metrics::install().expect("recorder");
    let s = Stack::start().await;
    let now = shard_router::now_ms();
    let c = Campaign {
        sku: 9203,
        name: "closing".into(),
        stock: 8,
        width: 2,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 1500,
        payment_timeout_s: 1,
    };
    campaign::put(&s.pool, &c, SHARDS, T).await.unwrap();
    campaign::preheat(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    let consumer = start_consumer(s.cfg.clone());
    let ids = claim_all(&s.client, &c, users("z", 5), 4).await;
    assert_eq!(ids.len(), 5);
    // One claim under a request id (left unpaid): its stored answer must outlive close-out.
    let retried = shard_router::ClaimRequest {
        sku: c.sku,
        user: "zr".into(),
        qty: 1,
        request_id: Some("again-1".into()),
    };
    let first = shard_router::protocol::claim(
        &s.client,
        &campaign_ops::sku::meta(&c),
        &retried,
        shard_router::protocol::ClaimOptions::new(
            &shard_router::protocol::LocalEmptyShards::default(),
            shard_router::now_ms(),
        ),
    )
    .await
    .unwrap()
    .outcome;
    let shard_router::ClaimOutcome::Claimed { claim: answer, .. } = first else {
        panic!("{first:?}")
    };
    wait_drained(&s, c.sku, 6, Duration::from_secs(20)).await;
    for id in &ids[..3] {
        campaign_ops::release::confirm(&s.pool, id, T)
            .await
            .unwrap();
    }
    let _ = s.reconcile(c.sku).await;

    // Live: refused, nothing changed.
    let e = closeout::close(&s.pool, &s.client, c.sku, shard_router::now_ms(), T)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cannot close yet"), "{e}");
    assert!(!keys_of(&s, c.sku).is_empty());
    assert!(!closeout::is_closing(&s.pool, c.sku, T).await.unwrap());

    // After the end and the payment timeout the sweep releases the 2 unpaid claims.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let open = s
            .count("SELECT COUNT(*) FROM claims WHERE sku = 9203 AND status <> 'confirmed' AND status <> 'released'")
            .await;
        if open == 0 && shard_router::now_ms() > c.end_ms + 1000 {
            break;
        }
        assert!(Instant::now() < deadline, "unpaid claims not released");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.stop().await;

    // A crash halfway: close-out started, report stored, some keys already gone.
    sqlx::query("UPDATE campaigns SET closing_ms = 1 WHERE sku = 9203")
        .execute(&s.pool)
        .await
        .unwrap();
    let (measured, _) = campaign_ops::reconcile::measure(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    let report = serde_json::to_string(&measured).unwrap();
    let shard = s.client.placement().shards_of(c.sku, 2)[0];
    let k = shard_router::keys::ShardKeys::new(s.client.placement(), shard, c.sku);
    let mut conn = s.redis.connection();
    let _: i64 = redis::cmd("DEL").arg(k.stock()).query(&mut conn).unwrap();
    sqlx::query("UPDATE campaigns SET closing_report = ? WHERE sku = 9203")
        .bind(&report)
        .execute(&s.pool)
        .await
        .unwrap();

    let done = closeout::close(&s.pool, &s.client, c.sku, shard_router::now_ms(), T)
        .await
        .unwrap();
    assert_eq!(done["closing_report"]["drift"], 0, "{done}");
    assert_eq!(done["closing_report"]["active_ledger"], 3, "{done}");
    assert!(done["closed_ms"].is_i64(), "{done}");
    assert_eq!(keys_of(&s, c.sku), kept(c.sku));
    // The retried request still finds its first answer, kept until its own TTL.
    let stored = s
        .client
        .stored_answer(c.sku, c.width, "zr", "again-1")
        .await
        .unwrap();
    assert_eq!(
        stored,
        Some(shard_router::StoredAnswer::Claimed(answer.clone()))
    );
    let home = s.client.placement().home_shard(c.sku, c.width, "zr");
    let key = shard_router::keys::ShardKeys::new(s.client.placement(), home, c.sku)
        .request("zr", Some("again-1"));
    let ttl: i64 = redis::cmd("TTL").arg(&key).query(&mut conn).unwrap();
    assert!(ttl > 3600, "answer kept with its own TTL, {ttl} s");
    // Idempotent, and no more reconciling.
    closeout::close(&s.pool, &s.client, c.sku, shard_router::now_ms(), T)
        .await
        .unwrap();
    let e = campaign_ops::reconcile::run(&s.pool, &s.client, c.sku, 0, T)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("closed"), "{e}");
    let text = campaign_ops::series::render(&prom);
    assert!(!text.contains("sku=\"9203\""), "{text}");

    // A refund after close-out is the ledger's alone: released, stock row back, no Redis.
    let out = campaign_ops::release::release(
        &s.pool,
        &s.client,
        &ids[0],
        campaign_ops::release::Reason::Cancelled,
        T,
    )
    .await
    .unwrap();
    assert_eq!(out, campaign_ops::release::Outcome::Released);
    assert_eq!(keys_of(&s, c.sku), kept(c.sku));
    assert_eq!(
        s.count("SELECT available FROM sku_stock WHERE sku = 9203")
            .await,
        6
    );
}

/// Close-out fences the sale before its final checks: a claim from a gateway whose clock is
/// behind (it still thinks the sale is open) is refused once close-out started, and one that
/// got in before the fence keeps close-out waiting until the ledger has settled it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_out_fences_late_claims_and_waits_for_those_already_in() {
    let s = Stack::start().await;
    let now = shard_router::now_ms();
    let c = Campaign {
        sku: 9205,
        name: "late".into(),
        stock: 4,
        width: 1,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 300,
        payment_timeout_s: 1,
    };
    campaign::put(&s.pool, &c, SHARDS, T).await.unwrap();
    campaign::preheat(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let home = s.client.placement().home_shard(c.sku, 1, "late");
    let late = |user: &str| shard_router::ClaimRequest {
        sku: c.sku,
        user: user.into(),
        qty: 1,
        request_id: None,
    };
    // Close-out started (step 2 ran) while a slow-clock gateway sold one more unit.
    sqlx::query("UPDATE campaigns SET closing_ms = 1 WHERE sku = 9205")
        .execute(&s.pool)
        .await
        .unwrap();
    let got = s
        .client
        .claim_home(&late("late"), home, c.end_ms - 1, false)
        .await
        .unwrap()
        .outcome;
    assert!(
        matches!(got, shard_router::HomeOutcome::Claimed { .. }),
        "{got:?}"
    );
    let e = closeout::close(&s.pool, &s.client, c.sku, shard_router::now_ms(), T)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("waiting"), "{e}");
    assert!(closeout::lifecycle(&s.pool, c.sku, T)
        .await
        .unwrap()
        .closing_report
        .is_none());
    // Fenced: the next late claim is refused.
    let home2 = s.client.placement().home_shard(c.sku, 1, "later");
    let refused = s
        .client
        .claim_home(&late("later"), home2, c.end_ms - 1, false)
        .await
        .unwrap()
        .outcome;
    assert_eq!(refused, shard_router::HomeOutcome::NotPreheated);
    // The consumer commits the late claim and the sweep releases it (unpaid); then it closes.
    let consumer = start_consumer(s.cfg.clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    let done = loop {
        match closeout::close(&s.pool, &s.client, c.sku, shard_router::now_ms(), T).await {
            Ok(v) => break v,
            Err(e) => assert!(Instant::now() < deadline, "not closed: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    consumer.stop().await;
    assert_eq!(done["closing_report"]["drift"], 0, "{done}");
    assert_eq!(
        s.count("SELECT COUNT(*) FROM claims WHERE sku = 9205 AND status = 'released'")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_closes_a_finished_campaign_by_itself() {
    let s = Stack::start().await;
    let now = shard_router::now_ms();
    let c = Campaign {
        sku: 9204,
        name: "auto".into(),
        stock: 4,
        width: 1,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 500,
        payment_timeout_s: 1,
    };
    campaign::put(&s.pool, &c, SHARDS, T).await.unwrap();
    campaign::preheat(&s.pool, &s.client, c.sku, T)
        .await
        .unwrap();
    let ids = claim_all(&s.client, &c, users("y", 2), 2).await;
    assert_eq!(ids.len(), 2);
    let mut cfg = s.cfg.clone();
    cfg.reconcile_interval = Duration::from_millis(300);
    let consumer = start_consumer(cfg);
    let deadline = Instant::now() + Duration::from_secs(20);
    while closeout::lifecycle(&s.pool, c.sku, T)
        .await
        .unwrap()
        .closed_ms
        .is_none()
    {
        assert!(Instant::now() < deadline, "not closed within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    consumer.stop().await;
    let life = closeout::lifecycle(&s.pool, c.sku, T).await.unwrap();
    let report = life.closing_report.expect("closing report");
    assert_eq!(report["drift"], 0, "{report}");
    // The metadata stays while replay answers may: housekeeping leaves it alone...
    campaign_ops::housekeeping::close_due(&s.cfg, &s.pool, &s.client).await;
    assert_eq!(keys_of(&s, c.sku), kept(c.sku));
    // ...until the last answer's TTL is over; then it goes, once, and a crash between its
    // two steps (metadata gone, still a member) is finished by the next round.
    age_close_out(&s, c.sku).await;
    campaign_ops::housekeeping::close_due(&s.cfg, &s.pool, &s.client).await;
    assert_eq!(keys_of(&s, c.sku), Vec::<String>::new());
    let mut conn = s.redis.connection();
    let _: i64 = redis::cmd("SADD")
        .arg(shard_router::keys::SKU_SET)
        .arg(c.sku)
        .query(&mut conn)
        .unwrap();
    let now = shard_router::now_ms();
    assert_eq!(
        closeout::retire(&s.pool, &s.client, now, T).await.unwrap(),
        vec![c.sku]
    );
    assert_eq!(keys_of(&s, c.sku), Vec::<String>::new());
    assert!(closeout::retire(&s.pool, &s.client, now, T)
        .await
        .unwrap()
        .is_empty());
}
