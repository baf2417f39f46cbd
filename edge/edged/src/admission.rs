//! Pod admission on the node (kubelet: the lifecycle admit handlers of `canAdmitPod`): a pod
//! the node cannot run fails at once, phase `Failed` with the kubelet's reason and message,
//! and nothing of it is created. Checked in this order:
//! - the `kubernetes.io/os` node selector must be `linux` (`PodOSSelectorNodeLabelDoesNotMatch`);
//! - `spec.os.name` must be `linux` (`PodOSNotSupported`);
//! - the sysctls must be allowed ([`crate::sysctls`], `SysctlForbidden`).

use k8s_openapi::api::core::v1::Pod;

/// The node's OS, as its `kubernetes.io/os` label says.
const NODE_OS: &str = "linux";

/// Why the node refuses `pod`: `(reason, message)`, or `None` when it admits it.
pub fn rejection(pod: &Pod) -> Option<(&'static str, String)> {
    let spec = pod.spec.as_ref()?;
    let selected_os = spec
        .node_selector
        .as_ref()
        .and_then(|s| s.get("kubernetes.io/os"));
    if selected_os.is_some_and(|os| os != NODE_OS) {
        return Some((
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label".into(),
        ));
    }
    if spec.os.as_ref().is_some_and(|os| os.name != NODE_OS) {
        return Some((
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS".into(),
        ));
    }
    crate::sysctls::forbidden(pod).map(|m| (crate::sysctls::FORBIDDEN_REASON, m))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({ "spec": spec })).expect("pod")
    }

    #[test]
    fn another_os_is_refused_with_the_kubelets_reasons() {
        let windows = pod(json!({"os": {"name": "windows"}, "containers": []}));
        assert_eq!(rejection(&windows).map(|r| r.0), Some("PodOSNotSupported"));
        let selected = pod(json!({"nodeSelector": {"kubernetes.io/os": "windows"},
            "containers": []}));
        assert_eq!(
            rejection(&selected).map(|r| r.0),
            Some("PodOSSelectorNodeLabelDoesNotMatch")
        );
        let linux = pod(json!({"os": {"name": "linux"},
            "nodeSelector": {"kubernetes.io/os": "linux"}, "containers": []}));
        assert_eq!(rejection(&linux), None);
    }

    #[test]
    fn an_unsafe_sysctl_is_refused() {
        let p = pod(
            json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
            "containers": []}),
        );
        assert_eq!(rejection(&p).map(|r| r.0), Some("SysctlForbidden"));
    }
}
