//! The opening-second latency check: a run whose first-second latency is more than
//! [`FACTOR`]× a stored reference run's fails. The first second of a flash sale decides it,
//! and it is where a harness or scheduling change shows up first (see README, Benchmarks).

use loadgen::latency::{fmt_us, Percentiles};

use crate::report::Report;

/// Allowed growth over the reference.
pub const FACTOR: f64 = 2.0;
/// References below this are raised to it: sub-millisecond figures move by more than 2×
/// between runs on a shared machine without meaning anything.
pub const FLOOR_US: u64 = 1_000;

/// Each first-second percentile of `now` more than [`FACTOR`]× the reference's, as one line
/// each; empty when none regressed. A figure missing from the reference is not checked; one
/// missing from `now` while the reference has it is a regression (the run lost it).
pub fn first_second_regressions(now: &Report, reference: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let pairs = [
        (
            "first second, all",
            &now.first_second,
            &reference.first_second,
        ),
        (
            "first second, claimed",
            &now.first_second_claimed,
            &reference.first_second_claimed,
        ),
    ];
    for (what, n, r) in pairs {
        let Some(r) = r else { continue };
        let Some(n) = n else {
            out.push(format!(
                "{what}: no answers in this run, the reference had {}",
                r.count
            ));
            continue;
        };
        check(&mut out, what, "p50", n.p50_us, r.p50_us);
        check(&mut out, what, "p99", n.p99_us, r.p99_us);
    }
    out
}

fn check(out: &mut Vec<String>, what: &str, pct: &str, now: u64, reference: u64) {
    let limit = (reference.max(FLOOR_US) as f64 * FACTOR) as u64;
    if now > limit {
        out.push(format!(
            "{what} {pct} {} > {FACTOR}× the reference's {} (limit {})",
            fmt_us(now),
            fmt_us(reference),
            fmt_us(limit)
        ));
    }
}

/// Shorthand for tables: `p50 / p99 (n)`.
pub fn brief(p: &Percentiles) -> String {
    format!("{} / {} ({})", fmt_us(p.p50_us), fmt_us(p.p99_us), p.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(p50: u64, p99: u64) -> Option<Percentiles> {
        Some(Percentiles {
            count: 100,
            min_us: 1,
            p50_us: p50,
            p90_us: p99,
            p99_us: p99,
            p999_us: p99,
            max_us: p99,
            mean_us: p50 as f64,
        })
    }

    fn report(all: Option<Percentiles>, claimed: Option<Percentiles>) -> Report {
        let mut r: Report = serde_json::from_str(include_str!("../../reference/users-5k.json"))
            .expect("stored reference parses");
        r.first_second = all;
        r.first_second_claimed = claimed;
        r
    }

    #[test]
    fn within_twice_the_reference_passes() {
        let reference = report(pct(2_000, 10_000), pct(3_000, 12_000));
        let now = report(pct(3_900, 19_000), pct(5_000, 24_000));
        assert!(first_second_regressions(&now, &reference).is_empty());
    }

    #[test]
    fn more_than_twice_fails_and_names_the_figure() {
        let reference = report(pct(2_000, 10_000), pct(3_000, 12_000));
        let now = report(pct(2_000, 10_000), pct(3_000, 25_000));
        let r = first_second_regressions(&now, &reference);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].contains("claimed p99"), "{r:?}");
    }

    #[test]
    fn sub_millisecond_references_are_floored() {
        let reference = report(pct(200, 400), None);
        let now = report(pct(900, 1_900), None);
        assert!(first_second_regressions(&now, &reference).is_empty());
        let now = report(pct(900, 2_100), None);
        assert_eq!(first_second_regressions(&now, &reference).len(), 1);
    }

    #[test]
    fn losing_the_claimed_answers_fails() {
        let reference = report(pct(2_000, 10_000), pct(3_000, 12_000));
        let now = report(pct(2_000, 10_000), None);
        assert_eq!(first_second_regressions(&now, &reference).len(), 1);
    }

    #[test]
    fn the_stored_reference_has_first_second_figures() {
        let r: Report =
            serde_json::from_str(include_str!("../../reference/users-5k.json")).unwrap();
        assert!(r.first_second.is_some() && r.first_second_claimed.is_some());
    }
}
