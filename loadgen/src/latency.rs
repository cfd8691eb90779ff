//! Latency recording in microseconds with HdrHistogram, and the coordinated-omission
//! correction used by open-loop runs.
//!
//! Two corrections exist and the bench uses the first:
//! - Open loop measures each request from its *intended* send time (the schedule), not from
//!   when a free connection finally sent it. A stall then shows up in every request that
//!   was due during it, as a user would see it.
//! - [`record_corrected`] wraps HdrHistogram's `record_correct`, which back-fills the
//!   samples a closed loop never sent during a stall, given the expected interval. Closed
//!   loops with `--co-interval` use it.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency a histogram can hold: one minute. Larger values are clamped.
pub const MAX_US: u64 = 60_000_000;

/// A fresh histogram at 3 significant figures that grows with the largest value recorded
/// (values are clamped to 1 µs .. 60 s). A fixed 1 µs .. 60 s histogram is ~139 KB, and a
/// run keeps 15 per worker: for 1 000 workers, 2 GB touched while the clock runs, which
/// the load generator's CPU per answer would pay for. Grown on demand, one that saw up to
/// ~100 ms is a few KB.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("static histogram precision is valid")
}

/// Microseconds of `d`, clamped into the histogram's range.
pub fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, MAX_US)
}

/// Records one sample; values out of range are clamped, never dropped.
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    // `record` grows an auto-resizing histogram; `saturating_record` would clamp to its
    // current (initially tiny) range instead.
    let v = micros(d);
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// Records one sample plus the samples a stall hid: with an expected interval of
/// `interval`, a value `v > interval` also records `v - interval`, `v - 2·interval`, ...
pub fn record_corrected(h: &mut Histogram<u64>, d: Duration, interval: Duration) {
    let v = micros(d);
    let i = micros(interval);
    if h.record_correct(v, i).is_err() {
        h.saturating_record(v);
    }
}

/// The percentiles every report shows, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub min_us: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self {
                count: 0,
                min_us: 0,
                p50_us: 0,
                p90_us: 0,
                p99_us: 0,
                p999_us: 0,
                max_us: 0,
                mean_us: 0.0,
            };
        }
        Self {
            count: h.len(),
            min_us: h.min(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: h.mean(),
        }
    }
}

/// `1234` µs → `"1.23ms"`, for tables.
pub fn fmt_us(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2}s", us as f64 / 1e6)
    } else if us >= 1_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else {
        format!("{us}µs")
    }
}
