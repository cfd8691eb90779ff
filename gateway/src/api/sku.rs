//! `GET /v1/skus/{sku}`: availability as this gateway sees it. Served from the sold-out
//! cache (one load from Redis on a miss), so it is as fresh as the cache: see `cache.rs`
//! for the staleness bound.

use hyper::StatusCode;
use serde_json::{Map, Value};
use shard_router::ApiStatus;

use crate::app::App;
use crate::reply::Reply;

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
        Err(e) => return Reply::redis_trouble(&e),
    };
    let meta = &state.meta;
    let now = app.link.now_ms();
    let sold_out = state.all_empty();
    let hint = if now < meta.start_ms {
        "not_started"
    } else if now >= meta.end_ms {
        "ended"
    } else if sold_out {
        "sold_out"
    } else {
        "available"
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
    Reply::json(StatusCode::OK, ApiStatus::Ok, body)
}
