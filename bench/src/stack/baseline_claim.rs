//! [`BaselineKind::Claim`](super::baseline::BaselineKind::Claim), "hyper + one redis-rs
//! round trip running claim.lua": the Redis floor with Redis's own work of a claim in it.
//! Per request it reads and parses the body, then runs the real `lua/claim.lua` once, by
//! EVALSHA through redis-rs's multiplexed connection, on the user's home shard, with the
//! keys and arguments the gateway's first step sends (`claim_home` in
//! `shard-router/src/client/claim.rs`) and no hold (hold ttl 0), and answers as the
//! gateway would (201 claimed, 200 replay, 410, 409, 403, 404, 503). What the gateway does
//! beyond that is left out: the token check, the second chance on other shards when the
//! home shard is sold out, rate limits, the in-flight cap. The gateway's claimed answers
//! run this same single script when the home shard has stock, so their latency over this
//! one's is the gateway's own cost on a claim.
//!
//! The body is the one the gateway loads (`shard_router::claim_body`): `lua/guard.lua` in
//! front, under the process's run_id, so a shard the consumer has vouched for runs it. A
//! single Redis only.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use redis::aio::MultiplexedConnection;
use shard_router::keys::{self, ShardKeys};
use shard_router::{Placement, StockClient, StockConfig};

/// Request bodies larger than this are cut, as the gateway caps them.
const MAX_BODY: usize = 4096;

/// The arguments `bench serve-baseline` takes to be this floor.
pub fn serve_args(redis: &str, shards: u16) -> Vec<String> {
    ["--redis-url", redis, "--claim-shards", &shards.to_string()]
        .map(str::to_owned)
        .to_vec()
}

/// A claim as the load generator sends it (docs/API.md "HTTP API").
#[derive(serde::Deserialize)]
struct Claim {
    sku: u64,
    user: String,
    qty: u32,
    request_id: Option<String>,
}

struct Floor {
    conn: MultiplexedConnection,
    sha: String,
    placement: Placement,
    request_ttl_s: u64,
    /// Each SKU's width, read once from its meta (`keys::sku_meta`) as gateways cache it.
    widths: Mutex<HashMap<u64, u16>>,
}

/// Serves until the process is killed.
pub async fn serve(listen: SocketAddr, redis: String, shards: u16) -> anyhow::Result<()> {
    let floor = Arc::new(Floor::connect(&redis, shards).await?);
    let listener = plumbing::listen::bind(listen, plumbing::listen::DEFAULT_BACKLOG)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let floor = floor.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                let floor = floor.clone();
                async move {
                    let body = http_body_util::Limited::new(req.into_body(), MAX_BODY)
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let (status, body) = floor.answer(&body).await;
                    Ok::<_, std::convert::Infallible>(
                        Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(body)))
                            .expect("valid response"),
                    )
                }
            });
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

impl Floor {
    /// Reads the run_id through shard-router's own reader, then loads the guarded body.
    async fn connect(url: &str, shards: u16) -> anyhow::Result<Self> {
        let args =
            shard_router::RedisArgs::of(&shard_router::RedisTarget::Single(url.into()), shards);
        let stock = StockClient::connect(args.stock_config()?).await?;
        let run_id = stock.server_identity(0).await?.run_id;
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(shard_router::claim_body(&run_id))
            .query_async(&mut conn)
            .await?;
        Ok(Self {
            conn,
            sha,
            placement: Placement::new(shards)?,
            request_ttl_s: StockConfig::DEFAULT_REQUEST_TTL.as_secs().max(1),
            widths: Mutex::new(HashMap::new()),
        })
    }

