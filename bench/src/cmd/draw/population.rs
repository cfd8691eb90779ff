//! The population of `bench draw`: who is a bot and when each user sends. Users `0..bots`
//! are the bots (user names are hashed for placement and for the draw's priority, so the
//! numbering carries no advantage); the rest are humans. Everything is a pure function of
//! the seed, so two runs with the same flags offer the same schedule.

use std::time::Duration;

/// The population's shape (from the command line).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Shape {
    pub(crate) users: u32,
    pub(crate) bot_share: f64,
    /// Requests per bot (a human sends one).
    pub(crate) bot_factor: u32,
    /// Humans send at a uniform moment of the first `rush` after the sale opens ...
    pub(crate) rush: Duration,
    /// ... plus a client delay uniform in `[delay_min, delay_max]`.
    pub(crate) delay_min: Duration,
    pub(crate) delay_max: Duration,
    pub(crate) seed: u64,
}

impl Shape {
    /// The number of bots: `users × bot_share`, rounded.
    pub(crate) fn bots(&self) -> u32 {
        ((self.users as f64 * self.bot_share).round() as u32).min(self.users)
    }

    pub(crate) fn is_bot(&self, user: u32) -> bool {
        user < self.bots()
    }

    /// Requests the whole population sends.
    pub(crate) fn requests(&self) -> u64 {
        let bots = self.bots() as u64;
        bots * self.bot_factor as u64 + (self.users as u64 - bots)
    }

    /// When human `user` sends, in µs after the sale opens.
    pub(crate) fn human_due_us(&self, user: u32) -> u32 {
        let rush = self.rush.as_micros() as f64;
        let (lo, hi) = (
            self.delay_min.as_micros() as f64,
            self.delay_max.as_micros() as f64,
        );
        let at = unit(self.seed, user as u64, 1) * rush
            + lo
            + unit(self.seed, user as u64, 2) * (hi - lo).max(0.0);
        at.min(u32::MAX as f64) as u32
    }

    /// Every human as `(due µs, user)`, earliest first: 8 bytes a human.
    pub(crate) fn humans(&self) -> Vec<(u32, u32)> {
        let mut v: Vec<(u32, u32)> = (self.bots()..self.users)
            .map(|u| (self.human_due_us(u), u))
            .collect();
        v.sort_unstable();
        v
    }
}

/// A uniform number in [0, 1) from `(seed, k, salt)`.
fn unit(seed: u64, k: u64, salt: u64) -> f64 {
    let h = splitmix(seed ^ splitmix(k ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(users: u32) -> Shape {
        Shape {
            users,
            bot_share: 0.10,
            bot_factor: 20,
            rush: Duration::from_millis(1000),
            delay_min: Duration::from_millis(50),
            delay_max: Duration::from_millis(300),
            seed: 7,
        }
    }

    #[test]
    fn bots_and_requests() {
        let s = shape(5000);
        assert_eq!(s.bots(), 500);
        assert!(s.is_bot(499) && !s.is_bot(500));
        assert_eq!(s.requests(), 500 * 20 + 4500);
    }

    #[test]
    fn humans_are_deterministic_sorted_and_within_the_rush() {
        let s = shape(5000);
        let h = s.humans();
        assert_eq!(h.len(), 4500);
        assert_eq!(h, s.humans());
        assert!(h.windows(2).all(|w| w[0] <= w[1]));
        assert!(h.iter().all(|&(t, _)| (50_000..1_300_000).contains(&t)));
        // Spread over the rush, not bunched: each quarter of it holds some.
        let late = h.iter().filter(|&&(t, _)| t > 1_000_000).count();
        assert!(late > 100 && late < 1500, "{late}");
        let other = Shape { seed: 8, ..s };
        assert_ne!(h, other.humans());
    }
}
