//! An external client on the same stack, in the same run: wrk with
//! `bench/external/claims.lua` (one distinct user per request). Our own load generator's
//! figures are only as honest as its cost: its CPU per answer is compared with wrk's, and
//! the gateway's and Redis's CPU per answer under wrk are the figures to trust.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use crate::stack::cpu::{cpu_seconds, CpuUse, Role, Watched};

/// The wrk script, also committed as `bench/external/claims.lua` for use by hand.
pub const CLAIMS_LUA: &str = include_str!("../../external/claims.lua");
/// How long wrk may overrun its duration before it is killed.
const OVERRUN: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    #[error("cannot run {bin}: {source} (install it: apt-get install wrk)")]
    Spawn { bin: String, source: std::io::Error },
    #[error("cannot write the wrk script {path}: {source}")]
    Script {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("wrk did not finish within {0:?}")]
    Hung(Duration),
    #[error("wrk printed no FGJSON line: {0}")]
    NoSummary(String),
    #[error("wrk's summary is not valid: {0}")]
    BadSummary(#[from] serde_json::Error),
}

/// What an external client (wrk) measured on the same stack in the same run: the report's
/// `external` field, defined beside the run that fills it (as `CpuUse` is in `cpu.rs`).
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

/// One wrk run.
#[derive(Debug, Clone)]
pub struct WrkSpec {
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
    /// Bearer tokens to send (`user token` lines), when the gateways verify them.
    pub tokens_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Summary {
    requests: u64,
    duration_us: u64,
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
    socket_errors: u64,
    statuses: BTreeMap<u16, u64>,
    cpu_s: f64,
}

/// Runs wrk and accounts CPU for it and for `watched` (the stack's processes).
pub async fn run_wrk(
    spec: &WrkSpec,
    watched: Vec<Watched>,
) -> Result<ExternalReport, ExternalError> {
    let path = std::env::temp_dir().join(format!("flashgate-wrk-{}.lua", std::process::id()));
    std::fs::write(&path, CLAIMS_LUA).map_err(|source| ExternalError::Script {
        path: path.clone(),
        source,
    })?;
    let skus: Vec<String> = spec.skus.iter().map(u64::to_string).collect();
    let threads = spec.threads.clamp(1, spec.connections.max(1));
    let secs = spec.duration.as_secs_f64().ceil().max(1.0) as u64;
    let before: Vec<(Watched, Option<f64>)> = watched
        .into_iter()
        .map(|w| {
            let t = cpu_seconds(w.pid);
            (w, t)
        })
        .collect();
    let mut child = tokio::process::Command::new(&spec.bin)
        .args([
            format!("-t{threads}"),
            format!("-c{}", spec.connections.max(threads)),
            format!("-d{secs}s"),
            format!("--timeout={}s", spec.timeout.as_secs().max(1)),
            "-s".to_owned(),
            path.display().to_string(),
            spec.url.clone(),
            "--".to_owned(),
            spec.tag.clone(),
            skus.join(","),
        ])
        .args(
            spec.tokens_file
                .iter()
                .flat_map(|p| [p.display().to_string(), threads.to_string()]),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ExternalError::Spawn {
            bin: spec.bin.clone(),
            source,
        })?;
    let pid = child.id();
    let mut out = String::new();
    let limit = Duration::from_secs(secs) + OVERRUN;
    if let Some(mut stdout) = child.stdout.take() {
        tokio::time::timeout(limit, stdout.read_to_string(&mut out))
            .await
            .map_err(|_| ExternalError::Hung(limit))?
            .map_err(|e| ExternalError::NoSummary(e.to_string()))?;
    }
    // Read wrk's CPU while it is a zombie (not yet reaped), then reap it.
    let mut wrk_cpu = None;
    for _ in 0..100 {
        match pid.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok()) {
            Some(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z')) =>
            {
                wrk_cpu = pid.and_then(|p| cpu_seconds(Some(p)));
                break;
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            None => break,
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    let _ = std::fs::remove_file(&path);
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("FGJSON "))
        .ok_or_else(|| ExternalError::NoSummary(out.trim().to_owned()))?;
    let s: Summary = serde_json::from_str(line)?;
    let per = |cpu_s: f64| {
        if s.requests > 0 {
            cpu_s * 1e6 / s.requests as f64
        } else {
            0.0
        }
    };
    // wrk's own CPU from its CPU clock; the script's os.clock() (process CPU time) if
    // unreadable.
    let wrk_s = wrk_cpu.unwrap_or(s.cpu_s);
    let mut cpu = vec![CpuUse {
        process: "wrk (external client)".into(),
        role: Role::ExternalClient,
        cpu_s: wrk_s,
        us_per_answer: per(wrk_s),
    }];
    cpu.extend(before.into_iter().filter_map(|(w, t0)| {
        let used = cpu_seconds(w.pid)? - t0?;
        Some(CpuUse {
            process: w.name,
            role: w.role,
            cpu_s: used,
            us_per_answer: per(used),
        })
    }));
    let duration_s = s.duration_us as f64 / 1e6;
    Ok(ExternalReport {
        client: format!("wrk -t{threads}"),
        connections: spec.connections,
        requests: s.requests,
        duration_s,
        throughput_rps: if duration_s > 0.0 {
            s.requests as f64 / duration_s
        } else {
            0.0
        },
        p50_us: s.p50_us,
        p99_us: s.p99_us,
        max_us: s.max_us,
        statuses: s.statuses,
        socket_errors: s.socket_errors,
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_parses() {
        let s: Summary = serde_json::from_str(
            r#"{"requests":10,"duration_us":1000000,"p50_us":100,"p99_us":900,"max_us":1000,"socket_errors":0,"statuses":{"201":3,"410":7},"cpu_s":0.010}"#,
        )
        .unwrap();
        assert_eq!(s.statuses[&410], 7);
    }
}
