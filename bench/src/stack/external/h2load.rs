//! h2load (nghttp2) over HTTP/1.1 keep-alive, the second external client. It sends one
//! fixed body on every request, so one user claims again and again: the run's SKU copies
//! for h2load get a per-user limit that does not bind (`cmd/run/external.rs`), and the
//! body has no request id (a fixed one would make every request after the first a
//! replay). Every answer is still a claim through `claim.lua` or a sold-out answer from
//! memory, but a cheaper one than wrk's or ours: without a request id `claim.lua` neither
//! reads nor writes a stored answer, the sold-out path skips the replay filter, and the
//! user's hashes keep one field. The gateways must run without the per-user rate limit
//! (`--user-rate 0`), or nearly every answer is that limit's 429.
//!
//! Latency percentiles come from its per-request log (`--log-file`), since its summary
//! has none; writing it costs h2load a `write` per request, counted in its CPU.

use std::collections::BTreeMap;
use std::path::Path;

use super::{run_child, ExternalError, ExternalReport, ExternalSpec, Measured};
use crate::stack::cpu::Watched;

pub(super) async fn run(
    spec: &ExternalSpec,
    watched: Vec<Watched>,
) -> Result<ExternalReport, ExternalError> {
    let (user, authorization) = first_user(spec)?;
    let body = format!(
        r#"{{"sku":{},"user":"{user}","qty":1}}"#,
        spec.skus.first().copied().unwrap_or(1)
    );
    let body_path = spec.temp_file("json", &body)?;
    let log_path = spec.temp_path("log");
    // h2load appends to its log: a file left by an earlier run must not count twice.
    let _ = std::fs::remove_file(&log_path);
    let threads = spec.threads();
    let secs = spec.secs();
    let mut cmd = tokio::process::Command::new(&spec.bin);
    cmd.args([
        "--h1".to_owned(),
        // No answer within the timeout closes the connection and errors its request.
        format!("-N{}", spec.timeout.as_secs().max(1)),
        format!("-t{threads}"),
        format!("-c{}", spec.connections.max(threads)),
        format!("-D{secs}"),
        "-d".to_owned(),
        body_path.display().to_string(),
        "-H".to_owned(),
        "content-type: application/json".to_owned(),
        format!("--log-file={}", log_path.display()),
    ]);
    if let Some(auth) = authorization {
        cmd.args(["-H".to_owned(), format!("authorization: {auth}")]);
    }
    cmd.arg(&spec.url);
    let done = run_child("h2load", cmd, secs, watched).await;
    let log = std::fs::read_to_string(&log_path);
    let _ = std::fs::remove_file(&body_path);
    let _ = std::fs::remove_file(&log_path);
    let done = done?;
    let summary = parse_summary(&done.stdout)
        .ok_or_else(|| ExternalError::NoSummary("h2load", done.printed()))?;
    let log = log.map_err(|e| ExternalError::NoSummary("h2load", format!("its log: {e}")))?;
    // Requests are logged over the -D window only, so throughput is over that window;
    // "finished in" also counts the threads' start and end.
    let summary = Summary {
        duration_s: secs as f64,
        ..summary
    };
    let m = measured(&log, summary);
    Ok(done.report(spec, m, 0.0))
}

/// The user h2load sends as, and its `Authorization` value: the tokens file's first line
/// when the gateways verify tokens.
fn first_user(spec: &ExternalSpec) -> Result<(String, Option<String>), ExternalError> {
    let Some(path) = &spec.tokens_file else {
        return Ok((format!("{}h0", spec.tag), None));
    };
    let text = std::fs::read_to_string(path).map_err(|e| read_error(path, e))?;
    text.lines()
        .find_map(|l| l.split_once(' '))
        .map(|(u, t)| (u.to_owned(), Some(t.to_owned())))
        .ok_or_else(|| ExternalError::NoSummary("h2load", format!("no user in {path:?}")))
}

