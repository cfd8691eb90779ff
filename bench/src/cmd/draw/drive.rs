//! One phase of `bench draw`: the whole population against one SKU over a fixed pool of
//! loadgen connections. Humans are sent at their due time; bots fire their requests back
//! to back from the opening. A worker serves whichever is ready first (a due human, or a
//! bot whose previous answer came back), so when the pool is saturated the humans' wait
//! is what a crowded client would see. Nothing is kept per request: per user one byte
//! (claims in fcfs, flags in a draw), and answer counts per status.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bench::stack::cpu::{CpuUse, Sampler, Watched};
use loadgen::http::{Conn, Target};
use loadgen::outcome::Outcome;
use loadgen::token::Tokens;
use loadgen::workload::ClaimReq;
use shard_router::ApiStatus;
use tokio::sync::Barrier;

use super::population::Shape;

/// Answer classes: every API status, then "no status" (transport error, timeout, a body
/// without one).
pub(crate) const CLASSES: usize = ApiStatus::ALL.len() + 1;
const NO_STATUS: usize = CLASSES - 1;

/// Per-user flags of a draw (fcfs counts claims in the same byte instead).
pub(crate) const ENTERED: u8 = 1;
pub(crate) const CLOSED: u8 = 2;

/// The name of an answer class.
pub(crate) fn class_name(i: usize) -> &'static str {
    ApiStatus::ALL
        .get(i)
        .map(|s| s.as_str())
        .unwrap_or("no_status")
}

/// What a phase offers and where.
pub(crate) struct Phase<'a> {
    pub(crate) targets: &'a [Target],
    pub(crate) sku: u64,
    pub(crate) draw: bool,
    pub(crate) tag: &'a str,
    pub(crate) connections: usize,
    pub(crate) timeout: Duration,
    pub(crate) tokens: Option<Arc<Tokens>>,
}

/// What a phase saw.
pub(crate) struct PhaseResult {
    /// Answers per class, `[bots, humans]`.
    pub(crate) answers: [[u64; CLASSES]; 2],
    /// Per user: units claimed (fcfs) or [`ENTERED`] / [`CLOSED`] flags (draw).
    pub(crate) per_user: Vec<u8>,
    /// First send to last answer.
    pub(crate) took: Duration,
    /// The latest a human was sent after its due time.
    pub(crate) human_lag_max: Duration,
    /// CPU of the watched processes over the phase.
    pub(crate) cpu: Vec<CpuUse>,
}

impl PhaseResult {
    pub(crate) fn requests(&self) -> u64 {
        self.answers.iter().flatten().sum()
    }
}

struct Shared {
    humans: Vec<(u32, u32)>,
    next_human: AtomicUsize,
    /// Bots waiting for a worker: `(user, requests left, ready since)`.
    bots: Mutex<VecDeque<(u32, u32, Instant)>>,
    per_user: Vec<AtomicU8>,
}

struct Worker {
    answers: [[u64; CLASSES]; 2],
    lag: Duration,
}

