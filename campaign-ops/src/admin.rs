//! The admin listener: `/healthz`, `/metrics`, and the campaign / claim API behind a bearer
//! token compared in constant time. Errors become responses in one place ([`respond`]):
//! caller mistakes are 4xx and not logged as errors; internal details never leak.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use shard_router::StockClient;
use sqlx::MySqlPool;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::campaign::{self, Campaign};
use crate::health::Health;
use crate::Config;
use crate::OpsError;
use crate::{reconcile, release};

/// Largest request body the API reads.
pub const MAX_BODY: usize = 64 * 1024;
/// Bound on reading a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the handlers share.
#[derive(Clone)]
pub struct Admin {
    pub cfg: Config,
    pub pool: MySqlPool,
    pub client: StockClient,
    pub prom: Option<PrometheusHandle>,
    /// The MySQL and Redis probes `/healthz` reports.
    pub health: Arc<Health>,
}

type Resp = Response<Full<Bytes>>;

/// `PUT /v1/campaigns`: the campaign's fields, and how it sells (`mode`: `fcfs`, `draw`
/// with `draw_at_ms` and `waitlist`, or `queue`), as `consumer campaign` takes them. A
/// field left out keeps what the ledger holds (a new campaign: `fcfs`, waitlist 0); a key
/// not among these is refused, so a misspelt one does not quietly mean its default.
#[derive(serde::Deserialize)]
struct CampaignBody {
    #[serde(flatten)]
    campaign: Campaign,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    draw_at_ms: Option<i64>,
    #[serde(default)]
    waitlist: Option<u32>,
}

const CAMPAIGN_KEYS: [&str; 11] = [
    "sku",
    "name",
    "stock",
    "width",
    "limit",
    "start_ms",
    "end_ms",
    "payment_timeout_s",
    "mode",
    "draw_at_ms",
    "waitlist",
];

impl CampaignBody {
    fn parse(body: &[u8]) -> Result<Self, String> {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).map_err(|e| format!("campaign JSON: {e}"))?;
        if let Some(k) = map.keys().find(|k| !CAMPAIGN_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "campaign JSON: unknown field {k:?}, expected one of {CAMPAIGN_KEYS:?}"
            ));
        }
        serde_json::from_value(serde_json::Value::Object(map))
            .map_err(|e| format!("campaign JSON: {e}"))
    }

    /// The sale asked for, the stored mode and draw filling what is left out.
    fn sale(
        self,
        stored_mode: Option<ledger::draws::Mode>,
        stored_draw: Option<&ledger::draws::Draw>,
    ) -> Result<(Campaign, campaign::Sale), String> {
        use campaign::Sale;
        let stored = stored_mode.unwrap_or_default();
        let mode = match self.mode.as_deref() {
            None => stored,
            Some(m) => ledger::draws::Mode::parse(m)
                .ok_or_else(|| format!("mode {m:?} is not one of \"fcfs\", \"draw\", \"queue\""))?,
        };
        let sale = match mode {
            ledger::draws::Mode::Draw => Sale::Draw {
                draw_at_ms: self
                    .draw_at_ms
                    .or(stored_draw.map(|d| d.draw_at_ms))
                    .ok_or("mode draw needs draw_at_ms")?,
                waitlist: self
                    .waitlist
                    .or(stored_draw.map(|d| d.waitlist))
                    .unwrap_or(0),
            },
            _ if self.draw_at_ms.is_some() || self.waitlist.is_some() => {
                return Err("draw_at_ms and waitlist need mode draw".into())
            }
            ledger::draws::Mode::Fcfs => Sale::Fcfs,
            ledger::draws::Mode::Queue => Sale::Queue,
        };
        Ok((self.campaign, sale))
    }
}

fn json(status: StatusCode, body: &impl Serialize) -> Resp {
    let text = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(text)))
        .unwrap_or_default()
}

fn text(status: StatusCode, body: String) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; version=0.0.4")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

/// A rejection: `{"status": kind, "error": message}`, the shape the gateway answers with,
/// so one client parser reads both.
fn error(status: StatusCode, msg: &str) -> Resp {
    let kind = match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        _ => "internal",
    };
    json(status, &serde_json::json!({ "status": kind, "error": msg }))
}

