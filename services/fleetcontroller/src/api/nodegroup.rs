//! `NodeGroup` (apps.kubeedge.io/v1alpha1, cluster-scoped): a named set of nodes.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Which nodes are members: those named in `nodes` (that exist) and those carrying every
/// label of `matchLabels` (an empty map selects every node; no map selects none), as in
/// KubeEdge.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "apps.kubeedge.io",
    version = "v1alpha1",
    kind = "NodeGroup",
    plural = "nodegroups",
    shortname = "ng",
    status = "NodeGroupStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupSpec {
    /// Member node names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Nodes with all of these labels are members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Members also get `topology.kubernetes.io/zone=<group>`.
    #[serde(default)]
    pub topology_enabled: bool,
}

/// What fleetcontroller reports: every node the spec selects, sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupStatus {
    /// One entry per selected node.
    #[serde(default)]
    pub node_statuses: Vec<MemberStatus>,
}

/// One selected node (KubeEdge's `NodeStatus` of a NodeGroup).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The node's name.
    pub node_name: String,
    /// `Ready`, `NotReady` or `Unknown`: the node's Ready condition.
    pub ready_status: String,
    /// `Succeeded` (a member) or `Failed` (another group holds it, or no such node).
    pub selection_status: String,
    /// Why the selection failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selection_status_reason: String,
}
