//! The selling scripts (claim, take, settle) as this client loads them: each body starts
//! with `lua/guard.lua` and the run_id of the one Redis process it was loaded on, so it
//! refuses to sell where the ledger has not vouched for that process (`lua/guard.lua` says
//! why). A body is loaded per process: on a single Redis one for every shard, on a cluster
//! one per shard's master.
//!
//! Why the run_id is in the body and not an argument: redis-rs reconnects on its own, so
//! the client cannot know which process a call reaches. A body reaches only the process
//! that loaded it (Redis 7 neither persists nor replicates scripts), and [`learn`] loads it
//! in one pipeline with the `INFO` that names the process; a call reaching any other
//! process answers NOSCRIPT, and the client learns that process before it sells there.

use std::sync::{Arc, Mutex};

use redis::{Script, Value};

use crate::conn::RedisConn;
use crate::error::StockError;
use crate::placement::{slot_of_tag, Placement, ShardId};

const GUARD: &str = include_str!("../../lua/guard.lua");

/// Which selling script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Selling {
    Claim,
    Take,
    Settle,
}

/// The selling scripts for one Redis process.
pub(crate) struct Guarded {
    claim: Body,
    take: Body,
    settle: Body,
}

/// A script and its source (to load it by `SCRIPT LOAD` inside a pipeline).
struct Body {
    src: String,
    script: Script,
}

impl Body {
    fn new(src: String) -> Self {
        let script = Script::new(&src);
        Self { src, script }
    }
}

/// A selling script's body as it is loaded on the Redis process `run_id` names:
/// `lua/guard.lua` under that run_id, then the script.
fn guarded(run_id: &str, src: &str) -> String {
    format!("local SERVER = '{run_id}'\n{GUARD}{src}")
}

/// `lua/claim.lua` as this client loads it on the process `run_id` names (for a floor that
/// runs the same script without the client: `bench/src/stack/baseline_claim.rs`).
pub fn claim_body(run_id: &str) -> String {
    guarded(run_id, include_str!("../../lua/claim.lua"))
}

impl Guarded {
    fn new(run_id: &str) -> Self {
        let body = |src: &str| Body::new(guarded(run_id, src));
        Self {
            claim: Body::new(claim_body(run_id)),
            take: body(include_str!("../../lua/take.lua")),
            settle: body(include_str!("../../lua/settle.lua")),
        }
    }

    pub(crate) fn script(&self, which: Selling) -> &Script {
        let b = match which {
            Selling::Claim => &self.claim,
            Selling::Take => &self.take,
            Selling::Settle => &self.settle,
        };
        &b.script
    }
}

/// Per process slot (one on a single Redis, one per shard on a cluster): the scripts
/// loaded there, and a lock so that one caller learns a new process while the others wait.
/// A slot is shared by the client's two connections (`batch.rs`, `Via`), which after a
/// cluster failover may reach different processes for the slot until a MOVED corrects one.
/// Its body names one process and runs only there, so a body learned through one
/// connection answers NOSCRIPT through the other, never runs unguarded, and is replaced
/// only if still current (`relearn`'s `stale`) by learning through the connection that
/// answered (`StockClient::script_batched`).
pub(crate) struct Guards {
    current: Vec<Mutex<Option<Arc<Guarded>>>>,
    learning: Vec<tokio::sync::Mutex<()>>,
}

impl Guards {
    pub(crate) fn new(shards: u16) -> Self {
        Self {
            current: (0..shards).map(|_| Mutex::new(None)).collect(),
            learning: (0..shards).map(|_| tokio::sync::Mutex::new(())).collect(),
        }
    }

    fn slot(conn: &RedisConn, shard: ShardId) -> usize {
        if conn.is_cluster() {
            usize::from(shard)
        } else {
            0
        }
    }

    /// The scripts already loaded on `shard`'s master, if any (no learning, no await).
    pub(crate) fn cached(&self, conn: &RedisConn, shard: ShardId) -> Option<Arc<Guarded>> {
        self.get(Self::slot(conn, shard))
    }

