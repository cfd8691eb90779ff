//! One run of the checker over a [`Config`], with what a person needs from it: the states
//! explored, the time, and each broken property with its counterexample in words.

use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model};

use crate::config::Config;
use crate::system::System;

pub struct Report {
    pub states: usize,
    pub unique: usize,
    pub depth: usize,
    pub took: Duration,
    /// Broken properties: an `always` with a counterexample, or a `sometimes` never seen.
    pub broken: Vec<(&'static str, String)>,
}

impl Report {
    pub fn summary(&self) -> String {
        format!(
            "states={} unique={} depth={} took={:.1}s broken={:?}",
            self.states,
            self.unique,
            self.depth,
            self.took.as_secs_f64(),
            self.broken.iter().map(|(n, _)| n).collect::<Vec<_>>()
        )
    }
}

/// Explores depth first (the frontier of a breadth-first search of the fault forms does
/// not fit in memory). `first_failure`: stop at the first broken `always` (the mutants).
pub fn run(cfg: Config, threads: usize, first_failure: bool, max_states: Option<usize>) -> Report {
    let started = Instant::now();
    let mut builder = System::new(cfg).checker().threads(threads);
    if first_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    if let Some(n) = max_states {
        builder = builder.target_state_count(n);
    }
    let checker = builder.spawn_dfs().join();
    let took = started.elapsed();
    let mut broken = Vec::new();
    for p in checker.model().properties() {
        let found = checker.discovery(p.name);
        match (p.expectation, found) {
            (Expectation::Always | Expectation::Eventually, Some(path)) => {
                broken.push((p.name, crate::trace::render(checker.model(), &path)));
            }
            (Expectation::Sometimes, None) if !first_failure => {
                broken.push((p.name, "never reached".to_owned()));
            }
            _ => {}
        }
    }
    Report {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        took,
        broken,
    }
}
