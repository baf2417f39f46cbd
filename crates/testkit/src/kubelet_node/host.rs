//! Host state a node leaves, found and removed without the node's help: pod processes in
//! `kubepods` cgroups, runc shims, mounts under the run directory, libcni's result cache,
//! the kubelet's container log symlinks; and [`KubeletNodeConfig::leftovers`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::{CNI_BRIDGE, CNI_NETWORK, COMPONENTS, KubeletNodeConfig, files, iptables};

/// The kubelet's fixed directory of container log symlinks.
const CONTAINER_LOGS_DIR: &str = "/var/log/containers";

/// The CNI result cache of libcni (fixed in containerd).
const CNI_RESULTS_DIR: &str = "/var/lib/cni/results";

/// `kill -s KILL <pids>` (the shell builtin; no procps needed).
fn kill9(pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -s KILL {} 2>/dev/null", list.join(" ")))
        .status();
}

/// The `kubepods` cgroup trees of every mounted hierarchy (v1 controllers, the named
/// `systemd` one, the unified one) and of a pure v2 mount.
fn kubepods_cgroups() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path().join("kubepods"))
                .collect()
        })
        .unwrap_or_default();
    dirs.push(root.join("kubepods"));
    dirs.retain(|d| d.is_dir());
    dirs
}

/// Every directory of the tree at `dir`, children before parents.
fn tree_post_order(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                tree_post_order(&entry.path(), out);
            }
        }
    }
    out.push(dir.to_owned());
}

/// The pids in the cgroup trees of [`kubepods_cgroups`].
fn pod_pids() -> Vec<u32> {
    let mut dirs = Vec::new();
    for tree in kubepods_cgroups() {
        tree_post_order(&tree, &mut dirs);
    }
    let mut pids: Vec<u32> = dirs
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .flat_map(|s| {
            s.lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// SIGKILLs every process in a `kubepods` cgroup (containers the kubelet did not stop:
/// only this node's kubelet creates `kubepods`) and waits up to 10 s for them to go.
pub(super) fn kill_pod_processes() -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = pod_pids();
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("pod processes survived SIGKILL: {pids:?}");
        }
        kill9(&pids);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Removes the `kubepods` cgroup trees (empty once the pods are gone).
pub(super) fn remove_kubepods_cgroups() {
    for tree in kubepods_cgroups() {
        let mut dirs = Vec::new();
        tree_post_order(&tree, &mut dirs);
        for dir in dirs {
            if let Err(error) = std::fs::remove_dir(&dir) {
                tracing::warn!(%error, dir = %dir.display(), "removing a kubepods cgroup");
            }
        }
    }
}

/// SIGKILLs the runc shims serving `socket`'s containerd (they outlive containerd).
pub(super) fn kill_shims(socket: &Path) {
    let socket = socket.as_os_str().as_encoded_bytes();
    kill9(&processes_matching(|argv| {
        argv[0].ends_with(b"containerd-shim-runc-v2") && argv.iter().any(|a| a == socket)
    }));
}

/// Removes libcni's cached results of [`CNI_NETWORK`] and of containerd's loopback network
/// (left when a sandbox was never torn down; this node is the host's only CRI runtime), and
/// the cache directories when that empties them.
pub(super) fn remove_cni_results() {
    for file in cni_results() {
        let _ = std::fs::remove_file(file);
    }
    // remove_dir fails on a non-empty directory: another CNI user's results stay.
    let _ = std::fs::remove_dir(CNI_RESULTS_DIR);
    let _ = std::fs::remove_dir("/var/lib/cni");
}

/// The files of [`remove_cni_results`].
fn cni_results() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(CNI_RESULTS_DIR) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&format!("{CNI_NETWORK}-")) || name.starts_with("cni-loopback-")
        })
        .map(|e| e.path())
        .collect()
}

/// Removes the kubelet's symlinks in [`CONTAINER_LOGS_DIR`] that point into `run_dir`, and
/// the directory itself when that empties it.
pub(super) fn remove_container_log_links(run_dir: &Path) {
    let dir = Path::new(CONTAINER_LOGS_DIR);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(run_dir)) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

impl KubeletNodeConfig {
    /// What a node of this configuration left on the host, one line each (empty when
    /// nothing): live kubelet, kube-proxy, containerd or shim processes of this run
    /// directory, processes in `kubepods` cgroups, the node's iptables chains, the CNI
    /// bridge, mounts under the run directory, `kubepods` cgroups, libcni results of the
    /// node's networks. For tests checking that
    /// [`super::KubeletNode::stop`] removed everything.
    pub fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        let marker = self.run_dir.as_os_str().as_encoded_bytes();
        let mentions_run_dir = |a: &Vec<u8>| a.windows(marker.len()).any(|w| w == marker);
        for pid in processes_matching(|argv| {
            let exe = &argv[0];
            (COMPONENTS.iter().any(|c| exe.ends_with(c.as_bytes()))
                || exe.ends_with(b"containerd-shim-runc-v2"))
                && argv.iter().any(mentions_run_dir)
        }) {
            out.push(format!("process {pid} of {}", self.run_dir.display()));
        }
        for pid in pod_pids() {
            out.push(format!("pod process {pid}"));
        }
        match iptables::our_chains() {
            Ok(chains) => out.extend(chains.into_iter().map(|c| format!("iptables chain {c}"))),
            Err(e) => out.push(format!("iptables-save failed: {e:#}")),
        }
        if crate::control_plane::ip(&["link", "show", "dev", CNI_BRIDGE]).is_ok() {
            out.push(format!("link {CNI_BRIDGE}"));
        }
        for dir in [self.run_dir.clone(), files::shim_socket_dir(&self.run_dir)] {
            out.extend(
                crate::mounts::mounts_under(&dir)
                    .into_iter()
                    .map(|m| format!("mount {}", m.display())),
            );
        }
        out.extend(
            kubepods_cgroups()
                .into_iter()
                .map(|c| format!("cgroup {}", c.display())),
        );
        out
    }
}

/// Pids of the live processes whose argv (never empty) `matches`.
fn processes_matching(matches: impl Fn(&[Vec<u8>]) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let argv: Vec<Vec<u8>> = c
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect();
                !argv.is_empty() && matches(&argv)
            })
        })
        .filter(|pid| crate::daemon::is_alive(*pid, None))
        .collect()
}
