//! Crash-loop and image-pull back-off, kept per container in the worker's state (kubelet:
//! `flowcontrol.Backoff` keyed by pod and container).
//!
//! The first restart after a failure is immediate; each later one waits the current delay,
//! which starts at `initial` (kubelet 10 s) and doubles up to `max` (300 s). A container
//! that ran for [`RESET_AFTER`] (10 min) before exiting starts over.

use std::time::Duration;

/// A container that ran this long before exiting resets its back-off.
pub const RESET_AFTER: Duration = Duration::from_secs(600);

/// The back-off state of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    /// The delay the next restart waits; zero before the first failure.
    current: Duration,
    /// The delay [`next_delay`](Self::next_delay) returned last.
    last: Duration,
}

impl Backoff {
    /// A fresh back-off: the next restart is immediate.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            current: Duration::ZERO,
            last: Duration::ZERO,
        }
    }

    /// The delay before the next attempt, and advances the back-off (0, initial, 2x, ... max).
    /// `ran_for`: how long the failed container ran (resets after [`RESET_AFTER`]).
    pub fn next_delay(&mut self, ran_for: Option<Duration>) -> Duration {
        if ran_for.is_some_and(|r| r >= RESET_AFTER) {
            self.current = Duration::ZERO;
        }
        let delay = self.current;
        self.last = delay;
        self.current = if delay.is_zero() {
            self.initial
        } else {
            (delay * 2).min(self.max)
        };
        delay
    }

    /// Starts over: the next attempt is immediate again.
    pub fn reset(&mut self) {
        self.current = Duration::ZERO;
        self.last = Duration::ZERO;
    }

    /// The first non-zero delay (kubelet 10 s).
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The delay [`next_delay`](Self::next_delay) returned last (for messages).
    pub fn last(&self) -> Duration {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_max_and_resets_after_long_run() {
        let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        let delays: Vec<u64> = (0..8)
            .map(|_| b.next_delay(Some(Duration::from_secs(1))).as_secs())
            .collect();
        assert_eq!(delays, [0, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(b.next_delay(Some(RESET_AFTER)), Duration::ZERO);
        assert_eq!(b.next_delay(None), Duration::from_secs(10));
    }
}
