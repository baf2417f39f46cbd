//! A process's cgroup and a cgroup's CPU and memory figures, from cgroup v1 (one hierarchy
//! per controller) or v2 (the unified hierarchy), as cAdvisor reads them for the kubelet.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::read::{Table, malformed, read, read_u64};

/// Where the cgroup filesystem and procfs are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFs {
    /// The cgroup mount: `/sys/fs/cgroup` on a host.
    pub root: PathBuf,
    /// The procfs mount: `/proc` on a host.
    pub proc: PathBuf,
}

/// Which cgroup hierarchy the mount at [`CgroupFs::root`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// One hierarchy per controller (`<root>/cpuacct`, `<root>/memory`, ...), including the
    /// "hybrid" layout that also mounts `<root>/unified`.
    V1,
    /// The unified hierarchy: `<root>/cgroup.controllers` exists.
    V2,
}

/// A cgroup, as paths relative to the hierarchies' roots (as `/proc/<pid>/cgroup` writes
/// them, e.g. `/docker/<id>` or `/kubepods/pod<uid>/<id>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupPath {
    /// cgroup v1: the path in the `cpuacct` hierarchy and the one in the `memory` hierarchy.
    V1 {
        /// The path in the `cpuacct` (or combined `cpu,cpuacct`) hierarchy.
        cpuacct: String,
        /// The path in the `memory` hierarchy.
        memory: String,
    },
    /// cgroup v2: the path in the unified hierarchy.
    V2 {
        /// The path in the unified hierarchy.
        path: String,
    },
}

/// A cgroup's CPU and memory figures at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// Cumulative CPU time of the cgroup's tasks in nanoseconds (all cores): v1
    /// `cpuacct.usage`, v2 `cpu.stat` `usage_usec` × 1000. cAdvisor's `cpu.usage.total`.
    pub cpu_usage_nanos: u64,
    /// The memory figures.
    pub memory: MemoryStats,
}

/// Memory figures in bytes and page-fault counts, as the kubelet's Summary API reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Memory in use, page cache included: v1 `memory.usage_in_bytes`, v2 `memory.current`,
    /// the node `MemTotal − MemFree`.
    pub usage_bytes: u64,
    /// `usage_bytes` less the inactive file cache (saturating at 0), cAdvisor's working set:
    /// the figure the kubelet's eviction, `kubectl top` and metrics-server use.
    pub working_set_bytes: u64,
    /// Anonymous memory: v1 `total_rss`, v2 `anon`, the node's `AnonPages`.
    pub rss_bytes: u64,
    /// Cumulative page faults (v1 `total_pgfault`, v2 `pgfault`, the node's `pgfault`).
    pub page_faults: u64,
    /// Cumulative major page faults (v1 `total_pgmajfault`, v2 and node `pgmajfault`).
    pub major_page_faults: u64,
}

/// The hierarchies found under the root.
#[derive(Debug)]
pub(crate) enum Layout {
    V1 { cpuacct: PathBuf, memory: PathBuf },
    V2,
}

impl Default for CgroupFs {
    fn default() -> Self {
        Self::host()
    }
}

impl CgroupFs {
    /// The host's mounts: `/sys/fs/cgroup` and `/proc`.
    pub fn host() -> Self {
        Self::at("/sys/fs/cgroup", "/proc")
    }

