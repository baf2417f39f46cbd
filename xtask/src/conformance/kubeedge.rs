//! The specs KubeEdge's own conformance run leaves out by name
//! (`build/conformance/kubernetes/edge_skip_case.yaml` in KubeEdge's repository, each entry
//! a `codename` matched against the spec's text), so the document can say how many of them
//! Verge passes.

/// The names KubeEdge skips, as it lists them (one is listed twice there; once here).
pub const SKIPPED_NAMES: &[&str] = &[
    "runs ReplicaSets to verify preemption running path",
    "should rollback without unnecessary restarts",
    "should be sent by kubelets and the scheduler about pods scheduling and running",
    "should contain environment variables for services",
    "should perform rolling updates and roll backs of template modifications with PVCs",
    "should perform rolling updates and roll backs of template modifications",
    "should support CSR API operations",
    "should function for intra-pod communication",
    "should function for node-pod communication",
    "Burst scaling should run to completion even with unhealthy pods",
    "should mount an API token into pods",
    "Scaling should happen in predictable order and halt if any stateful pod is unhealthy",
    "optional updates should be reflected in volume",
    "should serve a basic image on each replica with a public image",
    "ServiceAccountIssuerDiscovery should support OIDC discovery of service account issuer",
    "should be consumable in multiple volumes in a pod",
    "should call prestop when killing a pod",
    "should support sysctls",
    "Should recreate evicted statefulset",
];

/// Whether KubeEdge's run skips the spec `text` (one of [`SKIPPED_NAMES`] is part of it).
pub fn skips(text: &str) -> bool {
    SKIPPED_NAMES.iter().any(|name| text.contains(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_by_part_of_the_text() {
        assert!(skips(
            "[sig-node] PreStop should call prestop when killing a pod [Conformance] \
             [sig-node, Conformance]"
        ));
        assert!(!skips("[sig-node] Pods should get a host IP [Conformance]"));
    }
}
