//! The waiting room's calls (campaign mode `queue`): join, and the admission step. The
//! scripts are `lua/queue_join.lua` and `lua/queue_admit.lua`; `crate::queue` holds the
//! tokens and positions.

use super::StockClient;
use crate::error::StockError;
use crate::queue::QueueState;
use crate::scripts::{self, code};
use crate::{keys, MAX_ID_LEN};

/// What joining gave a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// Before the start: counted in the pre-queue; the place is the shuffle key.
    Pre,
    /// From the start: this ticket (the same on every repeat).
    Ticket(u64),
    /// The start has passed but the pre-queue's length is not fixed in Redis yet: the
    /// admission step has not made its first call, or not written the ledger's marks back
    /// after a Redis loss. No place is handed out (counting tickets from 1 again would put
    /// the newcomer under the admitted watermark, ahead of everyone waiting); retry.
    NotOpen,
}

/// `queue_join.lua`'s answer when the queue is not open for tickets yet.
const QUEUE_NOT_OPEN: i64 = 103;

impl StockClient {
    pub async fn queue_join(
        &self,
        sku: u64,
        user: &str,
        now_ms: i64,
        start_ms: i64,
    ) -> Result<Joined, StockError> {
        if user.is_empty() || user.len() > MAX_ID_LEN {
            return Err(StockError::InvalidArgument(format!(
                "user must be 1..={MAX_ID_LEN} bytes"
            )));
        }
        let [state, pre, tickets] = keys::queue_keys(sku);
        let mut inv = scripts::QUEUE_JOIN.prepare_invoke();
        inv.key(state)
            .key(pre)
            .key(tickets)
            .arg(user)
            .arg(now_ms)
            .arg(start_ms);
        let r = self.run("queue join", &inv).await?;
        match r.code {
            code::PRE_QUEUED => Ok(Joined::Pre),
            code::TICKET => Ok(Joined::Ticket(r.num(0)?)),
            QUEUE_NOT_OPEN => Ok(Joined::NotOpen),
            _ => Err(r.unexpected()),
        }
    }

    /// Fixes the pre-queue's length if not yet (`kept_pre`, the ledger's, when it has
    /// one), raises the ticket counter to `next_floor` and the watermark to `admitted`
    /// where they are lower, and returns the queue.
    pub async fn queue_admit(
        &self,
        sku: u64,
        admitted: u64,
        rate: u64,
        kept_pre: Option<u64>,
        next_floor: u64,
    ) -> Result<QueueState, StockError> {
        let [state, pre, _] = keys::queue_keys(sku);
        let mut inv = scripts::QUEUE_ADMIT.prepare_invoke();
        inv.key(state)
            .key(pre)
            .arg(admitted)
            .arg(rate)
            .arg(kept_pre.map(|p| p.to_string()).unwrap_or_default())
            .arg(next_floor);
        let r = self.run("queue admit", &inv).await?;
        if r.code != code::QUEUE_STATE {
            return Err(r.unexpected());
        }
        Ok(QueueState {
            pre: Some(r.num(0)?),
            admitted: r.num(1)?,
            next: r.num(2)?,
            rate: r.num(3)?,
        })
    }

    /// The queue as it stands (no write): what gateways cache.
    pub async fn queue_state(&self, sku: u64) -> Result<QueueState, StockError> {
        let [state, _, _] = keys::queue_keys(sku);
        let mut conn = self.conn.clone();
        let v: Vec<Option<u64>> = self
            .bounded(
                "queue state",
                redis::cmd("HMGET")
                    .arg(state)
                    .arg(&["pre", "admitted", "next", "rate"])
                    .query_async(&mut conn),
            )
            .await?;
        Ok(QueueState {
            pre: v.first().copied().flatten(),
            admitted: v.get(1).copied().flatten().unwrap_or(0),
            next: v.get(2).copied().flatten().unwrap_or(0),
            rate: v.get(3).copied().flatten().unwrap_or(0),
        })
    }
}
