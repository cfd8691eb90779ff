//! A writer loop that cannot commit, made visible: how long each loop's batch has gone
//! uncommitted through failed attempts, which `/healthz` turns unhealthy past
//! `--writer-stall-ms` and `flashgate_consumer_writer_stalled_seconds` exports, and the
//! stall's cause logged once per distinct cause rather than once per retry (a read-only
//! spell is hundreds of retries).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::ConsumerError;
use crate::metrics as m;

/// Every writer loop's stall, shared with the health probes.
#[derive(Debug, Clone)]
pub struct Stalls {
    origin: Instant,
    /// Per loop: when its failing began, in ms after `origin` plus one (0: not failing).
    since: Arc<[AtomicU64]>,
}

impl Stalls {
    pub fn new(loops: usize) -> Self {
        Self {
            origin: Instant::now(),
            since: (0..loops).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// How long the longest-failing loop has gone without a commit (zero when none).
    pub fn longest(&self) -> Duration {
        let now = self.origin.elapsed().as_millis() as u64;
        let oldest = self
            .since
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&s| s > 0)
            .min();
        oldest.map_or(Duration::ZERO, |s| {
            Duration::from_millis(now.saturating_sub(s - 1))
        })
    }

    /// Sets the gauge from [`Self::longest`] (the health probe calls it every second).
    pub fn export(&self) {
        metrics::gauge!(m::WRITER_STALLED_SECONDS).set(self.longest().as_secs_f64());
    }

    /// Loop `i`'s tracker.
    pub fn tracker(&self, i: usize) -> Stall {
        Stall {
            stalls: self.clone(),
            i: i % self.since.len().max(1),
            logged: None,
            began: None,
        }
    }
}

/// One writer loop's stall.
#[derive(Debug)]
pub struct Stall {
    stalls: Stalls,
    i: usize,
    /// The cause logged last in this stall.
    logged: Option<String>,
    began: Option<Instant>,
}

impl Stall {
    /// An attempt failed with `e`: the stall begins (or goes on); a cause not logged in
    /// this stall yet is logged now.
    pub fn failed(&mut self, rows: usize, e: &ConsumerError) {
        metrics::counter!(m::DB_ERRORS).increment(1);
        if self.began.is_none() {
            self.began = Some(Instant::now());
            let at = self.stalls.origin.elapsed().as_millis() as u64 + 1;
            if let Some(slot) = self.stalls.since.get(self.i) {
                slot.store(at, Ordering::Relaxed);
            }
        }
        let code = e.code();
        if self.logged.as_deref() == Some(code.as_str()) {
            return;
        }
        let cause = e.cause();
        match cause {
            ledger::Cause::ServerState => {
                tracing::warn!(rows, %code, ?cause, error = %e, "batch not committed; retrying until it is")
            }
            _ => {
                tracing::error!(rows, %code, ?cause, error = %e, "batch not committed; retrying until it is (needs a fix)")
            }
        }
        self.logged = Some(code);
    }

    /// A commit went through: the stall, if any, is over.
    pub fn moved(&mut self) {
        if let Some(began) = self.began.take() {
            tracing::info!(stalled = ?began.elapsed(), "writer commits again");
            if let Some(slot) = self.stalls.since.get(self.i) {
                slot.store(0, Ordering::Relaxed);
            }
        }
        self.logged = None;
    }
}