/// Runs the phase: connections open before the clock, then everyone sends.
pub(crate) async fn run(p: &Phase<'_>, shape: &Shape, watched: Vec<Watched>) -> PhaseResult {
    let now = Instant::now();
    let shared = Arc::new(Shared {
        humans: shape.humans(),
        next_human: AtomicUsize::new(0),
        bots: Mutex::new(
            (0..shape.bots())
                .map(|b| (b, shape.bot_factor, now))
                .collect(),
        ),
        per_user: (0..shape.users).map(|_| AtomicU8::new(0)).collect(),
    });
    let conns = p.connections.max(1);
    let gate = Arc::new(Barrier::new(conns + 1));
    let start = Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut workers = Vec::with_capacity(conns);
    for w in 0..conns {
        let mut conn = Conn::new(p.targets[w % p.targets.len()].clone(), p.timeout);
        let (shared, gate, start, tokens) = (
            shared.clone(),
            gate.clone(),
            start.clone(),
            p.tokens.clone(),
        );
        let (sku, draw, tag, timeout, factor) =
            (p.sku, p.draw, p.tag.to_owned(), p.timeout, shape.bot_factor);
        workers.push(tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, conn.warm()).await;
            gate.wait().await;
            let t0 = *start.get_or_init(Instant::now);
            let mut me = Worker {
                answers: [[0; CLASSES]; 2],
                lag: Duration::ZERO,
            };
            let ctx = Ctx {
                sku,
                draw,
                tag: &tag,
                tokens: tokens.as_deref(),
                shared: &shared,
            };
            let mut held: Option<(u32, u32, Instant)> = None;
            loop {
                let now = Instant::now();
                if held.is_none() {
                    held = lock(&shared.bots).pop_front();
                }
                let i = shared.next_human.load(Ordering::Relaxed);
                let human = shared
                    .humans
                    .get(i)
                    .map(|&(due, u)| (t0 + Duration::from_micros(due as u64), u));
                let human_first = match (human, held) {
                    (Some((due, _)), Some((_, _, ready))) => due <= now && due <= ready,
                    (Some((due, _)), None) => due <= now,
                    (None, _) => false,
                };
                if human_first {
                    let Some((due, user)) = human else { break };
                    if shared
                        .next_human
                        .compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed)
                        .is_err()
                    {
                        continue;
                    }
                    if let Some(b) = held.take() {
                        lock(&shared.bots).push_front(b);
                    }
                    me.lag = me.lag.max(now.saturating_duration_since(due));
                    let class = ctx.send(&mut conn, user, user as u64 * factor as u64).await;
                    me.answers[1][class] += 1;
                } else if let Some((user, left, _)) = held {
                    let origin = user as u64 * factor as u64 + (factor - left) as u64;
                    let class = ctx.send(&mut conn, user, origin).await;
                    me.answers[0][class] += 1;
                    held = (left > 1).then(|| (user, left - 1, Instant::now()));
                } else if let Some((due, _)) = human {
                    let until = due.min(now + Duration::from_millis(5));
                    tokio::time::sleep_until(until.into()).await;
                } else {
                    break;
                }
            }
            me
        }));
    }
    // Sampled from here: the workers hold at the gate until the sampler has its start.
    let cpu = Sampler::start(watched);
    gate.wait().await;
    let t0 = *start.get_or_init(Instant::now);
    let mut answers = [[0; CLASSES]; 2];
    let mut human_lag_max = Duration::ZERO;
    for w in workers {
        if let Ok(me) = w.await {
            for (side, row) in me.answers.iter().enumerate() {
                for (c, n) in row.iter().enumerate() {
                    answers[side][c] += n;
                }
            }
            human_lag_max = human_lag_max.max(me.lag);
        }
    }
    let took = t0.elapsed();
    let total: u64 = answers.iter().flatten().sum();
    let cpu = cpu.finish(total);
    let per_user = match Arc::try_unwrap(shared) {
        Ok(s) => s.per_user.into_iter().map(AtomicU8::into_inner).collect(),
        Err(s) => s
            .per_user
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect(),
    };
    PhaseResult {
        answers,
        per_user,
        took,
        human_lag_max,
        cpu,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Ctx<'a> {
    sku: u64,
    draw: bool,
    tag: &'a str,
    tokens: Option<&'a Tokens>,
    shared: &'a Shared,
}

impl Ctx<'_> {
    /// Sends one request of `user` and records what it says about the user; the class.
    async fn send(&self, conn: &mut Conn, user: u32, origin: u64) -> usize {
        let req = ClaimReq {
            sku: self.sku,
            user: user as u64,
            origin,
            qty: 1,
        };
        let auth = self
            .tokens
            .map(|t| t.authorization(req.user, || req.user_name(self.tag)));
        let answer = conn.post(req.body(self.tag), auth).await;
        let status = status_of(&answer.body);
        let slot = &self.shared.per_user[user as usize];
        if self.draw {
            match status {
                Some(
                    ApiStatus::Entered
                    | ApiStatus::Drawing
                    | ApiStatus::Won
                    | ApiStatus::WonPending
                    | ApiStatus::Waitlisted
                    | ApiStatus::Lost,
                ) => {
                    slot.fetch_or(ENTERED, Ordering::Relaxed);
                }
                Some(ApiStatus::EntriesClosed) => {
                    slot.fetch_or(CLOSED, Ordering::Relaxed);
                }
                _ => {}
            }
        } else if answer.outcome == Outcome::Claimed {
            // A fresh 201 (a replay answers 200): one more unit for this user.
            let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            });
        }
        status
            .and_then(|s| ApiStatus::ALL.iter().position(|a| *a == s))
            .unwrap_or(NO_STATUS)
    }
}

/// The `status` field of an answer's JSON body.
fn status_of(body: &[u8]) -> Option<ApiStatus> {
    #[derive(serde::Deserialize)]
    struct S {
        status: ApiStatus,
    }
    serde_json::from_slice::<S>(body).ok().map(|s| s.status)
}
