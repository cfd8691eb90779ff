//! One phase of `bench draw`: the whole population against one SKU over a fixed pool of
//! loadgen connections. Humans are sent at their due time; bots fire their requests back
//! to back from the opening. A worker serves whichever is ready first (a due human, or a
//! bot whose previous answer came back), so when the pool is saturated the humans' wait
//! is what a crowded client would see. Nothing is kept per request: per user one byte
//! (claims in fcfs and a queue, flags in a draw), and answer counts per status.
//!
//! A queue campaign's phase goes on past the arrivals: every user the waiting room told
//! `queued` (or who should try again: 429, 503, no answer) is put on a timer heap and
//! sent again when its `refresh_ms` (1 s for a retry) is up, with its `Queue-Token` when
//! it has one, until an answer ends its wait (`claimed`, `sold_out`, a refusal) or the
//! phase's deadline. A bot's repeats alternate between joining again and sending its token.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bench::stack::cpu::{CpuUse, Sampler, Watched};
use loadgen::http::{Conn, Target};
use loadgen::token::Tokens;
use shard_router::ApiStatus;
use tokio::sync::Barrier;

use super::population::Shape;
use queue::Waiting;
use worker::Job;

mod queue;
mod send;
mod worker;

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

/// The campaign mode a phase meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Fcfs,
    Draw,
    /// A waiting room: the phase polls until `deadline` (see the module's notes).
    Queue {
        deadline: Instant,
    },
}

/// What a phase offers and where.
pub(crate) struct Phase<'a> {
    pub(crate) targets: &'a [Target],
    pub(crate) sku: u64,
    pub(crate) kind: Kind,
    pub(crate) tag: &'a str,
    pub(crate) connections: usize,
    pub(crate) timeout: Duration,
    pub(crate) tokens: Option<Arc<Tokens>>,
}

/// What a phase saw.
pub(crate) struct PhaseResult {
    /// Answers per class, `[bots, humans]`.
    pub(crate) answers: [[u64; CLASSES]; 2],
    /// Per user: units claimed (fcfs, queue) or [`ENTERED`] / [`CLOSED`] flags (draw).
    pub(crate) per_user: Vec<u8>,
    /// First send to last answer.
    pub(crate) took: Duration,
    /// The latest a human was sent after its due time.
    pub(crate) human_lag_max: Duration,
    /// CPU of the watched processes over the phase.
    pub(crate) cpu: Vec<CpuUse>,
    /// A queue phase's own counts.
    pub(crate) queue: Option<QueueTally>,
}

/// What a queue phase counted besides the answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueueTally {
    /// Requests sent with a `Queue-Token`.
    pub(crate) with_token: u64,
    /// Users still waiting (or retrying) at the deadline.
    pub(crate) waiting_at_deadline: u64,
    /// `invalid_queue_token` answers (a bench bug).
    pub(crate) invalid_tokens: u64,
    /// Wall clock (ms) when the last worker was done with the arrivals.
    pub(crate) arrivals_done_ms: Option<i64>,
    /// Wall clock (ms) of the first and the last fresh `claimed`.
    pub(crate) first_claim_ms: Option<i64>,
    pub(crate) last_claim_ms: Option<i64>,
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
    /// Users `0..bot_count` are the bots.
    bot_count: u32,
    queue: Option<Waiting>,
}

impl Shared {
    fn new(shape: &Shape, kind: Kind) -> Self {
        let now = Instant::now();
        Shared {
            humans: shape.humans(),
            next_human: AtomicUsize::new(0),
            bots: Mutex::new(
                (0..shape.bots())
                    .map(|b| (b, shape.bot_factor, now))
                    .collect(),
            ),
            per_user: (0..shape.users).map(|_| AtomicU8::new(0)).collect(),
            bot_count: shape.bots(),
            queue: match kind {
                Kind::Queue { deadline } => Some(Waiting::new(deadline, shape.users)),
                _ => None,
            },
        }
    }
}

/// What one worker counted.
struct Worker {
    answers: [[u64; CLASSES]; 2],
    lag: Duration,
}

/// Runs the phase: connections open before the clock, then everyone sends.
pub(crate) async fn run(p: &Phase<'_>, shape: &Shape, watched: Vec<Watched>) -> PhaseResult {
    let shared = Arc::new(Shared::new(shape, p.kind));
    let conns = p.connections.max(1);
    let gate = Arc::new(Barrier::new(conns + 1));
    let start = Arc::new(OnceLock::<Instant>::new());
    let job = Job {
        sku: p.sku,
        kind: p.kind,
        tag: p.tag.to_owned(),
        timeout: p.timeout,
        factor: shape.bot_factor,
        workers: conns,
        tokens: p.tokens.clone(),
        shared: shared.clone(),
        gate: gate.clone(),
        start: start.clone(),
    };
    let workers: Vec<_> = (0..conns)
        .map(|w| {
            let conn = Conn::new(p.targets[w % p.targets.len()].clone(), p.timeout);
            tokio::spawn(worker::work(job.clone(), conn))
        })
        .collect();
    drop(job);
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
    let queue = shared.queue.as_ref().map(Waiting::tally);
    PhaseResult {
        answers,
        per_user: per_user(shared),
        took,
        human_lag_max,
        cpu,
        queue,
    }
}

/// Each user's byte, once the workers are done.
fn per_user(shared: Arc<Shared>) -> Vec<u8> {
    match Arc::try_unwrap(shared) {
        Ok(s) => s.per_user.into_iter().map(AtomicU8::into_inner).collect(),
        Err(s) => s
            .per_user
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
