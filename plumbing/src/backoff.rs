//! Exponential backoff for outages: doubles from `min` to `max`, resets on success, and
//! every sleep wakes early on shutdown so a drain is never stuck behind it.

use std::time::Duration;

use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            next: min,
        }
    }

    pub fn reset(&mut self) {
        self.next = self.min;
    }

    /// The delay to wait now; the next one doubles up to `max`.
    pub fn step(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// Sleeps one step; returns false when `shutdown` fired (the caller should stop).
    pub async fn sleep(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        let d = self.step();
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = crate::shutdown::stopped(shutdown) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(50), Duration::from_millis(300));
        let steps: Vec<_> = (0..5).map(|_| b.step().as_millis()).collect();
        assert_eq!(steps, [50, 100, 200, 300, 300]);
        b.reset();
        assert_eq!(b.step().as_millis(), 50);
    }
}
