//! Excess removal: when a shard's slice holds more than the ledger allows (Redis lost
//! writes: a restart without persistence, a failover rollback), the excess is taken out of
//! the slice at once and recorded as an anomaly, so an oversell after a rollback is bounded
//! by one reconciliation period. Missing units (negative drift) are never refilled.
//!
//! Why it never removes units legitimately in flight: the excess is measured exactly as of
//! the shard's snapshot (see `mod.rs`), and every legitimate operation after it moves units
//! between the slice and the other terms (claim: slice → stream; commit: stream → ledger;
//! release: ledger → slice; wave: adds to both sides), so the excess is still the same when
//! the removal runs. The one operation that changes it is another removal, and
//! `lua/reconcile_fix.lua` refuses to run when the shard's fix epoch moved since the snapshot:
//! two consumers reconciling at once remove it once, and a retry after a crash measures again.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};
use shard_router::keys::{self, ShardKeys};
use shard_router::{StockClient, StockError};
use sqlx::MySqlPool;

use super::account::ShardFigures;
use crate::error::ConsumerError;
use crate::ledger;

static FIX: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/reconcile_fix.lua")));

/// Takes each shard's positive drift out of its slice; returns the units removed.
pub async fn remove(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    shards: &[ShardFigures],
    t: Duration,
) -> Result<i64, ConsumerError> {
    let mut total = 0;
    for f in shards.iter().filter(|f| f.drift > 0) {
        let k = ShardKeys::new(client.placement(), f.shard, sku);
        let mut inv = FIX.prepare_invoke();
        inv.key(k.stock())
            .key(k.fix_epoch())
            .arg(f.epoch)
            .arg(f.drift)
            .arg(sku)
            .arg(f.shard)
            .arg(keys::EVENTS_CHANNEL);
        let mut conn = client.conn();
        let v: Vec<Value> = client
            .bounded("remove excess", inv.invoke_async(&mut conn))
            .await?;
        let int = |i: usize| match v.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(ConsumerError::Redis(StockError::Protocol {
                op: "remove excess",
                detail: format!("unexpected reply {other:?}"),
            })),
        };
        match int(0)? {
            50 => {
                let (removed, left, epoch) = (int(1)?, int(2)?, int(3)?);
                total += removed;
                let detail = format!(
                    "shard {}: slice held {} unit(s) more than the ledger allows; removed {removed}, slice now {left}{}",
                    f.shard,
                    f.drift,
                    if removed < f.drift {
                        " (the rest was already sold again: oversold)"
                    } else {
                        ""
                    }
                );
                tracing::error!(
                    sku,
                    shard = f.shard,
                    excess = f.drift,
                    removed,
                    "excess removed from a slice"
                );
                // The epoch this removal ended names it: a retry cannot record it twice.
                let reference = format!("{sku}:{}:{epoch}", f.shard);
                ledger::anomaly(pool, "excess_removed", &reference, Some(sku), &detail, t).await?;
            }
            51 => tracing::info!(
                sku,
                shard = f.shard,
                "excess already removed by another run"
            ),
            14 => tracing::warn!(
                sku,
                shard = f.shard,
                "slice vanished before the excess removal"
            ),
            _ => {
                return Err(ConsumerError::Redis(StockError::Protocol {
                    op: "remove excess",
                    detail: format!("unexpected reply {v:?}"),
                }))
            }
        }
    }
    Ok(total)
}
