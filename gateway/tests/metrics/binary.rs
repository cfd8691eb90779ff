//! The gateway binary as a child process, for the tests that read what it writes to
//! stderr (its log): started with JSON logs, the access log on and its stderr piped, and
//! waited for until ready. Killed on drop.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use hyper::StatusCode;
use test_support::free_port;

pub(crate) struct GatewayProc {
    pub(crate) child: Child,
    pub(crate) api: SocketAddr,
    pub(crate) admin: SocketAddr,
    /// When it was spawned: what it logged since then is in its stderr.
    pub(crate) spawned: Instant,
}

impl GatewayProc {
    /// Starts the gateway against `redis` with `--access-log-rate rate` and `extra` flags,
    /// and waits until `/readyz` answers 200.
    pub(crate) async fn start(redis: &str, rate: u32, extra: &[&str]) -> Self {
        let (api, admin) = (free_port(), free_port());
        let spawned = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_gateway"))
            .args(["--listen", &format!("127.0.0.1:{api}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .args(["--redis", redis, "--user-rate", "0", "--client-rate", "0"])
            .arg("--insecure-body-user")
            .args([
                "--log-format",
                "json",
                "--access-log-rate",
                &rate.to_string(),
            ])
            .args(["--drain-delay-ms", "0"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gateway binary");
        let me = Self {
            child,
            api: SocketAddr::from(([127, 0, 0, 1], api)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            spawned,
        };
        while !matches!(get(me.api, "/readyz").await, Ok((StatusCode::OK, _, _))) {
            assert!(
                spawned.elapsed() < drills::scaled(Duration::from_secs(20)),
                "never ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        me
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
