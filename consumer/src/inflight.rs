//! Entries this process has read but not yet acknowledged. The recovery loop refreshes
//! their idle time (so no other consumer takes over live work) and skips them.
//!
//! Each entry carries the instant its idle time in Redis last started, or earlier: taken
//! before the read (or refresh) that started it was sent. So its age here is never below
//! its idle time in Redis, and recovery refreshes only entries old enough to need it
//! ([`InFlight::due`]) instead of every entry every round: most are settled within
//! milliseconds, and an XCLAIM looks every id up in the stream (issue 16).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shard_router::ShardId;

type Shards = HashMap<ShardId, HashMap<String, Instant>>;

/// Shared set of `(shard, entry id)` read by this process and not yet acknowledged.
#[derive(Debug, Clone, Default)]
pub struct InFlight(Arc<Mutex<Shards>>);

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shards> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds ids whose delivery was requested at `since`; returns those that were not in
    /// flight already (an id already in flight keeps its older instant).
    pub fn add<'a>(
        &self,
        shard: ShardId,
        ids: impl IntoIterator<Item = &'a str>,
        since: Instant,
    ) -> Vec<String> {
        let mut g = self.lock();
        let set = g.entry(shard).or_default();
        let mut added = Vec::new();
        for id in ids {
            if let std::collections::hash_map::Entry::Vacant(v) = set.entry(id.to_owned()) {
                v.insert(since);
                added.push(id.to_owned());
            }
        }
        added
    }

    pub fn remove<'a>(&self, shard: ShardId, ids: impl IntoIterator<Item = &'a str>) {
        if let Some(set) = self.lock().get_mut(&shard) {
            for id in ids {
                set.remove(id);
            }
        }
    }

    pub fn contains(&self, shard: ShardId, id: &str) -> bool {
        self.lock().get(&shard).is_some_and(|s| s.contains_key(id))
    }

    /// One shard's ids whose idle time may have reached `age`: those to refresh now.
    pub fn due(&self, shard: ShardId, age: Duration) -> Vec<String> {
        let now = Instant::now();
        self.lock()
            .get(&shard)
            .map(|s| {
                s.iter()
                    .filter(|(_, since)| now.saturating_duration_since(**since) >= age)
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Records that `ids` (those still in flight) were refreshed by a call sent at `at`.
    pub fn refreshed(&self, shard: ShardId, ids: &[String], at: Instant) {
        if let Some(set) = self.lock().get_mut(&shard) {
            for id in ids {
                if let Some(since) = set.get_mut(id) {
                    *since = (*since).max(at);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_entries_as_old_as_the_threshold_are_due() {
        let f = InFlight::default();
        let old = Instant::now() - Duration::from_secs(10);
        f.add(0, ["1-0", "2-0"], old);
        f.add(0, ["3-0"], Instant::now());
        f.add(1, ["1-0"], old);
        let mut due = f.due(0, Duration::from_secs(5));
        due.sort();
        assert_eq!(due, ["1-0", "2-0"]);
        // Added again by a later read: still as old as its first delivery.
        assert!(f.add(0, ["1-0"], Instant::now()).is_empty());
        f.refreshed(0, &["1-0".to_owned()], Instant::now());
        assert_eq!(f.due(0, Duration::from_secs(5)), ["2-0"]);
        assert_eq!(f.due(0, Duration::ZERO).len(), 3);
        f.remove(0, ["2-0"]);
        assert!(f.due(0, Duration::from_secs(5)).is_empty());
        assert_eq!(f.due(1, Duration::from_secs(5)), ["1-0"]);
        assert_eq!(f.len(), 3);
    }
}
