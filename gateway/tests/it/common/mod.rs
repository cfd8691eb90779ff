//! Shared test plumbing: a real gateway on `127.0.0.1:0` in this process, a small HTTP
//! client, preheating through shard-router, and reading the metrics page.

pub(crate) mod ledger;
pub(crate) mod raw;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gateway::{Config, Listeners};
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde_json::Value;
use shard_router::test_util;
/// Tests classify answers by their `status` field with the gateway's own enum.
pub(crate) use shard_router::ApiStatus;
use shard_router::{RedisTarget, SkuMeta, StockClient};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A gateway running in this process; stops (and waits) on `stop`, aborts on drop.
pub(crate) struct Gateway {
    pub(crate) api: SocketAddr,
    pub(crate) admin: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Gateway {
    pub(crate) async fn start(cfg: Config) -> Self {
        let gw = Self::start_unready(cfg).await;
        gw.wait_ready().await;
        gw
    }

    /// Starts without waiting for `/readyz` (for gateways that must not become ready).
    pub(crate) async fn start_unready(cfg: Config) -> Self {
        let api = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (api_addr, admin_addr) = (api.local_addr().unwrap(), admin.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            gateway::run(cfg, Listeners { api, admin }, async {
                let _ = rx.await;
            })
            .await
            .expect("valid config");
        });
        Self {
            api: api_addr,
            admin: admin_addr,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub(crate) async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok((StatusCode::OK, _, _)) = get(self.api, "/readyz").await {
                return;
            }
            assert!(Instant::now() < deadline, "gateway never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends the shutdown signal without waiting.
    pub(crate) fn signal_stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Signals shutdown and waits for `run` to return.
    pub(crate) async fn stop(mut self) {
        self.signal_stop();
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(15), t)
                .await
                .expect("gateway stops within the grace period")
                .unwrap();
        }
    }

    pub(crate) fn task(&mut self) -> JoinHandle<()> {
        self.task.take().unwrap()
    }

    pub(crate) async fn metrics(&self) -> String {
        let (status, _, body) = request(self.admin, Method::GET, "/metrics", None, &[])
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);
        String::from_utf8(body.to_vec()).unwrap()
    }

