//! `<run>/state.json`: what a running node is made of, for stopping it without a handle.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(super) use crate::run_state::Component;

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
    /// The Node's `spec.podCIDR` once it is `Ready` (empty before, and in the state of an
    /// older kit).
    #[serde(default)]
    pub(super) pod_cidr: String,
}

impl State {
    /// Reads `<dir>/state.json`; `None` when missing or unparsable.
    pub(super) fn load(dir: &Path) -> Option<Self> {
        crate::run_state::load(dir)
    }

    /// Writes `<dir>/state.json`.
    pub(super) fn save(&self, dir: &Path) -> anyhow::Result<()> {
        crate::run_state::save(dir, self, false)
    }
}
