//! [`KubeletNode`]: the handle of a running node.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

use super::state::State;
use super::{KubeletNodeConfig, images};
use crate::ControlPlane;

/// A running kubelet node (started by [`KubeletNode::start`] or [`KubeletNodeConfig::up`]).
///
/// Its processes are detached: dropping the handle leaves the node running (stop it with
/// [`KubeletNode::stop`] or [`KubeletNodeConfig::down`]; the next start removes it too).
///
/// A start replaces the node of the same run directory, running or not: tests that share
/// a node's run directory must not run concurrently (keep them in one test, or serialize
/// them).
#[derive(Debug, Clone)]
pub struct KubeletNode {
    config: KubeletNodeConfig,
    cp: ControlPlane,
    node_ip: Ipv4Addr,
    kubelet_port: u16,
    pod_cidr: String,
    pids: Vec<(String, u32)>,
}

impl KubeletNode {
    pub(super) fn from_state(config: KubeletNodeConfig, cp: ControlPlane, state: &State) -> Self {
        Self {
            config,
            cp,
            node_ip: state.node_ip,
            kubelet_port: state.kubelet_port,
            pod_cidr: state.pod_cidr.clone(),
            pids: state
                .components
                .iter()
                .map(|c| (c.name.clone(), c.pid))
                .collect(),
        }
    }

    /// Starts a fresh node named [`super::NODE_NAME`] attached to `cp`, with
    /// [`KubeletNodeConfig::from_env`]; see [`KubeletNodeConfig::up`].
    ///
    /// # Errors
    /// As [`KubeletNodeConfig::up`].
    pub async fn start(cp: &ControlPlane) -> anyhow::Result<Self> {
        KubeletNodeConfig::from_env().up(cp).await
    }

    /// The node's name (the Node object's, and the kubelet's hostname override).
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The Node's InternalIP: the control plane's advertise address. kubelet serves on
    /// `<this>:<kubelet_port>`; NodePort Services answer on this address only.
    pub fn node_ip(&self) -> Ipv4Addr {
        self.node_ip
    }

    /// kubelet's HTTPS port on [`KubeletNode::node_ip`].
    pub fn kubelet_port(&self) -> u16 {
        self.kubelet_port
    }

    /// The node's pod CIDR, which its pods get their addresses in: its Node's
    /// `spec.podCIDR`, a `/24` of [`super::CLUSTER_CIDR`] that kube-controller-manager
    /// allocated when the Node registered (read once the Node was `Ready`), e.g.
    /// `10.244.0.0/24`.
    pub fn pod_cidr(&self) -> &str {
        &self.pod_cidr
    }

    /// `(component, pid)` of `containerd`, `kubelet` and `kube-proxy`, in start order
    /// (each leads its own process group).
    pub fn pids(&self) -> Vec<(&str, u32)> {
        self.pids.iter().map(|(n, p)| (n.as_str(), *p)).collect()
    }

    /// The configuration the node was started with.
    pub fn config(&self) -> &KubeletNodeConfig {
        &self.config
    }

    /// The control plane the node is attached to.
    pub fn control_plane(&self) -> &ControlPlane {
        &self.cp
    }

    /// containerd's gRPC socket (for `ctr -a` or a CRI client).
    pub fn containerd_socket(&self) -> PathBuf {
        self.config.containerd_socket()
    }

    /// A `ctr -a <socket> -n k8s.io` command (containerd's CLI on the node's namespace),
    /// e.g. `node.ctr_command().args(["images", "ls"])`.
    pub fn ctr_command(&self) -> Command {
        let mut cmd = Command::new(self.config.containerd_bin_dir().join("ctr"));
        cmd.arg("-a")
            .arg(self.containerd_socket())
            .args(["-n", "k8s.io"]);
        cmd
    }

    /// `<run>/logs/<component>.log` for `containerd`, `kubelet` or `kube-proxy`.
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.config.log_path(component)
    }

    /// Moves image `docker_ref` (e.g. `verge/cloudhub:0.1.0`) from the local Docker engine
    /// into the node's containerd (`docker save`, then `ctr -n k8s.io images import`), where
    /// pods naming `docker_ref` find it with `imagePullPolicy: IfNotPresent` (no registry
    /// is reachable). Replaces an image of the same name. Blocks for a second or a few, and,
    /// for Verge's own images, while `cargo xtask images` builds them
    /// ([`crate::docker::ImagesLock`]).
    ///
    /// # Errors
    /// The image is not in Docker, or the save or import fails.
    pub fn import_image(&self, docker_ref: &str) -> anyhow::Result<()> {
        let _building = docker_ref
            .starts_with(crate::docker::VERGE_IMAGES)
            .then(crate::docker::ImagesLock::acquire)
            .transpose()?;
        images::import(
            &self.config.containerd_bin_dir().join("ctr"),
            &self.containerd_socket(),
            docker_ref,
        )
    }

    /// Stops the node and removes what it put on the host: cordons it and deletes its pods
    /// (1 s grace; the kubelet stops their containers and sandboxes and tears their
    /// networking down; waits at most [`KubeletNodeConfig::drain_timeout`], then forces),
    /// stops kube-proxy and kubelet, kills any pod process left, stops containerd and its
    /// shims, runs `kube-proxy --cleanup` and deletes the node's remaining iptables chains,
    /// unmounts pod volumes and network namespaces, deletes the CNI bridge, the `kubepods`
    /// cgroups and the Node object, and empties the run directory.
    ///
    /// # Errors
    /// A process survives SIGKILL, or host state cannot be removed.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _lock = super::claim::lock_host().await?;
        super::teardown::teardown(&self.config, Some(&self.cp)).await?;
        Ok(())
    }
}
