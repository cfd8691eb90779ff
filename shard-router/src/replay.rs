//! The replay check on its own: what a request id already got, read without running a
//! script. The gateway uses it where it would otherwise answer from memory (SKU cached sold
//! out, window closed), so a retried success still gets its first answer there.
//!
//! One plain `GET` of the key `claim.lua` and `settle.lua` write on the user's home shard:
//! cheaper for Redis than any script, and read-only, so it can never take a unit.

use redis::AsyncCommands;

use crate::client::StockClient;
use crate::error::StockError;
use crate::keys::ShardKeys;
use crate::outcome::Claim;

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
        let home = self.placement().home_shard(sku, width, user);
        let key = ShardKeys::new(self.placement(), home, sku).request(user, Some(request_id));
        let mut conn = self.conn();
        let seen: Option<String> = self.bounded("replay", conn.get(key)).await?;
        let Some(seen) = seen else {
            return Ok(None);
        };
        if seen == "P" {
            return Ok(Some(StoredAnswer::InProgress));
        }
        parse(sku, &seen).map(|c| Some(StoredAnswer::Claimed(c)))
    }
}

/// `claim_id|shard|qty`, as `claim.lua` and `settle.lua` store it.
fn parse(sku: u64, stored: &str) -> Result<Claim, StockError> {
    let bad = || StockError::Protocol {
        op: "replay",
        detail: format!("stored answer {stored:?} is not claim_id|shard|qty"),
    };
    let mut parts = stored.split('|');
    let (Some(claim_id), Some(shard), Some(qty), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    Ok(Claim {
        claim_id: claim_id.to_owned(),
        sku,
        shard: shard.parse().map_err(|_| bad())?,
        qty: qty.parse().map_err(|_| bad())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_scripts_store() {
        let c = parse(7, "3-1700000000000-0|3|2").unwrap();
        assert_eq!(
            (c.claim_id.as_str(), c.sku, c.shard, c.qty),
            ("3-1700000000000-0", 7, 3, 2)
        );
        for bad in ["", "a|b", "1-0|x|1", "1-0|1|1|1", "1-0|1|-1"] {
            assert!(parse(7, bad).is_err(), "{bad:?}");
        }
    }
}
