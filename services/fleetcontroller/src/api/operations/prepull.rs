//! `ImagePrePullJob` (operations.kubeedge.io/v1alpha2): images pulled onto a set of edge
//! nodes before pods need them.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::{BasicNodeStatus, JobStatus, JobTargets, NodeEntry};

/// What to pull where: one template for every selected node.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha2",
    kind = "ImagePrePullJob",
    plural = "imageprepulljobs",
    status = "ImagePrePullJobStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullJobSpec {
    /// The pull.
    #[serde(default)]
    pub image_pre_pull_template: ImagePrePullTemplate,
}

/// The images, the registry's credentials and the retries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullTemplate {
    /// Image references, `[registry/]repository[:tag|@digest]`.
    #[serde(default)]
    pub images: Vec<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret, `<namespace>/<name>` (KubeEdge's field is
    /// `imageSecrets`, one Secret).
    #[serde(
        default,
        rename = "imageSecrets",
        skip_serializing_if = "String::is_empty"
    )]
    pub image_secret: String,
    /// Further tries of a failed pull on a node; unset means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_times: Option<i64>,
    /// Nodes, concurrency, timeout, tolerance, checks.
    #[serde(flatten)]
    pub targets: JobTargets,
}

/// The job's progress.
pub type ImagePrePullJobStatus = JobStatus<PrePullNodeStatus>;

/// One node's pulls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrePullNodeStatus {
    /// Node, phase, reason and steps.
    #[serde(flatten)]
    pub basic: BasicNodeStatus,
    /// One entry per image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_status: Vec<ImageStatus>,
}

/// One image on one node: `status` `True` once it is there, `False` when its pull failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    /// The image reference, as the spec lists it.
    pub image: String,
    /// `True` or `False`.
    #[serde(default)]
    pub status: String,
    /// Why its pull failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl NodeEntry for PrePullNodeStatus {
    fn basic(&self) -> &BasicNodeStatus {
        &self.basic
    }
    fn with(basic: BasicNodeStatus) -> Self {
        Self {
            basic,
            ..Self::default()
        }
    }
}
