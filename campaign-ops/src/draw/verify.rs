//! `consumer draw verify <sku>`: recomputes a draw from the ledger and the revealed seed,
//! as anyone holding the published digest, the seed and the entrant list could. Checks:
//! the seed hashes to the digest published at creation; every entry's stored priority is
//! HMAC-SHA1(seed, "<sku>:<user>") (`shard_router::draw::priority`); the ranks are exactly
//! the best `stock + waitlist` entries in draw order; the units went only to ranked users
//! by grant (no claim made any other way), no more of them than there are ranks, and in
//! rank order (the granted users are ranks 1..=n); the entries are as many as the draw
//! recorded it was made from.

use std::collections::HashSet;
use std::time::Duration;

use ledger::draws::{self, Draw, DrawState};
use serde::Serialize;
use shard_router::draw::{draw_order, priority, seed_digest};
use shard_router::GRANT_REQUEST;
use sqlx::MySqlPool;

use crate::OpsError;

/// Entries read per page.
const PAGE: u32 = 5000;

/// What verify found; `verified` is the conjunction of the checks.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub sku: u64,
    pub seed: String,
    pub seed_sha256: String,
    pub digest_matches: bool,
    pub entrants: u64,
    /// The entries read are as many as the draw recorded it was made from.
    pub entrants_match: bool,
    /// Entries whose stored priority is not the HMAC of the revealed seed.
    pub wrong_priorities: u64,
    pub ranks: u64,
    /// The recorded ranks are the recomputed best `stock + waitlist`, in order.
    pub ranks_match: bool,
    /// Users holding a grant (claims under the request id `draw`).
    pub granted: u64,
    /// Grants to users without a rank.
    pub granted_unranked: u64,
    /// The granted users are ranks 1..=n: no rank served before a better one.
    pub grants_in_order: bool,
    /// Claims of the SKU not made by a grant.
    pub other_claims: u64,
    pub verified: bool,
}

/// Recomputes the draw of `sku`. Refused before the draw: the seed is secret until then.
pub async fn verify(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Verdict, OpsError> {
    let d = draws::get(pool, sku, t)
        .await?
        .ok_or_else(|| OpsError::NotFound(format!("sku {sku} is not a draw campaign")))?;
    if d.state != DrawState::Drawn {
        return Err(OpsError::Invalid(format!(
            "sku {sku} has not been drawn yet; its seed stays secret until the draw"
        )));
    }
    let c = ledger::campaigns::get(pool, sku, t).await?;
    let k = (c.stock + u64::from(d.waitlist)) as usize;
    let (mut all, wrong) = recompute(pool, &d, t).await?;
    let entrants = all.len() as u64;
    all.sort_by(draw_order);
    all.truncate(k);
    let recorded = recorded_ranks(pool, sku, t).await?;
    let ranks_match =
        recorded.len() == all.len() && recorded.iter().zip(&all).all(|(r, (u, _))| r == u);
    let ranked: HashSet<&str> = recorded.iter().map(String::as_str).collect();
    let (granted, other_claims) = draws::claims_of_draw(pool, sku, GRANT_REQUEST, t).await?;
    let granted_unranked = granted
        .iter()
        .filter(|u| !ranked.contains(u.as_str()))
        .count() as u64;
    // Grants go in rank order (the waitlist is served as units come back, never ahead of a
    // better rank): the granted users are exactly ranks 1..=n for some n.
    let granted_set: HashSet<&str> = granted.iter().map(String::as_str).collect();
    let grants_in_order = recorded
        .iter()
        .take(granted_set.len())
        .all(|u| granted_set.contains(u.as_str()));
    // The entries are the ones the draw was made from: none added or removed since.
    let entrants_match = d.entrants == Some(entrants);
    let digest_matches = seed_digest(&d.seed) == d.seed_sha256;
    let verified = digest_matches
        && wrong == 0
        && ranks_match
        && granted_unranked == 0
        && grants_in_order
        && entrants_match
        && other_claims == 0
        && granted.len() <= recorded.len();
    Ok(Verdict {
        sku,
        seed: hex::encode(&d.seed),
        seed_sha256: d.seed_sha256,
        digest_matches,
        entrants,
        entrants_match,
        wrong_priorities: wrong,
        ranks: recorded.len() as u64,
        ranks_match,
        granted: granted.len() as u64,
        granted_unranked,
        grants_in_order,
        other_claims,
        verified,
    })
}

/// Every entry of `d` with its priority recomputed from the revealed seed, and how many
/// stored priorities differ from it.
async fn recompute(
    pool: &MySqlPool,
    d: &Draw,
    t: Duration,
) -> Result<(Vec<(String, u64)>, u64), OpsError> {
    let mut all: Vec<(String, u64)> = Vec::new();
    let mut wrong = 0u64;
    let mut after: Option<(u64, String)> = None;
    loop {
        let page = draws::entries_in_order(
            pool,
            d.sku,
            after.as_ref().map(|(p, u)| (*p, u.as_str())),
            PAGE,
            t,
        )
        .await?;
        let Some(last) = page.last() else { break };
        after = Some((last.priority, last.user.clone()));
        let full = page.len() == PAGE as usize;
        for e in page {
            let p = priority(&d.seed, d.sku, &e.user);
            if p != e.priority {
                wrong += 1;
            }
            all.push((e.user, p));
        }
        if !full {
            break;
        }
    }
    Ok((all, wrong))
}

/// The recorded ranks' users, in rank order.
async fn recorded_ranks(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Vec<String>, OpsError> {
    let mut recorded: Vec<String> = Vec::new();
    let mut at = 0;
    loop {
        let page = draws::ranks(pool, sku, at, PAGE, t).await?;
        let Some(last) = page.last() else { break };
        at = last.rank;
        let full = page.len() == PAGE as usize;
        recorded.extend(page.into_iter().map(|r| r.user));
        if !full {
            break;
        }
    }
    Ok(recorded)
}
