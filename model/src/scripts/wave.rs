//! `lua/wave.lua`.

use crate::keyspace::{Event, Shard, ShardId, Units};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaveReply {
    Added { slice: Units },
    AlreadyAdded,
    NotPreheated,
    BadArgument,
}

pub fn wave(
    sh: &mut Shard,
    id: u8,
    units: Units,
    shard: ShardId,
    events: &mut super::Events,
) -> WaveReply {
    if units < 0 {
        return WaveReply::BadArgument;
    }
    let Some(slice) = sh.stock else {
        return WaveReply::NotPreheated;
    };
    if sh.waves.contains_key(&id) {
        return WaveReply::AlreadyAdded;
    }
    sh.waves.insert(id, units);
    let paid = if units > 0 {
        sh.debt.min(units).max(0)
    } else {
        0
    };
    sh.debt -= paid;
    let added = units - paid;
    if added == 0 {
        return WaveReply::Added { slice };
    }
    let slice = slice + added;
    sh.stock = Some(slice);
    events.push(Event::Restock(shard));
    WaveReply::Added { slice }
}
