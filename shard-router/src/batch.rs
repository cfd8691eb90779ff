//! Group commit of claim scripts, per shard (per server on a single Redis). Claims for one
//! shard that arrive while that shard's previous batch is in flight go to Redis together
//! as one pipeline: one write and one read for N claims instead of N each, which the
//! gateway's loopback writes and Redis's reads both pay per call. At low load a batch is
//! one claim and costs what a plain call costs, plus a task hand-off.
//!
//! Each claim stays its own EVALSHA, so atomicity and order are unchanged: Redis runs a
//! pipeline's scripts one after another, in the order they were queued. One script running
//! a whole batch (a `pcall` per claim) would save little of Redis's work per claim
//! (`bench/redis_claim_batch.sh`, docs/BENCHMARKS.md "Redis CPU per claim with the
//! consumer running"), so it was not built. All of a batch's keys share the shard's hash
//! tag, so on a cluster the pipeline goes to one node. On a single Redis every shard lives
//! on the one server, so all shards share one queue: more claims per pipeline. The
//! figures are in docs/BENCHMARKS.md "Figures behind the gateway's group commit and
//! allocator".
//!
//! With replica durability the pipeline ends with one `WAIT`: it runs on the connection
//! that ran the batch's scripts (one pipeline is one write on one connection), so its count
//! covers exactly those writes, and a reconnect between script and WAIT fails the whole
//! pipeline instead of confirming nothing. Claims that queue while a batch (and its WAIT)
//! is in flight go out with the next one and share its WAIT: group commit for WAIT too.
//! The WAIT asks for every replica the shard's master counted online (past its sync) at
//! the last health probe (`health.rs`, at least one), and a batch fewer of them
//! acknowledged is unconfirmed: a claim resting on one replica of two is lost when the other is promoted.
//! That count is at most one probe interval old, so the pipeline ends with `INFO
//! replication` after its WAIT: a replica online by then that the WAIT did not ask for
//! makes the batch unconfirmed (it may hold nothing of it, and a failover may promote it),
//! and the count it read replaces the probe's for the next batches (so the first batch
//! after a replica came online answers 503 unconfirmed; a retry with its request id is
//! replayed under a fence). One the master dropped since the count was taken makes one
//! batch wait in vain. A replica still in its sync is not counted: it acknowledges nothing
//! before it holds the master's data, and a failover does not prefer it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redis::{Cmd, RedisError, RedisResult, Value};
use tokio::sync::oneshot;

use crate::conn::RedisConn;
use crate::placement::ShardId;
use crate::replication::ReplicationInfo;
use near::Near;

/// Most scripts in one pipeline, which bounds one batch's reply and the wait of its last
/// claim behind the others.
const MAX_BATCH: usize = 64;

/// A caller waiting in a group queue; it is "open" while somebody waits for its answer.
trait Waiting {
    fn is_open(&self) -> bool;
}

/// The queue behind one group commit: callers push, one flush task at a time takes the
/// next group. Pushing onto an idle queue hands it to the caller, who must start a flush
/// task; that task owns the queue until it finds no open caller left.
struct GroupQueue<T> {
    inner: Mutex<(Vec<T>, bool)>,
}

