//! Fault drills in the style of Jepsen: keep a sale running, inject a fault, then compare
//! what clients were told (acknowledged claims) with what the system recorded.
//!
//! - [`load`]: bounded claim load against the stock core, collecting every answer.
//! - [`verdict`]: acknowledged vs recorded → lost, duplicated, oversold, over the limit.
//! - `tests/`: one file per fault family; each drill prints its [`Figures`] line.

pub mod load;
pub mod verdict;

pub use verdict::{Figures, Verdict};

/// The drill scale from `FG_DRILL_SCALE` (default 1, at most 100): the short form runs in
/// CI, `FG_DRILL_SCALE=10` is the longer local form. Durations and stock grow together, so
/// a longer drill still has stock left when its fault comes.
pub fn scale() -> f64 {
    std::env::var("FG_DRILL_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 100.0)
        .unwrap_or(1.0)
}

/// A drill duration at the current [`scale`].
pub fn scaled(d: std::time::Duration) -> std::time::Duration {
    d.mul_f64(scale())
}

/// A drill count (stock, user pool) at the current [`scale`].
pub fn scaled_count(n: u64) -> u64 {
    (n as f64 * scale()).round() as u64
}

/// Sends `sig` (`STOP`, `CONT`, `KILL`) to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {pid} failed");
}
