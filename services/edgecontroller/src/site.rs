//! Sites: edge nodes that reach each other directly (a factory floor, a shop's LAN), declared
//! with the Node label [`SITE_LABEL`]. Every edge node of a site holds a [`peer_view`] of each
//! other edge node of its site (its pod CIDR and InternalIP), from which its pod network
//! routes to their pods directly (`verge_edge_net::site`); endpoints elsewhere go through
//! cloudhub. A node without the label is a site of its own.
//!
//! Every edge node of a NodeGroup (the label [`GROUP_LABEL`], fleetcontroller's) also holds
//! the peer view of each other edge node of its group, from which its Service proxy keeps the
//! traffic of `range-nodegroup` Services on the group's endpoints (KubeEdge's service
//! topology, `verge_edge_net::services`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::fingerprint::Fingerprint;

pub use verge_core::well_known::{NODE_GROUP_LABEL as GROUP_LABEL, SITE_LABEL};

/// `node`'s NodeGroup, when labelled (an empty value is none).
pub fn group_of(node: &Node) -> Option<&str> {
    label(node, GROUP_LABEL)
}

/// Whether two edge Nodes hold each other's peer views: the same site or the same NodeGroup.
pub fn are_peers(a: &Node, b: &Node) -> bool {
    (site_of(a).is_some() && site_of(a) == site_of(b))
        || (group_of(a).is_some() && group_of(a) == group_of(b))
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// `node`'s site, when labelled (an empty value is none).
pub fn site_of(node: &Node) -> Option<&str> {
    label(node, SITE_LABEL)
}

/// What a peer needs of `node`: its name, uid and resourceVersion, the site and group labels,
/// its pod CIDRs and its InternalIP addresses; nothing else (no taints, conditions or images).
pub fn peer_view(node: &Node) -> Node {
    let labels: BTreeMap<String, String> =
        [(SITE_LABEL, site_of(node)), (GROUP_LABEL, group_of(node))]
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_owned(), value?.to_owned())))
            .collect();
    let labels = (!labels.is_empty()).then_some(labels);
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

/// The peer views of `node`'s peers among `nodes` (the edge Nodes): the other nodes of its
/// site or of its NodeGroup ([`are_peers`]); none when `node` is unknown or has neither.
pub fn peers<'a>(node: &str, nodes: impl IntoIterator<Item = &'a Arc<Node>>) -> Vec<Node> {
    let nodes: Vec<&Arc<Node>> = nodes.into_iter().collect();
    let Some(own) = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
    else {
        return Vec::new();
    };
    nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(node) && are_peers(own, n))
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

    #[test]
    fn nodes_of_one_group_are_peers_across_sites() {
        let grouped = |name: &str, site: Option<&str>, group: &str| {
            let mut n = node(name, site, "10.244.5.0/24", "10.214.5.1", "1")
                .as_ref()
                .clone();
            n.metadata
                .labels
                .get_or_insert_default()
                .insert(GROUP_LABEL.to_owned(), group.to_owned());
            Arc::new(n)
        };
        let nodes = [
            grouped("a", Some("s1"), "north"),
            grouped("b", Some("s2"), "north"),
            grouped("c", Some("s3"), "south"),
            node("d", Some("s1"), "10.244.4.0/24", "10.214.9.1", "1"),
        ];
        let names = |peers: Vec<Node>| -> Vec<String> {
            peers.into_iter().filter_map(|p| p.metadata.name).collect()
        };
        // b by group, d by site; not c.
        assert_eq!(names(peers("a", &nodes)), ["b", "d"]);
        let b = &peers("a", &nodes)[0];
        assert_eq!(
            b.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(GROUP_LABEL))
                .map(String::as_str),
            Some("north")
        );
        assert_eq!(names(peers("c", &nodes)), Vec::<String>::new());
    }
}
