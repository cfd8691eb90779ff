//! The check after a drill: what clients were told against what the system recorded.

use std::collections::{HashMap, HashSet};
use std::fmt;

use shard_router::{ClaimRecord, SkuMeta, StockClient};

use crate::load::Answers;

/// The figures every drill prints.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub drill: String,
    pub acknowledged: u64,
    /// Claim records found (in the shard streams, or ledger rows where a consumer ran).
    pub recorded: u64,
    /// Acknowledged but not recorded: must be 0.
    pub lost: u64,
    /// Recorded twice (same claim id, or same `(user, user_seq)`).
    pub duplicated: u64,
    /// Units recorded beyond the stock.
    pub oversold: u64,
    /// Users recorded above the per-user limit.
    pub over_limit: u64,
    /// Claims answered with an error (`ambiguous` of them may have run).
    pub errors: u64,
    pub ambiguous: u64,
    /// Time from the fault's end until claims succeeded again, when measured.
    pub recover_ms: Option<u128>,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "drill={} acknowledged={} recorded={} lost={} duplicated={} oversold={} over_limit={} errors={} ambiguous={} recover_ms={}",
            self.drill,
            self.acknowledged,
            self.recorded,
            self.lost,
            self.duplicated,
            self.oversold,
            self.over_limit,
            self.errors,
            self.ambiguous,
            self.recover_ms.map_or("-".into(), |v| v.to_string())
        )
    }
}

/// The records read back and the figures computed from them.
pub struct Verdict {
    pub figures: Figures,
    pub records: Vec<ClaimRecord>,
}

/// Reads every claim record of `meta` from its shard streams and compares.
pub async fn check(
    drill: &str,
    client: &StockClient,
    meta: &SkuMeta,
    answers: &Answers,
) -> Verdict {
    let records = stream_records(client, meta).await;
    let mut figures = compare(drill, meta, answers, &records);
    figures.errors = answers.errors;
    figures.ambiguous = answers.ambiguous;
    Verdict { figures, records }
}

/// Pure comparison, so the verdict itself is testable.
pub fn compare(drill: &str, meta: &SkuMeta, answers: &Answers, records: &[ClaimRecord]) -> Figures {
    let mut ids = HashSet::new();
    let mut user_seqs = HashSet::new();
    let mut per_user: HashMap<&str, u64> = HashMap::new();
    let mut duplicated = 0;
    let mut units = 0u64;
    for r in records {
        let fresh_id = ids.insert(r.claim_id.as_str());
        let fresh_seq = user_seqs.insert((r.user.as_str(), r.user_seq));
        duplicated += u64::from(!fresh_id || !fresh_seq);
        units += u64::from(r.qty);
        *per_user.entry(r.user.as_str()).or_default() += u64::from(r.qty);
    }
    let lost = answers
        .acknowledged
        .iter()
        .filter(|(_, c)| !ids.contains(c.claim_id.as_str()))
        .count() as u64;
    Figures {
        drill: drill.to_owned(),
        acknowledged: answers.acknowledged.len() as u64,
        recorded: records.len() as u64,
        lost,
        duplicated,
        oversold: units.saturating_sub(meta.stock),
        over_limit: per_user
            .values()
            .filter(|&&n| n > u64::from(meta.limit))
            .count() as u64,
        ..Figures::default()
    }
}

async fn stream_records(client: &StockClient, meta: &SkuMeta) -> Vec<ClaimRecord> {
    let mut out = Vec::new();
    for shard in client.placement().shards_of(meta.sku, meta.width) {
        let records = client.stream_records(shard, meta.sku, 1000).await;
        out.extend(records.expect("the claims stream after the drill"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shard_router::Claim;

    fn rec(id: &str, user: &str, seq: u64) -> ClaimRecord {
        ClaimRecord {
            claim_id: id.into(),
            sku: 1,
            user: user.into(),
            qty: 1,
            user_seq: seq,
            shard: 0,
            home: 0,
            request_id: None,
            ts_ms: 0,
            gen: 0,
        }
    }

    #[test]
    fn counts_lost_duplicated_oversold_and_over_limit() {
        let meta = SkuMeta {
            sku: 1,
            stock: 2,
            width: 1,
            limit: 1,
            start_ms: 0,
            end_ms: 1,
            mode: shard_router::SkuMode::Fcfs,
        };
        let claim = |id: &str| Claim {
            claim_id: id.into(),
            sku: 1,
            shard: 0,
            qty: 1,
        };
        let answers = Answers {
            acknowledged: vec![("a".into(), claim("0-1-0")), ("b".into(), claim("0-9-0"))],
            ..Answers::default()
        };
        let records = [
            rec("0-1-0", "a", 1),
            rec("0-2-0", "a", 1),
            rec("0-3-0", "c", 1),
        ];
        let f = compare("t", &meta, &answers, &records);
        assert_eq!((f.acknowledged, f.recorded), (2, 3));
        assert_eq!(f.lost, 1, "0-9-0 was acknowledged but never recorded");
        assert_eq!(f.duplicated, 1, "(a, 1) twice");
        assert_eq!(f.oversold, 1);
        assert_eq!(f.over_limit, 1);
    }
}
