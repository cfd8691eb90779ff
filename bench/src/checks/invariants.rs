//! The invariant check after a run (docs/DESIGN.md "Invariants"), against Redis and, when a
//! MySQL URL is given, the ledger:
//! - no oversell: units acknowledged to clients ≤ units taken in Redis ≤ stock, no slice
//!   below zero;
//! - per-user limit: every user count in Redis ≤ limit, and no client saw more distinct
//!   claims than the limit allows;
//! - nothing lost: once the consumer has drained, the ledger rows of this run's users equal
//!   the claims acknowledged to them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use loadgen::recorder::AckedClaim;
use shard_router::StockClient;

use crate::report::verdict::Check;
use crate::scenario::Scenario;
use crate::stack::mysql::Mysql;

fn check(name: impl Into<String>, passed: bool, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        passed,
        detail: detail.into(),
    }
}

/// Distinct acknowledged claims (a replayed answer carries the same claim id).
fn distinct(claims: &[AckedClaim]) -> Vec<&AckedClaim> {
    let mut seen = HashSet::new();
    claims
        .iter()
        .filter(|c| seen.insert(c.claim_id.as_str()))
        .collect()
}

/// Client-side checks that need no server: per-SKU units and per-user claims.
pub fn client_checks(s: &Scenario, claims: &[AckedClaim]) -> Vec<Check> {
    let claims = distinct(claims);
    let mut out = Vec::new();
    let mut units: BTreeMap<u64, u64> = BTreeMap::new();
    let mut per_user: HashMap<(u64, u64), u64> = HashMap::new();
    for c in &claims {
        *units.entry(c.sku).or_default() += u64::from(c.qty);
        *per_user.entry((c.sku, c.user)).or_default() += u64::from(c.qty);
    }
    for sku in &s.skus {
        let u = units.get(&sku.id).copied().unwrap_or(0);
        out.push(check(
            format!("sku {}: acknowledged units <= stock", sku.id),
            u <= sku.stock,
            format!("{u} acknowledged of {} stock", sku.stock),
        ));
    }
    let worst = per_user.values().copied().max().unwrap_or(0);
    out.push(check(
        "per-user limit (client view)",
        worst <= u64::from(s.limit),
        format!(
            "most units acknowledged to one user: {worst}, limit {}",
            s.limit
        ),
    ));
    out
}

/// Redis checks per SKU.
pub async fn redis_checks(client: &StockClient, s: &Scenario, claims: &[AckedClaim]) -> Vec<Check> {
    let claims = distinct(claims);
    let mut out = Vec::new();
    for sku in &s.skus {
        let acked: u64 = claims
            .iter()
            .filter(|c| c.sku == sku.id)
            .map(|c| u64::from(c.qty))
            .sum();
        let slices = match client.slices(sku.id, sku.width).await {
            Ok(v) => v,
            Err(e) => {
                out.push(check(
                    format!("sku {}: read slices", sku.id),
                    false,
                    e.to_string(),
                ));
                continue;
            }
        };
        let missing = slices.iter().filter(|(_, v)| v.is_none()).count();
        let negative = slices
            .iter()
            .filter(|(_, v)| v.is_some_and(|v| v < 0))
            .count();
        let left: i64 = slices.iter().filter_map(|(_, v)| *v).sum();
        let taken = sku.stock as i64 - left;
        out.push(check(
            format!("sku {}: no oversell (Redis)", sku.id),
            missing == 0 && negative == 0 && taken >= 0 && taken as u64 <= sku.stock,
            format!(
                "stock {}, left {left} over {} slices ({missing} missing, {negative} negative), taken {taken}",
                sku.stock,
                slices.len()
            ),
        ));
        out.push(check(
            format!("sku {}: acknowledged <= taken", sku.id),
            acked as i64 <= taken,
            format!("{acked} acknowledged this run, {taken} taken in Redis"),
        ));
        let mut worst = 0u64;
        let mut users = 0usize;
        for (shard, _) in &slices {
            match client.user_counts(sku.id, *shard).await {
                Ok(m) => {
                    users += m.len();
                    worst = worst.max(m.values().copied().max().unwrap_or(0));
                }
                Err(e) => out.push(check(
                    format!("sku {}: read user counts", sku.id),
                    false,
                    e.to_string(),
                )),
            }
        }
        out.push(check(
            format!("sku {}: per-user limit (Redis)", sku.id),
            worst <= u64::from(s.limit),
            format!(
                "{users} users hold units; most held by one: {worst}, limit {}",
                s.limit
            ),
        ));
    }
    out
}

/// Waits (bounded) until the ledger holds every claim acknowledged to this run's users,
/// then compares. `tag` is the run's user prefix. `ambiguous` counts the answers that were
/// not definite (see [`loadgen::outcome::Outcome::is_ambiguous`]): each may be a claim
/// that was made but never acknowledged, so the ledger may hold up to that many more rows
/// than were acknowledged, never fewer.
pub async fn ledger_checks(
    db: &Mysql,
    s: &Scenario,
    claims: &[AckedClaim],
    tag: &str,
    drain_limit: Duration,
    ambiguous: u64,
) -> Vec<Check> {
    let claims = distinct(claims);
    let mut want: BTreeMap<u64, u64> = s.skus.iter().map(|k| (k.id, 0)).collect();
    for c in &claims {
        *want.entry(c.sku).or_default() += 1;
    }
    // The tag is made of [a-z0-9-] only (see `run.rs`): no LIKE wildcard in it.
    let deadline = Instant::now() + drain_limit;
    let last = loop {
        let got: Result<BTreeMap<u64, u64>, String> = db
            .rows_per_sku(tag)
            .await
            .map(|rows| rows.into_iter().collect())
            .map_err(|e| e.to_string());
        let done =
            matches!(&got, Ok(g) if want.iter().all(|(k, v)| g.get(k).copied().unwrap_or(0) >= *v));
        if done || Instant::now() >= deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    match last {
        Err(e) => vec![check("ledger: query", false, e)],
        Ok(got) => want
            .iter()
            .map(|(sku, w)| {
                let g = got.get(sku).copied().unwrap_or(0);
                check(
                    format!("sku {sku}: acknowledged <= ledger rows <= acknowledged + ambiguous"),
                    *w <= g && g <= w + ambiguous,
                    format!(
                        "{g} ledger rows, {w} acknowledged, {ambiguous} ambiguous answers \
                         (waited up to {drain_limit:?})"
                    ),
                )
            })
            .collect(),
    }
}

/// The latest reconciliation drift per SKU, as the consumer recorded it.
pub async fn drift_checks(db: &Mysql, s: &Scenario) -> Vec<Check> {
    let mut out = Vec::new();
    for sku in &s.skus {
        out.push(match db.latest_drift(sku.id).await {
            Ok(latest) => match latest {
                Some(d) => check(
                    format!("sku {}: reconciliation drift == 0", sku.id),
                    d == 0,
                    format!("latest drift {d}"),
                ),
                None => check(
                    format!("sku {}: reconciliation drift == 0", sku.id),
                    true,
                    "no reconciliation run recorded yet (not measured)",
                ),
            },
            Err(e) => check(
                format!("sku {}: reconciliation", sku.id),
                false,
                e.to_string(),
            ),
        });
    }
    out
}
