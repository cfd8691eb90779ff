//! The pure half of a rebuild: from the claims the ledger holds (the rebuild inserts the
//! ones it found in flight first, see `rebuild.rs`), what each shard of a SKU must hold. No I/O, so every rule below has a table test.

use std::collections::{BTreeMap, HashMap, HashSet};

use shard_router::rebuild::{ReplayAnswer, ShardImage};
use shard_router::{ClaimRecord, ShardId};

/// Where a claim was found and what the ledger says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// `pending` or `confirmed` in the ledger: its units are out.
    Active,
    /// `releasing` or `released`: its units are back (or go back once, through the
    /// release sets the rebuild restores).
    Released,
}

/// One claim with its standing.
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub record: ClaimRecord,
    pub seen: Seen,
}

/// The images of every shard of a SKU, and what did not fit.
#[derive(Debug, Clone, Default)]
pub(super) struct Images {
    pub shards: Vec<ShardImage>,
    pub answers: Vec<ReplayAnswer>,
    /// Units taken beyond a shard's share (an oversell that already happened): the slice
    /// is written as 0, never negative, the excess is the shard's debt, and it is reported.
    pub oversold: u64,
    pub active_units: u64,
}

/// Computes the images. `shares` are the shards of the SKU with their share of the stock
/// (`SkuMeta::slices`). `holds` are the holds standing per home shard: their `user|seq`
/// field and the generation they were placed under (their name). A hold is its claim's (already counted with it) only at the claim
/// record's generation: after a loss handed a sequence out again, the hold of that
/// `user|seq` is another request's.
/// Replay answers are kept for claims younger than `request_ttl_ms` at `now_ms`.
pub(super) fn compute(
    shares: &[(ShardId, u64)],
    claims: &[Known],
    holds: &HashMap<ShardId, Vec<(String, u64)>>,
    now_ms: i64,
    request_ttl_ms: i64,
) -> Images {
    let mut out = Images::default();
    let mut taken: HashMap<ShardId, u64> = HashMap::new();
    let mut users: HashMap<ShardId, BTreeMap<&str, (u64, u64)>> = HashMap::new();
    let mut rel_stock: HashMap<ShardId, Vec<String>> = HashMap::new();
    let mut rel_user: HashMap<ShardId, Vec<String>> = HashMap::new();
    let mut claimed: HashSet<(ShardId, String, u64)> = HashSet::new();
    for k in claims {
        let r = &k.record;
        let qty = u64::from(r.qty);
        let entry = users
            .entry(r.home)
            .or_default()
            .entry(r.user.as_str())
            .or_default();
        // The sequence never goes below any seq handed out, released claims included.
        entry.1 = entry.1.max(r.user_seq);
        let field = format!("{}|{}", r.user, r.user_seq);
        claimed.insert((r.home, field, r.gen));
        match k.seen {
            Seen::Active => {
                *taken.entry(r.shard).or_default() += qty;
                entry.0 += qty;
                out.active_units += qty;
            }
            Seen::Released => {
                rel_stock
                    .entry(r.shard)
                    .or_default()
                    .push(r.claim_id.clone());
                rel_user.entry(r.home).or_default().push(r.claim_id.clone());
            }
        }
        push_answer(&mut out.answers, r, now_ms, request_ttl_ms);
    }
    for &(shard, share) in shares {
        let t = taken.get(&shard).copied().unwrap_or(0);
        // Sold beyond the share: the shard's debt, so a later release or wave pays it
        // before the slice grows (`lua/release_stock.lua`, `lua/wave.lua`).
        let debt = t.saturating_sub(share);
        out.oversold += debt;
        let matched_holds = matched_holds(holds, &claimed, shard);
        out.shards.push(ShardImage {
            shard,
            slice: share.saturating_sub(t) as i64,
            debt,
            users: users
                .remove(&shard)
                .unwrap_or_default()
                .into_iter()
                .map(|(u, (units, seq))| (u.to_owned(), units, seq))
                .collect(),
            matched_holds,
            released_stock: rel_stock.remove(&shard).unwrap_or_default(),
            released_user: rel_user.remove(&shard).unwrap_or_default(),
            // Read from the ledger over every SKU on the stream (`sources::stream_floors`).
            stream_floor: None,
        });
    }
    out
}

