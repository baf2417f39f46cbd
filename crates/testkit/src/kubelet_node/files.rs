//! The node's files: certificates signed by the control plane's CA, kubeconfigs, and the
//! configurations of `configs`, written into the run directory.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::json;

use super::KubeletNodeConfig;
use super::configs::{
    cni_conf_template, cni_conf_template_path, containerd_toml, kubelet_config, proxy_config,
};
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
    // containerd renders it into cni/net.d once kubelet passes the Node's podCIDR on.
    let cni = cni_conf_template(&run.join("cni/ipam"));
    write_file(
        &cni_conf_template_path(run),
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
}
