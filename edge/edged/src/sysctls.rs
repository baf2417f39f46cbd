//! Pod sysctls (`spec.securityContext.sysctls`), as the kubelet admits and applies them
//! (`pkg/kubelet/sysctl`): names in slash form are normalized to dot form; only the safe
//! sysctls are allowed (the kubelet's default, with no `allowedUnsafeSysctls`), and not in a
//! namespace the pod shares with the host; a pod asking for another is rejected at admission
//! with reason `SysctlForbidden`. Allowed ones are set on the pod's sandbox, whose network
//! and IPC namespaces the containers share.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

/// The reason of a pod rejected for its sysctls.
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// The kubelet's safe sysctls (1.37) and whether each is in the IPC namespace (else net).
const SAFE: [(&str, Namespace); 14] = [
    ("kernel.shm_rmid_forced", Namespace::Ipc),
    ("net.ipv4.ip_local_port_range", Namespace::Net),
    ("net.ipv4.tcp_syncookies", Namespace::Net),
    ("net.ipv4.ping_group_range", Namespace::Net),
    ("net.ipv4.ip_unprivileged_port_start", Namespace::Net),
    ("net.ipv4.ip_local_reserved_ports", Namespace::Net),
    ("net.ipv4.tcp_keepalive_time", Namespace::Net),
    ("net.ipv4.tcp_fin_timeout", Namespace::Net),
    ("net.ipv4.tcp_keepalive_intvl", Namespace::Net),
    ("net.ipv4.tcp_keepalive_probes", Namespace::Net),
    ("net.ipv4.tcp_rmem", Namespace::Net),
    ("net.ipv4.tcp_wmem", Namespace::Net),
    ("net.ipv4.tcp_slow_start_after_idle", Namespace::Net),
    ("net.ipv4.tcp_notsent_lowat", Namespace::Net),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
}

/// `name` in dot form: when its first separator is `/`, dots and slashes are swapped
/// (`net/ipv4/conf/eth0.100/forwarding` → `net.ipv4.conf.eth0/100.forwarding`), as the
/// kubelet's `NormalizeName`.
pub fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '/' => '.',
                '.' => '/',
                c => c,
            })
            .collect(),
        _ => name.to_owned(),
    }
}

/// Why `pod` may not run here (the kubelet's admission message, e.g. `forbidden sysctl:
/// "kernel.msgmax" not allowlisted`), if it asks for a sysctl it may not have.
pub fn forbidden(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let sysctls = spec.security_context.as_ref()?.sysctls.as_ref()?;
    let (host_net, host_ipc) = (
        spec.host_network.unwrap_or(false),
        spec.host_ipc.unwrap_or(false),
    );
    sysctls.iter().find_map(|s| {
        let name = normalize(&s.name);
        let reason = match SAFE.iter().find(|(safe, _)| *safe == name) {
            None => format!("{name:?} not allowlisted"),
            Some((_, Namespace::Net)) if host_net => {
                format!("{name:?} not allowed with host net enabled")
            }
            Some((_, Namespace::Ipc)) if host_ipc => {
                format!("{name:?} not allowed with host ipc enabled")
            }
            Some(_) => return None,
        };
        Some(format!("forbidden sysctl: {reason}"))
    })
}

/// The sysctls to set on the pod's sandbox, in dot form (admitted pods only).
pub fn for_sandbox(pod: &Pod) -> HashMap<String, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (normalize(&s.name), s.value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .expect("pod")
    }

    #[test]
    fn names_in_slash_form_are_normalized() {
        assert_eq!(
            normalize("kernel/shm_rmid_forced"),
            "kernel.shm_rmid_forced"
        );
        assert_eq!(
            normalize("net/ipv4/conf/eth0.100/forwarding"),
            "net.ipv4.conf.eth0/100.forwarding"
        );
        assert_eq!(
            normalize("net.ipv4.tcp_syncookies"),
            "net.ipv4.tcp_syncookies"
        );
    }

    #[test]
    fn only_safe_sysctls_outside_host_namespaces_are_admitted() {
        let sysctls = |names: &[&str], host_net: bool| {
            let list: Vec<_> = names
                .iter()
                .map(|n| serde_json::json!({"name": n, "value": "1"}))
                .collect();
            pod(
                serde_json::json!({"containers": [], "hostNetwork": host_net,
                "securityContext": {"sysctls": list}}),
            )
        };
        assert_eq!(
            forbidden(&sysctls(&["kernel/shm_rmid_forced"], false)),
            None
        );
        assert_eq!(
            forbidden(&sysctls(
                &["kernel.shm_rmid_forced", "kernel.msgmax"],
                false
            ))
            .as_deref(),
            Some("forbidden sysctl: \"kernel.msgmax\" not allowlisted")
        );
        assert_eq!(
            forbidden(&sysctls(&["net.ipv4.tcp_syncookies"], true)).as_deref(),
            Some("forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled")
        );
        let applied = for_sandbox(&sysctls(&["kernel/shm_rmid_forced"], false));
        assert_eq!(
            applied.get("kernel.shm_rmid_forced").map(String::as_str),
            Some("1")
        );
    }
}
