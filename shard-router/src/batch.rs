//! Group commit of claim scripts, per shard. Claims for one shard that arrive while that
//! shard's previous batch is in flight go to Redis together as one pipeline: one write and
//! one read for N claims instead of N each. Loopback writes were ~40% of the gateway's CPU
//! under claim load, and Redis pays per read as well. At low load a batch is one claim and
//! costs what a plain call costs, plus a task hand-off.
//!
//! Each claim stays its own EVALSHA, so atomicity and order are unchanged: Redis runs a
//! pipeline's scripts one after another, in the order they were queued. All of a batch's
//! keys share the shard's hash tag, so on a cluster the pipeline goes to one node.
//!
//! [`WaitGroups`] does the same for replica durability's `WAIT`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Cmd, RedisError, RedisResult, Value};
use tokio::sync::oneshot;

use crate::conn::RedisConn;
use crate::error::StockError;
use crate::placement::ShardId;

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

struct Pending {
    cmd: Cmd,
    reply: oneshot::Sender<RedisResult<Value>>,
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
}

impl Batcher {
    pub(crate) fn new(shards: u16, timeout: Duration) -> Self {
        Self {
            queues: (0..shards).map(|_| GroupQueue::new()).collect(),
            timeout,
        }
    }

    /// Sends `cmd` with the next batch of `shard` and waits for its own reply. The caller
    /// bounds the wait; a caller that gave up before its batch left is not sent at all.
    pub(crate) async fn call(
        self: &Arc<Self>,
        conn: &RedisConn,
        shard: ShardId,
        cmd: Cmd,
    ) -> RedisResult<Value> {
        let Some(queue) = self.queues.get(usize::from(shard)) else {
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "no such shard",
            )));
        };
        let (tx, rx) = oneshot::channel();
        if queue.push(Pending { cmd, reply: tx }) {
            // Its own task: a caller dropped mid-flush must not strand the others' replies.
            tokio::spawn(Arc::clone(self).flush(conn.clone(), shard));
        }
        rx.await.unwrap_or_else(|_| {
            Err(io_error(
                std::io::ErrorKind::ConnectionAborted,
                "claim batch dropped",
            ))
        })
    }

    async fn flush(self: Arc<Self>, mut conn: RedisConn, shard: ShardId) {
        let queue = &self.queues[usize::from(shard)];
        let owner = queue.own();
        loop {
            let Some(batch) = queue.next(MAX_BATCH) else {
                std::mem::forget(owner);
                return;
            };
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            let mut replies = Vec::with_capacity(batch.len());
            for p in batch {
                pipe.add_command(p.cmd);
                replies.push(p.reply);
            }
            let answer = tokio::time::timeout(
                self.timeout,
                pipe.query_async::<Vec<RedisResult<Value>>>(&mut conn),
            )
            .await;
            match answer {
                Ok(Ok(values)) if values.len() == replies.len() => {
                    for (tx, v) in replies.into_iter().zip(values) {
                        let _ = tx.send(v);
                    }
                }
                Ok(Ok(values)) => {
                    let e = io_error(
                        std::io::ErrorKind::InvalidData,
                        &format!("{} replies to {} scripts", values.len(), replies.len()),
                    );
                    send_all(replies, &e);
                }
                // A pipeline that fails as a whole (a dropped connection; on a cluster, one
                // MOVED or CLUSTERDOWN reply fails them all) may have run some of its
                // scripts: for more than one, nobody can say "nothing was taken".
                Ok(Err(e)) if replies.len() > 1 => {
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
}

fn send_all(replies: Vec<oneshot::Sender<RedisResult<Value>>>, e: &RedisError) {
    for tx in replies {
        let _ = tx.send(Err(e.clone()));
    }
}

fn io_error(kind: std::io::ErrorKind, msg: &str) -> RedisError {
    RedisError::from(std::io::Error::new(kind, msg.to_owned()))
}

/// One caller waiting for a shard's next `WAIT`.
struct Waiter {
    replicas: u32,
    wait: Duration,
    reply: oneshot::Sender<Result<u32, StockError>>,
}

impl Waiting for Waiter {
    fn is_open(&self) -> bool {
        !self.reply.is_closed()
    }
}

/// Group commit of `WAIT`, per shard. WAIT covers every earlier write of the connection it
/// runs on, so one WAIT sent after a caller's claim answered confirms that claim and every
/// other one answered before it: callers that queue while a shard's WAIT is in flight
/// share the next one instead of sending one each. Each WAIT parks the shared connection
/// until a replica acknowledges, so fewer WAITs is throughput for replica durability.
pub(crate) struct WaitGroups {
    shards: Vec<GroupQueue<Waiter>>,
}

impl WaitGroups {
    pub(crate) fn new(shards: u16) -> Self {
        Self {
            shards: (0..shards).map(|_| GroupQueue::new()).collect(),
        }
    }

    /// Waits for the first WAIT on `shard` sent after this call began; `send` runs one.
    pub(crate) async fn confirm<F, Fut>(
        self: &Arc<Self>,
        shard: ShardId,
        replicas: u32,
        wait: Duration,
        send: F,
    ) -> Result<u32, StockError>
    where
        F: Fn(u32, Duration) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<u32, StockError>> + Send + 'static,
    {
        let Some(queue) = self.shards.get(usize::from(shard)) else {
            return Err(StockError::InvalidArgument(format!("no shard {shard}")));
        };
        let (tx, rx) = oneshot::channel();
        let start = queue.push(Waiter {
            replicas,
            wait,
            reply: tx,
        });
        if start {
            tokio::spawn(Arc::clone(self).flush(shard, send));
        }
        rx.await.unwrap_or_else(|_| {
            Err(StockError::Protocol {
                op: "wait",
                detail: "WAIT group dropped".into(),
            })
        })
    }

    async fn flush<F, Fut>(self: Arc<Self>, shard: ShardId, send: F)
    where
        F: Fn(u32, Duration) -> Fut,
        Fut: std::future::Future<Output = Result<u32, StockError>>,
    {
        let queue = &self.shards[usize::from(shard)];
        let owner = queue.own();
        loop {
            let Some(group) = queue.next(usize::MAX) else {
                std::mem::forget(owner);
                return;
            };
            // The strictest ask of the group answers everyone in it.
            let replicas = group.iter().map(|w| w.replicas).max().unwrap_or(1);
            let wait = group.iter().map(|w| w.wait).max().unwrap_or_default();
            let acked = send(replicas, wait).await;
            for w in group {
                let _ = w.reply.send(acked.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Callers that queue while a WAIT is in flight share the next one, and each caller is
    /// answered by a WAIT sent after it asked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_are_shared_but_never_earlier_than_the_ask() {
        let groups = Arc::new(WaitGroups::new(2));
        let sent = Arc::new(AtomicU32::new(0));
        let send = {
            let sent = sent.clone();
            move |_n: u32, _w: Duration| {
                let sent = sent.clone();
                async move {
                    // The value is the WAIT's sequence number, taken when it is sent.
                    let seq = sent.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(seq)
                }
            }
        };
        let mut callers = Vec::new();
        for _ in 0..50 {
            let (groups, send, sent) = (groups.clone(), send.clone(), sent.clone());
            callers.push(tokio::spawn(async move {
                // WAITs already sent when this caller asks: its answer must come from a
                // later one, whose sequence number is higher.
                let before = sent.load(Ordering::SeqCst);
                let seq = groups
                    .confirm(1, 1, Duration::from_millis(5), send)
                    .await
                    .unwrap();
                (before, seq)
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for c in callers {
            let (before, seq) = c.await.unwrap();
            assert!(seq > before, "answered by WAIT {seq}, asked after {before}");
        }
        let total = sent.load(Ordering::SeqCst);
        assert!(
            total < 50,
            "50 callers over ~50 ms must share WAITs, sent {total}"
        );

        // One caller that asks while a WAIT is in flight is answered by a later one.
        let slow = {
            let (groups, send) = (groups.clone(), send.clone());
            tokio::spawn(async move { groups.confirm(0, 1, Duration::ZERO, send).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let before = sent.load(Ordering::SeqCst);
        let late = groups.confirm(0, 1, Duration::ZERO, send).await.unwrap();
        assert!(
            late > before,
            "answered by WAIT {late}, asked after {before}"
        );
        slow.await.unwrap().unwrap();
        assert!(groups
            .confirm(9, 1, Duration::ZERO, |_, _| async { Ok(1) })
            .await
            .is_err());
    }

    /// A flush task that dies (here: its WAIT panics) hands the queue back: its callers
    /// get an error, and the next caller starts a new flush instead of waiting forever.
    #[tokio::test]
    async fn a_dead_flush_task_does_not_strand_the_queue() {
        let groups = Arc::new(WaitGroups::new(1));
        let first = groups
            .confirm(0, 1, Duration::ZERO, |_, _| async {
                if true {
                    panic!("WAIT blew up");
                }
                Ok(0)
            })
            .await;
        assert!(first.is_err());
        let second = tokio::time::timeout(
            Duration::from_secs(5),
            groups.confirm(0, 1, Duration::ZERO, |_, _| async { Ok(7) }),
        )
        .await
        .expect("a new flush must start");
        assert_eq!(second.unwrap(), 7);
    }
}
