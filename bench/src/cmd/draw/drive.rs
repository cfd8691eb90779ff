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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bench::stack::cpu::{CpuUse, Sampler, Watched};
use hyper::header::{HeaderName, HeaderValue};
use loadgen::http::{Conn, Target};
use loadgen::outcome::Outcome;
use loadgen::token::Tokens;
use loadgen::workload::ClaimReq;
use shard_router::{now_ms, ApiStatus};
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

/// Header a waiting client sends its queue token in.
const QUEUE_TOKEN: &str = "queue-token";
/// A retry's delay after an answer that ends nothing (429, 503, no answer).
const RETRY: Duration = Duration::from_secs(1);

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

/// A queue phase's shared state.
struct Waiting {
    deadline: Instant,
    /// Per user: the queue token the waiting room gave it (empty until one came).
    tokens: Vec<OnceLock<Box<str>>>,
    /// Users to send again: `(due, user)`, earliest first.
    heap: Mutex<BinaryHeap<Reverse<(Instant, u32)>>>,
    /// Requests taken off the heap and not answered yet (each may put its user back).
    inflight: AtomicUsize,
    /// Workers done with the arrivals (until all are, a bot may still join the heap).
    arrived: AtomicUsize,
    arrivals_done_ms: AtomicI64,
    with_token: AtomicU64,
    invalid: AtomicU64,
    first_claim_ms: AtomicI64,
    last_claim_ms: AtomicI64,
}

impl Waiting {
    fn push(&self, user: u32, after: Duration) {
        lock(&self.heap).push(Reverse((Instant::now() + after, user)));
    }
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
        bot_count: shape.bots(),
        queue: match p.kind {
            Kind::Queue { deadline } => Some(Waiting {
                deadline,
                tokens: (0..shape.users).map(|_| OnceLock::new()).collect(),
                heap: Mutex::new(BinaryHeap::new()),
                inflight: AtomicUsize::new(0),
                arrived: AtomicUsize::new(0),
                arrivals_done_ms: AtomicI64::new(0),
                with_token: AtomicU64::new(0),
                invalid: AtomicU64::new(0),
                first_claim_ms: AtomicI64::new(i64::MAX),
                last_claim_ms: AtomicI64::new(i64::MIN),
            }),
            _ => None,
        },
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
        let (sku, kind, tag, timeout, factor) =
            (p.sku, p.kind, p.tag.to_owned(), p.timeout, shape.bot_factor);
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
                kind,
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
                    let (class, next) = ctx
                        .send(&mut conn, user, user as u64 * factor as u64, false)
                        .await;
                    me.answers[1][class] += 1;
                    ctx.wait_again(user, next);
                } else if let Some((user, left, _)) = held {
                    let k = factor - left;
                    let origin = user as u64 * factor as u64 + k as u64;
                    // A bot's repeats: join again, then its token, by turns.
                    let (class, next) = ctx.send(&mut conn, user, origin, k % 2 == 1).await;
                    me.answers[0][class] += 1;
                    held = (left > 1).then(|| (user, left - 1, Instant::now()));
                    if held.is_none() {
                        ctx.wait_again(user, next);
                    }
                } else if let Some((due, _)) = human {
                    let until = due.min(now + Duration::from_millis(5));
                    tokio::time::sleep_until(until.into()).await;
                } else {
                    break;
                }
            }
            if let Some(q) = &shared.queue {
                if q.arrived.fetch_add(1, Ordering::SeqCst) + 1 == conns {
                    q.arrivals_done_ms.store(now_ms(), Ordering::SeqCst);
                }
                ctx.poll(&mut conn, &mut me, conns, factor).await;
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
    let queue = shared.queue.as_ref().map(|q| {
        let (first, last) = (
            q.first_claim_ms.load(Ordering::Relaxed),
            q.last_claim_ms.load(Ordering::Relaxed),
        );
        QueueTally {
            with_token: q.with_token.load(Ordering::Relaxed),
            waiting_at_deadline: lock(&q.heap).len() as u64,
            invalid_tokens: q.invalid.load(Ordering::Relaxed),
            arrivals_done_ms: Some(q.arrivals_done_ms.load(Ordering::SeqCst)).filter(|&t| t > 0),
            first_claim_ms: (first != i64::MAX).then_some(first),
            last_claim_ms: (last != i64::MIN).then_some(last),
        }
    });
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
        queue,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Ctx<'a> {
    sku: u64,
    kind: Kind,
    tag: &'a str,
    tokens: Option<&'a Tokens>,
    shared: &'a Shared,
}

