//! The `/etc/hosts` the kubelet writes for each container (`kubelet_pods.go`:
//! `ensureHostsFile`): for a pod on the pod network, a managed file naming `localhost`, the
//! IPv6 defaults, the pod's IP with its hostname (and FQDN under `spec.subdomain`) and the
//! `spec.hostAliases`; for a hostNetwork pod, the node's own `/etc/hosts` plus the aliases.
//! Written to `<pod dir>/etc-hosts` and bind-mounted, unless the container mounts a volume
//! at `/etc/hosts` itself.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, HostAlias, Pod};

/// Where containers see the file.
pub const ETC_HOSTS: &str = "/etc/hosts";
/// The default cluster domain of pod FQDNs (`<hostname>.<subdomain>.<namespace>.svc.<domain>`),
/// the kubelet's `clusterDomain` as clusters set it; edgecore's `network.clusterDomain`.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
const HEADER: &str = "# Kubernetes-managed hosts file.\n";
const HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// Whether `container` of `pod` gets the managed file: the pod has an IP or uses the host
/// network, and the container mounts nothing at `/etc/hosts` (kubelet:
/// `shouldMountHostsFile`).
pub fn should_mount(pod: &Pod, container: &Container, pod_ip: Option<&str>) -> bool {
    let host_network = crate::spec::host_network(pod);
    (pod_ip.is_some() || host_network)
        && !container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == ETC_HOSTS)
}

/// The pod's hostname: `spec.hostnameOverride` (Kubernetes 1.34+, validated by the API
/// server as a DNS subdomain and never beside hostNetwork or setHostnameAsFQDN) when set,
/// else `spec.hostname`, else its name, cut to 63 characters, as the kubelet's
/// `GeneratePodHostNameAndDomain`.
pub fn hostname(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    if let Some(name) = spec
        .and_then(|s| s.hostname_override.as_deref())
        .filter(|h| !h.is_empty())
    {
        return name.to_owned();
    }
    let name = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    if name.len() > 63 {
        name[..63].trim_end_matches(['-', '.']).to_owned()
    } else {
        name
    }
}

/// The pod's [`hostname()`] and domain: `<subdomain>.<namespace>.svc.<cluster_domain>` when
/// `spec.subdomain` is set and no `spec.hostnameOverride` replaces both.
pub fn hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, Option<String>) {
    let spec = pod.spec.as_ref();
    let overridden = spec
        .and_then(|s| s.hostname_override.as_deref())
        .is_some_and(|h| !h.is_empty());
    let domain = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty() && !overridden)
        .map(|sub| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            format!("{sub}.{ns}.svc.{cluster_domain}")
        });
    (hostname(pod), domain)
}

/// The file's content for `pod` with IP `pod_ip` in the cluster domain `cluster_domain`;
/// `node_hosts` is the node's `/etc/hosts` (read only for a hostNetwork pod).
///
/// # Errors
/// Reading the node's file fails.
pub fn content(
    pod: &Pod,
    pod_ip: Option<&str>,
    cluster_domain: &str,
    node_hosts: impl FnOnce() -> std::io::Result<String>,
) -> std::io::Result<String> {
    let aliases = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.as_deref())
        .unwrap_or_default();
    let mut out = String::new();
    if crate::spec::host_network(pod) {
        out.push_str(HEADER_HOST_NETWORK);
        out.push_str(&node_hosts()?);
    } else {
        out.push_str(HEADER);
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        let (hostname, domain) = hostname_and_domain(pod, cluster_domain);
        if let Some(ip) = pod_ip {
            let _ = match domain {
                Some(d) => writeln!(out, "{ip}\t{hostname}.{d}\t{hostname}"),
                None => writeln!(out, "{ip}\t{hostname}"),
            };
        }
    }
    out.push_str(&alias_entries(aliases));
    Ok(out)
}

fn alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        let names = a.hostnames.as_deref().unwrap_or_default().join("\t");
        let _ = writeln!(out, "{}\t{names}", a.ip);
    }
    out
}

/// Writes the file of `pod` (cluster domain `cluster_domain`) to `<pod_dir>/etc-hosts` (mode
/// 0644) and returns its path.
///
/// # Errors
/// Writing it (or reading the node's `/etc/hosts`) fails.
pub fn write(
    pod_dir: &Path,
    pod: &Pod,
    pod_ip: Option<&str>,
    cluster_domain: &str,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let text = content(pod, pod_ip, cluster_domain, || {
        std::fs::read_to_string(ETC_HOSTS)
    })?;
    std::fs::create_dir_all(pod_dir)?;
    let path = pod_dir.join("etc-hosts");
    std::fs::write(&path, text)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"}, "spec": spec}))
        .expect("pod")
    }

    /// The managed file of `p` with IP 172.17.0.4 in `domain`.
    fn managed(p: &Pod, domain: &str) -> String {
        content(p, Some("172.17.0.4"), domain, || unreachable!()).expect("content")
    }

    #[test]
    fn managed_file_names_the_pod_and_its_aliases() {
        let p = pod(
            serde_json::json!({"hostname": "h", "subdomain": "s", "containers": [],
            "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo", "bar"]}]}),
        );
        let text = managed(&p, DEFAULT_CLUSTER_DOMAIN);
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            text.contains("172.17.0.4\th.s.ns.svc.cluster.local\th\n"),
            "{text}"
        );
        let text = managed(&p, "edge.internal");
        assert!(
            text.contains("172.17.0.4\th.s.ns.svc.edge.internal\th\n"),
            "{text}"
        );
        assert!(text.ends_with("\n# Entries added by HostAliases.\n10.1.2.3\tfoo\tbar\n"));
    }

    #[test]
    fn a_hostname_override_replaces_hostname_and_domain() {
        let p = pod(
            serde_json::json!({"hostname": "h", "subdomain": "s", "containers": [],
            "hostnameOverride": "override.example.host"}),
        );
        assert_eq!(
            hostname_and_domain(&p, DEFAULT_CLUSTER_DOMAIN),
            ("override.example.host".to_owned(), None)
        );
        let text = managed(&p, DEFAULT_CLUSTER_DOMAIN);
        assert!(
            text.contains("172.17.0.4\toverride.example.host\n"),
            "{text}"
        );
    }

    #[test]
    fn host_network_pods_get_the_node_file() {
        let p = pod(serde_json::json!({"hostNetwork": true, "containers": []}));
        let text = content(&p, Some("10.0.0.1"), DEFAULT_CLUSTER_DOMAIN, || {
            Ok("127.0.0.1 node\n".into())
        })
        .expect("ok");
        assert_eq!(
            text,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 node\n"
        );
    }

    #[test]
    fn a_container_mounting_etc_hosts_keeps_its_own() {
        let p = pod(serde_json::json!({"containers": []}));
        let c: Container = serde_json::from_value(serde_json::json!({"name": "c",
            "volumeMounts": [{"name": "v", "mountPath": "/etc/hosts"}]}))
        .expect("container");
        assert!(!should_mount(&p, &c, Some("172.17.0.4")));
        let plain: Container = serde_json::from_value(serde_json::json!({"name": "c"})).expect("c");
        assert!(should_mount(&p, &plain, Some("172.17.0.4")));
        assert!(!should_mount(&p, &plain, None));
    }
}
