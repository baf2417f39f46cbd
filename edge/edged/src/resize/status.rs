//! The resize parts of a pod's status: `containerStatuses[].resources` (kubelet
//! `convertContainerStatusResources`) and the messages of the resize events
//! (`events/resize.go`).

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use serde::Serialize;

use crate::resources::{Applied, MIN_MILLI_CPU_LIMIT, MIN_SHARES, Resources};
use crate::resources::{cpu_quantity, memory_quantity};

/// What the resources of a running container are built from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    /// What its cgroup settings say (the runtime's inspect).
    pub applied: Applied,
    /// Its actuated values (the memory request, which no cgroup setting holds).
    pub actuated: Option<&'a Resources>,
    /// The resources the last status reported for this same running instance.
    pub old: Option<&'a ResourceRequirements>,
}

/// `status.containerStatuses[].resources` of a container allocated `allocated`: those
/// values for a container that does not run; for a running one, the CPU request and limit
/// and the memory limit its cgroup holds (a value at or below the smallest the cgroup can
/// hold — 2 shares, 10 millicores of quota — stays as allocated when the allocation is at
/// or below it too) and the actuated memory request; a value the runtime does not give
/// keeps what the last status said. Only lists the allocation has are filled.
pub fn container_resources(
    allocated: Option<&ResourceRequirements>,
    running: Option<Observed<'_>>,
) -> ResourceRequirements {
    let mut out = allocated.cloned().unwrap_or_default();
    let Some(o) = running else {
        return out;
    };
    let want = Resources::of(allocated);
    // kubelet: the actuated values stand in when the runtime reports nothing at all.
    let from_runtime = o.applied != Applied::default();
    let actuated = o.actuated.copied().unwrap_or_default();
    let (cpu_limit, cpu_request, memory_limit) = if from_runtime {
        (
            o.applied.cpu_limit,
            o.applied.cpu_request,
            o.applied.memory_limit,
        )
    } else if o.actuated.is_some() {
        (
            Some(actuated.cpu_limit),
            Some(actuated.cpu_request),
            Some(actuated.memory_limit),
        )
    } else {
        (None, None, None)
    };
    let memory_request = o.actuated.map(|a| a.memory_request).filter(|m| *m > 0);
    let old_value = |limits: bool, name: &str| {
        let list = o.old.and_then(|r| {
            if limits {
                r.limits.as_ref()
            } else {
                r.requests.as_ref()
            }
        });
        list.and_then(|l| l.get(name)).cloned()
    };
    if let Some(limits) = out.limits.as_mut() {
        match cpu_limit {
            Some(v) if v > MIN_MILLI_CPU_LIMIT || want.cpu_limit > MIN_MILLI_CPU_LIMIT => {
                limits.insert("cpu".to_owned(), cpu_quantity(v));
            }
            Some(_) => {}
            None => {
                if let Some(q) = old_value(true, "cpu") {
                    limits.insert("cpu".to_owned(), q);
                }
            }
        }
        match memory_limit {
            Some(v) => {
                limits.insert("memory".to_owned(), memory_quantity(v));
            }
            None => {
                if let Some(q) = old_value(true, "memory") {
                    limits.insert("memory".to_owned(), q);
                }
            }
        }
    }
    if let Some(requests) = out.requests.as_mut() {
        match cpu_request {
            Some(v) if v > MIN_SHARES || want.cpu_request > MIN_SHARES => {
                requests.insert("cpu".to_owned(), cpu_quantity(v));
            }
            Some(_) => {}
            None => {
                if let Some(q) = old_value(false, "cpu") {
                    requests.insert("cpu".to_owned(), q);
                }
            }
        }
        match memory_request {
            Some(v) => {
                requests.insert("memory".to_owned(), memory_quantity(v));
            }
            None => {
                if let Some(q) = old_value(false, "memory") {
                    requests.insert("memory".to_owned(), q);
                }
            }
        }
    }
    out
}

#[derive(Serialize)]
struct Allocation<'a> {
    name: &'a str,
    resources: ResourceRequirements,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    init_containers: Vec<Allocation<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    containers: Vec<Allocation<'a>>,
    generation: i64,
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
}

