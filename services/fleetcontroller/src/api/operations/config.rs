//! `ConfigUpdateJob` (operations.kubeedge.io/v1alpha2): named fields of edgecore's
//! configuration changed on a set of edge nodes.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::{ActionStatus, JobPhase, JobTargets, NodeTaskPhase};

/// Which fields change, on which nodes.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha2",
    kind = "ConfigUpdateJob",
    plural = "configupdatejobs",
    status = "ConfigUpdateJobStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigUpdateJobSpec {
    /// Dotted field path of edgecore's configuration (`edged.maxPods`) to its new value,
    /// written as YAML.
    #[serde(default)]
    pub update_fields: BTreeMap<String, String>,
    /// Nodes, concurrency, timeout, tolerance, checks.
    #[serde(flatten)]
    pub targets: JobTargets,
}

/// The job's progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigUpdateJobStatus {
    /// The job's phase.
    #[serde(default)]
    pub phase: JobPhase,
    /// One entry per selected node, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_status: Vec<ConfigNodeStatus>,
    /// Why the job failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// One node's update.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigNodeStatus {
    /// The node.
    pub node_name: String,
    /// Its task's phase.
    #[serde(default)]
    pub phase: NodeTaskPhase,
    /// Why its task failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Its steps (`Check`, `BackUp`, `Update`, `RollBack`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_flow: Vec<ActionStatus>,
}
