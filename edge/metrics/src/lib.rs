//! The kubelet's resource metrics for edgecore, read from cgroups and the kernel directly.
//!
//! What the kubelet gets from cAdvisor, this crate reads from the files cAdvisor reads:
//! a container's or pod's cgroup for its CPU time and memory (cgroup v1 `cpuacct.usage`,
//! `memory.usage_in_bytes`, `memory.stat`; cgroup v2 `cpu.stat`, `memory.current`,
//! `memory.stat`), the node's from the root cgroup, `/proc/stat`, `/proc/meminfo` and
//! `/proc/vmstat`, network counters from `/proc/<pid>/net/dev` of a pod's sandbox process,
//! and filesystems from `statvfs(2)`. cgroup v1 (also the hybrid layout with
//! `/sys/fs/cgroup/unified`) and v2 are both read, found at run time.
//!
//! [`Collector`] makes one round: the node's running containers listed once from the
//! container runtime (each container's process and start time asked once and kept), each
//! read from its cgroup.
//!
//! Why not Docker's stats API: it is a streaming call per container (or a one-shot call
//! that still takes a CPU sample inside the engine), where this is one small file read per
//! figure, with no engine round-trip, and works whatever runs the containers.
//!
//! It renders what it reads as the kubelet serves it: `/metrics/resource` ([`resource`],
//! Prometheus text with timestamps, which metrics-server scrapes) and `/stats/summary`
//! ([`summary`], the `stats/v1alpha1` JSON), both from one [`Snapshot`] per collection
//! round. Serving them is the streaming server's (`verge-streaming`).
//!
//! # Layout
//! - [`collect`]: [`Collector`], one round over the node's containers.
//! - [`cgroup`]: [`CgroupFs`], a process's cgroup and a cgroup's [`CgroupStats`].
//! - [`node`]: the node's [`NodeStats`].
//! - [`net`]: [`InterfaceStats`] of a network namespace.
//! - [`fs`](mod@fs): [`FsStats`] of a filesystem ([`filesystem`]).
//! - [`rate`]: [`CpuRates`], CPU usage in nanocores from cumulative counters.
//! - [`snapshot`]: [`Snapshot`], one round's figures.
//! - [`resource`]: the `/metrics/resource` text.
//! - [`summary`]: [`Summary`], the `/stats/summary` JSON.
//! - [`volumes`]: pod volume usage ([`volumes::VolumeUsage`]), counted as `du` does, kept a
//!   minute.
//! - [`error`](mod@error): [`Error`].

pub mod cgroup;
pub mod collect;
pub mod error;
pub mod fs;
pub mod net;
pub mod node;
pub mod rate;
mod read;
pub mod resource;
pub mod snapshot;
pub mod summary;
pub mod volumes;

pub use cgroup::{CgroupFs, CgroupPath, CgroupStats, CgroupVersion, MemoryStats};
pub use collect::Collector;
pub use error::{Error, Result};
pub use fs::{FsStats, filesystem};
pub use net::InterfaceStats;
pub use node::NodeStats;
pub use rate::CpuRates;
pub use snapshot::{ContainerSample, NodeSample, PodSample, Sample, Snapshot, Timed, VolumeSample};
pub use summary::Summary;

#[cfg(test)]
mod fixture;
