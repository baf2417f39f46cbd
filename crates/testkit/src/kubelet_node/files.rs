//! The node's files: certificates signed by the control plane's CA, kubeconfigs, and the
//! configurations of containerd, kubelet, kube-proxy and CNI.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::json;

use super::{CLUSTER_CIDR, CNI_BIN_DIR, CNI_BRIDGE, CNI_NETWORK, KubeletNodeConfig, POD_CIDR};
use crate::ControlPlane;
use crate::control_plane::{Identity, issue, write_file};

/// Ports the node's processes listen on (picked with [`crate::ports::free_port`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct NodePorts {
    /// kubelet's HTTPS API on the node IP (logs, exec).
    pub(super) kubelet: u16,
    /// kubelet's `/healthz` on 127.0.0.1.
    pub(super) kubelet_healthz: u16,
    /// kube-proxy's `/healthz` on 127.0.0.1.
    pub(super) proxy_healthz: u16,
    /// kube-proxy's `/metrics` on 127.0.0.1.
    pub(super) proxy_metrics: u16,
}

impl NodePorts {
    pub(super) fn pick() -> anyhow::Result<Self> {
        Ok(Self {
            kubelet: crate::ports::free_port()?,
            kubelet_healthz: crate::ports::free_port()?,
            proxy_healthz: crate::ports::free_port()?,
            proxy_metrics: crate::ports::free_port()?,
        })
    }
}

/// Paths of the written files.
#[derive(Debug, Clone)]
pub(super) struct NodeFiles {
    pub(super) containerd_config: PathBuf,
    pub(super) kubelet_config: PathBuf,
    pub(super) kubelet_kubeconfig: PathBuf,
    pub(super) proxy_config: PathBuf,
    pub(super) kubelet_root: PathBuf,
    pub(super) kubelet_cert_dir: PathBuf,
}

/// The directory of shim sockets: `<run>/s` when a socket path in it fits the 107-byte
/// limit of `sun_path` (sha256-hex names), else `/run/verge-kubelet-node-s`.
pub(super) fn shim_socket_dir(run_dir: &Path) -> PathBuf {
    let dir = run_dir.join("s");
    if dir.as_os_str().len() + 1 + 64 <= 107 {
        dir
    } else {
        PathBuf::from("/run/verge-kubelet-node-s")
    }
}

