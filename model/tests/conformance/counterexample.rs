//! A failed run, told as a counterexample: the seed and step to rerun, the steps that led
//! there, both replies and what differs.

use std::fmt;

use crate::lua::Reply;
use crate::steps::Step;

pub(crate) struct Counterexample {
    pub(crate) seed: u64,
    pub(crate) step_no: usize,
    pub(crate) step: Step,
    pub(crate) redis_reply: Reply,
    pub(crate) model_reply: Reply,
    pub(crate) what: String,
    pub(crate) history: Vec<(usize, Step, Reply)>,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "the model and the scripts differ (seed {}, step {}; rerun with \
             FG_CONFORMANCE_SEED={} FG_CONFORMANCE_STEPS={})",
            self.seed,
            self.step_no,
            self.seed,
            self.step_no + 1
        )?;
        writeln!(f, "steps before it (after the last reset):")?;
        for (n, step, reply) in &self.history {
            writeln!(f, "  #{n} {step:?}\n      -> {reply:?}")?;
        }
        writeln!(f, "step #{}: {:?}", self.step_no, self.step)?;
        writeln!(f, "redis reply: {:?}", self.redis_reply)?;
        writeln!(f, "model reply: {:?}", self.model_reply)?;
        write!(f, "{}", self.what)
    }
}

impl fmt::Debug for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