/// The message of a resize event (kubelet `podResizeMessage`): `<prefix>: ` and the JSON of
/// `pod`'s container resources, `generation` and `error` (left out when empty), e.g.
/// `Pod resize started: {"containers":[{"name":"c1","resources":{…}}],"generation":2}`.
pub fn event_message(prefix: &str, pod: &Pod, generation: Option<i64>, error: &str) -> String {
    fn allocation(c: &k8s_openapi::api::core::v1::Container) -> Allocation<'_> {
        Allocation {
            name: &c.name,
            resources: c.resources.clone().unwrap_or_default(),
        }
    }
    let spec = pod.spec.as_ref();
    let summary = Summary {
        init_containers: spec
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .map(allocation)
            .collect(),
        containers: spec
            .into_iter()
            .flat_map(|s| s.containers.iter())
            .map(allocation)
            .collect(),
        generation: generation.unwrap_or(0),
        error,
    };
    match serde_json::to_string(&summary) {
        Ok(json) => format!("{prefix}: {json}"),
        Err(_) => prefix.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn requirements(v: serde_json::Value) -> ResourceRequirements {
        serde_json::from_value(v).expect("resources")
    }

    fn value(r: &ResourceRequirements, limits: bool, name: &str) -> Option<String> {
        let list = if limits { &r.limits } else { &r.requests };
        list.as_ref()?.get(name).map(|q| q.0.clone())
    }

    #[test]
    fn running_containers_show_their_cgroup_values() {
        let allocated = requirements(
            json!({"requests": {"cpu": "25m", "memory": "40Mi", "dummy.com/x": "1"},
            "limits": {"cpu": "25m", "memory": "40Mi"}}),
        );
        let actuated = Resources {
            memory_request: 35 << 20,
            ..Resources::default()
        };
        let applied = Applied {
            cpu_request: Some(20),
            cpu_limit: Some(20),
            memory_limit: Some(35 << 20),
        };
        let observed = Observed {
            applied,
            actuated: Some(&actuated),
            old: None,
        };
        let r = container_resources(Some(&allocated), Some(observed));
        assert_eq!(value(&r, true, "cpu").as_deref(), Some("20m"));
        assert_eq!(value(&r, true, "memory").as_deref(), Some("35Mi"));
        assert_eq!(value(&r, false, "cpu").as_deref(), Some("20m"));
        assert_eq!(value(&r, false, "memory").as_deref(), Some("35Mi"));
        assert_eq!(value(&r, false, "dummy.com/x").as_deref(), Some("1"));
        // Not running: the allocation.
        assert_eq!(container_resources(Some(&allocated), None), allocated);
        // Nothing allocated: empty lists stay absent.
        assert_eq!(
            container_resources(None, Some(observed)),
            ResourceRequirements::default()
        );
    }

    #[test]
    fn values_below_what_the_cgroup_holds_stay_as_allocated() {
        let allocated = requirements(json!({"requests": {"cpu": "1m"}, "limits": {"cpu": "5m"}}));
        let applied = Applied {
            cpu_request: Some(2),
            cpu_limit: Some(10),
            memory_limit: None,
        };
        let observed = Observed {
            applied,
            actuated: None,
            old: None,
        };
        let r = container_resources(Some(&allocated), Some(observed));
        assert_eq!(value(&r, true, "cpu").as_deref(), Some("5m"));
        assert_eq!(value(&r, false, "cpu").as_deref(), Some("1m"));
    }

    #[test]
    fn event_messages_summarise_the_allocation() {
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": [
            {"name": "c1", "resources": {"requests": {"cpu": "25m"}}}]}}))
        .expect("pod");
        assert_eq!(
            event_message("Pod resize started", &pod, Some(2), ""),
            r#"Pod resize started: {"containers":[{"name":"c1","resources":{"requests":{"cpu":"25m"}}}],"generation":2}"#
        );
        assert!(
            event_message("Pod resize error", &pod, Some(2), "boom")
                .ends_with(r#""generation":2,"error":"boom"}"#)
        );
    }
}
