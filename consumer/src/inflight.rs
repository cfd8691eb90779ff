//! Entries this process has read but not yet acknowledged. The recovery loop refreshes
//! their idle time (so no other consumer takes over live work) and skips them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use shard_router::ShardId;

/// Shared set of `(shard, entry id)` read by this process and not yet acknowledged.
#[derive(Debug, Clone, Default)]
pub struct InFlight(Arc<Mutex<HashMap<ShardId, HashSet<String>>>>);

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ShardId, HashSet<String>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds ids; returns those that were not in flight already.
    pub fn add<'a>(&self, shard: ShardId, ids: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let mut g = self.lock();
        let set = g.entry(shard).or_default();
        ids.into_iter()
            .filter(|id| set.insert((*id).to_owned()))
            .map(str::to_owned)
            .collect()
    }

    pub fn remove<'a>(&self, shard: ShardId, ids: impl IntoIterator<Item = &'a str>) {
        if let Some(set) = self.lock().get_mut(&shard) {
            for id in ids {
                set.remove(id);
            }
        }
    }

    pub fn contains(&self, shard: ShardId, id: &str) -> bool {
        self.lock().get(&shard).is_some_and(|s| s.contains(id))
    }

    /// A snapshot of one shard's ids.
    pub fn of(&self, shard: ShardId) -> Vec<String> {
        self.lock()
            .get(&shard)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.lock().values().map(HashSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
