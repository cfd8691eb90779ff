//! `bench stack`: a whole local flashgate on free loopback ports, from locally built
//! binaries: Redis (single, or a 3-master cluster), a fresh database on a MariaDB server,
//! the consumer, and N gateways. Every process is owned by [`Stack`] and stopped on drop:
//! SIGTERM first (gateways drain, the consumer flushes its batch), SIGKILL after a bound.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench::stack::cpu::{Role, Watched};
use bench::stack::mysql::Mysql;
use bench::stack::servers::{free_port, wait_until, LocalRedis, RedisServer};

/// How long a process may take to become ready (a consumer applies migrations first).
const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long a process gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// The MariaDB server the stack creates its database on.
pub(crate) const DEFAULT_MYSQL_SERVER: &str = "mysql://root@127.0.0.1:3306/mysql";

/// A feature switched off (or on) so its effect becomes a measured row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Ablation {
    /// Gateways run without the local sold-out cache (`--no-sold-out-cache`).
    NoSoldOutCache,
    /// One stock shard: every SKU on one slot (`--shards 1`, width 1).
    Shards1,
    /// No second chance on another shard (`--no-second-chance`).
    NoSecondChance,
    /// `--durability replica`: WAIT 1 after each claim; Redis gets a replica.
    Replica,
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StackOpts {
    /// Redis Cluster with 3 masters instead of a single node.
    #[arg(long)]
    pub(crate) cluster: bool,
    #[arg(long, default_value_t = 1)]
    pub(crate) gateways: usize,
    /// Stock shard count S.
    #[arg(long, default_value_t = 16)]
    pub(crate) stack_shards: u16,
    /// MariaDB server to create the stack's database on (the URL's database is ignored).
    #[arg(long, default_value = DEFAULT_MYSQL_SERVER)]
    pub(crate) mysql_server: String,
    /// Start no consumer and no database (Redis-only invariant checks).
    #[arg(long)]
    pub(crate) no_consumer: bool,
    #[arg(long)]
    pub(crate) gateway_bin: Option<PathBuf>,
    #[arg(long)]
    pub(crate) consumer_bin_path: Option<PathBuf>,
    /// Extra gateway flag, repeatable (`--gateway-arg=--user-rate=0`).
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    pub(crate) gateway_args: Vec<String>,
    /// Ablations, repeatable.
    #[arg(long, value_enum)]
    pub(crate) ablation: Vec<Ablation>,
}

impl StackOpts {
    pub(crate) fn shards(&self) -> u16 {
        if self.ablation.contains(&Ablation::Shards1) {
            1
        } else {
            self.stack_shards
        }
    }
}

/// A child process stopped with SIGTERM, then SIGKILL, on drop. Its stderr (the log)
/// goes to a temporary file, not a pipe: nobody reads a pipe while the stack runs, and a
/// full one would block the process at its next log line (an access log fills it in a
/// fraction of a second).
struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

/// The end of a log that is shown when a process died.
const LOG_TAIL: u64 = 4096;

impl Proc {
    fn spawn(name: String, cmd: &mut Command) -> anyhow::Result<Self> {
        let slug: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let log = std::env::temp_dir().join(format!(
            "fg-bench-{}-{slug}-{}.log",
            std::process::id(),
            shard_router::now_ms()
        ));
        let file = std::fs::File::create(&log)
            .map_err(|e| anyhow::anyhow!("{name}: log file {}: {e}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .map_err(|e| anyhow::anyhow!("spawn {name}: {e}"))?;
        Ok(Self { name, child, log })
    }

    /// Fails with the end of the process's log if it already exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let mut err = String::new();
            if let Ok(mut f) = std::fs::File::open(&self.log) {
                use std::io::{Seek, SeekFrom};
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                let _ = f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL)));
                let _ = f.read_to_string(&mut err);
            }
            anyhow::bail!("{} exited ({status}): {}", self.name, err.trim());
        }
        Ok(())
    }

    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "{} did not stop within {STOP_GRACE:?}; killing it",
            self.name
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `GET path` answered 200, within a short bound.
fn http_ok(addr: SocketAddr, path: &str) -> bool {
    let probe = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(300))?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head)?;
        Ok(head.starts_with(b"HTTP/1.") && &head[9..12] == b"200")
    };
    probe().unwrap_or(false)
}

