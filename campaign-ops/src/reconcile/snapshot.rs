//! One shard's part of a reconciliation, read in steps whose cost is bounded by a page, so
//! no Redis call grows with the stream or the release set (why it is still exact: `mod.rs`):
//! 1. the release set, scanned in pages (SSCAN);
//! 2. the ledger's started releases of the shard, their membership checked in pages;
//! 3. the anchor, `lua/reconcile.lua`, one atomic step at instant `T_s`: slice, debt,
//!    cutoff, fix epoch, waves, holds, the set's size and the membership of at most a page of the
//!    releases still unseen, the meta's generation and which late claims the ledger listed
//!    unapplied (read with step 2) carry their mark; when the size says a member is still
//!    unknown, 1–3 again, and when the ledger lists a late claim it did not before, 2–3;
//! 4. the claims stream up to the cutoff, in XRANGE pages.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use shard_router::audit::Anchor;
use shard_router::codec::{ClaimId, EntryId};
use shard_router::{ShardId, StockClient};
use sqlx::MySqlPool;

use crate::OpsError;

/// Entries (or set members, or ids) one Redis call reads unless configured.
pub const DEFAULT_PAGE: usize = 1000;
/// Anchors tried before a snapshot gives up: one more is needed only when a release lands
/// between the ledger read of step 2 and the anchor, or a late claim commits around the
/// anchor (millisecond windows).
const ANCHOR_ATTEMPTS: usize = 10;

/// The shard and entry id of a claim id (`None` for a malformed one).
pub fn claim_entry(claim_id: &str) -> Option<(ShardId, EntryId)> {
    ClaimId::parse(claim_id).map(|c| (c.shard(), c.entry()))
}

/// What one shard held at the instant `T_s` of its snapshot's anchor.
#[derive(Debug, Clone, Default)]
pub struct ShardSnap {
    pub shard: ShardId,
    /// `None`: the slice is missing (never preheated, or Redis lost it).
    pub slice: Option<i64>,
    /// Every claim taken on this shard before the snapshot has an entry id `<=` this, every
    /// later one a greater id: the larger of the stream's last generated id and "just
    /// before Redis's clock" (the clock keeps later ids above it even if the stream was
    /// rolled back to an older last id).
    pub cutoff: EntryId,
    pub epoch: i64,
    /// claim id → units of this SKU's entries taken up to the cutoff, read from the claims
    /// stream after `T_s` (`mod.rs` says why that is enough).
    pub entries: HashMap<String, i64>,
    /// Claim ids whose units went back to this slice before `T_s` (exactly the set then).
    pub released: HashSet<String>,
    /// wave id → units this slice got from it.
    pub waves: HashMap<String, i64>,
    /// Units under holds on this (home) shard; informative, holds take no stock.
    pub held: i64,
    /// Units sold beyond the slice (`lua/rebuild_late.lua`, `lua/rebuild.lua`), read with
    /// the slice: what the next releases and waves of the shard pay before it grows.
    pub debt: i64,
    /// The shard meta's rebuild generation at `T_s` (0 when absent).
    pub gen: u64,
    /// Every late claim taking from this shard the ledger listed before the anchor (and
    /// still exactly those after it): one it lists later committed after `T_s`.
    pub late_known: HashSet<String>,
    /// Of those, the ones committed but not applied on this shard at `T_s` (no `late:` mark
    /// while the shard carries their generation): their apply is still to take their units
    /// out of `slice` (`mod.rs`).
    pub late_unapplied: HashSet<String>,
}

