//! Names that Kubernetes and KubeEdge fix and that both the cloud and the edge use.

/// The label that marks edge nodes, with an empty value (KubeEdge: `node-role.kubernetes.io/edge`).
/// edgecore sets it when it registers its Node; edgecontroller serves only Nodes that carry it.
pub const EDGE_NODE_LABEL: &str = "node-role.kubernetes.io/edge";

/// The namespace of node heartbeat Leases (Kubernetes `kube-node-lease`, one Lease per node,
/// named after it).
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The Node label naming a node's site (Verge's): edge nodes with the same value reach each
/// other's addresses and pod networks directly. edgecontroller sends each edge node the
/// trimmed Nodes of its site; edgecore routes to their pod CIDRs.
pub const SITE_LABEL: &str = "verge.io/site";

/// The Node label naming a node's NodeGroup (KubeEdge's `apps.kubeedge.io/belonging-to`):
/// fleetcontroller sets it on a group's members and pins an EdgeApplication's Deployments
/// with it; edgecontroller sends each edge node the trimmed Nodes of its group.
pub const NODE_GROUP_LABEL: &str = "apps.kubeedge.io/belonging-to";

/// The Service annotation of KubeEdge's service topology: with the value
/// [`RANGE_NODEGROUP`], an edge node of a NodeGroup uses only the endpoints on its group's
/// nodes. fleetcontroller sets it on every Service of an EdgeApplication.
pub const SERVICE_TOPOLOGY_ANNOTATION: &str = "apps.kubeedge.io/service-topology";

/// The value of [`SERVICE_TOPOLOGY_ANNOTATION`] that keeps a group's traffic in the group.
pub const RANGE_NODEGROUP: &str = "range-nodegroup";
