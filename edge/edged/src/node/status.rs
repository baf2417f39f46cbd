//! The objects edgecore reports for its node, built like the kubelet builds them
//! (`pkg/kubelet/nodestatus/setters.go`, `pkg/kubelet/nodelease`).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::host::HostFacts;
use crate::config::{EdgedSettings, Reserved};
use crate::quantity::{format_cpu, format_ki};

/// `status.nodeInfo.kubeletVersion`.
pub fn kubelet_version() -> String {
    format!("v1.37.1-verge-{}", env!("CARGO_PKG_VERSION"))
}

/// The `v1.Node` registered on every (re)connect: name, labels, taints.
pub fn node_object(config: &EdgedSettings, facts: &HostFacts) -> Node {
    let mut labels = BTreeMap::from([
        (
            "kubernetes.io/hostname".to_owned(),
            config.node_name.clone(),
        ),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), facts.architecture.clone()),
        (verge_core::EDGE_NODE_LABEL.to_owned(), String::new()),
    ]);
    labels.extend(config.edged.node_labels.clone());
    let taints: Vec<Taint> = config
        .edged
        .register_with_taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: Some(t.value.clone()).filter(|v| !v.is_empty()),
            effect: t.effect.clone(),
            time_added: None,
        })
        .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(config.node_name.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: Some(taints).filter(|t| !t.is_empty()),
            ..NodeSpec::default()
        }),
        status: None,
    }
}

/// Remembers when each node condition last changed status, so `lastTransitionTime` stays
/// stable across updates (kubelet: `setters.go` keeps it unless the status flips).
#[derive(Debug, Default, Clone)]
pub struct Conditions {
    seen: BTreeMap<&'static str, (&'static str, Timestamp)>,
}

impl Conditions {
    /// The condition `kind` with `status` observed `now`.
    fn observe(
        &mut self,
        kind: &'static str,
        status: &'static str,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> NodeCondition {
        let entry = self.seen.entry(kind).or_insert((status, now));
        if entry.0 != status {
            *entry = (status, now);
        }
        NodeCondition {
            type_: kind.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_heartbeat_time: Some(Time(now)),
            last_transition_time: Some(Time(entry.1)),
        }
    }
}

/// `status.capacity`: the host's CPUs, memory (whole KiB), the size of the data directory's
/// filesystem when known, and `maxPods` pods. The OOM score adjustment of containers weighs
/// their memory request against this memory ([`crate::admission::NodeResources`]).
pub fn capacity(config: &EdgedSettings, facts: &HostFacts) -> BTreeMap<String, Quantity> {
    let q = |s: String| Quantity(s);
    let mut capacity = BTreeMap::from([
        ("cpu".to_owned(), q(format_cpu(facts.cpu_millis))),
        ("memory".to_owned(), q(format_ki(facts.memory_bytes))),
        ("pods".to_owned(), q(config.edged.max_pods.to_string())),
    ]);
    if let Some(bytes) = facts.ephemeral_storage_bytes {
        capacity.insert("ephemeral-storage".to_owned(), q(format_ki(bytes)));
    }
    capacity
}

/// `status.allocatable`: the host's capacity minus `systemReserved` (cpu, memory, and
/// ephemeral storage when the data directory's filesystem is known), and `maxPods` pods.
/// Pod admission and in-place resize weigh pods against these same quantities
/// ([`crate::admission::NodeResources`], [`crate::admission::Allocatable::from_quantities`]).
pub fn allocatable(
    config: &EdgedSettings,
    reserved: &Reserved,
    facts: &HostFacts,
) -> BTreeMap<String, Quantity> {
    let q = |s: String| Quantity(s);
    let mut allocatable = BTreeMap::from([
        (
            "cpu".to_owned(),
            q(format_cpu(
                facts.cpu_millis.saturating_sub(reserved.cpu_millis),
            )),
        ),
        (
            "memory".to_owned(),
            q(format_ki(
                facts.memory_bytes.saturating_sub(reserved.memory_bytes),
            )),
        ),
        ("pods".to_owned(), q(config.edged.max_pods.to_string())),
    ]);
    if let Some(bytes) = facts.ephemeral_storage_bytes {
        let free = bytes.saturating_sub(reserved.ephemeral_storage_bytes);
        allocatable.insert("ephemeral-storage".to_owned(), q(format_ki(free)));
    }
    allocatable
}

/// The `v1.NodeStatus` computed every `node_status_update_frequency` (sent when
/// [`super::report::LastSent`] says so).
pub fn node_status(
    config: &EdgedSettings,
    reserved: &Reserved,
    facts: &HostFacts,
    conditions: &mut Conditions,
    now: Timestamp,
) -> NodeStatus {
    let capacity = capacity(config, facts);
    let allocatable = allocatable(config, reserved, facts);
    let node_conditions = vec![
        conditions.observe(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            now,
        ),
        conditions.observe(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            now,
        ),
        conditions.observe(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            now,
        ),
        conditions.observe(
            "Ready",
            "True",
            "KubeletReady",
            "edgecore is posting ready status",
            now,
        ),
    ];
    let internal_ip = config
        .edged
        .node_ip
        .map(|ip| ip.to_string())
        .or_else(|| facts.ipv4.map(|ip| ip.to_string()));
    let mut addresses: Vec<NodeAddress> = internal_ip
        .into_iter()
        .map(|address| NodeAddress {
            type_: "InternalIP".to_owned(),
            address,
        })
        .collect();
    // The node's stream address, unique per node name and never routed: the API server
    // (first of its default `--kubelet-preferred-address-types`) and metrics-server dial it
    // for kubectl logs/exec, the node proxy and scrapes, and cloudhub maps it back to this
    // node's session (architecture.md §10; `verge_pki::stream_address`).
    addresses.push(NodeAddress {
        type_: "Hostname".to_owned(),
        address: verge_pki::stream_address(&config.node_name).to_string(),
    });
    NodeStatus {
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        conditions: Some(node_conditions),
        addresses: Some(addresses),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(config.streaming_port),
            }),
        }),
        node_info: Some(NodeSystemInfo {
            machine_id: facts.machine_id.clone(),
            system_uuid: facts.system_uuid.clone(),
            boot_id: facts.boot_id.clone(),
            kernel_version: facts.kernel_version.clone(),
            os_image: facts.os_image.clone(),
            operating_system: "linux".to_owned(),
            architecture: facts.architecture.clone(),
            container_runtime_version: "docker://unknown".to_owned(),
            kubelet_version: kubelet_version(),
            kube_proxy_version: String::new(),
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    }
}

/// The node's `coordination.k8s.io/v1.Lease`, renewed `now`: sent once per session, with the
/// `leaseDurationSeconds` whose quarter is edgecontroller's renew interval.
pub fn lease(config: &EdgedSettings, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(config.node_name.clone()),
            namespace: Some(verge_core::NODE_LEASE_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(config.node_name.clone()),
            lease_duration_seconds: Some(config.edged.node_lease_duration_seconds),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}
