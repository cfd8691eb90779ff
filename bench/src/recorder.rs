//! Per-worker recording of answers: latency histograms per outcome (measured window only),
//! outcome counts (whole run, for the invariant check), a per-second timeline, and the
//! claims acknowledged. Workers record privately and are merged once at the end, so the
//! hot path takes no lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::latency;
use crate::outcome::Outcome;

/// One acknowledged claim as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AckedClaim {
    pub sku: u64,
    pub user: u64,
    pub claim_id: String,
    pub qty: u32,
}

/// Counters read by the progress bar while the run is in flight.
#[derive(Debug, Default)]
pub struct Live {
    pub done: AtomicU64,
    pub claimed: AtomicU64,
    pub errors: AtomicU64,
}

/// What one worker (or, merged, the whole run) saw.
pub struct Recorder {
    start: Instant,
    warmup: Duration,
    /// Latency per outcome, answers completed after warm-up.
    pub hists: Vec<Histogram<u64>>,
    /// Latency of every answer after warm-up.
    pub all: Histogram<u64>,
    /// Every answer, warm-up included (the invariant check needs them all).
    pub counts: [u64; Outcome::COUNT],
    /// Answers after warm-up.
    pub measured: [u64; Outcome::COUNT],
    /// Answers per second of completion time since the start.
    pub timeline: Vec<[u64; Outcome::COUNT]>,
    pub claims: Vec<AckedClaim>,
    /// Completion time of the last answer.
    pub last: Option<Instant>,
}

impl Recorder {
    pub fn new(start: Instant, warmup: Duration) -> Self {
        Self {
            start,
            warmup,
            hists: (0..Outcome::COUNT)
                .map(|_| latency::new_histogram())
                .collect(),
            all: latency::new_histogram(),
            counts: [0; Outcome::COUNT],
            measured: [0; Outcome::COUNT],
            timeline: Vec::new(),
            claims: Vec::new(),
            last: None,
        }
    }

    /// Records one answer that completed at `done` and took `took` (from its intended
    /// send time in open loop).
    pub fn record(&mut self, outcome: Outcome, took: Duration, done: Instant, live: &Live) {
        let i = outcome.index();
        self.counts[i] += 1;
        let since = done.saturating_duration_since(self.start);
        let sec = since.as_secs() as usize;
        if self.timeline.len() <= sec {
            self.timeline.resize(sec + 1, [0; Outcome::COUNT]);
        }
        self.timeline[sec][i] += 1;
        if since >= self.warmup {
            self.measured[i] += 1;
            latency::record(&mut self.hists[i], took);
            latency::record(&mut self.all, took);
        }
        self.last = Some(self.last.map_or(done, |l| l.max(done)));
        live.done.fetch_add(1, Ordering::Relaxed);
        if outcome == Outcome::Claimed {
            live.claimed.fetch_add(1, Ordering::Relaxed);
        } else if !outcome.is_served() {
            live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn merge(&mut self, o: Recorder) {
        for (a, b) in self.hists.iter_mut().zip(&o.hists) {
            a.add(b).expect("same bounds");
        }
        self.all.add(&o.all).expect("same bounds");
        for i in 0..Outcome::COUNT {
            self.counts[i] += o.counts[i];
            self.measured[i] += o.measured[i];
        }
        if self.timeline.len() < o.timeline.len() {
            self.timeline.resize(o.timeline.len(), [0; Outcome::COUNT]);
        }
        for (a, b) in self.timeline.iter_mut().zip(&o.timeline) {
            for i in 0..Outcome::COUNT {
                a[i] += b[i];
            }
        }
        self.claims.extend(o.claims);
        self.last = match (self.last, o.last) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    pub fn count(&self, o: Outcome) -> u64 {
        self.counts[o.index()]
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn measured_total(&self) -> u64 {
        self.measured.iter().sum()
    }

    /// Length of the measured window: warm-up end to the last answer.
    pub fn measured_window(&self) -> Duration {
        self.last
            .map(|l| l.saturating_duration_since(self.start + self.warmup))
            .unwrap_or_default()
    }
}