fn read_error(path: &Path, e: std::io::Error) -> ExternalError {
    ExternalError::NoSummary("h2load", format!("cannot read {}: {e}", path.display()))
}

/// From h2load's summary: the seconds it ran (`finished in 8.00s, ...`) and the requests
/// that errored (`requests: ... 0 errored, 0 timeout`; a timed-out request is counted
/// as errored too).
#[derive(Debug, PartialEq)]
struct Summary {
    duration_s: f64,
    errors: u64,
}

fn parse_summary(out: &str) -> Option<Summary> {
    let finished = out.lines().find_map(|l| l.strip_prefix("finished in "))?;
    let took = finished.split(',').next()?.trim();
    let duration_s = if let Some(ms) = took.strip_suffix("ms") {
        ms.parse::<f64>().ok()? / 1e3
    } else if let Some(us) = took.strip_suffix("us") {
        us.parse::<f64>().ok()? / 1e6
    } else {
        took.strip_suffix('s')?.parse().ok()?
    };
    let requests = out.lines().find_map(|l| l.strip_prefix("requests: "))?;
    let count = |what: &str| {
        requests
            .split(',')
            .find_map(|p| p.trim().strip_suffix(what))
            .and_then(|n| n.trim().parse::<u64>().ok())
    };
    Some(Summary {
        duration_s,
        errors: count(" errored")?,
    })
}

/// Answers by status and latency percentiles from the per-request log (`start_us \t
/// status \t duration_us` per line); a line without an HTTP status is an error.
fn measured(log: &str, s: Summary) -> Measured {
    let mut statuses = BTreeMap::new();
    let mut took = Vec::new();
    for line in log.lines() {
        let mut cols = line.split('\t').skip(1);
        let status = cols.next().and_then(|c| c.trim().parse::<u16>().ok());
        let us = cols.next().and_then(|c| c.trim().parse::<u64>().ok());
        if let (Some(status @ 100..=599), Some(us)) = (status, us) {
            *statuses.entry(status).or_insert(0) += 1;
            took.push(us);
        }
    }
    took.sort_unstable();
    let pct = |q: f64| {
        if took.is_empty() {
            return 0;
        }
        let i = ((q * took.len() as f64).ceil() as usize).clamp(1, took.len()) - 1;
        took[i]
    };
    Measured {
        requests: took.len() as u64,
        duration_s: s.duration_s,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        max_us: took.last().copied().unwrap_or(0),
        statuses,
        socket_errors: s.errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "starting benchmark...\n\
        finished in 8.00s, 41234.50 req/s, 9.12MB/s\n\
        requests: 329876 total, 329876 started, 329876 done, 3 succeeded, 329873 failed, 3 errored, 1 timeout\n\
        status codes: 3 2xx, 0 3xx, 329873 4xx, 0 5xx\n";

    #[test]
    fn the_summary_gives_the_duration_and_the_errors() {
        assert_eq!(
            parse_summary(OUT),
            Some(Summary {
                duration_s: 8.0,
                errors: 3
            })
        );
        let short = OUT.replace("8.00s", "250.50ms");
        assert_eq!(parse_summary(&short).unwrap().duration_s, 0.2505);
        assert_eq!(parse_summary("no summary"), None);
    }

    #[test]
    fn the_log_gives_statuses_and_percentiles() {
        let mut log = String::new();
        for i in 1..=100u64 {
            let status = if i <= 3 { 201 } else { 410 };
            log.push_str(&format!("1700000000{i:06}\t{status}\t{}\n", i * 10));
        }
        log.push_str("1700000000000999\t-1\t5\n");
        let m = measured(
            &log,
            Summary {
                duration_s: 2.0,
                errors: 1,
            },
        );
        assert_eq!(m.requests, 100);
        assert_eq!(m.statuses[&201], 3);
        assert_eq!(m.statuses[&410], 97);
        assert_eq!((m.p50_us, m.p99_us, m.max_us), (500, 990, 1000));
        assert_eq!(m.socket_errors, 1);
    }
}
