//! Which dead containers to remove (kubelet: `containerGC.evictContainers`).

use std::collections::{HashMap, HashSet};

use super::GcConfig;
use verge_container_runtime::{ContainerSummary, labels};

/// A container that is not running, as the collector sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DeadContainer {
    /// Docker id.
    pub id: String,
    /// `io.kubernetes.pod.uid`.
    pub pod_uid: String,
    /// `io.kubernetes.container.name` (`POD` for the sandbox; empty if missing).
    pub name: String,
    /// Creation time, Unix seconds.
    pub created: i64,
}

impl DeadContainer {
    /// `None` for a container without the pod uid label.
    pub fn from_summary(summary: ContainerSummary) -> Option<Self> {
        let labels = summary.labels;
        let pod_uid = labels
            .get(labels::POD_UID)
            .filter(|u| !u.is_empty())?
            .clone();
        Some(Self {
            id: summary.id,
            pod_uid,
            name: labels
                .get(labels::CONTAINER_NAME)
                .cloned()
                .unwrap_or_default(),
            created: summary.created,
        })
    }
}

/// Newest first; ties broken by id so the order is stable.
fn newest_first(a: &DeadContainer, b: &DeadContainer) -> std::cmp::Ordering {
    b.created.cmp(&a.created).then_with(|| a.id.cmp(&b.id))
}

/// The containers to remove, given the dead ones, the pods that still exist and `now` (Unix
/// seconds):
/// 1. containers younger than `minimum_gc_age` are kept;
/// 2. every container of a pod not in `live_pods` is removed;
/// 3. per (pod, container name), all but the newest `max_per_pod_container` are removed;
/// 4. if more than `max_containers` remain, each (pod, container) keeps at most
///    `max(max_containers / units, 1)`, then the oldest overall go.
pub(super) fn select_evictions(
    dead: Vec<DeadContainer>,
    live_pods: &HashSet<String>,
    config: &GcConfig,
    now: i64,
) -> Vec<DeadContainer> {
    let min_age = i64::try_from(config.minimum_gc_age.as_secs()).unwrap_or(i64::MAX);
    let mut evict = Vec::new();
    let mut units: HashMap<(String, String), Vec<DeadContainer>> = HashMap::new();
    for c in dead {
        if now.saturating_sub(c.created) < min_age {
            continue;
        }
        if live_pods.contains(&c.pod_uid) {
            units
                .entry((c.pod_uid.clone(), c.name.clone()))
                .or_default()
                .push(c);
        } else {
            evict.push(c);
        }
    }
    for unit in units.values_mut() {
        unit.sort_by(newest_first);
    }
    if let Ok(keep) = usize::try_from(config.max_per_pod_container) {
        for unit in units.values_mut() {
            evict.extend(unit.drain(keep.min(unit.len())..));
        }
    }
    if let Ok(max) = usize::try_from(config.max_containers) {
        let total: usize = units.values().map(Vec::len).sum();
        if total > max {
            let per_unit = (max / units.len().max(1)).max(1);
            for unit in units.values_mut() {
                evict.extend(unit.drain(per_unit.min(unit.len())..));
            }
            let mut rest: Vec<DeadContainer> = units.into_values().flatten().collect();
            if rest.len() > max {
                rest.sort_by(newest_first);
                evict.extend(rest.drain(max..));
            }
        }
    }
    evict
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn dead(id: &str, pod: &str, name: &str, created: i64) -> DeadContainer {
        DeadContainer {
            id: id.into(),
            pod_uid: pod.into(),
            name: name.into(),
            created,
        }
    }

    fn ids(mut v: Vec<DeadContainer>) -> Vec<String> {
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v.into_iter().map(|c| c.id).collect()
    }

    fn config(max_per: i32, max_all: i32) -> GcConfig {
        GcConfig {
            minimum_gc_age: Duration::from_secs(60),
            max_per_pod_container: max_per,
            max_containers: max_all,
            ..GcConfig::default()
        }
    }

    #[test]
    fn removes_dead_pods_and_extra_instances_but_not_young_ones() {
        let live = HashSet::from(["live".to_owned()]);
        let all = vec![
            dead("a1", "live", "app", 100),
            dead("a2", "live", "app", 200),
            dead("a3", "live", "app", 300),
            dead("s1", "live", "POD", 100),
            dead("g1", "gone", "app", 100),
            dead("g2", "gone", "app", 990), // too young
        ];
        let out = select_evictions(all, &live, &config(1, -1), 1000);
        assert_eq!(ids(out), ["a1", "a2", "g1"]);
    }

    #[test]
    fn negative_limits_keep_everything_of_live_pods() {
        let live = HashSet::from(["p".to_owned()]);
        let all = vec![dead("a", "p", "c", 1), dead("b", "p", "c", 2)];
        assert!(select_evictions(all, &live, &config(-1, -1), 1000).is_empty());
    }

    #[test]
    fn max_containers_evicts_oldest_overall() {
        let live = HashSet::from(["p".to_owned(), "q".to_owned()]);
        let all = vec![
            dead("p1", "p", "c", 10),
            dead("p2", "p", "c", 20),
            dead("p3", "p", "c", 30),
            dead("q1", "q", "c", 15),
            dead("r1", "q", "d", 25),
        ];
        // 3 units, max 2 => per unit max(2/3,1)=1 keeps p3,q1,r1; then oldest (q1) goes.
        let out = select_evictions(all, &live, &config(-1, 2), 1000);
        assert_eq!(ids(out), ["p1", "p2", "q1"]);
    }
}
