//! `lua/guard.lua`, the first lines of claim.lua, take.lua and settle.lua as the gateway
//! loads them, with the run_id of the process they were loaded on (`server`).

use crate::keyspace::{Shard, Vouch};

/// False: RESTORING (`17`), nothing of the sale read or written. A vouch of another
/// process is replaced by `revoked` on the way (an old master promoted back keeps its
/// run_id and must not find its own vouch in a copy); no vouch at all passes.
pub fn guard(sh: &mut Shard, server: u8) -> bool {
    match sh.vouch {
        Some(Vouch::Run(r)) if r == server => true,
        None => true,
        Some(Vouch::Run(_)) => {
            sh.vouch = Some(Vouch::Revoked);
            false
        }
        Some(Vouch::Revoked) => false,
    }
}
