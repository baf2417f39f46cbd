//! The configurations of containerd, kubelet and kube-proxy, and the CNI config template.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::json;

use super::files::{NodePorts, shim_socket_dir};
use super::{CLUSTER_CIDR, CNI_BIN_DIR, CNI_BRIDGE, CNI_NETWORK, KubeletNodeConfig};

/// What containerd replaces with the pod CIDR kubelet passes on (the Node's
/// `spec.podCIDR`) when it renders its CNI config template (a Go `text/template`; containerd
/// 2.x `internal/cri/server/update_runtime_config.go`, `cniConfigTemplate.PodCIDR`).
const POD_CIDR_PLACEHOLDER: &str = "{{.PodCIDR}}";

/// `<run>/cni/conflist.template`: the CNI config template (outside `conf_dir`, where
/// containerd writes the rendered `10-containerd-net.conflist`).
pub(super) fn cni_conf_template_path(run_dir: &Path) -> PathBuf {
    run_dir.join("cni").join("conflist.template")
}

/// A TOML literal string (single-quoted) of `path`.
fn toml_path(path: &Path) -> anyhow::Result<String> {
    let s = path
        .to_str()
        .with_context(|| format!("non-UTF-8 path {}", path.display()))?;
    if s.contains('\'') || s.contains('\n') {
        bail!("path {s:?} cannot be a TOML literal string");
    }
    Ok(format!("'{s}'"))
}

/// containerd's configuration (version 4, containerd 2.x): its own root, state, runc
/// state and sockets under the run directory, CRI with the pinned local pause image, runc
/// from Debian with cgroupfs, NRI off, and the CNI network rendered from the run
/// directory's template ([`cni_conf_template`]; CRI runtime `cni.conf_template`: once kubelet
/// passes the Node's pod CIDR on, containerd writes the network into `conf_dir`). OOM score
/// adjustments are clamped to containerd's own (`restrict_oom_score_adj`): a host whose
/// capability bounding set lacks `CAP_SYS_RESOURCE` (this VM's) cannot lower them, and
/// runc fails to create the pod sandbox (kubelet asks for -998) otherwise.
pub(super) fn containerd_toml(config: &KubeletNodeConfig) -> anyhow::Result<String> {
    let run = &config.run_dir;
    let sock = config.containerd_socket();
    let mut ttrpc = sock.clone().into_os_string();
    ttrpc.push(".ttrpc");
    Ok(format!(
        "version = 4\n\
         root = {root}\n\
         state = {state}\n\
         imports = []\n\
         \n\
         [plugins]\n\
         \x20 [plugins.'io.containerd.server.v1.grpc']\n\
         \x20   address = {sock}\n\
         \x20 [plugins.'io.containerd.server.v1.ttrpc']\n\
         \x20   address = {ttrpc}\n\
         \x20 [plugins.'io.containerd.server.v1.debug']\n\
         \x20   address = ''\n\
         \x20 [plugins.'io.containerd.nri.v1.nri']\n\
         \x20   disable = true\n\
         \x20 [plugins.'io.containerd.internal.v1.opt']\n\
         \x20   path = {opt}\n\
         \x20 [plugins.'io.containerd.shim.v1.manager']\n\
         \x20   socket_dir = {shims}\n\
         \x20 [plugins.'io.containerd.grpc.v1.cri']\n\
         \x20   stream_server_address = '127.0.0.1'\n\
         \x20   stream_server_port = '0'\n\
         \x20 [plugins.'io.containerd.cri.v1.images']\n\
         \x20   snapshotter = 'overlayfs'\n\
         \x20   [plugins.'io.containerd.cri.v1.images'.pinned_images]\n\
         \x20     sandbox = 'docker.io/{pause}'\n\
         \x20 [plugins.'io.containerd.cri.v1.runtime']\n\
         \x20   netns_mounts_under_state_dir = true\n\
         \x20   restrict_oom_score_adj = true\n\
         \x20   cdi_spec_dirs = []\n\
         \x20   [plugins.'io.containerd.cri.v1.runtime'.containerd]\n\
         \x20     default_runtime_name = 'runc'\n\
         \x20     [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n\
         \x20       runtime_type = 'io.containerd.runc.v2'\n\
         \x20       [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n\
         \x20         BinaryName = '/usr/sbin/runc'\n\
         \x20         SystemdCgroup = false\n\
         \x20         Root = {runc_root}\n\
         \x20   [plugins.'io.containerd.cri.v1.runtime'.cni]\n\
         \x20     bin_dirs = ['{CNI_BIN_DIR}']\n\
         \x20     conf_dir = {cni}\n\
         \x20     conf_template = {cni_template}\n",
        root = toml_path(&run.join("containerd/root"))?,
        state = toml_path(&run.join("containerd/state"))?,
        sock = toml_path(&sock)?,
        ttrpc = toml_path(Path::new(&ttrpc))?,
        opt = toml_path(&run.join("containerd/opt"))?,
        shims = toml_path(&shim_socket_dir(run))?,
        pause = super::PAUSE_IMAGE,
        cni = toml_path(&run.join("cni/net.d"))?,
        cni_template = toml_path(&cni_conf_template_path(run))?,
        runc_root = toml_path(&run.join("runc"))?,
    ))
}