/// Writes every file of a fresh node into `config.run_dir` (which is empty but for the lock).
pub(super) fn write_all(
    config: &KubeletNodeConfig,
    cp: &ControlPlane,
    node_ip: Ipv4Addr,
    ports: NodePorts,
) -> anyhow::Result<NodeFiles> {
    let run = &config.run_dir;
    for sub in [
        "logs",
        "pids",
        "pki",
        "cni/net.d",
        "cni/ipam",
        "containerd",
        "kubelet",
        "pod-logs",
        "volume-plugins",
    ] {
        let dir = run.join(sub);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let pki = run.join("pki");
    let ca = pki.join("ca.crt");
    std::fs::copy(cp.ca_cert_path(), &ca)
        .with_context(|| format!("copying {}", cp.ca_cert_path().display()))?;
    let sign = |identity: &Identity, name: &str| -> anyhow::Result<(PathBuf, PathBuf)> {
        let (cert, key) = (
            pki.join(format!("{name}.crt")),
            pki.join(format!("{name}.key")),
        );
        issue(&cp.ca_cert_path(), &cp.ca_key_path(), identity)?.write(&cert, &key)?;
        Ok((cert, key))
    };
    let node_user = format!("system:node:{}", config.name);
    let kubelet_client = sign(
        &Identity::client(&node_user, Some("system:nodes")),
        "kubelet-client",
    )?;
    let kubelet_server = sign(
        &Identity::server(&config.name, &[config.name.clone(), node_ip.to_string()]),
        "kubelet-server",
    )?;
    let proxy_client = sign(&Identity::client("system:kube-proxy", None), "kube-proxy")?;

    let files = NodeFiles {
        containerd_config: run.join("containerd.toml"),
        kubelet_config: run.join("kubelet.json"),
        kubelet_kubeconfig: run.join("kubelet.kubeconfig"),
        proxy_config: run.join("kube-proxy.json"),
        kubelet_root: run.join("kubelet"),
        kubelet_cert_dir: pki.join("kubelet-certs"),
    };
    let proxy_kubeconfig = run.join("kube-proxy.kubeconfig");
    write_kubeconfig(
        &files.kubelet_kubeconfig,
        cp.server_url(),
        &ca,
        &node_user,
        &kubelet_client,
    )?;
    write_kubeconfig(
        &proxy_kubeconfig,
        cp.server_url(),
        &ca,
        "system:kube-proxy",
        &proxy_client,
    )?;

    write_file(&files.containerd_config, &containerd_toml(config)?, false)?;
    let kubelet = kubelet_config(config, node_ip, ports, &ca, &kubelet_server);
    write_file(
        &files.kubelet_config,
        &serde_json::to_string_pretty(&kubelet)?,
        false,
    )?;
    let proxy = proxy_config(config, node_ip, ports, &proxy_kubeconfig);
    write_file(
        &files.proxy_config,
        &serde_json::to_string_pretty(&proxy)?,
        false,
    )?;
    let cni = cni_conflist(&run.join("cni/ipam"));
    write_file(
        &run.join("cni/net.d/10-verge.conflist"),
        &serde_json::to_string_pretty(&cni)?,
        false,
    )?;
    Ok(files)
}

/// A kubeconfig (JSON) with client-certificate credentials.
fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    user: &str,
    (cert, key): &(PathBuf, PathBuf),
) -> anyhow::Result<()> {
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "verge", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": user, "user": {"client-certificate": cert, "client-key": key}}],
        "contexts": [{"name": "verge", "context": {"cluster": "verge", "user": user}}],
        "current-context": "verge",
    });
    write_file(path, &serde_json::to_string_pretty(&kubeconfig)?, true)
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
/// from Debian with cgroupfs, the CNI network of the run directory, NRI off. OOM score
/// adjustments are clamped to containerd's own (`restrict_oom_score_adj`): a host whose
/// capability bounding set lacks `CAP_SYS_RESOURCE` (this VM's) cannot lower them, and
/// runc fails to create the pod sandbox (kubelet asks for -998) otherwise.
fn containerd_toml(config: &KubeletNodeConfig) -> anyhow::Result<String> {
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
         \x20     conf_dir = {cni}\n",
        root = toml_path(&run.join("containerd/root"))?,
        state = toml_path(&run.join("containerd/state"))?,
        sock = toml_path(&sock)?,
        ttrpc = toml_path(Path::new(&ttrpc))?,
        opt = toml_path(&run.join("containerd/opt"))?,
        shims = toml_path(&shim_socket_dir(run))?,
        pause = super::PAUSE_IMAGE,
        cni = toml_path(&run.join("cni/net.d"))?,
        runc_root = toml_path(&run.join("runc"))?,
    ))
}

/// The KubeletConfiguration (JSON is YAML): cgroup v1 with cgroupfs, serving on the node
/// IP with the control plane's CA for clients and webhook authorization, relaxed eviction
/// and image GC, pod logs and plugins under the run directory.
fn kubelet_config(
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
fn proxy_config(
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

/// The CNI network: a bridge with host-local IPAM in [`POD_CIDR`] (allocations in
/// `ipam_dir`), hairpin on (a pod reaching itself through a Service), no masquerading, and
/// portmap for `hostPort`s. containerd adds the loopback interface itself.
fn cni_conflist(ipam_dir: &Path) -> serde_json::Value {
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
                    "ranges": [[{"subnet": POD_CIDR}]],
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
    use super::*;

    #[test]
    fn shim_sockets_fit_sun_path() {
        let short = shim_socket_dir(Path::new("/root/.cache/verge/run/kubelet-node"));
        assert_eq!(short, Path::new("/root/.cache/verge/run/kubelet-node/s"));
        let long = shim_socket_dir(Path::new(
            "/home/a-rather-long-user-name/.cache/verge/run/kubelet-node",
        ));
        assert_eq!(long, Path::new("/run/verge-kubelet-node-s"));
    }

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
        assert!(!toml.contains("/run/containerd"));
    }
}
