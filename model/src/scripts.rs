//! Each Lua script of `lua/` as one atomic function over a [`Shard`]: the same checks in the
//! same order, the same return codes, the same writes. `tests/conformance.rs` runs these and
//! the real scripts side by side on a real Redis and compares replies and keys after every
//! step, so a script change the model does not share fails there.
//!
//! A [`Mutant`] switches one rule off, for the tests that prove the checker finds bugs.

mod claim;
mod guard;
mod preheat;
mod release;
mod settle;
mod take;
mod wave;

pub use claim::{claim, ClaimArgs, ClaimReply};
pub use guard::guard;
pub use preheat::{preheat, PreheatReply};
pub use release::{release_stock, release_user, ReleaseReply};
pub use settle::{settle, SettleReply, Verb};
pub use take::{take, TakeArgs, TakeReply};
pub use wave::{wave, WaveReply};

use crate::mutant::Mutant;

/// What one script run publishes, in order.
pub type Events = Vec<crate::keyspace::Event>;

fn on(mutant: Option<Mutant>, m: Mutant) -> bool {
    mutant == Some(m)
}
