//! hold-upgrade (KubeEdge 1.22's edge resource upgrade control): a workload's update is held
//! on the node until the node's administrator releases it, so that e.g. a robot's control
//! pod is not replaced mid-motion.
//!
//! A pod carrying [`HOLD_ANNOTATION`]` = "true"` is **held** when it arrives while the node
//! runs an older pod of another revision of the same workload: a Deployment's (the
//! ReplicaSet name is `<deployment>-<pod-template-hash>`), a StatefulSet's or a DaemonSet's
//! (label `controller-revision-hash`). A held pod is admitted to nothing and starts nothing;
//! its status is `Pending` with the pod condition [`CONDITION`]` = True` (reason
//! [`REASON`]). With a rolling update that surges (a Deployment's default, a DaemonSet's with
//! `maxSurge`), the older pod keeps running and serving meanwhile: the update waits. An update
//! that deletes the older pod first (a StatefulSet's, `Recreate`) is not held: the node sees
//! a deletion, then a pod without an older sibling. The first pods of a workload, its scaling
//! within one revision, and bare pods are never held.
//!
//! **Release**, with kubectl alone: set the held pod's annotation to anything but `"true"`
//! (`kubectl annotate pod <pod> edge.kubeedge.io/hold-upgrade=false --overwrite`); the pod
//! starts at once, and the rollout carries on. The decision is made from the stored pods
//! (older ones first), so a held pod stays held across edgecore's restarts, online or not.

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The annotation that asks for the hold (KubeEdge's).
pub const HOLD_ANNOTATION: &str = "edge.kubeedge.io/hold-upgrade";

/// The pod condition of a held pod.
pub const CONDITION: &str = "HeldUpgrade";

/// The condition's reason while held.
pub const REASON: &str = "UpdateHoldActive";

/// The condition's reason once released.
pub const RELEASED: &str = "UpdateHoldReleased";

/// Whether `pod` asks for the hold.
pub fn asks(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HOLD_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// The workload `pod` belongs to and its revision: `(kind, name, revision)`, `None` for a pod
/// of no workload the hold knows.
pub fn workload(pod: &Pod) -> Option<(&'static str, String, String)> {
    let owner = pod
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let label = |name: &str| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(name))
            .cloned()
    };
    match owner.kind.as_str() {
        "ReplicaSet" => {
            let hash = label("pod-template-hash")?;
            let deployment = owner.name.strip_suffix(&format!("-{hash}"))?;
            Some(("Deployment", deployment.to_owned(), hash))
        }
        "StatefulSet" => Some((
            "StatefulSet",
            owner.name.clone(),
            label("controller-revision-hash")?,
        )),
        "DaemonSet" => Some((
            "DaemonSet",
            owner.name.clone(),
            label("controller-revision-hash")?,
        )),
        _ => None,
    }
}

/// Whether `pod`, arriving on the node, is held beside the node's `others` (the pods it
/// already runs): it asks for the hold, is not being deleted, has not run (its status is not
/// `Running`, `Succeeded` or `Failed`), and an older pod (or one created in the same second)
/// of the same workload and namespace, of another revision, is still live (not Succeeded or
/// Failed, not being deleted).
pub fn held<'a>(pod: &Pod, others: impl IntoIterator<Item = &'a Pod>) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !asks(pod)
        || pod.metadata.deletion_timestamp.is_some()
        || matches!(phase, Some("Running" | "Succeeded" | "Failed"))
    {
        return false;
    }
    let Some((kind, name, revision)) = workload(pod) else {
        return false;
    };
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    others.into_iter().any(|other| {
        other.metadata.uid != pod.metadata.uid
            && other.metadata.namespace == pod.metadata.namespace
            && other.metadata.deletion_timestamp.is_none()
            && !matches!(
                other.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
            && created(other) <= created(pod)
            && workload(other).is_some_and(|(k, n, r)| k == kind && n == name && r != revision)
    })
}

