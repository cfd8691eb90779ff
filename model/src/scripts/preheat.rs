//! `lua/preheat.lua`.

use crate::keyspace::{Meta, Shard, Units};
use crate::mutant::Mutant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreheatReply {
    Preheated { slice: Units },
    Live { current: Units },
    Rebuilding,
    BadArgument,
}

pub fn preheat(
    sh: &mut Shard,
    slice: Units,
    limit: Units,
    start: i64,
    end: i64,
    mutant: Option<Mutant>,
) -> PreheatReply {
    if slice < 0 || limit < 1 {
        return PreheatReply::BadArgument;
    }
    if sh.meta.as_ref().is_some_and(|m| m.fenced) {
        return PreheatReply::Rebuilding;
    }
    let meta = sh.meta.get_or_insert(Meta {
        limit,
        start,
        end,
        gen: 0,
        fenced: false,
    });
    meta.limit = limit;
    meta.start = start;
    meta.end = end;
    if let Some(current) = sh.stock {
        if !super::on(mutant, Mutant::PreheatOverwrites) {
            return PreheatReply::Live { current };
        }
    }
    sh.stock = Some(slice);
    PreheatReply::Preheated { slice }
}
