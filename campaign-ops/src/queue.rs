//! The waiting room's admission step (campaign mode `queue`, docs/DESIGN.md "The waiting
//! room"): twice a second, for each queue campaign that has started, it moves the
//! admitted watermark so that the admitted users who have not claimed yet can just cover
//! the stock left, given how many admitted users turn into claims.
//!
//! With `sold` units claimed of the stock, `left` in the slices and `conversion` =
//! sold / held (the share of the admitted positions someone holds that claimed; 1 until
//! one is held), the watermark aims at `(sold + left) / conversion`: the
//! stock's worth at once, more only as admitted users fail to claim. Only positions
//! admitted at least `grace` ago count as held (by default the longest `refresh_ms` a
//! gateway tells a waiting client, and 2 s): a user admitted since may not have
//! come back yet. Counted as users who did not claim, the conversion fell right after
//! every step, the watermark ran ahead of the stock at the rate cap, and the admitted
//! users raced each other for the last units, won by whoever polls first (a bot ignoring
//! `refresh_ms`) rather than by their place (`bench draw --mode queue` showed it). There
//! is no headroom over the stock for the same reason. Admitted positions nobody holds yet
//! (the watermark ahead of the queue's end) are not users who failed to claim either:
//! counted as such, the conversion fell at every step with nobody waiting and the
//! watermark ran to its bound, letting the next crowd in at once. It never goes back, and
//! grows by at most `max_rate` positions a second after the campaign's first step, also in
//! a process that has not stepped before (a restarted or second consumer: one tick's
//! worth, and nothing before its own grace has passed), so a wrong estimate cannot flood
//! the claim path. The ledger's watermark is raised before Redis's, so a loss never takes
//! it below what a gateway has told a client. Once the slices are empty the watermark
//! stops: the gateways tell every waiting client "sold out" from their sold-out cache.
//! The watermark, the pre-queue's length and the tickets' high-water are
//! kept in the ledger (`ledger::queues`) and written back after a Redis loss.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ledger::queues::{self, Marks};
use shard_router::StockClient;
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::OpsError;

/// The lowest conversion believed: a stall in claims does not open the whole queue.
const MIN_CONVERSION: f64 = 0.05;

/// The step's period.
const TICK: Duration = Duration::from_millis(500);

/// How the admission step admits.
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    /// The most positions admitted per second after the campaign's first step.
    pub max_rate: u64,
    /// How long an admitted position is given to claim before it counts as one that did
    /// not (`--queue-grace-ms`, by default `shard_router::queue::MAX_REFRESH_MS` and
    /// 2 s).
    pub grace: Duration,
}

/// What this process remembers of each SKU's steps: the last one (when, and the
/// watermark after it) and the watermarks since the newest one a grace old.
#[derive(Debug, Default)]
pub struct Memory {
    skus: HashMap<u64, Steps>,
}

#[derive(Debug)]
struct Steps {
    last: (Instant, u64),
    history: VecDeque<(Instant, u64)>,
}

impl Memory {
    /// The watermark as it stood `grace` before `now` by this process's steps (0 before
    /// its first step is that old: a fresh process counts nothing as held).
    fn admitted_before(&mut self, sku: u64, grace: Duration, now: Instant) -> u64 {
        let Some(steps) = self.skus.get_mut(&sku) else {
            return 0;
        };
        let Some(cutoff) = now.checked_sub(grace) else {
            return 0;
        };
        // Keep the newest step at or before the cutoff, and everything after it.
        while steps.history.len() > 1 && steps.history[1].0 <= cutoff {
            steps.history.pop_front();
        }
        match steps.history.front() {
            Some(&(at, admitted)) if at <= cutoff => admitted,
            _ => 0,
        }
    }

    fn last(&self, sku: u64) -> Option<(Instant, u64)> {
        self.skus.get(&sku).map(|s| s.last)
    }

    fn record(&mut self, sku: u64, at: Instant, admitted: u64, grace: Duration) {
        let steps = self.skus.entry(sku).or_insert_with(|| Steps {
            last: (at, admitted),
            history: VecDeque::new(),
        });
        steps.last = (at, admitted);
        steps.history.push_back((at, admitted));
        self.admitted_before(sku, grace, at);
    }

    /// Positions admitted a second over this process's history (about a grace), with
    /// `want` now: the rate gateways estimate waits by. 0 (unknown) until a second of
    /// history; one step's jump is not a rate.
    fn rate(&self, sku: u64, want: u64) -> u64 {
        let Some(&(at, before)) = self.skus.get(&sku).and_then(|s| s.history.front()) else {
            return 0;
        };
        let span = at.elapsed().as_secs_f64();
        if span < 1.0 {
            return 0;
        }
        (want.saturating_sub(before) as f64 / span).round() as u64
    }

    /// Forgets the SKUs `live` says no more.
    fn retain(&mut self, live: impl Fn(u64) -> bool) {
        self.skus.retain(|&sku, _| live(sku));
    }
}

/// Runs the admission step until shutdown.
pub async fn run(
    pool: MySqlPool,
    client: StockClient,
    admission: Admission,
    t: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut memory = Memory::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = plumbing::shutdown::stopped(&mut shutdown) => break,
        }
        let now = match crate::clock::redis_now(&client).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "queue: no clock from redis; skipped");
                continue;
            }
        };
        let live = match queues::live(&pool, t).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "queue: list queues failed");
                continue;
            }
        };
        memory.retain(|sku| live.iter().any(|(k, _)| *k == sku));
        for (sku, marks) in live {
            if let Err(e) = step(&pool, &client, sku, marks, now, admission, &mut memory, t).await {
                tracing::warn!(sku, error = %e, "queue admission failed");
            }
        }
    }
}

