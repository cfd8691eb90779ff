//! `bench stack`: a whole local flashgate on free loopback ports, from locally built
//! binaries: Redis (single, or a 3-master cluster), a fresh database on a MariaDB server,
//! the consumer, and N gateways. Every process is owned by [`Stack`] and stopped on drop:
//! SIGTERM first (gateways drain, the consumer flushes its batch), SIGKILL after a bound.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bench::stack::cpu::{Role, Watched};
use bench::stack::mysql::Mysql;
use bench::stack::servers::{free_port, LocalRedis, RedisServer};
use shard_router::placement::DEFAULT_SHARDS;
use shard_router::RedisArgs;

mod proc;
use proc::{find_bin, local_mariadb_pid, wait_ready, Proc};

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
    #[arg(long, default_value_t = DEFAULT_SHARDS)]
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
    /// The queue secret every gateway signs queue tokens with (`--queue-secret-file`); a
    /// fresh random one per stack, removed on drop.
    pub(crate) queue_secret_file: PathBuf,
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
            token_secret_file: write_secret("token")?,
            queue_secret_file: write_secret("queue")?,
        };
        let common = RedisArgs::of(&stack.redis.target(), shards).to_args();
        if !o.no_consumer {
            stack.start_consumer(o, &common)?;
        }
        let bin = find_bin(o.gateway_bin.as_deref(), "gateway")?;
        for i in 0..o.gateways {
            let api = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let mut cmd = stack.gateway_command(o, &bin, &common, api, admin);
            let mut p = Proc::spawn(format!("gateway {i}"), &mut cmd)?;
            wait_ready(&mut p, api, "/readyz")?;
            stack.gateways.push((p, api, admin));
        }
        Ok(stack)
    }

    /// A fresh database on the MariaDB server, and the consumer on it.
    fn start_consumer(&mut self, o: &StackOpts, common: &[String]) -> anyhow::Result<()> {
        let server = Mysql::parse(&o.mysql_server)?;
        let db = format!("fg_bench_{}", shard_router::now_ms());
        tokio::runtime::Handle::current().block_on(server.create_database(&db))?;
        let url = Mysql::url_of(&o.mysql_server, &db);
        self.db = Some((server, db));
        let bin = find_bin(o.consumer_bin_path.as_deref(), "consumer")?;
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut p = Proc::spawn(
            "consumer".into(),
            Command::new(&bin).args(common).args([
                "--mysql",
                &url,
                "run",
                "--admin-addr",
                &admin.to_string(),
            ]),
        )?;
        wait_ready(&mut p, admin, "/healthz")?;
        self.consumer = Some(p);
        self.mysql_url = Some(url);
        self.consumer_bin = Some(bin);
        Ok(())
    }

    /// A gateway's command line: the stack's Redis and secrets, the ablations, then the
    /// extra `--gateway-arg`s.
    fn gateway_command(
        &self,
        o: &StackOpts,
        bin: &Path,
        common: &[String],
        api: SocketAddr,
        admin: SocketAddr,
    ) -> Command {
        let mut cmd = Command::new(bin);
        // No balancer in front of a bench stack: nothing to wait for on stop.
        cmd.args(common).args([
            "--listen",
            &api.to_string(),
            "--admin-listen",
            &admin.to_string(),
            "--drain-delay-ms",
            "0",
        ]);
        cmd.arg("--token-secret-file").arg(&self.token_secret_file);
        cmd.arg("--queue-secret-file").arg(&self.queue_secret_file);
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
        cmd
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

impl Drop for Stack {
    fn drop(&mut self) {
        // Gateways first (no new claims), then the consumer flushes, then the database goes.
        self.gateways.clear();
        self.consumer = None;
        if let Some((server, db)) = self.db.take() {
            // Drop runs inside the bench's runtime: the bounded async drop goes to a thread
            // with its own, so the database goes even when the run failed.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(server.drop_database(&db))
                    .map_err(std::io::Error::other)
            })
            .join();
        }
        let _ = std::fs::remove_file(&self.token_secret_file);
        let _ = std::fs::remove_file(&self.queue_secret_file);
    }
}

/// A fresh random 32-byte secret (hex) in a private temporary file: the HS256 token
/// secret, or the queue secret.
fn write_secret(what: &str) -> anyhow::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let secret: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let path = std::env::temp_dir().join(format!(
        "fg-bench-{what}-{}-{}",
        std::process::id(),
        shard_router::now_ms()
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(secret.as_bytes()))
        .map_err(|e| anyhow::anyhow!("{what} secret {}: {e}", path.display()))?;
    Ok(path)
}