/// The KubeletConfiguration (JSON is YAML): cgroup v1 with cgroupfs, serving on the node
/// IP with the control plane's CA for clients and webhook authorization, relaxed eviction
/// and image GC, pod logs and plugins under the run directory.
pub(super) fn kubelet_config(
    config: &KubeletNodeConfig,
    node_ip: Ipv4Addr,
    ports: NodePorts,
    ca: &Path,
    (cert, key): &(PathBuf, PathBuf),
) -> serde_json::Value {
    let run = &config.run_dir;
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        // This host is cgroup v1 (hybrid) without systemd as PID 1.
        "failCgroupV1": false,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": format!("unix://{}", config.containerd_socket().display()),
        "address": node_ip.to_string(),
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.kubelet_healthz,
        "tlsCertFile": cert,
        "tlsPrivateKeyFile": key,
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": true},
            "x509": {"clientCAFile": ca},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "podLogsDir": run.join("pod-logs"),
        "volumePluginDir": run.join("volume-plugins"),
        "failSwapOn": false,
        // The host disk is shared with builds: never evict or garbage-collect the images
        // under test because of it.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "rotateCertificates": false,
        "serverTLSBootstrap": false,
        "registerNode": true,
        // Lowering an OOM score needs CAP_SYS_RESOURCE, which this host's processes may
        // lack; the node under test is not protecting itself from the OOM killer anyway.
        "oomScoreAdj": 0,
    })
}

/// The KubeProxyConfiguration: iptables mode, NodePorts only on the node IP, no host
/// sysctl changes (conntrack limits and `route_localnet` left alone).
pub(super) fn proxy_config(
    config: &KubeletNodeConfig,
    node_ip: Ipv4Addr,
    ports: NodePorts,
    kubeconfig: &Path,
) -> serde_json::Value {
    json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "hostnameOverride": config.name,
        "healthzBindAddress": format!("127.0.0.1:{}", ports.proxy_healthz),
        "metricsBindAddress": format!("127.0.0.1:{}", ports.proxy_metrics),
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        "detectLocalMode": "ClusterCIDR",
        "nodePortAddresses": [format!("{node_ip}/32")],
        "iptables": {"localhostNodePorts": false},
        "oomScoreAdj": 0,
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    })
}

/// containerd's CNI config template (`conf_template`, rendered by containerd with the
/// Node's `spec.podCIDR` in place of [`POD_CIDR_PLACEHOLDER`]): a bridge with host-local
/// IPAM in the node's pod CIDR (gateway: its first address on [`CNI_BRIDGE`]; allocations in
/// `ipam_dir`), hairpin on (a pod reaching itself through a Service), no masquerading, and
/// portmap for `hostPort`s. containerd adds the loopback interface itself.
///
/// As JSON it holds no `{{` but the placeholder's, so it is a valid Go template.
pub(super) fn cni_conf_template(ipam_dir: &Path) -> serde_json::Value {
    json!({
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": CNI_BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR_PLACEHOLDER}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": ipam_dir,
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn containerd_config_keeps_to_the_run_dir() {
        let config = KubeletNodeConfig {
            run_dir: PathBuf::from("/r"),
            ..KubeletNodeConfig::from_env()
        };
        let toml = containerd_toml(&config).expect("config");
        assert!(toml.contains("root = '/r/containerd/root'"));
        assert!(toml.contains("address = '/r/containerd/containerd.sock'"));
        assert!(toml.contains("SystemdCgroup = false"));
        assert!(toml.contains("Root = '/r/runc'"));
        assert!(toml.contains("sandbox = 'docker.io/verge-test/pause:3.10'"));
        assert!(toml.contains("conf_dir = '/r/cni/net.d'"));
        assert!(toml.contains("conf_template = '/r/cni/conflist.template'"));
        assert!(!toml.contains("/run/containerd"));
    }

    #[test]
    fn cni_template_renders_the_pod_cidr() {
        let template = serde_json::to_string_pretty(&cni_conf_template(Path::new("/r/cni/ipam")))
            .expect("json");
        // The only template action is the pod CIDR (containerd's text/template would
        // choke on any other `{{`).
        assert_eq!(template.matches("{{").count(), 1);
        assert_eq!(template.matches("}}").count(), 1);
        // As containerd renders it for a Node with podCIDR 10.244.3.0/24.
        let rendered: serde_json::Value =
            serde_json::from_str(&template.replace(POD_CIDR_PLACEHOLDER, "10.244.3.0/24"))
                .expect("rendered template is JSON");
        assert_eq!(rendered["name"], CNI_NETWORK);
        let bridge = &rendered["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], CNI_BRIDGE);
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["hairpinMode"], true);
        let ipam = &bridge["ipam"];
        assert_eq!(ipam["type"], "host-local");
        assert_eq!(ipam["ranges"][0][0]["subnet"], "10.244.3.0/24");
        assert_eq!(ipam["routes"][0]["dst"], "0.0.0.0/0");
        assert_eq!(ipam["dataDir"], "/r/cni/ipam");
        assert_eq!(rendered["plugins"][1]["type"], "portmap");
    }
}
