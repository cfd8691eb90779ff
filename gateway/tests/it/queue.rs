//! Campaign mode `queue` through the gateway (docs/API.md "Queues"): a queue
//! SKU's `POST /v1/claims` passes the waiting room. Joining gives a signed token; a token
//! whose position is not admitted waits (202 with position, wait and refresh), an admitted
//! one claims; a token of another user, another SKU or another key is refused and takes
//! nothing; pre-queue arrivals are placed by the shuffle at the start; once sold out every
//! waiting client hears so from memory. The admission itself is set with the shard-router
//! call the consumer's admission step makes (`queue_admit`).

use crate::common::*;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use shard_router::queue::{Place, QueueKey, QueueToken};
use shard_router::{now_ms, test_util, SkuMeta, StockClient};
use test_support::RedisServer;

const SECRET: &[u8] = b"queue-secret-for-tests-0123456789";

async fn queue_sku(client: &StockClient, sku: u64, stock: u64, start_in_ms: i64) -> SkuMeta {
    let mut meta = test_util::open_meta(sku, stock, 2, 1);
    meta.start_ms = now_ms() + start_in_ms;
    meta.mode = shard_router::SkuMode::Queue;
    client.preheat(&meta).await.unwrap();
    meta
}

fn gateway_config(redis: &RedisServer, name: &str) -> gateway::config::Config {
    let path = std::env::temp_dir().join(format!("fg-queue-{}-{name}", std::process::id()));
    std::fs::write(&path, SECRET).unwrap();
    let mut cfg = config(&redis.url(), false);
    cfg.access.queue_secret_file = Some(path);
    cfg
}

