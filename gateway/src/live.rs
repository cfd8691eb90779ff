//! The set of live (preheated) SKUs, so a request for a SKU no campaign has is answered
//! 404 from memory: random SKU ids must not each cost a Redis lookup, nor push real SKUs
//! out of the sold-out cache.
//!
//! Fed like the sold-out cache (`events.rs`): the whole set (`fg:skus`, written by every
//! preheat) is read after each (re)subscribe and every `--cache-ttl-ms`, and each preheat
//! publishes `live <sku>`, so a missed event hides a SKU for one cache TTL at most.
//! Until the first read succeeds the set is unknown and every SKU is looked up in Redis
//! (with the short "no such SKU" memory of `cache.rs`).

use std::collections::HashSet;
use std::sync::RwLock;

#[derive(Debug, Default)]
pub(crate) struct LiveSkus {
    /// `None` until the set was read from Redis.
    set: RwLock<Option<HashSet<u64>>>,
}

impl LiveSkus {
    /// True when the set is known and `sku` is not in it: the SKU has no campaign.
    pub(crate) fn absent(&self, sku: u64) -> bool {
        let set = self.set.read().unwrap_or_else(|p| p.into_inner());
        set.as_ref().is_some_and(|s| !s.contains(&sku))
    }

    /// A SKU was just preheated.
    pub(crate) fn add(&self, sku: u64) {
        let mut set = self.set.write().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = set.as_mut() {
            s.insert(sku);
        }
    }

    /// Replaces the set with what Redis has (`None`: unknown again, e.g. the read failed).
    pub(crate) fn replace(&self, skus: Option<HashSet<u64>>) {
        *self.set.write().unwrap_or_else(|p| p.into_inner()) = skus;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_until_read_then_exact() {
        let live = LiveSkus::default();
        assert!(!live.absent(1), "an unread set rules nothing out");
        live.add(1);
        assert!(
            !live.absent(2),
            "an add before the first read does not make the set known"
        );
        live.replace(Some([1].into()));
        assert!(!live.absent(1));
        assert!(live.absent(2));
        live.add(2);
        assert!(!live.absent(2));
        live.replace(None);
        assert!(!live.absent(3));
    }
}
