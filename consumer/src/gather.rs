//! A writer loop's receiving end: the reads its shards' readers send, gathered into
//! batches (at most about `batch_max_rows` entries, a read never split, for at most
//! `batch_max_wait` after the first; a flush cut closes the open batch at once).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::shard::Read;

/// One loop's receiving end.
pub(crate) struct Source {
    rx: mpsc::Receiver<Read>,
    queue: VecDeque<Read>,
    open: bool,
    /// Flush cuts (`inflight.rs`): a rebuild waits for what this process holds, so an open
    /// batch is closed at once instead of after `batch_max_wait`.
    cuts: watch::Receiver<u64>,
}

impl Source {
    pub(crate) fn new(rx: mpsc::Receiver<Read>, cuts: watch::Receiver<u64>) -> Self {
        Self {
            rx,
            queue: VecDeque::new(),
            open: true,
            cuts,
        }
    }

    /// The next batch: reads of at most about `max_rows` entries (a read is never split),
    /// gathered for at most `max_wait` after the first. `None` once every sender is gone
    /// and nothing is left.
    pub(crate) async fn next_batch(
        &mut self,
        max_rows: usize,
        max_wait: Duration,
    ) -> Option<Vec<Read>> {
        while self.queue.is_empty() {
            if !self.open {
                return None;
            }
            match self.rx.recv().await {
                Some(r) => self.queue.push_back(r),
                None => self.open = false,
            }
        }
        let deadline = tokio::time::Instant::now() + max_wait;
        let rows = |q: &VecDeque<Read>| -> usize { q.iter().map(|r| r.entries.len()).sum() };
        // A cut not seen yet closes this batch at once, also one taken while the queue was
        // empty: an entry that arrived since may come from a read sent before it (a reply
        // on its way, a replica wait), and the flush waits for it. At worst one batch
        // closes early.
        while self.open && rows(&self.queue) < max_rows {
            tokio::select! {
                r = tokio::time::timeout_at(deadline, self.rx.recv()) => match r {
                    Ok(Some(r)) => self.queue.push_back(r),
                    Ok(None) => self.open = false,
                    Err(_) => break,
                },
                Ok(()) = self.cuts.changed() => break,
            }
        }
        let mut out = Vec::new();
        let mut n = 0;
        while let Some(r) = self.queue.front() {
            // Each read whole: at least one per batch, then while under the bound
            // (`MAX_BATCH_ROWS` leaves room for one read over `batch_max_rows`, see config).
            if !out.is_empty() && n + r.entries.len() > max_rows {
                break;
            }
            n += r.entries.len();
            out.extend(self.queue.pop_front());
        }
        Some(out)
    }
}
