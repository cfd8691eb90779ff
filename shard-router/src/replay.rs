//! The replay check on its own: what a request id already got, read without running a
//! script. The gateway uses it where it would otherwise answer from memory (SKU cached sold
//! out, window closed), so a retried success still gets its first answer there.
//!
//! One plain `GET` of the key `claim.lua` and `settle.lua` write on the user's home shard:
//! cheaper for Redis than any script, and read-only, so it can never take a unit.
//!
//! With replica durability (docs/DESIGN.md "Durability") a replayed answer is acknowledged
//! only when a replica holds everything the claim wrote:
//! - on the home shard: the answer is read again in the pipeline of a fence on that shard
//!   ([`StockClient::read_fenced`]), so the fence's master is the one that had the answer;
//! - a rerouted claim's units and record live on another shard. Its answer is stored
//!   *tentative* (`~claim_id|shard|qty`, `settle.lua`) by a gateway with replica
//!   durability; replaying a tentative answer also needs the record on that shard, read
//!   under a fence there. Once that was seen, or once the record reached the ledger (the
//!   consumer, before it deletes the entry), the answer is made final: a replay after the
//!   entry left the stream needs no record. A tentative answer without its record is
//!   either lost (that shard failed over before replicating it) or consumed while the final
//!   mark was lost (a failover of the home shard): neither is acknowledged (503).

use redis::AsyncCommands;

use crate::client::StockClient;
use crate::codec;
use crate::error::StockError;
use crate::keys::{self, ShardKeys};
use crate::outcome::Claim;
use crate::placement::ShardId;
use crate::protocol::Confirmation;
use crate::record::ClaimRecord;
use crate::scripts::{self, code};

/// What is stored for a request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredAnswer {
    /// The request id succeeded: its first answer.
    Claimed(Claim),
    /// A request with this id holds the user's count right now (a second chance runs).
    InProgress,
}

impl StockClient {
    /// The answer stored for `request_id` of `user` on the SKU (of width `width`), or `None`
    /// when this request id never succeeded (or its answer expired).
    pub async fn stored_answer(
        &self,
        sku: u64,
        width: u16,
        user: &str,
        request_id: &str,
    ) -> Result<Option<StoredAnswer>, StockError> {
        let key = self.answer_key(sku, width, user, request_id);
        let mut conn = self.conn();
        let seen: Option<String> = self.bounded("replay", conn.get(key)).await?;
        interpret(sku, seen).map(|a| a.map(|(a, _)| a))
    }

    /// [`Self::stored_answer`] and what replica durability confirmed about it (see the
    /// module doc). An answer that cannot be confirmed now is `Unconfirmed`, never an
    /// error: the caller answers 503 with its claim id.
    pub async fn replay_confirmed(
        &self,
        sku: u64,
        width: u16,
        user: &str,
        request_id: &str,
    ) -> Result<Option<(StoredAnswer, Confirmation)>, StockError> {
        self.replay_confirmed_with(sku, width, user, request_id, false)
            .await
    }

    /// [`Self::replay_confirmed`] for a SKU the caller believes sold out (no answer then
    /// means "sold out"): the answer is read with the home slice and the shard's vouch
    /// (`live_answer`), and no answer where the shard may have lost it is an error until
    /// the rebuild restores it: [`StockError::SliceMissing`] over a missing slice,
    /// [`StockError::Restoring`] on a process the ledger has not vouched for. After the
    /// window closed, close-out deletes the slices, so that path keeps
    /// [`Self::replay_confirmed`].
    pub async fn replay_confirmed_live(
        &self,
        sku: u64,
        width: u16,
        user: &str,
        request_id: &str,
    ) -> Result<Option<(StoredAnswer, Confirmation)>, StockError> {
        self.replay_confirmed_with(sku, width, user, request_id, true)
            .await
    }

