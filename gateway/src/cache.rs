//! The local sold-out cache: per SKU, its metadata and which of its shards are known empty.
//!
//! Fed by three sources: the outcomes of the claims this gateway runs (through
//! [`EmptyShards`]), the `empty` / `restock` Pub/Sub events (`events.rs`), and a full resync
//! from Redis whenever the subscriber (re)connects. Entries expire after `--cache-ttl-ms`,
//! so any missed event heals within that bound: the next request reloads the SKU from Redis.
//! A SKU outside the live set (`live.rs`) is answered "no such SKU" without a Redis call
//! and without an entry here, so random SKU ids cannot push real ones out. Before that set
//! is known, "no such SKU" is remembered for `--unknown-sku-ttl-ms` only, so a freshly
//! preheated campaign becomes visible quickly while unknown SKUs cannot flood Redis.
//!
//! A SKU's metadata (`fg:sku:<sku>`) and its live-set entry carry no shard tag: on a
//! cluster one master holds them, apart from the SKU's shards, and it may lose its data
//! while the shards keep theirs. Until the consumer's watch writes them back from the
//! ledger, a SKU this gateway loaded whose window still runs is served from what it
//! loaded ([`SoldOutCache::kept`]): its shards elsewhere keep selling, and a winner's
//! retry on a shard lost with them gets 503 `restoring`, never 404 `unknown_sku`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;
use shard_router::protocol::EmptyShards;
use shard_router::{ShardId, SkuMeta, StockClient, StockError};
use tokio::sync::OnceCell;

use crate::live::LiveSkus;
use crate::metrics::CACHE_EVENTS;
use crate::replay_filter::{FilteredSku, ReplayFilter};

/// What this gateway knows about one preheated SKU.
#[derive(Debug)]
pub(crate) struct SkuState {
    pub(crate) meta: SkuMeta,
    shards: Vec<ShardId>,
    /// Parallel to `shards`.
    empty: Vec<AtomicBool>,
    /// Position in `shards` by shard id, `u16::MAX` for a shard outside the SKU: every
    /// claim asks about each shard of its SKU (`Placement::walkable`), and a search of
    /// `shards` per ask was most of that cost.
    index: Vec<u16>,
    /// Who may have a stored answer, once every shard is empty (`replay_filter.rs`).
    pub(crate) replay: ReplayFilter,
}

impl SkuState {
    fn new(meta: SkuMeta, shards: Vec<ShardId>) -> Self {
        let empty = shards.iter().map(|_| AtomicBool::new(false)).collect();
        let ids = shards.iter().max().map_or(0, |&m| usize::from(m) + 1);
        let mut index = vec![u16::MAX; ids];
        for (i, &s) in shards.iter().enumerate() {
            index[usize::from(s)] = i as u16;
        }
        Self {
            meta,
            shards,
            empty,
            index,
            replay: ReplayFilter::default(),
        }
    }

    fn slot(&self, shard: ShardId) -> Option<&AtomicBool> {
        let i = *self.index.get(usize::from(shard))?;
        self.empty.get(usize::from(i))
    }

    /// Marks a shard empty or not; shards outside the SKU are ignored. A shard found with
    /// units again drops the replay filter.
    pub(crate) fn set(&self, shard: ShardId, empty: bool) {
        if let Some(flag) = self.slot(shard) {
            if flag.swap(empty, Ordering::Relaxed) && !empty {
                self.replay.units_back();
            }
        }
    }

    /// Every shard is known empty: the SKU is sold out as far as this gateway knows.
    pub(crate) fn all_empty(&self) -> bool {
        self.empty.iter().all(|e| e.load(Ordering::Relaxed))
    }

    pub(crate) fn shards(&self) -> &[ShardId] {
        &self.shards
    }

    pub(crate) fn empty_shards(&self) -> Vec<ShardId> {
        self.shards
            .iter()
            .zip(&self.empty)
            .filter(|(_, e)| e.load(Ordering::Relaxed))
            .map(|(s, _)| *s)
            .collect()
    }

    /// Replaces the empty set with what Redis says now. A missing slice is not "empty":
    /// the claim itself will report "not preheated".
    fn rebuild(&self, slices: &[(ShardId, Option<i64>)]) {
        for (shard, slice) in slices {
            self.set(*shard, matches!(slice, Some(v) if *v <= 0));
        }
        self.replay.drop_users();
    }
}

impl FilteredSku for SkuState {
    fn meta(&self) -> &SkuMeta {
        &self.meta
    }

    fn all_empty(&self) -> bool {
        SkuState::all_empty(self)
    }

    fn replay(&self) -> &ReplayFilter {
        &self.replay
    }
}

impl EmptyShards for SkuState {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool {
        sku == self.meta.sku && self.slot(shard).is_some_and(|e| e.load(Ordering::Relaxed))
    }

    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool) {
        if sku == self.meta.sku {
            self.set(shard, empty);
        }
    }
}

