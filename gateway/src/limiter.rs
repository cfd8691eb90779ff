//! The per-client rate limit: GCRA over a fixed table of atomic cells, keyed by a hash of
//! the client's address (IPv4 address, IPv6 /64, which one subscriber usually holds).
//!
//! Why not governor's keyed limiter (used per user in `admission.rs`): its map grows with
//! every distinct key until the next sweep, so a flood of spoofed or rotating addresses
//! costs memory in proportion to their number. Here memory is fixed (`--client-slots` × 8
//! bytes) whatever the number of clients; the price is that clients hashing to one slot
//! share a budget. The hash is keyed per process (SipHash with a random key), so nobody
//! can aim addresses at someone else's slot.

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct ClientLimiter {
    /// Per slot: the GCRA theoretical arrival time, ns since `epoch` (0 = idle).
    cells: Box<[AtomicU64]>,
    mask: usize,
    epoch: Instant,
    /// ns between two requests at the sustained rate.
    period: u64,
    /// How far the arrival time may run ahead of now: `burst × period`.
    tolerance: u64,
    hasher: RandomState,
}

impl ClientLimiter {
    /// `None` when `rate` is 0 (no limit).
    pub(crate) fn new(rate: u32, burst: u32, slots: usize) -> Option<Self> {
        if rate == 0 {
            return None;
        }
        let slots = slots.max(1).next_power_of_two();
        let period = 1_000_000_000 / u64::from(rate);
        Some(Self {
            cells: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            mask: slots - 1,
            epoch: Instant::now(),
            period,
            tolerance: period * u64::from(burst.max(1)),
            hasher: RandomState::new(),
        })
    }

    /// `Err(wait)` when the client is over its rate; `wait` is when a retry can pass.
    pub(crate) fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.check_at(ip, now)
    }

    fn check_at(&self, ip: IpAddr, now: u64) -> Result<(), Duration> {
        let cell = &self.cells[self.hasher.hash_one(key(ip)) as usize & self.mask];
        let mut tat = cell.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now) + self.period;
            if next > now + self.tolerance {
                return Err(Duration::from_nanos(next - now - self.tolerance));
            }
            match cell.compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(seen) => tat = seen,
            }
        }
    }
}

/// IPv4: the address. IPv6: its /64, since one subscriber gets a whole /64 (or more).
fn key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => (u128::from(v6) >> 64) | (1 << 127),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn burst_then_rate_per_client() {
        let l = ClientLimiter::new(10, 3, 1 << 16).unwrap();
        let a = ip("192.0.2.1");
        for _ in 0..3 {
            assert!(l.check_at(a, SEC).is_ok());
        }
        let wait = l.check_at(a, SEC).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100), "one period at 10/s");
        assert!(
            l.check_at(a, SEC + SEC / 10).is_ok(),
            "a period later one passes"
        );
        assert!(
            l.check_at(ip("192.0.2.2"), SEC).is_ok(),
            "another client has its own budget"
        );
        assert!(ClientLimiter::new(0, 1, 1).is_none());
    }

    #[test]
    fn an_ipv6_64_is_one_client() {
        let l = ClientLimiter::new(1, 1, 1 << 16).unwrap();
        assert!(l.check_at(ip("2001:db8:1:2::1"), SEC).is_ok());
        assert!(l.check_at(ip("2001:db8:1:2::ffff"), SEC).is_err());
        assert!(l.check_at(ip("2001:db8:1:3::1"), SEC).is_ok());
    }

    #[test]
    fn memory_is_fixed_under_millions_of_clients() {
        let l = ClientLimiter::new(5, 10, 1 << 12).unwrap();
        assert_eq!(l.cells.len(), 1 << 12);
        for n in 0..2_000_000u32 {
            let _ = l.check_at(IpAddr::V4(n.into()), SEC);
        }
        assert_eq!(l.cells.len(), 1 << 12, "the table never grows");
        // With far more clients than slots the budgets are shared, never lost: a slot
        // passes at most its burst at one instant.
        let passed = (0..2_000_000u32)
            .filter(|n| l.check_at(IpAddr::V4((*n).into()), SEC).is_ok())
            .count();
        assert_eq!(
            passed, 0,
            "every slot already spent its burst at this instant"
        );
    }
}
