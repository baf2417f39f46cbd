//! The toleration rule: which tolerations a pod on an edge node should have so that a lost
//! link does not evict it. Pure, no I/O; the rule is explained in [`crate::offline`].

use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use serde_json::{Value, json};

/// The pod annotation that opts out: with value `"true"` the pod keeps the eviction
/// behaviour of Kubernetes (its tolerations are not touched).
pub const EVICT_ON_UNREACHABLE: &str = "verge.io/evict-on-unreachable";

/// The taint the node lifecycle controller sets when a node's Ready condition is `False`.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// The taint the node lifecycle controller sets when a node's Ready condition is `Unknown`
/// (no heartbeat within the node monitor grace period: the edge lost its link).
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// The `tolerationSeconds` the `DefaultTolerationSeconds` admission plugin gives every pod
/// for the two taints (kube-apiserver `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds`, both 300 by default).
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

const NO_EXECUTE: &str = "NoExecute";
const EXISTS: &str = "Exists";

/// Whether `toleration` tolerates the `NoExecute` taint `key` (which has no value), as the
/// scheduler and the taint eviction controller match them.
pub fn tolerates(toleration: &Toleration, key: &str) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != NO_EXECUTE {
        return false;
    }
    let exists = toleration.operator.as_deref() == Some(EXISTS);
    match toleration.key.as_deref().unwrap_or_default() {
        "" => exists,
        k => k == key && (exists || toleration.value.as_deref().unwrap_or_default().is_empty()),
    }
}

/// Whether the pods of `node` need their tolerations kept now: the node is not Ready (its
/// Ready condition is `False` or `Unknown`, or missing) or carries [`NOT_READY_TAINT`] or
/// [`UNREACHABLE_TAINT`]. The taint eviction controller counts a pod's
/// `tolerationSeconds` from the moment the taint appears, so a patch in that window cancels
/// the eviction; a pod of a Ready node keeps its object untouched (its `generation` stays
/// 1, no write per pod at scale).
pub fn node_needs_tolerations(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.key == NOT_READY_TAINT || t.key == UNREACHABLE_TAINT)
        });
    !ready || tainted
}

/// The tolerations `pod` should have, or `None` when they need no change. For each of
/// [`NOT_READY_TAINT`] and [`UNREACHABLE_TAINT`]:
/// - a toleration that matches it without `tolerationSeconds` already keeps the pod: as is;
/// - else a matching toleration with `tolerationSeconds` = [`DEFAULT_TOLERATION_SECONDS`]
///   (the admission default) loses its `tolerationSeconds`;
/// - else a matching toleration with any other `tolerationSeconds` is the owner's explicit
///   choice: as is;
/// - else (no matching toleration, the admission plugin is off) one is added:
///   `{key, operator: Exists, effect: NoExecute}`.
///
/// Pods annotated [`EVICT_ON_UNREACHABLE`]`: "true"` and pods being deleted are left alone.
/// Both changes are ones the API server allows on a pod (`tolerationSeconds` of an existing
/// toleration, or an added toleration).
pub fn kept_tolerations(pod: &Pod) -> Option<Vec<Toleration>> {
    let meta = &pod.metadata;
    let opted_out = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(EVICT_ON_UNREACHABLE))
        .is_some_and(|v| v == "true");
    if opted_out || meta.deletion_timestamp.is_some() {
        return None;
    }
    let mut tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let mut changed = false;
    for taint in [NOT_READY_TAINT, UNREACHABLE_TAINT] {
        let matching: Vec<usize> = (0..tolerations.len())
            .filter(|i| tolerates(&tolerations[*i], taint))
            .collect();
        if matching
            .iter()
            .any(|i| tolerations[*i].toleration_seconds.is_none())
        {
            continue;
        }
        let default = matching
            .iter()
            .find(|i| tolerations[**i].toleration_seconds == Some(DEFAULT_TOLERATION_SECONDS));
        if let Some(i) = default {
            tolerations[*i].toleration_seconds = None;
            changed = true;
        } else if matching.is_empty() {
            tolerations.push(Toleration {
                key: Some(taint.to_owned()),
                operator: Some(EXISTS.to_owned()),
                effect: Some(NO_EXECUTE.to_owned()),
                ..Toleration::default()
            });
            changed = true;
        }
    }
    changed.then_some(tolerations)
}

/// The JSON merge patch that sets `tolerations` on a pod at `resource_version`: the list is
/// replaced as a whole, and the resourceVersion makes the API server refuse it (409) if the
/// pod changed in between.
pub fn patch(resource_version: &str, tolerations: &[Toleration]) -> Value {
    json!({
        "metadata": { "resourceVersion": resource_version },
        "spec": { "tolerations": tolerations },
    })
}

#[cfg(test)]
mod tests;
