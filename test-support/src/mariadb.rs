//! MariaDB for tests, two ways:
//! - [`TestDatabase`]: a fresh, uniquely named database on the machine's shared server
//!   (`mysql://root@127.0.0.1:3306`, overridable with `FLASHGATE_TEST_MYSQL_URL`), dropped
//!   on `Drop`. Cheap: use it for every test that does not need to stop the server.
//! - [`MariaDbServer`]: a private `mariadbd` in a temp dir on a free port, with
//!   [`MariaDbServer::stop`] / [`MariaDbServer::start_again`] for outage drills; killed on
//!   `Drop`.
//!
//! Both talk to the server through the `mariadb` command-line client, so this crate needs
//! no MySQL driver of its own.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{free_port, wait_until};

/// Env var naming the shared server's URL (`mysql://user[:pass]@host:port`).
pub const ENV_TEST_MYSQL_URL: &str = "FLASHGATE_TEST_MYSQL_URL";
/// The shared server when the env var is unset.
pub const DEFAULT_TEST_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306";

static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// Connection parts of a `mysql://user[:pass]@host[:port][/db]` URL, as the CLI wants them.
#[derive(Debug, Clone)]
struct Server {
    user: String,
    password: Option<String>,
    host: String,
    port: u16,
}

impl Server {
    fn parse(url: &str) -> Self {
        let rest = url
            .strip_prefix("mysql://")
            .or_else(|| url.strip_prefix("mariadb://"))
            .unwrap_or_else(|| panic!("{ENV_TEST_MYSQL_URL} must start with mysql://: {url}"));
        let rest = rest.split('/').next().unwrap_or(rest);
        let (cred, hostport) = rest.rsplit_once('@').unwrap_or(("root", rest));
        let (user, password) = match cred.split_once(':') {
            Some((u, p)) => (u.to_owned(), Some(p.to_owned())),
            None => (cred.to_owned(), None),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (
                h.to_owned(),
                p.parse().expect("numeric port in test MySQL URL"),
            ),
            None => (hostport.to_owned(), 3306),
        };
        Self {
            user,
            password,
            host,
            port,
        }
    }

    fn url(&self, db: &str) -> String {
        let cred = match &self.password {
            Some(p) => format!("{}:{p}", self.user),
            None => self.user.clone(),
        };
        format!("mysql://{cred}@{}:{}/{db}", self.host, self.port)
    }

    /// Runs one SQL text with the `mariadb` client; returns stdout, or stderr as the error.
    fn sql(&self, db: Option<&str>, sql: &str) -> Result<String, String> {
        let mut cmd = Command::new("mariadb");
        cmd.args(["--batch", "--skip-column-names", "--connect-timeout=2"])
            .arg(format!("--host={}", self.host))
            .arg(format!("--port={}", self.port))
            .arg("--protocol=TCP")
            .arg(format!("--user={}", self.user));
        if let Some(p) = &self.password {
            cmd.arg(format!("--password={p}"));
        }
        if let Some(db) = db {
            cmd.arg(db);
        }
        let out = cmd
            .args(["-e", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run mariadb client: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
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
            .sql(None, &format!("CREATE DATABASE `{name}`"))
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

    /// Runs SQL in this database with the `mariadb` client (setup, assertions, baselines).
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        self.server.sql(Some(&self.name), sql)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = self
            .server
            .sql(None, &format!("DROP DATABASE IF EXISTS `{}`", self.name));
    }
}

/// A private `mariadbd` owned by the test: its own datadir, socket and port.
pub struct MariaDbServer {
    child: Option<Child>,
    server: Server,
    dir: PathBuf,
}

/// Database every private server creates, so URLs can name one.
pub const PRIVATE_DB: &str = "flashgate";

impl MariaDbServer {
    /// Initialises a datadir and starts the server; creates database [`PRIVATE_DB`].
    pub fn start() -> Self {
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
                user: "root".into(),
                password: None,
                host: "127.0.0.1".into(),
                port,
            },
            dir,
        };
        s.start_again();
        s.server
            .sql(
                None,
                &format!("CREATE DATABASE IF NOT EXISTS `{PRIVATE_DB}`"),
            )
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
            .arg(format!("--port={}", self.server.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--user={}", whoami()))
            // Small footprint: the machine is shared; the tests need correctness, not speed.
            .args([
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--skip-log-bin",
                "--performance-schema=OFF",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd must be installed");
        self.child = Some(child);
        let server = self.server.clone();
        wait_until(
            "private mariadbd to answer",
            Duration::from_secs(30),
            || server.sql(None, "SELECT 1").is_ok(),
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
        self.server.port
    }

    /// `mysql://root@127.0.0.1:<port>/flashgate`.
    pub fn url(&self) -> String {
        self.server.url(PRIVATE_DB)
    }

    /// Runs SQL in [`PRIVATE_DB`] with the `mariadb` client.
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        self.server.sql(Some(PRIVATE_DB), sql)
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
