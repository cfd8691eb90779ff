//! Entries this process has read and not yet committed (or dropped), for the
//! rebuild's flush handshake (`flush.rs`): a read registers itself ([`InFlight::begin`])
//! before its command is sent and stays registered until its entries are in this set, so
//! "everything read before cut `c`" is exactly the reads open at an epoch below `c` and the
//! entries of such an epoch not committed yet ([`InFlight::flushed`]).
//!
//! One id may be held by two reads at once (a read of a lost lease, or of an old master,
//! still queued when the shard is read again): each holder is kept with its own epoch, and
//! a removal takes one holder, the committed one first, else the newest, so an older read's
//! epoch keeps holding a cut back until the last holder is gone (never too early).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use shard_router::ShardId;
use tokio::sync::watch;

/// The flush epoch of each read holding an entry ([`COMMITTED`] once in the ledger).
type Shards = HashMap<ShardId, HashMap<String, Vec<u64>>>;

/// The epoch of an entry already committed to the ledger, only its settling left: it
/// holds no flush back.
const COMMITTED: u64 = u64::MAX;

#[derive(Debug, Default)]
struct State {
    shards: Shards,
    /// The current flush epoch: raised by every cut.
    epoch: u64,
    /// Reads in progress, by the epoch they started in.
    reading: BTreeMap<u64, usize>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// The latest cut, for the writer to close its open batch at once (`writer.rs`).
    cuts: watch::Sender<u64>,
}

/// Shared set of `(shard, entry id)` read by this process and not yet committed (or dropped).
#[derive(Debug, Clone)]
pub struct InFlight(Arc<Inner>);

impl Default for InFlight {
    fn default() -> Self {
        Self(Arc::new(Inner {
            state: Mutex::default(),
            cuts: watch::Sender::new(0),
        }))
    }
}

/// A read in progress (from [`InFlight::begin`], taken before the read is sent): until it
/// is dropped, a flush cut taken after it started is not honoured.
#[derive(Debug)]
pub struct Reading {
    set: InFlight,
    epoch: u64,
    /// When the read was asked for (the next read of its shard is paced from it).
    pub asked: Instant,
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut g = self.set.lock();
        if let Some(n) = g.reading.get_mut(&self.epoch) {
            *n -= 1;
            if *n == 0 {
                g.reading.remove(&self.epoch);
            }
        }
    }
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a read about to be sent (an XREAD); keep it until its
    /// entries are added (or it returned none).
    pub fn begin(&self) -> Reading {
        let mut g = self.lock();
        let epoch = g.epoch;
        *g.reading.entry(epoch).or_default() += 1;
        Reading {
            set: self.clone(),
            epoch,
            asked: Instant::now(),
        }
    }

    /// Starts a new flush epoch; returns the cut: everything read before it has an epoch
    /// below it.
    pub fn cut(&self) -> u64 {
        let cut = {
            let mut g = self.lock();
            g.epoch += 1;
            g.epoch
        };
        self.0.cuts.send_replace(cut);
        cut
    }

    /// True once everything read before `cut` is committed or dropped: no read that
    /// started before it is still open, and none of its entries is still in flight
    /// uncommitted. Scans the set: called only while a flush request waits.
    pub fn flushed(&self, cut: u64) -> bool {
        let g = self.lock();
        // One lock: a read drops its registration only after its entries are in the set.
        if g.reading.range(..cut).next().is_some() {
            return false;
        }
        g.shards
            .values()
            .all(|s| s.values().flatten().all(|&epoch| epoch >= cut))
    }

    /// Follows the cuts (see [`InFlight::cut`]).
    pub fn cuts(&self) -> watch::Receiver<u64> {
        self.0.cuts.subscribe()
    }

    /// Adds ids delivered by `read`, each one more holder.
    pub fn add<'a>(&self, shard: ShardId, ids: impl IntoIterator<Item = &'a str>, read: &Reading) {
        let mut g = self.lock();
        let set = g.shards.entry(shard).or_default();
        for id in ids {
            set.entry(id.to_owned()).or_default().push(read.epoch);
        }
    }

    /// Marks one holder of each `(shard, id)` committed to the ledger (its settling still
    /// to come): the oldest, which the commit covers as well as any.
    pub fn committed<'a>(&self, ids: impl IntoIterator<Item = (ShardId, &'a str)>) {
        let mut g = self.lock();
        for (shard, id) in ids {
            if let Some(held) = g.shards.get_mut(&shard).and_then(|s| s.get_mut(id)) {
                if let Some(e) = held.iter_mut().filter(|e| **e != COMMITTED).min() {
                    *e = COMMITTED;
                }
            }
        }
    }

    /// Removes one holder of each id: a committed one first, else the newest.
    pub fn remove<'a>(&self, shard: ShardId, ids: impl IntoIterator<Item = &'a str>) {
        if let Some(set) = self.lock().shards.get_mut(&shard) {
            for id in ids {
                let Some(held) = set.get_mut(id) else {
                    continue;
                };
                let at = held
                    .iter()
                    .position(|&e| e == COMMITTED)
                    .or_else(|| (0..held.len()).max_by_key(|&i| held[i]));
                if let Some(i) = at {
                    held.swap_remove(i);
                }
                if held.is_empty() {
                    set.remove(id);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.lock()
            .shards
            .values()
            .flat_map(HashMap::values)
            .map(Vec::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id read twice (a lost lease's read still queued when the shard is read again):
    /// dropping or settling one read leaves the other holding the cut.
    #[test]
    fn an_id_held_by_two_reads_holds_the_cut_until_both_are_gone() {
        let f = InFlight::default();
        f.add(0, ["1-0"], &f.begin());
        let cut = f.cut();
        f.add(0, ["1-0"], &f.begin());
        f.remove(0, ["1-0"]);
        assert!(
            !f.flushed(cut),
            "the read from before the cut still holds 1-0"
        );
        f.committed([(0, "1-0")]);
        assert!(f.flushed(cut));
        f.remove(0, ["1-0"]);
        assert!(f.is_empty());
    }

    #[test]
    fn a_cut_waits_for_reads_and_entries_from_before_it() {
        let f = InFlight::default();
        f.add(0, ["1-0"], &f.begin());
        let open = f.begin();
        let cut = f.cut();
        assert!(!f.flushed(cut), "1-0 read before the cut");
        // Reads after the cut never hold it back.
        f.add(1, ["9-0"], &f.begin());
        f.committed([(0, "1-0")]);
        assert!(!f.flushed(cut), "a read sent before the cut is still open");
        f.add(0, ["2-0"], &open);
        drop(open);
        assert!(!f.flushed(cut), "its entry is not committed");
        f.remove(0, ["2-0"]);
        assert!(f.flushed(cut));
        assert!(!f.flushed(f.cut()), "9-0 read before the second cut");
        assert_eq!(*f.cuts().borrow(), 2);
    }
}
