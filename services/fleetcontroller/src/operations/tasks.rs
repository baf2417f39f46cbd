//! The tasks fleetcontroller sends: one job's share for one node ([`TaskObject`], the content
//! of `update node/<node>/_/nodetask/<kind>.<job>`), made from the job's checked spec
//! ([`super::validate`]), never from its text.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use verge_core::task::{
    ConfigUpdate, JobKind, NodeTask, PrePull, RegistryAuth, TaskAction, TaskName, Upgrade,
};

use super::credentials::registry_of;
use super::validate::{self, CheckItem, Targets};
use crate::api::operations::{ConfigUpdateJobSpec, ImagePrePullJobSpec, NodeUpgradeJobSpec};

/// One node's task of a job, as sent: the content is [`TaskObject::task`]; the message's
/// header carries the job's uid and `metadata.generation` (its version on the node).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskObject {
    /// `<kind>.<job>`.
    #[serde(skip)]
    pub name: TaskName,
    /// The job's uid.
    #[serde(skip)]
    pub uid: String,
    /// The job's `metadata.generation`, as text.
    #[serde(skip)]
    pub generation: String,
    /// What the node does.
    pub task: NodeTask,
}

fn checks(targets: &Targets) -> Vec<String> {
    targets
        .checks
        .iter()
        .map(|c| {
            match c {
                CheckItem::Cpu => "cpu",
                CheckItem::Mem => "mem",
                CheckItem::Disk => "disk",
            }
            .to_owned()
        })
        .collect()
}

fn node_task(targets: &Targets, action: TaskAction) -> NodeTask {
    NodeTask {
        timeout_seconds: targets.timeout.as_secs(),
        checks: checks(targets),
        action,
    }
}

/// A NodeUpgradeJob's task; `None` for an invalid spec.
pub fn upgrade(spec: &NodeUpgradeJobSpec) -> Option<NodeTask> {
    let up = validate::upgrade(spec).ok()?;
    let action = TaskAction::Upgrade(Upgrade {
        version: up.version.to_string(),
        image: up.image.to_string(),
        digests: up
            .digests
            .into_iter()
            .map(|(arch, digest)| (arch.to_owned(), digest))
            .collect(),
        require_confirmation: up.require_confirmation,
    });
    Some(node_task(&up.targets, action))
}

/// The registry hosts an ImagePrePullJob pulls from; `None` for an invalid spec.
pub fn prepull_registries(spec: &ImagePrePullJobSpec) -> Option<BTreeSet<String>> {
    let p = validate::prepull(spec).ok()?;
    Some(p.images.iter().map(registry_of).collect())
}

/// An ImagePrePullJob's task with the logins read from its Secret (`auths`, required when
/// the job names one); `None` for an invalid spec or credentials not read yet.
pub fn prepull(
    spec: &ImagePrePullJobSpec,
    auths: Option<BTreeMap<String, RegistryAuth>>,
) -> Option<NodeTask> {
    let p = validate::prepull(spec).ok()?;
    let auths = match (&p.secret, auths) {
        (Some(_), None) => return None,
        (_, auths) => auths.unwrap_or_default(),
    };
    let action = TaskAction::PrePull(PrePull {
        images: p.images.iter().map(ToString::to_string).collect(),
        auths,
        retries: p.retries,
    });
    Some(node_task(&p.targets, action))
}

/// A ConfigUpdateJob's task; `None` for an invalid spec.
pub fn config_update(spec: &ConfigUpdateJobSpec) -> Option<NodeTask> {
    let c = validate::config_update(spec).ok()?;
    let action = TaskAction::ConfigUpdate(ConfigUpdate {
        fields: c
            .fields
            .into_iter()
            .map(|(path, value)| (path.join("."), value))
            .collect(),
    });
    Some(node_task(&c.targets, action))
}

/// The task name of job `name` of `kind`.
pub fn task_name(kind: JobKind, name: &str) -> TaskName {
    TaskName {
        kind,
        job: name.to_owned(),
    }
}
