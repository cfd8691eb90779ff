//! External clients on the same stack, in the same run: wrk with
//! `bench/external/claims.lua` (one distinct user per request) and h2load (one fixed
//! request, `h2load.rs` says why). Our own load generator's figures are only as honest as
//! its cost: its CPU per answer is compared with theirs, and the gateway's and Redis's CPU
//! per answer under them are the figures to trust.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use crate::stack::cpu::{cpu_seconds, CpuUse, Role, Watched};

mod h2load;
mod wrk;

pub use wrk::CLAIMS_LUA;

/// How long a client may overrun its duration before it is killed.
const OVERRUN: Duration = Duration::from_secs(30);

/// Which external client drives the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExternalClient {
    /// wrk with `bench/external/claims.lua`: a distinct user and request id per request.
    Wrk,
    /// h2load over HTTP/1.1: one user sends the same body, without a request id, on every
    /// request (h2load cannot vary a body).
    H2load,
}

impl ExternalClient {
    pub fn name(self) -> &'static str {
        match self {
            Self::Wrk => "wrk",
            Self::H2load => "h2load",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    #[error("cannot run {bin}: {source} (install it: apt-get install wrk nghttp2-client)")]
    Spawn { bin: String, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} did not finish within {1:?}")]
    Hung(&'static str, Duration),
    #[error("{0} printed no summary: {1}")]
    NoSummary(&'static str, String),
    #[error("wrk's summary is not valid: {0}")]
    BadSummary(#[from] serde_json::Error),
}

/// What an external client measured on the same stack in the same run: the report's
/// `external` (wrk) and `h2load` fields, defined beside the run that fills them (as
/// `CpuUse` is in `cpu.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExternalReport {
    pub client: String,
    pub connections: usize,
    pub requests: u64,
    pub duration_s: f64,
    pub throughput_rps: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Answers by HTTP status.
    pub statuses: BTreeMap<u16, u64>,
    /// Connect, read, write and timeout errors as the client counts them.
    pub socket_errors: u64,
    pub cpu: Vec<CpuUse>,
}

/// One external client's run.
#[derive(Debug, Clone)]
pub struct ExternalSpec {
    pub client: ExternalClient,
    pub bin: String,
    /// Full URL of the claim API.
    pub url: String,
    pub threads: usize,
    pub connections: usize,
    pub duration: Duration,
    pub timeout: Duration,
    /// Prefix of users and request ids.
    pub tag: String,
    pub skus: Vec<u64>,
    /// Bearer tokens to send (`user token` lines), when the gateways verify them. h2load
    /// sends the first line's.
    pub tokens_file: Option<PathBuf>,
}

impl ExternalSpec {
    fn threads(&self) -> usize {
        self.threads.clamp(1, self.connections.max(1))
    }

    fn secs(&self) -> u64 {
        self.duration.as_secs_f64().ceil().max(1.0) as u64
    }

    /// A file of this run's in the temp directory, named by process, client and tag so
    /// that two runs or two clients never share one.
    fn temp_path(&self, ext: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "flashgate-{}-{}-{}.{ext}",
            self.client.name(),
            std::process::id(),
            self.tag
        ))
    }

    /// [`Self::temp_path`], written with `contents`.
    fn temp_file(&self, ext: &str, contents: &str) -> Result<PathBuf, ExternalError> {
        let path = self.temp_path(ext);
        std::fs::write(&path, contents).map_err(|source| ExternalError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

/// Runs the client and accounts CPU for it and for `watched` (the stack's processes).
pub async fn run_external(
    spec: &ExternalSpec,
    watched: Vec<Watched>,
) -> Result<ExternalReport, ExternalError> {
    match spec.client {
        ExternalClient::Wrk => wrk::run(spec, watched).await,
        ExternalClient::H2load => h2load::run(spec, watched).await,
    }
}

/// What the client measured, before CPU is divided by its answers.
struct Measured {
    requests: u64,
    duration_s: f64,
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
    statuses: BTreeMap<u16, u64>,
    socket_errors: u64,
}

/// A finished client process: its stdout, its own CPU seconds, and the CPU seconds each
/// watched process used while it ran.
struct Finished {
    stdout: String,
    stderr: String,
    client_cpu_s: Option<f64>,
    used: Vec<(Watched, f64)>,
}

/// Spawns `cmd`, waits for it within its duration plus [`OVERRUN`], and reads the CPU
/// each process used meanwhile.
async fn run_child(
    name: &'static str,
    mut cmd: tokio::process::Command,
    secs: u64,
    watched: Vec<Watched>,
) -> Result<Finished, ExternalError> {
    let before: Vec<(Watched, Option<f64>)> = watched
        .into_iter()
        .map(|w| {
            let t = cpu_seconds(w.pid);
            (w, t)
        })
        .collect();
    let bin = cmd.as_std().get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ExternalError::Spawn { bin, source })?;
    let pid = child.id();
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let limit = Duration::from_secs(secs) + OVERRUN;
    if let (Some(mut out), Some(mut err)) = (child.stdout.take(), child.stderr.take()) {
        // Both pipes at once: a client that fills one while we wait on the other would
        // never exit.
        let read = async {
            let (o, e) = tokio::join!(
                out.read_to_string(&mut stdout),
                err.read_to_string(&mut stderr)
            );
            o.and(e)
        };
        tokio::time::timeout(limit, read)
            .await
            .map_err(|_| ExternalError::Hung(name, limit))?
            .map_err(|e| ExternalError::NoSummary(name, e.to_string()))?;
    }
    // Read the client's CPU while it is a zombie (not yet reaped), then reap it.
    let mut client_cpu_s = None;
    for _ in 0..100 {
        match pid.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok()) {
            Some(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z')) =>
            {
                client_cpu_s = pid.and_then(|p| cpu_seconds(Some(p)));
                break;
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            None => break,
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    let used = before
        .into_iter()
        .filter_map(|(w, t0)| {
            let used = cpu_seconds(w.pid)? - t0?;
            Some((w, used))
        })
        .collect();
    Ok(Finished {
        stdout,
        stderr,
        client_cpu_s,
        used,
    })
}

impl Finished {
    /// What the client printed, for an error that found no summary in it.
    fn printed(&self) -> String {
        format!("{} {}", self.stdout.trim(), self.stderr.trim())
            .trim()
            .to_owned()
    }

    /// The report: every process's CPU divided by the client's answers; the client's own
    /// CPU is `fallback_cpu_s` when its CPU clock could not be read.
    fn report(self, spec: &ExternalSpec, m: Measured, fallback_cpu_s: f64) -> ExternalReport {
        let per = |cpu_s: f64| {
            if m.requests > 0 {
                cpu_s * 1e6 / m.requests as f64
            } else {
                0.0
            }
        };
        let name = spec.client.name();
        let own = self.client_cpu_s.unwrap_or(fallback_cpu_s);
        let mut cpu = vec![CpuUse {
            process: format!("{name} (external client)"),
            role: Role::ExternalClient,
            cpu_s: own,
            us_per_answer: per(own),
        }];
        cpu.extend(self.used.into_iter().map(|(w, used)| CpuUse {
            process: w.name,
            role: w.role,
            cpu_s: used,
            us_per_answer: per(used),
        }));
        ExternalReport {
            client: format!("{name} -t{}", spec.threads()),
            connections: spec.connections,
            requests: m.requests,
            duration_s: m.duration_s,
            throughput_rps: if m.duration_s > 0.0 {
                m.requests as f64 / m.duration_s
            } else {
                0.0
            },
            p50_us: m.p50_us,
            p99_us: m.p99_us,
            max_us: m.max_us,
            statuses: m.statuses,
            socket_errors: m.socket_errors,
            cpu,
        }
    }
}