impl Ctx<'_> {
    /// Sends one request of `user` (with its queue token when `with_token` and it has
    /// one) and records what it says about the user; the class, and in a queue phase when
    /// to send again (`None`: the answer ends the user's wait).
    async fn send(
        &self,
        conn: &mut Conn,
        user: u32,
        origin: u64,
        with_token: bool,
    ) -> (usize, Option<Duration>) {
        let req = ClaimReq {
            sku: self.sku,
            user: user as u64,
            origin,
            qty: 1,
        };
        let auth = self
            .tokens
            .map(|t| t.authorization(req.user, || req.user_name(self.tag)));
        let token = self
            .shared
            .queue
            .as_ref()
            .filter(|_| with_token)
            .and_then(|q| q.tokens[user as usize].get())
            .and_then(|t| HeaderValue::from_str(t).ok());
        let answer = match token {
            Some(t) => {
                if let Some(q) = &self.shared.queue {
                    q.with_token.fetch_add(1, Ordering::Relaxed);
                }
                let extra = [(HeaderName::from_static(QUEUE_TOKEN), t)];
                conn.post_with(req.body(self.tag), auth, &extra).await
            }
            None => conn.post(req.body(self.tag), auth).await,
        };
        let body = body_of(&answer.body);
        let status = body.as_ref().map(|b| b.status);
        let slot = &self.shared.per_user[user as usize];
        let mut next = None;
        match self.kind {
            Kind::Draw => match status {
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
            },
            Kind::Fcfs | Kind::Queue { .. } => {
                if answer.outcome == Outcome::Claimed {
                    // A fresh 201 (a replay answers 200): one more unit for this user.
                    let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        Some(n.saturating_add(1))
                    });
                    if let Some(q) = &self.shared.queue {
                        let t = now_ms();
                        q.first_claim_ms.fetch_min(t, Ordering::Relaxed);
                        q.last_claim_ms.fetch_max(t, Ordering::Relaxed);
                    }
                } else if answer.outcome == Outcome::Replay {
                    // The claim of a request whose answer was lost: the unit is this user's.
                    let _ = slot.fetch_max(1, Ordering::Relaxed);
                }
                if let (Some(q), Kind::Queue { .. }) = (&self.shared.queue, self.kind) {
                    next = match body {
                        Some(b) if b.status == ApiStatus::Queued => {
                            if let Some(t) = b.queue_token {
                                let _ = q.tokens[user as usize].set(t.into_boxed_str());
                            }
                            Some(Duration::from_millis(
                                b.refresh_ms.unwrap_or(1000).clamp(100, 10_000),
                            ))
                        }
                        Some(b) if b.status == ApiStatus::InvalidQueueToken => {
                            q.invalid.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Some(b) => match b.status {
                            ApiStatus::RateLimited
                            | ApiStatus::Overloaded
                            | ApiStatus::Unavailable
                            | ApiStatus::InProgress
                            | ApiStatus::NotStarted => Some(RETRY),
                            _ => None,
                        },
                        // No answer (timeout, transport): try again.
                        None => Some(RETRY),
                    };
                }
            }
        }
        let class = status
            .and_then(|s| ApiStatus::ALL.iter().position(|a| *a == s))
            .unwrap_or(NO_STATUS);
        (class, next)
    }

    /// A queue phase: puts `user` on the heap when its last answer asks for another try.
    fn wait_again(&self, user: u32, next: Option<Duration>) {
        if let (Some(q), Some(after)) = (&self.shared.queue, next) {
            q.push(user, after);
        }
    }

    /// A queue phase after this worker's arrivals: sends whoever is due on the heap until
    /// it is empty with nothing in flight and every worker past its arrivals, or the
    /// deadline. A user polls under its first request id (a client retrying one claim).
    async fn poll(&self, conn: &mut Conn, me: &mut Worker, workers: usize, factor: u32) {
        let Some(q) = &self.shared.queue else {
            return;
        };
        loop {
            let now = Instant::now();
            if now >= q.deadline {
                return;
            }
            let due = {
                let mut heap = lock(&q.heap);
                match heap.peek() {
                    Some(Reverse((at, _))) if *at <= now => {
                        let Reverse((_, user)) = heap.pop().expect("peeked");
                        q.inflight.fetch_add(1, Ordering::SeqCst);
                        Ok(user)
                    }
                    Some(Reverse((at, _))) => Err(Some(*at)),
                    None => Err(None),
                }
            };
            match due {
                Ok(user) => {
                    let side = if user < self.shared.bot_count { 0 } else { 1 };
                    let (class, next) = self
                        .send(conn, user, user as u64 * factor as u64, true)
                        .await;
                    me.answers[side][class] += 1;
                    self.wait_again(user, next);
                    q.inflight.fetch_sub(1, Ordering::SeqCst);
                }
                Err(at) => {
                    let idle = at.is_none()
                        && q.inflight.load(Ordering::SeqCst) == 0
                        && q.arrived.load(Ordering::SeqCst) == workers;
                    if idle && lock(&q.heap).is_empty() {
                        return;
                    }
                    let until = at
                        .unwrap_or(now + Duration::from_millis(20))
                        .min(now + Duration::from_millis(20))
                        .min(q.deadline);
                    tokio::time::sleep_until(until.into()).await;
                }
            }
        }
    }
}

/// The fields of an answer's JSON body the bench reads.
#[derive(serde::Deserialize)]
struct Body {
    status: ApiStatus,
    #[serde(default)]
    queue_token: Option<String>,
    #[serde(default)]
    refresh_ms: Option<u64>,
}

fn body_of(body: &[u8]) -> Option<Body> {
    serde_json::from_slice::<Body>(body).ok()
}