/// What one claim's run of the protocol knows about empty shards (its [`EmptyShards`]).
///
/// The walk is planned from the claim's own state, looked up in the cache just before. As
/// the walk reaches each shard (`shard_router::protocol`), marks are read from the SKU's
/// entry as the cache holds it then: a walk can outlive its state's entry (the TTL, an
/// invalidation), from then on that state gets no event, so a shard marked empty in it
/// would stay marked through the `restock` that refilled it, and the walk would skip the
/// units and answer sold out. With no entry loaded, no shard is known empty (the take
/// finds out). Outcomes are noted on the claim's state.
pub(crate) struct ClaimView<'a> {
    cache: &'a SoldOutCache,
    state: &'a SkuState,
}

impl EmptyShards for ClaimView<'_> {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.state.is_empty(sku, shard)
    }

    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool) {
        self.state.set_empty(sku, shard, empty);
    }

    fn still_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.cache
            .peek(sku)
            .is_some_and(|now| now.is_empty(sku, shard))
    }
}

/// One cache entry. The cell lets concurrent first requests for a SKU share one load.
#[derive(Debug)]
struct Slot {
    state: OnceCell<Option<Arc<SkuState>>>,
    created: Instant,
}

/// The sold-out cache. Cheap to clone; clones share the entries.
#[derive(Clone)]
pub(crate) struct SoldOutCache {
    entries: Cache<u64, Arc<Slot>>,
    /// The last state loaded per SKU, kept past `entries`' TTL: when a reload fails (the
    /// metadata key's master is down or failing over), or finds the metadata gone while
    /// the window runs (that master lost its data), the SKU is served from it instead of
    /// answering 503 or 404 for every shard. Metadata does not change during a sale and
    /// every script checks window, limit and stock itself, so serving it stale is safe.
    last_loaded: Cache<u64, Arc<SkuState>>,
    unknown_ttl: Duration,
    live: Arc<LiveSkus>,
    /// The Pub/Sub subscriber is connected and resynced: only then can events drop a
    /// replay filter, so only then is one consulted.
    subscribed: Arc<AtomicBool>,
}

impl SoldOutCache {
    pub(crate) fn new(capacity: u64, ttl: Duration, unknown_ttl: Duration) -> Self {
        Self {
            entries: Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                // The state stays in `last_loaded` past its entry (served if a reload
                // fails, which drops its replay filter anyway): its replay filter goes with
                // the entry, so a SKU nobody asks about gives its memory and its room in
                // --replay-filter-total-users back.
                .eviction_listener(|_sku, slot: Arc<Slot>, _cause| {
                    if let Some(Some(state)) = slot.state.get() {
                        state.replay.drop_users();
                    }
                })
                .build(),
            last_loaded: Cache::new(capacity),
            unknown_ttl,
            live: Arc::default(),
            subscribed: Arc::default(),
        }
    }

    /// The SKU's state, loading it from Redis on a miss. `Ok(None)`: no such SKU.
    pub(crate) async fn get(
        &self,
        client: &StockClient,
        sku: u64,
    ) -> Result<Option<Arc<SkuState>>, StockError> {
        if let Some(slot) = self.entries.get(&sku) {
            if let Some(known) = slot.state.get() {
                match known {
                    Some(state) => {
                        crate::metrics::claim_metrics().cache_hits.increment(1);
                        return Ok(Some(state.clone()));
                    }
                    None if slot.created.elapsed() < self.unknown_ttl => {
                        event("unknown");
                        return Ok(None);
                    }
                    // Unknown for long enough: forget it and look again.
                    None => self.entries.invalidate(&sku),
                }
            }
        }
        if self.live.absent(sku) && self.kept(sku).is_none() {
            event("unknown");
            return Ok(None);
        }
        let slot = self.entries.get_with(sku, new_slot);
        event("miss");
        match slot.state.get_or_try_init(|| self.load(client, sku)).await {
            Ok(state) => {
                if let Some(s) = state {
                    self.last_loaded.insert(sku, s.clone());
                }
                Ok(state.clone())
            }
            Err(e) => {
                event("load_error");
                match self.last_loaded.get(&sku) {
                    Some(stale) => {
                        // Served from the slot until it expires, so a dead master costs one
                        // failed load per TTL, not one per request.
                        event("stale");
                        stale.replay.drop_users();
                        let _ = slot.state.set(Some(stale.clone()));
                        Ok(Some(stale))
                    }
                    None => Err(e),
                }
            }
        }
    }

    /// [`load`], or the [`Self::kept`] state when the metadata is gone.
    async fn load(
        &self,
        client: &StockClient,
        sku: u64,
    ) -> Result<Option<Arc<SkuState>>, StockError> {
        Ok(load(client, sku).await?.or_else(|| {
            let kept = self.kept(sku)?;
            event("meta_lost");
            kept.replay.drop_users();
            Some(kept)
        }))
    }