/// Takes `shard`'s snapshot for `sku`, no Redis call reading more than `page` items.
pub async fn take(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    shard: ShardId,
    page: usize,
    t: Duration,
) -> Result<ShardSnap, OpsError> {
    let page = page.max(1);
    // Steps 1–3: members seen before the anchor were members at it (the set only grows
    // while the campaign is live); the anchor's size check proves nothing else was.
    let mut released = HashSet::new();
    client
        .scan_released(shard, sku, page, &mut released)
        .await?;
    let a = anchor(pool, client, sku, shard, page, t, &mut released).await?;
    let (a, late_known, late_unapplied) = a.ok_or_else(|| {
        OpsError::Invalid(format!(
            "shard {shard}: the release set or the late claims of sku {sku} kept changing under {ANCHOR_ATTEMPTS} anchors; try again"
        ))
    })?;
    // Step 4: entries taken up to the cutoff, still in the claims stream.
    let entries = client.units_taken(shard, sku, a.cutoff, page).await?;
    Ok(ShardSnap {
        shard,
        slice: a.slice,
        cutoff: a.cutoff,
        epoch: a.epoch,
        entries,
        released,
        waves: a.waves,
        held: a.held,
        debt: a.debt,
        gen: a.gen,
        late_known,
        late_unapplied,
    })
}

/// Steps 2–3, tried up to [`ANCHOR_ATTEMPTS`] times: the anchor with the late claims the
/// ledger listed around it and those of them unapplied at `T_s`, growing `released` with
/// every member seen (`None`: the set or the late claims kept moving).
async fn anchor(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    shard: ShardId,
    page: usize,
    t: Duration,
    released: &mut HashSet<String>,
) -> Result<Option<(Anchor, HashSet<String>, HashSet<String>)>, OpsError> {
    let mut a = None;
    for _ in 0..ANCHOR_ATTEMPTS {
        let late = ledger::books::late_of_shard(pool, sku, shard, t).await?;
        let started = ledger::books::releases(pool, sku, shard, t).await?;
        let unseen: Vec<String> = started
            .iter()
            .filter(|(id, _)| !released.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        client
            .released_now(shard, sku, &unseen, page, released)
            .await?;
        let ask = still_unseen(&started, released, page);
        // Late claims unapplied in the ledger: the anchor tells which ones Redis counted by
        // `T_s` (their mark). One applied since this read is marked; one committed since is
        // not in the list, and the read after the anchor catches it.
        let ask_late: Vec<String> = late
            .iter()
            .filter(|l| !l.applied)
            .map(|l| l.claim_id.clone())
            .collect();
        let got = client.reconcile_anchor(shard, sku, &ask, &ask_late).await?;
        if got.slice.is_none() || got.set_size == released.len() + got.found.len() {
            released.extend(got.found.iter().cloned());
            let known: HashSet<String> = late.iter().map(|l| l.claim_id.clone()).collect();
            // A late claim committed between the read and the anchor may or may not have
            // been applied by `T_s`, and the anchor was not asked: anchor again. One
            // committed after this read committed after `T_s`: unapplied then (`account.rs`).
            let since = ledger::books::late_of_shard(pool, sku, shard, t).await?;
            if got.slice.is_none() || since.iter().all(|l| known.contains(&l.claim_id)) {
                let unapplied = late
                    .iter()
                    .filter(|l| !l.applied && l.gen == got.gen && !got.marked.contains(&l.claim_id))
                    .map(|l| l.claim_id.clone())
                    .collect();
                a = Some((got, known, unapplied));
                break;
            }
            tracing::debug!(
                shard,
                "a late claim committed under the snapshot's anchor; anchoring again"
            );
            continue;
        }
        // A member neither the scan nor the ledger showed (a release that started after
        // the ledger read, or one the ledger does not know): scan again and retry.
        tracing::debug!(
            shard,
            size = got.set_size,
            known = released.len() + got.found.len(),
            "release set moved under the snapshot's anchor; reading it again"
        );
        client.scan_released(shard, sku, page, released).await?;
    }
    Ok(a)
}

/// Of the ledger's `started` releases, at most a page of those not in `released` to ask
/// the anchor about.
fn still_unseen(
    started: &[(String, bool)],
    released: &HashSet<String>,
    page: usize,
) -> Vec<String> {
    // Still unseen: releases not done yet (`releasing` first), or lost by Redis.
    let mut ask: Vec<(&String, bool)> = started
        .iter()
        .filter(|(id, _)| !released.contains(id))
        .map(|(id, releasing)| (id, *releasing))
        .collect();
    ask.sort_by_key(|(_, releasing)| !releasing);
    ask.into_iter()
        .take(page)
        .map(|(id, _)| id.clone())
        .collect()
}
