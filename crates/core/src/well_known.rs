//! Names that Kubernetes and KubeEdge fix and that both the cloud and the edge use.

/// The label that marks edge nodes, with an empty value (KubeEdge: `node-role.kubernetes.io/edge`).
/// edgecore sets it when it registers its Node; edgecontroller serves only Nodes that carry it.
pub const EDGE_NODE_LABEL: &str = "node-role.kubernetes.io/edge";

/// The namespace of node heartbeat Leases (Kubernetes `kube-node-lease`, one Lease per node,
/// named after it).
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