    async fn replay_confirmed_with(
        &self,
        sku: u64,
        width: u16,
        user: &str,
        request_id: &str,
        live: bool,
    ) -> Result<Option<(StoredAnswer, Confirmation)>, StockError> {
        let key = self.answer_key(sku, width, user, request_id);
        let mut conn = self.conn();
        // The common case (no answer: a request after sell-out) stays one plain read.
        let seen: Option<String> = if live {
            let home = self.placement().home_shard(sku, width, user);
            self.live_answer(home, sku, &key).await?
        } else {
            self.bounded("replay", conn.get(&key)).await?
        };
        let Some(wait) = self.config().replica_ack else {
            let answer = interpret(sku, seen)?;
            return Ok(answer.map(|(a, _)| (a, Confirmation::NotAsked)));
        };
        if !matches!(&seen, Some(s) if s != "P") {
            let answer = interpret(sku, seen)?;
            return Ok(answer.map(|(a, _)| (a, Confirmation::NotAsked)));
        }
        let home = self.placement().home_shard(sku, width, user);
        let mut get = redis::cmd("GET");
        get.arg(&key);
        let need = self.replicas_to_wait(home);
        let (seen, fence) = self
            .read_fenced::<Option<String>>(home, get, need, wait)
            .await?;
        let Some((answer, tentative)) = interpret(sku, seen)? else {
            return Ok(None);
        };
        let StoredAnswer::Claimed(claim) = answer else {
            return Ok(Some((StoredAnswer::InProgress, Confirmation::NotAsked)));
        };
        // The fence's own INFO (after its WAIT) counts the replicas online now; the probe's
        // count may predate one (`batch.rs`).
        let need = need.max(fence.info.replicas_to_wait());
        let confirmation = if fence.acked < need || !fence.info.is_master {
            Confirmation::Unconfirmed
        } else if tentative && claim.shard != home {
            self.confirm_take(home, user, request_id, &claim, wait)
                .await
        } else {
            Confirmation::Confirmed
        };
        Ok(Some((StoredAnswer::Claimed(claim), confirmation)))
    }

    /// Drops the tentative mark of `claim`'s answer on `home` once its take is known to be
    /// on a replica or in the ledger. Also replaces a `P` (the hold not settled yet: the
    /// consumer can commit the take's record before the gateway settles), which settle then
    /// leaves final. True when the answer changed.
    pub async fn finalize_answer(
        &self,
        home: ShardId,
        user: &str,
        request_id: &str,
        claim: &Claim,
    ) -> Result<bool, StockError> {
        let k = ShardKeys::new(self.placement(), home, claim.sku);
        let mut inv = scripts::SETTLE.prepare_invoke();
        inv.key(k.users())
            .key(k.holds())
            .key(k.request(user, Some(request_id)))
            .arg(user)
            .arg(0)
            .arg("final")
            .arg(request_id)
            .arg(codec::encode_answer(
                &claim.claim_id,
                claim.shard,
                claim.qty,
                false,
            ))
            .arg(self.config().request_ttl.as_secs().max(1));
        let r = self.run("finalize answer", &inv).await?;
        match r.code {
            code::SETTLED => Ok(true),
            code::HOLD_GONE => Ok(false),
            _ => Err(r.unexpected()),
        }
    }

    /// Is the record of a rerouted `claim` on a replica of its shard? One pipeline there:
    /// the entry (it must be this user's and request id's), then a fence. When it is, the
    /// answer on `home` is made final (best effort: a later replay checks again).
    async fn confirm_take(
        &self,
        home: ShardId,
        user: &str,
        request_id: &str,
        claim: &Claim,
        wait: std::time::Duration,
    ) -> Confirmation {
        let prefix = format!("{}-", claim.shard);
        let Some(entry) = claim.claim_id.strip_prefix(&prefix) else {
            return Confirmation::Unconfirmed;
        };
        let mut xrange = redis::cmd("XRANGE");
        xrange
            .arg(keys::claims_stream(self.placement(), claim.shard))
            .arg(entry)
            .arg(entry);
        let need = self.replicas_to_wait(claim.shard);
        let read = self
            .read_fenced::<Vec<(String, Vec<String>)>>(claim.shard, xrange, need, wait)
            .await;
        let held = match read {
            Ok((entries, fence)) => {
                fence.acked >= need.max(fence.info.replicas_to_wait())
                    && fence.info.is_master
                    && entries
                        .iter()
                        .any(|(id, fields)| names(id, fields, claim.sku, user, request_id))
            }
            Err(e) => {
                tracing::debug!(shard = claim.shard, error = %e, "take of a replayed claim unconfirmed");
                false
            }
        };
        if !held {
            return Confirmation::Unconfirmed;
        }
        if let Err(e) = self.finalize_answer(home, user, request_id, claim).await {
            tracing::debug!(shard = home, error = %e, "replay answer left tentative");
        }
        Confirmation::Confirmed
    }

