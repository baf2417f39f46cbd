//! Which labels an edge may give its own Node: Kubernetes' NodeRestriction admission rules
//! for kubelets, plus the label keys the operator reserves (`reservedNodeLabels`).
//!
//! NodeRestriction (kube-apiserver `--enable-admission-plugins=NodeRestriction`) lets a
//! kubelet set any label outside the `kubernetes.io` and `k8s.io` namespaces, and inside them
//! only the kubelet's own well-known labels (hostname, os, arch, instance type, zone and
//! region) and the `kubelet.kubernetes.io/` and `node.kubernetes.io/` namespaces; never the
//! `node-restriction.kubernetes.io/` namespace, which Kubernetes sets aside for operators to
//! label nodes for workload isolation. So a compromised node cannot advertise
//! `node-role.kubernetes.io/control-plane` or an isolation label and attract the pods (and
//! their secrets) that select it. edgecontroller writes the Node as the node itself, so the API
//! server's NodeRestriction enforces the same rules again; this policy drops refused labels
//! (logged) instead of failing the whole registration, and adds the operator's keys.

use std::collections::BTreeMap;

use verge_core::EDGE_NODE_LABEL;

/// The label keys a kubelet may set in the `kubernetes.io`/`k8s.io` namespaces (kubelet
/// `kubeletapis` well-known labels).
const KUBELET_LABELS: [&str; 11] = [
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// The label namespaces a kubelet may set (with their subdomains).
const KUBELET_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The namespace NodeRestriction reserves for operators (with its subdomains).
const OPERATOR_NAMESPACE: &str = "node-restriction.kubernetes.io";

/// The label keys an edge may set on its Node; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLabelPolicy {
    /// Operator-reserved label keys (`example.com/trusted`) and namespaces (entries ending in
    /// `/`, e.g. `example.com/`, covering every key in that namespace).
    reserved: Vec<String>,
}

impl NodeLabelPolicy {
    /// NodeRestriction's rules plus the operator's `reserved` keys and namespaces (entries
    /// ending in `/`).
    pub fn new(reserved: Vec<String>) -> Self {
        Self { reserved }
    }

    /// Whether an edge may set label `key` on its Node. Verge's own edge label
    /// ([`EDGE_NODE_LABEL`]) is not: cloudhub sets it when the node joins, and NodeRestriction
    /// refuses a node's change to any `node-role.kubernetes.io/` label.
    pub fn allows(&self, key: &str) -> bool {
        let namespace = key.rsplit_once('/').map_or("", |(ns, _)| ns);
        if self.reserved.iter().any(|r| match r.strip_suffix('/') {
            Some(reserved_ns) => in_namespace(namespace, reserved_ns),
            None => r == key,
        }) {
            return false;
        }
        if in_namespace(namespace, OPERATOR_NAMESPACE) {
            return false;
        }
        if in_namespace(namespace, "kubernetes.io") || in_namespace(namespace, "k8s.io") {
            return KUBELET_LABELS.contains(&key)
                || KUBELET_NAMESPACES
                    .iter()
                    .any(|ns| in_namespace(namespace, ns));
        }
        true
    }

    /// Splits `labels` into those the edge may set and the keys it may not. The edge label
    /// ([`EDGE_NODE_LABEL`], which every edge sends and the Node carries since its join) is
    /// left out of both.
    pub fn admit(
        &self,
        labels: BTreeMap<String, String>,
    ) -> (BTreeMap<String, String>, Vec<String>) {
        let mut refused = Vec::new();
        let allowed = labels
            .into_iter()
            .filter(|(key, _)| key != EDGE_NODE_LABEL)
            .filter(|(key, _)| {
                let ok = self.allows(key);
                if !ok {
                    refused.push(key.clone());
                }
                ok
            })
            .collect();
        (allowed, refused)
    }
}

/// Whether label namespace `namespace` is `parent` or one of its subdomains.
fn in_namespace(namespace: &str, parent: &str) -> bool {
    namespace == parent
        || namespace
            .strip_suffix(parent)
            .is_some_and(|sub| sub.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_labels_and_namespaces_are_allowed() {
        let policy = NodeLabelPolicy::default();
        for key in [
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/anything",
            "kubelet.kubernetes.io/x",
            "sub.kubelet.kubernetes.io/x",
            "site",
            "example.com/line",
        ] {
            assert!(policy.allows(key), "{key}");
        }
    }

    #[test]
    fn other_kubernetes_labels_and_the_operator_namespace_are_refused() {
        let policy = NodeLabelPolicy::default();
        for key in [
            "node-role.kubernetes.io/control-plane",
            "node-role.kubernetes.io/master",
            EDGE_NODE_LABEL,
            "kubernetes.io/role",
            "example.k8s.io/x",
            "k8s.io/x",
            "node-restriction.kubernetes.io/secure",
            "a.node-restriction.kubernetes.io/secure",
        ] {
            assert!(!policy.allows(key), "{key}");
        }
        // A look-alike domain is not a subdomain.
        assert!(policy.allows("notkubernetes.io/x"));
    }

    #[test]
    fn operator_reserved_keys_and_namespaces_are_refused() {
        let policy = NodeLabelPolicy::new(vec!["example.com/trusted".into(), "corp.io/".into()]);
        assert!(!policy.allows("example.com/trusted"));
        assert!(policy.allows("example.com/other"));
        assert!(!policy.allows("corp.io/tier"));
        assert!(!policy.allows("eu.corp.io/tier"));
        assert!(policy.allows("notcorp.io/tier"));
        let labels = BTreeMap::from([
            ("site".to_owned(), "a".to_owned()),
            ("corp.io/tier".to_owned(), "gold".to_owned()),
        ]);
        let (allowed, refused) = policy.admit(labels);
        assert_eq!(allowed.keys().collect::<Vec<_>>(), ["site"]);
        assert_eq!(refused, ["corp.io/tier"]);
    }
}
