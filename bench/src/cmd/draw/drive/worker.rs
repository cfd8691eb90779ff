//! One worker of a phase: on its own connection it serves whichever user is ready first
//! (a due human, or a bot whose previous answer came back), one [`pick`] at a time, then,
//! in a queue phase, polls the users still waiting.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use loadgen::http::Conn;
use loadgen::token::Tokens;
use shard_router::now_ms;
use tokio::sync::Barrier;

use super::send::Ctx;
use super::{lock, Kind, Shared, Worker, CLASSES};

/// What each worker takes of the phase (owned: it runs on a task of its own).
#[derive(Clone)]
pub(super) struct Job {
    pub(super) sku: u64,
    pub(super) kind: Kind,
    pub(super) tag: String,
    pub(super) timeout: Duration,
    /// Requests a bot sends.
    pub(super) factor: u32,
    /// Workers in the phase.
    pub(super) workers: usize,
    pub(super) tokens: Option<Arc<Tokens>>,
    pub(super) shared: Arc<Shared>,
    pub(super) gate: Arc<Barrier>,
    /// The phase's clock, set by whoever passes the gate first.
    pub(super) start: Arc<OnceLock<Instant>>,
}

/// A bot held by a worker: `(user, requests left, ready since)`.
type Bot = (u32, u32, Instant);

/// What a worker does next.
enum Next {
    /// Send a human, `late` after its due time.
    Human { user: u32, late: Duration },
    /// Send a bot's next request.
    Bot { user: u32, left: u32 },
    /// Nobody is ready: wait until then.
    Sleep(Instant),
    /// Another worker took the human: look again.
    Again,
    /// Every human sent and no bot left.
    Done,
}

/// Runs one worker over the arrivals (and a queue's polls) and returns what it counted.
pub(super) async fn work(job: Job, mut conn: Conn) -> Worker {
    let _ = tokio::time::timeout(job.timeout, conn.warm()).await;
    job.gate.wait().await;
    let t0 = *job.start.get_or_init(Instant::now);
    let mut me = Worker {
        answers: [[0; CLASSES]; 2],
        lag: Duration::ZERO,
    };
    let ctx = Ctx {
        sku: job.sku,
        kind: job.kind,
        tag: &job.tag,
        tokens: job.tokens.as_deref(),
        shared: &job.shared,
    };
    let factor = job.factor;
    let mut held: Option<Bot> = None;
    loop {
        match pick(&job.shared, &mut held, t0) {
            Next::Human { user, late } => {
                me.lag = me.lag.max(late);
                let (class, next) = ctx
                    .send(&mut conn, user, user as u64 * factor as u64, false)
                    .await;
                me.answers[1][class] += 1;
                ctx.wait_again(user, next);
            }
            Next::Bot { user, left } => {
                let k = factor - left;
                let origin = user as u64 * factor as u64 + k as u64;
                // A bot's repeats: join again, then its token, by turns.
                let (class, next) = ctx.send(&mut conn, user, origin, k % 2 == 1).await;
                me.answers[0][class] += 1;
                held = (left > 1).then(|| (user, left - 1, Instant::now()));
                if held.is_none() {
                    ctx.wait_again(user, next);
                }
            }
            Next::Sleep(until) => tokio::time::sleep_until(until.into()).await,
            Next::Again => {}
            Next::Done => break,
        }
    }
    if let Some(q) = &job.shared.queue {
        if q.arrived.fetch_add(1, Ordering::SeqCst) + 1 == job.workers {
            q.arrivals_done_ms.store(now_ms(), Ordering::SeqCst);
        }
        ctx.poll(&mut conn, &mut me, job.workers, factor).await;
    }
    me
}

/// Chooses the next user: the next human once due and due before the held bot was ready,
/// else the held bot (taken from the shared list when none is held), else a sleep until
/// the next human is due (5 ms at most, for a bot that comes back meanwhile).
fn pick(shared: &Shared, held: &mut Option<Bot>, t0: Instant) -> Next {
    let now = Instant::now();
    if held.is_none() {
        *held = lock(&shared.bots).pop_front();
    }
    let i = shared.next_human.load(Ordering::Relaxed);
    let human = shared
        .humans
        .get(i)
        .map(|&(due, u)| (t0 + Duration::from_micros(due as u64), u));
    let human_first = match (human, *held) {
        (Some((due, _)), Some((_, _, ready))) => due <= now && due <= ready,
        (Some((due, _)), None) => due <= now,
        (None, _) => false,
    };
    match (human, held.take()) {
        (Some((due, user)), bot) if human_first => {
            if shared
                .next_human
                .compare_exchange(i, i + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                *held = bot;
                return Next::Again;
            }
            if let Some(b) = bot {
                lock(&shared.bots).push_front(b);
            }
            Next::Human {
                user,
                late: now.saturating_duration_since(due),
            }
        }
        (_, Some((user, left, _))) => Next::Bot { user, left },
        (Some((due, _)), None) => Next::Sleep(due.min(now + Duration::from_millis(5))),
        (None, None) => Next::Done,
    }
}
