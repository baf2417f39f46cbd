//! Sites: edge nodes that reach each other directly (a factory floor, a shop's LAN), declared
//! with the Node label [`SITE_LABEL`]. Every edge node of a site holds a [`peer_view`] of each
//! other edge node of its site (its pod CIDR and InternalIP), from which its pod network
//! routes to their pods directly (`verge_edge_net::site`); endpoints elsewhere go through
//! cloudhub. A node without the label is a site of its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::fingerprint::Fingerprint;

/// The Node label naming a node's site: nodes with the same value reach each other's
/// addresses directly.
pub const SITE_LABEL: &str = "verge.io/site";

/// `node`'s site, when labelled (an empty value is none).
pub fn site_of(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SITE_LABEL))
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// What a peer needs of `node`: its name, uid and resourceVersion, the site label, its pod
/// CIDRs and its InternalIP addresses; nothing else (no taints, conditions or images).
pub fn peer_view(node: &Node) -> Node {
    let labels = site_of(node).map(|s| BTreeMap::from([(SITE_LABEL.to_owned(), s.to_owned())]));
    let spec = node.spec.as_ref();
    let addresses: Vec<NodeAddress> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .cloned()
        .collect();
    Node {
        metadata: ObjectMeta {
            name: node.metadata.name.clone(),
            uid: node.metadata.uid.clone(),
            resource_version: node.metadata.resource_version.clone(),
            labels,
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: spec.and_then(|s| s.pod_cidr.clone()),
            pod_cidrs: spec.and_then(|s| s.pod_cidrs.clone()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(addresses),
            ..NodeStatus::default()
        }),
    }
}

/// The fingerprint of a peer view: what the peer acts on, its addresses included (a Node's
/// other status changes, its heartbeats, are not sent again).
pub fn peer_fingerprint(view: &Node) -> Fingerprint {
    Fingerprint::of(&(
        &view.metadata.name,
        &view.metadata.uid,
        &view.metadata.labels,
        &view.spec,
        view.status.as_ref().and_then(|s| s.addresses.as_ref()),
    ))
}

/// The peer views of `node`'s site peers among `nodes` (the edge Nodes): the other nodes with
/// `node`'s site label; none when `node` is unknown or has no site.
pub fn peers<'a>(node: &str, nodes: impl IntoIterator<Item = &'a Arc<Node>>) -> Vec<Node> {
    let nodes: Vec<&Arc<Node>> = nodes.into_iter().collect();
    let Some(site) = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
        .and_then(|n| site_of(n))
    else {
        return Vec::new();
    };
    nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(node) && site_of(n) == Some(site))
        .map(|n| peer_view(n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, site: Option<&str>, cidr: &str, ip: &str, heartbeat: &str) -> Arc<Node> {
        let labels = site.map_or(json!({}), |s| json!({ SITE_LABEL: s }));
        Arc::new(
            serde_json::from_value(json!({
                "metadata": { "name": name, "uid": format!("uid-{name}"), "labels": labels,
                    "resourceVersion": heartbeat },
                "spec": { "podCIDR": cidr, "taints": [{ "key": "k", "effect": "NoSchedule" }] },
                "status": { "addresses": [{ "type": "InternalIP", "address": ip },
                    { "type": "Hostname", "address": name }],
                    "conditions": [{ "type": "Ready", "status": "True",
                        "message": heartbeat }] }
            }))
            .expect("node"),
        )
    }

    #[test]
    fn peers_are_the_other_nodes_of_the_site_trimmed() {
        let nodes = [
            node("a", Some("s1"), "10.244.1.0/24", "10.214.0.1", "1"),
            node("b", Some("s1"), "10.244.2.0/24", "10.214.0.2", "1"),
            node("c", Some("s2"), "10.244.3.0/24", "10.214.1.1", "1"),
            node("d", None, "10.244.4.0/24", "10.214.9.1", "1"),
        ];
        let peers = peers("a", &nodes);
        assert_eq!(peers.len(), 1);
        let b = &peers[0];
        assert_eq!(b.metadata.name.as_deref(), Some("b"));
        assert_eq!(
            b.spec.as_ref().and_then(|s| s.pod_cidr.as_deref()),
            Some("10.244.2.0/24")
        );
        assert!(b.spec.as_ref().is_some_and(|s| s.taints.is_none()));
        let addresses = b
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default();
        assert_eq!(addresses.len(), 1, "InternalIP only");
        assert!(b.status.as_ref().is_some_and(|s| s.conditions.is_none()));
        assert!(peers_of_unlabelled_or_unknown(&nodes));
    }

    fn peers_of_unlabelled_or_unknown(nodes: &[Arc<Node>]) -> bool {
        peers("d", nodes).is_empty() && peers("zz", nodes).is_empty()
    }

    #[test]
    fn a_heartbeat_keeps_the_fingerprint_an_address_change_does_not() {
        let before = peer_view(&node("b", Some("s1"), "10.244.2.0/24", "10.214.0.2", "1"));
        let beat = peer_view(&node("b", Some("s1"), "10.244.2.0/24", "10.214.0.2", "2"));
        let moved = peer_view(&node("b", Some("s1"), "10.244.2.0/24", "10.214.0.9", "3"));
        assert_eq!(peer_fingerprint(&before), peer_fingerprint(&beat));
        assert_ne!(peer_fingerprint(&before), peer_fingerprint(&moved));
    }
}