    /// The sold-out path's read of the answer at `key`: with the home slice, the shard's
    /// vouch and the `INFO` naming the process that answered, in one pipeline on the home
    /// shard's master (one hash tag, one connection). No answer means "sold out" only over
    /// a slice ([`StockError::SliceMissing`] otherwise) and where `lua/guard.lua` would
    /// sell: no vouch, or one naming this process ([`StockError::Restoring`] otherwise).
    /// Data older than the ledger keeps its slices but lacks the answers given since (found
    /// by the model checker, model/). The process is read here, not taken from the scripts
    /// `guard.rs` loaded: those still name the process before a restart until a selling
    /// script meets the new one, and a SKU sold out everywhere runs none.
    async fn live_answer(
        &self,
        home: ShardId,
        sku: u64,
        key: &str,
    ) -> Result<Option<String>, StockError> {
        let slice = ShardKeys::new(self.placement(), home, sku).stock();
        let mut pipe = redis::pipe();
        pipe.cmd("INFO").arg("server");
        pipe.cmd("MGET")
            .arg(key)
            .arg(slice)
            .arg(keys::vouch(self.placement(), home));
        let slot = crate::placement::slot_of_tag(self.placement().tag(home));
        let mut conn = self.conn();
        type Read = (String, (Option<String>, Option<String>, Option<String>));
        let (info, (seen, slice, vouched)): Read = self
            .bounded("replay", async {
                let values = conn.pipeline_on_slot_master(&pipe, slot).await?;
                Ok(redis::from_redis_value(redis::Value::Array(values))?)
            })
            .await?;
        if seen.is_some() {
            return Ok(seen);
        }
        if slice.is_none() {
            return Err(StockError::SliceMissing { op: "replay" });
        }
        if let Some(v) = vouched {
            let Some(run_id) = crate::guard::run_id_of(&info) else {
                return Err(StockError::Protocol {
                    op: "replay",
                    detail: "INFO server has no run_id".into(),
                });
            };
            if v != run_id {
                return Err(StockError::Restoring { op: "replay" });
            }
        }
        Ok(None)
    }

    fn answer_key(&self, sku: u64, width: u16, user: &str, request_id: &str) -> String {
        let home = self.placement().home_shard(sku, width, user);
        ShardKeys::new(self.placement(), home, sku).request(user, Some(request_id))
    }
}

/// True when the entry is a claim record of this SKU, user and request id.
fn names(id: &str, fields: &[String], sku: u64, user: &str, request_id: &str) -> bool {
    let pairs = fields
        .chunks_exact(2)
        .map(|kv| (kv[0].as_str(), kv[1].as_bytes()));
    ClaimRecord::decode(id, pairs).is_ok_and(|r| {
        r.sku == sku && r.user == user && r.request_id.as_deref() == Some(request_id)
    })
}

/// The stored value as an answer, and whether it is tentative.
fn interpret(sku: u64, seen: Option<String>) -> Result<Option<(StoredAnswer, bool)>, StockError> {
    match seen.as_deref() {
        None => Ok(None),
        Some("P") => Ok(Some((StoredAnswer::InProgress, false))),
        Some(s) => parse(sku, s).map(|(c, t)| Some((StoredAnswer::Claimed(c), t))),
    }
}

/// A stored answer (see `codec.rs`) as this SKU's claim.
fn parse(sku: u64, stored: &str) -> Result<(Claim, bool), StockError> {
    let (id, shard, qty, tentative) =
        codec::parse_answer(stored).ok_or_else(|| StockError::Protocol {
            op: "replay",
            detail: format!("stored answer {stored:?} is not claim_id|shard|qty"),
        })?;
    let claim = Claim {
        claim_id: id.into(),
        sku,
        shard,
        qty,
    };
    Ok((claim, tentative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_scripts_store() {
        let (c, tentative) = parse(7, "3-1700000000000-0|3|2").unwrap();
        assert_eq!(
            (c.claim_id.as_str(), c.sku, c.shard, c.qty, tentative),
            ("3-1700000000000-0", 7, 3, 2, false)
        );
        let stored = codec::encode_answer(&c.claim_id, c.shard, c.qty, true);
        assert_eq!(parse(7, &stored).unwrap(), (c, true));
        for bad in ["", "a|b", "1-0|x|1", "1-0|1|1|1", "1-0|1|-1", "~", "~|1|1"] {
            assert!(parse(7, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_record_names_its_sku_user_and_request_id() {
        let record = ClaimRecord {
            claim_id: "3-1-0".into(),
            sku: 7,
            user: "u".into(),
            qty: 1,
            user_seq: 1,
            shard: 3,
            home: 1,
            request_id: Some("r".into()),
            ts_ms: 1,
            gen: 0,
        };
        let fields: Vec<String> = record
            .encode()
            .into_iter()
            .flat_map(|(k, v)| [k.to_owned(), v])
            .collect();
        assert!(names("1-0", &fields, 7, "u", "r"), "{fields:?}");
        assert!(!names("1-0", &fields, 8, "u", "r"));
        assert!(!names("1-0", &fields, 7, "v", "r"));
        assert!(!names("1-0", &fields, 7, "u", "s"));
        // The same text under a version this reader does not know names nothing: its parts
        // may mean something else.
        let unknown = vec!["c2".to_owned(), fields[1].clone()];
        assert!(!names("1-0", &unknown, 7, "u", "r"), "{unknown:?}");
    }
}
