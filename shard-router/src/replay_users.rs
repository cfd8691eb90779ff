//! Who may have a stored answer on a sold-out SKU: the users of the SKU's `useq` hashes,
//! read so a gateway can answer every other user's request id 410 from memory
//! (`gateway/src/replay_filter.rs`, docs/DESIGN.md "Replay after sell-out").
//!
//! Why `useq` and no set of its own (no write added to the claim path): every script that
//! stores an answer under `{T}:req:<sku>:<len>:<user>:<rid>` on the user's home shard has
//! that user in the same shard's `{T}:useq:<sku>` first, in the same atomic step or an
//! earlier one:
//! - `claim.lua` bumps `useq` before it stores a success or the `P` of a hold;
//! - `settle.lua` stores an answer only over a standing hold (placed by `claim.lua`, so
//!   after its bump; a rebuild keeps holds and raises `useq` for them), and `final` only
//!   over an answer already there;
//! - `rebuild.lua` raises `useq` for every user the ledger holds a claim of (released ones
//!   included), a superset of the answers `store_answers` restores; those are written while
//!   the shard is fenced (slice missing), so no read below accepts the shard in between;
//! - `rebuild_late.lua` raises `useq` in the step that stores the late claim's answer, and
//!   publishes `replay <sku>` so gateways drop what they read before.
//!
//! Nothing removes a `useq` field while a campaign lives, so the hash only grows and an
//! `HSCAN` returns every field present from its start to its end. Close-out deletes it, but
//! only after its fence removed the shard meta, and deletes the slice last, one key at a
//! time (`client/retire.rs`): a shard is read as sold out only with its meta (`limit`)
//! present, so a close-out stopped between `useq` and the slice is never read as "nobody
//! won here" while the stored answers it keeps are still there.

use futures::future::try_join_all;

use crate::client::StockClient;
use crate::error::StockError;
use crate::keys::ShardKeys;
use crate::placement::ShardId;

/// What [`StockClient::replay_users`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayUsers {
    /// Every user of the SKU that may have a stored answer, as of the last read of each
    /// shard, when every slice was present and at most 0 then; `marks` are those reads, for
    /// [`StockClient::replay_users_unchanged`].
    Users {
        users: std::collections::HashSet<String>,
        marks: ReplayMarks,
    },
    /// More than the cap: not read.
    TooMany(u64),
    /// A slice was missing or above 0, or a shard changed (a new user, a rebuild) while it
    /// was read: nothing to rely on now. `scanned`: the users the read scanned before it
    /// found out (0 when the marks alone showed it), what another read may cost again.
    Moving { scanned: u64 },
}

/// Per shard: slice, number of users, (limit, rebuild generation) from the shard meta.
type Mark = (Option<i64>, u64, (Option<String>, Option<String>));

/// What a read of [`ReplayUsers::Users`] saw of each shard (in the SKU's shard order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayMarks(Vec<Mark>);