/// Maps a result to a response; the one place errors are classified.
fn respond<T: Serialize>(r: Result<T, OpsError>) -> Resp {
    match r {
        Ok(v) => json(StatusCode::OK, &v),
        Err(OpsError::NotFound(m)) => error(StatusCode::NOT_FOUND, &format!("not found: {m}")),
        Err(OpsError::Invalid(m)) => error(StatusCode::BAD_REQUEST, &m),
        // Done on the master, not on a replica yet: the caller should know to retry later
        // (the text names only the SKU, claim and shard).
        Err(e @ OpsError::Unconfirmed(_)) => {
            tracing::warn!(error = %e, "admin request not confirmed by a replica");
            error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
        }
        Err(e) => {
            tracing::error!(error = %e, "admin request failed");
            let status = if e.is_retryable() {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            error(status, "internal error; see the consumer log")
        }
    }
}

impl Admin {
    fn authorized(&self, req: &Request<Incoming>) -> bool {
        let Some(token) = &self.cfg.admin_token else {
            return false;
        };
        let given = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        given.as_bytes().ct_eq(token.as_bytes()).into()
    }

    /// 200 while MySQL and Redis both answered the last probe and every writer loop
    /// commits, else 503; the body says which is not.
    fn healthz(&self) -> Resp {
        let (db, redis) = (self.health.db(), self.health.redis());
        let writer = self.health.writer();
        let (status, word) = if db && redis && writer {
            (StatusCode::OK, "ok")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "unhealthy")
        };
        json(
            status,
            &serde_json::json!({"status": word, "mysql": db, "redis": redis, "writer": writer}),
        )
    }

    /// `PUT /v1/campaigns`: reads the body, fills what it leaves out from the ledger, stores
    /// the campaign and how it sells.
    async fn put_campaign(&self, req: Request<Incoming>, t: Duration) -> Resp {
        let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body too large or unreadable",
                )
            }
        };
        let parsed = match CampaignBody::parse(&body) {
            Ok(p) => p,
            Err(e) => return error(StatusCode::BAD_REQUEST, &e),
        };
        let sku = parsed.campaign.sku;
        let stored = match (
            ledger::draws::mode(&self.pool, sku, t).await,
            ledger::draws::get(&self.pool, sku, t).await,
        ) {
            (Ok(m), Ok(d)) => (m, d),
            (Err(e), _) | (_, Err(e)) => return respond::<()>(Err(e.into())),
        };
        let (c, sale) = match parsed.sale(stored.0, stored.1.as_ref()) {
            Ok(x) => x,
            Err(e) => return error(StatusCode::BAD_REQUEST, &e),
        };
        respond(
            campaign::put_sale(&self.pool, &self.client, &c, sale, self.cfg.datapath.shards, t)
                .await
                .map(|()| serde_json::json!({"status": "ok", "sku": c.sku, "mode": sale.mode().as_str()})),
        )
    }

    /// Routes one request.
    pub async fn handle(&self, req: Request<Incoming>) -> Resp {
        let path: Vec<String> = req
            .uri()
            .path()
            .trim_matches('/')
            .split('/')
            .map(str::to_owned)
            .collect();
        let parts: Vec<&str> = path.iter().map(String::as_str).collect();
        let method = req.method().clone();
        match (&method, parts.as_slice()) {
            (&Method::GET, ["healthz"]) => return self.healthz(),
            (&Method::GET, ["metrics"]) => {
                return match &self.prom {
                    Some(h) => text(StatusCode::OK, crate::series::render(h)),
                    None => error(StatusCode::NOT_FOUND, "metrics recorder not installed"),
                }
            }
            _ => {}
        }
        if !self.authorized(&req) {
            return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
        }
        let t = self.cfg.datapath.db_timeout;
        let sku = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| OpsError::Invalid(format!("bad sku {s:?}")))
        };
        match (&method, parts.as_slice()) {
            (&Method::PUT | &Method::POST, ["v1", "campaigns"]) => self.put_campaign(req, t).await,
            (&Method::GET, ["v1", "campaigns", s]) => respond(match sku(s) {
                Ok(s) => campaign::status(&self.pool, &self.client, s, t).await,
                Err(e) => Err(e),
            }),
            (&Method::POST, ["v1", "campaigns", s, "preheat"]) => respond(match sku(s) {
                Ok(s) => match ledger::campaigns::refuse_if_closed(&self.pool, s, "preheat", t).await {
                    Err(e) => Err(e.into()),
                    Ok(()) => campaign::preheat_with(&self.pool, &self.client, s, self.cfg.datapath.replica_wait, t).await.map(|v| {
                    v.into_iter()
                        .map(|(shard, o)| serde_json::json!({"shard": shard, "outcome": format!("{o:?}")}))
                        .collect::<Vec<_>>()
                    }),
                },
                Err(e) => Err(e),
            }),
            (&Method::POST, ["v1", "campaigns", s, "rebuild"]) => respond(match sku(s) {
                Ok(s) => crate::rebuild::rebuild(&self.pool, &self.client, s, &crate::rebuild::Options { replica_wait: self.cfg.datapath.replica_wait, ..crate::rebuild::Options::new(t) }).await,
                Err(e) => Err(e),
            }),
            (&Method::POST, ["v1", "campaigns", s, "reconcile"]) => respond(match sku(s) {
                Ok(s) => match crate::clock::redis_now(&self.client).await {
                    Ok(now) => reconcile::run(&self.pool, &self.client, s, now, t).await,
                    Err(e) => Err(e.into()),
                },
                Err(e) => Err(e),
            }),
            (&Method::POST, ["v1", "claims", id, "confirm"]) => respond(release::confirm(&self.pool, id, t).await),
            (&Method::POST, ["v1", "claims", id, "cancel"]) => respond(
                release::release_with(&self.pool, &self.client, id, release::Reason::Cancelled, self.cfg.datapath.replica_wait, t).await,
            ),
            _ => error(StatusCode::NOT_FOUND, "no such route"),
        }
    }
}

/// How long a stop waits for admin requests in progress (a rebuild answers when done).
const ADMIN_GRACE: Duration = Duration::from_secs(10);

/// Serves the admin API on `listener` until `shutdown`, then drains. Admin traffic is
/// light: past 64 open connections new ones wait in the kernel backlog.
pub async fn serve(admin: Admin, listener: TcpListener, shutdown: watch::Receiver<bool>) {
    let opts = plumbing::ServeOpts {
        header_timeout: HEADER_TIMEOUT,
        ..plumbing::ServeOpts::internal(ADMIN_GRACE)
    };
    plumbing::serve(
        listener,
        Arc::new(admin),
        |admin: Arc<Admin>, _peer: SocketAddr, req| async move { admin.handle(req).await },
        opts,
        shutdown,
    )
    .await;
}
