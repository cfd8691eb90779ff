//! A private `redis-server` on a free port, killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, try_wait_until, ServerError};

/// A running `redis-server` owned by the test.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a node that persists nothing.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a node with extra `redis-server` arguments (`--cluster-enabled yes`, ...).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::try_start_with(extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::start_with`] that returns what went wrong.
    pub fn try_start_with(extra: &[&str]) -> Result<Self, ServerError> {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("fg-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| ServerError::Failed {
            what: format!("create {}", dir.display()),
            detail: e.to_string(),
        })?;
        let mut s = Self {
            child: None,
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn()?;
        Ok(s)
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.to_str().expect("utf-8 temp dir")])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| ServerError::Spawn {
                program: "redis-server",
                source,
            })?;
        self.child = Some(child);
        let url = self.url();
        try_wait_until(
            &format!("redis-server :{} to answer PING", self.port),
            Duration::from_secs(10),
            || {
                redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                    .is_ok()
            },
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A blocking connection for test setup and assertions.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("connect to test redis")
    }

    /// The process id (for SIGSTOP/SIGCONT drills).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts a replica of `master` and waits until its first sync is done.
    pub fn start_replica_of(master: &RedisServer) -> Self {
        Self::try_start_replica_of(master).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::start_replica_of`] that returns what went wrong.
    pub fn try_start_replica_of(master: &RedisServer) -> Result<Self, ServerError> {
        let port = master.port().to_string();
        let replica = Self::try_start_with(&["--replicaof", "127.0.0.1", &port])?;
        let url = replica.url();
        try_wait_until("replica link up", Duration::from_secs(30), || {
            let info: String = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| redis::cmd("INFO").arg("replication").query(&mut c))
                .unwrap_or_default();
            info.contains("master_link_status:up") && info.contains("master_sync_in_progress:0")
        })?;
        Ok(replica)
    }

    /// Sends `sig` (`STOP`, `CONT`) to the server; a stopped replica acknowledges nothing
    /// while its master goes on.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("server running");
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {pid} failed");
    }

    /// Kills the server (all data is gone: it persists nothing).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The server's working directory (`dump.rdb`, `appendonlydir/`).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// `SAVE`s and keeps a copy of the snapshot: what an operator's backup holds.
    pub fn snapshot(&self) -> PathBuf {
        let _: () = redis::cmd("SAVE")
            .query(&mut self.connection())
            .expect("SAVE");
        let copy = self
            .dir
            .join(format!("snapshot-{}.rdb", crate::free_port()));
        std::fs::copy(self.dir.join("dump.rdb"), &copy).expect("copy dump.rdb");
        copy
    }

    /// Kills the server (no save) and starts it on the same port from `rdb`, as an
    /// operator restores a backup or a host comes back with an older disk: the AOF is
    /// gone and the server loads the snapshot (with AOF on and no AOF file, Redis 7.0
    /// would start empty instead), then runs with the extra arguments it had.
    pub fn restart_from_snapshot(&mut self, rdb: &std::path::Path) {
        self.kill();
        let _ = std::fs::remove_dir_all(self.dir.join("appendonlydir"));
        std::fs::copy(rdb, self.dir.join("dump.rdb")).expect("restore dump.rdb");
        let extra = std::mem::take(&mut self.extra);
        self.extra = without_aof(&extra);
        let spawned = self.spawn();
        self.extra = extra;
        if let Err(e) = spawned {
            panic!("{e}");
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn() {
            panic!("{e}");
        }
    }
}

/// `extra` without an `--appendonly <value>` pair.
fn without_aof(extra: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(extra.len());
    let mut it = extra.iter();
    while let Some(a) = it.next() {
        if a == "--appendonly" {
            it.next();
        } else {
            out.push(a.clone());
        }
    }
    out
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
