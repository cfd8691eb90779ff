//! Entries this process has read but not yet acknowledged. The recovery loop refreshes
//! their idle time (so no other consumer takes over live work) and skips them.
//!
//! Each entry carries the instant its idle time in Redis last started, or earlier: taken
//! before the read (or refresh) that started it was sent. So its age here is never below
//! its idle time in Redis, and recovery refreshes only entries old enough to need it
//! ([`InFlight::due`]) instead of every entry every round: most are settled within
//! milliseconds, and an XCLAIM looks every id up in the stream (issue 16).
//!
//! Each entry also carries the flush epoch of the read that delivered it, for the
//! rebuild's flush handshake (`flush.rs`): a read registers itself ([`InFlight::begin`])
//! before its command is sent and stays registered until its entries are in this set, so
//! "everything read before cut `c`" is exactly the reads open at an epoch below `c` and the
//! entries of such an epoch not committed yet ([`InFlight::flushed`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shard_router::ShardId;
use tokio::sync::watch;

/// An entry's delivery instant and flush epoch ([`COMMITTED`] once in the ledger).
type Shards = HashMap<ShardId, HashMap<String, (Instant, u64)>>;

/// The epoch of an entry already committed to the ledger, only its XACK left: it holds
/// no flush back.
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

/// Shared set of `(shard, entry id)` read by this process and not yet acknowledged.
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
    /// When the read was asked for (the entries' idle time starts after it).
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

    /// Registers a read about to be sent (XREADGROUP, XAUTOCLAIM); keep it until its
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
            .all(|s| s.values().all(|(_, epoch)| *epoch >= cut))
    }

    /// Follows the cuts (see [`InFlight::cut`]).
    pub fn cuts(&self) -> watch::Receiver<u64> {
        self.0.cuts.subscribe()
    }

    /// Adds ids delivered by `read`; returns those that were not in flight already (an id
    /// already in flight keeps its older instant and epoch).
    pub fn add<'a>(
        &self,
        shard: ShardId,
        ids: impl IntoIterator<Item = &'a str>,
        read: &Reading,
    ) -> Vec<String> {
        let mut g = self.lock();
        let set = g.shards.entry(shard).or_default();
        let mut added = Vec::new();
        for id in ids {
            if let std::collections::hash_map::Entry::Vacant(v) = set.entry(id.to_owned()) {
                v.insert((read.asked, read.epoch));
                added.push(id.to_owned());
            }
        }
        added
    }

    /// Marks `(shard, id)`s committed to the ledger (their acknowledgement still to come).
    pub fn committed<'a>(&self, ids: impl IntoIterator<Item = (ShardId, &'a str)>) {
        let mut g = self.lock();
        for (shard, id) in ids {
            if let Some(e) = g.shards.get_mut(&shard).and_then(|s| s.get_mut(id)) {
                e.1 = COMMITTED;
            }
        }
    }

    pub fn remove<'a>(&self, shard: ShardId, ids: impl IntoIterator<Item = &'a str>) {
        if let Some(set) = self.lock().shards.get_mut(&shard) {
            for id in ids {
                set.remove(id);
            }
        }
    }

    pub fn contains(&self, shard: ShardId, id: &str) -> bool {
        self.lock()
            .shards
            .get(&shard)
            .is_some_and(|s| s.contains_key(id))
    }

    /// One shard's ids whose idle time may have reached `age`: those to refresh now.
    pub fn due(&self, shard: ShardId, age: Duration) -> Vec<String> {
        let now = Instant::now();
        self.lock()
            .shards
            .get(&shard)
            .map(|s| {
                s.iter()
                    .filter(|(_, (since, _))| now.saturating_duration_since(*since) >= age)
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Records that `ids` (those still in flight) were refreshed by a call sent at `at`.
    pub fn refreshed(&self, shard: ShardId, ids: &[String], at: Instant) {
        if let Some(set) = self.lock().shards.get_mut(&shard) {
            for id in ids {
                if let Some((since, _)) = set.get_mut(id) {
                    *since = (*since).max(at);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.lock().shards.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read registered at `since` (as if asked then).
    fn read_at(f: &InFlight, since: Instant) -> Reading {
        let mut r = f.begin();
        r.asked = since;
        r
    }

    #[test]
    fn only_entries_as_old_as_the_threshold_are_due() {
        let f = InFlight::default();
        let old = Instant::now() - Duration::from_secs(10);
        f.add(0, ["1-0", "2-0"], &read_at(&f, old));
        f.add(0, ["3-0"], &f.begin());
        f.add(1, ["1-0"], &read_at(&f, old));
        let mut due = f.due(0, Duration::from_secs(5));
        due.sort();
        assert_eq!(due, ["1-0", "2-0"]);
        // Added again by a later read: still as old as its first delivery.
        assert!(f.add(0, ["1-0"], &f.begin()).is_empty());
        f.refreshed(0, &["1-0".to_owned()], Instant::now());
        assert_eq!(f.due(0, Duration::from_secs(5)), ["2-0"]);
        assert_eq!(f.due(0, Duration::ZERO).len(), 3);
        f.remove(0, ["2-0"]);
        assert!(f.due(0, Duration::from_secs(5)).is_empty());
        assert_eq!(f.due(1, Duration::from_secs(5)), ["1-0"]);
        assert_eq!(f.len(), 3);
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