/// A binary: the flag, else next to this executable, else the workspace's target dirs.
fn find_bin(flag: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_owned());
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_owned))
    {
        dirs.push(d);
    }
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    dirs.push(ws.join("target/release"));
    dirs.push(ws.join("target/debug"));
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow::anyhow!("no {name} binary found; build it or pass its path"))
}

/// The running stack.
pub(crate) struct Stack {
    // Field order is drop order: gateways first, Redis last.
    gateways: Vec<(Proc, SocketAddr, SocketAddr)>,
    consumer: Option<Proc>,
    _replica: Option<RedisServer>,
    pub(crate) redis: LocalRedis,
    pub(crate) mysql_url: Option<String>,
    pub(crate) consumer_bin: Option<PathBuf>,
    pub(crate) shards: u16,
    db: Option<(Mysql, String)>,
    /// The HS256 secret the gateways verify and the load generator signs with; a fresh
    /// random one per stack, removed on drop.
    pub(crate) token_secret_file: PathBuf,
}

impl Stack {
    /// The stack's processes, for CPU accounting.
    pub(crate) fn watched(&self) -> Vec<Watched> {
        let mut w: Vec<Watched> = self
            .gateways
            .iter()
            .enumerate()
            .map(|(i, (p, _, _))| Watched::new(Role::Gateway, format!("gateway {i}"), p.child.id()))
            .collect();
        if let Some(c) = &self.consumer {
            w.push(Watched::new(Role::Consumer, "consumer", c.child.id()));
            // The ledger's server, when it runs on this machine: the consumer's claims cost
            // it CPU too (it may serve other work as well, so this is an upper bound).
            if let Some(pid) = local_mariadb_pid() {
                w.push(Watched::new(Role::Mariadb, "mariadb server (shared)", pid));
            }
        }
        w.extend(self.redis.watched());
        if let Some(pid) = self._replica.as_ref().and_then(RedisServer::pid) {
            w.push(Watched::new(
                Role::RedisReplica,
                "redis-server replica",
                pid,
            ));
        }
        w
    }

    pub(crate) async fn start(o: &StackOpts) -> anyhow::Result<Self> {
        let o = o.clone();
        tokio::task::spawn_blocking(move || Self::start_blocking(&o)).await?
    }

