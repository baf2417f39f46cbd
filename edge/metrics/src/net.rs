//! Network interface counters from `/proc/<pid>/net/dev`, which shows the network namespace
//! of that process: a pod sandbox's pid gives the pod's interfaces without entering it.

use std::path::Path;

use crate::cgroup::CgroupFs;
use crate::error::Result;
use crate::read::{malformed, number, read};

/// Interfaces cAdvisor leaves out (name prefixes, case-insensitive): loopback, the host ends
/// of pods' veth pairs and the engines' bridges.
const IGNORED_PREFIXES: [&str; 4] = ["lo", "veth", "docker", "nerdctl"];

/// One interface's cumulative counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceStats {
    /// The interface's name, e.g. `eth0`.
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Transmit errors.
    pub tx_errors: u64,
}

impl CgroupFs {
    /// The interfaces of process `pid`'s network namespace (`<proc>/<pid>/net/dev`), in the
    /// file's order, without the ones cAdvisor ignores (`lo*`, `veth*`, `docker*`,
    /// `nerdctl*`). [`crate::Error::Missing`] when the process is gone,
    /// [`crate::Error::Malformed`] for a line without a name and 16 counters.
    pub fn network(&self, pid: u32) -> Result<Vec<InterfaceStats>> {
        read_net_dev(&self.proc.join(pid.to_string()).join("net").join("dev"))
    }

    /// The interfaces of this process's own network namespace (`<proc>/net/dev`): the
    /// node's, when edgecore runs in the host's network namespace.
    pub fn host_network(&self) -> Result<Vec<InterfaceStats>> {
        read_net_dev(&self.proc.join("net").join("dev"))
    }
}

fn read_net_dev(path: &Path) -> Result<Vec<InterfaceStats>> {
    parse_net_dev(path, &read(path)?)
}

/// Parses `net/dev`: two header lines, then `name: rx(bytes packets errs drop fifo frame
/// compressed multicast) tx(bytes packets errs drop fifo colls carrier compressed)`.
fn parse_net_dev(path: &Path, text: &str) -> Result<Vec<InterfaceStats>> {
    let mut interfaces = Vec::new();
    for line in text.lines().skip(2).filter(|l| !l.trim().is_empty()) {
        let Some((name, counters)) = line.split_once(':') else {
            return Err(malformed(path, line, "expected `name: counters`"));
        };
        let name = name.trim();
        let counters = counters.split_whitespace().collect::<Vec<_>>();
        if name.is_empty() || counters.len() != 16 {
            return Err(malformed(
                path,
                line,
                "expected an interface name and 16 counters",
            ));
        }
        let values = counters
            .iter()
            .map(|field| number(path, line, field))
            .collect::<Result<Vec<u64>>>()?;
        let lower = name.to_lowercase();
        if IGNORED_PREFIXES
            .iter()
            .any(|prefix| lower.starts_with(prefix))
        {
            continue;
        }
        interfaces.push(InterfaceStats {
            name: name.to_owned(),
            rx_bytes: values[0],
            rx_errors: values[2],
            tx_bytes: values[8],
            tx_errors: values[10],
        });
    }
    Ok(interfaces)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Error;

    const NET_DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 6196 85 0 0 0 0 0 0 6196 85 0 0 0 0 0 0
  eth0:1228247715 73702 3 0 0 0 0 0 6519576 67846 4 0 0 0 0 0
docker0: 15561 181 0 0 0 0 0 0 38017 386 0 9 0 0 0 0
 vethab12: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0
  wlan0: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0
";

    #[test]
    fn pid_net_dev_skips_ignored_interfaces() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("42/net")).unwrap();
        std::fs::write(dir.path().join("42/net/dev"), NET_DEV).unwrap();
        let fs = CgroupFs::at(dir.path().join("cgroup"), dir.path());
        let interfaces = fs.network(42).unwrap();
        assert_eq!(
            interfaces,
            [
                InterfaceStats {
                    name: "eth0".into(),
                    rx_bytes: 1_228_247_715,
                    rx_errors: 3,
                    tx_bytes: 6_519_576,
                    tx_errors: 4,
                },
                InterfaceStats {
                    name: "wlan0".into(),
                    rx_bytes: 10,
                    rx_errors: 0,
                    tx_bytes: 20,
                    tx_errors: 0,
                },
            ]
        );
        assert!(matches!(fs.network(43), Err(Error::Missing { .. })));
    }

    #[test]
    fn host_net_dev_and_a_truncated_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("net")).unwrap();
        let truncated = format!("{NET_DEV}  eth1: 1 2 3\n");
        std::fs::write(dir.path().join("net/dev"), truncated).unwrap();
        let fs = CgroupFs::at(dir.path().join("cgroup"), dir.path());
        let err = fs.host_network().unwrap_err();
        assert!(err.to_string().contains("eth1: 1 2 3"), "{err}");
    }
}
