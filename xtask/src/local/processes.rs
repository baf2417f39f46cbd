//! The processes and containers of a local deployment: the virtual mapper, memory samples,
//! and stopping and removing what a run started.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use verge_testkit::daemon;

/// The DMI socket of the local edge node: in the run directory rather than KubeEdge's
/// `/etc/kubeedge/dmi.sock`, so a local run never takes over a real installation's socket.
pub fn dmi_socket(dir: &Path) -> PathBuf {
    dir.join("dmi.sock")
}

/// Starts Verge's Rust virtual mapper for `protocol` on the local edge node's DMI socket
/// (detached, logging to `logs/virtual-mapper.log`, its pid added to the pids file so
/// [`stop_processes`] stops it). Returns its pid.
///
/// # Errors
/// The binary cannot be started or the pids file written.
pub fn start_mapper(dir: &Path, bin_dir: &Path, protocol: &str) -> anyhow::Result<u32> {
    let log = dir.join("logs").join("virtual-mapper.log");
    let argv = [
        "--protocol".to_owned(),
        protocol.to_owned(),
        "--name".to_owned(),
        format!("{protocol}-mapper"),
        "--socket".to_owned(),
        dir.join(format!("{protocol}.sock")).display().to_string(),
        "--dmi-socket".to_owned(),
        dmi_socket(dir).display().to_string(),
    ];
    let pid = daemon::spawn_detached(&bin_dir.join("virtual-mapper"), &argv, &[], &log)?;
    eprintln!("  virtual-mapper pid {pid}, log {}", log.display());
    let pids = dir.join("pids");
    let mut text = std::fs::read_to_string(&pids).unwrap_or_default();
    text.push_str(&format!("virtual-mapper {pid}\n"));
    std::fs::write(&pids, text)?;
    Ok(pid)
}

pub use verge_testkit::ports::free_port;
pub use verge_testkit::wait::{create_namespace, wait_for_port};

pub use verge_testkit::process::status_kib;

/// The resident memory (KiB) of process `pid` (an edgecore) once two samples 3 s apart agree
/// within 1 % (at most a minute of sampling; the last sample then).
///
/// # Errors
/// `/proc/<pid>/status` cannot be read (the process is gone).
pub async fn settled_rss(pid: u32) -> anyhow::Result<u64> {
    let mut last = status_kib(pid, "VmRSS").context("edgecore RSS")?;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = status_kib(pid, "VmRSS").context("edgecore RSS")?;
        if now.abs_diff(last) * 100 <= last {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// Stops the processes listed in `<dir>/pids` (reverse start order; SIGTERM, then
/// SIGKILL after 10 s). Returns how many were listed.
pub fn stop_processes(dir: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(dir.join("pids")) else {
        return 0;
    };
    let mut pids: Vec<u32> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    pids.reverse();
    daemon::stop_all(&pids, Duration::from_secs(10));
    let _ = std::fs::remove_file(dir.join("pids"));
    pids.len()
}

/// Removes the containers of the edge node that [`super::start`] ran in `dir` (file `node`), after
/// [`stop_processes`]: a stopped edgecore leaves its pods running by design; then the node's
/// pod network. Returns how many containers were removed.
pub fn remove_containers(dir: &Path) -> usize {
    let Ok(node) = std::fs::read_to_string(dir.join("node")) else {
        return 0;
    };
    let removed = match verge_testkit::docker::remove_managed_containers(|n| n == node.trim()) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("warning: removing the containers of node {node}: {e:#}");
            0
        }
    };
    // The node's pod network (edged's Docker network on the node's pod CIDR): left behind,
    // its subnet would overlap the next node given the same CIDR by a new control plane.
    let network = verge_edge_net::podnet::network_name(node.trim());
    if verge_testkit::docker::docker(&["network", "inspect", &network]).is_ok()
        && let Err(e) = verge_testkit::docker::docker(&["network", "rm", &network])
    {
        eprintln!("warning: removing the pod network {network}: {e:#}");
    }
    removed
}
