//! The accounting of a reconciliation, as a pure function of the two ledger reads and the
//! shard snapshots (the argument that it is exact is in `mod.rs`).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::snapshot::{claim_entry, ShardSnap};
use ledger::books::{After, Before, Row};

/// One shard's terms of invariant `books-close` (docs/DESIGN.md), as of its snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShardFigures {
    pub shard: u16,
    /// Units released to this shard: its share of the stock plus waves it got.
    pub expected: i64,
    pub slice: i64,
    pub in_flight: i64,
    pub active_ledger: i64,
    /// Units sold beyond the slice (an oversell already recorded): sold, so counted in
    /// `in_flight`/`active_ledger`, yet never released to the shard; the shard's next
    /// releases and waves pay it before the slice grows.
    pub debt: i64,
    /// Units of late claims committed in the ledger but not applied on this shard at the
    /// snapshot: still in `slice`, which their apply (`lua/rebuild_late.lua`) takes them
    /// out of (or puts onto the debt); counted in `active_ledger` already.
    pub late_pending: i64,
    /// `slice − late_pending + in_flight + active_ledger − debt − expected`: > 0 Redis holds
    /// more than the ledger allows (oversell risk), < 0 units are missing (sold without a
    /// ledger row, or lost).
    pub drift: i64,
    /// The shard's fix epoch at the snapshot (for the excess removal's compare-and-set).
    #[serde(skip)]
    pub epoch: i64,
}

/// The accounting over every shard whose slice exists.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Accounting {
    pub shards: Vec<ShardFigures>,
    pub missing_slices: Vec<u16>,
    pub details: Vec<String>,
}

/// The even split of `units` over `width` shards (as preheat splits the stock); a wave
/// placed at `start_unit` adds `split(start + units) − split(start)`, so shares stay even.
pub fn split(units: i64, width: u16) -> Vec<i64> {
    let w = i64::from(width.max(1));
    (0..w)
        .map(|i| units / w + i64::from(i < units % w))
        .collect()
}

/// At most this many ids are named in one detail line.
const NAMED: usize = 5;

fn named(ids: &[String]) -> String {
    let mut v: Vec<&str> = ids.iter().take(NAMED).map(String::as_str).collect();
    if ids.len() > NAMED {
        v.push("…");
    }
    v.join(", ")
}

/// `shards` is the SKU's placement in order; `snaps` the snapshot of each (same order).
pub fn account(before: &Before, snaps: &[ShardSnap], after: &After) -> Accounting {
    let shares = split(before.stock, before.width);
    let mut rows_by_shard: HashMap<u16, Vec<&Row>> = HashMap::new();
    let mut row_of: HashMap<&str, &Row> = HashMap::new();
    for r in &after.rows {
        rows_by_shard.entry(r.shard).or_default().push(r);
        row_of.insert(r.claim_id.as_str(), r);
    }
    let mut out = Accounting::default();
    for (i, snap) in snaps.iter().enumerate() {
        let Some(slice) = snap.slice else {
            out.missing_slices.push(snap.shard);
            out.details.push(format!(
                "shard {}: slice missing (not preheated, or Redis lost it); left out of the drift",
                snap.shard
            ));
            continue;
        };
        let mut f = ShardFigures {
            shard: snap.shard,
            slice,
            debt: snap.debt,
            epoch: snap.epoch,
            expected: shares.get(i).copied().unwrap_or(0),
            ..Default::default()
        };
        let unknown_waves = expected_waves(&mut f, snap, before, after);
        // Entries in the streams at the snapshot: taken, units out of the slice unless a
        // duplicate's units already went back (then the claim id is in the release set).
        let mut seen: HashSet<&str> = HashSet::new();
        for (id, qty) in &snap.entries {
            seen.insert(id.as_str());
            if snap.released.contains(id) {
                continue;
            }
            if row_of.contains_key(id.as_str()) {
                f.active_ledger += qty;
            } else {
                f.in_flight += qty;
            }
        }
        let (not_returned, returned_active, unreadable) =
            ledger_rows(&mut f, snap, before, &rows_by_shard, &seen);
        // Late claims whose apply is still to come on this shard: unapplied at the anchor,
        // or committed after the snapshot's ledger reads (so after `T_s`). Whatever their
        // status (a released one's units went to the slice too), the apply takes them.
        for (id, gen) in &after.late {
            let Some(r) = row_of.get(id.as_str()) else {
                continue;
            };
            if r.shard == snap.shard
                && (snap.late_unapplied.contains(id)
                    || (!snap.late_known.contains(id) && *gen == snap.gen))
            {
                f.late_pending += r.qty;
            }
        }
        f.drift = f.slice - f.late_pending + f.in_flight + f.active_ledger - f.debt - f.expected;
        let s = snap.shard;
        describe(
            &mut out,
            &f,
            s,
            &unknown_waves,
            &returned_active,
            &not_returned,
            &unreadable,
        );
        out.shards.push(f);
    }
    let gap = (before.stock - before.available) - before.held_rows;
    if gap != 0 {
        out.details.push(format!(
            "ledger: sku_stock counts {} unit(s) as held, claim rows hold {}: {gap:+} unit(s) without a row",
            before.stock - before.available,
            before.held_rows
        ));
    }
    out
}

