//! `NodeUpgradeJob` (operations.kubeedge.io/v1alpha2): another edgecore version on a set of
//! edge nodes.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::{BasicNodeStatus, JobStatus, JobTargets, NodeEntry};

/// Which nodes get which edgecore: `version` is the tag of `image`, whose digest for the
/// node's architecture must match `imageDigestGatter` when that is set.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha2",
    kind = "NodeUpgradeJob",
    plural = "nodeupgradejobs",
    status = "NodeUpgradeJobStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct NodeUpgradeJobSpec {
    /// The edgecore version, `v<major>.<minor>.<patch>[-pre][+build]`.
    #[serde(default)]
    pub version: String,
    /// The image's registry and repository (a tag or digest in it is replaced by `version`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// The digests the image must have (KubeEdge spells the field `imageDigestGatter`).
    #[serde(
        default,
        rename = "imageDigestGatter",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_digest_getter: Option<ImageDigestGetter>,
    /// Each node waits for its administrator's confirmation first.
    #[serde(default)]
    pub require_confirmation: bool,
    /// Nodes, concurrency, timeout, tolerance, checks.
    #[serde(flatten)]
    pub targets: JobTargets,
}

/// Image digests per architecture (`sha256:<64 hex>`), or a registry to read them from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageDigestGetter {
    /// The digest for amd64 nodes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub amd64: String,
    /// The digest for arm64 nodes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub arm64: String,
    /// A registry's v2 API to read the digests from.
    #[serde(
        default,
        rename = "registryAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub registry_api: Option<RegistryApi>,
}

/// A registry's v2 API: its host and a bearer token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryApi {
    /// The registry's host (`name[:port]`).
    #[serde(default)]
    pub host: String,
    /// A bearer token for it.
    #[serde(default)]
    pub token: String,
}

/// The job's progress.
pub type NodeUpgradeJobStatus = JobStatus<UpgradeNodeStatus>;

/// One node's upgrade.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeNodeStatus {
    /// Node, phase, reason and steps.
    #[serde(flatten)]
    pub basic: BasicNodeStatus,
    /// The edgecore version it runs now.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_version: String,
    /// The edgecore version it ran before.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub historic_version: String,
}

impl NodeEntry for UpgradeNodeStatus {
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
