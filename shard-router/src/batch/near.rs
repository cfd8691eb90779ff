//! The claim batches' second connection, made on the callers' runtime, and whether that
//! runtime is idle enough to carry a batch (see `Batcher::attach_near`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::conn::RedisConn;
use crate::placement::ShardId;

/// A worker that parked this recently means that the runtime's queues were empty then:
/// short, so that a batch sent on the callers' runtime meets at most the backlog of this
/// long. A busy runtime takes a batch every few hundred µs, so this is seldom the wait.
const RECENT: Duration = Duration::from_millis(2);

pub(super) struct Near {
    pub(super) conn: RedisConn,
    pub(super) rt: tokio::runtime::Handle,
    since: Instant,
    /// The runtime's park and unpark count summed over its workers, and when it was read
    /// (µs after `since`): the last sample.
    parks: AtomicU64,
    read_at: AtomicU64,
    /// No later than the last park seen (µs after `since`).
    parked_at: AtomicU64,
    /// Per queue: the connection failed its last probe or batch there. It idles between
    /// batches while the client's own one serves the probes, so a server `timeout` closes
    /// it unseen unless the probe pings it too (`health.rs`).
    failing: Vec<AtomicBool>,
}

impl Near {
    /// `conn` was made on the current runtime; `queues`: the batcher's queue count.
    pub(super) fn new(conn: RedisConn, queues: usize) -> Self {
        Self {
            conn,
            rt: tokio::runtime::Handle::current(),
            since: Instant::now(),
            parks: AtomicU64::new(0),
            read_at: AtomicU64::new(0),
            parked_at: AtomicU64::new(0),
            failing: (0..queues).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// False while the connection failed the last probe or batch of queue `shard`.
    pub(super) fn usable(&self, shard: ShardId) -> bool {
        self.failing
            .get(usize::from(shard))
            .is_some_and(|f| !f.load(Ordering::Relaxed))
    }

    pub(super) fn set_usable(&self, shard: ShardId, ok: bool) {
        if let Some(f) = self.failing.get(usize::from(shard)) {
            f.store(!ok, Ordering::Relaxed);
        }
    }

    /// True when one of the runtime's workers is parked for want of work, or one parked
    /// within [`RECENT`] (a worker parks only with empty queues). tokio's
    /// `worker_park_unpark_count` is odd while that worker is parked.
    pub(super) fn idle(&self) -> bool {
        let m = self.rt.metrics();
        let mut sum = 0u64;
        for w in 0..m.num_workers() {
            let n = m.worker_park_unpark_count(w);
            if n % 2 == 1 {
                return true;
            }
            sum = sum.wrapping_add(n);
        }
        let now = u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX);
        let before = self.parks.swap(sum, Ordering::Relaxed);
        let then = self.read_at.swap(now, Ordering::Relaxed);
        // A change since the last sample: a worker parked after it was read. Races
        // between callers only blur which sample is the last one.
        if before != sum {
            self.parked_at.store(then, Ordering::Relaxed);
        }
        let parked_at = self.parked_at.load(Ordering::Relaxed);
        now.saturating_sub(parked_at) <= RECENT.as_micros() as u64
    }
}