/// Adds to `f.expected` the waves of `snap` the ledger scheduled after the stock read
/// before; returns those it never scheduled.
fn expected_waves(
    f: &mut ShardFigures,
    snap: &ShardSnap,
    before: &Before,
    after: &After,
) -> Vec<String> {
    let mut unknown_waves = Vec::new();
    for (wave, units) in &snap.waves {
        if before.applied_waves.contains(wave) {
            // Already in the stock read before.
        } else if after.waves.contains(wave) {
            f.expected += units;
        } else {
            unknown_waves.push(format!("{wave} ({units})"));
        }
    }
    unknown_waves
}

/// Adds to `f.active_ledger` the ledger rows of `snap`'s shard up to its cutoff that are not
/// among the stream entries `seen`; returns the claims released in the ledger whose units
/// Redis never got back, those back in the slice yet still sold, and unreadable claim ids.
fn ledger_rows(
    f: &mut ShardFigures,
    snap: &ShardSnap,
    before: &Before,
    rows_by_shard: &HashMap<u16, Vec<&Row>>,
    seen: &HashSet<&str>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut not_returned, mut returned_active, mut unreadable) = (vec![], vec![], vec![]);
    for r in rows_by_shard.get(&snap.shard).into_iter().flatten() {
        if seen.contains(r.claim_id.as_str()) {
            continue;
        }
        let Some((_, entry)) = claim_entry(&r.claim_id) else {
            unreadable.push(r.claim_id.clone());
            continue;
        };
        if entry > snap.cutoff {
            continue; // taken after the snapshot: its units are still in `slice`
        }
        if snap.released.contains(&r.claim_id) {
            if r.active() {
                // Redis gave the units back, yet the ledger still sells them.
                f.active_ledger += r.qty;
                returned_active.push(r.claim_id.clone());
            }
        } else if before.released.contains(&r.claim_id) {
            // Released in the ledger before the snapshot, but not back in the slice.
            not_returned.push(r.claim_id.clone());
        } else {
            f.active_ledger += r.qty;
        }
    }
    (not_returned, returned_active, unreadable)
}

