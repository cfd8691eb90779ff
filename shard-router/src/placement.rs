//! Pure placement math: which shards hold a SKU, which shard is a user's home, where a
//! second chance goes, and which hash tag each shard uses. No I/O, so table tests can pin
//! every answer: a change that moves users between shards fails `placement/tests.rs`.

use twox_hash::XxHash64;

/// Redis Cluster has this many hash slots.
pub const CLUSTER_SLOTS: u16 = 16384;
/// Shard count when a deployment does not choose one.
pub const DEFAULT_SHARDS: u16 = 16;
/// Upper bound on S: each shard needs its own slot window of at least 16 slots so the
/// tag search below stays short.
pub const MAX_SHARDS: u16 = 1024;

// Seeds are part of the on-disk contract: changing one moves every SKU or user.
const SEED_SKU: u64 = 0x666c_6173_6867_0001;
const SEED_USER: u64 = 0x666c_6173_6867_0002;
const SEED_SECOND: u64 = 0x666c_6173_6867_0003;

/// A stock shard index, `0..S`.
pub type ShardId = u16;

/// Placement of SKUs and users over the `S` stock shards of one deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Hash tag (without braces) per shard; index = shard id.
    tags: Vec<String>,
}

/// The shard count is outside `1..=MAX_SHARDS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shard count {0} is outside 1..={MAX_SHARDS}")]
pub struct BadShardCount(pub u16);

/// The width is outside `1..=S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("width {width} is outside 1..={shards}")]
pub struct BadWidth {
    pub width: u16,
    pub shards: u16,
}

impl Placement {
    /// Builds the placement for `shards` stock shards.
    ///
    /// Tag choice: shard `s` owns the slot window `[s*16384/S, (s+1)*16384/S)`, and its tag is
    /// `fg:<s>:<n>` for the smallest `n >= 0` whose CRC16 slot falls in the middle
    /// sixteenth of that window (at least ±8 slots around its centre). `redis-cli --cluster
    /// create` gives each of M masters one contiguous, equal run of slots, so S evenly
    /// spaced slots land on the masters as evenly as S and M allow (16 shards on 3
    /// masters: 6/5/5). The search is deterministic, so every process derives the same tags.
    pub fn new(shards: u16) -> Result<Self, BadShardCount> {
        if shards == 0 || shards > MAX_SHARDS {
            return Err(BadShardCount(shards));
        }
        let tags = (0..shards).map(|s| find_tag(s, shards)).collect();
        Ok(Self { tags })
    }

    /// Number of stock shards `S`.
    pub fn shard_count(&self) -> u16 {
        self.tags.len() as u16
    }

    /// The hash tag of `shard`, without braces (`fg:3:17`).
    pub fn tag(&self, shard: ShardId) -> &str {
        &self.tags[usize::from(shard)]
    }

    /// Checks that `width` fits this deployment.
    pub fn check_width(&self, width: u16) -> Result<(), BadWidth> {
        if width == 0 || width > self.shard_count() {
            return Err(BadWidth {
                width,
                shards: self.shard_count(),
            });
        }
        Ok(())
    }

    /// `shards(sku) = [(h(sku) + i) mod S for i in 0..w]`.
    pub fn shards_of(&self, sku: u64, width: u16) -> Vec<ShardId> {
        let shards = self.shards_fn(sku);
        (0..usize::from(width)).map(shards).collect()
    }

    /// `i ↦ shards(sku)[i]`, without building the list: every claim asks for its home and
    /// its second chances, and the two lists were two allocations per claim.
    fn shards_fn(&self, sku: u64) -> impl Fn(usize) -> ShardId {
        let s = u64::from(self.shard_count());
        let base = XxHash64::oneshot(SEED_SKU, &sku.to_le_bytes()) % s;
        move |i| ((base + i as u64) % s) as ShardId
    }

    /// The user's home shard for a SKU: `shards(sku)[h(user) mod w]`.
    pub fn home_shard(&self, sku: u64, width: u16, user: &str) -> ShardId {
        self.shards_fn(sku)(home_index(user, width))
    }

    /// The order in which a user's second chance visits the SKU's other shards: starts at
    /// a second hash of the user (so rerouted users spread out instead of piling onto one
    /// neighbour), skips the home shard and every shard `is_empty` reports.
    pub fn second_chances(
        &self,
        sku: u64,
        width: u16,
        user: &str,
        is_empty: impl Fn(ShardId) -> bool,
    ) -> Vec<ShardId> {
        let (w, shards) = (usize::from(width), self.shards_fn(sku));
        let home = shards(home_index(user, width));
        let start = (XxHash64::oneshot(SEED_SECOND, user.as_bytes()) % u64::from(width)) as usize;
        let mut order = Vec::with_capacity(w.saturating_sub(1));
        order.extend(
            (0..w)
                .map(|i| shards((start + i) % w))
                .filter(|&s| s != home && !is_empty(s)),
        );
        order
    }

    /// Which of the SKU's shards but `home` `is_empty` does not report, each asked once:
    /// what a claim knows of its walk when it begins, and all it needs before its home
    /// shard answers (whether it may hold). [`Self::second_chances`] over it gives the
    /// walk's order, which only a claim that holds needs.
    pub fn walkable(
        &self,
        sku: u64,
        width: u16,
        home: ShardId,
        is_empty: impl Fn(ShardId) -> bool,
    ) -> Walkable {
        let shards = self.shards_fn(sku);
        let mut open = Walkable::default();
        for s in (0..usize::from(width)).map(shards) {
            if s != home && !is_empty(s) {
                open.bits[usize::from(s) / 64] |= 1 << (s % 64);
                open.any = true;
            }
        }
        open
    }
}

/// A set of shards a walk may visit ([`Placement::walkable`]): a bit per shard, on the stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walkable {
    bits: [u64; MAX_SHARDS as usize / 64],
    any: bool,
}

impl Walkable {
    /// Whether no shard is in the set.
    pub fn is_empty(&self) -> bool {
        !self.any
    }

    /// Whether `shard` is in the set.
    pub fn contains(&self, shard: ShardId) -> bool {
        self.bits
            .get(usize::from(shard) / 64)
            .is_some_and(|w| w & (1 << (shard % 64)) != 0)
    }
}

fn home_index(user: &str, width: u16) -> usize {
    (XxHash64::oneshot(SEED_USER, user.as_bytes()) % u64::from(width)) as usize
}

/// Redis Cluster key slot of a hash tag's content (CRC16/XMODEM mod 16384).
pub fn slot_of_tag(tag: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % CLUSTER_SLOTS
}

fn find_tag(shard: u16, shards: u16) -> String {
    let lo = u32::from(shard) * u32::from(CLUSTER_SLOTS) / u32::from(shards);
    let hi = (u32::from(shard) + 1) * u32::from(CLUSTER_SLOTS) / u32::from(shards);
    // Aim at the middle of the window: evenly spaced points split over M equal runs of
    // slots differ by at most one per run, for any M, which a point anywhere in the
    // window does not guarantee.
    let mid = (lo + hi) / 2;
    let half = ((hi - lo) / 16).max(8);
    let (lo, hi) = (lo.max(mid - half), hi.min(mid + half));
    (0u32..)
        .map(|n| format!("fg:{shard}:{n}"))
        .find(|tag| (lo..hi).contains(&u32::from(slot_of_tag(tag))))
        .expect("every slot window of >= 16 slots is hit by some counter")
}

#[cfg(test)]
mod tests;
