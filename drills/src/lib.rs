//! Fault drills in the style of Jepsen: keep a sale running, inject a fault, then compare
//! what clients were told (acknowledged claims) with what the system recorded.
//!
//! - [`load`]: bounded claim load against the stock core, collecting every answer.
//! - [`verdict`]: acknowledged vs recorded → lost, duplicated, oversold, over the limit.
//! - `tests/`: one file per fault family; each drill prints its [`Figures`] line.

pub mod load;
pub mod verdict;

pub use verdict::{Figures, Verdict};

/// Scales a drill's load duration by `FG_DRILL_SCALE` (default 1): the short form runs in
/// CI, `FG_DRILL_SCALE=10` is the longer local form.
pub fn scaled(d: std::time::Duration) -> std::time::Duration {
    let scale = std::env::var("FG_DRILL_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 100.0)
        .unwrap_or(1.0);
    d.mul_f64(scale)
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