/// The lines of `out.details` that explain shard `s`'s figures `f`.
fn describe(
    out: &mut Accounting,
    f: &ShardFigures,
    s: u16,
    unknown_waves: &[String],
    returned_active: &[String],
    not_returned: &[String],
    unreadable: &[String],
) {
    if f.debt != 0 {
        out.details.push(format!(
            "shard {s}: debt {}: unit(s) sold beyond the slice (a late claim or a rebuild \
             found them sold again); the shard's next releases and waves pay it first{}",
            f.debt,
            if f.slice > 0 {
                " (yet the slice is above 0: it should have been paid)"
            } else {
                ""
            }
        ));
    }
    if !unknown_waves.is_empty() {
        out.details.push(format!(
            "shard {s}: waves in Redis the ledger never scheduled: {}",
            named(unknown_waves)
        ));
    }
    if !returned_active.is_empty() {
        out.details.push(format!(
            "shard {s}: units back in the slice for {} claim(s) the ledger still counts as sold: {}",
            returned_active.len(),
            named(returned_active)
        ));
    }
    if !not_returned.is_empty() {
        out.details.push(format!(
            "shard {s}: {} claim(s) released in the ledger whose units Redis never got back: {}",
            not_returned.len(),
            named(not_returned)
        ));
    }
    if !unreadable.is_empty() {
        out.details.push(format!(
            "shard {s}: claim ids that are not <shard>-<entry id>: {}",
            named(unreadable)
        ));
    }
    if f.late_pending != 0 {
        out.details.push(format!(
            "shard {s}: {} unit(s) of late claims committed but not applied yet: still in the slice",
            f.late_pending
        ));
    }
    if f.drift != 0 {
        out.details.push(format!(
            "shard {s}: slice {}{} + in flight {} + ledger {} − debt {} = {} against {} released: {} {} unit(s)",
            f.slice,
            if f.late_pending != 0 {
                format!(" − late {}", f.late_pending)
            } else {
                String::new()
            },
            f.in_flight,
            f.active_ledger,
            f.debt,
            f.drift + f.expected,
            f.expected,
            if f.drift > 0 { "Redis holds" } else { "missing" },
            f.drift.abs()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, shard: u16, status: &str) -> Row {
        Row {
            claim_id: id.into(),
            qty: 1,
            shard,
            status: status.into(),
        }
    }

    fn snap(slice: i64) -> ShardSnap {
        ShardSnap {
            shard: 0,
            slice: Some(slice),
            cutoff: (100, u64::MAX),
            ..Default::default()
        }
    }

    fn before(stock: i64) -> Before {
        Before {
            stock,
            width: 1,
            ..Default::default()
        }
    }

    #[test]
    fn split_keeps_waves_even() {
        assert_eq!(split(5, 2), vec![3, 2]);
        let (a, b) = (split(5, 2), split(6, 2));
        assert_eq!(vec![b[0] - a[0], b[1] - a[1]], vec![0, 1]);
    }

    /// Each way a claim can sit at the snapshot is counted once.
    #[test]
    fn every_place_of_a_claim_is_counted_once() {
        let mut s = snap(4);
        // In the stream, not in the ledger yet; in the stream and committed since; a
        // returned duplicate still in the stream.
        s.entries.insert("0-10-0".into(), 1);
        s.entries.insert("0-11-0".into(), 1);
        s.entries.insert("0-12-0".into(), 1);
        s.released.insert("0-12-0".into());
        // Released before the snapshot (its unit is in the slice).
        s.released.insert("0-5-0".into());
        let after = After {
            rows: vec![
                row("0-11-0", 0, "pending"),
                row("0-5-0", 0, "released"),
                row("0-6-0", 0, "confirmed"),
                // Released after the snapshot: its unit was still out.
                row("0-7-0", 0, "released"),
                // Taken after the snapshot.
                row("0-200-0", 0, "pending"),
            ],
            ..Default::default()
        };
        let a = account(&before(8), &[s], &after);
        let f = &a.shards[0];
        assert_eq!((f.in_flight, f.active_ledger, f.drift), (1, 3, 0), "{a:?}");
    }

    #[test]
    fn released_in_the_ledger_but_not_in_redis_is_missing_stock() {
        let mut b = before(2);
        b.released.insert("0-5-0".into());
        let after = After {
            rows: vec![row("0-5-0", 0, "released")],
            ..Default::default()
        };
        let a = account(&b, &[snap(1)], &after);
        assert_eq!(a.shards[0].drift, -1);
        assert!(
            a.details.iter().any(|d| d.contains("never got back")),
            "{a:?}"
        );
    }

    /// A late claim found its unit sold again: 3 sold on a stock of 2, slice 0, debt 1.
    #[test]
    fn units_sold_beyond_the_slice_are_counted_through_the_debt() {
        let mut s = snap(0);
        s.debt = 1;
        let after = After {
            rows: ["0-1-0", "0-2-0", "0-3-0"]
                .into_iter()
                .map(|id| row(id, 0, "confirmed"))
                .collect(),
            ..Default::default()
        };
        let a = account(&before(2), &[s], &after);
        let f = &a.shards[0];
        assert_eq!((f.active_ledger, f.debt, f.drift), (3, 1, 0), "{a:?}");
        assert!(a.details.iter().any(|d| d.contains("debt 1")), "{a:?}");
    }

    /// Late claims on a stock of 3 (Redis rebuilt at generation 2 offering all 3): `a`
    /// applied (its unit out of the slice), `b` unapplied at the anchor, `c` committed
    /// after the snapshot's ledger reads, `d` of an older generation (counted by the
    /// rebuild). Only `b` and `c` are still to come out of the slice: drift 0.
    #[test]
    fn late_claims_not_applied_yet_are_still_in_the_slice() {
        let mut s = snap(1);
        s.gen = 2;
        s.late_known = ["0-1-0", "0-2-0", "0-4-0"].map(String::from).into();
        s.late_unapplied = ["0-2-0".to_owned()].into();
        let after = After {
            rows: ["0-1-0", "0-2-0", "0-3-0", "0-4-0"]
                .into_iter()
                .map(|id| row(id, 0, "confirmed"))
                .collect(),
            late: [("0-1-0", 2), ("0-2-0", 2), ("0-3-0", 2), ("0-4-0", 1)]
                .map(|(id, g)| (id.to_owned(), g))
                .into(),
            ..Default::default()
        };
        // Rebuild 2 counted d (slice 2), a's apply took one: 1 left.
        let a = account(&before(3), &[s], &after);
        let f = &a.shards[0];
        assert_eq!(
            (f.late_pending, f.active_ledger, f.drift),
            (2, 4, 0),
            "{a:?}"
        );
    }

    #[test]
    fn a_missing_slice_is_its_own_figure() {
        let mut s = snap(0);
        s.slice = None;
        let a = account(&before(2), &[s], &After::default());
        assert_eq!(a.missing_slices, vec![0]);
        assert!(a.shards.is_empty());
    }

    #[test]
    fn waves_count_once_ledger_known_and_applied_or_not() {
        // Stock 5 is 3 at the start plus w1; the slice has all four waves' units.
        let mut s = snap(9);
        s.waves.insert("w1".into(), 2); // applied in the ledger: inside stock already
        s.waves.insert("w2".into(), 3); // applying: only Redis has it so far
        s.waves.insert("w3".into(), 1); // unknown to the ledger
        let mut b = before(5);
        b.applied_waves.insert("w1".into());
        let after = After {
            waves: ["w1", "w2"].map(String::from).into_iter().collect(),
            ..Default::default()
        };
        let a = account(&b, &[s], &after);
        assert_eq!(a.shards[0].expected, 8);
        assert_eq!(a.shards[0].drift, 1);
        assert!(a.details.iter().any(|d| d.contains("never scheduled")));
    }
}
