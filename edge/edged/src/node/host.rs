//! Facts about the host, collected once per start (cheap: a few small file reads and one
//! sysinfo refresh of memory, CPU list, disks and interfaces). Blocking: call from
//! `spawn_blocking`.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use sysinfo::{CpuRefreshKind, Disks, Networks, System};

/// What the node status reports about the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The host name (lower-case).
    pub hostname: String,
    /// The first usable non-loopback IPv4 address, if any.
    pub ipv4: Option<Ipv4Addr>,
    /// Logical CPUs, in millicores.
    pub cpu_millis: u64,
    /// Physical memory, bytes.
    pub memory_bytes: u64,
    /// Size of the filesystem holding the data directory, bytes (if found).
    pub ephemeral_storage_bytes: Option<u64>,
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// `/sys/class/dmi/id/product_uuid`, else the machine id.
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_version: String,
    /// `PRETTY_NAME` of `/etc/os-release`.
    pub os_image: String,
    /// GOARCH-style architecture: `amd64`, `arm64`, ...
    pub architecture: String,
}

impl HostFacts {
    /// Collects the facts; `data_dir` selects the filesystem reported as ephemeral storage.
    /// Missing sources give empty strings / `None`, never an error.
    pub fn collect(data_dir: &Path) -> Self {
        let (cpu_millis, memory_bytes) = match System::new() {
            Ok(mut sys) => {
                sys.refresh_memory();
                sys.refresh_cpu_list(CpuRefreshKind::nothing());
                (sys.cpus().len() as u64 * 1000, sys.total_memory())
            }
            Err(_) => (0, 0),
        };
        let cpu_millis = if cpu_millis == 0 {
            std::thread::available_parallelism().map_or(1000, |n| n.get() as u64 * 1000)
        } else {
            cpu_millis
        };
        let machine_id = read_trimmed("/etc/machine-id");
        let system_uuid = Some(read_trimmed("/sys/class/dmi/id/product_uuid"))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| machine_id.clone());
        Self {
            hostname: hostname::get()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_default()
                .to_lowercase(),
            ipv4: first_ipv4(),
            cpu_millis,
            memory_bytes,
            ephemeral_storage_bytes: filesystem_size(data_dir),
            system_uuid,
            machine_id,
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            kernel_version: System::kernel_version().unwrap_or_default(),
            os_image: os_image(),
            architecture: go_arch(std::env::consts::ARCH).to_owned(),
        }
    }
}

/// Maps Rust's `std::env::consts::ARCH` to Kubernetes' (Go's) names.
pub fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// `PRETTY_NAME` from `/etc/os-release`, else sysinfo's long OS version.
fn os_image() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .or_else(|| System::long_os_version().ok())
        .unwrap_or_default()
}

/// The first non-loopback, non-link-local IPv4 address, preferring interfaces that are not
/// container bridges (Docker's, CNI's, Verge's pod networks `vg…`); interfaces are taken in
/// name order so the choice is stable. The node's address unless `edged.nodeIP` says.
pub fn first_ipv4() -> Option<Ipv4Addr> {
    let networks = Networks::new_with_refreshed_list().ok()?;
    let mut candidates: Vec<(bool, String, Ipv4Addr)> = networks
        .iter()
        .flat_map(|(name, data)| {
            let name = name.to_string_lossy().into_owned();
            let virtual_if = [
                "docker", "veth", "br-", "cni", "flannel", "virbr", "vg", "verge-",
            ]
            .iter()
            .any(|p| name.starts_with(p));
            data.ip_networks()
                .iter()
                .filter_map(move |net| match net.addr {
                    IpAddr::V4(ip)
                        if !ip.is_loopback() && !ip.is_link_local() && !ip.is_unspecified() =>
                    {
                        Some((virtual_if, name.clone(), ip))
                    }
                    _ => None,
                })
        })
        .collect();
    candidates.sort();
    candidates.first().map(|(_, _, ip)| *ip)
}

/// Total size of the filesystem whose mount point is the longest prefix of `dir`.
fn filesystem_size(dir: &Path) -> Option<u64> {
    let dir = dir.canonicalize().ok()?;
    let disks = Disks::new_with_refreshed_list().ok()?;
    disks
        .iter()
        .filter(|d| dir.starts_with(d.mount_point()))
        .max_by_key(|d| d.mount_point().as_os_str().len())
        .map(sysinfo::Disk::total_space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names_follow_go() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }

    #[test]
    fn collects_something() {
        let dir = tempfile::tempdir().expect("tempdir");
        let facts = HostFacts::collect(dir.path());
        assert!(facts.cpu_millis >= 1000);
        assert!(facts.memory_bytes > 0);
        assert!(!facts.architecture.is_empty());
    }
}
