//! Reconnect delays: exponential backoff with "equal jitter" (AWS architecture blog,
//! "Exponential Backoff And Jitter"): attempt `n` waits a uniform random delay in
//! `[cap_n / 2, cap_n]` where `cap_n = min(max, initial * 2^n)`. Half the delay is
//! guaranteed (no reconnect storm right after an outage), half is spread out (no thundering
//! herd of nodes reconnecting in lockstep).

use std::time::Duration;

use rand::Rng;

/// The delay sequence of one run of failed connection attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// Starts at `initial`, doubling per attempt up to `max` (`max >= initial`).
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            attempt: 0,
        }
    }

    /// The upper bound of the next delay, without jitter.
    pub fn current_cap(&self) -> Duration {
        doubled(self.initial, self.max, self.attempt)
    }

    /// The next delay, in `[cap / 2, cap]`; advances the sequence.
    pub fn next_delay(&mut self) -> Duration {
        let cap = self.current_cap();
        self.attempt = self.attempt.saturating_add(1);
        let half = cap / 2;
        let jitter_ns = u64::try_from((cap - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(rand::rng().random_range(0..=jitter_ns))
    }

    /// Starts over from `initial` (after a session that got its `Welcome`).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// `initial * 2^n`, at most `max` (saturating: never overflows); the delay without jitter
/// of attempt `n`.
pub fn doubled(initial: Duration, max: Duration, n: u32) -> Duration {
    let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
    initial.checked_mul(factor).map_or(max, |d| d.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_within_doubling_caps() {
        let (initial, max) = (Duration::from_secs(1), Duration::from_secs(30));
        let mut b = Backoff::new(initial, max);
        let caps = [1, 2, 4, 8, 16, 30, 30, 30];
        for cap in caps {
            let cap = Duration::from_secs(cap);
            let d = b.next_delay();
            assert!(
                d >= cap / 2 && d <= cap,
                "{d:?} outside [{:?}, {cap:?}]",
                cap / 2
            );
        }
        for _ in 0..100 {
            assert!(b.next_delay() <= max);
        }
        b.reset();
        assert_eq!(b.current_cap(), initial);
        assert!(b.next_delay() <= initial);
    }

    #[test]
    fn survives_many_attempts() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
        for _ in 0..200 {
            b.next_delay();
        }
        assert_eq!(b.current_cap(), Duration::from_secs(30));
    }
}