    fn get(&self, i: usize) -> Option<Arc<Guarded>> {
        let c = self.current.get(i)?;
        c.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The scripts loaded on `shard`'s master, learning it first when none are.
    pub(crate) async fn for_shard(
        &self,
        conn: &RedisConn,
        placement: &Placement,
        shard: ShardId,
    ) -> Result<Arc<Guarded>, StockError> {
        let i = Self::slot(conn, shard);
        if let Some(g) = self.get(i) {
            return Ok(g);
        }
        self.relearn(conn, placement, shard, None).await
    }

    /// Learns `shard`'s master again after `stale` answered NOSCRIPT (another process, or
    /// a `SCRIPT FLUSH`); a caller that finds it already replaced takes the replacement.
    pub(crate) async fn relearn(
        &self,
        conn: &RedisConn,
        placement: &Placement,
        shard: ShardId,
        stale: Option<&Arc<Guarded>>,
    ) -> Result<Arc<Guarded>, StockError> {
        let i = Self::slot(conn, shard);
        let Some(lock) = self.learning.get(i) else {
            return Err(StockError::InvalidArgument(format!("no shard {shard}")));
        };
        let _learning = lock.lock().await;
        if let Some(g) = self.get(i) {
            if stale.is_none_or(|s| !Arc::ptr_eq(s, &g)) {
                return Ok(g);
            }
        }
        let g = Arc::new(learn(conn, placement, shard).await?);
        *self.current[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&g));
        Ok(g)
    }
}

fn major_version(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))?
        .split('.')
        .next()?
        .parse()
        .ok()
}

pub(crate) fn run_id_of(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Reads the run_id of `shard`'s master, then loads the scripts naming it and reads it
/// again in one pipeline: equal, the scripts are on the process they name. Otherwise (a
/// restart or failover between the two), the scripts just loaded are flushed from
/// whichever process took them, and the caller's call fails as "restoring": nothing ran.
async fn learn(
    conn: &RedisConn,
    placement: &Placement,
    shard: ShardId,
) -> Result<Guarded, StockError> {
    let slot = slot_of_tag(placement.tag(shard));
    let err = |source| StockError::Redis {
        op: "learn server",
        source,
    };
    let mut c = conn.clone();
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let first = c.on_slot_master(info, slot).await.map_err(err)?;
    let first: String =
        redis::from_redis_value(first).map_err(|e| err(redis::RedisError::from(e)))?;
    // Redis 6 and older persist scripts in the RDB and AOF and send them to replicas: a
    // body naming one process would reach the next, and the guard would guard nothing.
    if major_version(&first).is_none_or(|v| v < 7) {
        return Err(StockError::Protocol {
            op: "learn server",
            detail: "Redis 7.0 or later is required (older ones persist and replicate scripts)"
                .into(),
        });
    }
    let Some(run_id) = run_id_of(&first) else {
        return Err(StockError::Protocol {
            op: "learn server",
            detail: "INFO server has no run_id".into(),
        });
    };
    let g = Guarded::new(run_id);
    let mut pipe = redis::pipe();
    for s in [&g.claim, &g.take, &g.settle] {
        pipe.cmd("SCRIPT").arg("LOAD").arg(&s.src);
    }
    pipe.cmd("INFO").arg("server");
    let values = c.pipeline_on_slot_master(&pipe, slot).await.map_err(err)?;
    let again = match values.last() {
        Some(v @ Value::BulkString(_)) | Some(v @ Value::VerbatimString { .. }) => {
            redis::from_redis_value::<String>(v.clone()).ok()
        }
        _ => None,
    };
    if again.as_deref().and_then(run_id_of) == Some(run_id) {
        return Ok(g);
    }
    // Flushed from the process that answered the second INFO, which took the loads (one
    // pipeline, one connection); a failed flush is tried again, within the caller's bound.
    for _ in 0..3 {
        let mut flush = redis::pipe();
        flush.cmd("SCRIPT").arg("FLUSH");
        if c.pipeline_on_slot_master(&flush, slot).await.is_ok() {
            break;
        }
    }
    Err(StockError::Restoring { op: "learn server" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_id_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:3fa2b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6\r\ntcp_port:6379\r\n";
        assert_eq!(
            run_id_of(info),
            Some("3fa2b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6")
        );
        assert_eq!(run_id_of("# Server\r\nrun_id:\r\n"), None);
        assert_eq!(major_version(info), Some(7));
        assert_eq!(major_version("redis_version:6.2.14\r\n"), Some(6));
        assert_eq!(run_id_of("run_id:x' end\r\n"), None);
    }

    #[test]
    fn bodies_of_two_processes_differ_and_name_their_process() {
        let a = Guarded::new("aa");
        let b = Guarded::new("bb");
        assert_ne!(a.claim.script.get_hash(), b.claim.script.get_hash());
        assert!(a.settle.src.starts_with("local SERVER = 'aa'\n"));
    }
}
