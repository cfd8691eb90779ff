//! Campaign mode `draw` through the gateway (docs/API.md "Draws"): a draw SKU's
//! `POST /v1/claims` is an entry (`draw_enter.lua`), never a claim: no slice moves and no
//! claim record is written. Its answers follow the draw through close, marks and the
//! grant, one answer per user whatever the request id. The campaign is set up with
//! shard-router's calls (`draw_open` on every shard, then the preheat), as campaign-ops does.

use crate::common::*;
use hyper::StatusCode;
use serde_json::{json, Value};
use shard_router::draw::{self, DrawSpec, DrawState, MarkBatch};
use shard_router::keys::{self, ShardKeys};
use shard_router::{now_ms, test_util, SkuDraw, SkuMeta, StockClient};
use test_support::RedisServer;

const SEED: [u8; 32] = [7; 32];

/// A draw campaign open for entries now (the draw an hour away): opened on every shard
/// of the SKU, then preheated with its draw.
async fn open_draw(client: &StockClient, sku: u64, stock: u64, width: u16) -> SkuMeta {
    // Limit 2: a claim of qty 2 would pass it, an entry of qty 2 must not.
    let mut meta = test_util::open_meta(sku, stock, width, 2);
    let draw_at_ms = now_ms() + 3_600_000;
    let spec = DrawSpec {
        sku,
        entries_open_ms: meta.start_ms,
        draw_at_ms,
        stock,
        waitlist: 1,
        seed: SEED.to_vec(),
    };
    for shard in client.placement().shards_of(sku, width) {
        client
            .draw_open(shard, &spec, DrawState::Open)
            .await
            .unwrap();
    }
    meta.mode = shard_router::SkuMode::Draw(SkuDraw {
        draw_at_ms,
        seed_sha256: draw::seed_digest(&SEED),
        seed: None,
    });
    client.preheat(&meta).await.unwrap();
    meta
}

/// Claim records on every shard of the SKU.
async fn claim_records(client: &StockClient, redis: &RedisServer, meta: &SkuMeta) -> i64 {
    let mut conn = redis.connection();
    client
        .placement()
        .shards_of(meta.sku, meta.width)
        .into_iter()
        .map(|s| {
            redis::cmd("XLEN")
                .arg(keys::claims_stream(client.placement(), s))
                .query::<i64>(&mut conn)
                .unwrap()
        })
        .sum()
}

/// Entries on every shard's entries stream.
async fn entries(client: &StockClient, meta: &SkuMeta) -> usize {
    let mut n = 0;
    for shard in client.placement().shards_of(meta.sku, meta.width) {
        n += client
            .read_entries(shard, "0-0", 1000)
            .await
            .unwrap()
            .0
            .len();
    }
    n
}

async fn enter(gw: &Gateway, sku: u64, user: &str) -> Answer {
    gw.claim(json!({"sku": sku, "user": user})).await
}

