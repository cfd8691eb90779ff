//! Which Redis process serves a shard, and the ledger's vouch for it (`lua/guard.lua`):
//! the consumer reads both, rebuilds a shard whose process it has not vouched for, then
//! vouches (`campaign-ops/src/rebuild/watch.rs`).

use super::StockClient;
use crate::error::StockError;
use crate::keys;
use crate::placement::ShardId;
use crate::scripts::{self, code};

/// A shard's master as it is now, and whom its vouch names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    /// The master's `run_id`: new at every start, different on every node.
    pub run_id: String,
    /// The run_id the ledger vouched for on this shard, if any.
    pub vouched: Option<String>,
}

impl ServerIdentity {
    /// True when the selling scripts run here (`lua/guard.lua`: no vouch, or this one's).
    pub fn sells(&self) -> bool {
        self.vouched.as_ref().is_none_or(|v| *v == self.run_id)
    }

    /// True when the ledger vouched for exactly this process.
    pub fn vouched_here(&self) -> bool {
        self.vouched.as_deref() == Some(self.run_id.as_str())
    }
}

impl StockClient {
    /// `shard`'s master's run_id and the shard's vouch, read in one pipeline on the master.
    pub async fn server_identity(&self, shard: ShardId) -> Result<ServerIdentity, StockError> {
        let slot = crate::placement::slot_of_tag(self.placement().tag(shard));
        let mut pipe = redis::pipe();
        pipe.cmd("INFO").arg("server");
        pipe.cmd("GET").arg(keys::vouch(self.placement(), shard));
        let mut conn = self.conn();
        let (info, vouched): (String, Option<String>) = self
            .bounded("server identity", async {
                let values = conn.pipeline_on_slot_master(&pipe, slot).await?;
                Ok(redis::from_redis_value(redis::Value::Array(values))?)
            })
            .await?;
        let run_id = crate::guard::run_id_of(&info)
            .map(str::to_owned)
            .ok_or_else(|| StockError::Protocol {
                op: "server identity",
                detail: "INFO server has no run_id".into(),
            })?;
        Ok(ServerIdentity { run_id, vouched })
    }

    /// Vouches for the process `run_id` on `shard`: true when it is the one serving the
    /// shard now (`lua/vouch.lua` checks in the same step), false when another is.
    pub async fn vouch(&self, shard: ShardId, run_id: &str) -> Result<bool, StockError> {
        self.run_vouch(shard, "set", run_id).await
    }

    /// Vouches for whichever process serves `shard` if the shard has no vouch and no claims
    /// stream yet: a first preheat, where no older state can come back. False otherwise.
    pub async fn vouch_if_none(&self, shard: ShardId) -> Result<bool, StockError> {
        self.run_vouch(shard, "init", "").await
    }

    /// Replaces a vouch that names another process than the one serving `shard` by
    /// `revoked` (`lua/vouch.lua`): true when it did.
    pub async fn revoke_vouch(&self, shard: ShardId) -> Result<bool, StockError> {
        self.run_vouch(shard, "revoke", "").await
    }

    /// Replaces `shard`'s vouch by `revoked` whomever it names (`lua/vouch.lua`
    /// "distrust"): the ledger found the shard handing out what only a process older than
    /// the ledger would (a claim id or a user's sequence used twice). The shard answers
    /// `restoring` until the consumer's watch rebuilt it from the ledger and vouched again.
    pub async fn distrust(&self, shard: ShardId) -> Result<(), StockError> {
        self.run_vouch(shard, "distrust", "").await.map(|_| ())
    }

    async fn run_vouch(
        &self,
        shard: ShardId,
        mode: &str,
        run_id: &str,
    ) -> Result<bool, StockError> {
        let mut inv = scripts::VOUCH.prepare_invoke();
        inv.key(keys::vouch(self.placement(), shard))
            .key(keys::claims_stream(self.placement(), shard))
            .arg(mode)
            .arg(run_id);
        let r = self.run("vouch", &inv).await?;
        match r.code {
            code::VOUCHED => Ok(true),
            code::NOT_THIS_PROCESS => Ok(false),
            _ => Err(r.unexpected()),
        }
    }
}
