//! wrk with `bench/external/claims.lua`: a distinct user and request id per request, read
//! back from the script's `FGJSON` line.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{run_child, ExternalError, ExternalReport, ExternalSpec, Measured};
use crate::stack::cpu::Watched;

/// The wrk script, also committed as `bench/external/claims.lua` for use by hand.
pub const CLAIMS_LUA: &str = include_str!("../../../external/claims.lua");

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

pub(super) async fn run(
    spec: &ExternalSpec,
    watched: Vec<Watched>,
) -> Result<ExternalReport, ExternalError> {
    let path = spec.temp_file("lua", CLAIMS_LUA)?;
    let skus: Vec<String> = spec.skus.iter().map(u64::to_string).collect();
    let threads = spec.threads();
    let secs = spec.secs();
    let mut cmd = tokio::process::Command::new(&spec.bin);
    cmd.args([
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
    );
    let done = run_child("wrk", cmd, secs, watched).await;
    let _ = std::fs::remove_file(&path);
    let done = done?;
    let line = done
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("FGJSON "))
        .ok_or_else(|| ExternalError::NoSummary("wrk", done.printed()))?;
    let s: Summary = serde_json::from_str(line)?;
    let m = Measured {
        requests: s.requests,
        duration_s: s.duration_us as f64 / 1e6,
        p50_us: s.p50_us,
        p99_us: s.p99_us,
        max_us: s.max_us,
        statuses: s.statuses,
        socket_errors: s.socket_errors,
    };
    // wrk's own CPU from its CPU clock; the script's os.clock() (process CPU time) if
    // unreadable.
    Ok(done.report(spec, m, s.cpu_s))
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
