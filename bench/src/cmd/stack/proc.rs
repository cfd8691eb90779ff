//! One process of a local stack: spawned with its log in a temporary file, waited on
//! until its HTTP port answers, and stopped with SIGTERM then SIGKILL after a bound.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench::stack::servers::wait_until;

use super::{READY_LIMIT, STOP_GRACE};

/// A child process stopped with SIGTERM, then SIGKILL, on drop. Its stderr (the log)
/// goes to a temporary file, not a pipe: nobody reads a pipe while the stack runs, and a
/// full one would block the process at its next log line (an access log fills it in a
/// fraction of a second).
pub(super) struct Proc {
    pub(super) name: String,
    pub(super) child: Child,
    pub(super) log: PathBuf,
}

/// The end of a log that is shown when a process died.
const LOG_TAIL: u64 = 4096;

impl Proc {
    pub(super) fn spawn(name: String, cmd: &mut Command) -> anyhow::Result<Self> {
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
    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
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

    pub(super) fn stop(&mut self) {
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
pub(super) fn http_ok(addr: SocketAddr, path: &str) -> bool {
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
pub(super) fn find_bin(flag: Option<&Path>, name: &str) -> anyhow::Result<PathBuf> {
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

/// The pid of a local `mariadbd` (or `mysqld`), if one runs and /proc shows it.
pub(super) fn local_mariadb_pid() -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        matches!(comm.trim(), "mariadbd" | "mysqld").then_some(pid)
    })
}

pub(super) fn wait_ready(p: &mut Proc, addr: SocketAddr, path: &str) -> anyhow::Result<()> {
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
