//! `<run>/state.json`: what a running node is made of, for stopping it without a handle.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One started process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Component {
    /// `containerd`, `kubelet` or `kube-proxy` (also the log and pid file name).
    pub(super) name: String,
    pub(super) pid: u32,
}

/// `<run>/state.json`, written once the processes are started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct State {
    /// Node name.
    pub(super) name: String,
    /// Node InternalIP (the control plane's advertise address).
    pub(super) node_ip: Ipv4Addr,
    /// Admin kubeconfig of the control plane the node is attached to.
    pub(super) admin_kubeconfig: PathBuf,
    /// Directory of kubelet, kube-proxy and kubectl.
    pub(super) kube_bin_dir: PathBuf,
    /// kubelet's serving port on `node_ip`.
    pub(super) kubelet_port: u16,
    /// Started processes, in start order.
    pub(super) components: Vec<Component>,
}

impl State {
    /// Reads `<dir>/state.json`; `None` when missing or unparsable.
    pub(super) fn load(dir: &Path) -> Option<Self> {
        let bytes = std::fs::read(dir.join("state.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes `<dir>/state.json`.
    pub(super) fn save(&self, dir: &Path) -> anyhow::Result<()> {
        crate::control_plane::write_file(
            &dir.join("state.json"),
            &serde_json::to_string_pretty(self)?,
            false,
        )
    }
}