    /// The last state loaded for `sku`, while its window runs. Its metadata can be gone
    /// from Redis then only because the master holding it lost its data: close-out retires
    /// a SKU a day after its end (`campaign-ops/src/closeout.rs`). So it is served, not
    /// answered 404, until the consumer's watch (or a rebuild) writes the metadata back.
    fn kept(&self, sku: u64) -> Option<Arc<SkuState>> {
        let state = self.last_loaded.get(&sku)?;
        (shard_router::now_ms() < state.meta.end_ms).then_some(state)
    }

    /// The view a claim of `state` runs the protocol with.
    pub(crate) fn claim_view<'a>(&'a self, state: &'a SkuState) -> ClaimView<'a> {
        ClaimView { cache: self, state }
    }

    /// The state if it is loaded; never touches Redis (for Pub/Sub events).
    pub(crate) fn peek(&self, sku: u64) -> Option<Arc<SkuState>> {
        self.entries.get(&sku)?.state.get()?.clone()
    }

    /// Drops a SKU's entry, e.g. when Redis says it is not preheated any more: the next
    /// request loads it again. What was loaded stays in `last_loaded`: a shard that lost
    /// its slice may have lost the SKU's metadata with it ([`Self::kept`]).
    pub(crate) fn invalidate(&self, sku: u64) {
        event("invalidate");
        self.entries.invalidate(&sku);
    }

    /// Applies an `empty` / `restock` event. Either drops the SKU's replay filter: an
    /// `empty` of a shard already empty comes from a rebuild or a late claim's apply.
    pub(crate) fn apply(&self, sku: u64, shard: ShardId, empty: bool) {
        if let Some(state) = self.peek(sku) {
            event(if empty { "empty" } else { "restock" });
            state.set(shard, empty);
            state.replay.drop_users();
        }
    }

    /// A `replay <sku>` event: a stored answer appeared outside a claim (a late claim's
    /// apply, `lua/rebuild_late.lua`), so the SKU's replay filter is read again.
    pub(crate) fn drop_replay_users(&self, sku: u64) {
        event("replay");
        if let Some(state) = self.peek(sku) {
            state.replay.drop_users();
        }
    }

    /// Whether the subscriber is connected and resynced (see `subscribed`).
    pub(crate) fn set_subscribed(&self, on: bool) {
        self.subscribed.store(on, Ordering::Release);
    }

    pub(crate) fn subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Acquire)
    }

    /// A SKU was preheated (`live <sku>` event). A "no such SKU" remembered for it is
    /// dropped, so the campaign is visible at once.
    pub(crate) fn mark_live(&self, sku: u64) {
        event("live");
        self.live.add(sku);
        if let Some(state) = self.peek(sku) {
            state.replay.drop_users();
        }
        if self
            .entries
            .get(&sku)
            .is_some_and(|s| matches!(s.state.get(), Some(None)))
        {
            self.entries.invalidate(&sku);
        }
    }

    /// Re-reads the live SKU set (after each resubscribe, and every `--cache-ttl-ms`, so a
    /// missed `live` event hides a SKU for that long at most).
    pub(crate) async fn reload_live(&self, client: &StockClient) {
        match client.skus().await {
            Ok(skus) => self.live.replace(Some(skus.into_iter().collect())),
            Err(e) => {
                // Unknown again: every SKU is looked up in Redis until the next read.
                tracing::warn!(error = %e, "reading the live SKU set failed");
                self.live.replace(None);
            }
        }
    }

    /// Re-reads every loaded SKU's slices and rebuilds its empty set: events may have been
    /// missed while the subscriber was away. Shards that do not answer keep what was known.
    pub(crate) async fn resync(&self, client: &StockClient) {
        self.reload_live(client).await;
        let loaded: Vec<(u64, Arc<SkuState>)> = self
            .entries
            .iter()
            .filter_map(|(sku, slot)| Some((*sku, slot.state.get()?.clone()?)))
            .collect();
        for (_, state) in loaded {
            let slices = client
                .slices_answered(state.meta.sku, state.meta.width)
                .await;
            event(if slices.len() == state.shards.len() {
                "resync"
            } else {
                "resync_error"
            });
            state.rebuild(&slices);
        }
    }
}

fn new_slot() -> Arc<Slot> {
    Arc::new(Slot {
        state: OnceCell::new(),
        created: Instant::now(),
    })
}

async fn load(client: &StockClient, sku: u64) -> Result<Option<Arc<SkuState>>, StockError> {
    let Some(meta) = client.sku_meta(sku).await? else {
        return Ok(None);
    };
    let shards = client.placement().shards_of(sku, meta.width);
    // A shard whose master is down is simply not marked empty: its claims find out.
    let slices = client.slices_answered(sku, meta.width).await;
    let state = SkuState::new(meta, shards);
    state.rebuild(&slices);
    Ok(Some(Arc::new(state)))
}

fn event(kind: &'static str) {
    metrics::counter!(CACHE_EVENTS, "event" => kind).increment(1);
}

#[cfg(test)]
mod tests;
