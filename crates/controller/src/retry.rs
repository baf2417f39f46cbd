//! Re-diffs of nodes after delivery errors (a controller's downstream side).
//!
//! When cloudhub reports that a downstream message could not be delivered to a node that is
//! still connected (its per-node queue was full: back-pressure), the node is compared again
//! after a jittered backoff instead of waiting for the next change or reconnect. The delay
//! starts at [`MIN_DELAY`] and doubles with every further error up to [`MAX_DELAY`]; an
//! answer from the edge resets it. A node has at most one pending re-diff.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

/// The first re-diff delay (before jitter).
pub const MIN_DELAY: Duration = Duration::from_secs(1);

/// The largest re-diff delay.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// The delay after `errors` consecutive delivery errors (`errors >= 1`), with `jitter` in
/// `[0, 1]`: `MIN_DELAY * 2^(errors-1)`, capped at [`MAX_DELAY`], scaled into its upper half
/// (`[d/2, d]`) by `jitter`, so nodes throttled together do not retry together.
pub fn delay(errors: u32, jitter: f64) -> Duration {
    let doublings = errors.saturating_sub(1).min(16);
    let full = MIN_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY);
    full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// Per-node backoff state and the pending re-diffs, earliest first.
#[derive(Debug, Default)]
pub struct Retries {
    /// Consecutive delivery errors per node.
    errors: HashMap<String, u32>,
    /// The due time of each node's pending re-diff.
    pending: HashMap<String, Instant>,
    /// The pending re-diffs by due time.
    queue: BTreeSet<(Instant, String)>,
}

impl Retries {
    /// A delivery error for `node` at `now`: schedules its re-diff unless one is pending.
    /// Returns the delay when one was scheduled.
    pub fn failed(&mut self, node: &str, now: Instant, jitter: f64) -> Option<Duration> {
        let errors = self.errors.entry(node.to_owned()).or_default();
        *errors = errors.saturating_add(1);
        if self.pending.contains_key(node) {
            return None;
        }
        let delay = delay(*errors, jitter);
        self.pending.insert(node.to_owned(), now + delay);
        self.queue.insert((now + delay, node.to_owned()));
        Some(delay)
    }

    /// The edge answered a message of `node`: the next error starts from [`MIN_DELAY`].
    pub fn succeeded(&mut self, node: &str) {
        self.errors.remove(node);
    }

    /// `node` disconnected: forget its backoff and pending re-diff.
    pub fn forget(&mut self, node: &str) {
        self.errors.remove(node);
        if let Some(due) = self.pending.remove(node) {
            self.queue.remove(&(due, node.to_owned()));
        }
    }

    /// When the earliest pending re-diff is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.first().map(|(due, _)| *due)
    }

    /// Removes and returns the nodes whose re-diff is due at `now`.
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.queue.first()
            && *at <= now
        {
            if let Some((_, node)) = self.queue.pop_first() {
                self.pending.remove(&node);
                due.push(node);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_to_the_cap_with_jitter() {
        assert_eq!(delay(1, 1.0), Duration::from_secs(1));
        assert_eq!(delay(1, 0.0), Duration::from_millis(500));
        assert_eq!(delay(2, 1.0), Duration::from_secs(2));
        assert_eq!(delay(5, 1.0), Duration::from_secs(16));
        assert_eq!(delay(6, 1.0), MAX_DELAY);
        assert_eq!(delay(1000, 1.0), MAX_DELAY);
        assert_eq!(delay(1000, 0.0), MAX_DELAY / 2);
        assert_eq!(delay(0, 1.0), MIN_DELAY);
    }

    #[test]
    fn one_pending_rediff_per_node() {
        let now = Instant::now();
        let mut r = Retries::default();
        assert_eq!(r.failed("a", now, 1.0), Some(Duration::from_secs(1)));
        assert_eq!(r.failed("a", now, 1.0), None);
        assert_eq!(r.failed("b", now, 1.0), Some(Duration::from_secs(1)));
        assert_eq!(r.next_due(), Some(now + Duration::from_secs(1)));
        assert!(r.take_due(now).is_empty());
        let mut due = r.take_due(now + Duration::from_secs(1));
        due.sort();
        assert_eq!(due, ["a", "b"]);
        assert_eq!(r.next_due(), None);
        // `a` had two errors: the next delay doubles again; an answer resets it.
        assert_eq!(r.failed("a", now, 1.0), Some(Duration::from_secs(4)));
        r.take_due(now + MAX_DELAY);
        r.succeeded("a");
        assert_eq!(r.failed("a", now, 1.0), Some(Duration::from_secs(1)));
        r.forget("a");
        assert_eq!(r.next_due(), None);
    }
}
