//! The baselines: a bare hyper HTTP/1.1 server that reads the request body and answers a
//! constant JSON body, and the same server making one Redis round trip per request. Driven
//! by the same load generator with the same requests, they give the machine's HTTP
//! ceiling and the floor of a claim in the same run, so gateway figures become ratios that
//! do not depend on how busy the shared machine is today.
//!
//! - [`BaselineKind::Bare`]: the sold-out path's ceiling (no Redis call).
//! - [`BaselineKind::Redis`]: "hyper + one redis-rs round trip": after reading the body,
//!   one `EVALSHA` through redis-rs's multiplexed connection, on the same runtime, then
//!   201. The script does nothing but answer a constant shaped like `lua/claim.lua`'s
//!   answer to a claim (`{1, claim id, user seq, remaining}`), so Redis's own work is not
//!   in it while the client decodes what a claim's does; the command carries as many keys
//!   and values as a claim's (19, `shard-router/src/client/claim.rs`), all but one as
//!   values so that it stays on one node, so the client side encodes about what a claim's
//!   does. It is the honest floor of the gateway's CPU per claim.
//!
//! They run as a child process (`bench serve-baseline`), like the gateway, so the load
//! generator and the server compete for the cores the same way in both measurements.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use redis::aio::MultiplexedConnection;

use crate::stack::servers::{free_port, wait_until, ServerError};

/// The constant answer, about the size of a claim answer.
pub const BODY: &str =
    r#"{"status":"ok","claim_id":"0-0000000000000-0","sku":1,"shard":0,"qty":1}"#;
/// Request bodies larger than this are cut, as the gateway caps them.
const MAX_BODY: usize = 4096;

/// Which baseline a server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BaselineKind {
    /// Read the body, answer: no Redis.
    #[default]
    Bare,
    /// Read the body, one EVALSHA round trip, answer 201.
    Redis,
    /// Read the body, run `lua/claim.lua` on the user's home shard, answer its outcome
    /// (`baseline_claim.rs`).
    Claim,
}

impl BaselineKind {
    /// The name reports and CPU tables give the server.
    pub fn server_name(self) -> &'static str {
        match self {
            Self::Bare => "bare hyper server",
            Self::Redis => "hyper + one redis-rs round trip",
            Self::Claim => "hyper + one redis-rs round trip running claim.lua",
        }
    }
}

/// The script the Redis baseline runs: no work, so only the round trip is measured, and
/// an answer of the shape of a claim's (code CLAIMED, claim id, user seq, units left).
const NOOP: &str = "return {1, '3-1700000000000-0', 1, 99}";
/// The one key it names, and the 18 values after it: a claim's 19 keys and values.
const KEY: &str = "{fg-baseline}:noop";
const VALUES: [&str; 18] = [
    "1",
    "alice",
    "r-000001",
    "1",
    "1",
    "0",
    "0",
    "1700000000000",
    "1",
    "0",
    "86400000",
    "0",
    "0",
    "1",
    "0",
    "0",
    "0",
    "0",
];

/// Serves until the process is killed; with `redis`, as the Redis baseline.
pub async fn serve(listen: SocketAddr, redis: Option<String>) -> anyhow::Result<()> {
    let redis = match redis {
        Some(url) => Some(connect(&url).await?),
        None => None,
    };
    // The gateway's backlog, so a rush of connections meets the same accept queue.
    let listener = plumbing::listen::bind(listen, plumbing::listen::DEFAULT_BACKLOG)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let redis = redis.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                let redis = redis.clone();
                async move {
                    // Read the body like the gateway must, so both pay for it.
                    let _ = http_body_util::Limited::new(req.into_body(), MAX_BODY)
                        .collect()
                        .await;
                    let status = match redis {
                        None => hyper::StatusCode::OK,
                        Some((mut conn, sha)) => match round_trip(&mut conn, &sha).await {
                            Ok(()) => hyper::StatusCode::CREATED,
                            Err(_) => hyper::StatusCode::SERVICE_UNAVAILABLE,
                        },
                    };
                    Ok::<_, std::convert::Infallible>(
                        Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                            .expect("static response"),
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

/// The multiplexed connection (on this runtime) and the loaded script's SHA.
async fn connect(url: &str) -> anyhow::Result<(MultiplexedConnection, String)> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(NOOP)
        .query_async(&mut conn)
        .await?;
    Ok((conn, sha))
}

/// One EVALSHA with a claim's arguments, built per request as the gateway builds its own,
/// and its answer decoded as the gateway decodes a claim's: an array of code, claim id,
/// user seq and units left.
async fn round_trip(conn: &mut MultiplexedConnection, sha: &str) -> redis::RedisResult<()> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(1).arg(KEY);
    for v in VALUES {
        cmd.arg(v);
    }
    let (code, _claim_id, _user_seq, _remaining) =
        cmd.query_async::<(i64, String, u64, i64)>(conn).await?;
    if code == 1 {
        Ok(())
    } else {
        Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "baseline script answered another code",
        )))
    }
}

/// The baseline server as a child process on a free port, killed on drop.
pub struct BaselineProc {
    child: Child,
    pub addr: SocketAddr,
}

impl BaselineProc {
    /// A bare baseline server.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(None)
    }

    /// The Redis baseline against `redis` (a single Redis URL), or a bare one.
    pub fn start_with(redis: Option<&str>) -> Result<Self, ServerError> {
        let args = redis.map(|url| vec!["--redis-url".to_owned(), url.to_owned()]);
        Self::start_args(&args.unwrap_or_default())
    }

    /// A baseline server given these `bench serve-baseline` arguments besides `--listen`.
    pub fn start_args(args: &[String]) -> Result<Self, ServerError> {
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let exe = std::env::current_exe().map_err(|source| ServerError::Spawn {
            program: "bench (self)",
            source,
        })?;
        let mut cmd = Command::new(exe);
        cmd.args(["serve-baseline", "--listen", &addr.to_string()]);
        cmd.args(args);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|source| ServerError::Spawn {
                program: "bench serve-baseline",
                source,
            })?;
        let me = Self { child, addr };
        wait_until(
            &format!("baseline server {addr}"),
            Duration::from_secs(10),
            || std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok(),
        )?;
        Ok(me)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for BaselineProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
