//! `GET /v1/skus/{sku}`: availability as this gateway sees it. Served from the sold-out
//! cache (one load from Redis on a miss), so it is as fresh as the cache: see `cache.rs`
//! for the staleness bound. A draw SKU (campaign mode `draw`) also shows its draw time,
//! its seed's digest, and the seed once revealed.

use hyper::StatusCode;
use serde_json::{Map, Value};
use shard_router::ApiStatus;

use crate::app::App;
use crate::reply::{Reply, Retry};

pub(crate) async fn handle(app: &App, sku: &str) -> Reply {
    let Ok(sku) = sku.parse::<u64>() else {
        return Reply::bad_request(format!("sku {sku:?} is not an unsigned integer"));
    };
    let Some(client) = app.link.client() else {
        return Reply::unavailable("not connected to redis yet");
    };
    let state = match app.cache.get(client, sku).await {
        Ok(Some(s)) => s,
        Ok(None) => return Reply::unknown_sku(sku),
        Err(e) => return Reply::redis_trouble(&e, Retry::Safe),
    };
    let meta = &state.meta;
    let now = app.link.now_ms();
    let sold_out = state.all_empty();
    let hint = match meta.mode.draw() {
        _ if now < meta.start_ms => "not_started",
        // A draw's units go to its winners: availability is where its entries stand.
        Some(d) if now < d.draw_at_ms => "entries_open",
        Some(d) if d.seed.is_none() => "drawing",
        Some(_) => "drawn",
        None if now >= meta.end_ms => "ended",
        None if sold_out => "sold_out",
        None => "available",
    };
    let mut body = Map::new();
    body.insert("sku".into(), Value::from(sku));
    body.insert("sold_out".into(), Value::from(sold_out));
    body.insert("hint".into(), Value::from(hint));
    body.insert("shards".into(), Value::from(state.shards().to_vec()));
    body.insert("empty_shards".into(), Value::from(state.empty_shards()));
    body.insert("limit".into(), Value::from(meta.limit));
    body.insert("start_ms".into(), Value::from(meta.start_ms));
    body.insert("end_ms".into(), Value::from(meta.end_ms));
    body.insert("mode".into(), Value::from(meta.mode.name()));
    if let Some(d) = meta.mode.draw() {
        body.insert("draw_at_ms".into(), Value::from(d.draw_at_ms));
        body.insert("seed_sha256".into(), Value::from(d.seed_sha256.as_str()));
        if let Some(seed) = &d.seed {
            body.insert("seed".into(), Value::from(seed.as_str()));
        }
    }
    Reply::json(StatusCode::OK, ApiStatus::Ok, body)
}
