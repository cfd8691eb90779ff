//! "This user never won here": once a SKU is cached sold out on every shard, the users that
//! may have a stored answer are read from Redis once (`shard-router/src/replay_users.rs`),
//! and a request id of any other user is answered 410 from memory instead of with a replay
//! read (invariant `replay`, docs/DESIGN.md "Replay after sell-out").
//!
//! The set belongs to one SKU's state in the sold-out cache (`cache.rs`, through
//! [`FilteredSku`]) and goes with it: dropped on every
//! event about the SKU (`empty`, `restock`, `live`, `replay`), on a resync (the subscriber
//! reconnected: events may have been missed), when the state is served stale, and with the
//! cache entry when it expires. It is consulted only while the subscriber is connected.
//! A read that an event overtook is discarded (the epoch below), so a set is only ever
//! installed over the state it was read for.
//!
//! Events alone do not bound how long a set may be wrong: units can come back with none
//! reaching this gateway (a failover whose promoted replica lacks the last sales, a
//! `restock` lost on a cluster bus link, a half-open subscriber until its ping fails). So a
//! set is used for [`REVALIDATE_EVERY`] after Redis last confirmed it
//! (`StockClient::replay_users_unchanged`: one pipeline per shard, no scan); past that the
//! requests take the replay read until the check is back.
//!
//! Memory: at most `--replay-filter-max-users` per SKU and `--replay-filter-total-users`
//! over every SKU of this gateway ([`ReplayLimits`]); a set that would not fit is not read
//! (its requests keep the replay read) and is tried again once room may have come free.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use shard_router::{ReplayMarks, ReplayUsers, SkuMeta, StockClient};

use crate::metrics::CACHE_EVENTS;

/// How long a read that failed, or found no room, is not tried again; also the longest
/// wait after reads that found the SKU moving.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The wait after a first read that found the SKU moving (a slice not empty, a shard
/// changing under it), doubled for each such read in a row up to [`RETRY_AFTER`]. At a
/// sell-out the first read usually meets the claims still in flight, whose holds add
/// users for a few milliseconds more; a whole second of replay reads after that was most
/// of a rush's sold-out answers (docs/BENCHMARKS.md "Where the rush time goes").
const MOVING_RETRY: Duration = Duration::from_millis(25);

/// The least wait per user a moving read scanned, so that a big `useq` (one HSCAN page
/// per 1 000 users) is not scanned back to back: 100 000 users wait the full second.
const PAUSE_PER_USER: Duration = Duration::from_micros(10);

/// How long to wait after the `streak`-th read in a row that found the SKU moving, when
/// that read scanned `scanned` users; with a random part, so that the gateways, which
/// all see the same sell-out within milliseconds, spread their reads.
fn moving_retry(streak: u32, scanned: u64) -> Duration {
    let scanned = u32::try_from(scanned).unwrap_or(u32::MAX);
    let base = MOVING_RETRY
        .saturating_mul(1u32 << streak.saturating_sub(1).min(16))
        .max(PAUSE_PER_USER.saturating_mul(scanned));
    base.mul_f64(1.0 + rand::random::<f64>() / 2.0)
        .min(RETRY_AFTER)
}

/// What the filter needs of the SKU state that holds it (the cache's `SkuState`). A read
/// or a check runs in a task of its own holding that state, not the filter alone: when it
/// finishes it installs into the filter and first asks whether every shard is still empty.
/// A trait, so that the filter sits below the cache that embeds it.
pub(crate) trait FilteredSku: Send + Sync + 'static {
    fn meta(&self) -> &SkuMeta;
    /// Every shard of the SKU is known empty.
    fn all_empty(&self) -> bool;
    /// This SKU's filter.
    fn replay(&self) -> &ReplayFilter;
}

/// How long a set is used after Redis last confirmed it (see the module doc).
pub(crate) const REVALIDATE_EVERY: Duration = Duration::from_millis(500);

/// The bounds on what the filters of this gateway hold, and what they hold now.
#[derive(Debug)]
pub(crate) struct ReplayLimits {
    /// `--replay-filter-max-users` (0: the filter is off).
    pub(crate) per_sku: u64,
    /// `--replay-filter-total-users`.
    total: u64,
    used: AtomicU64,
}

