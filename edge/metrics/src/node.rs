//! The node's own figures (the kubelet's Summary `node`): CPU from the root cgroup or
//! `/proc/stat`, memory from the root cgroup (v1) or `/proc/meminfo` (v2, whose root cgroup
//! has no `memory.current`), page faults from `/proc/vmstat`.

use std::path::Path;

use crate::cgroup::{CgroupFs, Layout, MemoryStats, usage_usec};
use crate::error::{Error, Result};
use crate::read::{Table, malformed, number, read, read_u64};

/// Nanoseconds per `USER_HZ` tick of `/proc/stat` (`USER_HZ` is 100 on every Linux ABI).
const NANOS_PER_TICK: u64 = 1_000_000_000 / 100;

/// The node's figures at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Cumulative CPU time of the whole node in nanoseconds (all cores): v1 the root
    /// `cpuacct.usage`; v2 the root `cpu.stat` `usage_usec` × 1000, or where the kernel has
    /// no root `cpu.stat`, the busy ticks of `/proc/stat`'s `cpu` line (user, nice, system,
    /// irq, softirq, steal) × 10 ms.
    pub cpu_usage_nanos: u64,
    /// Memory as cAdvisor reads the root cgroup. v1: the root's `memory.usage_in_bytes`,
    /// working set that less `total_inactive_file`, rss `total_rss`. v2 (no root
    /// `memory.current`): `/proc/meminfo`'s `MemTotal − MemFree`, working set that less
    /// `Inactive(file)`, rss `AnonPages`. Faults from `/proc/vmstat` (`pgfault`,
    /// `pgmajfault`).
    pub memory: MemoryStats,
    /// `MemAvailable`: the kernel's estimate of memory available to new work, in bytes.
    pub memory_available_bytes: u64,
    /// `MemTotal`: the node's memory capacity in bytes.
    pub memory_capacity_bytes: u64,
}

impl NodeStats {
    /// Capacity less working set (saturating): the node `memory.availableBytes` the kubelet
    /// reports (cAdvisor's machine limit − working set), also its eviction manager's
    /// `memory.available` signal. It differs from the kernel's `MemAvailable`
    /// ([`NodeStats::memory_available_bytes`]), which counts reclaimable caches as available.
    pub fn kubelet_available_bytes(&self) -> u64 {
        self.memory_capacity_bytes
            .saturating_sub(self.memory.working_set_bytes)
    }
}

impl CgroupFs {
    /// Reads the node's figures (see [`NodeStats`] for the sources). Errors name the file:
    /// [`Error::Missing`], [`Error::Malformed`], or [`Error::MissingKey`] for an absent
    /// `MemTotal`, `MemFree`, `MemAvailable`, `Inactive(file)`, `AnonPages`, `pgfault` or
    /// `pgmajfault`.
    pub fn node_stats(&self) -> Result<NodeStats> {
        let meminfo_path = self.proc.join("meminfo");
        let meminfo = Table::parse_meminfo(&meminfo_path, &read(&meminfo_path)?)?;
        let vmstat = Table::read(&self.proc.join("vmstat"))?;
        let capacity = meminfo.require("MemTotal")?;
        let usage = capacity.saturating_sub(meminfo.require("MemFree")?);
        let mut memory = MemoryStats {
            usage_bytes: usage,
            working_set_bytes: usage.saturating_sub(meminfo.require("Inactive(file)")?),
            rss_bytes: meminfo.require("AnonPages")?,
            page_faults: vmstat.require("pgfault")?,
            major_page_faults: vmstat.require("pgmajfault")?,
        };
        if let Ok(Layout::V1 { memory: root, .. }) = self.layout() {
            let usage = read_u64(&root.join("memory.usage_in_bytes"))?;
            let stat = Table::read(&root.join("memory.stat"))?;
            memory.usage_bytes = usage;
            memory.working_set_bytes = usage.saturating_sub(stat.or_zero("total_inactive_file"));
            memory.rss_bytes = stat.or_zero("total_rss");
        }
        Ok(NodeStats {
            cpu_usage_nanos: self.node_cpu()?,
            memory,
            memory_available_bytes: meminfo.require("MemAvailable")?,
            memory_capacity_bytes: capacity,
        })
    }

    /// When the node booted: `btime` (Unix seconds) of `<proc>/stat`, the kubelet's node
    /// `startTime` (its root container's creation).
    ///
    /// # Errors
    /// [`Error::Missing`], [`Error::MissingKey`] without `btime`, [`Error::Malformed`].
    pub fn boot_time(&self) -> Result<chrono::DateTime<chrono::Utc>> {
        let path = self.proc.join("stat");
        let text = read(&path)?;
        let line = text
            .lines()
            .find(|l| l.starts_with("btime "))
            .ok_or(Error::MissingKey {
                path: path.clone(),
                key: "btime",
            })?;
        let seconds = number(&path, line, line.trim_start_matches("btime ").trim())?;
        i64::try_from(seconds)
            .ok()
            .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
            .ok_or_else(|| malformed(&path, line, "btime out of range"))
    }

    /// The node's cumulative CPU nanoseconds; `/proc/stat` when the root cgroup has no
    /// figure (v2 without a root `cpu.stat`, or no cgroup mount at all).
    fn node_cpu(&self) -> Result<u64> {
        match self.layout() {
            Ok(Layout::V1 { cpuacct, .. }) => return read_u64(&cpuacct.join("cpuacct.usage")),
            Ok(Layout::V2) => match Table::read(&self.root.join("cpu.stat")) {
                Ok(stat) => match usage_usec(&stat) {
                    Ok(nanos) => return Ok(nanos),
                    Err(Error::MissingKey { .. }) => {}
                    Err(e) => return Err(e),
                },
                Err(Error::Missing { .. }) => {}
                Err(e) => return Err(e),
            },
            Err(_) => {}
        }
        let path = self.proc.join("stat");
        proc_stat_cpu(&path, &read(&path)?)
    }
}

/// The busy time of `/proc/stat`'s aggregate `cpu` line, in nanoseconds: user + nice +
/// system + irq + softirq + steal ticks (idle and iowait excluded; guest time is already in
/// user). `steal` is absent on kernels before 2.6.11 and counts as 0.
fn proc_stat_cpu(path: &Path, text: &str) -> Result<u64> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))
        .ok_or(Error::MissingKey {
            path: path.to_owned(),
            key: "cpu",
        })?;
    let ticks = line
        .split_whitespace()
        .skip(1)
        .map(|field| number(path, line, field))
        .collect::<Result<Vec<u64>>>()?;
    if ticks.len() < 7 {
        return Err(malformed(path, line, "expected at least 7 tick counts"));
    }
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum::<u64>();
    Ok(busy.saturating_mul(NANOS_PER_TICK))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