/// The condition a pod reports while `held` (`True`, reason [`REASON`]) and once released
/// (`False`, reason [`RELEASED`]); the transition time stays that of `last` (the condition
/// reported before) while its status does not change.
pub fn condition(held: bool, last: Option<&PodCondition>, now: &Time) -> PodCondition {
    let status = if held { "True" } else { "False" };
    let since = last
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    let (reason, message) = if held {
        (
            REASON,
            format!(
                "Pod upgrade is held at the edge: set its {HOLD_ANNOTATION} annotation to \"false\" \
                 to release it"
            ),
        )
    } else {
        (RELEASED, "The hold was released".to_owned())
    };
    PodCondition {
        type_: CONDITION.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_transition_time: Some(since),
        ..PodCondition::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, owner: (&str, &str), labels: &[(&str, &str)], hold: bool, age: i64) -> Pod {
        let created = chrono::DateTime::from_timestamp(1_000_000 + age, 0).expect("time");
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": uid, "namespace": "shop", "uid": uid,
                "creationTimestamp": created.to_rfc3339(),
                "labels": labels.iter().copied().collect::<std::collections::BTreeMap<_, _>>(),
                "annotations": if hold { serde_json::json!({HOLD_ANNOTATION: "true"}) } else { serde_json::json!({}) },
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner.0, "name": owner.1,
                                     "uid": "o", "controller": true}],
            }
        }))
        .expect("pod")
    }

    #[test]
    fn a_new_revision_beside_a_running_one_is_held() {
        let old = pod(
            "old",
            ("ReplicaSet", "web-aaa"),
            &[("pod-template-hash", "aaa")],
            false,
            0,
        );
        let new = pod(
            "new",
            ("ReplicaSet", "web-bbb"),
            &[("pod-template-hash", "bbb")],
            true,
            5,
        );
        assert_eq!(
            workload(&new),
            Some(("Deployment", "web".to_owned(), "bbb".to_owned()))
        );
        assert!(held(&new, [&old]));
        // Without the annotation, or once the older one is gone or done, it is not.
        let free = pod(
            "new",
            ("ReplicaSet", "web-bbb"),
            &[("pod-template-hash", "bbb")],
            false,
            5,
        );
        assert!(!held(&free, [&old]));
        assert!(!held(&new, []));
        // A pod that ran is never held, even beside a newer-looking sibling.
        let mut ran = new.clone();
        ran.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".to_owned()),
            ..Default::default()
        });
        assert!(!held(&ran, [&old]));
        let mut done = old.clone();
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".to_owned()),
            ..Default::default()
        });
        assert!(!held(&new, [&done]));
    }

    #[test]
    fn first_pods_scaling_and_bare_pods_are_not_held() {
        let a = pod(
            "a",
            ("ReplicaSet", "web-aaa"),
            &[("pod-template-hash", "aaa")],
            true,
            0,
        );
        let b = pod(
            "b",
            ("ReplicaSet", "web-aaa"),
            &[("pod-template-hash", "aaa")],
            true,
            1,
        );
        assert!(!held(&b, [&a]), "the same revision scaled");
        let other = pod(
            "c",
            ("ReplicaSet", "api-ccc"),
            &[("pod-template-hash", "ccc")],
            true,
            2,
        );
        assert!(!held(&other, [&a]), "another workload");
        let bare = pod("d", ("Node", "x"), &[], true, 3);
        assert!(!held(&bare, [&a]));
        // An older pod is never held by a newer one.
        let newer = pod(
            "e",
            ("ReplicaSet", "web-eee"),
            &[("pod-template-hash", "eee")],
            false,
            9,
        );
        assert!(!held(&a, [&newer]));
    }

    #[test]
    fn statefulsets_and_daemonsets_use_the_revision_label() {
        let old = pod(
            "old",
            ("DaemonSet", "agent"),
            &[("controller-revision-hash", "1")],
            false,
            0,
        );
        let new = pod(
            "new",
            ("DaemonSet", "agent"),
            &[("controller-revision-hash", "2")],
            true,
            1,
        );
        assert!(held(&new, [&old]));
        let set = pod(
            "s",
            ("StatefulSet", "db"),
            &[("controller-revision-hash", "2")],
            true,
            1,
        );
        assert!(!held(&set, [&old]));
    }
}