impl ReplayLimits {
    pub(crate) fn new(per_sku: u64, total: u64) -> Arc<Self> {
        Arc::new(Self {
            per_sku,
            total,
            used: AtomicU64::new(0),
        })
    }

    fn room(&self) -> u64 {
        self.total.saturating_sub(self.used.load(Ordering::Acquire))
    }

    /// Takes room for `n` users, given back when the set holding them goes.
    fn reserve(self: &Arc<Self>, n: u64) -> Option<Reserved> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&u| u <= self.total)
            })
            .ok()?;
        Some(Reserved {
            limits: self.clone(),
            n,
        })
    }
}

/// Room taken in [`ReplayLimits`] by one installed set.
#[derive(Debug)]
struct Reserved {
    limits: Arc<ReplayLimits>,
    n: u64,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.limits.used.fetch_sub(self.n, Ordering::AcqRel);
    }
}

#[derive(Debug, Default)]
enum Known {
    #[default]
    Unread,
    Reading,
    Users {
        users: HashSet<String>,
        marks: ReplayMarks,
        /// Used until then; past it, checked again (`checking`) before it is used.
        fresh_until: Instant,
        checking: bool,
        _room: Reserved,
    },
    /// Not usable until the instant (`None`: until dropped, e.g. too many users).
    Unusable(Option<Instant>),
}

/// The per-SKU filter. `epoch` counts drops, so a read started before one is discarded.
#[derive(Debug, Default)]
pub(crate) struct ReplayFilter {
    known: RwLock<Known>,
    epoch: AtomicU64,
    /// Reads in a row that found the SKU moving (reset by a read that loads a set).
    moving: AtomicU32,
}

impl ReplayFilter {
    /// Forgets what was read (an event about the SKU, a resync, a stale state).
    pub(crate) fn drop_users(&self) {
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        self.epoch.fetch_add(1, Ordering::AcqRel);
        if !matches!(*known, Known::Unread) {
            event("replay_filter_dropped");
        }
        *known = Known::Unread;
    }

    /// [`Self::drop_users`] because units came back on a shard: the SKU's next sell-out
    /// starts its moving reads from the shortest wait again.
    pub(crate) fn units_back(&self) {
        self.moving.store(0, Ordering::Relaxed);
        self.drop_users();
    }

    /// True only when the set is read and `user` is not in it: no stored answer can exist
    /// for any request id of `user`. Starts a read when none is there yet.
    pub(crate) fn never_won<S: FilteredSku>(
        &self,
        state: &Arc<S>,
        client: &StockClient,
        limits: &Arc<ReplayLimits>,
        user: &str,
    ) -> bool {
        let check = {
            let known = self.known.read().unwrap_or_else(|e| e.into_inner());
            match &*known {
                Known::Users {
                    users, fresh_until, ..
                } if Instant::now() < *fresh_until => return !users.contains(user),
                Known::Users { checking: true, .. } => return false,
                Known::Users { .. } => true,
                Known::Reading => return false,
                Known::Unusable(None) => return false,
                Known::Unusable(Some(until)) if Instant::now() < *until => return false,
                Known::Unusable(Some(_)) | Known::Unread => false,
            }
        };
        if check {
            self.start_check(state, client);
        } else {
            self.start_read(state, client, limits);
        }
        false
    }

    /// Checks a set past [`REVALIDATE_EVERY`] against Redis; kept only if nothing moved.
    fn start_check<S: FilteredSku>(&self, state: &Arc<S>, client: &StockClient) {
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        let Known::Users {
            marks,
            fresh_until,
            checking,
            ..
        } = &mut *known
        else {
            return;
        };
        if *checking || Instant::now() < *fresh_until {
            return;
        }
        *checking = true;
        let marks = marks.clone();
        let epoch = self.epoch.load(Ordering::Acquire);
        let (state, client) = (state.clone(), client.clone());
        tokio::spawn(async move {
            let checked = Instant::now();
            let meta = state.meta();
            let still = client
                .replay_users_unchanged(meta.sku, meta.width, &marks)
                .await;
            let f = state.replay();
            let mut known = f.known.write().unwrap_or_else(|e| e.into_inner());
            if f.epoch.load(Ordering::Acquire) != epoch {
                return;
            }
            match still {
                Ok(true) if state.all_empty() => {
                    if let Known::Users {
                        fresh_until,
                        checking,
                        ..
                    } = &mut *known
                    {
                        // From when the check started: what it confirmed is that old.
                        *fresh_until = checked + REVALIDATE_EVERY;
                        *checking = false;
                    }
                }
                Ok(_) => {
                    event("replay_filter_stale");
                    *known = Known::Unusable(Some(Instant::now() + RETRY_AFTER));
                }
                Err(e) => {
                    tracing::debug!(sku = meta.sku, error = %e, "replay filter check failed");
                    event("replay_filter_error");
                    *known = Known::Unusable(Some(Instant::now() + RETRY_AFTER));
                }
            }
        });
    }

