//! Read-only ledger queries through the `mariadb` command-line client. The bench only
//! counts rows after a run, so it needs no driver of its own (and none of sqlx's build).

use std::process::{Command, Stdio};
use std::time::Duration;

/// A failed ledger query.
#[derive(Debug, thiserror::Error)]
pub enum MysqlError {
    #[error("mysql url {0:?}: expected mysql://user[:pass]@host[:port]/db")]
    BadUrl(String),
    #[error("run mariadb client: {0} (is it installed?)")]
    Spawn(#[source] std::io::Error),
    #[error("mariadb client: {0}")]
    Query(String),
    #[error("mariadb client: no answer within {0:?}")]
    Timeout(Duration),
}

/// Bound on one query (the client's own connect timeout is shorter).
const QUERY_LIMIT: Duration = Duration::from_secs(20);

/// Connection parts of a `mysql://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mysql {
    pub user: String,
    pub password: Option<String>,
    pub host: String,
    pub port: u16,
    pub db: String,
}

impl Mysql {
    pub fn parse(url: &str) -> Result<Self, MysqlError> {
        let bad = || MysqlError::BadUrl(url.to_owned());
        let rest = url
            .strip_prefix("mysql://")
            .or_else(|| url.strip_prefix("mariadb://"))
            .ok_or_else(bad)?;
        let (auth, db) = rest.split_once('/').ok_or_else(bad)?;
        let db = db.split('?').next().unwrap_or(db);
        let (cred, hostport) = auth.rsplit_once('@').unwrap_or(("root", auth));
        let (user, password) = match cred.split_once(':') {
            Some((u, p)) => (u.to_owned(), Some(p.to_owned())),
            None => (cred.to_owned(), None),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), p.parse().map_err(|_| bad())?),
            None => (hostport.to_owned(), 3306),
        };
        if db.is_empty() || host.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            user,
            password,
            host,
            port,
            db: db.to_owned(),
        })
    }

    /// Runs one query; returns the rows as tab-separated fields.
    pub async fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, MysqlError> {
        let mut cmd = tokio::process::Command::from(self.command());
        cmd.args(["-e", sql])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(QUERY_LIMIT, cmd.output())
            .await
            .map_err(|_| MysqlError::Timeout(QUERY_LIMIT))?
            .map_err(MysqlError::Spawn)?;
        if !out.status.success() {
            return Err(MysqlError::Query(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').map(str::to_owned).collect())
            .collect())
    }

    /// [`Self::query`] for callers outside async code (setup and teardown of a stack).
    /// Polls the child, so the wait stays bounded.
    pub fn query_blocking(&self, sql: &str) -> Result<(), MysqlError> {
        let mut child = self
            .command()
            .args(["-e", sql])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(MysqlError::Spawn)?;
        let deadline = std::time::Instant::now() + QUERY_LIMIT;
        loop {
            if let Some(status) = child.try_wait().map_err(MysqlError::Spawn)? {
                if status.success() {
                    return Ok(());
                }
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(MysqlError::Query(err.trim().to_owned()));
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(MysqlError::Timeout(QUERY_LIMIT));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("mariadb");
        cmd.args([
            "--batch",
            "--skip-column-names",
            "--connect-timeout=3",
            "--protocol=TCP",
        ])
        .arg(format!("--host={}", self.host))
        .arg(format!("--port={}", self.port))
        .arg(format!("--user={}", self.user));
        if let Some(p) = &self.password {
            cmd.arg(format!("--password={p}"));
        }
        cmd.arg(&self.db);
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let m = Mysql::parse("mysql://root:pw@127.0.0.1:3307/flashgate").unwrap();
        assert_eq!(m.user, "root");
        assert_eq!(m.password.as_deref(), Some("pw"));
        assert_eq!(m.port, 3307);
        assert_eq!(m.db, "flashgate");
        let m = Mysql::parse("mysql://127.0.0.1/fg").unwrap();
        assert_eq!((m.user.as_str(), m.port), ("root", 3306));
        assert!(Mysql::parse("postgres://x/y").is_err());
        assert!(Mysql::parse("mysql://127.0.0.1").is_err());
    }
}
