//! The baseline: a bare hyper HTTP/1.1 server that reads the request body and answers a
//! constant JSON body. Driven by the same load generator with the same requests, it gives
//! the machine's HTTP ceiling in the same run, so gateway figures become ratios that do
//! not depend on how busy the shared machine is today.
//!
//! It runs as a child process (`bench serve-baseline`), like the gateway, so the load
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

use crate::stack::servers::{free_port, wait_until, ServerError};

/// The constant answer, about the size of a claim answer.
pub const BODY: &str =
    r#"{"status":"ok","claim_id":"0-0000000000000-0","sku":1,"shard":0,"qty":1}"#;
/// Request bodies larger than this are cut, as the gateway caps them.
const MAX_BODY: usize = 4096;

/// Serves until the process is killed.
pub async fn serve(listen: SocketAddr) -> std::io::Result<()> {
    // The gateway's backlog, so a rush of connections meets the same accept queue.
    let listener = plumbing::listen::bind(listen, plumbing::listen::DEFAULT_BACKLOG)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let svc = service_fn(|req: Request<hyper::body::Incoming>| async move {
                // Read the body like the gateway must, so both pay for it.
                let _ = http_body_util::Limited::new(req.into_body(), MAX_BODY)
                    .collect()
                    .await;
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                        .expect("static response"),
                )
            });
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// The baseline server as a child process on a free port, killed on drop.
pub struct BaselineProc {
    child: Child,
    pub addr: SocketAddr,
}

impl BaselineProc {
    pub fn start() -> Result<Self, ServerError> {
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let exe = std::env::current_exe().map_err(|source| ServerError::Spawn {
            program: "bench (self)",
            source,
        })?;
        let child = Command::new(exe)
            .args(["serve-baseline", "--listen", &addr.to_string()])
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
