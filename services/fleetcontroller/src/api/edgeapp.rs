//! `EdgeApplication` (apps.kubeedge.io/v1alpha1, namespaced): one workload, placed per target
//! (a NodeGroup, or a label selection of nodes) with that target's overriders.

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The workload and its targets.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "apps.kubeedge.io",
    version = "v1alpha1",
    kind = "EdgeApplication",
    plural = "edgeapplications",
    shortname = "eapp",
    namespaced,
    status = "EdgeApplicationStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct EdgeApplicationSpec {
    /// The objects of the workload.
    #[serde(default)]
    pub workload_template: WorkloadTemplate,
    /// Where the workload goes.
    #[serde(default)]
    pub workload_scope: WorkloadScope,
}

/// `workloadTemplate`: the manifests, as the user wrote them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadTemplate {
    /// Kubernetes objects (JSON objects with apiVersion, kind, metadata.name).
    #[serde(default)]
    pub manifests: Vec<serde_json::Value>,
}

/// `workloadScope`: the targets, NodeGroups first, then label selections.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadScope {
    /// NodeGroups, by name.
    #[serde(default)]
    pub target_node_groups: Vec<TargetNodeGroup>,
    /// Label selections of nodes.
    #[serde(default)]
    pub target_node_labels: Vec<TargetNodeLabels>,
}

/// A NodeGroup target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetNodeGroup {
    /// The NodeGroup's name.
    pub name: String,
    /// How this group's copy differs from the template.
    #[serde(default)]
    pub overriders: Overriders,
}

/// A label-selection target: the nodes carrying every `matchLabels` pair (as in KubeEdge,
/// `matchExpressions` are not used for placement).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetNodeLabels {
    /// The selection.
    #[serde(default)]
    pub label_selector: LabelSelector,
    /// How this selection's copy differs from the template.
    #[serde(default)]
    pub overriders: Overriders,
}

/// A target's overriders, applied to each Deployment of the template in this order: replicas,
/// image, command, args, env, resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overriders {
    /// `spec.replicas` of each Deployment.
    #[serde(default)]
    pub replicas: Option<i32>,
    /// Image edits.
    #[serde(default)]
    pub image_overriders: Vec<ImageOverrider>,
    /// Environment edits.
    #[serde(default)]
    pub env_overriders: Vec<EnvOverrider>,
    /// Command edits.
    #[serde(default)]
    pub command_overriders: Vec<WordsOverrider>,
    /// Args edits.
    #[serde(default)]
    pub args_overriders: Vec<WordsOverrider>,
    /// Resource replacements.
    #[serde(default)]
    pub resources_overriders: Vec<ResourcesOverrider>,
}

/// One image edit (KubeEdge's `ImageOverrider`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageOverrider {
    /// Only the image at this JSON pointer; without it every container image.
    #[serde(default)]
    pub predicate: Option<ImagePredicate>,
    /// `Registry`, `Repository` or `Tag`.
    pub component: ImageComponent,
    /// `add`, `remove` or `replace`.
    pub operator: Operator,
    /// The text added or put in place.
    #[serde(default)]
    pub value: String,
}

/// `predicate` of an [`ImageOverrider`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImagePredicate {
    /// JSON pointer of an image field, e.g. `/spec/template/spec/containers/0/image`.
    pub path: String,
}

/// The part of an image reference an [`ImageOverrider`] edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageComponent {
    /// The registry host (`registry.example:5000`).
    Registry,
    /// The repository path (`library/nginx`).
    Repository,
    /// The tag (or, when there is none, the digest).
    Tag,
}

/// An overrider's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operator {
    /// Add (append, or set by name).
    Add,
    /// Remove.
    Remove,
    /// Replace.
    Replace,
}

/// An environment edit of one container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvOverrider {
    /// The container (in `containers`).
    pub container_name: String,
    /// `add` sets each variable (replacing one of the same name), `remove` drops the
    /// variables of these names, `replace` sets those of these names that exist.
    pub operator: Operator,
    /// The variables.
    #[serde(default)]
    pub value: Vec<EnvVar>,
}

/// A command or args edit of one container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WordsOverrider {
    /// The container (in `containers`).
    pub container_name: String,
    /// `add` appends the words, `remove` drops every word equal to one of them.
    pub operator: Operator,
    /// The words.
    #[serde(default)]
    pub value: Vec<String>,
}

/// A resources replacement of one container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesOverrider {
    /// The container (in `containers`).
    pub container_name: String,
    /// Each request and limit named here replaces the container's.
    pub value: ResourceRequirements,
}

/// What fleetcontroller reports: one entry per object it manages, sorted by ordinal then
/// name, plus one per manifest it could not place.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EdgeApplicationStatus {
    /// The objects' states.
    #[serde(default)]
    pub workload_status: Vec<ManifestStatus>,
}

/// One object of an EdgeApplication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestStatus {
    /// Which manifest, and which object made of it.
    pub identifier: ResourceIdentifier,
    /// `Processing` (being applied, rolling out, or failed) or `Available`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<String>,
}

/// The identity of an object made from manifest number `ordinal`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResourceIdentifier {
    /// Index of the manifest in `workloadTemplate.manifests`.
    pub ordinal: u32,
    /// API group (empty for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// API version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Resource (plural).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}