    fn start_read<S: FilteredSku>(
        &self,
        state: &Arc<S>,
        client: &StockClient,
        limits: &Arc<ReplayLimits>,
    ) {
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        let retry = match &*known {
            Known::Unread => true,
            Known::Unusable(Some(until)) => Instant::now() >= *until,
            _ => false,
        };
        // Checked under the lock an event's drop takes: a `restock` applied before this is
        // seen here, one applied after bumps the epoch the read is installed against.
        if !retry || !state.all_empty() {
            return;
        }
        *known = Known::Reading;
        let epoch = self.epoch.load(Ordering::Acquire);
        let (state, client, limits) = (state.clone(), client.clone(), limits.clone());
        event("replay_filter_read");
        tokio::spawn(async move {
            let started = Instant::now();
            let meta = state.meta();
            let cap = limits.per_sku.min(limits.room());
            let read = client.replay_users(meta.sku, meta.width, cap).await;
            let f = state.replay();
            let mut known = f.known.write().unwrap_or_else(|e| e.into_inner());
            if f.epoch.load(Ordering::Acquire) != epoch || !state.all_empty() {
                return;
            }
            *known = match read {
                Ok(ReplayUsers::Users { users, marks }) => {
                    f.moving.store(0, Ordering::Relaxed);
                    match limits.reserve(users.len() as u64) {
                        Some(room) => {
                            event("replay_filter_loaded");
                            Known::Users {
                                users,
                                marks,
                                fresh_until: started + REVALIDATE_EVERY,
                                checking: false,
                                _room: room,
                            }
                        }
                        None => full(),
                    }
                }
                // Within this SKU's cap but not within what the other SKUs' sets leave.
                Ok(ReplayUsers::TooMany(n)) if n <= limits.per_sku => full(),
                Ok(ReplayUsers::TooMany(n)) => {
                    tracing::info!(
                        sku = meta.sku,
                        users = n,
                        cap,
                        "replay filter not loaded: too many users"
                    );
                    event("replay_filter_too_many");
                    Known::Unusable(None)
                }
                Ok(ReplayUsers::Moving { scanned }) => {
                    event("replay_filter_moving");
                    let streak = f.moving.fetch_add(1, Ordering::Relaxed) + 1;
                    let wait = moving_retry(streak, scanned);
                    Known::Unusable(Some(Instant::now() + wait))
                }
                Err(e) => {
                    tracing::debug!(sku = meta.sku, error = %e, "replay filter read failed");
                    event("replay_filter_error");
                    Known::Unusable(Some(Instant::now() + RETRY_AFTER))
                }
            };
        });
    }
}

/// No room left under `--replay-filter-total-users`: tried again later, when other SKUs'
/// sets may have gone.
fn full() -> Known {
    event("replay_filter_full");
    Known::Unusable(Some(Instant::now() + RETRY_AFTER))
}

fn event(kind: &'static str) {
    metrics::counter!(CACHE_EVENTS, "event" => kind).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moving_reads_back_off_from_milliseconds_to_the_second() {
        let ms = Duration::from_millis;
        for _ in 0..100 {
            let first = moving_retry(1, 0);
            assert!(first >= ms(25) && first <= ms(38), "{first:?}");
            let fourth = moving_retry(4, 1_000);
            assert!(fourth >= ms(200) && fourth <= ms(300), "{fourth:?}");
            assert!(moving_retry(40, 0) == RETRY_AFTER);
            // A read that scanned many users waits in proportion.
            let big = moving_retry(1, 20_000);
            assert!(big >= ms(200) && big <= ms(300), "{big:?}");
            assert!(moving_retry(1, 100_000) == RETRY_AFTER);
            assert!(moving_retry(1, u64::MAX) == RETRY_AFTER);
        }
    }
}