    pub(crate) async fn claim(&self, body: Value) -> Answer {
        post_json(self.api, "/v1/claims", &body.to_string()).await
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// A real gateway process (the built binary) on free loopback ports; killed on drop.
pub(crate) struct GatewayProcess(Child);

impl GatewayProcess {
    /// Starts `gateway --listen … --admin-listen … <args>`; returns it and its API address.
    pub(crate) fn spawn(args: &[&str]) -> (Self, SocketAddr) {
        Self::spawn_with_env(args, &[])
    }

    /// [`Self::spawn`] with extra environment. The trust-store variables of the test's own
    /// environment are not passed on, so TLS tests decide what the gateway trusts.
    pub(crate) fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> (Self, SocketAddr) {
        let (api, admin) = (test_support::free_port(), test_support::free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_gateway"))
            .args(["--listen", &format!("127.0.0.1:{api}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .args(args)
            .env_remove("SSL_CERT_FILE")
            .env_remove("SSL_CERT_DIR")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gateway binary");
        (Self(child), SocketAddr::from(([127, 0, 0, 1], api)))
    }

    /// SIGKILL, and wait for the process to be gone.
    pub(crate) fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until `/readyz` at `addr` answers 200 (20 s at most); returns how long it took.
pub(crate) async fn wait_ready_at(addr: SocketAddr) -> Duration {
    let t = Instant::now();
    while !matches!(get(addr, "/readyz").await, Ok((StatusCode::OK, _, _))) {
        assert!(
            t.elapsed() < test_support::slack(Duration::from_secs(20)),
            "gateway never ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t.elapsed()
}

/// Test defaults: fast probes, no per-user or per-client rate limit unless a test sets
/// one, and the user from the body (`--insecure-body-user`): these tests are about the
/// claim path; `identity.rs` tests the identity sources with real tokens.
pub(crate) fn config(redis: &str, cluster: bool) -> Config {
    let mut cfg = Config::for_redis(redis, cluster);
    cfg.probe_interval_ms = 100;
    cfg.user_rate = 0;
    cfg.access.client_rate = 0;
    cfg.access.insecure_body_user = true;
    cfg.cache_ttl_ms = 60_000;
    cfg.shutdown_grace_ms = 5_000;
    cfg
}

/// An HTTP answer: status, headers, JSON body (Null when not JSON).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

impl Answer {
    /// The `status` field, when it names a known status.
    pub(crate) fn kind(&self) -> Option<ApiStatus> {
        self.body["status"].as_str()?.parse().ok()
    }
}

/// The pooled test client. It drops an idle connection after 2 s, before the gateway
/// closes it at its header timeout (5 s): a request sent on a pooled connection just as
/// the gateway closed it failed as `SendRequest` (a test that idled through a failover).
fn client() -> Client<HttpConnector, Full<Bytes>> {
    thread_local! {
        static CLIENT: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(Duration::from_secs(2))
                .build_http();
    }
    CLIENT.with(Clone::clone)
}

pub(crate) async fn request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<(&str, &str)>,
    headers: &[(&str, &str)],
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = match body {
        Some((ctype, text)) => b
            .header("content-type", ctype)
            .body(Full::new(Bytes::from(text.to_owned()))),
        None => b.body(Full::new(Bytes::new())),
    }
    .unwrap();
    let fut = async {
        let resp = client().request(req).await.map_err(|e| e.to_string())?;
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((parts.status, parts.headers, bytes))
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| "timeout".to_string())?
}

pub(crate) async fn get(
    addr: SocketAddr,
    path: &str,
) -> Result<(StatusCode, HeaderMap, Value), String> {
    let (s, h, b) = request(addr, Method::GET, path, None, &[]).await?;
    Ok((s, h, serde_json::from_slice(&b).unwrap_or(Value::Null)))
}

pub(crate) async fn post_json(addr: SocketAddr, path: &str, body: &str) -> Answer {
    let (status, headers, bytes) = request(
        addr,
        Method::POST,
        path,
        Some(("application/json", body)),
        &[],
    )
    .await
    .expect("request completes");
    Answer {
        status,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

/// A stock client on the same Redis, for preheating and checking the books.
pub(crate) async fn stock_client(redis: &str, cluster: bool) -> StockClient {
    test_util::stock_client(RedisTarget::parse(redis, cluster).unwrap(), 16).await
}

/// Preheats a SKU whose sale is open now.
pub(crate) async fn preheat(
    c: &StockClient,
    sku: u64,
    stock: u64,
    width: u16,
    limit: u32,
) -> SkuMeta {
    test_util::preheat_open(c, sku, stock, width, limit).await
}

/// Sum of a SKU's slices as Redis has them.
pub(crate) async fn slices_left(client: &StockClient, meta: &SkuMeta) -> i64 {
    test_util::slices_total(client, meta).await
}

/// The value of one series (`name{labels}` exactly as rendered), or 0.
pub(crate) fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// The gateway's view of a SKU (`GET /v1/skus/{sku}`).
pub(crate) async fn view(api: SocketAddr, sku: u64) -> Value {
    let (status, _, v) = get(api, &format!("/v1/skus/{sku}")).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

/// Polls the view until its `sold_out` flag is `want` (5 s at most).
pub(crate) async fn wait_sold_out(api: SocketAddr, sku: u64, want: bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while view(api, sku).await["sold_out"] != want {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the view until the gateway knows `sku` (5 s at most). A preheat's `live` event
/// reaches a running gateway's subscriber a moment after PUBLISH returns, and until then
/// the SKU is `404 unknown_sku` from memory.
pub(crate) async fn wait_live(api: SocketAddr, sku: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(api, &format!("/v1/skus/{sku}")).await.unwrap().0 == StatusCode::NOT_FOUND {
        assert!(Instant::now() < deadline, "sku {sku} never became live");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Calls Redis has served of `commands`, from `INFO commandstats`.
pub(crate) fn command_calls(redis: &test_support::RedisServer, commands: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.connection())
        .expect("INFO commandstats");
    commands
        .iter()
        .filter_map(|c| {
            let line = info
                .lines()
                .find(|l| l.starts_with(&format!("cmdstat_{c}:")))?;
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Script runs (EVALSHA / EVAL): every claim that reached Redis.
pub(crate) fn script_calls(redis: &test_support::RedisServer) -> u64 {
    command_calls(redis, &["evalsha", "eval"])
}

/// Every command the claim path or a cache load could issue.
pub(crate) fn claim_path_calls(redis: &test_support::RedisServer) -> u64 {
    command_calls(redis, &["evalsha", "eval", "hmget", "get", "mget", "fcall"])
}

/// Puts one unit back into the SKU's first slice behind the gateways' backs: no event is
/// published, as if every subscriber missed it.
pub(crate) fn restock_silently(
    redis: &test_support::RedisServer,
    stock: &StockClient,
    meta: &SkuMeta,
) {
    let shard = stock.placement().shards_of(meta.sku, meta.width)[0];
    let key = shard_router::keys::ShardKeys::new(stock.placement(), shard, meta.sku).stock();
    redis::cmd("SET")
        .arg(&key)
        .arg(1)
        .query::<()>(&mut redis.connection())
        .unwrap();
}

/// Kills every Pub/Sub connection of the server; returns how many there were.
pub(crate) fn kill_pubsub(redis: &test_support::RedisServer) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut redis.connection())
        .unwrap()
}

/// Serialises the tests of one binary that read process-wide state (the metrics registry):
/// hold the guard for the whole test.
pub(crate) async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ONE.lock().await
}
