//! Node registration and node status, as a kubelet does them (kubelet
//! `registerWithAPIServer` and `tryUpdateNodeStatus`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeStatus, Taint};
use kube::Api;
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::node_labels::NodeLabelPolicy;
use crate::{Error, Result};

/// How often a registration is retried after a write conflict (409) before giving up.
const CONFLICT_RETRIES: usize = 5;

/// Registers node `name` from the edge's `object` (only its labels and `spec.taints` are used),
/// through `client` acting as the node itself (the Node authorizer and NodeRestriction
/// admission bound the write).
///
/// The Node must exist: cloudhub creates it when the node joins, with the edge label and the
/// edge's registration taints (kubelet `--register-with-taints` applies at creation only), so a
/// deleted Node is not re-created by its old certificate. Labels `policy` refuses
/// (NodeRestriction's rules and the operator's reserved keys) are dropped and logged; the
/// others are merged (the edge's values win, other labels stay). Taints are never written here
/// (NodeRestriction forbids a node to change its own): those the Node lacks are logged. A Node
/// without the edge label (`node-role.kubernetes.io/edge`, e.g. a kubelet's worker) is never
/// taken over ([`Error::Forbidden`], logged, the Node untouched). The patch is guarded by the
/// read resourceVersion and retried on conflict; nothing is written when nothing changes
/// (kubelet `updateDefaultLabels` behaviour, without removing anything).
///
/// # Errors
/// [`Error::NodeNotFound`] when the Node does not exist; [`Error::Kube`] when the API server
/// refuses a read or write (after `CONFLICT_RETRIES` conflicts, the last conflict).
pub async fn register(
    client: &kube::Client,
    name: &str,
    object: Node,
    policy: &NodeLabelPolicy,
) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let (labels, refused) = policy.admit(object.metadata.labels.unwrap_or_default());
    if !refused.is_empty() {
        super::AUTHORIZATION_REFUSALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        warn!(
            node = name,
            ?refused,
            "labels refused: an edge may not set them on its Node (NodeRestriction rules, reservedNodeLabels)"
        );
    }
    let taints = object.spec.and_then(|s| s.taints).unwrap_or_default();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let written = match api.get_opt(name).await.map_err(Error::kube("get node"))? {
            None => {
                warn!(
                    node = name,
                    "refused: no such Node (edge Nodes are created when they join)"
                );
                return Err(Error::NodeNotFound(name.to_owned()));
            }
            Some(existing) if !existing.labels().contains_key(verge_core::EDGE_NODE_LABEL) => {
                warn!(
                    node = name,
                    "refused: the Node exists and is not a Verge edge node"
                );
                return Err(Error::Forbidden {
                    node: name.to_owned(),
                    what: "a Node that is not a Verge edge node (no node-role.kubernetes.io/edge label)".to_owned(),
                });
            }
            Some(existing) => {
                let current = existing.spec.as_ref().and_then(|s| s.taints.as_deref());
                if let Some(merged) = merge_taints(current.unwrap_or_default(), &taints) {
                    let missing = &merged[current.map_or(0, <[Taint]>::len)..];
                    warn!(
                        node = name,
                        ?missing,
                        "registration taints the Node lacks are not added: taints are set when a node joins (NodeRestriction forbids a node to change them)"
                    );
                }
                match registration_patch(&existing, &labels) {
                    None => return Ok(()),
                    Some(patch) => api
                        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .map(|_| info!("node labels merged")),
                }
            }
        };
        match written {
            Ok(()) => return Ok(()),
            // Conflict or AlreadyExists: somebody wrote in between; read again.
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < CONFLICT_RETRIES => {}
            Err(error) => return Err(Error::kube("write node")(error)),
        }
    }
}

