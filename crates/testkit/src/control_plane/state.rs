//! The state directory of a control plane: `state.json`, kubeconfig, env file.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::{ControlPlane, certs};
pub(super) use crate::run_state::Component;

/// The version of the components' command lines and PKI layout. A control plane whose
/// `state.json` records another one (an older kit's) is restarted by
/// [`super::ControlPlaneConfig::up`]. Bump it whenever a flag or a certificate changes.
///
/// 4: kube-controller-manager allocates node pod CIDRs (`--allocate-node-cidrs`). 2:
/// kube-apiserver binds `0.0.0.0`, advertises `10.199.0.1`, has a kubelet client
/// certificate and prefers InternalIP (the kubelet node). 1 (absent): the first layout.
pub(super) const LAYOUT: u32 = 4;

/// `<state>/state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct State {
    pub(super) version: String,
    pub(super) server: String,
    pub(super) admin_token: String,
    pub(super) bin_dir: PathBuf,
    pub(super) ports: Ports,
    pub(super) components: Vec<Component>,
    /// kube-apiserver `--advertise-address`; `None` in the state of an older kit, whose
    /// apiserver bound and advertised `127.0.0.1` (pods cannot reach it).
    #[serde(default)]
    pub(super) advertise_address: Option<Ipv4Addr>,
    /// [`LAYOUT`] when started; 0 in the state of a kit older than the field.
    #[serde(default)]
    pub(super) layout: u32,
}

impl State {
    /// Reads `<dir>/state.json`; `None` when missing or unparsable.
    pub(super) fn load(dir: &Path) -> Option<Self> {
        crate::run_state::load(dir)
    }

    /// Writes `<dir>/state.json` (mode 0600: holds the admin token).
    pub(super) fn save(&self, dir: &Path) -> anyhow::Result<()> {
        crate::run_state::save(dir, self, true)
    }
}

/// Writes the admin kubeconfig (cluster/user/context `verge`).
pub(super) fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_cert: &Path,
    token: &str,
) -> anyhow::Result<()> {
    let ca = std::fs::read(ca_cert).with_context(|| format!("reading {}", ca_cert.display()))?;
    let yaml = format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: verge\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n\
         - name: admin\n  user:\n    token: {token}\n\
         contexts:\n\
         - name: verge\n  context:\n    cluster: verge\n    user: admin\n    namespace: default\n\
         current-context: verge\n",
        ca = certs::base64(&ca),
    );
    certs::write_file(path, &yaml, true)
}

/// Writes `<state>/env` from [`ControlPlane::env_lines`].
pub(super) fn write_env_file(path: &Path, cp: &ControlPlane) -> anyhow::Result<()> {
    let mut text = cp.env_lines().join("\n");
    text.push('\n');
    certs::write_file(path, &text, true)
}

/// Removes every entry of `dir` except the `lock` file.
pub(super) fn wipe_except_lock(dir: &Path) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_name() == "lock" {
            continue;
        }
        let path = entry.path();
        let result = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        result.with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

/// Loopback ports of the components.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Ports {
    pub(super) etcd: u16,
    pub(super) etcd_peer: u16,
    pub(super) apiserver: u16,
    pub(super) controller_manager: u16,
    pub(super) scheduler: u16,
    /// The streams front's CONNECT listener (kube-apiserver's egress proxy).
    #[serde(default)]
    pub(super) streams_front: u16,
}

impl Ports {
    /// Six distinct free ports ([`crate::ports::free_port`]).
    pub(super) fn pick() -> anyhow::Result<Self> {
        let ports = (0..6)
            .map(|_| crate::ports::free_port())
            .collect::<anyhow::Result<Vec<_>>>()
            .context("picking free loopback ports")?;
        Ok(Self {
            etcd: ports[0],
            etcd_peer: ports[1],
            apiserver: ports[2],
            controller_manager: ports[3],
            scheduler: ports[4],
            streams_front: ports[5],
        })
    }
}