/// A claim with an optional `Queue-Token`.
async fn post(gw: &Gateway, sku: u64, user: &str, token: Option<&str>) -> Answer {
    let body = json!({"sku": sku, "user": user}).to_string();
    let headers: Vec<(&str, &str)> = token.iter().map(|t| ("queue-token", *t)).collect();
    let (status, headers, bytes) = request(
        gw.api,
        Method::POST,
        "/v1/claims",
        Some(("application/json", &body)),
        &headers,
    )
    .await
    .expect("request completes");
    Answer {
        status,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

fn token_of(a: &Answer) -> String {
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
    assert_eq!(a.body["status"], "queued", "{}", a.body);
    a.body["queue_token"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_room_admits_by_position_and_claims_only_then() {
    let redis = RedisServer::start();
    let client = stock_client(&redis.url(), false).await;
    let meta = queue_sku(&client, 8901, 2, 0).await;
    let sku = meta.sku;
    let gw = Gateway::start(gateway_config(&redis, "admit")).await;
    let slices = slices_left(&client, &meta).await;
    assert_eq!(
        view(gw.api, sku).await["mode"],
        "queue",
        "docs/API.md \"Queues\""
    );

    // Three users join after the start: tickets 1, 2, 3; nothing admitted yet.
    client.queue_admit(sku, 0, 0, None, 0).await.unwrap();
    let mut tokens = Vec::new();
    for (i, u) in ["ann", "ben", "cat"].iter().enumerate() {
        let a = post(&gw, sku, u, None).await;
        let t = token_of(&a);
        assert_eq!(a.body["position"], i as u64 + 1, "{}", a.body);
        assert!(a.body["refresh_ms"].as_u64().unwrap() >= 1000);
        assert!(a.headers.get("retry-after").is_some());
        tokens.push(t);
    }
    // A repeat without the token gets the same place (one ticket per user).
    let again = post(&gw, sku, "ann", None).await;
    assert_eq!(again.body["position"], 1, "{}", again.body);
    assert_eq!(
        slices_left(&client, &meta).await,
        slices,
        "nobody claimed yet"
    );

    // Admit two: ann and ben claim with their tokens; cat still waits, position 1.
    client.queue_admit(sku, 2, 10, None, 0).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let a = post(&gw, sku, "ann", Some(&tokens[0])).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    assert_eq!(a.body["status"], "claimed");
    let c = post(&gw, sku, "cat", Some(&tokens[2])).await;
    assert_eq!(token_of(&c), tokens[2]);
    assert_eq!(c.body["position"], 1);

    // Someone else's token, or a forged one, is refused and takes nothing.
    let stolen = post(&gw, sku, "dan", Some(&tokens[1])).await;
    assert_eq!(stolen.status, StatusCode::FORBIDDEN, "{}", stolen.body);
    assert_eq!(stolen.body["status"], "invalid_queue_token");
    let forged = QueueKey::new(b"not-the-gateways-secret")
        .unwrap()
        .sign(&QueueToken {
            sku,
            user: "dan".into(),
            place: Place::Ticket(1),
            issued_ms: now_ms(),
        });
    let f = post(&gw, sku, "dan", Some(&forged)).await;
    assert_eq!(f.status, StatusCode::FORBIDDEN, "{}", f.body);
    assert_eq!(slices_left(&client, &meta).await, slices - 1);

    // ben takes the last unit; the sold-out event reaches the cache and cat, still
    // waiting, is told at once, from memory.
    let b = post(&gw, sku, "ben", Some(&tokens[1])).await;
    assert_eq!(b.status, StatusCode::CREATED, "{}", b.body);
    wait_sold_out(gw.api, sku, true, "after the last unit").await;
    let calls = script_calls(&redis);
    let c = post(&gw, sku, "cat", Some(&tokens[2])).await;
    assert_eq!(c.status, StatusCode::GONE, "{}", c.body);
    assert_eq!(c.body["status"], "sold_out");
    assert_eq!(script_calls(&redis), calls, "answered without Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_queue_arrivals_are_shuffled_at_the_start_and_a_gateway_without_a_secret_refuses() {
    let redis = RedisServer::start();
    let client = stock_client(&redis.url(), false).await;
    let meta = queue_sku(&client, 8902, 5, 1_500).await;
    let sku = meta.sku;
    let gw = Gateway::start(gateway_config(&redis, "pre")).await;

    // Before the start: no position yet, a wait until the start.
    let users: Vec<String> = (0..40).map(|i| format!("early-{i}")).collect();
    let mut tokens = Vec::new();
    for u in &users {
        let a = post(&gw, sku, u, None).await;
        assert!(a.body["position"].is_null(), "{}", a.body);
        tokens.push(token_of(&a));
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_600)).await;
    // The start: the pre-queue's length is fixed; positions follow the keyed shuffle,
    // not the order of arrival.
    let state = client.queue_admit(sku, 0, 0, None, 0).await.unwrap();
    assert_eq!(state.pre, Some(40));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let key = QueueKey::new(SECRET).unwrap();
    let mut positions = Vec::new();
    for (u, t) in users.iter().zip(&tokens) {
        let a = post(&gw, sku, u, Some(t)).await;
        let want = state.position(Place::Pre(key.shuffle(sku, u))).unwrap();
        assert_eq!(a.body["position"], want, "{u}: {}", a.body);
        positions.push(want);
    }
    let in_order = positions.windows(2).all(|w| w[0] <= w[1]);
    assert!(
        !in_order,
        "arrival order is not the queue's order: {positions:?}"
    );
    // A late arrival queues behind the whole pre-queue.
    let late = post(&gw, sku, "late", None).await;
    assert_eq!(late.body["position"], 41, "{}", late.body);

    // A gateway with no queue secret cannot place anyone: 503, nothing taken.
    let mut cfg = config(&redis.url(), false);
    cfg.access.queue_secret_file = None;
    let bare = Gateway::start(cfg).await;
    let a = bare.claim(json!({"sku": sku, "user": "x"})).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    assert_eq!(slices_left(&client, &meta).await, 5);
}

/// A `Queue-Token` header that is not text (obs-text bytes) is a bad token, not a missing
/// one: 403 and nothing changes. It was read as absent, so the request joined the queue
/// (a ticket written) and was answered 202 with a fresh token. And a join after the start
/// but before the admission step fixed the pre-queue gets no place: 503, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_token_that_is_not_text_is_refused_and_joins_nothing() {
    let redis = RedisServer::start();
    let client = stock_client(&redis.url(), false).await;
    let meta = queue_sku(&client, 8903, 2, 0).await;
    let sku = meta.sku;
    let gw = Gateway::start(gateway_config(&redis, "bytes")).await;
    let tickets = format!("{{fgq:{sku}}}:tickets");
    let held = |redis: &RedisServer| -> i64 {
        redis::cmd("HLEN")
            .arg(&tickets)
            .query(&mut redis.connection())
            .unwrap()
    };

    let early = post(&gw, sku, "ann", None).await;
    assert_eq!(
        early.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        early.body
    );
    assert_eq!(early.body["status"], "unavailable");
    assert_eq!(held(&redis), 0);

    client.queue_admit(sku, 0, 0, None, 0).await.unwrap();
    let body = format!(r#"{{"sku":{sku},"user":"ann"}}"#);
    let mut raw = format!(
        "POST /v1/claims HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nqueue-token: v1.",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(b"\xff\xfe");
    raw.extend_from_slice(format!("\r\n\r\n{body}").as_bytes());
    let a = raw::raw_exchange(gw.api, raw).await;
    assert_eq!(a.status, Some(403), "{}", a.body);
    assert_eq!(a.body["status"], "invalid_queue_token", "{}", a.body);
    assert_eq!(held(&redis), 0, "a bad header joined the queue");
    assert_eq!(slices_left(&client, &meta).await, 2);
}
