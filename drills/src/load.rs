//! A bounded claim load against the stock core: `tasks` loops, each claiming with fresh
//! users until `duration` passes, recording every answer. With `Durability::Replica` the
//! client must be built with `StockConfig::replica_ack`: each claim's pipeline carries its
//! WAIT, and a claim counts as acknowledged only when that WAIT confirmed it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shard_router::protocol::{self, Confirmation, LocalEmptyShards};
use shard_router::{now_ms, Claim, ClaimOutcome, ClaimRequest, SkuMeta, StockClient, StockError};

/// What a client is told counts as an acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledged when the primary ran the script.
    None,
    /// Acknowledged only when the claim's own `WAIT 1` confirmed a replica has it.
    Replica,
}

/// Everything the clients saw.
#[derive(Debug, Default)]
pub struct Answers {
    pub acknowledged: Vec<(String, Claim)>,
    /// Successes whose replication was not confirmed (not acknowledged).
    pub unconfirmed: u64,
    pub sold_out: u64,
    pub errors: u64,
    /// Errors where Redis may or may not have run the script.
    pub ambiguous: u64,
    pub other: u64,
    /// When the last error was seen: with the fault's start, the time to recover.
    pub last_error: Option<Instant>,
}

impl Answers {
    /// Counts one answer to `user`'s claim; a sold-out one stops the load.
    fn count(
        &mut self,
        user: String,
        out: Result<ClaimOutcome, StockError>,
        confirmed: bool,
        stop: &AtomicBool,
    ) {
        match out {
            Ok(ClaimOutcome::Claimed { claim, .. }) if confirmed => {
                self.acknowledged.push((user, claim));
            }
            Ok(ClaimOutcome::Claimed { .. }) => self.unconfirmed += 1,
            Ok(ClaimOutcome::SoldOut) => {
                self.sold_out += 1;
                stop.store(true, Ordering::Relaxed);
            }
            Ok(_) => self.other += 1,
            Err(ref e) => {
                self.errors += 1;
                self.ambiguous += u64::from(e.is_ambiguous());
                self.last_error = Some(Instant::now());
            }
        }
    }
}

/// Runs the load; returns when every task is done (at most `duration` plus one Redis
/// timeout).
pub async fn run(
    client: &StockClient,
    meta: &SkuMeta,
    tasks: usize,
    duration: Duration,
    durability: Durability,
    users: u64,
) -> Answers {
    let answers = Arc::new(Mutex::new(Answers::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let empties = Arc::new(LocalEmptyShards::default());
    let deadline = Instant::now() + duration;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (client, meta, answers, empties, stop) = (
            client.clone(),
            meta.clone(),
            answers.clone(),
            empties.clone(),
            stop.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                n += 1;
                let req = ClaimRequest {
                    sku: meta.sku,
                    // A stride co-prime with common pool sizes walks the whole pool.
                    user: format!("d{}", (t as u64 * 1_000_003 + n * 7_919) % users.max(1)),
                    qty: 1,
                    request_id: None,
                };
                let out = protocol::claim(
                    &client,
                    &meta,
                    &req,
                    protocol::ClaimOptions::new(empties.as_ref(), now_ms()),
                )
                .await;
                let (out, confirmation) = match out {
                    Ok(claimed) => (Ok(claimed.outcome), claimed.confirmation),
                    Err(e) => (Err(e), Confirmation::NotAsked),
                };
                let confirmed = match durability {
                    Durability::None => true,
                    Durability::Replica => confirmation == Confirmation::Confirmed,
                };
                let failed = out.is_err();
                answers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .count(req.user, out, confirmed, &stop);
                if failed {
                    // Back off a little so a dead node is not hammered in a loop.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("load task");
    }
    Arc::try_unwrap(answers)
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .unwrap_or_else(|_| panic!("answers still shared"))
}
