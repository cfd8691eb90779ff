//! Admission control for requests: the in-flight cap (shed at once, never queued) and the
//! per-user rate limit (governor, keyed on the resolved user). The connection cap lives in
//! `plumbing/src/serve.rs`, where connections are accepted.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::metrics::claim_metrics;

/// How often idle users are dropped from the rate limiter, which bounds its memory to the
/// users seen in roughly the last burst window.
const LIMITER_SWEEP: Duration = Duration::from_secs(10);

pub(crate) struct Admission {
    in_flight: Arc<Semaphore>,
    users: Option<DefaultKeyedRateLimiter<String>>,
}

/// Held while a request is served; keeps the in-flight gauge honest on every exit path.
pub(crate) struct InFlight {
    _permit: OwnedSemaphorePermit,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        claim_metrics().in_flight.decrement(1.0);
    }
}

impl Admission {
    pub(crate) fn new(max_in_flight: usize, user_rate: u32, user_burst: u32) -> Self {
        let users = NonZeroU32::new(user_rate).map(|rate| {
            let burst = NonZeroU32::new(user_burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Self {
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            users,
        }
    }

    /// A slot for one request, or `None` when the gateway is at its in-flight cap.
    pub(crate) fn enter(&self) -> Option<InFlight> {
        let permit = self.in_flight.clone().try_acquire_owned().ok()?;
        claim_metrics().in_flight.increment(1.0);
        Some(InFlight { _permit: permit })
    }

    /// `Err(wait)` when the user is over the rate limit; `wait` is when a retry can pass.
    pub(crate) fn check_user(&self, user: &str) -> Result<(), Duration> {
        let Some(limiter) = &self.users else {
            return Ok(());
        };
        limiter
            .check_key(&user.to_owned())
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Drops idle users from the limiter until shutdown.
    pub(crate) async fn sweep(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let Some(limiter) = &self.users else {
            return;
        };
        let mut tick = tokio::time::interval(LIMITER_SWEEP);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    limiter.retain_recent();
                    limiter.shrink_to_fit();
                }
                _ = crate::stopped(&mut shutdown) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_cap_sheds_past_the_limit() {
        let a = Admission::new(2, 0, 0);
        let one = a.enter().unwrap();
        let _two = a.enter().unwrap();
        assert!(a.enter().is_none());
        drop(one);
        assert!(a.enter().is_some());
    }

    #[test]
    fn user_limit_is_per_user() {
        let a = Admission::new(10, 1, 2);
        assert!(a.check_user("u1").is_ok());
        assert!(a.check_user("u1").is_ok());
        let wait = a.check_user("u1").unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1));
        assert!(a.check_user("u2").is_ok());
        assert!(Admission::new(1, 0, 0).check_user("u1").is_ok());
    }
}