    async fn width(&self, sku: u64) -> redis::RedisResult<Option<u16>> {
        if let Some(w) = self
            .widths
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&sku)
        {
            return Ok(Some(*w));
        }
        let w: Option<u16> = redis::cmd("HGET")
            .arg(keys::sku_meta(sku))
            .arg("width")
            .query_async(&mut self.conn.clone())
            .await?;
        if let Some(w) = w {
            let mut widths = self.widths.lock().unwrap_or_else(|p| p.into_inner());
            widths.insert(sku, w);
        }
        Ok(w)
    }

    /// The HTTP status and body the gateway would answer after this one script.
    async fn answer(&self, body: &[u8]) -> (StatusCode, String) {
        let Ok(c) = serde_json::from_slice::<Claim>(body) else {
            return refusal(StatusCode::BAD_REQUEST, "bad_request");
        };
        let home = match self.width(c.sku).await {
            Ok(Some(w)) => self.placement.home_shard(c.sku, w, &c.user),
            Ok(None) => return refusal(StatusCode::NOT_FOUND, "unknown_sku"),
            Err(_) => return refusal(StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        match self.claim(&c, home).await {
            Ok(reply) => reply_of(&c, home, &reply),
            Err(_) => refusal(StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        }
    }

    /// One EVALSHA of claim.lua: 6 keys and 6 arguments, and without a request id the 7th
    /// key and the request id and its ttl as well (`lua/claim.lua`'s header).
    async fn claim(&self, c: &Claim, home: u16) -> redis::RedisResult<Vec<redis::Value>> {
        let k = ShardKeys::new(&self.placement, home, c.sku);
        let rid = c.request_id.as_deref().filter(|r| !r.is_empty());
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha)
            .arg(if rid.is_some() { 7 } else { 6 })
            .arg(k.stock())
            .arg(k.meta())
            .arg(k.users())
            .arg(k.user_seq())
            .arg(k.holds())
            .arg(keys::claims_stream(&self.placement, home));
        if let Some(rid) = rid {
            cmd.arg(k.request(&c.user, Some(rid)));
        }
        cmd.arg(c.sku)
            .arg(&c.user)
            .arg(c.qty)
            .arg(shard_router::now_ms())
            .arg(home)
            .arg(0);
        if let Some(rid) = rid {
            cmd.arg(rid).arg(self.request_ttl_s);
        }
        cmd.query_async(&mut self.conn.clone()).await
    }
}

fn refusal(status: StatusCode, name: &str) -> (StatusCode, String) {
    (status, format!(r#"{{"status":"{name}"}}"#))
}

/// claim.lua's reply as the gateway's answer (`lua/claim.lua`'s header lists the codes).
fn reply_of(c: &Claim, home: u16, r: &[redis::Value]) -> (StatusCode, String) {
    let int = |i: usize| {
        r.get(i)
            .and_then(|v| redis::from_redis_value::<i64>(v.clone()).ok())
    };
    let text = |i: usize| {
        r.get(i)
            .and_then(|v| redis::from_redis_value::<String>(v.clone()).ok())
    };
    let claimed = |status, id: String, shard: i64, qty: i64| {
        let body = format!(
            r#"{{"status":"claimed","claim_id":"{id}","sku":{},"shard":{shard},"qty":{qty}}}"#,
            c.sku
        );
        (status, body)
    };
    match (int(0), text(1)) {
        (Some(1), Some(id)) => claimed(StatusCode::CREATED, id, home.into(), c.qty.into()),
        (Some(2), Some(id)) => {
            let (shard, qty) = (int(2).unwrap_or(0), int(3).unwrap_or(0));
            claimed(StatusCode::OK, id, shard, qty)
        }
        (Some(4), _) => refusal(StatusCode::CONFLICT, "in_progress"),
        (Some(10), _) => refusal(StatusCode::GONE, "sold_out"),
        (Some(11), _) => refusal(StatusCode::CONFLICT, "limit_reached"),
        (Some(12), _) => refusal(StatusCode::FORBIDDEN, "not_started"),
        (Some(13), _) => refusal(StatusCode::FORBIDDEN, "ended"),
        (Some(14), _) => refusal(StatusCode::NOT_FOUND, "unknown_sku"),
        (Some(15), _) => refusal(StatusCode::BAD_REQUEST, "bad_request"),
        _ => refusal(StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    }
}