impl StockClient {
    /// The users that may have a stored answer on `sku` (width `width`), read from every
    /// shard's `useq`, or why not. `cap` bounds how many are read at all.
    ///
    /// Each shard is marked (slice, `HLEN`, meta `limit` and `gen`) before its scan and again
    /// after all scans. A field added during a scan changes the count (the hash only grows),
    /// and a rebuild in between changes `gen`: both answer [`ReplayUsers::Moving`], as does a
    /// shard without its meta (close-out's fence, then its key removal, `useq` before the
    /// slice: the hash may be gone while the slice still reads 0). So the set
    /// is exact as of the second marks, all taken with every slice at most 0; from then on
    /// a new success needs units back on a slice, which publishes `restock` (or `empty`
    /// from a rebuild, `replay` from a late claim), and the gateway drops the set on it.
    pub async fn replay_users(
        &self,
        sku: u64,
        width: u16,
        cap: u64,
    ) -> Result<ReplayUsers, StockError> {
        let shards = self.placement().shards_of(sku, width);
        // Every shard at once, phase by phase: each phase is one round trip, not one per
        // shard. In a rush each round trip waits behind the whole run queue, and a read
        // made of 3 x width of them outlasted the rush (docs/BENCHMARKS.md "Where the
        // rush time goes").
        let before = self.replay_marks(&shards, sku).await?;
        if !before.iter().all(sold_out) {
            return Ok(ReplayUsers::Moving { scanned: 0 });
        }
        let total: u64 = before.iter().map(|m| m.1).sum();
        if total > cap {
            return Ok(ReplayUsers::TooMany(total));
        }
        let pages = try_join_all(shards.iter().map(|&s| self.scan_users(s, sku))).await?;
        let mut users = std::collections::HashSet::with_capacity(total as usize);
        users.extend(pages.into_iter().flatten());
        let marks = ReplayMarks(before);
        if !self.replay_users_unchanged(sku, width, &marks).await? {
            return Ok(ReplayUsers::Moving { scanned: total });
        }
        Ok(ReplayUsers::Users { users, marks })
    }

    /// Whether the users read with `marks` are still every user that may have a stored
    /// answer: every slice present and at most 0 now, every meta there, and no shard's
    /// count or generation changed (no field was added, the hash only grows). Units that
    /// came back and went again in between (a release and a claim of a user already there)
    /// leave the set exact; a new user's success adds a field. One pipeline per shard, so a
    /// gateway can check a set it keeps without waiting for an event that may never come.
    pub async fn replay_users_unchanged(
        &self,
        sku: u64,
        width: u16,
        marks: &ReplayMarks,
    ) -> Result<bool, StockError> {
        let shards = self.placement().shards_of(sku, width);
        if shards.len() != marks.0.len() {
            return Ok(false);
        }
        let now = self.replay_marks(&shards, sku).await?;
        Ok(now
            .iter()
            .zip(&marks.0)
            .all(|(now, was)| sold_out(now) && now.1 == was.1 && now.2 == was.2))
    }

    /// Every shard's mark, the shards asked at once (in `shards`' order).
    async fn replay_marks(&self, shards: &[ShardId], sku: u64) -> Result<Vec<Mark>, StockError> {
        try_join_all(shards.iter().map(|&s| self.replay_mark(s, sku))).await
    }

    async fn replay_mark(&self, shard: ShardId, sku: u64) -> Result<Mark, StockError> {
        let k = ShardKeys::new(self.placement(), shard, sku);
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(k.stock())
            .cmd("HLEN")
            .arg(k.user_seq())
            .cmd("HMGET")
            .arg(k.meta())
            .arg("limit")
            .arg("gen");
        let mut conn = self.conn();
        self.bounded("replay users", pipe.query_async(&mut conn))
            .await
    }

    /// The users of one shard's `useq` (a user appears once per shard, but a page may
    /// repeat one: HSCAN's guarantee is "at least once").
    async fn scan_users(&self, shard: ShardId, sku: u64) -> Result<Vec<String>, StockError> {
        let key = ShardKeys::new(self.placement(), shard, sku).user_seq();
        let mut into = Vec::new();
        let mut cursor = 0u64;
        loop {
            let mut cmd = redis::cmd("HSCAN");
            cmd.arg(&key).arg(cursor).arg("COUNT").arg(1000);
            let mut conn = self.conn();
            let (next, page): (u64, Vec<String>) = self
                .bounded("replay users", cmd.query_async(&mut conn))
                .await?;
            // Fields and values alternate; only the fields (users) are kept.
            into.extend(page.into_iter().step_by(2));
            if next == 0 {
                return Ok(into);
            }
            cursor = next;
        }
    }
}

/// Live (its meta there: not fenced by close-out) and no unit left on the slice.
fn sold_out(mark: &Mark) -> bool {
    matches!(mark.0, Some(v) if v <= 0) && mark.2 .0.is_some()
}
