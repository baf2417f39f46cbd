//! The tasks fleetcontroller sends: one job's share for one node ([`TaskObject`], the content
//! of `update node/<node>/_/nodetask/<kind>.<job>`), made from the job's checked spec
//! ([`super::validate`]), never from its text.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use verge_core::task::{
    CONFIRM_ANNOTATION, ConfigUpdate, JobKind, NodeTask, PrePull, RegistryAuth, TaskAction,
    TaskName, Upgrade, confirms,
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
    /// The task's version on the node ([`for_node`]), as text.
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
        confirmed: false,
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

/// `task` as node `node` gets it, with its version there: an upgrade is `confirmed` when the
/// job's [`CONFIRM_ANNOTATION`] names the node.
///
/// The version only grows, as the edge store wants (it keeps the newer of two versions, even
/// across uids): `creationTimestamp` (Unix seconds) × 2²¹ + 2 × `metadata.generation` (below
/// 2²⁰) + 1 once confirmed. A confirmation is a newer version of the task (the node stops
/// waiting and runs it), a spec change newer still, and a job deleted and created again
/// under its name outranks the old one a node that missed the deletion still holds (unless
/// both were created within the same second).
pub fn for_node(
    mut task: NodeTask,
    meta: &kube::api::ObjectMeta,
    node: &str,
) -> (NodeTask, String) {
    let mut confirmed = false;
    if let TaskAction::Upgrade(up) = &mut task.action {
        up.confirmed = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONFIRM_ANNOTATION))
            .is_some_and(|value| confirms(value, node));
        confirmed = up.require_confirmation && up.confirmed;
    }
    const GENERATIONS: u64 = 1 << 20;
    let generation = u64::try_from(meta.generation.unwrap_or(1))
        .unwrap_or(1)
        .min(GENERATIONS - 1);
    let created = meta
        .creation_timestamp
        .as_ref()
        .and_then(|t| u64::try_from(t.0.as_second()).ok())
        .unwrap_or(0);
    let version = created.saturating_mul(2 * GENERATIONS) + 2 * generation + u64::from(confirmed);
    (task, version.to_string())
}

/// The task name of job `name` of `kind`.
pub fn task_name(kind: JobKind, name: &str) -> TaskName {
    TaskName {
        kind,
        job: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upgrade_task(require_confirmation: bool) -> NodeTask {
        NodeTask {
            timeout_seconds: 60,
            checks: Vec::new(),
            action: TaskAction::Upgrade(Upgrade {
                version: "1.2.3".to_owned(),
                image: "kubeedge/installation-package:v1.2.3".to_owned(),
                digests: BTreeMap::new(),
                require_confirmation,
                confirmed: false,
            }),
        }
    }

    fn meta(generation: i64, confirm: Option<&str>) -> kube::api::ObjectMeta {
        created_at("2027-01-15T08:00:00Z", generation, confirm)
    }

    fn created_at(time: &str, generation: i64, confirm: Option<&str>) -> kube::api::ObjectMeta {
        kube::api::ObjectMeta {
            generation: Some(generation),
            creation_timestamp: Some(
                serde_json::from_value(serde_json::json!(time)).expect("time"),
            ),
            annotations: confirm
                .map(|v| BTreeMap::from([(CONFIRM_ANNOTATION.to_owned(), v.to_owned())])),
            ..kube::api::ObjectMeta::default()
        }
    }

    fn version(meta: &kube::api::ObjectMeta, node: &str) -> u64 {
        for_node(upgrade_task(true), meta, node)
            .1
            .parse()
            .expect("a number")
    }

    fn confirmed(task: &NodeTask) -> bool {
        matches!(&task.action, TaskAction::Upgrade(up) if up.confirmed)
    }

    #[test]
    fn a_confirmation_is_a_newer_version_for_the_nodes_it_names() {
        let (task, _) = for_node(upgrade_task(true), &meta(3, None), "edge-a");
        assert!(!confirmed(&task));
        let waiting = version(&meta(3, None), "edge-a");
        let annotated = meta(3, Some("edge-a, edge-b"));
        let (task, _) = for_node(upgrade_task(true), &annotated, "edge-a");
        assert!(confirmed(&task));
        assert_eq!(version(&annotated, "edge-a"), waiting + 1);
        let (task, _) = for_node(upgrade_task(true), &annotated, "edge-c");
        assert!(!confirmed(&task));
        assert_eq!(version(&annotated, "edge-c"), waiting);
        assert!(
            version(&meta(4, None), "edge-a") > waiting + 1,
            "a spec change outranks a confirmation"
        );
        let (task, _) = for_node(upgrade_task(true), &meta(3, Some("*")), "any");
        assert!(confirmed(&task));
    }

    #[test]
    fn a_job_created_again_outranks_the_old_one() {
        let old = created_at("2027-01-15T08:00:00Z", 500, Some("true"));
        let again = created_at("2027-01-15T08:00:01Z", 1, None);
        assert!(version(&again, "edge-a") > version(&old, "edge-a"));
    }

    #[test]
    fn without_require_confirmation_the_annotation_changes_no_version() {
        let (_, plain) = for_node(upgrade_task(false), &meta(3, None), "edge-a");
        let (_, annotated) = for_node(upgrade_task(false), &meta(3, Some("true")), "edge-a");
        assert_eq!(plain, annotated);
    }
}
