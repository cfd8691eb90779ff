//! The load generator: N workers, one connection each, pulling request indices from one
//! shared counter.
//! - Closed loop: a worker sends its next request as soon as it has the previous answer.
//! - Open loop: request `k` is due at `t0 + k / rate`; a worker takes the next index,
//!   sleeps until it is due, sends, and measures from the due time. When every connection
//!   is busy, requests fall behind schedule and that wait is counted in their latency,
//!   which is what a user would have seen (no coordinated omission).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use tokio::sync::Barrier;

use crate::http::{Conn, Target};
use crate::outcome::{ClaimAnswer, Outcome};
use crate::recorder::{AckedClaim, Live, Recorder};
use crate::token::Tokens;
use crate::workload::Workload;

/// How load is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// N connections, each sends its next request when the previous answer arrives.
    Closed,
    /// A fixed schedule of `rate` requests/s over up to N connections; latency is measured
    /// from each request's scheduled time (coordinated-omission safe).
    Open,
}

/// Everything a load run needs besides the request generator (bench builds it from a
/// scenario: `Scenario::load_spec`).
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub targets: Vec<Target>,
    pub mode: Mode,
    pub connections: usize,
    /// Requests/s, open loop only.
    pub rate: f64,
    /// Measured length; zero = bounded by `max_requests` only.
    pub duration: Duration,
    pub warmup: Duration,
    /// Zero = no cap.
    pub max_requests: u64,
    pub timeout: Duration,
    /// Prefix of users and request ids, unique per run.
    pub tag: String,
    pub progress: bool,
    /// Bearer tokens to send (gateways that verify identity), `None` for none.
    pub tokens: Option<Arc<Tokens>>,
}

/// The merged result of a load run.
pub struct LoadResult {
    pub rec: Recorder,
    pub spec: LoadSpec,
    /// Requests sent per second, scheduled (open loop) or achieved (closed loop).
    pub offered_rate: f64,
}

impl LoadResult {
    /// Answers per second over the measured window.
    pub fn throughput(&self) -> f64 {
        let w = self.rec.measured_window().as_secs_f64();
        if w > 0.0 {
            self.rec.measured_total() as f64 / w
        } else {
            0.0
        }
    }
}

/// Requests whose tokens [`mint_ahead`] mints before the clock: the users-5k rush's
/// whole run, and the first seconds of a capacity run.
pub const MINT_AHEAD_REQUESTS: u64 = 100_000;

/// Mints the bearer tokens of the run's first requests (at most
/// [`MINT_AHEAD_REQUESTS`]) before the clock starts, as a login service hands them out
/// before a sale and as the external clients' are (`bench/src/cmd/run/external.rs`).
/// Minted on first use instead, every user's first request paid a mint (a few µs of JSON,
/// base64 and HMAC) on the clock: in a rush of new users, all of them inside the first
/// second, on the cores the gateway shares. Call it before the load generator's CPU is
/// sampled. Users past the token cache (`token::CACHE_USERS`) are minted per request
/// anyway and are skipped here.
pub fn mint_ahead(spec: &LoadSpec, workload: &Workload) {
    let Some(tokens) = &spec.tokens else { return };
    let mut n = match spec.max_requests {
        0 => MINT_AHEAD_REQUESTS,
        cap => cap.min(MINT_AHEAD_REQUESTS),
    };
    // An open loop sends at most its schedule (a sweep's low steps need few tokens).
    if spec.mode == Mode::Open && !spec.duration.is_zero() {
        let scheduled = spec.rate * (spec.warmup + spec.duration).as_secs_f64();
        n = n.min(scheduled.ceil() as u64);
    }
    for k in 0..n {
        let req = workload.request(k);
        if req.user < crate::token::CACHE_USERS {
            tokens.authorization(req.user, || req.user_name(&spec.tag));
        }
    }
}

/// What the workers of a run share.
struct Shared {
    workload: Arc<Workload>,
    /// The next request index.
    next: AtomicU64,
    live: Arc<Live>,
    gate: Barrier,
    /// The run's clock, set by whoever passes the gate first.
    clock: OnceLock<Instant>,
}