    /// Mounts at other places: a fixture tree in tests, or a host's mounts seen from a
    /// container (`/host/sys/fs/cgroup`, `/host/proc`).
    pub fn at(root: impl Into<PathBuf>, proc: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            proc: proc.into(),
        }
    }

    /// The hierarchy at the root; [`Error::UnknownLayout`] when it is neither v2 nor a v1
    /// layout with `cpuacct` and `memory` hierarchies.
    pub fn version(&self) -> Result<CgroupVersion> {
        Ok(match self.layout()? {
            Layout::V1 { .. } => CgroupVersion::V1,
            Layout::V2 => CgroupVersion::V2,
        })
    }

    /// Finds the hierarchies: v2 when `<root>/cgroup.controllers` exists; else v1 with
    /// `cpuacct` in `<root>/cpuacct` or a combined `<root>/cpu,cpuacct` (`cpuacct,cpu`).
    pub(crate) fn layout(&self) -> Result<Layout> {
        if self.root.join("cgroup.controllers").is_file() {
            return Ok(Layout::V2);
        }
        let unknown = |reason| Error::UnknownLayout {
            root: self.root.clone(),
            reason,
        };
        let cpuacct = ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"]
            .iter()
            .map(|name| self.root.join(name))
            .find(|dir| dir.is_dir())
            .ok_or_else(|| unknown("no cgroup.controllers (v2) and no cpuacct hierarchy (v1)"))?;
        let memory = self.root.join("memory");
        if !memory.is_dir() {
            return Err(unknown(
                "no cgroup.controllers (v2) and no memory hierarchy (v1)",
            ));
        }
        Ok(Layout::V1 { cpuacct, memory })
    }

    /// The cgroup at the same `path` in every hierarchy the layout uses: a pod's cgroup
    /// parent (e.g. `/kubepods/pod<uid>`), whose figures the kubelet reports as the pod's.
    pub fn path(&self, path: &str) -> Result<CgroupPath> {
        Ok(match self.layout()? {
            Layout::V1 { .. } => CgroupPath::V1 {
                cpuacct: path.to_owned(),
                memory: path.to_owned(),
            },
            Layout::V2 => CgroupPath::V2 {
                path: path.to_owned(),
            },
        })
    }

    /// The cgroup of process `pid`, from `<proc>/<pid>/cgroup` (`hierarchy-id:controllers:path`
    /// lines): on v2 the `0::<path>` line; on v1 the lines whose controllers include `cpuacct`
    /// and `memory`. [`Error::Missing`] when the process is gone, [`Error::MissingKey`] when
    /// a needed line is absent, [`Error::Malformed`] for a line not in that format.
    pub fn process_cgroup(&self, pid: u32) -> Result<CgroupPath> {
        let file = self.proc.join(pid.to_string()).join("cgroup");
        let text = read(&file)?;
        parse_process_cgroup(&file, &text, &self.layout()?)
    }

    /// The CPU and memory figures of the cgroup at `path`.
    ///
    /// v1: `cpuacct.usage`; `memory.usage_in_bytes` and `memory.stat` (`total_inactive_file`,
    /// `total_rss`, `total_pgfault`, `total_pgmajfault`). v2: `cpu.stat` `usage_usec`;
    /// `memory.current` and `memory.stat` (`inactive_file`, `anon`, `pgfault`,
    /// `pgmajfault`). As cAdvisor, a `memory.stat` entry that is absent counts as 0. Errors:
    /// [`Error::Missing`] when the cgroup is gone, [`Error::Malformed`],
    /// [`Error::MissingKey`] (`usage_usec`), [`Error::UnknownLayout`] for a path of the
    /// other version.
    pub fn stats(&self, path: &CgroupPath) -> Result<CgroupStats> {
        match (self.layout()?, path) {
            (
                Layout::V1 {
                    cpuacct,
                    memory: mem_root,
                },
                CgroupPath::V1 {
                    cpuacct: cpu,
                    memory,
                },
            ) => {
                let (cpu_dir, dir) = (join(&cpuacct, cpu)?, join(&mem_root, memory)?);
                let cpu_usage_nanos = read_u64(&cpu_dir.join("cpuacct.usage"))?;
                let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
                let stat = Table::read(&dir.join("memory.stat"))?;
                Ok(CgroupStats {
                    cpu_usage_nanos,
                    memory: memory_stats(usage, &stat, "total_"),
                })
            }
            (Layout::V2, CgroupPath::V2 { path }) => {
                let dir = join(&self.root, path)?;
                let cpu_usage_nanos = usage_usec(&Table::read(&dir.join("cpu.stat"))?)?;
                let usage = read_u64(&dir.join("memory.current"))?;
                let stat = Table::read(&dir.join("memory.stat"))?;
                Ok(CgroupStats {
                    cpu_usage_nanos,
                    memory: memory_stats(usage, &stat, ""),
                })
            }
            _ => Err(Error::UnknownLayout {
                root: self.root.clone(),
                reason: "the cgroup path is of the other cgroup version",
            }),
        }
    }
}

/// `usage_usec` of a v2 `cpu.stat`, in nanoseconds.
pub(crate) fn usage_usec(stat: &Table) -> Result<u64> {
    Ok(stat.require("usage_usec")?.saturating_mul(1000))
}

/// Memory figures from a usage and a `memory.stat` whose keys carry `prefix` (`total_` for
/// v1's hierarchical figures).
fn memory_stats(usage: u64, stat: &Table, prefix: &str) -> MemoryStats {
    let get = |key: &str| stat.or_zero(&format!("{prefix}{key}"));
    MemoryStats {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(get("inactive_file")),
        rss_bytes: get(if prefix.is_empty() { "anon" } else { "rss" }),
        page_faults: get("pgfault"),
        major_page_faults: get("pgmajfault"),
    }
}

/// `base` joined with a cgroup path, which must not leave `base` (`..`).
fn join(base: &Path, cgroup: &str) -> Result<PathBuf> {
    let mut dir = base.to_owned();
    for component in Path::new(cgroup).components() {
        match component {
            Component::Normal(name) => dir.push(name),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(Error::InvalidCgroupPath {
                    path: cgroup.to_owned(),
                });
            }
        }
    }
    Ok(dir)
}

/// Parses `/proc/<pid>/cgroup` for the layout.
fn parse_process_cgroup(file: &Path, text: &str, layout: &Layout) -> Result<CgroupPath> {
    let (mut unified, mut cpuacct, mut memory) = (None, None, None);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed(
                file,
                line,
                "expected `hierarchy-id:controllers:path`",
            ));
        };
        if id.parse::<u32>().is_err() {
            return Err(malformed(file, line, "hierarchy id is not a number"));
        }
        if id == "0" && controllers.is_empty() {
            unified = Some(path.to_owned());
        }
        for controller in controllers.split(',') {
            match controller {
                "cpuacct" => cpuacct = Some(path.to_owned()),
                "memory" => memory = Some(path.to_owned()),
                _ => {}
            }
        }
    }
    let missing = |key| Error::MissingKey {
        path: file.to_owned(),
        key,
    };
    match layout {
        Layout::V2 => Ok(CgroupPath::V2 {
            path: unified.ok_or_else(|| missing("0::"))?,
        }),
        Layout::V1 { .. } => Ok(CgroupPath::V1 {
            cpuacct: cpuacct.ok_or_else(|| missing("cpuacct"))?,
            memory: memory.ok_or_else(|| missing("memory"))?,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
