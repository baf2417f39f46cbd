//! Pod admission on the node (kubelet: the lifecycle admit handlers of `canAdmitPod`): a pod
//! the node cannot run fails at once, phase `Failed` with the kubelet's reason and message,
//! and nothing of it is created. Checked in this order:
//! - the `kubernetes.io/os` node selector must be `linux` (`PodOSSelectorNodeLabelDoesNotMatch`);
//! - `spec.os.name` must be `linux` (`PodOSNotSupported`);
//! - the sysctls must be allowed ([`crate::sysctls`], `SysctlForbidden`);
//! - beside the pods already admitted and still active, the pod must fit the node's
//!   allocatable pod count, cpu, memory and ephemeral storage (`OutOfpods`, `OutOfcpu`,
//!   `OutOfmemory`, `OutOfephemeral-storage`), and its host ports must be free
//!   (`NodePorts`): the predicate admit handler's `generalFilter` ([`fit`]), checked and
//!   registered at once in the shared registry of admitted pods ([`Admitted`]).
//!
//! The first three depend on the pod alone ([`rejection`]); the last on the other pods.
//!
//! The registry also decides whether an admitted pod's in-place resize can be allocated
//! ([`Admitted::resize`], kubelet: the allocation manager's `handlePodResourcesResize`), and
//! counts every pod at its allocated resources, so admissions and resizes are weighed against
//! one view of the node ([`crate::resize`] applies the allocation).
//!
//! # Layout
//! - [`fit`]: what a pod takes of the node (its effective requests and host ports), and
//!   whether it fits beside the others, admitted or resized.
//! - [`admitted`]: the registry of admitted pods, their resizes, and their restoration after a
//!   restart.
//! - this file: the node's [`NodeResources`], and the checks of the pod alone.

pub mod admitted;
pub mod fit;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tracing::warn;

pub use admitted::{Admitted, Ticket, ran_before};
pub use fit::{Allocatable, Insufficient, Pending, Requests};

use crate::config::{EdgedSettings, Reserved};
use crate::node::host::HostFacts;
use crate::quantity::parse_scaled;
use verge_runtime::ErrorChain;

/// The prefix of the status message of a pod refused at admission (the kubelet's
/// `rejectPod`: `Pod was rejected: <message>`; its Warning event carries the bare message).
pub const REJECTED_PREFIX: &str = "Pod was rejected: ";

/// What the node offers pods, as its node status reports it ([`crate::node::status::capacity`]
/// and [`crate::node::status::allocatable`] over [`HostFacts`] collected once, at edged's
/// start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeResources {
    /// What pods may request in total (the registry of admitted pods weighs them against it).
    pub allocatable: Allocatable,
    /// `capacity.memory`, bytes: the OOM score adjustment of Burstable containers
    /// ([`crate::resources::oom_score_adj`]); 0 when unknown.
    pub memory_capacity: u64,
}

impl NodeResources {
    /// This host's. An unparsable `systemReserved` (which also stops the node agent) counts
    /// as nothing reserved; should collecting the facts panic, only the pod count is weighed.
    pub async fn detect(config: &Arc<EdgedSettings>) -> Self {
        let reserved = config.reserved().unwrap_or_else(|e| {
            warn!(error = %ErrorChain(&e), "systemReserved ignored for pod admission");
            Reserved::default()
        });
        let data_dir = config.data_dir.clone();
        let facts = match tokio::task::spawn_blocking(move || HostFacts::collect(&data_dir)).await {
            Ok(facts) => facts,
            Err(e) => {
                warn!(error = %e, "host facts not collected; admitting by pod count only");
                return Self {
                    allocatable: Allocatable {
                        cpu_millis: u64::MAX,
                        memory_bytes: u64::MAX,
                        ephemeral_storage_bytes: u64::MAX,
                        pods: u64::from(config.edged.max_pods),
                    },
                    memory_capacity: 0,
                };
            }
        };
        Self::of(config, &reserved, &facts)
    }

    /// The resources of a host of `facts`, less `reserved`.
    pub fn of(config: &EdgedSettings, reserved: &Reserved, facts: &HostFacts) -> Self {
        let allocatable = crate::node::status::allocatable(config, reserved, facts);
        let capacity = crate::node::status::capacity(config, facts);
        Self {
            allocatable: Allocatable::from_quantities(&allocatable),
            memory_capacity: capacity
                .get("memory")
                .and_then(|q| parse_scaled(&q.0, 0))
                .unwrap_or(0),
        }
    }
}

/// The node's OS, as its `kubernetes.io/os` label says.
const NODE_OS: &str = "linux";

/// Admits pod `uid` (`pod`) on the node, in the kubelet's order: [`rejection`] first, then
/// the fit beside the admitted pods, registering it ([`Admitted::admit`]).
///
/// # Errors
/// The kubelet's `(reason, message)` of the first check the pod fails.
pub fn admit(admitted: &Admitted, uid: &str, pod: &Pod) -> Result<Ticket, (&'static str, String)> {
    match rejection(pod) {
        Some(refused) => Err(refused),
        None => admitted.admit(uid, pod),
    }
}

/// Why the node refuses `pod` whatever else runs on it (OS, sysctls): `(reason, message)`,
/// or `None` when it does not.
pub fn rejection(pod: &Pod) -> Option<(&'static str, String)> {
    let spec = pod.spec.as_ref()?;
    let selected_os = spec
        .node_selector
        .as_ref()
        .and_then(|s| s.get("kubernetes.io/os"));
    if selected_os.is_some_and(|os| os != NODE_OS) {
        return Some((
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label".into(),
        ));
    }
    if spec.os.as_ref().is_some_and(|os| os.name != NODE_OS) {
        return Some((
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS".into(),
        ));
    }
    crate::sysctls::forbidden(pod).map(|m| (crate::sysctls::FORBIDDEN_REASON, m))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({ "spec": spec })).expect("pod")
    }

    #[test]
    fn another_os_is_refused_with_the_kubelets_reasons() {
        let windows = pod(json!({"os": {"name": "windows"}, "containers": []}));
        assert_eq!(rejection(&windows).map(|r| r.0), Some("PodOSNotSupported"));
        let selected = pod(json!({"nodeSelector": {"kubernetes.io/os": "windows"},
            "containers": []}));
        assert_eq!(
            rejection(&selected).map(|r| r.0),
            Some("PodOSSelectorNodeLabelDoesNotMatch")
        );
        let linux = pod(json!({"os": {"name": "linux"},
            "nodeSelector": {"kubernetes.io/os": "linux"}, "containers": []}));
        assert_eq!(rejection(&linux), None);
    }

    #[test]
    fn an_unsafe_sysctl_is_refused() {
        let p = pod(
            json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
            "containers": []}),
        );
        assert_eq!(rejection(&p).map(|r| r.0), Some("SysctlForbidden"));
    }
}