fn expect(a: &Answer, code: StatusCode, status: &str) {
    assert_eq!(a.status, code, "{}", a.body);
    assert_eq!(a.body["status"], status, "{}", a.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_follow_the_draw_and_never_claim() {
    let redis = RedisServer::start();
    let client = stock_client(&redis.url(), false).await;
    let meta = open_draw(&client, 8801, 1, 2).await;
    let sku = meta.sku;
    let digest = draw::seed_digest(&SEED);
    let gw = Gateway::start(config(&redis.url(), false)).await;
    let slices = slices_left(&client, &meta).await;

    // An entry: 202 entered; a repeat (with or without a request id) the same entry.
    let first = enter(&gw, sku, "alice").await;
    expect(&first, StatusCode::ACCEPTED, "entered");
    let entry_id = first.body["entry_id"].as_str().unwrap().to_owned();
    assert_eq!(first.body["sku"], sku);
    assert_eq!(first.body["seed_sha256"], digest.as_str());
    assert_eq!(
        first.body["draw_at_ms"],
        meta.mode.draw().unwrap().draw_at_ms
    );
    assert!(first.body.get("seed").is_none() && first.body.get("fresh").is_none());
    let again = gw
        .claim(json!({"sku": sku, "user": "alice", "request_id": "r1"}))
        .await;
    expect(&again, StatusCode::ACCEPTED, "entered");
    assert_eq!(again.body, first.body);

    // qty 2 is no entry: 400, nothing written.
    let two = gw.claim(json!({"sku": sku, "user": "bob", "qty": 2})).await;
    expect(&two, StatusCode::BAD_REQUEST, "bad_request");
    assert!(
        two.body["error"].as_str().unwrap().contains("one unit"),
        "{}",
        two.body
    );
    assert_eq!(entries(&client, &meta).await, 1);
    let bob_home = client.placement().home_shard(sku, meta.width, "bob");
    let bob: Option<String> = redis::cmd("HGET")
        .arg(ShardKeys::new(client.placement(), bob_home, sku).entrants())
        .arg("bob")
        .query(&mut redis.connection())
        .unwrap();
    assert_eq!(bob, None);

    for u in ["carol", "dave"] {
        expect(&enter(&gw, sku, u).await, StatusCode::ACCEPTED, "entered");
    }
    assert_eq!(entries(&client, &meta).await, 3);
    // No slice moved, no claim recorded.
    assert_eq!(slices_left(&client, &meta).await, slices);
    assert_eq!(claim_records(&client, &redis, &meta).await, 0);

    let v = view(gw.api, sku).await;
    assert_eq!(v["mode"], "draw");
    assert_eq!(v["seed_sha256"], digest.as_str());
    assert_eq!(v["hint"], "entries_open");
    assert!(v.get("seed").is_none(), "{v}");

    // Closed: an entrant hears the draw is coming, a stranger that entries are over.
    for shard in client.placement().shards_of(sku, meta.width) {
        client.draw_close(shard, sku).await.unwrap().unwrap();
    }
    let drawing = enter(&gw, sku, "alice").await;
    expect(&drawing, StatusCode::ACCEPTED, "drawing");
    assert_eq!(drawing.body["entry_id"], entry_id.as_str());
    expect(
        &enter(&gw, sku, "erin").await,
        StatusCode::FORBIDDEN,
        "entries_closed",
    );

    // Drawn: alice rank 1 (stock 1: won, claim pending), carol rank 2 (waitlist 1).
    let ranks = [("alice", 1), ("carol", 2)];
    for shard in client.placement().shards_of(sku, meta.width) {
        let mine: Vec<(String, u32)> = ranks
            .iter()
            .filter(|(u, _)| client.placement().home_shard(sku, meta.width, u) == shard)
            .map(|(u, r)| (u.to_string(), *r))
            .collect();
        assert!(client
            .draw_mark(shard, sku, &mine, MarkBatch::Last)
            .await
            .unwrap());
    }
    expect(
        &enter(&gw, sku, "alice").await,
        StatusCode::ACCEPTED,
        "won_pending",
    );
    let waiting = enter(&gw, sku, "carol").await;
    expect(&waiting, StatusCode::OK, "waitlisted");
    assert_eq!(waiting.body["position"], 1);
    expect(&enter(&gw, sku, "dave").await, StatusCode::GONE, "lost");
    expect(
        &enter(&gw, sku, "erin").await,
        StatusCode::FORBIDDEN,
        "entries_closed",
    );

    // The grant recorded: the winner's answer is the claim.
    let shard = client.placement().shards_of(sku, meta.width)[0];
    let claim_id = format!("{shard}-1-0");
    client
        .draw_won(sku, meta.width, "alice", &claim_id, shard)
        .await
        .unwrap();
    let won = enter(&gw, sku, "alice").await;
    expect(&won, StatusCode::CREATED, "won");
    assert_eq!(won.body["claim_id"], claim_id.as_str());
    assert_eq!(won.body["shard"], shard);
    assert_eq!(won.body["qty"], 1);
    assert_eq!(slices_left(&client, &meta).await, slices);
    assert_eq!(claim_records(&client, &redis, &meta).await, 0);
}

/// Before the window: `not_started` from memory. A draw missing on the user's home shard
/// (never opened, or lost): 503, never a claim. A first-come SKU's view says `fcfs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draw_window_missing_draw_and_modes() {
    let redis = RedisServer::start();
    let client = stock_client(&redis.url(), false).await;
    let mut early = open_draw(&client, 8802, 2, 1).await;
    early.sku = 8803;
    early.start_ms = now_ms() + 600_000;
    client.preheat(&early).await.unwrap();
    let mut missing = test_util::open_meta(8804, 2, 1, 1);
    missing.mode = early.mode.clone();
    client.preheat(&missing).await.unwrap();
    let fcfs = preheat(&client, 8805, 2, 1, 1).await;
    let gw = Gateway::start(config(&redis.url(), false)).await;

    expect(
        &enter(&gw, early.sku, "alice").await,
        StatusCode::FORBIDDEN,
        "not_started",
    );
    let slices = slices_left(&client, &missing).await;
    let gone = enter(&gw, missing.sku, "alice").await;
    expect(&gone, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(gone.headers.contains_key("retry-after"));
    assert_eq!(slices_left(&client, &missing).await, slices);
    assert_eq!(claim_records(&client, &redis, &missing).await, 0);

    let v: Value = view(gw.api, fcfs.sku).await;
    assert_eq!(v["mode"], "fcfs");
    assert!(v.get("seed_sha256").is_none(), "{v}");
    assert_eq!(view(gw.api, early.sku).await["hint"], "not_started");
}

/// Issue 38 item 8a: close-out removes a draw's keys, and a draw SKU's request reaches
/// `draw_enter.lua` for as long as the SKU metadata stays (`closeout::retire`). Each
/// entrant is told where they stood, after close-out too: a winner `won` with the claim
/// the ledger holds, everyone else `ended`, never a 503 for a draw that is over. The
/// ledger's own draw: entries through the gateway, the consumer's draw, grants and
/// close-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_close_out_a_winner_is_told_won_and_the_rest_ended() {
    use crate::common::ledger::{ingest_and_confirm, ledger, T};
    use std::time::Duration;

    let redis = RedisServer::start();
    let l = ledger(&redis).await;
    let now = now_ms();
    let (stock, waitlist) = (2u64, 1u32);
    let c = campaign_ops::campaign::Campaign {
        sku: 8806,
        name: "closed draw".into(),
        stock,
        width: 2,
        limit: 1,
        start_ms: now - 1000,
        end_ms: now + 4500,
        payment_timeout_s: 1,
    };
    l.open_draw(&c, Some((now + 2500, waitlist))).await;
    let mut cfg = config(&redis.url(), false);
    // Short, so the gateway reads the metadata again after close-out.
    cfg.cache_ttl_ms = 300;
    let gw = Gateway::start(cfg).await;
    let who: Vec<String> = (0..6).map(|i| format!("entrant-{i}")).collect();
    for u in &who {
        expect(&enter(&gw, c.sku, u).await, StatusCode::ACCEPTED, "entered");
    }
    // The consumer reads the entries, draws, grants both units; the winners pay.
    ingest_and_confirm(&l, c.sku, stock as i64).await;
    let won: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(user_id AS CHAR), claim_id FROM claims WHERE sku = ? AND request_id = 'draw'",
    )
    .bind(c.sku)
    .fetch_all(&l.pool)
    .await
    .unwrap();
    assert_eq!(won.len(), stock as usize);
    let waitlisted: String = sqlx::query_scalar(
        "SELECT CAST(user_id AS CHAR) FROM draw_ranks WHERE sku = ? AND rnk = ?",
    )
    .bind(c.sku)
    .bind(stock as u32 + 1)
    .fetch_one(&l.pool)
    .await
    .unwrap();

    let over = c.end_ms + i64::from(c.payment_timeout_s) * 1000;
    while now_ms() <= over {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    campaign_ops::closeout::close(&l.pool, &l.client, c.sku, now_ms(), T)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await; // past the cache TTL

    let mut told = Vec::new();
    for u in who.iter().map(String::as_str).chain(["stranger"]) {
        let a = enter(&gw, c.sku, u).await;
        told.push(format!("{u}: {} {}", a.status.as_u16(), a.body["status"]));
        let claim = won.iter().find(|(w, _)| w == u).map(|(_, id)| id.as_str());
        let want = match claim {
            Some(id) => {
                a.status == StatusCode::CREATED
                    && a.body["status"] == "won"
                    && a.body["claim_id"] == id
            }
            None => a.status == StatusCode::FORBIDDEN && a.body["status"] == "ended",
        };
        told.push(String::from(if want { " ok;" } else { " WRONG;" }));
    }
    let winners: Vec<&str> = won.iter().map(|(u, _)| u.as_str()).collect();
    eprintln!(
        "after close-out (won: {winners:?}, waitlisted: {waitlisted}): {}",
        told.concat()
    );
    assert!(
        !told.iter().any(|t| t.contains("WRONG")),
        "{}",
        told.concat()
    );
}
