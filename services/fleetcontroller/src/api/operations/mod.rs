//! KubeEdge's `operations.kubeedge.io/v1alpha2` jobs, cluster-scoped: [`NodeUpgradeJob`],
//! [`ImagePrePullJob`] and [`ConfigUpdateJob`]. Each names its nodes by `nodeNames` or by
//! `labelSelector` (one of the two) and carries KubeEdge's knobs (`concurrency`,
//! `timeoutSeconds`, `failureTolerate`, `checkItems`); fleetcontroller reports a job
//! [`JobPhase`] and one entry per selected node with a [`NodeTaskPhase`].
//!
//! Integers are read as `i64` and strings as written, so that any value the CRD admits
//! deserializes and a wrong one is refused by [`crate::operations::validate`] with the
//! field's name, never by a decode error that would hide the job.

mod config;
mod prepull;
mod upgrade;

pub use config::{ConfigNodeStatus, ConfigUpdateJob, ConfigUpdateJobSpec, ConfigUpdateJobStatus};
pub use prepull::{
    ImagePrePullJob, ImagePrePullJobSpec, ImagePrePullJobStatus, ImagePrePullTemplate, ImageStatus,
    PrePullNodeStatus,
};
pub use upgrade::{
    ImageDigestGetter, NodeUpgradeJob, NodeUpgradeJobSpec, NodeUpgradeJobStatus, RegistryApi,
    UpgradeNodeStatus,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

/// A job's progress (each kind's `status`): its phase, one entry per selected node (`N`, the
/// kind's entry), and why it failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus<N> {
    /// The job's phase.
    #[serde(default)]
    pub phase: JobPhase,
    /// One entry per selected node, by name.
    #[serde(default = "Vec::new", skip_serializing_if = "Vec::is_empty")]
    pub node_status: Vec<N>,
    /// Why the job failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// What every kind's node entry holds (KubeEdge's `BasicNodeTaskStatus` and action flow),
/// flattened into it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BasicNodeStatus {
    /// The node.
    pub node_name: String,
    /// Its task's phase.
    #[serde(default)]
    pub phase: NodeTaskPhase,
    /// Why its task failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Its steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_flow: Vec<ActionStatus>,
}

/// A kind's node entry: the shared part and the kind's own fields.
pub trait NodeEntry: Serialize + Default {
    /// The shared part.
    fn basic(&self) -> &BasicNodeStatus;
    /// An entry with `basic` and no more.
    fn with(basic: BasicNodeStatus) -> Self;
}

/// The phase of a whole job (KubeEdge's `JobPhase`, its spelling `Complated` included, so
/// that KubeEdge's clients read Verge's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum JobPhase {
    /// Accepted; no node has started.
    #[default]
    Init,
    /// At least one node has started and the job has not ended.
    InProgress,
    /// Every node ended and no more failed than `failureTolerate` allows.
    #[serde(rename = "Complated")]
    Completed,
    /// The spec is invalid, or more nodes failed than `failureTolerate` allows.
    Failure,
}

impl JobPhase {
    /// Whether the job has ended (`Complated` or `Failure`): nothing changes it any more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failure)
    }
}

/// The phase of one node's task (KubeEdge's `NodeTaskPhase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum NodeTaskPhase {
    /// Selected; the node has not started (it may be offline, or waiting for concurrency).
    #[default]
    Pending,
    /// The node is executing the task.
    InProgress,
    /// The node finished the task.
    Successful,
    /// The node could not finish the task (the reason says why).
    Failure,
    /// The node's state cannot be known (e.g. the Node was deleted).
    Unknown,
}

/// One step of a node's task (KubeEdge's `*ActionStatus`): `status` is `True` when the step
/// succeeded, `False` when it failed; `time` is RFC 3339.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionStatus {
    /// The step, e.g. `Check`, `Pull`, `BackUp`, `Upgrade`, `RollBack`.
    #[serde(default)]
    pub action: String,
    /// `True` or `False`.
    #[serde(default)]
    pub status: String,
    /// Why the step failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When the step ended.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
}

/// The fields every job shares, flattened into its spec (KubeEdge repeats them per kind).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobTargets {
    /// Nodes by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_names: Vec<String>,
    /// Nodes by labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Seconds one node's task may take; unset or 0 means 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    /// Nodes running at once; unset or 0 means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i64>,
    /// The fraction of nodes that may fail, as a decimal string; unset means `0.1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_tolerate: String,
    /// Checks before the task: `cpu`, `mem`, `disk`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check_items: Vec<String>,
}