impl<T: Waiting> GroupQueue<T> {
    fn new() -> Self {
        Self {
            inner: Mutex::new((Vec::new(), false)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<T>, bool)> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item`; true when the caller must start the flush task.
    fn push(&self, item: T) -> bool {
        let mut q = self.lock();
        q.0.push(item);
        !std::mem::replace(&mut q.1, true)
    }

    /// The next group (at most `max`, callers that gave up dropped), or `None` once none
    /// is left, which releases the queue.
    fn next(&self, max: usize) -> Option<Vec<T>> {
        let mut q = self.lock();
        q.0.retain(T::is_open);
        if q.0.is_empty() {
            q.1 = false;
            return None;
        }
        let n = q.0.len().min(max);
        Some(q.0.drain(..n).collect())
    }

    /// The flush task's hold on the queue, released on any exit (see [`Owner`]).
    fn own(&self) -> Owner<'_, T> {
        Owner(self)
    }
}

/// Releases a queue if its flush task ends any other way than by finding it empty (a
/// panic, or the runtime dropping the task at shutdown), so the next caller starts a new
/// flush instead of waiting on one that is gone. After [`GroupQueue::next`] returned
/// `None` the queue is already released, and may be owned by a new task: the flush then
/// forgets its `Owner` instead of dropping it.
struct Owner<'a, T: Waiting>(&'a GroupQueue<T>);

impl<T: Waiting> Drop for Owner<'_, T> {
    fn drop(&mut self) {
        self.0.lock().1 = false;
    }
}

/// A script's reply and, with replica durability, how many replicas the batch's own WAIT
/// counted (`None` without durability).
pub(crate) type BatchReply = (Value, Option<u32>);

struct Pending {
    cmd: Cmd,
    reply: oneshot::Sender<RedisResult<BatchReply>>,
}

impl Waiting for Pending {
    fn is_open(&self) -> bool {
        !self.reply.is_closed()
    }
}

/// The per-shard queues of one client (clones of a `StockClient` share them).
pub(crate) struct Batcher {
    queues: Vec<GroupQueue<Pending>>,
    timeout: Duration,
    /// `WAIT <replicas> <ms>` closing every pipeline (replica durability), `None` without.
    wait: Option<Duration>,
    /// Per shard: the replicas its master counted online at the last probe.
    replicas: Vec<AtomicU32>,
    /// Where flush tasks run: the runtime the client was connected on, beside the
    /// connection's own tasks (the gateway gives those a runtime of their own, so a
    /// saturated request runtime does not delay every batch by a pass of its queue).
    spawner: tokio::runtime::Handle,
    /// A second connection made on the callers' runtime ([`Batcher::attach_near`]): a
    /// batch goes through it, its flush task there too, while that runtime is idle.
    near: OnceLock<Near>,
}

impl Batcher {
    /// `wait` is capped below `timeout` so the pipeline's bound covers the WAIT's block.
    /// Must be called on a tokio runtime: flush tasks are spawned on it.
    pub(crate) fn new(shards: u16, timeout: Duration, wait: Option<Duration>) -> Self {
        Self {
            queues: (0..shards).map(|_| GroupQueue::new()).collect(),
            timeout: timeout + wait.unwrap_or_default(),
            wait: wait.map(|w| w.max(Duration::from_millis(1))),
            replicas: (0..shards).map(|_| AtomicU32::new(0)).collect(),
            spawner: tokio::runtime::Handle::current(),
            near: OnceLock::new(),
        }
    }

    /// Sends batches through `conn`, made on the current runtime, while that runtime is
    /// idle ([`Near::idle`]: a worker parked now or within 2 ms, so its queues were
    /// empty). A batch then runs where its callers run and no claim crosses threads: the
    /// cross-thread wake-ups of a hop to the client's runtime and back cost about as many
    /// system calls per claim as the claim's own I/O (docs/BENCHMARKS.md "system calls
    /// per claim"). While every worker stays busy, batches go through the client's
    /// connection on its own runtime, as without `conn`: there a reply does not wait
    /// behind the busy workers' queues (`gateway/src/redis_runtime.rs`). Each batch
    /// chooses; one pipeline (and its WAIT) always goes on one connection, and a shard's
    /// batches still go one after another.
    pub(crate) fn attach_near(&self, conn: RedisConn) {
        let _ = self.near.set(Near::new(conn));
    }

    /// The near connection when its runtime is idle enough ([`Near::idle`]).
    fn near_if_idle(&self) -> Option<&RedisConn> {
        let near = self.near.get()?;
        near.idle().then_some(&near.conn)
    }

    /// Records how many replicas `shard`'s master counts online (`health.rs`).
    pub(crate) fn set_replicas(&self, shard: ShardId, n: u32) {
        if let Some(r) = self.replicas.get(usize::from(shard)) {
            r.store(n, Ordering::Relaxed);
        }
    }

    /// How many replicas a WAIT on `shard` asks for: every one last counted, at least one.
    pub(crate) fn replicas_to_wait(&self, shard: ShardId) -> u32 {
        self.replicas
            .get(usize::from(shard))
            .map_or(0, |r| r.load(Ordering::Relaxed))
            .max(1)
    }

    /// Sends `cmd` with the next batch of `shard` and waits for its own reply. The caller
    /// bounds the wait; a caller that gave up before its batch left is not sent at all.
    pub(crate) async fn call(
        self: &Arc<Self>,
        conn: &RedisConn,
        shard: ShardId,
        cmd: Cmd,
    ) -> RedisResult<BatchReply> {
        // One Redis serves every shard: one queue, so claims of all shards share a pipeline.
        let shard = if conn.is_cluster() { shard } else { 0 };
        let Some(queue) = self.queues.get(usize::from(shard)) else {
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "no such shard",
            )));
        };
        let (tx, rx) = oneshot::channel();
        if queue.push(Pending { cmd, reply: tx }) {
            // Its own task: a caller dropped mid-flush must not strand the others' replies.
            self.start_flush(conn.clone(), shard, self.near_if_idle().is_some());
        }
        rx.await.unwrap_or_else(|_| {
            Err(io_error(
                std::io::ErrorKind::ConnectionAborted,
                "claim batch dropped",
            ))
        })
    }

    /// Starts a flush task for `shard`: on the callers' runtime through the near
    /// connection when `near`, else on the client's runtime through `conn`.
    fn start_flush(self: &Arc<Self>, conn: RedisConn, shard: ShardId, near: bool) {
        let this = Arc::clone(self);
        let task = async move {
            if let Some(near) = this.flush(&conn, shard, near).await {
                this.start_flush(conn, shard, near);
            }
        };
        match self.near.get().filter(|_| near) {
            Some(n) => drop(n.rt.spawn(task)),
            None => drop(self.spawner.spawn(task)),
        }
    }

    /// Flushes `shard`'s queue until it is empty (`None`), each batch through the near
    /// connection while its runtime is idle enough, else through `conn`. When that choice
    /// changes, the task stops, the queue still owned, and answers where the flush goes
    /// on (`start_flush`): a batch's task runs beside its connection, so a reply crosses
    /// no thread to reach it.
    async fn flush(&self, conn: &RedisConn, shard: ShardId, on_near: bool) -> Option<bool> {
        let queue = &self.queues[usize::from(shard)];
        let owner = queue.own();
        loop {
            let near = self.near_if_idle();
            if near.is_some() != on_near {
                // The queue goes on with the next task: it stays owned.
                std::mem::forget(owner);
                return Some(near.is_some());
            }
            let mut conn = near.unwrap_or(conn).clone();
            let Some(batch) = queue.next(MAX_BATCH) else {
                std::mem::forget(owner);
                return None;
            };
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            let mut replies = Vec::with_capacity(batch.len());
            for p in batch {
                pipe.add_command(p.cmd);
                replies.push(p.reply);
            }
            let need = self.replicas_to_wait(shard);
            if let Some(wait) = self.wait {
                // No key, so on a cluster the pipeline still goes to the scripts' node.
                pipe.cmd("WAIT").arg(need).arg(wait.as_millis() as u64);
                pipe.cmd("INFO").arg("replication");
            }
            let expected = replies.len() + 2 * usize::from(self.wait.is_some());
            let answer = tokio::time::timeout(
                self.timeout,
                pipe.query_async::<Vec<RedisResult<Value>>>(&mut conn),
            )
            .await;
            match answer {
                Ok(Ok(mut values)) if values.len() == expected => {
                    let acked = self
                        .wait
                        .map(|_| self.replicas_acked(shard, need, &mut values));
                    for (tx, v) in replies.into_iter().zip(values) {
                        let _ = tx.send(v.map(|v| (v, acked)));
                    }
                }
                Ok(Ok(values)) => {
                    let e = io_error(
                        std::io::ErrorKind::InvalidData,
                        &format!("{} replies to {expected} commands", values.len()),
                    );
                    send_all(replies, &e);
                }
                // A pipeline that fails as a whole (a dropped connection; on a cluster, one
                // MOVED or CLUSTERDOWN reply fails them all) may have run some of its
                // scripts: for more than one (or one and its WAIT), nobody can say
                // "nothing was taken".
                Ok(Err(e)) if expected > 1 => {
                    let e = io_error(
                        std::io::ErrorKind::ConnectionAborted,
                        &format!("claim batch failed, some scripts may have run: {e}"),
                    );
                    send_all(replies, &e);
                }
                Ok(Err(e)) => send_all(replies, &e),
                Err(_) => send_all(
                    replies,
                    &io_error(std::io::ErrorKind::TimedOut, "claim batch timed out"),
                ),
            }
        }
    }

    /// What the pipeline's closing `WAIT` and `INFO replication` (popped off `values`) say:
    /// the replicas that acknowledged the batch, or 0 when that is fewer than every one
    /// online (`need`, or more by the INFO just read; module doc). Records the INFO's count
    /// for the next batches.
    fn replicas_acked(
        &self,
        shard: ShardId,
        need: u32,
        values: &mut Vec<RedisResult<Value>>,
    ) -> u32 {
        let online = match values.pop() {
            Some(Ok(v)) => redis::from_redis_value::<String>(v)
                .ok()
                .map(|info| ReplicationInfo::parse(&info)),
            _ => None,
        };
        let waited = values.pop();
        // Unreadable: nobody knows how many replicas had to answer.
        let Some(online) = online else { return 0 };
        self.set_replicas(shard, online.online_replicas);
        let all = need.max(online.replicas_to_wait());
        match waited {
            Some(Ok(Value::Int(n))) => {
                Some(crate::replication::replica_count(n)).filter(|&n| n >= all)
            }
            // An error reply (or anything else) confirms nothing.
            _ => None,
        }
        .unwrap_or(0)
    }
}

fn send_all(replies: Vec<oneshot::Sender<RedisResult<BatchReply>>>, e: &RedisError) {
    for tx in replies {
        let _ = tx.send(Err(e.clone()));
    }
}

fn io_error(kind: std::io::ErrorKind, msg: &str) -> RedisError {
    RedisError::from(std::io::Error::new(kind, msg.to_owned()))
}

mod near;
#[cfg(test)]
mod tests;
