//! The Redis connection's own runtime. redis-rs runs each connection's driver (and, on a
//! cluster, the task that routes every command and completes every reply) as a task of
//! the runtime the connection was made on. On the request runtime those tasks queue behind
//! every HTTP connection task: when the runtime is saturated (a rush, a debug build, a
//! small machine) each Redis call waits one full pass of that queue per hop, and a cluster
//! call has more hops than a single-Redis one. That is how a debug gateway on a 2-core
//! machine answered 503 ("redis replay: timed out") to a quarter of a cluster demo's
//! requests while the single-Redis demo answered none.
//!
//! So the client is connected on a small runtime of its own: its background tasks (and
//! the claim batches' flush tasks, spawned where the client was connected, see
//! `shard-router/src/batch.rs`) get a thread the operating system schedules by itself,
//! and only the caller's final wake-up is left to the request runtime. The runtime lives
//! for the process (a static: a runtime cannot be dropped from async code); its tasks end
//! when the last handle of the connection is dropped, and it then idles.
//!
//! That hop between the two runtimes costs cross-thread wake-ups on every claim batch:
//! about as many system calls per claim as the claim's own I/O at low load
//! (docs/BENCHMARKS.md "system calls per claim"). So by default (`adaptive`) the client
//! also gets a second connection made on the request runtime, and a claim batch goes
//! through it, with its flush task on the request runtime, while one of that runtime's
//! workers is parked or parked within 2 ms: then its queues were empty, and no claim
//! crosses threads. While every worker stays busy, batches take the own runtime's
//! connection as above (`shard-router/src/batch.rs`, `Batcher::attach_near`).
//! `--redis-runtime own` is the hop for every batch; `shared` connects only on the
//! request runtime (no hop, and no shelter: under the saturated runtime of
//! `gateway/tests/it/redis_runtime.rs` it answered 503, docs/BENCHMARKS.md).

use std::sync::OnceLock;

use shard_router::{StockClient, StockConfig, StockError};

/// Where the Redis connection's tasks run (`--redis-runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RedisRuntime {
    /// A runtime thread of their own, and claim batches on the request runtime while it
    /// has an idle worker (see the module doc).
    #[default]
    Adaptive,
    /// A runtime thread of their own, for every call.
    Own,
    /// The request runtime: no hop, but behind every HTTP connection task in a rush.
    Shared,
}

/// Threads of the connection runtime: its tasks only move bytes between sockets and
/// channels.
const THREADS: usize = 1;

fn runtime() -> Result<&'static tokio::runtime::Runtime, StockError> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(THREADS)
        .thread_name("redis-conn")
        .enable_all()
        .build()
        .map_err(|e| unavailable(format!("cannot start its runtime: {e}")))?;
    // Only the probe task connects, so no race is expected; a runtime that lost one anyway
    // is dropped on a plain thread (dropping a runtime in async code panics).
    if let Err(extra) = RUNTIME.set(rt) {
        std::thread::spawn(move || drop(extra));
    }
    RUNTIME
        .get()
        .ok_or_else(|| unavailable("no runtime".into()))
}

fn unavailable(detail: String) -> StockError {
    StockError::Protocol {
        op: "connect",
        detail,
    }
}

/// [`StockClient::connect`] on the runtime `on` names.
pub(crate) async fn connect(cfg: StockConfig, on: RedisRuntime) -> Result<StockClient, StockError> {
    if on == RedisRuntime::Shared {
        return StockClient::connect(cfg).await;
    }
    let task = runtime()?.spawn(StockClient::connect(cfg));
    let client = task
        .await
        .unwrap_or_else(|e| Err(unavailable(format!("connect task failed: {e}"))))?;
    // Without its second connection the client is `own`: every batch takes the hop. A
    // gateway that could reach Redis once must not stay unready for want of the second.
    if on == RedisRuntime::Adaptive {
        if let Err(e) = client.connect_near().await {
            tracing::warn!(error = %e, "second redis connection failed; every claim batch takes the hop");
        }
    }
    Ok(client)
}
