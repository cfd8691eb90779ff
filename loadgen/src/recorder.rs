//! Per-worker recording of answers: latency histograms per outcome (measured window only),
//! outcome counts (whole run, for the invariant check), a per-second timeline, and the
//! claims acknowledged. Workers record privately and are merged once at the end, so the
//! hot path takes no lock.
//!
//! A worker only appends an 8-byte sample per answer; the histograms are built when the
//! workers' recorders are merged, after the clock stops. Histograms per worker (15 of
//! 1 µs .. 60 s at 3 significant figures, ~139 KB each, for each of 1 000 workers) were
//! 2 GB allocated on the clock, and made the load generator cost 5× an external client.

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
    /// Latency per outcome, answers completed after warm-up; created on the first answer
    /// of that outcome, so a worker pays only for the outcomes it sees.
    pub hists: Vec<Option<Histogram<u64>>>,
    /// Latency of every answer after warm-up.
    pub all: Histogram<u64>,
    /// Every answer, warm-up included (the invariant check needs them all).
    pub counts: [u64; Outcome::COUNT],
    /// Answers after warm-up.
    pub measured: [u64; Outcome::COUNT],
    /// Answers per second of completion time since the start.
    pub timeline: Vec<[u64; Outcome::COUNT]>,
    pub claims: Vec<AckedClaim>,
    /// Answers not yet in the histograms (a worker's; merged into histograms at the end).
    samples: Vec<Sample>,
    /// Completion time of the last answer.
    pub last: Option<Instant>,
    /// Latency of the requests sent in the first second (warm-up or not), all outcomes
    /// and claimed only: the opening rush, which decides a flash sale.
    pub first_second: Option<Histogram<u64>>,
    pub first_second_claimed: Option<Histogram<u64>>,
}

/// One answer as a worker saw it, until the merge puts it into the histograms.
#[derive(Debug, Clone, Copy)]
struct Sample {
    us: u32,
    outcome: u8,
    measured: bool,
    first_second: bool,
}

/// Samples a worker reserves room for before the clock starts.
const SAMPLES_RESERVED: usize = 256;

/// How long after the start a request counts as part of the opening rush.
pub const FIRST_SECOND: Duration = Duration::from_secs(1);

fn merge_hist(a: &mut Option<Histogram<u64>>, b: Option<Histogram<u64>>) {
    match (a.as_mut(), b) {
        (Some(a), Some(b)) => a.add(&b).expect("auto-resizing histograms"),
        (None, Some(b)) => *a = Some(b),
        (_, None) => {}
    }
}

impl Recorder {
    pub fn new(start: Instant, warmup: Duration) -> Self {
        Self {
            start,
            warmup,
            hists: (0..Outcome::COUNT).map(|_| None).collect(),
            all: latency::new_histogram(),
            counts: [0; Outcome::COUNT],
            measured: [0; Outcome::COUNT],
            timeline: Vec::new(),
            claims: Vec::new(),
            samples: Vec::with_capacity(SAMPLES_RESERVED),
            last: None,
            first_second: None,
            first_second_claimed: None,
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
        let measured = since >= self.warmup;
        if measured {
            self.measured[i] += 1;
        }
        let sent = done.checked_sub(took).unwrap_or(done);
        self.samples.push(Sample {
            us: latency::micros(took) as u32,
            outcome: i as u8,
            measured,
            first_second: sent.saturating_duration_since(self.start) < FIRST_SECOND,
        });
        self.last = Some(self.last.map_or(done, |l| l.max(done)));
        live.done.fetch_add(1, Ordering::Relaxed);
        if outcome == Outcome::Claimed {
            live.claimed.fetch_add(1, Ordering::Relaxed);
        } else if !outcome.is_served() {
            live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Puts one sample into the histograms.
    fn add_sample(&mut self, x: Sample) {
        let took = std::time::Duration::from_micros(u64::from(x.us));
        let outcome = Outcome::ALL[usize::from(x.outcome)];
        if x.measured {
            latency::record(
                self.hists[usize::from(x.outcome)].get_or_insert_with(latency::new_histogram),
                took,
            );
            latency::record(&mut self.all, took);
        }
        if x.first_second {
            latency::record(
                self.first_second.get_or_insert_with(latency::new_histogram),
                took,
            );
            if outcome == Outcome::Claimed {
                latency::record(
                    self.first_second_claimed
                        .get_or_insert_with(latency::new_histogram),
                    took,
                );
            }
        }
    }

    /// Merges a worker's recorder into this one, building the histograms from its samples.
    pub fn merge(&mut self, o: Recorder) {
        for x in &o.samples {
            self.add_sample(*x);
        }
        for (a, b) in self.hists.iter_mut().zip(o.hists) {
            merge_hist(a, b);
        }
        merge_hist(&mut self.first_second, o.first_second);
        merge_hist(&mut self.first_second_claimed, o.first_second_claimed);
        self.all.add(&o.all).expect("auto-resizing histograms");
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

    /// Moves the start of the clock: workers build their recorder before the gate opens
    /// (so no allocation is timed) and learn the start once it has.
    pub fn set_start(&mut self, start: Instant) {
        self.start = start;
    }

    /// Latency of one outcome's measured answers, `None` when there were none.
    pub fn hist(&self, o: Outcome) -> Option<&Histogram<u64>> {
        self.hists[o.index()].as_ref()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_builds_histograms_and_the_first_second_from_samples() {
        let start = Instant::now();
        let live = Live::default();
        let mut worker = Recorder::new(start, Duration::ZERO);
        let ms = Duration::from_millis;
        // Sent at 0 ms, took 5 ms: first second, claimed.
        worker.record(Outcome::Claimed, ms(5), start + ms(5), &live);
        // Sent at 1.5 s: not in the first second.
        worker.record(Outcome::SoldOut, ms(2), start + ms(1_502), &live);
        // Nothing is built on the worker's side.
        assert!(worker.hist(Outcome::Claimed).is_none());
        assert!(worker.first_second.is_none());
        let mut all = Recorder::new(start, Duration::ZERO);
        all.merge(worker);
        assert_eq!(all.hist(Outcome::Claimed).map(Histogram::len), Some(1));
        assert_eq!(all.hist(Outcome::SoldOut).map(Histogram::len), Some(1));
        assert_eq!(all.all.len(), 2);
        assert_eq!(all.first_second.as_ref().map(Histogram::len), Some(1));
        let fc = all
            .first_second_claimed
            .as_ref()
            .expect("a claimed first-second answer");
        assert!((4_990..=5_010).contains(&fc.max()), "{}", fc.max());
        assert_eq!(all.total(), 2);
        assert_eq!(live.done.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn warm_up_answers_count_but_are_not_measured() {
        let start = Instant::now();
        let live = Live::default();
        let mut worker = Recorder::new(start, Duration::from_secs(1));
        worker.record(
            Outcome::Claimed,
            Duration::from_millis(1),
            start + Duration::from_millis(10),
            &live,
        );
        let mut all = Recorder::new(start, Duration::from_secs(1));
        all.merge(worker);
        assert_eq!(all.count(Outcome::Claimed), 1);
        assert_eq!(all.measured_total(), 0);
        assert!(all.hist(Outcome::Claimed).is_none());
        // The opening rush is reported whether or not it falls in the warm-up.
        assert!(all.first_second_claimed.is_some());
    }
}
