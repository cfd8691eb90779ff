//! `consumer poison replay`: poison entries applied once their cause is fixed. Each kept
//! entry's fields decode back to its claim record (the record codec, as the reader
//! decodes a stream entry), and the record goes in through a batch's ledger path with the
//! poison row deleted in the same transaction (`ledger::replay`): replaying twice, or a
//! claim the ledger already holds, changes nothing. An entry that still fails stays poison
//! and is reported with why.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::OpsError;
use ledger::poison::Poison;
use serde::Serialize;
use shard_router::ClaimRecord;
use sqlx::MySqlPool;

/// Which entries to replay.
#[derive(Debug, Clone)]
pub enum Which {
    /// One entry, by stream key and entry id.
    One { stream: String, entry_id: String },
    /// The oldest kept, at most this many.
    Oldest(u32),
}

/// What a replay did.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// Claims the ledger did not have, now stored (their stock taken).
    pub inserted: u64,
    /// Claims the ledger had already (by claim id): only the poison row removed.
    pub already_in_ledger: u64,
    /// Inserted claims a rebuild did not count: listed as late claims, which a running
    /// consumer's sweep counts in Redis.
    pub late: u64,
    /// Entries that still fail, kept as poison.
    pub still_poison: Vec<Failed>,
}

#[derive(Debug, Serialize)]
pub struct Failed {
    pub stream: String,
    pub entry_id: String,
    pub error: String,
}

/// Replays `which`. An entry named that is not kept is an error, and nothing changes.
pub async fn replay(pool: &MySqlPool, which: Which, t: Duration) -> Result<Report, OpsError> {
    let entries = match which {
        Which::One { stream, entry_id } => {
            match ledger::poison::get(pool, &stream, &entry_id, t).await? {
                Some(p) => vec![p],
                None => {
                    return Err(OpsError::NotFound(format!(
                        "no poison entry {entry_id} of stream {stream}"
                    )))
                }
            }
        }
        Which::Oldest(limit) => ledger::poison::list(pool, limit, t).await?,
    };
    let mut out = Report::default();
    for p in &entries {
        let failed = |error: String| Failed {
            stream: p.stream.clone(),
            entry_id: p.entry_id.clone(),
            error,
        };
        let record = match decode(p) {
            Ok(r) => r,
            Err(e) => {
                out.still_poison.push(failed(e));
                continue;
            }
        };
        let row = consumer::rows::row(&record);
        match ledger::replay::replay(pool, &row, &p.stream, &p.entry_id, t).await {
            Ok(Some(s)) => {
                out.inserted += s.inserted as u64;
                out.already_in_ledger += s.redelivered as u64;
                out.late += s.late.len() as u64;
            }
            // Replayed meanwhile by another run: nothing left to do for it.
            Ok(None) => {}
            Err(e) => out.still_poison.push(failed(e.to_string())),
        }
    }
    if !out.still_poison.is_empty() {
        tracing::warn!(
            left = out.still_poison.len(),
            "poison entries still refused"
        );
    }
    Ok(out)
}

/// The claim record a poison entry was kept from: the reader and the writer keep an entry
/// under its stream entry id (the claim id is made of it) with its fields as written, so
/// it decodes as the reader decodes a stream entry, a record of a version this build does
/// not know included (still poison).
pub fn decode(p: &Poison) -> Result<ClaimRecord, String> {
    let fields: BTreeMap<String, String> = serde_json::from_str(&p.fields)
        .map_err(|e| format!("fields are not a JSON object of strings: {e}"))?;
    ClaimRecord::decode(
        &p.entry_id,
        fields.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
    )
    .map_err(|e| e.to_string())
}
