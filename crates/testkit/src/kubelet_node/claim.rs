//! One kubelet node per host (kube-proxy's iptables chains, the CNI bridge and the
//! `kubepods` cgroups are host-wide): every start and stop holds the host lock
//! `~/.cache/verge/run/kubelet-node.lock`, and `~/.cache/verge/run/kubelet-node.owner`
//! names the run directory of the node that holds the host.

use std::path::{Path, PathBuf};

use crate::lock::FileLock;
use crate::paths;

/// Takes the host lock (blocking on a thread, for async callers).
pub(super) async fn lock_host() -> anyhow::Result<FileLock> {
    FileLock::acquire_async(&paths::run_dir().join("kubelet-node.lock")).await
}

fn owner_path() -> PathBuf {
    paths::run_dir().join("kubelet-node.owner")
}

/// The run directory of the node that holds the host, if any (host lock held).
pub(super) fn owner() -> Option<PathBuf> {
    let text = std::fs::read_to_string(owner_path()).ok()?;
    let dir = text.trim();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// Records `run_dir` as the host's node (host lock held).
pub(super) fn claim(run_dir: &Path) -> anyhow::Result<()> {
    crate::control_plane::write_file(&owner_path(), &format!("{}\n", run_dir.display()), false)
}

/// Forgets the owner if it is `run_dir` (host lock held).
pub(super) fn release(run_dir: &Path) {
    if owner().as_deref() == Some(run_dir) {
        let _ = std::fs::remove_file(owner_path());
    }
}
