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
    /// is left, which releases the queue. Items may name a key (`key`): the group's key is
    /// its first item's, else `default`, and the group stops before an item naming another.
    fn next<K: Copy + PartialEq>(
        &self,
        max: usize,
        key: impl Fn(&T) -> Option<K>,
        default: K,
    ) -> Option<(K, Vec<T>)> {
        let mut q = self.lock();
        q.0.retain(T::is_open);
        let Some(first) = q.0.first() else {
            q.1 = false;
            return None;
        };
        let k = key(first).unwrap_or(default);
        let n =
            q.0.iter()
                .take(max)
                .take_while(|t| key(t).is_none_or(|x| x == k))
                .count();
        Some((k, q.0.drain(..n).collect()))
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

/// Which of the client's connections carried a batch: its own, or the near one
/// ([`Batcher::attach_near`]). On a cluster the two keep slot maps of their own, so after
/// a failover they can reach different processes for a while: a NOSCRIPT is answered by
/// the process behind the connection that carried it, and is learned through that one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    Own,
    Near,
}

/// What a caller gets: the connection that carried its batch, and its reply.
pub(crate) type Carried = (Via, RedisResult<BatchReply>);

struct Pending {
    cmd: Cmd,
    /// Goes through this connection, whatever the runtime's load (a retry after NOSCRIPT).
    pin: Option<Via>,
    reply: oneshot::Sender<Carried>,
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
        let _ = self.near.set(Near::new(conn, self.queues.len()));
    }

    /// The near connection when its last probe of `shard` answered ([`Near::usable`]) and
    /// its runtime is idle enough ([`Near::idle`]).
    fn near_if_idle(&self, shard: ShardId) -> Option<&RedisConn> {
        let near = self.near.get()?;
        (near.usable(shard) && near.idle()).then_some(&near.conn)
    }

    /// The near connection, if one is attached (for the health probe).
    pub(crate) fn near_conn(&self) -> Option<RedisConn> {
        self.near.get().map(|n| n.conn.clone())
    }

    /// Records whether the near connection answered the probe of `shard`: while it does
    /// not, `shard`'s batches go through the client's own connection (`health.rs`).
    pub(crate) fn set_near_ok(&self, shard: ShardId, ok: bool) {
        if let Some(n) = self.near.get() {
            n.set_usable(shard, ok);
        }
    }

    /// The connection `via` names (`own` is the client's own).
    pub(crate) fn conn_via(&self, via: Via, own: &RedisConn) -> RedisConn {
        match (via, self.near.get()) {
            (Via::Near, Some(n)) => n.conn.clone(),
            _ => own.clone(),
        }
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

    /// Sends `cmd` with the next batch of `shard` and waits for its own reply, and which
    /// connection carried it; through the one `pin` names, if any. The caller bounds the
    /// wait; a caller that gave up before its batch left is not sent at all.
    pub(crate) async fn call(
        self: &Arc<Self>,
        conn: &RedisConn,
        shard: ShardId,
        cmd: Cmd,
        pin: Option<Via>,
    ) -> Carried {
        // One Redis serves every shard: one queue, so claims of all shards share a pipeline.
        let shard = if conn.is_cluster() { shard } else { 0 };
        let Some(queue) = self.queues.get(usize::from(shard)) else {
            let e = RedisError::from((redis::ErrorKind::Client, "no such shard"));
            return (Via::Own, Err(e));
        };
        let (tx, rx) = oneshot::channel();
        if queue.push(Pending {
            cmd,
            pin,
            reply: tx,
        }) {
            // Its own task: a caller dropped mid-flush must not strand the others' replies.
            self.start_flush(conn.clone(), shard, self.near_if_idle(shard).is_some());
        }
        rx.await.unwrap_or_else(|_| {
            let e = io_error(std::io::ErrorKind::ConnectionAborted, "claim batch dropped");
            (pin.unwrap_or(Via::Own), Err(e))
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
            let near = self.near_if_idle(shard);
            if near.is_some() != on_near {
                // The queue goes on with the next task: it stays owned.
                std::mem::forget(owner);
                return Some(near.is_some());
            }
            let chosen = if near.is_some() { Via::Near } else { Via::Own };
            // A pinned claim (a retry after NOSCRIPT) goes where it is pinned, from this
            // task's runtime too: rare, and only the hop it saves is lost. A batch holds
            // claims for one connection only.
            let Some((via, batch)) = queue.next(MAX_BATCH, |p| p.pin, chosen) else {
                std::mem::forget(owner);
                return None;
            };
            let mut conn = self.conn_via(via, conn);
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
                        let _ = tx.send((via, v.map(|v| (v, acked))));
                    }
                }
                Ok(Ok(values)) => {
                    let e = io_error(
                        std::io::ErrorKind::InvalidData,
                        &format!("{} replies to {expected} commands", values.len()),
                    );
                    send_all(replies, via, &e);
                }
                // A pipeline that fails as a whole (a dropped connection; on a cluster, one
                // MOVED or CLUSTERDOWN reply fails them all) may have run some of its
                // scripts: for more than one (or one and its WAIT), nobody can say
                // "nothing was taken".
                Ok(Err(e)) if expected > 1 => {
                    self.near_failed(via, shard, &e);
                    let e = io_error(
                        std::io::ErrorKind::ConnectionAborted,
                        &format!("claim batch failed, some scripts may have run: {e}"),
                    );
                    send_all(replies, via, &e);
                }
                Ok(Err(e)) => {
                    self.near_failed(via, shard, &e);
                    send_all(replies, via, &e);
                }
                Err(_) => {
                    let e = io_error(std::io::ErrorKind::TimedOut, "claim batch timed out");
                    self.near_failed(via, shard, &e);
                    send_all(replies, via, &e);
                }
            }
        }
    }

    /// A batch through the near connection that failed on the connection itself (closed,
    /// timed out): `shard`'s next batches go through the client's own one until the near
    /// connection answers a probe again (`health.rs`). A MOVED or a script error does not.
    fn near_failed(&self, via: Via, shard: ShardId, e: &RedisError) {
        if via == Via::Near && (e.is_io_error() || e.is_connection_dropped() || e.is_timeout()) {
            self.set_near_ok(shard, false);
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

fn send_all(replies: Vec<oneshot::Sender<Carried>>, via: Via, e: &RedisError) {
    for tx in replies {
        let _ = tx.send((via, Err(e.clone())));
    }
}

fn io_error(kind: std::io::ErrorKind, msg: &str) -> RedisError {
    RedisError::from(std::io::Error::new(kind, msg.to_owned()))
}

mod near;
#[cfg(test)]
mod tests;