/// The replay answer of `r`'s request, while its request id still lives.
fn push_answer(answers: &mut Vec<ReplayAnswer>, r: &ClaimRecord, now_ms: i64, request_ttl_ms: i64) {
    if let Some(rid) = &r.request_id {
        let age = now_ms.saturating_sub(r.ts_ms).max(0);
        if age < request_ttl_ms {
            answers.push(ReplayAnswer {
                home: r.home,
                user: r.user.clone(),
                request_id: rid.clone(),
                claim_id: r.claim_id.clone(),
                shard: r.shard,
                qty: r.qty,
                ttl: std::time::Duration::from_millis((request_ttl_ms - age) as u64),
            });
        }
    }
}

/// The `user|seq` fields of `shard`'s holds whose claim (of the same generation) is known.
fn matched_holds(
    holds: &HashMap<ShardId, Vec<(String, u64)>>,
    claimed: &HashSet<(ShardId, String, u64)>,
    shard: ShardId,
) -> Vec<String> {
    holds
        .get(&shard)
        .map(|hs| {
            hs.iter()
                .filter(|(field, gen)| claimed.contains(&(shard, field.clone(), *gen)))
                .map(|(field, _)| field.clone())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(id: &str, user: &str, seq: u64, shard: u16, home: u16, seen: Seen) -> Known {
        Known {
            record: ClaimRecord {
                claim_id: id.into(),
                sku: 1,
                user: user.into(),
                qty: 1,
                user_seq: seq,
                shard,
                home,
                request_id: Some(format!("r-{id}")),
                ts_ms: 1_000,
                gen: 0,
            },
            seen,
        }
    }

    #[test]
    fn slices_counts_sequences_and_release_sets() {
        let claims = [
            known("a1", "alice", 1, 0, 0, Seen::Active),
            known("a2", "alice", 2, 1, 0, Seen::Released),
            known("b1", "bob", 1, 1, 1, Seen::Active),
            known("c3", "carol", 3, 0, 1, Seen::Active),
        ];
        let holds = HashMap::from([(
            1,
            vec![
                ("carol|3".to_owned(), 0),
                ("dave|1".to_owned(), 0),
                ("bob|1".to_owned(), 1),
            ],
        )]);
        let img = compute(&[(0, 5), (1, 5)], &claims, &holds, 2_000, 10_000);
        let s0 = &img.shards[0];
        assert_eq!(s0.slice, 3, "a1 and c3 came from shard 0");
        assert_eq!(
            s0.users,
            vec![("alice".to_owned(), 1, 2)],
            "a2 released, seq kept"
        );
        assert_eq!(s0.released_user, vec!["a2".to_owned()]);
        assert!(s0.released_stock.is_empty());
        let s1 = &img.shards[1];
        assert_eq!(s1.slice, 4, "b1 came from shard 1");
        assert_eq!(s1.released_stock, vec!["a2".to_owned()]);
        assert_eq!(
            s1.users,
            vec![("bob".to_owned(), 1, 1), ("carol".to_owned(), 1, 3)]
        );
        assert_eq!(
            s1.matched_holds,
            vec!["carol|3".to_owned()],
            "dave's hold is open; bob's is of another generation than his claim's"
        );
        assert_eq!((img.active_units, img.oversold), (3, 0));
        assert_eq!(img.answers.len(), 4);
    }

    #[test]
    fn an_oversell_is_reported_and_the_slice_stays_at_zero() {
        let claims = [
            known("a", "a", 1, 0, 0, Seen::Active),
            known("b", "b", 1, 0, 0, Seen::Active),
            known("c", "c", 1, 0, 0, Seen::Active),
        ];
        let img = compute(&[(0, 2), (1, 2)], &claims, &HashMap::new(), 0, 1);
        assert_eq!((img.shards[0].slice, img.shards[0].debt), (0, 1));
        assert_eq!(
            (img.shards[1].slice, img.shards[1].debt),
            (2, 0),
            "a debt stays on its shard"
        );
        assert_eq!(img.oversold, 1);
    }

    #[test]
    fn old_answers_are_not_restored() {
        let claims = [known("a", "a", 1, 0, 0, Seen::Active)];
        let img = compute(&[(0, 2)], &claims, &HashMap::new(), 100_000, 10_000);
        assert!(img.answers.is_empty());
    }
}
