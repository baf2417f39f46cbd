//! `ConfigUpdateJob` (operations.kubeedge.io/v1alpha2): named fields of edgecore's
//! configuration changed on a set of edge nodes.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::{BasicNodeStatus, JobStatus, JobTargets, NodeEntry};

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
pub type ConfigUpdateJobStatus = JobStatus<ConfigNodeStatus>;

/// One node's update.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigNodeStatus {
    /// Node, phase, reason and steps.
    #[serde(flatten)]
    pub basic: BasicNodeStatus,
}

impl NodeEntry for ConfigNodeStatus {
    fn basic(&self) -> &BasicNodeStatus {
        &self.basic
    }
    fn with(basic: BasicNodeStatus) -> Self {
        Self { basic }
    }
}