/// The labels of `wanted` that `current` lacks or holds with another value.
pub fn missing_labels(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    wanted
        .iter()
        .filter(|(k, v)| current.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `current` plus every taint of `wanted` whose (key, effect) is not in `current`, or `None`
/// when nothing is missing. Existing taints keep their value and order.
pub fn merge_taints(current: &[Taint], wanted: &[Taint]) -> Option<Vec<Taint>> {
    let mut merged = current.to_vec();
    for taint in wanted {
        if !merged
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            merged.push(taint.clone());
        }
    }
    (merged.len() != current.len()).then_some(merged)
}

/// The JSON merge patch (RFC 7386) that brings `existing` up to the edge's labels, with
/// `metadata.resourceVersion` as precondition; `None` when nothing changes.
pub fn registration_patch(existing: &Node, labels: &BTreeMap<String, String>) -> Option<Value> {
    let empty = BTreeMap::new();
    let current_labels = existing.metadata.labels.as_ref().unwrap_or(&empty);
    let new_labels = missing_labels(current_labels, labels);
    if new_labels.is_empty() {
        return None;
    }
    Some(json!({ "metadata": {
        "resourceVersion": existing.metadata.resource_version,
        "labels": new_labels,
    } }))
}

/// Writes the edge's `status` to node `name`'s status subresource with a strategic merge
/// patch, so list fields merge by their keys (conditions by `type`) as with kubelet's
/// `PatchNodeStatus`.
///
/// # Errors
/// [`Error::NodeNotFound`] when the Node does not exist; [`Error::Kube`] when the API server
/// refuses the patch.
pub async fn report_status(client: &kube::Client, name: &str, status: NodeStatus) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = json!({ "status": status });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Err(Error::NodeNotFound(name.to_owned())),
        Err(error) => Err(Error::kube("patch node status")(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn labels_merge_edge_values_win() {
        let current = labels(&[("a", "1"), ("b", "2")]);
        let wanted = labels(&[("b", "3"), ("node-role.kubernetes.io/edge", "")]);
        assert_eq!(
            missing_labels(&current, &wanted),
            labels(&[("b", "3"), ("node-role.kubernetes.io/edge", "")])
        );
        assert!(missing_labels(&wanted, &wanted).is_empty());
    }

    #[test]
    fn taints_are_added_never_removed() {
        let lifecycle = taint("node.kubernetes.io/unreachable", "", "NoExecute");
        let edge = taint("edge", "x", "NoSchedule");
        let merged = merge_taints(
            std::slice::from_ref(&lifecycle),
            std::slice::from_ref(&edge),
        )
        .expect("change");
        assert_eq!(merged, vec![lifecycle.clone(), edge.clone()]);
        // Same key and effect with another value: kept as is.
        let other_value = taint("edge", "y", "NoSchedule");
        assert_eq!(merge_taints(&merged, &[other_value]), None);
        // Same key, other effect: added.
        assert!(merge_taints(&merged, &[taint("edge", "x", "NoExecute")]).is_some());
    }

    /// A new Node named `name` with `labels`, the edge label ([`verge_core::EDGE_NODE_LABEL`])
    /// whether or not `labels` holds it, and `taints`.
    pub fn new_node(name: &str, mut labels: BTreeMap<String, String>, taints: Vec<Taint>) -> Node {
        labels
            .entry(verge_core::EDGE_NODE_LABEL.to_owned())
            .or_default();
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: (!taints.is_empty()).then_some(taints),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn patch_only_when_something_changes() {
        let mut existing = new_node(
            "n",
            labels(&[("a", "1")]),
            vec![taint("t", "", "NoSchedule")],
        );
        existing.metadata.resource_version = Some("7".into());
        assert_eq!(registration_patch(&existing, &labels(&[("a", "1")])), None);
        let patch = registration_patch(&existing, &labels(&[("b", "2")])).expect("patch");
        assert_eq!(
            patch,
            json!({ "metadata": { "resourceVersion": "7", "labels": { "b": "2" } } })
        );
        // Taints are never patched (set at join; NodeRestriction forbids a node to change them).
        assert_eq!(registration_patch(&existing, &BTreeMap::new()), None);
    }
}