/// The watermark aimed at (before the rate cap); `held`: the admitted positions someone
/// has held for the grace (the watermark a grace ago, or the queue's end where that is
/// lower).
pub fn target(sold: u64, left: u64, held: u64) -> u64 {
    // Measured from the first position held a grace: a small stock has few, and taking
    // the conversion as 1 until more were held stopped the queue at its first no-show.
    let conversion = if held == 0 {
        1.0
    } else {
        (sold as f64 / held as f64).clamp(MIN_CONVERSION, 1.0)
    };
    ((sold + left) as f64 / conversion).ceil() as u64
}

/// One admission step for `sku`.
#[allow(clippy::too_many_arguments)]
pub async fn step(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    marks: Marks,
    now_ms: i64,
    admission: Admission,
    memory: &mut Memory,
    t: Duration,
) -> Result<(), OpsError> {
    let c = ledger::campaigns::get(pool, sku, t).await?;
    if now_ms < c.start_ms || now_ms >= c.end_ms {
        return Ok(());
    }
    let slices = client.slices(sku, c.width).await?;
    if slices.iter().any(|(_, s)| s.is_none()) {
        // Not preheated, or lost: the rebuild writes the slices back first.
        return Ok(());
    }
    let left: u64 = slices
        .iter()
        .map(|(_, s)| s.unwrap_or(0).max(0) as u64)
        .sum();
    // A wave in progress has its units in the slices before the campaign's stock grows
    // (and stays so while its replica confirmation fails): counted, or `sold` reads low
    // and the conversion with it. Past even that (a slice changed by hand), the step
    // waits for reconciliation rather than guess.
    let stock = c.stock + ledger::waves::in_flight(pool, sku, t).await?;
    if left > stock {
        return Ok(());
    }
    let sold = stock - left;
    // The queue's end: the positions handed out (Redis's, or the ledger's after a loss).
    let q = client.queue_state(sku).await?;
    let end = q
        .pre
        .or(marks.pre)
        .unwrap_or(0)
        .saturating_add(q.next.max(marks.next_hw));
    let mut want = marks.admitted;
    if left > 0 {
        want = wanted(sku, sold, left, end, marks, admission, memory);
    }
    raise(pool, client, sku, marks, want, admission, memory, t).await
}

/// The watermark to reach while units are left: the target, at most `max_rate` positions
/// a second past the current watermark, never below it.
fn wanted(
    sku: u64,
    sold: u64,
    left: u64,
    end: u64,
    marks: Marks,
    admission: Admission,
    memory: &mut Memory,
) -> u64 {
    let held = memory.admitted_before(sku, admission.grace, Instant::now());
    let aim = target(sold, left, held.min(marks.admitted).min(end));
    // At most max_rate positions a second after the campaign's first step; a process
    // with no step of its own yet takes one tick's worth.
    let elapsed = match memory.last(sku) {
        Some((at, _)) => at.elapsed(),
        None => TICK,
    };
    (if marks.admitted > 0 {
        let cap = (elapsed.as_secs_f64() * admission.max_rate as f64).ceil() as u64;
        aim.min(marks.admitted.saturating_add(cap.max(1)))
    } else {
        aim
    })
    // No further ahead of the queue's end than the units left: a crowd arriving next
    // is not let in all at once beyond what the stock can serve.
    .min(end.saturating_add(left))
    .max(marks.admitted)
}

/// Moves the watermark to `want` (the ledger, then Redis, then the ledger with what Redis
/// holds) and remembers when.
#[allow(clippy::too_many_arguments)]
async fn raise(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    marks: Marks,
    want: u64,
    admission: Admission,
    memory: &mut Memory,
    t: Duration,
) -> Result<(), OpsError> {
    if want > marks.admitted {
        // The ledger first: a loss right after the Redis write must not bring back a
        // watermark below what gateways told clients.
        queues::advance(
            pool,
            sku,
            &Marks {
                admitted: want,
                pre: None,
                next_hw: 0,
            },
            t,
        )
        .await?;
    }
    let state = client
        .queue_admit(sku, want, memory.rate(sku, want), marks.pre, marks.next_hw)
        .await?;
    queues::advance(
        pool,
        sku,
        &Marks {
            admitted: state.admitted,
            pre: state.pre,
            next_hw: state.next,
        },
        t,
    )
    .await?;
    // Stamped once Redis holds the watermark: the grace runs from when gateways can see
    // it, not from before the ledger's write.
    memory.record(sku, Instant::now(), state.admitted, admission.grace);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_follows_the_conversion() {
        // At the start: the stock's worth.
        assert_eq!(target(0, 100, 0), 100);
        // Half the admitted claimed: twice as many positions for what is left.
        assert_eq!(target(60, 40, 120), 200);
        // Nobody converts: bounded by the lowest conversion believed.
        assert_eq!(target(0, 10, 1000), (10.0 / MIN_CONVERSION).ceil() as u64);
        // Sold out: only what was sold.
        assert_eq!(target(100, 0, 130), 130);
    }

    #[test]
    fn only_positions_admitted_a_grace_ago_count_as_held() {
        let mut m = Memory::default();
        let t0 = Instant::now();
        let grace = Duration::from_secs(10);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(m.admitted_before(1, grace, at(30)), 0, "no step yet");
        m.record(1, at(0), 100, grace);
        m.record(1, at(5), 150, grace);
        m.record(1, at(12), 300, grace);
        assert_eq!(m.admitted_before(1, grace, at(9)), 0, "no step a grace ago");
        assert_eq!(m.admitted_before(1, grace, at(10)), 100);
        assert_eq!(m.admitted_before(1, grace, at(16)), 150);
        assert_eq!(m.admitted_before(1, grace, at(40)), 300);
        assert_eq!(m.admitted_before(2, grace, at(40)), 0, "another SKU");
    }
}
