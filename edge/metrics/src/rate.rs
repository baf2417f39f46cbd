//! CPU usage rates from cumulative counters: cAdvisor's `CpuInst`, which the kubelet reports
//! as `usageNanoCores` (the rate between the two latest samples of a container).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// The previous observation of each counter, by key (a container id, a pod uid, `"node"`).
#[derive(Debug, Default)]
pub struct CpuRates {
    previous: HashMap<String, (Instant, u64)>,
}

impl CpuRates {
    /// No observations yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `cumulative_nanos` (CPU nanoseconds, all cores) of `key` at `now` and returns
    /// the usage since the previous observation in nanocores (10⁹ = one core busy):
    /// Δns × 10⁹ / Δt in ns. `None` for a key's first observation, when the counter went
    /// backwards (the container restarted; this observation becomes the new baseline), or
    /// when `now` is not after the previous observation (which is then kept).
    pub fn observe(&mut self, key: &str, now: Instant, cumulative_nanos: u64) -> Option<u64> {
        let Some(&(then, before)) = self.previous.get(key) else {
            self.previous
                .insert(key.to_owned(), (now, cumulative_nanos));
            return None;
        };
        let elapsed = now
            .checked_duration_since(then)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        if elapsed == 0 {
            return None;
        }
        self.previous
            .insert(key.to_owned(), (now, cumulative_nanos));
        let used = u128::from(cumulative_nanos.checked_sub(before)?);
        Some(u64::try_from(used * 1_000_000_000 / elapsed).unwrap_or(u64::MAX))
    }

    /// Forgets every key not in `keys` (the containers seen in this round), so removed
    /// containers do not accumulate.
    pub fn retain<I, S>(&mut self, keys: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keep = keys
            .into_iter()
            .map(|k| k.as_ref().to_owned())
            .collect::<HashSet<_>>();
        self.previous.retain(|key, _| keep.contains(key));
    }

    /// How many keys have a previous observation.
    pub fn len(&self) -> usize {
        self.previous.len()
    }

    /// Whether no key has a previous observation.
    pub fn is_empty(&self) -> bool {
        self.previous.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn first_then_rate_then_reset() {
        let mut rates = CpuRates::new();
        let t0 = Instant::now();
        assert_eq!(rates.observe("c1", t0, 1_000_000_000), None);
        // 0.5 s of CPU over 2 s: a quarter of a core.
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(rates.observe("c1", t1, 1_500_000_000), Some(250_000_000));
        // Same instant: no rate, baseline kept.
        assert_eq!(rates.observe("c1", t1, 1_600_000_000), None);
        // The counter went backwards: a restart; no rate, new baseline.
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(rates.observe("c1", t2, 100), None);
        let t3 = t2 + Duration::from_secs(1);
        assert_eq!(rates.observe("c1", t3, 2_000_000_100), Some(2_000_000_000));
    }

    #[test]
    fn retain_drops_gone_keys() {
        let mut rates = CpuRates::new();
        let t0 = Instant::now();
        rates.observe("a", t0, 1);
        rates.observe("b", t0, 1);
        rates.retain(["b"]);
        assert_eq!(rates.len(), 1);
        assert_eq!(rates.observe("a", t0 + Duration::from_secs(1), 2), None);
        assert_eq!(rates.observe("b", t0 + Duration::from_secs(1), 1), Some(0));
    }
}
