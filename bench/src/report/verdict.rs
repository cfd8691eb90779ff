//! The `invariants` section of the report: each check's name, verdict and evidence. The
//! checks themselves (`checks/invariants.rs`) fill it; the type lives with the report whose
//! stable fields it is, so the report does not reach up into the checks that compare
//! reports (`checks/regress.rs`).

use serde::{Deserialize, Serialize};

/// One named check and its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// The verdict of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvariantReport {
    /// True when every check passed.
    pub passed: bool,
    pub checks: Vec<Check>,
}

impl InvariantReport {
    pub fn new(checks: Vec<Check>) -> Self {
        Self {
            passed: checks.iter().all(|c| c.passed),
            checks,
        }
    }
}
