//! What applying an allocation to the running containers takes (kubelet
//! `computePodResizeAction`, `doPodResizeAction`): which containers restart (a changed
//! resource whose `resizePolicy` is `RestartContainer`), which are updated in place, in which
//! order, and whether lowered memory limits are above what the containers use
//! (`validateMemoryResizeAction`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;

use crate::resources::Resources;

/// One running container a resize may touch.
#[derive(Debug, Clone, Copy)]
pub struct Running<'a> {
    /// Its spec, with the allocated resources.
    pub spec: &'a Container,
    /// The running instance's id.
    pub id: &'a str,
    /// Whether it may be restarted for a resize (not a regular init container: the API
    /// refuses `RestartContainer` for those).
    pub restartable: bool,
}

/// One in-place update of one resource of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The container.
    pub name: String,
    /// The running instance.
    pub id: String,
    /// Its allocated values.
    pub desired: Resources,
    /// Its actuated values.
    pub current: Resources,
}

/// What a resize does, in the kubelet's order: restarts first, then memory updates, then CPU
/// updates, each list with decreases before increases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Containers to kill and start again with the allocation: `(name, instance id)`.
    pub restart: Vec<(String, String)>,
    /// In-place memory updates.
    pub memory: Vec<Update>,
    /// In-place CPU updates.
    pub cpu: Vec<Update>,
}

impl Plan {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.restart.is_empty() && self.memory.is_empty() && self.cpu.is_empty()
    }
}

/// Whether a change of `resource` (`cpu`, `memory`) restarts `c` (its `resizePolicy`;
/// `NotRequired` when it names no policy for it).
fn restarts(c: &Container, resource: &str) -> bool {
    c.resize_policy
        .iter()
        .flatten()
        .find(|p| p.resource_name == resource)
        .is_some_and(|p| p.restart_policy == "RestartContainer")
}

/// Queues `u` in `list`: a decrease of `desired` against `current` before everything, an
/// increase after.
fn queue(list: &mut Vec<Update>, u: Update, desired: i64, current: i64) {
    if desired < current {
        list.insert(0, u);
    } else {
        list.push(u);
    }
}

/// The plan that brings `running` from `actuated` (missing: all 0, as the kubelet) to their
/// allocated resources.
pub fn plan<'a>(
    running: impl IntoIterator<Item = Running<'a>>,
    actuated: &BTreeMap<String, Resources>,
) -> Plan {
    let mut out = Plan::default();
    for r in running {
        let desired = Resources::of(r.spec.resources.as_ref());
        let current = actuated.get(&r.spec.name).copied().unwrap_or_default();
        if desired == current {
            continue;
        }
        let memory = desired.memory_limit != current.memory_limit
            || desired.memory_request != current.memory_request;
        let cpu =
            desired.cpu_limit != current.cpu_limit || desired.cpu_request != current.cpu_request;
        let restart = (memory && restarts(r.spec, "memory")) || (cpu && restarts(r.spec, "cpu"));
        if restart && r.restartable {
            out.restart.push((r.spec.name.clone(), r.id.to_owned()));
            continue;
        }
        let update = Update {
            name: r.spec.name.clone(),
            id: r.id.to_owned(),
            desired,
            current,
        };
        if desired.memory_limit != current.memory_limit {
            queue(
                &mut out.memory,
                update.clone(),
                desired.memory_limit,
                current.memory_limit,
            );
        } else if memory {
            let (d, c) = (desired.memory_request, current.memory_request);
            queue(&mut out.memory, update.clone(), d, c);
        }
        if desired.cpu_limit != current.cpu_limit {
            queue(&mut out.cpu, update, desired.cpu_limit, current.cpu_limit);
        } else if cpu {
            queue(
                &mut out.cpu,
                update,
                desired.cpu_request,
                current.cpu_request,
            );
        }
    }
    out
}

/// The memory updates that add or lower a memory limit: `(container, id, new limit)`; the
/// kubelet checks these against the containers' usage first.
pub fn lowered_memory_limits(plan: &Plan) -> Vec<(&str, &str, i64)> {
    plan.memory
        .iter()
        .filter(|u| {
            let (d, c) = (u.desired.memory_limit, u.current.memory_limit);
            d != 0 && (c == 0 || d < c)
        })
        .map(|u| (u.name.as_str(), u.id.as_str(), u.desired.memory_limit))
        .collect()
}

