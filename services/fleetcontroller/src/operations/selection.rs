//! Which edge nodes a job runs on.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt as _;
use kube::core::SelectorExt as _;
use verge_core::well_known::EDGE_NODE_LABEL;

use super::validate::Selection;

/// The nodes of a job: the edge nodes it selects, and names it gives that are no edge node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selected {
    /// Edge nodes (carrying `node-role.kubernetes.io/edge`) selected, by name.
    pub edge_nodes: BTreeSet<String>,
    /// Names in `nodeNames` with no edge node (absent, or a node of the cloud).
    pub missing: BTreeSet<String>,
}

/// The edge nodes of `nodes` that `selection` names or whose labels it matches. Only edge
/// nodes ever run a job, as in KubeEdge: a label selector never picks a cloud node.
pub fn select<'a>(selection: &Selection, nodes: impl IntoIterator<Item = &'a Node>) -> Selected {
    let edge: Vec<&Node> = nodes
        .into_iter()
        .filter(|n| n.labels().contains_key(EDGE_NODE_LABEL))
        .collect();
    let mut out = Selected::default();
    match selection {
        Selection::Names(names) => {
            for name in names {
                if edge.iter().any(|n| n.name_any() == *name) {
                    out.edge_nodes.insert(name.clone());
                } else {
                    out.missing.insert(name.clone());
                }
            }
        }
        Selection::Labels(selector) => {
            out.edge_nodes = edge
                .iter()
                .filter(|n| selector.matches(n.labels()))
                .map(|n| n.name_any())
                .collect();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Selector;

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels.iter().copied().collect::<std::collections::BTreeMap<_, _>>()}
        }))
        .expect("a node")
    }

    #[test]
    fn only_edge_nodes_are_selected() {
        let nodes = [
            node("e1", &[(EDGE_NODE_LABEL, ""), ("zone", "a")]),
            node("e2", &[(EDGE_NODE_LABEL, ""), ("zone", "b")]),
            node("cloud", &[("zone", "a")]),
        ];
        let names = Selection::Names(["e1", "cloud", "gone"].map(String::from).into());
        let s = select(&names, &nodes);
        assert_eq!(s.edge_nodes, BTreeSet::from(["e1".to_owned()]));
        assert_eq!(
            s.missing,
            BTreeSet::from(["cloud".to_owned(), "gone".to_owned()])
        );
        let zone_a: Selector =
            Selector::from(kube::core::Expression::Equal("zone".into(), "a".into()));
        let s = select(&Selection::Labels(zone_a), &nodes);
        assert_eq!(s.edge_nodes, BTreeSet::from(["e1".to_owned()]));
        assert!(s.missing.is_empty());
    }
}
