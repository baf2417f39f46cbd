//! Who is a member of a NodeGroup and what must change for it, as KubeEdge's NodeGroup
//! controller decides it. Pure: no API calls.
//!
//! Wanted members are the existing nodes named in `spec.nodes` plus those carrying every
//! `spec.matchLabels` pair (an empty map selects every node, no map none). A wanted node
//! without the [`BELONGING_TO`] label gets it (and [`ZONE`] with `topologyEnabled`); one
//! labelled for another group stays there (the first group keeps it) and is reported
//! `Failed`. A node labelled for this group that is no longer wanted is released: both labels
//! are removed (the zone only where it names the group) and the group's pods leave it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;

use crate::api::nodegroup::{MemberStatus, NodeGroupSpec, NodeGroupStatus};
use crate::api::{BELONGING_TO, ZONE};

/// `selectionStatus` of a member.
pub const SUCCEEDED: &str = "Succeeded";
/// `selectionStatus` of a node the group could not take.
pub const FAILED: &str = "Failed";

/// Label edits of one node: each label set to a value, or removed (`None`).
pub type LabelEdits = BTreeMap<&'static str, Option<String>>;

/// What reconciling a group changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Label edits per node name.
    pub labels: BTreeMap<String, LabelEdits>,
    /// Nodes that leave the group: their pods pinned to it must go.
    pub released: BTreeSet<String>,
    /// The group's status after the edits.
    pub status: NodeGroupStatus,
}

/// The plan of group `group` with `spec` over every node of the cluster.
pub fn plan<'a>(
    group: &str,
    spec: &NodeGroupSpec,
    nodes: impl IntoIterator<Item = &'a Node>,
) -> Plan {
    let mut plan = Plan::default();
    let named: BTreeSet<&str> = spec.nodes.iter().map(String::as_str).collect();
    let mut seen = BTreeSet::new();
    let mut statuses = Vec::new();
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let labels = node.metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
        let wanted = named.contains(name)
            || spec
                .match_labels
                .as_ref()
                .is_some_and(|want| want.iter().all(|(k, v)| label(k) == Some(v.as_str())));
        seen.insert(name.to_owned());
        let owner = label(BELONGING_TO);
        if !wanted {
            if owner == Some(group) {
                let mut edits = LabelEdits::from([(BELONGING_TO, None)]);
                if label(ZONE) == Some(group) {
                    edits.insert(ZONE, None);
                }
                plan.labels.insert(name.to_owned(), edits);
                plan.released.insert(name.to_owned());
            }
            continue;
        }
        let mut status = MemberStatus {
            node_name: name.to_owned(),
            ready_status: ready(node).to_owned(),
            selection_status: SUCCEEDED.to_owned(),
            selection_status_reason: String::new(),
        };
        match owner {
            Some(other) if other != group => {
                status.selection_status = FAILED.to_owned();
                status.selection_status_reason =
                    format!("node {name} already belongs to NodeGroup {other}");
            }
            _ => {
                let mut edits = LabelEdits::new();
                if owner.is_none() {
                    edits.insert(BELONGING_TO, Some(group.to_owned()));
                }
                match (spec.topology_enabled, label(ZONE)) {
                    (true, zone) if zone != Some(group) => {
                        edits.insert(ZONE, Some(group.to_owned()));
                    }
                    (false, Some(zone)) if zone == group => {
                        edits.insert(ZONE, None);
                    }
                    _ => {}
                }
                if !edits.is_empty() {
                    plan.labels.insert(name.to_owned(), edits);
                }
            }
        }
        statuses.push(status);
    }
    for missing in named.iter().filter(|n| !seen.contains(**n)) {
        statuses.push(MemberStatus {
            node_name: (*missing).to_owned(),
            ready_status: "Unknown".to_owned(),
            selection_status: FAILED.to_owned(),
            selection_status_reason: "node does not exist".to_owned(),
        });
    }
    statuses.sort();
    plan.status.node_statuses = statuses;
    plan
}

/// The nodes labelled for `group`, released when the group is deleted.
pub fn release_all<'a>(group: &str, nodes: impl IntoIterator<Item = &'a Node>) -> Plan {
    plan(group, &NodeGroupSpec::default(), nodes)
}

/// `Ready`, `NotReady` or `Unknown`, from the node's Ready condition.
fn ready(node: &Node) -> &'static str {
    let condition = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match condition.map(|c| c.status.as_str()) {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use kube::api::ObjectMeta;

    use super::*;

    fn node(name: &str, labels: &[(&str, &str)], ready: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            status: ready.map(|status| NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".to_owned(),
                    status: status.to_owned(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn spec(yaml: &str) -> NodeGroupSpec {
        serde_norway::from_str(yaml).expect("valid YAML")
    }

    #[test]
    fn members_are_named_or_labelled_and_the_first_group_keeps_a_node() {
        let nodes = [
            node("a", &[], Some("True")),
            node("b", &[("site", "x")], Some("False")),
            node("c", &[("site", "x"), (BELONGING_TO, "other")], None),
            node("d", &[], None),
        ];
        let plan = plan(
            "g",
            &spec("{nodes: [a, ghost], matchLabels: {site: x}, topologyEnabled: true}"),
            &nodes,
        );
        assert_eq!(
            plan.labels,
            BTreeMap::from([
                (
                    "a".to_owned(),
                    LabelEdits::from([
                        (BELONGING_TO, Some("g".to_owned())),
                        (ZONE, Some("g".to_owned()))
                    ])
                ),
                (
                    "b".to_owned(),
                    LabelEdits::from([
                        (BELONGING_TO, Some("g".to_owned())),
                        (ZONE, Some("g".to_owned()))
                    ])
                ),
            ])
        );
        let summary: Vec<_> = plan
            .status
            .node_statuses
            .iter()
            .map(|s| {
                (
                    s.node_name.as_str(),
                    s.ready_status.as_str(),
                    s.selection_status.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("a", "Ready", SUCCEEDED),
                ("b", "NotReady", SUCCEEDED),
                ("c", "Unknown", FAILED),
                ("ghost", "Unknown", FAILED),
            ]
        );
        assert!(plan.released.is_empty());
    }

    #[test]
    fn a_member_no_longer_wanted_is_released_and_a_settled_one_untouched() {
        let nodes = [
            node("a", &[(BELONGING_TO, "g"), (ZONE, "g")], Some("True")),
            node("b", &[(BELONGING_TO, "g"), (ZONE, "eu-1")], Some("True")),
            node("c", &[(BELONGING_TO, "g")], Some("True")),
        ];
        let plan = plan("g", &spec("{nodes: [c]}"), &nodes);
        assert_eq!(
            plan.released,
            BTreeSet::from(["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(
            plan.labels["a"],
            LabelEdits::from([(BELONGING_TO, None), (ZONE, None)])
        );
        // Another zone is not the group's to remove.
        assert_eq!(plan.labels["b"], LabelEdits::from([(BELONGING_TO, None)]));
        assert!(!plan.labels.contains_key("c"));
        assert_eq!(release_all("g", &nodes).released.len(), 3);
    }

    #[test]
    fn no_match_labels_select_nothing_and_empty_ones_everything() {
        let nodes = [node("a", &[], None)];
        assert!(
            plan("g", &spec("{}"), &nodes)
                .status
                .node_statuses
                .is_empty()
        );
        assert_eq!(
            plan("g", &spec("{matchLabels: {}}"), &nodes)
                .status
                .node_statuses
                .len(),
            1
        );
    }
}