/// Why lowered memory limits cannot be applied, as the kubelet words it: one problem per
/// container (`usage` `None`: unknown), or `None` when every new limit is above the usage.
pub fn memory_limit_error(checked: &[(&str, i64, Option<u64>)]) -> Option<String> {
    let problems: Vec<String> = checked
        .iter()
        .filter_map(|(name, limit, usage)| match usage {
            None => Some(format!("missing container {name:?} memory usage")),
            Some(u) if i64::try_from(*u).unwrap_or(i64::MAX) >= *limit => Some(format!(
                "attempting to set container {name:?} memory limit ({limit}) below current usage ({u})"
            )),
            Some(_) => None,
        })
        .collect();
    match problems.as_slice() {
        [] => None,
        [one] => Some(format!("cannot decrease memory limits: {one}")),
        many => Some(format!(
            "cannot decrease memory limits: [{}]",
            many.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn container(name: &str, resources: serde_json::Value, policy: serde_json::Value) -> Container {
        serde_json::from_value(
            json!({"name": name, "resources": resources, "resizePolicy": policy}),
        )
        .expect("container")
    }

    fn values(cpu: i64, memory: i64) -> Resources {
        Resources {
            cpu_request: cpu,
            cpu_limit: cpu,
            memory_request: memory,
            memory_limit: memory,
        }
    }

    #[test]
    fn policies_decide_restart_or_update_and_decreases_go_first() {
        let restart_mem = json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
        let res = |cpu: &str, memory: &str| {
            json!({"requests": {"cpu": cpu, "memory": memory},
                "limits": {"cpu": cpu, "memory": memory}})
        };
        let a = container("a", res("30m", "40Mi"), json!([]));
        let b = container("b", res("10m", "20Mi"), json!([]));
        let c = container("c", res("20m", "30Mi"), restart_mem.clone());
        let d = container("d", res("20m", "30Mi"), restart_mem);
        let actuated = BTreeMap::from([
            ("a".to_owned(), values(20, 30 << 20)),
            ("b".to_owned(), values(20, 30 << 20)),
            ("c".to_owned(), values(20, 20 << 20)),
            ("d".to_owned(), values(10, 30 << 20)),
        ]);
        let running = [&a, &b, &c, &d].map(|spec| Running {
            spec,
            id: "id",
            restartable: true,
        });
        let p = plan(running, &actuated);
        assert_eq!(p.restart, [("c".to_owned(), "id".to_owned())]);
        let names = |l: &[Update]| l.iter().map(|u| u.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&p.memory), ["b", "a"], "the decrease first");
        assert_eq!(names(&p.cpu), ["b", "a", "d"]);
        assert_eq!(lowered_memory_limits(&p), [("b", "id", 20 << 20)]);
    }

    #[test]
    fn a_regular_init_container_is_updated_not_restarted() {
        let policy = json!([{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]);
        let i = container("i", json!({"requests": {"cpu": "25m"}}), policy);
        let running = [Running {
            spec: &i,
            id: "x",
            restartable: false,
        }];
        let p = plan(running, &BTreeMap::new());
        assert!(p.restart.is_empty());
        assert_eq!(p.cpu.len(), 1);
        let same = BTreeMap::from([("i".to_owned(), Resources::of(i.resources.as_ref()))]);
        assert!(plan(running, &same).is_empty());
    }

    #[test]
    fn memory_errors_are_worded_as_the_kubelet() {
        assert_eq!(memory_limit_error(&[("c1", 10240, Some(100))]), None);
        assert_eq!(
            memory_limit_error(&[("c1", 10240, Some(500_000))]).as_deref(),
            Some(
                "cannot decrease memory limits: attempting to set container \"c1\" memory limit (10240) below current usage (500000)"
            )
        );
        let both = memory_limit_error(&[("a", 1, None), ("b", 1, Some(2))]).expect("error");
        assert!(both.starts_with("cannot decrease memory limits: [missing container \"a\""));
    }
}
