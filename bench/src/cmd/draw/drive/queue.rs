//! A queue phase's waiting users: the tokens the waiting room gave them, the timer heap of
//! those to send again, and the polls that send them until the heap is empty or the
//! deadline.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use loadgen::http::Conn;

use super::send::Ctx;
use super::{lock, QueueTally, Worker};

/// A queue phase's shared state.
pub(super) struct Waiting {
    deadline: Instant,
    /// Per user: the queue token the waiting room gave it (empty until one came).
    pub(super) tokens: Vec<OnceLock<Box<str>>>,
    /// Users to send again: `(due, user)`, earliest first.
    heap: Mutex<BinaryHeap<Reverse<(Instant, u32)>>>,
    /// Requests taken off the heap and not answered yet (each may put its user back).
    inflight: AtomicUsize,
    /// Workers done with the arrivals (until all are, a bot may still join the heap).
    pub(super) arrived: AtomicUsize,
    pub(super) arrivals_done_ms: AtomicI64,
    pub(super) with_token: AtomicU64,
    pub(super) invalid: AtomicU64,
    pub(super) first_claim_ms: AtomicI64,
    pub(super) last_claim_ms: AtomicI64,
}

impl Waiting {
    pub(super) fn new(deadline: Instant, users: u32) -> Self {
        Waiting {
            deadline,
            tokens: (0..users).map(|_| OnceLock::new()).collect(),
            heap: Mutex::new(BinaryHeap::new()),
            inflight: AtomicUsize::new(0),
            arrived: AtomicUsize::new(0),
            arrivals_done_ms: AtomicI64::new(0),
            with_token: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
            first_claim_ms: AtomicI64::new(i64::MAX),
            last_claim_ms: AtomicI64::new(i64::MIN),
        }
    }

    fn push(&self, user: u32, after: Duration) {
        lock(&self.heap).push(Reverse((Instant::now() + after, user)));
    }

    /// What the phase counted, once its workers are done.
    pub(super) fn tally(&self) -> QueueTally {
        let (first, last) = (
            self.first_claim_ms.load(Ordering::Relaxed),
            self.last_claim_ms.load(Ordering::Relaxed),
        );
        QueueTally {
            with_token: self.with_token.load(Ordering::Relaxed),
            waiting_at_deadline: lock(&self.heap).len() as u64,
            invalid_tokens: self.invalid.load(Ordering::Relaxed),
            arrivals_done_ms: Some(self.arrivals_done_ms.load(Ordering::SeqCst)).filter(|&t| t > 0),
            first_claim_ms: (first != i64::MAX).then_some(first),
            last_claim_ms: (last != i64::MIN).then_some(last),
        }
    }
}

impl Ctx<'_> {
    /// A queue phase: puts `user` on the heap when its last answer asks for another try.
    pub(super) fn wait_again(&self, user: u32, next: Option<Duration>) {
        if let (Some(q), Some(after)) = (&self.shared.queue, next) {
            q.push(user, after);
        }
    }

    /// A queue phase after this worker's arrivals: sends whoever is due on the heap until
    /// it is empty with nothing in flight and every worker past its arrivals, or the
    /// deadline. A user polls under its first request id (a client retrying one claim).
    pub(super) async fn poll(&self, conn: &mut Conn, me: &mut Worker, workers: usize, factor: u32) {
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
