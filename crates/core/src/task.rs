//! The wire form of fleet tasks (group `fleet`, docs/protocol.md "Fleet tasks"): one node's
//! share of an `operations.kubeedge.io` job, sent by fleetcontroller as the content of
//! `update node/<node>/_/nodetask/<name>`, and the node's progress, reported as the content of
//! `update _/nodetaskstatus/<name>`. Both are JSON; the message header's uid is the job's uid,
//! its resourceVersion the job's `metadata.generation`.
//!
//! Every field is already checked by fleetcontroller (image references of the distribution
//! grammar, a semantic version, field paths of identifiers); the node checks them again and
//! never passes one to a shell.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The kinds of job a task belongs to; the first part of a [`TaskName`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum JobKind {
    /// `NodeUpgradeJob` (`nodeupgradejob`).
    NodeUpgradeJob,
    /// `ImagePrePullJob` (`imageprepulljob`).
    ImagePrePullJob,
    /// `ConfigUpdateJob` (`configupdatejob`).
    ConfigUpdateJob,
}

impl JobKind {
    /// The kind's lower-case name, as in a [`TaskName`] and the job's resource plural.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NodeUpgradeJob => "nodeupgradejob",
            Self::ImagePrePullJob => "imageprepulljob",
            Self::ConfigUpdateJob => "configupdatejob",
        }
    }
}

/// A task's name, `<job kind>.<job name>` (e.g. `imageprepulljob.cache-web`): the name of its
/// `nodetask` and `nodetaskstatus` resources. Job names are Kubernetes names (they may hold
/// dots), so the kind ends at the first dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskName {
    /// The job's kind.
    pub kind: JobKind,
    /// The job's name.
    pub job: String,
}

impl TaskName {
    /// Parses `<kind>.<job>`.
    ///
    /// # Errors
    /// [`Error::ResourcePath`] for another kind or an empty or over-long job name.
    pub fn parse(name: &str) -> Result<Self> {
        let bad = |reason| Error::ResourcePath {
            path: name.to_owned(),
            reason,
        };
        let (kind, job) = name
            .split_once('.')
            .ok_or(bad("not <job kind>.<job name>"))?;
        let kind = match kind {
            "nodeupgradejob" => JobKind::NodeUpgradeJob,
            "imageprepulljob" => JobKind::ImagePrePullJob,
            "configupdatejob" => JobKind::ConfigUpdateJob,
            _ => return Err(bad("unknown job kind")),
        };
        if job.is_empty() || job.len() > 253 {
            return Err(bad("job name empty or longer than 253 bytes"));
        }
        Ok(Self {
            kind,
            job: job.to_owned(),
        })
    }
}

impl std::fmt::Display for TaskName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.kind.as_str(), self.job)
    }
}

/// One node's task: the knobs every job has and what this kind does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeTask {
    /// How long the node may work on it, from when it starts, in seconds.
    pub timeout_seconds: u64,
    /// Checks before it starts: `cpu`, `mem`, `disk` (usage below 90 %).
    #[serde(default)]
    pub checks: Vec<String>,
    /// What to do.
    pub action: TaskAction,
}

/// What a task does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum TaskAction {
    /// Pull images (ImagePrePullJob).
    PrePull(PrePull),
    /// Replace edgecore (NodeUpgradeJob).
    Upgrade(Upgrade),
    /// Change fields of edgecore's configuration (ConfigUpdateJob).
    ConfigUpdate(ConfigUpdate),
}

/// Images to pull, with credentials per registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrePull {
    /// Image references, in order.
    pub images: Vec<String>,
    /// Credentials by registry host (as in a `.dockerconfigjson`'s `auths`), only for the
    /// registries of `images`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub auths: BTreeMap<String, RegistryAuth>,
    /// Further tries of a failed pull.
    #[serde(default)]
    pub retries: u32,
}

/// A registry login: user name and password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistryAuth {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The NodeUpgradeJob annotation with which a node's administrator confirms an upgrade that
/// `requireConfirmation` holds (KubeEdge confirms on the node with `keadm ctl confirm`):
/// `"true"` or `"*"` confirms it for every node of the job, else it is a comma-separated list
/// of node names.
pub const CONFIRM_ANNOTATION: &str = "operations.kubeedge.io/confirm";

/// Whether `annotation` (the value of [`CONFIRM_ANNOTATION`]) confirms the upgrade of `node`.
pub fn confirms(annotation: &str, node: &str) -> bool {
    let annotation = annotation.trim();
    annotation == "true" || annotation == "*" || annotation.split(',').any(|n| n.trim() == node)
}

/// Another edgecore, from an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Upgrade {
    /// The version, without `v`.
    pub version: String,
    /// The image holding it, with the version as its tag.
    pub image: String,
    /// Digests the image must have, by architecture (`amd64`, `arm64`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub digests: BTreeMap<String, String>,
    /// Whether the node waits for its administrator's confirmation.
    #[serde(default)]
    pub require_confirmation: bool,
    /// Whether its administrator confirmed it ([`CONFIRM_ANNOTATION`]).
    #[serde(default)]
    pub confirmed: bool,
}

/// Fields of edgecore's configuration to set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigUpdate {
    /// Dotted field path to its new value, written as YAML.
    pub fields: BTreeMap<String, String>,
}

/// A node's progress on a task (KubeEdge's node task status).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTaskReport {
    /// `InProgress`, `Successful` or `Failure`.
    pub phase: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The steps taken: `{action, status: True|False, reason, time}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_flow: Vec<ActionReport>,
    /// Per image of a pre-pull: `{image, status: True|False, reason}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_status: Vec<ImageReport>,
    /// The edgecore version the node runs now (upgrade).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_version: String,
    /// The edgecore version it ran before (upgrade).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub historic_version: String,
}

/// One step of a task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionReport {
    /// The step, e.g. `Check`, `Pull`.
    pub action: String,
    /// `True` or `False`.
    pub status: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
}

/// One image of a pre-pull on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageReport {
    /// The image reference.
    pub image: String,
    /// `True` or `False`.
    pub status: String,
    /// Why its pull failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_split_at_the_first_dot() {
        let name = TaskName::parse("imageprepulljob.cache.v2").expect("valid");
        assert_eq!(name.kind, JobKind::ImagePrePullJob);
        assert_eq!(name.job, "cache.v2");
        assert_eq!(name.to_string(), "imageprepulljob.cache.v2");
        for bad in ["imageprepulljob", "imageprepulljob.", "podjob.x", ".x"] {
            assert!(TaskName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_stay_out_of_debug_output() {
        let auth = RegistryAuth {
            username: "u".into(),
            password: "secret".into(),
        };
        assert!(!format!("{auth:?}").contains("secret"));
    }
}
