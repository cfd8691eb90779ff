//! Claim ids between Redis and the model.
//!
//! Redis's claim id is `<shard>-<ms>-<seq>` (the shard id the script was given, then the
//! stream entry id); the model's is the shard and an ordinal its stream counts 1, 2, 3… in
//! XADD order. Each real entry id gets the next ordinal of its shard the first time it is
//! seen (a reply names it before any state read does), so both sides count the same XADDs
//! the same way; a Redis that appended where the model did not shows up as a state diff.
//!
//! Ids the test makes up (releases and stored answers of claims that never were) use the
//! entry ids `0-<k>`, which XADD `*` never hands out, as ordinals from [`FAKE_BASE`] on.

use std::collections::HashMap;

use model::keyspace::{ClaimId, ShardId};

pub(crate) const FAKE_BASE: u32 = 1_000_000;

#[derive(Default)]
struct ShardIds {
    by_real: HashMap<String, u32>,
    /// `real[ordinal - 1]`.
    real: Vec<String>,
}

pub(crate) struct Ids {
    shards: Vec<ShardIds>,
}

impl Ids {
    pub(crate) fn new(shards: ShardId) -> Self {
        Self {
            shards: (0..shards).map(|_| ShardIds::default()).collect(),
        }
    }

    /// The ordinal of stream entry `entry` of `shard`, handing out the next one if new.
    pub(crate) fn entry_to_model(&mut self, shard: ShardId, entry: &str) -> Result<u32, String> {
        if let Some(k) = entry.strip_prefix("0-") {
            let k: u32 = k
                .parse()
                .map_err(|_| format!("bad made-up entry id {entry:?}"))?;
            return Ok(FAKE_BASE + k);
        }
        let (ms, seq) = entry
            .split_once('-')
            .ok_or_else(|| format!("not a stream entry id: {entry:?}"))?;
        if ms.parse::<u64>().is_err() || seq.parse::<u64>().is_err() {
            return Err(format!("not a stream entry id: {entry:?}"));
        }
        let ids = self
            .shards
            .get_mut(usize::from(shard))
            .ok_or_else(|| format!("entry {entry:?} of unknown shard {shard}"))?;
        if let Some(&n) = ids.by_real.get(entry) {
            return Ok(n);
        }
        ids.real.push(entry.to_owned());
        let n = u32::try_from(ids.real.len()).expect("fewer than 2^32 entries");
        ids.by_real.insert(entry.to_owned(), n);
        Ok(n)
    }

    /// `<shard>-<ms>-<seq>` → the model's claim id.
    pub(crate) fn model_claim(&mut self, claim_id: &str) -> Result<ClaimId, String> {
        let (shard, entry) = claim_id
            .split_once('-')
            .ok_or_else(|| format!("not a claim id: {claim_id:?}"))?;
        let shard: ShardId = shard
            .parse()
            .map_err(|_| format!("claim id with a bad shard: {claim_id:?}"))?;
        Ok(ClaimId {
            shard,
            entry: self.entry_to_model(shard, entry)?,
        })
    }

    pub(crate) fn entry_to_real(&self, shard: ShardId, entry: u32) -> String {
        if entry >= FAKE_BASE {
            return format!("0-{}", entry - FAKE_BASE);
        }
        let real = self.shards[usize::from(shard)]
            .real
            .get(entry as usize - 1)
            .unwrap_or_else(|| panic!("the test named entry {entry} of shard {shard}, never seen"));
        real.clone()
    }

    pub(crate) fn to_real(&self, c: ClaimId) -> String {
        format!("{}-{}", c.shard, self.entry_to_real(c.shard, c.entry))
    }

    /// Entries seen on `shard` (the model's `last_id` when the two agree).
    pub(crate) fn count(&self, shard: ShardId) -> u32 {
        u32::try_from(self.shards[usize::from(shard)].real.len()).expect("fits")
    }
}