/// Runs the load and returns what every worker saw.
pub async fn drive(spec: LoadSpec, workload: Arc<Workload>) -> LoadResult {
    // Connections open before the clock starts (as wrk does): a storm of 1 000 connects
    // on a small machine measures SYN backlogs, not the server.
    let shared = Arc::new(Shared {
        workload,
        next: AtomicU64::new(0),
        live: Arc::new(Live::default()),
        gate: Barrier::new(spec.connections + 1),
        clock: OnceLock::new(),
    });
    let workers: Vec<_> = (0..spec.connections)
        .map(|w| {
            let target = spec.targets[w % spec.targets.len()].clone();
            tokio::spawn(worker(target, spec.clone(), shared.clone()))
        })
        .collect();
    shared.gate.wait().await;
    let start = *shared.clock.get_or_init(Instant::now);
    let bar = spec
        .progress
        .then(|| progress(&spec, shared.live.clone(), start));
    let mut rec = Recorder::new(start, spec.warmup);
    for w in workers {
        if let Ok(r) = w.await {
            rec.merge(r);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let offered_rate = match spec.mode {
        Mode::Open => spec.rate,
        Mode::Closed => {
            let secs = rec
                .last
                .map(|l| l.saturating_duration_since(start).as_secs_f64())
                .unwrap_or(0.0);
            if secs > 0.0 {
                rec.total() as f64 / secs
            } else {
                0.0
            }
        }
    };
    LoadResult {
        rec,
        spec,
        offered_rate,
    }
}

/// One worker on its own connection: takes request indices until the run's cap or end,
/// and records every answer.
async fn worker(target: Target, spec: LoadSpec, sh: Arc<Shared>) -> Recorder {
    let interval = Duration::from_secs_f64(1.0 / spec.rate.max(1e-3));
    let mut conn = Conn::new(target, spec.timeout);
    // A failed warm connect is retried (and counted) by the first send.
    let _ = tokio::time::timeout(spec.timeout, conn.warm()).await;
    // Built before the gate: nothing is allocated on the clock.
    let mut rec = Recorder::new(Instant::now(), spec.warmup);
    sh.gate.wait().await;
    let start = *sh.clock.get_or_init(Instant::now);
    rec.set_start(start);
    let end = (!spec.duration.is_zero()).then(|| start + spec.warmup + spec.duration);
    loop {
        let k = sh.next.fetch_add(1, Ordering::Relaxed);
        if spec.max_requests > 0 && k >= spec.max_requests {
            break;
        }
        let due = match spec.mode {
            Mode::Closed => Instant::now(),
            Mode::Open => start + interval.mul_f64(k as f64),
        };
        if end.is_some_and(|e| due >= e) {
            break;
        }
        if spec.mode == Mode::Open {
            tokio::time::sleep_until(due.into()).await;
        }
        let req = sh.workload.request(k);
        let auth = spec
            .tokens
            .as_ref()
            .map(|t| t.authorization(req.user, || req.user_name(&spec.tag)));
        let answer = conn.post(req.body(&spec.tag), auth).await;
        let done = Instant::now();
        if answer.outcome == Outcome::Claimed {
            if let Some(a) = ClaimAnswer::parse(&answer.body) {
                rec.claims.push(AckedClaim {
                    sku: req.sku,
                    user: req.user,
                    claim_id: a.claim_id,
                    qty: a.qty.unwrap_or(req.qty),
                });
            }
        }
        rec.record(
            answer.outcome,
            done.saturating_duration_since(due),
            done,
            &sh.live,
        );
    }
    rec
}

/// A progress bar over time (or requests, for request-bound runs), fed from [`Live`].
fn progress(spec: &LoadSpec, live: Arc<Live>, start: Instant) -> ProgressBar {
    let by_time = !spec.duration.is_zero();
    let len = if by_time {
        (spec.warmup + spec.duration).as_millis() as u64
    } else {
        spec.max_requests
    };
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let b = bar.clone();
    tokio::spawn(async move {
        // Ends with the bar: `finish_and_clear` marks it finished.
        while !b.is_finished() {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let done = live.done.load(Ordering::Relaxed);
            let secs = start.elapsed().as_secs_f64().max(1e-3);
            b.set_position(if by_time {
                start.elapsed().as_millis() as u64
            } else {
                done
            });
            b.set_message(format!(
                "{done} answers, {:.0}/s, claimed {}, errors {}",
                done as f64 / secs,
                live.claimed.load(Ordering::Relaxed),
                live.errors.load(Ordering::Relaxed)
            ));
        }
    });
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::WorkloadSpec;

    #[test]
    fn tokens_of_the_first_requests_are_minted_before_the_clock() {
        let workload = Workload::new(&WorkloadSpec {
            skus: vec![1],
            users: 1_000,
            qty: 1,
            repeat_ratio: 0.0,
            zipf_s: 0.0,
            seed: 7,
        });
        let tokens = Arc::new(Tokens::new(b"0123456789abcdef0123456789abcdef", 1_000));
        let spec = LoadSpec {
            targets: vec![Target::parse("http://127.0.0.1:1", "/v1/claims").unwrap()],
            mode: Mode::Closed,
            connections: 1,
            rate: 0.0,
            duration: Duration::ZERO,
            warmup: Duration::ZERO,
            max_requests: 20,
            timeout: Duration::from_secs(1),
            tag: "t-".into(),
            progress: false,
            tokens: Some(tokens.clone()),
        };
        mint_ahead(&spec, &workload);
        for k in 0..20 {
            let user = workload.request(k).user;
            tokens.authorization(user, || panic!("request {k}'s user {user} was not minted"));
        }
        let later = (20..1_000)
            .map(|k| workload.request(k).user)
            .find(|u| (0..20).all(|k| workload.request(k).user != *u))
            .unwrap();
        let mut minted = false;
        tokens.authorization(later, || {
            minted = true;
            "t-later".into()
        });
        assert!(minted, "only the first max_requests are minted ahead");
    }
}
