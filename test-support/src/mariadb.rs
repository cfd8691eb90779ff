//! MariaDB for tests, two ways:
//! - [`TestDatabase`]: a fresh, uniquely named database on the machine's shared server
//!   (`mysql://root@127.0.0.1:3306`, overridable with `FLASHGATE_TEST_MYSQL_URL`), dropped
//!   on `Drop`. Cheap: use it for every test that does not need to stop the server.
//! - [`MariaDbServer`]: a private `mariadbd` in a temp dir on a free port, with
//!   [`MariaDbServer::stop`] / [`MariaDbServer::start_again`] for outage drills; killed on
//!   `Drop`.
//!
//! Both reach the server with sqlx (the workspace's MySQL driver), on a short-lived thread
//! with its own runtime: these guards are built and dropped from synchronous code, often
//! inside a test's runtime, which cannot be blocked on from within.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx::mysql::MySqlConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::certs::make_certificates;
use crate::{free_port, wait_until};

/// Env var naming the shared server's URL (`mysql://user[:pass]@host:port`).
pub const ENV_TEST_MYSQL_URL: &str = "FLASHGATE_TEST_MYSQL_URL";
/// The shared server when the env var is unset.
pub const DEFAULT_TEST_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306";

static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// One bound on every statement these guards run, connect included.
const SQL_TIMEOUT: Duration = Duration::from_secs(10);

/// A server's connection options without a database (the guards create and drop them).
#[derive(Debug, Clone)]
struct Server {
    opts: MySqlConnectOptions,
}

impl Server {
    fn parse(url: &str) -> Self {
        let opts = MySqlConnectOptions::from_str(url)
            .unwrap_or_else(|e| panic!("{ENV_TEST_MYSQL_URL} is not a MySQL URL ({url}): {e}"));
        Self { opts }
    }

    /// The URL of `db`, without the `statement-cache-capacity` that `to_url_lossy` writes
    /// out (sqlx's default, not a choice): the consumer sizes its cache itself unless a URL
    /// names one (`ledger/src/pool.rs`), and tests run with what production runs with.
    fn url(&self, db: &str) -> String {
        let mut url = self.opts.clone().database(db).to_url_lossy();
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| k != "statement-cache-capacity")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
        url.to_string()
    }

    /// Runs one statement outside any database; the error as text.
    fn exec(&self, sql: &str) -> Result<(), String> {
        let opts = self.opts.clone();
        let sql = sql.to_owned();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("runtime: {e}"))?;
            rt.block_on(async {
                let run = async {
                    let mut conn = opts.connect().await?;
                    sqlx::raw_sql(&sql).execute(&mut conn).await?;
                    conn.close().await
                };
                match tokio::time::timeout(SQL_TIMEOUT, run).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {SQL_TIMEOUT:?}")),
                }
            })
        })
        .join()
        .unwrap_or_else(|_| Err("sql thread panicked".into()))
    }
}

/// A fresh database on the shared server, dropped on `Drop`.
pub struct TestDatabase {
    server: Server,
    name: String,
}

impl TestDatabase {
    /// Creates `fg_test_<pid>_<n>_<nanos>` on the shared server.
    pub fn create() -> Self {
        let url =
            std::env::var(ENV_TEST_MYSQL_URL).unwrap_or_else(|_| DEFAULT_TEST_MYSQL_URL.to_owned());
        let server = Server::parse(&url);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "fg_test_{}_{}_{nanos}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        server
            .exec(&format!("CREATE DATABASE `{name}`"))
            .unwrap_or_else(|e| panic!("create test database on {url} (is MariaDB running?): {e}"));
        Self { server, name }
    }

    /// `mysql://…/<db>` for sqlx.
    pub fn url(&self) -> String {
        self.server.url(&self.name)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = self
            .server
            .exec(&format!("DROP DATABASE IF EXISTS `{}`", self.name));
    }
}

/// A private `mariadbd` owned by the test: its own datadir, socket and port.
pub struct MariaDbServer {
    child: Option<Child>,
    server: Server,
    port: u16,
    dir: PathBuf,
    /// Serves TLS with a certificate made for the test (`certs.rs`).
    tls: bool,
}

/// Database every private server creates, so URLs can name one.
pub const PRIVATE_DB: &str = "flashgate";

impl MariaDbServer {
    /// Initialises a datadir and starts the server; creates database [`PRIVATE_DB`].
    pub fn start() -> Self {
        Self::start_inner(false)
    }

    /// As [`Self::start`], and the server also accepts TLS, on a certificate for
    /// 127.0.0.1 signed by [`Self::ca_file`]'s CA. Plain connections still work (setup).
    pub fn start_with_tls() -> Self {
        Self::start_inner(true)
    }

    fn start_inner(tls: bool) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("fg-mariadb-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("create mariadb temp dir");
        let install = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .arg(format!("--user={}", whoami()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("mariadb-install-db must be installed");
        assert!(
            install.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&install.stderr)
        );
        let mut s = Self {
            child: None,
            server: Server {
                opts: MySqlConnectOptions::new()
                    .host("127.0.0.1")
                    .port(port)
                    .username("root"),
            },
            port,
            dir,
            tls,
        };
        if tls {
            make_certificates(&s.dir);
        }
        s.start_again();
        s.server
            .exec(&format!("CREATE DATABASE IF NOT EXISTS `{PRIVATE_DB}`"))
            .expect("create database on private mariadbd");
        s
    }

    /// Starts the server (again) on the same port and datadir; waits until it answers.
    pub fn start_again(&mut self) {
        if self.child.is_some() {
            return;
        }
        let d = |p: &str| self.dir.join(p).display().to_string();
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", d("data")))
            .arg(format!("--socket={}", d("mysqld.sock")))
            .arg(format!("--pid-file={}", d("mysqld.pid")))
            .arg(format!("--log-error={}", d("error.log")))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--user={}", whoami()))
            // Small footprint: the machine is shared; the tests need correctness, not speed.
            .args([
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--skip-log-bin",
                "--performance-schema=OFF",
            ])
            .args(self.tls_args())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd must be installed");
        self.child = Some(child);
        let server = self.server.clone();
        wait_until(
            "private mariadbd to answer",
            Duration::from_secs(30),
            || server.exec("SELECT 1").is_ok(),
        );
    }

    /// Stops the server (SIGTERM, SIGKILL after 10 s); data stays for [`Self::start_again`].
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// PEM file of the CA that signed the server's certificate ([`Self::start_with_tls`]).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    fn tls_args(&self) -> Vec<String> {
        if !self.tls {
            return Vec::new();
        }
        let d = |p: &str| self.dir.join(p).display().to_string();
        vec![
            format!("--ssl-ca={}", d("ca.crt")),
            format!("--ssl-cert={}", d("server.crt")),
            format!("--ssl-key={}", d("server.key")),
        ]
    }

    /// `mysql://root@127.0.0.1:<port>/flashgate`.
    pub fn url(&self) -> String {
        self.server.url(PRIVATE_DB)
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn whoami() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".into())
}
