//! The resources fleetcontroller serves, as typed Rust: KubeEdge's `apps.kubeedge.io/v1alpha1`
//! [`NodeGroup`] and [`EdgeApplication`], and the `operations.kubeedge.io/v1alpha2` jobs of
//! [`operations`]. Their schemas are the CRDs of `deploy/crds`
//! (schema-compatible with KubeEdge v1.23); these types read and write the fields
//! fleetcontroller uses and keep unknown ones out of its writes (status is written through
//! the status subresource only).

pub mod edgeapp;
pub mod nodegroup;
pub mod operations;

pub use edgeapp::{EdgeApplication, EdgeApplicationSpec, EdgeApplicationStatus};
pub use nodegroup::{NodeGroup, NodeGroupSpec, NodeGroupStatus};

/// The label fleetcontroller puts on each member Node of a NodeGroup: its value is the
/// group's name (KubeEdge's `apps.kubeedge.io/belonging-to`). A Deployment of an
/// EdgeApplication is pinned to a group by a nodeSelector on it.
pub use verge_core::well_known::NODE_GROUP_LABEL as BELONGING_TO;

/// The zone label set to the group's name on member Nodes of a NodeGroup with
/// `topologyEnabled` (Kubernetes' well-known `topology.kubernetes.io/zone`).
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// The Service annotation that keeps a group's traffic on its own endpoints (KubeEdge's
/// service topology): with the value [`RANGE_NODEGROUP`], an edge node uses only the
/// endpoints on nodes of its own NodeGroup. fleetcontroller sets it on every Service of an
/// EdgeApplication; users may set it on any Service.
pub use verge_core::well_known::SERVICE_TOPOLOGY_ANNOTATION as SERVICE_TOPOLOGY;

pub use verge_core::well_known::RANGE_NODEGROUP;
