//! Histogram recording and the coordinated-omission correction.

use std::time::Duration;

use loadgen::latency::{self, Percentiles};

#[test]
fn corrected_recording_backfills_a_stall() {
    // A closed loop expecting one request per 1 ms sees one 100 ms stall: uncorrected,
    // that is 1 sample in 100; corrected, the ~99 requests that were due during the stall
    // are recorded with their waits (99 ms, 98 ms, ... 1 ms).
    let interval = Duration::from_millis(1);
    let mut raw = latency::new_histogram();
    let mut fixed = latency::new_histogram();
    for _ in 0..99 {
        latency::record(&mut raw, Duration::from_micros(500));
        latency::record_corrected(&mut fixed, Duration::from_micros(500), interval);
    }
    latency::record(&mut raw, Duration::from_millis(100));
    latency::record_corrected(&mut fixed, Duration::from_millis(100), interval);
    assert_eq!(raw.len(), 100);
    assert_eq!(fixed.len(), 100 + 99);
    let (r, f) = (Percentiles::of(&raw), Percentiles::of(&fixed));
    assert!(r.p50_us < 1_000, "raw median hides the stall: {r:?}");
    assert!(f.p50_us >= 1_000, "corrected median shows it: {f:?}");
    assert!(f.p90_us >= 75_000, "{f:?}");
    assert_eq!(r.max_us / 1000, f.max_us / 1000);
}

#[test]
fn values_are_clamped_not_dropped() {
    let mut h = latency::new_histogram();
    latency::record(&mut h, Duration::ZERO);
    latency::record(&mut h, Duration::from_secs(3600));
    assert_eq!(h.len(), 2);
    let p = Percentiles::of(&h);
    assert_eq!(p.min_us, 1);
    assert!(p.max_us >= latency::MAX_US - latency::MAX_US / 1000);
    assert_eq!(Percentiles::of(&latency::new_histogram()).count, 0);
}

#[test]
fn formats_units() {
    assert_eq!(latency::fmt_us(850), "850µs");
    assert_eq!(latency::fmt_us(1_500), "1.50ms");
    assert_eq!(latency::fmt_us(2_500_000), "2.50s");
}

#[test]
fn a_fresh_histogram_grows_to_the_values_recorded() {
    // Fresh histograms start tiny and grow: a clamping record would report every sample
    // as 2 µs.
    let mut h = latency::new_histogram();
    latency::record(&mut h, Duration::from_millis(250));
    latency::record(&mut h, Duration::from_micros(40));
    let p = Percentiles::of(&h);
    assert!((249_000..=251_000).contains(&p.max_us), "{p:?}");
    assert!((39..=41).contains(&p.min_us), "{p:?}");
}