    fn start_blocking(o: &StackOpts) -> anyhow::Result<Self> {
        let shards = o.shards();
        let redis = LocalRedis::start(if o.cluster { 3 } else { 1 })?;
        let replica = match (o.ablation.contains(&Ablation::Replica), &redis) {
            (true, LocalRedis::Single(primary)) => {
                Some(RedisServer::try_start_replica_of(primary)?)
            }
            _ => None,
        };
        let mut stack = Self {
            gateways: Vec::new(),
            consumer: None,
            _replica: replica,
            redis,
            mysql_url: None,
            consumer_bin: None,
            shards,
            db: None,
            token_secret_file: write_token_secret()?,
        };
        let mut common = vec![
            "--redis".to_owned(),
            stack.redis.addr_list(),
            "--shards".to_owned(),
            shards.to_string(),
        ];
        if stack.redis.is_cluster() {
            common.push("--redis-cluster".into());
        }
        if !o.no_consumer {
            let server = Mysql::parse(&o.mysql_server)?;
            let db = format!("fg_bench_{}", shard_router::now_ms());
            server.query_blocking(&format!("CREATE DATABASE `{db}`"))?;
            let url = format!(
                "mysql://{}{}@{}:{}/{db}",
                server.user,
                server
                    .password
                    .as_ref()
                    .map(|p| format!(":{p}"))
                    .unwrap_or_default(),
                server.host,
                server.port
            );
            stack.db = Some((server, db));
            let bin = find_bin(o.consumer_bin_path.as_deref(), "consumer")?;
            let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let mut p = Proc::spawn(
                "consumer".into(),
                Command::new(&bin).args(&common).args([
                    "--mysql",
                    &url,
                    "run",
                    "--admin-addr",
                    &admin.to_string(),
                ]),
            )?;
            wait_ready(&mut p, admin, "/healthz")?;
            stack.consumer = Some(p);
            stack.mysql_url = Some(url);
            stack.consumer_bin = Some(bin);
        }
        let bin = find_bin(o.gateway_bin.as_deref(), "gateway")?;
        for i in 0..o.gateways {
            let api = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let mut cmd = Command::new(&bin);
            // No balancer in front of a bench stack: nothing to wait for on stop.
            cmd.args(&common).args([
                "--listen",
                &api.to_string(),
                "--admin-listen",
                &admin.to_string(),
                "--drain-delay-ms",
                "0",
            ]);
            cmd.arg("--token-secret-file").arg(&stack.token_secret_file);
            // All the load comes from one address: a per-client limit would measure itself.
            if !o
                .gateway_args
                .iter()
                .any(|a| a.starts_with("--client-rate"))
            {
                cmd.args(["--client-rate", "0"]);
            }
            for a in &o.ablation {
                match a {
                    Ablation::NoSoldOutCache => cmd.arg("--no-sold-out-cache"),
                    Ablation::NoSecondChance => cmd.arg("--no-second-chance"),
                    Ablation::Replica => cmd.args(["--durability", "replica"]),
                    Ablation::Shards1 => &mut cmd,
                };
            }
            cmd.args(&o.gateway_args);
            let mut p = Proc::spawn(format!("gateway {i}"), &mut cmd)?;
            wait_ready(&mut p, api, "/readyz")?;
            stack.gateways.push((p, api, admin));
        }
        Ok(stack)
    }

    pub(crate) fn gateway_urls(&self) -> Vec<String> {
        self.gateways
            .iter()
            .map(|(_, a, _)| format!("http://{a}"))
            .collect()
    }

    pub(crate) fn describe(&self) -> String {
        let mut s = format!("redis: {}\n", self.redis.addr_list());
        if let Some(u) = &self.mysql_url {
            s.push_str(&format!("mysql: {u}\n"));
        }
        for (i, (_, api, admin)) in self.gateways.iter().enumerate() {
            s.push_str(&format!(
                "gateway {i}: http://{api} (metrics http://{admin}/metrics)\n"
            ));
        }
        s
    }
}

/// The pid of a local `mariadbd` (or `mysqld`), if one runs and /proc shows it.
fn local_mariadb_pid() -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        matches!(comm.trim(), "mariadbd" | "mysqld").then_some(pid)
    })
}

fn wait_ready(p: &mut Proc, addr: SocketAddr, path: &str) -> anyhow::Result<()> {
    let name = p.name.clone();
    let mut exited = None;
    let r = wait_until(&format!("{name} {path}"), READY_LIMIT, || {
        if let Err(e) = p.check_alive() {
            exited = Some(e);
            return true;
        }
        http_ok(addr, path)
    });
    if let Some(e) = exited {
        return Err(e);
    }
    Ok(r?)
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Gateways first (no new claims), then the consumer flushes, then the database goes.
        self.gateways.clear();
        self.consumer = None;
        if let Some((server, db)) = self.db.take() {
            let _ = server.query_blocking(&format!("DROP DATABASE IF EXISTS `{db}`"));
        }
        let _ = std::fs::remove_file(&self.token_secret_file);
    }
}

/// A fresh random HS256 secret in a private temporary file.
fn write_token_secret() -> anyhow::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let secret: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let path = std::env::temp_dir().join(format!(
        "fg-bench-token-{}-{}",
        std::process::id(),
        shard_router::now_ms()
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(secret.as_bytes()))
        .map_err(|e| anyhow::anyhow!("token secret {}: {e}", path.display()))?;
    Ok(path)
}
